"""The compiled RDMA run loop's entries (``sim/rdma/kernels/run.py``): a stalled run, a
workload that does not fit, and a summary's records."""

import dataclasses

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.sim.collective.fabric import prepare_collective
from superfabric.sim.collective.kernels.engine import completion_cycle
from superfabric.sim.rdma.fabric import RdmaFabricModel
from superfabric.sim.rdma.kernels.run import run
from superfabric.sim.rdma.traffic import generate_rdma

from ..test_fabrics import BASE, FABRICS

FIELDS = ("taken", "done", "status", "completions", "order", "rx_completions", "memory",
          "cnps", "rates", "pfc_frames", "queue_depth", "delivered", "delivered_words")


def test_a_dead_torus_stalls_and_names_an_endpoint_that_owes():
    """Every link drops everything: no WR ever completes, and the run ends as stalled after
    the stall limit, naming the first endpoint that still owes completions and its channel."""
    cfg = FabricConfig.load(preset="tiny", overrides=BASE + FABRICS["torus"]
                            + ["faults.drop_rate=1.0"])
    workload = generate_rdma(cfg, "rdma-allreduce", load=0.3, cycles=200, seed=3)
    rec, _ = run(cfg, workload, stall_limit=3000)
    assert rec.stalled and (rec.completions == 0).all() and (rec.taken >= 0).any()
    assert rec.cycles == rec.taken.max() + 1 + 3000
    first = int(workload.wr["src"].min())
    owed = int((workload.wr["src"] == first).sum())
    assert rec.stuck.startswith(f"endpoint {first} channel ")
    assert rec.stuck.endswith(f"; {owed} WR(s) of endpoint {first} without completion")


@pytest.mark.parametrize("field", ["memory", "tag"])
def test_a_workload_that_does_not_fit_is_refused_by_every_entry(field):
    """The compiled loop itself refuses a workload whose memory does not have the
    configuration's shape, or whose tags are not their rows, so run_collective, which
    calls it directly, refuses it too; the message names the field."""
    cfg = FabricConfig.load(preset="tiny", overrides=BASE)
    workload = generate_rdma(cfg, "rdma-uniform", load=0.3, cycles=800, seed=3)
    if field == "memory":
        workload = dataclasses.replace(
            workload, memory=np.zeros((cfg.endpoints, cfg.rdma.memory_words + 1), np.uint64))
        words, e = cfg.rdma.memory_words, cfg.endpoints
        message = rf"workload\.memory: shape \({e}, {words + 1}\), must be \({e}, {words}\)"
    else:
        workload.wr["tag"] = workload.wr["tag"][::-1].copy()
        message = r"workload\.wr\['tag'\]\[0\] = \d+: must be the row index 0"
    for entry in (lambda: run(cfg, workload), lambda: RdmaFabricModel(cfg).run(workload)):
        with pytest.raises(ValueError, match=message):
            entry()


def test_a_summary_keeps_every_record_but_depths_and_deliveries():
    cfg = FabricConfig.load(preset="tiny", overrides=[
        "rdma.enabled=true", "rdma.qps=8", "rdma.memory_words=8192"] + FABRICS["torus"])
    prepared = prepare_collective(cfg, op="allreduce", algo="ring", nbytes=2048, dtype="fp32",
                                  seed=1, segment_packets=4)
    collective = (prepared.schedule, prepared.layout, prepared.dtype)
    full, full_state = run(cfg, prepared.workload, collective=collective)
    summary, state = run(cfg, prepared.workload, collective=collective, summary=True)
    kept = [f for f in FIELDS if f not in ("queue_depth", "delivered", "delivered_words")]
    assert (summary.cycles, summary.counters) == (full.cycles, full.counters)
    for name in kept:
        assert np.array_equal(getattr(summary, name), getattr(full, name)), name
    assert completion_cycle(state) == completion_cycle(full_state)
    assert len(full.queue_depth) == full.cycles and len(full.delivered)
    assert summary.queue_depth.shape == (0, cfg.endpoints)
    assert not len(summary.delivered) and not len(summary.delivered_words)
