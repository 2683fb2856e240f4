"""Golden model of an output's egress queue (docs/architecture.md 4.7), compiled.

Mirrors ``superfabric.hdl.egress_queue.EgressQueue``: a FIFO of
``EGRESS_DEPTH`` flits whose ``o`` shows the oldest flit while any is held
(a flit written at an edge is on ``o`` from the next cycle) and which the
crossbar writes only under the credit rule :func:`egress_credit`, so it
never overflows. The queues of many outputs are rings over arrays (queue
``g`` holds ``count[g]`` flits from slot ``first[g]``); the rules return the
slot a flit is read from or written to, and the caller keeps the flits'
fields in arrays of its own indexed by that slot. The router's cycle kernel
calls them for its outputs; :class:`EgressQueueModel` holds one queue for a
caller outside the kernel (the block tests).
"""

import numpy as np

from ..config import EGRESS_DEPTH
from .kernel import kernel

__all__ = ["EGRESS_DEPTH", "egress_credit", "egress_pop", "egress_push", "EgressQueueModel"]


@kernel(inline=True)
def egress_credit(count, g, arriving):
    """Queue ``g`` can take a flit read now: the flits it holds and the one
    ``arriving`` (in a read register, written at this edge) leave room. A flit
    leaving in this cycle is not counted, so a sink's ``ready`` never reaches
    the scheduler."""
    return count[g] + arriving < EGRESS_DEPTH


@kernel(inline=True)
def egress_pop(count, first, g):
    """``o`` of queue ``g`` transferred its oldest flit; returns that flit's slot."""
    slot = first[g]
    first[g] = slot + 1 if slot + 1 < EGRESS_DEPTH else 0
    count[g] -= 1
    return slot


@kernel(inline=True)
def egress_push(count, first, g):
    """A flit is written into queue ``g`` (after any pop of the same edge); returns
    the slot the caller writes its fields into."""
    slot = first[g] + count[g]
    if slot >= EGRESS_DEPTH:
        slot -= EGRESS_DEPTH
    count[g] += 1
    return slot


class EgressQueueModel:
    """One egress queue: :func:`egress_credit`, :func:`egress_pop` and :func:`egress_push`
    on it, its flits (of any width) kept by slot.

    Call :meth:`credit` and :meth:`head` for the cycle, then :meth:`step`
    with what was transferred on each side.
    """

    __slots__ = ("_count", "_first", "_flits")

    def __init__(self):
        self._count = np.zeros(1, np.int64)
        self._first = np.zeros(1, np.int64)
        self._flits = [None] * EGRESS_DEPTH

    def __len__(self) -> int:
        return int(self._count[0])

    def credit(self, arriving: bool) -> bool:
        """Whether a read may be issued now, with a flit ``arriving`` at this edge."""
        return bool(egress_credit(self._count, 0, arriving))

    def head(self):
        """``o.payload`` in this cycle, or ``None`` when ``o.valid`` is low."""
        return self._flits[int(self._first[0])] if self._count[0] else None

    def step(self, pushed=None, popped: bool = False) -> None:
        """End the cycle: ``popped`` when ``o`` transferred, ``pushed`` the flit written."""
        if popped:
            self._flits[egress_pop(self._count, self._first, 0)] = None
        if pushed is not None:
            self._flits[egress_push(self._count, self._first, 0)] = pushed
