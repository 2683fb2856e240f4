"""The symbolic executor: a schedule replayed on numpy buffers, in dependency order (section 15.5).

Not a cycle model: every accelerator issues its steps in order, each once
its receive slots ``0 .. wait-1`` have been applied; a step's chunk is
read from the sender's buffer when it issues and is applied at the receiver
in slot order (added, or copied). Two replays follow two opposite orders an engine could
take: *eager* issues every step that may issue before applying anything,
*lazy* applies every chunk the moment it may be applied, the accelerators
issuing from the highest-numbered down. A schedule that forgot a
dependency sends stale data in the eager replay; a send that races an
arrival overwriting its chunk may send the new data in the lazy one. Two
orders are evidence, not a proof that no order could go wrong.
"""

from __future__ import annotations

import numpy as np

from .schedule import ELEMENT_BYTES, Schedule

__all__ = ["ScheduleError", "check", "replay", "link_bytes"]


class ScheduleError(ValueError):
    """A schedule the engine could not execute, or that deadlocks; the message names the
    accelerator, the step and the slot."""


def check(schedule: Schedule) -> None:
    """The static rules of section 15.2.

    Raises
    ------
    ScheduleError
        A step names a peer or a range outside the fabric or the buffer, its ``wait``
        decreases or exceeds the accelerator's slots, or a receive slot is filled by no
        step or by two.
    """
    n, size = schedule.accelerators, schedule.buffer
    filled = {}
    for a, steps in enumerate(schedule.steps):
        wait = 0
        for i, s in enumerate(steps):
            where = f"accelerator {a} step {i}"
            if not 0 <= s.peer < n or s.peer == a:
                raise ScheduleError(f"{where}: peer {s.peer} must be another of 0..{n - 1}")
            if s.length < 0 or min(s.src, s.dst) < 0 or max(s.src, s.dst) + s.length > size:
                raise ScheduleError(f"{where}: {s.length} elements at {s.src} -> {s.dst} "
                                    f"leave the buffer of {size}")
            if not wait <= s.wait <= schedule.slots[a]:
                raise ScheduleError(f"{where}: wait {s.wait} must be {wait}.."
                                    f"{schedule.slots[a]} (never less than the step before)")
            wait = s.wait
            if (s.peer, s.slot) in filled:
                raise ScheduleError(f"{where}: slot {s.slot} of accelerator {s.peer} is "
                                    f"already filled by accelerator {filled[s.peer, s.slot][0]} "
                                    f"step {filled[s.peer, s.slot][1]}")
            filled[s.peer, s.slot] = (a, i)
    for a, count in enumerate(schedule.slots):
        for slot in range(count):
            if (a, slot) not in filled:
                raise ScheduleError(f"accelerator {a}: receive slot {slot} is filled by no "
                                    f"step, so a step waiting for it never starts")
    if len(filled) != sum(schedule.slots):
        extra = next((d, s) for d, s in filled if s >= schedule.slots[d])
        raise ScheduleError(f"accelerator {extra[0]}: slot {extra[1]} is beyond its "
                            f"{schedule.slots[extra[0]]} receive slots")


def replay(schedule: Schedule, inputs, *, eager: bool, link=None) -> list[np.ndarray]:
    """Run ``schedule`` on copies of ``inputs`` (one buffer per accelerator).

    ``link``, when given, carries the chunks: ``link(sends, buffers)`` gets the steps issued
    together, ``(accelerator, step)`` in issue order, and the buffers, and returns the data
    each delivers (a compressing link quantises them, section 16.6); by default a chunk is
    read from the sender's buffer as it is.

    Raises
    ------
    ScheduleError
        The static rules fail (:func:`check`), or no accelerator can move while some
        have steps left: the message names a waiting step and the slot it misses.
    """
    check(schedule)
    n = schedule.accelerators
    buffers = [np.array(x, copy=True) for x in inputs]
    issued, applied = [0] * n, [0] * n
    pending = [{} for _ in range(n)]
    sends = []

    def issue(a: int) -> int:
        """Start ``a``'s next step if it may; the peer it writes to, else -1."""
        if issued[a] == len(schedule.steps[a]):
            return -1
        s = schedule.steps[a][issued[a]]
        if s.wait > applied[a]:
            return -1
        sends.append((a, s))
        issued[a] += 1
        return s.peer

    def send() -> None:
        """Put the chunks of the steps issued since the last call on their links."""
        chunks = [buffers[a][s.src:s.src + s.length].copy() for a, s in sends] \
            if link is None else link(sends, buffers)
        for (_, s), data in zip(sends, chunks):
            pending[s.peer][s.slot] = (s, data)
        sends.clear()

    def apply(a: int) -> bool:
        got = pending[a].pop(applied[a], None)
        if got is None:
            return False
        s, data = got
        here = buffers[a][s.dst:s.dst + s.length]
        here[...] = here + data if s.reduce else data
        applied[a] += 1
        return True

    moved = True
    while moved:
        moved = False
        if eager:
            for a in range(n):
                while issue(a) >= 0:
                    moved = True
            send()
            for a in range(n):
                moved |= apply(a)
            continue
        # Lazy: a chunk is applied the moment it may be, and the accelerators issue from the
        # highest-numbered down, so a send meets the arrivals it does not wait for.
        for a in reversed(range(n)):
            peer = issue(a)
            while peer >= 0:
                moved = True
                send()
                while apply(peer):
                    pass
                peer = issue(a)
    for a in range(n):
        if issued[a] < len(schedule.steps[a]) or applied[a] < schedule.slots[a]:
            raise ScheduleError(_deadlock(schedule, issued, applied))
    return buffers


def _deadlock(schedule: Schedule, issued, applied) -> str:
    """One line naming a stuck step and the slot it waits for."""
    sender = {(s.peer, s.slot): (a, i) for a, steps in enumerate(schedule.steps)
              for i, s in enumerate(steps)}
    for a, steps in enumerate(schedule.steps):
        if issued[a] < len(steps):
            src, i = sender[a, applied[a]]
            return (f"deadlock: accelerator {a} step {issued[a]} waits for slot {applied[a]}, "
                    f"sent by accelerator {src} step {i}, which never issues")
    return "deadlock: chunks were sent but never applied"


def link_bytes(schedule: Schedule, peers, chunk_bytes=lambda length: length * ELEMENT_BYTES
               ) -> np.ndarray:
    """Payload bytes each link of the fabric carries (link ids of ``Topology.links``),
    each step's chunk following its route; ``chunk_bytes(length)`` is a chunk's bytes on the
    wire (binary32 by default; ``formats.compression.wire_bytes`` compressed)."""
    out = np.zeros(len(peers.topology.links), np.int64)
    for a, steps in enumerate(schedule.steps):
        for s in steps:
            for link in peers.route(a, s.peer):
                out[link] += chunk_bytes(s.length)
    return out
