"""ECN marking decisions at the switch's egress (the ``[ecn]`` section)."""

from amaranth.hdl import Signal, Module, Mux, Array, Cat, Const
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config import FabricConfig
from ..formats.lfsr import LFSR_BITS, lfsr_step
from .checks import check_config, check_count

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

    Parameters
    ----------
    cfg : FabricConfig
        The ``[ecn]`` thresholds and LFSR seed, and the switch's size.
    ports : int
        Outputs (and inputs); default ``switch.ports``.
    most : int
        The most flits the inputs can hold together, which bounds the
        backlog; default ``ports * switch.buffer_flits``.
    seeded : bool
        The LFSRs start from the ``seed`` inputs (one per output, read in
        the first cycle after reset) rather than from constants, so that the
        routers of a fabric, one module, start where their global port
        numbers say (``EcnConfig.port_seed``).
    """

    def __init__(self, cfg: FabricConfig, *, ports: int | None = None, most: int | None = None,
                 seeded: bool = False):
        check_config(cfg)
        if ports is not None:
            check_count("ports", ports)
        if most is not None:
            check_count("most", most)
        sw = cfg.switch
        self._cfg = cfg
        self._ports = n = sw.ports if ports is None else ports
        self._most = n * sw.buffer_flits if most is None else most
        self._seeded = seeded
        queues = n * sw.priorities
        self.backlog_bits = self._most.bit_length()
        members = {
            "wr": In(1).array(n), "wr_index": In(range(queues)).array(n),
            "rd": In(1).array(n), "rd_index": In(range(queues)).array(n),
            "start": In(1).array(n), "start_out": In(range(n)).array(n),
            "start_index": In(range(queues)).array(n),
            "mark": Out(1).array(n),
            "decided": Out(n),
            "backlog_seen": Out(self.backlog_bits).array(n),
        }
        if seeded:
            members["seed"] = In(LFSR_BITS).array(n)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        sw, ecn = self._cfg.switch, self._cfg.ecn
        n, most = self._ports, self._most      # the backlog never exceeds most
        queues = n * sw.priorities

        backlog = Array(Signal(self.backlog_bits, name=f"backlog{q}") for q in range(queues))
        for q in range(queues):
            added = sum((self.wr[k] & (self.wr_index[k] == q)) for k in range(n))
            removed = sum((self.rd[k] & (self.rd_index[k] == q)) for k in range(n))
            m.d.sync += backlog[q].eq(backlog[q] + added - removed)

        decisions = []
        if self._seeded:
            seeded = Signal()        # the LFSRs hold their seeds
            m.d.sync += seeded.eq(1)
        for o in range(n):
            if self._seeded:
                lfsr_reg = Signal(LFSR_BITS, name=f"lfsr{o}")
                lfsr = Mux(seeded, lfsr_reg, self.seed[o])
            else:
                lfsr = lfsr_reg = Signal(LFSR_BITS, init=ecn.port_seed(o), name=f"lfsr{o}")
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
                m.d.sync += lfsr_reg.eq(lfsr_step(lfsr))
            if self._seeded:
                with m.Else():
                    m.d.sync += lfsr_reg.eq(lfsr)
        choice = Array(decisions)
        for k in range(n):
            m.d.comb += self.mark[k].eq(choice[self.start_out[k]])
        return m
