"""The pooled memory's segment table and its translation (section 10.14).

One table per accelerator, all holding the same words: entry ``s`` maps the
global page ``s`` (global addresses ``s * page_words`` to ``(s + 1) *
page_words - 1``) to the accelerator holding it, the key of that memory and
its local virtual address. A global address translates to ``(accelerator,
rkey, laddr)`` in one lookup, or faults when its page is beyond the table or
not mapped; the target's key and page tables (:class:`.keys.KeyTable`) then
check and translate ``laddr`` as for any remote access.
"""

from typing import NamedTuple

import numpy as np

from ...formats import pool
from ...formats import rdma_wire as wire

__all__ = ["SegmentTable", "SegmentFault", "Translation"]

_FIELDS = [name for name, _ in pool.SEGMENT_ENTRY_FIELDS]
#: Where ``laddr`` starts in a table word.
_LADDR_SHIFT = sum(width for _, width in pool.SEGMENT_ENTRY_FIELDS[:_FIELDS.index("laddr")])


class Translation(NamedTuple):
    """Where a global address is: the accelerator, the key of its memory there and the
    local virtual address under that key (the ``dst``, ``rkey`` and ``raddr`` of a work
    request)."""
    accelerator: int
    rkey: int
    laddr: int


class SegmentFault(LookupError):
    """A global address the table does not map: beyond the table, or its page unmapped.

    ``gaddr`` is the address and ``reason`` says which of the two.
    """

    def __init__(self, gaddr: int, reason: str):
        super().__init__(f"global address {gaddr:#x}: {reason}")
        self.gaddr = gaddr
        self.reason = reason


class SegmentTable:
    """The segment table of section 10.14: ``entries`` words, one per global page of
    ``page_words`` words.

    Written one word at a time through :meth:`write`, as the RTL's table port will be,
    or a run of pages at once (:meth:`map`, :meth:`unmap`); read by :meth:`translate`.
    """

    def __init__(self, *, entries: int, page_words: int):
        if not isinstance(page_words, int) or page_words < 1 or page_words & (page_words - 1):
            raise ValueError(f"page_words = {page_words!r}: must be a power of two")
        limit = 1 << pool.segment_bits(page_words)
        if not isinstance(entries, int) or not 1 <= entries <= limit:
            raise ValueError(f"entries = {entries!r}: must be an integer in 1..{limit} (global "
                             f"addresses have {pool.GVA_BITS} bits, pages {page_words} words)")
        self.entries = entries
        self.page_words = page_words
        self._shift = pool.segment_shift(page_words)
        self._words = np.zeros(entries, dtype=np.uint64)

    def _check_range(self, first: int, pages: int) -> None:
        if not (0 <= first and pages >= 1 and first + pages <= self.entries):
            raise ValueError(f"segments {first}..{first + pages - 1}: must lie in "
                             f"0..{self.entries - 1}")

    def write(self, index: int, word: int) -> None:
        """Load entry ``index`` with ``word`` (:func:`~superfabric.formats.pool.segment_word`,
        or 0 to unmap the page)."""
        self._check_range(index, 1)
        if not 0 <= word < 1 << pool.SEGMENT_WORD_BITS:
            raise ValueError(f"word = {word!r}: must fit {pool.SEGMENT_WORD_BITS} bits")
        entry = pool.segment_entry(word)
        if entry["laddr"] & (self.page_words - 1):
            raise ValueError(f"laddr = {entry['laddr']:#x}: must be aligned to a page of "
                             f"{self.page_words} words")
        self._words[index] = word

    def read(self, index: int) -> int:
        """The word of entry ``index``."""
        self._check_range(index, 1)
        return int(self._words[index])

    def map(self, first: int, pages: int, *, accelerator: int, rkey: int, laddr: int) -> None:
        """Map global pages ``first .. first + pages - 1`` to consecutive pages from
        ``laddr`` under ``rkey`` at ``accelerator``: the words :meth:`write` would load one by
        one."""
        self._check_range(first, pages)
        if laddr + pages * self.page_words > 1 << wire.VA_BITS:
            raise ValueError(f"laddr = {laddr:#x}: {pages} pages from it pass the "
                             f"{wire.VA_BITS}-bit local address space")
        self.write(first, pool.segment_word(accelerator=accelerator, rkey=rkey, laddr=laddr))
        # laddr stays within its field (checked above), so each page's address adds to the
        # first page's word.
        step = np.uint64(self.page_words << _LADDR_SHIFT)
        self._words[first:first + pages] = \
            self._words[first] + np.arange(pages, dtype=np.uint64) * step

    def unmap(self, first: int, pages: int) -> None:
        """Clear global pages ``first .. first + pages - 1``: their addresses fault."""
        self._check_range(first, pages)
        self._words[first:first + pages] = 0

    def mapped(self) -> int:
        """Pages mapped (valid entries)."""
        return int(np.count_nonzero(self._words & np.uint64(1)))

    def translate(self, gaddr: int) -> Translation:
        """Global address ``gaddr`` as (accelerator, rkey, local address); raises
        :class:`SegmentFault` when its page is beyond the table or not mapped."""
        if not 0 <= gaddr < 1 << pool.GVA_BITS:
            raise SegmentFault(gaddr, f"not a {pool.GVA_BITS}-bit global address")
        index = gaddr >> self._shift
        if index >= self.entries:
            raise SegmentFault(gaddr, f"page {index} is beyond the table's {self.entries} "
                                      f"entries")
        entry = pool.segment_entry(int(self._words[index]))
        if not entry["valid"]:
            raise SegmentFault(gaddr, f"page {index} is not mapped")
        return Translation(entry["accelerator"], entry["rkey"],
                           entry["laddr"] | gaddr & (self.page_words - 1))
