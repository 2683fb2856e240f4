"""Golden model of the round-robin arbiter (:func:`superfabric.hdl.arbiter.round_robin_pick`), compiled.

:func:`first_at_or_after` is the rule; iSLIP's model (:mod:`.islip`) calls it
for its grant and accept steps, on requests held as bit masks.
"""

import numpy as np

from .kernel import kernel

__all__ = ["first_at_or_after"]

# Count trailing zeros of a word of at most 32 bits: the lowest set bit times
# a de Bruijn sequence names the bit position in its top five bits.
_DE_BRUIJN = 0x077CB531
_DE_BRUIJN_POSITION = np.zeros(32, np.int64)
for _bit in range(32):
    _DE_BRUIJN_POSITION[((1 << _bit) * _DE_BRUIJN & 0xFFFFFFFF) >> 27] = _bit


@kernel(inline=True)
def first_at_or_after(mask, ptr):
    """The first set bit of ``mask`` (non-zero, 32 bits at most) at or after ``ptr``, wrapping."""
    high = mask & ~((1 << ptr) - 1)
    x = high if high else mask
    return _DE_BRUIJN_POSITION[((x & -x) * _DE_BRUIJN & 0xFFFFFFFF) >> 27]
