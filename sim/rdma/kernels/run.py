"""The RDMA fabric's run loop, compiled: every endpoint's engine, fault injector and send
queues, the collective engines and the fabric, in one loop.

The cycle is section 10.11's (:meth:`superfabric.sim.rdma.fabric.RdmaFabricModel.run`):
the hosts' offers, the idle skip, the engines' flits and the injectors', the packets
registered with the fabric, the fabric's cycle (the links' deliveries, the routers'
cycle, on several threads if asked, docs/spec/timing.md 5.9, and the credits' return)
and its deliveries, then per endpoint the
injector's and the engine's updates and the records of its WRs, then the collective
engines' cycle, whose WRs join the send queues. Python is touched only when a record array
is full or the run ends (:func:`run_block` returns a status).
"""

from typing import NamedTuple

import numpy as np

from ....config import FabricConfig
from ....formats.packet import ECT0, NOT_ECT
from ....network.topology import Topology
from ...collective.host_memory import Layout
from ...collective.kernels.engine import (collective_completed, collective_done,
                                          collective_next_event, collective_params,
                                          collective_posts, collective_received, collective_state,
                                          collective_step, collective_total_wrs,
                                          stuck as collective_stuck)
from ...collective.schedule import Schedule
from ...fabric.router import (FRAMES, FREE, IN_FLIGHT, OUTSTANDING, OVERFLOW, PACKETS, PROGRESS,
                              fabric_room, packet_arrays, router_busy, router_params,
                              router_state)
from ...fabric.top import (LinkOverflow, Parts, deliver_links, endpoint_ports, routers_cycle,
                           routers_merged, routers_phase)
from ...kernel import kernel
from ...pfc import quanta_to_cycles
from ...skid_buffer import skid_ready
from ...threads import run_parts, usable_threads
from ...source import NONE
from ..host import WR_ROW_FIELDS
from ..records import DELIVERED_COLUMNS, RX_COMPLETION_COLUMNS, RdmaRecords
from ..traffic import key_columns
from .dcqcn import N_CNPS, N_RATES
from .engine import (NEVER, OUT_FIELDS, OUT_RETIRED, OUT_RX_LENGTH, OUT_RX_QP, OUT_RX_SRC,
                     OUT_STATUS, OUT_TAG, OUT_TAKEN, describe_channel, engine_busy_channels,
                     engine_counters, engine_events, engine_events_room, engine_next_event,
                     event_rows_per_cycle,
                     engine_offer, engine_params, engine_state, engine_step)
from .fault_injector import (injector_commit, injector_params, injector_prepare, injector_quiet,
                             injector_state)
from .send_queues import (owed, send_queues_add, send_queues_next_post, send_queues_offer,
                          send_queues_params, send_queues_state, send_queues_taken)

__all__ = ["RunState", "RunParams", "run_block", "run", "check_workload", "packet_class",
           "default_stall_limit", "packet_ids", "DONE", "STALLED", "NEED_ROOM", "OVERFLOWED"]

#: What :func:`run_block` returns as its status (and ``_RUN`` while a cycle is to run).
DONE, STALLED, NEED_ROOM, OVERFLOWED, _RUN = range(5)

# RunState.scalars
(CYCLE, LAST_PROGRESS, OUTSTANDING_WRS, RXC_COUNT, DELIVERED_COUNT, WORDS_COUNT,
 DEVICE_DONE) = range(7)


class RunState(NamedTuple):
    """What the loop keeps between cycles besides the blocks' own states, and its records.

    Per endpoint: ``current``, the fabric id of the packet its injector has under way (-1
    none); ``depth``, the flits inside the fabric bound for it; ``pause_from`` and
    ``pause_until`` per class, the pause the fabric's last frame set on its uplink;
    ``head``, the cycle the packet it is receiving began; ``given``, the completions its
    engine gave; ``offered``, this cycle's WR row (-1 none).
    Per packet id of the fabric: ``words``, its data words as they entered the fabric, and
    ``origin``, its source.
    Per WR row: ``taken``, ``done``, ``status``, ``count``, ``order`` (as
    :class:`~superfabric.sim.rdma.records.RdmaRecords`). Records: ``rx_completions``,
    ``delivered`` and ``delivered_words``, ``depth_rows`` (one row per cycle).
    """

    scalars: np.ndarray
    current: np.ndarray
    depth: np.ndarray
    pause_from: np.ndarray
    pause_until: np.ndarray
    head: np.ndarray
    given: np.ndarray
    offered: np.ndarray
    origin: np.ndarray
    words: np.ndarray
    taken: np.ndarray
    done: np.ndarray
    status: np.ndarray
    count: np.ndarray
    order: np.ndarray
    rx_completions: np.ndarray
    delivered: np.ndarray
    delivered_words: np.ndarray
    depth_rows: np.ndarray


class RunParams(NamedTuple):
    """The loop's constants: endpoints, classes (the RDMA data and control classes),
    the flit width (pause quanta to cycles), the stall limit, whether collective
    engines run, and whether the per-cycle queue depths and the delivered packets are
    recorded (``records="full"`` of :func:`run`)."""

    endpoints: int
    priorities: int
    data_class: int
    control_class: int
    data_width: int
    stall_limit: int
    has_device: bool
    full_records: bool


@kernel(inline=True)
def _offers(rs, sq, sqprm, est, cycle, endpoints):
    """Every host's WR offered in ``cycle`` (:func:`~.send_queues.send_queues_offer`)."""
    for e in range(endpoints):
        rs.offered[e] = send_queues_offer(sq, sqprm, e, cycle, est.nxt, est.ret)


@kernel(inline=True)
def _idle_until(rs, fst, fprm, est, eprm, ist, sq, sqprm, wr, cycle, endpoints):
    """The first cycle anything acts in, when the fabric and the injectors are quiet;
    else ``cycle`` (the idle skip of section 10.11)."""
    if fst.scalars[IN_FLIGHT]:
        return cycle
    for r in range(fprm.routers):
        if router_busy(fst, fprm, r):
            return cycle
    for e in range(endpoints):
        if not injector_quiet(ist, e):
            return cycle
    soonest = NEVER
    for e in range(endpoints):
        t = engine_next_event(est, eprm, e, cycle, wr, rs.offered[e])
        if t < soonest:
            soonest = t
        t = send_queues_next_post(sq, sqprm, e, cycle)
        if t < soonest:
            soonest = t
    return soonest


@kernel(inline=True)
def _cycle_start(rs, prm, fst, fprm, est, eprm, ist, iprm, sq, sqprm, cst, cprm, kind_prio,
                 kind_ecn, endpoint_port, offer_pkt, offer_flit, paused, flits, flit_word, outs,
                 out_word, sent, room_cnps, room_rates, cycle, last_progress):
    """The start of a cycle of :func:`run_block`, before the routers': whether to run it
    (:data:`_RUN`, or why the run ends) and which cycle it is (the idle skip); the hosts'
    offers, the engines' and the injectors' flits offered to the fabric. Returns ``(status,
    cycle)``."""
    E = prm.endpoints
    if rs.scalars[OUTSTANDING_WRS] <= 0 and rs.scalars[DEVICE_DONE]:
        return DONE, cycle
    if _short_of_room(rs, fst, est, E, room_cnps, room_rates):
        return NEED_ROOM, cycle
    _offers(rs, sq, sqprm, est, cycle, E)
    nxt = _idle_until(rs, fst, fprm, est, eprm, ist, sq, sqprm, sq.wr, cycle, E)
    if prm.has_device:
        for a in range(E):
            nxt = min(nxt, collective_next_event(cst, cprm, a, cycle))
    if nxt > cycle:
        cycle = min(nxt, last_progress + prm.stall_limit)
        _offers(rs, sq, sqprm, est, cycle, E)
    if cycle - last_progress >= prm.stall_limit:
        return STALLED, cycle
    if prm.full_records:
        if cycle >= rs.depth_rows.shape[0]:
            return NEED_ROOM, cycle
        for e in range(E):
            rs.depth_rows[cycle, e] = rs.depth[e]
    _paused(rs, prm, paused, cycle)
    _inject(rs, fst, est, eprm, ist, iprm, kind_prio, kind_ecn, endpoint_port, offer_pkt,
            offer_flit, flits, flit_word, outs, out_word, sent)
    fst.scalars[PROGRESS] = 0
    return _RUN, cycle


@kernel
def run_block(rs, prm, fst, own, part, parts, sync, part_scalars, part_frames, part_free,
              part_delivered, part_handed, fprm, est, eprm, ist, iprm, sq, sqprm, cst, cprm,
              memory, kind_prio, kind_ecn, endpoint_port, offer_pkt, offer_flit, offer_vc, ready,
              paused_row, sink_enable, sink_times, arrived, flits, flit_word, outs,
              out_word, sent, paused, rx, rx_word, engine_out, posts, room_cnps, room_rates):
    """Run from ``rs.scalars[CYCLE]`` until every WR has completed and the device is done
    (:data:`DONE`), the stall limit (:data:`STALLED`), a record array without room for
    another cycle (:data:`NEED_ROOM`; grow it and call again) or a flit that found no
    room on a link (:data:`OVERFLOWED`: the credits were wrong).

    As thread ``part`` of ``parts`` (docs/spec/timing.md 5.9): every part steps its own
    contiguous range of the routers, in ``own`` (``fst`` for part 0, for part ``k`` the
    fabric's arrays but for ``part_scalars[k]``, ``part_frames[k]`` and ``part_free[k]``),
    handing its flits for the endpoints to ``part_delivered[k]`` (their count in
    ``part_handed[k, 0]``); part 0 alone does the rest of the cycle, after the routers'
    phase merges the others' counters, frames and freed ids and hands the engines every
    part's flits, in part order, so that the run is the one-thread run; the parts meet at
    the barrier of ``sync`` (none with one part).

    ``kind_prio[length]`` and ``kind_ecn[length]`` are a packet's class and codepoint by
    its flits; ``flits`` and ``outs`` (``[E, 4]``: has, k, dst, length, with their words
    in ``flit_word`` and ``out_word``), ``sent``, ``paused`` (``[E, 2]``: data, control),
    ``rx`` (``[E, 5]``: has, src, k, last, ecn; ``rx_word``), ``engine_out`` and ``posts``
    are scratch. ``room_cnps`` and ``room_rates`` are the rows the engines' events may take
    in one cycle (:func:`~.engine.event_rows_per_cycle`).
    """
    E = prm.endpoints
    first, last = part * fprm.routers // parts, (part + 1) * fprm.routers // parts
    cycle, last_progress = rs.scalars[CYCLE], rs.scalars[LAST_PROGRESS]
    status = _RUN
    frames_before = 0
    while True:
        if part == 0 and status == _RUN:
            status, cycle = _cycle_start(
                rs, prm, fst, fprm, est, eprm, ist, iprm, sq, sqprm, cst, cprm, kind_prio,
                kind_ecn, endpoint_port, offer_pkt, offer_flit, paused, flits, flit_word, outs,
                out_word, sent, room_cnps, room_rates, cycle, last_progress)
            if status == _RUN:
                frames_before = fst.scalars[FRAMES]
                deliver_links(fst, fprm, cycle, offer_pkt, offer_flit, offer_vc, arrived)
        status, cycle = routers_phase(own, part, parts, sync, status, cycle)
        if status != _RUN:
            break
        part_handed[part, 0] = routers_cycle(own, fprm, first, last, cycle, offer_pkt,
                                             offer_flit, offer_vc, ready, paused_row,
                                             sink_enable, sink_times, part_delivered[part])[0]
        routers_merged(fst, fprm, part, parts, sync, part_scalars, part_frames, part_free,
                       arrived)
        if part:
            continue
        if fst.scalars[OVERFLOW]:
            status = OVERFLOWED
            continue
        if fst.scalars[FRAMES] > frames_before:
            _pause_frames(rs, prm, fst, endpoint_port, cycle)
        _deliveries(rs, fst, cycle, parts, part_handed, part_delivered, rx, rx_word,
                    prm.full_records)
        _flits_taken(rs, outs, out_word, sent)
        progress = _endpoints_step(rs, prm, est, eprm, ist, iprm, sq, sqprm, cst, memory, sq.wr,
                                   cycle, flits, flit_word, sent, paused, rx, rx_word,
                                   engine_out)
        if prm.has_device:
            progress |= _device_step(rs, cst, cprm, sq, sqprm, cycle, memory, posts, E)
        if progress:
            last_progress = cycle + 1
        cycle += 1
    if part == 0:
        rs.scalars[CYCLE], rs.scalars[LAST_PROGRESS] = cycle, last_progress
    return status


@kernel(inline=True)
def _short_of_room(rs, fst, est, E, room_cnps, room_rates):
    """Whether a record array lacks room for another cycle of every endpoint. Packet ids
    never run short: :func:`packet_ids` gives one per flit of room and one per injector."""
    return (fst.scalars[FRAMES] + E > fst.frames.shape[0]
            or rs.scalars[RXC_COUNT] + E > rs.rx_completions.shape[0]
            or rs.scalars[DELIVERED_COUNT] + E > rs.delivered.shape[0]
            or rs.scalars[WORDS_COUNT] + E * rs.words.shape[1] > rs.delivered_words.shape[0]
            or est.n_events[N_CNPS] + room_cnps > est.cnps.shape[0]
            or est.n_events[N_RATES] + room_rates > est.rates.shape[0])


@kernel(inline=True)
def _paused(rs, prm, paused, cycle):
    """The classes the fabric's pause frames hold in this cycle, before this cycle's frames
    (which hold from the next): ``paused[e]`` = (data, control)."""
    for e in range(prm.endpoints):
        for j in range(2):
            p = prm.data_class if j == 0 else prm.control_class
            paused[e, j] = rs.pause_from[e, p] <= cycle < rs.pause_until[e, p]


@kernel
def _inject(rs, fst, est, eprm, ist, iprm, kind_prio, kind_ecn, endpoint_port, offer_pkt,
            offer_flit, flits, flit_word, outs, out_word, sent):
    """The engines' flits, the injectors' (which may drop or corrupt them), and the packets
    they start registered with the fabric; a flit is offered where its link input has
    room."""
    for e in range(len(rs.current)):
        has, k, word, dst, length = engine_offer(est, eprm, e)
        flits[e, 0], flits[e, 1], flits[e, 2], flits[e, 3] = has, k, dst, length
        flit_word[e] = word
        o_has, o_k, o_word, o_dst, o_len = injector_prepare(ist, iprm, e, has, k, word, dst,
                                                            length)
        outs[e, 0], outs[e, 1], outs[e, 2], outs[e, 3] = o_has, o_k, o_dst, o_len
        out_word[e] = o_word
        sent[e] = False
        g = endpoint_port[e]
        offer_pkt[g] = NONE
        if not o_has:
            continue
        if rs.current[e] < 0:
            # Ids are recycled (``router_params(recycle=True)``): the fabric frees a
            # packet's id at its last flit's delivery or drop.
            fst.scalars[FREE] -= 1
            pkt = fst.free_ids[fst.scalars[FREE]]
            fst.p_length[pkt] = o_len
            fst.p_src[pkt] = e
            fst.p_dst[pkt] = o_dst
            fst.p_prio[pkt] = kind_prio[o_len]
            fst.p_ecn_in[pkt] = kind_ecn[o_len]
            fst.p_ecn_out[pkt] = kind_ecn[o_len]
            fst.p_ecn_backlog[pkt] = -1
            fst.p_dropped[pkt] = False
            fst.p_hops[pkt] = 0
            fst.p_link_cycle[pkt] = -1
            fst.p_link_ecn[pkt] = 0
            fst.scalars[PACKETS] += 1
            fst.scalars[OUTSTANDING] += 1
            rs.current[e] = pkt
            rs.origin[pkt] = e
        if skid_ready(fst.skid_n, g):
            offer_pkt[g] = rs.current[e]
            offer_flit[g] = o_k
            sent[e] = True


@kernel
def _pause_frames(rs, prm, fst, endpoint_port, cycle):
    """The pause frames the fabric sent on the endpoints' links in this cycle: each class
    it names is held from the next cycle for the frame's quanta."""
    for e in range(prm.endpoints):
        g = endpoint_port[e]
        enable = fst.tx_enable[g]
        for p in range(prm.priorities):
            if enable >> p & 1:
                rs.pause_from[e, p] = cycle + 1
                rs.pause_until[e, p] = cycle + 1 + quanta_to_cycles(fst.tx_times[g, p],
                                                                    prm.data_width)


@kernel
def _deliveries(rs, fst, cycle, parts, handed, delivered, rx, rx_word, full):
    """The fabric's deliveries as each engine receives them (``rx``, ``rx_word``), and
    (``full``) the record of every packet whose last flit arrived: the ``handed[p, 0]``
    rows of ``delivered[p]`` of each part ``p`` in turn, router order."""
    for e in range(len(rx)):
        rx[e, 0] = 0
    for p in range(parts):
        for i in range(handed[p, 0]):
            o, pkt, k, last = (delivered[p, i, 0], delivered[p, i, 1], delivered[p, i, 2],
                               delivered[p, i, 3])
            ecn = fst.p_ecn_out[pkt]
            rx[o, 0], rx[o, 1], rx[o, 2], rx[o, 3], rx[o, 4] = 1, rs.origin[pkt], k, last, ecn
            rx_word[o] = rs.words[pkt, k]
            if k == 0:
                rs.head[o] = cycle
            rs.depth[o] -= 1
            if last and full:
                n = rs.scalars[DELIVERED_COUNT]
                row = rs.delivered[n]
                row[0], row[1], row[2] = rs.head[o], o, rs.origin[pkt]
                row[3], row[4] = k + 1, ecn
                row[5], row[6] = fst.p_link_cycle[pkt], fst.p_link_ecn[pkt]
                rs.scalars[DELIVERED_COUNT] = n + 1
                w = rs.scalars[WORDS_COUNT]
                for j in range(k + 1):
                    rs.delivered_words[w + j] = rs.words[pkt, j]
                rs.scalars[WORDS_COUNT] = w + k + 1


@kernel(inline=True)
def _flits_taken(rs, outs, out_word, sent):
    """The flits the fabric took: their words kept by packet id, the depth toward their
    destinations counted, and an injector's packet done at its last flit."""
    for e in range(len(rs.current)):
        if sent[e]:
            pkt = rs.current[e]
            k = outs[e, 1]
            rs.words[pkt, k] = out_word[e]
            rs.depth[outs[e, 2]] += 1
            if k == outs[e, 3] - 1:
                rs.current[e] = -1


@kernel
def _endpoints_step(rs, prm, est, eprm, ist, iprm, sq, sqprm, cst, memory, wr, cycle, flits,
                    flit_word, sent, paused, rx, rx_word, engine_out):
    """The injectors' and the engines' updates, the records of their WRs and the device
    told of completions and arrivals; returns whether any made progress (a WR taken, a
    completion given, a packet retired: a long message completes only at its last)."""
    progress = False
    for e in range(prm.endpoints):
        tx_taken = injector_commit(ist, iprm, e, sent[e], flits[e, 0], flits[e, 1],
                                   flit_word[e], flits[e, 2], flits[e, 3])
        r = rs.offered[e]
        engine_step(est, eprm, e, cycle, wr, r, tx_taken, rx[e, 0], rx[e, 1], rx[e, 2],
                    rx[e, 3], rx_word[e], rx[e, 4], paused[e, 0], paused[e, 1], memory,
                    engine_out)
        taken, tag = engine_out[OUT_TAKEN], engine_out[OUT_TAG]
        cpl_status, rx_src = engine_out[OUT_STATUS], engine_out[OUT_RX_SRC]
        if taken:
            send_queues_taken(sq, sqprm, e)
            rs.taken[r] = cycle
        if tag >= 0:
            if rs.count[tag] == 0:
                rs.scalars[OUTSTANDING_WRS] -= 1
            rs.count[tag] += 1
            rs.done[tag], rs.status[tag], rs.order[tag] = cycle, cpl_status, rs.given[e]
            rs.given[e] += 1
            if prm.has_device:
                collective_completed(cst, e, cpl_status)
        if rx_src >= 0:
            n = rs.scalars[RXC_COUNT]
            rs.rx_completions[n, 0], rs.rx_completions[n, 1] = cycle, e
            rs.rx_completions[n, 2], rs.rx_completions[n, 3] = rx_src, engine_out[OUT_RX_QP]
            rs.rx_completions[n, 4] = engine_out[OUT_RX_LENGTH]
            rs.scalars[RXC_COUNT] = n + 1
            if prm.has_device:
                collective_received(cst, e)
        if taken or tag >= 0 or engine_out[OUT_RETIRED]:
            progress = True
    return progress


@kernel
def _device_step(rs, cst, cprm, sq, sqprm, cycle, memory, posts, E):
    """The collective engines' cycle: the WRs they post join the send queues. Returns
    whether any acted."""
    progress = False
    for a in range(E):
        acted, n = collective_step(cst, cprm, a, cycle, memory, posts)
        progress |= acted
        for j in range(n):
            send_queues_add(sq, sqprm, posts[j, 0], posts[j, 1], posts[j, 2], posts[j, 3],
                            posts[j, 4], posts[j, 5], posts[j, 6], posts[j, 7], posts[j, 8],
                            posts[j, 9])
            rs.scalars[OUTSTANDING_WRS] += 1
    rs.scalars[DEVICE_DONE] = collective_done(cst, cprm)
    return progress


def packet_class(cfg: FabricConfig, length: int) -> tuple[int, int]:
    """The traffic class and ECN codepoint of an RDMA packet of ``length`` flits (section 10.4):
    one-flit packets (ACKs, NAKs, CNPs) are control, the others data, ECN-capable with DCQCN."""
    rd = cfg.rdma
    if length == 1:
        return rd.control_priority, NOT_ECT
    return rd.data_priority, ECT0 if cfg.dcqcn.enabled else NOT_ECT


def default_stall_limit(cfg: FabricConfig) -> int:
    """Cycles without a WR taken or a completion given that end a run as stalled."""
    return 8 * cfg.rdma.retransmit_timeout + 10_000


def packet_ids(cfg: FabricConfig, topo: Topology) -> int:
    """Packet ids the run needs at once: one under way at every injector, and one per flit
    of room anywhere in the fabric (:func:`~superfabric.sim.fabric.router.fabric_room`)."""
    return topo.endpoints + fabric_room(cfg, topo)


def _no_collective(cfg: FabricConfig):
    """A device with nothing to do, for a run without collective engines: the loop never
    calls it (``has_device`` false), but its kernels are typed by it."""
    E = cfg.endpoints
    schedule = Schedule("allreduce", "none", 0, 0, ((),) * E, (0,) * E)
    return schedule, Layout(0, 0, 0, 0, 0, 0), "int32"


def check_workload(cfg: FabricConfig, workload) -> None:
    """Refuse tables or memories whose shape does not match the configuration, and WRs
    whose tags are not their rows."""
    E, rd = cfg.endpoints, cfg.rdma
    for name, shape in (("keys", (E, rd.keys, key_columns(E))),
                        ("page_table", (E, rd.pages)), ("memory", (E, rd.memory_words))):
        got = np.shape(getattr(workload, name))
        if got != shape:
            raise ValueError(f"workload.{name}: shape {got}, must be {shape}")
    missing = [c for c in ("post", "src") + WR_ROW_FIELDS if c not in workload.wr]
    if missing:
        raise ValueError(f"workload.wr: column {missing[0]!r} missing")
    tags = np.asarray(workload.wr["tag"])
    wrong = np.flatnonzero(tags != np.arange(len(tags)))
    if wrong.size:
        i = int(wrong[0])
        raise ValueError(f"workload.wr['tag'][{i}] = {int(tags[i])}: must be the row index {i} "
                         f"(a completion names its WR by tag)")


def run(cfg: FabricConfig, workload, *, stall_limit: int | None = None, collective=None,
        capture_link: int = -1, summary: bool = False, threads: int = 1):
    """Run ``workload`` (with the collective engines of ``collective``, ``(schedule, layout,
    dtype)``, or none) on the compiled loop; returns ``(RdmaRecords, collective state or
    None)``: :meth:`RdmaFabricModel.run`'s loop. A workload
    that does not fit ``cfg`` is refused (:func:`check_workload`). A ``summary`` keeps
    every record but the two that grow with the cycles and the traffic, the queue depths
    and the delivered packets, left empty (``records=summary`` of a collective,
    :data:`~superfabric.sim.collective.pattern.RECORDS`). ``threads`` step the fabric's
    routers (docs/spec/timing.md 5.9; :func:`~...threads.usable_threads` of them), the
    same run on any number."""
    check_workload(cfg, workload)
    full = not summary
    E, rd, sw = cfg.endpoints, cfg.rdma, cfg.switch
    stall_limit = default_stall_limit(cfg) if stall_limit is None else stall_limit
    topo = Topology.of(cfg)
    fprm = router_params(cfg, topo, recycle=True, capture_link=capture_link)
    ids = packet_ids(cfg, topo)
    fst = router_state(cfg, topo, packet_arrays(ids, topo.max_hops - 1))
    fst.free_ids[:] = np.arange(ids)[::-1]
    fst.scalars[FREE] = ids
    eprm, est = engine_params(cfg), engine_state(cfg, workload)
    iprm, ist = injector_params(cfg), injector_state(cfg)
    wrs = len(workload.wr["post"])
    schedule, layout, dtype = collective or _no_collective(cfg)
    rows = wrs + (collective_total_wrs(cfg, schedule) if collective else 0)
    sqprm, sq = send_queues_params(cfg), send_queues_state(cfg, workload, rows)
    cprm = collective_params(cfg, schedule, layout, dtype)
    cst = collective_state(cfg, schedule, layout, dtype)
    memory = np.array(workload.memory, np.uint64).reshape(E, rd.memory_words)
    kinds = [packet_class(cfg, length) for length in range(1, sw.max_packet_flits + 1)]
    rs = RunState(
        scalars=np.zeros(7, np.int64), current=np.full(E, -1, np.int64),
        depth=np.zeros(E, np.int32), pause_from=np.zeros((E, sw.priorities), np.int64),
        pause_until=np.zeros((E, sw.priorities), np.int64), head=np.zeros(E, np.int64),
        given=np.zeros(E, np.int64), offered=np.full(E, -1, np.int64),
        origin=np.zeros(ids, np.int64), words=np.zeros((ids, sw.max_packet_flits), np.uint64),
        taken=np.full(rows, -1, np.int64), done=np.full(rows, -1, np.int64),
        status=np.full(rows, -1, np.int64), count=np.zeros(rows, np.int64),
        order=np.full(rows, -1, np.int64),
        rx_completions=np.zeros((1024, len(RX_COMPLETION_COLUMNS)), np.int64),
        delivered=np.zeros((1024, len(DELIVERED_COLUMNS)), np.int64),
        delivered_words=np.zeros(1024 * sw.max_packet_flits, np.uint64),
        depth_rows=np.zeros((1024, E), np.int32))
    rs.scalars[OUTSTANDING_WRS] = wrs
    rs.scalars[DEVICE_DONE] = collective is None or bool(collective_done(cst, cprm))
    prm = RunParams(E, sw.priorities, rd.data_priority, rd.control_priority, sw.data_width,
                    stall_limit, collective is not None, full)
    ports = len(fst.port_endpoint)
    scratch = (
        np.array([0] + [k[0] for k in kinds], np.int64),          # kind_prio
        np.array([0] + [k[1] for k in kinds], np.int64),          # kind_ecn
        endpoint_ports(fst, topo), np.full(ports, NONE, np.int64),
        np.zeros(ports, np.int64), np.zeros(ports, np.int64),      # offer_flit, offer_vc
        np.ones(E, np.bool_), np.zeros(E * sw.priorities, np.bool_),  # ready, paused_row
        np.zeros(E, np.int64), np.zeros((E, 8), np.int64),         # sink_enable, sink_times
        np.zeros(len(fst.link_src), np.int64),                     # arrived
        np.zeros((E, 4), np.int64), np.zeros(E, np.uint64),        # flits, flit_word
        np.zeros((E, 4), np.int64), np.zeros(E, np.uint64),        # outs, out_word
        np.zeros(E, np.bool_), np.zeros((E, 2), np.bool_),         # sent, paused
        np.zeros((E, 5), np.int64), np.zeros(E, np.uint64),        # rx, rx_word
        np.zeros(OUT_FIELDS, np.int64), collective_posts(cprm))    # engine_out, posts
    room = event_rows_per_cycle(cfg)
    parts = Parts(fst, usable_threads(threads, topo.routers), E, E)
    fst = parts.shared(fst)
    while True:
        status = run_parts(parts.count, lambda k: run_block(
            rs, prm, fst, parts.own(fst, k), k, parts.count, parts.sync, parts.scalars,
            parts.frames, parts.free, parts.delivered, parts.handed, fprm, est, eprm, ist, iprm,
            sq, sqprm, cst, cprm, memory, *scratch, room["cnps"], room["rates"]))
        if status != NEED_ROOM:
            break
        before = _room(rs, fst, est)
        rs, fst = _grown(rs, fst, E, sw.max_packet_flits, full)
        est = engine_events_room(est, cfg)
        if _room(rs, fst, est) == before:
            raise RuntimeError(f"cycle {int(rs.scalars[CYCLE])}: the run loop asked for room "
                               f"that no record array lacks")
    if status == OVERFLOWED:
        raise LinkOverflow(f"cycle {int(rs.scalars[CYCLE])}: a flit reached a link input with "
                           f"its skid buffer full (the link's credits were wrong)")
    rec = _records(cfg, rs, fst, est, memory, status == STALLED, full)
    if status == STALLED:
        rec.stuck = _stuck(est, eprm, sq, rs) or (collective_stuck(cst) if collective else "")
    return rec, (cst if collective else None)


def _doubled(array: np.ndarray, used: int, need: int) -> np.ndarray:
    """``array`` with at least ``need`` rows, its first ``used`` rows kept (rows past its
    end are zero: cycles the idle skip left out)."""
    if need <= array.shape[0]:
        return array
    grown = np.zeros((max(2 * array.shape[0], need),) + array.shape[1:], array.dtype)
    used = min(used, array.shape[0])
    grown[:used] = array[:used]
    return grown


def _grown(rs: RunState, fst, E: int, max_flits: int, full: bool):
    """The record arrays with room for another cycle of every endpoint (the queue depths'
    only when ``full``: a summary never writes them)."""
    cycle = int(rs.scalars[CYCLE]) if full else 0
    rs = rs._replace(
        rx_completions=_doubled(rs.rx_completions, int(rs.scalars[RXC_COUNT]),
                                int(rs.scalars[RXC_COUNT]) + E),
        delivered=_doubled(rs.delivered, int(rs.scalars[DELIVERED_COUNT]),
                           int(rs.scalars[DELIVERED_COUNT]) + E),
        delivered_words=_doubled(rs.delivered_words, int(rs.scalars[WORDS_COUNT]),
                                 int(rs.scalars[WORDS_COUNT]) + E * max_flits),
        depth_rows=_doubled(rs.depth_rows, cycle, cycle + 1))
    frames = int(fst.scalars[FRAMES])
    return rs, fst._replace(frames=_doubled(fst.frames, frames, frames + E))


def _room(rs: RunState, fst, est) -> tuple:
    """The sizes of the record arrays the loop may ask to grow."""
    return (len(rs.rx_completions), len(rs.delivered), len(rs.delivered_words),
            len(rs.depth_rows), len(fst.frames), len(est.cnps), len(est.rates))


def _records(cfg: FabricConfig, rs: RunState, fst, est, memory, stalled: bool,
             full: bool) -> RdmaRecords:
    """The run's :class:`RdmaRecords` (without the queue depths and the delivered packets
    unless ``full``)."""
    E, rows, cycle = cfg.endpoints, len(rs.taken), int(rs.scalars[CYCLE])
    rec = RdmaRecords.empty(rows, E, cfg.rdma.memory_words)
    rec.taken[:], rec.done[:], rec.status[:] = rs.taken, rs.done, rs.status
    rec.completions[:], rec.order[:] = rs.count, rs.order
    rec.rx_completions = rs.rx_completions[:rs.scalars[RXC_COUNT]].copy()
    rec.memory = memory
    rec.counters = engine_counters(est)
    rec.cnps, rec.rates = engine_events(est)
    rec.pfc_frames = fst.frames[:fst.scalars[FRAMES]].copy()
    if full:
        rec.queue_depth = rs.depth_rows[:cycle].copy()
    rec.delivered = rs.delivered[:rs.scalars[DELIVERED_COUNT]].copy()
    rec.delivered_words = rs.delivered_words[:rs.scalars[WORDS_COUNT]].copy()
    if cfg.fabric.is_fabric:
        rec.link_flits = fst.link_flits.astype(np.int64)
    rec.cycles, rec.stalled = cycle, stalled
    return rec


def _stuck(est, eprm, sq, rs: RunState) -> str:
    """One line on the first endpoint that still owes completions: its first channel holding
    packets, else the row its WR stream is blocked at."""
    rows = len(rs.count)
    source = sq.source[:rows]
    for e in range(len(rs.given)):
        owing = int(np.count_nonzero((source == e) & (rs.count == 0)))
        if not owing:
            continue
        busy = engine_busy_channels(est, e)
        if busy:
            where = describe_channel(est, eprm, e, busy[0])
        else:
            where = f"endpoint {e}: WR stream blocked at row {owed(sq, e)}"
        return f"{where}; {owing} WR(s) of endpoint {e} without completion"
    return ""
