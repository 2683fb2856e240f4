"""The router: an input-queued crossbar with VOQs, iSLIP and egress queues, routing at
ingress, virtual channels and credits on its link ports (docs/architecture.md 4, 11)."""

from dataclasses import dataclass

from amaranth.hdl import Signal, Module, Mux, Cat, Const, Array, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ...config import FabricConfig
from ...formats.counters import COUNTER_WIDTH
from ...formats.packet import CE, ECT0, ECT1
from ...formats.lfsr import LFSR_BITS
from ...network.routing import ESCAPE_VCS
from ...network.topology import LEAF, SPINE, TORUS_ROUTER, Topology
from ..ecn import EcnMarker
from ..egress_queue import EgressQueue
from ..arbiter import round_robin_pick
from ..islip import ISLIP
from ..packet import credit_signature, link_signature, packet_layout
from ..pfc import PfcEgress, PfcIngress, frame_signature
from .routing import Routing, credit_bits, tier_router
from ..skid_buffer import SkidBuffer
from ..voq import VOQBuffer
from ..checks import check_config

__all__ = ["Router", "router_signature", "router_capacity", "SWITCH", "KINDS"]

#: The router kind of ``fabric.topology = "switch"``: every port an endpoint.
SWITCH = "switch"
#: Router kinds, each one Verilog module: the switch and the fabrics' tiers.
KINDS = (SWITCH, TORUS_ROUTER, LEAF, SPINE)


@dataclass
class _ReadControl:
    """The read side of every input (section 4.5): a packet under way (``active``)
    toward ``cur_out`` on ``cur_vc`` in class ``cur_prio``; ``rd_out``, the output of
    the flit now in the input buffer's read register; ``started``, that flit is a
    packet's head; ``finishing``, it is its tail. With ``switch.registered_grant`` a
    match waits a cycle in the grant register (``granted``, toward ``grant_out``)
    before it starts; the input and the output stay reserved meanwhile, so no second
    grant collides. ``in_free``: the input may start a packet."""

    active: list
    cur_out: list
    rd_out: list
    cur_prio: list
    cur_vc: list
    started: list
    finishing: list
    granted: list
    grant_out: list
    in_free: list

    @classmethod
    def create(cls, n: int, priorities: int, vcs: int, bufs, registered: bool) -> "_ReadControl":
        """The signals of ``n`` inputs over the input buffers ``bufs``."""
        active = [Signal(name=f"active{k}") for k in range(n)]
        finishing = [bufs[k].rd_last for k in range(n)]
        granted = [Signal(name=f"granted{k}") for k in range(n)]
        in_free = [~active[k] | finishing[k] for k in range(n)]
        if registered:
            in_free = [in_free[k] & ~granted[k] for k in range(n)]
        return cls(
            active=active,
            cur_out=[Signal(range(n), name=f"cur_out{k}") for k in range(n)],
            rd_out=[Signal(range(n), name=f"rd_out{k}") for k in range(n)],
            cur_prio=[Signal(range(max(priorities, 2)), name=f"cur_prio{k}") for k in range(n)],
            cur_vc=[Signal(range(max(vcs, 2)), name=f"cur_vc{k}") for k in range(n)],
            started=[Signal(name=f"started{k}") for k in range(n)],
            finishing=finishing, granted=granted,
            grant_out=[Signal(range(n), name=f"grant_out{k}") for k in range(n)],
            in_free=in_free)


class Router(wiring.Component):
    """One router of the fabric of ``cfg``, of the tier ``kind`` (one of :data:`KINDS`).

    Its ports are the router's endpoint ports first, then its link ports, as
    ``superfabric.network.topology`` numbers them. Each input passes a
    :class:`~.skid_buffer.SkidBuffer` into a :class:`~.voq.VOQBuffer`, where
    the routing decision (:class:`~.routing.Routing`, taken as the head
    flit is admitted) files the packet in its queue (output, VC, class).
    Every cycle :class:`~.islip.ISLIP` matches free inputs to free outputs
    among the eligible queues; a match reads the packet flit by flit across
    the crossbar into the output's egress queue (packet mode). Toward a link
    output a queue is eligible only while the output's credits for its
    (class, VC) cover the longest packet (virtual cut-through); the matched
    input starts the lowest eligible VC, and the packet's length leaves the
    credits. Every flit read from a link input returns a credit upstream.
    With ``switch.registered_grant`` the match waits a cycle in a grant
    register, its input and output reserved, before the read starts. An
    input that starts ``switch.starvation_limit`` packets past one for the
    same output it could not request has that output wait for it (section 5.8).
    The crossbar writes the output VC into a flit's ``vc`` and counts a hop
    toward a link. ``docs/architecture.md`` sections 5 and 11.5 give the
    cycle rules the golden model ``sim/fabric/router.py`` mirrors.

    With ``kind = "switch"`` every port is an endpoint and there is no
    routing, VC or credit: the N x N switch of section 4.

    Ports
    -----
    i, o : packet streams of the endpoint ports.
    link_i, link_o : flit streams of the link ports, always ready (the
        credits guarantee the room), port ``endpoint ports + j``.
    credit_i, credit_o : credits arriving for link output ``j`` / returned
        for link input ``j``, one per ``valid``, of a (class, VC) ``pool``.
        A credit leaves one cycle after its flit is read, from the read
        register, which knows the packet's pool; the link adds the rest of
        its latency.
    router_id : the router's index in the fabric, a constant per instance.
    pause : bit ``port * priorities + prio`` stops new packets of that class
        toward that endpoint port (a packet under way completes).
    rx_packets, tx_packets, drops : packet counters per port.
    link_flits : flits sent on each link output. router_peak : the most
        flits the input buffers held together at the end of a cycle.
    link_credits : the credits of link output ``j`` for pool ``prio * vcs +
        vc``, at ``j * priorities * vcs + pool``, as the cycle sees them; and
        moved: a flit entered or left a skid buffer or left an egress queue
        in this cycle (the model's progress). Both for the testbench's stall
        detection and report.
    pfc_tx, pfc_rx : with ``[pfc] enabled``, pause frames sent to and
        received from the endpoints (a frame stream per endpoint port), and
        their counters; links are lossless by credits.
    ecn_marks : with ``[ecn] enabled``, packets marked CE per (output,
        priority); ``ecn_decided``/``ecn_backlog`` show each output's marking
        decisions and the backlog they saw. ``ecn_seed``: in a fabric, the
        start state of each output's LFSR (``EcnConfig.port_seed`` of its
        global port).
    """

    def __init__(self, cfg: FabricConfig, kind: str = SWITCH):
        check_config(cfg)
        topo = Topology.of(cfg)
        self._cfg = cfg
        self._kind = kind
        self._layout = packet_layout(cfg)
        r = tier_router(topo, kind)
        self._n = topo.ports(r)
        self._m = topo.endpoint_ports(r)
        self._fabric = kind != SWITCH
        self._vcs = cfg.fabric.vcs if self._fabric else 1
        #: Adaptive torus routing reserves room in VCs >= ESCAPE_VCS at the
        #: routing decision (section 11.4): those are always eligible and
        #: their starts take no credits.
        self._adaptive = kind == TORUS_ROUTER and cfg.fabric.routing == "adaptive"
        #: Packets an input may start past one it cannot request before the output
        #: waits for it (section 5.8); iSLIP only, as a FIFO input passes nothing.
        self._starvation = cfg.switch.starvation_limit if cfg.switch.scheduler == "islip" else 0
        #: Flits the input buffers hold at most, together.
        self.capacity = router_capacity(cfg, kind)
        super().__init__(router_signature(cfg, kind))

    def elaborate(self, platform):
        m = Module()
        sw, n = self._cfg.switch, self._n
        m.submodules.islip = islip = ISLIP(ports=n, priorities=sw.priorities,
                                           iterations=min(sw.islip_iterations, n))
        bufs, egress = self._port_blocks(m)
        rc = _ReadControl.create(n, sw.priorities, self._vcs, bufs, sw.registered_grant)
        arriving, credit, out_free = self._output_status(m, bufs, rc, egress)
        credits, bookings = self._credits(m, bufs, rc.started, rc.rd_out, rc.cur_prio, rc.cur_vc)
        eligible = self._eligible(m, credits)
        self._routing(m, bufs, credits, bookings)
        paused = self._pfc_egress(m)
        ready = self._requests(m, islip, bufs, rc, out_free, eligible, paused)
        starts = self._starts(m, islip, rc, ready)
        read_index, read_prio = self._read_control(m, bufs, rc, credit, starts)
        self._pfc_ingress(m, bufs, read_prio)
        leaving = self._leaving(m, bufs, starts[:3], read_index, rc.cur_vc)
        self._crossbar(m, bufs, rc.rd_out, arriving, egress, leaving)
        self._counters(m, bufs)
        if self._fabric:
            self._peak(m, bufs)
            self._observe(m, credits, egress)
        return m

    def _port_blocks(self, m):
        """Per port, its skid buffer into its input buffer, fed by the endpoint's stream
        or by the link, and its egress queue; returns ``(bufs, egress)``."""
        n, ends = self._n, self._m
        bufs, egress = [], []
        for k in range(n):
            skid = SkidBuffer(payload_shape=self._layout)
            buf = VOQBuffer(self._cfg, outputs=n, vcs=self._vcs, link=k >= ends)
            m.submodules[f"skid{k}"] = skid
            m.submodules[f"voq{k}"] = buf
            if k < ends:
                wiring.connect(m, wiring.flipped(self.i[k]), skid.i)
            else:
                # A link delivers without asking: its credits made the room.
                link = self.link_i[k - ends]
                m.d.comb += [skid.i.valid.eq(link.valid), skid.i.payload.eq(link.payload)]
            wiring.connect(m, skid.o, buf.i)
            bufs.append(buf)
            queue = EgressQueue(payload_shape=self._layout)
            m.submodules[f"egress{k}"] = queue
            egress.append(queue)
        return bufs, egress

    def _output_status(self, m, bufs, rc, egress):
        """Per output (section 4.5): ``arriving``, a read register holds a flit for it,
        which the crossbar writes into its egress queue; ``credit``, the queue's rule;
        ``out_free``, not busy and with credit. Returns the three lists."""
        n = self._n
        arriving = [Cat(bufs[k].rd_valid & (rc.rd_out[k] == o) for k in range(n)).any()
                    for o in range(n)]
        credit = [Signal(name=f"credit{o}") for o in range(n)]
        out_free = [Signal(name=f"out_free{o}") for o in range(n)]
        for o in range(n):
            busy = Cat(rc.active[k] & ~rc.finishing[k] & (rc.cur_out[k] == o)
                       for k in range(n)).any()
            if self._cfg.switch.registered_grant:
                busy = busy | Cat(rc.granted[k] & (rc.grant_out[k] == o) for k in range(n)).any()
            # The crossbar writes the egress queue exactly when a flit arrives.
            m.d.comb += [
                egress[o].i.valid.eq(arriving[o]),
                credit[o].eq(egress[o].credit),
                out_free[o].eq(~busy & credit[o]),
            ]
        return arriving, credit, out_free

    def _eligible(self, m, credits):
        """Virtual cut-through (section 11.3): ``eligible[o][v][p]``, queue (o, v, p) may
        be requested; always toward an endpoint output or on an adaptive VC, toward a
        link output while its credits cover the longest packet."""
        sw = self._cfg.switch
        n, ends, np_, nvc = self._n, self._m, sw.priorities, self._vcs
        eligible = [[[Const(1, 1)] * np_ for _ in range(nvc)] for _ in range(ends)]
        for o in range(ends, n):
            eligible.append([[Signal(name=f"eligible{o}_{v}_{p}") for p in range(np_)]
                             for v in range(nvc)])
            for v in range(nvc):
                for p in range(np_):
                    m.d.comb += eligible[o][v][p].eq(
                        1 if self._reserved(v) else credits[o - ends][p][v] >= sw.max_packet_flits)
        return eligible

    def _routing(self, m, bufs, credits, bookings):
        """The routing decision for each input's head flit (section 11.4), into its input
        buffer's ``route_out``/``route_vc``; the switch routes by ``dst``. An adaptive
        choice books its packet's length in its (output, class, VC), the lowest input
        first, if the room it was chosen by, less what lower inputs booked there, still
        holds it; else the packet takes its escape. The lengths booked drive
        ``bookings``."""
        cfg, np_, nvc = self._cfg, self._cfg.switch.priorities, self._vcs
        booking = []            # (books, out, vc, prio, length) per input
        for k in range(self._n):
            head = self._layout(bufs[k].i.payload)
            if not self._fabric:
                m.d.comb += bufs[k].route_out.eq(head.dst)
                continue
            route = Routing(cfg, self._kind)
            m.submodules[f"routing{k}"] = route
            m.d.comb += [route.router_id.eq(self.router_id), route.src.eq(head.src),
                         route.dst.eq(head.dst), route.prio.eq(head.prio)]
            if self._adaptive:
                wants = Signal(name=f"wants{k}")
                m.d.comb += wants.eq(bufs[k].rx_packet & (route.vc >= ESCAPE_VCS))
                # What lower inputs booked in the same (output, class, VC); the
                # bookings of a cycle never pass the credits, so this width holds it.
                booked = Signal(credit_bits(cfg), name=f"booked_before{k}")
                m.d.comb += booked.eq(sum(
                    (Mux(b & (o == route.out) & (v == route.vc) & (p == head.prio), size, 0)
                     for b, o, v, p, size in booking), 0))
                length = Signal(range(cfg.switch.max_packet_flits + 1), name=f"length{k}")
                escapes = Signal(name=f"escapes{k}")
                books = Signal(name=f"books{k}")
                m.d.comb += [length.eq(Mux(head.length == 0, 1, head.length)),
                             escapes.eq(wants & (route.room < booked + length)),
                             books.eq(wants & ~escapes),
                             bufs[k].route_out.eq(Mux(escapes, route.escape_out, route.out)),
                             bufs[k].route_vc.eq(Mux(escapes, route.escape_vc, route.vc))]
                booking.append((books, route.out, route.vc, head.prio, length))
            else:
                m.d.comb += [bufs[k].route_out.eq(route.out), bufs[k].route_vc.eq(route.vc)]
            for j, per_prio in enumerate(credits):
                for p in range(np_):
                    for v in range(nvc):
                        m.d.comb += route.credits[j][p][v].eq(per_prio[p][v])
        for (o, p, v), room in bookings.items():
            m.d.comb += room.eq(sum((Mux(books & (out == o) & (vc == v) & (prio == p), size, 0)
                                     for books, out, vc, prio, size in booking), 0))

    def _pfc_egress(self, m):
        """The pause mask of the endpoint outputs (sections 4.8, 4.11): the ``pause``
        input, with PFC also the egress timers of the endpoints' frames; returns it."""
        cfg, ends, np_ = self._cfg, self._m, self._cfg.switch.priorities
        paused = self.pause if ends else Const(0, 1)
        if cfg.pfc.enabled and ends:
            m.submodules.pfc_egress = pfc_egress = PfcEgress(cfg, ports=ends)
            for o in range(ends):
                wiring.connect(m, wiring.flipped(self.pfc_rx[o]), pfc_egress.rx[o])
            for q in range(ends * np_):
                m.d.comb += [self.pfc_rx_frames[q].eq(pfc_egress.frames_received[q]),
                             self.pfc_paused_cycles[q].eq(pfc_egress.paused_cycles[q])]
            paused = self.pause | pfc_egress.pause
        return paused

    def _requests(self, m, islip, bufs, rc, out_free, eligible, paused):
        """iSLIP's requests (sections 4.6, 5.8, 11.5): complete packets of eligible queues,
        a free input, a free output with credit, not paused; iSLIP takes the highest
        class. An output held for a starving input is free for that input only, and
        that input, once free, requests it alone if it can. Returns ``ready[k][v]``, bit
        ``o * priorities + p``: queue (o, v, p) of input ``k`` is eligible."""
        n, ends, np_, nvc = self._n, self._m, self._cfg.switch.priorities, self._vcs
        limit = self._starvation
        misses = [Signal(range(limit + 1), name=f"misses{k}") for k in range(n)]
        target = [Signal(range(n), name=f"target{k}") for k in range(n)]
        held = self._held(m, misses, target) if limit else None

        def unpaused(o, p):
            return ~paused[o * np_ + p] if o < ends else 1

        ready = []
        for k in range(n):
            req = bufs[k].req
            per_vc = [Signal(n * np_, name=f"ready{k}_{v}") for v in range(nvc)]
            for v in range(nvc):
                m.d.comb += per_vc[v].eq(Cat(req[self._queue(o, v, p)] & eligible[o][v][p]
                                             for o in range(n) for p in range(np_)))
            ready.append(per_vc)
            free = out_free if not limit else [
                out_free[o] & (held[o][k] | ~Cat(held[o]).any()) for o in range(n)]
            wanted = [[free[o] & unpaused(o, p) & Cat(per_vc[v][o * np_ + p]
                                                     for v in range(nvc)).any()
                       for p in range(np_)] for o in range(n)]
            requests = Cat(bit for per_out in wanted for bit in per_out)
            if not limit:
                m.d.comb += islip.req[k].eq(Mux(rc.in_free[k], requests, 0))
                continue
            can = [Cat(wanted[o]).any() for o in range(n)]
            alone = Signal(name=f"alone{k}")
            m.d.comb += alone.eq(Cat(held[o][k] & can[o] for o in range(n)).any())
            only_held = Cat(bit & held[o][k] for o in range(n) for bit in wanted[o])
            m.d.comb += islip.req[k].eq(Mux(rc.in_free[k], Mux(alone, only_held, requests), 0))
            blocked = Signal(n, name=f"blocked{k}")
            m.d.comb += blocked.eq(Cat(
                Cat(req[self._queue(o, v, p)] & unpaused(o, p)
                    for v in range(nvc) for p in range(np_)).any() & ~can[o]
                for o in range(n)))
            self._count_misses(m, k, misses[k], target[k], blocked, islip.match[k],
                               rc.in_free[k])
        return ready

    def _held(self, m, misses, target):
        """Section 5.8: ``held[o][k]``, output ``o`` waits for input ``k``, the lowest
        starving input (its misses at the limit) whose target it is."""
        n = self._n
        starving = [Signal(name=f"starving{k}") for k in range(n)]
        m.d.comb += [starving[k].eq(misses[k] == self._starvation) for k in range(n)]
        held = []
        for o in range(n):
            claims = [starving[k] & (target[k] == o) for k in range(n)]
            held.append([Signal(name=f"held{o}_for{k}") for k in range(n)])
            for k in range(n):
                m.d.comb += held[o][k].eq(claims[k] & ~Cat(claims[:k]).any() if k else claims[k])
        return held

    def _count_misses(self, m, k, misses, target, blocked, match, in_free):
        """Section 5.8, at input ``k``'s match: starving, it counts from 0 again once free;
        else a match past a packet for its target that it could not request (in
        ``blocked``) is one more miss; past packets for other outputs, the first of them
        after its target becomes its target, its first miss; past none, it counts from 0."""
        limit, n = self._starvation, self._n
        after = Signal(range(n), name=f"after_target{k}")
        m.d.comb += after.eq(Mux(target == n - 1, 0, target + 1))
        _, first = round_robin_pick(m, blocked, after, n, f"starve{k}")
        with m.If(misses == limit):
            with m.If(in_free):
                m.d.sync += misses.eq(0)
        with m.Elif(match.valid):
            with m.If((misses != 0) & blocked.bit_select(target, 1)):
                m.d.sync += misses.eq(misses + 1)
            with m.Elif(blocked.any()):
                m.d.sync += [target.eq(first), misses.eq(1)]
            with m.Else():
                m.d.sync += misses.eq(0)

    def _starts(self, m, islip, rc, ready):
        """Per input, the start of this cycle (section 4.5, 5.7): the match itself, or with
        ``registered_grant`` the one the grant register holds, which takes this cycle's.
        Returns the lists ``(start, start_out, start_prio, start_vc)``."""
        start, start_out, start_prio, start_vc = [], [], [], []
        for k in range(self._n):
            match_vc = self._lowest_vc(m, k, ready[k], islip)
            if not self._cfg.switch.registered_grant:
                start.append(islip.match[k].valid)
                start_out.append(islip.match[k].payload.output)
                start_prio.append(islip.match[k].payload.prio)
                start_vc.append(match_vc)
                continue
            grant_prio = Signal.like(islip.match[k].payload.prio, name=f"grant_prio{k}")
            grant_vc = Signal.like(match_vc, name=f"grant_vc{k}")
            m.d.sync += rc.granted[k].eq(islip.match[k].valid)
            with m.If(islip.match[k].valid):
                m.d.sync += [rc.grant_out[k].eq(islip.match[k].payload.output),
                             grant_prio.eq(islip.match[k].payload.prio), grant_vc.eq(match_vc)]
            start.append(rc.granted[k])
            start_out.append(rc.grant_out[k])
            start_prio.append(grant_prio)
            start_vc.append(grant_vc)
        return start, start_out, start_prio, start_vc

    def _read_control(self, m, bufs, rc, credit, starts):
        """Each input buffer's reads (section 4.5): a start of its queue, or the next
        flit of the packet under way while its output has credit; the read state at
        the edge. Returns, per input, what it reads this cycle: ``read_index``, the
        flit's (output, class) as ``out * priorities + prio``, and ``read_prio``."""
        np_ = self._cfg.switch.priorities
        start, start_out, start_prio, start_vc = starts
        read_index, read_prio = [], []
        for k in range(self._n):
            buf = bufs[k]
            active, finishing, cur_out = rc.active[k], rc.finishing[k], rc.cur_out[k]
            credit_cur = Cat(credit).bit_select(cur_out, 1)
            m.d.comb += [
                buf.start.eq(start[k]),
                buf.start_q.eq(self._queue(start_out[k], start_vc[k], start_prio[k])),
                buf.advance.eq(active & ~finishing & credit_cur),
            ]
            m.d.sync += [active.eq(start[k] | (active & ~finishing)), rc.started[k].eq(start[k])]
            with m.If(start[k]):
                m.d.sync += [cur_out.eq(start_out[k]), rc.rd_out[k].eq(start_out[k]),
                             rc.cur_prio[k].eq(start_prio[k]), rc.cur_vc[k].eq(start_vc[k])]
            with m.Else():
                m.d.sync += rc.rd_out[k].eq(cur_out)
            read_prio.append(Mux(start[k], start_prio[k], rc.cur_prio[k]))
            read_index.append(Mux(start[k], start_out[k], cur_out) * np_ + read_prio[k])
        return read_index, read_prio

    def _pfc_ingress(self, m, bufs, read_prio):
        """With PFC, the endpoint inputs' occupancy per class and the pause frames they
        send (section 4.11), from each input buffer's writes and reads."""
        cfg, ends, sw = self._cfg, self._m, self._cfg.switch
        if not (cfg.pfc.enabled and ends):
            return
        m.submodules.pfc_ingress = pfc_ingress = PfcIngress(
            cfg, refresh=cfg.pfc.refresh_cycles(sw.data_width), ports=ends)
        for k in range(ends):
            m.d.comb += [
                pfc_ingress.wr[k].eq(bufs[k].wr_valid), pfc_ingress.wr_prio[k].eq(bufs[k].wr_prio),
                pfc_ingress.rd[k].eq(bufs[k].start | bufs[k].advance),
                pfc_ingress.rd_prio[k].eq(read_prio[k]),
            ]
            wiring.connect(m, pfc_ingress.tx[k], wiring.flipped(self.pfc_tx[k]))
        for q in range(ends * sw.priorities):
            m.d.comb += [self.pfc_tx_frames[q].eq(pfc_ingress.frames_sent[q]),
                         self.pfc_peak_occupancy[q].eq(pfc_ingress.peak[q])]

    def _crossbar(self, m, bufs, rd_out, arriving, egress, leaving):
        """The crossbar into the egress queues, and the queues onto the output ports:
        at most one input's read register holds a flit for a given output in any
        cycle. A flit toward a link counts the hop; a link output is always ready.
        ``tx_packets`` and ``link_flits`` count what leaves."""
        n, ends = self._n, self._m
        for o in range(n):
            queue = egress[o]
            # The input whose read register holds a flit for o (at most one; which one
            # does not matter when none does): a binary select from registers, so each
            # bit is one n-way multiplexer.
            hits = [bufs[k].rd_valid & (rd_out[k] == o) for k in range(n)]
            source = Signal(range(n), name=f"xbar_source{o}")
            m.d.comb += source.eq(Cat(Cat(hits[k] for k in range(n) if k >> b & 1).any()
                                      for b in range(len(source))))
            data = Array(leaving)[source]
            if o < ends:
                m.d.comb += queue.i.payload.eq(data)
                wiring.connect(m, queue.o, wiring.flipped(self.o[o]))
                sent = self.o[o].valid & self.o[o].ready
                payload = self.o[o].payload
            else:
                hop = Signal(self._layout, name=f"hop{o}")
                m.d.comb += [hop.eq(data), hop.hops.eq(self._layout(data).hops + 1),
                             queue.i.payload.eq(hop)]
                link = self.link_o[o - ends]
                m.d.comb += [link.valid.eq(queue.o.valid), link.payload.eq(queue.o.payload),
                             queue.o.ready.eq(1)]
                sent, payload = link.valid, link.payload
                flits = self.link_flits[o - ends]
                m.d.sync += flits.eq(flits + sent)
            last_out = sent & self._layout(payload).last
            m.d.sync += self.tx_packets[o].eq(self.tx_packets[o] + last_out)

    def _counters(self, m, bufs):
        """``rx_packets`` and ``drops`` per input, and the credits back upstream: one per
        flit read from a link input, of its pool."""
        for k in range(self._m, self._n):
            m.d.comb += [self.credit_o[k - self._m].valid.eq(bufs[k].rd_valid),
                         self.credit_o[k - self._m].pool.eq(bufs[k].rd_pool)]
        for k in range(self._n):
            m.d.sync += [
                self.rx_packets[k].eq(self.rx_packets[k] + bufs[k].rx_packet),
                self.drops[k].eq(self.drops[k] + bufs[k].drop_packet),
            ]

    def _observe(self, m, credits, egress):
        """``link_credits`` and ``moved``, which the testbench watches for stalls."""
        ends = self._m
        for j, per_prio in enumerate(credits):
            for p, per_vc in enumerate(per_prio):
                for v, shown in enumerate(per_vc):
                    m.d.comb += self.link_credits[(j * len(per_prio) + p) * self._vcs + v].eq(shown)
        skids = [m.submodules[f"skid{k}"] for k in range(self._n)]
        moves = [skid.i.valid & skid.i.ready for skid in skids]
        moves += [skid.o.valid & skid.o.ready for skid in skids]
        moves += [egress[o].o.valid & (self.o[o].ready if o < ends else 1) for o in range(self._n)]
        m.d.comb += self.moved.eq(Cat(moves).any())

    def _credits(self, m, bufs, started, rd_out, cur_prio, cur_vc):
        """Per link output ``j``, ``credits[j][prio][vc]`` as the model holds them at the
        start of the cycle: the room of that pool downstream; and ``bookings``,
        ``(output, prio, vc)`` -> the signal the caller drives with the length an
        adaptive routing decision books in that pool this cycle (its VCs only).
        Returns ``(credits, bookings)``.

        A start takes its packet's length from the credits at its edge, but
        the length is known only when the head flit is in the read register,
        a cycle later; until the counter catches up at that edge, the
        credits shown are the counter less that length.
        """
        cfg, sw = self._cfg, self._cfg.switch
        n, ends, np_, nvc = self._n, self._m, sw.priorities, self._vcs
        out = []
        bookings = {}
        for o in range(ends, n):
            j = o - ends
            taking, length, prio, vc = Const(0, 1), 0, 0, 0
            for k in range(n):
                head = self._layout(bufs[k].rd_payload)
                here = bufs[k].rd_valid & started[k] & (rd_out[k] == o)
                taking = taking | here
                length = Mux(here, Mux(head.length == 0, 1, head.length), length)
                prio = Mux(here, cur_prio[k], prio)
                vc = Mux(here, cur_vc[k], vc)
            taken = Signal(name=f"taken{o}")
            taken_len = Signal(range(sw.max_packet_flits + 1), name=f"taken_len{o}")
            taken_prio = Signal(range(max(np_, 2)), name=f"taken_prio{o}")
            taken_vc = Signal(range(max(nvc, 2)), name=f"taken_vc{o}")
            m.d.comb += [taken.eq(taking), taken_len.eq(length), taken_prio.eq(prio),
                         taken_vc.eq(vc)]
            back = self.credit_i[j]
            per_prio = []
            for p in range(np_):
                per_vc = []
                for v in range(nvc):
                    counter = Signal(credit_bits(cfg), init=cfg.fabric.vc_buffer_flits,
                                     name=f"credits{o}_{p}_{v}")
                    shown = Signal(credit_bits(cfg), name=f"credits_now{o}_{p}_{v}")
                    returned = back.valid & (back.pool == p * nvc + v)
                    if self._reserved(v):
                        room = Signal(credit_bits(cfg), name=f"booked{o}_{p}_{v}")
                        bookings[o, p, v] = room
                        m.d.comb += shown.eq(counter)
                        m.d.sync += counter.eq(counter + returned - room)
                    else:
                        pending = Mux(taken & (taken_prio == p) & (taken_vc == v), taken_len, 0)
                        m.d.comb += shown.eq(counter - pending)
                        m.d.sync += counter.eq(shown + returned)
                    per_vc.append(shown)
                per_prio.append(per_vc)
            out.append(per_prio)
        return out, bookings

    def _reserved(self, vc: int) -> bool:
        """VC ``vc`` takes its room at the routing decision, not at the start."""
        return self._adaptive and vc >= ESCAPE_VCS

    def _queue(self, out, vc, prio):
        """The index of queue (out, vc, prio) of an input buffer."""
        np_ = self._cfg.switch.priorities
        if self._vcs == 1:
            return out * np_ + prio
        return (out * self._vcs + vc) * np_ + prio

    def _lowest_vc(self, m, k, ready, islip):
        """The VC input ``k`` starts after its match: the lowest eligible of the matched
        (output, class)."""
        np_, nvc = self._cfg.switch.priorities, self._vcs
        if nvc == 1:
            return Const(0, 1)
        vc = Signal(range(nvc), name=f"match_vc{k}")
        where = islip.match[k].payload.output * np_ + islip.match[k].payload.prio
        for v in reversed(range(nvc)):
            with m.If(ready[v].bit_select(where, 1)):
                m.d.comb += vc.eq(v)
        return vc

    def _leaving(self, m, bufs, starts, read_index, cur_vc):
        """The flit leaving each input's read register: the ECN mark applied, and in a
        fabric the output VC written. ``starts``: per input the start, its output and
        class."""
        cfg = self._cfg
        n = self._n
        if cfg.ecn.enabled:
            m.submodules.ecn = marker = EcnMarker(cfg, ports=n, most=self.capacity,
                                                  seeded=self._fabric)
            if self._fabric:
                for o in range(n):
                    m.d.comb += marker.seed[o].eq(self.ecn_seed[o])
        leaving = []
        for k in range(n):
            buf = bufs[k]
            flit = self._layout(buf.rd_payload)
            out = Signal(self._layout, name=f"leaving{k}")
            m.d.comb += out.eq(flit)
            if self._fabric:
                m.d.comb += out.vc.eq(cur_vc[k])
            if cfg.ecn.enabled:
                self._mark(m, k, buf, [each[k] for each in starts], read_index[k], marker,
                           flit, out)
            leaving.append(out.as_value())
        if cfg.ecn.enabled:
            m.d.comb += [self.ecn_decided.eq(marker.decided)]
            for o in range(n):
                m.d.comb += self.ecn_backlog[o].eq(marker.backlog_seen[o])
        return leaving

    def _mark(self, m, k, buf, start, read_index, marker, flit, out):
        """ECN at input ``k``: decide at each packet start (``start``: the start, its
        output and class), rewrite ECT to CE on the way out."""
        n, np_ = self._n, self._cfg.switch.priorities
        start, start_out, start_prio = start
        start_index = start_out * np_ + start_prio
        cur_index = Signal(range(n * np_), name=f"cur_index{k}")
        mark = Signal(name=f"mark{k}")            # decision for the packet under way
        head = Signal(name=f"head_read{k}")       # the read register holds its head
        with m.If(start):
            m.d.sync += [cur_index.eq(start_index), mark.eq(marker.mark[k])]
        # cur_index is the (output, class) of the packet whose head is
        # now in the read register, for its mark counter.
        m.d.sync += head.eq(start)
        m.d.comb += [
            marker.wr[k].eq(buf.wr_valid), marker.wr_index[k].eq(buf.wr_index),
            marker.rd[k].eq(buf.start | buf.advance),
            marker.rd_index[k].eq(read_index),
            marker.start[k].eq(start), marker.start_out[k].eq(start_out),
            marker.start_index[k].eq(start_index),
        ]
        capable = (flit.ecn == ECT1) | (flit.ecn == ECT0)
        m.d.comb += out.ecn.eq(Mux(mark & capable, CE, flit.ecn))
        # Count a mark once per packet, when its head is in the read register.
        for q, counter in enumerate(self.ecn_marks):
            with m.If(head & mark & capable & (cur_index == q)):
                m.d.sync += counter.eq(counter + 1)

    def _peak(self, m, bufs):
        """router_peak: the most flits stored at the end of any cycle."""
        stored = Signal(range(self.capacity + 1))
        written = sum(buf.wr_valid for buf in bufs)
        read = sum(buf.start | buf.advance for buf in bufs)
        after = Signal(range(self.capacity + 1))
        m.d.comb += after.eq(stored + written - read)
        m.d.sync += stored.eq(after)
        with m.If(after > self.router_peak):
            m.d.sync += self.router_peak.eq(after)


def router_capacity(cfg: FabricConfig, kind: str) -> int:
    """Flits the input buffers of a router of tier ``kind`` hold at most, together."""
    topo = Topology.of(cfg)
    r = tier_router(topo, kind)
    links = topo.ports(r) - topo.endpoint_ports(r)
    vcs = cfg.fabric.vcs if kind != SWITCH else 1
    return (topo.endpoint_ports(r) * cfg.switch.buffer_flits
            + links * cfg.switch.priorities * vcs * cfg.fabric.vc_buffer_flits)


def router_signature(cfg: FabricConfig, kind: str) -> wiring.Signature:
    """The ports of a :class:`Router` of tier ``kind`` (one of :data:`KINDS`)."""
    topo = Topology.of(cfg)
    tiers = {"switch": (SWITCH,), "torus": (TORUS_ROUTER,), "fat_tree": (LEAF, SPINE)}
    if kind not in tiers[topo.kind]:
        raise ValueError(f"kind = {kind!r}: must be one of {', '.join(tiers[topo.kind])} "
                         f"with fabric.topology = {topo.kind!r}")
    sw, fabric = cfg.switch, kind != SWITCH
    layout = packet_layout(cfg)
    r = tier_router(topo, kind)
    n, m = topo.ports(r), topo.endpoint_ports(r)
    links = n - m
    capacity = router_capacity(cfg, kind)
    members = {}
    if m:
        members.update({
            "i": In(stream.Signature(layout)).array(m),
            "o": Out(stream.Signature(layout)).array(m),
        })
    if links:
        members.update({
            "link_i": In(link_signature(cfg)).array(links),
            "link_o": Out(link_signature(cfg)).array(links),
            "credit_i": In(credit_signature(cfg)).array(links),
            "credit_o": Out(credit_signature(cfg)).array(links),
        })
    if fabric:
        members["router_id"] = In(range(topo.routers))
    if m:
        members["pause"] = In(unsigned(m * sw.priorities))
    members.update({
        "rx_packets": Out(COUNTER_WIDTH).array(n),
        "tx_packets": Out(COUNTER_WIDTH).array(n),
        "drops": Out(COUNTER_WIDTH).array(n),
    })
    if fabric:
        members.update({
            "link_flits": Out(COUNTER_WIDTH).array(links),
            "router_peak": Out(range(capacity + 1)),
            "link_credits": Out(credit_bits(cfg)).array(links * sw.priorities * cfg.fabric.vcs),
            "moved": Out(1),
        })
    if cfg.pfc.enabled and m:
        classes = m * sw.priorities
        members.update({
            "pfc_tx": Out(frame_signature()).array(m),
            "pfc_rx": In(frame_signature()).array(m),
            "pfc_tx_frames": Out(COUNTER_WIDTH).array(classes),
            "pfc_rx_frames": Out(COUNTER_WIDTH).array(classes),
            "pfc_paused_cycles": Out(COUNTER_WIDTH).array(classes),
            "pfc_peak_occupancy": Out(sw.buffer_flits.bit_length()).array(classes),
        })
    if cfg.ecn.enabled:
        members.update({
            "ecn_marks": Out(COUNTER_WIDTH).array(n * sw.priorities),
            "ecn_decided": Out(n),
            "ecn_backlog": Out(capacity.bit_length()).array(n),
        })
        if fabric:
            members["ecn_seed"] = In(LFSR_BITS).array(n)
    return wiring.Signature(members)
