"""The ``superfabric`` command line.

Every error a user can cause (configuration, traffic, arguments, files, an
FPGA target or device, a design that does not fit it, a missing FPGA tool)
ends in one line on stderr naming the field, the value and what is allowed,
and exit status 2, before anything is written; a missing simulator, or an FPGA
tool that fails on the generated design, is one line and status 1.

``run`` exits 1 when the RTL differs from the model, and when the run failed
(:func:`~superfabric.tools.run.run_failure`): it stalled, or RDMA work
requests were lost, left incomplete, or completed with another status than
meant. ``sweep`` records such a point as failed and exits 1 when any failed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from ..config import PRESETS, ConfigError, FabricConfig
from .sweep import DEFAULT_LOADS, MAX_POINTS, SCHEDULER_TIMEOUT

__all__ = ["main"]


class UsageError(Exception):
    """A bad command-line value; printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


class _Help(argparse.HelpFormatter):
    """Every option's help states its default: appended, unless the text already says it."""

    def _get_help_string(self, action):
        text = action.help or ""
        # By identity: a default of 0.0 is stated, though 0.0 == False.
        nothing = (action.default is None or action.default is False
                   or action.default is argparse.SUPPRESS or action.default == [])
        if "default" in text or nothing or action.required or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


def _add_config_args(p: argparse.ArgumentParser, preset: str = "default") -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", choices=PRESETS, help=f"built-in configuration (default: {preset})")
    src.add_argument("--config", metavar="FILE",
                     help="TOML file, merged over the default preset (default: none)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one key (repeatable, each key once), e.g. --set switch.ports=16 "
                        "(default: none)")


def _config(args) -> FabricConfig:
    from ..config import parse_override
    seen = {}
    for item in args.overrides:
        section, key, value = parse_override(item)
        name = f"{section}.{key}"
        if name in seen:
            raise UsageError(f"--set {name}: given twice ({seen[name]!r}, then {item!r}); give "
                             f"each key once")
        seen[name] = item
    return FabricConfig.load(preset=args.preset, path=args.config, overrides=args.overrides)


def _check_out(out: str) -> None:
    """``-o`` must name a directory that exists or can be created: refuse an empty name, a
    file, a path below one, or one that cannot be created, in one line, before anything
    runs. A missing directory is created to find out, and removed again, so that a command
    refused later leaves nothing behind."""
    if not out.strip():
        raise UsageError(f"-o = {out!r}: must name a directory (created when missing)")
    path = Path(out)
    existing = next(p for p in (path, *path.parents) if p.exists())    # "." or "/" at last
    if not existing.is_dir():
        where = "" if existing == path else f"{str(existing)!r} "
        raise UsageError(f"-o = {out!r}: {where}is a file; must be a directory "
                         f"(created when missing)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"-o = {out!r}: {str(existing)!r} is not writable")
    if existing == path:
        return
    try:
        path.mkdir(parents=True)
    except OSError as e:
        raise UsageError(f"-o = {out!r}: cannot create it ({e.strerror})") from None
    for made in (path, *path.parents):
        if made == existing:
            break
        made.rmdir()


def _weights(text: str) -> list[float]:
    """``--priority-weights``: comma-separated numbers (their range is checked with the traffic)."""
    try:
        return [float(w) for w in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: must be comma-separated numbers, one per "
                                         f"class") from None


def _generate_parser(sub) -> None:
    """``superfabric generate``: Verilog of a configuration."""
    g = sub.add_parser("generate", formatter_class=_Help,
                       help="write synthesizable Verilog for a configuration, and its "
                            "FuseSoC core")
    _add_config_args(g)
    g.add_argument("--top", default=None,
                   help="top-level block: switch (the default), skid_buffer, rdma_engine (one "
                        "RDMA engine), rdma_fabric (the RDMA simulation top; rdma_* need "
                        "--set rdma.enabled=true), rdma_hosted (the same with its hosts in "
                        "hardware) or stimulus (the switch with hardware traffic "
                        "generators and statistics sinks); for a torus or fat_tree fabric: fabric "
                        "(the default), one router module (router; leaf_router, spine_router), "
                        "rdma_engine, rdma_fabric, rdma_hosted or stimulus; "
                        "compression (the int4 gradient quantiser and dequantiser) and "
                        "collective (one accelerator's collective engine) and "
                        "collective_fabric (the collective simulation top: the RDMA top with "
                        "a collective engine at every accelerator), both needing "
                        "rdma.enabled, for any")
    g.add_argument("-o", "--out", required=True, metavar="DIR", help="output directory")


def _run_parser(sub) -> None:
    """``superfabric run``: one point on the model or an RTL simulator."""
    r = sub.add_parser("run", formatter_class=_Help,
                       help="run a trace on the golden model or an RTL simulator",
                       epilog="exit status: 0 the run did its job (and the RTL matched the "
                              "model); 1 it stalled, lost RDMA requests or left them incomplete, "
                              "or the RTL differs from the model; 2 a bad argument")
    _add_config_args(r)
    r.add_argument("--traffic", default="uniform", metavar="PATTERN",
                   help="traffic pattern, optionally with parameters (hotspot:fraction=0.3); "
                        "rdma-uniform, rdma-allreduce, rdma-alltoall, rdma-incast or rdma-victim (with --set "
                        "rdma.enabled=true) for work requests through the RDMA engines; "
                        "collective:op=allreduce,algo=ring,bytes=N,dtype=int32 for a "
                        "collective run by the collective engines on them")
    r.add_argument("--load", type=float, default=0.5, help="offered load per input, 0 < load <= 1")
    r.add_argument("--bad-fraction", type=float, default=0.0,
                   help="rdma traffic: share of deliberately bad work requests, 0..1")
    r.add_argument("--cycles", type=int, default=10_000, help="cycles of generated traffic")
    r.add_argument("--seed", type=int, default=1, help="seed of traffic and backpressure")
    r.add_argument("--lengths", default="fixed:1", metavar="SPEC",
                   help="packet lengths: fixed:N or bimodal:SHORT,LONG,P_SHORT")
    r.add_argument("--priority-weights", default=None, metavar="W,W,...", type=_weights,
                   help="one weight per traffic class (default: uniform)")
    r.add_argument("--sink-stall", type=float, default=0.0,
                   help="probability an egress port is not ready in a cycle")
    r.add_argument("--pause-rate", type=float, default=0.0,
                   help="probability an (output, priority) is paused in each 64-cycle period "
                        "(with pfc.enabled, by pause frames from the sinks)")
    r.add_argument("--sim", default="model", help="model, icarus or verilator")
    r.add_argument("--stimulus", default="trace", metavar="trace|hardware",
                   help="trace: the testbench drives a trace and checks every packet (default); "
                        "hardware: the RTL's own generators and sinks, checked by hashes, "
                        "counters and histograms; with an rdma-* pattern, the hosts in "
                        "hardware, checked by hashes and counters")
    r.add_argument("--waves", action="store_true", help="write FST waves (RTL runs)")
    r.add_argument("--threads", type=int, default=None, metavar="N",
                   help="Verilator runs: threads of the Verilator model, a build of its own "
                        "(default: $SUPERFABRIC_VERILATOR_THREADS, else 1); a model run (not "
                        "--stimulus hardware): threads that step the fabric's routers "
                        "(default 1)")
    r.add_argument("--cxx-opt", default=None, metavar="0|1|2|3|s",
                   help="Verilator runs: the C++ optimisation (-O) of the top's own fast code, a "
                        "build of its own; the router blocks keep -Os "
                        "(default: $SUPERFABRIC_VERILATOR_CXX_OPT, else 1)")
    r.add_argument("--pcap", default=None, metavar="FILE",
                   help="also write the run's packets as a pcap file, as superfabric pcap does "
                        "(default: none)")
    r.add_argument("--capture-link", default=None, metavar="ROUTER:PORT",
                   help="on a torus or fat tree, record the packets that cross the link out of "
                        "this router port, each as it enters it; the pcap then holds those "
                        "(default: none, the packets delivered)")
    _add_clock_arg(r)
    r.add_argument("-o", "--out", required=True, metavar="DIR", help="output directory")


def _add_clock_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--clock-mhz", type=float, default=None, metavar="MHZ",
                   help="the clock the pcap's timestamps take a cycle at (default: the run's "
                        "fabric.clock_mhz)")


def _pcap_parser(sub) -> None:
    """``superfabric pcap``: a run's packets as a pcap file."""
    pc = sub.add_parser("pcap", formatter_class=_Help,
                        help="write a run's packets as a pcap file for Wireshark (RoCEv2 for "
                             "RDMA runs)")
    pc.add_argument("src", metavar="RUN_DIR", help="a run directory (superfabric run -o)")
    _add_clock_arg(pc)
    pc.add_argument("-o", "--out", required=True, metavar="FILE", help="the pcap file to write")


def _sweep_parser(sub) -> None:
    """``superfabric sweep``: many points on Dask."""
    w = sub.add_parser("sweep", formatter_class=_Help,
                       help="run many points (loads, patterns, seeds, sims, config keys) on Dask")
    _add_config_args(w)
    w.add_argument("--traffic", default="uniform", metavar="P[,P...]", help="traffic patterns")
    w.add_argument("--loads", default=None, metavar="START:STOP:STEP|L,L,...",
                   help=f"offered loads, each once (a sweep has at most {MAX_POINTS:,} points; "
                        f"default {DEFAULT_LOADS}; none for collective traffic)")
    w.add_argument("--seeds", type=int, default=1, help="seeds per point (1..K)")
    w.add_argument("--sim", default="model", metavar="S[,S...]", help="model, icarus, verilator")
    w.add_argument("--stimulus", default="trace", metavar="trace|hardware",
                   help="trace (default) or hardware: the RTL's own generators and sinks, one "
                        "build for every load and seed")
    w.add_argument("--cycles", type=int, default=10_000, help="cycles of generated traffic")
    w.add_argument("--lengths", default="fixed:1", metavar="SPEC", help="packet lengths")
    w.add_argument("--priority-weights", default=None, metavar="W,W,...", type=_weights,
                   help="one weight per traffic class (default: uniform)")
    w.add_argument("--sink-stall", type=float, default=0.0, help="egress not-ready probability")
    w.add_argument("--bad-fraction", type=float, default=0.0,
                   help="rdma traffic: share of deliberately bad work requests, 0..1")
    w.add_argument("--vary", action="append", default=[], metavar="SECTION.KEY=V1,V2",
                   help="sweep a config key too, or a pattern's parameter as traffic.KEY "
                        "(traffic.bytes=1024,65536) (repeatable, each key once; cartesian "
                        "product; default: none)")
    w.add_argument("--workers", type=int, default=None, help="local Dask workers (default: cores)")
    w.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="use an existing Dask scheduler, e.g. tcp://10.0.0.1:8786 (default: a "
                        "local cluster of --workers processes)")
    w.add_argument("--scheduler-timeout", type=float, default=SCHEDULER_TIMEOUT, metavar="S",
                   help="seconds to reach --scheduler before giving up")
    w.add_argument("--rerun-changed", action="store_true",
                   help="run again the points of DIR that ran with other settings (without it "
                        "such points stop the sweep before it starts)")
    w.add_argument("-o", "--out", required=True, metavar="DIR", help="sweep directory")


def _fuzz_parser(sub) -> None:
    """``superfabric fuzz``: random configurations, RTL against the model."""
    f = sub.add_parser("fuzz", formatter_class=_Help,
                       help="random valid configurations and traffic, RTL against the model on "
                            "each")
    f.add_argument("--configs", type=int, default=20, help="cases (configurations) to draw")
    f.add_argument("--seed", type=int, default=1, help="seed of the campaign: case k of a seed "
                                                       "is always the same")
    f.add_argument("--sim", default="verilator", help="model, icarus or verilator")
    f.add_argument("--max-kb", type=float, default=None, metavar="KB",
                   help="RTL cases: largest estimated Verilog per configuration, in kB (default "
                        "1000, about two minutes of Verilator build; 32 ports need 7,500)")
    f.add_argument("-o", "--out", required=True, metavar="DIR",
                   help="campaign directory: one case-NNN/ per case, summary.md, fuzz.json")


def _synth_parser(sub) -> None:
    """``superfabric synth``: the FPGA flow."""
    sy = sub.add_parser("synth", formatter_class=_Help,
                        help="FPGA resources and Fmax with Yosys and nextpnr")
    _add_config_args(sy)
    sy.add_argument("--top", default="switch",
                    help="top-level block, as for generate (default: switch)")
    sy.add_argument("--target", required=True, metavar="TARGET",
                    help="ecp5 or ice40 (synthesis, place and route), xilinx (7-series "
                         "synthesis only)")
    sy.add_argument("--device", default=None,
                    help="part (default: LFE5UM-85F, iCE40HX8K, XC7K325T); see docs/architecture.md")
    sy.add_argument("--package", default=None, help="package (default: the device's)")
    sy.add_argument("--speed", type=int, default=None, help="ECP5 speed grade, 6 (default), 7 or 8")
    sy.add_argument("--freq", type=float, default=None, metavar="MHZ",
                    help="clock constraint of place and route (default: 100 ECP5, 50 iCE40)")
    sy.add_argument("--seed", type=int, default=1, metavar="S",
                    help="nextpnr placement seed (the first of --seeds)")
    sy.add_argument("--seeds", default=None, metavar="N",
                    help="place and route the one netlist N times, seeds S to S+N-1, one after "
                         "the other; Fmax is the median (default 1)")
    sy.add_argument("--paths", default=None, metavar="N",
                    help="worst timing endpoints listed, one per Amaranth source line "
                         "(default 5)")
    sy.add_argument("--router", default=None, metavar="router1|router2",
                    help="nextpnr's router (default: nextpnr's, router1); router2 finishes "
                         "congested designs that router1 does not")
    sy.add_argument("--flatten", action="store_true",
                    help="optimise across the block's modules (no per-module breakdown)")
    sy.add_argument("--vary", action="append", default=[], metavar="SECTION.KEY=V1,V2",
                    help="one synthesis per value (repeatable, each key once; cartesian product), "
                         "each in DIR/points/<id> (default: none, one synthesis)")
    sy.add_argument("--workers", type=int, default=1,
                    help="points synthesised at once with --vary (default 1)")
    sy.add_argument("-o", "--out", required=True, metavar="DIR", help="output directory")


def _board_parser(sub) -> None:
    """``superfabric board``: a bitstream of the stimulus top for an ECP5 board."""
    from ..hdl.board.top import BOARDS
    from .board import DEFAULT_BAUD, DEFAULT_CLOCK_MHZ
    b = sub.add_parser("board", formatter_class=_Help,
                       help="build a bitstream of the stimulus top for an ECP5 board: one run, "
                            "its statistics and run hash printed on the UART")
    b.add_argument("--board", required=True, metavar="|".join(BOARDS), help="the board")
    b.add_argument("--fpga", default=None, metavar="SIZE",
                   help="the board's FPGA size, e.g. 85F or 45F (default: 85F)")
    # The 4-port preset: the board's clock is what its stimulus top meets (DEFAULT_CLOCK_MHZ).
    _add_config_args(b, preset="tiny")
    b.add_argument("--traffic", default="uniform", metavar="PATTERN",
                   help="a pattern the hardware generators make (as run --stimulus hardware)")
    b.add_argument("--load", type=float, default=0.5, help="offered load per input, 0 < load <= 1")
    b.add_argument("--cycles", type=int, default=1_000_000, help="cycles of generated traffic")
    b.add_argument("--seed", type=int, default=1, help="seed of the traffic")
    b.add_argument("--lengths", default="fixed:1", metavar="SPEC",
                   help="packet lengths: fixed:N or bimodal:SHORT,LONG,P_SHORT")
    b.add_argument("--clock-mhz", type=float, default=DEFAULT_CLOCK_MHZ, metavar="MHZ",
                   help="the run's clock, from the board's oscillator through the PLL")
    b.add_argument("--baud", type=int, default=DEFAULT_BAUD, help="the UART's bit rate")
    b.add_argument("--no-bitstream", action="store_true",
                   help="write the design files and the expected report, without running "
                        "Yosys and nextpnr")
    b.add_argument("-o", "--out", required=True, metavar="DIR",
                   help="output directory: board.json, expected-uart.txt, build/ (top.bit)")


def _pool_parser(sub) -> None:
    """``superfabric pool``: a pool allocator on an allocate/free trace."""
    from .pool import ALLOCATORS, TRACES
    po = sub.add_parser("pool", formatter_class=_Help,
                        help="replay an allocate/free trace on the pooled memory's allocator "
                             "and measure its fragmentation")
    _add_config_args(po)
    po.add_argument("--allocator", default="best-fit", metavar="|".join(ALLOCATORS),
                    help="placement policy: best-fit over free extents, or the buddy system")
    po.add_argument("--accelerators", type=int, default=8,
                    help="accelerators in the pool, one rank of the trace each")
    po.add_argument("--memory-mib", type=int, default=128, metavar="M",
                    help="MiB each accelerator joins to the pool, in pages of rdma.page_words "
                         "words")
    po.add_argument("--trace", default="training", metavar="|".join(TRACES),
                    help="the allocate/free trace")
    po.add_argument("--seed", type=int, default=1, help="seed of the trace")
    po.add_argument("-o", "--out", required=True, metavar="DIR",
                    help="output directory: results.json, pool.md")


def _train_parser(sub) -> None:
    """``superfabric train``: data-parallel training through the compressed all-reduce."""
    from ..sim.collective.compressed import COMPRESSIONS, ROUNDINGS
    from .train import ALGOS
    tr = sub.add_parser("train", formatter_class=_Help,
                        help="train a softmax regression on the digits data-parallel, its "
                             "gradients all-reduced through the model's (int4) collective")
    tr.add_argument("--accelerators", type=int, default=8, metavar="N",
                    help="accelerators, on a torus of up to three dimensions (8: 2x2x2, 64: "
                         "4x4x4, 384: 8x8x6)")
    tr.add_argument("--compression", default="int4", metavar="|".join(COMPRESSIONS),
                    help="the all-reduce's payload: binary32 as it is, or int4 blocks")
    tr.add_argument("--no-error-feedback", action="store_true",
                    help="int4 without the accelerators' error-feedback residuals (default: "
                         "with them)")
    tr.add_argument("--steps", type=int, default=100, metavar="S", help="training steps")
    tr.add_argument("--seed", type=int, default=1, metavar="K",
                    help="seed of the train/test split, the batches and the quantisers' LFSRs")
    tr.add_argument("--algo", default="two-shot", metavar="|".join(ALGOS),
                    help="the all-reduce: two-shot (dimwise-direct, quantised once per "
                         "dimension) or an algorithm of the library (ring, dimwise: per hop)")
    tr.add_argument("--batch", type=int, default=256, metavar="B",
                    help="examples per step, shared among the accelerators")
    tr.add_argument("--lr", type=float, default=0.5, help="learning rate of plain SGD")
    tr.add_argument("--rounding", default="stochastic", metavar="|".join(ROUNDINGS),
                    help="the quantiser's rounding")
    tr.add_argument("-o", "--out", required=True, metavar="DIR",
                    help="output directory: results.json, loss.png")


def _collective_plan_parser(sub) -> None:
    """``superfabric collective-plan``: a collective's schedule and its alpha-beta prediction."""
    from ..sim.collective.library import ALGORITHM_NAMES
    from ..sim.collective.pattern import SEGMENT_PACKETS
    from ..sim.collective.schedule import OPS
    cp = sub.add_parser("collective-plan", formatter_class=_Help,
                        help="a collective's schedule on the configured fabric, its steps and "
                             "the alpha-beta prediction of every algorithm")
    _add_config_args(cp)
    cp.add_argument("--op", default="allreduce", metavar="|".join(OPS), help="the operation")
    cp.add_argument("--algo", default="auto", metavar="|".join(ALGORITHM_NAMES),
                    help="the algorithm; auto: the least predicted time")
    cp.add_argument("--bytes", type=int, default=1048576, metavar="N",
                    help="message size per accelerator, a multiple of 4")
    cp.add_argument("--accelerator", type=int, default=0, metavar="A",
                    help="the accelerator whose steps are printed")
    cp.add_argument("--steps", type=int, default=16, metavar="K",
                    help="how many of its steps to print")
    cp.add_argument("--segment", type=int, default=SEGMENT_PACKETS, metavar="P",
                    help="full packets' payload a segment of a chunk, 0 whole chunks")
    cp.add_argument("--check", action="store_true",
                    help="replay the schedule on random int32 and fp32 data and compare every "
                         "accelerator with numpy (exit status 1 if one differs)")
    cp.add_argument("-o", "--out", required=True, metavar="DIR",
                    help="output directory: plan.json")


def _report_parser(sub) -> None:
    """``superfabric report``: reports of a run, a sweep or a synthesis."""
    rp = sub.add_parser("report", formatter_class=_Help,
                        help="write Markdown/HTML/PNG reports of a run or a sweep")
    rp.add_argument("src", metavar="DIR", help="a run, sweep or synth directory")
    rp.add_argument("--cdf-load", type=float, default=None,
                    help="load of the latency CDF plot (default: highest <= 0.9)")
    rp.add_argument("-o", "--out", required=True, metavar="OUT", help="report directory")


def _parser() -> argparse.ArgumentParser:
    """The command line: one sub-parser per command."""
    p = _Parser(prog="superfabric", description="RTL and golden model of an AI supernode switch fabric")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (_generate_parser, _run_parser, _sweep_parser, _fuzz_parser, _synth_parser,
                _report_parser, _pool_parser, _pcap_parser, _collective_plan_parser,
                _train_parser, _board_parser):
        add(sub)
    return p


def _sweep(args) -> int:
    from .sweep import parse_loads, plan_sweep, run_sweep, split_patterns
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers = {args.workers}: must be at least 1")
    base = _config(args)
    if not args.scheduler_timeout > 0:
        raise UsageError(f"--scheduler-timeout = {args.scheduler_timeout:g}: must be positive")
    loads = None if args.loads is None else parse_loads(args.loads)
    plan = plan_sweep(base=base, overrides=args.overrides, traffic=split_patterns(args.traffic),
                      loads=loads, seeds=args.seeds, sims=args.sim.split(","),
                      cycles=args.cycles, vary=args.vary, packet_lengths=args.lengths,
                      sink_stall=args.sink_stall, bad_fraction=args.bad_fraction,
                      stimulus=args.stimulus, priority_weights=args.priority_weights)
    summary = run_sweep(plan, args.out, workers=args.workers, scheduler=args.scheduler,
                        scheduler_timeout=args.scheduler_timeout,
                        rerun_changed=args.rerun_changed)
    return _sweep_summary("sweep", summary, args.out,
                          f", {len(summary['mismatched'])} RTL/model mismatches")


def _sweep_summary(command: str, summary: dict, out: str, extra: str = "") -> int:
    """Print what a sweep did and its failed points; exit status 1 when a point failed."""
    print(f"{command}: {summary['points']} points: {summary['skipped']} skipped (done before), "
          f"{summary['ran']} run, {len(summary['failed'])} failed{extra}; results under "
          f"{out}/points")
    for outcome in summary["failed"]:
        print(f"  failed {outcome['id']}: {outcome['error']}")
    return 1 if summary["failed"] else 0


def _fuzz(args) -> int:
    from .fuzz import SIZE_LIMIT_KB, passed, run_campaign, summary_table, verilog_kb
    from .run import SIMS
    if args.configs < 1:
        raise UsageError(f"--configs = {args.configs}: must be at least 1")
    if args.seed < 0:
        raise UsageError(f"--seed = {args.seed}: must be at least 0")
    if args.sim not in SIMS:
        raise UsageError(f"--sim = {args.sim!r}: must be one of {', '.join(SIMS)}")
    smallest = verilog_kb(2, 1, 1)
    if args.max_kb is not None and not args.max_kb >= smallest:
        raise UsageError(f"--max-kb = {args.max_kb:g}: must be at least {smallest:g} (the "
                         f"smallest switch)")
    outcomes = run_campaign(configs=args.configs, seed=args.seed, sim=args.sim, out_dir=args.out,
                            size_limit=SIZE_LIMIT_KB if args.max_kb is None else args.max_kb)
    print(summary_table(outcomes), end="")
    print(f"fuzz: cases under {args.out}; {Path(args.out) / 'summary.md'}")
    return 0 if all(passed(o) for o in outcomes) else 1


def _report(args) -> int:
    from .report.synth import is_synth_source, write_synth_report
    if is_synth_source(Path(args.src)):
        html = write_synth_report(Path(args.src), Path(args.out))
    else:
        from .report.build import write_report
        html = write_report(Path(args.src), Path(args.out), cdf_load=args.cdf_load)
    print(f"report: {Path(args.out) / 'report.md'}, {html}")
    return 0


def _pool(args) -> int:
    from .pool import TABLE_HEADER, check_pool, pool_row, run_pool
    settings = dict(allocator=args.allocator, accelerators=args.accelerators,
                    memory_mib=args.memory_mib, trace=args.trace, seed=args.seed)
    try:
        check_pool(**settings)
    except ValueError as e:
        raise UsageError(str(e)) from None
    cfg = _config(args)
    res = run_pool(cfg, **settings, out_dir=args.out)
    row = pool_row(res)
    widths = [max(len(h), len(c)) for h, c in zip(TABLE_HEADER, row)]
    for cells in (TABLE_HEADER, row):
        print("  ".join(c.rjust(w) for c, w in zip(cells, widths)))
    print(f"results: {Path(args.out) / 'results.json'}, {Path(args.out) / 'pool.md'}")
    return 0


def _train(args) -> int:
    from .train import check_train, label, run_train
    settings = dict(accelerators=args.accelerators, compression=args.compression,
                    steps=args.steps, seed=args.seed, algo=args.algo, batch=args.batch,
                    lr=args.lr, rounding=args.rounding)
    try:
        check_train(**settings)
        res = run_train(**settings, error_feedback=not args.no_error_feedback,
                        out_dir=args.out)
    except ValueError as e:
        raise UsageError(str(e)) from None
    print(f"train: {label(res)}, {res['accelerators']} accelerators "
          f"({'x'.join(map(str, res['torus']))} torus, {res['algorithm']}), {res['steps']} "
          f"steps: test accuracy {res['test_accuracy']:.2%}, loss {res['final_loss']:.4f}; "
          f"{res['payload_bytes_on_links']:,} payload bytes on links per step "
          f"({res['payload_bytes_on_links'] / res['binary32_payload_bytes_on_links']:.4f} of "
          f"binary32's), gradient error {res['relative_l2_error']['mean']:.3g}")
    print(f"results: {Path(args.out) / 'results.json'}, {Path(args.out) / 'loss.png'}")
    return 0


def _collective_plan(args) -> int:
    from .collective import check_plan, collective_plan
    try:
        check_plan(op=args.op, algo=args.algo, nbytes=args.bytes, show=args.steps,
                   segment=args.segment)
        cfg = _config(args)
        lines, ok = collective_plan(cfg, op=args.op, algo=args.algo, nbytes=args.bytes,
                                    accelerator=args.accelerator, show=args.steps,
                                    check=args.check, out_dir=args.out, segment=args.segment)
    except ConfigError:
        raise
    except ValueError as e:
        raise UsageError(str(e)) from None
    print("\n".join(lines))
    return 0 if ok else 1


def _top_config(args) -> tuple[FabricConfig, str]:
    """The configuration and the top ``--top`` names (the topology's default if none)."""
    from ..hdl.verilog import default_top, tops
    cfg = _config(args)
    top = default_top(cfg) if args.top is None else args.top
    if top not in tops(cfg):
        raise UsageError(f"--top = {top!r}: must be one of {', '.join(tops(cfg))} with "
                         f"fabric.topology = {cfg.fabric.topology!r}")
    if (top.startswith("rdma_") or top.startswith("collective")) and not cfg.rdma.enabled:
        raise ConfigError(f"rdma.enabled = false: must be true for --top {top} "
                          f"(add --set rdma.enabled=true)")
    return cfg, top


def _generate(args) -> int:
    from ..hdl.verilog import write_verilog
    from .fusesoc_core import write_core
    cfg, top = _top_config(args)
    path = write_verilog(cfg, args.out, top=top)
    core = write_core(cfg, [path], top=top)
    print(f"wrote {path} ({path.stat().st_size} bytes), {Path(args.out) / 'filelist.f'}, "
          f"{Path(args.out) / 'config.json'}, {core}")
    return 0


def _synth(args) -> int:
    from .synth.flow import (MAX_PATHS, MAX_SEEDS, count_option, detail_lines, summary_line,
                             synthesize)
    cfg, top = _top_config(args)
    # Checked here, before the points of a sweep start.
    seeds, paths = (None if value is None else count_option(option, value, high=high)
                    for option, value, high in (("--seeds", args.seeds, MAX_SEEDS),
                                                ("--paths", args.paths, MAX_PATHS)))
    options = dict(target=args.target, device=args.device, package=args.package,
                   speed=args.speed, freq_mhz=args.freq, top=top, flatten=args.flatten,
                   seed=args.seed, seeds=seeds, paths=paths, router=args.router)
    if args.vary:
        from .synth.sweep import plan_synth_sweep, run_synth_sweep
        if args.workers < 1:
            raise UsageError(f"--workers = {args.workers}: must be at least 1")
        plan = plan_synth_sweep(cfg, overrides=args.overrides, vary=args.vary, **options)
        return _sweep_summary("synth", run_synth_sweep(plan, args.out, workers=args.workers),
                              args.out)
    synth = synthesize(cfg, args.out, **options)
    print(summary_line(synth))
    for line in detail_lines(synth):
        print(line)
    print(f"results: {Path(args.out) / 'synth.json'}")
    return 0


def _check_pcap_out(option: str, out: str, clock_mhz: float | None) -> None:
    """A pcap file to write: not a directory, in a directory that exists; a positive clock
    (None: the run's)."""
    if clock_mhz is not None and not 0 < clock_mhz < math.inf:
        raise UsageError(f"--clock-mhz = {clock_mhz:g}: must be a positive finite number")
    path = Path(out)
    if not out.strip() or path.is_dir():
        raise UsageError(f"{option} = {out!r}: must name a file")
    if not path.absolute().parent.is_dir():
        raise UsageError(f"{option} = {out!r}: no directory {str(path.parent)!r}")


def _board(args) -> int:
    from ..sim.stimulus.traffic_gen import stimulus_settings
    from .board import build_board
    if args.preset is None and args.config is None:
        args.preset = "tiny"
    cfg = _config(args)
    settings = stimulus_settings(cfg, args.traffic, load=args.load, cycles=args.cycles,
                                 seed=args.seed, packet_lengths=args.lengths)
    res = build_board(cfg, settings, args.out, board=args.board, fpga=args.fpga,
                      clock_mhz=args.clock_mhz, baud=args.baud, bitstream=not args.no_bitstream)
    out = Path(args.out)
    nearest = ("" if abs(res["clock_mhz"] - args.clock_mhz) < 1e-9 else
               f" (the nearest the PLL makes to {args.clock_mhz:g})")
    print(f"board: {res['board']} ({res['device']}), {res['clock_mhz']:g} MHz{nearest}, UART "
          f"{res['baud']:,} baud 8N1; the model's run: {res['model_cycles']:,} cycles, "
          f"run hash {res['model_hash']}")
    if res["bitstream"]:
        used = res["resources"]
        print(f"bitstream: {res['bitstream']} (Fmax {res['fmax_mhz']:g} MHz, "
              f"{used.get('TRELLIS_COMB', 0):,} LUT4, {used.get('TRELLIS_FF', 0):,} FF, "
              f"{used.get('DP16KD', 0)} DP16KD, {res['seconds']:.0f} s)")
        print(f"load it: {res['load']}")
    else:
        print(f"design files (no bitstream): {out / 'build'}")
    print(f"connect: {res['connect']}")
    print(f"the UART must print: {out / 'expected-uart.txt'}")
    return 0


def _pcap(args) -> int:
    from .pcap import write_pcap
    _check_pcap_out("-o", args.out, args.clock_mhz)
    frames = write_pcap(args.src, args.out, clock_mhz=args.clock_mhz)
    print(f"pcap: {frames:,} frames, {args.out}")
    return 0


def _records_of(cfg: FabricConfig, traffic: str) -> str | None:
    """What a collective's run records (``records=`` of ``collective:...``); None for
    other traffic."""
    from ..sim.collective.pattern import PATTERN, PATTERN_PARAMS
    from ..sim.traffic import parse_pattern
    if traffic.split(":", 1)[0] != PATTERN:
        return None
    return parse_pattern(traffic, cfg.endpoints, names=(PATTERN,), params=PATTERN_PARAMS)[1][
        "records"]


def _run(args) -> int:
    from .run import SIMS, STIMULI, run_failure, run_point
    if args.sim not in SIMS:
        raise UsageError(f"--sim = {args.sim!r}: must be one of {', '.join(SIMS)}")
    if args.pcap is not None:
        _check_pcap_out("--pcap", args.pcap, args.clock_mhz)
        if args.stimulus == "hardware":
            raise UsageError("--pcap: a hardware-stimulus run records no packets (use "
                             "--stimulus trace)")
    if args.stimulus not in STIMULI:
        raise UsageError(f"--stimulus = {args.stimulus!r}: must be one of {', '.join(STIMULI)}")
    model_threads = _set_threads(args.threads, args.sim, args.stimulus)
    _set_cxx_opt(args.cxx_opt, args.sim)
    cfg = _config(args)
    if args.pcap is not None and _records_of(cfg, args.traffic) == "summary":
        raise UsageError("--pcap: records = summary keeps no delivered packets: --pcap needs "
                         "records = full")
    res = run_point(cfg, traffic=args.traffic, load=args.load, cycles=args.cycles, seed=args.seed,
                    sim=args.sim, out_dir=args.out, packet_lengths=args.lengths,
                    sink_stall=args.sink_stall, pause_rate=args.pause_rate,
                    waves=args.waves or None, bad_fraction=args.bad_fraction,
                    stimulus=args.stimulus, progress=True,
                    priority_weights=args.priority_weights, capture_link=args.capture_link,
                    threads=model_threads)
    if "collective" in res:
        co = res["collective"]
        print(f"{args.sim}: {co['op']} of {co['bytes']:,} bytes by {co['algo']} on "
              f"{co['accelerators']} accelerators: "
              + (f"{co['cycles']:,} cycles ({co['time_us']:,.3f} us), busbw {co['busbw']:.3f} "
                 f"bytes/cycle ({co['busbw_gbps']:.3f} GB/s), "
                 f"{co['alpha_beta_ratio']:.2f} x the alpha-beta prediction "
                 f"({co['alpha_beta_cycles']:,}), data "
                 f"{'exact' if co['data_ok'] else 'WRONG'}" if co["cycles"] else "not finished"))
    elif "rdma" in res:
        _print_rdma(args.sim, res)
    else:
        lat = res["latency"]
        line = (f"{args.sim}: throughput {res['throughput']:.4f}, latency mean {lat['mean']:.2f} "
                f"p99 {lat['p99']:.1f} cycles, packets {res['packets']['delivered']}/"
                f"{res['packets']['offered']} delivered, {res['packets']['dropped']} dropped, "
                f"{res['cycles_per_second']:,.0f} cycles/s") if lat["mean"] is not None else \
            f"{args.sim}: no packet delivered"
        print(line)
        if "stimulus" in res:
            hw = res["stimulus"]
            print(f"hash {hw['hash']}, {res['packets']['refused']} generations refused, "
                  f"{sum(hw['order_errors'])} order errors, {sum(hw['frame_errors'])} framing "
                  f"errors, {res['cycles']:,} cycles")
    failure = run_failure(res)
    if failure:
        print(f"FAILED: {failure}")
    if res["match"] is not None:
        m = res["match"]
        report = Path(args.out) / "mismatch.txt"
        print("match: exact" if m["exact"] else f"match: NOT exact, {m['mismatches']} mismatches, "
              f"first {json.dumps(m['first_mismatch'])}"
              + (f"; see {report}" if report.exists() else ""))
    if "capture_link" in res:
        c = res["capture_link"]
        print(f"link: {c['packets']:,} packets crossed router {c['router']} port {c['port']} "
              f"(to router {c['peer']} port {c['peer_port']})")
    print(f"results: {Path(args.out) / 'results.json'}")
    if args.pcap is not None:
        from .pcap import write_pcap
        frames = write_pcap(args.out, args.pcap, clock_mhz=args.clock_mhz)
        print(f"pcap: {frames:,} frames, {args.pcap}")
    exact = res["match"] is None or res["match"]["exact"]
    return 0 if exact and not failure else 1


def _check_variable(read) -> None:
    """The environment variable a Verilator option stands for, read by ``read`` before the
    run starts: a bad value is a one-line usage error."""
    try:
        read()
    except ValueError as e:
        raise UsageError(str(e)) from None


def _set_threads(threads: int | None, sim: str, stimulus: str) -> int:
    """``--threads``: the Verilator builds of this process (and of any it starts) get
    ``threads`` threads, through the environment variable the runner reads; without it,
    that variable is checked before the run starts. A model run steps the fabric's routers
    on ``threads`` threads (spec 5.9; not the hardware stimulus's model): returns how
    many (1 if not that)."""
    from ..tb.runner import MAX_THREADS, THREADS_ENV, verilator_threads
    if threads is None:
        _check_variable(verilator_threads)
        return 1
    if not 1 <= threads <= MAX_THREADS:
        raise UsageError(f"--threads = {threads}: must be in 1..{MAX_THREADS}")
    if sim == "model":
        if threads > 1 and stimulus != "trace":
            raise UsageError(f"--threads = {threads}: the model of --stimulus hardware runs on "
                             f"one thread")
        return threads
    if threads > 1 and sim != "verilator":
        raise UsageError(f"--threads = {threads}: only Verilator and model runs have threads "
                         f"(--sim {sim} runs on one)")
    os.environ[THREADS_ENV] = str(threads)
    return 1


def _set_cxx_opt(level: str | None, sim: str) -> None:
    """``--cxx-opt``: as ``--threads``, through the variable the runner reads."""
    from ..tb.runner import CXX_OPT_ENV, CXX_OPTS, DEFAULT_CXX_OPT, verilator_cxx_opt
    if level is None:
        return _check_variable(verilator_cxx_opt)
    if level not in CXX_OPTS:
        raise UsageError(f"--cxx-opt = {level!r}: must be one of {', '.join(CXX_OPTS)}")
    if level != DEFAULT_CXX_OPT and sim != "verilator":
        raise UsageError(f"--cxx-opt = {level!r}: only Verilator runs are compiled from C++ "
                         f"(--sim {sim})")
    os.environ[CXX_OPT_ENV] = level


def _print_rdma(sim: str, res: dict) -> None:
    rd = res["rdma"]
    req, lat, data = rd["requests"], rd["latency"], rd["data"]
    if lat["mean"] is None:
        print(f"{sim}: no request completed OK ({req['completed']}/{req['posted']} completed)")
    else:
        print(f"{sim}: {req['ok']}/{req['posted']} requests ok, {req['unexpected_status']} with "
              f"an unexpected status, goodput {rd['goodput']:.4f} words/cycle/endpoint, latency "
              f"mean {lat['mean']:.1f} p99 {lat['p99']:.1f} cycles, "
              f"{rd['retransmissions']['total']} retransmissions, {rd['timeouts']['total']} "
              f"timeouts, {res['cycles_per_second']:,.0f} cycles/s")
    print(f"data: {data['intact']}/{data['checked']} OK completions intact, "
          f"{data['stray_words']} stray words; connection state "
          f"{rd['connection_state']['aggregated_bytes']:,} bytes aggregated vs "
          f"{rd['connection_state']['per_qp_bytes']:,} per QP")
    c = rd["congestion"]
    if c["pause_frames"]["sent"] or c["cnp"]["sent"] or c["victim"] is not None:
        q = c["queue"]
        kmax = f" (ecn.kmax {q['kmax']})" if q["kmax"] is not None else ""
        jain = f"{c['jain']:.3f}" if c["jain"] is not None else "-"
        ports = c["target_ports"]
        where = (f"endpoint {c['target']}" if len(ports) == 1 else
                 f"accelerator {c['target']} (ports {', '.join(map(str, ports))})")
        print(f"congestion at {where}: queue p99 {q['p99']:.0f} flits{kmax}, "
              f"{c['pause_frames']['pauses']} pause frames ({c['pause_frames']['sent']} with the "
              f"resumes), {c['cnp']['sent']} CNPs, Jain's "
              f"index {jain} over {len(c['senders'])} senders"
              + (f", victim {c['victim']['share']:.0%} of its demand" if c["victim"] else ""))
    if rd["stalled"] and rd["stuck"]:
        print(f"stuck: {rd['stuck']}")


#: The errors that end a command with one line on stderr, by the module (in this package)
#: that defines them, and the exit status: 2 for input the user can correct, 1 for a tool
#: that is missing or failed.
_ONE_LINE_ERRORS = ((2, (("config", "ConfigError"), ("sim.traffic", "TrafficError"),
                         ("tools.sweep", "SweepError"), ("tools.report.source", "ReportError"),
                         ("tools.synth.flow", "SynthError"),
                         ("tools.synth.eda_tool", "ToolMissing"), ("tools.pcap", "PcapError"),
                         ("tools.board", "BoardError"))),
                    (1, (("tools.synth.eda_tool", "ToolFailed"),
                         ("tb.runner", "SimulatorMissing"))))


def _exit_status(error: Exception) -> int | None:
    """The exit status of a command that raised ``error``, if it is one of
    :data:`_ONE_LINE_ERRORS`. Only the modules imported so far are looked in: an error
    whose module no step of the command imported cannot have been raised, and importing
    them all to name their errors would cost every command scapy and the report's
    renderers. This module's own :class:`UsageError` is 2 (named directly: run as
    ``python -m``, this module is ``__main__``, not the package's)."""
    if isinstance(error, UsageError):
        return 2
    root = __package__.rpartition(".")[0]       # superfabric
    for status, where in _ONE_LINE_ERRORS:
        for module, name in where:
            defined = sys.modules.get(f"{root}.{module}")
            if defined is not None and isinstance(error, getattr(defined, name)):
                return status
    return None


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``superfabric`` console script."""
    try:
        args = _parser().parse_args(argv)
        if args.command != "pcap":      # pcap's -o is a file
            _check_out(args.out)
        handler = {"generate": _generate, "run": _run, "sweep": _sweep, "fuzz": _fuzz,
                   "synth": _synth, "report": _report, "pool": _pool,
                   "pcap": _pcap, "collective-plan": _collective_plan,
                   "train": _train, "board": _board}[args.command]
        return handler(args)
    except Exception as e:
        status = _exit_status(e)
        if status is not None:
            print(f"superfabric: error: {e}", file=sys.stderr)
            return status
        if not isinstance(e, OSError):
            raise
        # A file or directory the command could not write after all (a full disk, a directory
        # removed under it): one line, not a traceback.
        where = f"{e.filename}: " if e.filename else ""
        print(f"superfabric: error: {where}{e.strerror or e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
