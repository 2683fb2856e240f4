"""Run an RDMA workload on an RTL simulator and hold it against the golden model: with the
testbench as the hosts (:func:`run_rdma_rtl`), or with the hosts in hardware
(:func:`run_rdma_hosted`, section 10.16)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np

from ...config import FabricConfig
from ...formats.counters import COUNTER_WIDTH, RDMA_COUNTERS
from ...formats.rdma_hash import HASH_BITS, HASHES
from ...hdl.rdma.host import DEPTH as HOST_DEPTH
from ...sim.rdma.hashes import hash_mismatches, record_hashes
from ...sim.rdma.kernels.run import default_stall_limit
from ...sim.rdma.records import RdmaRecords
from ...sim.rdma.traffic import RdmaWorkload
from .scoreboard import compare, verify
from .script import hosted_script, write_script
from ..runner import DEFAULT_BUILD_ROOT, run_cocotb, run_cocotb_following

__all__ = ["run_rdma_rtl", "run_rdma_hosted", "run_rdma_plain", "model_outcome",
           "hosted_outcome", "run_limit", "judge_hosted", "with_late_first_post"]

#: Problem lines kept in the match section (``mismatch.txt`` has them all).
_KEPT_PROBLEMS = 20


def run_rdma_rtl(cfg: FabricConfig, workload: RdmaWorkload, *, sim: str, out_dir: str | Path,
                 model: RdmaRecords | None = None, stall_limit: int | None = None,
                 expect_stall: bool = False, waves: bool | None = None,
                 build_root: str | Path = DEFAULT_BUILD_ROOT) -> tuple[RdmaRecords, dict]:
    """Run ``workload`` on the ``rdma_fabric`` top; return the RTL's records and the match.

    The testbench only records; the scoreboard runs here, once. The match
    holds ``exact`` (RTL equal to ``model``, request by request and cycle by
    cycle; None without a model), ``problems`` (the scoreboard's lines: the
    differences, then the run's own checks, at most a screenful),
    ``mismatches``, ``first_mismatch`` and ``passed``: the testbench ran to
    its end and there is no problem, or with ``expect_stall`` the run
    stalled as the model's did. Files go into ``out_dir``: ``workload.npz``,
    ``rtl_records.npz``, ``model_records.npz``, ``mismatch.txt`` (every
    problem line) when something is wrong, and the cocotb directory ``sim/``.
    """
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    workload.save(out / "workload.npz")
    params = {"workload": str(out / "workload.npz"), "rtl_records": str(out / "rtl_records.npz"),
              "stall_limit": stall_limit}
    if model is not None:
        model.save(out / "model_records.npz")
    (out / "rtl_records.npz").unlink(missing_ok=True)   # a stale file must not pass for this run's
    result = run_cocotb(cfg, "superfabric.tb.rdma.testbench", sim=sim, test_dir=out / "sim",
                        top="rdma_fabric", waves=waves, params=params, build_root=build_root)
    if not (out / "rtl_records.npz").exists():
        raise RuntimeError(f"{sim} run of the RDMA fabric wrote no records; see "
                           f"{result.test_dir / 'sim.log'}")
    rtl = RdmaRecords.load(out / "rtl_records.npz")
    own = verify(cfg, workload, rtl)
    diff = compare(workload, rtl, model) if model is not None else []
    problems = diff + own
    (out / "mismatch.txt").unlink(missing_ok=True)
    if problems:
        (out / "mismatch.txt").write_text("\n".join(problems) + "\n")
    # A run meant to stall (a dead link) passes when it stalls, as the model does.
    judged = rtl.stalled and not diff if expect_stall else not problems
    return rtl, {
        "exact": (not diff) if model is not None else None,
        "mismatches": len(diff),
        "first_mismatch": diff[0] if diff else None,
        "problems": problems[:_KEPT_PROBLEMS],
        "passed": result.passed and judged,
    }


def model_outcome(cfg: FabricConfig, workload: RdmaWorkload, model: RdmaRecords) -> dict:
    """What a hardware-hosted run of ``workload`` must end with, from the model's records:
    its ``cycles``, the ``counters`` (``[endpoint, counter]``) and the ``hashes``
    (``[endpoint, hash]``, section 10.16)."""
    return {"cycles": int(model.cycles),
            "counters": [[int(model.counters[name][e]) for name in RDMA_COUNTERS]
                         for e in range(cfg.endpoints)],
            "hashes": record_hashes(cfg, workload, model).tolist()}


def hosted_outcome(cfg: FabricConfig, *, finished: bool, cycles: int, run_seconds: float,
                   counters: int, hashes: int) -> dict:
    """A hardware-hosted run's results from the top's ports as integers (``counters`` and
    ``hashes`` packed, endpoint 0 lowest): as :func:`model_outcome`, with ``finished`` and
    ``run_seconds``."""
    def fields(value, width, per):
        mask = (1 << width) - 1
        return [[(value >> (width * (e * per + k))) & mask for k in range(per)]
                for e in range(cfg.endpoints)]
    return {"finished": bool(finished), "cycles": int(cycles), "run_seconds": run_seconds,
            "counters": fields(counters, COUNTER_WIDTH, len(RDMA_COUNTERS)),
            "hashes": fields(hashes, HASH_BITS, len(HASHES))}


def run_limit(cfg: FabricConfig, workload: RdmaWorkload, model: RdmaRecords | None) -> int:
    """The cycles a hosted run may take before it counts as not finished: twice the
    model's run (or the last post), and the stall limit on top."""
    last = int(np.max(workload.wr["post"], initial=0))
    return 2 * max(last, model.cycles if model is not None else 0) + default_stall_limit(cfg)


def judge_hosted(cfg: FabricConfig, rtl: dict, expected: dict | None) -> dict:
    """The match of a hosted run against ``expected`` (:func:`model_outcome`; None: none):
    ``exact``, ``mismatches``, ``first_mismatch``, ``problems`` (at most a screenful) and
    ``passed`` (finished, and exact where there is a model)."""
    diff = hash_mismatches(cfg, expected, rtl) if expected is not None else []
    problems = ([] if rtl["finished"] else
                [f"the run did not finish: no done by cycle {rtl['cycles']}"]) + diff
    return {"exact": (not diff) if expected is not None else None, "mismatches": len(diff),
            "first_mismatch": diff[0] if diff else None, "problems": problems[:_KEPT_PROBLEMS],
            "passed": not problems}


def run_rdma_hosted(cfg: FabricConfig, workload: RdmaWorkload, *, sim: str,
                    out_dir: str | Path, model: RdmaRecords | None = None,
                    waves: bool | None = None, build_root: str | Path = DEFAULT_BUILD_ROOT,
                    progress=None) -> tuple[dict, dict]:
    """Run ``workload`` on the ``rdma_hosted`` top, its hosts in hardware (section 10.16);
    return the run's results (:func:`hosted_outcome`) and its match against ``model``
    (:func:`judge_hosted`), which it was run from: cycles, counters and every endpoint's
    hashes. A workload the hosts cannot play raises a one-line ConfigError.
    ``progress(line)``, if given, gets each chunk's progress line (``cycle``, ``limit``,
    ``done``, ``seconds``). Files go into ``out_dir``: ``script.txt`` (the cycles it drives,
    as the plain harness reads them), ``rtl_run.json``, ``progress.jsonl``,
    ``mismatch.txt`` when something is wrong, and ``sim/``.
    """
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    write_script(out / "script.txt", hosted_script(cfg, workload, HOST_DEPTH))
    params = {"script": str(out / "script.txt"), "rtl_run": str(out / "rtl_run.json"),
              "limit": run_limit(cfg, workload, model), "progress": str(out / "progress.jsonl")}
    for name in ("rtl_run.json", "progress.jsonl"):
        (out / name).unlink(missing_ok=True)
    result = run_cocotb_following(out / "progress.jsonl", progress, cfg,
                                  "superfabric.tb.rdma.hosted_testbench", sim=sim,
                                  test_dir=out / "sim", top="rdma_hosted", waves=waves,
                                  params=params, build_root=build_root)
    if not (out / "rtl_run.json").exists():
        raise RuntimeError(f"{sim} run of the hosted RDMA top wrote no results; see "
                           f"{result.test_dir / 'sim.log'}")
    raw = json.loads((out / "rtl_run.json").read_text())
    rtl = hosted_outcome(cfg, finished=raw["finished"], cycles=raw["cycles"],
                         run_seconds=raw["run_seconds"], counters=int(raw["counters"], 16),
                         hashes=int(raw["hashes"], 16))
    match = judge_hosted(cfg, rtl, model_outcome(cfg, workload, model)
                         if model is not None else None)
    (out / "mismatch.txt").unlink(missing_ok=True)
    if match["problems"]:
        (out / "mismatch.txt").write_text("\n".join(match["problems"]) + "\n")
    match["passed"] = match["passed"] and result.passed
    return rtl, match


def run_rdma_plain(cfg: FabricConfig, workload: RdmaWorkload, exe: str | Path, *,
                   out_dir: str | Path, model: RdmaRecords | None = None) -> tuple[dict, dict]:
    """Run ``workload`` on ``exe``, the ``rdma_hosted`` top built under the plain Verilator
    harness ``tools/rdma_harness.cpp`` (``tb.runner.build_harness``), on the script
    :func:`run_rdma_hosted` plays; return the same results and match."""
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    script = out / "script.txt"
    write_script(script, hosted_script(cfg, workload, HOST_DEPTH))
    done = subprocess.run([str(exe), str(script), str(run_limit(cfg, workload, model))],
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{exe} exited with {done.returncode}: "
                           f"{(done.stderr.strip().splitlines() or [''])[-1]}")
    raw = json.loads(done.stdout)

    def value(words):
        return sum(w << (32 * k) for k, w in enumerate(words))
    rtl = hosted_outcome(cfg, finished=raw["finished"], cycles=raw["cycles"],
                         run_seconds=raw["run_seconds"], counters=value(raw["counters"]),
                         hashes=value(raw["hashes"]))
    return rtl, judge_hosted(cfg, rtl, model_outcome(cfg, workload, model)
                             if model is not None else None)


def with_late_first_post(workload: RdmaWorkload, endpoint: int = 0) -> tuple[RdmaWorkload, int]:
    """A planted fault for hosted runs: ``workload`` with ``endpoint``'s first WR, and any
    of its WRs posted in the same cycle, posted one cycle later (the row order kept); and
    that first WR's row. Run against the model of ``workload``, a hosted run must fail."""
    wr = {name: np.array(column) for name, column in workload.wr.items()}
    first = int(np.flatnonzero(wr["src"] == endpoint)[0])
    wr["post"][(wr["src"] == endpoint) & (wr["post"] == wr["post"][first])] += 1
    return replace(workload, wr=wr), first
