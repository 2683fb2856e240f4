"""The LFSR of ECN marking and of the fault injectors: its sequence, its seeds, and that
the one definition gives the same numbers as logic under Amaranth's simulator."""

import numpy as np
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from superfabric.config import FabricConfig
from superfabric.formats.lfsr import LFSR_BITS, lfsr_start, lfsr_step


def test_lfsr_has_full_period():
    state, seen = 0xACE1, set()
    for _ in range(65535):
        seen.add(state)
        state = lfsr_step(state)
    assert state == 0xACE1 and len(seen) == 65535 and 0 not in seen


def test_steps_arrays_of_states_as_integers():
    states = np.arange(1 << LFSR_BITS, dtype=np.int64)
    stepped = lfsr_step(states)
    assert stepped.tolist() == [lfsr_step(s) for s in range(1 << LFSR_BITS)]


def test_start_states_are_distinct_per_port_and_never_zero():
    for seed in (1, 0x1234, 0xFFFF, 0x9E37):
        starts = [lfsr_start(seed, port) for port in range(32)]
        assert len(set(starts)) == 32 and 0 not in starts
        assert all(0 < s < 1 << LFSR_BITS for s in starts)
    # The one seed that would give port 1 a zero state gets the substitute.
    assert lfsr_start(0x9E37, 1) == 0xACE1
    cfg = FabricConfig.load(overrides=["ecn.lfsr_seed=77", "faults.seed=78"])
    assert cfg.ecn.port_seed(5) == lfsr_start(77, 5) and cfg.faults.link_seed(5) == lfsr_start(78, 5)


def test_logic_equals_the_integer_function():
    # Every state through the step, and every seed through the start state of
    # port 3, as the RTL computes them.
    state, stepped, started = Signal(LFSR_BITS), Signal(LFSR_BITS), Signal(LFSR_BITS)
    m = Module()
    m.d.comb += [stepped.eq(lfsr_step(state)), started.eq(lfsr_start(state, 3))]
    wrong = []

    async def testbench(ctx):
        for value in range(1 << LFSR_BITS):
            ctx.set(state, value)
            if (ctx.get(stepped), ctx.get(started)) != (lfsr_step(value), lfsr_start(value, 3)):
                wrong.append(value)

    sim = Simulator(m)
    sim.add_testbench(testbench)
    sim.run()
    assert not wrong, f"{len(wrong)} states differ, first {wrong[0]:#06x}"
