"""Switch runs in ``superfabric report``: throughput, latency, per-port, PFC, ECN plots, table.

The figures of a switch run are the top level of its ``results.json`` (the
RTL's for RTL runs) and the golden model's are ``results["model"]``; the
reference curves are the head-of-line saturation throughput and the
output-queued queueing delay. This module is the :data:`SWITCH`
:class:`~superfabric.tools.report.data.ReportKind`.
"""

from __future__ import annotations

import json
import math
from typing import Callable

import numpy as np

from ...formats.match import Comparison
from ...formats.packet import CE, ECT0, ECT1
from .data import ReportData, ReportKind, latency, same_load
from .document import (compared_cells, failed_row, format_latency, format_throughput,
                              match_cell, row_head, sort_key)
from .plots import Plot, figure, latency_cdf, latency_plot, legend, throughput_plot
from .source import Point, distinct

__all__ = ["HOL_SATURATION", "ONE_FLIT_ZERO_LOAD_LATENCY", "PLOTS", "SWITCH", "TABLE_HEADER",
           "hol_saturation", "oq_queueing_delay"]

#: Saturation throughput of an N x N input-queued switch with one FIFO per
#: input under uniform traffic, limited by head-of-line blocking (Karol,
#: Hluchyj, Morgan 1987; the finite-N values computed by simulation, as in
#: their table).
HOL_SATURATION = {2: 0.750, 4: 0.655, 8: 0.618, 16: 0.601, 32: 0.594}

#: Zero-load latency (generation to tail delivery) of a 1-flit packet
#: through the switch pipeline, in cycles (docs/architecture.md section 5.4).
ONE_FLIT_ZERO_LOAD_LATENCY = 4.0


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


def _reference_ports(data: ReportData) -> list[int]:
    """The switch radices present, for the reference curves."""
    return sorted({m.ports for m in data.measures})


def _zero_load_latency(data: ReportData, ports: int) -> tuple[float, str] | None:
    """Zero-load latency for the output-queued bound, and how it was chosen."""
    ms = [m for m in data.measures if m.ports == ports]
    if all(m.point.results["traffic"].get("packet_lengths") == "fixed:1" for m in ms):
        return (ONE_FLIT_ZERO_LOAD_LATENCY,
                f"{ONE_FLIT_ZERO_LOAD_LATENCY:g} cycles, the pipeline latency of a "
                f"1-flit packet")
    means = [(m.point.load, v) for m in ms if (v := latency("mean")(m.figures)) is not None]
    if not means:
        return None
    lowest = min(x for x, _ in means)
    t0 = min(v for x, v in means if same_load(x, lowest))
    return t0, (f"{t0:.2f} cycles, the minimum mean latency observed at the lowest load "
                f"({lowest:g})")


def _plot_throughput(data: ReportData) -> Plot | None:
    references = []
    for ports in _reference_ports(data):
        sat = hol_saturation(ports)
        references.append((sat, f"HOL limit, one FIFO per input, N={ports}: {sat:.3f}"))
    return throughput_plot(
        data, references, unit_in="flits per input per cycle",
        unit_out="flits per output per cycle",
        caption="Accepted throughput against offered load, mean over seeds. The grey line is "
                "ideal; the dotted line is the saturation throughput of one FIFO per input "
                "under uniform traffic (head-of-line blocking, Karol et al. 1987).")


def _plot_latency(data: ReportData) -> Plot | None:
    how = []

    def annotate(ax_mean, ax_p99, top):
        for ports in _reference_ports(data):
            zero = _zero_load_latency(data, ports)
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

    def caption():
        bound = ("The dotted curve (mean only) is the output-queued lower bound: zero-load "
                 f"latency plus W = ((N-1)/N) p / (2(1-p)), zero-load latency {'; '.join(how)}. "
                 if how else "")
        return ("Mean and 99th-percentile latency (generation to tail delivery) against offered "
                "load, mean over seeds; model dashed, RTL solid. " + bound +
                "The dash-dotted vertical line is the saturation throughput of one FIFO per "
                "input (head-of-line blocking).")
    return latency_plot(data, annotate, unit_in="flits per input per cycle", caption=caption)


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


def plot_latency_cdf(data: ReportData) -> Plot | None:
    return latency_cdf(data, _packet_latencies, name="latency_cdf.png", what="packet",
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
    fig, (ax,) = figure()
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
    legend(fig, ax)
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
    capable = np.isin(sent, (ECT1, ECT0)) & (backlog >= 0)
    return backlog[capable], out[capable] == CE


def plot_ecn(data: ReportData) -> Plot | None:
    profiles = {json.dumps(m.point.results["config"]["ecn"], sort_keys=True):
                m.point.results["config"]["ecn"] for m in data.measures if m.figures.get("ecn")}
    if not profiles:
        return None
    kmax_all = max(max(e["kmax"], 1) for e in profiles.values())
    edges = np.unique(np.linspace(0, 1.5 * kmax_all, 25).astype(np.int64))
    fig, (ax,) = figure()
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
    legend(fig, ax)
    return Plot("ecn_marking.png", "ECN marking curve", fig,
                "Fraction of ECN-capable packets marked CE against the backlog their marking "
                "decision saw, all runs of a series pooled (packets.npz), in bins up to 1.5 "
                "kmax; model dashed, RTL solid; the dotted line is the configured RED profile.")


def plot_pfc(data: ReportData) -> Plot | None:
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
    fig, (left, right) = figure(2)
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
    legend(fig, left)
    return Plot("pfc.png", "Priority flow control", fig,
                f"Pause frames each input port sent upstream (pause, refresh and resume) and "
                f"cycles each output was paused by frames from downstream, summed over classes, "
                f"at offered load {data.chosen_load:g}, mean over seeds; model hatched.")


#: The report's figures, in order. Each returns None when its data is absent.
PLOTS: tuple[Callable[[ReportData], Plot | None], ...] = (
    _plot_throughput, _plot_latency, plot_latency_cdf, _plot_port_throughput, plot_pfc,
    plot_ecn)

#: Header of the table of points; the test reads cells by these names.
TABLE_HEADER = ("pattern", "variant", "load", "seed", "sim",
                "throughput RTL", "throughput model", "throughput Δ",
                "mean latency RTL", "mean latency model", "mean latency Δ",
                "p99 latency RTL", "p99 latency model", "p99 latency Δ",
                "delivered/dropped", "match")
_NUMERIC = frozenset(range(2, 4)) | frozenset(range(5, 15))


def _table_row(p: Point) -> list[str]:
    if p.results is None:
        return failed_row(p, len(TABLE_HEADER))
    res = p.results
    cells = row_head(p) + compared_cells(p, SWITCH, (
        (lambda f: f.get("throughput"), format_throughput),
        (latency("mean"), format_latency), (latency("p99"), format_latency)))
    cells.append(f"{res['packets']['delivered']}/{res['packets']['dropped']}")
    cells.append(match_cell(res.get("match")))
    return cells


def switch_tables(data: ReportData) -> list[tuple]:
    rows = [_table_row(p) for p in sorted(data.source.points, key=sort_key)]
    return [("h", 2, "Points"),
            ("p", "Δ is RTL minus model. Latencies in cycles, generation to tail delivery; "
                  "throughput in flits per output per cycle."),
            ("table", TABLE_HEADER, rows, _NUMERIC)]


def switch_match_summary(match: dict) -> str:
    return Comparison.from_dict(match).summary()


def switch_traffic(traffic: list[dict]) -> list[str]:
    return [f"cycles: {distinct(t['cycles'] for t in traffic)}",
            f"packet lengths: {distinct(t.get('packet_lengths') for t in traffic)}",
            f"sink stall: {distinct(t.get('sink_stall', 0.0) for t in traffic)}",
            f"pause rate: {distinct(t.get('pause_rate', 0.0) for t in traffic)}"]


#: Reports of switch runs: results.json's top level holds the figures.
SWITCH = ReportKind(name="switch", figures=lambda results: results, plots=PLOTS,
                    tables=switch_tables, match_summary=switch_match_summary,
                    checks=lambda point: [], traffic=switch_traffic)
