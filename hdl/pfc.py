"""Priority flow control (IEEE 802.1Qbb) inside the switch: XOFF/XON at ingress, pause at egress.

Inside the fabric a pause frame travels on a compact side channel with the
frame's own fields, :data:`REQUEST_LAYOUT` (class-enable vector and eight
16-bit pause times); ``superfabric.hdl.pfc_frame`` turns that into the real
MAC control frame and back for a port that faces a MAC.
"""

from amaranth.hdl import Signal, Module, Mux, Cat, Const
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import FabricConfig
from ..formats.pfc_frame import QUANTUM_BITS
from .pfc_frame import REQUEST_LAYOUT
from .checks import check_config, check_count

__all__ = ["PfcIngress", "PfcEgress", "pause_shift", "frame_signature"]


def frame_signature() -> stream.Signature:
    """A port's pause frames: a stream of :data:`REQUEST_LAYOUT`, always ready,
    because a frame is acted on in the cycle it arrives and never held back."""
    return stream.Signature(REQUEST_LAYOUT, always_ready=True)


def pause_shift(data_width: int) -> int:
    """Quanta to cycles is a shift for power-of-two flit widths: 512 / data_width."""
    return ((QUANTUM_BITS // data_width).bit_length() - 1 if data_width <= QUANTUM_BITS
            else 0)


def _quanta_to_cycles(quanta, data_width: int):
    # 512 bit times per quantum, data_width bits per cycle; rounded up.
    if data_width <= QUANTUM_BITS:
        return quanta << pause_shift(data_width)
    divide = (data_width // QUANTUM_BITS).bit_length() - 1
    return (quanta + (1 << divide) - 1) >> divide


class PfcIngress(wiring.Component):
    """Per (input, lossless class): occupancy, XOFF state, refresh; one frame per port per cycle.

    ``wr[k]``/``wr_prio[k]`` add the flit input ``k`` writes this cycle,
    ``rd[k]``/``rd_prio[k]`` remove the one it reads. From the state at the
    start of a cycle, for each lossless class: reaching ``xoff`` while not
    paused sends ``pause_quanta`` (pause); staying at or above ``xon`` while
    paused resends it when the refresh countdown reaches zero (every half
    pause); falling below ``xon`` sends zero quanta (resume). Every class with
    an event goes into the port's frame ``tx[k]`` of that cycle (a
    :func:`frame_signature` stream, valid when any class has one). Counters per (input, class), index
    ``k * priorities + class``: frames sent, peak occupancy. ``ports`` is
    the count of input ports (default ``switch.ports``; a fabric's router
    runs PFC on its endpoint ports only).
    """

    def __init__(self, cfg: FabricConfig, *, refresh: int, ports: int | None = None):
        check_config(cfg)
        check_count("refresh", refresh)
        if ports is not None:
            check_count("ports", ports)
        sw = cfg.switch
        self._cfg = cfg
        self._refresh = refresh
        self._ports = n = sw.ports if ports is None else ports
        classes = n * sw.priorities
        self.occupancy_bits = sw.buffer_flits.bit_length()
        prio = range(max(sw.priorities, 2))
        super().__init__({
            "wr": In(1).array(n), "wr_prio": In(prio).array(n),
            "rd": In(1).array(n), "rd_prio": In(prio).array(n),
            "tx": Out(frame_signature()).array(n),
            "frames_sent": Out(32).array(classes),
            "peak": Out(self.occupancy_bits).array(classes),
        })

    def elaborate(self, platform):
        m = Module()
        sw, pfc = self._cfg.switch, self._cfg.pfc
        n, np_ = self._ports, sw.priorities
        for k in range(n):
            enable = []
            for p in range(np_):
                idx = k * np_ + p
                occ = Signal(self.occupancy_bits, name=f"occupancy{k}_{p}")
                m.d.sync += occ.eq(occ + (self.wr[k] & (self.wr_prio[k] == p))
                                   - (self.rd[k] & (self.rd_prio[k] == p)))
                with m.If(occ > self.peak[idx]):
                    m.d.sync += self.peak[idx].eq(occ)
                if p not in pfc.priorities:
                    m.d.comb += self.tx[k].payload.times[p].eq(0)
                    enable.append(Const(0, 1))
                    continue
                paused = Signal(name=f"xoff{k}_{p}")
                refresh = Signal(range(self._refresh + 1), name=f"refresh{k}_{p}")
                pause = Signal(name=f"pause{k}_{p}")
                resume = Signal(name=f"resume{k}_{p}")
                m.d.comb += [
                    pause.eq((~paused & (occ >= pfc.xoff))
                             | (paused & ((occ >= pfc.xon) if pfc.xon else Const(1, 1))
                                & (refresh == 0))),
                    resume.eq(paused & (occ < pfc.xon) if pfc.xon else Const(0, 1)),
                    self.tx[k].payload.times[p].eq(Mux(pause, pfc.pause_quanta, 0)),
                ]
                with m.If(pause):
                    # Counting R-1 down to 0 makes the refresh period R cycles.
                    m.d.sync += [paused.eq(1), refresh.eq(self._refresh - 1)]
                if pfc.xon:     # with xon = 0 the occupancy never falls below it
                    with m.Elif(resume):
                        m.d.sync += paused.eq(0)
                with m.Elif(paused):
                    m.d.sync += refresh.eq(refresh - 1)
                with m.If(pause | resume):
                    m.d.sync += self.frames_sent[idx].eq(self.frames_sent[idx] + 1)
                enable.append(pause | resume)
            for p in range(np_, 8):
                m.d.comb += self.tx[k].payload.times[p].eq(0)
            m.d.comb += [self.tx[k].payload.class_enable.eq(Cat(*enable)),
                         self.tx[k].valid.eq(Cat(*enable).any())]
        return m


class PfcEgress(wiring.Component):
    """Per (output, class): a pause timer loaded by received frames; the pause mask.

    A frame on ``rx[o]`` (a :func:`frame_signature` stream) loads the timer of every
    class it enables with its time converted to cycles (512 bit times per
    quantum, ``data_width`` bits per cycle); zero quanta clear it. The timer
    counts down each cycle; while it is non-zero, ``pause`` bit
    ``o * priorities + class`` is set from the next cycle on. Counters per
    (output, class): frames received, cycles paused. ``ports`` is the count
    of output ports (default ``switch.ports``).
    """

    def __init__(self, cfg: FabricConfig, *, ports: int | None = None):
        check_config(cfg)
        if ports is not None:
            check_count("ports", ports)
        sw = cfg.switch
        self._cfg = cfg
        self._ports = n = sw.ports if ports is None else ports
        classes = n * sw.priorities
        self.timer_bits = (65535 << pause_shift(sw.data_width)).bit_length()
        super().__init__({
            "rx": In(frame_signature()).array(n),
            "pause": Out(classes),
            "frames_received": Out(32).array(classes),
            "paused_cycles": Out(32).array(classes),
        })

    def elaborate(self, platform):
        m = Module()
        sw = self._cfg.switch
        n, np_ = self._ports, sw.priorities
        bits = []
        for o in range(n):
            for p in range(np_):
                idx = o * np_ + p
                timer = Signal(self.timer_bits, name=f"timer{o}_{p}")
                running = Signal(name=f"paused{o}_{p}")
                m.d.comb += running.eq(timer != 0)
                frame = self.rx[o].payload
                hit = self.rx[o].valid & frame.class_enable[p]
                with m.If(hit):
                    m.d.sync += [timer.eq(_quanta_to_cycles(frame.times[p], sw.data_width)),
                                 self.frames_received[idx].eq(self.frames_received[idx] + 1)]
                with m.Elif(running):
                    m.d.sync += timer.eq(timer - 1)
                with m.If(running):
                    m.d.sync += self.paused_cycles[idx].eq(self.paused_cycles[idx] + 1)
                bits.append(running)
        m.d.comb += self.pause.eq(Cat(*bits))
        return m
