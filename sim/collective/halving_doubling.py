"""Recursive halving and doubling (section 15.4.4; Thakur, Rabenseifner and Gropp 2005).

On ``p`` accelerators, ``p`` a power of two, the reduce-scatter halves: in
step ``j`` accelerator ``r`` sends its partner ``r xor p/2^(j+1)`` the half
of its range the partner keeps, which the partner adds, so ``r`` ends with
block ``r``; the all-gather doubles back, copying. All-reduce on ``n`` not a
power of two (Rabenseifner's way): with ``p`` the largest power of two below
``n``, accelerator ``p + i`` first sends its whole buffer to ``i``, which
adds it; the ``p`` run halving-doubling; ``i`` sends the result back to
``p + i``. Broadcast is the binomial tree (recursive doubling): in step
``j`` every ``r < 2^j`` that has the message sends it to ``r + 2^j``.
"""

from __future__ import annotations

from .schedule import Builder, blocks, turn_round

__all__ = ["OPS", "build", "order", "steps", "rounds"]

OPS = ("allreduce", "reducescatter", "allgather", "broadcast")


def _power(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def _levels(op: str, n: int) -> int:
    p = _power(n)
    if op in ("reducescatter", "allgather") and p != n:
        raise ValueError(f"{op} by halving-doubling: {n} accelerators, must be a power of two")
    return p.bit_length() - 1


def _held(r: int, levels: int, j: int, cuts) -> tuple[int, int]:
    """The range ``r`` holds after halving step ``j``: blocks sharing its top ``j + 1`` bits."""
    shift = levels - j - 1
    first = (r >> shift) << shift
    return cuts[first][0], cuts[first + (1 << shift) - 1][1]


def _turns(p: int, levels: int, cuts, reduce: bool):
    """The halving (``reduce``) or doubling steps: per step, every write ``(r, partner, lo,
    hi)``, the range the partner keeps when halving, the one ``r`` holds when doubling."""
    for j in (range(levels) if reduce else reversed(range(levels))):
        d = p >> (j + 1)
        yield [(r, r ^ d, *_held(r ^ d if reduce else r, levels, j, cuts)) for r in range(p)]


def _exchange(b: Builder, p: int, levels: int, cuts, last: dict, reduce: bool) -> None:
    for turn in _turns(p, levels, cuts, reduce):
        arrived = {}
        for r, partner, lo, hi in turn:
            arrived[partner] = b.send(r, partner, lo, hi, reduce=reduce, after=(last.get(r),))
        last.update(arrived)


def _binomial(n: int):
    """The broadcast's steps: in step ``j`` every ``r < 2^j`` sends to ``r + 2^j``."""
    for j in range((n - 1).bit_length()):
        yield [(r, r + (1 << j)) for r in range(1 << j) if r + (1 << j) < n]


def _broadcast(b: Builder, n: int, elements: int) -> None:
    got = {}
    for turn in _binomial(n):
        for r, to in turn:
            got[to] = b.send(r, to, 0, elements, reduce=False, after=(got.get(r),))


def build(peers, op: str, elements: int, segment: int = 0):
    """The halving-doubling schedule (the binomial tree for broadcast), in segments of
    ``segment`` elements (0: whole chunks)."""
    n = peers.n
    levels = 0 if op == "broadcast" else _levels(op, n)
    b = Builder(n, op, "halving-doubling", elements, elements, segment)
    if op == "broadcast":
        _broadcast(b, n, elements)
        return b.schedule()
    p = _power(n)
    last = {i: b.send(p + i, i, 0, elements, reduce=True) for i in range(n - p)}
    cuts = blocks(0, elements, p)
    if op != "allgather":
        _exchange(b, p, levels, cuts, last, True)
    if op != "reducescatter":
        _exchange(b, p, levels, cuts, last, False)
    for i in range(n - p):
        b.send(i, p + i, 0, elements, reduce=False, after=(last[i],))
    return b.schedule()


def order(peers, op: str, elements: int):
    """Per block: pairwise sums, the farthest partners first; with ``n`` not a power of two
    each ``r < n - p`` starts from ``x_r + x_(p+r)``."""
    n = peers.n
    p, levels = _power(n), _levels(op, n)

    def tree(r: int, j: int):
        if j < 0:
            return (r, p + r) if r < n - p else r
        return (tree(r, j - 1), tree(r ^ (p >> (j + 1)), j - 1))

    return [(lo, hi, tree(r, levels - 1)) for r, (lo, hi) in enumerate(blocks(0, elements, p))]


def steps(peers, op: str) -> int:
    """``2 log2 p`` all-reduce (plus one, sending the result back, when ``n`` is not a power
    of two), ``log2 n`` reduce-scatter and all-gather, ``ceil(log2 n)`` broadcast (the root)."""
    n = peers.n
    if op == "broadcast":
        return (n - 1).bit_length()
    levels = _levels(op, n)
    if op == "allreduce":
        return 2 * levels + (_power(n) != n)
    return levels


def rounds(peers, op: str, elements: int):
    """The alpha-beta rounds: per step its partners and the elements each writes, those
    :func:`build` sends."""
    n = peers.n
    if op == "broadcast":
        return [(tuple(turn), (elements,) * len(turn)) for turn in _binomial(n)]
    p, levels = _power(n), _levels(op, n)
    cuts = blocks(0, elements, p)
    whole = (elements,) * (n - p)
    out = [(tuple((p + i, i) for i in range(n - p)), whole)] if n > p else []
    for reduce in {"allreduce": (True, False), "reducescatter": (True,),
                   "allgather": (False,)}[op]:
        out += [turn_round(turn) for turn in _turns(p, levels, cuts, reduce)]
    return out + ([(tuple((i, p + i) for i in range(n - p)), whole)] if n > p else [])
