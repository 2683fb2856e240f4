"""Golden model of an input buffer's bookkeeping (docs/architecture.md 4.2, 4.3), compiled.

Mirrors ``superfabric.hdl.voq.VOQBuffer``: ingress frames packets by the head
flit's length and admits a packet only when all its flits fit (or discards it
whole, with ``ingress_full = "drop"``); a complete packet joins the tail of
its queue; a read takes the head packet of a queue. The model tracks packets
by id, not flits in memory: a queue is a linked list over per-packet ``next``
links. A buffer's space is counted per pool (one pool on an endpoint input,
one per (class, VC) on a link input, section 11.3). :func:`queue_index`,
:func:`queue_parts` and :func:`pool_index` number the queues and pools;
:func:`voq_fits`, :func:`frame_flit`, :func:`voq_enqueue`,
:func:`voq_dequeue` and :func:`voq_clock` are the rules the router's cycle
kernel calls per input; :class:`VOQModel` holds the state of one buffer for
a caller outside the kernel.
"""

import numpy as np

from .kernel import kernel
from .source import NONE

__all__ = ["queue_index", "queue_parts", "pool_index", "voq_fits", "frame_flit", "voq_enqueue",
           "voq_dequeue", "voq_clock", "VOQModel"]


@kernel(inline=True)
def queue_index(out, vc, prio, vcs, priorities):
    """The queue of packets toward output ``out`` on VC ``vc`` in class ``prio``:
    ``(out * vcs + vc) * priorities + prio`` (sections 4.2, 11.3)."""
    return (out * vcs + vc) * priorities + int(prio)


@kernel(inline=True)
def queue_parts(q, vcs, priorities):
    """``(out, vc, prio)`` of queue ``q``, the inverse of :func:`queue_index`."""
    channel = q // priorities
    out = channel // vcs
    return out, channel - out * vcs, q - channel * priorities


@kernel(inline=True)
def pool_index(prio, vc, vcs):
    """The pool of a link input holding class ``prio`` on VC ``vc``: ``prio * vcs + vc``."""
    return prio * vcs + vc


@kernel(inline=True)
def voq_fits(free, g, pool, length):
    """A head flit of a ``length``-flit packet fits pool ``pool`` of input ``g``: its
    unreserved flits, as registered at the start of the cycle, cover the packet."""
    return free[g, pool] >= length


@kernel(inline=True)
def frame_flit(in_packet, left, dropping, g, size, fits):
    """Ingress framing of a flit that input ``g`` takes; returns ``(keep, last)``.

    ``size`` (the packet's length) and ``fits`` (its flits are free) matter for
    a head flit only: a packet that does not fit is dropped to its last flit.
    """
    if not in_packet[g]:
        left[g] = size - 1
        in_packet[g] = size != 1
        dropping[g] = not fits
        return fits, size == 1
    keep, last = not dropping[g], left[g] == 1
    in_packet[g] = left[g] != 1
    left[g] -= 1
    return keep, last


@kernel(inline=True)
def voq_enqueue(q_head, q_tail, q_count, p_next, g, q, pkt):
    """Complete packet ``pkt`` joins the tail of queue ``q`` of input ``g``."""
    p_next[pkt] = NONE
    if q_count[g, q]:
        p_next[q_tail[g, q]] = pkt
    else:
        q_head[g, q] = pkt
    q_tail[g, q] = pkt
    q_count[g, q] += 1


@kernel(inline=True)
def voq_dequeue(q_head, q_count, p_next, g, q):
    """Take the head packet of queue ``q`` of input ``g`` (which holds one); returns its id."""
    pkt = q_head[g, q]
    q_head[g, q] = p_next[pkt]
    q_count[g, q] -= 1
    return pkt


@kernel(inline=True)
def voq_clock(free, g, read_pool, reads, reserve_pool, reserved):
    """The edge's space accounting of input ``g``: ``reads`` flits read from pool
    ``read_pool`` are free, a head admitted reserves its packet's ``reserved`` flits
    in pool ``reserve_pool``."""
    free[g, read_pool] += reads
    free[g, reserve_pool] -= reserved


class VOQModel:
    """One input buffer of ``buffer_flits`` flits toward ``ports`` outputs in
    ``priorities`` classes: queue ``dst * priorities + prio`` per (output, class)
    with ``islip``, one queue in arrival order otherwise. Packets are ids below
    ``capacity``.

    Within a cycle: :meth:`ready` and :meth:`requests` from the state at its
    start, then :meth:`take` for a flit accepted, :meth:`start` or
    :meth:`advance` for a read, and :meth:`clock` at the edge, as the router's
    cycle kernel orders them.
    """

    def __init__(self, *, ports: int, priorities: int, buffer_flits: int, islip: bool,
                 drop: bool, capacity: int):
        self.priorities, self.islip, self.drop = priorities, islip, drop
        self._free = np.full((1, 1), buffer_flits, np.int64)
        queues = ports * priorities if islip else 1
        self.in_packet = np.zeros(1, np.bool_)
        self.left = np.zeros(1, np.int64)
        self.dropping = np.zeros(1, np.bool_)
        self.q_head = np.full((1, queues), NONE, np.int64)
        self.q_tail = np.full((1, queues), NONE, np.int64)
        self.q_count = np.zeros((1, queues), np.int64)
        self.p_next = np.full(capacity, NONE, np.int64)
        self.p_req = np.zeros(capacity, np.int64)
        self._reserve = self._reads = 0

    @property
    def free(self) -> int:
        """Unreserved flits, as registered at the start of the cycle."""
        return int(self._free[0, 0])

    def ready(self, length: int) -> bool:
        """Whether a flit offered now is taken (a head flit of ``length`` flits)."""
        return bool(self.in_packet[0]) or self.drop or bool(voq_fits(self._free, 0, 0, length))

    def requests(self) -> int:
        """Bit ``dst * priorities + prio`` per queue whose head packet is complete."""
        if self.islip:
            return sum(1 << q for q, count in enumerate(self.q_count[0]) if count)
        return 1 << int(self.p_req[self.q_head[0, 0]]) if self.q_count[0, 0] else 0

    def take(self, pkt: int, req: int, length: int) -> tuple[bool, bool, bool]:
        """A flit of packet ``pkt`` (toward queue ``req``, ``length`` flits) is taken;
        returns ``(head, keep, last)``: a head flit, stored (not dropped), the last."""
        head = not self.in_packet[0]
        fits = bool(voq_fits(self._free, 0, 0, length))
        if head and fits:
            self._reserve = length
        keep, last = frame_flit(self.in_packet, self.left, self.dropping, 0, length, fits)
        if keep and last:
            self.p_req[pkt] = req
            voq_enqueue(self.q_head, self.q_tail, self.q_count, self.p_next, 0,
                        req if self.islip else 0, pkt)
        return head, bool(keep), bool(last)

    def start(self, req: int) -> int:
        """Read the head flit of queue ``req``'s oldest packet; returns the packet."""
        self._reads += 1
        return int(voq_dequeue(self.q_head, self.q_count, self.p_next, 0,
                               req if self.islip else 0))

    def advance(self) -> None:
        """Read the next flit of the packet under way."""
        self._reads += 1

    def clock(self) -> None:
        """The edge: the admitted packet's flits are reserved, the read one freed."""
        voq_clock(self._free, 0, 0, self._reads, 0, self._reserve)
        self._reserve = self._reads = 0
