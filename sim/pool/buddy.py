"""The buddy allocator: power-of-two blocks of pages, split and merged (section 10.14.3).

Each accelerator's pages are cut, from its first page, into the largest aligned
power-of-two blocks that fit (one block when its pages are a power of two): its top
blocks. A request of ``n`` pages takes a block of ``2^k >= n`` pages, ``k`` the
smallest: the smallest free block of at least that order in the pool (on a tie, at the
lowest global address), halved until it is of order ``k``, each upper half freed. A
freed block merges with its buddy (the block whose local page number differs in bit
``k`` only) while that buddy is free, whole and within the window, so an accelerator
with nothing allocated is its top blocks again.
"""

from __future__ import annotations

from .allocator import PoolAllocator, Window

__all__ = ["Buddy"]


def _order(pages: int) -> int:
    """The smallest ``k`` with ``2^k >= pages``."""
    return (pages - 1).bit_length()


class Buddy(PoolAllocator):
    """The binary buddy system over each accelerator's pages."""

    name = "buddy"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._free: dict[int, int] = {}        # first page of a free block -> its order

    def free_extents(self) -> list[tuple[int, int]]:
        return sorted((first, 1 << k) for first, k in self._free.items())

    def largest_request_pages(self) -> int:
        # The first top block of a window is its largest.
        return max((1 << (w.pages.bit_length() - 1) for w in self.windows), default=0)

    def _add_free(self, window: Window) -> None:
        offset = 0
        while offset < window.pages:
            k = (window.pages - offset).bit_length() - 1
            # offset is a sum of larger powers of two, so the block is aligned.
            self._free[window.first + offset] = k
            offset += 1 << k

    def _place(self, pages: int) -> tuple[int, int] | None:
        want = _order(pages)
        fits = [(k, first) for first, k in self._free.items() if k >= want]
        if not fits:
            return None
        k, first = min(fits)
        del self._free[first]
        while k > want:
            k -= 1
            self._free[first + (1 << k)] = k
        return first, 1 << want

    def _release(self, first: int, pages: int) -> None:
        w = self.window_of(first)
        local, k = first - w.first, _order(pages)
        while True:
            buddy = local ^ (1 << k)
            # A top block's buddy would reach past the window (its pages are fewer than
            # twice the block), so the bounds check also stops merges at the top.
            if buddy + (1 << k) > w.pages or self._free.get(w.first + buddy) != k:
                break
            del self._free[w.first + buddy]
            local, k = min(local, buddy), k + 1
        self._free[w.first + local] = k
