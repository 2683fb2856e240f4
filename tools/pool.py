"""``superfabric pool``: a pool allocator replaying an allocate/free trace, measured.

The pool is ``accelerators`` accelerators, each joining ``memory_mib`` MiB of its
memory (pages of ``rdma.page_words`` words) registered under key :data:`POOL_RKEY`
from local address 0; the segment table has an entry for every page. The run writes
``results.json`` (section 10.14.5) and ``pool.md``, the table it prints.
"""

from __future__ import annotations

from pathlib import Path

from ..config import FabricConfig
from ..formats import rdma_wire as wire
from ..sim.pool.allocator import WORD_BYTES, PoolAllocator
from ..sim.pool.best_fit import BestFit
from ..sim.pool.buddy import Buddy
from ..sim.pool.metrics import replay
from ..sim.pool.trace import TRACES, pool_trace
from ..sim.rdma.segments import SegmentTable
from .run import write_json

__all__ = ["ALLOCATORS", "MAX_ACCELERATORS", "MAX_MEMORY_MIB", "POOL_RKEY", "TABLE_HEADER",
           "check_pool", "make_pool", "pool_row", "run_pool"]

#: Allocator name -> class.
ALLOCATORS: dict[str, type[PoolAllocator]] = {cls.name: cls for cls in (BestFit, Buddy)}
#: The most accelerators of a fabric (endpoints).
MAX_ACCELERATORS = 1024
#: An accelerator's pool memory is addressed by a 24-bit local address of 64-bit words.
MAX_MEMORY_MIB = (1 << wire.VA_BITS) * WORD_BYTES >> 20
#: The key every accelerator registers its pool memory under.
POOL_RKEY = 1


def check_pool(*, allocator: str, accelerators: int, memory_mib: int, trace: str,
               seed: int) -> None:
    """Refuse a bad setting in one line (ValueError) naming the value and what is allowed."""
    if allocator not in ALLOCATORS:
        raise ValueError(f"--allocator = {allocator!r}: must be one of {', '.join(ALLOCATORS)}")
    if not 1 <= accelerators <= MAX_ACCELERATORS:
        raise ValueError(f"--accelerators = {accelerators}: must be in 1..{MAX_ACCELERATORS}")
    if not 1 <= memory_mib <= MAX_MEMORY_MIB:
        raise ValueError(f"--memory-mib = {memory_mib}: must be in 1..{MAX_MEMORY_MIB} (an "
                         f"accelerator's {wire.VA_BITS}-bit local addresses of 64-bit words)")
    if trace not in TRACES:
        raise ValueError(f"--trace = {trace!r}: must be one of {', '.join(TRACES)}")
    if seed < 0:
        raise ValueError(f"--seed = {seed}: must be at least 0")


def make_pool(*, allocator: str, accelerators: int, memory_mib: int,
              page_words: int) -> PoolAllocator:
    """An allocator of ``accelerators`` accelerators of ``memory_mib`` MiB each, joined in
    order, accelerator ``k`` with its pages from local address 0 under :data:`POOL_RKEY`."""
    pages = (memory_mib << 20) // (page_words * WORD_BYTES)
    table = SegmentTable(entries=accelerators * pages, page_words=page_words)
    pool = ALLOCATORS[allocator](table=table)
    for k in range(accelerators):
        pool.add_accelerator(accelerator=k, pages=pages, rkey=POOL_RKEY)
    return pool


def run_pool(cfg: FabricConfig, *, allocator: str, accelerators: int, memory_mib: int,
             trace: str, seed: int, out_dir: str | Path | None = None) -> dict:
    """Replay ``trace`` (one rank per accelerator) on a fresh pool; write ``results.json``
    and ``pool.md`` into ``out_dir`` when given."""
    check_pool(allocator=allocator, accelerators=accelerators, memory_mib=memory_mib,
               trace=trace, seed=seed)
    ops = pool_trace(trace, ranks=accelerators, seed=seed)
    pool = make_pool(allocator=allocator, accelerators=accelerators, memory_mib=memory_mib,
                     page_words=cfg.rdma.page_words)
    results = {"config": cfg.to_dict(), "memory_mib": memory_mib, "trace": ops.describe(),
               "pool": replay(ops, pool)}
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "results.json", results)
        (out / "pool.md").write_text("\n".join(
            ["| " + " | ".join(TABLE_HEADER) + " |", "|---|" + "---:|" * (len(TABLE_HEADER) - 1),
             "| " + " | ".join(pool_row(results)) + " |"]) + "\n")
    return results


#: The columns of :func:`pool_row`.
TABLE_HEADER = ("allocator", "pool", "page", "peak use", "internal at peak",
                "internal mean", "external at peak", "external mean", "external max",
                "failed")


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}"


def pool_row(results: dict) -> list[str]:
    """The table's row of a run's results: peak use (of the pool), the fragmentation
    figures as percentages, the failed allocations."""
    p = results["pool"]
    internal, external = p["fragmentation"]["internal"], p["fragmentation"]["external"]
    page = p["page_bytes"]
    page_text = f"{page >> 10} KiB" if page >= 1024 else f"{page} B"
    return [p["allocator"], f"{p['accelerators']} x {results['memory_mib']} MiB", page_text,
            _percent(p["peak"]["use"]), _percent(internal["at_peak"]), _percent(internal["mean"]),
            _percent(external["at_peak"]), _percent(external["mean"]), _percent(external["max"]),
            f"{p['failed']}/{p['allocations']}"]
