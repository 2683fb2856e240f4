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
with the engines' free window slots from the model or from the RTL.
"""

import heapq
from collections import deque

import numpy as np

from ...config import FabricConfig
from ...formats.rdma_wire import payload_words
from .engine import NEVER

__all__ = ["SendQueues"]


class SendQueues:
    """Every endpoint's send queues, for one workload."""

    def __init__(self, cfg: FabricConfig, workload):
        wr = workload.wr
        E, rd = cfg.endpoints, cfg.rdma
        C, W, Q = rd.channels_per_peer, rd.window, rd.per_endpoint(E)
        M = payload_words(cfg.switch.max_packet_flits)
        src, dst, qp, length = (np.asarray(wr[c], np.int64) for c in ("src", "dst", "qp", "length"))
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
