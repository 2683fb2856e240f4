"""cocotb testbench of :class:`~superfabric.hdl.board.run.BoardRun`: reset it, then read its
UART as a terminal would until it says it has finished.

Nothing is written to the block: it loads its settings and starts the run
itself, as on a board. The testbench wakes on each start bit's falling edge
and samples every bit in its middle (Python per bit, none per cycle while
the traffic runs), then saves the text, the LEDs and the cycle count.

Parameters (``superfabric.tb.params``): ``clocks_per_bit``, ``out`` (a JSON file).
"""

import json

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, First, RisingEdge, Timer

from .. import params as tb_params

__all__ = ["PERIOD_NS", "uart_byte"]

#: Clock period, in ns.
PERIOD_NS = 10


async def uart_byte(line, bit_ns: float) -> int:
    """The byte whose start bit began at the falling edge just seen on ``line``: each bit
    sampled in its middle; a missing stop bit is an error."""
    await Timer(bit_ns * 1.5, unit="ns")
    value = 0
    for k in range(8):
        value |= int(line.value) << k
        await Timer(bit_ns, unit="ns")
    if int(line.value) != 1:
        raise AssertionError("UART framing error: the stop bit is low")
    return value


@cocotb.test()
async def board_run(dut):
    """Reset, then decode the UART until ``finished``; save the text and the LEDs."""
    _, p = tb_params.read()
    bit_ns = p["clocks_per_bit"] * PERIOD_NS
    Clock(dut.clk, PERIOD_NS, unit="ns", impl="gpi").start()
    dut.rst.value = 1
    for _ in range(3):
        await FallingEdge(dut.clk)
    dut.rst.value = 0
    received = bytearray()
    finished = RisingEdge(dut.finished)
    while True:
        edge = await First(FallingEdge(dut.tx), finished)
        if edge is finished:
            break
        received.append(await uart_byte(dut.tx, bit_ns))
    await FallingEdge(dut.clk)
    with open(p["out"], "w") as f:
        json.dump({"text": received.decode("ascii"), "mismatch": int(dut.mismatch.value),
                   "running": int(dut.running.value), "finished": int(dut.finished.value),
                   "ns": cocotb.utils.get_sim_time("ns")}, f)
