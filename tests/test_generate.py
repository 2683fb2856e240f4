"""Verilog generation through the command line: files, lint, Icarus, and user errors."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from amaranth.back import verilog as amaranth_verilog
from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from superfabric.config import FabricConfig
from superfabric.hdl import verilog
from superfabric.tb.runner import find_simulator
from superfabric.network.topology import Topology
from superfabric.tools.fusesoc_core import IVERILOG_OPTIONS, VERILATOR_OPTIONS, core_name

from conftest import RDMA_SMALL, assert_lint_clean, require_simulator

ROOT = Path(__file__).resolve().parent.parent

GENERATED = [
    ("default", []),
    ("tiny", ["switch.scheduler=fifo", "switch.ingress_full=drop"]),
    ("tiny", ["switch.ports=5", "switch.priorities=1", "switch.islip_iterations=1",
              "switch.buffer_flits=100", "switch.data_width=8", "switch.tag_width=12",
              "switch.registered_grant=true"]),
    ("default", ["ecn.enabled=true"]),
]


def superfabric(*args):
    """Run the console entry point as a user would, capturing its output."""
    return subprocess.run([sys.executable, "-m", "superfabric.tools.cli", *args],
                          capture_output=True, text=True)


def assert_core(out, top):
    """``out/<top>.core`` is a CAPI2 core of exactly the Verilog ``generate`` wrote there
    (the files ``filelist.f`` lists, and no other), with ``top`` the top of every target
    and the project's own lint and Icarus options."""
    text = (out / f"{top}.core").read_text()
    assert text.startswith("CAPI=2:\n")
    core = yaml.safe_load(text)
    assert core["name"] == core_name(top)
    written = sorted(path.name for path in out.glob("*.v"))
    assert [file for fileset in core["filesets"].values() for file in fileset["files"]] \
        == (out / "filelist.f").read_text().split() == written
    assert {fileset["file_type"] for fileset in core["filesets"].values()} == {"verilogSource"}
    targets = core["targets"]
    assert sorted(targets) == ["default", "lint", "sim"]
    assert all(target["toplevel"] == top for target in targets.values())
    assert targets["lint"]["flow_options"] == {"tool": "verilator",
                                               "verilator_options": list(VERILATOR_OPTIONS)}
    assert targets["sim"]["flow_options"] == {"tool": "icarus",
                                              "iverilog_options": list(IVERILOG_OPTIONS)}


@pytest.mark.parametrize("preset,overrides", GENERATED,
                         ids=["default", "tiny-fifo-drop", "5port-8bit", "default-ecn"])
def test_generate_lint_clean(preset, overrides, tmp_path):
    require_simulator("verilator")
    require_simulator("icarus")
    args = ["generate", "--preset", preset, "-o", str(tmp_path)]
    for o in overrides:
        args += ["--set", o]
    res = superfabric(*args)
    assert res.returncode == 0, res.stderr
    verilog = tmp_path / "switch.v"
    assert verilog.exists()
    assert (tmp_path / "filelist.f").read_text().split() == ["switch.v"]
    cfg = FabricConfig.from_json((tmp_path / "config.json").read_text())
    assert cfg == FabricConfig.load(preset=preset, overrides=overrides)
    text = verilog.read_text()
    assert "module switch(" in text
    for k in range(cfg.switch.ports):
        assert f"i__{k}__payload" in text and f"o__{k}__valid" in text
    assert_core(tmp_path, "switch")

    assert_lint_clean(tmp_path, verilog)


# Fabric tops (docs 11.9), tiny routers: every routing on a small fabric, whose router modules
# have the structure of any size's; the 64-router torus (four minutes) in `make bench`.
FABRICS = {
    "torus-4x4x4-dor": ["fabric.topology=torus"],
    "torus-3x3x2-adaptive": ["fabric.topology=torus", "fabric.dims=[3, 3, 2]",
                             "fabric.routing=adaptive", "fabric.vcs=3"],
    # Four VCs: a flow's VC of each class, and its adaptive VC, from its hash.
    "torus-2x2x2-dor-4vcs": ["fabric.topology=torus", "fabric.dims=[2, 2, 2]", "fabric.vcs=4"],
    "torus-2x2-adaptive-4vcs": ["fabric.topology=torus", "fabric.dims=[2, 2]",
                                "fabric.routing=adaptive", "fabric.vcs=4"],
    "leaf-spine-4x4-2-ecmp": ["fabric.topology=fat_tree", "fabric.routing=ecmp",
                              "fabric.leaves=4", "fabric.hosts_per_leaf=4", "fabric.spines=2"],
}
FULL_SIZE = {"torus-4x4x4-dor"}


def _lint_fabric_clean(verilog, tmp_path, top="fabric"):
    """Verilator's -Wall over every module of the fabric, and Icarus compiles it.

    Verilator flattens a design, so ``--lint-only`` would hold every router
    in memory at once (gigabytes for 64 routers); built hierarchically, as
    the runner builds it, each router module is checked once and the top
    against its ports, under the same warnings."""
    lint = subprocess.run([str(find_simulator("verilator")), "--cc", "--hierarchical", "-Wall",
                           "-Mdir", str(tmp_path / "obj"), "--top-module", top,
                           str(verilog)], capture_output=True, text=True)
    assert lint.returncode == 0, (lint.stdout + lint.stderr)[-3000:]
    assert "%Warning" not in lint.stdout + lint.stderr
    icarus = subprocess.run(["iverilog", "-g2012", "-o", str(tmp_path / "a.vvp"), str(verilog)],
                            capture_output=True, text=True)
    assert icarus.returncode == 0, icarus.stderr[:3000]


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.bench] * (n in FULL_SIZE))
                                  for n in sorted(FABRICS)])
def test_generate_fabric_lint_clean(name, tmp_path):
    require_simulator("verilator")
    require_simulator("icarus")
    args = ["--preset", "tiny"]
    for o in FABRICS[name]:
        args += ["--set", o]
    res = superfabric("generate", *args, "-o", str(tmp_path))
    assert res.returncode == 0, res.stderr
    verilog = tmp_path / "fabric.v"
    assert (tmp_path / "filelist.f").read_text().split() == ["fabric.v"]
    cfg = FabricConfig.from_json((tmp_path / "config.json").read_text())
    topo = Topology.of(cfg)
    text = verilog.read_text()
    # Each router module once, marked for a hierarchical build; one instance per router.
    kinds = sorted({topo.router_kind(r) for r in range(topo.routers)})
    for kind in kinds:
        assert text.count(f"\nmodule {kind}(") == 1
        # Written with packed ports, as Verilator's hierarchical build calls it: one port
        # per member, an array's elements side by side.
        header = text.split(f"\nmodule {kind}(", 1)[1].split(");", 1)[0]
        assert "link_i__payload" in header and "link_i__0__" not in header, header
        assert "rx_packets," in header and "rx_packets__0" not in header, header
    assert text.count("/* verilator hier_block */") == len(kinds)
    assert "module fabric(" in text
    for r in range(topo.routers):
        assert f"  {topo.router_kind(r)} router{r} (" in text
    for e in range(topo.endpoints):
        assert f"i__{e}__payload" in text and f"o__{e}__valid" in text
    assert_core(tmp_path, "fabric")
    _lint_fabric_clean(verilog, tmp_path)
    # One router module alone, as --top writes it, passes --lint-only -Wall.
    res = superfabric("generate", *args, "--top", kinds[0], "-o", str(tmp_path / "one"))
    assert res.returncode == 0, res.stderr
    one = tmp_path / "one" / f"{kinds[0]}.v"
    assert "hier_block" not in one.read_text()
    assert_core(tmp_path / "one", kinds[0])
    assert_lint_clean(tmp_path / "one", one)


@pytest.mark.parametrize("overrides", [
    ["fabric.topology=torus", "fabric.dims=[2, 2]"],
    ["fabric.topology=fat_tree", "fabric.routing=ecmp", "fabric.leaves=2", "fabric.spines=2",
     "fabric.hosts_per_leaf=2"],
], ids=["torus-2x2", "leaf-spine-2x2-2"])
def test_generate_stimulus_around_a_fabric_lint_clean(overrides, tmp_path):
    require_simulator("verilator")
    require_simulator("icarus")
    args = ["generate", "--preset", "tiny", "--top", "stimulus", "-o", str(tmp_path)]
    for o in overrides:
        args += ["--set", o]
    res = superfabric(*args)
    assert res.returncode == 0, res.stderr
    verilog = tmp_path / "stimulus.v"
    text = verilog.read_text()
    cfg = FabricConfig.load(preset="tiny", overrides=overrides)
    topo = Topology.of(cfg)
    kinds = sorted({topo.router_kind(r) for r in range(topo.routers)})
    # The router modules, the generator and the sink once each, the routers marked for
    # the hierarchical build, the generator and the sink as modules whose code their
    # instances share; a generator and a sink at every endpoint, instances of their
    # modules.
    assert text.count("/* verilator hier_block */") == len(kinds)
    assert text.count("/* verilator no_inline_module */") == 2
    for module in kinds + ["traffic_gen", "traffic_sink", "stimulus"]:
        assert text.count(f"\nmodule {module}(") == 1, module
    for e in range(topo.endpoints):
        assert f"traffic_gen gen{e} (" in text and f"traffic_sink sink{e} (" in text
    assert_core(tmp_path, "stimulus")
    _lint_fabric_clean(verilog, tmp_path, top="stimulus")


def fusesoc(tmp_path, *args):
    """``fusesoc ARGS``, run as a user runs it, in a work folder under ``tmp_path`` with an
    empty home: nothing of FuseSoC's (its configuration, cache, builds) lands outside
    ``tmp_path``. The Verilator the runner finds comes first on ``PATH``, as for a cocotb
    run."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir(exist_ok=True)
    work.mkdir(exist_ok=True)
    config = tmp_path / "fusesoc.conf"
    config.write_text(f"[main]\ncache_root = {tmp_path / 'cache'}\n")
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("XDG_", "FUSESOC_"))}
    env.update(HOME=str(home), PATH=os.pathsep.join([str(find_simulator("verilator").parent),
                                                     env.get("PATH", os.defpath)]))
    done = subprocess.run([sys.executable, "-m", "fusesoc.main", "--config", str(config), *args],
                          cwd=work, env=env, capture_output=True, text=True)
    assert not any(home.iterdir()), sorted(home.rglob("*"))
    return done


#: The FuseSoC commands docs/fpga.md shows, on the folder its ``generate`` example writes.
FUSESOC_EXAMPLES = [shlex.split(line) for line in re.findall(
    r"^\$ fusesoc (.*)$", (ROOT / "docs" / "fpga.md").read_text(), re.M)]


def test_fusesoc_lints_and_simulates_the_generated_core(tmp_path):
    # The commands docs/fpga.md shows, on the tiny switch.
    require_simulator("verilator")
    require_simulator("icarus")
    rtl = tmp_path / "rtl"
    res = superfabric("generate", "--preset", "tiny", "-o", str(rtl))
    assert res.returncode == 0, res.stderr
    assert_core(rtl, "switch")
    name = core_name("switch")
    assert FUSESOC_EXAMPLES == [["--cores-root", "build/rtl", "run", "--target", target, name]
                                for target in ("lint", "sim")]
    lint, sim = (fusesoc(tmp_path, *(str(rtl) if arg == "build/rtl" else arg for arg in example))
                 for example in FUSESOC_EXAMPLES)
    assert lint.returncode == 0, (lint.stdout + lint.stderr)[-3000:]
    # Verilator ran, in lint-only mode with the project's warnings, on the generated file.
    assert "V e r i l a t i o n   R e p o r t" in lint.stdout, lint.stdout[-3000:]
    assert "%Warning" not in lint.stdout + lint.stderr
    build = tmp_path / "work" / "build" / name.replace(":", "_")
    vc = (build / "lint" / f"{name.replace(':', '_')}.vc").read_text().split()
    assert "--lint-only" in vc and set(VERILATOR_OPTIONS) <= set(vc)
    assert vc[vc.index("--top-module") + 1] == "switch"
    assert any(arg.endswith("/switch.v") for arg in vc)
    assert sim.returncode == 0, (sim.stdout + sim.stderr)[-3000:]
    assert "iverilog -sswitch" in sim.stdout and "vvp " in sim.stdout, sim.stdout[-3000:]


def test_fusesoc_lint_holds_the_core_to_verilators_wall(tmp_path):
    # Without its UNUSEDSIGNAL waiver, the skid buffer's Verilog fails the core's lint:
    # a style warning, which Verilator reports only under -Wall.
    require_simulator("verilator")
    rtl = tmp_path / "rtl"
    res = superfabric("generate", "--preset", "tiny", "--top", "skid_buffer", "-o", str(rtl))
    assert res.returncode == 0, res.stderr
    verilog = rtl / "skid_buffer.v"
    waiver = "/* verilator lint_off UNUSEDSIGNAL */\n"
    assert waiver in verilog.read_text()
    verilog.write_text(verilog.read_text().replace(waiver, ""))
    lint = fusesoc(tmp_path, "--cores-root", str(rtl), "run", "--target", "lint",
                   core_name("skid_buffer"))
    assert lint.returncode != 0
    assert "%Warning-UNUSEDSIGNAL" in lint.stdout + lint.stderr, (lint.stdout + lint.stderr)[-3000:]


def test_generate_refuses_a_top_of_another_topology(tmp_path):
    for args, top in ((["--set", "fabric.topology=torus", "--top", "switch"], "switch"),
                      (["--top", "fabric"], "fabric"),
                      (["--set", "fabric.topology=fat_tree", "--set", "fabric.routing=ecmp",
                        "--top", "router"], "router")):
        res = superfabric("generate", *args, "-o", str(tmp_path / "x"))
        assert res.returncode == 2
        line = res.stderr.strip()
        assert "\n" not in line and f"--top = {top!r}" in line and "fabric.topology" in line


def test_generate_skid_buffer(tmp_path):
    require_simulator("verilator")
    res = superfabric("generate", "--preset", "tiny", "--top", "skid_buffer", "-o", str(tmp_path))
    assert res.returncode == 0, res.stderr
    lint = subprocess.run([str(find_simulator("verilator")), "--lint-only", "-Wall",
                           str(tmp_path / "skid_buffer.v")], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stderr[:3000]
    assert_core(tmp_path, "skid_buffer")


@pytest.mark.parametrize("top, settings", [("compression", []),
                                           ("collective", ["--set", "rdma.enabled=true"])])
def test_generate_block_for_any_fabric_lint_clean(top, settings, tmp_path):
    # Blocks every topology offers: the compression unit has no fabric parameter; the
    # collective engine is one accelerator's, beside its RDMA engine.
    require_simulator("verilator")
    require_simulator("icarus")
    for topology in ("switch", "torus"):
        out = tmp_path / topology
        res = superfabric("generate", "--preset", "tiny", "--set", f"fabric.topology={topology}",
                          *settings, "--top", top, "-o", str(out))
        assert res.returncode == 0, res.stderr
        assert f"module {top}(" in (out / f"{top}.v").read_text()
        assert_lint_clean(out, out / f"{top}.v")


class _AlwaysReady(wiring.Component):
    """A register stage between an ``always_ready`` input stream and an ``always_valid``
    output: a top whose signature holds a constant on either side."""

    i: In(stream.Signature(8, always_ready=True))
    o: Out(stream.Signature(8, always_valid=True))

    def elaborate(self, platform):
        m = Module()
        with m.If(self.i.valid):
            m.d.sync += self.o.payload.eq(self.i.payload)
        return m


def test_generate_leaves_out_the_constant_members_of_a_top(tmp_path):
    # Amaranth alone refuses the constant ``ready`` (and ``valid``) as a port.
    with pytest.raises(TypeError, match="Only signals and IO ports"):
        amaranth_verilog.convert(_AlwaysReady(), name="always_ready")
    text = verilog.convert(_AlwaysReady(), name="always_ready")
    header = re.search(r"^module always_ready\(([^)]*)\);", text, re.M)
    assert header, text
    ports = {name.strip() for name in header[1].split(",")}
    assert ports == {"clk", "rst", "i__valid", "i__payload", "o__ready", "o__payload"}
    path = tmp_path / "always_ready.v"
    path.write_text(text)
    require_simulator("icarus")
    icarus = subprocess.run(["iverilog", "-g2012", "-o", str(tmp_path / "a.vvp"), str(path)],
                            capture_output=True, text=True)
    assert icarus.returncode == 0, icarus.stderr[:3000]


@pytest.mark.parametrize("top", ["rdma_engine", "rdma_fabric", "rdma_hosted", "collective_fabric"])
def test_generate_rdma_lint_clean(top, tmp_path):
    require_simulator("verilator")
    require_simulator("icarus")
    args = ["generate", "--preset", "tiny", "--top", top, "-o", str(tmp_path)]
    for o in RDMA_SMALL:
        args += ["--set", o]
    res = superfabric(*args)
    assert res.returncode == 0, res.stderr
    verilog = tmp_path / f"{top}.v"
    assert_core(tmp_path, top)
    assert_lint_clean(tmp_path, verilog)


@pytest.mark.parametrize("fabric, mark", [
    ([], "no_inline_module"),
    (["fabric.topology=torus", "fabric.dims=[2, 2]"], "hier_block"),
], ids=["switch", "torus-2x2"])
def test_generate_rdma_fabric_writes_the_engine_once(fabric, mark, tmp_path):
    # The engine once, an instance per endpoint; on a fabric a hierarchical block with
    # packed ports (its Verilog grows with the endpoints: spec 10.15), on the switch a
    # module whose code the instances share.
    args = ["generate", "--preset", "tiny", "--top", "rdma_fabric", "-o", str(tmp_path)]
    for o in RDMA_SMALL + fabric:
        args += ["--set", o]
    res = superfabric(*args)
    assert res.returncode == 0, res.stderr
    text = (tmp_path / "rdma_fabric.v").read_text()
    assert text.count("\nmodule rdma_engine(") == 1
    header, body = text.split("\nmodule rdma_engine(", 1)[1].split(");\n", 1)
    assert body.lstrip().startswith(f"/* verilator {mark} */"), body[:200]
    assert ("counters__0" in header) == (mark == "no_inline_module"), header
    cfg = FabricConfig.load(preset="tiny", overrides=RDMA_SMALL + fabric)
    for e in range(cfg.endpoints):
        assert f"rdma_engine engine{e} (" in text
    if fabric:
        require_simulator("verilator")
        require_simulator("icarus")
        assert_lint_clean(tmp_path, tmp_path / "rdma_fabric.v")


@pytest.mark.parametrize("preset,overrides", [
    ("default", []),
    ("tiny", ["switch.ports=5", "switch.priorities=1", "switch.islip_iterations=1",
              "switch.data_width=32", "switch.tag_width=8", "switch.scheduler=fifo",
              "switch.ingress_full=drop", "ecn.enabled=true", "stimulus.hist_buckets=40",
              "stimulus.hist_sub_bits=2", "stimulus.counter_width=64",
              "stimulus.source_queue=2", "stimulus.fault_packet=3"]),
], ids=["default", "5port-1class"])
def test_generate_stimulus_lint_clean(preset, overrides, tmp_path):
    require_simulator("verilator")
    require_simulator("icarus")
    args = ["generate", "--preset", preset, "--top", "stimulus", "-o", str(tmp_path)]
    for o in overrides:
        args += ["--set", o]
    res = superfabric(*args)
    assert res.returncode == 0, res.stderr
    verilog = tmp_path / "stimulus.v"
    assert "module stimulus(" in verilog.read_text()
    assert_core(tmp_path, "stimulus")
    assert_lint_clean(tmp_path, verilog)


def test_generate_stimulus_refuses_pfc_in_one_line(tmp_path):
    res = superfabric("generate", "--top", "stimulus", "--set", "pfc.enabled=true",
                      "-o", str(tmp_path))
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "pfc.enabled" in res.stderr


def test_generate_rdma_needs_rdma_enabled(tmp_path):
    res = superfabric("generate", "--preset", "tiny", "--top", "rdma_engine", "-o", str(tmp_path))
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "rdma.enabled" in res.stderr


@pytest.mark.parametrize("args,field", [
    (["--set", "switch.ports=0"], "switch.ports"),
    (["--set", "switch.ports=33"], "switch.ports"),
    (["--set", "switch.scheduler=wfa"], "switch.scheduler"),
    (["--set", "switch.bogus=1"], "switch.bogus"),
    (["--set", "fabric.ports=4"], "fabric"),
    (["--set", "switch.ports"], "switch.ports"),
    (["--preset", "huge"], "huge"),
    (["--top", "nothing"], "--top"),
])
def test_bad_input_is_one_line_exit_2(args, field, tmp_path):
    res = superfabric("generate", *args, "-o", str(tmp_path / "x"))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert field in lines[0]
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "x" / "switch.v").exists()


def test_toml_syntax_error_is_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[switch\nports = 4\n")
    res = superfabric("generate", "--config", str(bad), "-o", str(tmp_path / "x"))
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1
    assert "bad.toml" in res.stderr and "TOML" in res.stderr


@pytest.mark.slow
def test_run_rejects_bad_traffic_in_one_line(tmp_path):
    for args, field in ((["--load", "1.5"], "traffic.load"),
                        (["--traffic", "nope"], "traffic.pattern"),
                        (["--lengths", "fixed:99"], "traffic.packet_lengths"),
                        (["--sim", "modelsim"], "--sim"),
                        (["--stimulus", "hw"], "--stimulus"),
                        (["--stimulus", "hardware", "--load", "0"], "traffic.load"),
                        (["--stimulus", "hardware", "--pause-rate", "0.1"], "traffic.pause_rate"),
                        (["--stimulus", "hardware", "--set", "switch.data_width=16"],
                         "switch.data_width")):
        res = superfabric("run", *args, "-o", str(tmp_path / "x"))
        assert res.returncode == 2, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and field in res.stderr, res.stderr


def test_model_run_writes_results(tmp_path):
    res = superfabric("run", "--preset", "tiny", "--traffic", "uniform", "--load", "0.5",
                      "--cycles", "2000", "--sim", "model", "-o", str(tmp_path))
    assert res.returncode == 0, res.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    for key in ("config", "simulator", "traffic", "throughput", "latency", "packets", "model",
                "match", "wall_seconds", "cycles_per_second", "compile_seconds"):
        assert key in results
    # The kernels' compilation is timed apart and left out of the speed.
    assert results["compile_seconds"] >= 0.0
    assert results["cycles_per_second"] == results["cycles"] / results["wall_seconds"]
    assert abs(results["throughput"] - 0.5) < 0.03
    assert results["packets"]["delivered"] == results["packets"]["offered"]
    assert (tmp_path / "packets.npz").exists()
