"""What both pool allocators must do (section 10.14.3): live allocations never overlap and
the segment table maps exactly their pages, over a seeded random trace; freeing
everything gives the pool back whole; accelerators join while allocations live; bad
requests are refused with the value named."""

import random

import pytest

from superfabric.sim.pool.best_fit import BestFit
from superfabric.sim.pool.buddy import Buddy
from superfabric.sim.rdma.segments import SegmentFault, SegmentTable

ALLOCATORS = [BestFit, Buddy]
PAGE_WORDS = 16
PAGE_BYTES = PAGE_WORDS * 8


def _pool(cls, windows=(64, 64, 64), entries=None):
    table = SegmentTable(entries=entries or sum(windows), page_words=PAGE_WORDS)
    allocator = cls(table=table)
    for k, pages in enumerate(windows):
        allocator.add_accelerator(accelerator=10 + k, pages=pages, rkey=100 + k, va=32 * k)
    return allocator


def _check(allocator):
    """No two live allocations share a page; each lies within one window; the table maps
    exactly the pages their sizes cover, to the right place; free and allocated pages add
    up to the pool."""
    owner = {}
    for a in allocator.live:
        w = allocator.window_of(a.first)
        assert a.first + a.pages <= w.first + w.pages, a
        assert a.mapped == -(-a.nbytes // PAGE_BYTES) <= a.pages
        for page in range(a.first, a.first + a.pages):
            assert page not in owner, (a, owner.get(page))
            owner[page] = a
    for first, pages in allocator.free_extents():
        for page in range(first, first + pages):
            assert page not in owner, (first, pages)
            owner[page] = None
    assert len(owner) == allocator.total_pages == sum(w.pages for w in allocator.windows)
    for page, a in owner.items():
        gaddr = page * PAGE_WORDS + 5
        if a is None or page >= a.first + a.mapped:
            with pytest.raises(SegmentFault):
                allocator.table.translate(gaddr)
        else:
            w = allocator.window_of(page)
            assert allocator.table.translate(gaddr) == (
                w.accelerator, w.rkey, w.va + (page - w.first) * PAGE_WORDS + 5)
    assert allocator.table.mapped() == sum(a.mapped for a in allocator.live)


@pytest.mark.parametrize("cls", ALLOCATORS)
@pytest.mark.parametrize("seed", range(5))
def test_live_allocations_never_overlap(cls, seed):
    rng = random.Random(seed)
    allocator = _pool(cls, entries=3 * 64 + 48)
    handles = []
    for step in range(600):
        if step == 300:
            # An accelerator joins while allocations live (48 pages: buddy's 32 and 16).
            allocator.add_accelerator(accelerator=20, pages=48, rkey=7, va=0x800)
        if handles and rng.random() < 0.45:
            allocator.free(handles.pop(rng.randrange(len(handles))))
        else:
            a = allocator.allocate(rng.randint(1, 20 * PAGE_BYTES))
            if a is not None:
                handles.append(a.handle)
        if step % 20 == 0:
            _check(allocator)
    _check(allocator)


def _free_everything(allocator):
    for a in allocator.live:
        allocator.free(a.handle)


@pytest.mark.parametrize("cls", ALLOCATORS)
def test_freeing_everything_leaves_one_extent_per_accelerator(cls):
    rng = random.Random(7)
    allocator = _pool(cls)
    for _ in range(300):
        allocator.allocate(rng.randint(1, 9 * PAGE_BYTES))
        if rng.random() < 0.3 and allocator.live:
            allocator.free(rng.choice(allocator.live).handle)
    _free_everything(allocator)
    assert allocator.free_extents() == [(0, 64), (64, 64), (128, 64)]
    assert allocator.allocated_pages == allocator.requested_bytes == 0
    assert allocator.table.mapped() == 0


@pytest.mark.parametrize("cls", ALLOCATORS)
def test_an_accelerator_joins_while_allocations_live(cls):
    allocator = _pool(cls, windows=(8,), entries=24)
    first = allocator.allocate(8 * PAGE_BYTES)
    assert allocator.allocate(1) is None                       # full
    window = allocator.add_accelerator(accelerator=3, pages=16, rkey=5, va=0x1000)
    assert (window.first, window.pages) == (8, 16)
    second = allocator.allocate(16 * PAGE_BYTES)
    assert second.accelerator == 3 and second.gaddr == 8 * PAGE_WORDS
    assert allocator.table.translate(first.gaddr) == (10, 100, 0)
    assert allocator.table.translate(second.gaddr + 17) == (3, 5, 0x1000 + 17)
    _check(allocator)
    _free_everything(allocator)
    # The two windows stay apart: extents never join across accelerators.
    assert allocator.free_extents() == [(0, 8), (8, 16)]


@pytest.mark.parametrize("cls", ALLOCATORS)
@pytest.mark.parametrize("nbytes, message", [
    (0, "size = 0: must be a positive number of bytes"),
    (-5, "size = -5"),
    (1.5, "size = 1.5"),
    (64 * PAGE_BYTES + 1, "size = 8,193 bytes: above the pool; an allocation lies on one "
                          "accelerator and at most 8,192 bytes fit there"),
])
def test_bad_sizes_are_refused(cls, nbytes, message):
    with pytest.raises(ValueError, match=message):
        _pool(cls).allocate(nbytes)


@pytest.mark.parametrize("cls", ALLOCATORS)
def test_double_and_unknown_frees_are_refused(cls):
    allocator = _pool(cls)
    a = allocator.allocate(100)
    allocator.free(a.handle)
    with pytest.raises(KeyError, match=f"handle {a.handle}: already freed"):
        allocator.free(a.handle)
    with pytest.raises(KeyError, match="handle 99: not allocated by this pool"):
        allocator.free(99)


@pytest.mark.parametrize("kwargs, message", [
    ({"accelerator": 10, "pages": 4, "rkey": 1}, "accelerator = 10: already in the pool"),
    ({"accelerator": 1024, "pages": 4, "rkey": 1}, "accelerator = 1024: must be an integer in "
                                                   "0..1023"),
    ({"accelerator": 1, "pages": 4, "rkey": 1 << 16}, "rkey = 65536"),
    ({"accelerator": 1, "pages": 4, "rkey": 1, "va": 8}, "va = 0x8: must be aligned"),
    ({"accelerator": 1, "pages": 0, "rkey": 1}, "pages = 0"),
    # 2^20 pages of 16 words fill the 24-bit local addresses.
    ({"accelerator": 1, "pages": (1 << 20) + 1, "rkey": 1}, "pages = 1048577: must be an "
                                                            "integer in 1..1048576"),
    ({"accelerator": 1, "pages": 8, "rkey": 1}, "the segment table has 64 entries, 0 of them "
                                                "left"),
])
def test_bad_accelerators_are_refused(kwargs, message):
    allocator = _pool(BestFit, windows=(64,))
    with pytest.raises(ValueError, match=message):
        allocator.add_accelerator(**kwargs)

