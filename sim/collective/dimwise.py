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
a multidimensional mesh.)
"""

from __future__ import annotations

from .rings import ring_fold, ring_pairs, run_shares
from .schedule import Builder, blocks

__all__ = ["OPS", "ALL_OPS", "axes", "build", "order", "steps", "rounds", "build_all",
           "order_all", "steps_all", "rounds_all"]

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


def _tree(peers, order, a: int, j: int):
    """The reduction order of what ``a`` holds after the phases ``order[:j+1]``: the ring
    fold along axis ``order[j]`` of what each position held after the phase before."""
    if j < 0:
        return a
    ring = next(r for r in peers.lines(order[j]) if a in r)
    return ring_fold(ring, ring.index(a), lambda b: _tree(peers, order, b, j - 1))


def _order(peers, order, lo: int, hi: int):
    cuts = blocks(lo, hi, peers.n)
    out = []
    for a in range(peers.n):
        first, _ = _index(peers, a, order, len(order))
        out.append((*cuts[first], _tree(peers, order, a, len(order) - 1)))
    return out


def _rounds(peers, order, op, elements: int, shares: int):
    """Per axis ``k``, ``k - 1`` rounds around all its rings, each sending ``1 / k`` of what
    the accelerator holds."""
    per_axis, span = [], shares
    for d in order:
        span *= peers.digits[d]
        pairs = tuple(p for ring in peers.lines(d) for p in ring_pairs(ring))
        per_axis.append([(pairs, -(-elements // span))] * (peers.digits[d] - 1))
    rs = [r for p in per_axis for r in p]
    ag = [r for p in reversed(per_axis) for r in p]
    return {"allreduce": rs + ag, "reducescatter": rs, "allgather": ag}[op]


def build(peers, op: str, elements: int):
    """The dimension-wise schedule."""
    b = Builder(peers.n, op, "dimwise", elements, elements)
    run_shares(b, [_share(peers, op, axes(peers), 0, elements)])
    return b.schedule()


def order(peers, op: str, elements: int):
    """Per block: ring folds nested axis by axis, the slowest innermost."""
    return _order(peers, axes(peers), 0, elements)


def steps(peers, op: str) -> int:
    """``sum(k_d - 1)`` per reduce-scatter or all-gather, twice that for all-reduce."""
    total = sum(peers.digits[d] - 1 for d in axes(peers))
    return 2 * total if op == "allreduce" else total


def rounds(peers, op: str, elements: int):
    """The alpha-beta rounds: axis by axis, the data shrinking by each axis's length."""
    return _rounds(peers, axes(peers), op, elements, 1)


def _rotations(peers):
    order = axes(peers)
    return [order[s:] + order[:s] for s in range(len(order))]


def build_all(peers, op: str, elements: int):
    """The all-axes-at-once schedule: one share of the message per axis."""
    b = Builder(peers.n, op, "dimwise-all", elements, elements)
    rotations = _rotations(peers)
    parts = blocks(0, elements, len(rotations))
    run_shares(b, [_share(peers, op, r, lo, hi) for r, (lo, hi) in zip(rotations, parts)])
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
    """The longest share's rounds, each round sending one chunk of every share."""
    rotations = _rotations(peers)
    per = [_rounds(peers, r, op, elements, len(rotations)) for r in rotations]
    length = max(len(p) for p in per)
    return [(tuple(x for p in per if t < len(p) for x in p[t][0]),
             sum(p[t][1] for p in per if t < len(p))) for t in range(length)]
