"""The double binary tree, as NCCL builds it (section 15.4.5; Sanders, Speck and Träff 2009).

Ranks are positions in the ring order (so a leaf's hosts, or a torus's
neighbours, are near in rank). Tree 0 is NCCL's in-order binary tree: rank
``r > 0`` with lowest set bit ``b`` hangs under ``(r xor b) | 2b``, or under
``r xor b`` when that is out of range; rank 0 is the root. Tree 1 is tree 0
mirrored (rank ``n - 1 - r``) when ``n`` is even, shifted by one when odd,
so that most interior nodes of one tree are leaves of the other. All-reduce
sends each half of the message up one tree, adding, and back down, copying,
in ``segments`` pipelined pieces; broadcast sends the whole message down
tree 0 from accelerator 0.
"""

from __future__ import annotations

from .schedule import Builder, blocks

__all__ = ["OPS", "parents", "build", "order", "steps", "rounds"]

OPS = ("allreduce", "broadcast")


def _btree(n: int) -> list[int]:
    """Parent rank per rank of NCCL's binary tree (``-1`` at the root, rank 0)."""
    parent = [-1] * n
    for r in range(1, n):
        bit = r & -r
        up = (r ^ bit) | (bit << 1)
        parent[r] = up if up < n else r ^ bit
    return parent


def parents(peers, tree: int) -> list[int]:
    """The parent accelerator of every accelerator in ``tree`` (0 or 1); ``-1`` at the root."""
    n, ring = peers.n, peers.ring
    base = _btree(n)
    if tree == 0:
        rank_parent = base
    elif n % 2 == 0:
        rank_parent = [-1 if base[n - 1 - r] < 0 else n - 1 - base[n - 1 - r] for r in range(n)]
    else:
        rank_parent = [-1 if base[(r - 1) % n] < 0 else (base[(r - 1) % n] + 1) % n
                       for r in range(n)]
    out = [-1] * n
    for r, up in enumerate(rank_parent):
        out[ring[r]] = -1 if up < 0 else ring[up]
    return out


def _shape(peers, tree: int):
    """``(parent, children, height, depth)``: children sorted by (height, accelerator), the
    order in which they send up and so the order their sums are added."""
    parent = parents(peers, tree)
    children = {a: [] for a in range(peers.n)}
    for a, up in enumerate(parent):
        if up >= 0:
            children[up].append(a)
    height, depth = {}, {}

    def h(a):
        if a not in height:
            height[a] = 1 + max((h(c) for c in children[a]), default=-1)
        return height[a]

    for a in range(peers.n):
        h(a)
    for a in range(peers.n):
        up, d = parent[a], 0
        while up >= 0:
            up, d = parent[up], d + 1
        depth[a] = d
    for a in children:
        children[a].sort(key=lambda c: (height[c], c))
    return parent, children, height, depth


def _sends(peers, op: str, elements: int, segments: int):
    """Every send ``(time, tree, segment, src, dst, reduce)`` of an idealised synchronous
    run, in time order: up at ``height + s``, down at ``H + s + depth`` (``H`` the root's
    height)."""
    trees = (0, 1) if op == "allreduce" else (0,)
    out = []
    for t in trees:
        parent, children, height, depth = _shape(peers, t)
        top = max(height.values())
        for s in range(segments):
            for a in range(peers.n):
                if op == "allreduce" and parent[a] >= 0:
                    out.append((height[a] + s, t, s, a, parent[a], True))
                for c in children[a]:
                    out.append((top + s + depth[a], t, s, a, c, False))
    out.sort()
    return out


def _pieces(op: str, elements: int, segments: int):
    """Per tree, its ``segments`` pieces ``(lo, hi)``: all-reduce sends each half of the
    message up and down one tree, broadcast the whole message down tree 0."""
    halves = blocks(0, elements, 2 if op == "allreduce" else 1)
    return [blocks(lo, hi, segments) for lo, hi in halves]


def build(peers, op: str, elements: int, segments: int = 1):
    """The double binary tree's schedule (one tree for broadcast)."""
    if segments < 1:
        raise ValueError(f"segments = {segments}: must be at least 1")
    pieces = _pieces(op, elements, segments)
    b = Builder(peers.n, op, "tree", elements, elements)
    got = {}
    for _, t, s, src, dst, reduce in _sends(peers, op, elements, segments):
        lo, hi = pieces[t][s]
        if reduce:
            # Up: wait for every child's sum of this piece.
            after = got.get((t, s, src, "up"), [])
            got.setdefault((t, s, dst, "up"), []).append(
                b.send(src, dst, lo, hi, reduce=True, after=after))
        else:
            after = got.get((t, s, src, "down"), got.get((t, s, src, "up"), []))
            got[t, s, dst, "down"] = [b.send(src, dst, lo, hi, reduce=False, after=after)]
    return b.schedule()


def order(peers, op: str, elements: int):
    """Per half: at every node, its own data, then each child's subtree sum, in the order of
    :func:`_shape` (lower subtrees first)."""
    out = []
    for t, (lo, hi) in enumerate(blocks(0, elements, 2)):
        parent, children, _, _ = _shape(peers, t)

        def tree(a):
            return (a, *(tree(c) for c in children[a])) if children[a] else a

        out.append((lo, hi, tree(parent.index(-1))))
    return out


def steps(peers, op: str) -> int:
    """The busiest accelerator's steps: per tree and segment, one up (unless the root) and
    one per child down, summed over both trees for all-reduce."""
    trees = (0, 1) if op == "allreduce" else (0,)
    most = [0] * peers.n
    for t in trees:
        parent, children, _, _ = _shape(peers, t)
        for a in range(peers.n):
            most[a] += len(children[a]) + (op == "allreduce" and parent[a] >= 0)
    return max(most)


def rounds(peers, op: str, elements: int, segments: int = 1):
    """The alpha-beta rounds: the idealised run's times (:func:`_sends`), each round the
    sends of one time, each with its piece's elements (with one segment only one level of
    each tree is busy in a round)."""
    pieces = _pieces(op, elements, segments)
    by_time = {}
    for time, t, s, src, dst, _ in _sends(peers, op, elements, segments):
        lo, hi = pieces[t][s]
        by_time.setdefault(time, []).append(((src, dst), hi - lo))
    return [tuple(zip(*by_time[time])) for time in sorted(by_time)]
