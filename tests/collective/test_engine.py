"""The collective engine model on the RDMA fabric model (section 15.8): every accelerator
ends with numpy's answer bit for bit (and with the symbolic executor's whole buffer), the
engine's rules hold on a run, and the apply unit takes the cycles the spec says."""

from dataclasses import replace

import numpy as np
import pytest

from superfabric.config import ConfigError, FabricConfig
from superfabric.network.topology import Topology
from superfabric.sim.collective.alpha_beta import AlphaBeta
from superfabric.sim.collective.engine import apply_cycles
from superfabric.sim.collective.executor import replay
from superfabric.sim.collective.fabric import data_ok, prepare_collective, run_collective
from superfabric.sim.collective.host_memory import words_of
from superfabric.sim.collective.library import ALGORITHMS, supports
from superfabric.sim.collective.peers import Peers

from conftest import RDMA_SMALL

#: RDMA_SMALL with eight QPs per accelerator (one per peer).
BASE = [o for o in RDMA_SMALL if not o.startswith("rdma.qps=")] + [
    "rdma.qps=64", "rdma.retransmit_timeout=256"]
FABRICS = {
    "torus": ["fabric.topology=torus", "fabric.dims=[2, 2, 2]"],
    "leaf-spine": ["fabric.topology=fat_tree", "fabric.leaves=4", "fabric.spines=2",
                   "fabric.hosts_per_leaf=2", "fabric.routing=ecmp"],
}


def _config(fabric, *extra):
    return FabricConfig.load(overrides=BASE + FABRICS[fabric] + list(extra))


def _run(fabric, op, algo, dtype, nbytes=2048, *extra):
    cfg = _config(fabric, *extra)
    prepared = prepare_collective(cfg, op=op, algo=algo, nbytes=nbytes, dtype=dtype, seed=5)
    records, engines, buffers = run_collective(cfg, prepared)
    assert not records.stalled, records.stuck
    return cfg, prepared, records, engines, buffers


def _same_as_executor(prepared, buffers):
    """Every accelerator's whole buffer, partial sums included, is the executor's."""
    want = replay(prepared.schedule, prepared.data, eager=True)
    return all(np.array_equal(w.view(np.uint32), b.view(np.uint32))
               for w, b in zip(want, buffers))


@pytest.mark.parametrize("dtype", ["int32", "fp32"])
@pytest.mark.parametrize("fabric, algo", [("torus", "ring"), ("torus", "dimwise"),
                                          ("torus", "halving-doubling"), ("leaf-spine", "tree")])
def test_allreduce_is_exact(fabric, algo, dtype):
    cfg, prepared, records, engines, buffers = _run(fabric, "allreduce", algo, dtype)
    assert data_ok(cfg, prepared, buffers)
    assert _same_as_executor(prepared, buffers)
    assert sum(e.errors for e in engines.engines) == 0
    assert (records.status == 0).all()


@pytest.mark.parametrize("fabric, op, algo, nbytes", [
    ("torus", "reducescatter", "dimwise", 2048),
    ("leaf-spine", "allgather", "ring", 2052),     # odd element counts: chunks cross words
    ("leaf-spine", "broadcast", "tree", 1024),
    ("torus", "alltoall", "direct", 1024),
    ("torus", "allreduce", "ring", 8),             # fewer elements than accelerators
])
def test_other_operations_are_exact(fabric, op, algo, nbytes):
    cfg, prepared, _, _, buffers = _run(fabric, op, algo, "fp32", nbytes)
    assert data_ok(cfg, prepared, buffers)
    assert _same_as_executor(prepared, buffers)


def test_wrong_data_is_caught():
    """The check can fail: one flipped bit in one accelerator's result is found."""
    cfg, prepared, _, _, buffers = _run("torus", "allreduce", "ring", "int32", 256)
    buffers[3][7] ^= 1
    assert not data_ok(cfg, prepared, buffers)


def test_engine_rules_hold_on_a_run():
    """Steps start in order, one a cycle, never before their wait is met; slots are
    applied in order, each taking at least the spec's apply cycles after the one before."""
    cfg, prepared, records, engines, _ = _run("torus", "allreduce", "halving-doubling",
                                              "fp32", 2048)
    D = cfg.rdma.dma_latency
    for engine in engines.engines:
        steps = prepared.schedule.steps[engine.accelerator]
        assert len(engine.started) == len(steps)
        assert all(a < b for a, b in zip(engine.started, engine.started[1:]))
        for step, start in zip(steps, engine.started):
            if step.wait:
                assert start > engine.applied_at[step.wait - 1]
        applied = engine.applied_at
        assert len(applied) == prepared.schedule.slots[engine.accelerator]
        mine = sorted((s.slot, s) for steps_ in prepared.schedule.steps for s in steps_
                      if s.peer == engine.accelerator)
        for k in range(1, len(applied)):
            words = words_of(mine[k][1].dst, mine[k][1].length)[1]
            assert applied[k] - applied[k - 1] >= apply_cycles(words, D)
        assert engine.done_at == max(applied[-1], engine.started[-1]) + 1
    # A chunk's WRITEs and its notification's SEND were all taken by the engines.
    assert (records.taken >= 0).all()
    assert len(records.rx_completions) == sum(prepared.schedule.slots)


def test_apply_cycles():
    """The notification read, then one word a cycle behind the memory's latency twice."""
    assert apply_cycles(0, 4) == 5
    assert apply_cycles(10, 4) == 19
    assert words_of(3, 4) == (1, 3) and words_of(2, 4) == (1, 2) and words_of(5, 0) == (2, 0)


def test_a_memory_too_small_is_one_line():
    cfg = _config("torus")
    with pytest.raises(ConfigError, match=r"rdma.memory_words = 2048: .* must be at least 4096"):
        prepare_collective(cfg, op="allreduce", algo="ring", nbytes=8192, dtype="int32",
                           seed=1)


def test_a_slot_never_filled_stalls_with_its_cause():
    """A schedule that lost a step leaves its peer's slot empty: the run stalls instead of
    finishing, and says which engine waits for what."""
    cfg = _config("torus")
    prepared = prepare_collective(cfg, op="allreduce", algo="ring", nbytes=256, dtype="int32",
                                  seed=1)
    s = prepared.schedule
    lost = replace(s, steps=(s.steps[0][:-1],) + s.steps[1:])
    records, engines, _ = run_collective(cfg, replace(prepared, schedule=lost), stall_limit=500)
    assert records.stalled
    victim = s.steps[0][-1].peer
    assert f"collective engine {victim}:" in records.stuck
    assert f"{s.slots[victim] - 1} of {s.slots[victim]} slots applied" in records.stuck
    assert not engines.engines[victim].done() and engines.engines[0].done()


def test_auto_runs_the_algorithm_it_predicts_fastest():
    cfg, prepared, _, engines, buffers = _run("torus", "allreduce", "auto", "int32", 64)
    model, peers = AlphaBeta.of(cfg), Peers(Topology.of(cfg))
    predicted = {a: model.predict(peers, "allreduce", a, 64) for a in ALGORITHMS
                 if supports(a, "allreduce", peers)}
    assert prepared.predicted == predicted[prepared.schedule.algorithm] == min(predicted.values())
    assert data_ok(cfg, prepared, buffers) and engines.completion_cycle > 0


@pytest.mark.parametrize("algo", ["ring", "dimwise", "halving-doubling"])
def test_segmented_allreduce_is_exact(algo):
    # One packet's payload a segment: the 64-element chunks of 2 KiB in three segments.
    cfg = _config("torus")
    prepared = prepare_collective(cfg, op="allreduce", algo=algo, nbytes=2048, dtype="fp32",
                                  seed=5, segment_packets=1)
    assert prepared.segment == 28
    records, engines, buffers = run_collective(cfg, prepared)
    assert not records.stalled, records.stuck
    assert data_ok(cfg, prepared, buffers) and _same_as_executor(prepared, buffers)


def test_a_long_apply_is_progress():
    """Whole chunks: once halving-doubling's first exchange has landed, nothing moves on the
    fabric while every apply unit adds its 256 words; the run goes on all the same."""
    cfg = _config("torus", "rdma.memory_words=4096")
    prepared = prepare_collective(cfg, op="allreduce", algo="halving-doubling", nbytes=4096,
                                  dtype="int32", seed=1)
    assert apply_cycles(256, cfg.rdma.dma_latency) > 200
    records, _, buffers = run_collective(cfg, prepared, stall_limit=200)
    assert not records.stalled, records.stuck
    assert data_ok(cfg, prepared, buffers)
