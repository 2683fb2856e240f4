"""Simulation speed of the default 8x8 switch, and of the RDMA fabric, on the model
and both RTL simulators.

A benchmark, not a test: it prints figures (for the README) and asserts
nothing. Build time is excluded; each run is checked against the model.
"""

import sys
import tempfile

from ..config import FabricConfig
from .run import run_point

#: (simulator, cycles): Icarus is two orders of magnitude slower.
RUNS = (("model", 20_000), ("verilator", 20_000), ("icarus", 2_000))

#: The RDMA runs: (preset, simulator, overrides). The 8-endpoint all-reduce of
#: ``make demo`` (1 % drops) on the model and Verilator; Icarus on four
#: endpoints with little host memory, whose loading dominates there.
RDMA = ["rdma.enabled=true", "faults.drop_rate=0.01"]
RDMA_RUNS = (("default", "model", RDMA), ("default", "verilator", RDMA),
             ("tiny", "icarus", RDMA + ["rdma.qps=8", "rdma.memory_words=2048",
                                        "rdma.page_words=64", "rdma.pages=64"]))


def main() -> int:
    """Print cycles per second of each simulator for uniform traffic at load 0.9."""
    cfg = FabricConfig.load(preset="default")
    print(f"{'simulator':<10} {'cycles':>8} {'cycles/s':>10} {'wall s':>8} {'throughput':>10} match")
    for sim, cycles in RUNS:
        with tempfile.TemporaryDirectory() as out:
            res = run_point(cfg, traffic="uniform", load=0.9, cycles=cycles, seed=1, sim=sim,
                            out_dir=out)
        match = "-" if res["match"] is None else ("exact" if res["match"]["exact"] else "MISMATCH")
        print(f"{sim:<10} {res['cycles']:>8} {res['cycles_per_second']:>10,.0f} "
              f"{res['wall_seconds']:>8.1f} {res['throughput']:>10.4f} {match}")
    print()
    print(f"{'rdma-allreduce':<24} {'cycles':>8} {'cycles/s':>10} {'wall s':>8} {'goodput':>8} "
          f"{'ok':>11} match")
    for preset, sim, overrides in RDMA_RUNS:
        cfg = FabricConfig.load(preset=preset, overrides=overrides)
        with tempfile.TemporaryDirectory() as out:
            res = run_point(cfg, traffic="rdma-allreduce", load=0.5,
                            cycles=10_000 if preset == "default" else 1_000, seed=1, sim=sim,
                            out_dir=out)
        rd = res["rdma"]
        match = "-" if res["match"] is None else ("exact" if res["match"]["exact"] else "MISMATCH")
        print(f"{sim + ' (' + preset + ')':<24} {rd['cycles']:>8} {res['cycles_per_second']:>10,.0f} "
              f"{res['wall_seconds']:>8.1f} {rd['goodput']:>8.4f} "
              f"{rd['requests']['ok']:>5}/{rd['requests']['posted']:<5} {match}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
