"""``superfabric sweep``: many runs over loads, patterns, seeds, simulators and config keys, on Dask.

Each point is one task that writes its own run directory under
``DIR/points/<id>/`` (``results.json`` and ``packets.npz``, or for ``rdma-*``
traffic ``workload.npz`` and the records, as ``superfabric run`` does), or
``error.json`` with a one-line error when it fails (a run that stalls or
loses RDMA requests fails too, see :func:`~superfabric.tools.run.run_failure`),
so nothing is lost. A point's directory is named by the exact values that
set it apart (simulator, pattern, varied keys, load as Python writes the
float, seed), and its ``results.json`` records the whole point it ran
(``sweep.point``: configuration, traffic, cycles, ...), so that a resume
knows what it holds. A sweep is resumable: points whose ``results.json``
records exactly the point asked for are skipped; failed ones, and ones whose
``results.json`` is unreadable or cut short, are run again; points that ran
with other settings are refused in one line unless ``rerun_changed``, which
runs them again. Every point's configuration and traffic are checked, with
the same check ``superfabric run`` makes, before the first one runs; a sweep
has at most :data:`MAX_POINTS` points. ``DIR/sweep.json`` records the
command's arguments and the list of points; ``DIR/.sweep.lock`` is held
(``flock``, released when the process ends, however it ends) while a sweep
runs, so a second sweep into the same directory stops with one line. A sweep
is of switch traffic, of RDMA traffic or of collectives, one kind only: they
measure different things, and their reports differ. ``--vary traffic.KEY``
axes add a parameter to every pattern (a collective's sizes and algorithms);
a collective has no offered load.

Tasks run on a Dask ``distributed`` cluster: a local one with ``workers``
processes by default, or an existing scheduler given by its address (reached
within :data:`SCHEDULER_TIMEOUT` seconds, or a one-line error), so the same
command scales from a laptop to a cluster. RTL points share the
simulator build cache, which is locked per configuration, so concurrent
workers build each configuration once.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import logging
import os
import re
import socket
import sys
import time
import traceback
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..config import ConfigError, FabricConfig, parse_override
from .progress import Progress

__all__ = ["MAX_POINTS", "SCHEDULER_TIMEOUT", "SweepError", "SweepPlan", "config_variants",
           "plan_sweep", "parse_loads", "run_sweep"]

#: The most points one sweep may have: past it a sweep is a mistake (a step too fine), not a plan.
MAX_POINTS = 10_000
#: The offered loads of a sweep of switch or RDMA traffic that names none.
DEFAULT_LOADS = "0.1:1.0:0.1"
#: ``--vary traffic.KEY=V1,V2``: an axis of a traffic pattern's parameter, not of a config key.
TRAFFIC_AXIS = "traffic."
#: Seconds to reach a Dask scheduler given by its address before giving up in one line.
SCHEDULER_TIMEOUT = 10.0


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
            if count > MAX_POINTS:
                raise SweepError(f"--loads = {spec!r}: {count:,} loads; a sweep has at most "
                                 f"{MAX_POINTS:,} points (use a coarser step)")
            loads = [round(start + k * step, 10) for k in range(max(count, 0))]
        else:
            loads = [float(x) for x in spec.split(",")]
    except (ValueError, OverflowError) as e:
        if isinstance(e, SweepError):
            raise
        raise SweepError(f"--loads = {spec!r}: must be START:STOP:STEP or a comma list of "
                         f"numbers") from None
    if not loads or any(not 0 < x <= 1 for x in loads):
        raise SweepError(f"--loads = {spec!r}: every load must be in (0, 1]")
    twice = sorted(x for x, n in Counter(loads).items() if n > 1)
    if twice:
        raise SweepError(f"--loads = {spec!r}: {twice[0]!r} given twice; each load once")
    return loads


def split_patterns(text: str) -> list[str]:
    """``--traffic`` as a list of patterns: split at commas, except those between a
    pattern's parameters (``collective:op=allreduce,algo=ring,uniform`` is two patterns:
    a piece with ``=`` and no ``:`` before it continues the pattern before it)."""
    patterns = []
    for piece in text.split(","):
        name, _, _ = piece.partition("=")
        if patterns and "=" in piece and ":" not in name:
            patterns[-1] += "," + piece
        else:
            patterns.append(piece)
    return patterns


def _parse_vary(items: list[str]) -> list[tuple[str, list]]:
    axes = []
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or "." not in key or not values:
            raise SweepError(f"--vary {item!r}: must look like section.key=V1,V2,...")
        key = key.strip()
        if key in (k for k, _ in axes):
            raise SweepError(f"--vary {key}: given twice; give each key once, with all its "
                             f"values (--vary {key}=V1,V2,...)")
        if key.startswith(TRAFFIC_AXIS):
            # A pattern's parameter: its values are checked with the pattern, point by point.
            parsed = values.split(",")
        else:
            parsed = [parse_override(f"{key}={v}")[2] for v in values.split(",")]
        axes.append((key, parsed))
    return axes


def _with_params(pattern: str, params: dict) -> str:
    """``pattern`` with the parameters of the ``--vary traffic.KEY`` axes added."""
    name, _, given = pattern.partition(":")
    own = [item.partition("=")[0].strip() for item in given.split(",") if item]
    for key in params:
        if key in own:
            raise SweepError(f"--vary traffic.{key}: the pattern {pattern!r} sets {key} "
                             f"already; give its values in --vary only")
    extra = ",".join(f"{k}={v}" for k, v in params.items())
    return f"{name}:{','.join(x for x in (given, extra) if x)}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", str(text)).strip("_")


def config_variants(base: FabricConfig, vary: list[str], *,
                    traffic_axes: bool = False) -> list[tuple[dict, FabricConfig, str]]:
    """The cartesian product of ``--vary section.key=V1,V2`` axes over ``base``; the
    ``traffic.KEY`` axes, where ``traffic_axes`` allows them, are the patterns' part
    (:func:`_pattern_variants`), else a :class:`SweepError`.

    Returns
    -------
    list of (dict, FabricConfig, str)
        Per combination: the varied ``section.key`` values, the validated
        configuration, and a tag for point ids (``ports8-data_width64``;
        empty without axes).
    """
    axes = _parse_vary(list(vary))
    for key, _ in axes:
        if key.startswith(TRAFFIC_AXIS) and not traffic_axes:
            raise SweepError(f"--vary {key}: a traffic pattern's parameter, for superfabric "
                             f"sweep only; vary configuration keys here")
    axes = [a for a in axes if not a[0].startswith(TRAFFIC_AXIS)]
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
               loads: list[float] | None, seeds: int, sims: list[str], cycles: int,
               vary: list[str] = (), packet_lengths: str = "fixed:1",
               sink_stall: float = 0.0, bad_fraction: float = 0.0,
               stimulus: str = "trace", priority_weights: list[float] | None = None) -> SweepPlan:
    """Expand the cartesian product of varied keys, patterns, loads, seeds and simulators.

    Every varied configuration, and every point's traffic, is validated
    here with :func:`~superfabric.tools.run.prepare_point` (the check
    ``superfabric run`` makes), before anything runs; a plan has at most
    :data:`MAX_POINTS` points, and no two points share a directory.
    ``rdma-*`` patterns need ``rdma.enabled`` in each, take no ``--lengths``
    or ``--sink-stall``, and cannot share a sweep with switch patterns;
    ``--bad-fraction`` is for them only (:class:`SweepError` naming the argument).
    ``stimulus = "hardware"`` runs switch patterns on the RTL's own generators;
    its points' ids carry ``hw``. ``loads`` None is :data:`DEFAULT_LOADS`; a
    ``collective:`` pattern takes none (its points have no load) and shares a
    sweep with no other kind. ``--vary traffic.KEY=V1,V2`` axes add a
    parameter to every pattern (sizes and algorithms of a collective).
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
    kind = _check_traffic(traffic, packet_lengths=packet_lengths, sink_stall=sink_stall)
    rdma = kind != "switch"
    if kind == "collective":
        if loads is not None:
            raise SweepError("--loads: not for collective traffic (a collective runs until every "
                             "accelerator holds its result; sweep its sizes with --vary "
                             "traffic.bytes=N1,N2,...)")
        loads = [None]
    elif loads is None:
        loads = parse_loads(DEFAULT_LOADS)
    patterns = _pattern_variants(traffic, vary)
    if not 0 <= bad_fraction <= 1:
        raise SweepError(f"--bad-fraction = {bad_fraction!r}: must be in 0..1")
    if bad_fraction and not rdma:
        raise SweepError(f"--bad-fraction = {bad_fraction!r}: only for RDMA traffic (rdma-*)")
    if rdma and priority_weights is not None:
        raise SweepError(f"--priority-weights = {priority_weights!r}: not for RDMA traffic")
    if rdma and stimulus == "hardware":
        raise SweepError(f"--stimulus = 'hardware': only for switch traffic, not "
                         f"{','.join(traffic)}")
    variants = config_variants(base, vary, traffic_axes=True)
    count = len(variants) * len(patterns) * len(loads) * seeds * len(sims)
    if count > MAX_POINTS:
        raise SweepError(f"{count:,} points ({len(variants)} configurations x {len(patterns)} "
                         f"patterns x {len(loads)} loads x {seeds} seeds x {len(sims)} "
                         f"simulators): a sweep has at most {MAX_POINTS:,}")
    points = []
    for varied, cfg, tag in variants:
        if rdma and not cfg.rdma.enabled:
            setting = ", ".join(f"{k}={v}" for k, v in varied.items())
            where = f" (with {setting})" if varied else ""
            raise SweepError(f"rdma.enabled = false{where}: must be true for --traffic "
                             f"{','.join(traffic)} (add --set rdma.enabled=true)")
        for (pattern, params), load, seed, sim in itertools.product(patterns, loads,
                                                                    range(1, seeds + 1), sims):
            hw = "hw" if stimulus == "hardware" else ""
            # The load exactly as Python writes it: two loads never share a directory. The
            # varied parameters are in the pattern's slug already.
            at = "" if load is None else f"l{float(load)!r}"
            pid = "-".join(x for x in (sim, hw, _slug(pattern), tag, at, f"s{seed}") if x)
            points.append({"id": pid, "vary": {**varied, **params}, "config": cfg.to_dict(),
                           "traffic": pattern,
                           "load": load, "seed": seed, "sim": sim, "cycles": cycles,
                           "packet_lengths": packet_lengths, "sink_stall": sink_stall,
                           "bad_fraction": bad_fraction, "stimulus": stimulus,
                           "priority_weights": priority_weights})
    shared = [pid for pid, n in Counter(p["id"] for p in points).items() if n > 1]
    if shared:
        raise SweepError(f"two points would share the directory {shared[0]!r} (values that "
                         f"differ only in characters a directory name drops); give them apart")
    _check_points(points)
    spec = {"overrides": list(overrides), "traffic": traffic, "loads": loads, "seeds": seeds,
            "sims": sims, "cycles": cycles, "vary": list(vary), "packet_lengths": packet_lengths,
            "sink_stall": sink_stall, "bad_fraction": bad_fraction, "stimulus": stimulus,
            "priority_weights": priority_weights, "base": base.to_dict()}
    return SweepPlan(base=base, points=points, spec=spec)


def _check_points(points: list[dict]) -> None:
    """Put every point through the check ``superfabric run`` makes, before any runs.

    Points that differ only in their simulator share their traffic, so each
    is checked once, and a switch trace without drawing its packets. A
    refusal is the run's one line, naming the varied keys of the point when
    there are any.
    """
    from .run import prepare_point
    seen = set()
    for point in points:
        key = json.dumps({k: v for k, v in point.items() if k not in ("id", "sim")},
                         sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        try:
            prepare_point(FabricConfig.from_dict(point["config"]), traffic=point["traffic"],
                          load=point["load"], cycles=point["cycles"], seed=point["seed"],
                          sim=point["sim"], packet_lengths=point["packet_lengths"],
                          sink_stall=point["sink_stall"], bad_fraction=point["bad_fraction"],
                          stimulus=point["stimulus"], priority_weights=point["priority_weights"],
                          build=False)
        except ValueError as e:
            where = ", ".join(f"{k}={v}" for k, v in point["vary"].items())
            raise type(e)(f"{e} (with {where})" if where else str(e)) from None


def _check_traffic(traffic: list[str], *, packet_lengths: str, sink_stall: float) -> str:
    """Check the patterns; their one kind (``switch``, ``rdma`` or ``collective``, as
    :func:`~superfabric.tools.report.source.pattern_kind` tells them: they get different
    reports)."""
    from ..sim.collective.pattern import PATTERN as COLLECTIVE
    from ..sim.rdma.traffic import RDMA_PATTERNS
    from ..sim.traffic import PATTERNS
    from .report.source import KIND_NAMES, pattern_kind
    allowed = (*PATTERNS, *RDMA_PATTERNS, COLLECTIVE)
    for pattern in traffic:
        if pattern.split(":")[0] not in allowed:
            raise SweepError(f"--traffic = {pattern!r}: each pattern must be one of "
                             f"{', '.join(allowed)}")
    kinds = {}
    for pattern in traffic:
        kinds.setdefault(pattern_kind(pattern), []).append(pattern)
    if len(kinds) > 1:
        (a, first), (b, second) = list(kinds.items())[:2]
        raise SweepError(f"--traffic = {','.join(traffic)!r}: {KIND_NAMES[a]} patterns "
                         f"({', '.join(first)}) and {KIND_NAMES[b]} patterns ({', '.join(second)}) "
                         f"cannot share a sweep; run one sweep of each")
    kind = next(iter(kinds))
    if kind == "switch":
        return kind
    if packet_lengths != "fixed:1":
        raise SweepError(f"--lengths = {packet_lengths!r}: not for RDMA traffic (the workload "
                         f"draws the work request lengths)")
    if sink_stall:
        raise SweepError(f"--sink-stall = {sink_stall!r}: must be 0 with RDMA traffic (the "
                         f"engines always accept their flits)")
    return kind


def _pattern_variants(traffic: list[str], vary: list[str]) -> list[tuple[str, dict]]:
    """Every pattern with every combination of the ``--vary traffic.KEY`` axes: (pattern with
    those parameters, the parameters as ``{"traffic.KEY": value}``)."""
    axes = [(k, v) for k, v in _parse_vary(list(vary)) if k.startswith(TRAFFIC_AXIS)]
    out = []
    for pattern in traffic:
        for combo in itertools.product(*(values for _, values in axes)):
            params = {k: v for (k, _), v in zip(axes, combo)}
            named = {k[len(TRAFFIC_AXIS):]: v for k, v in params.items()}
            out.append((_with_params(pattern, named) if named else pattern, params))
    return out


def _vary(base: FabricConfig, varied: dict) -> FabricConfig:
    """``base`` with the varied ``section.key`` values, validated."""
    data = base.to_dict()
    for name, value in varied.items():
        section, _, key = name.partition(".")
        if section not in data:
            raise ConfigError(f"{section}: unknown section (allowed: {', '.join(data)})")
        data[section][key] = value
    return FabricConfig.from_dict(data)


def _recorded(point: dict) -> dict:
    """The settings of ``point`` as its ``results.json`` records them (``sweep.point``)."""
    return json.loads(json.dumps({k: v for k, v in point.items() if k != "id"}))


def _difference(recorded, asked, where: str = "") -> str | None:
    """The first setting in which ``recorded`` differs from ``asked``, as ``key was -> now``."""
    if isinstance(recorded, dict) and isinstance(asked, dict):
        for key in sorted(set(recorded) | set(asked), key=str):
            diff = _difference(recorded.get(key), asked.get(key), f"{where}.{key}" if where
                               else str(key))
            if diff:
                return diff
        return None
    if recorded != asked:
        return f"{where or 'settings'} {json.dumps(recorded)} -> {json.dumps(asked)}"
    return None


def _status(point_dir: Path, point: dict) -> tuple[str, str | None]:
    """Whether a point is ``done``, ``stale`` (ran with other settings; the second item says
    which) or ``todo``. A ``results.json`` cut short (a crash, a full disk, a copy gone wrong),
    one left by an interrupted point, and a failed point are ``todo``: they run again."""
    try:
        results = json.loads((point_dir / "results.json").read_text())
    except (OSError, ValueError):
        return "todo", None
    if not isinstance(results, dict) or not isinstance(results.get("sweep"), dict):
        return "todo", None
    sweep = results["sweep"]
    if "point" not in sweep:
        return "stale", "it records no settings (an older sweep)"
    diff = _difference(sweep["point"], _recorded(point))
    if diff:
        return "stale", diff
    return ("todo", None) if sweep.get("failure") else ("done", None)


def run_point_task(point: dict, out_root: str, build_root: str) -> dict:
    """One sweep point, run in a Dask worker; never raises, records the outcome.

    A run that finishes but fails (:func:`~superfabric.tools.run.run_failure`)
    keeps its ``results.json``, with the reason in ``sweep.failure``, and
    writes ``error.json`` too.
    """
    from .run import run_failure, run_point, write_json
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
        write_json(out / "error.json", {"point": point, "error": message, "worker": worker,
                                        "traceback": traceback.format_exc()})
        return {"id": point["id"], "status": "failed", "error": message,
                "seconds": time.perf_counter() - t0}
    failure = run_failure(res)
    # Written last, so an interrupted point never looks finished.
    res["sweep"] = {"id": point["id"], "vary": point["vary"], "worker": worker,
                    "point": _recorded(point), "failure": failure}
    write_json(out / "results.json", res)
    exact = None if res["match"] is None else res["match"]["exact"]
    if failure:
        write_json(out / "error.json", {"point": point, "error": failure, "worker": worker})
        return {"id": point["id"], "status": "failed", "error": failure, "exact": exact,
                "seconds": time.perf_counter() - t0}
    return {"id": point["id"], "status": "done", "exact": exact,
            "seconds": time.perf_counter() - t0}


@contextmanager
def _sweep_lock(out: Path):
    """Hold ``out/.sweep.lock`` while the sweep runs; another sweep holding it is a one-line
    :class:`SweepError`. ``flock`` ends with the process, so a killed sweep leaves no lock."""
    path = out / ".sweep.lock"
    with open(path, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "unknown"
            raise SweepError(f"-o = {str(out)!r}: another sweep (process {holder}) is running "
                             f"in it; wait for it to end, or use another directory") from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _check_scheduler(scheduler: str, timeout: float) -> None:
    """Refuse, in one :class:`SweepError` line, a scheduler address that is malformed or
    that does not answer within ``timeout`` seconds."""
    from distributed.comm import parse_address, parse_host_port
    try:
        scheme, location = parse_address(scheduler)
        if scheme not in ("tcp", "tls"):
            raise ValueError(f"scheme {scheme!r}")
        host, port = parse_host_port(location)
    except ValueError as e:
        raise SweepError(f"--scheduler = {scheduler!r}: must be a Dask scheduler address, "
                         f"tcp://HOST:PORT or tls://HOST:PORT ({e})") from None
    # Probe first: a Client that cannot connect leaves a traceback from its finalizer.
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        reason = "no answer" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise SweepError(f"--scheduler = {scheduler!r}: cannot reach it within {timeout:g} s "
                         f"({reason})") from None


def _client(scheduler: str | None, workers: int | None, timeout: float):
    """A Dask client and its local cluster: on the scheduler at ``scheduler`` (checked by
    :func:`_check_scheduler`; no cluster), else on a local cluster of ``workers`` processes."""
    from distributed import Client, LocalCluster
    if not scheduler:
        # The scheduler serves HTTP (health, metrics) even without a dashboard: on a port of
        # its own choosing, so that another cluster on 8787 costs no warning.
        cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1,
                               processes=True, dashboard_address=None,
                               scheduler_kwargs={"dashboard_address": ":0"})
        return Client(cluster), cluster
    try:
        return Client(scheduler, timeout=timeout), None
    except OSError as e:
        raise SweepError(f"--scheduler = {scheduler!r}: not a Dask scheduler, or it did not "
                         f"answer within {timeout:g} s ({' '.join(str(e).split())})") from None


def _silence_distributed() -> None:
    """Raise the handlers of the ``distributed`` logger of this process to CRITICAL."""
    for handler in logging.getLogger("distributed").handlers:
        handler.setLevel(logging.CRITICAL)


def _close_quietly(client, cluster) -> None:
    """Close a sweep's own local cluster without its shutdown chatter.

    By now every point has been recorded. While the cluster closes, a worker's heartbeat
    can meet the scheduler's closed connection, and the worker logs that race with a
    traceback on the sweep's stderr. The workers and the nannies (in this process) are
    silenced first; the level of this process's handlers is restored afterwards.
    """
    handlers = logging.getLogger("distributed").handlers
    levels = [h.level for h in handlers]
    try:
        client.run(_silence_distributed)
    except Exception:   # noqa: BLE001 - a worker already gone has nothing left to say
        pass
    try:
        _silence_distributed()
        client.close()
        cluster.close()
    finally:
        for handler, level in zip(handlers, levels):
            handler.setLevel(level)


def run_sweep(plan: SweepPlan, out_dir: str | Path, *, workers: int | None = None,
              scheduler: str | None = None, build_root: str | Path = "build",
              stream=sys.stderr, rerun_changed: bool = False,
              scheduler_timeout: float = SCHEDULER_TIMEOUT) -> dict:
    """Run the plan's points not already done; return a summary of the whole sweep.

    Points that ran with other settings are run again with ``rerun_changed``;
    without it they are a one-line :class:`SweepError`, before anything is
    written or run.
    """
    from distributed import as_completed

    if scheduler:
        _check_scheduler(scheduler, scheduler_timeout)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    points_dir = out / "points"
    with _sweep_lock(out):
        status = {p["id"]: _status(points_dir / p["id"], p) for p in plan.points}
        stale = [(pid, why) for pid, (state, why) in status.items() if state == "stale"]
        if stale and not rerun_changed:
            pid, why = stale[0]
            points = "1 point" if len(stale) == 1 else f"{len(stale)} points"
            raise SweepError(f"-o = {str(out)!r}: {points} ran with other settings "
                             f"(first {pid}: {why}); add --rerun-changed to run them again, or "
                             f"use another directory")
        todo = [p for p in plan.points if status[p["id"]][0] != "done"]
        skipped = len(plan.points) - len(todo)
        client, cluster = _client(scheduler, workers, scheduler_timeout) if todo else (None, None)
        points_dir.mkdir(exist_ok=True)
        from .run import write_json
        write_json(out / "sweep.json", {"spec": plan.spec, "points": plan.points})
        changed = f" ({len(stale)} rerun: their settings changed)" if stale else ""
        stream.write(f"sweep: {len(plan.points)} points, {skipped} already done, {len(todo)} to "
                     f"run{changed}\n")
        outcomes = []
        if todo:
            try:
                progress = Progress(len(todo), stream, unit="point")
                futures = [client.submit(run_point_task, p, str(points_dir.resolve()),
                                         str(Path(build_root).resolve()), pure=False,
                                         key=f"superfabric-point-{p['id']}-{time.time_ns()}")
                           for p in todo]
                for future in as_completed(futures):
                    outcome = future.result()
                    outcomes.append(outcome)
                    state = outcome["status"] if outcome["status"] == "failed" else (
                        "mismatch" if outcome.get("exact") is False else "ok")
                    progress.show(len(outcomes), state, f"sweep: {len(outcomes)}/{len(todo)} "
                                  f"{outcome['id']} {state}, {outcome['seconds']:.1f}s")
            finally:
                if cluster is not None:
                    _close_quietly(client, cluster)
                else:
                    client.close()
    failed = [o for o in outcomes if o["status"] == "failed"]
    mismatched = [o for o in outcomes if o.get("exact") is False]
    return {"points": len(plan.points), "skipped": skipped, "ran": len(outcomes),
            "failed": failed, "mismatched": mismatched}
