"""The collective engine's adder (section 15.8.3): one 64-bit buffer word and one staged
word in, their sum out, as two 32-bit lanes, in int32 (wrap-around) or binary32
(IEEE 754 round-to-nearest-even) arithmetic, combinationally.

Its model is ``superfabric.sim.collective.adder``: numpy's ``int32`` or ``float32`` add, with
the choices IEEE 754 leaves open made as x86 makes them: subnormals are kept (no flush to
zero); a NaN operand gives that NaN quieted (fraction bit 22 set), the buffer's when both
are NaNs; an infinity minus an infinity gives ``0xFFC00000``; an exact zero sum of
operands of opposite signs is ``+0``.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...formats.collective import DEFAULT_NAN

__all__ = ["binary32_add", "LaneAdder"]

_FRAC = 23
_EXP_MAX = 0xFF
_QUIET = 1 << (_FRAC - 1)
#: Guard, round and sticky bits kept below a significand while it is aligned and added.
_GRS = 3
_WORK = _FRAC + 1 + _GRS      # an aligned significand: the hidden bit at 26


def _leading_zeros(m, value, width: int, name: str) -> Signal:
    """Zeros above ``value``'s highest set bit, counted in ``width`` bits (``width`` when
    it is 0): a priority chain from the least significant bit up."""
    count = Signal(range(width + 1), name=name)
    expr = Const(width, count.shape())
    for bit in range(width):
        expr = Mux(value[bit], width - 1 - bit, expr)
    m.d.comb += count.eq(expr)
    return count


def binary32_add(m: Module, a, b, name: str) -> Signal:
    """The binary32 sum of bit patterns ``a`` and ``b`` (32 bits each), built in ``m`` as
    combinational logic under signal names that start with ``name``; ``a`` is numpy's first
    operand (whose NaN wins)."""
    def sig(suffix, shape):
        return Signal(shape, name=f"{name}_{suffix}")

    def is_nan(x):
        return (x[_FRAC:31] == _EXP_MAX) & x[:_FRAC].any()

    def is_inf(x):
        return (x[_FRAC:31] == _EXP_MAX) & ~x[:_FRAC].any()

    # The larger magnitude first (bit patterns order finite magnitudes).
    swap = b[:31] > a[:31]
    big, small = sig("big", 32), sig("small", 32)
    m.d.comb += [big.eq(Mux(swap, b, a)), small.eq(Mux(swap, a, b))]

    def fields(x):
        exp = x[_FRAC:31]
        normal = exp.any()
        return Mux(normal, exp, 1), Cat(x[:_FRAC], normal)

    exp_big, sig_big = fields(big)
    exp_small, sig_small = fields(small)
    # Align the smaller: shifts past the guard bits leave only its sticky bit.
    distance = sig("distance", 8)
    m.d.comb += distance.eq(exp_big - exp_small)
    shift = Mux(distance > _WORK, _WORK, distance)
    wide_small = Cat(Const(0, _GRS), sig_small)
    aligned = sig("aligned", _WORK)
    m.d.comb += aligned.eq((wide_small >> shift) | ((wide_small >> shift) << shift != wide_small))
    wide_big = Cat(Const(0, _GRS), sig_big)

    subtract = big[31] ^ small[31]
    total = sig("total", _WORK + 1)
    m.d.comb += total.eq(Mux(subtract, wide_big - aligned, wide_big + aligned))

    # Normalise: a carry shifts right once (its bit kept sticky); a cancellation shifts left
    # by the leading zeros, at most down to the smallest exponent (a subnormal).
    carry = total[_WORK]
    zeros = _leading_zeros(m, total[:_WORK], _WORK, f"{name}_zeros")
    left = sig("left", range(_WORK + 1))
    m.d.comb += left.eq(Mux(zeros < exp_big - 1, zeros, exp_big - 1))
    norm = sig("norm", _WORK)
    exp_norm = sig("exp_norm", 10)
    with m.If(carry):
        m.d.comb += [norm.eq(Cat(total[0] | total[1], total[2:_WORK + 1])),
                     exp_norm.eq(exp_big + 1)]
    with m.Else():
        m.d.comb += [norm.eq(total[:_WORK] << left), exp_norm.eq(exp_big - left)]

    # Round to nearest, ties to even, on the guard bit and the sticky of the rest.
    guard, rest, lsb = norm[_GRS - 1], norm[:_GRS - 1].any(), norm[_GRS]
    rounded = sig("rounded", _FRAC + 2)
    m.d.comb += rounded.eq(norm[_GRS:] + (guard & (rest | lsb)))
    mant = Mux(rounded[_FRAC + 1], rounded[1:], rounded[:_FRAC + 1])
    exp_out = sig("exp_out", 10)
    m.d.comb += exp_out.eq(exp_norm + rounded[_FRAC + 1])
    overflow = exp_out >= _EXP_MAX
    sign = Mux(subtract & (total == 0), 0, big[31])
    finite = Mux(overflow, Cat(Const(0, _FRAC), Const(_EXP_MAX, 8), sign),
                 Cat(mant[:_FRAC], Mux(mant[_FRAC], exp_out[:8], 0), sign))

    result = sig("sum", 32)
    with m.If(is_nan(a)):
        m.d.comb += result.eq(a | _QUIET)
    with m.Elif(is_nan(b)):
        m.d.comb += result.eq(b | _QUIET)
    with m.Elif(is_inf(a) & is_inf(b) & (a[31] != b[31])):
        m.d.comb += result.eq(DEFAULT_NAN)
    with m.Elif(is_inf(big)):
        m.d.comb += result.eq(big)
    with m.Else():
        m.d.comb += result.eq(finite)
    return result


class LaneAdder(wiring.Component):
    """Two 32-bit lanes added (``binary32``: as binary32, else as int32, wrapping), the
    buffer's word the first operand; combinational.

    Attributes
    ----------
    here : In(64)
        The buffer word: element ``2k`` in bits 31:0, ``2k + 1`` in 63:32.
    staged : In(64)
        The incoming word, aligned to ``here``'s lanes.
    binary32 : In(1)
        Add as binary32 (1) or int32 (0).
    sum : Out(64)
    """

    here: In(64)
    staged: In(64)
    binary32: In(1)
    sum: Out(64)

    def elaborate(self, platform):
        m = Module()
        for lane in range(2):
            a, b = self.here[32 * lane:32 * lane + 32], self.staged[32 * lane:32 * lane + 32]
            real = binary32_add(m, a, b, f"lane{lane}")
            m.d.comb += self.sum[32 * lane:32 * lane + 32].eq(
                Mux(self.binary32, real, (a + b)[:32]))
        return m
