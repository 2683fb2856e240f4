"""Best-fit over free extents of pages, coalescing on free (section 10.14.3).

The free pages of each accelerator are extents (runs of consecutive pages). A request
of ``n`` pages takes the first ``n`` pages of the smallest free extent of at least
``n`` pages in the whole pool (on a tie, the one at the lowest global address); a
free joins the pages to the free extents just before and after them in the same
window, so the free pages of an accelerator with nothing allocated are one extent.
"""

from __future__ import annotations

from .allocator import PoolAllocator, Window

__all__ = ["BestFit"]


class BestFit(PoolAllocator):
    """Best-fit with coalescing: an allocation gets exactly the pages its size covers."""

    name = "best-fit"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._starts: dict[int, int] = {}      # first page -> pages of a free extent
        self._ends: dict[int, int] = {}        # one past its last page -> first page

    def free_extents(self) -> list[tuple[int, int]]:
        return sorted(self._starts.items())

    def largest_request_pages(self) -> int:
        return max((w.pages for w in self.windows), default=0)

    def _insert(self, first: int, pages: int) -> None:
        self._starts[first] = pages
        self._ends[first + pages] = first

    def _remove(self, first: int) -> int:
        pages = self._starts.pop(first)
        del self._ends[first + pages]
        return pages

    def _add_free(self, window: Window) -> None:
        self._insert(window.first, window.pages)

    def _place(self, pages: int) -> tuple[int, int] | None:
        fits = [(size, first) for first, size in self._starts.items() if size >= pages]
        if not fits:
            return None
        size, first = min(fits)
        self._remove(first)
        if size > pages:
            self._insert(first + pages, size - pages)
        return first, pages

    def _release(self, first: int, pages: int) -> None:
        w = self.window_of(first)
        # Extents never reach across windows: the pages there are another accelerator's.
        if first != w.first and first in self._ends:
            before = self._ends[first]
            pages += self._remove(before)
            first = before
        end = first + pages
        if end != w.first + w.pages and end in self._starts:
            pages += self._remove(end)
        self._insert(first, pages)
