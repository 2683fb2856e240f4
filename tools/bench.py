"""Simulation speed and the measured figures of the documentation: the golden model across
sizes, loads and lengths; the fabrics' saturation throughput; the default 8x8 switch and
the RDMA fabric on the model and both RTL simulators; DCQCN over several hops of the
4x4x4 torus on the model, and the connection state at 64 and 384 accelerators; the
limit, the stimulus top under cocotb against the same Verilog under a plain Verilator
harness; and the stimulus top around the 4x4x4 and the 8x8x6 tori; the RDMA all-reduce
with its hosts in hardware, the same way; the model at fabric
scale, side by side with BookSim2 when its peers folder is there (:mod:`.booksim`); the
pooled memory's allocators on the training trace (:mod:`.pool`); training through the
int4 all-reduce, and the all-reduce's error two-shot against per hop (:mod:`.train`); the
compression unit and the collective engine on ECP5, tori on one ECP5, the default switch at
4, 8 and 16 ports on ECP5 and 7-series (:mod:`.synth.bench`); small all-reduces on 384 accelerators,
and the all-reduce swept over sizes and algorithms (:mod:`.collective_sweep`); the default
switch's latency against the output-queued bound, beside BookSim2's iSLIP (scheduling).

A benchmark, not a test: it prints figures and asserts nothing. Build and compile
times are excluded; each RTL run is checked against the model. Each table is also
written as a page of ``docs/results/`` stamped with date, commit and machine
(:mod:`.results_page`; ``--no-pages`` only prints).
``python -m superfabric.tools.bench [model] [fabric] [scale] [trace] [rdma] [rdma-hops]
[rdma-state] [rdma-fabrics] [stimulus] [fabric-stimulus] [rdma-hosted] [pool] [compression]
[board] [tornado]
[blocks] [fpga-fabric] [switch-synth] [collective-latency] [collective-sweep]
[collective-sweep-384] [scheduling]
[--cycles N]
[--against REV]``
runs the tables named (all by default); ``--cycles`` is the stimulus run's generation
window, ``--against REV`` also runs the model of an
earlier commit (from a git worktree of it) side by side with this one.
``--scale-dims``, ``--scale-cycles`` and ``--runs`` narrow or shorten the fabric-scale table
(a smoke run); ``--peers`` says where BookSim2's peers folder is (the fabric-scale and
scheduling tables).
``--dcqcn DIR`` runs only congestion control on the default fabric (PFC alone against
PFC + DCQCN, ``rdma-incast`` and ``rdma-victim``, on Verilator) and a shorter incast on
Icarus, keeping the runs in DIR.
"""

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from ..config import FabricConfig
from . import booksim, model_speed
from .pool import TABLE_HEADER, pool_row, run_pool
from .collective_sweep import SWEEPS, sweep_table
from .synth.bench import switch_table
from .results_page import RESULTS_DIR, Column, ResultsPage
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

#: The model table: every size at every load and length, 100,000 cycles each.
MODEL_CASES = [{"overrides": [f"switch.ports={ports}"], "traffic": "uniform", "load": load,
                "cycles": 100_000, "lengths": lengths}
               for ports in (8, 16, 32) for lengths in ("fixed:1", "fixed:16")
               for load in (0.5, 0.8, 1.0)]
RDMA_CASE = {"overrides": RDMA + ["rdma.qps=1024"], "traffic": "rdma-allreduce", "load": 0.5,
             "cycles": 10_000, "lengths": "fixed:1"}

#: Congestion control (README, DCQCN): the default fabric with one channel per peer (each
#: sender's traffic to a target is one DCQCN flow), host memory for the incast's data,
#: PFC, and ECN thresholds in packets (2 and 8 packets of 16 flits).
CONGESTION = ["rdma.enabled=true", "rdma.qps=64", "rdma.channels_per_peer=1",
              "rdma.memory_words=262144", "rdma.pages=1024", "pfc.enabled=true",
              "ecn.enabled=true", "ecn.kmin=32", "ecn.kmax=128", "ecn.pmax=0.5"]
#: (name, preset, simulator, overrides, pattern, load, posting cycles): 7 senders at 0.3 of
#: their uplinks into one target, the victim adding 0.3 to the bystander; on Icarus, 3
#: senders at 0.6 into one.
DCQCN_RUNS = (
    ("incast, PFC alone", "default", "verilator", CONGESTION, "rdma-incast", 0.3, 60_000),
    ("incast, PFC + DCQCN", "default", "verilator", CONGESTION + ["dcqcn.enabled=true"],
     "rdma-incast", 0.3, 60_000),
    ("victim, PFC alone", "default", "verilator", CONGESTION, "rdma-victim", 0.3, 60_000),
    ("victim, PFC + DCQCN", "default", "verilator", CONGESTION + ["dcqcn.enabled=true"],
     "rdma-victim", 0.3, 60_000),
    ("incast, PFC + DCQCN (tiny)", "tiny", "icarus",
     ["rdma.enabled=true", "rdma.qps=8", "rdma.channels_per_peer=1", "rdma.memory_words=8192",
      "rdma.page_words=64", "rdma.pages=128", "pfc.enabled=true", "ecn.enabled=true",
      "ecn.kmin=32", "ecn.kmax=128", "ecn.pmax=0.5", "dcqcn.enabled=true"], "rdma-incast", 0.6,
     2_000),
)

#: DCQCN over several hops (README): the 4x4x4 torus (64 accelerators, `dor`) with
#: the congestion settings of :data:`CONGESTION`, 8 QPs per accelerator and host memory for
#: the target's data. The incast of endpoints 0-7 (the 8 after the target, 63) at 0.3 of
#: their uplinks, the victim (6) adding 0.3 to the bystander (55): see :func:`hop_scenario`.
HOPS = CONGESTION + ["fabric.topology=torus", "fabric.dims=[4, 4, 4]", "rdma.qps=512"]
HOPS_TARGET, HOPS_SENDERS, HOPS_VICTIM, HOPS_BYSTANDER = 63, 8, 6, 55
HOPS_PATTERN = (f"rdma-victim:target={HOPS_TARGET},senders={HOPS_SENDERS},"
                f"victim={HOPS_VICTIM},bystander={HOPS_BYSTANDER},side_load=0.3")
#: (name, overrides): PFC alone, then PFC + ECN + DCQCN.
HOPS_RUNS = (("PFC alone", HOPS), ("PFC + ECN + DCQCN", HOPS + ["dcqcn.enabled=true"]))
HOPS_LOAD, HOPS_CYCLES = 0.3, 40_000

#: The connection-state table (README): the fabrics of 64 and 384 accelerators, the QPs
#: per accelerator (384 on 384 accelerators is the source design's 147,456 connections) and
#: the reliable channels per peer, at the default configuration otherwise.
STATE_FABRICS = (("4x4x4 torus", ["fabric.topology=torus", "fabric.dims=[4, 4, 4]"]),
                 ("8x8x6 torus", ["fabric.topology=torus", "fabric.dims=[8, 8, 6]"]))
STATE_QPS = (64, 384, 1024)
STATE_CHANNELS = (1, 2)

#: What is compared against an earlier commit: uniform load 0.8, 1-flit packets,
#: 100,000 cycles, 8, 16 and 32 ports; and the RDMA all-reduce.
AGAINST_CASES = [c for c in MODEL_CASES if c["load"] == 0.8 and c["lengths"] == "fixed:1"] \
    + [RDMA_CASE]


#: The fabrics whose saturation throughput the README states: (name, overrides).
FABRIC = ["switch.priorities=1"]
SATURATION = (
    ("4x4x4 torus, dor, 2 VCs", FABRIC + ["fabric.topology=torus"]),
    ("4x4x4 torus, adaptive, 3 VCs", FABRIC + ["fabric.topology=torus", "fabric.routing=adaptive",
                                               "fabric.vcs=3"]),
    ("4x4x4 torus, adaptive, 4 VCs", FABRIC + ["fabric.topology=torus", "fabric.routing=adaptive",
                                               "fabric.vcs=4"]),
    ("leaf-spine 8x8, 4 spines, ecmp", FABRIC + ["fabric.topology=fat_tree",
                                                 "fabric.routing=ecmp"]),
    ("leaf-spine 8x8, 4 spines, adaptive", FABRIC + ["fabric.topology=fat_tree",
                                                     "fabric.routing=adaptive"]),
)
#: The 384-endpoint torus of a supernode, on the model at three loads.
SUPERNODE = FABRIC + ["fabric.topology=torus", "fabric.dims=[8, 8, 6]"]


def fabric_table() -> ResultsPage:
    """Saturation throughput (accepted at offered load 1.0, uniform, 1-flit packets, 20,000
    cycles) of the fabrics beside their ideal bounds, and the 8x8x6 torus's speed."""
    from ..sim.fabric.metrics import ideal_throughput
    from ..network.topology import Topology
    page = ResultsPage(
        "fabric", "Fabrics on the golden model", "make bench TABLES=fabric",
        "Saturation: accepted throughput (flits per endpoint per cycle) at offered load "
        "1.0, uniform traffic, 1-flit packets, one traffic class "
        "(`--set switch.priorities=1`), 20,000 cycles, seed 1, beside the topology's ideal "
        "bound (specification section 11.8). Then the 384-endpoint 8x8x6 torus (`dor`, "
        "2 VCs) at three loads, 5,000 cycles. Model speed is wall-clock cycles per second, "
        "compilation excluded.")
    page.table(Column("fabric (64 endpoints)", 36, right=False), Column("accepted", 8),
               Column("bound", 6), Column("mean hops", 9), Column("cycles/s", 9))
    for name, overrides in SATURATION:
        cfg = FabricConfig.load(overrides=overrides)
        with tempfile.TemporaryDirectory() as out:
            res = run_point(cfg, traffic="uniform", load=1.0, cycles=20_000, seed=1,
                            sim="model", out_dir=out)
        page.row(name, f"{res['throughput']:.3f}", f"{ideal_throughput(Topology.of(cfg)):.3f}",
                 f"{res['fabric']['mean_hops']:.2f}", f"{res['cycles_per_second']:,.0f}")
    page.table(Column("8x8x6 torus, offered load", 25, right=False), Column("accepted", 8),
               Column("mean latency", 12), Column("cycles/s", 9))
    cfg = FabricConfig.load(overrides=SUPERNODE)
    for load in (0.2, 0.4, 0.6):
        with tempfile.TemporaryDirectory() as out:
            res = run_point(cfg, traffic="uniform", load=load, cycles=5_000, seed=1,
                            sim="model", out_dir=out)
        page.row(f"{load}", f"{res['throughput']:.3f}", f"{res['latency']['mean']:.1f}",
                 f"{res['cycles_per_second']:,.0f}")
    return page


#: The scheduling-quality table (issue 20): offered loads of uniform traffic on the default
#: 8x8 switch, the first standing for zero load; cycles of each model run.
SCHEDULING_LOADS = (0.01, 0.5, 0.8, 0.9, 0.95, 1.0)
SCHEDULING_CYCLES = 60_000
#: BookSim2's configuration of the same switch in the peers folder (3-iteration iSLIP).
SCHEDULING_PEER = "switch8_islip3"


def scheduling_table(peers: Path | None = None) -> ResultsPage:
    """The default switch's latency and accepted load under uniform traffic against the
    output-queued bound, beside BookSim2's 3-iteration iSLIP on the same switch when its
    peers folder is there: the figures a new scheduler must keep (issue 20)."""
    from .report.switch import oq_queueing_delay
    exe, configs, source = _booksim(peers)
    cfg = FabricConfig.load()
    n = cfg.switch.ports
    page = ResultsPage(
        "scheduling", f"Scheduling quality of the {n}x{n} switch, beside BookSim2",
        "make bench TABLES=scheduling",
        f"The default preset's {n}x{n} switch ({cfg.switch.islip_iterations}-iteration iSLIP, "
        f"{cfg.switch.priorities} traffic classes) on the model, uniform traffic, 1-flit "
        f"packets, {SCHEDULING_CYCLES:,} cycles, seed 1: accepted load (flits per port per "
        f"cycle), mean latency from generation to delivery in cycles, and the queueing delay, "
        f"the mean latency less the zero-load latency (measured at offered load "
        f"{SCHEDULING_LOADS[0]}), also as a multiple of W, the output-queued switch's mean "
        f"queueing delay ((N-1)/N) p / (2 (1-p)), the bound every input-queued design is "
        f"measured against. BookSim2 runs its own configuration of the switch "
        f"(`peers/configs/{SCHEDULING_PEER}`: VOQs as {n} VCs, 3-iteration iSLIP, "
        f"`sim_type = latency`), its latency from packet creation, its pipeline its own: "
        f"compare queueing delays, not latencies. Past saturation latency grows with the run, "
        f"and BookSim2 stops (unstable).")
    columns = [Column("offered", 7), Column("W", 5), Column("accepted", 8),
               Column("latency", 7), Column("queueing", 8), Column("x W", 5)]
    if exe is not None:
        columns += [Column("BookSim2 accepted", 17), Column("BookSim2 latency", 16),
                    Column("BookSim2 queueing", 17), Column("BookSim2 x W", 12)]
    page.table(*columns)
    zero = {}
    for load in SCHEDULING_LOADS:
        with tempfile.TemporaryDirectory() as out:
            res = run_point(cfg, traffic="uniform", load=load, cycles=SCHEDULING_CYCLES, seed=1,
                            sim="model", out_dir=out, packet_lengths="fixed:1")
        runs = [("model", res["throughput"], res["latency"]["mean"])]
        if exe is not None:
            stats = booksim.run_stats(exe, configs / SCHEDULING_PEER, load)
            runs.append(("BookSim2", *((stats.accepted, stats.latency) if stats else
                                       (None, None))))
        w = oq_queueing_delay(n, load) if load < 1 else None
        cells = [f"{load:g}", f"{w:.2f}" if w is not None else "-"]
        for who, accepted, latency in runs:
            # The zero-load row is the reference its queueing delay is measured from.
            queueing = latency - zero[who] if latency is not None and who in zero else None
            zero.setdefault(who, latency)
            cells += [f"{accepted:.3f}" if accepted is not None else "unstable",
                      f"{latency:.2f}" if latency is not None else "-",
                      f"{queueing:.2f}" if queueing is not None else "-",
                      f"{queueing / w:.2f}" if queueing is not None and w else "-"]
        page.row(*cells)
    page.note(source)
    return page


#: Tornado on tori of several shapes (issue 21): adaptive routing against dimension order
#: at every offered load of ``make demo``'s torus sweep, for 5,000 cycles as there.
TORNADO_DIMS = ((4, 4, 4), (4, 4), (8, 8), (6, 6, 2), (8, 4, 2), (4, 8), (4, 4, 8))
TORNADO_VCS = (3, 4)
TORNADO_LOADS = tuple(round(0.1 * k, 1) for k in range(1, 11))


def tornado_table() -> ResultsPage:
    """Accepted throughput of ``dor`` and ``adaptive`` under tornado traffic, per torus shape,
    VC count and offered load; where adaptive accepts less than dimension order."""
    page = ResultsPage(
        "tornado", "Adaptive routing against dimension order under tornado traffic",
        "make bench TABLES=tornado",
        "Accepted throughput (the flits delivered within the 5,000 cycles of traffic, per "
        "endpoint per cycle) under tornado traffic (to the router ceil(k/2) - 1 steps ahead "
        "in every dimension), one traffic class, 1-flit "
        "packets, seed 1, on the model: `dor / adaptive` at each offered load of `make "
        "demo`'s torus sweep, for 3 VCs (one adaptive) and 4 (two). A cell is marked **<** "
        "where adaptive accepts less than dimension order at the precision shown. The "
        "shortfall column is the largest (dor - adaptive) over the loads, unrounded, 0 "
        "where adaptive never accepts less.")
    page.table(Column("torus", 7, right=False), Column("VCs", 3),
               *(Column(f"{load:g}", 13) for load in TORNADO_LOADS), Column("shortfall", 9))
    for dims in TORNADO_DIMS:
        for vcs in TORNADO_VCS:
            cells, shortfall = [], 0.0
            for load in TORNADO_LOADS:
                accepted = {}
                for routing in ("dor", "adaptive"):
                    cfg = FabricConfig.load(overrides=FABRIC + [
                        "fabric.topology=torus", f"fabric.dims={list(dims)}",
                        f"fabric.vcs={vcs}", f"fabric.routing={routing}"])
                    with tempfile.TemporaryDirectory() as out:
                        res = run_point(cfg, traffic="tornado", load=load, cycles=5_000, seed=1,
                                        sim="model", out_dir=out)
                    accepted[routing] = res["throughput"]
                shortfall = max(shortfall, accepted["dor"] - accepted["adaptive"])
                below = round(accepted["adaptive"], 3) < round(accepted["dor"], 3)
                mark = " **<**" if below else ""
                cells.append(f"{accepted['dor']:.3f} / {accepted['adaptive']:.3f}{mark}")
            page.row(dims_name(dims), vcs, *cells, f"{shortfall:.4f}")
    return page


#: The fabric-scale table (issue 21): (torus dims, offered load, the BookSim2 configuration
#: of ``peers/configs`` that is the same fabric, or None, and the row's cycles as a multiple
#: of the table's). One traffic class, ``dor``, 2 VCs of 32 flits (the defaults), uniform
#: traffic, 1-flit packets. The last row is the 384-endpoint run an architect waits for:
#: 20,000 cycles at load 0.4, which the issue wants done in under 15 s of wall time.
SCALE = (((4, 4, 4), 0.2, "torus444_dor2", 1), ((4, 4, 4), 0.3, "torus444_dor2", 1),
         ((6, 6, 6), 0.2, None, 1), ((8, 8, 6), 0.2, None, 1), ((8, 8, 8), 0.2, "torus888_dor2", 1),
         ((8, 8, 6), 0.4, None, 2))
#: The fabric-scale table's model runs: cycles of traffic each, and runs per row (the
#: median is shown, with the spread).
SCALE_CYCLES = 10_000
SCALE_RUNS = 3
#: The threads each fabric-scale row's model runs on (``--threads``, spec 5.9): one, as
#: BookSim2 runs, and the two cores of the machine the figures are for.
SCALE_THREADS = (1, 2)


def dims_name(dims) -> str:
    """``4x4x4`` for ``(4, 4, 4)``."""
    return "x".join(str(d) for d in dims)


def _spread(values: list[float], fmt: str, unit: str = "") -> str:
    """The median of ``values`` and, of more than one, their range, each as ``fmt`` followed
    by ``unit``."""
    def show(x):
        return format(x, fmt) + unit
    median = show(statistics.median(values))
    return median if len(values) == 1 else f"{median} ({show(min(values))}-{show(max(values))})"


def _loadavg() -> str:
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def _booksim(peers: Path | None) -> tuple[Path | None, Path | None, str]:
    """BookSim2's executable and configurations folder, built from the peers folder
    (:func:`.booksim.find_peers`), or Nones and why there is no comparison."""
    found = booksim.find_peers(peers)
    if found is None:
        return None, None, ("BookSim2 not run: there is no `../shared/peers/` beside the "
                            "repository (BookSim2 is not a dependency; `--peers DIR` names "
                            "the folder). The table has the model's columns only.")
    missing = booksim.missing_tools()
    if missing:
        return None, None, (f"BookSim2 not run: building it needs {', '.join(missing)} "
                            f"(on Debian or Ubuntu: `sudo apt-get install g++ make flex "
                            f"bison`). The table has the model's columns only.")
    try:
        exe = booksim.build(found)
    except RuntimeError as err:
        return None, None, f"BookSim2 not run: {err}. The table has the model's columns only."
    return exe, found / "configs", f"BookSim2 from `{found}`, built in `{exe.parent.parent}`."


def scale_table(*, dims: list[str] | None = None, cycles: int = SCALE_CYCLES,
                runs: int = SCALE_RUNS, peers: Path | None = None) -> ResultsPage:
    """The model's speed on tori of 64 to 512 routers (:data:`SCALE`, the rows of ``dims``
    only when given), each run end to end in a fresh interpreter
    (:func:`.model_speed.measure_run`), ``runs`` times; beside it BookSim2 on the same
    fabric and load when its peers folder is there, runs alternating with the model's."""
    exe, configs, source = _booksim(peers)
    rows = [row for row in SCALE if dims is None or dims_name(row[0]) in dims]
    page = ResultsPage(
        "scale", "The golden model at fabric scale, beside BookSim2", "make bench TABLES=scale",
        f"Tori of 64 (4x4x4), 216 (6x6x6), 384 (8x8x6) and 512 (8x8x8) routers, one endpoint "
        f"each, `dor`, 2 VCs of 32 flits, one traffic class, uniform traffic, 1-flit packets, "
        f"{cycles:,} cycles of traffic ({2 * cycles:,} in the last row), seed 1; each model "
        f"run is `superfabric run --sim model --threads T` in a fresh interpreter, T = "
        f"{' and '.join(map(str, SCALE_THREADS))} (threads: the threads that step the "
        f"routers, specification section 5.9; BookSim2 runs on one). cycles: to the last "
        f"delivery; model cycles/s: the kernel's speed as `results.json` states it, compilation apart (compile s); M "
        f"router-cycles/s: that times the routers, in millions; kernel s: the model's run; "
        f"wall s: the whole run (the configuration and its deadlock check, traffic generation, "
        f"model, records, results) less the compilation; wall / kernel: their ratio, run by "
        f"run. BookSim2 runs its own configuration of the same fabric "
        f"(`peers/configs/`, `sim_type = latency`, for as many cycles as it chooses: BookSim2 "
        f"cycles) at the same injection rate; its speed is \"Time taken is N cycles\" over its "
        f"\"Total run time\"; model / BookSim2 is the ratio of the runs made one after the "
        f"other. Every figure is the median of {runs} runs, the range in brackets; runs "
        f"alternate (model on each number of threads, BookSim2, model, ...) so the machine's "
        f"load weighs on all alike.")
    columns = [Column("fabric", 6, right=False), Column("routers", 7), Column("load", 4),
               Column("threads", 7), Column("cycles", 6), Column("model cycles/s", 24),
               Column("M router-cycles/s", 17), Column("kernel s", 18), Column("wall s", 18),
               Column("wall / kernel", 18), Column("compile s", 9)]
    if exe is not None:
        columns += [Column("BookSim2 cycles", 15), Column("BookSim2 cycles/s", 24),
                    Column("model / BookSim2", 20)]
    before = _loadavg()
    page.table(*columns)
    for shape, load, config, times in rows:
        routers = math.prod(shape)
        case = {"overrides": FABRIC + ["fabric.topology=torus", f"fabric.dims={list(shape)}"],
                "traffic": "uniform", "load": load, "cycles": times * cycles, "lengths": "fixed:1",
                "end_to_end": True}
        model = {t: [] for t in SCALE_THREADS}
        peer, peer_cycles = [], set()
        for _ in range(runs):
            for threads in SCALE_THREADS:
                res, = _speeds([{**case, "threads": threads}])
                model[threads].append(res)
            if exe is not None and config is not None:
                speed = booksim.run(exe, configs / config, load)
                peer.append(speed.cycles_per_second)
                peer_cycles.add(speed.cycles)
        for threads, runs_of in model.items():
            speeds = [r["cycles_per_second"] for r in runs_of]
            cells = [dims_name(shape), routers, load, threads, f"{runs_of[0]['simulated']:,}",
                     _spread(speeds, ",.0f"),
                     _spread([s * routers / 1e6 for s in speeds], ".2f"),
                     _spread([r["kernel_seconds"] for r in runs_of], ".2f"),
                     _spread([r["wall_seconds"] for r in runs_of], ".2f"),
                     _spread([r["wall_seconds"] / r["kernel_seconds"] for r in runs_of], ".2f"),
                     f"{statistics.median(r['compile_seconds'] for r in runs_of):.2f}"]
            if exe is not None:
                cells += [", ".join(f"{c:,}" for c in sorted(peer_cycles)), _spread(peer, ",.0f"),
                          _spread([m / b for m, b in zip(speeds, peer)], ".1f", "x")] \
                    if peer else ["-", "-", "-"]
            page.row(*cells)
    page.note(source)
    page.note(f"Load average (1, 5, 15 minutes) before the runs {before}, after {_loadavg()}.")
    return page


def _speeds(cases: list[dict], pythonpath: str | None = None) -> list[dict]:
    """:mod:`.model_speed` on ``cases`` in a fresh interpreter, on the installed package
    or on the package tree at ``pythonpath``."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    # -P: the script's folder (tools/) must not shadow installed packages (its coverage.py
    # would hide the coverage package that numba imports).
    out = subprocess.run([sys.executable, "-P", model_speed.__file__, json.dumps(cases)], env=env,
                         capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"model_speed failed: {out.stderr.strip().splitlines()[-1:]}")
    return [json.loads(line) for line in out.stdout.splitlines()]


@contextmanager
def _package_at(rev: str):
    """The ``superfabric`` package of commit ``rev``, importable from a temporary directory.

    A git worktree of the commit, and a tree of links that lays its folders
    out the way ``pyproject.toml`` installs them (``config/`` is the package
    root, ``hdl/``, ``sim/``, ``tb/``, ``tools/`` its subpackages).
    """
    repo = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="superfabric-bench-") as tmp:
        tree = Path(tmp) / "checkout"
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", "--quiet",
                        str(tree), rev], check=True)
        try:
            package = Path(tmp) / "path" / "superfabric"
            package.mkdir(parents=True)
            for item in (tree / "config").iterdir():
                (package / item.name).symlink_to(item)
            for sub in ("hdl", "sim", "tb", "tools"):
                (package / sub).symlink_to(tree / sub)
            yield str(package.parent)
        finally:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)],
                           check=False)


def _case_name(case: dict) -> str:
    if case["traffic"].startswith("rdma-"):
        return f"{case['traffic']} (8 endpoints)"
    ports = case["overrides"][0].split("=")[1]
    return f"{ports}x{ports} load {case['load']} {case['lengths']}"


def model_table() -> ResultsPage:
    """Cycles per second of the model alone."""
    page = ResultsPage(
        "model", "The golden model's speed", "make bench TABLES=model",
        "The switch model alone (compiled kernels), uniform traffic, 100,000 cycles per case, "
        "at three sizes, three loads and two packet lengths; then the 8-endpoint RDMA "
        "all-reduce of `make demo` (1,024 QPs, 1 % drops). The best wall-clock speed of "
        "three runs, compilation excluded.")
    page.table(Column("case", 32, right=False), Column("cycles", 8), Column("cycles/s", 12),
               Column("wall s", 8))
    for res in _speeds(MODEL_CASES + [RDMA_CASE]):
        page.row(_case_name(res), res["simulated"], f"{res['cycles_per_second']:,.0f}",
                 f"{res['seconds']:.2f}")
    return page


def against_table(rev: str) -> ResultsPage:
    """The model of commit ``rev`` and this one, case by case, one after the other."""
    page = ResultsPage(
        "against", "The golden model against an earlier commit",
        f"make bench TABLES=model AGAINST={rev}",
        f"The model of commit `{rev}` and of this one, case by case, one run after the "
        f"other on the same machine, so the ratio holds even where the machine is shared.")
    with _package_at(rev) as path:
        page.table(Column("case", 32, right=False), Column(f"{rev[:10]} cycles/s", 12),
                   Column("now cycles/s", 12), Column("speed-up", 9))
        for case in AGAINST_CASES:
            before, = _speeds([case], pythonpath=path)
            now, = _speeds([case])
            page.row(_case_name(case), f"{before['cycles_per_second']:,.0f}",
                     f"{now['cycles_per_second']:,.0f}",
                     f"{now['cycles_per_second'] / before['cycles_per_second']:.1f}x")
    return page


def _match(res: dict) -> str:
    return "-" if res["match"] is None else ("exact" if res["match"]["exact"] else "MISMATCH")


def simulator_table() -> ResultsPage:
    """The default switch at load 0.9 on the model and both RTL simulators."""
    page = ResultsPage(
        "trace", "The switch under the RTL simulators", "make bench TABLES=trace",
        "The default 8x8 switch, uniform traffic at load 0.9, 1-flit packets, seed 1, "
        "trace-driven: the model alone, then the generated Verilog under cocotb on Verilator "
        "and on Icarus (fewer cycles), every packet held against the model. Build time "
        "excluded.")
    cfg = FabricConfig.load(preset="default")
    page.table(Column("simulator", 10, right=False), Column("cycles", 8), Column("cycles/s", 10),
               Column("wall s", 8), Column("throughput", 10), Column("RTL = model", 11))
    for sim, cycles in RUNS:
        with tempfile.TemporaryDirectory() as out:
            res = run_point(cfg, traffic="uniform", load=0.9, cycles=cycles, seed=1, sim=sim,
                            out_dir=out)
        page.row(sim, res["cycles"], f"{res['cycles_per_second']:,.0f}",
                 f"{res['wall_seconds']:.1f}", f"{res['throughput']:.4f}", _match(res))
    return page


def rdma_table() -> ResultsPage:
    """The RDMA all-reduce on the model and both RTL simulators."""
    page = ResultsPage(
        "rdma", "RDMA all-reduce on the model and the RTL", "make bench TABLES=rdma",
        "The ring all-reduce of RDMA WRITEs of `make demo` (8 endpoints, 1 % of packets "
        "dropped on every link) on the model and Verilator; on Icarus the `tiny` preset "
        "(4 endpoints, 8 QPs). Goodput in words per cycle per endpoint.")
    page.table(Column("simulator (preset)", 24, right=False), Column("cycles", 8),
               Column("cycles/s", 10), Column("wall s", 8), Column("goodput", 8),
               Column("requests OK", 11), Column("RTL = model", 11))
    for preset, sim, overrides in RDMA_RUNS:
        cfg = FabricConfig.load(preset=preset, overrides=overrides)
        with tempfile.TemporaryDirectory() as out:
            res = run_point(cfg, traffic="rdma-allreduce", load=0.5,
                            cycles=10_000 if preset == "default" else 1_000, seed=1, sim=sim,
                            out_dir=out)
        rd = res["rdma"]
        page.row(f"{sim} ({preset})", rd["cycles"], f"{res['cycles_per_second']:,.0f}",
                 f"{res['wall_seconds']:.1f}", f"{rd['goodput']:.4f}",
                 f"{rd['requests']['ok']}/{rd['requests']['posted']}", _match(res))
    return page


def dcqcn_table(out: Path) -> ResultsPage:
    """Congestion control: each run of :data:`DCQCN_RUNS` on its RTL simulator, against the
    model, into ``out/<n>``."""
    page = ResultsPage(
        "dcqcn", "DCQCN: congestion control with PFC as the backstop",
        "make bench DCQCN=build/dcqcn",
        "The default 8-endpoint RDMA fabric, 64 QPs, one channel per peer, PFC on, ECN "
        "kmin 32, kmax 128, pmax 0.5, seed 1, 60,000 posting cycles on Verilator: "
        "`rdma-incast` (7 senders at 0.3 into endpoint 0) and `rdma-victim` (the incast plus "
        "the victim's 0.3 to an idle bystander), with PFC alone and with DCQCN; then a "
        "3-to-1 incast on Icarus (`tiny`). Pauses: pause frames that pause; p99 q: the "
        "congested queue's 99th percentile in flits; Jain: fairness over the senders; "
        "victim: its goodput as a share of its demand.")
    page.table(Column("run", 28, right=False), Column("cycles", 8), Column("wall s", 7),
               Column("pauses", 7), Column("CNPs", 6), Column("p99 q", 6), Column("kmax", 5),
               Column("Jain", 6), Column("converged", 9), Column("victim", 7),
               Column("goodput", 8), Column("RTL = model", 11, right=False))
    for k, (name, preset, sim, overrides, pattern, load, cycles) in enumerate(DCQCN_RUNS):
        cfg = FabricConfig.load(preset=preset, overrides=overrides)
        res = run_point(cfg, traffic=pattern, load=load, cycles=cycles, seed=1, sim=sim,
                        out_dir=out / str(k))
        rd, c = res["rdma"], res["rdma"]["congestion"]
        ok = rd["requests"]["ok"] == rd["requests"]["posted"] and rd["data"]["corrupted"] == 0 \
            and rd["data"]["stray_words"] == 0
        match = "exact" if res["match"]["exact"] else "MISMATCH"
        victim = f"{c['victim']['share']:.0%}" if c["victim"] else "-"
        conv = "-" if c["converge_cycle"] is None else f"{c['converge_cycle']:,}"
        page.row(name, rd["cycles"], f"{res['wall_seconds']:.0f}", c["pause_frames"]["pauses"],
                 c["cnp"]["sent"], f"{c['queue']['p99']:.0f}", c["queue"]["kmax"],
                 f"{c['jain']:.3f}", conv, victim, f"{rd['goodput']:.4f}",
                 match + ("" if ok else ", CHECKS FAILED"))
    return page


def hop_scenario(cfg: FabricConfig) -> dict:
    """Where the flows of :data:`HOPS_PATTERN` go under the torus's dimension-order routing:
    ``roles``, the pattern's (:func:`~superfabric.sim.rdma.traffic.pattern_roles`);
    ``to_target``, each sender's route to the target and ``to_bystander``, the victim's,
    as link ids (:meth:`Peers.route <superfabric.sim.collective.peers.Peers.route>`);
    ``first_link``, the victim's first link as ``(router, port, next router)``, and
    ``sharing``, the senders whose route to the target crosses it."""
    from ..sim.collective.peers import Peers
    from ..sim.rdma.traffic import pattern_roles
    roles = pattern_roles(HOPS_PATTERN, cfg.accelerators, HOPS_LOAD)
    peers = Peers.of(cfg)
    to_target = {e: peers.route(e, HOPS_TARGET) for e in roles["senders"]}
    first = to_target[HOPS_VICTIM][0]
    router, port, after, _ = peers.topology.links[first]
    return {"roles": roles, "to_target": to_target,
            "to_bystander": peers.route(HOPS_VICTIM, HOPS_BYSTANDER),
            "first_link": (router, port, after),
            "sharing": [e for e, route in to_target.items() if first in route]}


def hops_table() -> ResultsPage:
    """DCQCN over several hops: :data:`HOPS_PATTERN` on the 4x4x4 torus, each run of
    :data:`HOPS_RUNS` on the model."""
    cfg = FabricConfig.load(overrides=HOPS)
    where = hop_scenario(cfg)
    router, port, after = where["first_link"]
    dim, minus = divmod(port - cfg.fabric.endpoints_per_router, 2)
    direction = "-+"[not minus] + "xyz"[dim]
    lengths = [len(route) for route in where["to_target"].values()]
    page = ResultsPage(
        "rdma-hops", "DCQCN over several hops: a victim on the 4x4x4 torus",
        "make bench TABLES=rdma-hops",
        f"The 4x4x4 torus (64 accelerators, one per router, `dor`, 2 VCs), an RDMA engine at "
        f"each, 8 QPs per accelerator, one channel per peer, PFC on endpoint ports, ECN at "
        f"every router (kmin 32, kmax 128 flits, pmax 0.5), seed 1, {HOPS_CYCLES:,} posting "
        f"cycles on the model: `{HOPS_PATTERN}` at load {HOPS_LOAD}, i.e. endpoints "
        f"{', '.join(map(str, where['roles']['senders']))} (the {HOPS_SENDERS} after the "
        f"target) write to endpoint {HOPS_TARGET} at {HOPS_LOAD} of their uplinks "
        f"({HOPS_SENDERS * HOPS_LOAD:.1f} times its downlink), and the victim, endpoint "
        f"{HOPS_VICTIM}, {len(where['to_target'][HOPS_VICTIM])} links from the target, adds "
        f"0.3 to the bystander, endpoint {HOPS_BYSTANDER}, whose downlink nothing else loads. "
        f"The victim's first link (router {router}'s {direction} output to router {after}) "
        f"carries the target-bound flows of endpoints "
        f"{', '.join(map(str, where['sharing']))} (the senders' routes, {min(lengths)} to "
        f"{max(lengths)} links, meet on one input of the target's router); its route to the "
        f"bystander "
        f"({len(where['to_bystander'])} links) leaves theirs after that link. With PFC alone "
        f"the congestion tree's backpressure reaches the victim's router and its uplink; with "
        f"DCQCN the marks travel back as CNPs over the fabric. Pauses: pause frames that "
        f"pause (all to endpoints); queue: the flits inside the fabric bound for the target, "
        f"per cycle over the run (mean, max); victim: its goodput to the bystander over its "
        f"demand (payload words per posting-window cycle); bystander CNPs: those the "
        f"bystander sent the victim, for its packets marked where they queue with the "
        f"target's before their routes part; goodput: words per cycle per "
        f"accelerator; Jain: fairness over the senders.")
    page.table(Column("run", 18, right=False), Column("cycles", 8), Column("wall s", 7),
               Column("pauses", 7), Column("CNPs", 6), Column("queue mean", 10),
               Column("queue max", 9), Column("victim", 22), Column("bystander CNPs", 14),
               Column("goodput", 8),
               Column("Jain", 6), Column("requests OK", 11), Column("memory", 8, right=False))
    for name, overrides in HOPS_RUNS:
        run_cfg = FabricConfig.load(overrides=overrides)
        with tempfile.TemporaryDirectory() as out:
            res = run_point(run_cfg, traffic=HOPS_PATTERN, load=HOPS_LOAD, cycles=HOPS_CYCLES,
                            seed=1, sim="model", out_dir=out)
        rd, c = res["rdma"], res["rdma"]["congestion"]
        v, data = c["victim"], rd["data"]
        intact = "intact" if data["corrupted"] == 0 and data["stray_words"] == 0 else "CORRUPT"
        page.row(name, f"{rd['cycles']:,}", f"{res['wall_seconds']:.0f}",
                 f"{c['pause_frames']['pauses']:,}", f"{c['cnp']['sent']:,}",
                 f"{c['queue']['mean']:.0f}", f"{c['queue']['max']:.0f}",
                 f"{v['goodput']:.4f} / {v['demand']:.4f} = {v['share']:.1%}",
                 rd["counters"]["cnp_sent"][HOPS_BYSTANDER], f"{rd['goodput']:.4f}", f"{c['jain']:.3f}",
                 f"{rd['requests']['ok']:,}/{rd['requests']['posted']:,}", intact)
    return page


def state_table() -> ResultsPage:
    """Reliability state of one connection per QP against the aggregated channels
    (:func:`~superfabric.sim.rdma.metrics.connection_state`) on :data:`STATE_FABRICS`,
    computed from the configuration: nothing runs."""
    from ..sim.rdma.metrics import connection_state
    page = ResultsPage(
        "rdma-state", "Connection state at 64 and 384 accelerators", "make bench TABLES=rdma-state",
        "The reliability state of one RC connection per QP against the engine's aggregated "
        "channels (specification section 10.9, `connection_state` in `sim/rdma/metrics.py`), "
        "in bytes over the whole fabric, both ends of every connection or channel, at the "
        "default configuration (window 32 packets, 16-flit packets, the default timeouts) on "
        "tori of 64 and 384 accelerators, for 64, 384 and 1,024 QPs per accelerator (384 "
        "QPs on 384 accelerators is the source design's 147,456 connections) and 1 or 2 "
        "channels per peer. Computed from the configuration, nothing is simulated; the QPs "
        "per accelerator are passed to the formula, since `rdma.qps` stops at 65,536. "
        "Reduction: per-QP bytes over aggregated bytes (below 1: aggregation holds more).")
    page.table(Column("fabric", 12, right=False), Column("accelerators", 12),
               Column("QPs each", 8), Column("connections (QPs)", 16), Column("per-QP bytes", 13),
               Column("channels per peer", 17), Column("channels each", 13),
               Column("aggregated bytes", 16), Column("bytes per channel", 17),
               Column("reduction", 9))
    for name, fabric in STATE_FABRICS:
        for qps in STATE_QPS:
            for channels in STATE_CHANNELS:
                cfg = FabricConfig.load(overrides=fabric + [f"rdma.channels_per_peer={channels}"])
                st = connection_state(cfg, qps_per_endpoint=qps)
                page.row(name, cfg.endpoints, f"{qps:,}", f"{cfg.endpoints * qps:,}",
                         f"{st['per_qp_bytes']:,}", channels,
                         f"{st['channels_per_endpoint']:,}", f"{st['aggregated_bytes']:,}",
                         st["bytes_per_channel"], f"{st['reduction']:.2f}x")
    return page


#: RDMA on fabrics: the tops' configurations (PFC, ECN and DCQCN on), the ports per
#: accelerator of the RTL = model runs (the cases of tests/rdma/test_rtl.py; on the
#: leaf-spine also two ports, rail-style, on the same build) and the fabric that is only
#: generated and built.
RDMA_FABRIC_CC = ["rdma.enabled=true", "pfc.enabled=true", "ecn.enabled=true",
                  "dcqcn.enabled=true"]
RDMA_FABRIC_SMALL = RDMA_FABRIC_CC + ["rdma.qps=8", "rdma.memory_words=4096", "rdma.page_words=64",
                                      "rdma.pages=64", "rdma.retransmit_timeout=256"]
RDMA_FABRICS = (
    ("2x2x2 torus", ["fabric.topology=torus", "fabric.dims=[2, 2, 2]"], (1,)),
    ("4-leaf leaf-spine", ["fabric.topology=fat_tree", "fabric.leaves=4", "fabric.spines=2",
                           "fabric.hosts_per_leaf=2", "fabric.routing=ecmp"], (1, 2)),
    ("4x4x4 torus", ["fabric.topology=torus", "fabric.dims=[4, 4, 4]"], ()),
)
#: (pattern, extra overrides, load, cycles) of the RTL = model runs on each small fabric.
RDMA_FABRIC_RUNS = (("rdma-allreduce", ["faults.drop_rate=0.01"], 0.5, 2000),
                    ("rdma-incast", [], 0.6, 400))


def rdma_fabrics_table() -> ResultsPage:
    """RDMA on fabrics (section 10.15): the time to generate and build each RDMA top of
    :data:`RDMA_FABRICS` from scratch, and on the small ones the RTL = model runs."""
    from ..hdl.verilog import write_verilog
    from ..tb.runner import build
    page = ResultsPage(
        "rdma-fabrics", "RDMA on a torus and a leaf-spine", "make bench TABLES=rdma-fabrics",
        "An RDMA engine at every accelerator (specification section 10.15) with PFC, ECN and "
        "DCQCN. Generation and Verilator build from scratch of the `rdma_fabric` top at the "
        "`default` preset's sizes (16,384-word host memories, 1,024 QPs); then, on the "
        "`tiny` preset with 4,096-word memories and 8 QPs (the cases of "
        "`tests/rdma/test_rtl.py`), the all-reduce over 1 % drops and an incast of every "
        "other accelerator on Verilator under cocotb, every packet, completion, pause frame, "
        "CNP, rate change and memory word held against the model. On the leaf-spine also "
        "with two ports per accelerator (`fabric.ports_per_accelerator = 2`, rail-style: "
        "port 0 of the four accelerators on leaves 0-1, port 1 on leaves 2-3; section "
        "11.2), on the same build.")
    page.table(Column("fabric", 18, right=False), Column("accelerators", 12),
               Column("generate s", 10), Column("generate + build s", 18),
               Column("run", 15, right=False), Column("cycles", 7), Column("RTL = model", 11),
               Column("retransmissions", 15), Column("CNPs", 5), Column("pause frames", 12))
    for name, fabric, ports in RDMA_FABRICS:
        cfg = FabricConfig.load(preset="default", overrides=RDMA_FABRIC_CC + fabric)
        with tempfile.TemporaryDirectory() as out:
            t0 = time.perf_counter()
            write_verilog(cfg, Path(out) / "rtl", top="rdma_fabric")
            generate = time.perf_counter() - t0
            t0 = time.perf_counter()
            # From scratch: ccache would serve the engine's objects of the fabric before.
            before = os.environ.pop("CCACHE_DISABLE", None)
            os.environ["CCACHE_DISABLE"] = "1"
            try:
                build(cfg, sim="verilator", top="rdma_fabric", build_root=Path(out) / "build")
                built = f"{time.perf_counter() - t0:.1f}"
            except RuntimeError as err:       # recorded, not lost: the row says so
                built = f"failed after {time.perf_counter() - t0:.0f} s: {str(err)[:60]}"
            finally:
                os.environ.pop("CCACHE_DISABLE")
                if before is not None:
                    os.environ["CCACHE_DISABLE"] = before
        page.row(name, cfg.endpoints, f"{generate:.1f}", built, "", "", "", "", "", "")
        for p, (pattern, extra, load, cycles) in itertools.product(ports, RDMA_FABRIC_RUNS):
            small = FabricConfig.load(preset="tiny", overrides=RDMA_FABRIC_SMALL + fabric + extra
                                      + [f"fabric.ports_per_accelerator={p}"])
            with tempfile.TemporaryDirectory() as out:
                res = run_point(small, traffic=pattern, load=load, cycles=cycles, seed=1,
                                sim="verilator", out_dir=out)
            rd = res["rdma"]
            page.row("", f"{small.accelerators} x {p} ports" if p > 1 else "", "", "",
                     pattern, rd["cycles"], _match(res), rd["retransmissions"]["total"],
                     rd["congestion"]["cnp"]["sent"], rd["congestion"]["pause_frames"]["sent"])
    return page


#: The pool table: (accelerators, MiB each, overrides): the default pool, 2 KiB pages; a
#: tighter one, the trace's peak 94 % of it; the default with 64 KiB pages.
POOLS = ((8, 128, []), (8, 112, []), (8, 128, ["rdma.page_words=8192"]))


def pool_table() -> ResultsPage:
    """Best-fit against buddy on the training trace (section 10.14), for each pool of
    :data:`POOLS`, seed 1."""
    page = ResultsPage(
        "pool", "Pooled memory: fragmentation of best-fit and buddy", "make bench TABLES=pool",
        "The training trace (specification section 10.14.4: eight data-parallel ranks, one per "
        "accelerator, of a four-layer slice of a small GPT, four steps, seed 1; 3,424 "
        "allocations and frees, about 105 MiB a rank at its peak) replayed on each allocator: "
        "8 accelerators of 128 MiB with 2 KiB pages (`superfabric pool`'s defaults), of 112 MiB "
        "(the trace's peak is 94 % of that pool), and of 128 MiB with 64 KiB pages. Peak use: "
        "the allocated pages at their peak over the pool. Internal fragmentation: allocated "
        "bytes no request asked for, over the allocated bytes; external: 1 - (each "
        "accelerator's largest free extent, summed) / free bytes (section 10.14.5); each after "
        "the peak operation (- when nothing is free there), as the mean over the trace, and "
        "the largest. Failed: allocations that found no room, of all. The goal of the source "
        "design is under 5 % for best-fit.")
    widths = (9, 12, 6, 8, 16, 13, 16, 13, 12, 9)
    page.table(*(Column(h, w, right=k > 0) for k, (h, w) in enumerate(zip(TABLE_HEADER, widths))))
    for accelerators, mib, overrides in POOLS:
        cfg = FabricConfig.load(overrides=overrides)
        for allocator in ("best-fit", "buddy"):
            page.row(*pool_row(run_pool(cfg, allocator=allocator, accelerators=accelerators,
                                        memory_mib=mib, trace="training", seed=1)))
    return page


#: The board table's builds: board, FPGA size; each at the default clock and run of
#: ``superfabric board`` (the tiny preset's 4-port stimulus top).
BOARD_BUILDS = (("ulx3s", "85F"), ("orangecrab", "85F"))


def board_table() -> ResultsPage:
    """``superfabric board``'s bitstreams (:data:`BOARD_BUILDS`): clock, Fmax, resources and
    build time; a build that fails is a row with its one-line error."""
    from ..sim.stimulus.traffic_gen import stimulus_settings
    from .board import DEFAULT_BAUD, DEFAULT_CLOCK_MHZ, build_board
    from .synth.eda_tool import ToolFailed, ToolMissing
    page = ResultsPage(
        "board", "The stimulus top on ECP5 boards", "make bench TABLES=board",
        "`superfabric board --board B` with its defaults: the `tiny` preset's 4-port stimulus "
        f"top (4 ports, 2 classes, 2 iSLIP iterations), uniform traffic at load 0.5 for "
        f"1,000,000 cycles, seed 1, the board's oscillator through the ECP5 PLL to "
        f"{DEFAULT_CLOCK_MHZ:g} MHz, the UART at {DEFAULT_BAUD:,} baud (specification section "
        "13.5). Fmax and resources are nextpnr's after routing, against the clock nextpnr "
        "derives through the PLL (a build that misses it fails); LUT4 counts TRELLIS_COMB "
        "cells, FF TRELLIS_FF. Build: Yosys, nextpnr and ecppack, wall time on this machine.")
    widths = (10, 9, 7, 10, 8, 8, 6, 9, 12)
    page.table(*(Column(h, w, right=k > 1) for k, (h, w) in enumerate(zip(
        ("board", "device", "clock", "Fmax", "LUT4", "FF", "DP16KD", "build", "run hash"),
        widths))))
    cfg = FabricConfig.load(preset="tiny")
    settings = stimulus_settings(cfg, "uniform", load=0.5, cycles=1_000_000, seed=1)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for board, fpga in BOARD_BUILDS:
            try:
                res = build_board(cfg, settings, Path(tmp) / board, board=board, fpga=fpga)
            except (ToolFailed, ToolMissing) as e:
                failures.append(f"{board} {fpga}: {e}")
                page.row(board, fpga, f"{DEFAULT_CLOCK_MHZ:g} MHz", "failed", "-", "-", "-", "-",
                         "-")
                continue
            used = res["resources"]
            page.row(board, res["device"], f"{res['clock_mhz']:g} MHz",
                     f"{res['fmax_mhz']:.1f} MHz", f"{used['TRELLIS_COMB']:,}",
                     f"{used['TRELLIS_FF']:,}", str(used["DP16KD"]),
                     f"{res['seconds'] / 60:.1f} min", res["model_hash"])
    for failure in failures:
        page.note(failure)
    return page


#: The blocks table's tops: name, ``superfabric synth --top``, the ``tiny`` preset's overrides.
BLOCKS = (("gradient compression unit", "compression", []),
          ("collective engine", "collective", ["rdma.enabled=true"]))


def blocks_table() -> ResultsPage:
    """The blocks that every fabric offers as tops (:data:`BLOCKS`) on ECP5: resources,
    Fmax and the critical path's ends after place and route; a build that fails is a row
    with its one-line error."""
    from .synth.eda_tool import ToolFailed, ToolMissing
    from .synth.flow import synthesize
    page = ResultsPage(
        "blocks", "The compression unit and the collective engine on ECP5",
        "make bench TABLES=blocks",
        "`superfabric synth --preset tiny [--set rdma.enabled=true] --top T --target ecp5`: "
        "Yosys, then nextpnr on the LFE5UM-85F (speed 6) against a 100 MHz constraint, seed "
        "1. The collective engine is one accelerator's (specification section 15.8.6) for "
        "the `tiny` preset's RDMA engine: 4 accelerators, a schedule memory of 256 steps in "
        "LUT RAM, 4 send queues; the compression unit is section 16's quantiser and "
        "dequantiser. LUT4 counts the LUTs Yosys maps; Fmax and the critical path are "
        "nextpnr's. Build: wall time on this machine.")
    widths = (26, 12, 8, 7, 6, 8, 5, 11, 46, 9)
    page.table(*(Column(h, w, right=0 < k < 8) for k, (h, w) in enumerate(zip(
        ("block", "top", "LUT4", "FF", "DP16KD", "LUT RAM", "DSP", "Fmax", "critical path",
         "build"), widths))))
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, top, overrides in BLOCKS:
            cfg = FabricConfig.load(preset="tiny", overrides=overrides)
            try:
                synth = synthesize(cfg, Path(tmp) / top, target="ecp5", top=top, quiet=True)
            except (ToolFailed, ToolMissing) as e:
                failures.append(f"{name}: {e}")
                page.row(name, top, *["failed"] + ["-"] * 7)
                continue
            res, timing = synth["resources"], synth["timing"]
            path = timing["critical_path"]
            page.row(name, top, f"{res['lut']:,}", f"{res['ff']:,}", str(res["bram"]),
                     f"{res['lutram']:,}", str(res["dsp"]), f"{timing['fmax_mhz']:.1f} MHz",
                     f"{path['from']['module']} -> {path['to']['module']}",
                     f"{synth['wall_seconds'] / 60:.1f} min")
    for failure in failures:
        page.note(failure)
    return page


#: The tori of the FPGA fabric table, smallest last: name, ``fabric.dims``.
FPGA_TORI = (("3x3 torus", [3, 3]), ("2x2 torus", [2, 2]), ("ring of 4", [4]))
#: Their routers: the default preset with one class and two VCs, one endpoint each.
FPGA_TORUS = ["fabric.topology=torus", "switch.priorities=1", "fabric.vcs=2"]


def fpga_fabric_table() -> ResultsPage:
    """Tori on one ECP5 (:data:`FPGA_TORI`): the stimulus top, its routers with their
    generators and sinks, synthesised, placed and routed where it fits; a torus that does
    not fit is a row with what it needs."""
    from ..network.topology import Topology
    from .synth.eda_tool import ToolFailed, ToolMissing
    from .synth.flow import SynthError, synthesize
    page = ResultsPage(
        "fpga-fabric", "Tori on one ECP5: routers with their generators and sinks",
        "make bench TABLES=fpga-fabric",
        "`superfabric synth --top stimulus --set fabric.topology=torus --set "
        "fabric.dims=[3,3] --set switch.priorities=1 --set fabric.vcs=2 --target ecp5 "
        "--router router2`, and the same with `fabric.dims` `[2,2]` and `[4]` "
        "(the default preset otherwise: 64-bit flits, 512-flit endpoint buffers, 32-flit VC "
        "buffers, iSLIP of 3 iterations; one endpoint a router, each with its hardware "
        "traffic generator and statistics sink, section 12.4): Yosys, then, where it fits, "
        "nextpnr on the LFE5UM-85F (speed 6) against a 100 MHz constraint, seed 1. LUT4 "
        "sites: what the fit check counts, LUT4 and the six sites of each LUT RAM cell, "
        "against the device's 83,640. Build: wall time on this machine.")
    widths = (10, 7, 8, 7, 6, 7, 10, 13, 46, 7)
    page.table(*(Column(h, w, right=0 < k < 8) for k, (h, w) in enumerate(zip(
        ("fabric", "routers", "LUT4", "FF", "DP16KD", "LUT RAM", "LUT4 sites", "Fmax",
         "critical path", "build"), widths))))
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, dims in FPGA_TORI:
            cfg = FabricConfig.load(overrides=FPGA_TORUS + [f"fabric.dims={dims}"])
            routers = str(Topology.of(cfg).routers)
            out = Path(tmp) / name.replace(" ", "-")
            try:
                synth = synthesize(cfg, out, target="ecp5", top="stimulus", router="router2",
                                   quiet=True)
            except SynthError:
                synth = json.loads((out / "synth.json").read_text())
            except (ToolFailed, ToolMissing) as e:
                failures.append(f"{name}: {e}")
                page.row(name, routers, *["failed"] + ["-"] * 7)
                continue
            res, sites = synth["resources"], synth["use"][0]
            if synth["fits"]:
                path = synth["timing"]["critical_path"]
                fmax = f"{synth['timing']['fmax_mhz']:.1f} MHz"
                where = (f"{path['from']['module']} -> {path['to']['module']}, "
                         f"{path['logic_levels']} levels")
            else:
                fmax, where = "does not fit", "-"
            page.row(name, routers, f"{res['lut']:,}", f"{res['ff']:,}",
                     str(res["bram"]), f"{res['lutram']:,}",
                     f"{sites['used']:,} ({sites['percent']:.0f} %)", fmax, where,
                     f"{synth['wall_seconds'] / 60:.1f} min")
    for failure in failures:
        page.note(failure)
    return page


#: The compression table's training runs: accelerators, steps (the same for every payload).
TRAIN_RUNS = ((8, 300), (64, 300))
#: Its all-reduce error rows: torus, elements per accelerator (192 KiB: whole blocks in
#: every chunk on both tori), and the algorithms compared.
ERROR_RUNS = (((4, 4, 4), 49_152), ((8, 8, 6), 49_152))
ERROR_ALGOS = (("dimwise-direct", "two-shot, once per dimension"),
               ("dimwise", "per hop, rings along each axis"), ("ring", "per hop, one ring"))
#: The predicted times' message sizes, MiB per accelerator, on the same tori.
TIME_MIB = (1, 16)


def compression_table() -> ResultsPage:
    """Training through the int4 all-reduce against binary32 (:data:`TRAIN_RUNS`), the
    all-reduce's error, two-shot against per hop (:data:`ERROR_RUNS`), and its predicted time
    (:data:`TIME_MIB`); the loss curves as ``compression-loss.png`` beside the page."""
    import numpy as np
    from ..network.topology import Topology
    from ..sim.collective.alpha_beta import AlphaBeta
    from ..sim.collective.compressed import (CompressedAllReduce, block_elements,
                                             relative_l2_error)
    from ..sim.collective.peers import Peers
    from .train import TABLE_HEADER as TRAIN_HEADER
    from .train import plot_losses, run_train, train_row
    page = ResultsPage(
        "compression", "Gradient compression: int4 on the all-reduce",
        "make bench TABLES=compression",
        "Training (`superfabric train`, specification section 16.7): a softmax regression "
        "on scikit-learn's digits (650 parameters, padded to whole blocks), batch 256, "
        "plain SGD at learning rate 0.5, seed 1, the same steps for every payload, data-"
        "parallel on the 2x2x2 and 4x4x4 tori; the gradients all-reduced two-shot "
        "(`dimwise-direct`) in binary32, in int4 with stochastic rounding and each "
        "accelerator's error-feedback residual, and in int4 without it. Test accuracy on "
        "the held-out quarter (450 images; one image is 0.22 points); bytes on links: one "
        "step's all-reduce payload summed over every link it crosses (section 16.6), and as "
        "a share of binary32's; gradient error: the all-reduced gradient's relative L2 "
        "error against the exact sum of the accelerators' gradients, the mean over the "
        "steps. Then the all-reduce alone on 49,152 standard-normal binary32 values per "
        "accelerator (192 KiB), int4 with stochastic rounding, seed 1: relative L2 error "
        "of the result against the exact sum, two-shot against per-hop requantisation. Last, the "
        "all-reduce's time as the alpha-beta model predicts it, binary32 against int4, at 1 "
        "and 16 MiB per accelerator.")
    page.table(*(Column(h, w, right=k != 1)
                 for k, (h, w) in enumerate(zip(TRAIN_HEADER, (12, 12, 13, 10, 21, 11, 14)))))
    runs = []
    for accelerators, steps in TRAIN_RUNS:
        for compression, feedback in (("none", True), ("int4", True), ("int4", False)):
            res = run_train(accelerators=accelerators, compression=compression,
                            error_feedback=feedback, steps=steps, seed=1)
            runs.append(res)
            page.row(*train_row(res))
    page.table(Column("torus", 5, right=False), Column("accelerators", 12),
               Column("all-reduce", 32, right=False), Column("relative L2 error", 17),
               Column("bytes on links", 14), Column("binary32 bytes on links", 23))
    for dims, elements in ERROR_RUNS:
        peers = Peers(Topology("torus", dims=dims))
        rng = np.random.default_rng(1)
        data = [rng.standard_normal(elements).astype(np.float32) for _ in range(peers.n)]
        for algo, what in ERROR_ALGOS:
            int4 = CompressedAllReduce(peers, algo=algo, elements=elements, seed=1)
            binary32 = CompressedAllReduce(peers, algo=algo, elements=elements,
                                           compression="none")
            page.row(dims_name(dims), peers.n, f"{algo} ({what})",
                     f"{relative_l2_error(int4(data)[0], data):.4f}",
                     f"{int4.payload_bytes_on_links:,}", f"{binary32.payload_bytes_on_links:,}")
    page.table(Column("torus", 5, right=False), Column("message", 7),
               Column("all-reduce", 14, right=False), Column("binary32 cycles", 15),
               Column("int4 cycles", 11), Column("int4 / binary32", 15),
               Column("int4 / best binary32", 20))
    for dims, _ in ERROR_RUNS:
        cfg = FabricConfig.load(overrides=["fabric.topology=torus", f"fabric.dims={list(dims)}"])
        peers, model = Peers.of(cfg), AlphaBeta.of(cfg)
        for mib in TIME_MIB:
            elements = block_elements(peers, "ring", (mib << 20) // 4)
            cycles = {algo: [CompressedAllReduce(peers, algo=algo, elements=elements,
                                                 compression=c).predicted_cycles(model)
                             for c in ("none", "int4")] for algo, _ in ERROR_ALGOS}
            best = min(b for b, _ in cycles.values())
            for algo, (b, c) in cycles.items():
                page.row(dims_name(dims), f"{mib} MiB", algo, f"{b:,}", f"{c:,}",
                         f"{c / b:.3f}", f"{c / best:.3f}")
    page.note("Predicted by the alpha-beta model (section 15.6) of each torus's configuration "
              "(`fabric.topology=torus`, 64-bit flits), each round's chunk at its bytes on the "
              "wire, in whole chunks (each round after the apply of the one before); the "
              "message padded to whole blocks in every chunk. It takes the quantiser "
              "and the dequantiser to keep up with the link: at 17 bytes a block a 64-bit flit "
              "carries 15 values, where the present RTL quantiser (section 16.5) takes 0.47 "
              "values a cycle. Best binary32: the least of the three algorithms' binary32 "
              "cycles.")
    if RESULTS_DIR.is_dir():
        plot_losses(runs, RESULTS_DIR / "compression-loss.png")
        page.note("![Training loss of each run](compression-loss.png)")
    return page


#: The small-message all-reduces on 384 accelerators, by every algorithm that runs there:
#: (fabric, overrides), the messages (bytes per accelerator), and the processes that run
#: the points side by side.
LATENCY_FABRICS = (
    ("8x8x6 torus", ["fabric.topology=torus", "fabric.dims=[8, 8, 6]"]),
    ("leaf-spine 24x16, 16 spines", ["fabric.topology=fat_tree", "fabric.leaves=24",
                                     "fabric.hosts_per_leaf=16", "fabric.spines=16",
                                     "fabric.routing=ecmp"]),
)
LATENCY_BYTES = (8, 64, 512, 4096)
LATENCY_WORKERS = 2


def latency_config(overrides: list[str]) -> FabricConfig:
    """A fabric of :data:`LATENCY_FABRICS` with an RDMA engine, one QP per peer, at every
    accelerator."""
    return FabricConfig.load(overrides=["rdma.enabled=true", "rdma.qps=384", *overrides])


def latency_point(overrides: list[str], algo: str, nbytes: int) -> dict:
    """One all-reduce of ``nbytes`` by ``algo`` on the model (binary32, seed 1, the pattern's
    default segments): the ``collective`` section of its results."""
    from ..sim.collective.fabric import collective_summary, prepare_collective, run_collective
    from ..sim.collective.pattern import SEGMENT_PACKETS
    cfg = latency_config(overrides)
    prepared = prepare_collective(cfg, op="allreduce", algo=algo, nbytes=nbytes, dtype="fp32",
                                  seed=1, segment_packets=SEGMENT_PACKETS)
    records, engines, buffers = run_collective(cfg, prepared)
    return collective_summary(cfg, prepared, records, engines, buffers)


def latency_rounds(peers, algo: str, nbytes: int) -> tuple[int, int]:
    """The all-reduce's rounds on ``peers``' fabric, each waiting for the one before (section
    15.6: an exchange's turns, which do not, are one), and the routers on their paths
    summed, the longest path of each round."""
    from ..sim.collective.alpha_beta import priced_rounds
    from ..sim.collective.schedule import elements_of
    rounds = priced_rounds(peers, "allreduce", algo, elements_of(nbytes))
    return len(rounds), sum(max(peers.hops(*pair) for pair in pairs) for pairs, _, _ in rounds)


def latency_table() -> ResultsPage:
    """The small-message all-reduce's latency on 384 accelerators, torus against leaf-spine,
    per algorithm (:data:`LATENCY_FABRICS`, :data:`LATENCY_BYTES`), with the alpha-beta
    model's per-step and per-hop costs that explain it."""
    from concurrent.futures import ProcessPoolExecutor
    from ..sim.collective.alpha_beta import AlphaBeta
    from ..sim.collective.library import ALGORITHMS, auto, supports
    from ..sim.collective.pattern import SEGMENT_PACKETS
    from ..sim.collective.peers import Peers
    page = ResultsPage(
        "collective-latency", "Small all-reduces on 384 accelerators: torus against leaf-spine",
        "make bench TABLES=collective-latency",
        "`superfabric run --sim model ... --traffic collective:op=allreduce,algo=A,bytes=B,"
        "dtype=float32` (segments of 16 packets, the default) on 384 accelerators, with "
        "`--set rdma.enabled=true --set rdma.qps=384` (one QP per peer), seed 1: the 8x8x6 "
        "torus (dimension-order routing) and a leaf-spine of 24 leaves of 16 accelerators "
        "under 16 spines (ECMP), both at the default 625 MHz and 64-bit flits. Time: from "
        "cycle 0 to the cycle after the last "
        "accelerator applied its last chunk, every accelerator's result checked against "
        "numpy (data). Rounds: the algorithm's rounds, each waiting for the data of the "
        "one before (a direct exchange's turns, which do not, one round); hops: the routers "
        "on the longest path of each round, summed; per round: cycles over rounds. "
        "Alpha-beta: the model's prediction (specification "
        "section 15.6), which charges every write of a round at its accelerator the "
        "serialisation, the routers on its route and the apply of its chunk.")
    page.table(*(Column(h, w, right=k > 1) for k, (h, w) in enumerate(zip(
        ("fabric", "algorithm", "message", "rounds", "hops", "cycles", "time", "per round",
         "alpha-beta", "ratio", "data"), (27, 16, 7, 6, 5, 7, 9, 9, 10, 5, 5)))))
    fabrics = []
    for name, overrides in LATENCY_FABRICS:
        cfg = latency_config(overrides)
        peers = Peers.of(cfg)
        fabrics.append((name, overrides, AlphaBeta.of(cfg), peers,
                        [a for a in ALGORITHMS if supports(a, "allreduce", peers)]))
    points = [(name, overrides, algo, nbytes) for name, overrides, _, _, algos in fabrics
              for nbytes in LATENCY_BYTES for algo in algos]
    peers_of = {name: peers for name, _, _, peers, _ in fabrics}
    measured = {}
    with ProcessPoolExecutor(LATENCY_WORKERS) as pool:
        futures = [pool.submit(latency_point, overrides, algo, nbytes)
                   for _, overrides, algo, nbytes in points]
        for (name, overrides, algo, nbytes), future in zip(points, futures):
            try:
                c = future.result()
            except Exception as e:      # a failed point is a row that says why
                page.row(name, algo, f"{nbytes} B", *["-"] * 7, "failed")
                page.note(f"{name}, {algo}, {nbytes} B: {type(e).__name__}: {e}")
                continue
            cycles = c["cycles"]
            if cycles and c["data_ok"]:
                measured[name, algo, nbytes] = cycles
            rounds, hops = latency_rounds(peers_of[name], algo, nbytes)
            page.row(name, algo, f"{nbytes} B", str(rounds), str(hops),
                     f"{cycles:,}" if cycles else "-",
                     f"{c['time_us']:.2f} us" if cycles else "-",
                     f"{cycles / rounds:.1f}" if cycles else "-",
                     f"{c['alpha_beta_cycles']:,}",
                     f"{c['alpha_beta_ratio']:.2f}" if cycles else "-",
                     "exact" if c["data_ok"] else "WRONG")
    for name, _, model, peers, algos in fabrics:
        segment = model.segment_elements(SEGMENT_PACKETS)
        picks = []
        for nbytes in LATENCY_BYTES:
            pick = auto(model, peers, "allreduce", nbytes, segment)
            ran = {a: measured[name, a, nbytes] for a in algos if (name, a, nbytes) in measured}
            best = min(ran, key=ran.get) if ran else None
            if pick == best:
                picks.append(f"{pick} at {nbytes} B (the fastest)")
            elif pick in ran:
                picks.append(f"{pick} at {nbytes} B ({ran[pick] / ran[best]:.3f} x the "
                             f"fastest, {best})")
            else:                   # its run failed: nothing to compare
                picks.append(f"{pick} at {nbytes} B")
        page.note(f"{name}: the alpha-beta model's costs are {model.engine_cycles} cycles a "
                  f"step at the engine and {model.hop_cycles} a router on the path (more "
                  f"behind a longer packet), "
                  f"{model.flit_bytes} bytes a flit cycle; `algo=auto` picks "
                  f"{', '.join(picks)}.")
    return page


#: The plain Verilator harness of the stimulus top.
HARNESS = Path(__file__).with_name("stimulus_harness.cpp")
#: The plain Verilator harness of the hardware-hosted RDMA top.
RDMA_HARNESS = Path(__file__).with_name("rdma_harness.cpp")
#: The tables main() can print.
TABLES = ("model", "fabric", "scale", "trace", "rdma", "rdma-hops", "rdma-state",
          "rdma-fabrics", "stimulus", "fabric-stimulus", "rdma-hosted", "pool", "compression",
          "board",
          "tornado", "blocks", "fpga-fabric", "switch-synth", "collective-latency",
          "collective-sweep", "collective-sweep-384", "scheduling")
#: The stimulus top around fabrics: (name, overrides, loads, generation window).
FABRIC_STIMULUS = (
    ("4x4x4 torus, dor, 2 VCs", FABRIC + ["fabric.topology=torus"], (0.6,), 200_000),
    ("8x8x6 torus, dor, 2 VCs", SUPERNODE, (0.2, 0.4, 0.6), 20_000),
)
#: Runs of each harness; the faster of each is compared, the machine being shared.
REPEATS = 2


def run_plain(cfg: FabricConfig, settings, exe: Path, work: Path):
    """Run the plain harness ``exe`` on ``settings``; returns its statistics, its run seconds
    and its read-back seconds. It reads every statistics word and histogram bucket, a block
    of words per cycle."""
    from ..sim.stimulus.top import StimulusStats
    from ..formats.stimulus import PAGE_WORDS, RegisterMap, readout_blocks, readout_values
    regmap = RegisterMap(cfg)
    buckets = range(cfg.stimulus.hist_buckets)
    names, reads = map(list, zip(*regmap.stat_words()))
    for port in range(cfg.endpoints):
        names += ["histogram"] * len(buckets)
        reads += [regmap.hist_address(port, b) for b in buckets]
    # The stimulus top (hdl/verilog.py) returns a page per cycle.
    pages = readout_blocks(reads, PAGE_WORDS)
    (work / "writes.txt").write_text("".join(f"{a} {v}\n" for a, v in regmap.writes(settings)))
    (work / "reads.txt").write_text("".join(f"{a}\n" for a in pages))
    out = subprocess.run([str(exe), str(work / "writes.txt"), str(work / "reads.txt")],
                         capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    if result["readout_words"] != PAGE_WORDS:
        raise RuntimeError(f"{exe} reads {result['readout_words']} words per cycle, not a page")
    words = {}
    for name, value in zip(names, readout_values(reads, pages, result["words"], PAGE_WORDS)):
        words.setdefault(name, []).append(value)
    return StimulusStats.from_words(cfg, words), result["run_seconds"], result["readout_seconds"]


def stimulus_table(cycles: int) -> ResultsPage:
    """The stimulus top, default 8x8, uniform 0.8: plain Verilator, cocotb, model."""
    from ..sim.stimulus.top import StimulusModel, compare_stats
    from ..sim.stimulus.traffic_gen import stimulus_settings
    from ..tb.runner import build, build_harness
    from ..tb.stimulus.runner import run_stimulus_rtl

    cfg = FabricConfig.load(preset="default")
    settings = stimulus_settings(cfg, "uniform", load=0.8, cycles=cycles, seed=1)
    exe = build_harness(cfg, top="stimulus", harness=HARNESS)
    build(cfg, sim="verilator", top="stimulus")
    t0 = time.perf_counter()
    model = StimulusModel(cfg).run(settings)
    model_seconds = time.perf_counter() - t0
    page = ResultsPage(
        "stimulus", "The limit: hardware stimulus under cocotb and a plain harness",
        "make bench TABLES=stimulus",
        f"The default 8x8 stimulus top (a synthesizable generator on every input, a "
        f"statistics sink on every output), uniform traffic at load 0.8, 1-flit packets, a "
        f"{cycles:,}-cycle window ({model.cycles:,} cycles to the last delivery): the same "
        f"Verilog under a plain C++ Verilator harness and under cocotb, {REPEATS} runs each, "
        f"alternately, every run's hashes, counters and histograms held against the model.")
    page.table(Column("runner", 28, right=False), Column("cycles/s", 10), Column("run s", 8),
               Column("hashes, counters, histograms", 28, right=False))
    best = {}
    for repeat in range(REPEATS):
        for who in ("plain Verilator", "Verilator + cocotb"):
            with tempfile.TemporaryDirectory() as work:
                if who == "plain Verilator":
                    stats, seconds, _ = run_plain(cfg, settings, exe, Path(work))
                else:
                    stats, timing = run_stimulus_rtl(cfg, settings, sim="verilator",
                                                     out_dir=work)
                    seconds = timing["run_seconds"]
            match = compare_stats(stats, model)
            verdict = "= model" if match["exact"] else f"MISMATCH ({match['problems'][0]})"
            page.row(f"{who} (run {repeat + 1})", f"{stats.cycles / seconds:,.0f}",
                     f"{seconds:.1f}", verdict)
            best[who] = max(best.get(who, 0.0), stats.cycles / seconds)
    page.row("golden model", f"{model.cycles / model_seconds:,.0f}", f"{model_seconds:.1f}", "-")
    page.note(f"cocotb / plain: {best['Verilator + cocotb'] / best['plain Verilator']:.1%} "
              f"(the faster of {REPEATS} runs each)")
    return page


def fabric_stimulus_table() -> ResultsPage:
    """The stimulus top around the fabrics of :data:`FABRIC_STIMULUS`, uniform traffic,
    1-flit packets: build times, then per load the model, plain Verilator and
    Verilator + cocotb, each run's statistics held against the model's."""
    from ..sim.stimulus.top import StimulusModel, compare_stats
    from ..sim.stimulus.traffic_gen import stimulus_settings
    from ..tb.runner import CXX_OPT_ENV, build, build_harness, verilator_cxx_opt
    from ..tb.stimulus.runner import run_stimulus_rtl

    cxx_opt = verilator_cxx_opt()
    page = ResultsPage(
        "fabric-stimulus", "Hardware stimulus around a fabric",
        "make bench TABLES=fabric-stimulus",
        "The stimulus top around the 4x4x4 torus (`dor`, 2 VCs, load 0.6, 200,000-cycle "
        "window) and the 384-endpoint 8x8x6 torus (loads 0.2, 0.4, 0.6, 20,000-cycle window): "
        "uniform traffic, 1-flit packets, one traffic class, on the model, a plain Verilator "
        "harness and Verilator + cocotb, each run's statistics held against the model's, and "
        "the wall time of reading them back (64 words a cycle). Both Verilator builds "
        f"compile the top's own fast C++ at -O{cxx_opt} (`{CXX_OPT_ENV}`, `superfabric run "
        "--cxx-opt L`; docs/spec/stimulus.md 12.7).")
    for name, overrides, loads, cycles in FABRIC_STIMULUS:
        cfg = FabricConfig.load(overrides=overrides)
        builds = []
        for who, make in (("cocotb", lambda: build(cfg, sim="verilator", top="stimulus")),
                          ("plain", lambda: build_harness(cfg, top="stimulus",
                                                          harness=HARNESS))):
            t0 = time.perf_counter()
            make()
            builds.append(f"{who} {time.perf_counter() - t0:,.0f} s")
        page.table(Column("load", 5), Column("runner", 20, right=False), Column("cycles", 8),
                   Column("cycles/s", 9), Column("accepted", 8), Column("read-back s", 11),
                   Column("statistics", 10, right=False),
                   caption=f"{name}: Verilator builds (0 when cached): {', '.join(builds)}")
        exe = build_harness(cfg, top="stimulus", harness=HARNESS)
        for load in loads:
            settings = stimulus_settings(cfg, "uniform", load=load, cycles=cycles, seed=1)
            t0 = time.perf_counter()
            model = StimulusModel(cfg).run(settings)
            rows = [("golden model", model, time.perf_counter() - t0, None)]
            with tempfile.TemporaryDirectory() as work:
                rows.append(("plain Verilator", *run_plain(cfg, settings, exe, Path(work))))
            with tempfile.TemporaryDirectory() as work:
                stats, timing = run_stimulus_rtl(cfg, settings, sim="verilator", out_dir=work)
                rows.append(("Verilator + cocotb", stats, timing["run_seconds"],
                             timing["readout_seconds"]))
            for who, stats, seconds, readout in rows:
                accepted = stats["window_flits"].sum() / cycles / cfg.endpoints
                if stats is model:
                    verdict = "-"
                else:
                    match = compare_stats(stats, model)
                    verdict = "= model" if match["exact"] else f"MISMATCH ({match['problems'][0]})"
                page.row(load, who, f"{stats.cycles:,}", f"{stats.cycles / seconds:,.0f}",
                         f"{accepted:.3f}", "-" if readout is None else f"{readout:.1f}", verdict)
    return page


def rdma_hosted_table() -> ResultsPage:
    """The all-reduce of ``make demo`` with its hosts in hardware (section 10.16): the
    ``rdma_hosted`` top under a plain Verilator harness and under cocotb, alternately, each
    run held against the model by its hashes; the per-cycle testbench for comparison; and a
    planted fault, caught."""
    from ..sim.rdma.fabric import RdmaFabricModel
    from ..sim.rdma.traffic import generate_rdma
    from ..tb.rdma.runner import run_rdma_hosted, run_rdma_plain, with_late_first_post
    from ..tb.runner import build, build_harness

    cfg = FabricConfig.load(preset="default", overrides=RDMA + ["rdma.qps=1024"])
    load, cycles = 0.5, 10_000
    workload = generate_rdma(cfg, "rdma-allreduce", load=load, cycles=cycles, seed=1)
    exe = build_harness(cfg, top="rdma_hosted", harness=RDMA_HARNESS)
    build(cfg, sim="verilator", top="rdma_hosted")
    fabric = RdmaFabricModel(cfg)
    fabric.warm()
    t0 = time.perf_counter()
    model = fabric.run(workload)
    model_seconds = time.perf_counter() - t0
    page = ResultsPage(
        "rdma-hosted", "RDMA runs with the hosts in hardware", "make bench TABLES=rdma-hosted",
        f"The ring all-reduce of RDMA WRITEs of `make demo` (the `default` preset's 8 "
        f"endpoints, 1,024 QPs, 1 % of packets dropped on every link; load {load}, "
        f"{cycles:,} cycles of posts, seed 1: {len(workload):,} WRs, {model.cycles:,} cycles "
        f"to the cycle after the last completion) on the `rdma_hosted` top, whose hosts post "
        f"the WRs by the send queues' rule in hardware (specification section 10.16): the "
        f"same Verilog, built with the same Verilator flags, under a plain C++ harness "
        f"(`tools/rdma_harness.cpp`) and under cocotb, {REPEATS} runs each, alternately, "
        f"each run's cycles, counters and every endpoint's eight hashes held against the "
        f"model's. Then the `rdma_fabric` top under the testbench that plays the hosts from "
        f"Python every cycle, every event held against the model; and a planted fault: the "
        f"plain harness run with endpoint 0's first WRs posted one cycle late. Build times "
        f"excluded.")
    page.table(Column("runner", 34, right=False), Column("cycles", 7), Column("cycles/s", 10),
               Column("run s", 7), Column("against the model", 44, right=False))
    best = {}

    def verdict(match):
        return "= model (cycles, counters, hashes)" if match["exact"] else \
            f"MISMATCH: {match['first_mismatch'] or match['problems'][0]}"
    for repeat in range(REPEATS):
        for who in ("plain Verilator", "Verilator + cocotb"):
            with tempfile.TemporaryDirectory() as work:
                if who == "plain Verilator":
                    rtl, match = run_rdma_plain(cfg, workload, exe, out_dir=work, model=model)
                else:
                    rtl, match = run_rdma_hosted(cfg, workload, sim="verilator", out_dir=work,
                                                 model=model)
            rate = rtl["cycles"] / rtl["run_seconds"]
            page.row(f"{who} (run {repeat + 1})", rtl["cycles"], f"{rate:,.0f}",
                     f"{rtl['run_seconds']:.2f}", verdict(match))
            best[who] = max(best.get(who, 0.0), rate)
    with tempfile.TemporaryDirectory() as out:
        res = run_point(cfg, traffic="rdma-allreduce", load=load, cycles=cycles, seed=1,
                        sim="verilator", out_dir=out)
    page.row("per-cycle testbench (rdma_fabric)", res["rdma"]["cycles"],
             f"{res['cycles_per_second']:,.0f}", f"{res['wall_seconds']:.2f}",
             "= model (every event)" if res["match"]["exact"] else "MISMATCH")
    page.row("golden model", model.cycles, f"{model.cycles / model_seconds:,.0f}",
             f"{model_seconds:.2f}", "-")
    late, _ = with_late_first_post(workload)
    with tempfile.TemporaryDirectory() as work:
        rtl, match = run_rdma_plain(cfg, late, exe, out_dir=work, model=model)
    page.row("planted fault (plain Verilator)", rtl["cycles"], "", "",
             f"caught: {match['first_mismatch']}" if not match["exact"] else "NOT CAUGHT")
    page.note(f"cocotb / plain: {best['Verilator + cocotb'] / best['plain Verilator']:.1%} "
              f"(the faster of {REPEATS} runs each)")
    return page


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of :func:`main`, checked: the tables named (all when none), and the
    fabric-scale table's options."""
    p = argparse.ArgumentParser(prog="python -m superfabric.tools.bench",
                                description=__doc__.splitlines()[0])
    # Positional choices are checked by hand: argparse refuses an empty
    # list for nargs="*" with choices (Python issue 9625).
    p.add_argument("tables", nargs="*", metavar="|".join(TABLES),
                   help="tables to run (default: all)")
    p.add_argument("--cycles", type=int, default=1_000_000,
                   help="generation window of the stimulus runs (default 1,000,000)")
    p.add_argument("--against", metavar="REV",
                   help="also run the model of this git commit, side by side")
    p.add_argument("--dcqcn", metavar="DIR", type=Path,
                   help="only the congestion-control table, its runs kept in DIR")
    shapes = list(dict.fromkeys(dims_name(row[0]) for row in SCALE))
    p.add_argument("--scale-dims", nargs="+", choices=shapes, metavar="DIMS",
                   help=f"fabric-scale table: only these tori ({', '.join(shapes)}; "
                        f"default all)")
    p.add_argument("--scale-cycles", type=int, default=SCALE_CYCLES,
                   help=f"fabric-scale table: cycles of traffic per model run "
                        f"(default {SCALE_CYCLES:,})")
    p.add_argument("--runs", type=int, default=SCALE_RUNS,
                   help=f"fabric-scale table: runs per row, of the model and of BookSim2 "
                        f"(default {SCALE_RUNS})")
    p.add_argument("--peers", metavar="DIR", type=Path,
                   help="fabric-scale and scheduling tables: the peers folder holding "
                        "booksim2/ and configs/ (default ../shared/peers beside the "
                        "repository, when there)")
    p.add_argument("--no-pages", action="store_true",
                   help="print only; do not rewrite the pages of docs/results/")
    args = p.parse_args(argv)
    for table in args.tables:
        if table not in TABLES:
            p.error(f"table {table!r}: must be one of {', '.join(TABLES)}")
    if args.scale_cycles < 1:
        p.error(f"--scale-cycles {args.scale_cycles}: must be at least 1")
    if args.runs < 1:
        p.error(f"--runs {args.runs}: must be at least 1")
    if args.peers is not None and not (args.peers / "booksim2").is_dir():
        p.error(f"--peers {args.peers}: has no booksim2/")
    args.tables = args.tables or list(TABLES)
    return args


def main(argv: list[str] | None = None) -> int:
    """Print the tables asked for (all by default), each also written as a page of
    ``docs/results/`` (:mod:`.results_page`)."""
    args = parse_args(argv)
    tables = args.tables
    measure = [lambda: dcqcn_table(args.dcqcn)] if args.dcqcn else \
        [show for name, show in (("model", model_table), ("fabric", fabric_table),
                                 ("scale", lambda: scale_table(
                                     dims=args.scale_dims, cycles=args.scale_cycles,
                                     runs=args.runs, peers=args.peers)),
                                 ("trace", simulator_table), ("rdma", rdma_table),
                                 ("rdma-hops", hops_table), ("rdma-state", state_table),
                                 ("rdma-fabrics", rdma_fabrics_table))
         if name in tables] \
        + ([lambda: against_table(args.against)] if args.against else []) \
        + ([lambda: stimulus_table(args.cycles)] if "stimulus" in tables else []) \
        + ([fabric_stimulus_table] if "fabric-stimulus" in tables else []) \
        + ([rdma_hosted_table] if "rdma-hosted" in tables else []) \
        + ([pool_table] if "pool" in tables else []) \
        + ([compression_table] if "compression" in tables else []) \
        + ([board_table] if "board" in tables else []) \
        + ([tornado_table] if "tornado" in tables else []) \
        + ([blocks_table] if "blocks" in tables else []) \
        + ([fpga_fabric_table] if "fpga-fabric" in tables else []) \
        + ([switch_table] if "switch-synth" in tables else []) \
        + ([latency_table] if "collective-latency" in tables else []) \
        + ([lambda: scheduling_table(args.peers)] if "scheduling" in tables else []) \
        + [lambda name=name: sweep_table(name) for name in SWEEPS if name in tables]
    command = " ".join(["python -m superfabric.tools.bench", *(argv or sys.argv[1:])])
    for table in measure:
        page = table()
        if not args.no_pages:
            page.write(command)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
