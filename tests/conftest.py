"""Shared pytest fixtures: the RTL simulators and a build cache shared by all tests; the
test layers (markers ``rtl``, ``slow``, ``synth``, ``bench``, registered in pyproject.toml)."""

import gc
import os
import shutil
import subprocess
import types
import warnings
from pathlib import Path

import pytest
from amaranth.hdl import UnusedElaboratable

from superfabric.tb.runner import RUNS, SIMULATORS, SimulatorMissing, find_simulator

#: Simulator builds are cached here across tests and sessions (one per
#: configuration and HDL version), so each configuration compiles once.
BUILD_ROOT = Path(__file__).resolve().parent.parent / "build" / "test"

#: A small RDMA fabric for tests (with the `tiny` preset: four endpoints):
#: little host memory keeps loading and reading it back short on Icarus.
RDMA_SMALL = ["rdma.enabled=true", "rdma.qps=8", "rdma.memory_words=2048", "rdma.page_words=64",
              "rdma.pages=64"]
#: With RDMA_SMALL: congestion control end to end, PFC as the backstop of DCQCN.
CONGESTED = ["pfc.enabled=true", "ecn.enabled=true", "dcqcn.enabled=true"]


def require_simulator(sim: str) -> None:
    """Skip when ``sim`` is missing, but fail under CI, which must prove both ran."""
    try:
        find_simulator(sim)
    except SimulatorMissing as e:
        if os.environ.get("CI"):
            pytest.fail(f"{sim} is required in CI: {e}")
        pytest.skip(str(e))


def require_tool(name: str, installer: str) -> str:
    """The executable ``name`` (a browser, a decoder); skip when it is not on PATH, but fail
    under CI, which must run every test. ``installer`` is the script that installs it."""
    exe = shutil.which(name)
    if exe is None:
        message = f"{name} not on PATH (install it with {installer})"
        if os.environ.get("CI"):
            pytest.fail(f"{name} is required in CI: {message}")
        pytest.skip(message)
    return exe


def assert_lint_clean(tmp_path: Path, *verilog: Path, top: str | None = None) -> None:
    """No warning from Verilator's -Wall lint of the files, and Icarus compiles them."""
    top_args = ["--top-module", top] if top else []
    lint = subprocess.run([str(find_simulator("verilator")), "--lint-only", "-Wall", *top_args,
                           *map(str, verilog)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stderr[:3000]
    assert "%Warning" not in lint.stderr
    top_args = ["-s", top] if top else []
    icarus = subprocess.run(["iverilog", "-g2012", *top_args, "-o", str(tmp_path / "a.vvp"),
                             *map(str, verilog)], capture_output=True, text=True)
    assert icarus.returncode == 0, icarus.stderr[:3000]


def refusal(build, error: type[Exception]) -> str:
    """The message of the ``error`` that ``build()`` must raise.

    An Amaranth elaboratable exists from ``__new__`` on, so a constructor that refuses its
    arguments leaves an object behind, and Amaranth warns, when it is collected, that it was
    never elaborated: beside the point for an object that was never finished. It is collected
    here, under that warning's silence, rather than later in whichever test is running."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        try:
            build()
        except error as e:
            message = str(e)
        else:
            pytest.fail(f"no {error.__name__} raised")
        gc.collect()
    return message


@pytest.fixture(params=SIMULATORS)
def sim(request):
    """Each RTL simulator in turn."""
    require_simulator(request.param)
    return request.param


@pytest.fixture
def build_root():
    """Root of the shared simulator build cache."""
    return BUILD_ROOT


#: What an RTL test calls, itself or through a helper of its module: it needs Icarus or
#: Verilator (a cocotb run, a build, a lint).
RTL_CALLS = frozenset({"require_simulator", "find_simulator", "assert_lint_clean", "run_cocotb",
                       "run_rdma_rtl", "run_rdma_hosted", "build_harness", "run_board_rtl",
                       "run_collective_rtl"})


def _calls_rtl(function, module, seen) -> bool:
    """Whether ``function`` names one of :data:`RTL_CALLS`, or calls a function of ``module``
    that does (the names its code uses, followed through the module's own helpers)."""
    code = getattr(function, "__code__", None)
    if code is None or code in seen:
        return False
    seen.add(code)
    for name in code.co_names:
        if name in RTL_CALLS:
            return True
        helper = getattr(module, name, None)
        if isinstance(helper, types.FunctionType) and helper.__module__ == module.__name__ \
                and _calls_rtl(helper, module, seen):
            return True
    return False


def pytest_collection_modifyitems(items):
    """Mark ``rtl`` every test that takes the :func:`sim` fixture or calls for a simulator
    itself (:data:`RTL_CALLS`); the other layers are marked in the test files."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        # A direct parametrisation over ``sim`` (the model among them) is not this fixture.
        by_fixture = info is not None and any(
            (d.func.__module__, d.func.__name__) == (__name__, "sim")
            for d in info.name2fixturedefs.get("sim", ()))
        if by_fixture or _calls_rtl(getattr(item, "function", None), item.module, set()):
            item.add_marker(pytest.mark.rtl)


#: Key of the cocotb runs a test made, in its report's ``user_properties``: reports are how a
#: pytest-xdist worker tells the controlling process what happened, so the tally below counts
#: the runs of every worker, not only those made in the process that prints it.
COCOTB_RUN = "cocotb run"

#: The cocotb runs of the session, as reported (simulator, testbench module, tests, failed).
REPORTED_RUNS: list[tuple[str, str, int, int]] = []


#: How many of this process's cocotb runs have been attached to a report.
_attached = 0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach to each report (set-up, call, teardown) the cocotb runs made since the last:
    a module's fixture may run the RTL once in the set-up of its first test."""
    global _attached
    outcome = yield
    report = outcome.get_result()
    report.user_properties = [*report.user_properties,
                              *((COCOTB_RUN, tuple(run)) for run in RUNS[_attached:])]
    _attached = len(RUNS)


def pytest_runtest_logreport(report):
    """Collect the cocotb runs from each report (this process's or a worker's)."""
    REPORTED_RUNS.extend(tuple(run) for key, run in report.user_properties if key == COCOTB_RUN)


def pytest_terminal_summary(terminalreporter):
    """Tally the cocotb runs per simulator, so a log shows that both really ran."""
    if not REPORTED_RUNS:
        return
    terminalreporter.section("cocotb runs per simulator")
    for sim in SIMULATORS:
        runs = [r for r in REPORTED_RUNS if r[0] == sim]
        tests = sum(r[2] for r in runs)
        failed = sum(r[3] for r in runs)
        modules = sorted({r[1] for r in runs})
        terminalreporter.write_line(
            f"{sim}: {len(runs)} runs, cocotb TESTS={tests} PASS={tests - failed} FAIL={failed} "
            f"({', '.join(modules) or 'none'})")
