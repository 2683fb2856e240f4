"""Run an RDMA workload on an RTL simulator and hold it against the golden model."""

from __future__ import annotations

from pathlib import Path

from ..config import FabricConfig
from ..sim.rdma_records import RdmaRecords
from ..sim.rdma_traffic import RdmaWorkload
from .rdma_scoreboard import compare, verify
from .runner import DEFAULT_BUILD_ROOT, run_cocotb

__all__ = ["run_rdma_rtl"]


def run_rdma_rtl(cfg: FabricConfig, workload: RdmaWorkload, *, sim: str, out_dir: str | Path,
                 model: RdmaRecords | None = None, stall_limit: int | None = None,
                 expect_stall: bool = False, waves: bool | None = None,
                 build_root: str | Path = DEFAULT_BUILD_ROOT) -> tuple[RdmaRecords, dict]:
    """Run ``workload`` on the ``rdma_fabric`` top; return the RTL's records and the match.

    The match holds ``exact`` (RTL equal to ``model``, request by request
    and cycle by cycle; None without a model), ``problems`` (the
    scoreboard's lines: the run's own checks and the differences, at most
    a screenful), ``mismatches``, ``first_mismatch`` and ``passed`` (the
    cocotb test passed: no problem, or with ``expect_stall`` a stall equal
    to the model's). Files go into
    ``out_dir``: ``workload.npz``, ``rtl_records.npz``, ``model_records.npz``
    and ``mismatch.txt`` when something is wrong, and the cocotb directory ``sim/``.
    """
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    workload.save(out / "workload.npz")
    params = {"workload": str(out / "workload.npz"), "rtl_records": str(out / "rtl_records.npz"),
              "report": str(out / "mismatch.txt"), "stall_limit": stall_limit,
              "expect_stall": expect_stall}
    if model is not None:
        model.save(out / "model_records.npz")
        params["model_records"] = str(out / "model_records.npz")
    result = run_cocotb(cfg, "superfabric.tb.rdma_tb", sim=sim, test_dir=out / "sim",
                        top="rdma_fabric", waves=waves, params=params, build_root=build_root)
    if not (out / "rtl_records.npz").exists():
        raise RuntimeError(f"{sim} run of the RDMA fabric wrote no records; see "
                           f"{result.test_dir / 'sim.log'}")
    rtl = RdmaRecords.load(out / "rtl_records.npz")
    own = verify(cfg, workload, rtl)
    diff = compare(workload, rtl, model) if model is not None else []
    problems = diff + own
    return rtl, {
        "exact": (not diff) if model is not None else None,
        "mismatches": len(diff),
        "first_mismatch": diff[0] if diff else None,
        "problems": problems[:20],
        "passed": result.passed,
    }
