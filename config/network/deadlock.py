"""Deadlock freedom of a fabric's routing, proven before anything runs (section 11.6).

The escape channel dependency graph has a node per channel (directed link,
VC) and an edge from a channel to every channel that a packet holding it may
wait for next under the escape routing: dimension order on a torus (the
escape VCs 0 and 1 under adaptive routing, Duato's method), every up/down
path on a fat tree. Traffic classes have separate buffers and the same
graph, so one class stands for all. A cycle in it is a possible deadlock.
"""

from __future__ import annotations

from functools import lru_cache
from math import prod

from .routing import class_vcs, dimension_rank, torus_dor_hop
from .topology import Topology

__all__ = ["escape_dependencies", "dependency_cycle", "describe_cycle"]


def escape_dependencies(topo: Topology, routing: str, vcs: int) -> set:
    """The edges ``((link, vc), (link, vc))`` of the escape channel dependency graph."""
    edges = set()
    if topo.kind == "torus":
        edges = _torus_dependencies(topo, vcs, routing == "adaptive")
    elif topo.kind == "fat_tree":
        link_id, h = topo.link_id, topo.hosts_per_leaf
        for leaf in range(topo.leaves):
            for s in range(topo.spines):
                up = link_id[(leaf, h + s)]
                spine = topo.leaves + s
                for t in range(topo.leaves):
                    if t != leaf:
                        down = link_id[(spine, t)]
                        edges.update(((up, a), (down, b)) for a in range(vcs) for b in range(vcs))
    return edges


@lru_cache(maxsize=64)
def dependency_cycle(topo: Topology, routing: str, vcs: int) -> tuple | None:
    """One cycle of the escape channel dependency graph as a tuple of channels, or
    ``None`` when the graph is acyclic (the routing cannot deadlock)."""
    edges = escape_dependencies(topo, routing, vcs)
    if _acyclic(edges):
        return None
    # networkx only names the cycle of a refused configuration: importing it costs
    # 0.2 s, more than the whole check of a 384-router torus, and every run of a
    # fabric loads its configuration. (Its find_cycle alone would prove an acyclic
    # graph slowly: 7 s for the 8x8x8 torus's 11,712 edges.)
    import networkx as nx
    graph = nx.DiGraph(edges)
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        return None
    return tuple(edge[0] for edge in cycle)


def _acyclic(edges) -> bool:
    """Whether the graph of ``edges`` has no cycle: a topological sort (Kahn's) that
    removes every node once nothing leads into it gets through all of them."""
    after, into = {}, {}
    for a, b in edges:
        after.setdefault(a, []).append(b)
        into[b] = into.get(b, 0) + 1
        into.setdefault(a, 0)
    free = [node for node, count in into.items() if count == 0]
    removed = 0
    while free:
        node = free.pop()
        removed += 1
        for b in after.get(node, ()):
            into[b] -= 1
            if into[b] == 0:
                free.append(b)
    return removed == len(into)


def describe_cycle(topo: Topology, cycle: tuple) -> str:
    """``router R port P vc V -> ... -> (the first again)``."""
    names = [f"router {topo.links[link][0]} port {topo.links[link][1]} vc {vc}"
             for link, vc in cycle]
    return " -> ".join(names + names[:1])


def _torus_dependencies(topo: Topology, vcs: int, adaptive: bool) -> set:
    """The escape graph of a torus: every pair of consecutive hops of the dimension-order
    path between any two routers.

    Walking every pair of routers (811,000 hops on the 8x8x6 torus, a second of
    Python at every configuration load) repeats itself: a path finishes its first
    dimension at the router ``t`` that differs from its source in that dimension
    only, and from there on it is the path from ``t`` (the hops of a dimension read
    the source's coordinate in that dimension only, and ``t`` has the source's
    coordinates in every dimension it has yet to travel). So the graph is the
    union of the paths along one dimension and of the turns at their ends into a
    later dimension: the last hop into ``t`` followed by any first hop out of ``t``
    along a dimension that comes later in :func:`.routing.dimension_rank`'s order.
    Every hop is still :func:`.routing.torus_dor_hop`'s."""
    dims, m, routers = topo.dims, topo.endpoints_per_router, topo.routers
    link_id = topo.link_id
    peer = {key: topo.links[k][2] for key, k in link_id.items()}
    classes = [class_vcs(upper, vcs, adaptive) for upper in (False, True)]
    order = sorted(range(len(dims)), key=lambda d: dimension_rank(dims, d, adaptive))
    strides = [prod(dims[:d]) for d in range(len(dims))]

    def toward(x, d):
        """The routers that differ from ``x`` in dimension ``d`` only."""
        here = x // strides[d] % dims[d]
        return [x + (c - here) * strides[d] for c in range(dims[d]) if c != here]

    def channels(x, s, t):
        """The hop at ``x`` from ``s`` toward ``t``: its next router and its channels, as
        integers ``link * vcs + vc`` (a few hundred thousand edges for the largest
        tori, so no tuples on the way)."""
        port, upper = torus_dor_hop(dims, m, x, s, t, adaptive)
        lo, hi = classes[upper]
        base = link_id[(x, port)] * vcs
        return peer[(x, port)], range(base + lo, base + hi)

    # first[x][i]: the channels of every first hop out of x along dimension order[i].
    first = [[{channels(x, x, t)[1] for t in toward(x, d)} for d in order]
             for x in range(routers)]
    seen = set()
    for s in range(routers):
        for i, d in enumerate(order):
            for t in toward(s, d):
                x, held = s, None
                while x != t:
                    x, now = channels(x, s, t)
                    if held is not None:
                        seen.update(a << 32 | b for a in held for b in now)
                    held = now
                for later in first[t][i + 1:]:
                    for now in later:
                        seen.update(a << 32 | b for a in held for b in now)
    return {(divmod(e >> 32, vcs), divmod(e & 0xFFFFFFFF, vcs)) for e in seen}
