"""The N x N packet switch: input-queued crossbar with VOQs, iSLIP and egress queues."""

from amaranth.hdl import Signal, Module, Mux, Cat, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ..config import FabricConfig
from .islip import ISLIP
from .packet import packet_layout
from .skid_buffer import SkidBuffer
from .voq import VOQBuffer

__all__ = ["Switch", "EGRESS_DEPTH", "COUNTER_WIDTH"]

#: Flits each egress queue holds. At least three are needed for one flit per
#: cycle, because the credit check counts the flits queued and the one in
#: flight from the input buffer's read register but not the one leaving this
#: cycle (so that ``ready`` never feeds the scheduler); one more is a spare.
EGRESS_DEPTH = 4

#: Width of the per-port packet counters (they wrap).
COUNTER_WIDTH = 32


class Switch(wiring.Component):
    """Input-queued packet switch, ``ports`` x ``ports``, configured by ``[switch]``.

    Each input ``i[k]`` passes a :class:`~.skid_buffer.SkidBuffer` into a
    :class:`~.voq.VOQBuffer`. Every cycle the scheduler (:class:`~.islip.ISLIP`;
    with ``scheduler = "fifo"`` it sees only each input's head packet) matches
    free inputs to free outputs; a match reads the packet from the input
    buffer flit by flit, across the crossbar, into the output's egress queue,
    which drives ``o[k]``. A match holds from head to tail flit (packet mode).
    ``docs/architecture.md`` gives the cycle-by-cycle rules that the golden
    model ``superfabric.sim.switch`` mirrors.

    Ports
    -----
    i, o : packet streams, one per port
    pause : bit ``dst * priorities + prio`` set stops new packets of that
        class toward that output (a packet under way completes); driven by
        priority flow control or the testbench.
    rx_packets, tx_packets, drops : per-port packet counters.
    """

    def __init__(self, cfg: FabricConfig):
        sw = cfg.switch
        self._cfg = cfg
        self._layout = packet_layout(cfg)
        super().__init__({
            "i": In(stream.Signature(self._layout)).array(sw.ports),
            "o": Out(stream.Signature(self._layout)).array(sw.ports),
            "pause": In(unsigned(sw.ports * sw.priorities)),
            "rx_packets": Out(COUNTER_WIDTH).array(sw.ports),
            "tx_packets": Out(COUNTER_WIDTH).array(sw.ports),
            "drops": Out(COUNTER_WIDTH).array(sw.ports),
        })

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

        # Requests: complete packets, free input, free output with credit, not paused.
        eligible = Cat(out_free[q // np_] for q in range(n * np_))
        for k in range(n):
            m.d.comb += islip.req[k].eq(Mux(in_free[k], bufs[k].req & eligible & ~self.pause, 0))

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

        # Crossbar into the egress queues: at most one input's read register
        # holds a flit for a given output in any cycle.
        for o in range(n):
            fifo = egress[o]
            data = 0
            for k in range(n):
                data = Mux(bufs[k].rd_valid & (rd_out[k] == o), bufs[k].rd_payload.as_value(), data)
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
