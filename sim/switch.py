"""Cycle-exact golden model of :class:`superfabric.hdl.switch.Switch`, compiled.

The model keeps what decides *when* a flit moves (counts, queues of packet
ids, pointers, the read and egress registers) and leaves out what does not
(memory addresses, payload bits). The cycle rules it follows are written
down in ``docs/architecture.md`` (section 5, "Switch timing"); the RTL
implements the same rules, and the scoreboard holds one against the other.

The state is a :class:`SwitchState` of numpy arrays (per input, per (input,
queue), per output, per packet) and the rules are functions compiled with
numba: :func:`switch_cycle` is one cycle (section 5.2 and 5.3) and
:func:`run_block` a whole stretch of a trace-driven run (section 5.5), so
that a run touches Python once per :data:`~.backpressure.BLOCK` cycles.
``NUMBA_DISABLE_JIT=1`` runs the same source as plain Python, for debugging.

:class:`SwitchCore` is the switch alone, stepped one cycle at a time, with
packets registered as they appear, so that devices modelled around it (an
RDMA engine on each port) can create packets in reaction to what it
delivers. :class:`SwitchModel` runs a whole trace.
"""

import time
from collections import namedtuple

import numpy as np
from .kernel import kernel, specialise

from ..config import FabricConfig
from .backpressure import BLOCK, PauseSchedule, SinkReady
from .ecn import ecn_decide
from .islip import highest_class, islip_match
from .pfc import (FRAME_COLUMNS, SinkPause, lossless_classes, paused_cycles, pfc_egress_receive,
                  pfc_ingress_step, quanta_to_cycles, sink_pause_frames)
from .records import Records
from .source import (NONE, source_accept, source_busy, source_next_generation, source_offer,
                     source_pause, source_state)
from .traffic import CE, ECT0, ECT1, NOT_ECT, Trace

__all__ = ["SwitchCore", "SwitchModel", "SwitchState", "SwitchParams", "switch_cycle",
           "run_block", "compile_kernels", "EGRESS_DEPTH", "DEFAULT_STALL_LIMIT"]

#: Egress queue depth; equal to ``superfabric.hdl.switch.EGRESS_DEPTH``.
EGRESS_DEPTH = 4

#: Cycles without any transfer, with packets outstanding, that end a run as stalled.
DEFAULT_STALL_LIMIT = 10_000

# Indices of SwitchState.scalars.
_OUTSTANDING, _PROGRESS, _FRAMES, _PACKETS = range(4)

# What run_block returns as its status.
_DONE, _STALLED, _NEXT_BLOCK, _NEED_ROOM = range(4)

#: The configuration as the kernels read it (all integers; flags are 0 or 1).
SwitchParams = namedtuple("SwitchParams", [
    "ports", "priorities", "islip", "drop", "iterations",
    "ecn_on", "kmin", "kmax", "slope",
    "pfc_on", "xoff", "xon", "quanta", "refresh_period", "data_width"])

#: Everything the switch holds, as arrays; docs/architecture.md section 5.1.
SwitchState = namedtuple("SwitchState", [
    # Per packet (indexed by id, grown by SwitchCore): what the switch reads of it ...
    "p_length", "p_req", "p_prio", "p_ecn_in",
    # ... and what happens to it.
    "p_ecn_out", "p_ecn_backlog", "p_head", "p_tail", "p_out", "p_dropped",
    "p_next",          # the next complete packet in the same queue (linked list)
    "scalars",         # outstanding, progress, frames recorded, packets registered
    # Per input: skid buffer (oldest first), ingress framing, space.
    "skid_n", "skid_pkt", "skid_flit",
    "free", "in_packet", "left", "dropping", "waiting", "stored",
    # Per (input, queue): the complete packets, oldest first; per [input, output]
    # the classes with a complete packet, as a bit mask (VOQs only).
    "q_head", "q_tail", "q_count", "nonempty",
    # Per input: read register and crossbar state.
    "rd_valid", "rd_pkt", "rd_flit", "rd_last", "rd_out", "active", "cur_out",
    # Per output: the egress queue, a ring of EGRESS_DEPTH flits.
    "eg_n", "eg_first", "eg_pkt", "eg_flit", "eg_last",
    # Counters per port.
    "rx", "tx", "drops",
    # iSLIP pointers [port, class] and scratch of one match: requests per
    # [output, class] and grants per [input, class] as bit masks of ports.
    "g_ptr", "a_ptr", "req", "grants", "match_out", "match_prio", "grant_to", "grant_prio",
    # ECN per (output, class) and per output.
    "backlog", "lfsr", "marks",
    # PFC ingress per [input, class] and per input * priorities + class.
    "occupancy", "xoff_state", "refresh", "frames_sent", "peak",
    # PFC egress per output * priorities + class: pause intervals and frames received.
    "pause_start", "pause_until", "paused_before", "frames_received", "lossless",
    # Pause frames sent: rows (cycle, port, class_enable, eight times); this cycle's frames.
    "frames", "tx_enable", "tx_times",
    # Scratch of one cycle, per port.
    "finishing", "arriving", "credit", "out_free", "reserve", "paused_classes"])


def switch_params(cfg: FabricConfig) -> SwitchParams:
    """The kernels' view of ``cfg``."""
    sw, ecn, pfc = cfg.switch, cfg.ecn, cfg.pfc
    return SwitchParams(
        ports=sw.ports, priorities=sw.priorities, islip=int(sw.scheduler == "islip"),
        drop=int(sw.ingress_full == "drop"), iterations=sw.islip_iterations,
        ecn_on=int(ecn.enabled), kmin=ecn.kmin, kmax=ecn.kmax, slope=ecn.slope,
        pfc_on=int(pfc.enabled), xoff=pfc.xoff, xon=pfc.xon, quanta=pfc.pause_quanta,
        refresh_period=pfc.refresh_cycles(sw.data_width), data_width=sw.data_width)


def _packet_arrays(capacity: int) -> dict:
    """Per-packet arrays for ``capacity`` packets, none registered; the dtypes are
    those of :class:`~.traffic.Trace` and :class:`~.records.Records`."""
    rec = Records.empty(capacity)
    return {"p_length": np.zeros(capacity, np.int16), "p_req": np.zeros(capacity, np.int16),
            "p_prio": np.zeros(capacity, np.int8), "p_ecn_in": np.zeros(capacity, np.int8),
            "p_ecn_out": rec.ecn_out, "p_ecn_backlog": rec.ecn_backlog, "p_head": rec.head,
            "p_tail": rec.tail, "p_out": rec.out_port, "p_dropped": rec.dropped,
            "p_next": np.full(capacity, NONE, np.int64)}


def _trace_packets(trace: Trace, rec: Records, priorities: int) -> dict:
    """Per-packet arrays of a whole trace, its ids the trace's rows; the packets'
    fates are written straight into ``rec``."""
    rec.ecn_out[:] = trace.ecn
    return {"p_length": trace.length.copy(),
            "p_req": (trace.dst * priorities + trace.prio).astype(np.int16),
            "p_prio": trace.prio.copy(), "p_ecn_in": trace.ecn.copy(), "p_ecn_out": rec.ecn_out,
            "p_ecn_backlog": rec.ecn_backlog, "p_head": rec.head, "p_tail": rec.tail,
            "p_out": rec.out_port, "p_dropped": rec.dropped,
            "p_next": np.empty(len(trace), np.int64)}


def switch_state(cfg: FabricConfig, packets: dict) -> SwitchState:
    """A switch just after reset, with the per-packet arrays ``packets``."""
    sw = cfg.switch
    n, p = sw.ports, sw.priorities
    queues = n * p if sw.scheduler == "islip" else 1

    def ints(*shape, fill=0):
        return np.full(shape, fill, np.int64)

    def flags(*shape):
        return np.zeros(shape, np.bool_)

    lfsr = np.array([cfg.ecn.port_seed(o) for o in range(n)], np.int64)
    return SwitchState(
        **packets, scalars=ints(4),
        skid_n=ints(n), skid_pkt=ints(n, 2), skid_flit=ints(n, 2),
        free=ints(n, fill=sw.buffer_flits), in_packet=flags(n), left=ints(n), dropping=flags(n),
        waiting=ints(n), stored=ints(n),
        q_head=ints(n, queues, fill=NONE), q_tail=ints(n, queues, fill=NONE),
        q_count=ints(n, queues), nonempty=ints(n, n),
        rd_valid=flags(n), rd_pkt=ints(n), rd_flit=ints(n), rd_last=flags(n), rd_out=ints(n),
        active=flags(n), cur_out=ints(n),
        eg_n=ints(n), eg_first=ints(n), eg_pkt=ints(n, EGRESS_DEPTH),
        eg_flit=ints(n, EGRESS_DEPTH), eg_last=flags(n, EGRESS_DEPTH),
        rx=ints(n), tx=ints(n), drops=ints(n),
        g_ptr=ints(n, p), a_ptr=ints(n, p), req=ints(n, p), grants=ints(n, p),
        match_out=ints(n), match_prio=ints(n), grant_to=ints(n), grant_prio=ints(n),
        backlog=ints(n * p), lfsr=lfsr, marks=ints(n * p),
        occupancy=ints(n, p), xoff_state=flags(n, p), refresh=ints(n, p),
        frames_sent=ints(n * p), peak=ints(n * p),
        pause_start=ints(n * p), pause_until=ints(n * p), paused_before=ints(n * p),
        frames_received=ints(n * p), lossless=lossless_classes(cfg),
        frames=ints(64, FRAME_COLUMNS), tx_enable=ints(n), tx_times=ints(n, 8),
        finishing=flags(n), arriving=flags(n), credit=flags(n), out_free=flags(n),
        reserve=ints(n), paused_classes=ints(n))


@kernel(inline=True)
def switch_busy(st, prm):
    """Anything inside the switch: flits or packets anywhere, or a pause in force upstream."""
    for k in range(prm.ports):
        if (st.rd_valid[k] or st.active[k] or st.skid_n[k] or st.waiting[k] or st.stored[k]
                or st.in_packet[k] or st.eg_n[k]):
            return True
    if prm.pfc_on:
        for k in range(prm.ports):
            for p in range(prm.priorities):
                if st.xoff_state[k, p]:
                    return True
    return False


@kernel(inline=True)
def switch_cycle(st, prm, cycle, offer_pkt, offer_flit, ready, paused, sink_enable, sink_times,
                 delivered):
    """Simulate ``cycle`` (docs/architecture.md, section 5.2) and clock its edge (5.3).

    ``offer_pkt[i]`` is the packet whose flit ``offer_flit[i]`` input ``i``'s
    source offers (NONE for none; a source offers only while the skid buffer
    holds fewer than two flits, and then the flit is taken). ``ready[o]``:
    the sink of output ``o`` is ready; ``paused[q]``: the pause input's bit
    ``q``; ``sink_enable[o]`` and ``sink_times[o]``: the pause frame output
    ``o``'s sink sends (enable 0: none). Writes the flits handed to the
    sinks into ``delivered`` as rows ``(output, packet, flit, last)`` in
    output order and the switch's own pause frames into ``st.tx_enable`` and
    ``st.tx_times``. Returns how many flits and frames there were.
    """
    n, npr = prm.ports, prm.priorities
    outstanding = st.scalars[_OUTSTANDING]

    # 2-3. Read-side and output status.
    for k in range(n):
        st.finishing[k] = st.rd_valid[k] and st.rd_last[k]
        st.arriving[k] = False
    for i in range(n):
        if st.rd_valid[i]:
            st.arriving[st.rd_out[i]] = True
    for o in range(n):
        st.credit[o] = st.eg_n[o] + st.arriving[o] < EGRESS_DEPTH
        st.out_free[o] = st.credit[o]
    for i in range(n):
        if st.active[i] and not st.finishing[i]:
            st.out_free[st.cur_out[i]] = False

    # PFC at ingress: this cycle's frames, from the occupancy at its start.
    frames_now = 0
    if prm.pfc_on:
        frames_now = pfc_ingress_step(st.occupancy, st.xoff_state, st.refresh, st.frames_sent,
                                      st.peak, st.lossless, prm.xoff, prm.xon, prm.quanta,
                                      prm.refresh_period, st.tx_enable, st.tx_times)
        row = st.scalars[_FRAMES]
        for i in range(n):
            if st.tx_enable[i]:
                st.frames[row, 0] = cycle
                st.frames[row, 1] = i
                st.frames[row, 2] = st.tx_enable[i]
                for j in range(8):
                    st.frames[row, 3 + j] = st.tx_times[i, j]
                row += 1
        st.scalars[_FRAMES] = row

    # 4. Requests: the highest class per (input, output) that is not paused,
    # as bit masks of inputs per (output, class).
    for o in range(n):
        blocked = 0
        for p in range(npr):
            q = o * npr + p
            st.req[o, p] = 0
            if paused[q] or (prm.pfc_on and st.pause_until[q] > cycle):
                blocked |= 1 << p
        st.paused_classes[o] = blocked
    any_request = False
    for i in range(n):
        if st.waiting[i] == 0 or (st.active[i] and not st.finishing[i]):
            continue
        if prm.islip:
            for o in range(n):
                if st.out_free[o]:
                    p = highest_class(st.nonempty[i, o] & ~st.paused_classes[o])
                    if p >= 0:
                        st.req[o, p] |= 1 << i
                        any_request = True
        else:
            q = st.p_req[st.q_head[i, 0]]
            o = q // npr
            p = q - o * npr
            if st.out_free[o] and not st.paused_classes[o] >> p & 1:
                st.req[o, p] |= 1 << i
                any_request = True

    # 5. Match.
    if any_request:
        islip_match(st.req, st.g_ptr, st.a_ptr, prm.iterations, st.match_out, st.match_prio,
                    st.grant_to, st.grant_prio, st.grants)
    else:
        for i in range(n):
            st.match_out[i] = -1

    # ECN: decide from the backlog at the start of the cycle, before this
    # cycle's writes and reads change it, in input order (section 5.6).
    if prm.ecn_on:
        for i in range(n):
            o = st.match_out[i]
            if o < 0:
                continue
            q = o * npr + st.match_prio[i]
            pkt = st.q_head[i, q if prm.islip else 0]
            mark, seen = ecn_decide(st.backlog, st.lfsr, prm.kmin, prm.kmax, prm.slope, o, q)
            st.p_ecn_backlog[pkt] = seen
            if mark and (st.p_ecn_in[pkt] == ECT0 or st.p_ecn_in[pkt] == ECT1):
                st.p_ecn_out[pkt] = CE
                st.marks[q] += 1

    # 6. Egress handshakes, then the flits arriving from the read registers.
    handed = 0
    for o in range(n):
        if st.eg_n[o] == 0 or not ready[o]:
            continue
        j = st.eg_first[o]
        pkt, k, last = st.eg_pkt[o, j], st.eg_flit[o, j], st.eg_last[o, j]
        st.eg_first[o] = j + 1 if j + 1 < EGRESS_DEPTH else 0
        st.eg_n[o] -= 1
        delivered[handed, 0] = o
        delivered[handed, 1] = pkt
        delivered[handed, 2] = k
        delivered[handed, 3] = last
        handed += 1
        if k == 0:
            st.p_head[pkt] = cycle
            st.p_out[pkt] = o
        if last:
            st.p_tail[pkt] = cycle
            st.tx[o] += 1
            outstanding -= 1
    progress = handed > 0
    for i in range(n):
        if st.rd_valid[i]:
            o = st.rd_out[i]
            j = st.eg_first[o] + st.eg_n[o]
            if j >= EGRESS_DEPTH:
                j -= EGRESS_DEPTH
            st.eg_pkt[o, j] = st.rd_pkt[i]
            st.eg_flit[o, j] = st.rd_flit[i]
            st.eg_last[o, j] = st.rd_last[i]
            st.eg_n[o] += 1

    # 7. Ingress: skid buffer into the input buffer, source into the skid buffer.
    for i in range(n):
        st.reserve[i] = 0
        popped = False
        if st.skid_n[i]:
            pkt = st.skid_pkt[i, 0]
            keep = last = False
            if not st.in_packet[i]:
                size = st.p_length[pkt]
                fits = st.free[i] >= size
                if fits or prm.drop:
                    popped = True
                    if fits:
                        st.reserve[i] = size
                        st.rx[i] += 1
                    else:
                        st.drops[i] += 1
                        st.p_dropped[pkt] = True
                        outstanding -= 1
                    st.left[i] = size - 1
                    st.in_packet[i] = size != 1
                    st.dropping[i] = not fits
                    keep, last = fits, size == 1
            else:
                popped = True
                keep, last = not st.dropping[i], st.left[i] == 1
                st.in_packet[i] = st.left[i] != 1
                st.left[i] -= 1
            if popped and keep:
                st.stored[i] += 1
                if prm.pfc_on:
                    st.occupancy[i, st.p_prio[pkt]] += 1
                if prm.ecn_on:
                    st.backlog[st.p_req[pkt]] += 1
                if last:
                    # Complete: it joins the tail of its queue.
                    q = st.p_req[pkt] if prm.islip else 0
                    st.p_next[pkt] = NONE
                    if st.q_count[i, q]:
                        st.p_next[st.q_tail[i, q]] = pkt
                    else:
                        st.q_head[i, q] = pkt
                    st.q_tail[i, q] = pkt
                    st.q_count[i, q] += 1
                    st.waiting[i] += 1
                    if prm.islip:
                        o = q // npr
                        st.nonempty[i, o] |= 1 << (q - o * npr)
        pushed = offer_pkt[i] >= 0
        if popped or pushed:
            progress = True
        if popped:
            st.skid_pkt[i, 0] = st.skid_pkt[i, 1]
            st.skid_flit[i, 0] = st.skid_flit[i, 1]
            st.skid_n[i] -= 1
        if pushed:
            st.skid_pkt[i, st.skid_n[i]] = offer_pkt[i]
            st.skid_flit[i, st.skid_n[i]] = offer_flit[i]
            st.skid_n[i] += 1

    # 8. Reads: a new packet for matched inputs, the next flit otherwise.
    for i in range(n):
        o = st.match_out[i]
        read = False
        if o >= 0:
            q = o * npr + st.match_prio[i] if prm.islip else 0
            pkt = st.q_head[i, q]
            st.q_head[i, q] = st.p_next[pkt]
            st.q_count[i, q] -= 1
            st.waiting[i] -= 1
            if prm.islip and st.q_count[i, q] == 0:
                st.nonempty[i, o] &= ~(1 << st.match_prio[i])
            st.rd_valid[i] = True
            st.rd_pkt[i] = pkt
            st.rd_flit[i] = 0
            st.rd_last[i] = st.p_length[pkt] == 1
            st.active[i] = True
            st.cur_out[i] = o
            st.rd_out[i] = o
            read = True
        elif st.active[i] and not st.finishing[i] and st.credit[st.cur_out[i]]:
            k = st.rd_flit[i] + 1
            st.rd_valid[i] = True
            st.rd_flit[i] = k
            st.rd_last[i] = k + 1 == st.p_length[st.rd_pkt[i]]
            st.rd_out[i] = st.cur_out[i]
            read = True
        else:
            st.rd_valid[i] = False
            st.rd_out[i] = st.cur_out[i]
            st.active[i] = st.active[i] and not st.finishing[i]
        if read:
            pkt = st.rd_pkt[i]
            if prm.ecn_on:
                st.backlog[st.p_req[pkt]] -= 1
            if prm.pfc_on:
                st.occupancy[i, st.p_prio[pkt]] -= 1
        st.free[i] += read - st.reserve[i]
        st.stored[i] -= read

    # The sinks' frames take effect at egress from the next cycle; the
    # switch's own frames pause the sources, which is the caller's part.
    if prm.pfc_on:
        for o in range(n):
            if sink_enable[o]:
                pfc_egress_receive(st.pause_start, st.pause_until, st.paused_before,
                                   st.frames_received, npr, prm.data_width, cycle, o,
                                   sink_enable[o], sink_times[o])

    st.scalars[_OUTSTANDING] = outstanding
    st.scalars[_PROGRESS] = progress
    return handed, frames_now


@kernel
def run_block(st, prm, src, cycle, last_progress, stall_limit, ready, ready_first, paused,
              pause_first, pause_period, congested, congested_first, sink_period, scratch_pkt,
              scratch_flit, sink_enable, sink_times, delivered):
    """Run the trace of the sources ``src`` from ``cycle`` (docs/architecture.md 5.5).

    ``ready[c - ready_first]`` is the sinks' ready row of cycle ``c`` and
    ``paused[c // pause_period - pause_first]`` the pause bits; with
    ``sink_period > 0``, ``congested[k - congested_first]`` the sinks'
    congested classes of period ``k``. Runs until every packet is resolved,
    the stall limit is reached, the cycle leaves the rows given, or the
    frame records are full; returns ``(cycle, last_progress, status)``.
    """
    n = prm.ports
    end = ready_first + ready.shape[0]
    while st.scalars[_OUTSTANDING] > 0:
        if cycle >= end:
            return cycle, last_progress, _NEXT_BLOCK
        if not switch_busy(st, prm) and not source_busy(src):
            # Nothing inside the switch and no source mid-packet: jump to the
            # next generation cycle (the pointers cannot move meanwhile), but
            # not over a sink's pause frame.
            nxt = source_next_generation(src)
            if nxt > cycle and sink_period > 0:
                nxt = min(nxt, -(-cycle // sink_period) * sink_period)
            if nxt > cycle:
                last_progress += nxt - cycle
                cycle = nxt
                if cycle >= end:
                    return cycle, last_progress, _NEXT_BLOCK
        if cycle - last_progress >= stall_limit:
            return cycle, last_progress, _STALLED
        if st.scalars[_FRAMES] + n > st.frames.shape[0]:
            return cycle, last_progress, _NEED_ROOM

        for i in range(n):
            scratch_pkt[i] = NONE
            if st.skid_n[i] < 2:
                pkt = source_offer(src, i, cycle)
                if pkt >= 0:
                    scratch_pkt[i] = pkt
                    scratch_flit[i] = src.flit[i]
                    source_accept(src, i)
        for o in range(n):
            sink_enable[o] = 0
        if sink_period > 0 and cycle % sink_period == 0:
            k = cycle // sink_period - congested_first
            sink_pause_frames(congested[k], congested[k - 1], st.lossless, prm.quanta,
                              sink_enable, sink_times)
        switch_cycle(st, prm, cycle, scratch_pkt, scratch_flit, ready[cycle - ready_first],
                     paused[cycle // pause_period - pause_first], sink_enable, sink_times,
                     delivered)
        if prm.pfc_on:
            # The switch's frames pause the sources from the next cycle.
            for i in range(n):
                enable = st.tx_enable[i]
                if enable:
                    for p in range(prm.priorities):
                        if enable >> p & 1:
                            source_pause(src, i, p, cycle + 1,
                                         quanta_to_cycles(st.tx_times[i, p], prm.data_width))
        if st.scalars[_PROGRESS]:
            last_progress = cycle + 1
        cycle += 1
    return cycle, last_progress, _DONE


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
        sw = cfg.switch
        self.cfg = cfg
        self.ports, self.priorities = sw.ports, sw.priorities
        self.params = switch_params(cfg)
        self.state = switch_state(cfg, _packet_arrays(max(1, capacity)))
        self.pause = pause or PauseSchedule(sw.ports, sw.priorities)
        self.pfc_on = cfg.pfc.enabled
        self.sink_pause = sink_pause or (SinkPause(cfg, 0.0, 0) if self.pfc_on else None)
        n = sw.ports
        self._offer_pkt = np.full(n, NONE, np.int64)
        self._offer_flit = np.zeros(n, np.int64)
        self._delivered = np.zeros((n, 4), np.int64)
        self._sink_enable = np.zeros(n, np.int64)
        self._sink_times = np.zeros((n, 8), np.int64)
        self._bits = 1 << np.arange(n, dtype=np.int64)
        self._ready = (-1, None)
        self._paused = (-1, np.zeros(n * sw.priorities, np.bool_))
        self._busy = specialise(switch_busy, self.state, self.params)
        self._cycle = specialise(switch_cycle, self.state, self.params, 0, self._offer_pkt,
                                 self._offer_flit, self._ready_row(0), self._paused[1],
                                 self._sink_enable, self._sink_times, self._delivered)

    # -- packets ------------------------------------------------------------

    @property
    def packets(self) -> int:
        """Packets registered so far."""
        return int(self.state.scalars[_PACKETS])

    def _reserve(self, count: int) -> None:
        """Make room for ``count`` more packets."""
        st = self.state
        need = self.packets + count
        capacity = st.p_length.shape[0]
        if need <= capacity:
            return
        while capacity < need:
            capacity *= 2
        grown = _packet_arrays(capacity)
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
        pkt = int(st.scalars[_PACKETS])
        st.p_length[pkt] = length
        st.p_req[pkt] = dst * self.priorities + prio
        st.p_prio[pkt] = prio
        st.p_ecn_in[pkt] = st.p_ecn_out[pkt] = ecn
        st.scalars[_PACKETS] += 1
        st.scalars[_OUTSTANDING] += 1
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
        st.p_req[ids] = dst * self.priorities + prio
        st.p_prio[ids] = prio
        st.p_ecn_in[ids] = ecn
        st.p_ecn_out[ids] = ecn
        st.scalars[_PACKETS] += k
        st.scalars[_OUTSTANDING] += k
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
        return int(self.state.scalars[_OUTSTANDING])

    @property
    def progress(self) -> bool:
        """The last step moved a flit."""
        return bool(self.state.scalars[_PROGRESS])

    @property
    def pfc_frames(self) -> np.ndarray:
        """The pause frames sent, rows ``(cycle, port, class_enable, *eight times)``."""
        return self.state.frames[:self.state.scalars[_FRAMES]].copy()

    # -- stepping -----------------------------------------------------------

    def busy(self) -> bool:
        """Anything inside the switch: flits or packets anywhere, or a pause in force upstream."""
        return bool(self._busy(self.state, self.params))

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
        return _counters(self.state, self.params, cycle)

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
        """Simulate ``cycle`` and clock its edge (:func:`switch_cycle`).

        ``source`` offers the inputs' flits: ``source.offer(port, cycle)``
        (called only while that input's skid buffer is ready) gives a packet
        id or -1, ``source.flit[port]`` the flit index, and
        ``source.accept(port)`` is called when the flit is taken. Bit ``o``
        of ``ready_mask`` is the sink of output ``o`` ready. Returns the
        flits handed to the sinks in this cycle, ``(out_port, packet,
        flit_index, is_last)`` in output order.
        """
        st = self.state
        if st.scalars[_FRAMES] + self.ports > st.frames.shape[0]:
            st = self.state = st._replace(frames=_grown(st.frames))
        offer_pkt, offer_flit = self._offer_pkt, self._offer_flit
        skid_n = st.skid_n.tolist()
        for i in range(self.ports):
            pkt = source.offer(i, cycle) if skid_n[i] < 2 else NONE
            offer_pkt[i] = pkt
            if pkt >= 0:
                offer_flit[i] = source.flit[i]
                source.accept(i)
        if self.pfc_on:
            self._sink_enable[:] = 0
            for port, enable, times in self.sink_pause.frames(cycle):
                self._sink_enable[port] = enable
                self._sink_times[port] = times
        handed, frames = self._cycle(st, self.params, cycle, offer_pkt, offer_flit,
                                      self._ready_row(ready_mask), self._paused_row(cycle),
                                      self._sink_enable, self._sink_times, self._delivered)
        if frames:
            width = self.cfg.switch.data_width
            for port in np.flatnonzero(st.tx_enable).tolist():
                enable = int(st.tx_enable[port])
                for p in range(self.priorities):
                    if enable >> p & 1:
                        source.pause(port, p, cycle + 1,
                                     int(quanta_to_cycles(st.tx_times[port, p], width)))
        return [tuple(row) for row in self._delivered[:handed].tolist()]


def _grown(frames: np.ndarray) -> np.ndarray:
    """The frame records with twice the room."""
    grown = np.zeros((2 * frames.shape[0], FRAME_COLUMNS), np.int64)
    grown[:frames.shape[0]] = frames
    return grown


def _counters(st: SwitchState, prm: SwitchParams, cycle: int) -> dict:
    """The hardware counters at the start of ``cycle``."""
    counters = {"rx_packets": st.rx.tolist(), "tx_packets": st.tx.tolist(),
                "drops": st.drops.tolist()}
    if prm.ecn_on:
        counters["ecn_marks"] = st.marks.tolist()
    if prm.pfc_on:
        counters.update(pfc_tx_frames=st.frames_sent.tolist(),
                        pfc_rx_frames=st.frames_received.tolist(),
                        pfc_paused_cycles=paused_cycles(st.pause_start, st.pause_until,
                                                        st.paused_before, cycle),
                        pfc_peak_occupancy=st.peak.tolist())
    return counters


class SwitchModel:
    """Run a trace through the switch, cycle by cycle, and record every packet."""

    def __init__(self, cfg: FabricConfig):
        self._cfg = cfg

    def run(self, trace: Trace, *, sink: SinkReady | None = None,
            pause: PauseSchedule | None = None, sink_pause: SinkPause | None = None,
            stall_limit: int = DEFAULT_STALL_LIMIT) -> Records:
        """Simulate until every packet of ``trace`` is delivered or dropped.

        ``pause`` drives the pause mask directly; with ``[pfc] enabled``,
        ``sink_pause`` makes the egress sinks send pause frames instead.
        Returns the per-packet :class:`~.records.Records`. A run in which
        nothing moves for ``stall_limit`` cycles while packets are
        outstanding stops with ``stalled`` set.
        """
        cfg = self._cfg
        sw = cfg.switch
        n = sw.ports
        rec = Records.empty(len(trace))
        core = SwitchCore(cfg, pause=pause, sink_pause=sink_pause)
        if len(trace):
            core._check(trace.dst, trace.prio, trace.length, trace.ecn)
        # Ids are the trace's row indices, which is how the sources name packets.
        core.state = switch_state(cfg, _trace_packets(trace, rec, sw.priorities))
        core.state.scalars[_PACKETS] = core.state.scalars[_OUTSTANDING] = len(trace)
        src = source_state(trace, n, sw.priorities)
        sink = sink or SinkReady(n)
        pause = core.pause
        sink_pause = core.sink_pause if cfg.pfc.enabled and core.sink_pause.rate > 0 else None
        sink_period = sink_pause.period if sink_pause is not None else 0
        no_congestion = np.zeros((2, n, 8), np.bool_)
        scratch = (np.full(n, NONE, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64),
                   np.zeros((n, 8), np.int64), np.zeros((n, 4), np.int64))

        cycle = last_progress = 0
        status = _NEXT_BLOCK
        while status in (_NEXT_BLOCK, _NEED_ROOM):
            if status == _NEED_ROOM:
                core.state = core.state._replace(frames=_grown(core.state.frames))
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
            cycle, last_progress, status = run_block(
                core.state, core.params, src, cycle, last_progress, stall_limit,
                sink.block(first // BLOCK), first, paused, pause_first, pause.period, congested,
                congested_first, sink_period, *scratch)

        rec.payload_ok[:] = rec.tail >= 0
        rec.cycles = int(cycle)
        rec.stalled = status == _STALLED
        rec.counters = core.counters(rec.cycles)
        if cfg.pfc.enabled:
            rec.pfc_frames = core.pfc_frames
        return rec


class _NoSource:
    """A source that never offers anything."""

    flit = ()

    def offer(self, port: int, cycle: int) -> int:
        return NONE


def compile_kernels() -> float:
    """Compile the model's kernels (or load them from numba's cache); returns the seconds.

    The first run in a process pays this; :func:`~superfabric.tools.run.run_point`
    calls it first, so that a run's ``cycles_per_second`` leaves it out and
    ``compile_seconds`` reports it.
    """
    t0 = time.perf_counter()
    cfg = FabricConfig.load(preset="tiny", overrides=["pfc.enabled=true", "ecn.enabled=true"])
    empty = Trace(gen=np.zeros(1, np.int64), src=np.zeros(1, np.int16),
                  dst=np.ones(1, np.int16), prio=np.zeros(1, np.int8),
                  length=np.ones(1, np.int16), tag=np.zeros(1, np.int64), pattern="warm-up",
                  load=1.0, seed=0, cycles=1, packet_lengths="fixed:1")
    SwitchModel(cfg).run(empty, sink_pause=SinkPause(cfg, 0.5, 0))
    core = SwitchCore(cfg)
    core.step(0, _NoSource(), 0)
    core.busy()
    return time.perf_counter() - t0
