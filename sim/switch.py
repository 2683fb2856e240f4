"""The switch alone, stepped one cycle at a time: the golden model of
:class:`superfabric.hdl.switch.Switch` for devices modelled around it.

:class:`SwitchCore` holds the state of the one router of a ``topology =
"switch"`` fabric (:mod:`.router`) and steps it a cycle at a time, with
packets registered as they appear, so that devices modelled around it (an
RDMA engine on each port) can create packets in reaction to what it
delivers. Whole trace-driven runs, of one switch or of a fabric, are
:class:`~.fabric.FabricModel`'s.
"""

import numpy as np

from ..config import FabricConfig
from ..formats.packet import CE, NOT_ECT
from ..network.topology import Topology
from .backpressure import PauseSchedule
from .fabric.top import DEFAULT_STALL_LIMIT, counters, grown_frames
from .kernel import specialise
from .pfc import SinkPause, quanta_to_cycles
from .fabric.router import (FRAMES, OUTSTANDING, PACKETS, PROGRESS, packet_arrays, router_busy,
                     router_cycle, router_params, router_state)
from .skid_buffer import SKID_DEPTH
from .source import NONE

__all__ = ["SwitchCore", "DEFAULT_STALL_LIMIT"]


class SwitchCore:
    """The switch's state and one-cycle step; packets are registered as they appear.

    A packet is known to the switch by the id :meth:`add_packet` returns;
    the source hands its flits to the skid buffers by that id, so a packet
    must be registered before a source offers it (in the cycle it is
    created, at the latest). Call :meth:`step` once per simulated cycle, in
    increasing order. A cycle may be left out only if :meth:`busy` is false,
    no source would offer a flit in it, and it comes before
    :meth:`next_event`: nothing in the switch could move in it, and the
    iSLIP pointers stay put, so stepping it would change nothing.

    ``pause`` drives the pause mask directly (default: never paused); with
    ``[pfc] enabled``, ``sink_pause`` makes the egress sinks send pause
    frames (default: none), and the switch's own frames pause the sources,
    which must then also have ``pause(port, prio, start, cycles)`` as
    :class:`~.source.Sources` has.

    Per packet, arrays indexed by id (as registered: ``length``; as it goes:
    ``head`` and ``tail``, the egress handover cycles, -1 until then,
    ``out_port``, ``dropped``, ``ecn_out``, the codepoint it leaves with,
    and ``ecn_backlog``, the backlog its ECN decision saw, -1 if none).
    ``outstanding`` counts registered packets neither delivered nor dropped;
    ``progress`` tells whether the last step moved anything (what a stall
    detector watches); ``pfc_frames`` lists the pause frames sent, rows
    ``(cycle, port, class_enable, *eight times)``.
    """

    def __init__(self, cfg: FabricConfig, *, pause: PauseSchedule | None = None,
                 sink_pause: SinkPause | None = None, capacity: int = 1024):
        if cfg.fabric.is_fabric:
            raise ValueError(f"fabric.topology = {cfg.fabric.topology!r}: SwitchCore is one "
                             f"switch; a fabric runs in FabricModel")
        sw = cfg.switch
        self.cfg = cfg
        self.ports, self.priorities = sw.ports, sw.priorities
        topo = Topology.of(cfg)
        self.params = router_params(cfg, topo)
        self.state = router_state(cfg, topo, packet_arrays(max(1, capacity), 0))
        self.pause = pause or PauseSchedule(sw.ports, sw.priorities)
        self.pfc_on = cfg.pfc.enabled
        self.sink_pause = sink_pause or (SinkPause(cfg, 0.0, 0) if self.pfc_on else None)
        n = sw.ports
        self._offer_pkt = np.full(n, NONE, np.int64)
        self._offer_flit = np.zeros(n, np.int64)
        self._offer_vc = np.zeros(n, np.int64)
        self._delivered = np.zeros((n, 4), np.int64)
        self._sink_enable = np.zeros(n, np.int64)
        self._sink_times = np.zeros((n, 8), np.int64)
        self._bits = 1 << np.arange(n, dtype=np.int64)
        self._ready = (-1, None)
        self._paused = (-1, np.zeros(n * sw.priorities, np.bool_))
        self._busy = specialise(router_busy, self.state, self.params, 0)
        self._cycle = specialise(router_cycle, self.state, self.params, 0, 0, self._offer_pkt,
                                 self._offer_flit, self._offer_vc, self._ready_row(0),
                                 self._paused[1], self._sink_enable, self._sink_times,
                                 self._delivered)

    # -- packets ------------------------------------------------------------

    @property
    def packets(self) -> int:
        """Packets registered so far."""
        return int(self.state.scalars[PACKETS])

    def _reserve(self, count: int) -> None:
        """Make room for ``count`` more packets."""
        st = self.state
        need = self.packets + count
        capacity = st.p_length.shape[0]
        if need <= capacity:
            return
        while capacity < need:
            capacity *= 2
        grown = packet_arrays(capacity, 0)
        used = self.packets
        for name, array in grown.items():
            array[:used] = getattr(st, name)[:used]
        self.state = st._replace(**grown)

    def add_packet(self, dst: int, prio: int, length: int, ecn: int = NOT_ECT) -> int:
        """Register a packet toward output ``dst`` in class ``prio``; returns its id (0, 1, ...)."""
        # One at a time, as a device model creates them: plain integers, no arrays.
        if not (0 <= dst < self.ports and 0 <= prio < self.priorities and length >= 1
                and NOT_ECT <= ecn <= CE):
            self._check(*(np.array([v]) for v in (dst, prio, length, ecn)))
        self._reserve(1)
        st = self.state
        pkt = int(st.scalars[PACKETS])
        st.p_length[pkt] = length
        st.p_dst[pkt] = dst
        st.p_prio[pkt] = prio
        st.p_ecn_in[pkt] = st.p_ecn_out[pkt] = ecn
        st.scalars[PACKETS] += 1
        st.scalars[OUTSTANDING] += 1
        return pkt

    def add_packets(self, dst, prio, length, ecn=None) -> range:
        """Register packets in order, as :meth:`add_packet` one by one; returns their ids."""
        dst, prio, length = (np.asarray(v, np.int64).reshape(-1) for v in (dst, prio, length))
        k = len(dst)
        ecn = np.full(k, NOT_ECT, np.int64) if ecn is None else np.asarray(ecn, np.int64).reshape(-1)
        if not len(prio) == len(length) == len(ecn) == k:
            raise ValueError(f"packets: dst, prio, length and ecn differ in length "
                             f"({k}, {len(prio)}, {len(length)}, {len(ecn)})")
        first = self.packets
        if not k:
            return range(first, first)
        self._check(dst, prio, length, ecn)
        self._reserve(k)
        st = self.state
        ids = slice(first, first + k)
        st.p_length[ids] = length
        st.p_dst[ids] = dst
        st.p_prio[ids] = prio
        st.p_ecn_in[ids] = ecn
        st.p_ecn_out[ids] = ecn
        st.scalars[PACKETS] += k
        st.scalars[OUTSTANDING] += k
        return range(first, first + k)

    def _check(self, dst, prio, length, ecn) -> None:
        """Refuse values out of range: they would fail deep inside the kernel, or not at all."""
        for name, values, low, high in (("dst", dst, 0, self.ports - 1),
                                        ("prio", prio, 0, self.priorities - 1),
                                        ("length", length, 1, None),
                                        ("ecn", ecn, NOT_ECT, CE)):
            lowest, highest = int(values.min()), int(values.max())
            bad = lowest if lowest < low else highest if high is not None and highest > high else None
            if bad is not None:
                allowed = f"at least {low}" if high is None else f"in {low}..{high}"
                raise ValueError(f"packet {name} = {bad}: must be {allowed}")

    def _column(self, name: str) -> np.ndarray:
        return getattr(self.state, name)[:self.packets]

    length = property(lambda self: self._column("p_length"), doc="Flits per packet.")
    prio = property(lambda self: self._column("p_prio"), doc="Traffic class of each packet.")
    head = property(lambda self: self._column("p_head"), doc="Cycle of the head's handover.")
    tail = property(lambda self: self._column("p_tail"), doc="Cycle of the tail's handover.")
    out_port = property(lambda self: self._column("p_out"), doc="Output it left by.")
    dropped = property(lambda self: self._column("p_dropped"), doc="Dropped at ingress.")
    ecn_out = property(lambda self: self._column("p_ecn_out"), doc="Codepoint it left with.")
    ecn_backlog = property(lambda self: self._column("p_ecn_backlog"),
                           doc="Backlog its ECN decision saw, -1 if none.")

    @property
    def outstanding(self) -> int:
        """Registered packets neither delivered nor dropped."""
        return int(self.state.scalars[OUTSTANDING])

    @property
    def progress(self) -> bool:
        """The last step moved a flit."""
        return bool(self.state.scalars[PROGRESS])

    @property
    def pfc_frames(self) -> np.ndarray:
        """The pause frames sent, rows ``(cycle, port, class_enable, *eight times)``."""
        return self.state.frames[:self.state.scalars[FRAMES]].copy()

    # -- stepping -----------------------------------------------------------

    def busy(self) -> bool:
        """Anything inside the switch: flits or packets anywhere, or a pause in force upstream."""
        return bool(self._busy(self.state, self.params, 0))

    def next_event(self, cycle: int) -> int | None:
        """The first cycle at or after ``cycle`` in which the switch changes state by itself.

        Only the sinks' pause frames do (they set egress state even when the
        switch is empty); ``None`` when there are none to come.
        """
        if self.pfc_on:
            return self.sink_pause.next_frame(cycle)
        return None

    def counters(self, cycle: int) -> dict:
        """The hardware counters at the start of ``cycle`` (the cycle after the last step)."""
        return counters(self.state, self.params, cycle)

    def _ready_row(self, mask: int) -> np.ndarray:
        if self._ready[0] != mask:
            self._ready = (mask, (mask & self._bits) != 0)
        return self._ready[1]

    def _paused_row(self, cycle: int) -> np.ndarray:
        if self.pause.rate == 0.0:
            return self._paused[1]
        k = cycle // self.pause.period
        if self._paused[0] != k:
            self._paused = (k, self.pause.periods(k, 1)[0])
        return self._paused[1]

    def step(self, cycle: int, source, ready_mask: int) -> list[tuple[int, int, int, int]]:
        """Simulate ``cycle`` and clock its edge (:func:`~.router.router_cycle`).

        ``source`` offers the inputs' flits: ``source.offer(port, cycle)``
        (called only while that input's skid buffer is ready) gives a packet
        id or -1, ``source.flit[port]`` the flit index, and
        ``source.accept(port)`` is called when the flit is taken. Bit ``o``
        of ``ready_mask`` is the sink of output ``o`` ready. Returns the
        flits handed to the sinks in this cycle, ``(out_port, packet,
        flit_index, is_last)`` in output order.
        """
        st = self.state
        if st.scalars[FRAMES] + self.ports > st.frames.shape[0]:
            st = self.state = st._replace(frames=grown_frames(st.frames))
        offer_pkt, offer_flit = self._offer_pkt, self._offer_flit
        skid_n = st.skid_n.tolist()
        for i in range(self.ports):
            pkt = source.offer(i, cycle) if skid_n[i] < SKID_DEPTH else NONE
            offer_pkt[i] = pkt
            if pkt >= 0:
                offer_flit[i] = source.flit[i]
                source.accept(i)
        if self.pfc_on:
            self._sink_enable[:] = 0
            for port, enable, times in self.sink_pause.frames(cycle):
                self._sink_enable[port] = enable
                self._sink_times[port] = times
        st.scalars[PROGRESS] = 0
        handed, frames = self._cycle(st, self.params, 0, cycle, offer_pkt, offer_flit,
                                     self._offer_vc, self._ready_row(ready_mask),
                                     self._paused_row(cycle), self._sink_enable,
                                     self._sink_times, self._delivered)
        if frames:
            width = self.cfg.switch.data_width
            for port in np.flatnonzero(st.tx_enable).tolist():
                enable = int(st.tx_enable[port])
                for p in range(self.priorities):
                    if enable >> p & 1:
                        source.pause(port, p, cycle + 1,
                                     int(quanta_to_cycles(st.tx_times[port, p], width)))
        return [tuple(row) for row in self._delivered[:handed].tolist()]

    def warm(self) -> None:
        """Compile (or load) the stepping kernels, by stepping an idle cycle."""
        self.step(0, _NoSource(), 0)
        self.busy()


class _NoSource:
    """A source that never offers anything."""

    flit = ()

    def offer(self, port: int, cycle: int) -> int:
        return NONE
