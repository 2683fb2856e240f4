"""The collective engine's adder (``hdl/collective/adder.py``) against its model
(``sim/collective/adder.py``): int32 and binary32 lanes, bit for bit, on special values,
subnormals, cancellations, ties, overflows and random patterns; and the model against plain
numpy wherever numpy's result is fixed (every sum that is not a NaN)."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from superfabric.config import FabricConfig
from superfabric.formats.collective import DEFAULT_NAN
from superfabric.hdl.collective.adder import LaneAdder
from superfabric.hdl.verilog import write_verilog
from superfabric.sim.collective.adder import add

from conftest import assert_lint_clean, require_simulator

#: binary32 patterns at the edges: zeros, subnormals, the smallest normals, one, the largest
#: finite values, infinities, quiet and signalling NaNs with payloads.
SPECIAL = [0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF,
           0x00400000, 0x00800000, 0x80800000, 0x00800001, 0x3F800000, 0xBF800000,
           0x3F800001, 0x33800000, 0xB3800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7FFFFE,
           0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7FC00005, 0x7F800001,
           0xFF800003, 0x7FBFFFFF]


def rtl_sums(here, staged, binary32: bool) -> np.ndarray:
    """The adder's lanes for the pairs ``here[i]``, ``staged[i]`` (uint32 arrays), two pairs a
    word."""
    dut = LaneAdder()
    got = []

    async def testbench(ctx):
        ctx.set(dut.binary32, int(binary32))
        for i in range(0, len(here), 2):
            ctx.set(dut.here, int(here[i]) | int(here[i + 1]) << 32)
            ctx.set(dut.staged, int(staged[i]) | int(staged[i + 1]) << 32)
            word = ctx.get(dut.sum)
            got.extend([word & 0xFFFFFFFF, word >> 32])

    sim = Simulator(dut)
    sim.add_testbench(testbench)
    sim.run()
    return np.array(got, np.uint32)


def model_sums(here, staged, binary32: bool) -> np.ndarray:
    dtype = np.float32 if binary32 else np.int32
    return add(here.view(dtype), staged.view(dtype)).view(np.uint32)


def first_differences(here, staged, got, want) -> str:
    bad = np.flatnonzero(got != want)
    return f"{bad.size} of {len(here)} sums differ, first " + ", ".join(
        f"{here[i]:#010x} + {staged[i]:#010x}: {got[i]:#010x} against {want[i]:#010x}"
        for i in bad[:3])


def assert_equal(here, staged, binary32: bool) -> None:
    """The RTL equals the model on every pair, and the model equals numpy on every pair
    whose numpy sum is not a NaN."""
    got, want = rtl_sums(here, staged, binary32), model_sums(here, staged, binary32)
    assert np.array_equal(got, want), "RTL against model: " + first_differences(
        here, staged, got, want)
    dtype = np.float32 if binary32 else np.int32
    with np.errstate(all="ignore"):
        plain = here.view(dtype) + staged.view(dtype)
    fixed = ~np.isnan(plain) if binary32 else np.ones(len(here), bool)
    assert np.array_equal(want[fixed], plain.view(np.uint32)[fixed]), (
        "model against numpy: " + first_differences(here[fixed], staged[fixed], want[fixed],
                                                   plain.view(np.uint32)[fixed]))


def pairs(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` pairs drawn to reach every path of the adder: random patterns; operands whose
    exponents differ by 0 to 30 (alignment, sticky bits, ties); near-cancellations of
    opposite signs; subnormals; sums that round into the next binade or overflow."""
    def patterns(size):
        return rng.integers(0, 1 << 32, size, dtype=np.uint64).astype(np.uint32)

    k = n // 6
    a = [patterns(k)]
    b = [patterns(k)]
    # Exponents a few apart, any signs.
    x = patterns(k) & 0x807FFFFF | (rng.integers(1, 254, k).astype(np.uint32) << 23)
    exp = ((x >> 23) & 0xFF).astype(np.int64) - rng.integers(0, 31, k)
    y = patterns(k) & 0x807FFFFF | (np.clip(exp, 0, 254).astype(np.uint32) << 23)
    a.append(x), b.append(y)
    # Cancellation: the other operand the negation of one a few ulps away.
    x = patterns(k) & 0x7FFFFFFF
    x = np.where((x >> 23) == 0xFF, x & 0x3FFFFFFF, x).astype(np.uint32)
    y = (x.astype(np.int64) + rng.integers(-4, 5, k)).clip(0, 0x7F7FFFFF).astype(np.uint32)
    a.append(x), b.append(y ^ 0x80000000)
    # Subnormals and the smallest normals, either sign.
    a.append(patterns(k) & 0x80FFFFFF), b.append(patterns(k) & 0x80FFFFFF)
    # Ties: low bits of the smaller exactly half an ulp of the larger's result.
    x = patterns(k) & 0x807FFFFF | (rng.integers(30, 200, k).astype(np.uint32) << 23)
    y = (x & 0x80000000 | (((x >> 23) & 0xFF) - 24) << 23 | (patterns(k) & 1)).astype(np.uint32)
    a.append(x), b.append(y)
    # Near the top: sums that round up into overflow, or just do not.
    a.append(0x7F000000 | patterns(k) & 0x80FFFFFF), b.append(0x7F000000 | patterns(k) & 0x80FFFFFF)
    here, staged = np.concatenate(a), np.concatenate(b)
    swap = rng.random(here.size) < 0.5
    return np.where(swap, staged, here), np.where(swap, here, staged)


def test_binary32_special_values_every_pair():
    specials = np.array(SPECIAL, np.uint32)
    here, staged = np.repeat(specials, len(SPECIAL)), np.tile(specials, len(SPECIAL))
    assert_equal(here, staged, binary32=True)


def test_binary32_nan_rules_the_module_documents():
    here = np.array([0x7F800001, 0x7FC00005, 0x3F800000, 0x7F800000, 0xFF800000, 0x80000000,
                     0x80000000, 0x3F800000], np.uint32)
    staged = np.array([0x7FC00005, 0x7F800001, 0xFF800003, 0xFF800000, 0x7F800000, 0x00000000,
                       0x80000000, 0xBF800000], np.uint32)
    want = [0x7FC00001, 0x7FC00005, 0xFFC00003, DEFAULT_NAN, DEFAULT_NAN, 0, 0x80000000, 0]
    assert rtl_sums(here, staged, binary32=True).tolist() == want
    assert model_sums(here, staged, binary32=True).tolist() == want


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_binary32_equals_numpy(seed):
    assert_equal(*pairs(np.random.default_rng(seed), 6_000), binary32=True)


def test_int32_wraps_as_numpy():
    rng = np.random.default_rng(5)
    here, staged = pairs(rng, 1_200)
    edges = np.array([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF], np.uint32)
    # 1,225 pairs and one more, for whole words.
    here = np.concatenate([here, np.repeat(edges, 5), [0]]).astype(np.uint32)
    staged = np.concatenate([staged, np.tile(edges, 5), [0]]).astype(np.uint32)
    assert_equal(here, staged, binary32=False)


def test_the_lanes_are_independent():
    """A word's lanes add apart: no carry crosses from the low lane into the high one."""
    here = np.array([0xFFFFFFFF, 0x00000000, 0x7F7FFFFF, 0x3F800000], np.uint32)
    staged = np.array([0x00000001, 0x00000000, 0x7F7FFFFF, 0x3F800000], np.uint32)
    assert rtl_sums(here[:2], staged[:2], binary32=False).tolist() == [0, 0]
    assert rtl_sums(here[2:], staged[2:], binary32=True).tolist() == [0x7F800000, 0x40000000]


def test_the_adder_is_lint_clean(tmp_path):
    require_simulator("verilator")
    require_simulator("icarus")
    path = write_verilog(FabricConfig.load(preset="default"), tmp_path, top="lane_adder",
                         component=LaneAdder())
    assert "module lane_adder(" in path.read_text()
    assert_lint_clean(tmp_path, path)
