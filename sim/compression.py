"""The int4 block quantiser's reference (section 16): bit-exact, vectorised over blocks.

Every rule works on binary32 bit patterns with integer operations, so the result depends on
no platform's floating-point rounding and is what the RTL (``hdl/compression.py``) computes,
bit for bit. Arrays of blocks have the block as their last axis, :data:`BLOCK` long; each
block has its own LFSR state, so many blocks quantise at once.
"""

from functools import lru_cache

import numpy as np

from ..formats.compression import (BLOCK, CODE_BITS, DRAW_FRACTION_BITS, DRAW_STEPS,
                                   FINE_STEP_LIMIT, FLOAT_EXP_MAX, FLOAT_FRAC_BITS, FLOAT_MAX,
                                   FLOAT_QNAN, ROUND_NEAREST_EVEN, ROUND_STOCHASTIC, SCALE_NAN,
                                   SHIFT_MAX)
from ..formats.lfsr import LFSR_BITS, lfsr_step

__all__ = ["to_bits", "from_bits", "block_scale", "lfsr_advance", "quantise", "dequantise",
           "error_feedback"]

_FRAC_MASK = (1 << FLOAT_FRAC_BITS) - 1
_HIDDEN = 1 << FLOAT_FRAC_BITS
_MAGNITUDE = 0x7FFFFFFF
_STATE_MAX = (1 << LFSR_BITS) - 1


def to_bits(values) -> np.ndarray:
    """The binary32 bit patterns (``uint32``) of ``values``, rounded to binary32 first."""
    return np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)


def from_bits(bits) -> np.ndarray:
    """The binary32 values (``float32``) whose bit patterns are ``bits``."""
    return np.ascontiguousarray(bits, dtype=np.uint32).view(np.float32)


def _fields(magnitude):
    """A magnitude's effective exponent (subnormals and zero as 1) and 24-bit significand
    (the hidden bit only for normal numbers): ``magnitude = sig * 2**(exp - 150)``."""
    exp = magnitude >> FLOAT_FRAC_BITS
    frac = magnitude & _FRAC_MASK
    return np.maximum(exp, 1), np.where(exp > 0, frac | _HIDDEN, frac)


def block_scale(bits) -> np.ndarray:
    """The E8M0 scale of each block: the smallest power-of-two step (never below
    ``2**-127``) at which the block's largest magnitude is at most 7 steps, or
    :data:`SCALE_NAN` for a block holding a NaN or an infinity.

    Parameters
    ----------
    bits : array of uint32, shape ``(..., BLOCK)``
        binary32 bit patterns.

    Returns
    -------
    array of int64, shape ``(...)``
    """
    top = (np.asarray(bits, dtype=np.int64) & _MAGNITUDE).max(axis=-1)
    exp, sig = _fields(top)
    scale = np.maximum(exp - 2 + (sig > FINE_STEP_LIMIT), 0)
    return np.where(top >> FLOAT_FRAC_BITS == FLOAT_EXP_MAX, SCALE_NAN, scale)


@lru_cache(maxsize=None)
def _cycle() -> tuple[np.ndarray, np.ndarray]:
    """The LFSR's one cycle through every non-zero state, and each state's place in it: the
    state ``k`` steps after ``s`` is ``cycle[(place[s] + k) % period]``, so the draws of many
    blocks are looked up at once rather than stepped one after the other."""
    period = _STATE_MAX
    cycle = np.empty(period, dtype=np.int64)
    state = 1
    for k in range(period):
        cycle[k] = state
        state = lfsr_step(state)
    if state != 1:
        raise AssertionError("the LFSR is not of maximal length")
    place = np.zeros(period + 1, dtype=np.int64)
    place[cycle] = np.arange(period)
    return cycle, place


def lfsr_advance(state, steps):
    """The LFSR states ``steps`` steps after ``state`` (arrays broadcast): one table look-up,
    equal to stepping ``lfsr_step`` that many times."""
    cycle, place = _cycle()
    return cycle[(place[np.asarray(state, dtype=np.int64)] + np.asarray(steps)) % len(cycle)]


def _draws(state, count: int):
    """``count`` draws per LFSR of ``state``, each the state after :data:`DRAW_STEPS` more
    steps; and the last state."""
    state = np.asarray(state, dtype=np.int64)
    draws = lfsr_advance(state[..., None], DRAW_STEPS * np.arange(1, count + 1))
    return draws, draws[..., -1]


def quantise(bits, state, rounding: int):
    """Quantise blocks of binary32 values to int4 codes and an E8M0 scale (section 16.2).

    Parameters
    ----------
    bits : array of uint32, shape ``(..., BLOCK)``
        binary32 bit patterns (:func:`to_bits`).
    state : int or array of int, shape ``(...)``
        Each block's 16-bit LFSR state, non-zero (``formats.lfsr.lfsr_start``). In
        stochastic rounding, value ``k`` of a block is rounded with the state after
        ``DRAW_STEPS * (k + 1)`` steps; nearest-even rounding draws nothing.
    rounding : int
        ``ROUND_STOCHASTIC`` or ``ROUND_NEAREST_EVEN``.

    Returns
    -------
    codes : array of int8, shape ``(..., BLOCK)``
        In -7..7; all 0 in a :data:`SCALE_NAN` block.
    scale : array of uint8, shape ``(...)``
    state : array of int64, shape ``(...)``
        The LFSR states after the block.
    """
    if rounding not in (ROUND_NEAREST_EVEN, ROUND_STOCHASTIC):
        raise ValueError(f"rounding must be ROUND_NEAREST_EVEN or ROUND_STOCHASTIC, "
                         f"not {rounding!r}")
    bits = np.asarray(bits, dtype=np.int64)
    if bits.shape[-1:] != (BLOCK,):
        raise ValueError(f"bits must have blocks of {BLOCK} on its last axis, not shape "
                         f"{bits.shape}")
    state = np.asarray(state, dtype=np.int64)
    if state.size and (state.min() < 1 or state.max() > _STATE_MAX):
        # Zero is the one state an LFSR never leaves: every draw would be 0, rounding down.
        raise ValueError(f"state must be LFSR states in 1..{_STATE_MAX}, not "
                         f"{state.min()}..{state.max()}")
    scale = block_scale(bits)
    exp, sig = _fields(bits & _MAGNITUDE)
    # scale + 23 - exp >= 21 for every finite value (its exponent is at most the block's),
    # so only the upper clamp acts; w is the value in steps with 40 fraction bits, exact.
    shift = np.minimum(scale[..., None] + FLOAT_FRAC_BITS - exp, SHIFT_MAX)
    w = sig << (SHIFT_MAX - shift)
    if rounding == ROUND_STOCHASTIC:
        draws, state = _draws(state, BLOCK)
        truncated = w >> (SHIFT_MAX - DRAW_FRACTION_BITS)
        magnitude = (truncated + draws) >> DRAW_FRACTION_BITS
    else:
        whole, rest, half = w >> SHIFT_MAX, w & ((1 << SHIFT_MAX) - 1), 1 << (SHIFT_MAX - 1)
        magnitude = whole + ((rest > half) | ((rest == half) & ((whole & 1) == 1)))
    codes = np.where(bits >> 31 == 1, -magnitude, magnitude)
    codes = np.where(scale[..., None] == SCALE_NAN, 0, codes)
    return codes.astype(np.int8), scale.astype(np.uint8), state


def dequantise(codes, scale) -> np.ndarray:
    """The binary32 bit patterns of ``code * 2**(scale - 127)``, exactly (section 16.3).

    Code 0 decodes to +0; a :data:`SCALE_NAN` block to quiet NaNs; a product of ``2**128``
    or more (code 4 at scale 253, in a block whose largest magnitude exceeds
    ``1.75 * 2**127``, rounded up) saturates at binary32's largest finite magnitude.
    Any 4-bit code decodes, -8 included.

    Parameters
    ----------
    codes : array of int, shape ``(..., BLOCK)``, in -8..7
    scale : array of int, shape ``(...)``, in 0..255

    Returns
    -------
    array of uint32, shape ``(..., BLOCK)``
    """
    codes = np.asarray(codes, dtype=np.int64)
    scale = np.asarray(scale, dtype=np.int64)[..., None]
    low, high = -(1 << (CODE_BITS - 1)), (1 << (CODE_BITS - 1)) - 1
    if codes.min(initial=0) < low or codes.max(initial=0) > high:
        raise ValueError(f"codes must be in {low}..{high}, not {codes.min()}..{codes.max()}")
    magnitude = np.abs(codes)
    lead = (magnitude >= 2).astype(np.int64) + (magnitude >= 4) + (magnitude >= 8)
    exp = scale + lead
    bits = (exp << FLOAT_FRAC_BITS) | ((magnitude << (FLOAT_FRAC_BITS - lead)) & _FRAC_MASK)
    # exp == 0 only for code +-1 at scale 0: 2**-127, the subnormal with fraction 2**22.
    bits = np.where(exp == 0, magnitude << (FLOAT_FRAC_BITS - 1), bits)
    bits = np.where(exp >= FLOAT_EXP_MAX, FLOAT_MAX, bits)
    bits = np.where(codes < 0, bits | (1 << 31), bits)
    bits = np.where(magnitude == 0, 0, bits)
    bits = np.where(scale == SCALE_NAN, FLOAT_QNAN, bits)
    return bits.astype(np.uint32)


def error_feedback(gradient, residual, state, rounding: int):
    """One step of error feedback: quantise ``gradient + residual`` and keep what was lost.

    ``e <- (g + e) - Q(g + e)``, in binary32 (section 16.4). The sum of what is sent over
    steps then trails the sum of the gradients by the last residual only.

    Parameters
    ----------
    gradient, residual : array of float32, shape ``(..., BLOCK)``
    state : array of int, shape ``(...)``
        Each block's LFSR state, as :func:`quantise`.
    rounding : int

    Returns
    -------
    codes, scale, state
        As :func:`quantise`: what is sent.
    residual : array of float32
        The new residual.
    """
    target = np.asarray(gradient, dtype=np.float32) + np.asarray(residual, dtype=np.float32)
    codes, scale, state = quantise(to_bits(target), state, rounding)
    residual = target - from_bits(dequantise(codes, scale))
    return codes, scale, state, residual
