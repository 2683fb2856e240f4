"""Best-fit's placement (section 10.14.3): the smallest free extent that fits, the lowest
address on a tie, coalescing with both neighbours on free."""

from superfabric.sim.pool.best_fit import BestFit
from superfabric.sim.rdma.segments import SegmentTable

PAGE = 128


def _pool(*windows, entries=None):
    allocator = BestFit(table=SegmentTable(entries=entries or sum(windows), page_words=16))
    for k, pages in enumerate(windows):
        allocator.add_accelerator(accelerator=k, pages=pages, rkey=1)
    return allocator


def test_the_smallest_extent_that_fits_wins():
    allocator = _pool(16, entries=22)
    a = [allocator.allocate(n * PAGE) for n in (3, 2, 3, 8)]    # 0-2, 3-4, 5-7, 8-15
    allocator.free(a[0].handle)
    allocator.free(a[2].handle)
    allocator.add_accelerator(accelerator=1, pages=6, rkey=1)
    assert allocator.free_extents() == [(0, 3), (5, 3), (16, 6)]
    # Two pages: the 3-page extents tie, the lower one wins; 4 pages: only accelerator 1.
    assert allocator.allocate(2 * PAGE).first == 0
    assert allocator.allocate(4 * PAGE).first == 16
    assert allocator.free_extents() == [(2, 1), (5, 3), (20, 2)]


def test_a_free_joins_both_neighbours():
    allocator = _pool(8)
    a = [allocator.allocate(2 * PAGE) for _ in range(4)]
    allocator.free(a[0].handle)
    allocator.free(a[2].handle)
    assert allocator.free_extents() == [(0, 2), (4, 2)]
    allocator.free(a[1].handle)
    assert allocator.free_extents() == [(0, 6)]
    allocator.free(a[3].handle)
    assert allocator.free_extents() == [(0, 8)]


def test_an_allocation_gets_exactly_its_pages():
    allocator = _pool(8)
    a = allocator.allocate(3 * PAGE + 1)
    assert (a.pages, a.mapped, allocator.allocated_pages) == (4, 4, 4)
