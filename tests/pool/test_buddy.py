"""The buddy system (section 10.14.3): power-of-two blocks, split on allocation and
merged with their buddies on free; a window of another size is several top blocks."""

from superfabric.sim.pool.buddy import Buddy
from superfabric.sim.rdma.segments import SegmentTable

PAGE = 128


def _pool(*windows):
    allocator = Buddy(table=SegmentTable(entries=sum(windows), page_words=16))
    for k, pages in enumerate(windows):
        allocator.add_accelerator(accelerator=k, pages=pages, rkey=1)
    return allocator


def test_a_window_is_cut_into_aligned_top_blocks():
    allocator = _pool(16, 13)
    assert allocator.free_extents() == [(0, 16), (16, 8), (24, 4), (28, 1)]
    assert allocator.largest_request_pages() == 16


def test_a_request_splits_the_smallest_block_that_fits():
    allocator = _pool(16, 13)
    a = allocator.allocate(3 * PAGE)                   # 4 pages: the top block of 4
    assert (a.first, a.pages, a.mapped) == (24, 4, 3)
    b = allocator.allocate(2 * PAGE)                   # 2 pages: halves accelerator 1's 8
    assert (b.first, b.pages) == (16, 2)
    assert allocator.free_extents() == [(0, 16), (18, 2), (20, 4), (28, 1)]


def test_a_free_merges_with_free_buddies_only():
    allocator = _pool(8)
    a = [allocator.allocate(PAGE) for _ in range(4)]   # pages 0, 1, 2, 3
    allocator.free(a[1].handle)
    allocator.free(a[2].handle)
    # 1 and 2 are not buddies (they differ in two bits).
    assert allocator.free_extents() == [(1, 1), (2, 1), (4, 4)]
    allocator.free(a[0].handle)
    assert allocator.free_extents() == [(0, 2), (2, 1), (4, 4)]
    allocator.free(a[3].handle)
    assert allocator.free_extents() == [(0, 8)]


def test_merges_stop_at_the_top_blocks():
    allocator = _pool(12)                              # blocks of 8 and 4
    a = allocator.allocate(4 * PAGE)
    assert a.first == 8
    allocator.free(a.handle)
    assert allocator.free_extents() == [(0, 8), (8, 4)]
