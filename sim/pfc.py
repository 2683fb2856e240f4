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

from ..config import FabricConfig, PfcConfig

__all__ = ["PfcIngress", "PfcEgress", "SinkPause", "size_thresholds", "pause_sources",
           "FRAME_COLUMNS"]

#: Columns of the pause-frame records: cycle, port, class-enable vector, eight times.
FRAME_COLUMNS = 3 + 8


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


class PfcIngress:
    """Occupancy per (input, class), XOFF state machines, frames sent, peaks."""

    def __init__(self, cfg: FabricConfig):
        sw, pfc = cfg.switch, cfg.pfc
        self.ports, self.priorities = sw.ports, sw.priorities
        self.lossless = list(pfc.priorities)
        self.xoff, self.xon, self.quanta = pfc.xoff, pfc.xon, pfc.pause_quanta
        self.refresh_period = pfc.refresh_cycles(sw.data_width)
        n, p = sw.ports, sw.priorities
        self.occupancy = [[0] * p for _ in range(n)]
        self.paused = [[False] * p for _ in range(n)]
        self.refresh = [[0] * p for _ in range(n)]
        self.frames_sent = [0] * (n * p)
        self.peak = [0] * (n * p)

    def busy(self) -> bool:
        """A pause is in force upstream (so the next cycles may send frames)."""
        return any(any(row) for row in self.paused)

    def step(self) -> list[tuple[int, int, list[int]]]:
        """This cycle's frames ``(port, class_enable, times)``, from the state at its start;
        updates the state as the clock edge does."""
        frames = []
        for i in range(self.ports):
            occ, paused, refresh = self.occupancy[i], self.paused[i], self.refresh[i]
            enable, times = 0, [0] * 8
            for p in range(self.priorities):
                idx = i * self.priorities + p
                self.peak[idx] = max(self.peak[idx], occ[p])
            for p in self.lossless:
                if (not paused[p] and occ[p] >= self.xoff) or \
                        (paused[p] and occ[p] >= self.xon and refresh[p] == 0):
                    enable |= 1 << p
                    times[p] = self.quanta
                    paused[p] = True
                    refresh[p] = self.refresh_period - 1     # a refresh every period
                elif paused[p] and occ[p] < self.xon:
                    enable |= 1 << p
                    paused[p] = False
                elif paused[p]:
                    refresh[p] -= 1
            if enable:
                frames.append((i, enable, times))
                for p in range(self.priorities):
                    if enable >> p & 1:
                        self.frames_sent[i * self.priorities + p] += 1
        return frames


class PfcEgress:
    """Pause intervals per (output, class) set by frames received from the sinks."""

    def __init__(self, cfg: FabricConfig):
        sw = cfg.switch
        self.priorities = sw.priorities
        self.data_width = sw.data_width
        n = sw.ports * sw.priorities
        self.start = [0] * n        # the pause holds in cycles start <= t < until
        self.until = [0] * n
        self.paused_before = [0] * n
        self.frames_received = [0] * n

    def mask(self, cycle: int) -> int:
        """Pause bits (``output * priorities + class``) in force in ``cycle``."""
        bits = 0
        for q, until in enumerate(self.until):
            if until > cycle:
                bits |= 1 << q
        return bits

    def receive(self, cycle: int, port: int, enable: int, times: list[int]) -> None:
        """A frame received in ``cycle``; it takes effect from the next cycle."""
        for p in range(self.priorities):
            if enable >> p & 1:
                q = port * self.priorities + p
                self.frames_received[q] += 1
                # Close the running interval at the edge, then start the new one.
                self.paused_before[q] += max(0, min(self.until[q], cycle + 1) - self.start[q])
                self.start[q] = cycle + 1
                self.until[q] = cycle + 1 + PfcConfig.quanta_to_cycles(times[p], self.data_width)

    def paused_cycles(self, end: int) -> list[int]:
        """Cycles before ``end`` in which each (output, class) was paused."""
        return [before + max(0, min(until, end) - start)
                for before, start, until in zip(self.paused_before, self.start, self.until)]


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
        self.ports, self.priorities = cfg.switch.ports, cfg.switch.priorities
        self.lossless = list(cfg.pfc.priorities)
        self.quanta = cfg.pfc.pause_quanta
        self.rate, self.seed, self.period = float(rate), int(seed), period
        if PfcConfig.quanta_to_cycles(self.quanta, cfg.switch.data_width) < period:
            raise ValueError(f"pfc.pause_quanta = {self.quanta}: a sink pause must cover "
                             f"its {period}-cycle period")

    def _congested(self, k: int) -> np.ndarray:
        if k < 0 or self.rate == 0.0:
            return np.zeros((self.ports, 8), bool)
        draw = np.random.default_rng([self.seed, 2, k]).random((self.ports, 8)) < self.rate
        keep = np.zeros(8, bool)
        keep[self.lossless] = True
        return draw & keep

    def frames(self, cycle: int) -> list[tuple[int, int, list[int]]]:
        """The frames the sinks send in ``cycle``: ``(output, class_enable, times)``."""
        if self.rate == 0.0 or cycle % self.period:
            return []
        k = cycle // self.period
        now, before = self._congested(k), self._congested(k - 1)
        out = []
        for o in range(self.ports):
            enable, times = 0, [0] * 8
            for p in self.lossless:
                if now[o, p]:
                    enable |= 1 << p
                    times[p] = self.quanta
                elif before[o, p]:
                    enable |= 1 << p
            if enable:
                out.append((o, enable, times))
        return out

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
    sw = cfg.switch
    if cfg.pfc.enabled:
        return PauseSchedule(sw.ports, sw.priorities), SinkPause(cfg, rate, seed)
    return PauseSchedule(sw.ports, sw.priorities, rate, seed), None
