"""The compiled RDMA run loop against the Python loop, whole runs: every record of
:class:`RdmaRecords` equal (WRs' cycles, statuses and order, receive completions, counters,
memories, CNPs, rate changes, pause frames, queue depths, delivered packets and their
words), and the collective engines' timelines."""

import dataclasses

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.sim.collective.fabric import prepare_collective
from superfabric.sim.collective.kernels.engine import completion_cycle, timeline
from superfabric.sim.rdma.fabric import RdmaFabricModel
from superfabric.sim.rdma.kernels.run import run
from superfabric.sim.rdma.traffic import generate_rdma

from .. import test_fabrics as fabric_tests
from .reference import run_collective

#: The fabrics of the model's fabric tests, and the switch.
FABRICS = {"switch": [], **fabric_tests.FABRICS}
BASE, CASES = fabric_tests.BASE, fabric_tests.CASES
FIELDS = ("taken", "done", "status", "completions", "order", "rx_completions", "memory",
          "cnps", "rates", "pfc_frames", "queue_depth", "delivered", "delivered_words")


def assert_same(python, compiled):
    """Every record equal; a difference names the record and its first row."""
    assert (python.cycles, python.stalled, python.stuck) == (
        compiled.cycles, compiled.stalled, compiled.stuck)
    assert python.counters == compiled.counters
    for name in FIELDS:
        a, b = np.asarray(getattr(python, name)), np.asarray(getattr(compiled, name))
        assert a.shape == b.shape, f"{name}: shape {a.shape} against {b.shape}"
        wrong = np.flatnonzero((a != b).reshape(len(a), -1).any(axis=1)) if a.size else []
        assert not len(wrong), f"{name}[{wrong[0]}]: {a[wrong[0]]} against {b[wrong[0]]}"


@pytest.mark.parametrize("fabric", sorted(FABRICS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_workloads_run_the_same(fabric, case):
    overrides, pattern, load, cycles = CASES[case]
    cfg = FabricConfig.load(preset="tiny", overrides=BASE + FABRICS[fabric] + overrides)
    workload = generate_rdma(cfg, pattern, load=load, cycles=cycles, seed=3,
                             bad_fraction=0.2 if case == "uniform-faults" else 0.0)
    link = 0 if fabric != "switch" else -1
    python = RdmaFabricModel(cfg).run_reference(workload, capture_link=link)
    compiled, _ = run(cfg, workload, capture_link=link)
    assert_same(python, compiled)
    if case == "uniform-faults":
        assert sum(compiled.counters["retransmissions"]) > 0
    if case == "incast-congested":
        assert len(compiled.cnps) and len(compiled.rates) and len(compiled.pfc_frames)


def test_a_stalled_run_says_the_same():
    cfg = FabricConfig.load(preset="tiny", overrides=BASE + FABRICS["torus"]
                            + ["faults.drop_rate=1.0"])
    workload = generate_rdma(cfg, "rdma-allreduce", load=0.3, cycles=200, seed=3)
    python = RdmaFabricModel(cfg).run_reference(workload, stall_limit=3000)
    compiled, _ = run(cfg, workload, stall_limit=3000)
    assert python.stalled and python.stuck
    assert_same(python, compiled)


@pytest.mark.parametrize("fabric, algo, dtype", [
    ("torus", "ring", "fp32"), ("torus", "dimwise", "int32"),
    ("torus", "halving-doubling", "fp32"), ("leaf-spine", "tree", "fp32")])
def test_collectives_run_the_same(fabric, algo, dtype):
    cfg = FabricConfig.load(preset="tiny", overrides=[
        "rdma.enabled=true", "rdma.qps=8", "rdma.memory_words=8192"] + FABRICS[fabric])
    prepared = prepare_collective(cfg, op="allreduce", algo=algo, nbytes=2048, dtype=dtype,
                                  seed=1, segment_packets=4)
    python, engines, _ = run_collective(cfg, prepared)
    compiled, cst = run(cfg, prepared.workload,
                        collective=(prepared.schedule, prepared.layout, prepared.dtype))
    assert_same(python, compiled)
    ours = timeline(cst)
    theirs = engines.timeline()
    for key in ("started", "applied"):
        assert np.array_equal(ours[key], theirs[key]), key
    assert completion_cycle(cst) == engines.completion_cycle


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
