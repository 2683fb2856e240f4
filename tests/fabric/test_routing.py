"""The routing logic (hdl/fabric/routing.py) against superfabric.network.routing, exhaustively.

Every router of the tier, every source and every destination endpoint, under
Amaranth's simulator, with random classes and credit counters drawn around
the virtual cut-through threshold (so the adaptive choices, the escape and
the ties between VCs and ports all happen): the RTL's output port and VC
must be the routing function's, and an adaptive choice's ``room`` the
credits of its (output, class, VC).
"""

import numpy as np
import pytest
from amaranth.sim import Simulator

from superfabric.network import routing
from superfabric.config import FabricConfig
from superfabric.hdl.fabric.routing import Routing
from superfabric.network.topology import LEAF, SPINE, TORUS_ROUTER, Topology

TORUS = ["fabric.topology=torus", "switch.priorities=2", "switch.max_packet_flits=4",
         "fabric.vc_buffer_flits=6"]
FAT_TREE = ["fabric.topology=fat_tree", "fabric.leaves=3", "fabric.spines=3",
            "fabric.hosts_per_leaf=2", "switch.priorities=3", "switch.max_packet_flits=4",
            "fabric.vc_buffer_flits=6"]

# name -> (overrides, router tier)
CASES = {
    "torus-3x4-m2-dor-2vc": (TORUS + ["fabric.dims=[3, 4]", "fabric.endpoints_per_router=2"],
                             TORUS_ROUTER),
    "torus-4x3-dor-4vc": (TORUS + ["fabric.dims=[4, 3]", "fabric.vcs=4"], TORUS_ROUTER),
    "torus-2x2x3-dor-1vc": (TORUS + ["fabric.dims=[2, 2, 3]", "fabric.vcs=1",
                                     "fabric.allow_deadlock=true"], TORUS_ROUTER),
    "torus-5-m3-adaptive-3vc": (TORUS + ["fabric.dims=[5]", "fabric.endpoints_per_router=3",
                                         "fabric.routing=adaptive", "fabric.vcs=3"],
                                TORUS_ROUTER),
    "torus-4x2x2-adaptive-4vc": (TORUS + ["fabric.dims=[4, 2, 2]", "fabric.routing=adaptive",
                                          "fabric.vcs=4"], TORUS_ROUTER),
    # The longest remaining dimension is often not dimension order's (dimension 1).
    "torus-2x5-adaptive-3vc": (TORUS + ["fabric.dims=[2, 5]", "fabric.routing=adaptive",
                                        "fabric.vcs=3"], TORUS_ROUTER),
    # Room for another direction to lead dimension order by more than dor_margin.
    "torus-3x3-adaptive-deep": (TORUS + ["fabric.dims=[3, 3]", "fabric.routing=adaptive",
                                         "fabric.vcs=3", "fabric.vc_buffer_flits=12"],
                                TORUS_ROUTER),
    "leaf-ecmp-2vc": (FAT_TREE + ["fabric.routing=ecmp"], LEAF),
    "spine-ecmp-2vc": (FAT_TREE + ["fabric.routing=ecmp"], SPINE),
    "leaf-adaptive-3vc": (FAT_TREE + ["fabric.routing=adaptive", "fabric.vcs=3"], LEAF),
    "leaf-ecmp-big": (["fabric.topology=fat_tree", "fabric.leaves=5", "fabric.spines=5",
                       "fabric.hosts_per_leaf=6", "fabric.routing=ecmp"], LEAF),
}


def _expected(cfg, topo, r, src, dst, prio, credits):
    f = cfg.fabric
    if topo.kind == "torus":
        return routing.torus_route(topo.dims, topo.endpoints_per_router, r, src, dst, prio,
                                   f.vcs, int(f.routing == "adaptive"), credits,
                                   cfg.switch.max_packet_flits)
    return routing.fat_tree_route(topo.leaves, topo.spines, topo.hosts_per_leaf, r, src, dst,
                                  prio, f.vcs, int(f.routing == "adaptive"), credits)


@pytest.mark.parametrize("name", sorted(CASES))
def test_routing_logic_is_the_routing_function(name):
    overrides, kind = CASES[name]
    cfg = FabricConfig.load(overrides=overrides)
    topo = Topology.of(cfg)
    dut = Routing(cfg, kind)
    routers = [r for r in range(topo.routers) if topo.router_kind(r) == kind]
    ports, links = topo.ports(routers[0]), topo.ports(routers[0]) - topo.endpoint_ports(routers[0])
    p, v, m = cfg.switch.priorities, cfg.fabric.vcs, topo.endpoint_ports(routers[0])
    threshold, room = cfg.switch.max_packet_flits, cfg.fabric.vc_buffer_flits
    rng = np.random.default_rng(12)
    # Around the threshold, and equal values often, so that ties are tested.
    levels = np.array([0, threshold - 1, threshold, threshold + 1, room])
    counted = {"cases": 0, "adaptive": 0}

    async def bench(ctx):
        for r in routers:
            ctx.set(dut.router_id, r)
            for src in range(topo.endpoints):
                for dst in range(topo.endpoints):
                    prio = int(rng.integers(p))
                    credits = np.zeros((ports, p, v), np.int64)
                    credits[m:] = levels[rng.integers(len(levels), size=(links, p, v))]
                    ctx.set(dut.src, src)
                    ctx.set(dut.dst, dst)
                    ctx.set(dut.prio, prio)
                    for j in range(links):
                        for q in range(p):
                            for c in range(v):
                                ctx.set(dut.credits[j][q][c], int(credits[m + j, q, c]))
                    want = _expected(cfg, topo, r, src, dst, prio, credits)
                    got = (ctx.get(dut.out), ctx.get(dut.vc))
                    assert got == tuple(int(x) for x in want), (r, src, dst, prio, credits[m:])
                    adaptive = int(want[1]) >= routing.ESCAPE_VCS
                    if adaptive and kind == TORUS_ROUTER and cfg.fabric.routing == "adaptive":
                        # The room an adaptive choice books from (the router's check
                        # against the lower inputs' bookings).
                        assert ctx.get(dut.room) == credits[want[0], prio, want[1]], \
                            (r, src, dst, prio, credits[m:])
                    counted["cases"] += 1
                    counted["adaptive"] += adaptive

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    assert counted["cases"] == len(routers) * topo.endpoints ** 2
    if cfg.fabric.routing == "adaptive" and kind == TORUS_ROUTER:
        # Both ways out of the adaptive choice were taken.
        assert 0 < counted["adaptive"] < counted["cases"]

