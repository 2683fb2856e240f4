"""The report as a document: a list of blocks, from the attention list to the provenance.

Blocks are tuples, rendered by :mod:`superfabric.tools.report.render`::

    ("h", level, text)  ("p", text)  ("alert", text)  ("ok", text)  ("list", [items])
    ("table", header, rows, numeric_columns)  ("figure", Plot)  ("pre", text)

The report opens with what needs attention (RTL/model mismatches, failed,
missing and stalled points), then the plots, the kind's tables and the
provenance. The cell helpers here are what the tables of both kinds share.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Callable

from .data import ReportData, ReportKind, sim_rank
from .plots import Plot
from .source import Point, Source, distinct

__all__ = ["document", "format_throughput", "format_latency", "format_delta", "count", "sort_key",
           "row_head", "failed_row", "compared_cells", "match_cell"]


def format_throughput(value: float | None) -> str:
    """A throughput as the report prints it (4 decimals; ``-`` when absent)."""
    return "-" if value is None else f"{value:.4f}"


def format_latency(value: float | None) -> str:
    """A latency in cycles as the report prints it (2 decimals; ``-`` when absent)."""
    return "-" if value is None else f"{value:.2f}"


def format_delta(rtl: float | None, model: float | None, fmt: Callable) -> str:
    """RTL minus model in the format ``fmt``, signed (``+0`` when equal); ``-`` when
    either is absent."""
    if rtl is None or model is None:
        return "-"
    delta = fmt(rtl - model)
    if float(delta) == 0.0:
        # Rounding leaves "-0.0000" for a tiny negative difference; equal is "+0".
        delta = fmt(0.0)
    return delta if delta.startswith("-") else "+" + delta


def _attention(source: Source, kind: ReportKind) -> list[tuple]:
    blocks = [("h", 2, "Attention")]
    rtl = [p for p in source.ok if p.rtl]
    differ = [p for p in rtl if not p.results["match"]["exact"]]
    if differ:
        blocks.append(("alert", f"RTL and model differ at: {len(differ)} of "
                                f"{count(len(rtl), 'RTL point')}"))
        blocks.append(("list", [f"{p.describe()}: {kind.match_summary(p.results['match'])}"
                                for p in differ]))
    elif rtl:
        sims = sorted({p.sim for p in rtl})
        blocks.append(("ok", f"RTL and model agree exactly at every RTL point "
                             f"({count(len(rtl), 'point')}: {', '.join(sims)})."))
    else:
        blocks.append(("p", "Model runs only: no RTL to compare."))
    failed = [p for p in source.points if p.error is not None]
    if failed:
        blocks.append(("alert", f"failed points: {len(failed)}"))
        blocks.append(("list", [f"{p.describe()}: {p.error}" for p in failed]))
    if source.missing:
        blocks.append(("alert", f"points not run (neither results.json nor error.json): "
                                f"{len(source.missing)}"))
        blocks.append(("list", list(source.missing)))
    stalled = [p for p in source.ok if kind.figures(p.results).get("stalled")]
    if stalled:
        blocks.append(("alert", f"stalled runs (stopped making progress before the end of "
                                f"their traffic): {len(stalled)}"))
        blocks.append(("list", [p.describe() for p in stalled]))
    checked = [(p, problems) for p in source.ok if (problems := kind.checks(p))]
    if checked:
        blocks.append(("alert", f"runs that failed their checks: {len(checked)}"))
        blocks.append(("list", [f"{p.describe()}: {'; '.join(problems)}"
                                for p, problems in checked]))
    if not (failed or source.missing or stalled or checked):
        blocks.append(("ok", f"Every point ran to completion "
                             f"({count(len(source.points), 'point')})."))
    return blocks


def count(n: int, noun: str) -> str:
    """``n`` and the noun, plural unless ``n`` is 1."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def sort_key(p: Point):
    """The order of the table of points: pattern, variant, load, seed, simulator."""
    return (p.pattern, p.variant, -1.0 if p.load is None else p.load, p.seed, sim_rank(p.sim),
            p.id)


def row_head(p: Point) -> list[str]:
    """The cells that name a point: pattern, variant, load, seed, simulator."""
    return [p.pattern, p.variant, "-" if p.load is None else f"{p.load:g}", str(p.seed), p.sim]


def failed_row(p: Point, columns: int) -> list[str]:
    """The row of a failed point: its name, dashes, and ``error`` as the match."""
    head = row_head(p)
    return head + ["-"] * (columns - len(head) - 1) + ["error"]


def compared_cells(p: Point, kind: ReportKind, columns) -> list[str]:
    """RTL, model and Δ cells for each ``(value, format)`` of ``columns``."""
    rtl = kind.figures(p.results) if p.rtl else None
    model = p.results["model"]
    cells = []
    for value, fmt in columns:
        r, m = (value(rtl) if rtl is not None else None), value(model)
        cells += [fmt(r), fmt(m), format_delta(r, m, fmt)]
    return cells


def match_cell(match: dict | None) -> str:
    """The match column: ``-`` for a model run, ``exact``, or how many mismatches."""
    if match is None:
        return "-"
    return "exact" if match["exact"] else f"{match.get('mismatches', 0)} mismatches"


def _flatten(config: dict, prefix: str = "") -> dict:
    flat = {}
    for k, v in config.items():
        if isinstance(v, dict):
            flat.update(_flatten(v, f"{prefix}{k}."))
        else:
            flat[f"{prefix}{k}"] = v
    return flat


def _configuration(source: Source) -> list[tuple]:
    """The configuration the runs used: common values, and the keys that vary."""
    # From the runs' own results.json rather than sweep.json's base, so the
    # report describes what ran even if the two disagree (it says so then).
    values = defaultdict(set)
    for p in source.ok:
        for k, v in _flatten(p.results["config"]).items():
            values[k].add(json.dumps(v))
    base = _flatten((source.spec or {}).get("base") or {})
    if not values:
        values = {k: {json.dumps(v)} for k, v in base.items()}
    rows = [[k, next(iter(v)) if len(v) == 1 else "varied",
             ", ".join(sorted(v)) if len(v) > 1 else ""] for k, v in values.items()]
    blocks = [("p", "The configuration of the runs; a key that differs between runs is "
                    "marked varied."),
              ("table", ("key", "value", "varied over"), rows, frozenset())]
    differ = [f"{k} (sweep.json base {json.dumps(v)}, runs {', '.join(sorted(values[k]))})"
              for k, v in base.items() if k in values and json.dumps(v) not in values[k]]
    if differ:
        blocks += [("alert", "sweep.json's base configuration differs from what the runs used:"),
                   ("list", differ)]
    return blocks


def _provenance(source: Source, kind: ReportKind) -> list[tuple]:
    ok = source.ok
    blocks = [("h", 2, "Provenance"), ("p", f"Source: {source.path}")]
    if source.spec is not None:
        args = {k: v for k, v in source.spec.items() if k != "base"}
        blocks += [("p", "Sweep arguments:"), ("pre", json.dumps(args, indent=1))]
    blocks += [("h", 3, "Configuration")] + _configuration(source)

    traffic = [p.results["traffic"] for p in ok]
    loads = [p.load for p in source.points if p.load is not None]
    blocks += [("h", 3, "Traffic"), ("list", [
        f"patterns: {distinct(p.pattern for p in source.points)}",
        *([f"loads: {distinct(loads)}"] if loads else []),
        f"seeds: {distinct(p.seed for p in source.points)}",
        *kind.traffic(traffic)])]

    # Each simulator's own time: an RTL run's wall_seconds is its simulation
    # alone, its model run and its (possibly cached) build are recorded apart.
    speed = defaultdict(lambda: [0, 0, 0.0])      # sim -> runs, cycles, seconds
    versions = defaultdict(set)
    build = 0.0
    for p in ok:
        res = p.results
        runs = [(p.sim, kind.figures(res).get("cycles"), res.get("wall_seconds"))]
        if p.rtl:
            runs.append(("model", res["model"].get("cycles"), res["model"].get("wall_seconds")))
        for sim, cycles, seconds in runs:
            entry = speed[sim]
            entry[0] += 1
            entry[1] += int(cycles or 0)
            entry[2] += float(seconds or 0.0)
        build += float(res.get("build_seconds") or 0.0)
        versions[p.sim].add(", ".join(f"{k} {v}"
                                      for k, v in sorted(res.get("versions", {}).items())))
    rows = []
    for sim in sorted(speed, key=sim_rank):
        runs, cycles, seconds = speed[sim]
        rows.append([sim, " | ".join(sorted(versions.get(sim, ()))) or "(with the RTL runs)",
                     str(runs), f"{cycles:,}", f"{seconds:.2f}",
                     f"{cycles / seconds:,.0f}" if seconds else "-"])
    simulation = sum(s for _, _, s in speed.values())
    blocks += [("h", 3, "Simulators"),
               ("table", ("simulator", "versions", "runs", "cycles", "wall (s)", "cycles/s"),
                rows, frozenset({2, 3, 4, 5})),
               ("p", f"Total wall time {simulation + build:.2f} s: simulation "
                     f"{simulation:.2f} s, RTL builds {build:.2f} s (near zero when cached).")]
    return blocks


def document(data: ReportData, plots: list[Plot]) -> list[tuple]:
    """The report's blocks: title, attention list, plots, the kind's tables, provenance."""
    source, kind = data.source, data.kind
    what = (f"sweep of {len(source.points) + len(source.missing)} points"
            if source.spec is not None else "run")
    traffic = {"rdma": "RDMA ", "collective": "collective "}.get(kind.name, "")
    blocks = [("h", 1, f"superfabric report: {traffic}{what} {source.path}")]
    blocks += _attention(source, kind)
    if plots:
        blocks.append(("h", 2, "Plots"))
        blocks += [("figure", plot) for plot in plots]
    blocks += kind.tables(data)
    blocks += _provenance(source, kind)
    return blocks
