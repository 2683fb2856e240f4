"""Collective runs in ``superfabric report``: busbw and time against message size, as
nccl-tests reports them, beside the alpha-beta prediction.

A run of ``collective:`` traffic keeps its figures in the ``collective``
section of ``results.json`` (docs/spec/collective.md section 15.8.4; the
golden model is the only simulator that runs it). A sweep over sizes and
algorithms (``--vary traffic.bytes=...,traffic.algo=...``) gives one curve
per operation, algorithm, element type and configuration variant, against the
message size. This module is the :data:`COLLECTIVE`
:class:`~superfabric.tools.report.data.ReportKind`: its plots (busbw and time
against size, and the timeline of a single run's steps), its checks and its
tables (nccl-tests' columns per run, and busbw per size and algorithm).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from .data import ReportData, ReportKind
from .document import count, sort_key
from .plots import Plot, figure, legend, plain_log_ticks
from .source import Point, variant_label

__all__ = ["COLLECTIVE", "COLLECTIVE_HEADER", "PLOTS"]

#: The table of runs: nccl-tests' columns (size, count, time, algbw, busbw) and the model's.
COLLECTIVE_HEADER = ("op", "algo", "dtype", "variant", "seed", "size (B)", "count (elements)",
                     "cycles", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "alpha-beta (us)",
                     "ratio", "data")
_NUMERIC = frozenset(range(4, 13))
#: Bytes of an element: int32 and binary32 alike.
_ELEMENT_BYTES = 4


def _figures(p: Point) -> dict:
    return p.results["collective"]


def _config_variant(p: Point) -> str:
    """The varied configuration keys of a point, without the pattern's own (size, algorithm)."""
    return variant_label({k: v for k, v in p.vary.items() if not k.startswith("traffic.")})


def _group(p: Point) -> tuple[str, str, str, str]:
    """(op, algo, dtype, configuration variant): one curve against the message size."""
    f = _figures(p)
    return (f["op"], f["algo"], f["dtype"], _config_variant(p))


def _label(group: tuple[str, str, str, str]) -> str:
    op, algo, dtype, variant = group
    return f"{op} {algo} {dtype}" + ("" if variant == "base" else f", {variant}")


def _curves(data: ReportData, value) -> list[tuple[tuple, np.ndarray, np.ndarray]]:
    """Per group, the mean over seeds of ``value(figures)`` at each size (finished runs)."""
    by = defaultdict(lambda: defaultdict(list))
    for p in data.source.ok:
        f = _figures(p)
        if f.get("cycles") is not None and (v := value(f)) is not None:
            by[_group(p)][f["bytes"]].append(v)
    out = []
    for group in sorted(by):
        sizes = sorted(by[group])
        out.append((group, np.array(sizes), np.array([np.mean(by[group][s]) for s in sizes])))
    return out


def _size_axis(ax) -> None:
    """Message size on a base-2 log axis labelled in B, KiB, MiB."""
    from matplotlib.ticker import FuncFormatter
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _size(v)))


def _size(nbytes: float) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes:g} B"


def _plot_busbw(data: ReportData) -> Plot | None:
    curves = _curves(data, lambda f: f.get("busbw_gbps"))
    if not curves:
        return None
    fig, (ax,) = figure()
    for i, (group, sizes, busbw) in enumerate(curves):
        ax.plot(sizes, busbw, marker="o", color=f"C{i % 10}", label=_label(group))
    links = sorted({_figures(p)["link_gbps"] for p in data.source.ok})
    for gbps in links:
        ax.axhline(gbps, color="0.4", linestyle=":", linewidth=1.2, label=f"link, {gbps:g} GB/s")
    ax.set(xlabel="message size per accelerator", ylabel="busbw (GB/s)",
           title="Bus bandwidth against message size", ylim=(0, None))
    _size_axis(ax)
    legend(fig, ax)
    return Plot("busbw.png", "Bus bandwidth", fig,
                "nccl-tests' bus bandwidth (algbw times the operation's factor, docs/spec/"
                "collective.md 15.6) of each operation and algorithm against the message size "
                "per accelerator, mean over seeds; dotted: a link's rate each way, headers "
                "included, which busbw can approach but not pass.")


def _plot_time(data: ReportData) -> Plot | None:
    measured = _curves(data, lambda f: f.get("time_us"))
    if not measured:
        return None
    # The prediction in µs at the run's own clock (time_us / cycles).
    predicted = dict((g, y) for g, _, y in _curves(
        data, lambda f: f["alpha_beta_cycles"] * f["time_us"] / f["cycles"]))
    fig, (ax,) = figure()
    for i, (group, sizes, time_us) in enumerate(measured):
        ax.plot(sizes, time_us, marker="o", color=f"C{i % 10}", label=_label(group))
        ax.plot(sizes, predicted[group], linestyle="--", color=f"C{i % 10}", linewidth=1.2,
                label=f"{_label(group)}, alpha-beta")
    ax.set(xlabel="message size per accelerator", ylabel="time (µs, log scale)",
           title="Completion time against message size", yscale="log")
    plain_log_ticks(ax.yaxis)
    _size_axis(ax)
    legend(fig, ax)
    return Plot("time.png", "Completion time", fig,
                "The collective's time, from the first step to the last slot applied on every "
                "accelerator, mean over seeds (solid), and the alpha-beta model's prediction of "
                "the same schedule (dashed, docs/spec/collective.md 15.6).")


def _plot_timeline(data: ReportData) -> Plot | None:
    """The steps and applies of every accelerator against time, for a single run."""
    ok = data.source.ok
    if len(ok) != 1 or not (ok[0].dir / "collective.npz").is_file():
        return None
    with np.load(ok[0].dir / "collective.npz") as timeline:
        started, applied = timeline["started"], timeline["applied"]
    fig, (ax,) = figure()
    ax.scatter(started[:, 2], started[:, 0], marker="|", s=120, color="C0",
               label="step started (its WRITEs posted)")
    ax.scatter(applied[:, 2], applied[:, 0] + 0.25, marker=".", s=30, color="C3",
               label="slot applied (reduced or copied)")
    f = _figures(ok[0])
    ax.set(xlabel="cycle", ylabel="accelerator", title=f"Timeline: {_label(_group(ok[0]))}, "
           f"{_size(f['bytes'])}", yticks=range(f["accelerators"]))
    legend(fig, ax)
    return Plot("timeline.png", "Timeline of the steps", fig,
                f"Per accelerator, the cycle each of its {count(len(started), 'step')} started "
                f"and each of its {count(len(applied), 'slot')} was applied "
                "(collective.npz); a step waits for the slot its schedule names.")


PLOTS = (_plot_busbw, _plot_time, _plot_timeline)


def _checks(p: Point) -> list[str]:
    f = _figures(p)
    problems = []
    if f.get("cycles") is None:
        problems.append("did not finish")
    if f.get("errors"):
        problems.append(f"{count(f['errors'], 'work request')} completed with an error")
    if f.get("data_ok") is False:
        problems.append("an accelerator's result differs from numpy's")
    return problems


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.3f}"


def _row(p: Point) -> list[str]:
    if p.results is None:
        return [p.pattern, "-", "-", _config_variant(p), str(p.seed)] + ["-"] * 8 + ["error"]
    f = _figures(p)
    done = f.get("cycles") is not None
    predicted = f["alpha_beta_cycles"] * f["time_us"] / f["cycles"] if done else None
    return [f["op"], f["algo"], f["dtype"], _config_variant(p), str(p.seed), f"{f['bytes']:,}",
            f"{f['bytes'] // _ELEMENT_BYTES:,}", f"{f['cycles']:,}" if done else "-",
            _us(f.get("time_us")), _us(f.get("algbw_gbps")), _us(f.get("busbw_gbps")),
            _us(predicted), f"{f['alpha_beta_ratio']:.2f}" if done else "-",
            "exact" if f.get("data_ok") else "wrong"]


def _by_size(data: ReportData) -> list[tuple]:
    """busbw per size (rows) and curve (columns): the algorithms side by side."""
    curves = _curves(data, lambda f: f.get("busbw_gbps"))
    if len(curves) < 2:
        return []
    sizes = sorted({int(s) for _, xs, _ in curves for s in xs})
    rows = []
    for size in sizes:
        row = [_size(size)]
        for _, xs, ys in curves:
            hit = np.flatnonzero(xs == size)
            row.append(f"{ys[hit[0]]:,.3f}" if len(hit) else "-")
        rows.append(row)
    header = ("size",) + tuple(_label(g) for g, _, _ in curves)
    return [("h", 2, "Bus bandwidth by size"),
            ("p", "busbw in GB/s, mean over seeds, of every curve at every size; the best "
                  "algorithm at a size is the largest value of its row."),
            ("table", header, rows, frozenset(range(1, len(header))))]


def _tables(data: ReportData) -> list[tuple]:
    def order(p: Point):
        f = _figures(p) if p.results is not None else {}
        return (f.get("op", ""), f.get("algo", ""), f.get("dtype", ""), _config_variant(p),
                f.get("bytes", 0), sort_key(p))

    rows = [_row(p) for p in sorted(data.source.points, key=order)]
    return _by_size(data) + [
        ("h", 2, "Runs"),
        ("p", "Per run, as nccl-tests prints it: the message size per accelerator and its "
              "elements, the time from the first step to the last slot applied everywhere, "
              "algbw (size over time) and busbw in GB/s (10^9 bytes a second) at "
              "fabric.clock_mhz, the alpha-beta prediction and the time over it, and whether "
              "every accelerator holds numpy's result bit for bit."),
        ("table", COLLECTIVE_HEADER, rows, _NUMERIC)]


#: Reports of collective runs: results.json's ``collective`` section holds the figures.
COLLECTIVE = ReportKind(name="collective", figures=lambda results: results["collective"],
                        plots=PLOTS, tables=_tables, match_summary=lambda match: "",
                        checks=_checks, traffic=lambda traffic: [])
