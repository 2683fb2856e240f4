"""``superfabric run``: one trace through the golden model and, optionally, an RTL simulator.

The ``rdma-*`` patterns run a workload of work requests through the RDMA
fabric instead of packets through the bare switch (section 10.9).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import replace
from importlib import metadata
from pathlib import Path

import numpy as np

from ..config import ConfigError, FabricConfig
from ..network.topology import Topology
from ..sim.backpressure import SinkReady
from ..sim.pfc import pause_sources
from ..sim.fabric.metrics import fabric_summary
from ..sim.metrics import summarize
from ..sim.rdma.traffic import RDMA_PATTERNS, generate_rdma
from ..sim.records import Records
from ..sim.fabric.top import DEFAULT_STALL_LIMIT, FabricModel
from ..sim.traffic import Trace, TrafficError, check_traffic, generate
from .npz import save_compressed
from .report.source import pattern_kind

__all__ = ["SIMS", "STIMULI", "prepare_point", "run_failure", "run_point", "run_rdma_point",
           "run_stimulus_point", "write_json"]

SIMS = ("model", "icarus", "verilator")
#: Where the traffic comes from: a trace the testbench drives, or the RTL's own generators.
STIMULI = ("trace", "hardware")


def prepare_point(cfg: FabricConfig, *, traffic: str, load: float, cycles: int, seed: int,
                  sim: str, packet_lengths: str = "fixed:1", sink_stall: float = 0.0,
                  pause_rate: float = 0.0, bad_fraction: float = 0.0, stimulus: str = "trace",
                  priority_weights: list[float] | None = None, build: bool = True):
    """Check every setting of one point and build its stimulus, without running or writing.

    The one validation of a point: ``superfabric run`` goes through it, and
    ``superfabric sweep`` puts every point through it before the first one
    runs, so a value one refuses the other refuses too, in the same line.
    With ``build`` false a switch trace is checked without drawing its
    packets (:func:`~superfabric.sim.traffic.check_traffic`, every check
    :func:`~superfabric.sim.traffic.generate` makes); an RDMA workload is
    always drawn, since its limits (a request per QP in the window, the
    memories) depend on the draw.

    Returns
    -------
    tuple of (str, object)
        ``("trace", Trace)`` for switch traffic (``None`` without
        ``build``), ``("rdma", RdmaWorkload)`` for ``rdma-*`` patterns (with
        ``stimulus = "hardware"`` and an RTL simulator, one the hardware hosts can
        play), ``("hardware", StimulusSettings)`` for switch traffic with
        ``stimulus = "hardware"``.

    Raises
    ------
    TrafficError, ConfigError
        A setting out of range; the one-line message names it, its value
        and what is allowed.
    ValueError
        ``sim`` or ``stimulus`` not one of :data:`SIMS`, :data:`STIMULI`.
    """
    if sim not in SIMS:
        raise ValueError(f"sim = {sim!r}: must be one of {', '.join(SIMS)}")
    if stimulus not in STIMULI:
        raise ValueError(f"stimulus = {stimulus!r}: must be one of {', '.join(STIMULI)}")
    for name, value, doc in (("sink_stall", sink_stall, "probability an egress port is not ready"),
                             ("pause_rate", pause_rate, "probability of a pause per period")):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise TrafficError(f"traffic.{name} = {value!r}: must be in [0, 1) ({doc})")
    kind = pattern_kind(traffic) if isinstance(traffic, str) else "switch"
    if stimulus == "hardware" and kind == "switch":
        from ..formats.stimulus import check_stimulus
        from ..sim.stimulus.traffic_gen import stimulus_settings
        for name, value in (("pause_rate", pause_rate), ("bad_fraction", bad_fraction)):
            if value:
                raise TrafficError(f"traffic.{name} = {value!r}: must be 0 with --stimulus "
                                   f"hardware (the generators obey no pause and send switch "
                                   f"traffic)")
        check_stimulus(cfg)
        return "hardware", stimulus_settings(cfg, traffic, load=load, cycles=cycles, seed=seed,
                                             packet_lengths=packet_lengths,
                                             priority_weights=priority_weights,
                                             sink_stall=sink_stall)
    if kind != "switch":
        for key, value in (("sink_stall", sink_stall), ("pause_rate", pause_rate),
                           ("priority_weights", priority_weights)):
            if value:
                raise TrafficError(f"traffic.{key} = {value!r}: must be 0 with {traffic} "
                                   f"(the RDMA engines always accept their flits)")
        if not cfg.rdma.enabled:
            raise ConfigError(f"rdma.enabled = false: must be true for traffic {traffic!r} "
                              f"(add --set rdma.enabled=true)")
        if kind == "collective":
            if bad_fraction:
                raise TrafficError(f"traffic.bad_fraction = {bad_fraction!r}: must be 0 with "
                                   f"{traffic} (the collective engines post every request)")
            from ..sim.collective.pattern import parse_collective
            return "rdma", parse_collective(cfg, traffic, seed=seed)
        workload = generate_rdma(cfg, traffic, load=load, cycles=cycles, seed=seed,
                                 bad_fraction=bad_fraction)
        if stimulus == "hardware" and sim != "model":
            from ..hdl.rdma.host import DEPTH
            from ..tb.rdma.script import check_hosted
            check_hosted(cfg, workload, DEPTH)
        return "rdma", workload
    if bad_fraction:
        raise TrafficError(f"traffic.bad_fraction = {bad_fraction!r}: only for "
                           f"{' and '.join(RDMA_PATTERNS)}")
    options = dict(load=load, cycles=cycles, seed=seed, packet_lengths=packet_lengths,
                   priority_weights=priority_weights, ect_fraction=cfg.ecn.ect_fraction)
    if not build:
        check_traffic(cfg, traffic, **options)
        return "trace", None
    return "trace", generate(cfg, traffic, **options)


def run_failure(results: dict) -> str | None:
    """Why a run that finished did not do its job, or None when it did.

    A run fails when it stalled (nothing moved while traffic was outstanding)
    or, with RDMA traffic, when a work request never completed or completed
    with another status than the one it was posted to get. ``superfabric
    run`` then exits 1, and ``superfabric sweep`` records the point as failed.
    A model/RTL mismatch is reported apart, by ``match``.
    """
    if "collective" in results:
        co = results["collective"]
        problems = [f"stalled at cycle {co['run_cycles']:,}: {co['stuck']}"] if co["stalled"] \
            else []
        if co["errors"]:
            problems.append(f"{co['errors']} requests completed with an error")
        if not co["stalled"] and not co["data_ok"]:
            problems.append("an accelerator's data differs from numpy's")
        return ", ".join(problems) or None
    if "rdma" in results:
        rd = results["rdma"]
        req = rd["requests"]
        problems = []
        if req["not_completed"]:
            problems.append(f"{req['not_completed']} of {req['posted']} requests not completed")
        if req["unexpected_status"]:
            problems.append(f"{req['unexpected_status']} with an unexpected status")
        if rd["stalled"]:
            problems.append(f"stalled at cycle {rd['cycles']:,}")
        return ", ".join(problems) or None
    if results.get("stalled"):
        stuck = (results.get("fabric") or {}).get("stuck")
        return f"stalled at cycle {results['cycles']:,}" + (f": {stuck}" if stuck else "")
    return None


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` to ``path`` through a temporary file of this writer's own, so that a
    reader never sees it cut short and two writers never share a temporary name."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run_point(cfg: FabricConfig, *, traffic: str, load: float, cycles: int, seed: int,
              sim: str, out_dir: str | Path, packet_lengths: str = "fixed:1",
              sink_stall: float = 0.0, pause_rate: float = 0.0, waves: bool | None = None,
              stall_limit: int = DEFAULT_STALL_LIMIT, build_root: str | Path = "build",
              bad_fraction: float = 0.0, stimulus: str = "trace", progress: bool = False,
              priority_weights: list[float] | None = None,
              capture_link: str | None = None, threads: int = 1) -> dict:
    """Run one point and write ``results.json`` and ``packets.npz`` into ``out_dir``.

    For an RTL simulator the model runs on the same trace and the scoreboard
    compares the two; the returned dict is what ``results.json`` holds.
    Every setting goes through :func:`prepare_point` first. An ``rdma-*``
    pattern goes to :func:`run_rdma_point`: ``bad_fraction`` is for those
    only, sink stalls and pauses are refused, and ``packet_lengths``,
    ``priority_weights`` (one per class, default uniform) and
    ``stall_limit`` do not apply. ``stimulus = "hardware"`` goes to
    :func:`run_stimulus_point` for switch traffic; with an ``rdma-*`` pattern the RTL's
    hosts are in hardware (section 10.16); a collective's engines always are.
    ``progress`` shows signs of life on stderr: the kernels' first compilation, and a long
    model or RTL run. ``capture_link``,
    ``ROUTER:PORT`` of a fabric, records the packets that cross that link
    (:func:`link_of`; ``superfabric pcap`` then writes them). ``threads``: the model steps the
    fabric's routers on that many threads (spec 5.9; the run is the same), but for
    ``stimulus = "hardware"``.
    """
    link = link_of(cfg, capture_link, stimulus)
    kind, prepared = prepare_point(cfg, traffic=traffic, load=load, cycles=cycles, seed=seed,
                                   sim=sim, packet_lengths=packet_lengths, sink_stall=sink_stall,
                                   pause_rate=pause_rate, bad_fraction=bad_fraction,
                                   stimulus=stimulus, priority_weights=priority_weights)
    if kind == "hardware":
        return run_stimulus_point(cfg, traffic=traffic, load=load, cycles=cycles, seed=seed,
                                  sim=sim, out_dir=out_dir, packet_lengths=packet_lengths,
                                  sink_stall=sink_stall, waves=waves, stall_limit=stall_limit,
                                  build_root=build_root, progress=progress,
                                  priority_weights=priority_weights, settings=prepared)
    if kind == "rdma":
        return run_rdma_point(cfg, traffic=traffic, load=load, cycles=cycles, seed=seed, sim=sim,
                              out_dir=out_dir, bad_fraction=bad_fraction, waves=waves,
                              build_root=build_root, workload=prepared, progress=progress,
                              capture_link=capture_link, threads=threads, stimulus=stimulus)
    trace = prepared
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sink = SinkReady(cfg.endpoints, sink_stall, seed)
    pause, sink_pause = pause_sources(cfg, pause_rate, seed)

    fabric = FabricModel(cfg, threads=threads)
    compile_seconds = _compile(progress, lambda: fabric.warm(
        sink=sink, pause=pause, sink_pause=sink_pause, stall_limit=stall_limit))
    t0 = time.perf_counter()
    with _activity(progress, "model", f"{len(trace):,} packets", cycles):
        model = fabric.run(trace, sink=sink, pause=pause, sink_pause=sink_pause,
                           stall_limit=stall_limit, capture_link=link)
    model_seconds = time.perf_counter() - t0
    model_summary = _summary(cfg, trace, model)

    results = _opening(cfg, sim, {**trace.describe(), "sink_stall": sink_stall,
                                  "pause_rate": pause_rate},
                       model_summary, model.cycles, model_seconds, compile_seconds,
                       threads=fabric.threads)
    rtl = None
    if sim != "model":
        from ..tb.runner import run_cocotb
        from ..tb.scoreboard import compare

        # The switch, or the fabric top: the same testbench drives either.
        top = "fabric" if cfg.fabric.is_fabric else "switch"
        waves, results["build_seconds"] = _build(cfg, sim, top, waves, build_root)

        trace_path = out / "trace.npz"
        trace.save(trace_path)
        model.save(out / "model_records.npz")
        params = {"trace": str(trace_path.resolve()),
                  "rtl_records": str((out / "rtl_records.npz").resolve()),
                  "sink_stall": sink_stall, "sink_seed": seed, "stall_limit": stall_limit,
                  "pause_rate": pause_rate, "pause_seed": seed}
        records_path = out / "rtl_records.npz"
        records_path.unlink(missing_ok=True)      # a stale file must not pass for this run's
        t0 = time.perf_counter()
        with _activity(progress, sim, f"{len(trace):,} packets", cycles):
            result = run_cocotb(cfg, "superfabric.tb.trace_tb", sim=sim, test_dir=out / "sim",
                                top=top, waves=waves, seed=seed, params=params,
                                build_root=build_root)
        wall = time.perf_counter() - t0
        if not records_path.exists():
            raise RuntimeError(f"the {sim} run wrote no records; see {result.test_dir / 'sim.log'}")
        rtl = Records.load(records_path)
        # The one comparison of the run: the testbench only records.
        comparison = compare(trace, rtl, model, ordered=not cfg.fabric.is_fabric)
        (out / "mismatch.txt").unlink(missing_ok=True)
        if not comparison.exact:
            (out / "mismatch.txt").write_text(comparison.report())
        results.update(_summary(cfg, trace, rtl))
        results["match"] = comparison.to_dict()
        results["wall_seconds"] = wall
        results["cycles_per_second"] = rtl.cycles / wall if wall else None
    if cfg.pfc.enabled:
        # Peak occupancy against what the thresholds promise never to exceed.
        for section in (results, results["model"]):
            section["pfc"]["occupancy_limit"] = cfg.pfc.xoff + cfg.pfc.headroom
    if link >= 0:
        results["capture_link"] = _captured(cfg, link, int((model.link_cycle >= 0).sum()))
    _save_packets(out / "packets.npz", trace, model, rtl, captured=link >= 0)
    write_json(out / "results.json", results)
    return results


def run_rdma_point(cfg: FabricConfig, *, traffic: str, load: float, cycles: int, seed: int,
                   sim: str, out_dir: str | Path, bad_fraction: float = 0.0,
                   waves: bool | None = None, build_root: str | Path = "build",
                   workload=None, progress: bool = False,
                   capture_link: str | None = None, threads: int = 1,
                   stimulus: str = "trace") -> dict:
    """Run one RDMA workload through the fabric model and, optionally, the RTL.

    Writes ``workload.npz``, ``model_records.npz`` and ``results.json`` into
    ``out_dir`` (the RTL runner adds ``rtl_records.npz``, ``mismatch.txt``
    and ``sim/``); the ``rdma`` section summarises the RTL's records for RTL
    runs, the model's otherwise. Needs ``rdma.enabled``. ``workload``: the
    one :func:`prepare_point` built from the same arguments, else built here.
    ``progress`` shows signs of life on stderr, as :func:`run_point` does.
    A ``collective:`` pattern's workload is a
    :class:`~superfabric.sim.collective.fabric.CollectivePlan`: the collective
    engines post the requests as the model runs, ``collective.npz`` holds their
    timeline, and ``results.json`` has a ``collective`` section instead
    (docs/spec/collective.md section 15.8.4); for an RTL simulator the
    ``collective_fabric`` top runs it too, and ``match`` holds it against the model
    (section 15.8.7). ``threads`` step the model's routers, as for :func:`run_point`.
    ``stimulus = "hardware"``: the RTL's hosts are in hardware (``rdma_hosted``, section
    10.16), the match is by cycles, counters and hashes, ``results.json`` gains a
    ``hosted`` section, and its ``rdma`` section stays the model's.
    """
    link = link_of(cfg, capture_link)
    if workload is None:
        _, workload = prepare_point(cfg, traffic=traffic, load=load, cycles=cycles, seed=seed,
                                    sim=sim, bad_fraction=bad_fraction, stimulus=stimulus)
    # Imported here so that a switch run does not load the RDMA model.
    from ..sim.collective.fabric import CollectivePlan, collective_summary, run_collective
    from ..sim.rdma.fabric import RdmaFabricModel
    from ..sim.rdma.metrics import rdma_summary

    collective = workload if isinstance(workload, CollectivePlan) else None
    if collective is not None:
        if collective.records == "summary" and link >= 0:
            raise TrafficError(f"traffic.pattern = {traffic!r}: records = summary keeps no "
                               f"delivered packets: --capture-link needs records = full")
        workload = collective.workload
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    workload.save(out / "workload.npz")
    fabric = RdmaFabricModel(cfg, threads=threads)
    compile_seconds = _compile(progress, fabric.warm)
    t0 = time.perf_counter()
    if collective is not None:
        with _activity(progress, "model", f"{traffic}, {collective.predicted:,} cycles by "
                       f"the alpha-beta model", None):
            model, engines, buffers = run_collective(cfg, collective, capture_link=link,
                                                     threads=fabric.threads)
    else:
        with _activity(progress, "model", f"{len(workload):,} work requests", cycles):
            model = fabric.run(workload, capture_link=link)
    model_seconds = time.perf_counter() - t0
    if collective is not None and collective.records == "summary":
        # Checked in this process (data_ok), the memories would be the largest file of a
        # long collective's: 6 GB for 4 MiB on 384 accelerators.
        replace(model, memory=model.memory[:, :0]).save(out / "model_records.npz")
    else:
        model.save(out / "model_records.npz")
    if collective is not None:
        np.savez(out / "collective.npz", **engines.timeline())
        results = _opening(cfg, sim, {"pattern": traffic, "seed": int(seed)},
                           collective_summary(cfg, collective, model, engines, buffers),
                           model.cycles, model_seconds, compile_seconds, section="collective",
                           threads=fabric.threads)
        if link >= 0:
            results["capture_link"] = _captured(cfg, link, _crossed(model))
        if sim != "model":
            _collective_rtl(cfg, collective, (model, engines), results, sim=sim, out=out,
                            waves=waves, build_root=build_root, progress=progress)
        write_json(out / "results.json", results)
        return results
    model_summary = rdma_summary(cfg, workload, model)
    results = _opening(cfg, sim, {**workload.describe(), "bad_fraction": bad_fraction},
                       model_summary, model.cycles, model_seconds, compile_seconds,
                       section="rdma", threads=fabric.threads)
    if link >= 0:
        results["capture_link"] = _captured(cfg, link, _crossed(model))
    if sim != "model" and stimulus == "hardware":
        results["rdma"] = model_summary
        _hosted_rtl(cfg, workload, model, results, sim=sim, out=out, waves=waves,
                    build_root=build_root, progress=progress)
    elif sim != "model":
        from ..tb.rdma.runner import run_rdma_rtl
        waves, results["build_seconds"] = _build(cfg, sim, "rdma_fabric", waves, build_root)
        t0 = time.perf_counter()
        with _activity(progress, sim, f"{len(workload):,} work requests", cycles):
            rtl, match = run_rdma_rtl(cfg, workload, sim=sim, out_dir=out, model=model,
                                      waves=waves, build_root=build_root)
        wall = time.perf_counter() - t0
        results["rdma"] = rdma_summary(cfg, workload, rtl)
        results["match"] = match
        results["wall_seconds"] = wall
        results["cycles_per_second"] = rtl.cycles / wall if wall else None
    write_json(out / "results.json", results)
    return results


def _hosted_rtl(cfg: FabricConfig, workload, model, results: dict, *, sim: str, out: Path,
                waves: bool | None, build_root: str | Path, progress: bool) -> None:
    """Run ``workload`` on ``sim``'s ``rdma_hosted`` top, its hosts in hardware (section
    10.16), and add to ``results`` the ``hosted`` section (the run's cycles and every
    endpoint's hashes, by name), its ``match`` against ``model`` by cycles, counters and
    hashes, its build's seconds, and the run's: ``cycles_per_second`` from ``run`` to
    ``done``, ``wall_seconds`` the whole simulator run. (The ``rdma`` section is the
    model's: the hosted run records no single request, and matches it.)"""
    from ..formats.rdma_hash import HASHES
    from ..tb.rdma.runner import run_rdma_hosted
    waves, results["build_seconds"] = _build(cfg, sim, "rdma_hosted", waves, build_root)
    t0 = time.perf_counter()
    # The bar runs to the model's end, the cycle the hosted run must end at too.
    bar = _progress_bar(sim, model.cycles) if progress else None
    rtl, match = run_rdma_hosted(
        cfg, workload, sim=sim, out_dir=out, model=model, waves=waves, build_root=build_root,
        progress=(lambda line: bar(line["cycle"], line["seconds"])) if bar else None)
    results["hosted"] = {"finished": rtl["finished"], "cycles": rtl["cycles"],
                         "run_seconds": rtl["run_seconds"],
                         "hashes": [{kind: f"{h:08x}" for kind, h in zip(HASHES, hashes)}
                                    for hashes in rtl["hashes"]]}
    results["match"] = match
    results["wall_seconds"] = time.perf_counter() - t0
    results["cycles_per_second"] = (rtl["cycles"] / rtl["run_seconds"] if rtl["run_seconds"]
                                    else None)


def _collective_rtl(cfg: FabricConfig, collective, model, results: dict, *, sim: str, out: Path,
                    waves: bool | None, build_root: str | Path, progress: bool) -> None:
    """Run the collective on ``sim``'s ``collective_fabric`` too, and add its ``collective``
    section, its ``match`` against ``model`` (section 15.8.7), its build and its run's
    seconds to ``results``."""
    from ..tb.collective.runner import rtl_summary, run_collective_rtl
    waves, results["build_seconds"] = _build(cfg, sim, "collective_fabric", waves, build_root)
    t0 = time.perf_counter()
    with _activity(progress, sim, f"{collective.schedule.step_count} steps", None):
        rtl, match = run_collective_rtl(cfg, collective, model, sim=sim, out_dir=out,
                                        waves=waves, build_root=build_root)
    wall = time.perf_counter() - t0
    results["collective"] = rtl_summary(cfg, collective, rtl, match)
    results["match"] = match
    results["wall_seconds"] = wall
    results["cycles_per_second"] = int(rtl["cycles"]) / wall if wall else None


def run_stimulus_point(cfg: FabricConfig, *, traffic: str, load: float, cycles: int, seed: int,
                       sim: str, out_dir: str | Path, packet_lengths: str = "fixed:1",
                       sink_stall: float = 0.0, waves: bool | None = None,
                       stall_limit: int = DEFAULT_STALL_LIMIT, build_root: str | Path = "build",
                       progress: bool = False, priority_weights: list[float] | None = None,
                       settings=None) -> dict:
    """Run one point with the RTL's own generators and sinks (``--stimulus hardware``).

    The model runs the same settings; for an RTL simulator the stimulus top
    runs them and every hash, counter and histogram bucket is held against
    the model's (``match``). Writes ``results.json`` and ``model_stats.npz``
    (RTL runs add ``rtl_stats.npz``, ``timing.json``, ``progress.jsonl``,
    ``sim/``, and ``mismatch.txt`` when they differ) into ``out_dir``.
    ``settings``: the ones :func:`prepare_point` built from the same
    arguments, else built here.
    """
    from ..sim.stimulus.top import StimulusModel, compare_stats
    from ..sim.stimulus.metrics import stimulus_summary

    if settings is None:
        _, settings = prepare_point(cfg, traffic=traffic, load=load, cycles=cycles, seed=seed,
                                    sim=sim, packet_lengths=packet_lengths,
                                    sink_stall=sink_stall, stimulus="hardware",
                                    priority_weights=priority_weights)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    compile_seconds = _compile(progress, lambda: StimulusModel(cfg).warm(
        settings, stall_limit=stall_limit))
    t0 = time.perf_counter()
    bar = _progress_bar("model", cycles) if progress else None
    model = StimulusModel(cfg).run(
        settings, stall_limit=stall_limit,
        progress=(lambda cycle: bar(cycle, time.perf_counter() - t0)) if bar else None)
    model_seconds = time.perf_counter() - t0
    model.save(out / "model_stats.npz")
    model_summary = stimulus_summary(cfg, settings, model)
    traffic_section = {"pattern": traffic, "load": float(load), "seed": int(seed),
                       "cycles": int(cycles), "packet_lengths": packet_lengths,
                       "priority_weights": priority_weights, "sink_stall": sink_stall,
                       "stimulus": "hardware", "settings": settings.to_dict()}
    results = _opening(cfg, sim, traffic_section, model_summary, model.cycles, model_seconds,
                       compile_seconds)
    if sim != "model":
        from ..tb.stimulus.runner import run_stimulus_rtl
        waves, results["build_seconds"] = _build(cfg, sim, "stimulus", waves, build_root)
        bar = _progress_bar(sim, cycles) if progress else None
        rtl, timing = run_stimulus_rtl(
            cfg, settings, sim=sim, out_dir=out, waves=waves, stall_limit=stall_limit,
            build_root=build_root,
            progress=(lambda line: bar(line["cycle"], line["seconds"])) if bar else None)
        match = compare_stats(rtl, model)
        if not match["exact"]:
            (out / "mismatch.txt").write_text(
                "RTL statistics differ from the model's:\n" + "\n".join(match["problems"]) + "\n")
        results.update(stimulus_summary(cfg, settings, rtl))
        results["match"] = match
        results["wall_seconds"] = timing["run_seconds"]
        results["readout_seconds"] = timing["readout_seconds"]
        results["cycles_per_second"] = rtl.cycles / timing["run_seconds"] \
            if timing["run_seconds"] else None
    write_json(out / "results.json", results)
    return results


def _opening(cfg: FabricConfig, sim: str, traffic: dict, model_summary: dict, model_cycles: int,
             model_seconds: float, compile_seconds: float, *,
             section: str | None = None, threads: int = 1) -> dict:
    """The sections every ``results.json`` starts with. For a model run the model's figures
    are the run's: merged in, or under ``section``, with no ``match``. The kernels'
    compilation is timed apart (``compile_seconds``), out of the model's speed; ``threads``
    stepped the model's routers (the run's ``threads`` when the model is the run)."""
    rate = model_cycles / model_seconds if model_seconds else None
    results = {"config": cfg.to_dict(), "simulator": sim, "versions": _versions(sim),
               "traffic": traffic,
               "model": {**model_summary, "threads": threads, "wall_seconds": model_seconds,
                         "cycles_per_second": rate},
               "compile_seconds": compile_seconds}
    if sim == "verilator":
        from ..tb.runner import verilator_cxx_opt, verilator_threads
        results["threads"] = verilator_threads()
        results["cxx_opt"] = verilator_cxx_opt()
    if sim == "model":
        if section is None:
            results.update(model_summary)
        else:
            results[section] = model_summary
        results.update(match=None, threads=threads, wall_seconds=model_seconds,
                       cycles_per_second=rate)
    return results


def _compile(progress: bool, warm) -> float:
    """Run ``warm``, the model's warm-up for the run about to be timed, and return its
    seconds, the run's ``compile_seconds``.

    The warm-up compiles every kernel the run calls, for the types of the run's
    arguments (or loads it from numba's cache), so that none is compiled inside
    the run's ``cycles_per_second``: each model warms its own (``warm`` of
    :class:`~superfabric.sim.fabric.top.FabricModel`,
    :class:`~superfabric.sim.stimulus.top.StimulusModel`,
    :class:`~superfabric.sim.rdma.fabric.RdmaFabricModel`). With ``progress``,
    say so on stderr when it takes more than a moment (the first run: numba
    caches them after).
    """
    t0 = time.perf_counter()
    if progress:
        from .progress import activity
        with activity("superfabric: compiling the model's kernels (the first run only; numba "
                      "caches them)", short="superfabric: compiling", after=1.0):
            warm()
    else:
        warm()
    return time.perf_counter() - t0


def _activity(progress: bool, who: str, what: str, cycles: int | None):
    """A sign of life while a long run of ``who`` (the model, a simulator) has no count to
    show (with ``progress``); ``cycles``, the traffic's window (None: a run with none, as
    a collective's)."""
    from contextlib import nullcontext
    if not progress:
        return nullcontext()
    from .progress import activity
    window = f" over a {cycles:,}-cycle window" if cycles is not None else ""
    return activity(f"{who}: {what}{window}", short=who, after=3.0)


def _progress_bar(who: str, cycles: int):
    """A callback ``show(cycle, seconds)`` that shows how far a run of ``cycles`` cycles
    (its generation window) is, ``seconds`` after it began, on stderr."""
    from .progress import Progress
    bar = Progress(cycles, every=10.0, unit="cycle")

    def show(cycle: int, seconds: float) -> None:
        rate = cycle / seconds if seconds else 0.0
        bar.show(cycle, f"{rate:,.0f}/s", f"{who}: cycle {cycle:,} (window {cycles:,}), "
                 f"{rate:,.0f} cycles/s")
    return show


def _build(cfg: FabricConfig, sim: str, top: str, waves: bool | None,
           build_root: str | Path) -> tuple[bool, float]:
    """Build (or reuse) ``top`` before the run, so that the run's figures time the
    simulation alone; returns the waves setting resolved and the build's seconds."""
    from ..tb.runner import build, resolve_waves
    waves = resolve_waves(waves)
    t0 = time.perf_counter()
    build(cfg, sim=sim, top=top, waves=waves, build_root=build_root)
    return waves, time.perf_counter() - t0


def _summary(cfg: FabricConfig, trace: Trace, rec: Records) -> dict:
    """Throughput, latency and packets of a run; for a fabric, its ``fabric`` section too."""
    out = summarize(trace, rec, cfg.endpoints)
    if cfg.fabric.is_fabric:
        out["fabric"] = fabric_summary(cfg, trace, rec)
    return out


def link_of(cfg: FabricConfig, text: str | None, stimulus: str = "trace") -> int:
    """The id of the link ``ROUTER:PORT`` names, a router's output toward another router
    of the fabric (-1 for None); one line naming the value and what is allowed if it
    names none."""
    if text is None:
        return -1
    where = f"--capture-link = {text!r}"
    if not cfg.fabric.is_fabric:
        raise TrafficError(f"{where}: a single switch has no links between routers; needs a "
                           f"torus or a fat tree (fabric.topology)")
    if stimulus == "hardware":
        raise TrafficError(f"{where}: a hardware-stimulus run records no packets (run it "
                           f"with --stimulus trace)")
    topo = Topology.of(cfg)
    router, colon, port = str(text).partition(":")
    if not (colon and router.isdigit() and port.isdigit()):
        raise TrafficError(f"{where}: must be ROUTER:PORT, e.g. 0:1 (a router's link output)")
    router, port = int(router), int(port)
    if router >= topo.routers:
        raise TrafficError(f"{where}: router must be in 0..{topo.routers - 1}")
    ports = sorted(p for r, p in topo.link_id if r == router)
    if port not in ports:
        raise TrafficError(f"{where}: port {port} of router {router} leads to no router; its "
                           f"link ports are {', '.join(map(str, ports))}")
    return topo.link_id[(router, port)]


def _captured(cfg: FabricConfig, link: int, packets: int) -> dict:
    """``results.json``'s ``capture_link``: the link, where it leads, the packets that
    crossed it."""
    router, port, peer, peer_port = Topology.of(cfg).links[link]
    return {"router": router, "port": port, "link": link, "peer": peer, "peer_port": peer_port,
            "packets": packets}


def _crossed(model) -> int:
    """How many of an RDMA run's delivered packets crossed the captured link."""
    from ..sim.rdma.records import DELIVERED_COLUMNS
    return int((model.delivered[:, DELIVERED_COLUMNS.index("link_cycle")] >= 0).sum())


def _save_packets(path: Path, trace: Trace, model: Records, rtl: Records | None, *,
                  captured: bool = False) -> None:
    """``packets.npz`` and ``pfc_frames.npz`` of a switch or fabric run (docs/spec/results.md);
    with ``captured``, the captured link's columns too."""
    save_compressed(path.with_name("pfc_frames.npz"), model=model.pfc_frames,
                     **({"rtl": rtl.pfc_frames} if rtl is not None else {}))
    cols = {"tag": trace.tag, "gen": trace.gen, "src": trace.src, "dst": trace.dst,
            "prio": trace.prio, "length": trace.length,
            "model_out": model.out_port, "model_head": model.head, "model_tail": model.tail,
            "model_dropped": model.dropped, "ecn": trace.ecn,
            "model_ecn_out": model.ecn_out, "model_ecn_backlog": model.ecn_backlog,
            "model_hops": model.hops, "model_path": model.path}
    if captured:
        cols.update(model_link_cycle=model.link_cycle, model_link_ecn=model.link_ecn)
    if rtl is not None:
        cols.update(rtl_out=rtl.out_port, rtl_head=rtl.head, rtl_tail=rtl.tail,
                    rtl_dropped=rtl.dropped, rtl_payload_ok=rtl.payload_ok,
                    rtl_ecn_out=rtl.ecn_out, rtl_ecn_backlog=rtl.ecn_backlog, rtl_hops=rtl.hops)
    save_compressed(path, **cols)


def _versions(sim: str) -> dict:
    versions = {}
    for dist in ("superfabric", "amaranth", "cocotb", "numpy"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    if sim != "model":
        import subprocess
        from ..tb.runner import find_simulator
        exe = find_simulator(sim)
        flag = "--version" if sim == "verilator" else "-V"
        out = subprocess.run([str(exe), flag], capture_output=True, text=True).stdout
        versions[sim] = out.splitlines()[0] if out else None
    return versions
