"""RDMA engines at every accelerator of a torus and a leaf-spine (section 10.15), model side:
every workload completes with the status it was generated for and the memories the
scoreboard expects; congestion is signalled over several hops; the all-to-all exchanges
a block between every pair."""

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.formats import rdma_wire as wire
from superfabric.network.topology import Topology
from superfabric.formats.rdma_wire import ACCESS_REMOTE_WRITE
from superfabric.sim.rdma.fabric import RdmaFabricModel
from superfabric.sim.rdma.metrics import rdma_summary
from superfabric.sim.rdma.keys import KeyTable
from superfabric.sim.rdma.traffic import BAD_KINDS, WR_COLUMNS, generate_rdma
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


# -- accelerators with several ports (section 11.2) -------------------------------------

#: Four accelerators of two ports each: on a 2x2 torus both on the accelerator's router,
#: on the 4-leaf leaf-spine one per rail of two leaves.
TWO_PORTS = {
    "torus": ["fabric.topology=torus", "fabric.dims=[2, 2]", "fabric.endpoints_per_router=2"],
    "leaf-spine": FABRICS["leaf-spine"],
}


def _two_ports(fabric, case, *, bad_fraction=0.0):
    overrides, pattern, load, cycles = CASES[case]
    cfg = FabricConfig.load(preset="tiny", overrides=BASE + TWO_PORTS[fabric] + overrides
                            + ["fabric.ports_per_accelerator=2"])
    workload = generate_rdma(cfg, pattern, load=load, cycles=cycles, seed=3,
                             bad_fraction=bad_fraction)
    return cfg, workload, RdmaFabricModel(cfg).run(workload)


@pytest.mark.parametrize("fabric", sorted(TWO_PORTS))
@pytest.mark.parametrize("case", ["uniform-faults", "incast-congested", "alltoall"])
def test_two_ports_per_accelerator_are_rails(fabric, case):
    """Every port's engine posts to the same port of another accelerator only, its remote
    regions admit exactly those, and every request completes with its status and memory."""
    cfg, workload, rec = _two_ports(fabric, case,
                                    bad_fraction=0.2 if case == "uniform-faults" else 0)
    topo = Topology.of(cfg)
    assert (cfg.endpoints, cfg.accelerators, workload.accelerators) == (8, 4, 4)
    accelerator = np.array(topo.endpoint_accelerator)
    port = {e: k for ports in topo.accelerator_ports for k, e in enumerate(ports)}
    wr = workload.wr
    to_self = [kind for kind, _ in BAD_KINDS].index("self") + 1
    peers = wr["bad_kind"] != to_self
    for s, d in zip(wr["src"][peers].tolist(), wr["dst"][peers].tolist()):
        assert port[s] == port[d] and accelerator[s] != accelerator[d]
    for e in range(cfg.endpoints):
        table = KeyTable(workload.keys[e], workload.page_table[e], cfg)
        # The remote region: remote write only, the largest such region.
        writable = workload.keys[e][workload.keys[e, :, 5] == ACCESS_REMOTE_WRITE]
        _, key, va = (int(v) for v in writable[writable[:, 3].argmax(), :3])
        admitted = [p for p in range(cfg.endpoints)
                    if table.allowed(key, va, 1, ACCESS_REMOTE_WRITE, p)]
        assert admitted == sorted(topo.accelerator_ports[a][port[e]] for a in range(4)
                                  if a != accelerator[e])
    assert verify(cfg, workload, rec) == [] and not rec.stalled


def test_rails_draw_their_own_requests_and_tables():
    """Port 0's rail is the one-port workload of the same seed; port 1's differs in tables,
    memory and requests."""
    cfg, workload, _ = _two_ports("torus", "uniform-faults", bad_fraction=0.2)
    rail0, rail1 = (list(r) for r in zip(*Topology.of(cfg).accelerator_ports))
    assert not np.array_equal(workload.memory[rail0], workload.memory[rail1])
    assert not np.array_equal(workload.page_table[rail0], workload.page_table[rail1])
    mine = np.isin(workload.wr["src"], rail0)
    assert mine.sum() and (~mine).sum()
    # Rail 0 of four accelerators draws what a fabric of four one-port accelerators would.
    four = FabricConfig.load(preset="tiny", overrides=BASE + ["fabric.topology=torus",
                                                              "fabric.dims=[2, 2]"]
                             + CASES["uniform-faults"][0] + ["rdma.qps=4"])
    alone = generate_rdma(four, "rdma-uniform", load=0.3, cycles=800, seed=3, bad_fraction=0.2)
    assert np.array_equal(workload.memory[rail0], alone.memory)
    assert np.array_equal(workload.page_table[rail0], alone.page_table)
    for column in set(WR_COLUMNS) - {"src", "dst", "tag"}:
        assert np.array_equal(workload.wr[column][mine], alone.wr[column]), column
    for column in ("src", "dst"):
        assert np.array_equal(workload.wr[column][mine], np.array(rail0)[alone.wr[column]])


def test_results_count_per_port_and_per_accelerator():
    """An incast into accelerator 0 over both its ports: the congestion names the
    accelerator and its ports, and the accelerators' figures are their ports' sums."""
    cfg, workload, rec = _two_ports("leaf-spine", "incast-congested")
    rd = rdma_summary(cfg, workload, rec)
    c, acc, port = rd["congestion"], rd["per_accelerator"], rd["per_endpoint"]
    assert (c["target"], c["target_ports"], c["senders"]) == (0, [0, 4], [1, 2, 3])
    assert acc["ports"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    for name in ("offered_words", "goodput"):
        assert acc[name] == pytest.approx([port[name][a] + port[name][a + 4] for a in range(4)])
    assert acc["goodput"][0] == 0 and min(acc["goodput"][1:]) > 0
    assert sum(c["goodput_per_sender"]) == pytest.approx(sum(acc["goodput"]))
    assert c["queue"]["max"] > 0 and len(rec.pfc_frames)
    # Per router: the leaves' engines, nothing at the spines, the totals kept.
    routers = rd["per_router"]
    assert routers["endpoints"] == [[0, 1], [2, 3], [4, 5], [6, 7], [], []]
    assert sum(routers["pause_frames"]) == len(rec.pfc_frames) > 0
    assert routers["pause_frames"][0] > 0 and routers["pause_frames"][2] > 0   # the target's
    for name in ("retransmissions", "ecn_marked", "cnp_sent", "cnp_handled"):
        assert sum(routers[name]) == sum(rec.counters[name]) and routers[name][4:] == [0, 0]


def test_links_carry_every_delivered_flit_once_per_hop():
    """The links' flit counts (``link_flits``, the report's heatmap): on the 2x2x2 torus by
    dimension order, a packet crosses one link per coordinate its source's and target's
    routers differ in, so the links carried every delivered packet's flits once per hop;
    the summary's ``links`` are the topology's with their flits per cycle."""
    cfg, workload, rec = _run("torus", "alltoall")
    topo = Topology.of(cfg)
    src, dst, flits = rec.delivered[:, 2], rec.delivered[:, 1], rec.delivered[:, 3]
    hops = np.array([sum(a != b for a, b in zip(topo.coords(topo.endpoint_router(int(s))),
                                               topo.coords(topo.endpoint_router(int(d)))))
                     for s, d in zip(src, dst)])
    assert len(rec.link_flits) == len(topo.links)
    assert rec.link_flits.sum() == (flits * hops).sum() > 0
    links = rdma_summary(cfg, workload, rec)["links"]
    assert links["links"] == [list(link) for link in topo.links]
    assert links["utilisation"] == (rec.link_flits / rec.cycles).tolist()
