"""Scoreboard: hold the RTL's per-packet records against the golden model's.

Checks, for every packet of the trace: delivered exactly once (or dropped),
at its destination port, with every flit intact; order kept per (input,
output, priority) through a switch (in a fabric, VCs and adaptive routes
may reorder a flow, and the model's cycles say when); dropped only where the model drops; head and tail
departure cycles equal to the model's; the pause frames sent (cycle,
port, classes, times) equal to the model's; the ECN codepoint each packet left
with and the backlog its marking decision saw equal to the model's; in a
fabric, the links it crossed (``hops``) equal to the model's; the hardware
counters and the run's length (a stall's cycle included) equal to the
model's. The first
mismatch in time is named with its tag and cycles, and every problem line
names a packet's tag and a cycle, or the counter or frame it is about.
"""

import numpy as np

from ..formats.match import Comparison
from ..sim.records import Records
from ..sim.traffic import Trace

__all__ = ["compare"]


_FIELDS = ("dropped", "out_port", "head", "tail", "ecn_out", "ecn_backlog", "hops")


def compare(trace: Trace, rtl: Records, model: Records, *, table_rows: int = 20,
            ordered: bool = True) -> Comparison:
    """Compare ``rtl`` with ``model`` for ``trace``; see the module docstring. ``ordered``:
    every flow must leave in order (a switch; not a fabric)."""
    problems = []
    delivered = rtl.tail >= 0
    if rtl.stalled:
        problems.append(f"RTL run stalled at cycle {rtl.cycles}")
    if model.stalled:
        problems.append(f"model run stalled at cycle {model.cycles}")
    if rtl.cycles != model.cycles:
        problems.append(f"run length: RTL {rtl.cycles} cycles, model {model.cycles}")
    both = delivered & rtl.dropped
    if both.any():
        i = _earliest(both, rtl.tail)
        problems.append(f"tag {int(trace.tag[i])} both delivered (cycle {int(rtl.tail[i])}) "
                        f"and dropped")
    lost = ~delivered & ~rtl.dropped
    if lost.any() and not rtl.stalled:
        i = _earliest(lost, trace.gen)
        problems.append(f"{int(lost.sum())} packet(s) neither delivered nor dropped, "
                        f"first tag {int(trace.tag[i])} (generated at cycle {int(trace.gen[i])})")
    wrong_port = delivered & (rtl.out_port != trace.dst)
    if wrong_port.any():
        i = _earliest(wrong_port, rtl.tail)
        problems.append(f"tag {int(trace.tag[i])} left by port {int(rtl.out_port[i])} at cycle "
                        f"{int(rtl.tail[i])}, destination {int(trace.dst[i])}")
    corrupt = delivered & ~rtl.payload_ok
    if corrupt.any():
        i = _earliest(corrupt, rtl.tail)
        problems.append(f"{int(corrupt.sum())} packet(s) with corrupted flits, first tag "
                        f"{int(trace.tag[i])} (its tail left at cycle {int(rtl.tail[i])})")
    if ordered:
        problems += _order_problems(trace, rtl)
    problems += _frame_problems(rtl, model)
    for name in sorted(set(model.counters) | set(rtl.counters)):
        if rtl.counters.get(name) != model.counters.get(name):
            problems.append(f"counter {name}: RTL {rtl.counters.get(name)} vs model "
                            f"{model.counters.get(name)}")

    # The RTL sees a packet's hops only as it leaves the fabric: they are
    # compared for packets that either side delivered.
    seen = delivered | (model.tail >= 0)
    field_differs = {name: (getattr(rtl, name) != getattr(model, name)) & (seen if name == "hops"
                                                                          else True)
                     for name in _FIELDS}
    differs = corrupt.copy()
    for wrong in field_differs.values():
        differs |= wrong
    mismatched = np.flatnonzero(differs)
    first = None
    table = []
    if len(mismatched):
        # "First" in time: the earliest cycle at which either side did something.
        def when(i):
            cycles = [c for c in (rtl.head[i], model.head[i], rtl.tail[i], model.tail[i]) if c >= 0]
            return min(cycles) if cycles else int(trace.gen[i])
        order = sorted(mismatched.tolist(), key=when)
        i = order[0]
        name = next((f for f in _FIELDS if field_differs[f][i]), "payload")
        first = {"tag": int(trace.tag[i]), "field": name,
                 "rtl": _value(getattr(rtl, name)[i]) if name != "payload" else "corrupt",
                 "model": _value(getattr(model, name)[i]) if name != "payload" else "intact",
                 "cycle_rtl": int(rtl.tail[i]) if rtl.tail[i] >= 0 else int(rtl.head[i]),
                 "cycle_model": int(model.tail[i]) if model.tail[i] >= 0 else int(model.head[i])}
        table.append(f"{'tag':>8} {'src':>4} {'dst':>4} {'prio':>4} {'len':>4} {'gen':>8} | "
                     f"{'RTL out':>7} {'head':>8} {'tail':>8} {'drop':>5} | "
                     f"{'model out':>9} {'head':>8} {'tail':>8} {'drop':>5}")
        for i in order[:table_rows]:
            table.append(
                f"{int(trace.tag[i]):>8} {int(trace.src[i]):>4} {int(trace.dst[i]):>4} "
                f"{int(trace.prio[i]):>4} {int(trace.length[i]):>4} {int(trace.gen[i]):>8} | "
                f"{int(rtl.out_port[i]):>7} {int(rtl.head[i]):>8} {int(rtl.tail[i]):>8} "
                f"{bool(rtl.dropped[i])!s:>5} | {int(model.out_port[i]):>9} {int(model.head[i]):>8} "
                f"{int(model.tail[i]):>8} {bool(model.dropped[i])!s:>5}")
    exact = not problems and not len(mismatched)
    return Comparison(exact=exact, mismatches=int(len(mismatched)), first_mismatch=first,
                      problems=problems, table=table)


def _earliest(where: np.ndarray, cycle: np.ndarray) -> int:
    """The packet of ``where`` with the lowest ``cycle``."""
    idx = np.flatnonzero(where)
    return int(idx[np.argmin(cycle[idx])])


def _value(v):
    return bool(v) if isinstance(v, (bool, np.bool_)) else int(v)


def _order_problems(trace: Trace, rtl: Records) -> list[str]:
    """Packets of one (input, output, priority) flow must leave in generation order."""
    ok = rtl.tail >= 0
    idx = np.flatnonzero(ok)
    if not len(idx):
        return []
    flow = (trace.src[idx].astype(np.int64) * 1024 + trace.dst[idx]) * 16 + trace.prio[idx]
    order = np.lexsort((idx, flow))      # by flow, then trace order (= generation order)
    f, h = flow[order], rtl.head[idx][order]
    same = f[1:] == f[:-1]
    bad = same & (h[1:] <= h[:-1])
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        return [f"order broken in flow of tag {int(trace.tag[idx[order[k + 1]]])}: "
                f"left at {int(h[k + 1])}, after its predecessor at {int(h[k])}"]
    return []


def _frame_problems(rtl: Records, model: Records) -> list[str]:
    """Pause frames must be the same frames, from the same ports, in the same cycles."""
    a, b = rtl.pfc_frames, model.pfc_frames
    if a.shape == b.shape and (a == b).all():
        return []
    rows = min(len(a), len(b))
    differ = np.flatnonzero((a[:rows] != b[:rows]).any(axis=1)) if rows else np.array([], int)
    k = int(differ[0]) if len(differ) else rows
    show = lambda f, i: (f"cycle {f[i][0]} port {f[i][1]} classes {f[i][2]:#04x} "   # noqa: E731
                         f"times {list(f[i][3:])}" if i < len(f) else "none")
    return [f"pause frames differ ({len(a)} in RTL, {len(b)} in the model); frame {k}: "
            f"RTL {show(a, k)} vs model {show(b, k)}"]
