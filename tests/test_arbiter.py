"""The round-robin arbiter (``hdl/arbiter.py``) against its model (``sim/arbiter.py``) under
Amaranth's simulator: every request mask and pointer of small arbiters, and random ones of
the widest (32 requesters, iSLIP's limit)."""

import random

import numpy as np
import pytest
from conftest import refusal
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from superfabric.hdl.arbiter import round_robin_pick
from superfabric.sim.arbiter import first_at_or_after
from superfabric.sim.rdma.kernels.channels import SET_BITS, set_first, set_words


class _Arbiter(wiring.Component):
    """:func:`round_robin_pick` over ``n`` requesters, on ports."""

    def __init__(self, n: int):
        self._n = n
        super().__init__({"mask": In(n), "ptr": In(range(n)), "found": Out(1),
                          "index": Out(range(n))})

    def elaborate(self, platform):
        m = Module()
        found, index = round_robin_pick(m, self.mask, self.ptr, self._n, "pick")
        m.d.comb += [self.found.eq(found), self.index.eq(index)]
        return m


def check(n: int, cases) -> int:
    """Hold the RTL against the model on ``cases`` of ``(mask, ptr)``; returns how many."""
    dut = _Arbiter(n)
    checked = 0

    async def testbench(ctx):
        nonlocal checked
        for mask, ptr in cases:
            ctx.set(dut.mask, mask)
            ctx.set(dut.ptr, ptr)
            found = ctx.get(dut.found)
            assert found == (mask != 0), f"n={n} mask={mask:#x} ptr={ptr}: found is {found}"
            if mask:
                index, want = ctx.get(dut.index), first_at_or_after(mask, ptr)
                assert index == want, (
                    f"n={n} mask={mask:#x} ptr={ptr}: index is {index}, the model says {want}")
            checked += 1

    sim = Simulator(dut)            # combinational: no clock
    sim.add_testbench(testbench)
    sim.run()
    return checked


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_every_mask_and_pointer(n):
    cases = [(mask, ptr) for mask in range(1 << n) for ptr in range(n)]
    assert check(n, cases) == len(cases)


def test_widest():
    rng = random.Random(32)
    cases = [(rng.getrandbits(32) & rng.getrandbits(32), rng.randrange(32)) for _ in range(2000)]
    cases += [(1 << k, ptr) for k in range(32) for ptr in (0, k, 31)]
    assert check(32, cases) == len(cases)


def test_model_wraps_to_the_lowest_request():
    assert first_at_or_after(0b0101, 3) == 0
    assert first_at_or_after(0b0101, 1) == 2
    assert first_at_or_after(0b0101, 2) == 2


def _first_in_set(mask: int, ptr: int) -> int:
    """The RDMA engine kernels' pick (``set_first``) over ``mask`` as a set of 256."""
    words = set_words(256)
    bits = np.array([[(mask >> (SET_BITS * w)) & ((1 << SET_BITS) - 1)
                      for w in range(words)]], np.int64)
    return int(set_first(bits, 0, ptr))


def test_wide_model_is_the_same_rule():
    """The RDMA engine's model picks among up to 256 channels with the rule over bit sets."""
    for mask in range(1, 1 << 8):
        for ptr in range(8):
            assert _first_in_set(mask, ptr) == first_at_or_after(mask, ptr)
    wide = 1 << 255 | 1 << 40 | 1 << 3
    assert [_first_in_set(wide, ptr) for ptr in (0, 4, 41, 255)] == [3, 40, 255, 255]
    assert _first_in_set(1 << 40 | 1 << 3, 41) == 3


def test_rejects_no_requesters():
    assert refusal(lambda: round_robin_pick(Module(), 0, 0, 0, "none"), ValueError) == \
        "n must be a positive integer, not 0"
