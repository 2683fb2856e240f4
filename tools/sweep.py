"""``superfabric sweep``: many runs over loads, patterns, seeds, simulators and config keys, on Dask.

Each point is one task that writes its own run directory under
``DIR/points/<id>/`` (``results.json`` and ``packets.npz``, or for ``rdma-*``
traffic ``workload.npz`` and the records, as ``superfabric run`` does), or
``error.json`` with a one-line error when it fails, so nothing is lost. A
sweep is resumable: points whose ``results.json`` holds a JSON object are
skipped; failed ones, and ones whose ``results.json`` is unreadable or cut
short, are run again. ``DIR/sweep.json`` records the command's arguments and
the list of points. A sweep is of switch traffic or of RDMA traffic, not
both: the two measure different things, and their reports differ.

Tasks run on a Dask ``distributed`` cluster: a local one with ``workers``
processes by default, or an existing scheduler given by its address, so the
same command scales from a laptop to a cluster. RTL points share the
simulator build cache, which is locked per configuration, so concurrent
workers build each configuration once.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from ..config import ConfigError, FabricConfig, parse_override
from .progress import Progress

__all__ = ["SweepError", "SweepPlan", "config_variants", "plan_sweep", "parse_loads",
           "run_sweep"]


class SweepError(ValueError):
    """A bad sweep argument; the message is one line naming it."""


def parse_loads(spec: str) -> list[float]:
    """``start:stop:step`` (inclusive) or a comma list, each load in (0, 1]."""
    try:
        if ":" in spec:
            start, stop, step = (float(x) for x in spec.split(":"))
            if step <= 0:
                raise SweepError(f"--loads = {spec!r}: the step must be positive")
            count = int(round((stop - start) / step)) + 1
            loads = [round(start + k * step, 10) for k in range(max(count, 0))]
        else:
            loads = [float(x) for x in spec.split(",")]
    except ValueError as e:
        if isinstance(e, SweepError):
            raise
        raise SweepError(f"--loads = {spec!r}: must be START:STOP:STEP or a comma list of "
                         f"numbers") from None
    if not loads or any(not 0 < x <= 1 for x in loads):
        raise SweepError(f"--loads = {spec!r}: every load must be in (0, 1]")
    return loads


def _parse_vary(items: list[str]) -> list[tuple[str, list]]:
    axes = []
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or "." not in key or not values:
            raise SweepError(f"--vary {item!r}: must look like section.key=V1,V2,...")
        parsed = [parse_override(f"{key}={v}")[2] for v in values.split(",")]
        axes.append((key.strip(), parsed))
    return axes


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", str(text)).strip("_")


def config_variants(base: FabricConfig, vary: list[str]) -> list[tuple[dict, FabricConfig, str]]:
    """The cartesian product of ``--vary section.key=V1,V2`` axes over ``base``.

    Returns
    -------
    list of (dict, FabricConfig, str)
        Per combination: the varied ``section.key`` values, the validated
        configuration, and a tag for point ids (``ports8-data_width64``;
        empty without axes).
    """
    axes = _parse_vary(list(vary))
    keys = [k for k, _ in axes]
    out = []
    for combo in itertools.product(*(values for _, values in axes)):
        varied = dict(zip(keys, combo))
        tag = "-".join(f"{_slug(k.split('.')[-1])}{_slug(v)}" for k, v in varied.items())
        out.append((varied, _vary(base, varied), tag))
    return out


@dataclass
class SweepPlan:
    """The points of a sweep and the base configuration they vary."""

    base: FabricConfig
    points: list[dict]
    spec: dict


def plan_sweep(*, base: FabricConfig, overrides: list[str], traffic: list[str],
               loads: list[float], seeds: int, sims: list[str], cycles: int,
               vary: list[str] = (), packet_lengths: str = "fixed:1",
               sink_stall: float = 0.0, bad_fraction: float = 0.0,
               stimulus: str = "trace", priority_weights: list[float] | None = None) -> SweepPlan:
    """Expand the cartesian product of varied keys, patterns, loads, seeds and simulators.

    Every varied configuration is validated here, before anything runs.
    ``rdma-*`` patterns need ``rdma.enabled`` in each, take no ``--lengths``
    or ``--sink-stall``, and cannot share a sweep with switch patterns;
    ``--bad-fraction`` is for them only (:class:`SweepError` naming the argument).
    ``stimulus = "hardware"`` runs switch patterns on the RTL's own generators;
    its points' ids carry ``hw``.
    """
    from .run import SIMS, STIMULI
    for sim in sims:
        if sim not in SIMS:
            raise SweepError(f"--sim = {sim!r}: each must be one of {', '.join(SIMS)}")
    if stimulus not in STIMULI:
        raise SweepError(f"--stimulus = {stimulus!r}: must be one of {', '.join(STIMULI)}")
    if seeds < 1:
        raise SweepError(f"--seeds = {seeds}: must be at least 1")
    if cycles < 1:
        raise SweepError(f"--cycles = {cycles}: must be at least 1")
    rdma = _check_traffic(traffic, packet_lengths=packet_lengths, sink_stall=sink_stall)
    if not 0 <= bad_fraction <= 1:
        raise SweepError(f"--bad-fraction = {bad_fraction!r}: must be in 0..1")
    if bad_fraction and not rdma:
        raise SweepError(f"--bad-fraction = {bad_fraction!r}: only for RDMA traffic (rdma-*)")
    if rdma and priority_weights is not None:
        raise SweepError(f"--priority-weights = {priority_weights!r}: not for RDMA traffic")
    if rdma and stimulus == "hardware":
        raise SweepError(f"--stimulus = 'hardware': only for switch traffic, not "
                         f"{','.join(traffic)}")
    points = []
    for varied, cfg, tag in config_variants(base, vary):
        if rdma and not cfg.rdma.enabled:
            setting = ", ".join(f"{k}={v}" for k, v in varied.items())
            where = f" (with {setting})" if varied else ""
            raise SweepError(f"rdma.enabled = false{where}: must be true for --traffic "
                             f"{','.join(traffic)} (add --set rdma.enabled=true)")
        for pattern, load, seed, sim in itertools.product(traffic, loads, range(1, seeds + 1), sims):
            hw = "hw" if stimulus == "hardware" else ""
            pid = "-".join(x for x in (sim, hw, _slug(pattern), tag, f"l{load:.3f}", f"s{seed}")
                           if x)
            points.append({"id": pid, "vary": varied, "config": cfg.to_dict(), "traffic": pattern,
                           "load": load, "seed": seed, "sim": sim, "cycles": cycles,
                           "packet_lengths": packet_lengths, "sink_stall": sink_stall,
                           "bad_fraction": bad_fraction, "stimulus": stimulus,
                           "priority_weights": priority_weights})
    spec = {"overrides": list(overrides), "traffic": traffic, "loads": loads, "seeds": seeds,
            "sims": sims, "cycles": cycles, "vary": list(vary), "packet_lengths": packet_lengths,
            "sink_stall": sink_stall, "bad_fraction": bad_fraction, "stimulus": stimulus,
            "priority_weights": priority_weights, "base": base.to_dict()}
    return SweepPlan(base=base, points=points, spec=spec)


def _check_traffic(traffic: list[str], *, packet_lengths: str, sink_stall: float) -> bool:
    """Check the patterns; True for RDMA traffic (``rdma-*``), False for switch traffic."""
    from ..sim.rdma.traffic import RDMA_PATTERNS
    from ..sim.traffic import PATTERNS
    allowed = (*PATTERNS, *RDMA_PATTERNS)
    for pattern in traffic:
        if pattern.split(":")[0] not in allowed:
            raise SweepError(f"--traffic = {pattern!r}: each pattern must be one of "
                             f"{', '.join(allowed)}")
    rdma = [p for p in traffic if p.split(":")[0] in RDMA_PATTERNS]
    if not rdma:
        return False
    if len(rdma) < len(traffic):
        switch = [p for p in traffic if p not in rdma]
        raise SweepError(f"--traffic = {','.join(traffic)!r}: switch patterns "
                         f"({', '.join(switch)}) and RDMA patterns ({', '.join(rdma)}) cannot "
                         f"share a sweep; run one sweep of each")
    if packet_lengths != "fixed:1":
        raise SweepError(f"--lengths = {packet_lengths!r}: not for RDMA traffic (the workload "
                         f"draws the work request lengths)")
    if sink_stall:
        raise SweepError(f"--sink-stall = {sink_stall!r}: must be 0 with RDMA traffic (the "
                         f"engines always accept their flits)")
    return True


def _vary(base: FabricConfig, varied: dict) -> FabricConfig:
    """``base`` with the varied ``section.key`` values, validated."""
    data = base.to_dict()
    for name, value in varied.items():
        section, _, key = name.partition(".")
        if section not in data:
            raise ConfigError(f"{section}: unknown section (allowed: {', '.join(data)})")
        data[section][key] = value
    return FabricConfig.from_dict(data)


def _done(point_dir: Path) -> bool:
    """The point ran: its ``results.json`` holds a JSON object. One cut short (a crash, a
    full disk, a copy gone wrong) does not count, so the sweep runs the point again."""
    try:
        return isinstance(json.loads((point_dir / "results.json").read_text()), dict)
    except (OSError, ValueError):
        return False


def run_point_task(point: dict, out_root: str, build_root: str) -> dict:
    """One sweep point, run in a Dask worker; never raises, records the outcome."""
    from .run import run_point
    out = Path(out_root) / point["id"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "error.json").unlink(missing_ok=True)
    try:
        from distributed import get_worker
        worker = get_worker().address
    except ValueError:
        worker = None
    t0 = time.perf_counter()
    try:
        cfg = FabricConfig.from_dict(point["config"])
        res = run_point(cfg, traffic=point["traffic"], load=point["load"], cycles=point["cycles"],
                        seed=point["seed"], sim=point["sim"], out_dir=out,
                        packet_lengths=point["packet_lengths"], sink_stall=point["sink_stall"],
                        bad_fraction=point.get("bad_fraction", 0.0),
                        stimulus=point.get("stimulus", "trace"),
                        priority_weights=point.get("priority_weights"), build_root=build_root)
    except Exception as e:  # a failed point is recorded, whatever failed
        message = " ".join(f"{type(e).__name__}: {e}".split())
        (out / "error.json").write_text(json.dumps(
            {"point": point, "error": message, "worker": worker,
             "traceback": traceback.format_exc()}, indent=2) + "\n")
        return {"id": point["id"], "status": "failed", "error": message,
                "seconds": time.perf_counter() - t0}
    # Written last, so an interrupted point never looks finished.
    res["sweep"] = {"id": point["id"], "vary": point["vary"], "worker": worker}
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(res, indent=2) + "\n")
    tmp.replace(out / "results.json")
    exact = None if res["match"] is None else res["match"]["exact"]
    return {"id": point["id"], "status": "done", "exact": exact,
            "seconds": time.perf_counter() - t0}


def run_sweep(plan: SweepPlan, out_dir: str | Path, *, workers: int | None = None,
              scheduler: str | None = None, build_root: str | Path = "build",
              stream=sys.stderr) -> dict:
    """Run the plan's points not already done; return a summary of the whole sweep."""
    from distributed import Client, LocalCluster, as_completed

    out = Path(out_dir)
    points_dir = out / "points"
    points_dir.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps({"spec": plan.spec, "points": plan.points},
                                               indent=2) + "\n")
    todo = [p for p in plan.points if not _done(points_dir / p["id"])]
    skipped = len(plan.points) - len(todo)
    stream.write(f"sweep: {len(plan.points)} points, {skipped} already done, {len(todo)} to run\n")
    outcomes = []
    if todo:
        cluster = None
        if scheduler:
            client = Client(scheduler)
        else:
            cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1,
                                   processes=True, dashboard_address=None)
            client = Client(cluster)
        try:
            progress = Progress(len(todo), stream)
            futures = [client.submit(run_point_task, p, str(points_dir.resolve()),
                                     str(Path(build_root).resolve()), pure=False,
                                     key=f"superfabric-point-{p['id']}-{time.time_ns()}")
                       for p in todo]
            for future in as_completed(futures):
                outcome = future.result()
                outcomes.append(outcome)
                status = outcome["status"] if outcome["status"] == "failed" else (
                    "mismatch" if outcome.get("exact") is False else "ok")
                progress.show(len(outcomes), status, f"sweep: {len(outcomes)}/{len(todo)} "
                              f"{outcome['id']} {status}, {outcome['seconds']:.1f}s")
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    failed = [o for o in outcomes if o["status"] == "failed"]
    mismatched = [o for o in outcomes if o.get("exact") is False]
    return {"points": len(plan.points), "skipped": skipped, "ran": len(outcomes),
            "failed": failed, "mismatched": mismatched}
