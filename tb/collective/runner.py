"""Run a collective on an RTL simulator's ``collective_fabric`` and hold it against the
golden model: every step's start, every slot's application, every engine's end, its failed
completions, every RDMA counter and every host memory word, on every accelerator."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...config import FabricConfig
from ...formats.counters import RDMA_COUNTERS
from ...hdl.collective.engine import DEPTH
from ...sim.collective.fabric import CollectivePlan, collective_section, data_ok
from .testbench import STEP_COLUMNS
from ..runner import DEFAULT_BUILD_ROOT, run_cocotb

__all__ = ["run_collective_rtl", "compare", "rtl_summary"]

#: Problem lines kept in the match (``mismatch.txt`` has them all).
_KEPT_PROBLEMS = 20


def _schedule_file(path: Path, prepared: CollectivePlan) -> None:
    """The schedule as the testbench loads it: every step a row of :data:`STEP_COLUMNS`."""
    s = prepared.schedule
    for what, counts in (("steps", [len(steps) for steps in s.steps]), ("slots", s.slots)):
        if max(counts) > DEPTH:
            raise ValueError(f"{what} = {max(counts)} on one accelerator: the RTL's "
                             f"collective engine holds at most {DEPTH}")
    rows = [(a, *(int(getattr(step, name)) for name in STEP_COLUMNS[1:]))
            for a, steps in enumerate(s.steps) for step in steps]
    np.savez(path, steps=np.array(rows, np.int64).reshape(-1, len(STEP_COLUMNS)),
             counts=np.array([len(steps) for steps in s.steps], np.int64),
             slots=np.array(s.slots, np.int64))


def run_collective_rtl(cfg: FabricConfig, prepared: CollectivePlan, model, *, sim: str,
                       out_dir: str | Path, waves: bool | None = None,
                       build_root: str | Path = DEFAULT_BUILD_ROOT) -> tuple[dict, dict]:
    """Run ``prepared`` on the ``collective_fabric`` top; return the RTL's results and the
    match against ``model`` (``(records, engines)`` of ``sim.collective.fabric.
    run_collective``).

    The match holds ``exact`` (RTL equal to the model), ``problems`` (the differences,
    each naming the accelerator, the step, slot, counter or word, and the cycles; at most
    a screenful), ``mismatches``, ``first_mismatch`` (the first problem), ``data_ok`` (the RTL's buffers hold numpy's answer) and
    ``passed``. Files go into ``out_dir``: ``workload.npz``, ``schedule.npz``,
    ``rtl_run.npz``, ``mismatch.txt`` when something differs, and the cocotb directory.
    """
    records, engines = model
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    prepared.workload.save(out / "workload.npz")
    _schedule_file(out / "schedule.npz", prepared)
    layout = prepared.layout
    params = {
        "workload": str(out / "workload.npz"), "schedule": str(out / "schedule.npz"),
        "layout": {"outbox": layout.outbox, "notify": layout.notify,
                   "staging": layout.staging, "capacity": layout.capacity},
        "binary32": int(prepared.dtype == "fp32"),
        # Twice the model's time and a little: a run that differs still ends, and says how.
        "limit": 2 * records.cycles + 1000, "end_cycle": records.cycles,
        "rtl_run": str(out / "rtl_run.npz"),
    }
    (out / "rtl_run.npz").unlink(missing_ok=True)
    result = run_cocotb(cfg, "superfabric.tb.collective.testbench", sim=sim,
                        test_dir=out / "sim", top="collective_fabric", waves=waves,
                        params=params, build_root=build_root)
    if not (out / "rtl_run.npz").exists():
        raise RuntimeError(f"{sim} run of the collective wrote no results; see "
                           f"{result.test_dir / 'sim.log'}")
    rtl = dict(np.load(out / "rtl_run.npz"))
    problems = compare(rtl, records, engines)
    (out / "mismatch.txt").unlink(missing_ok=True)
    if problems:
        (out / "mismatch.txt").write_text("\n".join(problems) + "\n")
    buffers = layout.buffers(rtl["memory"], prepared.schedule, prepared.dtype)
    ok = bool(rtl["finished"]) and data_ok(cfg, prepared, buffers)
    return rtl, {"exact": not problems, "mismatches": len(problems),
                 "first_mismatch": problems[0] if problems else None,
                 "problems": problems[:_KEPT_PROBLEMS], "data_ok": ok,
                 "passed": result.passed and not problems and ok}


def compare(rtl: dict, records, engines) -> list[str]:
    """The RTL's run against the model's, one line per difference, in the order an
    engineer reads them: the end, then per accelerator the timeline, the counters and the
    memory (its first differing word)."""
    problems = []
    if not rtl["finished"]:
        problems.append(f"the RTL did not finish in {int(rtl['cycles'])} cycles; the model "
                        f"finished at cycle {engines.completion_cycle}")
    if int(rtl["cycles"]) != records.cycles and rtl["finished"]:
        problems.append(f"counters read at cycle {int(rtl['cycles'])}, the model's run ended "
                        f"at {records.cycles}")
    for a, engine in enumerate(engines.engines):
        for what, want, got in (("step", engine.started, rtl["started"][a]),
                                ("slot", engine.applied_at, rtl["applied"][a])):
            verb = "started" if what == "step" else "applied"
            for k, cycle in enumerate(want):
                if int(got[k]) != cycle:
                    problems.append(f"accelerator {a} {what} {k}: {verb} at cycle "
                                    f"{int(got[k])}, the model at {cycle}")
        if rtl["finished"] and int(rtl["done_at"][a]) != engine.done_at:
            problems.append(f"accelerator {a}: done at cycle {int(rtl['done_at'][a])}, the "
                            f"model at {engine.done_at}")
        if int(rtl["errors"][a]) != engine.errors:
            problems.append(f"accelerator {a}: {int(rtl['errors'][a])} failed completions, "
                            f"the model {engine.errors}")
        for k, name in enumerate(RDMA_COUNTERS):
            got, want = int(rtl["counters"][a, k]), int(records.counters[name][a])
            if got != want:
                problems.append(f"accelerator {a} counter {name}: {got}, the model {want}")
        differ = np.flatnonzero(rtl["memory"][a] != np.asarray(records.memory[a], np.uint64))
        if len(differ):
            w = int(differ[0])
            problems.append(f"accelerator {a} memory word {w}: {int(rtl['memory'][a, w]):#x}, "
                            f"the model {int(records.memory[a][w]):#x} ({len(differ)} words "
                            f"differ)")
    return problems


def rtl_summary(cfg: FabricConfig, prepared: CollectivePlan, rtl: dict, match: dict) -> dict:
    """The ``collective`` section of an RTL run, from what the RTL measured: its time (the
    last engine's end), its data, its failed completions; the top counts no WRs
    (``work_requests`` None)."""
    finished = bool(rtl["finished"])
    return collective_section(
        cfg, prepared, cycles=int(rtl["done_at"].max()) if finished else None,
        data_ok=match["data_ok"], errors=int(rtl["errors"].sum()),
        run_cycles=int(rtl["cycles"]), stalled=not finished,
        stuck=None if finished else "not every engine was done",
        slots_applied=sum(prepared.schedule.slots) if finished else None, work_requests=None)
