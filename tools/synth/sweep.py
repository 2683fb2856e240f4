"""``superfabric synth --vary``: one synthesis per configuration, for resources and Fmax against size.

Each point of the cartesian product of the ``--vary`` axes (as
``superfabric sweep`` expands them, :func:`~.sweep.config_variants`) is a
:func:`~.synth.synthesize` run in ``DIR/points/<id>/``, which writes
``synth.json`` when it finishes, also when the design does not fit the
device (``fits`` false, the one-line ``error``, the resources it needs);
any other failure (a tool error) leaves ``error.json`` with the one-line
error, so no point is dropped. ``DIR/synth-sweep.json`` lists the points and
the options. The sweep is resumable: points with a ``synth.json`` are
skipped (a design that does not fit will not fit next time either), failed
ones tried again.

A point takes minutes and most of a core, so points run one after the other
with the tools' progress shown, or ``workers`` at a time on a local process
pool, quietly, with a line per finished point.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from ...config import FabricConfig
from .eda_tool import find_tool
from ..progress import Progress
from .device import TARGETS, find_device
from ..sweep import config_variants
from .flow import SynthError, synthesize

__all__ = ["SWEEP_FILE", "SynthPlan", "plan_synth_sweep", "run_synth_sweep"]

#: The sweep's index, in its directory.
SWEEP_FILE = "synth-sweep.json"


@dataclass
class SynthPlan:
    """The points of a synth sweep and the options every point shares."""

    points: list[dict]
    options: dict
    spec: dict


def plan_synth_sweep(base: FabricConfig, *, overrides: list[str], vary: list[str],
                     **options) -> SynthPlan:
    """Expand the ``--vary`` axes over ``base``; ``options`` are :func:`~.synth.synthesize`'s.

    Every configuration, the target, the device and the tools are checked
    here, before the first point runs.

    Raises
    ------
    SynthError
        Unknown target or device.
    superfabric.config.ConfigError, superfabric.tools.sweep.SweepError
        A bad ``--vary`` axis or a configuration it makes.
    superfabric.tools.synth.eda_tool.ToolMissing
    """
    try:
        find_device(options["target"], options.get("device"))
    except ValueError as e:
        raise SynthError(str(e)) from None
    for tool in ("yosys", TARGETS[options["target"]].nextpnr):
        if tool:
            find_tool(tool)
    points = [{"id": tag or "base", "vary": varied, "config": cfg.to_dict()}
              for varied, cfg, tag in config_variants(base, vary)]
    spec = {"overrides": list(overrides), "vary": list(vary), "options": options,
            "base": base.to_dict()}
    return SynthPlan(points=points, options=options, spec=spec)


def synth_point(point: dict, out_root: str, options: dict, quiet: bool) -> dict:
    """One point, in this process or a pool's; never raises, records the outcome."""
    out = Path(out_root) / point["id"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "error.json").unlink(missing_ok=True)
    t0 = time.perf_counter()
    try:
        synthesize(FabricConfig.from_dict(point["config"]), out, quiet=quiet, **options)
    except Exception as e:  # a failed point is recorded, whatever failed
        message = " ".join(str(e).split()) or type(e).__name__
        if (out / "synth.json").exists():  # it does not fit: synth.json says so
            return {"id": point["id"], "status": "failed", "error": message,
                    "seconds": time.perf_counter() - t0}
        (out / "error.json").write_text(json.dumps(
            {"point": point, "error": message, "traceback": traceback.format_exc()},
            indent=2) + "\n")
        return {"id": point["id"], "status": "failed", "error": message,
                "seconds": time.perf_counter() - t0}
    return {"id": point["id"], "status": "done", "seconds": time.perf_counter() - t0}


def _show(progress: Progress, outcomes: list[dict]) -> None:
    """Count the point that just finished on the progress bar."""
    last = outcomes[-1]
    progress.show(len(outcomes), last["status"], f"synth: {len(outcomes)}/{progress.total} "
                  f"{last['id']} {last['status']}, {last['seconds']:.1f}s")


def run_synth_sweep(plan: SynthPlan, out_dir: str | Path, *, workers: int = 1,
                    stream=sys.stderr) -> dict:
    """Run the points not done yet; return ``points``, ``skipped``, ``ran`` and ``failed``
    (the points that failed now, and those done before whose design does not fit)."""
    out = Path(out_dir)
    points_dir = out / "points"
    points_dir.mkdir(parents=True, exist_ok=True)
    (out / SWEEP_FILE).write_text(json.dumps({"spec": plan.spec, "points": plan.points},
                                             indent=2) + "\n")
    todo = [p for p in plan.points if not (points_dir / p["id"] / "synth.json").exists()]
    skipped = len(plan.points) - len(todo)
    stream.write(f"synth: {len(plan.points)} points, {skipped} already done, "
                 f"{len(todo)} to run\n")
    progress = Progress(len(todo), stream)
    outcomes = []
    root = str(points_dir.resolve())
    if workers == 1:
        for point in todo:
            stream.write(f"synth: point {point['id']}\n")
            outcomes.append(synth_point(point, root, plan.options, quiet=False))
            _show(progress, outcomes)
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(synth_point, p, root, plan.options, True) for p in todo]
            for future in as_completed(futures):
                outcomes.append(future.result())
                _show(progress, outcomes)
    failed = [o for o in outcomes if o["status"] == "failed"]
    ran = {o["id"] for o in outcomes}
    for point in plan.points:  # skipped, but a design that does not fit is still one
        done = points_dir / point["id"] / "synth.json"
        if point["id"] not in ran and done.exists():
            error = json.loads(done.read_text()).get("error")
            if error:
                failed.append({"id": point["id"], "status": "failed", "error": error})
    return {"points": len(plan.points), "skipped": skipped, "ran": len(outcomes),
            "failed": failed}
