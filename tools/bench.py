"""Simulation speed of the default 8x8 switch, and of the RDMA fabric, on the model
and both RTL simulators; and the limit: the stimulus top under cocotb against the
same Verilog under a plain Verilator harness.

A benchmark, not a test: it prints figures (for the README) and asserts
nothing. Build time is excluded; each run is checked against the model.
``python -m superfabric.tools.bench [trace] [rdma] [stimulus] [--cycles N]``
runs the tables named (all by default); ``--cycles`` is the stimulus run's
generation window.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..config import FabricConfig
from .run import run_point

#: (simulator, cycles): Icarus is two orders of magnitude slower.
RUNS = (("model", 20_000), ("verilator", 20_000), ("icarus", 2_000))

#: The RDMA runs: (preset, simulator, overrides). The 8-endpoint all-reduce of
#: the RDMA issue's done-when on the model and Verilator; Icarus on four
#: endpoints with little host memory, whose loading dominates there.
RDMA = ["rdma.enabled=true", "faults.drop_rate=0.01"]
RDMA_RUNS = (("default", "model", RDMA), ("default", "verilator", RDMA),
             ("tiny", "icarus", RDMA + ["rdma.qps=8", "rdma.memory_words=2048",
                                        "rdma.page_words=64", "rdma.pages=64"]))


#: The plain Verilator harness of the stimulus top.
HARNESS = Path(__file__).with_name("stimulus_harness.cpp")
#: The tables main() can print.
TABLES = ("trace", "rdma", "stimulus")
#: Runs of each harness; the faster of each is compared, the machine being shared.
REPEATS = 2


def run_plain(cfg: FabricConfig, settings, exe: Path, work: Path):
    """Run the plain harness ``exe`` on ``settings``; returns its statistics and run seconds."""
    from ..sim.stimulus import StimulusStats
    from ..stimulus import RegisterMap
    regmap = RegisterMap(cfg)
    names, reads = [], []
    for name, _, words in regmap.stats:
        names += [name] * words
        reads += [regmap.address(name, k) for k in range(words)]
    for port in range(cfg.switch.ports):
        names += ["histogram"] * cfg.stimulus.hist_buckets
        reads += [regmap.hist_address(port, b) for b in range(cfg.stimulus.hist_buckets)]
    (work / "writes.txt").write_text("".join(f"{a} {v}\n" for a, v in regmap.writes(settings)))
    (work / "reads.txt").write_text("".join(f"{a}\n" for a in reads))
    out = subprocess.run([str(exe), str(work / "writes.txt"), str(work / "reads.txt")],
                         capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    words = {}
    for name, value in zip(names, result["words"]):
        words.setdefault(name, []).append(value)
    return StimulusStats.from_words(cfg, words), result["run_seconds"]


def stimulus_table(cycles: int) -> None:
    """The stimulus top, default 8x8, uniform 0.8: plain Verilator, cocotb, model."""
    from ..sim.stimulus import StimulusModel, compare_stats
    from ..sim.traffic_gen import stimulus_settings
    from ..tb.runner import build, build_harness
    from ..tb.stimulus_runner import run_stimulus_rtl

    cfg = FabricConfig.load(preset="default")
    settings = stimulus_settings(cfg, "uniform", load=0.8, cycles=cycles, seed=1)
    exe = build_harness(cfg, top="stimulus", harness=HARNESS)
    build(cfg, sim="verilator", top="stimulus")
    t0 = time.perf_counter()
    model = StimulusModel(cfg).run(settings)
    model_seconds = time.perf_counter() - t0
    print(f"stimulus top, uniform 0.8, {cycles:,}-cycle window ({model.cycles:,} cycles)")
    print(f"{'runner':<28} {'cycles/s':>10} {'run s':>8}  hashes, counters, histograms")
    best = {}
    for repeat in range(REPEATS):
        for who in ("plain Verilator", "Verilator + cocotb"):
            with tempfile.TemporaryDirectory() as work:
                if who == "plain Verilator":
                    stats, seconds = run_plain(cfg, settings, exe, Path(work))
                else:
                    stats, timing = run_stimulus_rtl(cfg, settings, sim="verilator",
                                                     out_dir=work)
                    seconds = timing["run_seconds"]
            match = compare_stats(stats, model)
            verdict = "= model" if match["exact"] else f"MISMATCH ({match['problems'][0]})"
            print(f"{who + f' (run {repeat + 1})':<28} {stats.cycles / seconds:>10,.0f} "
                  f"{seconds:>8.1f}  {verdict}")
            best[who] = max(best.get(who, 0.0), stats.cycles / seconds)
    print(f"{'golden model (Python)':<28} {model.cycles / model_seconds:>10,.0f} "
          f"{model_seconds:>8.1f}")
    print(f"cocotb / plain: {best['Verilator + cocotb'] / best['plain Verilator']:.1%} "
          f"(the faster of {REPEATS} runs each)")


def main(argv=None) -> int:
    """Print the tables asked for (all by default)."""
    p = argparse.ArgumentParser(prog="superfabric.tools.bench", description=__doc__.splitlines()[0])
    # Positional choices are checked by hand: argparse refuses an empty
    # list for nargs="*" with choices (Python issue 9625).
    p.add_argument("tables", nargs="*", metavar="trace|rdma|stimulus",
                   help="tables to run (default: all)")
    p.add_argument("--cycles", type=int, default=1_000_000,
                   help="generation window of the stimulus runs (default 1,000,000)")
    args = p.parse_args(argv)
    for table in args.tables:
        if table not in TABLES:
            p.error(f"table {table!r}: must be one of {', '.join(TABLES)}")
    tables = args.tables or TABLES
    if "trace" in tables:
        trace_table()
    if "rdma" in tables:
        rdma_table()
    if "stimulus" in tables:
        stimulus_table(args.cycles)
    return 0


def trace_table() -> None:
    """Cycles per second of each simulator for uniform traffic at load 0.9."""
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


def rdma_table() -> None:
    """The RDMA all-reduce on the model and both simulators."""
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
    print()


if __name__ == "__main__":
    sys.exit(main())
