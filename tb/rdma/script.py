"""What a testbench drives into the RDMA tops before, during and after a run, cycle by cycle,
as plain data: one dict of port values per cycle (a port keeps its value until a later
cycle sets it).

The RDMA testbench (``testbench.py``) and the collective's play :func:`load_lines`; a
hardware-hosted run (section 10.16) plays :func:`hosted_script`, written to a file that
the cocotb testbench (``hosted_testbench.py``) and the plain Verilator harness
(``tools/rdma_harness.cpp``) both read, so both drive the very same cycles.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...config import ConfigError, FabricConfig
from ...formats import rdma_wire as wire
from ...formats.lfsr import DRAW_THRESHOLD_BITS
from ...sim.rdma.host import WR_ROW_FIELDS
from ...sim.rdma.kernels.send_queues import send_queues_state
from ...sim.rdma.traffic import RdmaWorkload, key_entry

__all__ = ["load_lines", "host_lines", "hosted_script", "check_hosted", "WAIT", "write_script",
           "read_script"]

#: The script's line at which the run goes on until ``done`` (or a cycle limit).
WAIT = "wait"


def load_lines(cfg: FabricConfig, workload: RdmaWorkload) -> list[dict]:
    """Tables, host memories and fault settings, one write per cycle, the last cycle the one
    before cycle 0: every endpoint's registration and page tables, every memory address that
    holds data (all endpoints' words at once), then the fault injectors' settings."""
    n = cfg.endpoints
    entry_fields = wire.key_entry_fields(cfg)
    lines = []
    for e in range(n):
        for index, row in enumerate(workload.keys[e].tolist()):
            lines.append({"tbl_en": 1, "tbl_ep": e, "tbl_sel": 0, "tbl_index": index,
                          "tbl_data": wire.pack(entry_fields, **key_entry(row))})
        for index, ppn in enumerate(workload.page_table[e].tolist()):
            lines.append({"tbl_en": 1, "tbl_ep": e, "tbl_sel": 1, "tbl_index": index,
                          "tbl_data": ppn})
    # The memories start as zeros: only addresses with data are written.
    memory = workload.memory
    for addr in np.flatnonzero(memory.any(axis=0)).tolist():
        lines.append({"tbl_en": 0, "mem_we": 1, "mem_addr": addr,
                      "mem_wdata": sum(int(memory[e, addr]) << (64 * e) for e in range(n))})
    faults = cfg.faults
    lines.append({"tbl_en": 0, "mem_we": 0, "fault_load": 1,
                  "fault_thresholds": sum(t << (DRAW_THRESHOLD_BITS * k)
                                          for k, t in enumerate(faults.thresholds())),
                  "fault_reorder_cycles": faults.reorder_cycles, "fault_seed": faults.seed})
    return lines


def check_hosted(cfg: FabricConfig, workload: RdmaWorkload, depth: int) -> None:
    """One :class:`~superfabric.config.ConfigError` line if the hardware hosts cannot play
    ``workload``: an endpoint with more WRs than a host holds, a QP outside the endpoint's,
    or an endpoint whose WRs are not posted in row order (the hosts' offer rule is the
    model's for those only; every generated workload is)."""
    wr = workload.wr
    src, post, qp = (np.asarray(wr[c], np.int64) for c in ("src", "post", "qp"))
    counts = np.bincount(src, minlength=cfg.endpoints)
    if counts.max(initial=0) > depth:
        e = int(np.argmax(counts))
        raise ConfigError(f"workload: endpoint {e} posts {int(counts[e])} work requests; a "
                          f"hardware host holds at most {depth}")
    Q = cfg.rdma.per_endpoint(cfg.endpoints)
    if ((qp < 0) | (qp >= Q)).any():
        i = int(np.flatnonzero((qp < 0) | (qp >= Q))[0])
        raise ConfigError(f"workload: work request {i} is on QP {int(qp[i])}; a hardware host "
                          f"has QPs 0..{Q - 1}")
    for e in range(cfg.endpoints):
        posts = post[src == e]
        if (np.diff(posts) < 0).any():
            raise ConfigError(f"workload: endpoint {e}'s work requests are not posted in row "
                              f"order, which the hardware hosts need")


def host_lines(cfg: FabricConfig, workload: RdmaWorkload, depth: int) -> list[dict]:
    """Every endpoint's WRs into its host's memory, in row order, then each QP's queue head,
    from the model's own send-queue state (``send_queues_state``), and the WR counts."""
    check_hosted(cfg, workload, depth)
    n = cfg.endpoints
    st = send_queues_state(cfg, workload, len(workload))
    src = np.asarray(workload.wr["src"], np.int64)
    fields = wire.host_entry_fields(cfg, depth)
    wr_fields = wire.wr_fields(n)
    lines, counts = [], []
    for e in range(n):
        rows = np.flatnonzero(src == e)
        local = {int(r): k for k, r in enumerate(rows.tolist())}
        counts.append(len(rows))
        for k, r in enumerate(rows.tolist()):
            wr = dict(zip(WR_ROW_FIELDS, st.wr[r, 1:].tolist()))
            nxt = int(st.next_row[r])
            entry = wire.pack(fields, wr=wire.pack(wr_fields, **wr), post=int(st.post[r]),
                              channel=max(int(st.channel[r]), 0), bad=int(st.channel[r] < 0),
                              slots=int(st.slots[r]), next=local.get(nxt, 0), last=int(nxt < 0))
            lines.append({"host_en": 1, "host_ep": e, "host_sel": 0, "host_addr": k,
                          "host_data": entry})
        for q in range(st.q_head.shape[1]):
            head = int(st.q_head[e, q])
            if head >= 0:
                lines.append({"host_en": 1, "host_ep": e, "host_sel": 1, "host_addr": local[head],
                              "host_data": wire.pack(fields, wr=wire.pack(wr_fields, qp=q))})
    rb = wire.host_rows_bits(depth)
    lines.append({"host_en": 0, "rows": sum(c << (rb * e) for e, c in enumerate(counts))})
    return lines


def hosted_script(cfg: FabricConfig, workload: RdmaWorkload, depth: int) -> list:
    """The cycles of a hardware-hosted run: the hosts, the tables, memories and faults, then
    ``run`` (the top takes every input a cycle late, so the fault settings load in the
    cycle before cycle 0, as under the per-cycle testbench), :data:`WAIT`, then the sweep
    of the host memories, an address a cycle, and a cycle to fold the last."""
    lines = host_lines(cfg, workload, depth) + load_lines(cfg, workload)
    lines.append({"fault_load": 0, "run": 1})
    lines.append(WAIT)
    lines += [{"mem_addr": a, "sweep": 1} for a in range(cfg.rdma.memory_words)]
    lines.append({"mem_addr": 0, "sweep": 0})
    return lines


def write_script(path: str | Path, lines: list) -> None:
    """One line per cycle: ``name=hex`` for each port it sets, or :data:`WAIT`."""
    with open(path, "w") as f:
        for line in lines:
            f.write((line if line == WAIT else
                     " ".join(f"{name}={value:x}" for name, value in line.items())) + "\n")


def read_script(path: str | Path) -> list:
    """The lines :func:`write_script` wrote."""
    lines = []
    for text in Path(path).read_text().splitlines():
        lines.append(text if text == WAIT else
                     {name: int(value, 16) for name, value in
                      (item.split("=") for item in text.split())})
    return lines
