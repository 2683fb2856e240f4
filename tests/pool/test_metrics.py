"""The fragmentation figures (section 10.14.5) against a small trace worked by hand, on
both allocators: two accelerators of 8 pages of 128 bytes."""

import pytest

from superfabric.sim.pool.best_fit import BestFit
from superfabric.sim.pool.buddy import Buddy
from superfabric.sim.pool.metrics import external_fragmentation, internal_fragmentation, replay
from superfabric.sim.pool.trace import ALLOC, FREE, PoolOp, PoolTrace
from superfabric.sim.rdma.segments import SegmentTable

TRACE = PoolTrace("hand", 0, (
    PoolOp(ALLOC, 0, 200),      # 2 pages
    PoolOp(ALLOC, 1, 256),      # 2 pages
    PoolOp(ALLOC, 2, 128),      # 1 page
    PoolOp(FREE, 0, 0),
    PoolOp(ALLOC, 3, 640),      # 5 pages
    PoolOp(FREE, 2, 0),
    PoolOp(ALLOC, 4, 200),      # 2 pages
    PoolOp(ALLOC, 5, 1024),     # 8 pages: no room left in one piece, fails
    PoolOp(FREE, 5, 0),         # skipped
))

#: After each operation: (internal, external), worked by hand.
#: Best-fit: b0 at pages 0-1, b1 2-3, b2 4; b0 freed: free (0,2) (5,3) | (8,8); b3 takes
#: 8-12 (only accelerator 1 has 5 pages in one piece); b2 freed joins (5,3): (0,2) (4,4)
#: | (13,3); b4 takes (0,2), the exact fit.
BEST_FIT = [(56 / 256, 0), (56 / 512, 0), (56 / 640, 0), (0, 1 - 11 / 13), (0, 1 - 6 / 8),
            (0, 1 - 7 / 9), (56 / 1152, 0), (56 / 1152, 0), (56 / 1152, 0)]
#: Buddy: b0 splits accelerator 0's block: [0,2) taken, [2,4) and [4,8) free; b1 takes
#: [2,4); b2 splits [4,8): [4,5) taken, [5,6) and [6,8) free; b3 takes accelerator 1's
#: 8 pages for 5; b2 freed merges [4,5) [5,6) [6,8) into [4,8); b4 takes [0,2).
BUDDY = [(56 / 256, 1 - 12 / 14), (56 / 512, 0), (56 / 640, 1 - 10 / 11), (0, 1 - 10 / 13),
         (384 / 1408, 1 - 2 / 5), (384 / 1280, 1 - 4 / 6), (440 / 1536, 0), (440 / 1536, 0),
         (440 / 1536, 0)]


def _pool(cls):
    allocator = cls(table=SegmentTable(entries=16, page_words=16))
    for k in range(2):
        allocator.add_accelerator(accelerator=k, pages=8, rkey=1)
    return allocator


@pytest.mark.parametrize("cls, expected, peak, allocated", [
    (BestFit, BEST_FIT, 6, 1152), (Buddy, BUDDY, 6, 1536)])
def test_fragmentation_of_the_hand_worked_trace(cls, expected, peak, allocated):
    res = replay(TRACE, _pool(cls))
    internal, external = zip(*expected)
    assert res["failed"] == 1 and res["allocations"] == 6 and res["operations"] == 9
    assert res["peak"] == {"operation": peak, "allocated_bytes": allocated,
                           "requested_bytes": 1096, "use": allocated / 2048}
    for name, values in (("internal", internal), ("external", external)):
        measured = res["fragmentation"][name]
        assert measured["at_peak"] == pytest.approx(values[peak])
        assert measured["mean"] == pytest.approx(sum(values) / len(values))
        assert measured["max"] == pytest.approx(max(values))
    assert res["live_at_end"] == 3 and res["mapped_pages_at_end"] == 2 + 5 + 2


@pytest.mark.parametrize("cls, expected", [(BestFit, BEST_FIT), (Buddy, BUDDY)])
def test_each_step_of_the_hand_worked_trace(cls, expected):
    allocator, handles = _pool(cls), {}
    for op, (internal, external) in zip(TRACE.ops, expected):
        if op.kind == ALLOC:
            a = allocator.allocate(op.nbytes)
            if a is not None:
                handles[op.buffer] = a.handle
        elif op.buffer in handles:
            allocator.free(handles.pop(op.buffer))
        assert internal_fragmentation(allocator) == pytest.approx(internal)
        assert external_fragmentation(allocator) == pytest.approx(external)


def test_an_empty_pool_has_no_fragmentation_to_speak_of():
    allocator = _pool(BestFit)
    # Nothing allocated: internal fragmentation is undefined; the free pages are two
    # whole accelerators, so none of them is lost to external fragmentation.
    assert internal_fragmentation(allocator) is None
    assert external_fragmentation(allocator) == 0
    for _ in range(2):
        allocator.allocate(8 * 128)
    assert external_fragmentation(allocator) is None
