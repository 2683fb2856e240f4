"""cocotb testbench of the RDMA fabric: post work requests, record completions.

Parameters (``superfabric.tb.params``): ``workload`` (an ``.npz`` from
``RdmaWorkload.save``), ``rtl_records`` (where to write the RTL's
records) and ``stall_limit``. The scoreboard checks the records, and holds
them against the golden model's, in the caller
(``superfabric.tb.rdma.runner``), once, outside the simulator.

The testbench plays the hosts: before cycle 0 it writes every endpoint's
registration and page tables and loads the host memories (one address of
all endpoints per cycle) and the fault injectors' seeds; from cycle 0 it
offers each endpoint's WRs from its send queues (the model's own,
``superfabric.sim.rdma.kernels.send_queues``, with the engines' free window
slots read from the RTL), and records every completion, pause frame, CNP,
rate change and each output's queue depth;
after the last completion it reads the counters (and on a fabric each link's flits) and
reads the host memories back. All per-endpoint signals are packed vectors, so a cycle
costs a handful of signal accesses whatever the endpoint count.
"""

import numpy as np

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly

from ...formats import rdma_wire as wire
from ...formats.counters import COUNTER_WIDTH, RDMA_COUNTERS
from ...formats.dcqcn import RATE_BITS
from ...formats.packet import port_bits
from ...formats.pfc_frame import PRIORITIES, TIME_BITS, unpack_request
from ...sim.kernel import specialise
from ...sim.rdma.kernels.send_queues import (send_queues_offer, send_queues_params,
                                             send_queues_state, send_queues_taken, window_state)
from ...sim.rdma.records import (CNP_COLUMNS, RATE_COLUMNS, RX_COMPLETION_COLUMNS, RdmaRecords,
                                event_rows)
from ...sim.rdma.traffic import RdmaWorkload
from ...sim.rdma.fabric import default_stall_limit
from .. import params as tb_params
from ..reset import reset
from .script import load_lines

__all__ = ["RdmaTB", "play"]

#: Bits of one pause request on the ``pfc_tx`` port.
_REQUEST_BITS = PRIORITIES + TIME_BITS * PRIORITIES

#: The fabric's inputs, quiet during reset.
_INPUTS = ("wr_valid", "wr_data", "tbl_en", "tbl_ep", "tbl_sel", "tbl_index", "tbl_data", "mem_we",
           "mem_addr", "mem_wdata", "fault_thresholds", "fault_reorder_cycles", "fault_seed",
           "fault_load")


class RdmaTB:
    """Clock, reset, host side and fault settings of one RDMA fabric instance."""

    #: The top's inputs, held at 0 during reset.
    inputs = _INPUTS

    def __init__(self, dut, cfg):
        self.dut = dut
        self.cfg = cfg
        self.n = cfg.endpoints
        self.wr_fields = wire.wr_fields(self.n)
        self.wr_width = sum(w for _, w in self.wr_fields)
        self.cpl_fields = wire.CPL_FIELDS
        self.cpl_width = sum(w for _, w in self.cpl_fields)
        self.rcpl_fields = wire.rcpl_fields(self.n)
        self.rcpl_width = sum(w for _, w in self.rcpl_fields)
        self.channels = self.n * cfg.rdma.channels_per_peer       # per engine
        self.free_bits = wire.free_slot_bits(cfg.rdma.window)
        self.context_bits = port_bits(self.channels)
        self.depth_bits = wire.queue_depth_bits(cfg)

    async def reset(self):
        """Start the clock and hold reset for a few cycles with every input quiet."""
        await reset(self.dut, [getattr(self.dut, name) for name in self.inputs])

    async def load(self, workload: RdmaWorkload):
        """Tables, host memories and fault settings, one write per cycle, before cycle 0
        (``script.load_lines``)."""
        await play(self.dut, load_lines(self.cfg, workload))
        self.dut.fault_load.value = 0

    async def run(self, workload: RdmaWorkload, stall_limit: int) -> RdmaRecords:
        """Post the WRs from cycle 0 (the cycle after loading) until every one completed."""
        dut, n, cfg = self.dut, self.n, self.cfg
        wr = workload.wr
        rows = len(workload)
        rec = RdmaRecords.empty(rows, n, cfg.rdma.memory_words)
        prm, sq = send_queues_params(cfg), send_queues_state(cfg, workload, rows)
        nxt, ret = window_state(prm, np.zeros((n, self.channels), np.int64))
        offer = specialise(send_queues_offer, sq, prm, 0, 0, nxt, ret)
        take = specialise(send_queues_taken, sq, prm, 0)
        packed = [wire.pack(self.wr_fields, **{k: int(wr[k][i]) for k, _ in self.wr_fields})
                  for i in range(rows)]
        taken, done, status, count, order = ([-1] * rows, [-1] * rows, [-1] * rows, [0] * rows,
                                             [-1] * rows)
        given = [0] * n
        rx, cnps, rates, frames, depths = [], [], [], [], []
        cw, rw, ww = self.cpl_width, self.rcpl_width, self.wr_width
        nc, fb = self.channels, self.free_bits
        db, dmask = self.depth_bits, (1 << self.depth_bits) - 1
        valid_driven, data_driven = 0, 0
        completed = 0
        cycle = 0
        last_progress = 0
        stalled = False
        while completed < rows:
            # Drive phase (after the falling edge): the WR each endpoint offers,
            # chosen with the window slots free at the start of this cycle. Only an
            # endpoint with none offered and its oldest queued WR posted may choose, and
            # only then are the free slots read.
            first = sq.h_first
            choosing = np.flatnonzero((sq.offered < 0) & (first >= 0)
                                      & (sq.post[first] <= cycle)).tolist()
            if choosing:
                nxt, ret = window_state(prm, self.fields(dut.free, fb, n * nc).reshape(n, nc))
                for e in choosing:
                    offer(sq, prm, e, cycle, nxt, ret)
            valid, data = 0, data_driven
            for e, row in enumerate(sq.offered.tolist()):
                if row >= 0:
                    valid |= 1 << e
                    data = (data & ~(((1 << ww) - 1) << (ww * e))) | (packed[row] << (ww * e))
            if valid != valid_driven:
                dut.wr_valid.value = valid
                valid_driven = valid
            if data != data_driven:
                dut.wr_data.value = data
                data_driven = data
            await ReadOnly()
            progress = False
            if valid:
                accepted = valid & int(dut.wr_ready.value)
                for e in range(n):
                    if accepted >> e & 1:
                        taken[sq.offered[e]] = cycle
                        take(sq, prm, e)
                        progress = True
            for e, c in self._given(dut.cpl_valid, dut.cpl_data, self.cpl_fields, cw):
                i = c["tag"]
                if 0 <= i < rows and wr["src"][i] == e:
                    if count[i] == 0:
                        done[i], status[i], order[i] = cycle, c["status"], given[e]
                        completed += 1
                    count[i] += 1
                given[e] += 1
                progress = True
            for e, c in self._given(dut.rcpl_valid, dut.rcpl_data, self.rcpl_fields, rw):
                rx.append((cycle, e, c["src"], c["qp"], c["length"]))
            depth = int(dut.queue_depth.value)
            depths.append([(depth >> (db * o)) & dmask for o in range(n)])
            self._events(cycle, frames, cnps, rates)
            # A packet retired is progress too: a long message completes only
            # at its last packet.
            progress = progress or bool(int(dut.retired.value))
            if progress:
                last_progress = cycle
            elif cycle - last_progress >= stall_limit:
                stalled = True
                await FallingEdge(dut.clk)
                cycle += 1
                break
            await FallingEdge(dut.clk)
            cycle += 1
        # Now in cycle `cycle`, one after the last completion: the counters
        # hold every event up to it, as the model's do, and the rates show
        # the changes at its last edge.
        await ReadOnly()
        self._rate_changes(cycle, rates, int(dut.events.value))
        counters = self.read_counters()
        for k, name in enumerate(RDMA_COUNTERS):
            rec.counters[name][:] = counters[:, k].tolist()
        if cfg.fabric.is_fabric:
            rec.link_flits = self.fields(dut.link_flits, COUNTER_WIDTH,
                                         len(dut.link_flits) // COUNTER_WIDTH)
        rec.taken[:], rec.done[:], rec.status[:] = taken, done, status
        rec.completions[:], rec.order[:] = count, order
        rec.rx_completions = np.array(rx, np.int64).reshape(-1, len(RX_COMPLETION_COLUMNS))
        rec.cnps = event_rows(cnps, CNP_COLUMNS)
        rec.rates = event_rows(rates, RATE_COLUMNS)
        rec.pfc_frames = np.array(frames, np.int64).reshape(-1, 3 + PRIORITIES)
        rec.queue_depth = np.array(depths, np.int32).reshape(-1, n)
        rec.cycles = cycle
        rec.stalled = stalled
        if stalled:
            rec.stuck = _owing(workload, rec, cfg)
        await FallingEdge(dut.clk)
        rec.memory = await self.read_memory()
        return rec

    def _events(self, cycle: int, frames: list, cnps: list, rates: list) -> None:
        """This cycle's pause frames and CNPs, and the rate changes of the last edge."""
        events = int(self.dut.events.value)
        if not events:
            return
        n = self.n
        sent = events & ((1 << n) - 1)
        if sent:
            bits = int(self.dut.pfc_tx.value)
            for port in range(n):
                if sent >> port & 1:
                    enable, times = unpack_request((bits >> (_REQUEST_BITS * port))
                                                   & ((1 << _REQUEST_BITS) - 1))
                    frames.append([cycle, port, enable, *times])
        cnp = (events >> n) & ((1 << n) - 1)
        if cnp:
            bits, cb = int(self.dut.cnp_context.value), self.context_bits
            for e in range(n):
                if cnp >> e & 1:
                    cnps.append((cycle, e, (bits >> (cb * e)) & ((1 << cb) - 1)))
        self._rate_changes(cycle, rates, events)

    def _rate_changes(self, cycle: int, rates: list, events: int) -> None:
        """The rates that changed at the edge before ``cycle``, recorded for the cycle before."""
        n = self.n
        if not events >> (2 * n):
            return
        changed = int(self.dut.rate_changed.value)
        mask = (1 << RATE_BITS) - 1
        nc = self.channels
        for e in range(n):
            mine = changed >> (nc * e) & ((1 << nc) - 1)
            if not mine:
                continue
            bits = int(getattr(self.dut, f"rate__{e}").value)
            for k in range(nc):
                if mine >> k & 1:
                    rates.append((cycle - 1, e, k, (bits >> (RATE_BITS * k)) & mask))

    def read_counters(self) -> np.ndarray:
        """Every engine's counters as they stand: a row per accelerator, RDMA_COUNTERS' order."""
        return self.fields(self.dut.counters, COUNTER_WIDTH,
                           self.n * len(RDMA_COUNTERS)).reshape(self.n, len(RDMA_COUNTERS))

    @staticmethod
    def fields(port, width: int, count: int) -> np.ndarray:
        """The ``count`` fields of ``width`` bits packed in ``port``, lowest first."""
        bits, mask = int(port.value), (1 << width) - 1
        return np.array([(bits >> (width * i)) & mask for i in range(count)], np.int64)

    def _given(self, valid, data, fields, width):
        """``(endpoint, fields)`` of each endpoint whose ``valid`` bit is set this cycle."""
        bits = int(valid.value)
        if not bits:
            return []
        packed = int(data.value)
        mask = (1 << width) - 1
        return [(e, wire.unpack(fields, (packed >> (width * e)) & mask))
                for e in range(self.n) if bits >> e & 1]

    async def read_memory(self) -> np.ndarray:
        """Every word of every host memory (``[endpoint, word]``), one address of all
        endpoints per cycle."""
        dut, n = self.dut, self.n
        words = self.cfg.rdma.memory_words
        out = np.zeros((n, words), np.uint64)
        mask = (1 << 64) - 1
        for addr in range(words):
            dut.mem_addr.value = addr
            await ReadOnly()
            bits = int(dut.mem_rdata.value)
            for e in range(n):
                out[e, addr] = (bits >> (64 * e)) & mask
            await FallingEdge(dut.clk)
        return out


async def play(dut, lines: list[dict]) -> None:
    """Drive each line's port values (``script.py``) for one cycle, after a falling edge."""
    for line in lines:
        for name, value in line.items():
            getattr(dut, name).value = value
        await FallingEdge(dut.clk)


def _owing(workload, rec, cfg) -> str:
    """One line naming the endpoint and channel of the oldest WR still owed a completion."""
    wr = workload.wr
    open_rows = np.flatnonzero(rec.completions == 0)
    i = int(open_rows[np.argmin(wr["post"][open_rows])])
    e, qp, dst = int(wr["src"][i]), int(wr["qp"][i]), int(wr["dst"][i])
    ch = dst * cfg.rdma.channels_per_peer + qp % cfg.rdma.channels_per_peer
    return (f"endpoint {e} channel {ch} (peer {dst}): WR {i} (qp {qp}) "
            f"{'taken at cycle ' + str(rec.taken[i]) if rec.taken[i] >= 0 else 'never taken'}, "
            f"{int(len(open_rows))} completions owed")


@cocotb.test()
async def rdma_workload(dut):
    """Run a workload and write the RTL's records."""
    cfg, p = tb_params.read()
    workload = RdmaWorkload.load(p["workload"])
    tb = RdmaTB(dut, cfg)
    await tb.reset()
    await tb.load(workload)
    rtl = await tb.run(workload, int(p.get("stall_limit") or default_stall_limit(cfg)))
    rtl.save(p["rtl_records"])
