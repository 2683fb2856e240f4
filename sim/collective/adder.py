"""Model of :class:`superfabric.hdl.collective.adder.LaneAdder` (section 15.8.3): the apply
unit's elementwise add of the incoming chunk into the buffer, int32 with wrap-around or
binary32 rounded to nearest, ties to even.

numpy does the arithmetic; only which NaN a NaN sum is does the model fix itself, since
numpy leaves it to the machine and its compiler (x86 returns the first operand's NaN, but a
compiler may swap the operands of a commutative add, and other machines give a positive
default NaN): a sum with a NaN operand is that NaN quieted, the buffer's when both are; an
infinity minus an infinity is :data:`DEFAULT_NAN`.
"""

import numpy as np

from ...formats.collective import DEFAULT_NAN

__all__ = ["add"]

_QUIET = 0x00400000


def add(here: np.ndarray, staged: np.ndarray) -> np.ndarray:
    """``here + staged`` elementwise (both ``int32`` or both ``float32``), as the adder."""
    if here.dtype == np.int32:
        return here + staged
    with np.errstate(over="ignore", invalid="ignore"):
        total = here + staged
    nan = np.isnan(total)
    if nan.any():
        bits = total.view(np.uint32)
        bits[nan] = np.where(np.isnan(here), here.view(np.uint32) | _QUIET,
                             np.where(np.isnan(staged), staged.view(np.uint32) | _QUIET,
                                      DEFAULT_NAN))[nan]
    return total
