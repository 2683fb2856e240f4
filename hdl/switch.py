"""The N x N packet switch: input-queued crossbar with VOQs, iSLIP and egress queues."""

from amaranth.hdl import Signal, Module, Mux, Cat, Array, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ..config import EGRESS_DEPTH, FabricConfig
from ..formats.counters import COUNTER_WIDTH
from ..formats.packet import CE, ECT0, ECT1
from .ecn import EcnMarker
from .islip import ISLIP
from .pfc import PfcEgress, PfcIngress
from .pfc_frame import REQUEST_LAYOUT
from .packet import packet_layout
from .skid_buffer import SkidBuffer
from .voq import VOQBuffer

__all__ = ["Switch"]


class Switch(wiring.Component):
    """Input-queued packet switch, ``ports`` x ``ports``, configured by ``[switch]``.

    Each input ``i[k]`` passes a :class:`~.skid_buffer.SkidBuffer` into a
    :class:`~.voq.VOQBuffer`. Every cycle the scheduler (:class:`~.islip.ISLIP`;
    with ``scheduler = "fifo"`` it sees only each input's head packet) matches
    free inputs to free outputs; a match reads the packet from the input
    buffer flit by flit, across the crossbar, into the output's egress queue,
    which drives ``o[k]``. A match holds from head to tail flit (packet mode).
    ``docs/architecture.md`` gives the cycle-by-cycle rules that the golden
    model in ``sim/switch.py`` mirrors.

    Ports
    -----
    i, o : packet streams, one per port
    pause : bit ``dst * priorities + prio`` set stops new packets of that
        class toward that output (a packet under way completes); driven by
        priority flow control or the testbench.
    rx_packets, tx_packets, drops : per-port packet counters.
    pfc_tx, pfc_rx : with ``[pfc] enabled``, pause frames sent upstream by
        each input port and received from downstream at each output port
        (``pfc_*_valid`` bit per port), and their counters.
    ecn_marks : with ``[ecn] enabled``, packets marked CE per (output,
        priority); ``ecn_decided``/``ecn_backlog`` show each output's marking
        decisions and the backlog they saw (for the testbench's curves).
    """

    def __init__(self, cfg: FabricConfig):
        sw = cfg.switch
        self._cfg = cfg
        self._layout = packet_layout(cfg)
        members = {
            "i": In(stream.Signature(self._layout)).array(sw.ports),
            "o": Out(stream.Signature(self._layout)).array(sw.ports),
            "pause": In(unsigned(sw.ports * sw.priorities)),
            "rx_packets": Out(COUNTER_WIDTH).array(sw.ports),
            "tx_packets": Out(COUNTER_WIDTH).array(sw.ports),
            "drops": Out(COUNTER_WIDTH).array(sw.ports),
        }
        if cfg.pfc.enabled:
            classes = sw.ports * sw.priorities
            members.update({
                "pfc_tx_valid": Out(sw.ports),
                "pfc_tx": Out(REQUEST_LAYOUT).array(sw.ports),
                "pfc_rx_valid": In(sw.ports),
                "pfc_rx": In(REQUEST_LAYOUT).array(sw.ports),
                "pfc_tx_frames": Out(COUNTER_WIDTH).array(classes),
                "pfc_rx_frames": Out(COUNTER_WIDTH).array(classes),
                "pfc_paused_cycles": Out(COUNTER_WIDTH).array(classes),
                "pfc_peak_occupancy": Out(sw.buffer_flits.bit_length()).array(classes),
            })
        if cfg.ecn.enabled:
            backlog_bits = (sw.ports * sw.buffer_flits).bit_length()
            members.update({
                "ecn_marks": Out(COUNTER_WIDTH).array(sw.ports * sw.priorities),
                "ecn_decided": Out(sw.ports),
                "ecn_backlog": Out(backlog_bits).array(sw.ports),
            })
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        sw = self._cfg.switch
        n, np_ = sw.ports, sw.priorities

        m.submodules.islip = islip = ISLIP(ports=n, priorities=np_, iterations=sw.islip_iterations)
        bufs, egress = [], []
        for k in range(n):
            skid = SkidBuffer(self._layout)
            buf = VOQBuffer(self._cfg)
            m.submodules[f"skid{k}"] = skid
            m.submodules[f"voq{k}"] = buf
            wiring.connect(m, wiring.flipped(self.i[k]), skid.i)
            wiring.connect(m, skid.o, buf.i)
            bufs.append(buf)
            fifo = SyncFIFO(width=self._layout.size, depth=EGRESS_DEPTH)
            m.submodules[f"egress{k}"] = fifo
            egress.append(fifo)

        # Per input: a packet under way (active) toward cur_out; rd_out is the
        # output of the flit now in the input buffer's read register.
        active = [Signal(name=f"active{k}") for k in range(n)]
        cur_out = [Signal(range(n), name=f"cur_out{k}") for k in range(n)]
        rd_out = [Signal(range(n), name=f"rd_out{k}") for k in range(n)]
        finishing = [bufs[k].rd_last for k in range(n)]
        in_free = [~active[k] | finishing[k] for k in range(n)]

        # Per output: flits arriving this cycle, busy, credit.
        arriving = [Cat(bufs[k].rd_valid & (rd_out[k] == o) for k in range(n)).any()
                    for o in range(n)]
        credit = [Signal(name=f"credit{o}") for o in range(n)]
        out_free = [Signal(name=f"out_free{o}") for o in range(n)]
        for o in range(n):
            busy = Cat(active[k] & ~finishing[k] & (cur_out[k] == o) for k in range(n)).any()
            m.d.comb += [
                credit[o].eq(egress[o].level + arriving[o] < EGRESS_DEPTH),
                out_free[o].eq(~busy & credit[o]),
            ]

        paused = self.pause
        if self._cfg.pfc.enabled:
            m.submodules.pfc_egress = pfc_egress = PfcEgress(self._cfg)
            m.d.comb += pfc_egress.rx_valid.eq(self.pfc_rx_valid)
            for o in range(n):
                m.d.comb += pfc_egress.rx[o].eq(self.pfc_rx[o])
            for q in range(n * np_):
                m.d.comb += [self.pfc_rx_frames[q].eq(pfc_egress.frames_received[q]),
                             self.pfc_paused_cycles[q].eq(pfc_egress.paused_cycles[q])]
            paused = self.pause | pfc_egress.pause

        # Requests: complete packets, free input, free output with credit, not paused.
        eligible = Cat(out_free[q // np_] for q in range(n * np_))
        for k in range(n):
            m.d.comb += islip.req[k].eq(Mux(in_free[k], bufs[k].req & eligible & ~paused, 0))

        for k in range(n):
            buf = bufs[k]
            start = islip.match[k]
            credit_cur = Cat(credit).bit_select(cur_out[k], 1)
            m.d.comb += [
                buf.start.eq(start),
                buf.start_q.eq(islip.match_out[k] * np_ + islip.match_prio[k]),
                buf.advance.eq(active[k] & ~finishing[k] & credit_cur),
            ]
            m.d.sync += active[k].eq(start | (active[k] & ~finishing[k]))
            with m.If(start):
                m.d.sync += [cur_out[k].eq(islip.match_out[k]), rd_out[k].eq(islip.match_out[k])]
            with m.Else():
                m.d.sync += rd_out[k].eq(cur_out[k])

        # What each input reads this cycle: (output, class) of its flit.
        read_index, read_prio = [], []
        for k in range(n):
            cur_prio = Signal(range(max(np_, 2)), name=f"cur_prio{k}")
            with m.If(islip.match[k]):
                m.d.sync += cur_prio.eq(islip.match_prio[k])
            read_prio.append(Mux(islip.match[k], islip.match_prio[k], cur_prio))
            read_index.append(Mux(islip.match[k], islip.match_out[k], cur_out[k]) * np_
                              + read_prio[k])
        if self._cfg.pfc.enabled:
            m.submodules.pfc_ingress = pfc_ingress = PfcIngress(
                self._cfg, refresh=self._cfg.pfc.refresh_cycles(sw.data_width))
            for k in range(n):
                m.d.comb += [
                    pfc_ingress.wr[k].eq(bufs[k].wr_valid), pfc_ingress.wr_prio[k].eq(bufs[k].wr_prio),
                    pfc_ingress.rd[k].eq(bufs[k].start | bufs[k].advance),
                    pfc_ingress.rd_prio[k].eq(read_prio[k]),
                    self.pfc_tx[k].eq(pfc_ingress.tx[k]),
                ]
            m.d.comb += self.pfc_tx_valid.eq(pfc_ingress.tx_valid)
            for q in range(n * np_):
                m.d.comb += [self.pfc_tx_frames[q].eq(pfc_ingress.frames_sent[q]),
                             self.pfc_peak_occupancy[q].eq(pfc_ingress.peak[q])]

        leaving = [bufs[k].rd_payload.as_value() for k in range(n)]
        if self._cfg.ecn.enabled:
            leaving = self._ecn(m, bufs, islip, read_index)

        # Crossbar into the egress queues: at most one input's read register
        # holds a flit for a given output in any cycle.
        for o in range(n):
            fifo = egress[o]
            data = 0
            for k in range(n):
                data = Mux(bufs[k].rd_valid & (rd_out[k] == o), leaving[k], data)
            m.d.comb += [
                fifo.w_en.eq(arriving[o]),
                fifo.w_data.eq(data),
                self.o[o].valid.eq(fifo.r_rdy),
                self.o[o].payload.eq(fifo.r_data),
                fifo.r_en.eq(self.o[o].ready),
            ]

        # Counters.
        for k in range(n):
            last_out = self.o[k].valid & self.o[k].ready & self._layout(self.o[k].payload).last
            m.d.sync += [
                self.rx_packets[k].eq(self.rx_packets[k] + bufs[k].rx_packet),
                self.drops[k].eq(self.drops[k] + bufs[k].drop_packet),
                self.tx_packets[k].eq(self.tx_packets[k] + last_out),
            ]
        return m

    def _ecn(self, m, bufs, islip, read_index):
        """ECN marking: decide at each packet start, rewrite ECT to CE on the way out.

        Returns, per input, the flit leaving its read register.
        """
        sw = self._cfg.switch
        n, np_ = sw.ports, sw.priorities
        m.submodules.ecn = marker = EcnMarker(self._cfg)
        leaving = []
        for k in range(n):
            buf = bufs[k]
            start = islip.match[k]
            start_index = islip.match_out[k] * np_ + islip.match_prio[k]
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
                marker.rd_index[k].eq(read_index[k]),
                marker.start[k].eq(start), marker.start_out[k].eq(islip.match_out[k]),
                marker.start_index[k].eq(start_index),
            ]
            flit = self._layout(buf.rd_payload)
            capable = (flit.ecn == ECT1) | (flit.ecn == ECT0)
            out = Signal(self._layout, name=f"leaving{k}")
            m.d.comb += [out.eq(flit), out.ecn.eq(Mux(mark & capable, CE, flit.ecn))]
            leaving.append(out.as_value())
            # Count a mark once per packet, when its head is in the read register.
            counters = Array(self.ecn_marks)
            with m.If(head & mark & capable):
                m.d.sync += counters[cur_index].eq(counters[cur_index] + 1)
        m.d.comb += [self.ecn_decided.eq(marker.decided)]
        for o in range(n):
            m.d.comb += self.ecn_backlog[o].eq(marker.backlog_seen[o])
        return leaving
