"""The glue between a fabric configuration and a cocotb run on Icarus or Verilator.

:func:`run_cocotb` is the one entry point: it generates the Verilog for the
configuration, builds it once per (simulator, top, configuration, waves) in
a cache directory that concurrent runs share safely, and runs a cocotb test
module against it in a test directory of its own. The configuration and any
parameters reach the testbench as JSON files named by environment variables
(see :mod:`superfabric.tb.params`).

With ``SUPERFABRIC_COVERAGE=DIR`` in the environment, Verilator builds carry line and
toggle coverage (a build of their own, next to the plain one in the cache) and every
Verilator run writes its coverage data into ``DIR`` (``superfabric.tools.coverage``
merges and reports it); Icarus runs are unchanged. With ``SUPERFABRIC_VERILATOR_THREADS=N``
(``superfabric run --threads N``), Verilator builds are multithreaded (``--threads N``),
and with ``SUPERFABRIC_VERILATOR_CXX_OPT=L`` (``--cxx-opt L``) the top's own C++ is
compiled at ``-OL`` (default ``-O1``); each in a build of its own.

The simulators are found by the project, not by the user's shell: Verilator
is taken from the newest ``$SUPERFABRIC_PREFIX/verilator-*`` built by
``tools/install-simulators.sh`` (default prefix ``/opt/superfabric``), else
from ``PATH`` if that one is recent enough for cocotb 2.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from ..config import FabricConfig
from . import params as tb_params

__all__ = ["SIMULATORS", "SimulatorMissing", "RunResult", "find_simulator", "resolve_waves",
           "coverage_dir", "build", "build_harness", "write_port_access", "run_cocotb",
           "run_cocotb_following", "POLL_SECONDS",
           "COVERAGE_ENV", "THREADS_ENV", "MAX_THREADS", "verilator_threads", "CXX_OPT_ENV",
           "CXX_OPTS", "DEFAULT_CXX_OPT", "verilator_cxx_opt", "cxx_opt_args", "VERILATOR_FAST"]

SIMULATORS = ("icarus", "verilator")
VERILATOR_MIN = (5, 36)
ICARUS_MIN = (11, 0)
TIMESCALE = ("1ns", "1ps")
#: Default root of the simulator build cache.
DEFAULT_BUILD_ROOT = Path("build")
#: Seconds between the lines that show a long build is alive.
HEARTBEAT_SECONDS = 15.0
#: Environment variable naming the directory that collects Verilator coverage data.
COVERAGE_ENV = "SUPERFABRIC_COVERAGE"
#: Environment variable giving the threads of a Verilator model (default 1).
THREADS_ENV = "SUPERFABRIC_VERILATOR_THREADS"
#: The most threads a Verilator build may be asked for.
MAX_THREADS = 64
#: Environment variable giving the C++ optimisation of a Verilator top's own code.
CXX_OPT_ENV = "SUPERFABRIC_VERILATOR_CXX_OPT"
#: The levels it may name (gcc's ``-O<level>``); ``s`` is Verilator's own default.
CXX_OPTS = ("0", "1", "2", "3", "s")
#: The level when the variable is unset: on every stimulus top measured (the 8x8 switch,
#: the 4x4x4 and 8x8x6 tori) the top runs faster at -O1 than at -Os, and a fabric's
#: builds in less time (docs/spec/stimulus.md 12.7).
DEFAULT_CXX_OPT = "1"
#: Verilator's options of a coverage build.
COVERAGE_ARGS = ("--coverage-line", "--coverage-toggle")
#: Verilator's flags for speed. The stimulus top is built with them, and the plain
#: Verilator benchmark harness (tools/bench.py) with the very same, so the two
#: builds of one Verilog differ only in their harness.
VERILATOR_FAST = ("-O3", "--x-assign", "fast", "--x-initial", "fast")
#: Tops whose testbench touches only the top's ports: Verilator keeps everything
#: inside private (and optimisable) instead of cocotb's --public-flat-rw. For
#: the fabric it also spares the build a VPI symbol for every signal of every
#: router instance; for the RDMA top, of every engine (with them all public,
#: verilating the 64-accelerator torus ran out of the machine's 24 GB).
PORTS_ONLY = ("stimulus", "fabric", "rdma_fabric", "rdma_hosted", "collective_fabric")
#: Tops built with :data:`VERILATOR_FAST`, for long runs: the benchmarks hold each against
#: the same Verilog under a plain harness.
FAST = ("stimulus", "rdma_hosted")


#: Every cocotb run of this process: (simulator, test module, tests, failed).
#: The test suite prints a per-simulator tally from it, proof that both ran.
RUNS: list[tuple[str, str, int, int]] = []


class SimulatorMissing(RuntimeError):
    """The requested simulator is not installed, or too old."""


@dataclass
class RunResult:
    """Outcome of one cocotb run."""

    tests: int
    failed: int
    results_xml: Path
    test_dir: Path

    @property
    def passed(self) -> bool:
        return self.tests > 0 and self.failed == 0


def _version(text: str) -> tuple[int, ...]:
    m = re.search(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _verilator_candidates():
    prefix = Path(os.environ.get("SUPERFABRIC_PREFIX", "/opt/superfabric"))
    built = sorted(prefix.glob("verilator-*/bin/verilator"),
                   key=lambda p: _version(p.parent.parent.name), reverse=True)
    yield from built
    on_path = shutil.which("verilator")
    if on_path:
        yield Path(on_path)


def find_simulator(sim: str) -> Path:
    """Path of the simulator's main executable; :class:`SimulatorMissing` if none fits."""
    if sim == "verilator":
        for exe in _verilator_candidates():
            out = subprocess.run([str(exe), "--version"], capture_output=True, text=True).stdout
            if _version(out) >= VERILATOR_MIN:
                return exe
        raise SimulatorMissing(
            "Verilator >= 5.036 not found (cocotb 2 needs it): run tools/install-simulators.sh")
    if sim == "icarus":
        exe = shutil.which("iverilog")
        if exe:
            out = subprocess.run([exe, "-V"], capture_output=True, text=True).stdout
            if _version(out) >= ICARUS_MIN:
                return Path(exe)
        raise SimulatorMissing("Icarus Verilog >= 11 not found: run tools/install-simulators.sh")
    raise ValueError(f"sim = {sim!r}: must be one of {', '.join(SIMULATORS)}")


def _point_at(sim: str) -> None:
    """Make this process and its children use the simulator :func:`find_simulator` chose."""
    exe = find_simulator(sim)
    if sim == "verilator":
        bindir = str(exe.parent)
        path = os.environ.get("PATH", "").split(os.pathsep)
        if not path or path[0] != bindir:
            os.environ["PATH"] = os.pathsep.join([bindir] + [p for p in path if p != bindir])
        root = exe.parent.parent / "share" / "verilator"
        if root.is_dir():
            os.environ["VERILATOR_ROOT"] = str(root)
        else:
            os.environ.pop("VERILATOR_ROOT", None)
        if shutil.which("ccache"):
            # Verilator's generated makefiles compile through $OBJCACHE.
            os.environ.setdefault("OBJCACHE", "ccache")


def _hdl_digest() -> str:
    """Digest of the HDL sources and the Amaranth version: a build is reused only
    while the code that generates its Verilog is unchanged. That code is ``hdl`` with
    its sub-packages and the shared pieces it builds on (the package root's config,
    ``formats`` and ``network``), since a layout or a routing rule there changes the
    Verilog too."""
    import hashlib
    from importlib import metadata
    from .. import hdl, formats, network
    h = hashlib.sha256(metadata.version("amaranth").encode())
    root = Path(hdl.__file__).parent
    shared = Path(formats.__file__).parent.parent
    sources = [*root.rglob("*.py"), *Path(formats.__file__).parent.glob("*.py"),
               *Path(network.__file__).parent.glob("*.py"), *shared.glob("*.py")]
    for path in sorted(sources):
        h.update(str(path.relative_to(path.parents[1])).encode() + path.read_bytes())
    return h.hexdigest()[:10]


@contextmanager
def _locked(path: Path, waiting: str, log):
    """Hold the lock file ``path``; say ``waiting`` first when another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.write(waiting + "\n")
            log.flush()
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def activity(what: str, stream=None, *, short: str | None = None, after: float = 0.0,
             every: float = 15.0):
    """Say that ``what`` is going on, while it lasts, and how long it took.

    Nothing at all if it ends within ``after`` seconds (a compilation that
    numba's cache makes instant). Past that, on a terminal a line counting
    the seconds in place; otherwise ``what ...`` once, then ``short`` (a
    shorter name of it, default ``what``) with the seconds so far after
    ``every``, then twice as long each time, so a long wait leaves a few
    lines rather than dozens; and at the end ``what: done in N s``.
    """
    stream = sys.stderr if stream is None else stream
    short = what if short is None else short
    start = time.monotonic()
    done = threading.Event()
    shown = threading.Event()
    bar = []

    def watch():
        if done.wait(after):
            return
        shown.set()
        if isatty(stream):
            bar.append(terminal_bar(stream, total=None, desc=what, leave=False,
                                    bar_format="{desc}: {elapsed}"))
            while not done.wait(1.0):
                bar[0].refresh()
            return
        stream.write(f"{what} ...\n")
        stream.flush()
        wait = every
        while not done.wait(max(start + after + wait - time.monotonic(), 0.0)):
            stream.write(f"{short}: {time.monotonic() - start:.0f} s so far\n")
            stream.flush()
            wait *= 2

    thread = threading.Thread(target=watch, name=f"activity: {short}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if bar:
            bar[0].close()
        if shown.is_set():
            stream.write(f"{what}: done in {time.monotonic() - start:.1f} s\n")
            stream.flush()


def terminal_bar(stream, **options) -> tqdm:
    """A tqdm bar on the terminal ``stream``, as wide as the terminal; 80 by 24 on one that
    reports no size (a pseudo-terminal nobody sized), where tqdm would draw nothing."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):
        size = os.terminal_size((0, 0))
    sizing = {"dynamic_ncols": True} if size.columns and size.lines else {"ncols": 80,
                                                                            "nrows": 24}
    return tqdm(file=stream, **sizing, **options)


def isatty(stream) -> bool:
    """Whether ``stream`` is a terminal (False for a stream with no ``isatty``)."""
    probe = getattr(stream, "isatty", None)
    return bool(probe and probe())


def resolve_waves(waves: bool | None) -> bool:
    """``waves`` if given, else whether ``WAVES=1`` is set in the environment."""
    if waves is None:
        return os.environ.get("WAVES", "0") not in ("", "0")
    return bool(waves)


def coverage_dir() -> Path | None:
    """The directory named by ``SUPERFABRIC_COVERAGE``, or None when coverage is off."""
    value = os.environ.get(COVERAGE_ENV, "")
    return Path(value).resolve() if value else None


def verilator_threads() -> int:
    """The threads of a Verilator model, from ``SUPERFABRIC_VERILATOR_THREADS`` (default 1);
    a value that is not a whole number in 1..:data:`MAX_THREADS` is a ValueError."""
    value = os.environ.get(THREADS_ENV, "").strip() or "1"
    if not value.isdigit() or not 1 <= int(value) <= MAX_THREADS:
        raise ValueError(f"{THREADS_ENV} = {value!r}: must be a whole number in 1..{MAX_THREADS}")
    return int(value)


def verilator_cxx_opt() -> str:
    """The C++ optimisation level of a Verilator top's own code, from
    ``SUPERFABRIC_VERILATOR_CXX_OPT`` (default :data:`DEFAULT_CXX_OPT`); a value not in
    :data:`CXX_OPTS` is a ValueError."""
    value = os.environ.get(CXX_OPT_ENV, "").strip() or DEFAULT_CXX_OPT
    if value not in CXX_OPTS:
        raise ValueError(f"{CXX_OPT_ENV} = {value!r}: must be one of {', '.join(CXX_OPTS)}")
    return value


def cxx_opt_args(prefix: str, cxx_opt: str) -> list[str]:
    """Verilator's arguments that compile the top's own fast C++ (its ``VM_PREFIX`` is
    ``prefix``) at ``-O<cxx_opt>``; none for ``s``, Verilator's own level.

    The top's own code only: a hierarchical block's makefile has its own prefix and
    keeps -Os. A large fabric's top is tens of MB of a few huge functions, which g++ -Os
    takes most of the build on (docs/spec/stimulus.md 12.7). The flag comes after
    Verilator's OPT_FAST, so it is the one in force. Its fast code only: the slow code
    runs once and Verilator compiles it unoptimised; at -O1, g++ spent over five minutes
    on the VPI table of a switch that cocotb sees whole, and the project's CI ran out of
    time on it. Slow objects are ``*__Slow.o``, or ``*_vm_classes_Slow_<n>.o`` where a
    ``--build -j`` build groups its files, and their precompiled header
    ``*__pch.h.slow.gch``: the header must have the level of the objects that include it,
    or g++ refuses it."""
    if cxx_opt == "s":
        return []
    return ["-CFLAGS", f"$(if $(filter {prefix},$(VM_PREFIX)),"
                       f"$(if $(findstring _Slow,$@)$(findstring .slow.,$@),,-O{cxx_opt}))"]


def _cxx_opt_suffix(cxx_opt: str | None) -> str:
    """The build directory's mark of its C++ level (``None``: no C++), so that no build
    of one level is ever taken for another's, the default's included."""
    return "" if cxx_opt is None else f"-O{cxx_opt}"


def build(cfg: FabricConfig, *, sim: str, top: str = "switch", waves: bool = False,
          build_root: str | Path = DEFAULT_BUILD_ROOT, log=None,
          heartbeat: float = HEARTBEAT_SECONDS, coverage: bool | None = None,
          component=None) -> Path:
    """Generate and compile ``top`` for ``cfg`` on ``sim``; reuse an earlier build.

    Returns the build directory. Safe to call from concurrent processes. A
    build that does not come from the cache says what it builds on ``log``
    (default ``sys.stderr``), that it is still at it after ``heartbeat``
    seconds and then twice as long each time (in place on a terminal), and
    how long it took; so does a wait for another process
    building the same. ``coverage`` (default: whether :func:`coverage_dir`
    is set) builds Verilator with line and toggle coverage, in a directory
    of its own; Icarus has none. ``component`` is a ``(key, make)`` pair for a
    top that is not one of the generated tops: ``make()`` gives the component,
    ``key`` tells its builds apart (it names what the component is built from).
    """
    from cocotb_tools.runner import get_runner
    from ..hdl.verilog import verilator_build_args, write_verilog

    log = sys.stderr if log is None else log
    _point_at(sim)
    coverage = sim == "verilator" and (coverage_dir() is not None if coverage is None else coverage)
    threads = verilator_threads() if sim == "verilator" else 1
    cxx_opt = verilator_cxx_opt() if sim == "verilator" else None
    key = f"-{component[0]}" if component is not None else ""
    name = (f"{top}-{cfg.build_key}{key}-{_hdl_digest()}" + ("-waves" if waves else "")
            + ("-coverage" if coverage else "") + (f"-threads{threads}" if threads > 1 else "")
            + _cxx_opt_suffix(cxx_opt))
    build_dir = Path(build_root).resolve() / "sim" / sim / name
    stamp = build_dir / "built.json"
    waiting = f"superfabric: waiting for another process building {top} on {sim} in {build_dir}"
    with _locked(build_dir.with_suffix(".lock"), waiting, log):
        if stamp.exists():
            return build_dir
        blog = build_dir / "build.log"
        with activity(f"superfabric: building {top} on {sim} in {build_dir} (log {blog})",
                      log, short=f"superfabric: building {top} on {sim}", every=heartbeat):
            rtl = write_verilog(cfg, build_dir / "rtl", top=top,
                               component=component[1]() if component is not None else None)
            runner = get_runner(sim)
            build_args = []
            sources = [rtl]
            if sim == "verilator":
                # The generator's idioms are waived inside the file; the harness
                # build runs without -Wall. FST keeps long waveforms small.
                build_args = (["-Wno-fatal"] + (["--trace-fst"] if waves else [])
                              + (list(COVERAGE_ARGS) if coverage else [])
                              + verilator_build_args(cfg, top))
                if top in FAST:
                    build_args += list(VERILATOR_FAST)
                if threads > 1:
                    # The model's evaluation split over threads: worth it on a large top
                    # with cores to spare (docs/spec/stimulus.md 12.7).
                    build_args += ["--threads", str(threads)]
                build_args += cxx_opt_args("Vtop", cxx_opt)
                if top in PORTS_ONLY:
                    build_args += ["--no-public-flat-rw"]
                    sources.insert(0, write_port_access(rtl, top))
            runner.build(sources=sources, hdl_toplevel=top, build_dir=build_dir / "obj",
                         timescale=TIMESCALE, waves=waves, build_args=build_args, log_file=blog)
        stamp.write_text(json.dumps({"sim": sim, "top": top, "config": cfg.to_dict(),
                                     "waves": waves, "coverage": coverage, "threads": threads,
                                     "cxx_opt": cxx_opt},
                                    indent=2))
    return build_dir


def build_harness(cfg: FabricConfig, *, top: str, harness: str | Path,
                  build_root: str | Path = DEFAULT_BUILD_ROOT, log=None) -> Path:
    """Build ``top`` for ``cfg`` as a plain Verilator executable around the C++ ``harness``
    (no cocotb, no VPI), with :data:`VERILATOR_FAST` and the C++ optimisation level of
    :func:`verilator_cxx_opt`; reuse an earlier build.

    Returns the executable. For the benchmark that measures what cocotb costs.
    Like :func:`build`, says on ``log`` (default ``sys.stderr``) what it builds
    and how long it took, and that it waits for another process building the same.
    """
    import hashlib
    from ..hdl.verilog import verilator_build_args, write_verilog

    log = sys.stderr if log is None else log
    exe = find_simulator("verilator")
    _point_at("verilator")
    harness = Path(harness).resolve()
    digest = hashlib.sha256(harness.read_bytes()).hexdigest()[:8]
    cxx_opt = verilator_cxx_opt()
    name = f"{top}-{cfg.build_key}-{_hdl_digest()}-{digest}" + _cxx_opt_suffix(cxx_opt)
    build_dir = Path(build_root).resolve() / "sim" / "plain" / name
    binary = build_dir / "obj" / top
    waiting = f"superfabric: waiting for another process building {top} (plain) in {build_dir}"
    with _locked(build_dir.with_suffix(".lock"), waiting, log):
        if (build_dir / "built.json").exists():
            return binary
        blog = build_dir / "build.log"
        with activity(f"superfabric: building {top} (plain Verilator) in {build_dir} "
                      f"(log {blog})", log, short=f"superfabric: building {top} (plain)"):
            rtl = write_verilog(cfg, build_dir / "rtl", top=top)
            with open(blog, "w") as f:
                done = subprocess.run(
                    [str(exe), "--cc", "--exe", "--build", "-j", "2", *VERILATOR_FAST,
                     "-Wno-fatal", *verilator_build_args(cfg, top),
                     *cxx_opt_args(f"V{top}", cxx_opt),
                     "--top-module", top, "--prefix", f"V{top}", "-Mdir", str(build_dir / "obj"),
                     "-o", top, str(rtl), str(harness)], stdout=f, stderr=subprocess.STDOUT)
            if done.returncode:
                raise RuntimeError(f"the plain Verilator build of {top} failed; see {blog}")
        (build_dir / "built.json").write_text(json.dumps({"top": top, "config": cfg.to_dict(),
                                                          "harness": str(harness),
                                                          "cxx_opt": cxx_opt}, indent=2))
    return binary


def write_port_access(verilog: Path, top: str) -> Path:
    """Write ``<top>.vlt`` beside ``verilog``: a Verilator control file that makes the
    ports of ``top``, and nothing else, visible to cocotb through VPI.

    Inputs are readable and writable, outputs only readable: an output that
    VPI could write would keep Verilator from optimising the logic that
    drives it (on the stimulus top that costs a third of the speed).
    """
    body = re.search(rf"^module {re.escape(top)}\(.*?^endmodule", verilog.read_text(), re.M | re.S)
    if body is None:
        raise RuntimeError(f"{verilog}: no module {top}")
    ports = re.findall(r"^\s*(input|output)\s+(?:\[[^\]]*\]\s*)?(\S+);", body[0], re.M)
    path = verilog.with_suffix(".vlt")
    path.write_text("`verilator_config\n" + "".join(
        f'public_flat_{"rw" if kind == "input" else "rd"} -module "{top}" -var "{name}"\n'
        for kind, name in ports))
    return path


def run_cocotb(cfg: FabricConfig, test_module: str, *, sim: str, test_dir: str | Path,
               top: str = "switch", waves: bool | None = None, seed: int = 0,
               params: dict | None = None, testcase: str | None = None,
               build_root: str | Path = DEFAULT_BUILD_ROOT, component=None) -> RunResult:
    """Build (or reuse) ``top`` for ``cfg`` and run ``test_module`` on ``sim``.

    ``params`` (JSON-serialisable) and the configuration are handed to the
    testbench through :mod:`superfabric.tb.params`. Waves are written as FST
    into ``test_dir`` when ``waves`` is true or ``WAVES=1`` is set. With
    :func:`coverage_dir` set, a Verilator run writes its coverage data there,
    named after its build. ``component`` as for :func:`build`.
    """
    from cocotb_tools.runner import get_runner
    from cocotb_tools.check_results import get_results

    waves = resolve_waves(waves)
    build_dir = build(cfg, sim=sim, top=top, waves=waves, build_root=build_root,
                      component=component)
    test_dir = Path(test_dir).resolve()
    test_dir.mkdir(parents=True, exist_ok=True)
    env = tb_params.write(test_dir, cfg, params or {})
    runner = get_runner(sim)
    # cocotb's Icarus harness would dump into the shared build directory;
    # every run keeps its own waves next to its results instead.
    plusargs = [f"+dumpfile_path={test_dir / (top + '.fst')}"] if (sim == "icarus" and waves) else []
    covered = coverage_dir()
    if covered is not None and sim == "verilator":
        covered.mkdir(parents=True, exist_ok=True)
        data = covered / f"{build_dir.name}.{uuid.uuid4().hex[:12]}.dat"
        plusargs.append(f"+verilator+coverage+file+{data}")
        # What the build is, for the report: its top and configuration.
        (covered / f"{build_dir.name}.json").write_text(json.dumps(
            {"top": top, "build_dir": str(build_dir), "config": cfg.to_dict()}))
    xml = test_dir / "results.xml"
    try:
        runner.test(test_module=test_module, hdl_toplevel=top, hdl_toplevel_lang="verilog",
                    build_dir=build_dir / "obj", test_dir=test_dir, seed=seed, extra_env=env,
                    waves=waves, testcase=testcase, plusargs=plusargs, timescale=TIMESCALE,
                    results_xml=str(xml), log_file=test_dir / "sim.log")
    except SystemExit:
        # cocotb's runner exits when a test fails; the results file says how.
        if not xml.exists():
            raise RuntimeError(f"{sim} run produced no results; see {test_dir / 'sim.log'}") from None
    tests, failed = get_results(xml)
    RUNS.append((sim, test_module, tests, failed))
    return RunResult(tests=tests, failed=failed, results_xml=Path(xml), test_dir=test_dir)


#: How often :func:`run_cocotb_following` looks at the progress file.
POLL_SECONDS = 0.5


def run_cocotb_following(progress_path: Path, progress, cfg: FabricConfig, test_module: str,
                         **kwargs) -> RunResult:
    """:func:`run_cocotb` (``kwargs`` as there), while following ``progress_path``, a file of
    one JSON line per chunk that a testbench with no Python per cycle writes
    (``tb/chunks.py``): ``progress(line)``, if given, gets each complete line as a dict, so
    a long run can show a progress bar in the calling process."""
    outcome = {}

    def simulate():
        try:
            outcome["result"] = run_cocotb(cfg, test_module, **kwargs)
        except BaseException as e:  # re-raised in the caller's thread
            outcome["error"] = e

    worker = threading.Thread(target=simulate, name=f"{test_module}-rtl")
    worker.start()
    lines_seen = 0
    while worker.is_alive():
        worker.join(POLL_SECONDS)
        if progress is not None and progress_path.exists():
            lines = progress_path.read_text().splitlines()
            for line in lines[lines_seen:]:
                if not line.endswith("}"):
                    break       # still being written
                progress(json.loads(line))
                lines_seen += 1
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]
