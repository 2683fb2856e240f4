"""``superfabric report``: Markdown, HTML and PNG reports of one run or a whole sweep.

A run directory holds ``results.json`` and ``packets.npz`` (written by
:func:`superfabric.tools.run.run_point`), or for RDMA traffic
``workload.npz`` and the records; a sweep directory holds ``sweep.json``
and, per point, a run directory ``points/<id>/`` or, when the point failed,
``points/<id>/error.json``.

Switch runs and RDMA runs (``rdma-*`` patterns) measure different things,
so a report is of one :class:`ReportKind`: this module holds the machinery
both share (reading the source, seeds averaged into curves, the attention
list, provenance, Markdown and HTML) and the switch's plots and table;
:mod:`superfabric.tools.report_rdma` holds the RDMA ones. A source that
mixes the two kinds is refused.

The report opens with what needs attention (RTL/model mismatches, failed,
missing and stalled points), then the plots, a table of every point and the
provenance. ``report.md`` links the PNGs next to it; ``report.html`` embeds
them as ``data:`` URIs and loads nothing else, so it can be archived or
mailed on its own.

Plots average over seeds: a curve's value at a load is the mean over the
seeds that share (pattern, config variant, simulator, load). An RTL run also
carries the golden model's figures for the same trace; they form the model's
curve (dashed), the RTL's is solid with markers. Every plot is one function
in :data:`PLOTS` that returns ``None`` when the data it needs is absent, so a
new figure is one more function there (in :mod:`~superfabric.tools.report_rdma` for RDMA runs).
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..sim.rdma_traffic import RDMA_PATTERNS

__all__ = ["HOL_SATURATION", "PLOTS", "SWITCH", "TABLE_HEADER", "Plot", "Point", "ReportData",
           "ReportError", "ReportKind", "Source", "format_latency", "format_throughput",
           "hol_saturation", "load_source", "oq_queueing_delay", "write_report"]

#: Order of simulators in legends and tables: the reference first.
_SIM_ORDER = ("model", "icarus", "verilator")


def _sim_rank(sim: str) -> tuple[int, str]:
    """Sort key of a simulator name: :data:`_SIM_ORDER`, then unknown ones by name."""
    return (_SIM_ORDER.index(sim) if sim in _SIM_ORDER else len(_SIM_ORDER), sim)

#: Saturation throughput of an N x N input-queued switch with one FIFO per
#: input under uniform traffic, limited by head-of-line blocking (Karol,
#: Hluchyj, Morgan 1987; finite-N values as in /work/shared/REFERENCES.md).
HOL_SATURATION = {2: 0.750, 4: 0.655, 8: 0.618, 16: 0.601, 32: 0.594}

#: Zero-load latency (generation to tail delivery) of a 1-flit packet
#: through the switch pipeline, in cycles (docs/architecture.md).
ONE_FLIT_ZERO_LOAD_LATENCY = 4.0


class ReportError(ValueError):
    """A report source that cannot be used; the message is one line naming it."""


def hol_saturation(ports: int) -> float:
    """Saturation throughput of one FIFO per input (head-of-line blocking).

    Parameters
    ----------
    ports : int
        Switch radix ``N``.

    Returns
    -------
    float
        The finite-``N`` value where it is tabulated, else the large-``N``
        limit ``2 - sqrt(2)``.
    """
    return HOL_SATURATION.get(ports, 2 - math.sqrt(2))


def oq_queueing_delay(ports: int, load):
    """Mean queueing delay of an output-queued switch, in cycles.

    ``W = ((N - 1) / N) * p / (2 (1 - p))``: the lower bound any
    input-queued design is measured against.

    Parameters
    ----------
    ports : int
        Switch radix ``N``.
    load : float or numpy.ndarray
        Offered load ``p`` per input, ``0 <= p < 1``.

    Returns
    -------
    float or numpy.ndarray
        ``W`` for each ``p``.
    """
    return (ports - 1) / ports * load / (2 * (1 - load))


def format_throughput(value: float | None) -> str:
    """A throughput as the report prints it (4 decimals; ``-`` when absent)."""
    return "-" if value is None else f"{value:.4f}"


def format_latency(value: float | None) -> str:
    """A latency in cycles as the report prints it (2 decimals; ``-`` when absent)."""
    return "-" if value is None else f"{value:.2f}"


def _format_delta(rtl: float | None, model: float | None, fmt: Callable) -> str:
    if rtl is None or model is None:
        return "-"
    delta = fmt(rtl - model)
    if float(delta) == 0.0:
        # Rounding leaves "-0.0000" for a tiny negative difference; equal is "+0".
        delta = fmt(0.0)
    return delta if delta.startswith("-") else "+" + delta


# --------------------------------------------------------------------------
# Input: run and sweep directories


@dataclass(frozen=True)
class Point:
    """One run of the report: a run directory, or a sweep point that failed.

    Attributes
    ----------
    id : str
        The sweep point's id, or the run directory's name.
    dir : pathlib.Path
        The run directory.
    pattern, load, seed, sim
        The traffic pattern (with its parameters), offered load, seed and
        simulator of the run.
    vary : dict
        The config keys this sweep point varies (``{}`` for a single run).
    results : dict or None
        The parsed ``results.json``; ``None`` when the point failed.
    error : str or None
        The one-line error of a failed point.
    """

    id: str
    dir: Path
    pattern: str
    load: float
    seed: int
    sim: str
    vary: dict = field(default_factory=dict)
    results: dict | None = None
    error: str | None = None

    @property
    def variant(self) -> str:
        """The varied config keys as ``key=value, ...``; ``base`` when none."""
        return _variant_label(self.vary)

    @property
    def rtl(self) -> bool:
        """True when an RTL simulator ran (and the model ran beside it)."""
        return self.sim != "model"

    @property
    def kind(self) -> str:
        """``rdma`` for work requests through the RDMA fabric, ``switch`` otherwise."""
        return _kind_of_pattern(self.pattern)

    def describe(self) -> str:
        """Pattern, variant, load, seed and simulator, for the report's lists."""
        return (f"{self.pattern}, {self.variant}, load {self.load:g}, seed {self.seed}, "
                f"{self.sim} ({self.id})")


def _kind_of_pattern(pattern: str) -> str:
    # The rule run_point dispatches by.
    return "rdma" if pattern.partition(":")[0] in RDMA_PATTERNS else "switch"


def _variant_label(vary: dict) -> str:
    # Sweep ids use the last part of a key too; a config has one [switch]
    # section today, so the short name is unambiguous and keeps legends short.
    short = [k.split(".")[-1] for k in vary]
    names = short if len(set(short)) == len(short) else list(vary)
    return ", ".join(f"{n}={v}" for n, v in zip(names, vary.values())) or "base"


@dataclass
class Source:
    """What a report is made from.

    Attributes
    ----------
    path : pathlib.Path
        The run or sweep directory.
    points : list of Point
        Every run, failed sweep points included.
    spec : dict or None
        The sweep command's arguments (``sweep.json``); ``None`` for one run.
    missing : list of str
        Sweep points with neither ``results.json`` nor ``error.json`` (not run
        yet, or interrupted).
    """

    path: Path
    points: list[Point]
    spec: dict | None = None
    missing: list[str] = field(default_factory=list)

    @property
    def ok(self) -> list[Point]:
        """The points that ran and wrote ``results.json``."""
        return [p for p in self.points if p.results is not None]

    @property
    def kind(self) -> str:
        """``switch`` or ``rdma``, from the patterns of the points (or of the sweep's spec).

        Raises
        ------
        ReportError
            When the source holds both kinds of run.
        """
        patterns = [p.pattern for p in self.points] or list((self.spec or {}).get("traffic", []))
        kinds = defaultdict(list)
        for pattern in patterns:
            kinds[_kind_of_pattern(pattern)].append(pattern)
        if len(kinds) > 1:
            raise ReportError(f"{self.path}: mixes switch traffic ({_distinct(kinds['switch'])}) "
                              f"and RDMA traffic ({_distinct(kinds['rdma'])}); report them apart")
        return next(iter(kinds), "switch")


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    except OSError as e:
        raise ReportError(f"{path}: cannot be read ({e.strerror})") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path}: must hold a JSON object, not {type(data).__name__}")
    return data


#: The sections of results.json the report reads, for every run and per kind of run.
_RESULTS_KEYS = ("config", "simulator", "traffic", "model")
_KIND_KEYS = {"switch": ("packets", "throughput", "latency"), "rdma": ("rdma",)}


def _point_from_results(path: Path) -> Point:
    res = _read_json(path)
    try:
        traffic = res["traffic"]
        sweep = res.get("sweep") or {}
        point = Point(id=sweep.get("id", path.parent.name), dir=path.parent,
                      pattern=traffic["pattern"], load=float(traffic["load"]),
                      seed=int(traffic["seed"]), sim=res["simulator"],
                      vary=sweep.get("vary") or {}, results=res)
    except (KeyError, TypeError, ValueError) as e:
        raise ReportError(f"{path}: not a superfabric results file (missing or bad {e})") from None
    missing = [k for k in _RESULTS_KEYS + _KIND_KEYS[point.kind] if k not in res]
    if missing:
        raise ReportError(f"{path}: not a superfabric results file of {point.kind} traffic "
                          f"{point.pattern!r} (no {', '.join(missing)})")
    return point


def _point_from_error(path: Path) -> Point:
    data = _read_json(path)
    try:
        point = data["point"]
        return Point(id=point["id"], dir=path.parent, pattern=point["traffic"],
                     load=float(point["load"]), seed=int(point["seed"]), sim=point["sim"],
                     vary=point.get("vary") or {},
                     error=" ".join(str(data.get("error", "unknown error")).split()))
    except (KeyError, TypeError, ValueError) as e:
        raise ReportError(f"{path}: not a superfabric sweep error file "
                          f"(missing or bad {e})") from None


def load_source(src: str | Path) -> Source:
    """Read a run directory or a sweep directory.

    Parameters
    ----------
    src : str or pathlib.Path
        A directory with ``results.json`` (one run) or ``sweep.json`` (a
        sweep; its list of points is authoritative).

    Returns
    -------
    Source

    Raises
    ------
    ReportError
        When ``src`` holds neither file, or one of its files is unreadable.
    """
    path = Path(src)
    if (path / "sweep.json").is_file():
        sweep = _read_json(path / "sweep.json")
        points, missing = [], []
        for entry in sweep.get("points", []):
            pid = entry.get("id") if isinstance(entry, dict) else None
            if not pid:
                raise ReportError(f"{path / 'sweep.json'}: a point without an id: {entry!r}")
            pdir = path / "points" / pid
            if (pdir / "results.json").is_file():
                points.append(_point_from_results(pdir / "results.json"))
            elif (pdir / "error.json").is_file():
                points.append(_point_from_error(pdir / "error.json"))
            else:
                missing.append(pid)
        return Source(path=path, points=points, spec=sweep.get("spec") or {}, missing=missing)
    if (path / "results.json").is_file():
        return Source(path=path, points=[_point_from_results(path / "results.json")])
    raise ReportError(f"{path}: neither a run directory (results.json) nor a sweep directory "
                      f"(sweep.json)")


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


# --------------------------------------------------------------------------
# Figures per (pattern, variant, simulator, load, seed)


@dataclass(frozen=True)
class _Measure:
    """The figures of one simulator on one run: the RTL's, or the model's."""

    point: Point
    sim: str
    figures: dict           # ReportKind.figures of results.json, or results["model"]

    @property
    def series(self) -> tuple[str, str, str]:
        return (self.point.pattern, self.point.variant, self.sim)

    @property
    def ports(self) -> int:
        return int(self.point.results["config"]["switch"]["ports"])


def _measures(points: list[Point], kind: ReportKind) -> list[_Measure]:
    # The model is deterministic, so runs of one trace on two simulators carry
    # the same model figures; keep one, or seeds would be counted twice. The
    # traffic section describes the whole stimulus (pattern, load, seed,
    # lengths, stalls, bad requests...), the config the rest.
    seen = set()
    out = []
    for p in points:
        res = p.results
        if p.rtl:
            out.append(_Measure(p, p.sim, kind.figures(res)))
        key = (p.variant, json.dumps(res["traffic"], sort_keys=True),
               json.dumps(res["config"], sort_keys=True))
        if key not in seen:
            seen.add(key)
            out.append(_Measure(p, "model", res["model"]))
    return out


def _latency(stat: str) -> Callable[[dict], float | None]:
    return lambda figures: (figures.get("latency") or {}).get(stat)


def _offered_load(m: _Measure) -> float:
    return m.point.load


def _curve(measures: list[_Measure], value: Callable[[dict], float | None],
           x: Callable[[_Measure], float] = _offered_load):
    """Mean over seeds of ``value`` at each ``x`` (the load by default): sorted arrays."""
    by_x = defaultdict(list)
    for m in measures:
        v = value(m.figures)
        if v is not None:
            by_x[x(m)].append(v)
    xs = sorted(by_x)
    return np.array(xs), np.array([np.mean(by_x[k]) for k in xs])


def _same_load(a: float, b: float) -> bool:
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
        return sorted(keys, key=lambda k: (k[0], k[1], _sim_rank(k[2])))

    def of(self, series: tuple[str, str, str], load: float | None = None) -> list:
        """The measures of one series, optionally at one load only."""
        return [m for m in self.measures if m.series == series
                and (load is None or _same_load(m.point.load, load))]

    def style(self, series: tuple[str, str, str]) -> dict:
        """Matplotlib line style: colour per (pattern, variant), dashed for the model."""
        groups = sorted({k[:2] for k in self.series()})
        pattern, variant, sim = series
        return _line_style(groups.index(series[:2]), f"{pattern}, {variant}, {sim}", sim)

    def reference_ports(self) -> list[int]:
        """The switch radices present, for the reference curves."""
        return sorted({m.ports for m in self.measures})

    def zero_load_latency(self, ports: int) -> tuple[float, str] | None:
        """Zero-load latency for the output-queued bound, and how it was chosen."""
        ms = [m for m in self.measures if m.ports == ports]
        if all(m.point.results["traffic"].get("packet_lengths") == "fixed:1" for m in ms):
            return (ONE_FLIT_ZERO_LOAD_LATENCY,
                    f"{ONE_FLIT_ZERO_LOAD_LATENCY:g} cycles, the pipeline latency of a "
                    f"1-flit packet")
        means = [(m.point.load, v) for m in ms if (v := _latency("mean")(m.figures)) is not None]
        if not means:
            return None
        lowest = min(x for x, _ in means)
        t0 = min(v for x, v in means if _same_load(x, lowest))
        return t0, (f"{t0:.2f} cycles, the minimum mean latency observed at the lowest load "
                    f"({lowest:g})")


def _line_style(group: int, label: str, sim: str) -> dict:
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


def _choose_load(points: list[Point], requested: float | None) -> float | None:
    loads = sorted({p.load for p in points})
    if not loads:
        return None
    if requested is not None:
        match = [x for x in loads if _same_load(x, requested)]
        if not match:
            raise ReportError(f"--cdf-load = {requested:g}: no run at that load; loads present: "
                              f"{', '.join(f'{x:g}' for x in loads)}")
        return match[0]
    # 0.9 rather than the highest load: near saturation the tail grows with
    # the run length, and the CDF would describe the run, not the switch.
    below = [x for x in loads if x <= 0.9 + 1e-9]
    return below[-1] if below else loads[0]


# --------------------------------------------------------------------------
# Plots: each takes the ReportData and returns a Plot, or None to be skipped


@dataclass
class Plot:
    """One figure of the report: file name, short title, matplotlib figure and caption."""

    name: str
    title: str
    figure: object
    caption: str


def _figure(ncols: int = 1):
    # matplotlib.figure.Figure without pyplot renders PNG with Agg whatever
    # the session's backend, and keeps no global state between reports
    # (matplotlib's advice for servers); importing it here keeps
    # `from superfabric.tools.report import ReportError` cheap for the CLI.
    from matplotlib.figure import Figure
    fig = Figure(figsize=(6.0 * ncols + 3.0, 4.6), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    for ax in axes:
        ax.grid(True, alpha=0.3)
    return fig, axes


def _legend(fig, ax) -> None:
    fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper", fontsize="small")


def _plain_log_ticks(axis) -> None:
    """Label a log axis 4, 10, 100 rather than 4x10^0; minor ticks only over a short range."""
    from matplotlib.ticker import FuncFormatter, NullFormatter
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    lo, hi = axis.get_view_interval()
    axis.set_major_formatter(plain)
    # Under about a decade there may be no major tick at all; label the minor ones.
    axis.set_minor_formatter(plain if hi < 20 * lo else NullFormatter())


def _plot_throughput(data: ReportData) -> Plot | None:
    series = data.series()
    if not series:
        return None
    fig, (ax,) = _figure()
    top = max(1.0, max(m.point.load for m in data.measures))
    ax.plot([0, top], [0, top], color="0.6", linewidth=1, label="ideal (accepted = offered)")
    for ports in data.reference_ports():
        sat = hol_saturation(ports)
        ax.axhline(sat, color="0.4", linestyle=":", linewidth=1.2,
                   label=f"HOL limit, one FIFO per input, N={ports}: {sat:.3f}")
    for key in series:
        ax.plot(*_curve(data.of(key), lambda f: f.get("throughput")), **data.style(key))
    ax.set(xlabel="offered load (flits per input per cycle)",
           ylabel="accepted throughput (flits per output per cycle)",
           title="Accepted throughput", xlim=(0, top * 1.02), ylim=(0, top * 1.02))
    _legend(fig, ax)
    return Plot("throughput.png", "Accepted throughput", fig,
                "Accepted throughput against offered load, mean over seeds. The grey line is "
                "ideal; the dotted line is the saturation throughput of one FIFO per input "
                "under uniform traffic (head-of-line blocking, Karol et al. 1987).")


def _plot_latency(data: ReportData) -> Plot | None:
    series = data.series()
    if not series:
        return None
    fig, (ax_mean, ax_p99) = _figure(ncols=2)
    top = max(m.point.load for m in data.measures)
    how = []
    for ports in data.reference_ports():
        zero = data.zero_load_latency(ports)
        if zero is not None:
            t0, why = zero
            p = np.linspace(0.0, min(top, 0.98), 200)
            ax_mean.plot(p, t0 + oq_queueing_delay(ports, p), color="k", linestyle=":",
                         linewidth=1.2, label=f"output-queued bound, N={ports}")
            how.append(f"N={ports}: {why}")
        sat = hol_saturation(ports)
        for ax in (ax_mean, ax_p99):
            ax.axvline(sat, color="0.4", linestyle="-.", linewidth=1.2,
                       label=f"HOL limit, one FIFO per input, N={ports}: {sat:.3f}")
    for key in series:
        ms = data.of(key)
        ax_mean.plot(*_curve(ms, _latency("mean")), **data.style(key))
        ax_p99.plot(*_curve(ms, _latency("p99")), **data.style(key))
    for ax, stat in ((ax_mean, "mean"), (ax_p99, "99th percentile")):
        ax.set(xlabel="offered load (flits per input per cycle)",
               ylabel=f"{stat} latency (cycles, log scale)", title=f"{stat.capitalize()} latency",
               yscale="log", xlim=(0, top * 1.02))
        _plain_log_ticks(ax.yaxis)
    _legend(fig, ax_mean)
    bound = ("The dotted curve (mean only) is the output-queued lower bound: zero-load latency "
             f"plus W = ((N-1)/N) p / (2(1-p)), zero-load latency {'; '.join(how)}. "
             if how else "")
    return Plot("latency.png", "Mean and p99 latency", fig,
                "Mean and 99th-percentile latency (generation to tail delivery) against offered "
                "load, mean over seeds; model dashed, RTL solid. " + bound +
                "The dash-dotted vertical line is the saturation throughput of one FIFO per "
                "input (head-of-line blocking).")


def _packet_latencies(point: Point, sim: str) -> np.ndarray | None:
    path = point.dir / "packets.npz"
    if not path.is_file():
        return None
    with np.load(path) as cols:
        prefix = "model" if sim == "model" else "rtl"
        if f"{prefix}_tail" not in cols:
            return None
        tail, gen = cols[f"{prefix}_tail"], cols["gen"]
    delivered = tail >= 0
    return (tail[delivered] - gen[delivered]).astype(np.float64)


def _latency_cdf(data: ReportData, latencies: Callable[[Point, str], np.ndarray | None], *,
                name: str, what: str, population: str, files: str) -> Plot | None:
    """The latency CDF at the chosen load, per series, the runs of all seeds pooled.

    Parameters
    ----------
    data : ReportData
    latencies : callable
        ``(point, sim)`` -> the latencies of one run on one simulator, in
        cycles, or None when its files do not hold them.
    name : str
        File name of the PNG.
    what, population, files : str
        For the labels: what has a latency (``packet``), which of them count
        (``delivered packets``) and the files they come from.
    """
    if data.chosen_load is None:
        return None
    fig, (ax,) = _figure()
    runs = 0
    for key in data.series():
        parts = [lat for m in data.of(key, data.chosen_load)
                 if (lat := latencies(m.point, m.sim)) is not None]
        pooled = np.sort(np.concatenate(parts)) if parts else np.empty(0)
        if not len(pooled):
            continue
        runs += len(parts)
        style = data.style(key)
        style.pop("marker")
        ax.step(pooled, np.arange(1, len(pooled) + 1) / len(pooled), where="post", **style)
    if not runs:
        return None
    ax.set(xlabel=f"{what} latency (cycles, log scale)", ylabel=f"fraction of {population}",
           title=f"{what.capitalize()} latency CDF at load {data.chosen_load:g}", xscale="log",
           ylim=(0, 1.01))
    _plain_log_ticks(ax.xaxis)
    _legend(fig, ax)
    return Plot(name, f"{what.capitalize()} latency CDF", fig,
                f"Distribution of {what} latency at offered load {data.chosen_load:g}, the "
                f"{population} of all seeds pooled ({runs} runs' {files}); model dashed, "
                f"RTL solid.")


def _plot_latency_cdf(data: ReportData) -> Plot | None:
    return _latency_cdf(data, _packet_latencies, name="latency_cdf.png", what="packet",
                       population="delivered packets", files="packets.npz")


def _plot_port_throughput(data: ReportData) -> Plot | None:
    if data.chosen_load is None:
        return None
    bars = []
    for key in data.series():
        vectors = [m.figures["throughput_per_port"] for m in data.of(key, data.chosen_load)
                   if m.figures.get("throughput_per_port")]
        if vectors and len({len(v) for v in vectors}) == 1:
            bars.append((key, np.mean(vectors, axis=0)))
    if not bars:
        return None
    fig, (ax,) = _figure()
    width = 0.8 / len(bars)
    for i, (key, per_port) in enumerate(bars):
        style = data.style(key)
        ax.bar(np.arange(len(per_port)) + (i - (len(bars) - 1) / 2) * width, per_port, width,
               color=style["color"], label=style["label"], alpha=style.get("alpha", 1.0),
               hatch="//" if key[2] == "model" else None, edgecolor="white", linewidth=0.5)
    ports = max(len(v) for _, v in bars)
    ax.axhline(data.chosen_load, color="0.4", linestyle=":", linewidth=1.2,
               label=f"offered load per input {data.chosen_load:g}")
    ax.set(xlabel="output port", ylabel="accepted throughput (flits per cycle)",
           title=f"Per-port throughput at load {data.chosen_load:g}",
           xticks=range(ports))
    _legend(fig, ax)
    return Plot("port_throughput.png", "Per-port throughput", fig,
                f"Accepted throughput of each output port at offered load "
                f"{data.chosen_load:g}, mean over seeds; model hatched.")


def _ecn_decisions(point: Point, sim: str) -> tuple[np.ndarray, np.ndarray] | None:
    """Backlog at each ECN-capable packet's decision, and whether it was marked CE."""
    path = point.dir / "packets.npz"
    prefix = "model" if sim == "model" else "rtl"
    if not path.exists():
        return None
    with np.load(path) as cols:
        if f"{prefix}_ecn_backlog" not in cols.files:
            return None
        backlog, out, sent = cols[f"{prefix}_ecn_backlog"], cols[f"{prefix}_ecn_out"], cols["ecn"]
    capable = np.isin(sent, (1, 2)) & (backlog >= 0)
    return backlog[capable], out[capable] == 3


def _plot_ecn(data: ReportData) -> Plot | None:
    profiles = {json.dumps(m.point.results["config"]["ecn"], sort_keys=True):
                m.point.results["config"]["ecn"] for m in data.measures if m.figures.get("ecn")}
    if not profiles:
        return None
    kmax_all = max(max(e["kmax"], 1) for e in profiles.values())
    edges = np.unique(np.linspace(0, 1.5 * kmax_all, 25).astype(np.int64))
    fig, (ax,) = _figure()
    for key in data.series():
        parts = [d for m in data.of(key) if m.figures.get("ecn")
                 and (d := _ecn_decisions(m.point, m.sim)) is not None]
        if not parts:
            continue
        backlog = np.concatenate([b for b, _ in parts])
        marked = np.concatenate([k for _, k in parts])
        decided, _ = np.histogram(backlog, bins=edges)
        hit, _ = np.histogram(backlog[marked], bins=edges)
        seen = decided > 0
        centres = (edges[:-1] + edges[1:] - 1) / 2
        ax.plot(centres[seen], hit[seen] / decided[seen], **data.style(key))
    for ecn in profiles.values():
        kmin, kmax, pmax = ecn["kmin"], ecn["kmax"], ecn["pmax"]
        ax.plot([0, kmin, kmax, kmax, edges[-1]], [0, 0, pmax, 1, 1], color="0.3", linestyle=":",
                linewidth=1.4, label=f"configured: kmin={kmin}, kmax={kmax}, pmax={pmax:g}")
    ax.set(xlabel="backlog toward the (output, priority) at the decision (flits)",
           ylabel="fraction of ECN-capable packets marked CE", ylim=(-0.03, 1.05),
           xlim=(0, edges[-1]), title="ECN marking curve")
    _legend(fig, ax)
    return Plot("ecn_marking.png", "ECN marking curve", fig,
                "Fraction of ECN-capable packets marked CE against the backlog their marking "
                "decision saw, all runs of a series pooled (packets.npz), in bins up to 1.5 "
                "kmax; model dashed, RTL solid; the dotted line is the configured RED profile.")


def _plot_pfc(data: ReportData) -> Plot | None:
    if data.chosen_load is None:
        return None
    rows = []
    for key in data.series():
        found = [m.figures["pfc"] for m in data.of(key, data.chosen_load) if m.figures.get("pfc")]
        if found:
            sent = np.mean([[sum(c) for c in f["sent_per_port_class"]] for f in found], axis=0)
            paused = np.mean([[sum(c) for c in f["paused_cycles_per_port_class"]] for f in found],
                             axis=0)
            rows.append((key, sent, paused))
    if not rows:
        return None
    fig, (left, right) = _figure(2)
    width = 0.8 / len(rows)
    for i, (key, sent, paused) in enumerate(rows):
        style = data.style(key)
        shift = (i - (len(rows) - 1) / 2) * width
        for ax, values in ((left, sent), (right, paused)):
            ax.bar(np.arange(len(values)) + shift, values, width, color=style["color"],
                   label=style["label"], alpha=style.get("alpha", 1.0),
                   hatch="//" if key[2] == "model" else None, edgecolor="white", linewidth=0.5)
    left.set(xlabel="input port", ylabel="pause frames sent upstream",
             title=f"PFC frames sent at load {data.chosen_load:g}")
    right.set(xlabel="output port", ylabel="cycles paused by downstream (all classes)",
              title=f"Egress paused cycles at load {data.chosen_load:g}")
    for ax in (left, right):
        ax.set_ylim(bottom=0)
    _legend(fig, left)
    return Plot("pfc.png", "Priority flow control", fig,
                f"Pause frames each input port sent upstream (pause, refresh and resume) and "
                f"cycles each output was paused by frames from downstream, summed over classes, "
                f"at offered load {data.chosen_load:g}, mean over seeds; model hatched.")


#: The report's figures, in order. Each returns None when its data is absent.
PLOTS: tuple[Callable[[ReportData], Plot | None], ...] = (
    _plot_throughput, _plot_latency, _plot_latency_cdf, _plot_port_throughput, _plot_pfc,
    _plot_ecn)


# --------------------------------------------------------------------------
# The document: a list of blocks, rendered once to Markdown and once to HTML
#
#   ("h", level, text)  ("p", text)  ("alert", text)  ("ok", text)  ("list", [items])
#   ("table", header, rows, numeric_columns)  ("figure", Plot)  ("pre", text)


def _attention(source: Source, kind: ReportKind) -> list[tuple]:
    blocks = [("h", 2, "Attention")]
    rtl = [p for p in source.ok if p.rtl]
    differ = [p for p in rtl if not p.results["match"]["exact"]]
    if differ:
        blocks.append(("alert", f"RTL and model differ at: {len(differ)} of "
                                f"{_count(len(rtl), 'RTL point')}"))
        blocks.append(("list", [f"{p.describe()}: {kind.match_summary(p.results['match'])}"
                                for p in differ]))
    elif rtl:
        sims = sorted({p.sim for p in rtl})
        blocks.append(("ok", f"RTL and model agree exactly at every RTL point "
                             f"({_count(len(rtl), 'point')}: {', '.join(sims)})."))
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
                             f"({_count(len(source.points), 'point')})."))
    return blocks


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _sort_key(p: Point):
    return (p.pattern, p.variant, p.load, p.seed, _sim_rank(p.sim), p.id)


#: Header of the table of points; the test reads cells by these names.
TABLE_HEADER = ("pattern", "variant", "load", "seed", "sim",
                "throughput RTL", "throughput model", "throughput Δ",
                "mean latency RTL", "mean latency model", "mean latency Δ",
                "p99 latency RTL", "p99 latency model", "p99 latency Δ",
                "delivered/dropped", "match")
_NUMERIC = frozenset(range(2, 4)) | frozenset(range(5, 15))


def _row_head(p: Point) -> list[str]:
    """The cells that name a point: pattern, variant, load, seed, simulator."""
    return [p.pattern, p.variant, f"{p.load:g}", str(p.seed), p.sim]


def _failed_row(p: Point, columns: int) -> list[str]:
    """The row of a failed point: its name, dashes, and ``error`` as the match."""
    head = _row_head(p)
    return head + ["-"] * (columns - len(head) - 1) + ["error"]


def _compared_cells(p: Point, kind: ReportKind, columns) -> list[str]:
    """RTL, model and Δ cells for each ``(value, format)`` of ``columns``."""
    rtl = kind.figures(p.results) if p.rtl else None
    model = p.results["model"]
    cells = []
    for value, fmt in columns:
        r, m = (value(rtl) if rtl is not None else None), value(model)
        cells += [fmt(r), fmt(m), _format_delta(r, m, fmt)]
    return cells


def _match_cell(match: dict | None) -> str:
    if match is None:
        return "-"
    return "exact" if match["exact"] else f"{match.get('mismatches', 0)} mismatches"


def _table_row(p: Point) -> list[str]:
    if p.results is None:
        return _failed_row(p, len(TABLE_HEADER))
    res = p.results
    cells = _row_head(p) + _compared_cells(p, SWITCH, (
        (lambda f: f.get("throughput"), format_throughput),
        (_latency("mean"), format_latency), (_latency("p99"), format_latency)))
    cells.append(f"{res['packets']['delivered']}/{res['packets']['dropped']}")
    cells.append(_match_cell(res.get("match")))
    return cells


def _switch_tables(data: ReportData) -> list[tuple]:
    rows = [_table_row(p) for p in sorted(data.source.points, key=_sort_key)]
    return [("h", 2, "Points"),
            ("p", "Δ is RTL minus model. Latencies in cycles, generation to tail delivery; "
                  "throughput in flits per output per cycle."),
            ("table", TABLE_HEADER, rows, _NUMERIC)]


def _switch_match_summary(match: dict) -> str:
    from ..formats.match import Comparison
    return Comparison(exact=False, mismatches=match.get("mismatches", 0),
                      first_mismatch=match.get("first_mismatch"),
                      problems=match.get("problems") or []).summary()


def _switch_traffic(traffic: list[dict]) -> list[str]:
    return [f"cycles: {_distinct(t['cycles'] for t in traffic)}",
            f"packet lengths: {_distinct(t.get('packet_lengths') for t in traffic)}",
            f"sink stall: {_distinct(t.get('sink_stall', 0.0) for t in traffic)}",
            f"pause rate: {_distinct(t.get('pause_rate', 0.0) for t in traffic)}"]


#: Reports of switch runs: results.json's top level holds the figures.
SWITCH = ReportKind(name="switch", figures=lambda results: results, plots=PLOTS,
                    tables=_switch_tables, match_summary=_switch_match_summary,
                    checks=lambda point: [], traffic=_switch_traffic)


def _flatten(config: dict, prefix: str = "") -> dict:
    flat = {}
    for k, v in config.items():
        if isinstance(v, dict):
            flat.update(_flatten(v, f"{prefix}{k}."))
        else:
            flat[f"{prefix}{k}"] = v
    return flat


def _distinct(values) -> str:
    return ", ".join(str(v) for v in sorted(set(values), key=lambda v: (str(type(v)), v)))


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
    blocks += [("h", 3, "Traffic"), ("list", [
        f"patterns: {_distinct(p.pattern for p in source.points)}",
        f"loads: {_distinct(p.load for p in source.points)}",
        f"seeds: {_distinct(p.seed for p in source.points)}",
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
    for sim in sorted(speed, key=_sim_rank):
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


def _document(data: ReportData, plots: list[Plot]) -> list[tuple]:
    source, kind = data.source, data.kind
    what = (f"sweep of {len(source.points) + len(source.missing)} points"
            if source.spec is not None else "run")
    traffic = "RDMA " if kind.name == "rdma" else ""
    blocks = [("h", 1, f"superfabric report: {traffic}{what} {source.path}")]
    blocks += _attention(source, kind)
    if plots:
        blocks.append(("h", 2, "Plots"))
        blocks += [("figure", plot) for plot in plots]
    blocks += kind.tables(data)
    blocks += _provenance(source, kind)
    return blocks


def _markdown(blocks: list[tuple]) -> str:
    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    out = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            out.append(f"{'#' * block[1]} {block[2]}")
        elif kind == "p":
            out.append(block[1])
        elif kind in ("alert", "ok"):
            out.append(f"**{block[1]}**")
        elif kind == "list":
            out.append("\n".join(f"- {item}" for item in block[1]))
        elif kind == "pre":
            out.append(f"```\n{block[1]}\n```")
        elif kind == "table":
            _, header, rows, numeric = block
            lines = ["| " + " | ".join(cell(h) for h in header) + " |",
                     "|" + "|".join("---:" if i in numeric else "---"
                                    for i in range(len(header))) + "|"]
            lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
            out.append("\n".join(lines))
        elif kind == "figure":
            plot = block[1]
            out.append(f"![{plot.title}]({plot.name})\n\n*{plot.caption}*")
    return "\n\n".join(out) + "\n"


_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; max-width: 1400px; margin: 1.5em auto;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ccc; margin-top: 1.8em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 12.5px; }
th, td { border: 1px solid #ccc; padding: 2px 7px; }
th { background: #f0f0f0; } tr:nth-child(even) td { background: #fafafa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.alert { color: #a00; font-weight: bold; } .ok { color: #070; font-weight: bold; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.92em; color: #444; max-width: 60em; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; }
"""

# For headless checks (tests/test_report.py): how many images decoded, and
# any script error; it sits first in <body> so the body exists when it runs.
_SCRIPT = """
window.onerror = function (message) {
  var body = document.body;
  body.dataset.errors = (body.dataset.errors ? body.dataset.errors + " | " : "") + message;
};
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  document.body.dataset.imagesLoaded = images.filter(function (img) {
    return img.complete && img.naturalWidth > 0;
  }).length;
  document.body.dataset.imagesTotal = images.length;
});
"""


def _html(blocks: list[tuple], out: Path) -> str:
    esc = html.escape
    title = next(b[2] for b in blocks if b[0] == "h")
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{esc(title)}</title>", f"<style>{_CSS}</style></head>",
             f"<body><script>{_SCRIPT}</script>"]
    for block in blocks:
        kind = block[0]
        if kind == "h":
            parts.append(f"<h{block[1]}>{esc(block[2])}</h{block[1]}>")
        elif kind == "p":
            parts.append(f"<p>{esc(block[1])}</p>")
        elif kind in ("alert", "ok"):
            parts.append(f'<p class="{kind}">{esc(block[1])}</p>')
        elif kind == "list":
            parts.append("<ul>" + "".join(f"<li>{esc(i)}</li>" for i in block[1]) + "</ul>")
        elif kind == "pre":
            parts.append(f"<pre>{esc(block[1])}</pre>")
        elif kind == "table":
            _, header, rows, numeric = block
            head = "".join(f"<th>{esc(h)}</th>" for h in header)
            body = "".join(
                "<tr>" + "".join(f'<td{" class=num" if i in numeric else ""}>{esc(str(c))}</td>'
                                 for i, c in enumerate(row)) + "</tr>" for row in rows)
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif kind == "figure":
            plot = block[1]
            png = base64.b64encode((out / plot.name).read_bytes()).decode("ascii")
            parts.append(f'<figure><img src="data:image/png;base64,{png}" '
                         f'alt="{esc(plot.title)}"><figcaption>{esc(plot.caption)}'
                         f"</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_report(src: Path, out: Path, *, cdf_load: float | None = None) -> Path:
    """Write ``report.md``, ``report.html`` and the PNG plots of a run or a sweep.

    Parameters
    ----------
    src : pathlib.Path
        A run directory (``results.json``) or a sweep directory (``sweep.json``),
        of switch traffic or of RDMA traffic (``rdma-*`` patterns), not both.
    out : pathlib.Path
        Report directory, created when missing; the PNGs go next to the reports.
    cdf_load : float, optional
        Offered load of the latency CDF (and, for switch runs, per-port
        throughput and PFC) plots; it must be a load of the runs. Default:
        the highest load <= 0.9 present.

    Returns
    -------
    pathlib.Path
        The path of ``report.html``.

    Raises
    ------
    ReportError
        When ``src`` is neither kind of directory, a file in it is unreadable,
        it mixes switch and RDMA runs, or ``cdf_load`` is not a load of its runs.
    """
    source = load_source(src)
    if source.kind == "rdma":
        from .report_rdma import RDMA as kind
    else:
        kind = SWITCH
    ok = source.ok
    data = ReportData(source=source, measures=_measures(ok, kind),
                      chosen_load=_choose_load(ok, cdf_load), kind=kind)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plots = []
    for make in kind.plots:
        plot = make(data)
        if plot is not None:
            plot.figure.savefig(out / plot.name, dpi=110)
            plots.append(plot)
    blocks = _document(data, plots)
    (out / "report.md").write_text(_markdown(blocks), encoding="utf-8")
    path = out / "report.html"
    path.write_text(_html(blocks, out), encoding="utf-8")
    return path
