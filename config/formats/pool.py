"""The pooled memory's global address space and its segment table entry, as plain data.

A global address names a 64-bit word of the pool, which joins every
accelerator's memory. The segment table, one copy at every accelerator,
holds one entry per page of the global address space (a page of the page
tables' size, ``rdma.page_words`` words): the accelerator that holds the
page, the key its memory is registered under there, and the page's local
virtual address under that key. The target's key and page tables
(``docs/spec/rdma.md`` section 10.3) finish the translation as for any
remote access. Section 10.14 of the specification has the layout and the
translation rule. All fields are LSB first.
"""

from .rdma_wire import KEY_BITS, VA_BITS, pack, unpack

__all__ = ["ACCELERATOR_BITS", "GVA_BITS", "SEGMENT_ENTRY_FIELDS", "SEGMENT_ENTRY_BITS",
           "SEGMENT_WORD_BITS", "segment_word", "segment_entry", "segment_shift",
           "segment_bits"]

#: An accelerator's number: the configuration allows at most 1024 endpoints.
ACCELERATOR_BITS = 10
#: A global address, in words: every word of every accelerator of the largest fabric
#: (1024 endpoints of at most 2^24 words each), so the pool never runs out of names
#: before it runs out of memory.
GVA_BITS = ACCELERATOR_BITS + VA_BITS

#: One segment table entry: ``valid`` (the page is mapped; a lookup of an invalid entry
#: faults), the ``accelerator`` holding the page, the ``rkey`` of its memory there and the
#: page's local virtual address ``laddr`` under that key (page aligned).
SEGMENT_ENTRY_FIELDS = (("valid", 1), ("accelerator", ACCELERATOR_BITS), ("rkey", KEY_BITS),
                        ("laddr", VA_BITS))
SEGMENT_ENTRY_BITS = sum(width for _, width in SEGMENT_ENTRY_FIELDS)
#: An entry is loaded through the table port as one 64-bit word, its upper bits zero.
SEGMENT_WORD_BITS = 64


def segment_word(*, accelerator: int, rkey: int, laddr: int) -> int:
    """The table word of a valid entry mapping a page to ``laddr`` under ``rkey`` at
    ``accelerator``."""
    return pack(SEGMENT_ENTRY_FIELDS, valid=1, accelerator=accelerator, rkey=rkey, laddr=laddr)


def segment_entry(word: int) -> dict[str, int]:
    """The fields of a table word."""
    return unpack(SEGMENT_ENTRY_FIELDS, word)


def segment_shift(page_words: int) -> int:
    """log2 of the page size: a global address's segment number is ``gaddr >> shift``, its
    offset in the page the low ``shift`` bits."""
    return (page_words - 1).bit_length()


def segment_bits(page_words: int) -> int:
    """Bits of a segment number: the global address's bits above the page offset."""
    return GVA_BITS - segment_shift(page_words)
