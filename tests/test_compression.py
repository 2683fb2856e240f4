"""Tests of the compression unit (section 16): the reference's rules alone (scale, rounding,
special values, round-trip error, unbiasedness, error feedback), and the RTL
(``hdl/compression.py``) against the reference (``sim/compression.py``) bit for bit in
Amaranth's simulator."""

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from superfabric.formats.compression import (BITS_PER_ELEMENT, BLOCK, CODE_MAX, FLOAT_MAX,
                                             FLOAT_QNAN, ROUND_NEAREST_EVEN, ROUND_STOCHASTIC,
                                             SCALE_BIAS, SCALE_NAN)
from superfabric.formats.lfsr import lfsr_start, lfsr_step
from superfabric.hdl.compression import CompressionUnit, Dequantiser, Quantiser, Rounding
from superfabric.sim.compression import (dequantise, error_feedback, from_bits, lfsr_advance,
                                         quantise, to_bits)

from conftest import refusal

MODES = [ROUND_NEAREST_EVEN, ROUND_STOCHASTIC]


def step(scale):
    """A block's step, ``2**(scale - 127)``, as float64."""
    return np.ldexp(1.0, np.asarray(scale, dtype=np.int64) - SCALE_BIAS)


def special_blocks():
    """Blocks of bit patterns at the edges of the format: zeros, subnormals, infinities,
    NaNs, the largest and smallest magnitudes, ties and the step-doubling boundary."""
    rng = np.random.default_rng(7)
    mixed = rng.standard_normal(BLOCK).astype(np.float32)
    signs = rng.integers(0, 2, BLOCK, dtype=np.uint32) << 31
    blocks = [
        np.zeros(BLOCK, np.uint32),                                   # all +0
        np.full(BLOCK, 0x80000000, np.uint32),                        # all -0
        rng.integers(1, 1 << 23, BLOCK, dtype=np.uint32),             # subnormals only
        rng.integers(1, 1 << 23, BLOCK, dtype=np.uint32) | signs,         # ... of both signs
        np.array([0x00800000] + [1] * (BLOCK - 1), np.uint32),       # smallest normal, tiniest
        np.full(BLOCK, 0x7F7FFFFF, np.uint32),                        # largest finite
        np.array([0x7F7FFFFF, 0xFF700000] * (BLOCK // 2), np.uint32),
        np.array([0x7F600000] * BLOCK, np.uint32),                    # 1.75 * 2**127: fine step
        np.array([0x7F600001] * BLOCK, np.uint32),                    # just above: coarse step
        to_bits(np.arange(BLOCK, dtype=np.float32) / 2 - 8),          # ties at half steps
        to_bits(np.where(np.arange(BLOCK) % 2, -1, 1) * np.float32(1.75)),
    ]
    for special in (0x7F800000, 0xFF800000, FLOAT_QNAN, 0x7F800001, 0xFFFFFFFF):
        block = to_bits(mixed).copy()
        block[rng.integers(BLOCK)] = special
        blocks.append(block)
    return blocks


def random_blocks(rng, count):
    """Normal values at magnitudes from 1e-40 to 1e38, and random bit patterns."""
    values = rng.standard_normal((count, BLOCK)) * 10.0 ** rng.uniform(-40, 38, (count, 1))
    patterns = rng.integers(0, 1 << 32, (count // 4, BLOCK), dtype=np.uint32)
    return list(to_bits(values.astype(np.float32))) + list(patterns)


# -- the reference alone ---------------------------------------------------------------


def test_bits_per_element_is_4_25():
    assert BITS_PER_ELEMENT == 4 + 8 / 32 == 4.25


def test_scale_is_the_smallest_step_that_keeps_codes_within_7():
    # max 7.0 = 1.75 * 2**2: step 1 (scale 127), code 7; max 7.5: step 2, code 4 (4 rounded).
    for top, scale, code in ((7.0, 127, 7), (7.5, 128, 4), (1.0, 125, 4), (0.875, 124, 7)):
        codes, scales, _ = quantise(to_bits(np.full(BLOCK, top, np.float32)), 1,
                                    ROUND_NEAREST_EVEN)
        assert scales == scale and (codes == code).all(), (top, scales, codes[0])


def test_nearest_even_rounds_ties_to_even_codes():
    values = (np.arange(BLOCK) % 15 - 7) / 2                     # -3.5 .. 3.5 in halves
    values[0] = 7.0                                                # the step is 1
    codes, scale, state = quantise(to_bits(values), 0xACE1, ROUND_NEAREST_EVEN)
    assert scale == 127 and state == 0xACE1, "nearest-even draws nothing"
    assert (codes == np.rint(values)).all()                       # rint: ties to even


def test_zero_subnormal_and_special_blocks_follow_the_documented_rules():
    zero, negative_zero, subnormal = special_blocks()[:3]
    for block in (zero, negative_zero):
        codes, scale, _ = quantise(block, 1, ROUND_STOCHASTIC)
        assert scale == 0 and not codes.any()
        assert not dequantise(codes, scale).any(), "zeros decode to +0"
    # Subnormals are kept: the scale floors at 0 (2**-127) and the codes are 0 or 1 steps.
    codes, scale, _ = quantise(subnormal, 1, ROUND_STOCHASTIC)
    assert scale == 0 and set(np.unique(codes)) <= {0, 1, 2} and codes.any()
    for block in special_blocks()[-5:]:
        codes, scale, _ = quantise(block, 1, ROUND_NEAREST_EVEN)
        assert scale == SCALE_NAN and not codes.any()
        assert (dequantise(codes, scale) == FLOAT_QNAN).all()


def test_dequantise_is_exact_and_saturates():
    codes = np.arange(-8, 8).repeat(2)
    for scale in (0, 1, 100, 127, 200, 251):          # 8 * 2**(251 - 127) < 2**128
        got = from_bits(dequantise(codes, scale)).astype(np.float64)
        assert (got == codes * step(scale)).all(), scale
    # 4 * 2**126 = 2**128 is beyond binary32: saturated, with its sign.
    got = dequantise(np.array([4, -4, 3] + [0] * (BLOCK - 3)), 253)
    assert list(got[:3]) == [FLOAT_MAX, FLOAT_MAX | 1 << 31, 0x7F400000]


@pytest.mark.parametrize("rounding", MODES)
def test_round_trip_error_is_within_a_step(rounding):
    rng = np.random.default_rng(3)
    blocks = np.array([b for b in random_blocks(rng, 400) + special_blocks()
                       if (b & 0x7F800000 != 0x7F800000).all()])
    codes, scale, _ = quantise(blocks, rng.integers(1, 1 << 16, len(blocks)), rounding)
    assert np.abs(codes).max() <= CODE_MAX, "the grid is symmetric: -8 is never written"
    x = from_bits(blocks).astype(np.float64)
    error = np.abs(from_bits(dequantise(codes, scale)) - x)
    bound = step(scale)[:, None] * (0.5 if rounding == ROUND_NEAREST_EVEN else 1.0)
    assert (error <= bound).all()
    # ... and the step is at most 2/7 of the block's largest magnitude where the scale is
    # not floored at 0 (a quarter, mostly).
    top = np.abs(x).max(axis=1)
    unfloored = top >= 2.0 ** -125
    assert (step(scale)[unfloored] <= top[unfloored] * 2 / 7).all()


def test_the_lfsr_looked_up_is_the_lfsr_stepped():
    # The draws of many blocks are looked up in the LFSR's cycle, not stepped: the same states.
    starts = np.array([1, 0xACE1, 0xFFFF, lfsr_start(7, 3)])
    state = starts.copy()
    for k in range(1, 2 * (1 << 16) + 5):
        state = lfsr_step(state)
        if k in (1, 16, 512, 65534, 65535, 65536, 2 * (1 << 16) + 4):
            assert (lfsr_advance(starts, k) == state).all(), k
    assert (lfsr_advance(starts, 0) == starts).all()


def test_stochastic_rounding_is_unbiased_over_1000_seeds():
    rng = np.random.default_rng(11)
    values = np.concatenate([rng.standard_normal((4, BLOCK)) * [[1e-3], [1.0], [3e5], [1e30]],
                             from_bits(special_blocks()[2])[None].astype(np.float64)])
    values = values.astype(np.float32)
    seeds = 1000
    # One LFSR per seed, started as the fabric's endpoints' are: lfsr_start(seed, lane).
    states = np.array([[lfsr_start(5, seed * len(values) + b) for b in range(len(values))]
                       for seed in range(seeds)])
    blocks = np.broadcast_to(to_bits(values), (seeds,) + values.shape)
    for rounding, unbiased in ((ROUND_STOCHASTIC, True), (ROUND_NEAREST_EVEN, False)):
        codes, scale, _ = quantise(blocks, states, rounding)
        error = from_bits(dequantise(codes, scale)).astype(np.float64) - values
        mean, spread = error.mean(axis=0), error.std(axis=0, ddof=1) / np.sqrt(seeds)
        # An element on the grid has no error at all; every other one is within 3 SE.
        within = np.where(spread > 0, np.abs(mean) <= 3 * spread, mean == 0)
        assert within.all() == unbiased, (rounding, np.argwhere(~within))


@pytest.mark.parametrize("rounding", MODES)
def test_error_feedback_keeps_the_running_sum_within_a_step(rounding):
    rng = np.random.default_rng(13)
    blocks, steps = 64, 300
    residual = np.zeros((blocks, BLOCK), np.float32)
    states = np.array([lfsr_start(9, b) for b in range(blocks)])
    plain_states = np.array([lfsr_start(10, b) for b in range(blocks)])
    true_sum, sent_sum, plain_sum = (np.zeros((blocks, BLOCK)) for _ in range(3))
    for _ in range(steps):
        # A gradient with a small steady drift under noise: the drift alone is below half a
        # step, so without feedback nearest-even rounding loses it entirely.
        gradient = (0.1 + rng.standard_normal((blocks, BLOCK))).astype(np.float32)
        codes, scale, states, residual = error_feedback(gradient, residual, states, rounding)
        sent_sum += from_bits(dequantise(codes, scale))
        plain, plain_scale, plain_states = quantise(to_bits(gradient), plain_states, rounding)
        plain_sum += from_bits(dequantise(plain, plain_scale))
        true_sum += gradient
    last_step = step(scale)[:, None]
    assert (np.abs(sent_sum - true_sum) <= last_step).all()
    assert (np.abs(residual) <= last_step).all()
    assert (np.abs(plain_sum - true_sum) > last_step).any(), "feedback changed nothing"


def test_quantise_refuses_bad_arguments():
    with pytest.raises(ValueError, match="rounding"):
        quantise(np.zeros(BLOCK, np.uint32), 1, 2)
    with pytest.raises(ValueError, match="blocks of 32"):
        quantise(np.zeros(16, np.uint32), 1, ROUND_STOCHASTIC)
    with pytest.raises(ValueError, match="state"):
        quantise(np.zeros((2, BLOCK), np.uint32), [1, 0], ROUND_STOCHASTIC)
    with pytest.raises(ValueError, match="-8..7"):
        dequantise(np.full(BLOCK, 8), 127)


# -- RTL against the reference in Amaranth's simulator ---------------------------------


def test_constructors_refuse_bad_seeds():
    assert "seed" in refusal(lambda: Quantiser(seed=-1), ValueError)
    assert "seed" in refusal(lambda: Quantiser(seed=1 << 16), ValueError)
    assert "'x'" in refusal(lambda: CompressionUnit(seed="x"), TypeError)
    assert "positional" in refusal(lambda: Quantiser(3), TypeError)


def run_quantiser(blocks, modes, *, seed, rng):
    """Send ``blocks`` through a :class:`Quantiser` seeded through its ``seed`` port, block
    ``b`` in rounding mode ``modes[b]``, with random gaps on ``i`` and stalls on ``o``;
    returns the (codes, scale) it sends."""
    dut = Quantiser(seed=0x1234)
    out = []

    async def testbench(ctx):
        ctx.set(dut.seed.payload, seed)
        ctx.set(dut.seed.valid, 1)
        await ctx.tick()
        ctx.set(dut.seed.valid, 0)
        for block, mode in zip(blocks, modes):
            ctx.set(dut.rounding, Rounding(mode))
            for value in block:
                while rng.random() < 0.2:
                    await ctx.tick()
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload, int(value))
                await ctx.tick().until(dut.i.ready)
                ctx.set(dut.i.valid, 0)
            while rng.random() < 0.3:
                await ctx.tick()
            ctx.set(dut.o.ready, 1)
            codes, scale = await ctx.tick().sample(dut.o.payload.codes,
                                                   dut.o.payload.scale).until(dut.o.valid)
            ctx.set(dut.o.ready, 0)
            out.append((codes, scale))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    return out


def packed(codes) -> int:
    """A block's codes as the RTL packs them: code ``k`` in bits ``4k..4k+3``."""
    return sum((int(c) & 0xF) << (4 * k) for k, c in enumerate(codes))


@pytest.mark.parametrize("seed", [0, 1, 0xBEEF])
def test_rtl_quantiser_matches_the_reference(seed):
    rng = np.random.default_rng(seed)
    # Every block in both modes, the mode changing from block to block.
    blocks = [b for b in special_blocks() + random_blocks(rng, 12) for _ in MODES]
    modes = MODES * (len(blocks) // 2)
    got = run_quantiser(blocks, modes, seed=seed, rng=random.Random(seed))
    assert len(got) == len(blocks)
    state = lfsr_start(seed, 0)
    for b, (block, mode) in enumerate(zip(blocks, modes)):
        codes, scale, state = quantise(block, state, mode)
        assert got[b] == (packed(codes), int(scale)), (
            f"block {b} ({'stochastic' if mode else 'nearest-even'}): RTL scale {got[b][1]}, "
            f"codes {got[b][0]:#034x}; reference scale {scale}, codes {packed(codes):#034x}")


def test_rtl_dequantiser_matches_the_reference():
    rng = np.random.default_rng(17)
    blocks = [(rng.integers(-8, 8, BLOCK), int(s)) for s in
              [0, 1, 2, 126, 127, 128, 252, 253, 254, SCALE_NAN] + list(rng.integers(0, 256, 6))]
    dut = Dequantiser()
    r = random.Random(17)
    got = []

    async def testbench(ctx):
        for codes, scale in blocks:
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, {"codes": packed(codes), "scale": scale})
            await ctx.tick().until(dut.i.ready)
            ctx.set(dut.i.valid, 0)
            for _ in range(BLOCK):
                while r.random() < 0.2:
                    await ctx.tick()
                ctx.set(dut.o.ready, 1)
                value, = await ctx.tick().sample(dut.o.payload).until(dut.o.valid)
                ctx.set(dut.o.ready, 0)
                got.append(value)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    want = [int(v) for codes, scale in blocks for v in dequantise(codes, scale)]
    assert got == want
