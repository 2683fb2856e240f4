"""RDMA engines at every accelerator of a torus and a leaf-spine (section 10.15), model side:
every workload completes with the status it was generated for and the memories the
scoreboard expects; congestion is signalled over several hops; the all-to-all exchanges
a block between every pair."""

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.formats import rdma_wire as wire
from superfabric.network.topology import Topology
from superfabric.sim.rdma.fabric import RdmaFabricModel
from superfabric.sim.rdma.traffic import generate_rdma
from superfabric.tb.rdma.scoreboard import verify

from conftest import CONGESTED, RDMA_SMALL

BASE = RDMA_SMALL + ["rdma.retransmit_timeout=256", "rdma.memory_words=4096"]
#: 8 accelerators each: a 2x2x2 torus, and 4 leaves of 2 hosts under 2 spines.
FABRICS = {
    "torus": ["fabric.topology=torus", "fabric.dims=[2, 2, 2]"],
    "leaf-spine": ["fabric.topology=fat_tree", "fabric.leaves=4", "fabric.spines=2",
                   "fabric.hosts_per_leaf=2", "fabric.routing=ecmp"],
}
CASES = {
    "allreduce-drops": (["faults.drop_rate=0.01"], "rdma-allreduce", 0.3, 800),
    "uniform-faults": (["faults.drop_rate=0.03", "faults.duplicate_rate=0.02",
                        "faults.reorder_rate=0.02", "faults.corrupt_rate=0.02"],
                       "rdma-uniform", 0.3, 800),
    "incast-congested": (CONGESTED, "rdma-incast", 0.6, 400),
    "alltoall": (["rdma.qps=56"], "rdma-alltoall", 0.3, 800),
}


def _run(fabric, case, *, bad_fraction=0.0):
    overrides, pattern, load, cycles = CASES[case]
    cfg = FabricConfig.load(preset="tiny", overrides=BASE + FABRICS[fabric] + overrides)
    workload = generate_rdma(cfg, pattern, load=load, cycles=cycles, seed=3,
                             bad_fraction=bad_fraction)
    return cfg, workload, RdmaFabricModel(cfg).run(workload)


@pytest.mark.parametrize("fabric", sorted(FABRICS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_workloads_complete_on_fabrics(fabric, case):
    """Every request completes once with its expected status, in per-QP order, and
    every target memory holds what the requests wrote (the scoreboard's own checks)."""
    cfg, workload, rec = _run(fabric, case, bad_fraction=0.2 if case == "uniform-faults" else 0)
    assert cfg.endpoints == 8
    assert verify(cfg, workload, rec) == []
    assert not rec.stalled
    if case == "uniform-faults":
        assert sum(rec.counters["retransmissions"]) > 0
        assert {wire.STATUS_OK, wire.STATUS_REMOTE} <= set(rec.status.tolist())


def test_packets_cross_several_routers():
    """On the torus the packets take multi-hop paths: a delivered packet's source and
    target are on different routers, up to three hops apart."""
    cfg, workload, rec = _run("torus", "alltoall")
    topo = Topology.of(cfg)
    delivered = rec.delivered
    src, dst = delivered[:, 2], delivered[:, 1]
    hops = [sum(a != b for a, b in zip(topo.coords(topo.endpoint_router(int(s))),
                                      topo.coords(topo.endpoint_router(int(d)))))
            for s, d in zip(src, dst)]
    assert set(hops) == {1, 2, 3}


def test_congestion_is_signalled_over_hops():
    """An incast with PFC, ECN and DCQCN on the torus: packets marked CE on the way, CNPs
    back to senders one and more hops away, rates cut, pause frames sent."""
    cfg, workload, rec = _run("torus", "incast-congested")
    topo = Topology.of(cfg)
    target = int(workload.describe()["target"])
    assert len(rec.cnps) and len(rec.rates) and len(rec.pfc_frames)
    cut = set(rec.rates[:, 1].tolist())       # engines whose rates changed

    def distance(e):
        a, b = topo.coords(topo.endpoint_router(e)), topo.coords(topo.endpoint_router(target))
        return sum(x != y for x, y in zip(a, b))

    assert {distance(e) for e in cut} >= {1, 2}


def test_alltoall_exchanges_every_pair():
    """rdma-alltoall: every ordered pair of accelerators carries a good WRITE, each QP
    talks to one peer only, and every step is a permutation."""
    cfg, workload, rec = _run("leaf-spine", "alltoall")
    wr, E = workload.wr, cfg.endpoints
    pairs = set(zip(wr["src"].tolist(), wr["dst"].tolist()))
    assert pairs == {(s, d) for s in range(E) for d in range(E) if s != d}
    peers = {}
    for s, q, d in zip(wr["src"].tolist(), wr["qp"].tolist(), wr["dst"].tolist()):
        assert peers.setdefault((s, q), d) == d
    for post in np.unique(wr["post"]):
        step = wr["post"] == post
        targets = {}
        for s, d in zip(wr["src"][step].tolist(), wr["dst"][step].tolist()):
            targets.setdefault(s, d)
        assert sorted(targets.values()) == sorted(targets)
    assert verify(cfg, workload, rec) == []
