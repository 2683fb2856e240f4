"""``superfabric fuzz``: random valid switch configurations with random traffic, RTL against
the model on each.

Case ``k`` of seed ``S`` is drawn from its own generator, so a campaign of more cases
starts with the same ones. A case is a configuration (every ``[switch]`` key, PFC and ECN
on or off with thresholds that pass validation) and one run of traffic (pattern, load,
packet lengths, sink stalls, pauses, seed), run by :func:`~.run.run_point` into
``DIR/case-NNN/``, which also holds ``config.toml`` and ``rerun.sh``, the one command that
runs the case again. ``DIR/summary.md`` and ``DIR/fuzz.json`` hold the outcome.

Every RTL case is a simulator build of its own (minutes for a large switch), so RTL draws
lean toward switches that build fast: the size of the generated Verilog grows with
``ports**2 * (priorities + iterations / 8)``, and a draw is kept with a probability that
falls as that size rises above :data:`TYPICAL_KB`, never above ``size_limit``. The model
needs no build and draws from the whole range. Traffic is cut so that a case simulates in
seconds: fewer cycles for more ports, and on Icarus fewer still.
"""

from __future__ import annotations

import json
import math
import random
import shlex
import shutil
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from ..config import FabricConfig
from .run import SIMS, run_point

__all__ = ["FuzzCase", "draw_case", "run_campaign", "passed", "summary_table", "verilog_kb",
           "TYPICAL_KB", "SIZE_LIMIT_KB"]

#: Generated Verilog (kB) up to which an RTL draw is always kept; above it, kept with
#: probability ``TYPICAL_KB / size``. About half a minute of Verilator build on 2 cores.
TYPICAL_KB = 150
#: Largest generated Verilog (kB) an RTL draw may have: about two minutes of build.
SIZE_LIMIT_KB = 1000
#: Simulated cycles of traffic per port and case, by simulator: seconds of simulation.
CYCLE_BUDGET = {"model": 64_000, "verilator": 8_000, "icarus": 2_400}


def verilog_kb(ports: int, priorities: int, iterations: int) -> float:
    """The generated switch's Verilog in kB, estimated (within about 20 % of measured sizes
    from 2 to 32 ports): the VOQ state and the scheduler's request logic grow with
    ``ports**2 * priorities``, each iSLIP iteration with ``ports**2``."""
    return 6.4 * ports ** 2 * (priorities + iterations / 8) + 30


@dataclass(frozen=True)
class FuzzCase:
    """One drawn case: the configuration and the arguments of its run."""

    index: int
    config: FabricConfig
    traffic: str
    load: float
    cycles: int
    seed: int
    lengths: str
    sink_stall: float
    pause_rate: float

    @property
    def name(self) -> str:
        return f"case-{self.index:03d}"

    def describe(self) -> str:
        """The switch in a few words: ports, classes, scheduler, ingress, PFC and ECN."""
        sw = self.config.switch
        sched = f"islip x{sw.islip_iterations}" if sw.scheduler == "islip" else "fifo"
        extras = [name for name, on in (("pfc", self.config.pfc.enabled),
                                        ("ecn", self.config.ecn.enabled)) if on]
        return " ".join([f"{sw.ports}p {sw.priorities}c {sw.data_width}b", sched,
                         "drop" if sw.ingress_full == "drop" else "bp", *extras])

    def run_arguments(self) -> list[str]:
        """The traffic arguments of ``superfabric run`` for this case."""
        return ["--traffic", self.traffic, "--load", repr(self.load), "--cycles", str(self.cycles),
                "--seed", str(self.seed), "--lengths", self.lengths,
                "--sink-stall", repr(self.sink_stall), "--pause-rate", repr(self.pause_rate)]


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    """An integer in ``low..high``, small ones as likely per octave as large ones."""
    return min(high, max(low, round(math.exp(rng.uniform(math.log(low), math.log(high))))))


def _switch(rng: random.Random, sim: str, size_limit: float) -> dict:
    """The ``[switch]`` keys of a draw (``tag_width`` is set once the traffic is known)."""
    while True:
        ports = _log_uniform(rng, 2, 32)
        priorities = rng.randint(1, 8)
        iterations = _log_uniform(rng, 1, ports)
        size = verilog_kb(ports, priorities, iterations)
        if sim == "model" or (size <= size_limit and rng.random() < TYPICAL_KB / size):
            break
    max_flits = rng.choice([1, 2, 4, 8, 16, rng.randrange(1, 33)])
    return {"ports": ports, "priorities": priorities, "islip_iterations": iterations,
            "scheduler": rng.choice(["islip", "islip", "fifo"]),
            "ingress_full": rng.choice(["backpressure", "drop"]),
            "max_packet_flits": max_flits,
            "buffer_flits": min(1024, max_flits * rng.choice([1, 2, 4, 8]) + rng.randrange(8)),
            "tag_width": 32}


def _pfc(rng: random.Random, switch: dict) -> dict:
    """``[pfc]`` keys that pass validation: lossless classes, thresholds and headroom that fit
    the buffer, and pauses of 64 to 1,024 cycles (the sinks' pause frames must cover their
    64-cycle period; longer ones would look like a stall). ``xon`` is at least 1: with
    ``xon = 0`` a paused class is never resumed, and the run stalls by design."""
    priorities, buffer_flits = switch["priorities"], switch["buffer_flits"]
    lossless = sorted(rng.sample(range(priorities), _log_uniform(rng, 1, priorities)))
    lossless = lossless[:buffer_flits // 2]
    share = buffer_flits // len(lossless)
    # Enough headroom for a packet in flight when it fits, any that leaves xoff >= 2 else.
    wanted = switch["max_packet_flits"] + 3
    headroom = wanted if wanted <= share - 2 else rng.randrange(0, share - 1)
    xoff = rng.randrange(2, share - headroom + 1)
    quanta = -(-rng.choice([64, 128, 512, 1024]) * switch["data_width"] // 512)
    return {"enabled": True, "priorities": lossless, "xoff": xoff, "xon": rng.randrange(1, xoff),
            "headroom": headroom, "pause_quanta": min(65535, max(1, quanta))}


def _ecn(rng: random.Random, switch: dict) -> dict:
    """``[ecn]`` keys: thresholds in the backlog's range, from a DCTCP step to a long ramp."""
    most = switch["ports"] * switch["buffer_flits"]
    kmin = rng.randrange(0, max(1, most // 4))
    return {"enabled": True, "kmin": kmin, "kmax": kmin + rng.choice([0, rng.randrange(most // 2 + 1)]),
            "pmax": rng.choice([0.05, 0.2, 0.5, 1.0]), "lfsr_seed": rng.randrange(1, 1 << 16),
            "ect_fraction": rng.choice([0.3, 0.8, 1.0])}


def _pattern(rng: random.Random, ports: int) -> tuple[str, float]:
    """A traffic pattern for ``ports`` ports and how many times line rate its busiest
    output is offered at load 1 (the run lasts until that output has drained)."""
    names = ["uniform", "permutation", "bitcomp", "hotspot", "incast", "all-to-all",
             "ring-allreduce", "bursty", "tornado", "neighbour"]
    if ports in (4, 16):
        names.append("transpose")
    name = rng.choice(names)
    if name == "hotspot":
        fraction = rng.choice([0.1, 0.3, 0.6])
        return (f"hotspot:fraction={fraction},port={rng.randrange(ports)}",
                fraction * ports + (1 - fraction))
    if name == "incast":
        sources = rng.randrange(1, ports)
        return f"incast:sources={sources},sink={rng.randrange(ports)}", float(sources)
    if name == "bursty":
        return f"bursty:burst={rng.choice([2, 6, 16])}", 1.0
    return name, 1.0


def _lengths(rng: random.Random, max_flits: int) -> str:
    """Packet lengths: one length, or a short and a longer one."""
    if max_flits == 1 or rng.random() < 0.5:
        return f"fixed:{rng.randrange(1, max_flits + 1)}"
    short = rng.randrange(1, max_flits)
    return f"bimodal:{short},{rng.randrange(short + 1, max_flits + 1)},{rng.choice([0.3, 0.5, 0.8])}"


def draw_case(seed: int, index: int, sim: str, *, size_limit: float = SIZE_LIMIT_KB) -> FuzzCase:
    """Case ``index`` of the campaign of ``seed`` for ``sim``: a valid configuration and its
    run. Icarus and Verilator draw the same configurations and traffic (Icarus runs fewer
    cycles of it); the model draws from the whole range."""
    rng = random.Random(f"superfabric fuzz {seed} {index} {'model' if sim == 'model' else 'rtl'}")
    switch = _switch(rng, sim, size_limit)
    # PFC needs two flits of buffer per lossless class at least (xon >= 1 below xoff).
    pfc_on = rng.random() < 0.4 and switch["buffer_flits"] >= 2
    ecn_on = rng.random() < 0.4
    # PFC converts pause quanta to cycles by a shift: a power-of-two flit width.
    switch["data_width"] = (1 << rng.randrange(3, 11)) if pfc_on else rng.choice(
        [8, 16, 24, 32, 64, 100, 128, 256, 1024])
    sink_stall = rng.choice([0.0, 0.0, 0.1, 0.3, 0.5])
    pause_rate = rng.choice([0.0, 0.0, 0.05, 0.2])
    data = {"switch": switch}
    if pfc_on:
        data["pfc"] = _pfc(rng, switch)
    if ecn_on:
        data["ecn"] = _ecn(rng, switch)
    pattern, hottest = _pattern(rng, switch["ports"])
    load = round(rng.uniform(0.05, 1.0), 2)
    # The run lasts until the busiest output drains: at most ~1.5 times line rate offered.
    load = min(load, max(0.05, round(1.5 / hottest, 2)))
    lengths = _lengths(rng, switch["max_packet_flits"])
    cycles = max(100, CYCLE_BUDGET[sim] // switch["ports"] // max(1, math.ceil(load * hottest)))
    # The testbench tells packets apart by tag: wide enough for every packet of the trace.
    most_packets = switch["ports"] * cycles
    switch["tag_width"] = min(32, max(8, most_packets.bit_length()) + rng.randrange(3))
    cfg = FabricConfig.load(preset="default", overrides=[
        f"{section}.{key}={json.dumps(value)}" for section, keys in data.items()
        for key, value in keys.items()] + [f"pfc.enabled={json.dumps(pfc_on)}",
                                           f"ecn.enabled={json.dumps(ecn_on)}"])
    return FuzzCase(index=index, config=cfg, traffic=pattern, load=load, cycles=cycles,
                    seed=rng.randrange(1 << 20), lengths=lengths, sink_stall=sink_stall,
                    pause_rate=pause_rate)


def _superfabric() -> str:
    """The ``superfabric`` script of this installation."""
    script = Path(sys.executable).with_name("superfabric")
    return str(script) if script.exists() else "superfabric"


def _write_case(case: FuzzCase, case_dir: Path, sim: str) -> str:
    """Write ``config.toml`` and ``rerun.sh`` into ``case_dir``; return the rerun command."""
    case_dir.mkdir(parents=True)
    (case_dir / "config.toml").write_text(case.config.to_toml())
    command = shlex.join([_superfabric(), "run", "--config", str(case_dir / "config.toml"),
                          *case.run_arguments(), "--sim", sim, "-o", str(case_dir)])
    (case_dir / "rerun.sh").write_text(
        f"#!/bin/sh\n# superfabric fuzz {case.name}: {case.describe()}\n"
        f"cd {shlex.quote(str(Path.cwd()))} && exec {command}\n")
    (case_dir / "rerun.sh").chmod(0o755)
    return command


def _result(res: dict) -> str:
    """The verdict on one run: ``exact`` or why not."""
    if res["match"] is None:
        pk = res["packets"]
        if res["stalled"]:
            return "model stalled"
        return "ok" if pk["delivered"] + pk["dropped"] == pk["offered"] else "model lost packets"
    if res["match"]["exact"]:
        return "exact"
    return f"MISMATCH ({res['match']['mismatches']} packets)"


def run_campaign(*, configs: int, seed: int, sim: str, out_dir: str | Path,
                 build_root: str | Path = "build", size_limit: float = SIZE_LIMIT_KB,
                 log=None) -> list[dict]:
    """Draw and run ``configs`` cases; write their directories, ``summary.md`` and
    ``fuzz.json`` into ``out_dir``; return one outcome per case (``result`` is ``exact``
    or ``ok`` when the case passed)."""
    if sim not in SIMS:
        raise ValueError(f"sim = {sim!r}: must be one of {', '.join(SIMS)}")
    log = sys.stdout if log is None else log
    if sim != "model":
        from ..tb.runner import find_simulator
        find_simulator(sim)       # a missing simulator ends the campaign, not each case
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    outcomes = []
    start = time.perf_counter()
    for index in range(configs):
        case = draw_case(seed, index, sim, size_limit=size_limit)
        case_dir = out / case.name
        shutil.rmtree(case_dir, ignore_errors=True)
        command = _write_case(case, case_dir, sim)
        log.write(f"fuzz {case.name} ({index + 1}/{configs}): {case.describe()}, "
                  f"{case.traffic} at {case.load}, {case.lengths}\n")
        log.flush()
        outcome = {"case": case.name, "config": case.config.key, "switch": case.describe(),
                   "pattern": case.traffic, "load": case.load, "command": command}
        t0 = time.perf_counter()
        try:
            res = run_point(case.config, traffic=case.traffic, load=case.load,
                            cycles=case.cycles, seed=case.seed, sim=sim, out_dir=case_dir,
                            packet_lengths=case.lengths, sink_stall=case.sink_stall,
                            pause_rate=case.pause_rate, build_root=build_root)
        except Exception as e:        # noqa: BLE001 - a case that fails is recorded, the rest run
            (case_dir / "error.txt").write_text(traceback.format_exc())
            outcome.update(result=f"error: {str(e).splitlines()[0]}", packets=None, cycles=None)
        else:
            pk = res["packets"]
            outcome.update(result=_result(res), packets=f"{pk['delivered']}/{pk['offered']}",
                           dropped=pk["dropped"], cycles=res["cycles"],
                           build_seconds=res.get("build_seconds"))
        outcome["seconds"] = time.perf_counter() - t0
        log.write(f"fuzz {case.name}: {outcome['result']} in {outcome['seconds']:.1f} s"
                  + (f" (build {outcome['build_seconds']:.1f} s)"
                     if outcome.get("build_seconds") else "") + "\n")
        log.flush()
        outcomes.append(outcome)
    table = summary_table(outcomes)
    (out / "summary.md").write_text(table)
    (out / "fuzz.json").write_text(json.dumps(
        {"configs": configs, "seed": seed, "sim": sim, "seconds": time.perf_counter() - start,
         "cases": outcomes}, indent=2) + "\n")
    return outcomes


def passed(outcome: dict) -> bool:
    """The case ran and RTL equals the model (or, on the model alone, nothing was lost)."""
    return outcome["result"] in ("exact", "ok")


def summary_table(outcomes: list[dict]) -> str:
    """A Markdown table: case, configuration digest, switch, pattern, load, packets, cycles, result."""
    rows = ["| case | config | switch | pattern | load | packets | cycles | result |",
            "|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        rows.append(f"| {o['case']} | {o['config']} | {o['switch']} | {o['pattern']} | "
                    f"{o['load']} | {o['packets'] or '-'} | {o['cycles'] or '-'} | {o['result']} |")
    failed = sum(not passed(o) for o in outcomes)
    rows.append("")
    rows.append(f"{len(outcomes) - failed} of {len(outcomes)} cases passed"
                + (f"; {failed} failed: rerun one with its case's rerun.sh" if failed else ""))
    return "\n".join(rows) + "\n"
