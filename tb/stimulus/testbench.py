"""cocotb testbench of the stimulus top: configure, start, let the simulator run, read back.

No Python runs per cycle while the traffic flows. After reset the testbench
writes the run's settings through the configuration port, starts the run,
then waits in chunks of many cycles (``tb/chunks.py``) or the rise of ``done``,
whichever comes first. Between chunks it reads the progress ports
(``cycle``, ``generated``, ``delivered``, ``dropped``): they feed the
progress file and the stall detector. The clock is cocotb's C++ (GPI)
clock: its Python implementation would also wake Python at every edge.
At the end it reads every statistic back through the configuration port, a
block of words (the top's ``readout_words``, ``csr_rdata``'s width over 64)
per cycle. The comparison with the model happens in the parent process.

Parameters (``superfabric.tb.params``): ``settings`` (a
``StimulusSettings.to_dict()``), ``rtl_stats`` (where the statistics go),
``timing`` (a JSON file of the run's wall times), ``progress`` (a file of
one JSON line per chunk, optional), ``stall_limit``.
"""

import json
import time
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge

from ...sim.stimulus.top import StimulusStats
from ...sim.fabric.top import DEFAULT_STALL_LIMIT
from ...formats.stimulus import (CSR_DATA_BITS, RegisterMap, StimulusSettings, latency_bucket,
                                 readout_blocks, readout_values)
from .. import params as tb_params
from ..chunks import wait_in_chunks

__all__ = ["StimulusTB", "PERIOD_NS", "run_settings"]

#: Clock period, in ns.
PERIOD_NS = 10


class StimulusTB:
    """Clock, reset and configuration port of one stimulus top."""

    def __init__(self, dut, cfg):
        self.dut = dut
        self.cfg = cfg
        self.regmap = RegisterMap(cfg)

    async def reset(self):
        """Start the clock, hold reset for three cycles, release it after a falling edge."""
        dut = self.dut
        Clock(dut.clk, PERIOD_NS, unit="ns", impl="gpi").start()
        dut.rst.value = 1
        dut.csr_we.value = 0
        dut.csr_addr.value = 0
        dut.csr_wdata.value = 0
        for _ in range(3):
            await FallingEdge(dut.clk)
        dut.rst.value = 0

    async def write(self, address: int, value: int):
        """One register write: driven after a falling edge, taken at the next rising edge."""
        dut = self.dut
        dut.csr_addr.value = address
        dut.csr_wdata.value = value
        dut.csr_we.value = 1
        await FallingEdge(dut.clk)
        dut.csr_we.value = 0

    async def start(self, settings: StimulusSettings):
        """Write every setting, then arm the run: it begins (cycle 0) once the sinks have
        cleared their memories."""
        for address, value in self.regmap.writes(settings):
            await self.write(address, value)
        await self.write(self.regmap.CONTROL, 1)

    def _progress(self):
        dut = self.dut
        return (int(dut.cycle.value), int(dut.generated.value), int(dut.delivered.value),
                int(dut.dropped.value))

    async def run(self, settings: StimulusSettings, *, stall_limit: int, progress_path=None):
        """Wait, chunk by chunk, until ``done``; returns ``(stalled, chunks)``.

        Stalled: packets are in flight and none was generated, delivered or
        dropped for at least ``stall_limit`` cycles, as seen between chunks.
        """
        chunks = 0
        seen = self._progress()
        since = 0

        def look():
            nonlocal chunks, seen, since
            chunks += 1
            now = self._progress()
            done = bool(self.dut.done.value)
            line = {"cycle": now[0], "run_cycles": settings.run_cycles, "generated": now[1],
                    "delivered": now[2], "dropped": now[3], "done": done}
            if done:
                return line, False
            if now[1:] != seen[1:] or now[1] == now[2] + now[3]:
                since = now[0]
            elif now[0] - since >= stall_limit:
                return line, True
            seen = now
            return line, None
        stalled = await wait_in_chunks(self.dut, PERIOD_NS, progress_path, look)
        return stalled, chunks

    async def read(self, addresses):
        """The words at ``addresses``: every block that holds one is read, one per cycle
        (``csr_rdata`` lags its address by two)."""
        dut = self.dut
        size = len(dut.csr_rdata) // CSR_DATA_BITS
        mask = (1 << CSR_DATA_BITS) - 1
        blocks = readout_blocks(addresses, size)
        data = []
        await FallingEdge(dut.clk)
        for k, address in enumerate([*blocks, 0]):
            dut.csr_addr.value = address
            await FallingEdge(dut.clk)
            if k:
                value = dut.csr_rdata.value.to_unsigned()
                data += [value >> (CSR_DATA_BITS * j) & mask for j in range(size)]
        return readout_values(addresses, blocks, data, size)

    async def read_stats(self, stalled: bool) -> StimulusStats:
        """Every statistic. A sink's histogram buckets above the one of its largest latency
        are zero by construction (a bucket counts only latencies it holds) and not read;
        so are the blocks that hold none of the other buckets."""
        regmap, st = self.regmap, self.cfg.stimulus
        names, addresses = zip(*regmap.stat_words())
        words = {}
        for name, value in zip(names, await self.read(addresses)):
            words.setdefault(name, []).append(value)
        np_ = self.cfg.switch.priorities
        used = [latency_bucket(top, st.hist_sub_bits, st.hist_buckets) + 1
                if any(words["packets"][port * np_:(port + 1) * np_]) else 0
                for port, top in enumerate(words["latency_max"])]
        wanted = [(port, b) for port, n in enumerate(used) for b in range(n)]
        values = await self.read([regmap.hist_address(port, b) for port, b in wanted])
        histogram = [0] * (self.cfg.endpoints * st.hist_buckets)
        for (port, b), value in zip(wanted, values):
            histogram[port * st.hist_buckets + b] = value
        words["histogram"] = histogram
        return StimulusStats.from_words(self.cfg, words, stalled=stalled)


async def run_settings(dut):
    """Reset, configure and run the stimulus top with the parameters' settings; returns the
    testbench, the parameters, whether the run stalled, its chunks and its wall time."""
    cfg, p = tb_params.read()
    settings = StimulusSettings.from_dict(p["settings"])
    tb = StimulusTB(dut, cfg)
    await tb.reset()
    await tb.start(settings)
    t0 = time.perf_counter()
    stalled, chunks = await tb.run(settings, stall_limit=p.get("stall_limit", DEFAULT_STALL_LIMIT),
                                   progress_path=p.get("progress"))
    return tb, p, stalled, chunks, time.perf_counter() - t0


@cocotb.test()
async def stimulus_run(dut):
    """Configure, start and run the stimulus top; save its statistics and timing."""
    tb, p, stalled, chunks, run_seconds = await run_settings(dut)
    t1 = time.perf_counter()
    stats = await tb.read_stats(stalled)
    stats.save(p["rtl_stats"])
    Path(p["timing"]).write_text(json.dumps({
        "run_seconds": run_seconds, "readout_seconds": time.perf_counter() - t1,
        "cycles": stats.cycles, "chunks": chunks}) + "\n")
    dut._log.info(f"{stats.cycles} cycles in {run_seconds:.2f} s "
                  f"({stats.cycles / max(run_seconds, 1e-9):,.0f} cycles/s), {chunks} chunks")

