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

from .routing import class_vcs, torus_dor_hop
from .topology import Topology

__all__ = ["escape_dependencies", "dependency_cycle", "describe_cycle"]


def escape_dependencies(topo: Topology, routing: str, vcs: int) -> set:
    """The edges ``((link, vc), (link, vc))`` of the escape channel dependency graph."""
    edges = set()
    if topo.kind == "torus":
        adaptive = routing == "adaptive"
        dims, m = topo.dims, topo.endpoints_per_router
        link_id = topo.link_id
        peer = {key: topo.links[k][2] for key, k in link_id.items()}
        classes = [class_vcs(upper, vcs, adaptive) for upper in (False, True)]
        # Channels as integers link * vcs + vc while walking: a few million
        # steps for the largest tori, so no tuples on the way.
        seen = set()
        for s in range(topo.routers):
            for t in range(topo.routers):
                x, held = s, None
                while x != t:
                    port, upper = torus_dor_hop(dims, m, x, s, t, adaptive)
                    lo, hi = classes[upper]
                    base = link_id[(x, port)] * vcs
                    if held is not None:
                        for a in held:
                            for b in range(base + lo, base + hi):
                                seen.add(a << 32 | b)
                    held = range(base + lo, base + hi)
                    x = peer[(x, port)]
        edges = {(divmod(e >> 32, vcs), divmod(e & 0xFFFFFFFF, vcs)) for e in seen}
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
    import networkx as nx
    graph = nx.DiGraph(escape_dependencies(topo, routing, vcs))
    # find_cycle proves an acyclic graph slowly (7 s for the 8x8x8 torus's 11,712
    # edges, against 0.04 s for a topological sort): it only names the cycle.
    if nx.is_directed_acyclic_graph(graph):
        return None
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        return None
    return tuple(edge[0] for edge in cycle)


def describe_cycle(topo: Topology, cycle: tuple) -> str:
    """``router R port P vc V -> ... -> (the first again)``."""
    names = [f"router {topo.links[link][0]} port {topo.links[link][1]} vc {vc}"
             for link, vc in cycle]
    return " -> ".join(names + names[:1])
