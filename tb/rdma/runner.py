"""Run an RDMA workload on an RTL simulator and hold it against the golden model."""

from __future__ import annotations

from pathlib import Path

from ...config import FabricConfig
from ...sim.rdma.records import RdmaRecords
from ...sim.rdma.traffic import RdmaWorkload
from .scoreboard import compare, verify
from ..runner import DEFAULT_BUILD_ROOT, run_cocotb

__all__ = ["run_rdma_rtl"]

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
