"""The RDMA connection-aggregation engine of one endpoint (section 10).

Queue pairs map onto a few reliable channels per peer; the channel holds
all the reliability state (PSNs, a window of packet descriptors, a
retransmission timer), the QP none. ``docs/architecture.md`` section 10.6
gives the cycle rules; the golden model in ``sim/rdma/kernels/engine.py``
follows the same text.
"""

from types import SimpleNamespace

from amaranth.hdl import Signal, Module, Mux, Cat, Const, Array
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...config import FabricConfig
from ...formats import rdma_wire as wire
from ...formats.counters import COUNTER_WIDTH, RDMA_COUNTERS
from ...formats.dcqcn import LINE_RATE, RATE_BITS
from ...formats.packet import CE, ECT0, NOT_ECT
from .dcqcn import NotificationPoint, ReactionPoint
from ..arbiter import round_robin_pick
from ..checks import check_config
from ..packet import packet_layout
from .header import (bth_layout, cpl_layout, data_opcode, descriptor_layout, hcs, pack,
                          psn_lt, psn_within, rcpl_layout, reth_layout, wr_layout)
from .keys import KeyTables, TABLE_WRITE

__all__ = ["RdmaEngine", "engine_signature", "dma_signature", "read_buffer_depth"]

PSN = wire.PSN_BITS


class Verdict(enum.Enum, shape=3):
    """A data packet's receive decision (section 10.6 step 5), held from its
    RETH to its last flit; ``NONE`` for a corrupt or blocked packet, or none."""
    NONE = 0
    ACCEPT = 1
    DENIED = 2
    DUPLICATE = 3
    GAP = 4
    RENAK = 5


def dma_signature(cfg: FabricConfig) -> wiring.Signature:
    """The DMA streams toward host memory.

    Reads: a request stream (``rd_req``, one word address per transfer)
    and a response stream (``rd_rsp``, the words in request order, always
    ready: the engine requests only what it has room for). Writes: a stream
    (``wr``) of (address, word), always ready: the host takes every write.
    """
    addr = range(cfg.rdma.memory_words)
    return wiring.Signature({
        "rd_req": Out(stream.Signature(addr)),
        "rd_rsp": In(stream.Signature(64, always_ready=True)),
        "wr": Out(stream.Signature(data.StructLayout({"addr": addr, "data": 64}),
                                   always_ready=True)),
    })


def engine_signature(cfg: FabricConfig) -> wiring.Signature:
    """The ports of :class:`RdmaEngine` for ``cfg``."""
    nc = cfg.endpoints * cfg.rdma.channels_per_peer
    dcqcn = {}
    if cfg.dcqcn.enabled:
        dcqcn = {"cnp": Out(stream.Signature(range(nc), always_ready=True)),
                 "rate": Out(RATE_BITS).array(nc), "rate_changed": Out(nc)}
    return wiring.Signature({
        "endpoint": In(range(cfg.endpoints)),
        "wr": In(stream.Signature(wr_layout(cfg))),
        "cpl": Out(stream.Signature(cpl_layout(), always_ready=True)),
        "rcpl": Out(stream.Signature(rcpl_layout(cfg), always_ready=True)),
        "tx": Out(stream.Signature(packet_layout(cfg))),
        "rx": In(stream.Signature(packet_layout(cfg))),
        "dma": Out(dma_signature(cfg)),
        "tables": In(TABLE_WRITE(cfg)),
        "counters": Out(COUNTER_WIDTH).array(len(RDMA_COUNTERS)),
        "retired": Out(1),
        "paused": In(2),
        "free": Out(wire.free_slot_bits(cfg.rdma.window)).array(nc),
        **dcqcn,
    })


def read_buffer_depth(cfg: FabricConfig) -> int:
    """Payload words the transmitter buffers: enough requests in flight to
    cover the read latency and still send one word per cycle."""
    return cfg.rdma.dma_latency + 2


class RdmaEngine(wiring.Component):
    """One endpoint's engine: WR stream in, packets out and in, DMA to host memory.

    Ports
    -----
    wr : work requests (``valid``/``ready``); taken as section 10.6 step 1 says.
    cpl, rcpl : send and receive completions, streams that are always ready
        (``valid`` for one cycle, no back-pressure).
    tx, rx : the endpoint's uplink and downlink packet streams (``rx.ready`` is always 1).
    dma : host memory ports (payload reads, received-data writes).
    tables : the registration and page table write port.
    counters : section 10.8, in :data:`~superfabric.formats.counters.RDMA_COUNTERS` order.
    retired : a packet is retired in this cycle (the testbench's sign of progress).
    paused : the data class (bit 0) and the control class (bit 1) are paused by
        the switch's PFC; a paused class starts no packet.
    free : per channel, the free slots of its window (the hosts offer a WR
        only to a channel with room for it).
    cnp : with ``[dcqcn] enabled``, a stream, always ready, of the receive
        context a CNP picked this cycle answers; rate, rate_changed: each channel's
        rate and whether it changed at the last edge (section 10.13).
    endpoint : the engine's own endpoint, ``0 .. E - 1`` (``cfg.endpoints``) (its source
        address on the fabric; a WR to it is a bad request), constant per
        instance: an input, so that one module serves every endpoint.

    Parameters
    ----------
    cfg : FabricConfig
        The fabric, with ``[rdma] enabled``.
    """

    def __init__(self, cfg: FabricConfig):
        check_config(cfg)
        if not cfg.rdma.enabled:
            raise ValueError("rdma.enabled = false: the RDMA engine needs rdma.enabled = true")
        self._cfg = cfg
        # The state of the channels and receive contexts toward the other
        # endpoints, in channel order (section 10.5): index i holds the
        # channels toward the endpoint of rank i // C, none toward the engine itself.
        self._n = (cfg.endpoints - 1) * cfg.rdma.channels_per_peer
        super().__init__(engine_signature(cfg))

    def elaborate(self, platform):
        """The engine's parts, elaborated in the order of section 10.6's steps.

        Each part reads the registers (:meth:`_registers`) and the decisions
        of the parts before it, all passed in. A register that several steps
        assign (``snd``, ``timer``, the context's pending bits) gets the
        assignment of the later step, as the text says: the order of the
        calls below is that override order.
        """
        m = Module()
        tables = m.submodules.tables = KeyTables(self._cfg)
        wiring.connect(m, wiring.flipped(self.tables), tables.write)
        r = self._registers(m)
        cc = self._congestion_control(m)
        seg = self._segmenter(m, r, tables)
        self._completion(m, r, seg)
        pick = self._transmit_pick(m, r, cc)
        self._transmitter(m, r, tables, cc, pick)
        rx = self._receiver(m, r, tables)
        timeouts = self._acknowledger(m, r, seg, rx)
        self._contexts(m, r, pick, rx)
        if cc is not None:
            self._connect_congestion_control(m, r, cc, pick, rx)
        self._counters(m, r, pick, rx, timeouts)
        return m

    # -- state ----------------------------------------------------------------------

    def _registers(self, m: Module) -> SimpleNamespace:
        """Section 10.5's state: the channels (sender role), the receive contexts
        (target role), the window of descriptors and the engine's own."""
        cfg, rd = self._cfg, self._cfg.rdma
        NC, W = self._n, rd.window

        def per(n, shape, name, init=0):
            return Array(Signal(shape, name=f"{name}{k}", init=init) for k in range(n))

        start = rd.start_psn
        nxt, snd, una, ret, hsn = (per(NC, PSN, f"ch_{n}_", start)
                                   for n in ("nxt", "snd", "una", "ret", "hsn"))
        timer = per(NC, rd.retransmit_timeout.bit_length(), "ch_timer_")
        msgerr = per(NC, 1, "ch_msgerr_")
        epoch = per(NC, wire.EPOCH_BITS, "ch_epoch_")
        err = Signal(NC * W)
        epsn = per(NC, PSN, "cx_epsn_", start)
        nak_sent, pend_ack, pend_seq, pend_acc = (
            per(NC, 1, f"cx_{n}_") for n in ("nak_sent", "pend_ack", "pend_seq", "pend_acc"))
        unacked = per(NC, W.bit_length(), "cx_unacked_")
        # The epoch the context accepts; after a denial (awaiting) its packets
        # are refused until the sender, having heard the NAK (access), switches.
        awaiting = per(NC, 1, "cx_awaiting_")
        cx_epoch = per(NC, wire.EPOCH_BITS, "cx_epoch_")
        denied = per(NC, PSN, "cx_denied_")
        ack_timer = per(NC, rd.ack_timeout.bit_length(), "cx_ack_timer_")
        seg_off = Signal(wire.LEN_BITS + 1)
        tx_ptr = Signal(range(NC))
        ret_ptr = Signal(range(NC))

        desc = Memory(shape=descriptor_layout(cfg), depth=NC * W, init=[])
        m.submodules.desc = desc
        desc_w = desc.write_port()
        desc_tx = desc.read_port(domain="comb")
        desc_ret = desc.read_port(domain="comb")

        # The port names channels by number; one toward the engine itself is always free.
        self._by_channel(m, self.free, W, [W - (nxt[i] - ret[i])[:PSN] for i in range(NC)])
        return SimpleNamespace(
            nxt=nxt, snd=snd, una=una, ret=ret, hsn=hsn, timer=timer, msgerr=msgerr, epoch=epoch,
            err=err, epsn=epsn, nak_sent=nak_sent, pend_ack=pend_ack, pend_seq=pend_seq,
            pend_acc=pend_acc, unacked=unacked, awaiting=awaiting, cx_epoch=cx_epoch,
            denied=denied, ack_timer=ack_timer, seg_off=seg_off, tx_ptr=tx_ptr, ret_ptr=ret_ptr,
            desc_w=desc_w, desc_tx=desc_tx, desc_ret=desc_ret)

    def _slot(self, ch, psn):
        """The window slot of ``psn`` on channel ``ch``: ``ch * W + psn mod W``."""
        wbits = (self._cfg.rdma.window - 1).bit_length()
        return Cat(psn[:wbits], ch) if wbits else ch

    def _index(self, peer, ch):
        """The state index of channel (or receive context) ``ch`` toward ``peer``:
        ``rank * C + ch``, ``rank = peer - (peer > me)`` (section 10.5)."""
        C = self._cfg.rdma.channels_per_peer
        return Mux(peer > self.endpoint, peer - 1, peer) * C + ch

    def _peer(self, index):
        """The peer of the channel or receive context at state ``index``."""
        rank = index // self._cfg.rdma.channels_per_peer
        return Mux(rank >= self.endpoint, rank + 1, rank)

    def _by_channel(self, m, ports, own, state):
        """Drive the port array ``ports``, indexed by channel number ``peer * C + q``,
        from ``state``, indexed by state index: a channel toward the engine itself
        shows ``own``."""
        C = self._cfg.rdma.channels_per_peer
        for c, port in enumerate(ports):
            peer, q = divmod(c, C)
            # State index of the channel if the peer is below or above the engine.
            below = state[peer * C + q] if peer * C + q < self._n else own
            above = state[(peer - 1) * C + q] if peer >= 1 else own
            # The first and the last endpoint are on one side of every other:
            # no comparison that a lint would call constant.
            other = (below if peer == 0 else above if peer == len(ports) // C - 1 else
                     Mux(peer > self.endpoint, above, below))
            m.d.comb += port.eq(Mux(self.endpoint == peer, own, other))

    def _congestion_control(self, m: Module) -> SimpleNamespace | None:
        """DCQCN (section 10.13): the notification point of the receive contexts
        and the reaction points and pacers of the channels; ``None`` without it."""
        cfg = self._cfg
        if not cfg.dcqcn.enabled:
            return None
        units = cfg.dcqcn.units
        notify = m.submodules.np = NotificationPoint(contexts=self._n, interval=units.cnp_interval)
        react = m.submodules.rp = ReactionPoint(channels=self._n, units=units,
                                                max_packet_flits=cfg.switch.max_packet_flits)
        return SimpleNamespace(notify=notify, react=react)

    # -- 1. segmenter ---------------------------------------------------------------

    def _segmenter(self, m: Module, r: SimpleNamespace, tables: KeyTables) -> SimpleNamespace:
        """Step 1: the offered WR's channel and checks, its next packet's
        descriptor written to the window, and the WR taken."""
        cfg, rd = self._cfg, self._cfg.rdma
        E, C, W, NC, me = cfg.endpoints, rd.channels_per_peer, rd.window, self._n, self.endpoint
        M = wire.payload_words(cfg.switch.max_packet_flits)
        Q = rd.per_endpoint(E)
        nxt, ret, seg_off = r.nxt, r.ret, r.seg_off
        wr = self.wr.payload
        dst_ok = (wr.dst < E) & (wr.dst != me)
        ch_wr = Signal(range(NC))
        m.d.comb += ch_wr.eq(Mux(dst_ok, self._index(wr.dst, wr.qp % C), 0))
        bad = ~dst_ok | (wr.length == 0) | (wr.qp >= Q)
        local = tables.lookup(m, wr.lkey, "local")
        local_ok = local.check(wr.laddr, wr.length, wire.ACCESS_LOCAL_READ)
        is_err = Signal()
        m.d.comb += is_err.eq(bad | ~local_ok)
        in_flight = (nxt[ch_wr] - ret[ch_wr])[:PSN]
        seg_take = Signal()
        seg_last = Signal()
        m.d.comb += [seg_take.eq(self.wr.valid & ~is_err & (in_flight < W)),
                     seg_last.eq(seg_off + M >= wr.length)]
        seg_err_cpl = Signal()
        # A failing WR names no usable channel (its dst may be wrong), so it
        # waits for every earlier WR of the engine: completions stay in QP order.
        drained = Cat(*(nxt[k] == ret[k] for k in range(NC))).all()
        m.d.comb += seg_err_cpl.eq(self.wr.valid & is_err & drained)
        m.d.comb += self.wr.ready.eq((seg_take & seg_last) | seg_err_cpl)

        with m.If(seg_take):
            d = r.desc_w.data
            m.d.comb += [
                r.desc_w.en.eq(1), r.desc_w.addr.eq(self._slot(ch_wr, nxt[ch_wr])),
                d.qp.eq(wr.qp), d.opcode.eq(wr.opcode), d.first.eq(seg_off == 0),
                d.last.eq(seg_last), d.lkey.eq(wr.lkey), d.va.eq(wr.laddr + seg_off),
                d.rkey.eq(wr.rkey), d.raddr.eq(wr.raddr), d.mlen.eq(wr.length),
                d.offset.eq(seg_off), d.words.eq(Mux(seg_last, wr.length - seg_off, M)),
                d.tag.eq(wr.tag),
            ]
            m.d.sync += seg_off.eq(Mux(seg_last, 0, seg_off + M))
        for c in range(NC):
            with m.If(seg_take & (ch_wr == c)):
                m.d.sync += nxt[c].eq(nxt[c] + 1)
        return SimpleNamespace(ch=ch_wr, take=seg_take, bad=bad, err_cpl=seg_err_cpl)

    # -- 2. completion: the retire unit -----------------------------------------------

    def _completion(self, m: Module, r: SimpleNamespace, seg: SimpleNamespace) -> None:
        """Step 2: the retire unit retires a channel's oldest packet (``ret``,
        ``msgerr``, ``ret_ptr``) and gives the completion, its own or, when it
        gives none, a failing WR's (``seg.err_cpl``)."""
        NC = self._n
        ret, una, desc_ret = r.ret, r.una, r.desc_ret
        ret_mask = Cat(*(ret[k] != una[k] for k in range(NC)))
        ret_found, ret_ch = round_robin_pick(m, ret_mask, r.ret_ptr, NC, "retire")
        ret_slot = self._slot(ret_ch, ret[ret_ch])
        m.d.comb += desc_ret.addr.eq(ret_slot)
        ret_err = r.err.bit_select(ret_slot, 1)
        m.d.comb += self.retired.eq(ret_found)
        ret_cpl = Signal()
        m.d.comb += ret_cpl.eq(ret_found & desc_ret.data.last)

        wr = self.wr.payload
        cpl = self.cpl.payload
        m.d.comb += self.cpl.valid.eq(ret_cpl | seg.err_cpl)
        with m.If(ret_cpl):
            m.d.comb += [cpl.qp.eq(desc_ret.data.qp), cpl.tag.eq(desc_ret.data.tag),
                         cpl.status.eq(Mux(r.msgerr[ret_ch] | ret_err, wire.STATUS_REMOTE,
                                           wire.STATUS_OK))]
        with m.Else():
            m.d.comb += [cpl.qp.eq(wr.qp), cpl.tag.eq(wr.tag),
                         cpl.status.eq(Mux(seg.bad, wire.STATUS_BAD, wire.STATUS_LOCAL))]
        for c in range(NC):
            with m.If(ret_found & (ret_ch == c)):
                m.d.sync += [ret[c].eq(ret[c] + 1),
                             r.msgerr[c].eq(Mux(desc_ret.data.last, 0, r.msgerr[c] | ret_err))]
        # The round-robin pointer moves one past the channel served.
        with m.If(ret_found):
            m.d.sync += r.ret_ptr.eq(Mux(ret_ch == NC - 1, 0, ret_ch + 1))

    # -- 3. transmitter -------------------------------------------------------------

    def _transmit_pick(self, m: Module, r: SimpleNamespace,
                       cc: SimpleNamespace | None) -> SimpleNamespace:
        """Step 3's decision, while no packet waits as the next: a CNP, else the
        lowest context with a pending bit (its syndrome), else data round robin;
        a paused class waits."""
        NC = self._n
        nx_busy = Signal()
        ctrl_mask = Cat(*(r.pend_ack[k] | r.pend_seq[k] | r.pend_acc[k] for k in range(NC)))
        ctrl_x = Signal(range(NC))
        chain = Const(NC - 1, range(NC))
        for k in reversed(range(NC - 1)):
            chain = Mux(ctrl_mask[k], k, chain)
        m.d.comb += ctrl_x.eq(chain)
        data_mask = Cat(*(r.snd[k] != r.nxt[k] for k in range(NC)))
        if cc is not None:
            data_mask = data_mask & cc.react.ready     # the pacers hold the channels to their rates
        data_found, data_ch = round_robin_pick(m, data_mask, r.tx_ptr, NC, "txdata")
        data_paused, control_paused = self.paused[0], self.paused[1]
        cnp_any = cc.notify.pending.any() if cc is not None else Const(0, 1)
        control_any = (cnp_any | ctrl_mask.any()) & ~control_paused
        pick_cnp = Signal()
        pick_ctrl = Signal()
        pick_data = Signal()
        # CNPs first, then acknowledgements, then data; a paused class waits.
        m.d.comb += [pick_cnp.eq(~nx_busy & cnp_any & ~control_paused),
                     pick_ctrl.eq(~nx_busy & ~cnp_any & ctrl_mask.any() & ~control_paused),
                     pick_data.eq(~nx_busy & ~control_any & data_found & ~data_paused)]
        m.d.comb += r.desc_tx.addr.eq(self._slot(data_ch, r.snd[data_ch]))
        syndrome = Signal(2)
        m.d.comb += syndrome.eq(Mux(r.pend_acc[ctrl_x], wire.SYN_NAK_ACCESS,
                                    Mux(r.pend_seq[ctrl_x], wire.SYN_NAK_SEQ, wire.SYN_ACK)))
        return SimpleNamespace(next_busy=nx_busy, cnp=pick_cnp, ctrl=pick_ctrl, data=pick_data,
                               ctrl_x=ctrl_x, data_ch=data_ch, syndrome=syndrome)

    def _transmitter(self, m: Module, r: SimpleNamespace, tables: KeyTables,
                     cc: SimpleNamespace | None, pick: SimpleNamespace) -> None:
        """Step 3's packets: the picked packet's headers latched, as the packet
        sending if the transmitter is free, else as the next, which starts
        once it is free and its class is not paused; both packets' payloads
        read from host memory ahead into a small buffer, the flits sent on the
        uplink. ``pick.next_busy`` while a packet waits as the next."""
        cfg, rd = self._cfg, self._cfg.rdma
        E, C = cfg.endpoints, rd.channels_per_peer
        M = wire.payload_words(cfg.switch.max_packet_flits)
        L = cfg.switch.max_packet_flits
        ctrl_x, data_ch, syndrome = pick.ctrl_x, pick.data_ch, pick.syndrome

        fields = ("len", "dst", "bth", "reth", "lkey", "va", "words")

        def packet(prefix, **state):
            """One packet's fields (``words`` 0: a one-flit packet), and ``state``."""
            return SimpleNamespace(
                len=Signal(range(L + 1), name=f"{prefix}_len"),
                dst=Signal(range(E), name=f"{prefix}_dst"), bth=Signal(64, name=f"{prefix}_bth"),
                reth=Signal(64, name=f"{prefix}_reth"),
                lkey=Signal(wire.KEY_BITS, name=f"{prefix}_lkey"),
                va=Signal(wire.VA_BITS, name=f"{prefix}_va"),
                words=Signal(range(M + 1), name=f"{prefix}_words"), **state)

        # The packet sending and the next, latched, each with its payload words requested
        # (``rd``); the packet picked, combinational.
        tx = packet("tx", busy=Signal(name="tx_busy"), rd=Signal(range(M + 1), name="tx_rd"))
        nx = packet("nx", busy=pick.next_busy, rd=Signal(range(M + 1), name="nx_rd"))
        p = packet("pick")
        tx_flit = Signal(range(L))

        # The picked packet, as combinational fields. The headers are built without their
        # HCS byte, which is added here.
        b = {name: Signal(width, name=f"bth_{name}") for name, width in wire.BTH_FIELDS
             if name != "hcs"}
        reth = Signal(reth_layout())
        bth = pack(wire.BTH_FIELDS, **b)
        # Without DCQCN no CNP is ever picked: no branch is built for one.
        control = m.If
        if cc is not None:
            with m.If(pick.cnp):
                lowest = cc.notify.lowest
                m.d.comb += [b["opcode"].eq(wire.CNP_OPCODE), b["ch"].eq(lowest % C),
                             p.len.eq(1), p.dst.eq(self._peer(lowest)),
                             p.bth.eq(with_hcs(bth, hcs(bth)))]
            control = m.Elif
        with control(pick.ctrl):
            m.d.comb += [b["opcode"].eq(wire.ACK_OPCODE), b["ch"].eq(ctrl_x % C),
                         b["syndrome"].eq(syndrome),
                         b["psn"].eq(Mux(syndrome == wire.SYN_NAK_ACCESS, r.denied[ctrl_x],
                                         Mux(syndrome == wire.SYN_NAK_SEQ, r.epsn[ctrl_x],
                                             r.epsn[ctrl_x] - 1))),
                         p.len.eq(1), p.dst.eq(self._peer(ctrl_x)),
                         p.bth.eq(with_hcs(bth, hcs(bth)))]
        with m.Elif(pick.data):
            dd = r.desc_tx.data
            m.d.comb += [b["opcode"].eq(data_opcode(dd.opcode, dd.first, dd.last)),
                         b["ack_req"].eq(dd.last), b["ch"].eq(data_ch % C), b["dqp"].eq(dd.qp),
                         b["epoch"].eq(r.epoch[data_ch]),
                         b["psn"].eq(r.snd[data_ch]),
                         reth.rkey.eq(dd.rkey), reth.raddr.eq(dd.raddr), reth.mlen.eq(dd.mlen),
                         reth.offset.eq(dd.offset),
                         p.len.eq(dd.words + 2), p.dst.eq(self._peer(data_ch)),
                         p.bth.eq(with_hcs(bth, hcs(bth, reth.as_value()))),
                         p.reth.eq(reth), p.lkey.eq(dd.lkey), p.va.eq(dd.va),
                         p.words.eq(dd.words)]
        picked = pick.data | pick.ctrl | pick.cnp

        pop = Signal()
        reads = self._payload_reads(m, tables, tx, nx, pop)

        # The uplink: BTH, RETH, then the payload words as they are buffered.
        out = self.tx.payload
        m.d.comb += [
            self.tx.valid.eq(tx.busy & ((tx_flit < 2) | (reads.buffered != 0))),
            pop.eq(self.tx.valid & self.tx.ready & (tx_flit >= 2)),
            out.data.eq(Mux(tx_flit == 0, tx.bth, Mux(tx_flit == 1, tx.reth, reads.head))),
            out.first.eq(tx_flit == 0), out.last.eq(tx_flit == tx.len - 1),
            out.dst.eq(tx.dst), out.src.eq(self.endpoint), out.length.eq(tx.len),
            # One-flit packets (ACKs, NAKs, CNPs) are control; data is ECN-capable with DCQCN.
            out.prio.eq(Mux(tx.len == 1, rd.control_priority, rd.data_priority)),
            out.ecn.eq(Mux(tx.len == 1, NOT_ECT, ECT0 if cc is not None else NOT_ECT)),
        ]
        # Free: nothing sending, or its last flit taken in this cycle.
        free = Signal()
        m.d.comb += free.eq(~tx.busy | (self.tx.valid & self.tx.ready & out.last))
        with m.If(self.tx.valid & self.tx.ready):
            m.d.sync += tx_flit.eq(tx_flit + 1)
            with m.If(out.last):
                m.d.sync += tx.busy.eq(0)
        data_paused, control_paused = self.paused[0], self.paused[1]
        nx_paused = Mux(nx.len == 1, control_paused, data_paused)
        with m.If(picked & free):
            m.d.sync += [tx.busy.eq(1), tx_flit.eq(0), tx.rd.eq(0)]
            m.d.sync += [getattr(tx, f).eq(getattr(p, f)) for f in fields]
        with m.Elif(picked):
            m.d.sync += [nx.busy.eq(1), nx.rd.eq(0)]
            m.d.sync += [getattr(nx, f).eq(getattr(p, f)) for f in fields]
        with m.Elif(nx.busy & free & ~nx_paused):
            m.d.sync += [tx.busy.eq(1), tx_flit.eq(0), nx.busy.eq(0),
                         tx.rd.eq(nx.rd + reads.next_requested)]
            m.d.sync += [getattr(tx, f).eq(getattr(nx, f)) for f in fields]

        # The data packet picked: snd moves on (hsn with it, unless a
        # retransmission), and the round-robin pointer one past the channel.
        for c in range(self._n):
            with m.If(pick.data & (data_ch == c)):
                m.d.sync += r.snd[c].eq(r.snd[c] + 1)
                with m.If(r.snd[c] == r.hsn[c]):
                    m.d.sync += r.hsn[c].eq(r.hsn[c] + 1)
        with m.If(pick.data):
            m.d.sync += r.tx_ptr.eq(Mux(data_ch == self._n - 1, 0, data_ch + 1))

    def _payload_reads(self, m: Module, tables: KeyTables, tx: SimpleNamespace,
                       nx: SimpleNamespace, pop) -> SimpleNamespace:
        """Step 3's payload reads: requested ahead into a small buffer, the packet
        sending's words, then the next packet's, so that after the read latency both
        stream at one word per cycle; ``pop`` takes the buffer's head. Returns the words
        buffered, the head word and whether a word of the next packet was requested."""
        depth = read_buffer_depth(self._cfg)
        buf = Array(Signal(64, name=f"rd_buf{k}") for k in range(depth))
        buf_head = Signal(range(depth))
        buf_tail = Signal(range(depth))
        buffered = Signal(range(depth + 1))
        in_flight = Signal(range(depth + 1))
        read_tx = Signal()
        read_nx = Signal()
        m.d.comb += [read_tx.eq(tx.busy & (tx.rd < tx.words)),
                     read_nx.eq(~read_tx & nx.busy & (nx.rd < nx.words))]
        read_key = Signal(wire.KEY_BITS)
        read_va = Signal(wire.VA_BITS)
        m.d.comb += [read_key.eq(Mux(read_tx, tx.lkey, nx.lkey)),
                     read_va.eq(Mux(read_tx, tx.va + tx.rd, nx.va + nx.rd))]
        reader = tables.lookup(m, read_key, "dma_rd")
        dma = self.dma
        m.d.comb += [dma.rd_req.valid.eq((read_tx | read_nx) & (buffered + in_flight < depth)),
                     dma.rd_req.payload.eq(reader.translate(read_va))]
        request = dma.rd_req.valid & dma.rd_req.ready
        with m.If(request & read_tx):
            m.d.sync += tx.rd.eq(tx.rd + 1)
        with m.If(request & read_nx):
            m.d.sync += nx.rd.eq(nx.rd + 1)
        with m.If(dma.rd_rsp.valid):
            m.d.sync += [buf[buf_tail].eq(dma.rd_rsp.payload),
                         buf_tail.eq(Mux(buf_tail == depth - 1, 0, buf_tail + 1))]
        with m.If(pop):
            m.d.sync += buf_head.eq(Mux(buf_head == depth - 1, 0, buf_head + 1))
        m.d.sync += [buffered.eq(buffered + dma.rd_rsp.valid - pop),
                     in_flight.eq(in_flight + request - dma.rd_rsp.valid)]
        return SimpleNamespace(buffered=buffered, head=buf[buf_head],
                               next_requested=request & read_nx)

    # -- 5. receiver ----------------------------------------------------------------

    def _receiver(self, m: Module, r: SimpleNamespace, tables: KeyTables) -> SimpleNamespace:
        """Step 5's flits in: a one-flit packet (ACK/NAK or CNP) decoded at
        flit 0, a data packet's verdict at flit 1 (held to its last flit),
        its payload written to host memory, the receive completion.
        """
        cfg = self._cfg
        NC = self._n
        epsn, denied, awaiting = r.epsn, r.denied, r.awaiting
        rx = self.rx.payload
        m.d.comb += self.rx.ready.eq(1)
        rx_k = Signal(range(cfg.switch.max_packet_flits))
        rx_bth_bits = Signal(64)
        rx_src = Signal(range(cfg.endpoints))
        rx_write = Signal()
        rx_rkey = Signal(wire.KEY_BITS)
        rx_va = Signal(wire.VA_BITS)
        rx_rcpl = Signal()
        rx_dqp = Signal(wire.QP_BITS)
        rx_mlen = Signal(wire.LEN_BITS)
        k = Signal(range(cfg.switch.max_packet_flits))
        m.d.comb += k.eq(Mux(rx.first, 0, rx_k))
        with m.If(self.rx.valid):
            m.d.sync += rx_k.eq(Mux(rx.last, 0, k + 1))
            with m.If(rx.first):
                m.d.sync += [rx_bth_bits.eq(rx.data), rx_src.eq(rx.src)]

        # A one-flit packet: an acknowledgement or a CNP, for the sender side of channel t.
        ack = Signal(bth_layout())
        m.d.comb += ack.eq(rx.data)
        one_flit = Signal()
        m.d.comb += one_flit.eq(self.rx.valid & rx.first & (rx.length == 1))
        one_good = one_flit & (hcs(rx.data) == ack.hcs)
        cnp_in = one_good & (ack.opcode == wire.CNP_OPCODE)
        ack_good = one_good & (ack.opcode != wire.CNP_OPCODE)
        ack_t = Signal(range(NC))
        m.d.comb += ack_t.eq(self._index(rx.src, ack.ch))
        ack_corrupt = one_flit & ~one_good

        # A data packet's verdict, at its RETH (flit 1), for receive context x.
        hb = Signal(bth_layout())
        m.d.comb += hb.eq(rx_bth_bits)
        rr = Signal(reth_layout())
        m.d.comb += rr.eq(rx.data)
        verdict = Signal()
        m.d.comb += verdict.eq(self.rx.valid & ~rx.first & (rx_k == 1))
        hdr_good = hcs(rx_bth_bits, rx.data) == hb.hcs
        x = Signal(range(NC))
        m.d.comb += x.eq(self._index(rx_src, hb.ch))
        remote = tables.lookup(m, rr.rkey, "remote")
        remote_ok = remote.check(rr.raddr, rr.mlen, wire.ACCESS_REMOTE_WRITE, peer=rx_src)
        in_order = hb.psn == epsn[x]
        v_corrupt = verdict & ~hdr_good
        v_marked = verdict & hdr_good & (rx.ecn == CE)
        # Live: the context's epoch, or while awaiting the next one (the
        # sender heard the NAK). The same epoch while awaiting: the sender has
        # not heard it; any other: a stale packet from an earlier epoch.
        same_epoch = hb.epoch == r.cx_epoch[x]
        next_epoch = hb.epoch == (r.cx_epoch[x] + 1)[:wire.EPOCH_BITS]
        v_renak = verdict & hdr_good & same_epoch & awaiting[x] & (hb.psn == denied[x])
        v_live = verdict & hdr_good & Mux(awaiting[x], next_epoch, same_epoch)
        v_blocked = verdict & hdr_good & ~v_live & ~v_renak
        v_denied = v_live & in_order & ~remote_ok
        v_accept = v_live & in_order & remote_ok
        v_dup = v_live & ~in_order & psn_lt(hb.psn, epsn[x])
        v_gap = v_live & ~in_order & ~psn_lt(hb.psn, epsn[x])
        # The decision's context updates wait for the packet's last flit, so
        # that no acknowledgement covers a packet before its data is written.
        rx_x = Signal(range(NC))
        rx_kind = Signal(Verdict)
        rx_epoch = Signal(wire.EPOCH_BITS)
        rx_psn = Signal(PSN)
        rx_ack_req = Signal()
        with m.If(verdict):
            m.d.sync += [rx_write.eq(v_accept), rx_rkey.eq(rr.rkey), rx_va.eq(rr.raddr + rr.offset),
                         rx_rcpl.eq(wire_is_send_last(hb.opcode)), rx_dqp.eq(hb.dqp),
                         rx_mlen.eq(rr.mlen), rx_x.eq(x), rx_ack_req.eq(hb.ack_req),
                         rx_epoch.eq(hb.epoch), rx_psn.eq(hb.psn)]
            # At most one of these holds; none: a corrupt or blocked packet.
            with m.If(v_accept):
                m.d.sync += rx_kind.eq(Verdict.ACCEPT)
            with m.Elif(v_denied):
                m.d.sync += rx_kind.eq(Verdict.DENIED)
            with m.Elif(v_dup):
                m.d.sync += rx_kind.eq(Verdict.DUPLICATE)
            with m.Elif(v_gap):
                m.d.sync += rx_kind.eq(Verdict.GAP)
            with m.Elif(v_renak):
                m.d.sync += rx_kind.eq(Verdict.RENAK)
            with m.Else():
                m.d.sync += rx_kind.eq(Verdict.NONE)
        packet_end = Signal()
        m.d.comb += packet_end.eq(self.rx.valid & ~rx.first & (rx_k >= 2) & rx.last)
        with m.If(packet_end):
            m.d.sync += rx_kind.eq(Verdict.NONE)
        writer = tables.lookup(m, rx_rkey, "dma_wr")
        payload_in = self.rx.valid & ~rx.first & (rx_k >= 2) & rx_write
        dma_wr = self.dma.wr
        m.d.comb += [dma_wr.valid.eq(payload_in), dma_wr.payload.addr.eq(writer.translate(rx_va)),
                     dma_wr.payload.data.eq(rx.data)]
        with m.If(payload_in):
            m.d.sync += rx_va.eq(rx_va + 1)
        rcpl = self.rcpl.payload
        m.d.comb += [self.rcpl.valid.eq(payload_in & rx.last & rx_rcpl),
                     rcpl.qp.eq(rx_dqp), rcpl.src.eq(rx_src), rcpl.length.eq(rx_mlen)]
        return SimpleNamespace(
            ack=ack, ack_good=ack_good, ack_t=ack_t, ack_corrupt=ack_corrupt, cnp_in=cnp_in,
            x=x, v_corrupt=v_corrupt, v_marked=v_marked, v_renak=v_renak, v_blocked=v_blocked,
            v_dup=v_dup, v_gap=v_gap, packet_end=packet_end, rx_x=rx_x, rx_kind=rx_kind,
            rx_epoch=rx_epoch, rx_psn=rx_psn, rx_ack_req=rx_ack_req)

    # -- acknowledger ---------------------------------------------------------------

    def _acknowledger(self, m: Module, r: SimpleNamespace, seg: SimpleNamespace,
                      rx: SimpleNamespace) -> list:
        """Steps 4 and 5 at the sender: each channel's retransmission timer and
        go back N, then an acknowledgement that is not stale (it overrides the
        pick's ``snd`` and the timer), and the window's error bits; returns the
        timeouts, one bit per channel.

        Elaborated after the transmitter, so that its ``snd`` assignments win
        over the pick's.
        """
        rd = self._cfg.rdma
        NC, W = self._n, rd.window
        nxt, snd, una, hsn, timer, epoch = r.nxt, r.snd, r.una, r.hsn, r.timer, r.epoch
        ack, ack_t = rx.ack, rx.ack_t
        a = ack.psn
        ack_ok = Signal()
        with m.Switch(ack.syndrome):
            with m.Case(wire.SYN_ACK):
                # Against hsn: after a go back N, ACKs of packets sent before
                # it still arrive, and one beyond snd moves snd up.
                m.d.comb += ack_ok.eq(psn_within(a, una[ack_t], hsn[ack_t]))
            with m.Case(wire.SYN_NAK_SEQ):
                m.d.comb += ack_ok.eq(psn_within(a, una[ack_t], snd[ack_t] + 1))
            with m.Case(wire.SYN_NAK_ACCESS):
                # Against hsn: a go back N may have moved snd to or below the
                # packet whose NAK is on its way.
                m.d.comb += ack_ok.eq(psn_within(a, una[ack_t], hsn[ack_t]))
        ack_hit = Signal()
        m.d.comb += ack_hit.eq(rx.ack_good & ack_ok)

        timeouts = []
        for c in range(NC):
            acked = ack_hit & (ack_t == c)
            fire = Signal(name=f"ch_timeout{c}")
            timeouts.append(fire)
            with m.If(una[c] != snd[c]):
                m.d.comb += fire.eq((timer[c] + 1 == rd.retransmit_timeout) & ~acked)
                with m.If(fire):
                    m.d.sync += [snd[c].eq(una[c]), timer[c].eq(0)]
                with m.Else():
                    m.d.sync += timer[c].eq(timer[c] + 1)
            with m.Else():
                m.d.sync += timer[c].eq(0)
            with m.If(acked):
                m.d.sync += timer[c].eq(0)
                with m.Switch(ack.syndrome):
                    with m.Case(wire.SYN_ACK):
                        m.d.sync += una[c].eq(a + 1)
                        with m.If(~psn_within(a, una[c], snd[c])):
                            m.d.sync += snd[c].eq(a + 1)
                    with m.Case(wire.SYN_NAK_SEQ):
                        m.d.sync += [una[c].eq(a), snd[c].eq(a)]
                    with m.Case(wire.SYN_NAK_ACCESS):
                        m.d.sync += [una[c].eq(a + 1), snd[c].eq(a + 1), epoch[c].eq(epoch[c] + 1)]

        # The window's error bits: cleared as a slot is filled, set by a NAK (access).
        err_next = Signal(NC * W)
        acc_slot = self._slot(ack_t, ack.psn)
        acc_hit = Signal()
        m.d.comb += acc_hit.eq(ack_hit & (ack.syndrome == wire.SYN_NAK_ACCESS))
        fill = Mux(seg.take, Const(1, NC * W) << self._slot(seg.ch, nxt[seg.ch]), 0)
        hit = Mux(acc_hit, Const(1, NC * W) << acc_slot, 0)
        m.d.comb += err_next.eq((r.err & ~fill) | hit)
        m.d.sync += r.err.eq(err_next)
        return timeouts

    def _contexts(self, m: Module, r: SimpleNamespace, pick: SimpleNamespace,
                  rx: SimpleNamespace) -> None:
        """The acknowledger at the target: each receive context's registers, the
        pick's clearing of an acknowledgement sent (step 3), the ack timer
        (step 6), then the receiver's verdict applied at the packet's last
        flit (step 5)."""
        rd = self._cfg.rdma
        NC, W = self._n, rd.window
        pend_ack, pend_seq, pend_acc, ack_timer = r.pend_ack, r.pend_seq, r.pend_acc, r.ack_timer
        unacked, epsn, nak_sent, awaiting = r.unacked, r.epsn, r.nak_sent, r.awaiting
        rx_kind, rx_x, packet_end = rx.rx_kind, rx.rx_x, rx.packet_end
        for c in range(NC):
            picked = pick.ctrl & (pick.ctrl_x == c)
            accepted = packet_end & (rx_kind == Verdict.ACCEPT) & (rx_x == c)
            left = Mux(picked, 0, unacked[c])
            total = Signal(W.bit_length(), name=f"cx_unacked_next{c}")
            m.d.comb += total.eq(left + accepted)
            m.d.sync += unacked[c].eq(total)
            with m.If(picked):
                m.d.sync += [pend_ack[c].eq(0), pend_seq[c].eq(0), pend_acc[c].eq(0),
                             ack_timer[c].eq(0)]
            with m.Elif(unacked[c] != 0):
                with m.If(ack_timer[c] + 1 == rd.ack_timeout):
                    m.d.sync += [pend_ack[c].eq(1), ack_timer[c].eq(0)]
                with m.Else():
                    m.d.sync += ack_timer[c].eq(ack_timer[c] + 1)
            with m.Else():
                m.d.sync += ack_timer[c].eq(0)
            with m.If(packet_end & (rx_x == c)):
                with m.If((rx_kind != Verdict.NONE) & (rx_kind != Verdict.RENAK)):
                    # A live packet: its epoch is the context's (a switch ends
                    # the wait); a denial starts the wait again.
                    m.d.sync += [awaiting[c].eq(0), r.cx_epoch[c].eq(rx.rx_epoch)]
                with m.Switch(rx_kind):
                    with m.Case(Verdict.DENIED):
                        m.d.sync += [pend_acc[c].eq(1), epsn[c].eq(epsn[c] + 1), awaiting[c].eq(1),
                                     r.denied[c].eq(rx.rx_psn)]
                    with m.Case(Verdict.RENAK):
                        m.d.sync += pend_acc[c].eq(1)
                    with m.Case(Verdict.ACCEPT):
                        m.d.sync += [epsn[c].eq(epsn[c] + 1), nak_sent[c].eq(0)]
                        with m.If(rx.rx_ack_req | (total >= rd.ack_every)):
                            m.d.sync += pend_ack[c].eq(1)
                    with m.Case(Verdict.DUPLICATE):
                        m.d.sync += pend_ack[c].eq(1)
                    with m.Case(Verdict.GAP):
                        with m.If(~nak_sent[c]):
                            m.d.sync += [pend_seq[c].eq(1), nak_sent[c].eq(1)]

    # -- DCQCN and counters -----------------------------------------------------------

    def _connect_congestion_control(self, m: Module, r: SimpleNamespace, cc: SimpleNamespace,
                                    pick: SimpleNamespace, rx: SimpleNamespace) -> None:
        """The notification point hears the CE marks and the CNP picks; the
        reaction points the CNPs received and the data packets picked."""
        notify, react = cc.notify, cc.react
        m.d.comb += [notify.marked.valid.eq(rx.v_marked), notify.marked.payload.eq(rx.x),
                     notify.pick.eq(pick.cnp),
                     react.cnp.valid.eq(rx.cnp_in), react.cnp.payload.eq(rx.ack_t),
                     react.sent.valid.eq(pick.data), react.sent.payload.channel.eq(pick.data_ch),
                     react.sent.payload.flits.eq(r.desc_tx.data.words + 2),
                     self.cnp.valid.eq(pick.cnp)]
        # The ports name channels and contexts by number; the engine's own keep
        # the line rate and never change.
        C = self._cfg.rdma.channels_per_peer
        m.d.comb += self.cnp.payload.eq(self._peer(notify.lowest) * C + notify.lowest % C)
        self._by_channel(m, self.rate, LINE_RATE, react.rate)
        self._by_channel(m, self.rate_changed, 0, react.changed)

    def _counters(self, m: Module, r: SimpleNamespace, pick: SimpleNamespace,
                  rx: SimpleNamespace, timeouts: list) -> None:
        """Section 10.8's counters, each counting its events in the cycle they happen."""
        data_ch = pick.data_ch
        events = {
            "tx_data": pick.data,
            "retransmissions": pick.data & (r.snd[data_ch] != r.hsn[data_ch]),
            "tx_acks": pick.ctrl & (pick.syndrome == wire.SYN_ACK),
            "naks": pick.ctrl & (pick.syndrome != wire.SYN_ACK),
            "timeouts": Cat(*timeouts),
            "duplicates": rx.v_dup | rx.v_renak,
            "out_of_sequence": rx.v_gap | rx.v_blocked,
            "corrupt": rx.v_corrupt | rx.ack_corrupt,
            "completions": self.cpl.valid,
            "errors": self.cpl.valid & (self.cpl.payload.status != wire.STATUS_OK),
            "rx_completions": self.rcpl.valid,
            "ecn_marked": rx.v_marked,
            "cnp_sent": pick.cnp,
            "cnp_handled": rx.cnp_in,
        }
        for i, name in enumerate(RDMA_COUNTERS):
            ev = events[name]
            inc = sum(ev[b] for b in range(len(ev))) if len(ev) > 1 else ev
            m.d.sync += self.counters[i].eq(self.counters[i] + inc)


def with_hcs(bth, check):
    """The BTH with its HCS byte (zero in ``bth``) set to ``check``."""
    return bth | (check << 16)


def wire_is_send_last(opcode):
    """A SEND's last or only packet: it raises the receive completion."""
    return (opcode == wire.OPCODES[(wire.OP_SEND, False, True)]) | \
        (opcode == wire.OPCODES[(wire.OP_SEND, True, True)])
