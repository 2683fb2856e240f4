"""How every testbench starts the design: clock on, inputs quiet, reset held, then released."""

from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge

__all__ = ["CLOCK_PERIOD_NS", "RESET_CYCLES", "reset"]

#: Period of ``clk``, in ns (the timescale is 1 ns / 1 ps).
CLOCK_PERIOD_NS = 10
#: Cycles for which ``rst`` is held.
RESET_CYCLES = 3


async def reset(dut, quiet) -> None:
    """Start ``dut.clk``, hold ``dut.rst`` with every handle of ``quiet`` at 0, release it.

    Reset is released just after a falling edge, so the next cycle is the
    design's cycle 0 and the caller's first writes land where inputs are
    always driven, half a period before the edge that samples them.
    """
    Clock(dut.clk, CLOCK_PERIOD_NS, unit="ns").start()
    dut.rst.value = 1
    for handle in quiet:
        handle.value = 0
    await ClockCycles(dut.clk, RESET_CYCLES)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
