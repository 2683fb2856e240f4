"""How the routers of a fabric are numbered and wired (docs/architecture.md section 11.2).

One description of a topology, built from the ``[fabric]`` section, read
by the RTL generator, the golden model, the deadlock check and the
reports alike: routers and their ports, where each endpoint attaches, and
which output port of which router feeds which input port of which other.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

__all__ = ["Topology", "ENDPOINT", "LEAF", "SPINE", "TORUS_ROUTER"]

#: Router kinds: the module each router is an instance of.
TORUS_ROUTER, LEAF, SPINE = "router", "leaf_router", "spine_router"

#: ``Topology.peer`` of an endpoint port.
ENDPOINT = None


@dataclass(frozen=True)
class Topology:
    """The routers, ports, endpoints and links of one fabric.

    Attributes
    ----------
    kind : str
        ``"switch"``, ``"torus"`` or ``"fat_tree"``.
    dims : tuple of int
        Torus: routers per dimension, dimension 0 fastest; ``()`` otherwise.
    endpoints_per_router : int
        Torus: endpoints at every router (ports ``0..M-1``).
    leaves, spines, hosts_per_leaf : int
        Fat tree: the two tiers and the endpoints at each leaf.
    ports_per_accelerator : int
        Endpoint ports of each accelerator (:meth:`accelerator_endpoint`).
    """

    kind: str
    dims: tuple[int, ...] = ()
    endpoints_per_router: int = 1
    leaves: int = 0
    spines: int = 0
    hosts_per_leaf: int = 0
    switch_ports: int = 0
    ports_per_accelerator: int = 1

    @classmethod
    def of(cls, cfg) -> "Topology":
        """The topology of a :class:`~superfabric.config.FabricConfig`."""
        return cls.of_dict(cfg.to_dict())

    @classmethod
    def of_dict(cls, config: dict) -> "Topology":
        """The topology of a configuration as nested dicts (``FabricConfig.to_dict()``, the
        ``config`` of ``results.json``), without validating it again."""
        f = config["fabric"]
        # Results written before the key existed had one port per accelerator.
        ports = f.get("ports_per_accelerator", 1)
        if f["topology"] == "torus":
            return cls("torus", dims=tuple(f["dims"]),
                       endpoints_per_router=f["endpoints_per_router"],
                       ports_per_accelerator=ports)
        if f["topology"] == "fat_tree":
            return cls("fat_tree", leaves=f["leaves"], spines=f["spines"],
                       hosts_per_leaf=f["hosts_per_leaf"], ports_per_accelerator=ports)
        return cls("switch", switch_ports=config["switch"]["ports"],
                   ports_per_accelerator=ports)

    # -- routers and endpoints -------------------------------------------

    @cached_property
    def routers(self) -> int:
        """Routers in the fabric."""
        if self.kind == "torus":
            count = 1
            for k in self.dims:
                count *= k
            return count
        if self.kind == "fat_tree":
            return self.leaves + self.spines
        return 1

    @cached_property
    def endpoints(self) -> int:
        """Endpoint ports in the fabric: an accelerator has
        :attr:`ports_per_accelerator` of them."""
        if self.kind == "torus":
            return self.routers * self.endpoints_per_router
        if self.kind == "fat_tree":
            return self.leaves * self.hosts_per_leaf
        return self.switch_ports

    @cached_property
    def accelerators(self) -> int:
        """Accelerators in the fabric."""
        return self.endpoints // self.ports_per_accelerator

    def accelerator_endpoint(self, a: int, k: int) -> int:
        """The endpoint of port ``k`` of accelerator ``a`` (section 11.2).

        On a leaf-spine the ports are rails: port ``k`` of every accelerator is on the
        ``k``-th of ``P`` groups of ``leaves / P`` leaves, so endpoint ``k * A + a``; on a
        torus or a switch an accelerator's ports are consecutive endpoint ports of one
        router, ``a * P + k``.
        """
        if self.kind == "fat_tree":
            return k * self.accelerators + a
        return a * self.ports_per_accelerator + k

    @cached_property
    def accelerator_ports(self) -> tuple[tuple[int, ...], ...]:
        """The endpoints of every accelerator, port 0 first."""
        return tuple(tuple(self.accelerator_endpoint(a, k)
                           for k in range(self.ports_per_accelerator))
                     for a in range(self.accelerators))

    @cached_property
    def endpoint_accelerator(self) -> tuple[int, ...]:
        """The accelerator of every endpoint."""
        out = [0] * self.endpoints
        for a, ports in enumerate(self.accelerator_ports):
            for e in ports:
                out[e] = a
        return tuple(out)

    def router_kind(self, r: int) -> str:
        """The module router ``r`` is an instance of."""
        if self.kind == "fat_tree":
            return LEAF if r < self.leaves else SPINE
        return TORUS_ROUTER

    def ports(self, r: int) -> int:
        """Ports of router ``r`` (each an input and an output)."""
        if self.kind == "torus":
            return self.endpoints_per_router + 2 * len(self.dims)
        if self.kind == "fat_tree":
            return self.hosts_per_leaf + self.spines if r < self.leaves else self.leaves
        return self.switch_ports

    def endpoint_ports(self, r: int) -> int:
        """Endpoints at router ``r``: its ports ``0..endpoint_ports(r)-1``."""
        if self.kind == "torus":
            return self.endpoints_per_router
        if self.kind == "fat_tree":
            return self.hosts_per_leaf if r < self.leaves else 0
        return self.switch_ports

    def endpoint_router(self, e: int) -> int:
        """The router endpoint ``e`` attaches to."""
        return e // self._per_router

    def router_endpoints(self, r: int) -> range:
        """The endpoints at router ``r``, its ports ``0..endpoint_ports(r)-1`` in order."""
        first = r * self._per_router
        return range(first, first + self.endpoint_ports(r))

    def endpoint_port(self, e: int) -> int:
        """The port of :meth:`endpoint_router` that endpoint ``e`` attaches to."""
        return e % self._per_router

    @property
    def _per_router(self) -> int:
        if self.kind == "torus":
            return self.endpoints_per_router
        if self.kind == "fat_tree":
            return self.hosts_per_leaf
        return self.switch_ports

    def coords(self, r: int) -> tuple[int, ...]:
        """Torus: the coordinates of router ``r``, dimension 0 first."""
        out = []
        for k in self.dims:
            out.append(r % k)
            r //= k
        return tuple(out)

    def router_at(self, coords) -> int:
        """Torus: the router at ``coords``."""
        r, stride = 0, 1
        for x, k in zip(coords, self.dims):
            r += x * stride
            stride *= k
        return r

    # -- links ------------------------------------------------------------

    def peer(self, r: int, port: int) -> tuple[int, int] | None:
        """The (router, input port) fed by output ``port`` of router ``r``;
        :data:`ENDPOINT` for an endpoint port."""
        m = self.endpoint_ports(r)
        if port < m:
            return ENDPOINT
        if self.kind == "torus":
            d, minus = divmod(port - m, 2)
            x = list(self.coords(r))
            x[d] = (x[d] + (-1 if minus else 1)) % self.dims[d]
            return self.router_at(x), m + 2 * d + (0 if minus else 1)
        if self.kind == "fat_tree":
            if r < self.leaves:
                return self.leaves + (port - self.hosts_per_leaf), r
            return port, self.hosts_per_leaf + (r - self.leaves)
        return ENDPOINT

    @cached_property
    def links(self) -> tuple[tuple[int, int, int, int], ...]:
        """Every directed link ``(router, output port, peer router, peer input port)``,
        in (router, port) order; a link's id is its index here."""
        out = []
        for r in range(self.routers):
            for port in range(self.ports(r)):
                peer = self.peer(r, port)
                if peer is not ENDPOINT:
                    out.append((r, port, *peer))
        return tuple(out)

    @cached_property
    def link_id(self) -> dict[tuple[int, int], int]:
        """(router, output port) -> link id."""
        return {(r, p): k for k, (r, p, _, _) in enumerate(self.links)}

    @cached_property
    def max_hops(self) -> int:
        """The most routers a minimal path visits, endpoints to endpoint."""
        if self.kind == "torus":
            return 1 + sum(k // 2 for k in self.dims)
        if self.kind == "fat_tree":
            return 3
        return 1
