"""Scoreboard of the RDMA fabric: what every run must satisfy, and RTL against model.

:func:`verify` checks one run's records on their own, from the workload
alone: every work request completed exactly once, with the status it was
generated for; completions in posting order per QP; every successful
request's data in the target's memory, equal to the source's; every other
word of every memory untouched (so a request refused for a bad key or
range wrote nothing); one receive completion per successful SEND; no stall.

:func:`compare` holds the RTL's records against the model's, request by
request: the cycle each was taken and completed, its status and completion
order, the receive completions, the CNPs, the rate changes, the pause
frames, the queue depths, the counters, on a fabric each link's flits, the final memories.
Each problem is one line naming the request (row, endpoint, QP), the event or the cycle.
"""

import numpy as np

from ...config import FabricConfig
from ...formats import rdma_wire as wire
from ...formats.counters import RDMA_COUNTERS
from ...sim.rdma.keys import KeyTable
from ...sim.rdma.records import CNP_COLUMNS, RATE_COLUMNS, RX_COMPLETION_COLUMNS, RdmaRecords
from ...sim.rdma.traffic import RdmaWorkload

__all__ = ["verify", "compare", "MAX_PROBLEMS"]

#: Problems listed per check before the rest are summarised.
MAX_PROBLEMS = 20


def _who(workload: RdmaWorkload, i: int) -> str:
    wr = workload.wr
    return (f"WR {i} (endpoint {int(wr['src'][i])}, qp {int(wr['qp'][i])}, "
            f"to {int(wr['dst'][i])}, {int(wr['length'][i])} words)")


def _capped(problems: list[str], more: int) -> list[str]:
    if more > 0:
        problems.append(f"... and {more} more of the same kind")
    return problems


def verify(cfg: FabricConfig, workload: RdmaWorkload, rec: RdmaRecords) -> list[str]:
    """Problems with one run's records, judged from the workload alone."""
    wr = workload.wr
    problems: list[str] = []
    if rec.stalled:
        problems.append(f"stalled at cycle {rec.cycles}: {rec.stuck}")

    bad = np.flatnonzero(rec.completions != 1)
    for i in bad[:MAX_PROBLEMS].tolist():
        problems.append(f"{_who(workload, i)}: completed {int(rec.completions[i])} times, "
                        f"not once (taken at cycle {int(rec.taken[i])})")
    _capped(problems, len(bad) - MAX_PROBLEMS)
    once = rec.completions == 1
    wrong = np.flatnonzero(once & (rec.status != wr["expect"]))
    for i in wrong[:MAX_PROBLEMS].tolist():
        problems.append(f"{_who(workload, i)}: status {wire.STATUS_NAMES.get(int(rec.status[i]))} "
                        f"at cycle {int(rec.done[i])}, expected "
                        f"{wire.STATUS_NAMES[int(wr['expect'][i])]}")
    _capped(problems, len(wrong) - MAX_PROBLEMS)

    # Per-QP order: along a QP's rows (posting order) the completion order rises.
    qp_key = wr["src"].astype(np.int64) * (1 << 20) + wr["qp"]
    rows = np.lexsort((np.arange(len(workload)), qp_key))
    rows = rows[once[rows]]
    same = qp_key[rows][1:] == qp_key[rows][:-1]
    back = np.flatnonzero(same & (rec.order[rows][1:] <= rec.order[rows][:-1]))
    for k in back[:MAX_PROBLEMS].tolist():
        a, b = int(rows[k]), int(rows[k + 1])
        problems.append(f"{_who(workload, b)}: completed at cycle {int(rec.done[b])}, before "
                        f"WR {a} posted earlier on the same QP (cycle {int(rec.done[a])})")
    _capped(problems, len(back) - MAX_PROBLEMS)

    problems += _memory(cfg, workload, rec)
    problems += _receive_completions(workload, rec)
    return problems


def _memory(cfg: FabricConfig, workload: RdmaWorkload, rec: RdmaRecords) -> list[str]:
    """The final memories equal the initial ones with exactly the successful requests applied."""
    wr = workload.wr
    n = workload.endpoints
    tables = [KeyTable(workload.keys[e], workload.page_table[e], cfg) for e in range(n)]
    expected = workload.memory.copy()
    ok = np.flatnonzero((rec.completions == 1) & (rec.status == wire.STATUS_OK))
    for i in ok.tolist():
        src, dst, length = int(wr["src"][i]), int(wr["dst"][i]), int(wr["length"][i])
        source = tables[src].addresses(int(wr["lkey"][i]), int(wr["laddr"][i]), length)
        target = tables[dst].addresses(int(wr["rkey"][i]), int(wr["raddr"][i]), length)
        expected[dst, target] = workload.memory[src, source]
    problems = []
    for e in range(n):
        diff = np.flatnonzero(rec.memory[e] != expected[e])
        if len(diff):
            a = int(diff[0])
            problems.append(f"endpoint {e} memory: {len(diff)} words differ from the initial "
                            f"memory with the successful requests applied; first at address {a}: "
                            f"{int(rec.memory[e, a]):#x}, expected {int(expected[e, a]):#x}")
    return problems


def _receive_completions(workload: RdmaWorkload, rec: RdmaRecords) -> list[str]:
    """One receive completion per successful SEND, at its target, naming it."""
    wr = workload.wr
    sends = np.flatnonzero((rec.completions == 1) & (rec.status == wire.STATUS_OK)
                           & (wr["opcode"] == wire.OP_SEND))
    want = sorted((int(wr["dst"][i]), int(wr["src"][i]), int(wr["qp"][i]), int(wr["length"][i]))
                  for i in sends.tolist())
    got = sorted(tuple(int(v) for v in row[1:]) for row in rec.rx_completions)
    if want == got:
        return []
    missing = len(set(want) - set(got))
    extra = len(set(got) - set(want))
    return [f"receive completions: {len(got)} given, {len(want)} expected "
            f"({missing} expected ones missing, {extra} unexpected)"]


#: Columns of a pause frame's row, for naming a difference.
_FRAME_COLUMNS = ("cycle", "port", "class_enable", *(f"time{k}" for k in range(8)))


def _first_row_difference(what: str, columns, a: np.ndarray, b: np.ndarray) -> str | None:
    """One line on the first row where two event tables differ, or None if equal."""
    if a.shape == b.shape and not (a != b).any():
        return None
    k = next((k for k in range(min(len(a), len(b))) if (a[k] != b[k]).any()), min(len(a), len(b)))

    def show(rows):
        return dict(zip(columns, rows[k].tolist())) if k < len(rows) else None

    return f"{what} {k}: RTL {show(a)}, model {show(b)} ({len(a)} and {len(b)} in all)"


def compare(workload: RdmaWorkload, rtl: RdmaRecords, model: RdmaRecords) -> list[str]:
    """Differences between the RTL's records and the model's, earliest first."""
    problems = []
    if rtl.cycles != model.cycles or rtl.stalled != model.stalled:
        problems.append(f"run length: RTL {rtl.cycles} cycles (stalled {rtl.stalled}), "
                        f"model {model.cycles} (stalled {model.stalled})")
    events = []
    for name in ("taken", "done", "status", "order", "completions"):
        a, b = getattr(rtl, name), getattr(model, name)
        for i in np.flatnonzero(a != b).tolist():
            when = min(c for c in (int(rtl.taken[i]), int(model.taken[i]), int(rtl.done[i]),
                                   int(model.done[i]), 1 << 62) if c >= 0)
            events.append((when, i, name, int(a[i]), int(b[i])))
    events.sort()
    for when, i, name, a, b in events[:MAX_PROBLEMS]:
        problems.append(f"{_who(workload, i)}: {name} RTL {a}, model {b} (from cycle {when})")
    _capped(problems, len(events) - MAX_PROBLEMS)

    for what, columns, a, b in (
            ("receive completion", RX_COMPLETION_COLUMNS, rtl.rx_completions, model.rx_completions),
            ("CNP", CNP_COLUMNS, rtl.cnps, model.cnps),
            ("rate change", RATE_COLUMNS, rtl.rates, model.rates),
            ("pause frame", _FRAME_COLUMNS, rtl.pfc_frames, model.pfc_frames)):
        problem = _first_row_difference(what, columns, a, b)
        if problem:
            problems.append(problem)
    a, b = rtl.queue_depth, model.queue_depth
    if a.shape != b.shape or (a != b).any():
        rows = min(len(a), len(b))
        diff = np.argwhere(a[:rows] != b[:rows]) if a.shape[1:] == b.shape[1:] else []
        where = (f"first at cycle {int(diff[0][0])}, output {int(diff[0][1])}: RTL "
                 f"{int(a[tuple(diff[0])])}, model {int(b[tuple(diff[0])])}" if len(diff)
                 else f"RTL {a.shape[0]} cycles of {a.shape[1:]} outputs, model {b.shape[0]} of "
                      f"{b.shape[1:]}")
        problems.append(f"queue depth: {where}")
    for name in RDMA_COUNTERS:
        if list(rtl.counters.get(name, [])) != list(model.counters.get(name, [])):
            problems.append(f"counter {name}: RTL {list(rtl.counters.get(name, []))}, "
                            f"model {list(model.counters.get(name, []))}")
    a, b = rtl.link_flits, model.link_flits
    if a.shape != b.shape:
        problems.append(f"link flits: RTL {len(a)} links, model {len(b)}")
    elif (a != b).any():
        k = int(np.flatnonzero(a != b)[0])
        problems.append(f"link flits: {int((a != b).sum())} links differ; first link {k}: "
                        f"RTL {int(a[k])}, model {int(b[k])}")
    if rtl.memory.shape != model.memory.shape:
        problems.append(f"memories: RTL {len(rtl.memory)} endpoints of {rtl.memory.shape[1]} "
                        f"words, model {len(model.memory)} of {model.memory.shape[1]}")
    for e in range(min(len(rtl.memory), len(model.memory))):
        diff = np.flatnonzero(rtl.memory[e] != model.memory[e])
        if len(diff):
            a0 = int(diff[0])
            problems.append(f"endpoint {e} memory: {len(diff)} words differ; first at address "
                            f"{a0}: RTL {int(rtl.memory[e, a0]):#x}, model {int(model.memory[e, a0]):#x}")
    return problems
