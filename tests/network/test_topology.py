"""The fabric's numbering and wiring (superfabric.network.topology, docs/architecture.md 11.2)."""

import pytest

from superfabric.config import FabricConfig
from superfabric.network.topology import ENDPOINT, LEAF, SPINE, Topology


def test_switch_is_one_router_of_endpoint_ports():
    topo = Topology.of(FabricConfig.load())
    assert (topo.routers, topo.endpoints, topo.ports(0), topo.links) == (1, 8, 8, ())
    assert all(topo.peer(0, p) is ENDPOINT for p in range(8))


@pytest.mark.parametrize("dims, m", [((4, 4, 4), 1), ((8, 8, 6), 1), ((2, 3), 2), ((5,), 3)])
def test_torus_counts_and_wiring(dims, m):
    topo = Topology("torus", dims=dims, endpoints_per_router=m)
    routers = 1
    for k in dims:
        routers *= k
    assert topo.routers == routers and topo.endpoints == routers * m
    assert len(topo.links) == routers * 2 * len(dims)
    for r in range(routers):
        assert topo.router_at(topo.coords(r)) == r
        assert topo.ports(r) == m + 2 * len(dims) and topo.endpoint_ports(r) == m
        for p in range(m, topo.ports(r)):
            peer, port = topo.peer(r, p)
            d, minus = divmod(p - m, 2)
            # The peer is one step along dimension d, and its port faces back.
            x, y = topo.coords(r), topo.coords(peer)
            step = -1 if minus else 1
            assert y[d] == (x[d] + step) % dims[d]
            assert all(y[j] == x[j] for j in range(len(dims)) if j != d)
            assert port == m + 2 * d + (1 - minus)
    for e in range(topo.endpoints):
        assert topo.endpoint_router(e) * m + topo.endpoint_port(e) == e
        assert e in topo.router_endpoints(topo.endpoint_router(e))
    assert [e for r in range(routers) for e in topo.router_endpoints(r)] == \
        list(range(topo.endpoints))


def test_fat_tree_counts_and_wiring():
    topo = Topology("fat_tree", leaves=8, spines=4, hosts_per_leaf=8)
    assert (topo.routers, topo.endpoints, len(topo.links)) == (12, 64, 64)
    assert [topo.router_kind(r) for r in (0, 7, 8, 11)] == [LEAF, LEAF, SPINE, SPINE]
    assert (topo.ports(0), topo.ports(8), topo.endpoint_ports(8)) == (12, 8, 0)
    for leaf in range(8):
        for s in range(4):
            assert topo.peer(leaf, 8 + s) == (8 + s, leaf)
            assert topo.peer(8 + s, leaf) == (leaf, 8 + s)
    assert topo.endpoint_router(63) == 7 and topo.endpoint_port(63) == 7
    assert topo.router_endpoints(7) == range(56, 64) and not topo.router_endpoints(8)


@pytest.mark.parametrize("topo", [
    Topology("switch", switch_ports=8, ports_per_accelerator=2),
    Topology("torus", dims=(2, 3), endpoints_per_router=6, ports_per_accelerator=6),
    Topology("torus", dims=(4,), endpoints_per_router=4, ports_per_accelerator=2),
])
def test_an_accelerators_ports_are_on_its_router(topo):
    """On a switch or a torus an accelerator's ports are consecutive ports of one router."""
    P = topo.ports_per_accelerator
    assert topo.accelerators * P == topo.endpoints
    for a, ports in enumerate(topo.accelerator_ports):
        assert ports == tuple(range(a * P, a * P + P))
        assert len({topo.endpoint_router(e) for e in ports}) == 1
        assert all(topo.endpoint_accelerator[e] == a for e in ports)


@pytest.mark.parametrize("leaves, ports", [(4, 2), (8, 8), (6, 3)])
def test_leaf_spine_ports_are_rails(leaves, ports):
    """On a leaf-spine port k of every accelerator is on the k-th rail of leaves / P
    leaves, and an accelerator has one port on each rail (with P = leaves, one per leaf)."""
    topo = Topology("fat_tree", leaves=leaves, spines=2, hosts_per_leaf=4,
                    ports_per_accelerator=ports)
    rail = leaves // ports
    assert topo.accelerators == leaves * 4 // ports
    for a, mine in enumerate(topo.accelerator_ports):
        assert [topo.endpoint_router(e) // rail for e in mine] == list(range(ports))
        assert all(topo.endpoint_accelerator[e] == a for e in mine)
    assert sorted(e for mine in topo.accelerator_ports for e in mine) == \
        list(range(topo.endpoints))


def test_link_ids_follow_router_and_port_order():
    topo = Topology("torus", dims=(3, 3), endpoints_per_router=1)
    keys = [(r, p) for r, p, _, _ in topo.links]
    assert keys == sorted(keys)
    assert all(topo.link_id[key] == k for k, key in enumerate(keys))
