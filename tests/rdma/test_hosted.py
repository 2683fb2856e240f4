"""RDMA runs with the hosts in hardware (the ``rdma_hosted`` top, spec 10.16) against the
model, by cycles, counters and every endpoint's hashes, on both simulators: lossless with
bad requests, over faulty links, and congested (PFC, ECN, DCQCN); the same cycles under the
plain Verilator harness of ``make bench``; a fault planted in the RTL's run is caught and
named; and a workload the hosts cannot play is one line.

The hashes of a run's records move with each of them: a record changed by one cycle
changes one hash.
"""

import io
import json
from dataclasses import replace

import numpy as np
import pytest

from superfabric.config import ConfigError, FabricConfig
from superfabric.formats.rdma_hash import HASHES
from superfabric.sim.rdma.fabric import RdmaFabricModel
from superfabric.sim.rdma.hashes import record_hashes
from superfabric.sim.rdma.traffic import generate_rdma
from superfabric.tb import runner
from superfabric.tb.rdma.runner import run_rdma_hosted, run_rdma_plain, with_late_first_post
from superfabric.tb.rdma.script import host_lines
from superfabric.tools.run import run_failure, run_point

from conftest import BUILD_ROOT, CONGESTED, RDMA_SMALL, require_simulator

# As tests/rdma/test_rtl.py: a short retransmission timeout keeps the faulty runs short.
BASE = RDMA_SMALL + ["rdma.retransmit_timeout=256"]
FAULTS = ["faults.drop_rate=0.05", "faults.duplicate_rate=0.03", "faults.reorder_rate=0.03",
          "faults.corrupt_rate=0.03"]


def _case(overrides, pattern="rdma-uniform", *, load=0.3, cycles=800, seed=2, bad_fraction=0.0):
    cfg = FabricConfig.load(preset="tiny", overrides=BASE + overrides)
    workload = generate_rdma(cfg, pattern, load=load, cycles=cycles, seed=seed,
                             bad_fraction=bad_fraction)
    return cfg, workload, RdmaFabricModel(cfg).run(workload)


def test_hosted_run_exact(sim, tmp_path):
    """Lossless, with bad requests of every kind: the same cycles, counters and hashes."""
    cfg, workload, model = _case([], bad_fraction=0.3)
    rtl, match = run_rdma_hosted(cfg, workload, sim=sim, out_dir=tmp_path, model=model,
                                 build_root=BUILD_ROOT)
    assert match["exact"] and match["passed"], match["problems"]
    assert rtl["finished"] and rtl["cycles"] == model.cycles > 800
    assert rtl["hashes"] == record_hashes(cfg, workload, model).tolist()
    # Every endpoint took WRs, completed them and has data: those hashes folded something.
    for kind in ("taken", "completion", "memory"):
        assert all(h[HASHES.index(kind)] for h in rtl["hashes"]), kind


@pytest.mark.parametrize("overrides,pattern,load,cycles", [
    (FAULTS, "rdma-allreduce", 0.3, 800),
    (CONGESTED, "rdma-incast", 0.6, 400),
], ids=["faults-allreduce", "congested-incast"])
def test_hosted_recovery_and_congestion_exact(overrides, pattern, load, cycles, tmp_path):
    """Retransmissions over dropped, duplicated, reordered and corrupted packets; pause
    frames, CNPs and rate changes of a congested incast: all in the hashes, all equal."""
    require_simulator("verilator")
    cfg, workload, model = _case(overrides, pattern, load=load, cycles=cycles)
    events = (sum(model.counters["retransmissions"]) if overrides is FAULTS else
              min(len(model.pfc_frames), len(model.cnps), len(model.rates)))
    assert events > 0
    rtl, match = run_rdma_hosted(cfg, workload, sim="verilator", out_dir=tmp_path, model=model,
                                 build_root=BUILD_ROOT)
    assert match["exact"] and match["passed"], match["problems"]


def test_a_planted_fault_is_caught(sim, tmp_path):
    """The RTL's run posts endpoint 0's first WRs one cycle late (the model's on time): the
    match fails and names the endpoint and the hashes that differ."""
    cfg, workload, model = _case([])
    late, first = with_late_first_post(workload)
    # The first WR was taken as posted, so posting it later must move it.
    assert model.taken[first] == workload.wr["post"][first] == late.wr["post"][first] - 1
    rtl, match = run_rdma_hosted(cfg, late, sim=sim, out_dir=tmp_path, model=model,
                                 build_root=BUILD_ROOT)
    assert rtl["finished"] and not match["exact"] and not match["passed"]
    assert match["first_mismatch"].startswith("endpoint 0 taken hash: model ")
    assert (tmp_path / "mismatch.txt").read_text().splitlines() == match["problems"]


def test_the_plain_harness_runs_the_same_cycles(tmp_path):
    """``make bench``'s plain Verilator harness (tools/rdma_harness.cpp) plays the script
    cocotb plays, and ends with the model's cycles, counters and hashes."""
    require_simulator("verilator")
    from superfabric.tools.bench import RDMA_HARNESS
    cfg, workload, model = _case(FAULTS, "rdma-allreduce")
    exe = runner.build_harness(cfg, top="rdma_hosted", harness=RDMA_HARNESS,
                               build_root=BUILD_ROOT, log=io.StringIO())
    rtl, match = run_rdma_plain(cfg, workload, exe, out_dir=tmp_path, model=model)
    assert match["exact"] and match["passed"], match["problems"]
    assert rtl["run_seconds"] > 0


def test_a_completion_a_cycle_later_changes_one_hash():
    """The hashes of a run's records move with any one of them: a completion a cycle later
    changes that endpoint's completion hash and nothing else."""
    cfg, workload, model = _case(CONGESTED, "rdma-incast", load=0.6, cycles=400)
    before = record_hashes(cfg, workload, model)
    late = replace(model, done=model.done.copy())
    i = int(np.flatnonzero(model.done >= 0)[0])
    late.done[i] += 1
    after = record_hashes(cfg, workload, late)
    e = int(workload.wr["src"][i])
    changed = np.argwhere(before != after).tolist()
    assert changed == [[e, HASHES.index("completion")]]


def test_a_workload_the_hosts_cannot_play_is_one_line():
    """More WRs than a host holds, or WRs not posted in row order: one ConfigError line."""
    cfg, workload, _ = _case([])
    with pytest.raises(ConfigError, match=r"^workload: endpoint \d+ posts \d+ work requests; "
                                          r"a hardware host holds at most 2$"):
        host_lines(cfg, workload, 2)
    wr = {name: np.array(column) for name, column in workload.wr.items()}
    rows = np.flatnonzero(wr["src"] == 1)
    wr["post"][rows[0]] = wr["post"][rows[1]] + 1
    with pytest.raises(ConfigError, match=r"^workload: endpoint 1's work requests are not "
                                          r"posted in row order"):
        host_lines(cfg, replace(workload, wr=wr), 1024)


def test_superfabric_run_with_the_hosts_in_hardware(tmp_path):
    """``run --stimulus hardware`` with an RDMA pattern (``run_point``): the hosted top runs
    it, ``match`` is exact, ``results.json`` has the run's hashes by name, and the ``rdma``
    section, the model's, ends where the hosted run ended."""
    require_simulator("verilator")
    cfg = FabricConfig.load(preset="tiny", overrides=BASE + FAULTS)
    res = run_point(cfg, traffic="rdma-allreduce", load=0.3, cycles=800, seed=2,
                    sim="verilator", stimulus="hardware", out_dir=tmp_path,
                    build_root=BUILD_ROOT)
    assert res["match"]["exact"] and run_failure(res) is None, res["match"]["problems"]
    hosted = res["hosted"]
    assert hosted["finished"] and hosted["cycles"] == res["rdma"]["cycles"]
    assert [sorted(h) for h in hosted["hashes"]] == [sorted(HASHES)] * cfg.endpoints
    assert json.loads((tmp_path / "results.json").read_text())["hosted"] == hosted
    assert (tmp_path / "script.txt").is_file() and not (tmp_path / "mismatch.txt").exists()
