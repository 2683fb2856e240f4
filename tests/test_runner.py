"""The runner's build cache: a long build says what it does and how long it has taken."""

import io
import json
import threading
from pathlib import Path

import cocotb_tools.runner

from superfabric.config import FabricConfig
from superfabric.tb import runner

from conftest import require_simulator


class _Log(io.StringIO):
    """A log that lets a fake build wait, without timing, until a heartbeat was written."""

    def __init__(self):
        super().__init__()
        self.beat = threading.Event()

    def write(self, text):
        if "so far" in text:
            self.beat.set()
        return super().write(text)


class _SlowBuild:
    """Stands in for cocotb's runner: its build lasts until the first heartbeat."""

    def __init__(self, log):
        self.log = log
        self.builds = 0

    def build(self, **kwargs):
        self.builds += 1
        assert self.log.beat.wait(60), "no heartbeat while building"


def test_a_long_build_says_what_it_does_and_the_time(tmp_path, monkeypatch):
    require_simulator("icarus")
    log = _Log()
    fake = _SlowBuild(log)
    monkeypatch.setattr(cocotb_tools.runner, "get_runner", lambda sim: fake)
    cfg = FabricConfig.load(preset="tiny")
    path = runner.build(cfg, sim="icarus", top="skid_buffer", build_root=tmp_path, log=log,
                        heartbeat=0.01)
    lines = log.getvalue().splitlines()
    assert lines[0].startswith("superfabric: building skid_buffer on icarus in ") and str(path) in lines[0]
    assert any(line.endswith(" s so far") for line in lines[1:-1]), lines
    assert lines[-1].startswith(lines[0].removesuffix(" ...") + ": done in "), lines
    assert lines[-1].endswith(" s")
    # The second call finds the build and says nothing.
    again = io.StringIO()
    assert runner.build(cfg, sim="icarus", top="skid_buffer", build_root=tmp_path, log=again) == path
    assert again.getvalue() == "" and fake.builds == 1


def test_plain_harness_builds_and_its_run_equals_the_model(build_root, tmp_path):
    """``make bench``'s plain Verilator harness of the stimulus top (tools/bench.py): it
    builds, says so, and the statistics its run reads back equal the model's."""
    require_simulator("verilator")
    from superfabric.sim.stimulus.top import StimulusModel, compare_stats
    from superfabric.sim.stimulus.traffic_gen import stimulus_settings
    from superfabric.tools.bench import HARNESS, run_plain

    cfg = FabricConfig.load(preset="tiny")
    log = io.StringIO()
    exe = runner.build_harness(cfg, top="stimulus", harness=HARNESS, build_root=build_root,
                               log=log)
    assert exe.is_file()
    settings = stimulus_settings(cfg, "uniform", load=0.5, cycles=2000, seed=3)
    stats, seconds, readout_seconds = run_plain(cfg, settings, exe, tmp_path)
    model = StimulusModel(cfg).run(settings)
    assert stats.cycles == model.cycles > 2000 and seconds > 0 and readout_seconds > 0
    match = compare_stats(stats, model)
    assert match["exact"], match["problems"][:3]
    # A second call finds the build and says nothing.
    again = io.StringIO()
    assert runner.build_harness(cfg, top="stimulus", harness=HARNESS, build_root=build_root,
                                log=again) == exe
    assert again.getvalue() == ""


def _opt_in_force(build_log: Path) -> dict[str, list[str]]:
    """The -O in force (the last one) for each C++ file a build log compiles."""
    last = {}
    for line in build_log.read_text().splitlines():
        words = line.split()
        if "-c" in words and words[-1].endswith(".cpp"):
            last[words[-1].rsplit("/", 1)[-1]] = [w for w in words if w.startswith("-O")][-1:]
    return last


def test_a_verilator_top_compiles_its_fast_code_at_the_level_and_its_slow_code_unoptimised(
        build_root, monkeypatch):
    """The default level (-O1) reaches the top's fast code only: its slow code, run once
    (the VPI table that cocotb reads among it), stays unoptimised as Verilator compiles it,
    since g++ -O1 took more than five minutes on one such table."""
    require_simulator("verilator")
    monkeypatch.delenv(runner.CXX_OPT_ENV, raising=False)
    cfg = FabricConfig.load(preset="tiny")
    built = runner.build(cfg, sim="verilator", top="switch", build_root=build_root,
                         log=io.StringIO())
    last = _opt_in_force(built / "build.log")
    fast = {tuple(opt) for name, opt in last.items()
            if name.startswith("Vtop") and not name.endswith("__Slow.cpp")}
    slow = {tuple(opt) for name, opt in last.items() if name.endswith("__Slow.cpp")}
    assert fast == {(f"-O{runner.DEFAULT_CXX_OPT}",)}, last
    assert slow == {()}, last


def test_a_grouped_build_compiles_its_slow_code_unoptimised_with_its_header(build_root,
                                                                            monkeypatch):
    """A build with ``-j`` groups a large top's files (``*_vm_classes_Slow_<n>.cpp``) and
    includes a precompiled header of each kind in them: the slow groups and their header
    stay unoptimised together, else g++ refuses the header and the build fails, as the
    plain harness of the 8-port switch's stimulus top did at -O1."""
    require_simulator("verilator")
    from superfabric.tools.bench import HARNESS
    monkeypatch.delenv(runner.CXX_OPT_ENV, raising=False)
    cfg = FabricConfig.load(preset="default")
    exe = runner.build_harness(cfg, top="stimulus", harness=HARNESS, build_root=build_root,
                               log=io.StringIO())
    last = _opt_in_force(exe.parent.parent / "build.log")
    slow = {name: opt for name, opt in last.items() if "_Slow" in name}
    fast = {name: opt for name, opt in last.items()
            if name.startswith("Vstimulus") and "_Slow" not in name}
    assert any("_vm_classes_Slow_" in name for name in slow), last
    assert set(map(tuple, slow.values())) == {()}, last
    assert fast and set(map(tuple, fast.values())) == {(f"-O{runner.DEFAULT_CXX_OPT}",)}, last


def test_plain_harness_builds_its_top_at_the_optimisation_asked(build_root, tmp_path,
                                                                 monkeypatch):
    """The plain harness follows ``SUPERFABRIC_VERILATOR_CXX_OPT`` as the cocotb build does
    (so ``make bench``'s two builds of one top differ only in their harness): a build of
    its own, the top's fast C++ compiled at that level, the same statistics as the model."""
    require_simulator("verilator")
    from superfabric.sim.stimulus.top import StimulusModel, compare_stats
    from superfabric.sim.stimulus.traffic_gen import stimulus_settings
    from superfabric.tools.bench import HARNESS, run_plain

    monkeypatch.setenv(runner.CXX_OPT_ENV, "0")
    cfg = FabricConfig.load(preset="tiny")
    exe = runner.build_harness(cfg, top="stimulus", harness=HARNESS, build_root=build_root,
                               log=io.StringIO())
    built = exe.parent.parent
    assert built.name.endswith("-O0")
    assert json.loads((built / "built.json").read_text())["cxx_opt"] == "0"
    last = _opt_in_force(built / "build.log")
    top = {tuple(opt) for name, opt in last.items()
           if name.startswith("Vstimulus") and "_Slow" not in name}
    assert top == {("-O0",)}, last
    # Its slow code (a constant pool, say) stays unoptimised at every level, as above.
    assert {tuple(opt) for name, opt in last.items() if "_Slow" in name} <= {()}, last
    settings = stimulus_settings(cfg, "uniform", load=0.5, cycles=1000, seed=4)
    stats, _, _ = run_plain(cfg, settings, exe, tmp_path)
    match = compare_stats(stats, StimulusModel(cfg).run(settings))
    assert match["exact"], match["problems"][:3]
