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

from .schedule import Builder, blocks, turn_round

__all__ = ["OPS", "build", "order", "steps", "rounds"]

OPS = ("allreduce", "reducescatter", "allgather", "alltoall", "broadcast")


def build(peers, op: str, elements: int, segment: int = 0):
    """The direct schedule, in segments of ``segment`` elements (0: whole chunks)."""
    n = peers.n
    b = Builder(n, op, "direct", elements, 2 * elements if op == "alltoall" else elements,
                segment)
    if op == "broadcast":
        for d in range(1, n):
            b.send(0, d, 0, elements, reduce=False)
        return b.schedule()
    added = {a: [] for a in range(n)}
    for turn in _turns(op, n, elements):
        for a, j, lo, hi, reduce in turn:
            if op == "alltoall":
                b.send(a, j, lo, hi, reduce=False, dst_lo=elements + a * (hi - lo))
            elif reduce:
                added[j].append(b.send(a, j, lo, hi, reduce=True))
            else:
                b.send(a, j, lo, hi, reduce=False, after=added[a])
    return b.schedule()


def _turns(op: str, n: int, elements: int):
    """The rounds of every operation but broadcast: in round ``d`` every ``a`` writes to
    ``j = a + d``, ``(a, j, lo, hi, reduce)``; all-to-all block ``j`` of its input, the
    reduce-scatter block ``j`` (adding), the all-gather its own block ``a``; all-reduce the
    reduce-scatter's rounds, then the all-gather's."""
    cuts = blocks(0, elements, n)
    if op == "alltoall":
        cuts = [(j * (elements // n), (j + 1) * (elements // n)) for j in range(n)]
    phases = {"allreduce": ("add", "own"), "reducescatter": ("add",), "allgather": ("own",),
              "alltoall": ("theirs",)}[op]
    for phase in phases:
        for d in range(1, n):
            yield [(a, (a + d) % n, *cuts[a if phase == "own" else (a + d) % n], phase == "add")
                   for a in range(n)]


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
        return [(((0, d),), (elements,)) for d in range(1, n)]
    return [turn_round(turn) for turn in _turns(op, n, elements)]

