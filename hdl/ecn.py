"""ECN marking decisions at the switch's egress (the ``[ecn]`` section)."""

from amaranth.hdl import Signal, Module, Mux, Array, Cat, Const
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config import FabricConfig
from ..lfsr import LFSR_BITS, lfsr_step

__all__ = ["EcnMarker"]


class EcnMarker(wiring.Component):
    """Backlog per (output, priority), an LFSR per output, and the marking decision.

    The backlog of queue ``q = output * priorities + prio`` counts the flits
    stored in all input buffers toward it: ``wr[k]`` adds the flit input
    ``k`` writes this cycle (toward ``wr_index[k]``), ``rd[k]`` removes the
    flit it reads (of ``rd_index[k]``). When input ``k`` starts a packet
    (``start[k]`` toward ``start_out[k]``, queue ``start_index[k]``), the
    decision ``mark[k]`` compares that queue's backlog at the start of the
    cycle with ``kmin``/``kmax`` and, in between, the output's LFSR with
    ``((backlog - kmin) * slope) >> 16``; the LFSR then steps. Whether the
    packet is ECN-capable is known only when its head is read, so the switch
    applies ``mark`` to ECT packets only. ``decided``/``backlog_seen`` show,
    per output, that a decision was taken and the backlog it saw.
    The golden model is ``EcnMarker`` in ``sim/ecn.py``.
    """

    def __init__(self, cfg: FabricConfig):
        sw = cfg.switch
        self._cfg = cfg
        n, queues = sw.ports, sw.ports * sw.priorities
        self.backlog_bits = (n * sw.buffer_flits).bit_length()
        super().__init__({
            "wr": In(1).array(n), "wr_index": In(range(queues)).array(n),
            "rd": In(1).array(n), "rd_index": In(range(queues)).array(n),
            "start": In(1).array(n), "start_out": In(range(n)).array(n),
            "start_index": In(range(queues)).array(n),
            "mark": Out(1).array(n),
            "decided": Out(n),
            "backlog_seen": Out(self.backlog_bits).array(n),
        })

    def elaborate(self, platform):
        m = Module()
        sw, ecn = self._cfg.switch, self._cfg.ecn
        n, queues = sw.ports, sw.ports * sw.priorities
        most = n * sw.buffer_flits       # the backlog never exceeds this

        backlog = Array(Signal(self.backlog_bits, name=f"backlog{q}") for q in range(queues))
        for q in range(queues):
            added = sum((self.wr[k] & (self.wr_index[k] == q)) for k in range(n))
            removed = sum((self.rd[k] & (self.rd_index[k] == q)) for k in range(n))
            m.d.sync += backlog[q].eq(backlog[q] + added - removed)

        decisions = []
        for o in range(n):
            lfsr = Signal(LFSR_BITS, init=ecn.port_seed(o), name=f"lfsr{o}")
            starts = [self.start[k] & (self.start_out[k] == o) for k in range(n)]
            index = Const(0, range(queues))
            for k in range(n):
                index = Mux(starts[k], self.start_index[k], index)
            seen = Signal(self.backlog_bits, name=f"seen{o}")
            m.d.comb += [seen.eq(backlog[index]), self.backlog_seen[o].eq(seen),
                         self.decided[o].eq(Cat(starts).any())]
            # Thresholds outside the backlog's range are constants, so that
            # the generated Verilog holds no always-true comparison.
            above_max = (seen >= ecn.kmax) if ecn.kmax <= most else Const(0, 1)
            above_min = (seen >= ecn.kmin) if 0 < ecn.kmin <= most else Const(int(ecn.kmin == 0), 1)
            if ecn.slope:
                random = above_min & (lfsr < ((seen - ecn.kmin) * ecn.slope)[16:])
            else:
                random = Const(0, 1)     # kmin == kmax: DCTCP step marking
            decision = Signal(name=f"decision{o}")
            m.d.comb += decision.eq(above_max | random)
            decisions.append(decision)
            with m.If(Cat(starts).any()):
                m.d.sync += lfsr.eq(lfsr_step(lfsr))
        choice = Array(decisions)
        for k in range(n):
            m.d.comb += self.mark[k].eq(choice[self.start_out[k]])
        return m
