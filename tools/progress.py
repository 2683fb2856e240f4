"""Signs of life: progress of sweeps and long runs, and of long waits with no count.

On a terminal both are one line updated in place (tqdm); in a log or a pipe
they are a few short plain lines, so that a log stays readable. The waits
(:func:`activity`) live with the simulator builds, the longest of them, since
the testbench does not import the command line.
"""

from __future__ import annotations

import sys
import time

from ..tb.runner import activity, isatty as _isatty, terminal_bar

__all__ = ["Progress", "activity"]


class Progress:
    """Progress toward ``total`` (points of a sweep, cycles of a run), shown on ``stream``.

    On a terminal a tqdm bar with the elapsed time, the rate and the ETA;
    otherwise every :meth:`show` writes its ``line`` with the ETA, at most
    one line per ``every`` seconds except for the last.
    """

    def __init__(self, total: int, stream=None, *, every: float = 0.0, unit: str = "it"):
        self.total = max(int(total), 1)
        self.stream = sys.stderr if stream is None else stream
        self.every = every
        self.start = time.monotonic()
        self._last = float("-inf")
        self._ended = False
        self.unit = unit
        # Drawn at the first show: a sweep with nothing to run leaves no empty bar behind.
        self._bar = None

    def show(self, done: int, status: str, line: str) -> None:
        """Show ``done`` of the total: the bar with ``status`` on a terminal, else ``line``."""
        done = min(done, self.total)
        if self._bar is None and not self._ended and _isatty(self.stream):
            self._bar = terminal_bar(self.stream, total=self.total, unit=self.unit, leave=True)
            self._bar.start_t -= time.monotonic() - self.start     # its clock from our start
        if self._bar is not None:
            if not self._ended:
                self._bar.set_postfix_str(status, refresh=False)
                self._bar.update(done - self._bar.n)
                if done == self.total:
                    self.close()
            return
        now = time.monotonic()
        if now - self._last < self.every and done < self.total:
            return
        self._last = now
        elapsed = now - self.start
        eta = elapsed / done * (self.total - done) if done else float("nan")
        self.stream.write(f"{line} (ETA {eta:.0f}s)\n")
        self.stream.flush()

    def close(self) -> None:
        """End the bar (a run that stopped before its total)."""
        if self._bar is not None and not self._ended:
            self._ended = True
            self._bar.close()
