"""Golden model of the round-robin arbiter (:func:`superfabric.hdl.arbiter.round_robin_pick`).

The rule: of the requests in a bit mask, the first at or after the pointer,
wrapping (:func:`_from_pointer` keeps the requests the winner comes from; the
lowest of them wins). :func:`first_at_or_after` is the rule compiled, for
masks of up to 32 bits: iSLIP's model (:mod:`.islip`) calls it for its grant
and accept steps. The RDMA engine's kernels pick among their channels (up to
256) with the same rule over bit sets of several words
(:func:`superfabric.sim.rdma.kernels.channels.set_first`).
"""

import numpy as np
from numba.extending import register_jitable

from .kernel import kernel

__all__ = ["first_at_or_after"]

# Count trailing zeros of a word of at most 32 bits: the lowest set bit times
# a de Bruijn sequence names the bit position in its top five bits.
_DE_BRUIJN = 0x077CB531
_DE_BRUIJN_POSITION = np.zeros(32, np.int64)
for _bit in range(32):
    _DE_BRUIJN_POSITION[((1 << _bit) * _DE_BRUIJN & 0xFFFFFFFF) >> 27] = _bit


# Plain Python when called from Python, compiled into the kernels that call it (a plain
# call that LLVM inlines: numba's own inlining of its conditional trips numba's SSA check).
@register_jitable
def _from_pointer(mask, ptr):
    """The requests of ``mask`` at or after ``ptr``, or all of them if there are none."""
    high = mask & ~((1 << ptr) - 1)
    return high if high else mask


@kernel(inline=True)
def first_at_or_after(mask, ptr):
    """The first set bit of ``mask`` (non-zero, 32 bits at most) at or after ``ptr``, wrapping."""
    x = _from_pointer(mask, ptr)
    return _DE_BRUIJN_POSITION[((x & -x) * _DE_BRUIJN & 0xFFFFFFFF) >> 27]

