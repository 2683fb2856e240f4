"""cocotb testbench of a collective on the RDMA fabric (``collective_fabric``): load, run,
read back; nothing per cycle.

Parameters (``superfabric.tb.params``): ``workload`` (an ``.npz`` of ``RdmaWorkload.save``:
the tables and the memories), ``schedule`` (an ``.npz`` from
``superfabric.tb.collective.runner``: every accelerator's steps and slots), the ``layout``
(``outbox``, ``notify``, ``staging``, ``capacity``), ``binary32``, ``limit`` (the cycles
the run may take), ``end_cycle`` (the cycle whose counters are read: the model run's end,
when the last acknowledgements are in) and ``rtl_run`` (where the results go).

Before cycle 0 the testbench writes the tables and the memories as the RDMA testbench does,
and every schedule, one step a cycle; in cycle 0 it raises ``run`` and then waits, without
a look per cycle, for ``done`` (or the limit) and for ``end_cycle``; it reads the counters
in that cycle, then the engines' timelines and the memories.
"""

import numpy as np

import cocotb
from cocotb.triggers import ClockCycles, FallingEdge, First, ReadOnly, RisingEdge

from ...formats import rdma_wire as wire
from ...formats.collective import SLOT_BITS, STEP_FIELDS
from ...hdl.collective.fabric import CYCLE_BITS
from ...sim.rdma.traffic import RdmaWorkload
from .. import params as tb_params
from ..rdma.testbench import RdmaTB

__all__ = ["CollectiveTB", "STEP_COLUMNS"]

#: The columns of the schedule file's ``steps``: the accelerator, then the step's fields.
STEP_COLUMNS = ("accelerator",) + tuple(name for name, _ in STEP_FIELDS)


class CollectiveTB(RdmaTB):
    """Clock, reset, loading and read-back of one ``collective_fabric`` instance."""

    inputs = ("sched_en", "sched_ep", "sched_addr", "sched_step", "steps", "slots", "outbox",
              "notify", "staging", "capacity", "binary32", "run", "timeline_addr", "tbl_en",
              "tbl_ep", "tbl_sel", "tbl_index", "tbl_data", "mem_we", "mem_addr", "mem_wdata",
              "fault_thresholds", "fault_reorder_cycles", "fault_seed", "fault_load")

    async def load_schedule(self, steps: np.ndarray) -> None:
        """Every accelerator's steps (rows of :data:`STEP_COLUMNS`), one a cycle."""
        dut = self.dut
        dut.sched_en.value = 1
        index = {}
        for row in steps.tolist():
            fields = dict(zip(STEP_COLUMNS, row))
            a = fields.pop("accelerator")
            dut.sched_ep.value = a
            dut.sched_addr.value = index.get(a, 0)
            dut.sched_step.value = wire.pack(STEP_FIELDS, **fields)
            index[a] = index.get(a, 0) + 1
            await FallingEdge(dut.clk)
        dut.sched_en.value = 0

    async def run(self, counts: np.ndarray, slots: np.ndarray, layout: dict, binary32: int,
                  limit: int, end_cycle: int) -> dict:
        """Start in this cycle (cycle 0); the run's results once ``done`` rose and
        ``end_cycle`` came, or once ``limit`` cycles passed."""
        dut, n = self.dut, self.n
        sb = len(dut.steps) // n
        dut.steps.value = sum(int(c) << (sb * a) for a, c in enumerate(counts))
        dut.slots.value = sum(int(s) << ((SLOT_BITS + 1) * a) for a, s in enumerate(slots))
        for name, value in layout.items():
            getattr(dut, name).value = value
        dut.binary32.value = binary32
        dut.run.value = 1
        while True:
            # ``done`` may glitch while inputs settle: a rise counts once it holds.
            await ReadOnly()
            now = int(dut.cycle.value)
            finished = bool(int(dut.done.value))
            if finished or now >= limit:
                break
            await First(RisingEdge(dut.done), ClockCycles(dut.clk, limit - now))
        if finished and end_cycle > now:
            await ClockCycles(dut.clk, end_cycle - now)
            await ReadOnly()
        out = {"finished": finished, "cycles": int(dut.cycle.value)}
        out["counters"] = self.read_counters()
        # Registered at the edge that ends this cycle: read in the next.
        await FallingEdge(dut.clk)
        await FallingEdge(dut.clk)
        out["done_at"] = self._per_endpoint(dut.done_at, CYCLE_BITS)
        out["errors"] = self._per_endpoint(dut.errors, wire.TAG_BITS)
        depth = max(int(counts.max(initial=0)), int(slots.max(initial=0)))
        started, applied = np.zeros((n, depth), np.int64), np.zeros((n, depth), np.int64)
        for k in range(depth):
            dut.timeline_addr.value = k
            await ReadOnly()
            started[:, k] = self._per_endpoint(dut.started_at, CYCLE_BITS)
            applied[:, k] = self._per_endpoint(dut.applied_at, CYCLE_BITS)
            await FallingEdge(dut.clk)
        out["started"], out["applied"] = started, applied
        return out

    def _per_endpoint(self, port, width: int) -> np.ndarray:
        return self.fields(port, width, self.n)


@cocotb.test()
async def collective_run(dut):
    """Run a collective and write the RTL's results."""
    cfg, p = tb_params.read()
    workload = RdmaWorkload.load(p["workload"])
    schedule = np.load(p["schedule"])
    tb = CollectiveTB(dut, cfg)
    await tb.reset()
    await tb.load(workload)
    await tb.load_schedule(schedule["steps"])
    out = await tb.run(schedule["counts"], schedule["slots"], p["layout"], p["binary32"],
                       p["limit"], p["end_cycle"])
    np.savez(p["rtl_run"], memory=await tb.read_memory(), **out)
