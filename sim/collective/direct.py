"""Direct: every peer written to directly, no forwarding (section 15.4.6).

Accelerator ``a`` writes to ``a + 1, a + 2, ..., a + n - 1`` in turn
(staggered, so no accelerator is everyone's first target). All-to-all
sends block ``j`` of the input half to ``j``, into block ``a`` of its output
half; reduce-scatter sends block ``j`` to ``j``, which adds it; all-gather
sends the own block to everyone; all-reduce is the two, each all-gather
step waiting for all ``n - 1`` additions; broadcast is accelerator 0
writing the whole message to each other.
"""

from __future__ import annotations

from .schedule import Builder, blocks

__all__ = ["OPS", "build", "order", "steps", "rounds"]

OPS = ("allreduce", "reducescatter", "allgather", "alltoall", "broadcast")


def build(peers, op: str, elements: int, segment: int = 0):
    """The direct schedule, in segments of ``segment`` elements (0: whole chunks)."""
    n = peers.n
    b = Builder(n, op, "direct", elements, 2 * elements if op == "alltoall" else elements,
                segment)
    cuts = blocks(0, elements, n)
    if op == "broadcast":
        for d in range(1, n):
            b.send(0, d, 0, elements, reduce=False)
        return b.schedule()
    if op == "alltoall":
        each = elements // n
        for d in range(1, n):
            for a in range(n):
                j = (a + d) % n
                b.send(a, j, j * each, (j + 1) * each, reduce=False,
                       dst_lo=elements + a * each)
        return b.schedule()
    added = {a: [] for a in range(n)}
    if op != "allgather":
        for d in range(1, n):
            for a in range(n):
                j = (a + d) % n
                added[j].append(b.send(a, j, *cuts[j], reduce=True))
    if op != "reducescatter":
        for d in range(1, n):
            for a in range(n):
                b.send(a, (a + d) % n, *cuts[a], reduce=False, after=added[a])
    return b.schedule()


def order(peers, op: str, elements: int):
    """Block ``j``: its own data, then ``j - 1``'s, ``j - 2``'s, ... (the order they arrive
    in the schedule)."""
    n = peers.n
    return [(lo, hi, tuple((j - d) % n for d in range(n)))
            for j, (lo, hi) in enumerate(blocks(0, elements, n))]


def steps(peers, op: str) -> int:
    """``n - 1``; ``2(n - 1)`` for all-reduce."""
    return 2 * (peers.n - 1) if op == "allreduce" else peers.n - 1


def rounds(peers, op: str, elements: int):
    """The alpha-beta rounds: ``n - 1``, in round ``d`` every ``a`` writing to ``a + d``
    (broadcast: only accelerator 0), all-reduce twice."""
    n = peers.n
    if op == "broadcast":
        return [(((0, d),), elements) for d in range(1, n)]
    one = [(tuple((a, (a + d) % n) for a in range(n)), -(-elements // n)) for d in range(1, n)]
    return one * 2 if op == "allreduce" else one

