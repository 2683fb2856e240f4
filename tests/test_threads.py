"""The model's threads (sim/threads.py): the barrier, and a fabric's routers stepped on
several threads giving the very run one thread gives (docs/spec/timing.md 5.9)."""

import threading

import numpy as np
import pytest
from numba import njit

from superfabric.config import FabricConfig
from superfabric.network.topology import Topology
from superfabric.sim.backpressure import SinkReady
from superfabric.sim.collective.fabric import prepare_collective, run_collective
from superfabric.sim.fabric.top import FabricModel
from superfabric.sim.pfc import pause_sources
from superfabric.sim.rdma.fabric import RdmaFabricModel
from superfabric.sim.rdma.traffic import generate_rdma
from superfabric.sim.threads import GENERATION, SYNC_WORDS, barrier, usable_threads
from superfabric.sim.traffic import generate

from conftest import CONGESTED, RDMA_SMALL


@njit(nogil=True)
def _rounds(sync, part, parts, board, seen, rounds):
    # Each round every thread writes its slot, passes the barrier, then reads every
    # other slot: it must see this round's values, never last round's.
    for k in range(rounds):
        board[part] = k * parts + part
        barrier(sync, parts)
        for other in range(parts):
            if board[other] != k * parts + other:
                seen[part] += 1
        barrier(sync, parts)


@pytest.mark.parametrize("parts", [2, 3])
def test_no_thread_passes_the_barrier_before_the_others_reach_it(parts):
    sync = np.zeros(SYNC_WORDS, np.int64)
    board, seen = np.full(parts, -1, np.int64), np.zeros(parts, np.int64)
    helpers = [threading.Thread(target=_rounds, args=(sync, k, parts, board, seen, 20_000))
               for k in range(1, parts)]
    for helper in helpers:
        helper.start()
    _rounds(sync, 0, parts, board, seen, 20_000)
    for helper in helpers:
        helper.join()
    assert seen.tolist() == [0] * parts
    assert sync[GENERATION] == 2 * 20_000        # every barrier opened once


def test_threads_are_at_most_one_a_router():
    assert usable_threads(4, 1) == 1
    assert usable_threads(2, 64) == 2
    assert usable_threads(8, 6) == 6
    assert FabricModel(FabricConfig.load(), threads=4).threads == 1     # the switch


def _records(rec) -> dict:
    return {name: value for name, value in vars(rec).items()
            if name not in ("trace",)}


def _same(a, b):
    assert a.keys() == b.keys()
    for name in a:
        if isinstance(a[name], np.ndarray):
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
        else:
            assert a[name] == b[name], name


_PFC_ECN = ["pfc.enabled=true", "switch.ingress_full=drop", "ecn.enabled=true", "ecn.kmin=16",
            "ecn.kmax=64", "ecn.pmax=0.2", "pfc.priorities=[0, 1]"]

#: name -> (overrides, pattern, load, cycles, lengths, sink stall, pause rate, stall limit):
#: adaptive torus routing with PFC frames and ECN marks, ECMP on a leaf-spine with drops,
#: dimension order on a 3-D torus with stalling sinks, and a run that stalls.
CASES = {
    "torus-adaptive-pfc-ecn": (["fabric.topology=torus", "fabric.dims=[4, 3]",
                                "fabric.endpoints_per_router=2", "fabric.routing=adaptive",
                                "fabric.vcs=3", "switch.priorities=2"] + _PFC_ECN,
                               "uniform", 0.7, 1500, "bimodal:1,8,0.5", 0.1, 0.0, None),
    "leaf-spine-ecmp-drops": (["fabric.topology=fat_tree", "fabric.leaves=4", "fabric.spines=2",
                               "fabric.hosts_per_leaf=3", "fabric.routing=ecmp", "switch.ingress_full=drop",
                               "switch.buffer_flits=48"],
                              "hotspot", 0.9, 1500, "bimodal:1,16,0.6", 0.2, 0.0, None),
    "torus3d-dor-stalls": (["fabric.topology=torus", "fabric.dims=[3, 3, 2]"], "tornado", 0.6,
                           1200, "fixed:4", 0.3, 0.0, None),
    "torus-stalled": (["fabric.topology=torus", "fabric.dims=[4, 2]"], "uniform", 0.9, 800,
                      "fixed:4", 0.0, 0.95, 40),
}


def _run(name: str, threads: int):
    overrides, pattern, load, cycles, lengths, stall, pause_rate, stall_limit = CASES[name]
    cfg = FabricConfig.load(overrides=overrides)
    trace = generate(cfg, pattern, load=load, cycles=cycles, seed=5, packet_lengths=lengths,
                     ect_fraction=0.5)
    pause, sink_pause = pause_sources(cfg, pause_rate, 5)
    kwargs = {} if stall_limit is None else {"stall_limit": stall_limit}
    model = FabricModel(cfg, threads=threads)
    rec = model.run(trace, sink=SinkReady(cfg.endpoints, stall, 5), pause=pause,
                    sink_pause=sink_pause, **kwargs)
    return model, rec


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_routers_on_several_threads_run_as_on_one(name):
    _, one = _run(name, 1)
    for threads in (2, 3):
        model, rec = _run(name, threads)
        assert model.threads == threads
        _same(_records(one), _records(rec))


def test_the_cases_exercise_what_they_claim():
    # What a later part merges (spec 5.9) must happen in its routers: pause frames, drops.
    model, rec = _run("torus-adaptive-pfc-ecn", 2)
    half = model.topology.routers // 2
    assert any(model.topology.endpoint_router(int(e)) >= half for e in rec.pfc_frames[:, 1])
    assert (rec.ecn_out == 3).any()
    model, rec = _run("leaf-spine-ecmp-drops", 2)
    first_port = model.state.base[model.topology.routers // 2]
    assert np.any(np.array(rec.counters["drops"])[first_port:]) and not rec.stalled
    _, rec = _run("torus-stalled", 2)
    assert rec.stalled


_RDMA = RDMA_SMALL + ["rdma.retransmit_timeout=256", "rdma.memory_words=4096"]
_LEAF_SPINE = ["fabric.topology=fat_tree", "fabric.leaves=4", "fabric.spines=2",
               "fabric.hosts_per_leaf=2", "fabric.routing=ecmp"]
#: name -> (overrides, pattern, load, cycles): go-back-N over drops on a torus, and an
#: incast under PFC, ECN and DCQCN on a leaf-spine (pause frames, CNPs, rate changes).
RDMA_CASES = {
    "torus-allreduce-drops": (["fabric.topology=torus", "fabric.dims=[2, 2, 2]",
                               "faults.drop_rate=0.05"], "rdma-allreduce", 0.3, 800),
    "leaf-spine-incast-congested": (_LEAF_SPINE + CONGESTED, "rdma-incast", 0.6, 400),
}


def _rdma_run(name: str, threads: int):
    overrides, pattern, load, cycles = RDMA_CASES[name]
    cfg = FabricConfig.load(preset="tiny", overrides=_RDMA + overrides)
    workload = generate_rdma(cfg, pattern, load=load, cycles=cycles, seed=3)
    model = RdmaFabricModel(cfg, threads=threads)
    return model, model.run(workload)


@pytest.mark.parametrize("name", sorted(RDMA_CASES))
def test_the_rdma_fabric_on_several_threads_runs_as_on_one(name):
    _, one = _rdma_run(name, 1)
    assert not one.stalled
    for threads in (2, 3):
        model, rec = _rdma_run(name, threads)
        assert model.threads == threads
        _same(_records(one), _records(rec))


def test_the_rdma_cases_exercise_what_they_claim():
    # Pause frames from the second half's routers, CNPs and drops: what part 0 merges.
    cfg = FabricConfig.load(preset="tiny", overrides=_RDMA + RDMA_CASES[
        "leaf-spine-incast-congested"][0])
    topo = Topology.of(cfg)
    _, rec = _rdma_run("leaf-spine-incast-congested", 2)
    assert len(rec.pfc_frames) and len(rec.cnps)
    assert any(topo.endpoint_router(int(e)) >= topo.routers // 2 for e in rec.pfc_frames[:, 1])
    _, rec = _rdma_run("torus-allreduce-drops", 2)
    assert sum(rec.counters["retransmissions"]) > 0


def test_a_collective_on_several_threads_runs_as_on_one():
    cfg = FabricConfig.load(overrides=[o for o in RDMA_SMALL if not o.startswith("rdma.qps=")]
                            + ["rdma.qps=64", "rdma.retransmit_timeout=256",
                               "fabric.topology=torus", "fabric.dims=[2, 2, 2]"])
    prepared = prepare_collective(cfg, op="allreduce", algo="dimwise", nbytes=2048,
                                  dtype="fp32", seed=5)
    runs = [run_collective(cfg, prepared, threads=threads) for threads in (1, 2)]
    (one, engines_one, buffers_one), (two, engines_two, buffers_two) = runs
    assert not one.stalled
    _same(_records(one), _records(two))
    assert engines_one.completion_cycle == engines_two.completion_cycle
    for a, b in zip(buffers_one, buffers_two):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
