"""What every pool allocator shares: accelerators joining the pool, handles, and the
segment table entries each allocation writes and each free clears (section 10.14.3).

An accelerator joins with ``pages`` pages of its memory, registered under ``rkey`` from
local address ``va``; those pages become the next ``pages`` global pages, its
**window** of the global address space, in the order accelerators join, so one can
join while allocations are live without moving any. An allocation lies on one
accelerator: its pages are consecutive in the window, hence in global and in local
addresses, and its global address is that of its first page. A subclass chooses the
pages (:meth:`PoolAllocator._place`) and takes them back (:meth:`PoolAllocator._release`).
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from typing import NamedTuple

from ...formats import pool
from ...formats import rdma_wire as wire
from ..rdma.segments import SegmentTable

__all__ = ["Allocation", "Window", "PoolAllocator", "WORD_BYTES"]

#: Bytes of a 64-bit word, the unit of every RDMA address.
WORD_BYTES = 8


class Window(NamedTuple):
    """An accelerator's pages in the pool: global pages ``first .. first + pages - 1``,
    which are its local addresses from ``va`` under ``rkey``."""
    accelerator: int
    first: int
    pages: int
    rkey: int
    va: int


class Allocation(NamedTuple):
    """A live allocation: its ``handle``, where it lies, the ``pages`` set aside for it,
    the ``mapped`` pages its ``nbytes`` cover (the segment table maps these; a buddy
    block's pages beyond them stay unmapped, so an overrun faults)."""
    handle: int
    gaddr: int
    accelerator: int
    first: int
    pages: int
    mapped: int
    nbytes: int


class PoolAllocator(ABC):
    """An allocator of the pool's pages that keeps ``table`` (the segment table every
    accelerator loads) in step: an allocation maps its pages, a free unmaps them."""

    #: The policy's name on the command line.
    name = ""

    def __init__(self, *, table: SegmentTable):
        if not isinstance(table, SegmentTable):
            raise TypeError(f"table = {table!r}: must be a SegmentTable")
        self.table = table
        self.page_words = table.page_words
        self.page_bytes = table.page_words * WORD_BYTES
        self._windows: list[Window] = []
        self._live: dict[int, Allocation] = {}
        self._freed: set[int] = set()
        self._next_handle = 0
        self._allocated_pages = 0
        self._requested_bytes = 0

    # -- the pool -----------------------------------------------------------------------

    @property
    def windows(self) -> tuple[Window, ...]:
        """The accelerators' windows, in global order (the order they joined)."""
        return tuple(self._windows)

    @property
    def total_pages(self) -> int:
        """Pages of every accelerator in the pool."""
        return sum(w.pages for w in self._windows)

    def add_accelerator(self, *, accelerator: int, pages: int, rkey: int, va: int = 0) -> Window:
        """Join ``pages`` pages of ``accelerator``'s memory, registered under ``rkey`` from
        local address ``va``, to the pool, live allocations or not; returns its window."""
        for name, value, high in (("accelerator", accelerator, (1 << pool.ACCELERATOR_BITS) - 1),
                                  ("rkey", rkey, (1 << wire.KEY_BITS) - 1),
                                  ("va", va, (1 << wire.VA_BITS) - 1)):
            if not isinstance(value, int) or not 0 <= value <= high:
                raise ValueError(f"{name} = {value!r}: must be an integer in 0..{high}")
        if any(w.accelerator == accelerator for w in self._windows):
            raise ValueError(f"accelerator = {accelerator}: already in the pool")
        if va % self.page_words:
            raise ValueError(f"va = {va:#x}: must be aligned to a page of {self.page_words} "
                             f"words")
        room = ((1 << wire.VA_BITS) - va) // self.page_words
        if not isinstance(pages, int) or not 1 <= pages <= room:
            raise ValueError(f"pages = {pages!r}: must be an integer in 1..{room} (the "
                             f"{wire.VA_BITS}-bit local addresses from va = {va:#x})")
        first = self.total_pages
        if first + pages > self.table.entries:
            raise ValueError(f"pages = {pages}: the segment table has {self.table.entries} "
                             f"entries, {self.table.entries - first} of them left")
        window = Window(accelerator, first, pages, rkey, va)
        self._windows.append(window)
        self._add_free(window)
        return window

    def window_of(self, page: int) -> Window:
        """The window holding global page ``page``."""
        k = bisect.bisect_right([w.first for w in self._windows], page) - 1
        if k < 0 or page >= self._windows[k].first + self._windows[k].pages:
            raise ValueError(f"page = {page}: not in the pool's {self.total_pages} pages")
        return self._windows[k]

    # -- allocations --------------------------------------------------------------------

    def allocate(self, nbytes: int) -> Allocation | None:
        """Set aside pages for ``nbytes`` bytes and map them; None when no free pages fit
        now (the request is sound but the pool is too full or too fragmented)."""
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 1:
            raise ValueError(f"size = {nbytes!r}: must be a positive number of bytes")
        need = -(-nbytes // self.page_bytes)
        largest = self.largest_request_pages()
        if need > largest:
            raise ValueError(f"size = {nbytes:,} bytes: above the pool; an allocation lies on "
                             f"one accelerator and at most {largest * self.page_bytes:,} bytes "
                             f"fit there")
        placed = self._place(need)
        if placed is None:
            return None
        first, pages = placed
        w = self.window_of(first)
        self.table.map(first, need, accelerator=w.accelerator, rkey=w.rkey,
                       laddr=w.va + (first - w.first) * self.page_words)
        a = Allocation(self._next_handle, first * self.page_words, w.accelerator, first, pages,
                       need, nbytes)
        self._live[a.handle] = a
        self._next_handle += 1
        self._allocated_pages += pages
        self._requested_bytes += nbytes
        return a

    def free(self, handle: int) -> None:
        """Unmap and take back the pages of allocation ``handle``."""
        a = self._live.pop(handle, None)
        if a is None:
            why = "already freed" if handle in self._freed else "not allocated by this pool"
            raise KeyError(f"handle {handle!r}: {why}")
        self._freed.add(handle)
        self.table.unmap(a.first, a.mapped)
        self._allocated_pages -= a.pages
        self._requested_bytes -= a.nbytes
        self._release(a.first, a.pages)

    @property
    def live(self) -> tuple[Allocation, ...]:
        """The live allocations, oldest first."""
        return tuple(self._live.values())

    @property
    def allocated_pages(self) -> int:
        """Pages set aside for the live allocations."""
        return self._allocated_pages

    @property
    def requested_bytes(self) -> int:
        """Bytes the live allocations asked for."""
        return self._requested_bytes

    def largest_free(self) -> dict[int, int]:
        """accelerator -> pages of its largest free extent (block), 0 when it has none."""
        largest = {w.accelerator: 0 for w in self._windows}
        for first, pages in self.free_extents():
            acc = self.window_of(first).accelerator
            largest[acc] = max(largest[acc], pages)
        return largest

    # -- the policy -----------------------------------------------------------------------

    @abstractmethod
    def free_extents(self) -> list[tuple[int, int]]:
        """The free (first global page, pages) extents (blocks), by address."""

    @abstractmethod
    def largest_request_pages(self) -> int:
        """The most pages one allocation can ever get, the pool empty."""

    @abstractmethod
    def _add_free(self, window: Window) -> None:
        """A window joined: its pages are free."""

    @abstractmethod
    def _place(self, pages: int) -> tuple[int, int] | None:
        """Set aside free pages for a request of ``pages``: (first global page, pages set
        aside), or None when none fit."""

    @abstractmethod
    def _release(self, first: int, pages: int) -> None:
        """Pages ``first .. first + pages - 1``, as :meth:`_place` set them aside, are free."""
