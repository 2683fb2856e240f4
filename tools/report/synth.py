"""``superfabric report`` on a synth directory: one synthesis, or a sweep of them (``--vary``).

A synth directory holds ``synth.json`` (:mod:`superfabric.tools.synth.flow`); a
synth sweep holds ``synth-sweep.json`` and, per point, ``points/<id>/``
with ``synth.json`` or, when the point failed, ``error.json``
(:mod:`superfabric.tools.synth.sweep`). The report is ``report.md`` with the
PNG plots beside it and ``report.html`` with them embedded, as for runs and
sweeps (the Markdown and HTML writers are :mod:`superfabric.tools.report.build`'s).

One synthesis: whether timing is met, the device's use, resources by block
and by module, the critical path, the tools and the time of each step. A
sweep: LUTs, flip-flops, block RAMs and Fmax against the first varied key
(the port count, typically), one line per value of the others, with a
least-squares fit ``a + b N + c N^2`` of LUTs and flip-flops; and each
block's LUTs on log-log axes beside ``N`` and ``N^2`` reference slopes, which
shows the crossbar and the scheduler growing with the square of the ports.
A block is the modules that differ only by an index (``voq0`` ... ``voq7``:
``voq``); the block's top module holds the crossbar and the port counters.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from ..synth.device import CATEGORIES
from .plots import Plot
from .render import render_html, render_markdown
from .source import ReportError, read_json
from ..synth.sweep import SWEEP_FILE

__all__ = ["is_synth_source", "load_synth_source", "write_synth_report"]

_LABELS = {"lut": "LUTs", "ff": "flip-flops", "bram": "block RAMs", "dsp": "DSPs",
           "lutram": "LUT RAMs"}


def is_synth_source(path: Path) -> bool:
    """True for a directory of ``superfabric synth`` (one synthesis or a sweep)."""
    return (path / "synth.json").is_file() or (path / SWEEP_FILE).is_file()


def load_synth_source(path: Path) -> dict:
    """``points`` (id, vary, and synth, error or both), ``missing`` ids and the sweep's ``spec``.

    A point has ``synth`` when it wrote ``synth.json``, and ``error`` when it
    failed (``error.json``) or its design does not fit.

    One synthesis is a source of one point with no ``spec``.

    Raises
    ------
    ReportError
        When a file is unreadable or a point has no id.
    """
    if (path / SWEEP_FILE).is_file():
        sweep = read_json(path / SWEEP_FILE)
        points, missing = [], []
        for entry in sweep.get("points", []):
            pid = entry.get("id") if isinstance(entry, dict) else None
            if not pid:
                raise ReportError(f"{path / SWEEP_FILE}: a point without an id: {entry!r}")
            pdir = path / "points" / pid
            if (pdir / "synth.json").is_file():
                synth = read_json(pdir / "synth.json")
                point = {"id": pid, "vary": entry.get("vary", {}), "synth": synth}
                if synth.get("error"):
                    point["error"] = synth["error"]
                points.append(point)
            elif (pdir / "error.json").is_file():
                points.append({"id": pid, "vary": entry.get("vary", {}),
                               "error": read_json(pdir / "error.json").get("error", "?")})
            else:
                missing.append(pid)
        return {"path": path, "points": points, "missing": missing, "spec": sweep.get("spec", {})}
    return {"path": path, "points": [{"id": path.name, "vary": {},
                                      "synth": read_json(path / "synth.json")}],
            "missing": [], "spec": None}


def write_synth_report(src: Path, out: Path) -> Path:
    """Write ``report.md``, ``report.html`` and the PNGs of a synth directory; the HTML's path.

    Raises
    ------
    ReportError
        When ``src`` is not a synth directory or a file in it is unreadable.
    """
    if not is_synth_source(Path(src)):
        raise ReportError(f"{src}: not a synth directory (synth.json or {SWEEP_FILE})")
    source = load_synth_source(Path(src))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if source["spec"] is None:
        synth = source["points"][0]["synth"]
        plots = [p for p in (_plot_use(synth), _plot_blocks(synth)) if p is not None]
        make_blocks = _single_document
    else:
        # A design that does not fit has its resources (and no Fmax): plotted too.
        ok = [p for p in source["points"] if "synth" in p]
        plots = [p for p in (_plot_against(ok), _plot_block_growth(ok)) if p is not None]
        make_blocks = _sweep_document
    for plot in plots:
        plot.figure.savefig(out / plot.name, dpi=110)
    blocks = make_blocks(source, plots)
    (out / "report.md").write_text(render_markdown(blocks), encoding="utf-8")
    path = out / "report.html"
    path.write_text(render_html(blocks, out), encoding="utf-8")
    return path


# --------------------------------------------------------------------------
# Figures


def _figure(rows: int = 1, cols: int = 1):
    # matplotlib.figure.Figure without pyplot: Agg whatever the backend, no global state.
    from matplotlib.figure import Figure
    fig = Figure(figsize=(5.2 * cols + 1.5, 3.8 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes:
        ax.grid(True, alpha=0.3)
    return fig, axes


def block_of(module: str, top: str) -> str:
    """The block of a module: its path below ``top`` without instance indices (``voq``)."""
    if module == top:
        return top
    path = module.removeprefix(top + ".")
    return ".".join(re.sub(r"\d+$", "", part) or part for part in path.split("."))


def _blocks(synth: dict) -> dict[str, dict]:
    """Resources summed per block, in order of LUTs (largest first)."""
    sums = defaultdict(lambda: dict.fromkeys(CATEGORIES, 0))
    for module, res in synth.get("modules", {}).items():
        block = sums[block_of(module, synth["top"])]
        for cat in CATEGORIES:
            block[cat] += res[cat] * res["instances"]
    return dict(sorted(sums.items(), key=lambda kv: -kv[1]["lut"]))


def _plot_use(synth: dict) -> Plot | None:
    use = [u for u in synth.get("use", []) if u["percent"] is not None]
    if not use:
        return None
    fig, (ax,) = _figure()
    names = [u["resource"] for u in use][::-1]
    values = [u["percent"] for u in use][::-1]
    ax.barh(names, values, color="tab:blue")
    for y, (v, u) in enumerate(zip(values, use[::-1])):
        ax.text(v, y, f" {u['used']:,} / {u['available']:,}", va="center", fontsize="small")
    ax.set_xlabel("share of the device (%)")
    ax.set_xlim(0, max(100.0, max(values) * 1.3))
    ax.set_title(f"{synth['top']} on {synth['device']['name']}")
    return Plot(name="device_use.png", title="Device use",
                figure=fig, caption=f"The block's share of each resource of "
                                    f"{synth['device']['name']} that the fit is checked against "
                                    f"(the scan wrapper excluded).")


def _plot_blocks(synth: dict) -> Plot | None:
    blocks = _blocks(synth)
    if not blocks:
        return None
    fig, axes = _figure(1, 2)
    names = list(blocks)[::-1]
    for ax, cat in zip(axes, ("lut", "ff")):
        ax.barh(names, [blocks[b][cat] for b in names], color="tab:orange" if cat == "ff" else None)
        ax.set_xlabel(_LABELS[cat])
    return Plot(name="blocks.png", title="Resources by block", figure=fig,
                caption=f"LUTs and flip-flops of each block, its instances summed "
                        f"({synth['top']}: the top module, with the crossbar and the counters).")


def _x_axis(points: list[dict]) -> tuple[str | None, list[str]]:
    """The first varied key (the x axis) and the others (one line per combination)."""
    keys = list(points[0]["vary"]) if points else []
    return (keys[0] if keys else None), keys[1:]


def _lines(points: list[dict]) -> dict[str, list[dict]]:
    """Points by the values of the keys after the first, sorted by the first."""
    x_key, others = _x_axis(points)
    lines = defaultdict(list)
    for p in points:
        label = ", ".join(f"{k.split('.')[-1]}={p['vary'][k]}" for k in others) or "all"
        lines[label].append(p)
    for pts in lines.values():
        pts.sort(key=lambda p: p["vary"][x_key])
    return dict(lines)


def _plot_against(points: list[dict]) -> Plot | None:
    x_key, _ = _x_axis(points)
    if x_key is None or not all(isinstance(p["vary"][x_key], (int, float)) for p in points):
        return None
    fig, axes = _figure(2, 2)
    panels = (("lut", "LUTs"), ("ff", "flip-flops"), ("bram", "block RAMs"), ("fmax", "Fmax (MHz)"))
    fits = []
    for colour, (label, pts) in enumerate(_lines(points).items()):
        xs = np.array([p["vary"][x_key] for p in pts], dtype=float)
        for ax, (what, title) in zip(axes, panels):
            if what == "fmax":
                ys = [(p["synth"]["timing"] or {}).get("fmax_mhz") for p in pts]
                keep = [k for k, y in enumerate(ys) if y is not None]
                if keep:
                    ax.plot(xs[keep], [ys[k] for k in keep], "o-", color=f"C{colour}", label=label)
            else:
                ys = np.array([p["synth"]["resources"][what] for p in pts], dtype=float)
                ax.plot(xs, ys, "o-", color=f"C{colour}", label=label)
                if what in ("lut", "ff") and len(set(xs)) >= 3:
                    coef = np.polyfit(xs, ys, 2)
                    grid = np.linspace(xs.min(), xs.max(), 100)
                    ax.plot(grid, np.polyval(coef, grid), "--", color=f"C{colour}", alpha=0.6)
                    square = coef[0] * xs.max() ** 2 / max(np.polyval(coef, xs.max()), 1.0)
                    fits.append(f"{title} ({label}): {coef[2]:,.0f} {coef[1]:+,.0f} N "
                                f"{coef[0]:+,.1f} N^2, the N^2 term {square:.0%} of the fit "
                                f"at N = {xs.max():g}")
            ax.set_title(title)
            ax.set_xlabel(x_key)
    if not axes[3].lines:
        axes[3].text(0.5, 0.5, "no place and route on this target", ha="center",
                     transform=axes[3].transAxes)
    axes[0].legend(fontsize="small")
    caption = (f"Resources and Fmax against {x_key}, one line per value of the other varied "
               f"keys. Dashed: least-squares fits a + b N + c N^2 (N = {x_key}; through three "
               f"points, exact). "
               + ("; ".join(fits) + "." if fits else "Fits need three values or more."))
    return Plot(name="against.png", title=f"Resources and Fmax against {x_key}", figure=fig,
                caption=caption)


def _plot_block_growth(points: list[dict]) -> Plot | None:
    x_key, _ = _x_axis(points)
    if x_key is None or not all(isinstance(p["vary"][x_key], (int, float)) for p in points):
        return None
    # One line of points (the first value of the other keys): blocks against N.
    pts = next(iter(_lines(points).values()))
    xs = np.array([p["vary"][x_key] for p in pts], dtype=float)
    per_point = [_blocks(p["synth"]) for p in pts]
    names = sorted({b for blocks in per_point for b in blocks},
                   key=lambda b: -max(blocks.get(b, {}).get("lut", 0) for blocks in per_point))
    if len(xs) < 2 or not names or xs.min() <= 0:
        return None
    from matplotlib.ticker import NullLocator
    fig, (ax,) = _figure()
    for colour, name in enumerate(names):
        ys = np.array([blocks.get(name, {}).get("lut", 0) for blocks in per_point], dtype=float)
        if ys.min() > 0:
            ax.plot(xs, ys, "o-", color=f"C{colour % 10}", label=name)
    top = max(blocks[names[0]]["lut"] for blocks in per_point if names[0] in blocks)
    for power, style in ((1, ":"), (2, "--")):
        ref = top * (xs / xs.max()) ** power
        ax.plot(xs, ref, style, color="grey", label=f"N^{power} (reference)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [f"{x:g}" for x in xs])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_yscale("log")
    ax.set_xlabel(x_key)
    ax.set_ylabel("LUTs")
    ax.legend(fontsize="small", loc="upper left")
    return Plot(name="block_growth.png", title="LUTs of each block against " + x_key, figure=fig,
                caption=f"LUTs of each block (instances summed) against {x_key}, log-log; grey: "
                        f"slopes N and N^2 through the largest block's last point. A block "
                        f"parallel to N^2 grows with the square of the ports.")


# --------------------------------------------------------------------------
# Documents


def _fmax_text(timing: dict | None) -> str:
    if not timing:
        return "-"
    return f"{timing['fmax_mhz']:.1f}"


def _path_text(timing: dict | None) -> str:
    path = (timing or {}).get("critical_path")
    if not path:
        return "-"
    return f"{path['from']['module']} -> {path['to']['module']}"


def _spread(timing: dict) -> str:
    """", the median of N seeds (min .., max ..)" when several seeds ran."""
    seeds = timing.get("seeds") or []
    if len(seeds) < 2:
        return ""
    return (f", the median of {len(seeds)} seeds (min {timing['fmax_min_mhz']:.1f}, max "
            f"{timing['fmax_max_mhz']:.1f})")


def _src_text(end: dict) -> str:
    return f", {', '.join(end['src'])}" if end.get("src") else ""


def _single_document(source: dict, plots: list[Plot]) -> list[tuple]:
    synth = source["points"][0]["synth"]
    dev = synth["device"]
    blocks = [("h", 1, f"superfabric report: synthesis of {synth['top']} on {dev['name']} "
                       f"({synth['target']}) {source['path']}")]
    timing = synth.get("timing")
    if synth.get("error"):
        blocks.append(("alert", synth["error"]))
    elif timing is None:
        blocks.append(("p", f"{synth['target']}: synthesis only (no place and route), so no Fmax."))
    elif timing["met"]:
        blocks.append(("ok", f"Timing met: Fmax {timing['fmax_mhz']:.1f} MHz{_spread(timing)} at "
                             f"a {timing['constraint_mhz']:g} MHz constraint."))
    else:
        blocks.append(("alert", f"Timing not met: Fmax {timing['fmax_mhz']:.1f} "
                                f"MHz{_spread(timing)} against a {timing['constraint_mhz']:g} MHz "
                                f"constraint."))
    res = synth["resources"]
    blocks += [("h", 2, "Resources"),
               ("table", ("resource", "used", "available", "share"),
                [(u["resource"], f"{u['used']:,}", f"{u['available']:,}",
                  "-" if u["percent"] is None else f"{u['percent']:.1f} %") for u in synth["use"]],
                {1, 2, 3}),
               ("p", "Mapped cells: " + ", ".join(f"{_LABELS[c]} {res[c]:,}" for c in CATEGORIES)
                + "; other: " + (", ".join(f"{t} {n:,}" for t, n in res["other"].items()) or "none")
                + ". The scan wrapper around the block (not counted): "
                + ", ".join(f"{t} {n:,}" for t, n in synth["wrapper"]["cells"].items()) + ".")]
    if plots:
        blocks.append(("h", 2, "Plots"))
        blocks += [("figure", plot) for plot in plots]
    if synth.get("utilization"):
        blocks += [("h", 2, "After place and route"),
                   ("p", "nextpnr's count of the sites used, the scan wrapper included."),
                   ("table", ("site type", "used", "available", "share"),
                    [(site, f"{u['used']:,}", f"{u['available']:,}",
                      f"{100 * u['used'] / u['available']:.1f} %" if u["available"] else "-")
                     for site, u in sorted(synth["utilization"].items()) if u["used"]],
                    {1, 2, 3})]
    if timing and len(timing.get("seeds") or []) > 1:
        blocks += [("h", 2, "Seeds"),
                   ("p", f"The one netlist placed and routed with each seed; Fmax above is the "
                         f"median (seed {timing['seed']}), whose critical path and worst "
                         f"endpoints follow."),
                   ("table", ("seed", "Fmax (MHz)", "met"),
                    [(s["seed"], f"{s['fmax_mhz']:.1f}", "yes" if s["met"] else "no")
                     for s in timing["seeds"]], {0, 1})]
    if timing and timing.get("critical_path"):
        path = timing["critical_path"]
        blocks += [("h", 2, "Critical path"), ("list", [
            f"from {path['from']['cell']}.{path['from']['port']} ({path['from']['module']}"
            f"{_src_text(path['from'])})",
            f"to {path['to']['cell']}.{path['to']['port']} ({path['to']['module']}"
            f"{_src_text(path['to'])})",
            f"{path['delay_ns']:.2f} ns: {path['logic_ns']:.2f} ns in cells, "
            f"{path['routing_ns']:.2f} ns of routing, {path['logic_levels']} logic level"
            f"{'' if path['logic_levels'] == 1 else 's'}",
            "through " + " -> ".join(path["modules"])])]
    if timing and timing.get("paths"):
        blocks += [("h", 2, "Worst endpoints"),
                   ("p", "One per source line, at its endpoint cell with the latest arrival "
                         "(nextpnr's, clock to output included, setup not); nextpnr reports the "
                         "whole path of the critical one only."),
                   ("table", ("arrival (ns)", "endpoint", "module", "source", "cells"),
                    [(f"{p['arrival_ns']:.3f}", f"{p['to']['cell']}.{p['to']['port']}",
                      p["to"]["module"], ", ".join(p["to"]["src"]) or "-", p["cells"])
                     for p in timing["paths"]], {0, 4})]
    if synth.get("modules"):
        blocks += [("h", 2, "Modules"),
                   ("table", ("module", "instances", *(_LABELS[c] for c in CATEGORIES), "other"),
                    [(name, m["instances"], *(f"{m[c]:,}" for c in CATEGORIES),
                      ", ".join(f"{t} {n}" for t, n in m["other"].items()))
                     for name, m in synth["modules"].items()], set(range(1, 7)))]
    else:
        blocks += [("p", "Synthesised flat (--flatten): no per-module breakdown.")]
    blocks += _provenance(synth)
    return blocks


def _provenance(synth: dict) -> list[tuple]:
    dev = synth["device"]
    part = ", ".join(x for x in (dev["name"], dev.get("package"),
                                 f"speed {dev['speed']}" if dev.get("speed") else None) if x)
    steps = ", ".join(f"{s['step']}" + (f" seed {s['seed']}" if "seed" in s else "")
                      + f" {s['seconds']:.1f} s"
                      + (" (with the WebAssembly compile)" if s.get("compiled_webassembly") else "")
                      for s in synth["steps"])
    sw = synth["config"]["switch"]
    return [("h", 2, "Provenance"), ("list", [
        f"target {synth['target']}, device {part}"
        + (f", placement seed {synth['seed']}" if synth.get("seed") is not None else "")
        + (f" to {synth['seeds'][-1]} (Fmax the median, seed {synth['timing']['seed']})"
           if len(synth.get("seeds") or []) > 1 and synth.get("timing") else ""),
        "tools: " + ", ".join(synth["tools"].values()),
        f"steps: {steps}; {synth['wall_seconds']:.1f} s in all",
        "configuration: " + ", ".join(f"{k}={v}" for k, v in sw.items())
        + f" (build key {synth['build_key']})",
        "module boundaries: " + ("flattened (--flatten)" if synth["flatten"] else "kept")])]


def _sweep_document(source: dict, plots: list[Plot]) -> list[tuple]:
    points = source["points"]
    ok = [p for p in points if "synth" in p]
    failed = [p for p in points if "error" in p]  # synth.json of a design that does not fit, too
    head = ok[0]["synth"] if ok else None
    what = f" of {head['top']} on {head['device']['name']} ({head['target']})" if head else ""
    blocks = [("h", 1, f"superfabric report: synth sweep{what} of "
                       f"{len(points) + len(source['missing'])} points {source['path']}")]
    attention = [f"failed {p['id']}: {p['error']}" for p in failed]
    attention += [f"missing {pid} (not run yet, or interrupted)" for pid in source["missing"]]
    if attention:
        count = "1 point needs" if len(attention) == 1 else f"{len(attention)} points need"
        blocks += [("alert", f"{count} attention"), ("list", attention)]
    else:
        blocks.append(("ok", f"All {len(points)} points synthesised and fit the device."))
    if plots:
        blocks.append(("h", 2, "Plots"))
        blocks += [("figure", plot) for plot in plots]
    keys = list(points[0]["vary"]) if points else []
    rows = []
    for p in points:
        values = [p["vary"].get(k, "") for k in keys]
        if "synth" not in p:
            rows.append((*values, *(["-"] * 8), p["error"]))
            continue
        s = p["synth"]
        res, timing = s["resources"], s.get("timing")
        rows.append((*values, *(f"{res[c]:,}" for c in CATEGORIES), _fmax_text(timing),
                     "-" if not timing else ("yes" if timing["met"] else "no"),
                     f"{s['wall_seconds']:.0f}", p.get("error") or _path_text(timing)))
    header = (*(k.split(".")[-1] for k in keys), *(_LABELS[c] for c in CATEGORIES), "Fmax (MHz)",
              "met", "time (s)", "critical path, or the error")
    blocks += [("h", 2, "Points"), ("table", header, rows, set(range(len(keys) + 8)))]
    if head:
        blocks += [("h", 2, "Provenance"), ("list", [
            "options: " + ", ".join(f"{k}={v}" for k, v in source["spec"]["options"].items()),
            "overrides: " + (", ".join(source["spec"]["overrides"]) or "none"),
            "tools: " + ", ".join(head["tools"].values())])]
    return blocks
