"""A link fault injector: drops, duplicates, reorders and corrupts whole packets.

Sits between an endpoint's transmitter and its switch input. One draw of a
16-bit LFSR per packet decides what happens to it (section 10.7); the model
in ``sim/rdma/kernels/fault_injector.py`` makes the same draws, so RTL and model
see the same faults. The rates and the seed are inputs, not parameters:
one simulator build serves every fault setting.
"""

from amaranth.hdl import Signal, Module, Mux, Const
from amaranth.lib import enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...config import FabricConfig
from ...formats.lfsr import DRAW_THRESHOLD_BITS, LFSR_BITS, lfsr_step
from ..packet import packet_layout
from ..checks import check_config

__all__ = ["FaultInjector", "FaultState", "fault_injector_signature"]


class FaultState(enum.Enum, shape=3):
    """What the injector does with the packet under way (section 10.7); the model
    (``sim/rdma/kernels/fault_injector.py``) numbers its states the same. A corrupted packet
    is ``PASS`` with a bit to flip; a reordered one is ``HOLD``, then ``REPLAY``."""
    IDLE = 0
    PASS = 1
    DROP = 2
    DUP = 3
    HOLD = 4
    REPLAY = 5


IDLE, PASS, DROP, DUP, HOLD, REPLAY = FaultState


def fault_injector_signature(cfg: FabricConfig) -> wiring.Signature:
    """The ports of :class:`FaultInjector` for ``cfg``."""
    layout = packet_layout(cfg)
    return wiring.Signature({
        "i": In(stream.Signature(layout)),
        "o": Out(stream.Signature(layout)),
        "thresholds": In(DRAW_THRESHOLD_BITS).array(4),
        "reorder_cycles": In(16),
        "seed": In(LFSR_BITS),
        "load": In(1),
    })


class FaultInjector(wiring.Component):
    """Per-packet faults on one packet stream.

    Ports
    -----
    i, o : packet streams, from the engine and toward the switch.
    thresholds : four cumulative 17-bit thresholds (drop, duplicate,
        reorder, corrupt) on the 16-bit draw; all zero passes everything.
    reorder_cycles : the longest idle hold of a reordered packet.
    seed, load : while ``load`` is high the LFSR takes ``seed``.
    """

    def __init__(self, cfg: FabricConfig):
        check_config(cfg)
        self._cfg = cfg
        super().__init__(fault_injector_signature(cfg))

    def elaborate(self, platform):
        m = Module()
        depth = self._cfg.switch.max_packet_flits
        layout = packet_layout(self._cfg)
        state = Signal(FaultState, init=IDLE)
        lfsr = Signal(LFSR_BITS, init=1)
        held = Signal()
        hold_count = Signal(16)
        flit = Signal(range(depth + 1))     # flits of the current packet taken from i
        stored = Signal(range(depth + 1))   # flits in the buffer
        replay = Signal(range(depth + 1))
        corrupt = Signal()
        flip = Signal(7)

        buf = Memory(shape=layout, depth=depth, init=[])
        m.submodules.buf = buf
        buf_w = buf.write_port()
        buf_r = buf.read_port(domain="comb")

        # The decision for a head flit offered while idle, taken in that cycle.
        draw = lfsr
        stepped = Signal(LFSR_BITS)
        m.d.comb += stepped.eq(lfsr_step(lfsr))
        t = self.thresholds
        choice = Signal(FaultState)
        flip_now = Signal(7)
        with m.If(draw < t[0]):
            m.d.comb += choice.eq(DROP)
        with m.Elif((draw < t[1]) & ~held):
            m.d.comb += choice.eq(DUP)
        with m.Elif((draw < t[2]) & ~held):
            m.d.comb += choice.eq(HOLD)
        with m.Else():
            m.d.comb += choice.eq(PASS)
        corrupt_now = (draw >= t[2]) & (draw < t[3])
        m.d.comb += flip_now.eq(Mux(self.i.payload.length == 1, stepped[:6], stepped[:7]))

        release = held & (hold_count == self.reorder_cycles)
        deciding = (state == IDLE) & ~release & self.i.valid
        act = Signal(FaultState)
        m.d.comb += act.eq(Mux(state == IDLE, Mux(deciding, choice, IDLE), state))
        flip_bit = Mux(deciding, flip_now, flip)
        k = Mux(deciding, 0, flit)      # the index of the engine's flit in its packet
        flipping = Mux(deciding, corrupt_now, corrupt) & (k == flip_bit[6:])

        with m.If(self.load):
            m.d.sync += lfsr.eq(self.seed)
        with m.Elif(deciding):
            m.d.sync += [lfsr.eq(stepped), flip.eq(flip_now), corrupt.eq(corrupt_now),
                         state.eq(choice), flit.eq(0)]

        pay = self.i.payload
        taken = Signal()
        m.d.comb += buf_r.addr.eq(replay)
        with m.Switch(act):
            with m.Case(PASS, DUP):
                m.d.comb += [self.o.valid.eq(self.i.valid), self.o.payload.eq(pay),
                             self.i.ready.eq(self.o.ready), taken.eq(self.i.valid & self.o.ready)]
                with m.If(flipping):
                    m.d.comb += self.o.payload.data.eq(pay.data ^ (Const(1, 64) << flip_bit[:6]))
            with m.Case(DROP, HOLD):
                m.d.comb += [self.i.ready.eq(1), taken.eq(self.i.valid)]
            with m.Case(REPLAY):
                m.d.comb += [self.o.valid.eq(1), self.o.payload.eq(buf_r.data)]
                with m.If(self.o.ready):
                    m.d.sync += replay.eq(replay + 1)
                    with m.If(replay + 1 == stored):
                        m.d.sync += [state.eq(IDLE), held.eq(0), replay.eq(0)]
            with m.Case(IDLE):
                with m.If(release):
                    m.d.sync += state.eq(REPLAY)
                with m.Elif(held & ~self.i.valid):
                    m.d.sync += hold_count.eq(hold_count + 1)

        keep = (act == DUP) | (act == HOLD)
        m.d.comb += [buf_w.en.eq(taken & keep), buf_w.addr.eq(k), buf_w.data.eq(pay)]
        with m.If(taken):
            m.d.sync += flit.eq(k + 1)
            with m.If(keep):
                m.d.sync += stored.eq(k + 1)
            with m.If(pay.last):
                with m.Switch(act):
                    with m.Case(PASS):
                        m.d.sync += state.eq(Mux(held, REPLAY, IDLE))
                    with m.Case(DROP):
                        m.d.sync += state.eq(IDLE)
                    with m.Case(DUP):
                        m.d.sync += state.eq(REPLAY)
                    with m.Case(HOLD):
                        m.d.sync += [state.eq(IDLE), held.eq(1), hold_count.eq(0)]
        return m
