"""Signs of life in a log: a few short plain lines, never a flood, nothing for a quick step."""

import io
import threading

from superfabric.tools.progress import Progress, activity


class _Log(io.StringIO):
    """A log that lets a step wait, without timing, until it has said ``count`` things."""

    def __init__(self, count):
        super().__init__()
        self.count = count
        self.enough = threading.Event()

    def write(self, text):
        n = super().write(text)
        if self.getvalue().count("so far") >= self.count:
            self.enough.set()
        return n


def test_a_quick_step_says_nothing():
    log = io.StringIO()
    with activity("superfabric: compiling the model's kernels", log, after=3600.0):
        pass
    assert log.getvalue() == ""


def test_a_long_step_says_what_then_short_lines_then_the_time():
    what = "superfabric: building switch on verilator in /a/long/build/path (log /a/long/log)"
    log = _Log(3)
    with activity(what, log, short="superfabric: building switch on verilator", every=0.001):
        assert log.enough.wait(60)
    lines = log.getvalue().splitlines()
    assert lines[0] == f"{what} ..."
    beats = lines[1:-1]
    assert len(beats) >= 3
    assert all(line.startswith("superfabric: building switch on verilator: ")
               and line.endswith(" s so far") and "/a/long" not in line for line in beats)
    assert lines[-1].startswith(f"{what}: done in ") and lines[-1].endswith(" s")


def test_progress_in_a_log_is_rate_limited_but_ends():
    log = io.StringIO()
    bar = Progress(5, log, every=3600.0)
    for done in range(1, 6):
        bar.show(done, "ok", f"sweep: {done}/5")
    lines = log.getvalue().splitlines()
    assert [line.split(" (ETA")[0] for line in lines] == ["sweep: 1/5", "sweep: 5/5"]
