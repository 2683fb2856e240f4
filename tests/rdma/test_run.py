"""``superfabric run`` with RDMA traffic: refusals, the model run, and the RTL plumbing."""

import json
import subprocess
import sys
import types

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.sim.rdma.records import RdmaRecords
from superfabric.sim.rdma.traffic import RdmaWorkload, generate_rdma
from superfabric.tools import run as run_module

# Four endpoints of eight QPs each: a run of a few thousand cycles covers every QP.
SMALL = ["--preset", "tiny", "--set", "rdma.qps=32"]


def superfabric(*args):
    """Run the console entry point as a user would, capturing its output."""
    return subprocess.run([sys.executable, "-m", "superfabric.tools.cli", *args],
                          capture_output=True, text=True)


@pytest.mark.parametrize("args, field", [
    (["--traffic", "rdma-uniform"], "rdma.enabled"),
    (["--traffic", "rdma-allreduce", "--set", "rdma.enabled=true", "--sink-stall", "0.1"],
     "traffic.sink_stall"),
    (["--traffic", "rdma-uniform", "--set", "rdma.enabled=true", "--pause-rate", "0.1"],
     "traffic.pause_rate"),
    (["--traffic", "uniform", "--bad-fraction", "0.1"], "traffic.bad_fraction"),
    (["--traffic", "rdma-uniform", "--set", "rdma.enabled=true", "--bad-fraction", "2"],
     "traffic.bad_fraction"),
    (["--traffic", "rdma-uniform", "--set", "rdma.enabled=true", "--cycles", "100"],
     "traffic.cycles"),
    (["--traffic", "rdma-uniform", "--set", "rdma.enabled=true", "--cycles", "100000"],
     "rdma.memory_words"),
])
def test_refusals_are_one_line_exit_2(args, field, tmp_path):
    res = superfabric("run", *SMALL, *args, "-o", str(tmp_path / "x"))
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], res.stderr
    assert not (tmp_path / "x" / "results.json").exists()


def test_model_run_writes_results_workload_and_records(tmp_path):
    res = superfabric("run", *SMALL, "--set", "rdma.enabled=true", "--traffic", "rdma-uniform",
                      "--load", "0.4", "--cycles", "3000", "--seed", "2", "--bad-fraction", "0.1",
                      "-o", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert "requests ok" in res.stdout and "stray words" in res.stdout
    results = json.loads((tmp_path / "results.json").read_text())
    for key in ("config", "simulator", "versions", "traffic", "model", "rdma", "match",
                "wall_seconds", "cycles_per_second", "compile_seconds"):
        assert key in results
    assert results["compile_seconds"] >= 0.0
    assert results["match"] is None and results["simulator"] == "model"
    assert results["traffic"]["bad_fraction"] == 0.1
    assert results["traffic"]["qps_used"] == 32
    rdma = results["rdma"]
    assert rdma["requests"]["completed"] == rdma["requests"]["posted"]
    assert rdma["data"]["corrupted"] == 0 and rdma["data"]["stray_words"] == 0
    assert {k: v for k, v in results["model"].items()
            if k not in ("threads", "wall_seconds", "cycles_per_second")} == rdma
    assert results["threads"] == results["model"]["threads"] == 1
    cfg = FabricConfig.from_dict(results["config"])
    workload = RdmaWorkload.load(tmp_path / "workload.npz")
    assert workload == generate_rdma(cfg, "rdma-uniform", load=0.4, cycles=3000, seed=2,
                                     bad_fraction=0.1)
    records = RdmaRecords.load(tmp_path / "model_records.npz")
    assert records.cycles == rdma["cycles"]


@pytest.mark.slow
def test_rtl_run_goes_through_the_rdma_runner(tmp_path, monkeypatch):
    cfg = FabricConfig.load(preset="tiny", overrides=["rdma.qps=32", "rdma.enabled=true"])
    calls = []

    def run_rdma_rtl(cfg_, workload, *, sim, out_dir, model, waves, build_root):
        calls.append((cfg_, workload, sim, model, waves, build_root))
        rtl = RdmaRecords.load(tmp_path / "model_records.npz")
        rtl.status[0] = 3                       # so the RTL's summary differs from the model's
        rtl.save(tmp_path / "rtl_records.npz")  # as the runner does
        return rtl, {"exact": False, "mismatches": 1, "first_mismatch": {"tag": 0},
                     "problems": ["tag 0: status 3, model 0"]}

    monkeypatch.setitem(sys.modules, "superfabric.tb.rdma.runner",
                        types.SimpleNamespace(run_rdma_rtl=run_rdma_rtl))
    monkeypatch.setattr(run_module, "_versions", lambda sim: {"icarus": "fake"})
    results = run_module.run_point(cfg, traffic="rdma-allreduce", load=0.5, cycles=3000, seed=1,
                                   sim="icarus", out_dir=tmp_path, waves=True,
                                   build_root=tmp_path / "b")
    (cfg_, workload, sim, model, waves, build_root), = calls
    assert cfg_ == cfg and sim == "icarus" and waves is True and build_root == tmp_path / "b"
    assert workload == RdmaWorkload.load(tmp_path / "workload.npz")
    assert np.array_equal(model.done, RdmaRecords.load(tmp_path / "model_records.npz").done)
    assert results["match"]["exact"] is False
    assert results["rdma"]["requests"]["unexpected_status"] == 1
    assert results["model"]["requests"]["unexpected_status"] == 0
    rtl = RdmaRecords.load(tmp_path / "rtl_records.npz")
    assert rtl.status[0] == 3 and np.array_equal(
        rtl.done, RdmaRecords.load(tmp_path / "model_records.npz").done)
    assert json.loads((tmp_path / "results.json").read_text()) == results
