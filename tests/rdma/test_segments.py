"""The pooled memory's segment table (section 10.14): its entry fits the RDMA engine's key
and address widths and one 64-bit word; a global address translates to (accelerator,
rkey, local address) or faults, saying why."""

import pytest

from superfabric.formats import pool
from superfabric.formats import rdma_wire as wire
from superfabric.sim.rdma.segments import SegmentFault, SegmentTable, Translation


def test_the_entry_fits_the_engine_and_one_word():
    widths = dict(pool.SEGMENT_ENTRY_FIELDS)
    assert widths["rkey"] == wire.KEY_BITS and widths["laddr"] == wire.VA_BITS
    # Every endpoint of the largest fabric (1024) has a number.
    assert 1 << widths["accelerator"] == 1024
    assert pool.SEGMENT_ENTRY_BITS == 51 <= pool.SEGMENT_WORD_BITS == 64
    assert pool.GVA_BITS == 34


def test_a_word_packs_and_unpacks_its_fields():
    word = pool.segment_word(accelerator=1023, rkey=0xBEEF, laddr=0xFFFF00)
    assert word == 1 | 1023 << 1 | 0xBEEF << 11 | 0xFFFF00 << 27
    assert pool.segment_entry(word) == {"valid": 1, "accelerator": 1023, "rkey": 0xBEEF,
                                        "laddr": 0xFFFF00}
    assert pool.segment_entry(0)["valid"] == 0


def _table():
    table = SegmentTable(entries=8, page_words=16)
    table.map(2, 3, accelerator=5, rkey=7, laddr=0x100)
    table.write(6, pool.segment_word(accelerator=1, rkey=2, laddr=0x30))
    return table


@pytest.mark.parametrize("gaddr, expected", [
    (2 * 16, Translation(5, 7, 0x100)),             # first word of the run
    (2 * 16 + 15, Translation(5, 7, 0x10F)),        # last word of its first page
    (3 * 16 + 1, Translation(5, 7, 0x111)),         # pages follow each other locally
    (5 * 16 - 1, Translation(5, 7, 0x12F)),         # last word of the run
    (6 * 16 + 9, Translation(1, 2, 0x39)),          # a word written on its own
])
def test_translation_hits(gaddr, expected):
    assert _table().translate(gaddr) == expected


@pytest.mark.parametrize("gaddr, reason", [
    (0, "page 0 is not mapped"),
    (2 * 16 - 1, "page 1 is not mapped"),           # the word before the run
    (5 * 16, "page 5 is not mapped"),               # the word after it
    (8 * 16, "page 8 is beyond the table's 8 entries"),
    (1 << 34, "not a 34-bit global address"),
    (-1, "not a 34-bit global address"),
])
def test_translation_faults(gaddr, reason):
    with pytest.raises(SegmentFault) as fault:
        _table().translate(gaddr)
    assert fault.value.gaddr == gaddr and fault.value.reason == reason
    assert str(fault.value) == f"global address {gaddr:#x}: {reason}"


def test_unmapped_pages_fault_again():
    table = _table()
    assert table.mapped() == 4
    table.unmap(3, 1)
    assert table.translate(2 * 16).rkey == 7
    with pytest.raises(SegmentFault, match="page 3 is not mapped"):
        table.translate(3 * 16)
    table.write(6, 0)
    assert table.mapped() == 2


def test_map_writes_what_write_would():
    one, many = SegmentTable(entries=4, page_words=64), SegmentTable(entries=4, page_words=64)
    many.map(1, 3, accelerator=3, rkey=9, laddr=0x4000)
    for k in range(3):
        one.write(1 + k, pool.segment_word(accelerator=3, rkey=9, laddr=0x4000 + 64 * k))
    assert [one.read(k) for k in range(4)] == [many.read(k) for k in range(4)]


@pytest.mark.parametrize("kwargs, message", [
    ({"entries": 8, "page_words": 3}, "page_words = 3"),
    ({"entries": 0, "page_words": 16}, "entries = 0"),
    ({"entries": 1 << 31, "page_words": 16}, "entries = 2147483648: must be an integer in "
                                             "1..1073741824"),
])
def test_bad_tables_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SegmentTable(**kwargs)


@pytest.mark.parametrize("call, message", [
    (lambda t: t.write(8, 0), "segments 8..8: must lie in 0..7"),
    (lambda t: t.write(0, 1 << 64), "must fit 64 bits"),
    (lambda t: t.write(0, pool.segment_word(accelerator=0, rkey=0, laddr=8)),
     "laddr = 0x8: must be aligned"),
    (lambda t: t.map(6, 3, accelerator=0, rkey=0, laddr=0), "segments 6..8"),
    (lambda t: t.map(0, 2, accelerator=0, rkey=0, laddr=(1 << 24) - 16),
     "pass the 24-bit local address space"),
])
def test_bad_writes_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call(SegmentTable(entries=8, page_words=16))
