"""A trace replayed on a pool allocator, and its fragmentation (section 10.14.5).

- **Internal fragmentation**: the share of the allocated bytes that no request asked
  for, ``(A - R) / A``, ``A`` the bytes of the pages set aside for the live allocations
  and ``R`` the bytes they requested (Johnstone and Wilson, "The memory fragmentation
  problem: solved?", ISMM 1998, count it the same way). Undefined when nothing is
  allocated.
- **External fragmentation**: the share of the free memory that cannot serve one
  request, ``1 - L / F``, ``F`` the free bytes and ``L`` the largest free extent (for
  the buddy system, block): the usual measure, taken per accelerator, because an
  allocation never spans two, and summed: ``L`` is the sum of every accelerator's
  largest free extent. An empty pool is 0 whatever its number of accelerators.
  Undefined when nothing is free.

Both are measured after every operation of the trace and reported at the operation
where the allocated bytes peak (the first such), as their mean over the operations
where they are defined, and the largest value.
"""

from __future__ import annotations

from .allocator import PoolAllocator
from .trace import ALLOC, PoolTrace

__all__ = ["internal_fragmentation", "external_fragmentation", "replay"]


def internal_fragmentation(allocator: PoolAllocator) -> float | None:
    """``(A - R) / A`` of the live allocations; None when nothing is allocated."""
    allocated = allocator.allocated_pages * allocator.page_bytes
    if not allocated:
        return None
    return (allocated - allocator.requested_bytes) / allocated


def external_fragmentation(allocator: PoolAllocator) -> float | None:
    """``1 - (sum of each accelerator's largest free extent) / (free pages)``; None when
    nothing is free."""
    free = allocator.total_pages - allocator.allocated_pages
    if not free:
        return None
    return 1 - sum(allocator.largest_free().values()) / free


def _measure(values: list[float | None], at: int) -> dict:
    defined = [v for v in values if v is not None]
    return {"at_peak": values[at] if values else None,
            "mean": sum(defined) / len(defined) if defined else None,
            "max": max(defined, default=None)}


def replay(trace: PoolTrace, allocator: PoolAllocator) -> dict:
    """Run every operation of ``trace`` on ``allocator`` and measure it: the ``pool``
    results of section 10.14.5. A request the allocator cannot place now fails and is
    counted; its buffer's free is then skipped."""
    handles: dict[int, int] = {}
    failed: set[int] = set()
    internal, external, allocated, requested = [], [], [], []
    for op in trace.ops:
        if op.kind == ALLOC:
            a = allocator.allocate(op.nbytes)
            if a is None:
                failed.add(op.buffer)
            else:
                handles[op.buffer] = a.handle
        elif op.buffer not in failed:
            allocator.free(handles.pop(op.buffer))
        internal.append(internal_fragmentation(allocator))
        external.append(external_fragmentation(allocator))
        allocated.append(allocator.allocated_pages * allocator.page_bytes)
        requested.append(allocator.requested_bytes)
    peak = max(range(len(allocated)), key=allocated.__getitem__, default=0)
    pool_bytes = allocator.total_pages * allocator.page_bytes
    return {
        "allocator": allocator.name,
        "accelerators": len(allocator.windows),
        "page_bytes": allocator.page_bytes,
        "pool_bytes": pool_bytes,
        "operations": len(trace.ops),
        "allocations": sum(op.kind == ALLOC for op in trace.ops),
        "failed": len(failed),
        "peak": {"operation": peak, "allocated_bytes": allocated[peak] if allocated else 0,
                 "requested_bytes": requested[peak] if requested else 0,
                 "use": allocated[peak] / pool_bytes if allocated else 0.0},
        "fragmentation": {"internal": _measure(internal, peak),
                          "external": _measure(external, peak)},
        "live_at_end": len(allocator.live),
        "mapped_pages_at_end": allocator.table.mapped(),
    }
