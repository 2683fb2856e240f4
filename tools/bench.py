"""Simulation speed of the default 8x8 switch on the model and both RTL simulators.

A benchmark, not a test: it prints figures (for the README) and asserts
nothing. Build time is excluded; each run is checked against the model.
"""

import sys
import tempfile

from ..config import FabricConfig
from .run import run_point

#: (simulator, cycles): Icarus is two orders of magnitude slower.
RUNS = (("model", 20_000), ("verilator", 20_000), ("icarus", 2_000))


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
    return 0


if __name__ == "__main__":
    sys.exit(main())
