"""The hosts' send queues: which work request each endpoint offers on its WR stream.

A host keeps one send queue per QP, in row (posting) order. When its WR
stream offers nothing, it offers the oldest WR at the head of a send queue
that is posted and fits: its channel has window room for all its packets
(at most the window), or it names no channel (a bad request, which the
engine completes with an error once drained). An offered WR stays offered
until the engine takes it. So a channel whose window is full, say one that
DCQCN holds to a low rate, does not hold back the WRs of other channels,
and per QP the WRs are taken in posting order (``docs/architecture.md``
section 10.11).

The golden model and the testbench both offer through :class:`SendQueues`,
with the engines' free window slots from the model or from the RTL. A
:class:`HostDevice` (the collective engine, section 15.8) posts further WRs
while a model runs, in reaction to the completions it hears, through
:meth:`SendQueues.add`.
"""

import heapq
from collections import deque

import numpy as np

from ...config import FabricConfig
from ...formats.rdma_wire import payload_words
from .engine import NEVER

__all__ = ["SendQueues", "HostDevice", "WR_ROW_FIELDS"]

#: The WR columns in the order the engine takes a WR (after the row index).
WR_ROW_FIELDS = ("qp", "dst", "opcode", "lkey", "laddr", "rkey", "raddr", "length", "tag")


class SendQueues:
    """Every endpoint's send queues, for one workload."""

    def __init__(self, cfg: FabricConfig, workload):
        wr = workload.wr
        E, rd = cfg.endpoints, cfg.rdma
        C, W, Q = rd.channels_per_peer, rd.window, rd.per_endpoint(E)
        M = payload_words(cfg.switch.max_packet_flits)
        self._E, self._C, self._W, self._Q, self._M = E, C, W, Q, M
        src, dst, qp, length = (np.asarray(wr[c], np.int64) for c in ("src", "dst", "qp", "length"))
        #: Per WR: the row as the engine takes it, ``(row, qp, dst, ..., tag)``.
        self.rows = [(i, *fields) for i, fields in
                     enumerate(zip(*(np.asarray(wr[c]).tolist() for c in WR_ROW_FIELDS)))]
        self.post = np.asarray(wr["post"]).tolist()
        #: Per WR: the endpoint that posts it.
        self.source = src.tolist()
        bad = (dst == src) | (dst < 0) | (dst >= E) | (length == 0) | (qp >= Q)
        #: Per WR: its channel, -1 when it names none, and the window slots it needs.
        self.channel = np.where(bad, -1, dst * C + qp % C).tolist()
        self.slots = np.minimum(-(-length // M), W).tolist()
        self._queues = [dict() for _ in range(E)]
        for i, (e, q) in enumerate(zip(src.tolist(), qp.tolist())):
            self._queues[e].setdefault(q, deque()).append(i)
        # Per endpoint, the heads of its send queues as (row, qp), oldest first.
        self._heads = [[(rows[0], q) for q, rows in queues.items()] for queues in self._queues]
        for heads in self._heads:
            heapq.heapify(heads)
        #: Per endpoint, the row of the WR offered, -1 for none.
        self.offered = [-1] * E
        self._offered_qp = [0] * E

    def add(self, post: int, src: int, qp: int, dst: int, opcode: int, lkey: int, laddr: int,
            rkey: int, raddr: int, length: int) -> int:
        """Post a WR from ``post`` on; returns its row, which is also its tag. It joins the
        tail of its QP's send queue, so per QP the WRs are still taken in posting order."""
        row = len(self.rows)
        self.rows.append((row, qp, dst, opcode, lkey, laddr, rkey, raddr, length, row))
        self.post.append(post)
        self.source.append(src)
        bad = dst == src or not 0 <= dst < self._E or length == 0 or qp >= self._Q
        self.channel.append(-1 if bad else dst * self._C + qp % self._C)
        self.slots.append(min(-(-length // self._M), self._W))
        rows = self._queues[src].setdefault(qp, deque())
        rows.append(row)
        if len(rows) == 1:           # the queue was empty: its new head joins the heads
            heapq.heappush(self._heads[src], (row, qp))
        return row

    def offer(self, e: int, cycle: int, free) -> int:
        """The row endpoint ``e`` offers in ``cycle``, -1 for none; ``free(ch)`` gives a
        channel's free window slots at the start of the cycle."""
        if self.offered[e] >= 0:
            return self.offered[e]
        heads, post, channel, slots = self._heads[e], self.post, self.channel, self.slots
        waiting = []
        while heads and post[heads[0][0]] <= cycle:
            head = heapq.heappop(heads)
            ch = channel[head[0]]
            if ch < 0 or free(ch) >= slots[head[0]]:
                self.offered[e], self._offered_qp[e] = head
                break
            waiting.append(head)
        for head in waiting:
            heapq.heappush(heads, head)
        return self.offered[e]

    def taken(self, e: int) -> None:
        """The engine took endpoint ``e``'s offered WR; its send queue moves on."""
        self.offered[e] = -1
        q = self._offered_qp[e]
        rows = self._queues[e][q]
        rows.popleft()
        if rows:
            heapq.heappush(self._heads[e], (rows[0], q))

    def next_post(self, e: int, cycle: int) -> float:
        """The first cycle after ``cycle`` in which a WR of ``e`` is posted, or :data:`NEVER`
        (posted WRs that do not fit wait for the engine, whose events wake them)."""
        later = [self.post[row] for row, _ in self._heads[e] if self.post[row] > cycle]
        return min(later, default=NEVER)

    def owed(self, e: int) -> int:
        """The row of ``e``'s oldest WR not yet taken, -1 for none."""
        rows = [row for row, _ in self._heads[e]]
        if self.offered[e] >= 0:
            rows.append(self.offered[e])
        return min(rows, default=-1)


class HostDevice:
    """A device at the hosts that posts WRs as a run goes, in reaction to what the engines
    report: the collective engine (``superfabric.sim.collective.engine``). The model
    (:meth:`~superfabric.sim.rdma.fabric.RdmaFabricModel.run`) calls, in this order:
    :meth:`attach` once before cycle 0; per simulated cycle, after the engines' updates,
    :meth:`completed` and :meth:`received` for each completion and receive completion an
    engine gave in it, then :meth:`step`; it skips no cycle before :meth:`next_event` and
    runs until every WR has completed and :attr:`done` holds.
    """

    #: The device has nothing left to do (it will post no further WR).
    done: bool = True

    def attach(self, host: SendQueues, memories: list) -> None:
        """Before cycle 0: the send queues it posts to (:meth:`SendQueues.add`) and the host
        memories (one list of words per endpoint, which the engines read and write)."""

    def completed(self, e: int, cycle: int, completion) -> None:
        """Endpoint ``e``'s engine gave ``completion``, ``(qp, tag, status)``, in ``cycle``."""

    def received(self, e: int, cycle: int, rx_completion) -> None:
        """Endpoint ``e``'s engine gave a receive completion ``(src, qp, length)`` in
        ``cycle`` (a SEND's last word is in its memory)."""

    def step(self, cycle: int) -> bool:
        """The device's own work at the end of ``cycle`` (WRs it posts are offered from
        ``cycle + 1`` on); whether it made progress (for the stall limit)."""
        return False

    def next_event(self, cycle: int) -> float:
        """``cycle`` if the device acts in it, else the first cycle it may (``NEVER``: only
        an engine's report wakes it)."""
        return NEVER

    def stuck(self) -> str:
        """One line on why the device is not done, for a stalled run."""
        return ""
