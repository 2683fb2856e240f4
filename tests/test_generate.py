"""Verilog generation through the command line: files, lint, Icarus, and user errors."""

import json
import subprocess
import sys

import pytest

from superfabric.config import FabricConfig
from superfabric.tb.runner import find_simulator

from conftest import RDMA_SMALL, assert_lint_clean, require_simulator

GENERATED = [
    ("default", []),
    ("tiny", ["switch.scheduler=fifo", "switch.ingress_full=drop"]),
    ("tiny", ["switch.ports=5", "switch.priorities=1", "switch.islip_iterations=1",
              "switch.buffer_flits=100", "switch.data_width=8", "switch.tag_width=12"]),
    ("default", ["ecn.enabled=true"]),
]


def superfabric(*args):
    """Run the console entry point as a user would, capturing its output."""
    return subprocess.run([sys.executable, "-m", "superfabric.tools.cli", *args],
                          capture_output=True, text=True)


@pytest.mark.parametrize("preset,overrides", GENERATED, ids=["default", "tiny-fifo-drop", "5port-8bit", "default-ecn"])
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

    assert_lint_clean(tmp_path, verilog)


def test_generate_skid_buffer(tmp_path):
    require_simulator("verilator")
    res = superfabric("generate", "--preset", "tiny", "--top", "skid_buffer", "-o", str(tmp_path))
    assert res.returncode == 0, res.stderr
    lint = subprocess.run([str(find_simulator("verilator")), "--lint-only", "-Wall",
                           str(tmp_path / "skid_buffer.v")], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stderr[:3000]


@pytest.mark.parametrize("top", ["rdma_engine", "rdma_fabric"])
def test_generate_rdma_lint_clean(top, tmp_path):
    require_simulator("verilator")
    require_simulator("icarus")
    args = ["generate", "--preset", "tiny", "--top", top, "-o", str(tmp_path)]
    for o in RDMA_SMALL:
        args += ["--set", o]
    res = superfabric(*args)
    assert res.returncode == 0, res.stderr
    verilog = tmp_path / f"{top}.v"
    assert_lint_clean(tmp_path, verilog)


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
