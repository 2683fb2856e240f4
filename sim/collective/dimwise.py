"""Dimension-wise rings on a torus: one axis after another, or all axes at once (section 15.4.3).

The digits of an accelerator's number (its port at the router, then each
torus coordinate) are the axes. ``dimwise`` reduce-scatters along the
slowest axis first (the rings of that axis, all at once), then the next
within the range each accelerator kept, down to the fastest, so that
accelerator ``a`` ends holding block ``a``; the all-gather runs the axes
back. ``dimwise-all`` cuts the message into one share per axis and runs
the shares at once, share ``s`` starting its reduce-scatter on axis ``s``
(the axes rotated), so every axis's links carry data from the first round.
(Chan, Heimlich, Purkayastha and van de Geijn 2007: the bucket algorithm on
a multidimensional mesh.) ``dimwise-direct`` takes the same phases but
exchanges directly within each line of an axis, every member writing to
every other, so what an accelerator holds crosses one write per axis: the
compressed all-reduce's two-shot, quantised once per dimension (section 16.6;
ZeRO++'s hierarchical reduce-scatter).
"""

from __future__ import annotations

from .rings import ring_fold, run_shares, share_rounds
from .schedule import Builder, blocks, turn_round

__all__ = ["OPS", "ALL_OPS", "axes", "build", "order", "steps", "rounds", "build_all",
           "order_all", "steps_all", "rounds_all", "build_direct", "order_direct",
           "rounds_direct"]

OPS = ("allreduce", "reducescatter", "allgather")
ALL_OPS = ("allreduce",)


def axes(peers) -> list[int]:
    """The digits longer than one, slowest first: the reduce-scatter's order of axes."""
    if peers.topology.kind != "torus":
        raise ValueError(f"fabric.topology = {peers.topology.kind!r}: the dimension-wise "
                         f"algorithms run on a torus")
    return [d for d in reversed(range(len(peers.digits))) if peers.digits[d] > 1]


def _index(peers, a: int, order, upto: int) -> tuple[int, int]:
    """Block numbers ``(first, count)`` that accelerator ``a`` holds after reduce-scattering
    along ``order[:upto]``: its digits on those axes, most significant first."""
    digits, index = peers.digits_of(a), 0
    for d in order[:upto]:
        index = index * peers.digits[d] + digits[d]
    count = 1
    for d in order[upto:]:
        count *= peers.digits[d]
    return index * count, count


def _phase(peers, order, j: int, cuts, reduce: bool) -> list:
    """The rings along axis ``order[j]``, each with its chunks: position ``x`` of a ring
    holds, after the phase, the blocks of its range whose digit ``order[j]`` is ``x``."""
    phase = []
    for ring in peers.lines(order[j]):
        chunks = []
        for a in ring:
            first, count = _index(peers, a, order, j + 1)
            chunks.append((cuts[first][0], cuts[first + count - 1][1]))
        phase.append((ring, chunks, reduce))
    return phase


def _share(peers, op: str, order, lo: int, hi: int) -> list:
    cuts = blocks(lo, hi, peers.n)
    rs = [_phase(peers, order, j, cuts, True) for j in range(len(order))]
    ag = [_phase(peers, order, j, cuts, False) for j in reversed(range(len(order)))]
    return {"allreduce": rs + ag, "reducescatter": rs, "allgather": ag}[op]


def _direct_fold(line, i: int, sub=lambda a: a) -> tuple:
    """The order of a direct exchange's sum at position ``i`` of ``line``: its own, then
    position ``i - 1``'s, ``i - 2``'s, ... (the order they arrive)."""
    k = len(line)
    return tuple(sub(line[(i - t) % k]) for t in range(k))


def _tree(peers, order, a: int, j: int, fold=ring_fold):
    """The reduction order of what ``a`` holds after the phases ``order[:j+1]``: the fold
    along axis ``order[j]`` of what each position held after the phase before."""
    if j < 0:
        return a
    ring = next(r for r in peers.lines(order[j]) if a in r)
    return fold(ring, ring.index(a), lambda b: _tree(peers, order, b, j - 1, fold))


def _order(peers, order, lo: int, hi: int, fold=ring_fold):
    cuts = blocks(lo, hi, peers.n)
    out = []
    for a in range(peers.n):
        first, _ = _index(peers, a, order, len(order))
        out.append((*cuts[first], _tree(peers, order, a, len(order) - 1, fold)))
    return out


def build(peers, op: str, elements: int, segment: int = 0):
    """The dimension-wise schedule, in segments of ``segment`` elements (0: whole chunks)."""
    b = Builder(peers.n, op, "dimwise", elements, elements, segment)
    run_shares(b, [_share(peers, op, axes(peers), 0, elements)])
    return b.schedule()


def order(peers, op: str, elements: int):
    """Per block: ring folds nested axis by axis, the slowest innermost."""
    return _order(peers, axes(peers), 0, elements)


def _direct_turns(phase):
    """The rounds of a phase of :func:`_share` as a direct exchange: in each line every
    position writes to every other, ``d`` ahead in round ``d = 1 .. k-1``, the chunk the
    receiver keeps (adding) or its own (copying); per round its writes ``(src, dst, lo, hi,
    reduce)``."""
    k = len(phase[0][0])
    for d in range(1, k):
        yield [(src, line[(p + d) % k], *(chunks[(p + d) % k] if reduce else chunks[p]), reduce)
               for line, chunks, reduce in phase for p, src in enumerate(line)]


def _exchange(b: Builder, phases) -> None:
    """Run the phases of :func:`_share` as direct exchanges (:func:`_direct_turns`), each
    write once its sender has every chunk of the phase before."""
    before = {}
    for phase in phases:
        got = {}
        for turn in _direct_turns(phase):
            for src, dst, lo, hi, reduce in turn:
                got.setdefault(dst, []).append(
                    b.send(src, dst, lo, hi, reduce=reduce, after=before.get(src, ())))
        before = got


def build_direct(peers, op: str, elements: int, segment: int = 0):
    """The dimension-wise schedule with a direct exchange along each axis, in segments of
    ``segment`` elements (0: whole chunks)."""
    b = Builder(peers.n, op, "dimwise-direct", elements, elements, segment)
    _exchange(b, _share(peers, op, axes(peers), 0, elements))
    return b.schedule()


def order_direct(peers, op: str, elements: int):
    """Per block: direct folds nested axis by axis, the slowest innermost."""
    return _order(peers, axes(peers), 0, elements, _direct_fold)


def rounds_direct(peers, op: str, elements: int):
    """The alpha-beta rounds: per axis of length ``k``, ``k - 1`` rounds, every member
    writing ``d`` ahead in its line in round ``d`` the chunk :func:`build_direct` sends."""
    return [turn_round(turn) for phase in _share(peers, op, axes(peers), 0, elements)
            for turn in _direct_turns(phase)]


def steps(peers, op: str) -> int:
    """``sum(k_d - 1)`` per reduce-scatter or all-gather, twice that for all-reduce (direct
    exchanges as rings)."""
    total = sum(peers.digits[d] - 1 for d in axes(peers))
    return 2 * total if op == "allreduce" else total


def rounds(peers, op: str, elements: int):
    """The alpha-beta rounds: axis by axis, the data shrinking by each axis's length."""
    return share_rounds([_share(peers, op, axes(peers), 0, elements)])


def _rotations(peers):
    order = axes(peers)
    return [order[s:] + order[:s] for s in range(len(order))]


def _all_shares(peers, op: str, elements: int) -> list:
    """One share of the message per axis, each in its own rotation of the axes."""
    rotations = _rotations(peers)
    parts = blocks(0, elements, len(rotations))
    return [_share(peers, op, r, lo, hi) for r, (lo, hi) in zip(rotations, parts)]


def build_all(peers, op: str, elements: int, segment: int = 0):
    """The all-axes-at-once schedule: one share of the message per axis, in segments of
    ``segment`` elements (0: whole chunks)."""
    b = Builder(peers.n, op, "dimwise-all", elements, elements, segment)
    run_shares(b, _all_shares(peers, op, elements))
    return b.schedule()


def order_all(peers, op: str, elements: int):
    """Each share in its own rotation of the axes."""
    rotations = _rotations(peers)
    parts = blocks(0, elements, len(rotations))
    return [c for r, (lo, hi) in zip(rotations, parts) for c in _order(peers, r, lo, hi)]


def steps_all(peers, op: str) -> int:
    """Every share's steps: ``D`` times the dimension-wise count (``D`` axes)."""
    return len(axes(peers)) * steps(peers, op)


def rounds_all(peers, op: str, elements: int):
    """The longest share's rounds, each round writing one chunk of every share still
    running (the shares' axes at a round can differ in length)."""
    return share_rounds(_all_shares(peers, op, elements))
