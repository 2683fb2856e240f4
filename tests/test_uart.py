"""The UART transmitter in Amaranth's simulator: every bit of every frame at its cycle, and
back-to-back bytes with the handshake."""

import random

import pytest
from amaranth.sim import Simulator

from superfabric.hdl.uart import UartTransmitter

from conftest import refusal


def transmit(data, *, clocks_per_bit, gap_probability=0.0, seed=0):
    """Offer ``data`` byte by byte (with random idle cycles between offers); return the
    line's level in every cycle and the cycles each byte was taken in."""
    dut = UartTransmitter(clocks_per_bit)
    rng = random.Random(seed)
    line, taken = [], []

    async def testbench(ctx):
        cycle = 0
        for byte in data:
            while rng.random() < gap_probability:
                ctx.set(dut.i.valid, 0)
                line.append(ctx.get(dut.tx))
                cycle += 1
                await ctx.tick()
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, byte)
            while True:
                line.append(ctx.get(dut.tx))
                ready = ctx.get(dut.i.ready)
                cycle += 1
                await ctx.tick()
                if ready:
                    taken.append(cycle - 1)
                    break
        ctx.set(dut.i.valid, 0)
        for _ in range(11 * clocks_per_bit):
            line.append(ctx.get(dut.tx))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    return line, taken


def expected_frame(byte, clocks_per_bit):
    bits = [0] + [byte >> k & 1 for k in range(8)] + [1]
    return [b for b in bits for _ in range(clocks_per_bit)]


@pytest.mark.parametrize("clocks_per_bit", [2, 5, 174])
def test_every_bit_of_a_frame_at_its_cycle(clocks_per_bit):
    data = [0x00, 0xFF, 0x55, 0xA5, 0x0D, 0x0A]
    line, taken = transmit(data, clocks_per_bit=clocks_per_bit)
    assert line[0] == 1                                   # idle high
    for byte, start in zip(data, taken):
        # The start bit begins at the edge that takes the byte.
        frame = line[start + 1:start + 1 + 10 * clocks_per_bit]
        assert frame == expected_frame(byte, clocks_per_bit), f"byte {byte:#04x}"
    # Back to back: the next byte is taken in the last cycle of the stop bit.
    assert [b - a for a, b in zip(taken, taken[1:])] == [10 * clocks_per_bit] * (len(data) - 1)
    assert line[taken[-1] + 1 + 10 * clocks_per_bit:] == [1] * clocks_per_bit


def test_idle_cycles_between_bytes_keep_the_line_high():
    rng = random.Random(7)
    data = [rng.randrange(256) for _ in range(40)]
    line, taken = transmit(data, clocks_per_bit=3, gap_probability=0.4, seed=7)
    for byte, start in zip(data, taken):
        assert line[start + 1:start + 31] == expected_frame(byte, 3)
    busy = {c for start in taken for c in range(start + 1, start + 31)}
    assert all(level == 1 for c, level in enumerate(line) if c not in busy)


def test_too_few_clocks_per_bit_is_refused():
    assert "clocks_per_bit = 1: must be an integer >= 2" in refusal(
        lambda: UartTransmitter(1), ValueError)
