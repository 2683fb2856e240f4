"""The RDMA connection-aggregation engine of one endpoint (section 10).

Queue pairs map onto a few reliable channels per peer; the channel holds
all the reliability state (PSNs, a window of packet descriptors, a
retransmission timer), the QP none. ``docs/architecture.md`` section 10.6
gives the cycle rules; the golden model in ``sim/rdma/engine.py``
follows the same text.
"""

from amaranth.hdl import Signal, Module, Mux, Cat, Const, Array
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...config import FabricConfig
from ...formats import rdma_wire as wire
from ...formats.counters import COUNTER_WIDTH, RDMA_COUNTERS
from ...formats.dcqcn import RATE_BITS
from ...formats.packet import CE, ECT0, NOT_ECT
from .dcqcn import NotificationPoint, ReactionPoint
from ..arbiter import round_robin_pick
from ..packet import packet_layout
from .header import (bth_layout, cpl_layout, data_opcode, descriptor_layout, hcs, pack,
                          psn_lt, psn_within, rcpl_layout, reth_layout, wr_layout)
from .keys import KeyTables, TABLE_WRITE

__all__ = ["RdmaEngine", "read_buffer_depth"]

PSN = wire.PSN_BITS

# A data packet's receive decision, held from its RETH to its last flit.
NONE, ACCEPT, DENIED, DUPLICATE, GAP, RENAK = range(6)


def _memory_port(cfg: FabricConfig) -> wiring.Signature:
    """The DMA streams toward host memory.

    Reads: a request stream (``rd_req_*``, one word address per transfer)
    and a response stream (``rd_rsp_*``, the words in request order, with no
    back-pressure: the engine requests only what it has room for). Writes:
    a stream of (address, word) the host always accepts.
    """
    addr = range(cfg.rdma.memory_words)
    return wiring.Signature({
        "rd_req_valid": Out(1), "rd_req_ready": In(1), "rd_req_addr": Out(addr),
        "rd_rsp_valid": In(1), "rd_rsp_data": In(64),
        "wr_en": Out(1), "wr_addr": Out(addr), "wr_data": Out(64),
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
    cpl, rcpl : send and receive completions (``valid`` for one cycle, no back-pressure).
    tx, rx : the endpoint's uplink and downlink packet streams (``rx.ready`` is always 1).
    dma : host memory ports (payload reads, received-data writes).
    tables : the registration and page table write port.
    counters : section 10.8, in :data:`~superfabric.formats.counters.RDMA_COUNTERS` order.
    retired : a packet is retired in this cycle (the testbench's sign of progress).
    paused : the data class (bit 0) and the control class (bit 1) are paused by
        the switch's PFC; a paused class starts no packet.
    free : per channel, the free slots of its window (the hosts offer a WR
        only to a channel with room for it).
    cnp_valid, cnp_context : with ``[dcqcn] enabled``, a CNP picked this cycle
        and the receive context it answers; rate, rate_changed: each channel's
        rate and whether it changed at the last edge (section 10.13).
    """

    def __init__(self, cfg: FabricConfig, endpoint: int):
        self._cfg = cfg
        self._me = endpoint
        nc = cfg.switch.ports * cfg.rdma.channels_per_peer
        dcqcn = {}
        if cfg.dcqcn.enabled:
            dcqcn = {"cnp_valid": Out(1), "cnp_context": Out(range(nc)),
                     "rate": Out(RATE_BITS).array(nc), "rate_changed": Out(nc)}
        super().__init__({
            "wr": In(stream.Signature(wr_layout(cfg))),
            "cpl_valid": Out(1), "cpl": Out(cpl_layout()),
            "rcpl_valid": Out(1), "rcpl": Out(rcpl_layout(cfg)),
            "tx": Out(stream.Signature(packet_layout(cfg))),
            "rx": In(stream.Signature(packet_layout(cfg))),
            "dma": Out(_memory_port(cfg)),
            "tables": In(TABLE_WRITE(cfg)),
            "counters": Out(COUNTER_WIDTH).array(len(RDMA_COUNTERS)),
            "retired": Out(1),
            "paused": In(2),
            "free": Out(wire.free_slot_bits(cfg.rdma.window)).array(nc),
            **dcqcn,
        })

    def elaborate(self, platform):
        cfg, rd = self._cfg, self._cfg.rdma
        m = Module()
        E, C, W = cfg.switch.ports, rd.channels_per_peer, rd.window
        NC = E * C
        M = wire.payload_words(cfg.switch.max_packet_flits)
        Q = rd.per_endpoint(E)
        me = self._me
        wbits = (W - 1).bit_length()

        tables = m.submodules.tables = KeyTables(cfg)
        wiring.connect(m, wiring.flipped(self.tables), tables.write)

        # -- state ---------------------------------------------------------
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
        nak_sent, pend_ack, pend_seq, pend_acc = (per(NC, 1, f"cx_{n}_")
                                                 for n in ("nak_sent", "pend_ack", "pend_seq", "pend_acc"))
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

        def slot(ch, psn):
            return Cat(psn[:wbits], ch) if wbits else ch

        for c in range(NC):
            m.d.comb += self.free[c].eq(W - (nxt[c] - ret[c])[:PSN])

        # DCQCN (section 10.13): the notification point of the receive
        # contexts and the reaction points and pacers of the channels.
        dcqcn = cfg.dcqcn.enabled
        if dcqcn:
            units = cfg.dcqcn.units
            notify = m.submodules.np = NotificationPoint(contexts=NC, interval=units.cnp_interval)
            react = m.submodules.rp = ReactionPoint(channels=NC, units=units,
                                                    max_packet_flits=cfg.switch.max_packet_flits)

        # -- 1. segmenter --------------------------------------------------
        wr = self.wr.payload
        dst_ok = wr.dst < E
        ch_wr = Signal(range(NC))
        m.d.comb += ch_wr.eq(Mux(dst_ok, wr.dst * C + wr.qp % C, 0))
        bad = (wr.dst == me) | ~dst_ok | (wr.length == 0) | (wr.qp >= Q)
        local = tables.lookup(m, wr.lkey, "local")
        local_ok = local.check(wr.laddr, wr.length, wire.ACCESS_LOCAL_READ)
        is_err = Signal()
        m.d.comb += is_err.eq(bad | ~local_ok)
        in_flight = (nxt[ch_wr] - ret[ch_wr])[:PSN]
        seg_take = Signal()
        seg_last = Signal()
        m.d.comb += [seg_take.eq(self.wr.valid & ~is_err & (in_flight < W)),
                     seg_last.eq(seg_off + M >= wr.length)]

        # -- 2. retire -----------------------------------------------------
        ret_mask = Cat(*(ret[k] != una[k] for k in range(NC)))
        ret_found, ret_ch = round_robin_pick(m, ret_mask, ret_ptr, NC, "retire")
        ret_slot = slot(ret_ch, ret[ret_ch])
        m.d.comb += desc_ret.addr.eq(ret_slot)
        ret_err = err.bit_select(ret_slot, 1)
        m.d.comb += self.retired.eq(ret_found)
        ret_cpl = Signal()
        m.d.comb += ret_cpl.eq(ret_found & desc_ret.data.last)
        seg_err_cpl = Signal()
        # A failing WR names no usable channel (its dst may be wrong), so it
        # waits for every earlier WR of the engine: completions stay in QP order.
        drained = Cat(*(nxt[k] == ret[k] for k in range(NC))).all()
        m.d.comb += seg_err_cpl.eq(self.wr.valid & is_err & drained)
        m.d.comb += self.wr.ready.eq((seg_take & seg_last) | seg_err_cpl)

        with m.If(seg_take):
            d = desc_w.data
            m.d.comb += [
                desc_w.en.eq(1), desc_w.addr.eq(slot(ch_wr, nxt[ch_wr])),
                d.qp.eq(wr.qp), d.opcode.eq(wr.opcode), d.first.eq(seg_off == 0),
                d.last.eq(seg_last), d.lkey.eq(wr.lkey), d.va.eq(wr.laddr + seg_off),
                d.rkey.eq(wr.rkey), d.raddr.eq(wr.raddr), d.mlen.eq(wr.length),
                d.offset.eq(seg_off), d.words.eq(Mux(seg_last, wr.length - seg_off, M)),
                d.tag.eq(wr.tag),
            ]
            m.d.sync += seg_off.eq(Mux(seg_last, 0, seg_off + M))

        m.d.comb += self.cpl_valid.eq(ret_cpl | seg_err_cpl)
        with m.If(ret_cpl):
            m.d.comb += [self.cpl.qp.eq(desc_ret.data.qp), self.cpl.tag.eq(desc_ret.data.tag),
                         self.cpl.status.eq(Mux(msgerr[ret_ch] | ret_err, wire.STATUS_REMOTE,
                                                wire.STATUS_OK))]
        with m.Else():
            m.d.comb += [self.cpl.qp.eq(wr.qp), self.cpl.tag.eq(wr.tag),
                         self.cpl.status.eq(Mux(bad, wire.STATUS_BAD, wire.STATUS_LOCAL))]

        # -- 3. transmit pick ----------------------------------------------
        tx_busy = Signal()
        tx_flit = Signal(range(cfg.switch.max_packet_flits))
        tx_len = Signal(range(cfg.switch.max_packet_flits + 1))
        tx_dst = Signal(range(E))
        tx_bth = Signal(64)
        tx_reth = Signal(64)
        tx_lkey = Signal(wire.KEY_BITS)
        tx_va = Signal(wire.VA_BITS)
        tx_words = Signal(range(M + 1))      # payload words of the latched packet (0: an ACK)

        ctrl_mask = Cat(*(pend_ack[k] | pend_seq[k] | pend_acc[k] for k in range(NC)))
        ctrl_x = Signal(range(NC))
        chain = Const(NC - 1, range(NC))
        for k in reversed(range(NC - 1)):
            chain = Mux(ctrl_mask[k], k, chain)
        m.d.comb += ctrl_x.eq(chain)
        data_mask = Cat(*(snd[k] != nxt[k] for k in range(NC)))
        if dcqcn:
            data_mask = data_mask & react.ready        # the pacers hold the channels to their rates
        data_found, data_ch = round_robin_pick(m, data_mask, tx_ptr, NC, "txdata")
        data_paused, control_paused = self.paused[0], self.paused[1]
        cnp_any = notify.pending.any() if dcqcn else Const(0, 1)
        control_any = (cnp_any | ctrl_mask.any()) & ~control_paused
        pick_cnp = Signal()
        pick_ctrl = Signal()
        pick_data = Signal()
        # CNPs first, then acknowledgements, then data; a paused class waits.
        m.d.comb += [pick_cnp.eq(~tx_busy & cnp_any & ~control_paused),
                     pick_ctrl.eq(~tx_busy & ~cnp_any & ctrl_mask.any() & ~control_paused),
                     pick_data.eq(~tx_busy & ~control_any & data_found & ~data_paused)]
        m.d.comb += desc_tx.addr.eq(slot(data_ch, snd[data_ch]))
        syndrome = Signal(2)
        m.d.comb += syndrome.eq(Mux(pend_acc[ctrl_x], wire.SYN_NAK_ACCESS,
                                    Mux(pend_seq[ctrl_x], wire.SYN_NAK_SEQ, wire.SYN_ACK)))

        # The headers are built without their HCS byte, which is added as they are latched.
        b = {name: Signal(width, name=f"bth_{name}") for name, width in wire.BTH_FIELDS
             if name != "hcs"}
        reth = Signal(reth_layout())
        bth = pack(wire.BTH_FIELDS, **b)
        with m.If(pick_cnp):
            if dcqcn:       # else pick_cnp is 0
                m.d.comb += [b["opcode"].eq(wire.CNP_OPCODE), b["ch"].eq(notify.lowest % C)]
                m.d.sync += [tx_busy.eq(1), tx_flit.eq(0), tx_len.eq(1),
                             tx_dst.eq(notify.lowest // C), tx_bth.eq(with_hcs(bth, hcs(bth))),
                             tx_words.eq(0)]
        with m.Elif(pick_ctrl):
            m.d.comb += [b["opcode"].eq(wire.ACK_OPCODE), b["ch"].eq(ctrl_x % C),
                         b["syndrome"].eq(syndrome),
                         b["psn"].eq(Mux(syndrome == wire.SYN_NAK_ACCESS, denied[ctrl_x],
                                         Mux(syndrome == wire.SYN_NAK_SEQ, epsn[ctrl_x],
                                             epsn[ctrl_x] - 1)))]
            m.d.sync += [tx_busy.eq(1), tx_flit.eq(0), tx_len.eq(1), tx_dst.eq(ctrl_x // C),
                         tx_bth.eq(with_hcs(bth, hcs(bth))), tx_words.eq(0)]
        with m.Elif(pick_data):
            dd = desc_tx.data
            m.d.comb += [b["opcode"].eq(data_opcode(dd.opcode, dd.first, dd.last)),
                         b["ack_req"].eq(dd.last), b["ch"].eq(data_ch % C), b["dqp"].eq(dd.qp),
                         b["epoch"].eq(epoch[data_ch]),
                         b["psn"].eq(snd[data_ch]),
                         reth.rkey.eq(dd.rkey), reth.raddr.eq(dd.raddr), reth.mlen.eq(dd.mlen),
                         reth.offset.eq(dd.offset)]
            m.d.sync += [tx_busy.eq(1), tx_flit.eq(0), tx_len.eq(dd.words + 2),
                         tx_dst.eq(data_ch // C),
                         tx_bth.eq(with_hcs(bth, hcs(bth, reth.as_value()))),
                         tx_reth.eq(reth), tx_lkey.eq(dd.lkey), tx_va.eq(dd.va),
                         tx_words.eq(dd.words)]

        # Payload reads: requested ahead into a small buffer, so that after
        # the read latency the packet streams at one word per cycle.
        depth = read_buffer_depth(cfg)
        buf = Array(Signal(64, name=f"rd_buf{k}") for k in range(depth))
        buf_head = Signal(range(depth))
        buf_tail = Signal(range(depth))
        buffered = Signal(range(depth + 1))
        in_flight = Signal(range(depth + 1))
        rd_next = Signal(range(M + 1))
        reader = tables.lookup(m, tx_lkey, "dma_rd")
        dma = self.dma
        m.d.comb += [dma.rd_req_valid.eq(tx_busy & (rd_next < tx_words)
                                         & (buffered + in_flight < depth)),
                     dma.rd_req_addr.eq(reader.translate(tx_va + rd_next))]
        request = dma.rd_req_valid & dma.rd_req_ready
        pop = Signal()
        with m.If(pick_data | pick_ctrl | pick_cnp):
            m.d.sync += rd_next.eq(0)
        with m.Elif(request):
            m.d.sync += rd_next.eq(rd_next + 1)
        with m.If(dma.rd_rsp_valid):
            m.d.sync += [buf[buf_tail].eq(dma.rd_rsp_data),
                         buf_tail.eq(Mux(buf_tail == depth - 1, 0, buf_tail + 1))]
        with m.If(pop):
            m.d.sync += buf_head.eq(Mux(buf_head == depth - 1, 0, buf_head + 1))
        m.d.sync += [buffered.eq(buffered + dma.rd_rsp_valid - pop),
                     in_flight.eq(in_flight + request - dma.rd_rsp_valid)]

        # The uplink: BTH, RETH, then the payload words as they are buffered.
        tx = self.tx.payload
        m.d.comb += [
            self.tx.valid.eq(tx_busy & ((tx_flit < 2) | (buffered != 0))),
            pop.eq(self.tx.valid & self.tx.ready & (tx_flit >= 2)),
            tx.data.eq(Mux(tx_flit == 0, tx_bth, Mux(tx_flit == 1, tx_reth, buf[buf_head]))),
            tx.first.eq(tx_flit == 0), tx.last.eq(tx_flit == tx_len - 1),
            tx.dst.eq(tx_dst), tx.src.eq(me), tx.length.eq(tx_len),
            # One-flit packets (ACKs, NAKs, CNPs) are control; data is ECN-capable with DCQCN.
            tx.prio.eq(Mux(tx_len == 1, rd.control_priority, rd.data_priority)),
            tx.ecn.eq(Mux(tx_len == 1, NOT_ECT, ECT0 if dcqcn else NOT_ECT)),
        ]
        with m.If(self.tx.valid & self.tx.ready):
            m.d.sync += tx_flit.eq(tx_flit + 1)
            with m.If(tx.last):
                m.d.sync += tx_busy.eq(0)

        # -- 5. receive ----------------------------------------------------
        rx = self.rx.payload
        m.d.comb += self.rx.ready.eq(1)
        rx_k = Signal(range(cfg.switch.max_packet_flits))
        rx_bth_bits = Signal(64)
        rx_src = Signal(range(E))
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
        m.d.comb += ack_t.eq(rx.src * C + ack.ch)
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
        m.d.comb += x.eq(rx_src * C + hb.ch)
        remote = tables.lookup(m, rr.rkey, "remote")
        remote_ok = remote.check(rr.raddr, rr.mlen, wire.ACCESS_REMOTE_WRITE, peer=rx_src)
        in_order = hb.psn == epsn[x]
        v_corrupt = verdict & ~hdr_good
        v_marked = verdict & hdr_good & (rx.ecn == CE)
        # Live: the context's epoch, or while awaiting the next one (the
        # sender heard the NAK). The same epoch while awaiting: the sender has
        # not heard it; any other: a stale packet from an earlier epoch.
        same_epoch = hb.epoch == cx_epoch[x]
        next_epoch = hb.epoch == (cx_epoch[x] + 1)[:wire.EPOCH_BITS]
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
        rx_kind = Signal(range(6))
        rx_epoch = Signal(wire.EPOCH_BITS)
        rx_psn = Signal(PSN)
        rx_ack_req = Signal()
        with m.If(verdict):
            m.d.sync += [rx_write.eq(v_accept), rx_rkey.eq(rr.rkey), rx_va.eq(rr.raddr + rr.offset),
                         rx_rcpl.eq(wire_is_send_last(hb.opcode)), rx_dqp.eq(hb.dqp),
                         rx_mlen.eq(rr.mlen), rx_x.eq(x), rx_ack_req.eq(hb.ack_req),
                         rx_epoch.eq(hb.epoch), rx_psn.eq(hb.psn),
                         rx_kind.eq(Mux(v_accept, ACCEPT, Mux(v_denied, DENIED, Mux(v_dup, DUPLICATE,
                                        Mux(v_gap, GAP, Mux(v_renak, RENAK, NONE))))))]
        packet_end = Signal()
        m.d.comb += packet_end.eq(self.rx.valid & ~rx.first & (rx_k >= 2) & rx.last)
        with m.If(packet_end):
            m.d.sync += rx_kind.eq(NONE)
        writer = tables.lookup(m, rx_rkey, "dma_wr")
        payload_in = self.rx.valid & ~rx.first & (rx_k >= 2) & rx_write
        m.d.comb += [self.dma.wr_en.eq(payload_in), self.dma.wr_addr.eq(writer.translate(rx_va)),
                     self.dma.wr_data.eq(rx.data)]
        with m.If(payload_in):
            m.d.sync += rx_va.eq(rx_va + 1)
        m.d.comb += [self.rcpl_valid.eq(payload_in & rx.last & rx_rcpl),
                     self.rcpl.qp.eq(rx_dqp), self.rcpl.src.eq(rx_src), self.rcpl.length.eq(rx_mlen)]

        # An acknowledgement that is not stale: it overrides the pick and the timer.
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
        m.d.comb += ack_hit.eq(ack_good & ack_ok)

        # -- per-channel updates (sender role): steps 1-5 in override order --
        timeouts = []
        for c in range(NC):
            with m.If(seg_take & (ch_wr == c)):
                m.d.sync += nxt[c].eq(nxt[c] + 1)
            with m.If(ret_found & (ret_ch == c)):
                m.d.sync += [ret[c].eq(ret[c] + 1),
                             msgerr[c].eq(Mux(desc_ret.data.last, 0, msgerr[c] | ret_err))]
            with m.If(pick_data & (data_ch == c)):
                m.d.sync += snd[c].eq(snd[c] + 1)
                with m.If(snd[c] == hsn[c]):
                    m.d.sync += hsn[c].eq(hsn[c] + 1)
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
        acc_slot = slot(ack_t, ack.psn)
        acc_hit = Signal()
        m.d.comb += acc_hit.eq(ack_hit & (ack.syndrome == wire.SYN_NAK_ACCESS))
        fill = Mux(seg_take, Const(1, NC * W) << slot(ch_wr, nxt[ch_wr]), 0)
        hit = Mux(acc_hit, Const(1, NC * W) << acc_slot, 0)
        m.d.comb += err_next.eq((err & ~fill) | hit)
        m.d.sync += err.eq(err_next)

        # -- per-context updates (target role): pick clears, then receive --
        for c in range(NC):
            picked = pick_ctrl & (ctrl_x == c)
            accepted = packet_end & (rx_kind == ACCEPT) & (rx_x == c)
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
                with m.If((rx_kind != NONE) & (rx_kind != RENAK)):
                    # A live packet: its epoch is the context's (a switch ends
                    # the wait); a denial starts the wait again.
                    m.d.sync += [awaiting[c].eq(0), cx_epoch[c].eq(rx_epoch)]
                with m.Switch(rx_kind):
                    with m.Case(DENIED):
                        m.d.sync += [pend_acc[c].eq(1), epsn[c].eq(epsn[c] + 1), awaiting[c].eq(1),
                                     denied[c].eq(rx_psn)]
                    with m.Case(RENAK):
                        m.d.sync += pend_acc[c].eq(1)
                    with m.Case(ACCEPT):
                        m.d.sync += [epsn[c].eq(epsn[c] + 1), nak_sent[c].eq(0)]
                        with m.If(rx_ack_req | (total >= rd.ack_every)):
                            m.d.sync += pend_ack[c].eq(1)
                    with m.Case(DUPLICATE):
                        m.d.sync += pend_ack[c].eq(1)
                    with m.Case(GAP):
                        with m.If(~nak_sent[c]):
                            m.d.sync += [pend_seq[c].eq(1), nak_sent[c].eq(1)]

        if dcqcn:
            m.d.comb += [notify.marked_valid.eq(v_marked), notify.marked_context.eq(x),
                         notify.pick.eq(pick_cnp),
                         react.cnp_valid.eq(cnp_in), react.cnp_channel.eq(ack_t),
                         react.sent_valid.eq(pick_data), react.sent_channel.eq(data_ch),
                         react.sent_flits.eq(desc_tx.data.words + 2),
                         self.cnp_valid.eq(pick_cnp), self.cnp_context.eq(notify.lowest),
                         self.rate_changed.eq(react.changed)]
            m.d.comb += [self.rate[c].eq(react.rate[c]) for c in range(NC)]

        # Round-robin pointers move one past the channel served.
        with m.If(ret_found):
            m.d.sync += ret_ptr.eq(Mux(ret_ch == NC - 1, 0, ret_ch + 1))
        with m.If(pick_data):
            m.d.sync += tx_ptr.eq(Mux(data_ch == NC - 1, 0, data_ch + 1))

        # -- counters ------------------------------------------------------
        events = {
            "tx_data": pick_data,
            "retransmissions": pick_data & (snd[data_ch] != hsn[data_ch]),
            "tx_acks": pick_ctrl & (syndrome == wire.SYN_ACK),
            "naks": pick_ctrl & (syndrome != wire.SYN_ACK),
            "timeouts": Cat(*timeouts),
            "duplicates": v_dup | v_renak,
            "out_of_sequence": v_gap | v_blocked,
            "corrupt": v_corrupt | ack_corrupt,
            "completions": self.cpl_valid,
            "errors": self.cpl_valid & (self.cpl.status != wire.STATUS_OK),
            "rx_completions": self.rcpl_valid,
            "ecn_marked": v_marked,
            "cnp_sent": pick_cnp,
            "cnp_handled": cnp_in,
        }
        for i, name in enumerate(RDMA_COUNTERS):
            ev = events[name]
            inc = sum(ev[b] for b in range(len(ev))) if len(ev) > 1 else ev
            m.d.sync += self.counters[i].eq(self.counters[i] + inc)
        return m


def with_hcs(bth, check):
    """The BTH with its HCS byte (zero in ``bth``) set to ``check``."""
    return bth | (check << 16)


def wire_is_send_last(opcode):
    """A SEND's last or only packet: it raises the receive completion."""
    return (opcode == wire.OPCODES[(wire.OP_SEND, False, True)]) | \
        (opcode == wire.OPCODES[(wire.OP_SEND, True, True)])
