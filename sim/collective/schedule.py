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
           "elements_of"]

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
    """Collects steps in creation order; each receiver numbers its slots in that order."""

    def __init__(self, n: int, op: str, algorithm: str, elements: int, buffer: int):
        if buffer >= 1 << OFFSET_BITS:
            raise ValueError(f"buffer = {buffer} elements: must be below {1 << OFFSET_BITS}")
        self.n, self.op, self.algorithm = n, op, algorithm
        self.elements, self.buffer = elements, buffer
        self._steps = [[] for _ in range(n)]
        self._slots = [0] * n
        self._arrival = []

    def send(self, src: int, dst: int, lo: int, hi: int, *, reduce: bool, after=(),
             dst_lo: int | None = None) -> int:
        """Add a step: ``src`` writes its elements ``lo .. hi-1`` to ``dst`` (at ``dst_lo``,
        default ``lo``) once the chunks of the sends ``after`` (ids this method returned,
        ``None`` ignored) have been applied at ``src``. Returns the new send's id."""
        steps = self._steps[src]
        wait = steps[-1].wait if steps else 0
        for dep in after:
            if dep is None:
                continue
            at, slot = self._arrival[dep]
            if at != src:
                raise ValueError(f"send {dep} arrives at {at}, not at {src}")
            wait = max(wait, slot + 1)
        slot = self._slots[dst]
        if slot >= (1 << SLOT_BITS) - 1:
            raise ValueError(f"accelerator {dst}: more than {(1 << SLOT_BITS) - 2} chunks")
        self._slots[dst] += 1
        steps.append(Step(dst, lo, lo if dst_lo is None else dst_lo, hi - lo, reduce, slot,
                          wait))
        self._arrival.append((dst, slot))
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
