"""The routing decision of a fabric router, as combinational logic (docs/architecture.md 11.4).

:class:`Routing` is the RTL of the functions of :mod:`superfabric.network.routing`:
from the router's index (an input, so that every router of a tier is the
same module), the packet's source and destination endpoints and class, and
the router's credit counters toward its link outputs, the output port and
virtual channel the packet leaves by. The router holds one per input and
asks it when a head flit is admitted. ``tests/fabric/test_routing.py`` holds it
against :mod:`superfabric.network.routing`, every router, source and destination.
"""

from amaranth.hdl import Signal, Module, Mux, Array, Const, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...config import FabricConfig
from ...formats.packet import port_bits, prio_bits, vc_bits
from ...network.routing import ESCAPE_VCS, dimension_rank, dor_margin
from ...network.topology import LEAF, SPINE, TORUS_ROUTER, Topology
from ..checks import check_config

__all__ = ["Routing", "credit_bits", "tier_router"]


def credit_bits(cfg: FabricConfig) -> int:
    """Bits of a link output's credit counter, which holds 0..vc_buffer_flits."""
    return cfg.fabric.vc_buffer_flits.bit_length()


def tier_router(topo: Topology, kind: str) -> int:
    """A router of the tier ``kind``: its ports stand for every router's of the tier."""
    return topo.leaves if kind == SPINE else 0


class Routing(wiring.Component):
    """Output port and VC of a packet at a router of the tier ``kind`` of ``cfg``'s fabric.

    ``kind`` is :data:`~superfabric.network.topology.TORUS_ROUTER`,
    :data:`~superfabric.network.topology.LEAF` or :data:`~superfabric.network.topology.SPINE`.
    Purely combinational.

    Ports
    -----
    router_id : In, the router's index in the fabric (a constant per instance).
    src, dst : In, the packet's source and destination endpoints.
    prio : In, its class.
    credits : In, ``credits[j][prio][vc]``, the credits of link output
        ``j`` (router port ``endpoint ports + j``) as the router holds them
        at the start of the cycle.
    out, vc : Out, the output port and the VC (0 toward an endpoint).
    escape_out, escape_vc : Out, on a torus, the dimension-order hop and its
        VC: the route an adaptive decision falls back to when lower inputs
        booked its (output, VC) in the same cycle so far that the room for the
        longest packet is gone (section 11.4).
    room : Out, on a torus, the credits of ``(out, prio, vc)``: under adaptive
        routing, what an adaptive choice (``vc >= ESCAPE_VCS``) may book from.
    """

    def __init__(self, cfg: FabricConfig, kind: str):
        check_config(cfg)
        if kind not in (TORUS_ROUTER, LEAF, SPINE):
            raise ValueError(f"kind = {kind!r}: must be {TORUS_ROUTER!r}, {LEAF!r} or {SPINE!r}")
        topo = Topology.of(cfg)
        if (topo.kind == "torus") != (kind == TORUS_ROUTER) or topo.kind == "switch":
            raise ValueError(f"kind = {kind!r}: no such router in a {topo.kind!r} fabric")
        self._cfg = cfg
        self._topo = topo
        self._kind = kind
        r = tier_router(topo, kind)
        self._ports = topo.ports(r)
        self._m = topo.endpoint_ports(r)
        sw, f = cfg.switch, cfg.fabric
        escape = {"escape_out": Out(range(self._ports)), "escape_vc": Out(vc_bits(f.vcs)),
                  "room": Out(credit_bits(cfg))} if kind == TORUS_ROUTER else {}
        super().__init__({
            **escape,
            "router_id": In(range(topo.routers)),
            "src": In(port_bits(topo.endpoints)),
            "dst": In(port_bits(topo.endpoints)),
            "prio": In(prio_bits(sw.priorities)),
            "credits": In(unsigned(credit_bits(cfg))).array(self._ports - self._m, sw.priorities,
                                                            f.vcs),
            "out": Out(range(self._ports)),
            "vc": Out(vc_bits(f.vcs)),
        })

    def _credits(self, j):
        """The credits of link output ``j`` for the packet's class, per VC."""
        per_prio = self.credits[j]
        return [Array(per_prio[p][v] for p in range(len(per_prio)))[self.prio]
                for v in range(self._cfg.fabric.vcs)]

    def elaborate(self, platform):
        m = Module()
        if self._kind == TORUS_ROUTER:
            self._torus(m)
        elif self._kind == LEAF:
            self._leaf(m)
        else:
            self._spine(m)
        return m

    # -- the tiers -----------------------------------------------------------

    def _torus(self, m):
        topo, f = self._topo, self._cfg.fabric
        dims, per = topo.dims, topo.endpoints_per_router
        vcs, adaptive = f.vcs, f.routing == "adaptive"
        here = _coords(m, self.router_id, dims, "x")
        there = _coords(m, _div(self.dst, per), dims, "t")
        source = _coords(m, _div(self.src, per), dims, "s")

        # Per dimension: unfinished, the minimal directions, and the VC class
        # of a path each way (its dateline, superfabric.network.routing.torus_dor_hop).
        differs, plus_ok, minus_ok, upper_plus, upper_minus, hops = [], [], [], [], [], []
        for d, k in enumerate(dims):
            x, t, s = here[d], there[d], source[d]
            delta = Signal(range(k), name=f"delta{d}")
            left = Signal(range(k), name=f"hops{d}")    # hops left in the dimension
            m.d.comb += [delta.eq(Mux(t >= x, t - x, t + k - x)),
                         left.eq(Mux(delta * 2 <= k, delta, k - delta))]
            differs.append(x != t)
            plus_ok.append(delta * 2 <= k)
            minus_ok.append(delta * 2 >= k)
            upper_plus.append(s > t)
            upper_minus.append(s < t)
            hops.append(left)

        # Dimension order: the first unfinished dimension in dimension_rank's
        # order (the escape of adaptive: the longest ring first), plus on a tie.
        dor_link = Signal(range(2 * len(dims)))
        upper = Signal()
        order = sorted(range(len(dims)), key=lambda d: dimension_rank(dims, d, adaptive))
        for i, d in enumerate(order):
            with (m.If if i == 0 else m.Elif)(differs[d]):
                m.d.comb += [dor_link.eq(Mux(plus_ok[d], 2 * d, 2 * d + 1)),
                             upper.eq(Mux(plus_ok[d], upper_plus[d], upper_minus[d]))]

        credits = [self._credits(j) for j in range(2 * len(dims))]
        if adaptive:
            escape_vc = Mux(upper, 1, 0)
        elif vcs == 1:
            escape_vc = Const(0, 1)
        else:
            # A flow keeps one VC of each class (superfabric.network.routing.torus_escape);
            # the upper class is the wider, and with one VC each there is no choice.
            h = _ecmp_hash(m, self.src, self.dst, self.prio) if vcs - vcs // 2 > 1 else None
            escape_vc = Mux(upper, vcs // 2 + _flow_vc(h, vcs - vcs // 2), _flow_vc(h, vcs // 2))
        out, vc = Signal.like(self.out), Signal.like(self.vc)
        m.d.comb += [out.eq(self._m + dor_link), vc.eq(escape_vc),
                     self.escape_out.eq(self._m + dor_link), self.escape_vc.eq(escape_vc)]

        if adaptive:
            # The longest remaining dimension (the lowest of equals) and its
            # first minimal direction: the first choice.
            longest = Signal(range(max(dims)), name="longest")
            first_link = Signal(range(2 * len(dims)), name="first_link")
            # Scanning down, a lower dimension takes over on equal hops (the
            # highest needs no comparison: against 0 it would be constant).
            top = len(dims) - 1
            longest_expr = Mux(differs[top], hops[top], 0)
            link_expr = Mux(plus_ok[top], 2 * top, 2 * top + 1)
            for d in reversed(range(top)):
                take = differs[d] & (hops[d] >= longest_expr)
                longest_expr = Mux(take, hops[d], longest_expr)
                link_expr = Mux(take, Mux(plus_ok[d], 2 * d, 2 * d + 1), link_expr)
            m.d.comb += [longest.eq(longest_expr), first_link.eq(link_expr)]
            # Candidates: every minimal direction of every dimension with as
            # many hops left, on the flow's adaptive VC: the most credits, the
            # lowest port on a tie.
            flow = Signal(range(vcs), name="flow_vc")
            h = _ecmp_hash(m, self.src, self.dst, self.prio) if vcs - ESCAPE_VCS > 1 else None
            m.d.comb += flow.eq(ESCAPE_VCS + _flow_vc(h, vcs - ESCAPE_VCS))
            found = Const(0, 1)
            best_link, most = Const(0, range(len(credits))), 0
            link_most = []
            for j, c in enumerate(credits):
                d, minus = divmod(j, 2)
                candidate = (differs[d] & (minus_ok[d] if minus else plus_ok[d])
                             & (hops[d] >= longest))
                cand_most = Signal.like(c[ESCAPE_VCS], name=f"adaptive{j}_most")
                m.d.comb += cand_most.eq(Array(c)[flow])
                link_most.append(cand_most)
                take = Signal(name=f"take{j}")
                m.d.comb += take.eq(candidate & (~found | (cand_most > most)))
                found = found | candidate
                best_link = Mux(take, j, best_link)
                most = Mux(take, cand_most, most)
            max_packet = self._cfg.switch.max_packet_flits
            # The first choice's adaptive VC while it has room and no other
            # candidate leads it by more than dor_margin credits.
            first_most = Signal.like(link_most[0], name="first_most")
            keep_first = Signal()
            m.d.comb += [first_most.eq(Array(link_most)[first_link]),
                         keep_first.eq((first_most >= max_packet)
                                       & (first_most + dor_margin(max_packet) >= most))]
            # Else the escape (out and vc's default) when it can start at once;
            # else the best candidate.
            escape_room = Signal.like(first_most, name="escape_room")
            m.d.comb += escape_room.eq(Mux(upper, Array(c[1] for c in credits)[dor_link],
                                           Array(c[0] for c in credits)[dor_link]))
            with m.If(keep_first):
                m.d.comb += [out.eq(self._m + first_link), vc.eq(flow), self.room.eq(first_most)]
            with m.Elif((escape_room < max_packet) & found & (most >= max_packet)):
                m.d.comb += [out.eq(self._m + best_link), vc.eq(flow), self.room.eq(most)]

        with m.If(_all_equal(here, there)):
            m.d.comb += [self.out.eq(_mod(self.dst, per)), self.vc.eq(0)]
        with m.Else():
            m.d.comb += [self.out.eq(out), self.vc.eq(vc)]

    def _leaf(self, m):
        topo, f = self._topo, self._cfg.fabric
        hosts, spines = topo.hosts_per_leaf, topo.spines
        credits = [self._credits(s) for s in range(spines)]
        if f.routing == "adaptive":
            # The spine whose uplink has the most credits (its best VC), the
            # lowest on a tie.
            spine, most = Const(0, range(spines)), _best_vc(m, credits[0], 0, f.vcs, "up0")[1]
            for s in range(1, spines):
                most_s = _best_vc(m, credits[s], 0, f.vcs, f"up{s}")[1]
                better = Signal(name=f"better{s}")
                m.d.comb += better.eq(most_s > most)
                spine, most = Mux(better, s, spine), Mux(better, most_s, most)
        else:
            h = _ecmp_hash(m, self.src, self.dst, self.prio)
            spine = h % spines
        up = Signal(range(spines))
        m.d.comb += up.eq(spine)
        if f.routing == "adaptive":
            up_vc = Array(_best_vc(m, c, 0, f.vcs, f"vc{s}")[0] for s, c in enumerate(credits))[up]
        else:
            up_vc = _flow_vc(h, f.vcs)
        with m.If(_div(self.dst, hosts) == self.router_id):
            m.d.comb += [self.out.eq(_mod(self.dst, hosts)), self.vc.eq(0)]
        with m.Else():
            m.d.comb += [self.out.eq(hosts + up), self.vc.eq(up_vc)]

    def _spine(self, m):
        f = self._cfg.fabric
        down = Signal(range(self._ports))
        m.d.comb += down.eq(_div(self.dst, self._topo.hosts_per_leaf))
        if f.routing == "adaptive":
            vc = Array(_best_vc(m, self._credits(leaf), 0, f.vcs, f"vc{leaf}")[0]
                       for leaf in range(self._ports))[down]
        else:
            vc = _flow_vc(_ecmp_hash(m, self.src, self.dst, self.prio), f.vcs)
        m.d.comb += [self.out.eq(down), self.vc.eq(vc)]


def _flow_vc(h, vcs):
    """A flow's VC among ``vcs`` from its hash ``h`` (superfabric.network.routing.ecmp_vc;
    none is needed for one VC)."""
    return Const(0, 1) if vcs == 1 else _mod(h[8:], vcs)


def _div(value, divisor):
    """``value // divisor`` for a constant divisor (no logic when it is 1)."""
    return value if divisor == 1 else value // divisor


def _mod(value, divisor):
    """``value % divisor`` for a constant divisor."""
    return Const(0, 1) if divisor == 1 else value % divisor


def _coords(m, router, dims, name):
    """The torus coordinates of ``router``, dimension 0 fastest."""
    out, stride = [], 1
    for d, k in enumerate(dims):
        x = Signal(range(k), name=f"{name}{d}")
        digit = _div(router, stride)
        m.d.comb += x.eq(digit if d == len(dims) - 1 else _mod(digit, k))
        out.append(x)
        stride *= k
    return out


def _all_equal(a, b):
    same = Const(1, 1)
    for x, y in zip(a, b):
        same = same & (x == y)
    return same


def _best_vc(m, credits, lo, hi, name):
    """The VC in ``[lo, hi)`` with the most ``credits`` (the lowest on a tie), and its
    credits (superfabric.network.routing.best_vc)."""
    vc, most = Const(lo, range(hi)), credits[lo]
    for v in range(lo + 1, hi):
        better = credits[v] > most
        vc, most = Mux(better, v, vc), Mux(better, credits[v], most)
    vc_sig = Signal(range(max(hi, 2)), name=f"{name}_vc")
    most_sig = Signal.like(credits[lo], name=f"{name}_most")
    m.d.comb += [vc_sig.eq(vc), most_sig.eq(most)]
    return vc_sig, most_sig


def _ecmp_hash(m, src, dst, flow):
    """superfabric.network.routing.ecmp_hash in logic: 32-bit mix, the low 16 bits."""
    x = Signal(32, name="ecmp_key")
    mixed = Signal(32, name="ecmp_mixed")
    h = Signal(16, name="ecmp_hash")
    m.d.comb += [x.eq(src | (dst << 10) | (flow << 20)),
                 mixed.eq((x ^ (x >> 7)) * 0x9E3779B1),
                 h.eq(mixed ^ (mixed >> 15))]
    return h
