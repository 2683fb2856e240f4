"""A progress bar with ETA on a terminal, plain lines otherwise (sweeps and long runs)."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


class Progress:
    """Progress toward ``total`` (points of a sweep, cycles of a run), shown on ``stream``.

    On a terminal one line is redrawn as a bar with the elapsed time and
    the ETA; otherwise (a log, a pipe) every :meth:`show` writes a line.
    """

    def __init__(self, total: int, stream=None):
        self.total = max(int(total), 1)
        self.stream = sys.stderr if stream is None else stream
        self.tty = self.stream.isatty()
        self.start = time.monotonic()
        self._ended = False

    def show(self, done: int, status: str, line: str) -> None:
        """Show ``done`` of the total: a bar ending in ``status`` on a terminal, else ``line``."""
        done = min(done, self.total)
        elapsed = time.monotonic() - self.start
        eta = elapsed / done * (self.total - done) if done else float("nan")
        if self.tty:
            if self._ended:
                return
            width = 30
            filled = int(width * done / self.total)
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} "
                              f"{elapsed:5.0f}s elapsed, ETA {eta:5.0f}s  {status:<8} ")
            if done == self.total:
                self.stream.write("\n")
                self._ended = True
        else:
            self.stream.write(f"{line} (ETA {eta:.0f}s)\n")
        self.stream.flush()
