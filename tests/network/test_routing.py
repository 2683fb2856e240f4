"""The routing functions (superfabric.network.routing, docs/architecture.md 11.4)."""

import itertools

import numpy as np
import pytest

from superfabric.network.routing import (dimension_rank, ecmp_hash, ecmp_vc, fat_tree_route,
                                        torus_dor_hop, torus_route)
from superfabric.network.topology import Topology


def _walk(topo, src, dst, *, vcs=2, adaptive=False, credits=None, max_packet=16):
    """The (router, port, vc) hops of a packet from endpoint ``src`` to ``dst``."""
    m = topo.endpoints_per_router
    r, hops = topo.endpoint_router(src), []
    while True:
        c = credits(r) if credits else np.full((topo.ports(r), 1, vcs), 32)
        port, vc = torus_route(topo.dims, m, r, src, dst, 0, vcs, adaptive, c, max_packet)
        hops.append((r, port, vc))
        if port < m:
            assert r * m + port == dst
            return hops
        assert len(hops) <= topo.max_hops, hops
        r = topo.peer(r, port)[0]


def _ring_distance(a, b, k):
    return min((b - a) % k, (a - b) % k)


@pytest.mark.parametrize("dims", [(4, 4, 4), (5, 3), (2, 6)])
def test_dor_is_minimal_and_dimension_ordered(dims):
    topo = Topology("torus", dims=dims, endpoints_per_router=1)
    for src, dst in itertools.product(range(topo.endpoints), repeat=2):
        hops = _walk(topo, src, dst)
        xs, xt = topo.coords(src), topo.coords(dst)
        assert len(hops) - 1 == sum(_ring_distance(a, b, k) for a, b, k in zip(xs, xt, dims))
        order = [(port - 1) // 2 for _, port, _ in hops[:-1]]
        assert order == sorted(order)


def test_dor_tie_goes_plus_and_the_dateline_moves_to_the_upper_vc():
    topo = Topology("torus", dims=(4,), endpoints_per_router=1)
    # 0 -> 2 is a tie: plus, 0 -> 1 -> 2, never across the wrap: lower VC.
    assert _walk(topo, 0, 2) == [(0, 1, 0), (1, 1, 0), (2, 0, 0)]
    # 3 -> 1 goes plus across the wrap 3 -> 0: upper from that hop on.
    assert _walk(topo, 3, 1) == [(3, 1, 1), (0, 1, 1), (1, 0, 0)]
    # 1 -> 3 is a tie as well: plus, 1 -> 2 -> 3 below the dateline.
    assert _walk(topo, 1, 3) == [(1, 1, 0), (2, 1, 0), (3, 0, 0)]
    # 1 -> 0 goes minus; 0 -> 3 goes minus across the wrap 0 -> 3.
    assert _walk(topo, 1, 0) == [(1, 2, 0), (0, 0, 0)]
    assert _walk(topo, 0, 3) == [(0, 2, 1), (3, 0, 0)]


def test_dor_class_is_the_paths():
    # On a ring of 8, from 6 to 1 plus: the path crosses the dateline 7 -> 0, so every hop
    # of it is upper, the first one too; from 2 to 5 plus nothing crosses: all lower.
    topo = Topology("torus", dims=(8,), endpoints_per_router=1)
    assert [torus_dor_hop((8,), 1, x, 6, 1) for x in (6, 7, 0)] == [(1, True)] * 3
    assert [vc for _, _, vc in _walk(topo, 6, 1, vcs=4)] == [2, 2, 2, 0]
    assert [torus_dor_hop((8,), 1, x, 2, 5) for x in (2, 3, 4)] == [(1, False)] * 3
    # Minus from 1 to 6 crosses 0 -> 7: upper; minus from 5 to 2: lower.
    assert [torus_dor_hop((8,), 1, x, 1, 6) for x in (1, 0, 7)] == [(2, True)] * 3
    assert [torus_dor_hop((8,), 1, x, 5, 2) for x in (5, 4, 3)] == [(2, False)] * 3


def test_adaptive_keeps_its_first_choice_then_the_escape_then_another_direction():
    topo = Topology("torus", dims=(4, 4), endpoints_per_router=1)
    m, vcs = 1, 3
    src, dst = topo.router_at((0, 0)), topo.router_at((1, 1))
    credits = np.full((5, 1, vcs), 32)
    # Both dimensions are productive (plus in each), one hop each: the first choice is
    # the lower, plus in dimension 0, and its adaptive VC has room: that one.
    assert torus_route(topo.dims, m, src, src, dst, 0, vcs, True, credits, 16) == (1, 2)
    credits[3, 0, 2] = 44          # plus in dimension 1 leads by dor_margin(16) = 12: still it
    assert torus_route(topo.dims, m, src, src, dst, 0, vcs, True, credits, 16) == (1, 2)
    credits[3, 0, 2] = 45          # by more: the escape (VC 0), which has room to start now
    assert torus_route(topo.dims, m, src, src, dst, 0, vcs, True, credits, 16) == (1, 0)
    credits[1, 0, 0] = 15          # the escape lacks it: the most credited direction
    assert torus_route(topo.dims, m, src, src, dst, 0, vcs, True, credits, 16) == (3, 2)
    credits[3, 0, 2] = 40
    credits[1, 0, 2] = 15          # the first choice's adaptive VC lacks room for 16 flits
    assert torus_route(topo.dims, m, src, src, dst, 0, vcs, True, credits, 16) == (3, 2)
    credits[1, 0, 0] = 16          # unless the escape has it
    assert torus_route(topo.dims, m, src, src, dst, 0, vcs, True, credits, 16) == (1, 0)
    credits[:, 0, 2] = 8           # no adaptive VC has room for a 16-flit packet
    assert torus_route(topo.dims, m, src, src, dst, 0, vcs, True, credits, 16) == (1, 0)


def test_adaptive_takes_the_longest_remaining_dimension_first():
    topo = Topology("torus", dims=(5, 6), endpoints_per_router=1)
    m, vcs = 1, 3
    src, dst = topo.router_at((0, 0)), topo.router_at((2, 1))
    credits = np.full((5, 1, vcs), 32)
    # Two hops left in dimension 0 (plus only), one in dimension 1: dimension 0 first ...
    assert torus_route(topo.dims, m, src, src, dst, 0, vcs, True, credits, 16) == (1, 2)
    # ... and dimension 1 is no candidate: without room there, the escape (the longest
    # ring first: dimension 1), then, without room on the escape, still dimension 0.
    credits[1, 0, 2] = 15
    assert torus_route(topo.dims, m, src, src, dst, 0, vcs, True, credits, 16) == (3, 0)
    credits[3, 0, 0] = 15
    assert torus_route(topo.dims, m, src, src, dst, 0, vcs, True, credits, 16) == (3, 0)
    credits[1, 0, 2] = 16
    assert torus_route(topo.dims, m, src, src, dst, 0, vcs, True, credits, 16) == (1, 2)


def test_the_adaptive_escape_takes_the_longest_ring_first_and_dor_the_lowest_dimension():
    dims = (4, 8, 8)
    assert [dimension_rank(dims, d, False) for d in range(3)] == [0, 1, 2]
    assert [dimension_rank(dims, d, True) for d in range(3)] == [2, 0, 1]
    topo = Topology("torus", dims=dims, endpoints_per_router=1)
    src, dst = topo.router_at((0, 0, 0)), topo.router_at((1, 1, 1))
    assert torus_dor_hop(dims, 1, src, src, dst) == (1, False)
    assert torus_dor_hop(dims, 1, src, src, dst, True) == (3, False)
    # A finished dimension is skipped in either order.
    dst = topo.router_at((1, 0, 0))
    assert torus_dor_hop(dims, 1, src, src, dst, True) == (1, False)


def test_adaptive_paths_are_minimal():
    topo = Topology("torus", dims=(4, 4), endpoints_per_router=1)
    rng = np.random.default_rng(5)
    for src, dst in itertools.product(range(16), repeat=2):
        hops = _walk(topo, src, dst, vcs=4, adaptive=True,
                     credits=lambda r: rng.integers(0, 40, (topo.ports(r), 1, 4)))
        xs, xt = topo.coords(src), topo.coords(dst)
        assert len(hops) - 1 == sum(_ring_distance(a, b, 4) for a, b in zip(xs, xt))


def test_fat_tree_paths_go_up_once_and_down():
    topo = Topology("fat_tree", leaves=8, spines=4, hosts_per_leaf=8)
    credits = np.full((12, 1, 2), 32)
    spines_used = set()
    for src, dst in itertools.product(range(64), repeat=2):
        leaf = src // 8
        port, vc = fat_tree_route(8, 4, 8, leaf, src, dst, 0, 2, False, credits)
        if dst // 8 == leaf:
            assert (port, vc) == (dst % 8, 0)
            continue
        spine = 8 + port - 8
        spines_used.add(spine)
        assert port - 8 == ecmp_hash(src, dst, 0) % 4
        down, _ = fat_tree_route(8, 4, 8, spine, src, dst, 0, 2, False, credits)
        assert topo.peer(spine, down) == (dst // 8, 8 + port - 8)
    assert spines_used == {8, 9, 10, 11}


def test_ecmp_gives_a_flow_one_vc_on_every_link_whatever_the_credits():
    rng = np.random.default_rng(1)
    vcs_used = set()
    for src, dst in itertools.product(range(64), repeat=2):
        if src // 8 == dst // 8:
            continue
        credits = rng.integers(0, 40, (12, 1, 4))
        up, vc_up = fat_tree_route(8, 4, 8, src // 8, src, dst, 0, 4, False, credits)
        spine = 8 + (up - 8)           # the leaves' routers come first, then the spines
        _, vc_down = fat_tree_route(8, 4, 8, spine, src, dst, 0, 4, False,
                                    rng.integers(0, 40, (12, 1, 4)))
        assert vc_up == vc_down == ecmp_vc(src, dst, 0, 4) == (ecmp_hash(src, dst, 0) >> 8) % 4
        vcs_used.add(vc_up)
    assert vcs_used == {0, 1, 2, 3}


def test_fat_tree_adaptive_picks_the_uplink_with_most_credits():
    credits = np.full((12, 1, 2), 32)
    credits[10, 0, 1] = 33
    assert fat_tree_route(8, 4, 8, 0, 0, 63, 0, 2, True, credits) == (10, 1)


def test_ecmp_hash_is_a_function_of_the_flow():
    assert ecmp_hash(3, 40, 1) == ecmp_hash(3, 40, 1)
    values = {ecmp_hash(s, d, f) for s in range(64) for d in range(64) for f in range(4)}
    assert len(values) > 10_000


def test_ecmp_hash_of_the_models_narrow_integers():
    # The model holds ends in int16 and classes in int8; run as Python (NUMBA_DISABLE_JIT)
    # the hash's multiplication overflowed them. It widens them first.
    for src, dst, flow in ((383, 382, 1), (0, 1, 0), (1023, 1000, 7)):
        narrow = ecmp_hash(np.int16(src), np.int16(dst), np.int8(flow))
        assert narrow == ecmp_hash(src, dst, flow) and 0 <= narrow < 1 << 16
