"""Who talks to whom: ring orders, digit lines and routes of a fabric's accelerators (section 15.3).

The algorithms place their peers by the topology: the ring is a snake
through the torus (neighbours one router hop apart) or the leaf-spine's
hosts leaf by leaf; the dimension-wise algorithms run rings along the
digits of an accelerator's number (its port at the router, then the torus
coordinates); routes follow the fabric's routing function.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from ...network.routing import fat_tree_route, torus_route
from ...network.topology import Topology

__all__ = ["Peers"]


class Peers:
    """The accelerators of one topology, as the collective algorithms see them.

    Parameters
    ----------
    topology : Topology
        The fabric (``Topology.of(cfg)``).
    vcs : int
        Virtual channels per traffic class on its router-to-router links (``fabric.vcs``).
    prio : int
        The traffic class of the collective's writes (``rdma.data_priority``): a leaf-spine
        hashes it with the ends to pick a flow's spine and VC.
    """

    def __init__(self, topology: Topology, vcs: int = 2, prio: int = 0):
        if not isinstance(topology, Topology):
            raise TypeError(f"topology must be a Topology, not {topology!r}")
        self.topology, self.vcs, self.prio = topology, vcs, prio
        self.n = topology.endpoints
        self._routes, self._sharing = {}, {}

    @classmethod
    def of(cls, cfg) -> "Peers":
        """The accelerators of a ``FabricConfig``'s fabric."""
        return cls(Topology.of(cfg), cfg.fabric.vcs, cfg.rdma.data_priority)

    @cached_property
    def digits(self) -> tuple[int, ...]:
        """Sizes of the digits of an accelerator's number, fastest first: the endpoints at a
        router, then each torus dimension (a leaf-spine: hosts per leaf, then leaves)."""
        t = self.topology
        if t.kind == "torus":
            return (t.endpoints_per_router,) + tuple(t.dims)
        if t.kind == "fat_tree":
            return (t.hosts_per_leaf, t.leaves)
        return (self.n,)

    @cached_property
    def _radix(self) -> Topology:
        # The digits are a mixed radix, fastest first: a torus's coordinates over them.
        return Topology("torus", dims=self.digits)

    def digits_of(self, a: int) -> tuple[int, ...]:
        """The digits of accelerator ``a``, fastest first."""
        return self._radix.coords(a)

    def number(self, digits) -> int:
        """The accelerator with these digits."""
        return self._radix.router_at(digits)

    @cached_property
    def ring(self) -> tuple[int, ...]:
        """Every accelerator once, in ring order: a snake (boustrophedon) over the digits, the
        slowest digit outermost, so consecutive accelerators differ by one in one digit; on a
        torus whose every dimension after the first is even, the ring closes in one hop too."""
        order = [()]
        for k in self.digits:
            order = [c + (x,) for x in range(k) for c in (order if x % 2 == 0 else order[::-1])]
        return tuple(self.number(c) for c in order)

    def lines(self, digit: int) -> list[list[int]]:
        """The rings along ``digit``: accelerators agreeing on every other digit, in the
        order of that digit."""
        k = self.digits[digit]
        out = []
        for a in range(self.n):
            d = self.digits_of(a)
            if d[digit] == 0:
                out.append([self.number(d[:digit] + (x,) + d[digit + 1:]) for x in range(k)])
        return out

    def route(self, src: int, dst: int) -> list[int]:
        """The link ids a packet from ``src`` to ``dst`` crosses, under the fabric's
        dimension-order (torus) or ECMP (leaf-spine) routing."""
        return [link for link, _ in self.lanes(src, dst)]

    def lanes(self, src: int, dst: int) -> list[tuple[int, int]]:
        """Per link of :meth:`route`, ``(link id, VC)``: the flow's VC, one on every hop of
        its class (a torus's dateline class, a leaf-spine's ECMP VC)."""
        if (src, dst) not in self._routes:
            self._routes[src, dst] = self._walk(src, dst)
        return self._routes[src, dst]

    def _walk(self, src: int, dst: int) -> list[tuple[int, int]]:
        t = self.topology
        if t.kind == "switch" or src == dst:
            return []
        r, lanes = t.endpoint_router(src), []
        while True:
            # The VC is the flow's, whatever the credits.
            credits = np.ones((t.ports(r), self.prio + 1, self.vcs), np.int64)
            if t.kind == "torus":
                port, vc = torus_route(t.dims, t.endpoints_per_router, r, src, dst, self.prio,
                                       self.vcs, False, credits, 1)
            else:
                port, vc = fat_tree_route(t.leaves, t.spines, t.hosts_per_leaf, r, src, dst,
                                          self.prio, self.vcs, False, credits)
            if port < t.endpoint_ports(r):
                return lanes
            lanes.append((t.link_id[(r, port)], vc))
            r = t.peer(r, port)[0]

    def hops(self, src: int, dst: int) -> int:
        """Routers a packet from ``src`` to ``dst`` passes through."""
        return len(self.route(src, dst)) + 1

    def sharing(self, pairs: tuple) -> list[tuple[int, int]]:
        """Per ``(src, dst)`` pair of writes at once, ``(share, crowd)``: the most of the
        writes whose routes cross one link of its route, and the most senders whose writes
        cross it on one VC (:meth:`lanes`): they share its buffer, hence its credits. A
        sender's own writes leave its port one after the other and hold the credits in
        turn, so they count once in ``crowd``."""
        if pairs not in self._sharing:
            links, lanes = {}, {}
            for src, dst in pairs:
                for lane in self.lanes(src, dst):
                    links[lane[0]] = links.get(lane[0], 0) + 1
                    lanes.setdefault(lane, set()).add(src)
            self._sharing[pairs] = [
                (max((links[link] for link, _ in self.lanes(s, d)), default=1),
                 max((len(lanes[lane]) for lane in self.lanes(s, d)), default=1))
                for s, d in pairs]
        return self._sharing[pairs]
