"""The fabric stepped one cycle at a time: the golden model of the switch
(:class:`superfabric.hdl.switch.Switch`) or of a fabric of routers
(:class:`superfabric.hdl.fabric.top.Fabric`) for devices modelled around it.

:class:`FabricCore` holds the state of every router and link of the fabric
of ``cfg`` (:mod:`.router`; the switch is the fabric of one router) and
steps it a cycle at a time, with packets registered as they appear, so that
devices modelled around it (an RDMA engine at every endpoint) can create
packets in reaction to what it delivers. Whole trace-driven runs are
:class:`~.top.FabricModel`'s.
"""

import numpy as np

from ...config import FabricConfig
from ...formats.packet import CE, NOT_ECT
from ...network.topology import Topology
from ..backpressure import PauseSchedule
from ..kernel import kernel, specialise
from ..pfc import SinkPause, quanta_to_cycles
from ..skid_buffer import SKID_DEPTH
from ..source import NONE
from .router import (FRAMES, IN_FLIGHT, OUTSTANDING, OVERFLOW, PACKETS, PROGRESS, packet_arrays,
                     router_busy, router_params, router_state)
from .top import (DEFAULT_STALL_LIMIT, LinkOverflow, counters, endpoint_ports, fabric_cycle,
                  grown_frames)

__all__ = ["FabricCore", "DEFAULT_STALL_LIMIT"]


class FabricCore:
    """The fabric's state and one-cycle step; packets are registered as they appear.

    Ports here are the endpoints ``0 .. E - 1`` (the switch's ports). A
    packet is known to the fabric by the id :meth:`add_packet` returns;
    the source hands its flits to the skid buffers by that id, so a packet
    must be registered before a source offers it (in the cycle it is
    created, at the latest). Call :meth:`step` once per simulated cycle, in
    increasing order. A cycle may be left out only if :meth:`busy` is false,
    no source would offer a flit in it, and it comes before
    :meth:`next_event`: nothing in the fabric could move in it, and the
    iSLIP pointers stay put, so stepping it would change nothing.

    ``pause`` drives the pause mask directly (default: never paused); with
    ``[pfc] enabled``, ``sink_pause`` makes the egress sinks send pause
    frames (default: none), and the routers' own frames pause the sources,
    which must then also have ``pause(port, prio, start, cycles)`` as
    :class:`~.source.Sources` has.

    Per packet, arrays indexed by id (as registered: ``length``; as it goes:
    ``head`` and ``tail``, the egress handover cycles, -1 until then,
    ``out_port``, ``dropped``, ``ecn_out``, the codepoint it leaves with,
    and ``ecn_backlog``, the backlog its ECN decision saw, -1 if none).
    ``outstanding`` counts registered packets neither delivered nor dropped;
    ``progress`` tells whether the last step moved anything (what a stall
    detector watches); ``pfc_frames`` lists the pause frames sent, rows
    ``(cycle, endpoint, class_enable, *eight times)``; ``hops`` and ``path``,
    per packet, the links it crossed; with ``capture_link``, ``link_cycle``, the cycle
    its head entered that link (-1 if it did not).
    """

    def __init__(self, cfg: FabricConfig, *, pause: PauseSchedule | None = None,
                 sink_pause: SinkPause | None = None, capacity: int = 1024,
                 capture_link: int = -1):
        sw = cfg.switch
        self.cfg = cfg
        topo = self.topology = Topology.of(cfg)
        self.ports, self.priorities = topo.endpoints, sw.priorities
        self.params = router_params(cfg, topo, capture_link=capture_link)
        self._max_links = topo.max_hops - 1
        self.state = router_state(cfg, topo, packet_arrays(max(1, capacity), self._max_links))
        self.pause = pause or PauseSchedule(self.ports, sw.priorities)
        self.pfc_on = cfg.pfc.enabled
        self.sink_pause = sink_pause or (SinkPause(cfg, 0.0, 0) if self.pfc_on else None)
        n, ports = self.ports, len(self.state.port_endpoint)
        #: Each endpoint's global port, where its offers go.
        self._global = endpoint_ports(self.state, topo).tolist()
        self._offer_pkt = np.full(ports, NONE, np.int64)
        self._offer_flit = np.zeros(ports, np.int64)
        self._offer_vc = np.zeros(ports, np.int64)
        self._delivered = np.zeros((n, 4), np.int64)
        self._arrived = np.zeros(len(self.state.link_src), np.int64)
        self._sink_enable = np.zeros(n, np.int64)
        self._sink_times = np.zeros((n, 8), np.int64)
        self._ready = (-1, None)
        self._paused = (-1, np.zeros(n * sw.priorities, np.bool_))
        self._busy = specialise(_fabric_busy, self.state, self.params)
        self._cycle = specialise(fabric_cycle, self.state, self.params, 0, self._offer_pkt,
                                 self._offer_flit, self._offer_vc, self._ready_row(0),
                                 self._paused[1], self._sink_enable, self._sink_times,
                                 self._delivered, self._arrived)

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
        grown = packet_arrays(capacity, self._max_links)
        used = self.packets
        for name, array in grown.items():
            array[:used] = getattr(st, name)[:used]
        self.state = st._replace(**grown)

    def add_packet(self, dst: int, prio: int, length: int, ecn: int = NOT_ECT, src: int = 0) -> int:
        """Register a packet from endpoint ``src`` toward endpoint ``dst`` in class ``prio``
        (in a fabric the routing reads ``src``); returns its id (0, 1, ...)."""
        # One at a time, as a device model creates them: plain integers, no arrays.
        if not (0 <= dst < self.ports and 0 <= prio < self.priorities and length >= 1
                and NOT_ECT <= ecn <= CE and 0 <= src < self.ports):
            self._check(*(np.array([v]) for v in (dst, prio, length, ecn, src)))
        self._reserve(1)
        st = self.state
        pkt = int(st.scalars[PACKETS])
        st.p_length[pkt] = length
        st.p_src[pkt] = src
        st.p_dst[pkt] = dst
        st.p_prio[pkt] = prio
        st.p_ecn_in[pkt] = st.p_ecn_out[pkt] = ecn
        st.scalars[PACKETS] += 1
        st.scalars[OUTSTANDING] += 1
        return pkt

    def add_packets(self, dst, prio, length, ecn=None, src=None) -> range:
        """Register packets in order, as :meth:`add_packet` one by one; returns their ids."""
        dst, prio, length = (np.asarray(v, np.int64).reshape(-1) for v in (dst, prio, length))
        k = len(dst)
        ecn = np.full(k, NOT_ECT, np.int64) if ecn is None else np.asarray(ecn, np.int64).reshape(-1)
        src = np.zeros(k, np.int64) if src is None else np.asarray(src, np.int64).reshape(-1)
        if not len(prio) == len(length) == len(ecn) == len(src) == k:
            raise ValueError(f"packets: dst, prio, length, ecn and src differ in length "
                             f"({k}, {len(prio)}, {len(length)}, {len(ecn)}, {len(src)})")
        first = self.packets
        if not k:
            return range(first, first)
        self._check(dst, prio, length, ecn, src)
        self._reserve(k)
        st = self.state
        ids = slice(first, first + k)
        st.p_length[ids] = length
        st.p_src[ids] = src
        st.p_dst[ids] = dst
        st.p_prio[ids] = prio
        st.p_ecn_in[ids] = ecn
        st.p_ecn_out[ids] = ecn
        st.scalars[PACKETS] += k
        st.scalars[OUTSTANDING] += k
        return range(first, first + k)

    def _check(self, dst, prio, length, ecn, src) -> None:
        """Refuse values out of range: they would fail deep inside the kernel, or not at all."""
        for name, values, low, high in (("dst", dst, 0, self.ports - 1),
                                        ("prio", prio, 0, self.priorities - 1),
                                        ("length", length, 1, None),
                                        ("ecn", ecn, NOT_ECT, CE),
                                        ("src", src, 0, self.ports - 1)):
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
    hops = property(lambda self: self._column("p_hops"), doc="Links it crossed.")
    path = property(lambda self: self._column("p_path"), doc="The links it crossed, in order.")
    link_cycle = property(lambda self: self._column("p_link_cycle"),
                          doc="Cycle its head entered the captured link, -1 if it did not.")
    link_ecn = property(lambda self: self._column("p_link_ecn"),
                        doc="ECN codepoint it crossed the captured link with.")

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
        """Anything inside the fabric: flits or packets in a router or on a link, or a pause
        in force upstream."""
        return bool(self._busy(self.state, self.params))

    def next_event(self, cycle: int) -> int | None:
        """The first cycle at or after ``cycle`` in which the switch changes state by itself.

        Only the sinks' pause frames do (they set egress state even when the
        fabric is empty); ``None`` when there are none to come.
        """
        if self.pfc_on:
            return self.sink_pause.next_frame(cycle)
        return None

    def counters(self, cycle: int) -> dict:
        """The hardware counters at the start of ``cycle`` (the cycle after the last step)."""
        return counters(self.state, self.params, cycle)

    def _ready_row(self, mask: int) -> np.ndarray:
        if self._ready[0] != mask:
            self._ready = (mask, np.array([mask >> e & 1 for e in range(self.ports)], np.bool_))
        return self._ready[1]

    def _paused_row(self, cycle: int) -> np.ndarray:
        if self.pause.rate == 0.0:
            return self._paused[1]
        k = cycle // self.pause.period
        if self._paused[0] != k:
            self._paused = (k, self.pause.periods(k, 1)[0])
        return self._paused[1]

    def step(self, cycle: int, source, ready_mask: int) -> list[tuple[int, int, int, int]]:
        """Simulate ``cycle`` and clock its edge (:func:`~.top.fabric_cycle`).

        ``source`` offers the endpoints' flits: ``source.offer(e, cycle)``
        (called only while that endpoint's input skid buffer is ready) gives
        a packet id or -1, ``source.flit[e]`` the flit index, and
        ``source.accept(e)`` is called when the flit is taken. Bit ``e`` of
        ``ready_mask`` is the sink of endpoint ``e`` ready. Returns the flits
        handed to the sinks in this cycle, ``(endpoint, packet, flit_index,
        is_last)``, in output order within a router, routers in order.
        """
        st = self.state
        if st.scalars[FRAMES] + self.ports > st.frames.shape[0]:
            st = self.state = st._replace(frames=grown_frames(st.frames))
        offer_pkt, offer_flit = self._offer_pkt, self._offer_flit
        skid_n = st.skid_n.tolist()
        for e, g in enumerate(self._global):
            pkt = source.offer(e, cycle) if skid_n[g] < SKID_DEPTH else NONE
            offer_pkt[g] = pkt
            if pkt >= 0:
                offer_flit[g] = source.flit[e]
                source.accept(e)
        if self.pfc_on:
            self._sink_enable[:] = 0
            for port, enable, times in self.sink_pause.frames(cycle):
                self._sink_enable[port] = enable
                self._sink_times[port] = times
        st.scalars[PROGRESS] = 0
        handed, frames = self._cycle(st, self.params, cycle, offer_pkt, offer_flit,
                                     self._offer_vc, self._ready_row(ready_mask),
                                     self._paused_row(cycle), self._sink_enable,
                                     self._sink_times, self._delivered, self._arrived)
        if st.scalars[OVERFLOW]:
            raise LinkOverflow(f"cycle {cycle}: a flit reached global port "
                               f"{int(st.scalars[OVERFLOW]) - 1} with its skid buffer full "
                               f"(the link's credits were wrong)")
        if frames:
            # Only endpoint inputs send frames; quiet routers hold none.
            width = self.cfg.switch.data_width
            for g in np.flatnonzero(st.tx_enable).tolist():
                enable, e = int(st.tx_enable[g]), int(st.port_endpoint[g])
                for p in range(self.priorities):
                    if enable >> p & 1:
                        source.pause(e, p, cycle + 1,
                                     int(quanta_to_cycles(st.tx_times[g, p], width)))
        return [tuple(row) for row in self._delivered[:handed].tolist()]

    def warm(self) -> None:
        """Compile (or load) the stepping kernels, by stepping an idle cycle."""
        self.step(0, _NoSource(), 0)
        self.busy()


@kernel
def _fabric_busy(st, prm):
    """Anything inside the fabric: a flit or a credit on a link, or a router busy."""
    if st.scalars[IN_FLIGHT]:
        return True
    for r in range(prm.routers):
        if router_busy(st, prm, r):
            return True
    return False


class _NoSource:
    """A source that never offers anything."""

    flit = ()

    def offer(self, port: int, cycle: int) -> int:
        return NONE
