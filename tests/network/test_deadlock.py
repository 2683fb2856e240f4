"""Deadlock freedom checked on the escape channel dependency graph (docs/architecture.md 11.6)."""

import random
import subprocess
import sys

import networkx as nx
import pytest

from superfabric.config import ConfigError, FabricConfig
from superfabric.network.deadlock import _acyclic, dependency_cycle, escape_dependencies
from superfabric.network.routing import class_vcs, torus_dor_hop
from superfabric.network.topology import Topology


def every_path_dependencies(topo: Topology, routing: str, vcs: int) -> set:
    """The escape graph by its definition: every consecutive pair of hops of the
    dimension-order path between every two routers, walked hop by hop."""
    adaptive = routing == "adaptive"
    edges = set()
    for s in range(topo.routers):
        for t in range(topo.routers):
            x, held = s, ()
            while x != t:
                port, upper = torus_dor_hop(topo.dims, topo.endpoints_per_router, x, s, t,
                                            adaptive)
                link = topo.link_id[(x, port)]
                now = [(link, vc) for vc in range(*class_vcs(upper, vcs, adaptive))]
                edges.update((a, b) for a in held for b in now)
                held, x = now, topo.links[link][2]
    return edges


@pytest.mark.parametrize("dims, m, routing, vcs", [
    ((6,), 1, "dor", 1), ((5,), 2, "dor", 2), ((2, 2), 1, "dor", 1), ((5, 3), 1, "dor", 4),
    ((4, 8), 1, "adaptive", 3), ((3, 4, 2), 2, "dor", 2), ((4, 3, 5), 1, "adaptive", 4),
    ((3, 5, 4), 1, "dor", 3), ((2, 3, 2, 3), 1, "adaptive", 3)])
def test_the_torus_graph_is_every_path_s_consecutive_hops(dims, m, routing, vcs):
    # The check enumerates paths along one dimension and their turns (section 11.6);
    # it must find exactly the dependencies of every path walked hop by hop.
    topo = Topology("torus", dims=dims, endpoints_per_router=m)
    assert escape_dependencies(topo, routing, vcs) == every_path_dependencies(topo, routing, vcs)


def test_one_vc_ring_has_the_cycle_around_the_ring():
    topo = Topology("torus", dims=(6,), endpoints_per_router=1)
    cycle = dependency_cycle(topo, "dor", 1)
    assert cycle is not None and len(cycle) == 6
    ports = {topo.links[link][1] for link, _ in cycle}
    assert len(ports) == 1 and {vc for _, vc in cycle} == {0}


@pytest.mark.parametrize("dims, routing, vcs", [((4, 4, 4), "dor", 2), ((5, 3), "dor", 4),
                                                ((4, 4, 4), "adaptive", 3), ((8, 8), "dor", 2),
                                                ((3, 3, 3), "adaptive", 5),
                                                ((4, 8, 6), "adaptive", 3)])
def test_dateline_and_escape_vcs_are_acyclic(dims, routing, vcs):
    topo = Topology("torus", dims=dims, endpoints_per_router=1)
    assert dependency_cycle(topo, routing, vcs) is None


@pytest.mark.parametrize("seed", range(40))
def test_the_acyclic_check_agrees_with_networkx(seed):
    # Sparse to dense random graphs, self-loops and all: half of them have cycles.
    rng = random.Random(seed)
    nodes = rng.randint(1, 30)
    edges = {(rng.randrange(nodes), rng.randrange(nodes))
             for _ in range(rng.randint(0, 3 * nodes))}
    if seed % 2:
        # Edges that only go up an order: acyclic, however many.
        edges = {(a, b) for a, b in edges if a < b}
    assert _acyclic(edges) == nx.is_directed_acyclic_graph(nx.DiGraph(edges)), edges


def test_an_acyclic_fabric_loads_without_networkx():
    # networkx is for naming the cycle of a refused configuration; a run's configuration
    # load does not pay for importing it.
    code = ("import sys; from superfabric.config import FabricConfig; "
            "FabricConfig.load(overrides=['fabric.topology=torus', 'fabric.dims=[4, 4, 4]']); "
            "print('networkx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_the_adaptive_escape_graph_turns_from_the_long_ring_to_the_short_one():
    # The escape of adaptive routing takes the longest ring first (section 11.4): on
    # the 4x8 its channels wait from dimension 1 on dimension 0, never the other way.
    topo = Topology("torus", dims=(4, 8), endpoints_per_router=1)
    dim = {k: (port - 1) // 2 for k, (_, port, _, _) in enumerate(topo.links)}
    turns = {(dim[a], dim[b]) for (a, _), (b, _) in escape_dependencies(topo, "adaptive", 3)}
    assert turns == {(1, 1), (0, 0), (1, 0)}
    turns = {(dim[a], dim[b]) for (a, _), (b, _) in escape_dependencies(topo, "dor", 2)}
    assert turns == {(1, 1), (0, 0), (0, 1)}


def test_rings_of_two_cannot_deadlock_even_with_one_vc():
    topo = Topology("torus", dims=(2, 2), endpoints_per_router=1)
    assert dependency_cycle(topo, "dor", 1) is None


def test_fat_tree_up_down_is_acyclic():
    topo = Topology("fat_tree", leaves=4, spines=2, hosts_per_leaf=2)
    edges = escape_dependencies(topo, "ecmp", 1)
    # Every dependency is an uplink waiting on a downlink.
    assert edges and all(topo.links[a][0] < 4 <= topo.links[b][0] for (a, _), (b, _) in edges)
    assert dependency_cycle(topo, "ecmp", 1) is None


def test_one_vc_torus_is_refused_in_one_line_naming_the_cycle():
    with pytest.raises(ConfigError) as info:
        FabricConfig.load(overrides=["fabric.topology=torus", "fabric.vcs=1"])
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("fabric.vcs = 1: the torus's channel dependency graph has a cycle")
    assert "router" in message and " -> " in message and "allow_deadlock" in message


def test_the_override_lets_a_deadlocking_configuration_load():
    cfg = FabricConfig.load(overrides=["fabric.topology=torus", "fabric.vcs=1",
                                       "fabric.allow_deadlock=true"])
    assert cfg.fabric.vcs == 1 and cfg.endpoints == 64


@pytest.mark.parametrize("overrides, fragment", [
    (["fabric.topology=fat_tree"], "fabric.routing = 'dor': must be 'ecmp' or 'adaptive'"),
    (["fabric.topology=torus", "fabric.routing=adaptive"], "fabric.vcs = 2: must be at least 3"),
    (["fabric.topology=torus", "fabric.vc_buffer_flits=8"],
     "fabric.vc_buffer_flits = 8: must be at least switch.max_packet_flits (16)"),
    (["fabric.topology=torus", "fabric.dims=[4, 17]"], "fabric.dims = [4, 17]: must be a list"),
    (["fabric.topology=torus", "fabric.dims=[]"], "fabric.dims = []"),
    (["fabric.link_latency=0"], "fabric.link_latency = 0"),
    (["fabric.topology=torus", "fabric.dims=[16, 16, 8]"], "2048 endpoints, must be at most 1024"),
    (["fabric.topology=mesh"], "fabric.topology = 'mesh'"),
    (["fabric.topology=torus", "fabric.dims=[2, 2, 2]", "rdma.enabled=true", "rdma.qps=12"],
     "rdma.qps = 12: must be a multiple of the endpoints (8"),
])
def test_bad_fabric_values_are_one_line(overrides, fragment):
    with pytest.raises(ConfigError) as info:
        FabricConfig.load(overrides=overrides)
    assert "\n" not in str(info.value) and fragment in str(info.value), str(info.value)
