"""A collective's schedule: per accelerator, the ordered steps its engine executes (section 15.2).

The algorithms build schedules with :class:`Builder`, in the order of an
idealised synchronous run (a step is created after every step whose chunk
it waits for), which makes the receive slots' order a valid order of
application and the schedule free of deadlock by construction; the
executor (``superfabric.sim.collective.executor``) checks it anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ...formats.collective import OFFSET_BITS, SLOT_BITS, step_words

__all__ = ["OPS", "REDUCING", "ELEMENT_BYTES", "Step", "Schedule", "Builder", "blocks",
           "turn_round", "elements_of"]

#: The operations, in nccl-tests' names.
OPS = ("allreduce", "reducescatter", "allgather", "alltoall", "broadcast")
#: The operations that add the accelerators' data.
REDUCING = ("allreduce", "reducescatter")
#: Bytes of an element (int32 and binary32 alike).
ELEMENT_BYTES = 4


class Step(NamedTuple):
    """One step of an accelerator's schedule (fields as ``formats.collective.STEP_FIELDS``)."""

    peer: int
    src: int
    dst: int
    length: int
    reduce: bool
    slot: int
    wait: int

    def words(self) -> tuple[int, ...]:
        """The step's schedule memory words."""
        return step_words(peer=self.peer, reduce=int(self.reduce), src=self.src, dst=self.dst,
                          length=self.length, slot=self.slot, wait=self.wait)


@dataclass(frozen=True)
class Schedule:
    """What every accelerator's engine executes for one collective.

    Attributes
    ----------
    op, algorithm : str
        The operation (:data:`OPS`) and the algorithm that built the schedule.
    elements : int
        The message: elements per accelerator (nccl-tests' count).
    buffer : int
        Elements of every accelerator's buffer (twice ``elements`` for all-to-all:
        input, then output).
    steps : tuple of tuple of Step
        Per accelerator, its steps in execution order.
    slots : tuple of int
        Per accelerator, the chunks it receives (its receive slots ``0 .. slots-1``).
    """

    op: str
    algorithm: str
    elements: int
    buffer: int
    steps: tuple
    slots: tuple

    @property
    def accelerators(self) -> int:
        """Accelerators taking part."""
        return len(self.steps)

    @property
    def step_count(self) -> int:
        """The most steps any accelerator executes."""
        return max(len(s) for s in self.steps)

    def words(self, accelerator: int) -> list[int]:
        """The schedule memory image of ``accelerator``: its steps' words in order."""
        return [w for step in self.steps[accelerator] for w in step.words()]


class Builder:
    """Collects steps in creation order; each receiver numbers its slots in that order.

    With ``segment > 0`` every send is cut into segments of at most ``segment``
    elements, each its own step and slot, and a segment waits only for the segments
    of the sends it depends on that overlap it: so a chunk's first segment travels
    while the rest of the chunk it depends on is still arriving (section 15.2).
    """

    def __init__(self, n: int, op: str, algorithm: str, elements: int, buffer: int,
                 segment: int = 0):
        if buffer >= 1 << OFFSET_BITS:
            raise ValueError(f"buffer = {buffer} elements: must be below {1 << OFFSET_BITS}")
        if not isinstance(segment, int) or segment < 0:
            raise ValueError(f"segment = {segment!r}: must be a whole number of elements >= 0")
        self.n, self.op, self.algorithm = n, op, algorithm
        self.elements, self.buffer, self.segment = elements, buffer, segment
        self._steps = [[] for _ in range(n)]
        self._slots = [0] * n
        self._arrival = []           # per send: its receiver and its (lo, hi, slot) pieces there

    def _cut(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """``lo .. hi`` in segments of ``segment`` elements from ``lo``, the last the rest."""
        if not self.segment or hi - lo <= self.segment:
            return [(lo, hi)]
        return [(a, min(a + self.segment, hi)) for a in range(lo, hi, self.segment)]

    def send(self, src: int, dst: int, lo: int, hi: int, *, reduce: bool, after=(),
             dst_lo: int | None = None) -> int:
        """Add a step per segment: ``src`` writes its elements ``lo .. hi-1`` to ``dst`` (at
        ``dst_lo``, default ``lo``) once the chunks of the sends ``after`` (ids this method
        returned, ``None`` ignored) that overlap the segment have been applied at ``src``.
        Returns the new send's id."""
        steps = self._steps[src]
        pieces = []
        for dep in after:
            if dep is None:
                continue
            at, arrived = self._arrival[dep]
            if at != src:
                raise ValueError(f"send {dep} arrives at {at}, not at {src}")
            pieces += arrived
        shift = (lo if dst_lo is None else dst_lo) - lo
        arrived = []
        for a, b in self._cut(lo, hi):
            # A piece's data matters only where it overlaps the segment. An empty segment
            # or piece has no range to compare, so it counts as overlapping: the waits of
            # small messages' empty chunks stay those of whole chunks.
            wait = max([steps[-1].wait if steps else 0]
                       + [slot + 1 for c, d, slot in pieces
                          if max(a, c) < min(b, d) or a == b or c == d])
            slot = self._slots[dst]
            if slot >= (1 << SLOT_BITS) - 1:
                raise ValueError(f"accelerator {dst}: more than {(1 << SLOT_BITS) - 2} "
                                 f"chunks; a larger segment makes fewer")
            self._slots[dst] += 1
            steps.append(Step(dst, a, a + shift, b - a, reduce, slot, wait))
            arrived.append((a + shift, b + shift, slot))
        self._arrival.append((dst, arrived))
        return len(self._arrival) - 1

    def schedule(self) -> Schedule:
        """The schedule built so far."""
        return Schedule(self.op, self.algorithm, self.elements, self.buffer,
                        tuple(tuple(s) for s in self._steps), tuple(self._slots))


def blocks(lo: int, hi: int, parts: int) -> list[tuple[int, int]]:
    """``lo .. hi`` cut into ``parts`` balanced blocks: block ``i`` starts at
    ``lo + (hi - lo) * i // parts`` (some are empty when ``parts`` exceeds the length)."""
    cuts = [lo + (hi - lo) * i // parts for i in range(parts + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


def turn_round(turn) -> tuple[tuple, tuple]:
    """A turn of writes ``(src, dst, lo, hi, ...)`` (the chunk ``lo .. hi``) as an
    alpha-beta round: its ``(src, dst)`` pairs and the elements each writes."""
    return (tuple((src, dst) for src, dst, *_ in turn),
            tuple(hi - lo for _, _, lo, hi, *_ in turn))


def elements_of(nbytes: int) -> int:
    """Elements in a message of ``nbytes`` bytes.

    Raises
    ------
    ValueError
        ``nbytes`` is not a positive multiple of :data:`ELEMENT_BYTES`.
    """
    if not isinstance(nbytes, int) or nbytes <= 0 or nbytes % ELEMENT_BYTES:
        raise ValueError(f"bytes = {nbytes!r}: must be a positive multiple of {ELEMENT_BYTES}")
    return nbytes // ELEMENT_BYTES
