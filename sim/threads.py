"""The model's threads: the routers of a fabric stepped on several cores at once.

A fabric run (:func:`~.fabric.top.run_block`) can split its routers into
``parts`` contiguous ranges, one per thread. Within a cycle the routers do
not touch each other's state (links carry flits and credits from one cycle
to the next, and the run loop moves them between the routers' phases), so
the threads step their ranges at once and meet at a barrier before and after
(docs/spec/timing.md section 5.9). The barrier is a spin on a shared counter:
a cycle of a 64-router fabric takes tens of microseconds, and a barrier
that sleeps and wakes through the kernel costs about as much.

numba offers no atomics, so the three used here are LLVM's, through
:func:`numba.extending.intrinsic`. They run compiled only: under
``NUMBA_DISABLE_JIT`` a model runs on one thread and never calls them.
"""

import os
import threading

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .kernel import kernel

__all__ = ["ARRIVED", "GENERATION", "STATUS", "CYCLE", "SYNC_WORDS", "barrier", "usable_threads",
           "own_lines", "run_parts"]

#: Words of a barrier's ``sync`` array: threads arrived, barriers passed, and what the
#: first thread tells the others at the barrier (the run's status and its cycle).
ARRIVED, GENERATION, STATUS, CYCLE = range(4)
SYNC_WORDS = 4

#: int64 words in a cache line (64 bytes) and then some: 128-byte lines or pairs of lines
#: fetched together on some cores.
_LINE_WORDS = 16

#: Spins before a waiting thread yields its core: with more threads than free cores
#: (a test suite's workers) the one it waits for may need that core to get there.
_SPINS = 2000


def _element(context, builder, array_type, array, index):
    """A pointer to ``array[index]`` of a 1-D int64 array."""
    ary = context.make_array(array_type)(context, builder, array)
    return cgutils.get_item_pointer(context, builder, array_type, ary, [index])


@intrinsic
def atomic_add(typingctx, array, index, value):
    """``array[index] += value`` at once for every thread (sequentially consistent);
    returns the value before."""
    def codegen(context, builder, sig, args):
        ptr = _element(context, builder, sig.args[0], args[0], args[1])
        return builder.atomic_rmw("add", ptr, context.cast(builder, args[2], sig.args[2],
                                                           types.int64), "seq_cst")
    return types.int64(array, index, value), codegen


@intrinsic
def atomic_load(typingctx, array, index):
    """``array[index]`` as another thread's :func:`atomic_add` or :func:`atomic_store`
    left it, with everything that thread wrote before (acquire)."""
    def codegen(context, builder, sig, args):
        ptr = _element(context, builder, sig.args[0], args[0], args[1])
        return builder.load_atomic(ptr, "acquire", 8)
    return types.int64(array, index), codegen


@intrinsic
def atomic_store(typingctx, array, index, value):
    """``array[index] = value``, with everything written before it (release)."""
    def codegen(context, builder, sig, args):
        ptr = _element(context, builder, sig.args[0], args[0], args[1])
        builder.store_atomic(context.cast(builder, args[2], sig.args[2], types.int64), ptr,
                             "release", 8)
        return context.get_dummy_value()
    return types.none(array, index, value), codegen


@intrinsic
def yield_core(typingctx):
    """Let another thread have this core (POSIX ``sched_yield``). Called by its symbol,
    not through ctypes, so that the kernel that calls it stays cacheable."""
    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), []),
                                            "sched_yield")
        builder.call(fn, [])
        return context.get_dummy_value()
    return types.none(), codegen


@kernel(inline=True)
def barrier(sync, parties):
    """Wait until all ``parties`` threads have called this for the same barrier; what
    each wrote before it, every other reads after it. The last to arrive opens it
    (sense by generation: a thread may arrive at the next one before the others left)."""
    generation = atomic_load(sync, GENERATION)
    if atomic_add(sync, ARRIVED, 1) == parties - 1:
        atomic_store(sync, ARRIVED, 0)
        atomic_add(sync, GENERATION, 1)
        return
    spins = 0
    while atomic_load(sync, GENERATION) == generation:
        spins += 1
        if spins == _SPINS:
            yield_core()
            spins = 0


def own_lines(words: int) -> np.ndarray:
    """``words`` zeroed int64 words on cache lines of their own: what one thread writes
    often and others read (a barrier's counter, a part's counts). Sharing a line with
    another thread's hot words would move that line between the cores at every write,
    which can cost more than the work between the writes."""
    return np.zeros(words + 2 * _LINE_WORDS, np.int64)[_LINE_WORDS:_LINE_WORDS + words]


def usable_threads(threads: int, routers: int) -> int:
    """The threads a run of ``routers`` routers uses when asked for ``threads``: at most
    one per router, and one when the kernels run as Python (``NUMBA_DISABLE_JIT``)."""
    if os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0"):
        return 1
    return max(1, min(threads, routers))


def run_parts(parts: int, step):
    """``step(k)`` for every part ``k`` of ``parts`` at once: part 0 on the calling thread,
    each other on a thread of its own (the kernels release Python's lock); returns part
    0's result once every part has returned."""
    helpers = [threading.Thread(target=step, args=(k,), daemon=True) for k in range(1, parts)]
    for helper in helpers:
        helper.start()
    try:
        return step(0)
    finally:
        for helper in helpers:
            helper.join()
