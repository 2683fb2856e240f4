"""Model of the collective engine at every accelerator (section 15.8).

Each accelerator's engine walks its schedule (section 15.2) on its RDMA
engine: a step, once its ``wait`` is met, posts WRITEs of its chunk from the
buffer to the peer's staging area for the slot, then a one-word SEND of the
chunk's notification (from the outbox) to the peer's notification word for
the slot, all on one QP, so the channel's order puts the data in the peer's
memory before the notification's receive completion. The receiving engine
counts receive completions; its apply unit, when idle and owed one, reads
the next slot's notification word and, when it is there, adds (or copies)
the staged chunk into the buffer, one word a cycle. The host memory layout
is :class:`~superfabric.sim.collective.host_memory.Layout`.

:class:`CollectiveEngines` is every accelerator's engine as the RDMA model's
:class:`~superfabric.sim.rdma.host.HostDevice`.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ...config import FabricConfig
from ...formats.collective import LOCAL_KEY, REMOTE_KEY, notify_fields, write_words
from ...formats.rdma_wire import OP_SEND, OP_WRITE, STATUS_OK, payload_words
from ..rdma.dcqcn import NEVER
from ..rdma.host import HostDevice
from .adder import add
from .host_memory import Layout, elements_in, words_of
from .schedule import Schedule

__all__ = ["apply_cycles", "CollectiveEngine", "CollectiveEngines"]


def apply_cycles(words: int, dma_latency: int) -> int:
    """Cycles the apply unit is busy with a slot whose chunk covers ``words`` buffer words:
    the notification read (``dma_latency``), then one word a cycle, each written
    ``dma_latency`` cycles after its reads (section 15.8.3)."""
    return 1 + dma_latency + (dma_latency + words if words else 0)


class CollectiveEngine:
    """The collective engine of accelerator ``accelerator``: its sequencer (the steps) and
    its apply unit (the slots).

    Attributes
    ----------
    started : list of int
        Per step, the cycle it started (its WRs posted at the end of it).
    applied_at : list of int
        Per receive slot, the cycle at whose end it counted as applied.
    done_at : int
        The cycle after which it had started every step and applied every slot (-1: not yet).
    """

    def __init__(self, cfg: FabricConfig, accelerator: int, schedule: Schedule, layout: Layout,
                 dtype: str):
        rd = cfg.rdma
        self.accelerator = accelerator
        self._steps = schedule.steps[accelerator]
        self._slots = schedule.slots[accelerator]
        self._layout, self._dtype = layout, dtype
        self._latency = rd.dma_latency
        self._Q = rd.per_endpoint(cfg.endpoints)
        M = payload_words(cfg.switch.max_packet_flits)
        self._piece = write_words(M)
        self.started, self.applied_at = [], []
        self.done_at = -1 if self._steps or self._slots else 0
        self.arrivals = 0            # receive completions counted (from the cycle after)
        self._new = 0                # receive completions given in this cycle
        self._stale = -1             # arrivals when a notification read found nothing
        self._busy_until = -1        # the apply unit's last busy cycle
        self._writes = deque()       # (cycle, word address, value), the apply's writes due
        self._finish = None          # the slot the apply unit works on, else None
        self._seen = 0               # the next slot's notification word, start of the cycle
        self.errors = 0              # WRs completed with another status than 0

    @property
    def applied(self) -> int:
        """Receive slots applied."""
        return len(self.applied_at)

    def done(self) -> bool:
        """Started every step and applied every slot (section 15.2, rule 3)."""
        return len(self.started) == len(self._steps) and self.applied == self._slots

    def describe(self) -> str:
        """One line on where the engine is: the step it waits to start, the slots applied."""
        k = len(self.started)
        waiting = (f"step {k} waits for slot {self._steps[k].wait - 1}"
                   if k < len(self._steps) else "every step started")
        return (f"collective engine {self.accelerator}: {waiting}; {self.applied} of "
                f"{self._slots} slots applied, {self.arrivals} notifications received")

    def received(self) -> None:
        """The RDMA engine gave a receive completion: a notification has landed."""
        self._new += 1

    def _may_start(self) -> bool:
        k = len(self.started)
        return k < len(self._steps) and self._steps[k].wait <= self.applied

    def _may_read(self, cycle: int) -> bool:
        return (cycle > self._busy_until and self.arrivals > self.applied
                and self.arrivals > self._stale and self.applied < self._slots)

    def next_event(self, cycle: int) -> float:
        """``cycle`` if the engine acts in it, else ``NEVER`` (a receive completion wakes it)."""
        if cycle <= self._busy_until or self._may_start() or self._may_read(cycle):
            return cycle
        return NEVER

    def step(self, cycle: int, host, memory: list) -> bool:
        """The engine's ``cycle``, decided from the state at its start; its WRs join the
        send queues (``host``) and its writes reach ``memory`` at the end of the cycle.
        Returns whether it did anything."""
        acted = False
        if self._may_start():
            self._start(cycle, host)
            acted = True
        if self._may_read(cycle):
            self._read(cycle, memory)
            acted = True
        # A word written is progress: a long apply leaves the fabric idle, not stalled.
        while self._writes and self._writes[0][0] == cycle:
            _, address, value = self._writes.popleft()
            memory[address] = value
            acted = True
        if self._finish is not None and cycle == self._busy_until:
            self.applied_at.append(cycle)
            self._finish = None
            acted = True
        self.arrivals += self._new
        self._new = 0
        if self.applied < self._slots:
            self._seen = memory[self._layout.notify + self.applied]
        if self.done_at < 0 and self.done():
            self.done_at = cycle + 1
        return acted

    def _start(self, cycle: int, host) -> None:
        """Start the next step: its WRITEs and its notification's SEND, on QP ``peer mod Q``,
        offered from the next cycle."""
        k = len(self.started)
        s, lay, me = self._steps[k], self._layout, self.accelerator
        qp = s.peer % self._Q
        first, words = words_of(s.src, s.length)
        for off in range(0, words, self._piece):
            host.add(cycle + 1, me, qp, s.peer, OP_WRITE, LOCAL_KEY, first + off, REMOTE_KEY,
                     lay.staging_at(s.slot) + off, min(self._piece, words - off))
        host.add(cycle + 1, me, qp, s.peer, OP_SEND, LOCAL_KEY, lay.outbox + k, REMOTE_KEY,
                 lay.notify + s.slot, 1)
        self.started.append(cycle)

    def _read(self, cycle: int, memory: list) -> None:
        """Read the next slot's notification word (as it was at the start of ``cycle``); if
        it is there, compute the slot's words and when each is written."""
        D = self._latency
        word = self._seen
        f = notify_fields(word)
        if not f["valid"]:
            self._stale = self.arrivals
            self._busy_until = cycle + D
            return
        slot, dst, length = self.applied, f["dst"], f["length"]
        first, words = words_of(dst, length)
        self._busy_until = cycle + apply_cycles(words, D) - 1
        self._finish = slot
        if not words:
            return
        lay = self._layout
        staged = elements_in(memory[lay.staging_at(slot):lay.staging_at(slot) + words_of(
            f["parity"], length)[1]], self._dtype)[f["parity"]:f["parity"] + length]
        here = elements_in(memory[first:first + words], self._dtype)
        lo = dst - 2 * first
        here[lo:lo + length] = add(here[lo:lo + length], staged) if f["reduce"] else staged
        start = cycle + 2 * D + 1     # word j is read at cycle + D + 1 + j, written D later
        self._writes.extend((start + j, first + j, v)
                            for j, v in enumerate(here.view(np.uint64).tolist()))


class CollectiveEngines(HostDevice):
    """Every accelerator's collective engine, as the RDMA model's host device."""

    def __init__(self, cfg: FabricConfig, schedule: Schedule, layout: Layout, dtype: str):
        self.engines = [CollectiveEngine(cfg, a, schedule, layout, dtype)
                        for a in range(schedule.accelerators)]
        self._host = self._memories = None
        self.done = all(e.done() for e in self.engines)

    def attach(self, host, memories) -> None:
        self._host, self._memories = host, memories

    def completed(self, e: int, cycle: int, completion) -> None:
        if completion[2] != STATUS_OK:
            self.engines[e].errors += 1

    def received(self, e: int, cycle: int, rx_completion) -> None:
        self.engines[e].received()

    def step(self, cycle: int) -> bool:
        acted = False
        for engine, memory in zip(self.engines, self._memories):
            acted |= engine.step(cycle, self._host, memory)
        self.done = all(e.done_at >= 0 for e in self.engines)
        return acted

    def next_event(self, cycle: int) -> float:
        return min(e.next_event(cycle) for e in self.engines)

    def stuck(self) -> str:
        return next((e.describe() for e in self.engines if not e.done()), "")

    def timeline(self) -> dict:
        """Every engine's steps and slots in time: ``started`` rows ``(accelerator, step,
        cycle)`` and ``applied`` rows ``(accelerator, slot, cycle)`` (int64)."""
        def rows(cycles_of):
            out = [(e.accelerator, i, c) for e in self.engines for i, c in enumerate(cycles_of(e))]
            return np.array(out, np.int64).reshape(-1, 3)
        return {"started": rows(lambda e: e.started), "applied": rows(lambda e: e.applied_at)}

    @property
    def completion_cycle(self) -> int:
        """The cycle after the last engine was done: the collective's time."""
        return max(e.done_at for e in self.engines)
