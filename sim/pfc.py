"""Golden model of priority flow control (IEEE 802.1Qbb) in the switch, and threshold sizing.

Mirrors ``superfabric.hdl.pfc``. Ingress: per (input, lossless class) the
flits stored, an XOFF state and a refresh countdown; each cycle, from the
state at its start, a port emits at most one pause frame covering every
class with an event (pause, refresh, or resume with zero quanta). Egress:
per (output, class) a pause interval set by received frames; while it runs,
the scheduler starts no packet of the class toward the output. Sinks, the
devices downstream, send frames on a seeded schedule (:class:`SinkPause`).
"""

import math

import numpy as np
from .kernel import kernel

from ..config import FabricConfig, PfcConfig

__all__ = ["pfc_ingress_step", "pfc_egress_receive", "paused_cycles", "sink_pause_frames",
           "lossless_classes", "quanta_to_cycles", "SinkPause", "size_thresholds", "pause_sources",
           "FRAME_COLUMNS"]

#: Columns of the pause-frame records: cycle, port, class-enable vector, eight times.
FRAME_COLUMNS = 3 + 8

#: The configuration's conversion of pause quanta to cycles, compiled for the kernels.
quanta_to_cycles = kernel(PfcConfig.quanta_to_cycles, inline=True)


def lossless_classes(cfg: FabricConfig) -> np.ndarray:
    """Bool ``[8]``: which of the eight 802.1Qbb classes are lossless."""
    flags = np.zeros(8, np.bool_)
    flags[list(cfg.pfc.priorities)] = True
    return flags


def size_thresholds(cfg: FabricConfig, *, link_gbps: float, cable_m: float, mtu_bytes: int,
                    response_ns: float) -> dict:
    """XOFF, XON and headroom in flits, sized the way switch vendors document it.

    Headroom must hold what can still arrive after the port decides to
    pause: the frame's flight to the peer and the peer's last data back
    (twice the cable's bandwidth-delay product, at 5 ns/m), the peer's
    response time, up to two maximum frames (one being sent at each end),
    and the fabric's own pipeline here: a packet the source started in the
    cycle of the pause plus the skid buffer and the one-cycle reaction.
    XOFF then takes the class's share of the buffer minus that headroom;
    XON sits two maximum frames lower, so a resume is not followed at once by
    another pause.
    """
    sw = cfg.switch
    bytes_per_flit = sw.data_width / 8
    bytes_per_ns = link_gbps / 8
    flits = lambda nbytes: math.ceil(nbytes / bytes_per_flit)   # noqa: E731
    mtu = flits(mtu_bytes)
    headroom = (2 * flits(bytes_per_ns * 5.0 * cable_m) + flits(bytes_per_ns * response_ns)
                + 2 * mtu + sw.max_packet_flits + 3)
    lossless = max(1, len(cfg.pfc.priorities))
    share = sw.buffer_flits // lossless
    xoff = share - headroom
    xon = max(0, xoff - 2 * mtu)
    if xoff <= xon or xoff < 1:
        raise ValueError(f"switch.buffer_flits = {sw.buffer_flits}: too small for {lossless} "
                         f"lossless classes with {headroom} flits of headroom each")
    return {"xoff": xoff, "xon": xon, "headroom": headroom}


@kernel(inline=True)
def pfc_ingress_step(occupancy, paused, refresh, frames_sent, peak, lossless, xoff, xon, quanta,
                     refresh_period, enable, times):
    """One cycle of every ingress port's XOFF/XON machines, from the state at its start.

    ``occupancy``, ``paused`` and ``refresh`` are ``[port, class]``;
    ``frames_sent`` and ``peak`` are per ``port * priorities + class``;
    ``lossless[class]`` flags the lossless classes. Writes each port's frame
    of the cycle into ``enable[port]`` (0: none) and ``times[port, 0..7]``,
    updates the state as the clock edge does, and returns how many ports
    send a frame.
    """
    ports, priorities = occupancy.shape
    sent = 0
    for i in range(ports):
        bits = 0
        for p in range(8):
            times[i, p] = 0
        for p in range(priorities):
            idx = i * priorities + p
            if occupancy[i, p] > peak[idx]:
                peak[idx] = occupancy[i, p]
            if not lossless[p]:
                continue
            occ = occupancy[i, p]
            if (not paused[i, p] and occ >= xoff) or (paused[i, p] and occ >= xon
                                                      and refresh[i, p] == 0):
                bits |= 1 << p
                times[i, p] = quanta
                paused[i, p] = True
                refresh[i, p] = refresh_period - 1     # a refresh every period
            elif paused[i, p] and occ < xon:
                bits |= 1 << p
                paused[i, p] = False
            elif paused[i, p]:
                refresh[i, p] -= 1
        enable[i] = bits
        if bits:
            sent += 1
            for p in range(priorities):
                if bits >> p & 1:
                    frames_sent[i * priorities + p] += 1
    return sent


@kernel(inline=True)
def pfc_egress_receive(start, until, paused_before, frames_received, priorities, data_width,
                       cycle, port, enable, times):
    """A frame received at egress ``port`` in ``cycle``; it takes effect from the next cycle.

    The pause of ``q = port * priorities + class`` then holds in cycles
    ``start[q] <= t < until[q]``; ``paused_before[q]`` keeps the paused
    cycles of the intervals already closed.
    """
    for p in range(priorities):
        if enable >> p & 1:
            q = port * priorities + p
            frames_received[q] += 1
            # Close the running interval at the edge, then start the new one.
            paused_before[q] += max(0, min(until[q], cycle + 1) - start[q])
            start[q] = cycle + 1
            until[q] = cycle + 1 + quanta_to_cycles(times[p], data_width)


def paused_cycles(start, until, paused_before, end: int) -> list[int]:
    """Cycles before ``end`` in which each (output, class) was paused."""
    return [int(before + max(0, min(u, end) - s))
            for before, s, u in zip(paused_before, start, until)]


@kernel(inline=True)
def sink_pause_frames(now, before, lossless, quanta, enable, times):
    """The sinks' frames at the start of a period: ``pause_quanta`` for the classes
    congested ``now``, zero quanta for those congested only ``before``.

    ``now`` and ``before`` are ``[output, 8]``; writes ``enable[output]`` and
    ``times[output, 0..7]``; returns how many outputs send a frame.
    """
    sent = 0
    for o in range(now.shape[0]):
        bits = 0
        for p in range(8):
            times[o, p] = 0
            if not lossless[p]:
                continue
            if now[o, p]:
                bits |= 1 << p
                times[o, p] = quanta
            elif before[o, p]:
                bits |= 1 << p
        enable[o] = bits
        sent += bits != 0
    return sent


class SinkPause:
    """Downstream devices that pause the switch on a seeded schedule.

    Every ``period`` cycles each (output, lossless class) is congested with
    probability ``rate``; at the period's first cycle each output's sink
    sends one frame: ``pause_quanta`` for its congested classes (long enough
    to cover the period), zero quanta for classes that were congested in
    the previous period and are not any more.
    """

    def __init__(self, cfg: FabricConfig, rate: float, seed: int, period: int = 64):
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"pause rate = {rate!r}: must be in [0, 1)")
        self.ports, self.priorities = cfg.endpoints, cfg.switch.priorities
        self.lossless = lossless_classes(cfg)
        self.quanta = cfg.pfc.pause_quanta
        self.rate, self.seed, self.period = float(rate), int(seed), period
        if PfcConfig.quanta_to_cycles(self.quanta, cfg.switch.data_width) < period:
            raise ValueError(f"pfc.pause_quanta = {self.quanta}: a sink pause must cover "
                             f"its {period}-cycle period")

    def congested(self, first: int, count: int) -> np.ndarray:
        """Congested (output, class) flags of periods ``first .. first + count - 1``,
        bool ``[count, ports, 8]`` (none before period 0)."""
        out = np.zeros((count, self.ports, 8), np.bool_)
        if self.rate == 0.0:
            return out
        for j, k in enumerate(range(first, first + count)):
            if k >= 0:
                draw = np.random.default_rng([self.seed, 2, k]).random((self.ports, 8))
                out[j] = (draw < self.rate) & self.lossless
        return out

    def frames(self, cycle: int) -> list[tuple[int, int, list[int]]]:
        """The frames the sinks send in ``cycle``: ``(output, class_enable, times)``."""
        if self.rate == 0.0 or cycle % self.period:
            return []
        before, now = self.congested(cycle // self.period - 1, 2)
        enable = np.zeros(self.ports, np.int64)
        times = np.zeros((self.ports, 8), np.int64)
        sink_pause_frames(now, before, self.lossless, self.quanta, enable, times)
        return [(o, int(enable[o]), times[o].tolist()) for o in np.flatnonzero(enable).tolist()]

    def next_frame(self, cycle: int) -> int | None:
        """The first cycle at or after ``cycle`` in which a frame may be sent."""
        if self.rate == 0.0:
            return None
        return -(-cycle // self.period) * self.period


def pause_sources(cfg: FabricConfig, rate: float, seed: int):
    """What stalls egress in a run: ``(PauseSchedule, SinkPause or None)``.

    Without PFC a seeded schedule drives the switch's pause mask directly;
    with PFC the sinks send pause frames at the same rate instead.
    """
    from .backpressure import PauseSchedule
    endpoints, priorities = cfg.endpoints, cfg.switch.priorities
    if cfg.pfc.enabled:
        return PauseSchedule(endpoints, priorities), SinkPause(cfg, rate, seed)
    return PauseSchedule(endpoints, priorities, rate, seed), None
