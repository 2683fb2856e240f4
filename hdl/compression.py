"""The compression unit (section 16): blocks of 32 binary32 values to int4 codes with one
E8M0 scale, and back; bit-exact with ``superfabric.sim.compression``.

:class:`Quantiser` takes one value per cycle, :class:`Dequantiser` gives one per cycle, and
:class:`CompressionUnit` holds one of each, the top that ``superfabric generate --top
compression`` writes.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..formats.compression import (BLOCK, CODE_BITS, DRAW_FRACTION_BITS, DRAW_STEPS,
                                   FINE_STEP_LIMIT, FLOAT_EXP_MAX, FLOAT_FRAC_BITS, FLOAT_MAX,
                                   FLOAT_QNAN, ROUND_NEAREST_EVEN, ROUND_STOCHASTIC, SCALE_BITS,
                                   SCALE_NAN, SHIFT_MAX, SHIFT_MIN)
from ..formats.lfsr import LFSR_BITS, lfsr_start, lfsr_step

__all__ = ["Rounding", "block_layout", "Quantiser", "Dequantiser", "CompressionUnit"]


class Rounding(enum.Enum, shape=1):
    """The quantiser's rounding mode (``formats.compression``'s values)."""
    NEAREST_EVEN = ROUND_NEAREST_EVEN
    STOCHASTIC = ROUND_STOCHASTIC


#: A compressed block: code ``k`` in bits ``4k..4k+3``, then the scale.
block_layout = data.StructLayout({"codes": CODE_BITS * BLOCK, "scale": SCALE_BITS})

_FLOAT_BITS = 32
_EXP_BITS = 8
_AMOUNT_MAX = SHIFT_MAX - SHIFT_MIN
_WIDE_BITS = 24 + _AMOUNT_MAX   # a significand in steps, 40 fraction bits


def _draw(m, state):
    """The LFSR state :data:`DRAW_STEPS` steps on: the next draw (XORs of the state's bits).

    Each step is a signal of its own: a step reads its state twice, so one expression of
    all the steps would repeat the first state 2**DRAW_STEPS times."""
    for k in range(DRAW_STEPS):
        step = Signal(LFSR_BITS, name=f"lfsr_step{k + 1}")
        m.d.comb += step.eq(lfsr_step(state))
        state = step
    return state


def _fields(magnitude):
    """A binary32 magnitude's effective exponent and 24-bit significand (as the model's)."""
    exp, frac = magnitude[FLOAT_FRAC_BITS:], magnitude[:FLOAT_FRAC_BITS]
    nonzero = exp.any()
    return Mux(nonzero, exp, 1), Cat(frac, nonzero)


def _check_seed(seed) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an integer in 0..65535, not {seed!r}")
    if not 0 <= seed < 1 << LFSR_BITS:
        raise ValueError(f"seed must be an integer in 0..65535, not {seed!r}")


class _Phase(enum.Enum, shape=2):
    FILL = 0        # values arrive, into the block memory; the largest magnitude is kept
    QUANTISE = 1    # the memory is read through the rounding pipeline
    SEND = 2        # the block waits on ``o``


class Quantiser(wiring.Component):
    """Quantise blocks of 32 binary32 values, one value a cycle, to int4 codes and a scale.

    A block's values arrive on ``i`` (``BLOCK`` transfers) and are held in a 32-word memory
    while the largest magnitude is kept; then the scale is registered and the values are
    read back through a three-stage pipeline (exponent difference; significand shift;
    rounding), the codes shifted into a register, and the block offered on ``o``: a block
    every ``2 * BLOCK + 4`` cycles, handshake included, when values come every cycle and
    ``o`` is ready; ``i`` is not ready from a block's last value to its handshake.

    Parameters
    ----------
    seed : int
        The LFSR's state after reset is ``lfsr_start(seed, 0)``.

    Attributes
    ----------
    i : In(stream.Signature(32))
        binary32 bit patterns, ``BLOCK`` to a block.
    o : Out(stream.Signature(block_layout))
    seed : In(stream.Signature(16, always_ready=True))
        Loads the LFSR with ``lfsr_start(payload, 0)`` (between blocks; it wins over a step).
    rounding : In(Rounding)
        Sampled with each block's first value.
    """

    i: In(stream.Signature(_FLOAT_BITS))
    o: Out(stream.Signature(block_layout))
    seed: In(stream.Signature(LFSR_BITS, always_ready=True))
    rounding: In(Rounding)

    def __init__(self, *, seed: int = 0):
        _check_seed(seed)
        self._seed = seed
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.values = values = Memory(shape=_FLOAT_BITS, depth=BLOCK, init=[])
        write, read = values.write_port(), values.read_port()
        phase = Signal(_Phase)
        count = Signal(range(BLOCK + 1))      # values written, then values read
        top = Signal(_FLOAT_BITS - 1)         # the largest magnitude so far
        rounding = Signal(Rounding)
        scale = Signal(SCALE_BITS)
        state = Signal(LFSR_BITS, init=lfsr_start(self._seed, 0))
        codes = Signal(CODE_BITS * BLOCK)
        coded = Signal(range(BLOCK + 1))

        magnitude = self.i.payload[:_FLOAT_BITS - 1]
        m.d.comb += [self.i.ready.eq(phase == _Phase.FILL),
                     write.addr.eq(count), write.data.eq(self.i.payload),
                     write.en.eq(self.i.valid & self.i.ready)]
        with m.If(write.en):
            m.d.sync += count.eq(count + 1)
            with m.If((count == 0) | (magnitude > top)):
                m.d.sync += top.eq(magnitude)
            with m.If(count == 0):
                m.d.sync += rounding.eq(self.rounding)
            with m.If(count == BLOCK - 1):
                m.d.sync += [phase.eq(_Phase.QUANTISE), count.eq(0)]

        # Issue: one read a cycle; the scale is registered while the first read is under way.
        issued = Signal()
        m.d.comb += [read.addr.eq(count), issued.eq((phase == _Phase.QUANTISE) & (count < BLOCK))]
        with m.If(issued & (count == 0)):
            m.d.sync += scale.eq(self._scale_rule(top))
        with m.If(issued):
            m.d.sync += count.eq(count + 1)

        # Stage 1: how far the significand shifts, clamped at SHIFT_MAX (section 16.2).
        valid1, valid2, valid3 = Signal(), Signal(), Signal()
        sign2, sign3 = Signal(), Signal()
        sig2, amount2 = Signal(24), Signal(range(_AMOUNT_MAX + 1))
        wide3 = Signal(_WIDE_BITS)
        m.d.sync += [valid1.eq(issued), valid2.eq(valid1), valid3.eq(valid2)]
        exp, sig = _fields(read.data[:_FLOAT_BITS - 1])
        difference = (scale + (FLOAT_FRAC_BITS - SHIFT_MIN)) - exp   # never negative
        m.d.sync += [sign2.eq(read.data[_FLOAT_BITS - 1]), sig2.eq(sig),
                     amount2.eq(Mux(difference > _AMOUNT_MAX, _AMOUNT_MAX, difference))]
        # Stage 2: the value in steps, with 40 fraction bits, exact.
        m.d.sync += [sign3.eq(sign2), wide3.eq((sig2 << _AMOUNT_MAX) >> amount2)]
        # Stage 3: round, sign, and shift the code in (value k ends at bits 4k..4k+3).
        draw = _draw(m, state)
        code = self._round(m, wide3, sign3, rounding, draw, scale)
        with m.If(valid3):
            m.d.sync += [codes.eq(Cat(codes[CODE_BITS:], code)), coded.eq(coded + 1)]
            with m.If(rounding == Rounding.STOCHASTIC):
                m.d.sync += state.eq(draw)
            with m.If(coded == BLOCK - 1):
                m.d.sync += phase.eq(_Phase.SEND)

        m.d.comb += [self.o.valid.eq(phase == _Phase.SEND),
                     self.o.payload.codes.eq(codes), self.o.payload.scale.eq(scale)]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += [phase.eq(_Phase.FILL), count.eq(0), coded.eq(0)]
        with m.If(self.seed.valid):
            m.d.sync += state.eq(lfsr_start(self.seed.payload, 0))
        return m

    @staticmethod
    def _scale_rule(top):
        """The block's scale from its largest magnitude ``top`` (``block_scale``'s rule)."""
        exp, sig = _fields(top)
        finite = exp - 2 + (sig > FINE_STEP_LIMIT)
        return Mux(top[FLOAT_FRAC_BITS:] == FLOAT_EXP_MAX, SCALE_NAN,
                   Mux(finite < 0, 0, finite))

    @staticmethod
    def _round(m, wide, sign, rounding, draw, scale):
        """The code of one value, ``wide`` steps with 40 fraction bits, in ``rounding``
        (stochastic: with the LFSR's ``draw``)."""
        truncated = wide[SHIFT_MAX - DRAW_FRACTION_BITS:]
        stochastic = (truncated + draw)[DRAW_FRACTION_BITS:]
        whole, half = wide[SHIFT_MAX:], wide[SHIFT_MAX - 1]
        below = wide[:SHIFT_MAX - 1].any()
        nearest = whole + (half & (below | whole[0]))
        magnitude = Signal(CODE_BITS - 1)
        m.d.comb += magnitude.eq(Mux(rounding == Rounding.STOCHASTIC, stochastic, nearest))
        code = Signal(CODE_BITS)
        m.d.comb += code.eq(Mux(scale == SCALE_NAN, 0, Mux(sign, -magnitude, magnitude)))
        return code


def decode(code, scale):
    """The binary32 bit pattern of ``code * 2**(scale - 127)``, as ``sim.compression``'s
    ``dequantise`` (Amaranth values: a 4-bit two's complement code, an 8-bit scale)."""
    negative = code[CODE_BITS - 1]
    magnitude = Mux(negative, -code, code)[:CODE_BITS]
    lead = Mux(magnitude[3], 3, Mux(magnitude[2], 2, Mux(magnitude[1], 1, 0)))
    exp = scale + lead
    fraction = ((magnitude << FLOAT_FRAC_BITS) >> lead)[:FLOAT_FRAC_BITS]
    finite = Mux(exp == 0, magnitude << (FLOAT_FRAC_BITS - 1),
                 Cat(fraction, exp[:_EXP_BITS]))
    bounded = Mux(exp >= FLOAT_EXP_MAX, FLOAT_MAX, finite)[:_FLOAT_BITS - 1]
    return Mux(scale == SCALE_NAN, FLOAT_QNAN,
               Mux(magnitude == 0, 0, Cat(bounded, negative)))


class Dequantiser(wiring.Component):
    """Decode blocks of int4 codes and a scale to binary32 values, one value a cycle.

    A block is taken from ``i`` when the last value of the one before leaves, so blocks
    stream back to back.

    Attributes
    ----------
    i : In(stream.Signature(block_layout))
    o : Out(stream.Signature(32))
        binary32 bit patterns, ``BLOCK`` to a block, in code order.
    """

    i: In(stream.Signature(block_layout))
    o: Out(stream.Signature(_FLOAT_BITS))

    def elaborate(self, platform):
        m = Module()
        codes = Signal(CODE_BITS * BLOCK)
        scale = Signal(SCALE_BITS)
        left = Signal(range(BLOCK + 1))      # values of the held block not yet sent
        last = (left == 1) & self.o.ready
        m.d.comb += [self.o.valid.eq(left != 0),
                     self.o.payload.eq(decode(codes[:CODE_BITS], scale)),
                     self.i.ready.eq((left == 0) | last)]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += [codes.eq(codes >> CODE_BITS), left.eq(left - 1)]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [codes.eq(self.i.payload.codes), scale.eq(self.i.payload.scale),
                         left.eq(BLOCK)]
        return m


class CompressionUnit(wiring.Component):
    """A quantiser and a dequantiser side by side: one direction compresses what an
    accelerator sends, the other decodes what it receives.

    Parameters
    ----------
    seed : int
        The quantiser's LFSR seed after reset.

    Attributes
    ----------
    values_i, block_o, seed, rounding
        The :class:`Quantiser`'s ``i``, ``o``, ``seed`` and ``rounding``.
    block_i, values_o
        The :class:`Dequantiser`'s ``i`` and ``o``.
    """

    values_i: In(stream.Signature(_FLOAT_BITS))
    block_o: Out(stream.Signature(block_layout))
    seed: In(stream.Signature(LFSR_BITS, always_ready=True))
    rounding: In(Rounding)
    block_i: In(stream.Signature(block_layout))
    values_o: Out(stream.Signature(_FLOAT_BITS))

    def __init__(self, *, seed: int = 0):
        self._quantiser = Quantiser(seed=seed)
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.quantiser = quantiser = self._quantiser
        m.submodules.dequantiser = dequantiser = Dequantiser()
        wiring.connect(m, wiring.flipped(self.values_i), quantiser.i)
        wiring.connect(m, quantiser.o, wiring.flipped(self.block_o))
        wiring.connect(m, wiring.flipped(self.seed), quantiser.seed)
        m.d.comb += quantiser.rounding.eq(self.rounding)
        wiring.connect(m, wiring.flipped(self.block_i), dequantiser.i)
        wiring.connect(m, dequantiser.o, wiring.flipped(self.values_o))
        return m
