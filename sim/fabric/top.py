"""The golden model of a whole fabric run: routers, links and endpoints (docs/architecture.md 5.5, 11).

:class:`FabricModel` runs a trace: every endpoint's source offers its
packets, every router does its cycle (:func:`~.router.router_cycle`), the
links carry flits forward and credits back with their latency, and every
packet's delivery, hops and path are recorded. The loop is compiled
(:func:`run_block`) and touches Python once per :data:`~.backpressure.BLOCK`
cycles. The switch is the fabric of one router.
"""

import numpy as np

from ...config import FabricConfig
from ...network.topology import Topology
from ..backpressure import BLOCK, PauseSchedule, SinkReady
from ..kernel import kernel
from ..pfc import FRAME_COLUMNS, SinkPause, paused_cycles, quanta_to_cycles, sink_pause_frames
from ..records import Records
from ..skid_buffer import skid_ready
from ..threads import CYCLE, STATUS, SYNC_WORDS, barrier, own_lines, run_parts, usable_threads
from .router import (FRAMES, FREE, IN_FLIGHT, OUTSTANDING, OVERFLOW, PACKETS, PROGRESS,
                     credits_changed, router_busy, router_cycle, router_params, router_quiet,
                     router_reached, router_state, trace_packets)
from ..source import (NONE, source_accept, source_busy, source_next_generation, source_offer,
                     source_pause, source_state)
from ..traffic import Trace

__all__ = ["FabricModel", "run_block", "waiting_cycle", "describe_waits", "deliver_links",
           "return_credits", "routers_phase", "routers_cycle", "routers_merged", "fabric_cycle",
           "merge_part", "counters", "grown_frames", "endpoint_ports", "Parts",
           "DEFAULT_STALL_LIMIT", "LinkOverflow"]

#: Cycles without any transfer, with packets outstanding, that end a run as stalled.
DEFAULT_STALL_LIMIT = 10_000

#: Words between two parts' counts in ``part_scalars``: two cache lines, so that no line
#: holds two parts' counts (own_lines).
_ROW_WORDS = 16

# What run_block returns as its status, and _RUN while a cycle is to run.
_DONE, _STALLED, _NEXT_BLOCK, _NEED_ROOM, _OVERFLOW, _RUN = range(6)


class LinkOverflow(RuntimeError):
    """A flit reached a link input with no room: the credit accounting is broken."""


@kernel(inline=True)
def deliver_links(st, prm, cycle, offer_pkt, offer_flit, offer_vc, arrived):
    """The flits the links deliver to their inputs in ``cycle`` (offered to the skid
    buffers like a source's), and the credits they bring back (into ``arrived[link]``,
    a pool or -1, for :func:`return_credits` after the routers' cycle)."""
    if not prm.links:
        return
    slot = cycle % prm.link_latency
    for k in range(prm.links):
        g = st.link_dst[k]
        offer_pkt[g] = NONE
        if st.fwd_valid[k, slot]:
            offer_pkt[g] = st.fwd_pkt[k, slot]
            offer_flit[g] = st.fwd_flit[k, slot]
            offer_vc[g] = st.fwd_vc[k, slot]
            st.fwd_valid[k, slot] = False
            st.scalars[IN_FLIGHT] -= 1
        arrived[k] = st.back_pool[g, slot]
        if arrived[k] >= 0:
            st.back_pool[g, slot] = -1
            st.scalars[IN_FLIGHT] -= 1


@kernel(inline=True)
def return_credits(st, prm, arrived):
    """The credits the links brought back, added at the upstream routers at the edge."""
    for k in range(prm.links):
        pool = arrived[k]
        if pool >= 0:
            p = pool // prm.vcs
            v = pool - p * prm.vcs
            st.credits[st.link_src[k], p, v] += 1
            credits_changed(st, prm, st.link_src[k], p, v)


@kernel(inline=True)
def routers_cycle(st, prm, first, last, cycle, offer_pkt, offer_flit, offer_vc, ready, paused,
                  sink_enable, sink_times, delivered):
    """Routers ``first .. last - 1`` do their cycle (:func:`~.router.router_cycle`; a quiet
    router that nothing reaches would change nothing and is skipped). Writes the flits
    they hand to the endpoints into ``delivered``, rows ``(endpoint, packet, flit, last)``
    in router order; returns how many, and how many pause frames they sent."""
    handed = 0
    frames = 0
    for r in range(first, last):
        if st.quiet[r] and not router_reached(st, prm, r, offer_pkt, sink_enable):
            continue
        now, sent = router_cycle(st, prm, r, cycle, offer_pkt, offer_flit, offer_vc, ready,
                                 paused, sink_enable, sink_times, delivered[handed:])
        handed += now
        frames += sent
        quiet = router_quiet(st, prm, r)
        if quiet != st.quiet[r]:
            # Written only as it changes: the routers' flags share cache lines across
            # the threads that step them (section 5.9).
            st.quiet[r] = quiet
    return handed, frames


@kernel(inline=True)
def routers_phase(own, part, parts, sync, status, cycle):
    """The barrier before the routers' phase (section 5.9): part 0 tells the others its
    ``status`` for the cycle (whether to run it) and the cycle's number; returns them as
    every part has them, a later part's own counters zeroed for its routers' phase."""
    if parts > 1:
        if part == 0:
            sync[STATUS] = status
            sync[CYCLE] = cycle
        barrier(sync, parts)
        if part:
            status, cycle = sync[STATUS], sync[CYCLE]
            for k in range(own.scalars.shape[0]):
                own.scalars[k] = 0
    return status, cycle


@kernel(inline=True)
def routers_merged(st, prm, part, parts, sync, part_scalars, part_frames, part_free, arrived):
    """The barrier after the routers' phase (section 5.9); then part 0 adds what the later
    parts counted, sent and freed (:func:`merge_part`, in part order) and returns the
    credits the links brought back (:func:`return_credits`)."""
    if parts > 1:
        barrier(sync, parts)
    if part == 0:
        for k in range(1, parts):
            merge_part(st, part_scalars[k], part_frames[k], part_free[k])
        return_credits(st, prm, arrived)


@kernel(inline=True)
def fabric_cycle(st, prm, cycle, offer_pkt, offer_flit, offer_vc, ready, paused, sink_enable,
                 sink_times, delivered, arrived):
    """One cycle of the whole fabric and its edge (section 11.5): the links deliver,
    every router does its cycle (:func:`routers_cycle`), the credits the links
    brought back are added. The endpoints' offers are in ``offer_*`` at their global
    ports; ``ready``, ``paused``, ``sink_enable`` and ``sink_times`` are per endpoint.
    Writes the flits handed to the endpoints into ``delivered``, rows ``(endpoint,
    packet, flit, last)`` in router order (``arrived``: scratch, one per link).
    Returns how many flits were delivered and how many pause frames the routers sent."""
    deliver_links(st, prm, cycle, offer_pkt, offer_flit, offer_vc, arrived)
    handed, frames = routers_cycle(st, prm, 0, prm.routers, cycle, offer_pkt, offer_flit,
                                   offer_vc, ready, paused, sink_enable, sink_times, delivered)
    return_credits(st, prm, arrived)
    return handed, frames


@kernel(inline=True)
def merge_part(st, scalars, frames, free_ids):
    """What a later part's routers left in their own ``scalars``, ``frames`` and
    ``free_ids`` in a cycle (section 5.9), added to the fabric's after the earlier
    parts', as its routers come after theirs: the counts, the last overflow, the pause
    frames in order, the freed packet ids in order."""
    st.scalars[IN_FLIGHT] += scalars[IN_FLIGHT]
    st.scalars[OUTSTANDING] += scalars[OUTSTANDING]
    st.scalars[PROGRESS] = st.scalars[PROGRESS] or scalars[PROGRESS]
    if scalars[OVERFLOW]:
        st.scalars[OVERFLOW] = scalars[OVERFLOW]
    for k in range(scalars[FRAMES]):
        for j in range(frames.shape[1]):
            st.frames[st.scalars[FRAMES], j] = frames[k, j]
        st.scalars[FRAMES] += 1
    for k in range(scalars[FREE]):
        st.free_ids[st.scalars[FREE]] = free_ids[k]
        st.scalars[FREE] += 1


@kernel(inline=True)
def _next_cycle(st, prm, src, cycle, last_progress, stall_limit, end, sink_period, congested,
                congested_first, endpoint_port, offer_pkt, offer_flit, offer_vc, sink_enable,
                sink_times, arrived):
    """The start of a cycle of :func:`run_block`, before the routers': whether to run it
    (``_RUN``, or why the block ends) and which cycle it is (an idle fabric jumps ahead);
    the sources' offers, the sinks' pause frames and the links' deliveries. Returns
    ``(status, cycle, last_progress)``."""
    if st.scalars[OUTSTANDING] <= 0:
        return _DONE, cycle, last_progress
    if cycle >= end:
        return _NEXT_BLOCK, cycle, last_progress
    idle = st.scalars[IN_FLIGHT] == 0 and not source_busy(src)
    r = 0
    while idle and r < prm.routers:
        idle = not router_busy(st, prm, r)
        r += 1
    if idle:
        # Nothing inside the fabric and no source mid-packet: jump to the
        # next generation cycle (the pointers cannot move meanwhile), but
        # not over a sink's pause frame.
        nxt = source_next_generation(src)
        if nxt > cycle and sink_period > 0:
            nxt = min(nxt, -(-cycle // sink_period) * sink_period)
        if nxt > cycle:
            last_progress += nxt - cycle
            cycle = nxt
            if cycle >= end:
                return _NEXT_BLOCK, cycle, last_progress
    if cycle - last_progress >= stall_limit:
        return _STALLED, cycle, last_progress
    if st.scalars[FRAMES] + prm.endpoints > st.frames.shape[0]:
        return _NEED_ROOM, cycle, last_progress

    st.scalars[PROGRESS] = 0
    for e in range(prm.endpoints):
        g = endpoint_port[e]
        offer_pkt[g] = NONE
        # A source picks its packet when it offers, whether or not the
        # input can take the flit (a stream source does not withdraw an
        # offer); the flit moves when the skid buffer has room.
        pkt = source_offer(src, e, cycle)
        if pkt >= 0 and skid_ready(st.skid_n, g):
            offer_pkt[g] = pkt
            offer_flit[g] = src.flit[e]
            offer_vc[g] = 0
            source_accept(src, e)
        sink_enable[e] = 0
    if sink_period > 0 and cycle % sink_period == 0:
        k = cycle // sink_period - congested_first
        sink_pause_frames(congested[k], congested[k - 1], st.lossless, prm.quanta,
                          sink_enable, sink_times)
    deliver_links(st, prm, cycle, offer_pkt, offer_flit, offer_vc, arrived)
    return _RUN, cycle, last_progress


@kernel
def run_block(st, own, part, parts, sync, part_scalars, part_frames, part_free, prm, src, cycle,
              last_progress, stall_limit, ready, ready_first, paused, pause_first, pause_period,
              congested, congested_first, sink_period, endpoint_port, offer_pkt, offer_flit,
              offer_vc, sink_enable, sink_times, delivered, arrived):
    """Run the trace of the sources ``src`` from ``cycle`` (docs/architecture.md 5.5), as
    thread ``part`` of ``parts`` (docs/spec/timing.md 5.9).

    ``ready[c - ready_first]`` is the endpoint sinks' ready row of cycle ``c``
    and ``paused[c // pause_period - pause_first]`` the pause bits; with
    ``sink_period > 0``, ``congested[k - congested_first]`` the sinks'
    congested classes of period ``k``. ``endpoint_port[e]`` is endpoint
    ``e``'s global port. Runs until every packet is resolved, the stall limit
    is reached, the cycle leaves the rows given, or the frame records are
    full; returns ``(cycle, last_progress, status)``.

    Every thread steps its own contiguous range of the routers, in ``own``: the
    fabric's state ``st`` for part 0, for part ``k`` the same arrays but for
    ``part_scalars[k]``, ``part_frames[k]`` and ``part_free[k]``, which part 0 merges
    after the routers' phase (:func:`merge_part`), in part order; part 0 alone does
    the rest of the cycle, the others wait at the barrier of ``sync`` (none with one
    part). ``delivered`` is each part's own scratch.
    """
    first, last = part * prm.routers // parts, (part + 1) * prm.routers // parts
    end = ready_first + ready.shape[0]
    status = _RUN
    while True:
        if part == 0 and status == _RUN:
            status, cycle, last_progress = _next_cycle(
                st, prm, src, cycle, last_progress, stall_limit, end, sink_period, congested,
                congested_first, endpoint_port, offer_pkt, offer_flit, offer_vc, sink_enable,
                sink_times, arrived)
        status, cycle = routers_phase(own, part, parts, sync, status, cycle)
        if status != _RUN:
            return cycle, last_progress, status
        routers_cycle(own, prm, first, last, cycle, offer_pkt, offer_flit, offer_vc,
                      ready[cycle - ready_first], paused[cycle // pause_period - pause_first],
                      sink_enable, sink_times, delivered)
        routers_merged(st, prm, part, parts, sync, part_scalars, part_frames, part_free,
                       arrived)
        if part:
            continue
        if st.scalars[OVERFLOW]:
            status = _OVERFLOW
            continue
        if prm.pfc_on:
            # The routers' frames pause the endpoints' sources from the next cycle.
            for e in range(prm.endpoints):
                enable = st.tx_enable[endpoint_port[e]]
                if enable:
                    for p in range(prm.priorities):
                        if enable >> p & 1:
                            source_pause(src, e, p, cycle + 1, quanta_to_cycles(
                                st.tx_times[endpoint_port[e], p], prm.data_width))
        if st.scalars[PROGRESS]:
            last_progress = cycle + 1
        cycle += 1


def endpoint_ports(st, topo: Topology) -> np.ndarray:
    """The global port of every endpoint."""
    return np.array([st.base[topo.endpoint_router(e)] + topo.endpoint_port(e)
                     for e in range(topo.endpoints)], np.int64)


def grown_frames(frames: np.ndarray) -> np.ndarray:
    """The frame records with twice the room."""
    grown = np.zeros((2 * frames.shape[0], FRAME_COLUMNS), np.int64)
    grown[:frames.shape[0]] = frames
    return grown


def counters(st, prm, cycle: int) -> dict:
    """The hardware counters at the start of ``cycle``: per global port, per link,
    per router."""
    out = {"rx_packets": st.rx.tolist(), "tx_packets": st.tx.tolist(),
           "drops": st.drops.tolist()}
    if prm.ecn_on:
        out["ecn_marks"] = st.marks.tolist()
    if prm.pfc_on:
        endpoints = np.flatnonzero(st.port_endpoint >= 0)
        rows = (endpoints[:, None] * prm.priorities + np.arange(prm.priorities)).reshape(-1)
        paused = paused_cycles(st.pause_start, st.pause_until, st.paused_before, cycle)
        out.update(pfc_tx_frames=st.frames_sent[rows].tolist(),
                   pfc_rx_frames=st.frames_received[rows].tolist(),
                   pfc_paused_cycles=[paused[q] for q in rows],
                   pfc_peak_occupancy=st.peak[rows].tolist())
    if prm.links:
        out.update(link_flits=st.link_flits.tolist(), router_peak=st.peak_stored.tolist())
    return out


class Parts:
    """What a run on ``count`` threads gives its parts besides the fabric's state (section
    5.9): the barrier's words; per part, its counters (flits in flight, packets outstanding,
    progress, an overflow), its pause frames' rows (``endpoints`` a cycle at most), its
    freed packet ids (a tail and a drop a port), its flits delivered to endpoints (``rows``)
    and how many (``handed[k, 0]``). What a part writes at every flit is on cache lines of
    its own (:func:`~..threads.own_lines`)."""

    def __init__(self, st, count: int, endpoints: int, rows: int):
        self.count = count
        self.sync = own_lines(SYNC_WORDS)
        self.scalars = own_lines(count * _ROW_WORDS).reshape(count, _ROW_WORDS)[
            :, :len(st.scalars)]
        self.handed = own_lines(count * _ROW_WORDS).reshape(count, _ROW_WORDS)
        self.frames = np.zeros((count, endpoints, FRAME_COLUMNS), np.int64)
        self.free = np.zeros((count, 2 * len(st.port_endpoint)), np.int64)
        self.delivered = np.zeros((count, rows, 4), np.int64)

    def shared(self, st):
        """``st`` with its counters on lines of their own when there are several parts."""
        if self.count == 1:
            return st
        scalars = own_lines(len(st.scalars))
        scalars[:] = st.scalars
        return st._replace(scalars=scalars)

    def own(self, st, k: int):
        """Part ``k``'s view of ``st``: the fabric's for part 0, else ``st`` with the part's
        own counters, frame rows and free stack, which part 0 merges (:func:`merge_part`)."""
        if k == 0:
            return st
        return st._replace(scalars=self.scalars[k], frames=self.frames[k], free_ids=self.free[k])


class FabricModel:
    """Run a trace through the fabric of ``cfg``, cycle by cycle, and record every packet;
    ``threads`` step the routers (docs/spec/timing.md 5.9), the same run on any number."""

    def __init__(self, cfg: FabricConfig, *, threads: int = 1):
        self._cfg = cfg
        self.topology = Topology.of(cfg)
        #: The threads that step the routers (docs/spec/timing.md 5.9): as asked, but at
        #: most one a router; the run is the same whatever their number.
        self.threads = usable_threads(threads, self.topology.routers)

    def warm(self, *, sink: SinkReady | None = None, pause: PauseSchedule | None = None,
             sink_pause: SinkPause | None = None,
             stall_limit: int = DEFAULT_STALL_LIMIT) -> None:
        """Compile :func:`run_block` (or load it from numba's cache) for a :meth:`run` with
        these arguments, before a run that is timed.

        numba compiles a kernel once per type signature of its arguments: a trace of no
        packets, through the same sinks and pauses, passes it arguments of the very types
        a trace's run does, in a call that does not enter its loop. ``sink``, ``pause``
        and ``sink_pause`` are only read.
        """
        self.run(Trace.empty(), sink=sink, pause=pause, sink_pause=sink_pause,
                 stall_limit=stall_limit)

    def run(self, trace: Trace, *, sink: SinkReady | None = None,
            pause: PauseSchedule | None = None, sink_pause: SinkPause | None = None,
            stall_limit: int = DEFAULT_STALL_LIMIT, capture_link: int = -1) -> Records:
        """Simulate until every packet of ``trace`` is delivered or dropped.

        ``sink`` (per endpoint) says when the endpoints accept flits;
        ``pause`` drives the pause mask of the endpoint outputs directly; with
        ``[pfc] enabled``, ``sink_pause`` makes the endpoints send pause
        frames instead. Returns the per-packet :class:`~.records.Records`. A
        run in which nothing moves for ``stall_limit`` cycles while packets
        are outstanding stops with ``stalled`` set. ``capture_link`` (a link id of the
        topology) records in ``link_cycle`` the cycle each packet's head entered it.
        """
        cfg, topo = self._cfg, self.topology
        e, p = topo.endpoints, cfg.switch.priorities
        _check_packets(trace, e, p)
        prm = router_params(cfg, topo, capture_link=capture_link)
        rec = Records.empty(len(trace), topo.max_hops - 1)
        st = router_state(cfg, topo, trace_packets(trace, rec))
        st.scalars[PACKETS] = st.scalars[OUTSTANDING] = len(trace)
        src = source_state(trace, e, p)
        sink = sink or SinkReady(e)
        pause = pause or PauseSchedule(e, p)
        if cfg.pfc.enabled and sink_pause is None:
            sink_pause = SinkPause(cfg, 0.0, 0)
        sink_period = sink_pause.period if cfg.pfc.enabled and sink_pause.rate > 0 else 0
        no_congestion = np.zeros((2, e, 8), np.bool_)
        ports = len(st.port_endpoint)
        scratch = (endpoint_ports(st, topo), np.full(ports, NONE, np.int64), np.zeros(ports, np.int64),
                   np.zeros(ports, np.int64), np.zeros(e, np.int64), np.zeros((e, 8), np.int64),
                   np.zeros(len(st.link_src), np.int64))

        parts = Parts(st, self.threads, e, max(prm.max_ports, e))
        st = parts.shared(st)
        cycle = last_progress = 0
        status = _NEXT_BLOCK
        while status in (_NEXT_BLOCK, _NEED_ROOM):
            if status == _NEED_ROOM:
                st = st._replace(frames=grown_frames(st.frames))
            first = cycle // BLOCK * BLOCK
            pause_first = first // pause.period
            paused = pause.periods(pause_first, (first + BLOCK - 1) // pause.period
                                   - pause_first + 1)
            if sink_period:
                congested_first = first // sink_period - 1
                congested = sink_pause.congested(
                    congested_first, (first + BLOCK - 1) // sink_period - congested_first + 1)
            else:
                congested_first, congested = 0, no_congestion
            block = (parts.scalars, parts.frames, parts.free, prm, src, cycle, last_progress,
                     stall_limit, sink.block(first // BLOCK), first, paused, pause_first,
                     pause.period, congested, congested_first, sink_period, *scratch[:-1])
            cycle, last_progress, status = run_parts(parts.count, lambda k: run_block(
                st, parts.own(st, k), k, parts.count, parts.sync, *block, parts.delivered[k],
                scratch[-1]))
        if status == _OVERFLOW:
            g = int(st.scalars[OVERFLOW]) - 1
            raise LinkOverflow(f"cycle {cycle}: a flit reached global port {g} with its skid "
                               f"buffer full (the link's credits were wrong)")

        rec.payload_ok[:] = rec.tail >= 0
        rec.cycles = int(cycle)
        rec.stalled = status == _STALLED
        if rec.stalled and topo.links:
            rec.stuck = waiting_cycle(st, prm, topo)
        rec.counters = counters(st, prm, rec.cycles)
        if cfg.pfc.enabled:
            rec.pfc_frames = st.frames[:st.scalars[FRAMES]].copy()
        self.state = st
        return rec


def waiting_cycle(st, prm, topo: Topology) -> str:
    """One line naming a cycle of channels that hold packets and wait on each other.

    A packet at the head of a queue toward a link output whose credits are
    too few holds the channel it arrived by (the link into its input, its
    class and VC) and waits for the one it wants; a cycle of such waits is a
    deadlock. Empty when there is none (a stall for another reason).
    """
    import networkx as nx
    vcs, npr = prm.vcs, prm.priorities
    waits = nx.DiGraph()
    for g in range(len(st.port_endpoint)):
        held = st.in_link[g]
        if held < 0:
            continue
        for q in np.flatnonzero(st.q_count[g]).tolist():
            pkt = int(st.q_head[g, q])
            ov, p = divmod(q, npr)
            o, v = divmod(ov, vcs)
            router = int(np.searchsorted(st.base, g, side="right") - 1)
            go = int(st.base[router]) + o
            wanted = st.port_link[go]
            if wanted >= 0 and st.credits[go, p, v] < prm.max_packet:
                waits.add_edge((held, int(st.p_pool[pkt])), (int(wanted), p * vcs + v))
    return describe_waits(topo, waits, vcs)


def describe_waits(topo: Topology, waits, vcs: int) -> str:
    """One line naming a cycle of the graph ``waits`` of channels ``(link, pool)``, an
    edge from a channel holding flits to one it waits for; empty when it has none.

    The cycle named is canonical, so that two observers of one deadlock (the model's
    packet waits, the testbench's link credits) name the same one: it passes through the
    lowest channel on any cycle, and follows the shortest way back to it, lowest
    channels first."""
    import networkx as nx
    cyclic = [c for c in nx.strongly_connected_components(waits)
              if len(c) > 1 or any(waits.has_edge(n, n) for n in c)]
    if not cyclic:
        return ""
    start = min(min(c) for c in cyclic)
    component = next(c for c in cyclic if start in c)
    ordered = nx.DiGraph()
    ordered.add_edges_from(sorted(waits.subgraph(component).edges))
    path = nx.shortest_path(ordered, min(ordered.successors(start)), start)
    channels = [start] + path[:-1] if path[0] != start else [start]
    names = [f"router {topo.links[link][0]} port {topo.links[link][1]} class {pool // vcs} "
             f"vc {pool % vcs}" for link, pool in channels]
    return "deadlock: " + " -> ".join(names + names[:1]) + " (each holds flits and waits " \
        "for credits of the next)"


def _check_packets(trace: Trace, endpoints: int, priorities: int) -> None:
    """Refuse packets out of range: they would fail deep inside the kernel, or not at all."""
    if not len(trace):
        return
    for name, values, high in (("src", trace.src, endpoints - 1), ("dst", trace.dst, endpoints - 1),
                               ("prio", trace.prio, priorities - 1)):
        lowest, highest = int(values.min()), int(values.max())
        if lowest < 0 or highest > high:
            bad = lowest if lowest < 0 else highest
            raise ValueError(f"packet {name} = {bad}: must be in 0..{high}")
    if int(trace.length.min()) < 1:
        raise ValueError(f"packet length = {int(trace.length.min())}: must be at least 1")
