"""An accelerator's host memory for a collective on the RDMA fabric (section 15.8.1).

Every accelerator's memory has the same layout, so a sender computes the
address of any receive slot from the slot alone: its buffer (two 32-bit
elements a 64-bit word, element ``2k`` in the low half of word ``k``), the
*outbox* (one notification word per step, laid down with the schedule),
then, page-aligned, the *staging* area (``capacity`` words per receive slot,
never reused within a run) and the *notification* area (one word per slot).
Two registrations, at an identity page table: the local key over the buffer
and the outbox (local read), the remote key over staging and notifications
(remote write, every other accelerator), so no peer can write a buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...config import ConfigError, FabricConfig
from ...formats.collective import LOCAL_KEY, REMOTE_KEY, notify_word
from ...formats.rdma_wire import ACCESS_LOCAL_READ, ACCESS_REMOTE_WRITE
from ..rdma.traffic import WR_COLUMNS, RdmaWorkload, key_columns, mask_columns
from .reference import DTYPES
from .schedule import Schedule

__all__ = ["Layout", "words_of", "elements_in"]


def words_of(src: int, length: int) -> tuple[int, int]:
    """The buffer words a chunk of ``length`` elements at element ``src`` covers:
    ``(first word, words)``."""
    return src // 2, (src % 2 + length + 1) // 2 if length else 0


def elements_in(words: np.ndarray, dtype: str) -> np.ndarray:
    """64-bit memory words as the 32-bit elements they hold (low half first)."""
    return np.ascontiguousarray(words, np.uint64).view(DTYPES[dtype])


@dataclass(frozen=True)
class Layout:
    """Where the buffer, the outbox, the staging and the notifications lie (word addresses,
    virtual = physical).

    Attributes
    ----------
    buffer_words : int
        The buffer, from word 0.
    outbox : int
        The outbox: the notification word of step ``k`` at ``outbox + k``.
    staging : int
        The staging area, page-aligned: slot ``s`` at ``staging + s * capacity``.
    capacity : int
        Words a slot's staging holds: the most words any step's chunk covers.
    notify : int
        The notification word of slot ``s`` at ``notify + s``.
    words : int
        Words in use.
    """

    buffer_words: int
    outbox: int
    staging: int
    capacity: int
    notify: int
    words: int

    @classmethod
    def of(cls, cfg: FabricConfig, schedule: Schedule) -> "Layout":
        """The layout of ``schedule`` on ``cfg``'s accelerators.

        Raises
        ------
        ConfigError
            ``rdma.memory_words`` or the page table (``rdma.pages`` of
            ``rdma.page_words``) is too small for it; one line with the size needed.
        """
        rd = cfg.rdma
        page = rd.page_words
        buffer_words = (schedule.buffer + 1) // 2
        steps = max(len(s) for s in schedule.steps)
        capacity = max((words_of(s.src, s.length)[1] for steps_ in schedule.steps
                        for s in steps_), default=0)
        staging = -(-(buffer_words + steps) // page) * page
        notify = staging + max(schedule.slots) * capacity
        words = notify + max(schedule.slots)
        if words > rd.memory_words:
            need = 1 << (words - 1).bit_length()
            raise ConfigError(f"rdma.memory_words = {rd.memory_words}: the {schedule.op} of "
                              f"{schedule.elements * 4} bytes by {schedule.algorithm} needs "
                              f"{words} words per accelerator (buffer, outbox, staging, "
                              f"notifications); must be at least {need}")
        if words > rd.pages * page:
            need = 1 << (-(-words // page) - 1).bit_length()
            raise ConfigError(f"rdma.pages = {rd.pages}: the page table maps {rd.pages * page} "
                              f"words, the collective needs {words}; must be at least {need}")
        return cls(buffer_words, buffer_words, staging, capacity, notify, words)

    def staging_at(self, slot: int) -> int:
        """The first staging word of receive slot ``slot``."""
        return self.staging + slot * self.capacity

    def workload(self, cfg: FabricConfig, schedule: Schedule, data, *, seed: int,
                 pattern: str) -> RdmaWorkload:
        """The run's tables and memories, with no WR of its own (the collective engines
        post them): every accelerator's buffer holds ``data[a]``, its outbox the
        notification words of its steps."""
        E, rd = cfg.endpoints, cfg.rdma
        keys = np.zeros((E, rd.keys, key_columns(E)), np.int64)
        everyone = (1 << E) - 1
        for a in range(E):
            keys[a, LOCAL_KEY] = (1, LOCAL_KEY, 0, self.staging, 0, ACCESS_LOCAL_READ,
                                  *mask_columns(0, E))
            keys[a, REMOTE_KEY] = (1, REMOTE_KEY, self.staging, self.words - self.staging,
                                   self.staging // rd.page_words, ACCESS_REMOTE_WRITE,
                                   *mask_columns(everyone & ~(1 << a), E))
        pages = rd.memory_words // rd.page_words
        page_table = np.tile(np.arange(rd.pages, dtype=np.int64) % pages, (E, 1))
        memory = np.zeros((E, rd.memory_words), np.uint64)
        for a, x in enumerate(data):
            padded = np.zeros(2 * self.buffer_words, x.dtype)
            padded[:len(x)] = x
            memory[a, :self.buffer_words] = padded.view(np.uint64)
            for k, s in enumerate(schedule.steps[a]):
                memory[a, self.outbox + k] = notify_word(reduce=int(s.reduce), parity=s.src % 2,
                                                         dst=s.dst, length=s.length)
        wr = {name: np.zeros(0, dtype) for name, dtype in WR_COLUMNS.items()}
        return RdmaWorkload(pattern, 0.0, seed, 0, wr, keys, page_table, memory)

    def buffers(self, memory: np.ndarray, schedule: Schedule, dtype: str) -> list[np.ndarray]:
        """Every accelerator's buffer in ``memory`` (``[E, memory_words]``)."""
        return [elements_in(m[:self.buffer_words], dtype)[:schedule.buffer].copy()
                for m in np.asarray(memory, np.uint64)]
