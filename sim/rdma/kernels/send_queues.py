"""The hosts' send queues (section 10.11), compiled: which work request each endpoint
offers on its WR stream.

A host keeps one send queue per QP, in row (posting) order. When its WR stream offers
nothing, it offers the oldest WR at the head of a send queue that is posted and fits:
its channel has window room for all its packets (at most the window), or it names no
channel (a bad request, which the engine completes with an error once drained). An
offered WR stays offered until the engine takes it. So a channel whose window is full,
say one that DCQCN holds to a low rate, does not hold back the WRs of other channels,
and per QP the WRs are taken in posting order. The model's run loop and the testbench
(with the RTL's free window slots, :func:`window_state`) both offer through these
kernels; the collective engines post further WRs as a run goes (:func:`send_queues_add`).

Every endpoint's queues live in one :class:`SendQueueState` of arrays, with the
WR table the engines read (``wr``, one row per WR), so the compiled run loop offers,
takes and posts WRs without Python objects.

A QP's send queue is a list linked through its rows (``next_row``); its head
row holds its tail (``last``). Each endpoint's heads are a list linked through the
rows in row order (``h_first``, ``h_next``, ``h_prev``, ``h_last``), oldest first, and
an offer walks it: it stops at the first head not yet posted, so an endpoint with no
head due costs one comparison. Rows only grow, so a WR posted during the run
(:func:`send_queues_add`) joins the heads at their end.

The idle skip asks each endpoint for its next post (:func:`send_queues_next_post`).
Workloads list each endpoint's WRs by post (``generate_rdma`` sorts them so) and a
collective engine posts for the next cycle, so an endpoint's posts usually rise with its rows
(``in_order``, kept while WRs are added): its heads' posts rise too, and the walk stops
at the first head posted later.

A QP in ``0 .. Q - 1`` finds its queue's head in ``q_head``. A QP out of range (a
bad WR, which the engine completes with an error) has a queue too: its head is the
endpoint's head or offered row on that QP, found by walking the heads, which only such
a WR's post does.
"""

from collections import namedtuple

import numpy as np

from ....config import FabricConfig
from ....formats.rdma_wire import PSN_MOD, payload_words
from ...kernel import kernel
from ..host import WR_ROW_FIELDS
from .channels import NEVER

__all__ = ["NEVER", "ROWS", "SendQueueParams", "SendQueueState", "send_queues_params",
           "send_queues_state", "send_queues_offer", "send_queues_taken", "send_queues_add",
           "send_queues_next_post", "window_state", "heads", "owed"]

#: Index of SendQueueState.scalars: the rows of ``wr`` in use.
ROWS = 0

#: The configuration as the kernels read it: endpoints, channels per peer, window,
#: QPs per endpoint, payload words of a packet, the PSN mask.
SendQueueParams = namedtuple("SendQueueParams", ["endpoints", "channels", "window", "qps",
                                                 "payload", "psn_mask"])

#: Per WR row (``[capacity]``): the table the engines read, ``wr[r] = (row, qp, dst,
#: opcode, lkey, laddr, rkey, raddr, length, tag)``; ``post``; ``source``, the endpoint
#: that posts it; ``channel``, its channel number (-1: it names none), and ``slots``, the
#: window slots it needs; ``next_row``, the next row of its send
#: queue (-1: the tail); ``last``, at a queue's head row, the queue's tail; ``h_next``,
#: ``h_prev``, at a head, the next and previous heads of its endpoint (-1: none). Per
#: endpoint: ``h_first``, ``h_last``, its oldest and newest heads; ``offered`` (-1: none);
#: ``in_order``, 1 while its rows' posts never fall, and ``newest_post``, its last row's;
#: ``q_head`` ``[E, Q]``, per QP its queue's head row (-1: empty). ``scalars[ROWS]``, the
#: rows in use.
SendQueueState = namedtuple("SendQueueState", [
    "wr", "post", "source", "channel", "slots", "next_row", "last", "h_next", "h_prev",
    "h_first", "h_last", "offered", "in_order", "newest_post", "q_head", "scalars"])


def send_queues_params(cfg: FabricConfig) -> SendQueueParams:
    """The kernels' view of ``cfg``."""
    E, rd = cfg.endpoints, cfg.rdma
    return SendQueueParams(endpoints=E, channels=rd.channels_per_peer, window=rd.window,
                           qps=rd.per_endpoint(E),
                           payload=payload_words(cfg.switch.max_packet_flits),
                           psn_mask=PSN_MOD - 1)


def send_queues_state(cfg: FabricConfig, workload, capacity: int) -> SendQueueState:
    """The send queues of ``workload``'s WRs, with room for ``capacity`` rows in all (the
    workload's and every WR the collective engines will post)."""
    prm = send_queues_params(cfg)
    E, C, W, Q, M = prm.endpoints, prm.channels, prm.window, prm.qps, prm.payload
    wr = workload.wr
    n = len(wr["post"])
    if capacity < n:
        raise ValueError(f"capacity = {capacity}: must hold the workload's {n} WRs")
    src, dst, qp, length = (np.asarray(wr[c], np.int64) for c in ("src", "dst", "qp", "length"))

    def ints(*shape):
        return np.full(shape, -1, np.int64)

    st = SendQueueState(
        wr=ints(capacity, 1 + len(WR_ROW_FIELDS)), post=ints(capacity), source=ints(capacity),
        channel=ints(capacity), slots=ints(capacity), next_row=ints(capacity),
        last=ints(capacity), h_next=ints(capacity), h_prev=ints(capacity), h_first=ints(E),
        h_last=ints(E), offered=ints(E), in_order=np.ones(E, np.int64),
        newest_post=np.full(E, -NEVER, np.int64), q_head=ints(E, Q),
        scalars=np.zeros(1, np.int64))
    st.wr[:n, 0] = np.arange(n)
    for c, name in enumerate(WR_ROW_FIELDS, 1):
        st.wr[:n, c] = np.asarray(wr[name], np.int64)
    st.post[:n] = np.asarray(wr["post"], np.int64)
    st.source[:n] = src
    bad = (dst == src) | (dst < 0) | (dst >= E) | (length == 0) | (qp >= Q)
    st.channel[:n] = np.where(bad, -1, dst * C + qp % C)
    st.slots[:n] = np.minimum(-(-length // M), W)
    # Each queue's rows in row order: the first is its head, which holds the last.
    heads = [dict() for _ in range(E)]
    for i, (e, q) in enumerate(zip(src.tolist(), qp.tolist())):
        head = heads[e].setdefault(q, i)
        if head == i:
            st.last[i] = i
        else:
            st.next_row[st.last[head]] = i
            st.last[head] = i
    order = np.argsort(src, kind="stable")
    by_src, posts = src[order], st.post[order]
    same = by_src[1:] == by_src[:-1]
    st.in_order[by_src[1:][same & (posts[1:] < posts[:-1])]] = 0
    newest = np.flatnonzero(np.append(~same, True)) if n else []
    st.newest_post[by_src[newest]] = posts[newest]
    for e in range(E):
        rows = sorted(heads[e].values())
        for a, b in zip(rows, rows[1:]):
            st.h_next[a], st.h_prev[b] = b, a
        if rows:
            st.h_first[e], st.h_last[e] = rows[0], rows[-1]
        for q, head in heads[e].items():
            if 0 <= q < Q:
                st.q_head[e, q] = head
    st.scalars[ROWS] = n
    return st


@kernel(inline=True)
def _link_head(sq, e, row):
    """``row`` joins ``e``'s heads, which stay in row order (searched from the newest:
    a WR posted during the run is the newest row)."""
    before = sq.h_last[e]
    while before >= 0 and before > row:
        before = sq.h_prev[before]
    after = sq.h_first[e] if before < 0 else sq.h_next[before]
    sq.h_prev[row], sq.h_next[row] = before, after
    if before < 0:
        sq.h_first[e] = row
    else:
        sq.h_next[before] = row
    if after < 0:
        sq.h_last[e] = row
    else:
        sq.h_prev[after] = row


@kernel(inline=True)
def _unlink_head(sq, e, row):
    """``row`` leaves ``e``'s heads."""
    before, after = sq.h_prev[row], sq.h_next[row]
    if before < 0:
        sq.h_first[e] = after
    else:
        sq.h_next[before] = after
    if after < 0:
        sq.h_last[e] = before
    else:
        sq.h_prev[after] = before


@kernel(inline=True)
def _free(prm, e, ch, nxt, ret):
    """Window slots channel number ``ch`` of engine ``e`` has free, from the engine state's
    ``nxt`` and ``ret`` (as :func:`~.engine.engine_free_slots`)."""
    C = prm.channels
    peer = ch // C
    if peer == e:
        return prm.window
    i = (peer - (peer > e)) * C + ch % C
    return prm.window - ((nxt[e, i] - ret[e, i]) & prm.psn_mask)


@kernel(inline=True)
def send_queues_offer(sq, prm, e, cycle, nxt, ret):
    """The row endpoint ``e`` offers in ``cycle``, -1 for none, the free window slots from
    the engine state's ``nxt``, ``ret`` (``[E, (E - 1) * C]``) at the start of the
    cycle."""
    if sq.offered[e] >= 0:
        return sq.offered[e]
    row = sq.h_first[e]
    while row >= 0 and sq.post[row] <= cycle:
        ch = sq.channel[row]
        if ch < 0 or _free(prm, e, ch, nxt, ret) >= sq.slots[row]:
            sq.offered[e] = row
            _unlink_head(sq, e, row)
            break
        row = sq.h_next[row]
    return sq.offered[e]


@kernel(inline=True)
def send_queues_taken(sq, prm, e):
    """The engine took endpoint ``e``'s offered WR; its send queue moves on."""
    row = sq.offered[e]
    sq.offered[e] = -1
    head = sq.next_row[row]
    if head >= 0:
        sq.last[head] = sq.last[row]
        _link_head(sq, e, head)
    qp = sq.wr[row, 1]
    if 0 <= qp < prm.qps:
        sq.q_head[e, qp] = head


@kernel
def send_queues_add(sq, prm, post, src, qp, dst, opcode, lkey, laddr, rkey, raddr, length):
    """Post a WR from ``post`` on; returns its row, which is also its tag. It joins the
    tail of its QP's send queue, so per QP the WRs are still taken in posting order."""
    row = sq.scalars[ROWS]
    if row >= sq.post.shape[0]:
        raise IndexError("send_queues_add: the WR table is full (capacity too small)")
    Q = prm.qps
    if 0 <= qp < Q:
        head = sq.q_head[src, qp]
    else:
        # The head of the QP's queue is offered, or one of the endpoint's heads, or none.
        head = sq.offered[src]
        if head < 0 or sq.wr[head, 1] != qp:
            head = sq.h_first[src]
            while head >= 0 and sq.wr[head, 1] != qp:
                head = sq.h_next[head]
    sq.scalars[ROWS] = row + 1
    sq.wr[row, 0], sq.wr[row, 1], sq.wr[row, 2], sq.wr[row, 3] = row, qp, dst, opcode
    sq.wr[row, 4], sq.wr[row, 5], sq.wr[row, 6], sq.wr[row, 7] = lkey, laddr, rkey, raddr
    sq.wr[row, 8], sq.wr[row, 9] = length, row
    sq.post[row] = post
    if post < sq.newest_post[src]:
        sq.in_order[src] = 0
    sq.newest_post[src] = post
    sq.source[row] = src
    bad = dst == src or not 0 <= dst < prm.endpoints or length == 0 or qp >= Q
    sq.channel[row] = -1 if bad else dst * prm.channels + qp % prm.channels
    sq.slots[row] = min(-(-length // prm.payload), prm.window)
    sq.next_row[row] = -1
    if head < 0:                 # the queue was empty: its new head joins the heads
        sq.last[row] = row
        _link_head(sq, src, row)
        if 0 <= qp < Q:
            sq.q_head[src, qp] = row
    else:
        sq.next_row[sq.last[head]] = row
        sq.last[head] = row
    return row


@kernel(inline=True)
def send_queues_next_post(sq, prm, e, cycle):
    """The first cycle after ``cycle`` in which a WR of ``e`` is posted, or :data:`NEVER`
    (posted WRs that do not fit wait for the engine, whose events wake them)."""
    first = NEVER
    row = sq.h_first[e]
    while row >= 0:
        p = sq.post[row]
        if cycle < p < first:
            first = p
            if sq.in_order[e]:
                break
        row = sq.h_next[row]
    return first


def window_state(prm: SendQueueParams, free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``nxt`` and ``ret`` (``[E, (E - 1) * C]``, as the engine state's) under which
    channel number ``ch`` of endpoint ``e`` has ``free[e, ch]`` window slots free (``free``
    ``[E, E * C]``; the channels toward ``e`` itself are not read), for a caller of
    :func:`send_queues_offer` that knows the free slots but not the engines' PSNs: the
    testbench, which reads them from the RTL."""
    E, C = prm.endpoints, prm.channels
    i = np.arange((E - 1) * C)
    rank = i // C
    peer = rank[None, :] + (rank[None, :] >= np.arange(E)[:, None])
    ch = peer * C + i % C
    nxt = prm.window - np.take_along_axis(np.asarray(free, np.int64), ch, axis=1)
    return np.ascontiguousarray(nxt), np.zeros_like(nxt)


def heads(sq: SendQueueState, e: int) -> list:
    """``e``'s heads' rows, oldest first."""
    rows, row = [], int(sq.h_first[e])
    while row >= 0:
        rows.append(row)
        row = int(sq.h_next[row])
    return rows


def owed(sq: SendQueueState, e: int) -> int:
    """The row of ``e``'s oldest WR not yet taken, -1 for none."""
    rows = [int(r) for r in (sq.h_first[e], sq.offered[e]) if r >= 0]
    return min(rows, default=-1)
