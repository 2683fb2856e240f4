"""The int4 block format of gradient compression, section 16: the constants the quantiser's
RTL (``superfabric.hdl.compression``) and its model (``superfabric.sim.compression``) share.

A block is :data:`BLOCK` binary32 values; it is sent as :data:`BLOCK` two's complement
codes of :data:`CODE_BITS` bits in ``-CODE_MAX..CODE_MAX`` and one E8M0 scale byte, the
block's step ``2 ** (scale - SCALE_BIAS)``.
"""

__all__ = ["BLOCK", "CODE_BITS", "CODE_MAX", "SCALE_BITS", "SCALE_BIAS", "SCALE_NAN",
           "BITS_PER_ELEMENT", "BLOCK_BYTES", "wire_bytes", "FINE_STEP_LIMIT", "DRAW_FRACTION_BITS", "DRAW_STEPS",
           "SHIFT_MIN", "SHIFT_MAX", "ROUND_NEAREST_EVEN", "ROUND_STOCHASTIC",
           "FLOAT_EXP_MAX", "FLOAT_FRAC_BITS", "FLOAT_QNAN", "FLOAT_MAX"]

#: Values per block, each with one code; one scale per block (OCP MX's block size).
BLOCK = 32
#: Width of one code: two's complement, -8 never produced.
CODE_BITS = 4
#: The largest code magnitude the quantiser produces: the grid is symmetric.
CODE_MAX = 7
#: Width of the shared scale: E8M0, a biased power of two.
SCALE_BITS = 8
#: The scale byte ``s`` stands for ``2 ** (s - SCALE_BIAS)`` (binary32's exponent bias).
SCALE_BIAS = 127
#: The scale of a block holding a NaN or an infinity: every value decodes to NaN (MX's rule).
SCALE_NAN = 0xFF
#: Bits on the wire per value: a code and a share of the scale.
BITS_PER_ELEMENT = CODE_BITS + SCALE_BITS / BLOCK
#: Bytes of a block on the wire: 32 codes of 4 bits and the scale byte, 17.
BLOCK_BYTES = (BLOCK * CODE_BITS + SCALE_BITS) // 8


def wire_bytes(values: int) -> int:
    """Bytes on the wire of a chunk of ``values`` values: whole blocks, the last padded with
    zeros as the quantiser takes 32 values a block (section 16.6)."""
    return -(-values // BLOCK) * BLOCK_BYTES

#: A block's largest significand (24 bits, hidden bit set) above this, ``1.75 * 2**23``,
#: would exceed 7 steps at the finer of the two candidate steps, so the step doubles.
FINE_STEP_LIMIT = 0xE00000

#: Stochastic rounding adds ``draw / 2**DRAW_FRACTION_BITS`` of a step: one 16-bit LFSR draw.
DRAW_FRACTION_BITS = 16
#: LFSR steps per draw: a whole state's width, so that no two draws share bits (one step
#: would leave 15 bits of each draw in the next, and neighbouring values' rounding correlated).
DRAW_STEPS = 16
#: The right shift from a value's 24-bit significand to its code, ``scale + 23 - exponent``,
#: is at least this for every finite value of a block (its largest value's, rounded down).
SHIFT_MIN = 21
#: ...and is clamped at this: a value below ``2**-16`` of a step truncates to 0 either way.
SHIFT_MAX = 40

#: Rounding modes (the RTL's ``rounding`` input, the model's ``rounding`` argument).
ROUND_NEAREST_EVEN = 0
ROUND_STOCHASTIC = 1

#: binary32's fields: the all-ones exponent (infinities and NaNs), the fraction width.
FLOAT_EXP_MAX = 0xFF
FLOAT_FRAC_BITS = 23
#: The quiet NaN every value of a :data:`SCALE_NAN` block decodes to.
FLOAT_QNAN = 0x7FC00000
#: binary32's largest finite magnitude, the decode of a code times a step beyond its range
#: (saturated: an infinity would poison every sum it joins).
FLOAT_MAX = 0x7F7FFFFF
