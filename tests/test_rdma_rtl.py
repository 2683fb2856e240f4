"""RDMA fabric RTL against the golden model, on both simulators.

One build per simulator serves every case here: the fault rates and seed
are run-time inputs of the RTL (``[faults]`` is left out of the build key),
and the cases differ only in workload and faults. Every run is also checked
on its own by the scoreboard (each request completed once with the status it
was generated for, per-QP order, memories, receive completions).
"""

import pytest

from superfabric.config import FabricConfig
from superfabric.sim import rdma_wire as wire
from superfabric.sim.rdma_fabric import RdmaFabricModel
from superfabric.sim.rdma_traffic import generate_rdma
from superfabric.tb.rdma_runner import run_rdma_rtl

from conftest import BUILD_ROOT

# A small fabric keeps each run short; `tiny` has four endpoints.
BASE = ["rdma.enabled=true", "rdma.qps=16", "rdma.memory_words=4096", "rdma.retransmit_timeout=512"]
FAULTS = ["faults.drop_rate=0.03", "faults.duplicate_rate=0.02", "faults.reorder_rate=0.02",
          "faults.corrupt_rate=0.02"]


def _run(sim, tmp_path, overrides, *, pattern="rdma-uniform", load=0.4, cycles=600, seed=1,
         bad_fraction=0.0):
    cfg = FabricConfig.load(preset="tiny", overrides=BASE + overrides)
    workload = generate_rdma(cfg, pattern, load=load, cycles=cycles, seed=seed,
                             bad_fraction=bad_fraction)
    model = RdmaFabricModel(cfg).run(workload)
    rtl, match = run_rdma_rtl(cfg, workload, sim=sim, out_dir=tmp_path, model=model,
                              build_root=BUILD_ROOT)
    return workload, model, rtl, match


def test_lossless_exact(sim, tmp_path):
    """Lossless: RTL equals the model cycle for cycle, and every request completes once."""
    workload, model, rtl, match = _run(sim, tmp_path, [])
    assert match["problems"] == [], match["problems"]
    assert match["exact"]
    assert (rtl.status == wire.STATUS_OK).all()
    assert sum(rtl.counters["retransmissions"]) == 0


def test_bad_keys_write_nothing(sim, tmp_path):
    """Requests with bad keys, ranges, peers or fields fail with their status and write nothing."""
    workload, model, rtl, match = _run(sim, tmp_path, [], bad_fraction=0.3, seed=2)
    assert match["problems"] == [], match["problems"]
    statuses = set(rtl.status.tolist())
    assert {wire.STATUS_LOCAL, wire.STATUS_REMOTE, wire.STATUS_BAD} <= statuses


def test_faults_recover(sim, tmp_path):
    """Seeded drops, duplicates, reordering and corruption: same completions as the model."""
    workload, model, rtl, match = _run(sim, tmp_path, FAULTS, seed=3)
    assert match["problems"] == [], match["problems"]
    c = rtl.counters
    assert sum(c["retransmissions"]) > 0 and sum(c["corrupt"]) > 0 and sum(c["duplicates"]) > 0
