"""cocotb testbench of the hardware-hosted RDMA top (``rdma_hosted``, section 10.16): play
the script, let the simulator run, read back; nothing per cycle.

Parameters (``superfabric.tb.params``): ``script`` (a file of ``script.write_script``),
``limit`` (the cycles the run may take), ``rtl_run`` (where the results go, a JSON file)
and ``progress`` (a file of one JSON line per chunk, optional). The lines before the
script's ``wait`` load the hosts, tables, memories and faults and raise ``run`` (cycle 0);
then the testbench waits in chunks of many cycles (``tb/chunks.py``: cocotb wakes no
Python per cycle, the clock being cocotb's C++ one) or the rise of ``done``, whichever
comes first, reads ``cycle`` and the counters in the cycle ``done`` rose, plays the lines
after ``wait`` (the memories' sweep) and reads the hashes. The plain harness
``tools/rdma_harness.cpp`` does the same in C++.
"""

import json
import time
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly

from .. import params as tb_params
from ..chunks import wait_in_chunks
from ..reset import CLOCK_PERIOD_NS, RESET_CYCLES
from .script import WAIT, read_script
from .testbench import play

__all__ = ["rdma_hosted"]


async def _wait(dut, limit: int, progress_path) -> None:
    """Until ``done`` or ``limit`` cycles, chunk by chunk, a progress line after each."""
    def look():
        cycle, done = int(dut.cycle.value), bool(int(dut.done.value))
        return ({"cycle": cycle, "limit": limit, "done": done},
                True if done or cycle >= limit else None)
    await wait_in_chunks(dut, CLOCK_PERIOD_NS, progress_path, look)


@cocotb.test()
async def rdma_hosted(dut):
    """Load, run until ``done`` and sweep the memories; write the run's results."""
    _, p = tb_params.read()
    lines = read_script(p["script"])
    wait = lines.index(WAIT)
    Clock(dut.clk, CLOCK_PERIOD_NS, unit="ns", impl="gpi").start()
    dut.rst.value = 1
    for name in {name for line in lines if line != WAIT for name in line}:
        getattr(dut, name).value = 0
    for _ in range(RESET_CYCLES):
        await FallingEdge(dut.clk)
    dut.rst.value = 0
    await play(dut, lines[:wait])
    t0 = time.perf_counter()
    await _wait(dut, p["limit"], p.get("progress"))
    run_seconds = time.perf_counter() - t0
    out = {"finished": bool(int(dut.done.value)), "cycles": int(dut.cycle.value),
           "run_seconds": run_seconds, "counters": hex(int(dut.counters.value))}
    await FallingEdge(dut.clk)
    await play(dut, lines[wait + 1:])
    await ReadOnly()
    out["hashes"] = hex(int(dut.hashes.value))
    Path(p["rtl_run"]).write_text(json.dumps(out) + "\n")
    dut._log.info(f"{out['cycles']} cycles in {run_seconds:.2f} s "
                  f"({out['cycles'] / max(run_seconds, 1e-9):,.0f} cycles/s)")
