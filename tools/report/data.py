"""The figures a report draws: per run and simulator, averaged over seeds into curves.

A :class:`ReportKind` says what differs between the reports of switch runs
and of RDMA runs; :class:`ReportData` holds one :class:`Measure` per run and
simulator (the golden model's once per trace) and picks the load of the
per-load plots. Plots average over seeds: a curve's value at a load is the
mean over the seeds that share (pattern, config variant, simulator, load).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .source import Point, ReportError, Source

__all__ = ["ReportKind", "Measure", "ReportData", "measures", "curve", "latency", "offered_load",
           "same_load", "choose_load", "line_style", "sim_rank"]

#: Order of simulators in legends and tables: the reference first.
_SIM_ORDER = ("model", "icarus", "verilator")


def sim_rank(sim: str) -> tuple[int, str]:
    """Sort key of a simulator name: :data:`_SIM_ORDER`, then unknown ones by name."""
    return (_SIM_ORDER.index(sim) if sim in _SIM_ORDER else len(_SIM_ORDER), sim)


@dataclass(frozen=True)
class ReportKind:
    """What differs between the report of switch runs and that of RDMA runs.

    Attributes
    ----------
    name : str
        ``switch`` or ``rdma`` (:attr:`Point.kind`).
    figures : callable
        ``results.json`` -> the figures of the simulator that ran: the whole
        file for the switch, its ``rdma`` section for RDMA. The model's
        figures are ``results["model"]`` for both.
    plots : tuple of callable
        Each takes the :class:`ReportData` and returns a :class:`Plot`, or
        None when the data it needs is absent.
    tables : callable
        :class:`ReportData` -> the document blocks between the plots and the
        provenance (the table of points, and whatever else the kind adds).
    match_summary : callable
        The ``match`` section of an RTL run that differs from the model ->
        one line for the attention list.
    checks : callable
        :class:`Point` -> the problems its own figures show (beyond a stall),
        for the attention list; empty when there are none.
    traffic : callable
        The runs' ``results["traffic"]`` sections -> lines of the
        provenance's traffic list, beyond patterns, loads and seeds.
    """

    name: str
    figures: Callable[[dict], dict]
    plots: tuple
    tables: Callable
    match_summary: Callable[[dict], str]
    checks: Callable[[Point], list[str]]
    traffic: Callable[[list[dict]], list[str]]


@dataclass(frozen=True)
class Measure:
    """The figures of one simulator on one run: the RTL's, or the model's."""

    point: Point
    sim: str
    figures: dict           # ReportKind.figures of results.json, or results["model"]

    @property
    def series(self) -> tuple[str, str, str]:
        """(pattern, variant, simulator): the curve this measure belongs to."""
        return (self.point.pattern, self.point.variant, self.sim)

    @property
    def ports(self) -> int:
        """The switch radix of the run."""
        return int(self.point.results["config"]["switch"]["ports"])


def measures(points: list[Point], kind: ReportKind) -> list[Measure]:
    """One measure per RTL run and simulator, and the model's once per trace."""
    # The model is deterministic, so runs of one trace on two simulators carry
    # the same model figures; keep one, or seeds would be counted twice. The
    # traffic section describes the whole stimulus (pattern, load, seed,
    # lengths, stalls, bad requests...), the config the rest.
    seen = set()
    out = []
    for p in points:
        res = p.results
        if p.rtl:
            out.append(Measure(p, p.sim, kind.figures(res)))
        key = (p.variant, json.dumps(res["traffic"], sort_keys=True),
               json.dumps(res["config"], sort_keys=True))
        if key not in seen:
            seen.add(key)
            out.append(Measure(p, "model", res["model"]))
    return out


def latency(stat: str) -> Callable[[dict], float | None]:
    """The figures -> their latency statistic ``stat`` (``mean``, ``p99``...), or None."""
    return lambda figures: (figures.get("latency") or {}).get(stat)


def offered_load(m: Measure) -> float:
    """The offered load of a measure's run: the default x of a curve."""
    return m.point.load


def curve(measures: list[Measure], value: Callable[[dict], float | None],
           x: Callable[[Measure], float] = offered_load):
    """Mean over seeds of ``value`` at each ``x`` (the load by default): sorted arrays."""
    by_x = defaultdict(list)
    for m in measures:
        v = value(m.figures)
        if v is not None:
            by_x[x(m)].append(v)
    xs = sorted(by_x)
    return np.array(xs), np.array([np.mean(by_x[k]) for k in xs])


def same_load(a: float, b: float) -> bool:
    """Two loads are the same point (loads are decimal fractions, compared to 1e-9)."""
    return math.isclose(a, b, rel_tol=0.0, abs_tol=1e-9)


@dataclass
class ReportData:
    """Everything the plots and tables are drawn from.

    Attributes
    ----------
    source : Source
    measures : list
        One entry per (run, simulator); model figures once per trace.
    chosen_load : float or None
        Load of the latency CDF and per-port plots; ``None`` without runs.
    kind : ReportKind
        Switch or RDMA runs.
    """

    source: Source
    measures: list
    chosen_load: float | None
    kind: ReportKind

    def series(self) -> list[tuple[str, str, str]]:
        """Every (pattern, variant, simulator), the model before the RTL."""
        keys = {m.series for m in self.measures}
        return sorted(keys, key=lambda k: (k[0], k[1], sim_rank(k[2])))

    def of(self, series: tuple[str, str, str], load: float | None = None) -> list:
        """The measures of one series, optionally at one load only."""
        return [m for m in self.measures if m.series == series
                and (load is None or same_load(m.point.load, load))]

    def style(self, series: tuple[str, str, str]) -> dict:
        """Matplotlib line style: colour per (pattern, variant), dashed for the model."""
        groups = sorted({k[:2] for k in self.series()})
        pattern, variant, sim = series
        return line_style(groups.index(series[:2]), f"{pattern}, {variant}, {sim}", sim)


def line_style(group: int, label: str, sim: str) -> dict:
    """Matplotlib line style: colour ``C<group>``, the model dashed, an RTL simulator solid."""
    style = {"color": f"C{group % 10}", "label": label}
    # RTL wide and translucent under a thin model line on top: where they
    # agree (the usual case) both stay visible.
    if sim == "model":
        style.update(linestyle="--", marker="x", markersize=5, linewidth=1.2, zorder=3)
    else:
        style.update(linestyle="-", marker="s" if sim == "icarus" else "o", markersize=6,
                     linewidth=2.6, alpha=0.55, zorder=2)
    return style


def choose_load(points: list[Point], requested: float | None) -> float | None:
    """The load of the per-load plots: ``requested`` if the runs have it, else the
    highest load up to 0.9."""
    loads = sorted({p.load for p in points if p.load is not None})
    if not loads:
        return None
    if requested is not None:
        match = [x for x in loads if same_load(x, requested)]
        if not match:
            raise ReportError(f"--cdf-load = {requested:g}: no run at that load; loads present: "
                              f"{', '.join(f'{x:g}' for x in loads)}")
        return match[0]
    # 0.9 rather than the highest load: near saturation the tail grows with
    # the run length, and the CDF would describe the run, not the switch.
    below = [x for x in loads if x <= 0.9 + 1e-9]
    return below[-1] if below else loads[0]
