"""What every plot of a report is drawn with: :class:`Plot`, figures, legends, log axes, CDFs.

Each plot is a function of the :class:`~superfabric.tools.report.data.ReportData`
that returns a :class:`Plot`, or None when the data it needs is absent; the
switch's are in :mod:`superfabric.tools.report.switch`, the RDMA runs' in
:mod:`superfabric.tools.report.rdma`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .data import ReportData, curve, latency
from .source import Point

__all__ = ["Plot", "figure", "legend", "plain_log_ticks", "latency_cdf", "throughput_plot",
           "latency_plot"]


@dataclass
class Plot:
    """One figure of the report: file name, short title, matplotlib figure and caption."""

    name: str
    title: str
    figure: object
    caption: str


def figure(ncols: int = 1):
    """A new figure with ``ncols`` gridded axes side by side: ``(figure, axes)``."""
    # matplotlib.figure.Figure without pyplot renders PNG with Agg whatever
    # the session's backend, and keeps no global state between reports
    # (matplotlib's advice for servers); importing it here keeps
    # `from superfabric.tools.report.build import ReportError` cheap for the CLI.
    from matplotlib.figure import Figure
    fig = Figure(figsize=(6.0 * ncols + 3.0, 4.6), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    for ax in axes:
        ax.grid(True, alpha=0.3)
    return fig, axes


def legend(fig, ax) -> None:
    """The legend of ``ax``, outside the axes at the upper right."""
    fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper", fontsize="small")


def plain_log_ticks(axis) -> None:
    """Label a log axis 4, 10, 100 rather than 4x10^0; minor ticks only over a short range."""
    from matplotlib.ticker import FuncFormatter, NullFormatter
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    lo, hi = axis.get_view_interval()
    axis.set_major_formatter(plain)
    # Under about a decade there may be no major tick at all; label the minor ones.
    axis.set_minor_formatter(plain if hi < 20 * lo else NullFormatter())


def latency_cdf(data: ReportData, latencies: Callable[[Point, str], np.ndarray | None], *,
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
    fig, (ax,) = figure()
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
    plain_log_ticks(ax.xaxis)
    legend(fig, ax)
    return Plot(name, f"{what.capitalize()} latency CDF", fig,
                f"Distribution of {what} latency at offered load {data.chosen_load:g}, the "
                f"{population} of all seeds pooled ({runs} runs' {files}); model dashed, "
                f"RTL solid.")


def throughput_plot(data: ReportData, references: list[tuple[float, str]], *, unit_in: str,
                    unit_out: str, caption: str) -> Plot | None:
    """Accepted throughput against offered load, mean over seeds, one curve per series, the
    ideal line, and ``references`` as dotted horizontal lines (value, legend label) where
    they fall below the plot's top; ``unit_in``/``unit_out`` name the axes' units."""
    series = data.series()
    if not series:
        return None
    fig, (ax,) = figure()
    top = max(1.0, max(m.point.load for m in data.measures))
    ax.plot([0, top], [0, top], color="0.6", linewidth=1, label="ideal (accepted = offered)")
    for value, label in references:
        if value < top:
            ax.axhline(value, color="0.4", linestyle=":", linewidth=1.2, label=label)
    for key in series:
        ax.plot(*curve(data.of(key), lambda f: f.get("throughput")), **data.style(key))
    ax.set(xlabel=f"offered load ({unit_in})", ylabel=f"accepted throughput ({unit_out})",
           title="Accepted throughput", xlim=(0, top * 1.02), ylim=(0, top * 1.02))
    legend(fig, ax)
    return Plot("throughput.png", "Accepted throughput", fig, caption)


def latency_plot(data: ReportData, annotate: Callable[[object, object, float], None], *,
                 unit_in: str, caption: Callable[[], str]) -> Plot | None:
    """Mean and 99th-percentile latency against offered load, mean over seeds, one curve per
    series, side by side on log axes; ``annotate(ax_mean, ax_p99, top)`` draws a report's
    references first (``top``: the highest offered load), ``caption()``, called after it,
    says what they are; ``unit_in`` names the offered load's unit."""
    series = data.series()
    if not series:
        return None
    fig, (ax_mean, ax_p99) = figure(ncols=2)
    top = max(m.point.load for m in data.measures)
    annotate(ax_mean, ax_p99, top)
    for key in series:
        ms = data.of(key)
        ax_mean.plot(*curve(ms, latency("mean")), **data.style(key))
        ax_p99.plot(*curve(ms, latency("p99")), **data.style(key))
    for ax, stat in ((ax_mean, "mean"), (ax_p99, "99th percentile")):
        ax.set(xlabel=f"offered load ({unit_in})",
               ylabel=f"{stat} latency (cycles, log scale)", title=f"{stat.capitalize()} latency",
               yscale="log", xlim=(0, top * 1.02))
        plain_log_ticks(ax.yaxis)
    legend(fig, ax_mean)
    return Plot("latency.png", "Mean and p99 latency", fig, caption())
