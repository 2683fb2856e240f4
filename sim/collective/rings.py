"""Ring phases, and the ring and bidirectional ring algorithms (section 15.4.1).

A ring phase over ``q`` accelerators is ``q - 1`` rounds; in round ``k``
position ``p`` writes one chunk to position ``p + 1``. Reduce-scatter:
position ``p`` sends chunk ``p - k - 1``, which its successor adds into its
own, so chunk ``i`` is folded from position ``i + 1`` around to ``i``, where
it ends complete. All-gather: position ``p`` sends chunk ``p - k`` and its
successor copies it. Each send waits for the chunk the sender received in
the round before (Patarasuk and Yuan 2009).
"""

from __future__ import annotations

from .schedule import Builder, blocks

__all__ = ["OPS", "ring_round", "run_shares", "share_rounds", "ring_fold", "build_rings",
           "order_rings", "ring_rounds", "ring_pairs", "build", "order", "steps", "rounds"]

OPS = ("allreduce", "reducescatter", "allgather", "broadcast")


def ring_round(b: Builder, ring, chunks, k: int, reduce: bool, last: dict) -> None:
    """Round ``k`` of a ring phase over ``ring`` (chunk ``i`` ends at, or starts from,
    position ``i``); ``last[a]`` is the id of the latest chunk accelerator ``a`` received
    in this stream of rounds, which its next send waits for."""
    q = len(ring)
    arrived = {}
    for p in range(q):
        lo, hi = _sent(chunks, p, k, reduce)
        src, dst = ring[p], ring[(p + 1) % q]
        arrived[dst] = b.send(src, dst, lo, hi, reduce=reduce, after=(last.get(src),))
    last.update(arrived)


def _sent(chunks, p: int, k: int, reduce: bool) -> tuple[int, int]:
    """The chunk position ``p`` sends in round ``k`` of a ring phase over ``chunks``."""
    return chunks[(p - k - (1 if reduce else 0)) % len(chunks)]


def _lockstep(shares):
    """Concurrent streams of ring phases in lockstep: per round ``t``, the rings of every
    share's phase at ``t``, ``(share, ring, chunks, k, reduce)``, round ``k`` of that phase.
    A share is a list of phases, one after the other; a phase is a list of rings running at
    once, ``(ring, chunks, reduce)``, all of one length ``q``, for ``q - 1`` rounds."""
    programs = [[(phase, k) for phase in share for k in range(len(phase[0][0]) - 1)]
                for share in shares]
    for t in range(max(len(p) for p in programs)):
        yield [(s, ring, chunks, program[t][1], reduce) for s, program in enumerate(programs)
               if t < len(program) for ring, chunks, reduce in program[t][0]]


def run_shares(b: Builder, shares) -> None:
    """Build concurrent streams of ring phases in lockstep (:func:`_lockstep`): round ``t`` of
    every share, then round ``t + 1``."""
    last = [{} for _ in shares]
    for turn in _lockstep(shares):
        for s, ring, chunks, k, reduce in turn:
            ring_round(b, ring, chunks, k, reduce, last[s])


def share_rounds(shares) -> list:
    """The alpha-beta rounds of :func:`run_shares`: per round, its ``(src, dst)`` pairs and
    the elements each writes, in the order the schedule creates the sends."""
    return [(tuple(pair for _, ring, *_ in turn for pair in ring_pairs(ring)),
             tuple(hi - lo for _, ring, chunks, k, reduce in turn for lo, hi in
                   (_sent(chunks, p, k, reduce) for p in range(len(ring)))))
            for turn in _lockstep(shares)]


def ring_fold(ring, i: int, sub=lambda a: a) -> tuple:
    """The reduction order of the chunk that ends at position ``i``: a left fold over the
    positions ``i + 1, ..., i + q``, each contributing ``sub(accelerator)``."""
    q = len(ring)
    return tuple(sub(ring[(i + 1 + t) % q]) for t in range(q))


def _phases(op: str, ring, chunks) -> list:
    """A share's phases: reduce-scatter and/or all-gather around one ring."""
    rs, ag = [(ring, chunks, True)], [(ring, chunks, False)]
    return {"allreduce": [rs, ag], "reducescatter": [rs], "allgather": [ag]}[op]


def _halves(peers, elements: int, directions: int):
    """Per direction: the ring in that direction and its chunks (block ``a`` of the buffer
    belongs to accelerator ``a``; with two directions, each takes half of every block)."""
    out = []
    for d in range(directions):
        ring = peers.ring if d == 0 else peers.ring[::-1]
        cuts = [blocks(lo, hi, directions)[d] for lo, hi in blocks(0, elements, peers.n)]
        out.append((ring, [cuts[a] for a in ring]))
    return out


def _broadcast(peers, elements: int, segment: int) -> Builder:
    """A pipelined chain from accelerator 0 along the ring, the message in ``n`` segments:
    position ``p`` forwards segment ``s`` once it has it."""
    b = Builder(peers.n, "broadcast", "ring", elements, elements, segment)
    ring, segments = peers.ring, blocks(0, elements, peers.n)
    got = {}
    for turn in _chain(peers.n):
        for p, s in turn:
            src, dst = ring[p], ring[p + 1]
            got[dst, s] = b.send(src, dst, *segments[s], reduce=False,
                                 after=(got.get((src, s)),))
    return b


def _chain(n: int):
    """The rounds of the broadcast's chain over ``n`` positions: per round ``t``, every
    ``(position, segment)`` that position ``p`` forwards to ``p + 1``, segment ``t - p``."""
    for t in range(2 * n - 2):
        yield [(p, t - p) for p in range(n - 1) if 0 <= t - p < n]


def build_rings(peers, op: str, elements: int, directions: int, name: str, segment: int = 0):
    """The schedule of rings in ``directions`` directions (1 or 2), under ``name``, every
    chunk cut in segments of ``segment`` elements (0: whole)."""
    if op == "broadcast" and directions == 1:
        return _broadcast(peers, elements, segment).schedule()
    b = Builder(peers.n, op, name, elements, elements, segment)
    run_shares(b, [_phases(op, ring, chunks) for ring, chunks in _halves(peers, elements,
                                                                          directions)])
    return b.schedule()


def order_rings(peers, op: str, elements: int, directions: int):
    """Per chunk ``(lo, hi, tree)``, each folded along its own direction."""
    out = []
    for ring, chunks in _halves(peers, elements, directions):
        out += [(lo, hi, ring_fold(ring, i)) for i, (lo, hi) in enumerate(chunks)]
    return out


def ring_pairs(ring) -> tuple:
    """The ``(src, dst)`` pairs of a round around ``ring``."""
    return tuple((ring[p], ring[(p + 1) % len(ring)]) for p in range(len(ring)))


def ring_rounds(peers, op: str, elements: int, directions: int):
    """The alpha-beta rounds ``(pairs, elements of each write)`` of the rings in
    ``directions`` directions: the chunks :func:`build_rings` sends, round by round."""
    if op == "broadcast" and directions == 1:
        ring, segments = peers.ring, blocks(0, elements, peers.n)
        return [(tuple((ring[p], ring[p + 1]) for p, _ in turn),
                 tuple(segments[s][1] - segments[s][0] for _, s in turn))
                for turn in _chain(peers.n)]
    return share_rounds([_phases(op, ring, chunks)
                         for ring, chunks in _halves(peers, elements, directions)])


def build(peers, op: str, elements: int, segment: int = 0):
    """The ring schedule of ``op`` over ``elements`` per accelerator, in segments of
    ``segment`` elements (0: whole chunks)."""
    return build_rings(peers, op, elements, 1, "ring", segment)


def order(peers, op: str, elements: int):
    """Per chunk ``(lo, hi, tree)``: the order in which the ring adds it."""
    return order_rings(peers, op, elements, 1)


def steps(peers, op: str) -> int:
    """Steps of the busiest accelerator: ``2(n-1)`` all-reduce, ``n-1`` reduce-scatter and
    all-gather, ``n`` broadcast (the root sends every one of ``n`` segments)."""
    n = peers.n
    return {"allreduce": 2 * (n - 1), "broadcast": n}.get(op, n - 1)


def rounds(peers, op: str, elements: int):
    """The alpha-beta rounds: ``(pairs, elements of each write)`` per round."""
    return ring_rounds(peers, op, elements, 1)
