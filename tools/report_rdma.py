"""RDMA runs in ``superfabric report``: goodput, message latency, recovery, connection state.

A run of ``rdma-*`` traffic keeps its figures in the ``rdma`` section of
``results.json`` (the RTL's for RTL runs) and the golden model's in
``model`` (``docs/architecture.md`` section 10.9). Sources, curves averaged
over seeds, the attention list, provenance and the Markdown and HTML output
are shared with switch reports (:mod:`superfabric.tools.report`); this
module is the :data:`RDMA` :class:`~superfabric.tools.report_data.ReportKind`:
the plots, the checks a run's own figures must pass, the connection-state
table and the table of points.

Recovery counts are plotted per 1,000 data packets sent (``tx_data``,
retransmissions included), so runs of different loads and lengths compare;
against the fault rate when the runs vary one (``faults.*_rate``), else
against offered load.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..formats.rdma_wire import STATUS_OK, payload_words
from ..sim.rdma_records import RdmaRecords
from ..sim.rdma_traffic import RdmaWorkload
from .report_data import (ReportData, ReportKind, curve, latency, line_style, offered_load,
                          sim_rank)
from .report_document import (compared_cells, count, failed_row, format_latency, format_throughput,
                              match_cell, row_head, sort_key)
from .report_plots import Plot, figure, latency_cdf, legend, plain_log_ticks
from .report_source import Point, distinct, variant_label

__all__ = ["CONNECTION_HEADER", "PLOTS", "RDMA", "RDMA_TABLE_HEADER"]


# --------------------------------------------------------------------------
# Plots


def _goodput(figures: dict) -> float | None:
    return figures.get("goodput")


def _offered_curves(data: ReportData) -> list[tuple]:
    """``(colour, pattern, variants, loads, words)`` per distinct curve of offered words.

    The offered words are the workload's, so variants that leave it alone
    (a fault rate) share one curve; ``variants`` is empty when all of the
    pattern's do, and the curve takes the colour of its first variant.
    """
    groups = sorted({key[:2] for key in data.series()})
    curves = []
    for colour, (pattern, variant) in enumerate(groups):
        # The model's measure of every run carries the workload's figures.
        xs, ys = curve(data.of((pattern, variant, "model")), lambda f: f.get("offered_words"))
        same = [c for c in curves if c[1] == pattern and np.array_equal(c[3], xs)
                and np.allclose(c[4], ys)]
        if same:
            same[0][2].append(variant)
        else:
            curves.append((colour, pattern, [variant], xs, ys))
    for offered in curves:
        if len(offered[2]) == sum(1 for p, _ in groups if p == offered[1]):
            offered[2].clear()
    return curves


def _plot_goodput(data: ReportData) -> Plot | None:
    series = data.series()
    if not series:
        return None
    fig, (ax,) = figure()
    for colour, pattern, variants, xs, ys in _offered_curves(data):
        ax.plot(xs, ys, color=f"C{colour % 10}", linestyle=":", linewidth=1.4,
                label=", ".join(["offered", pattern, *variants]))
    for flits in sorted({int(m.point.results["config"]["switch"]["max_packet_flits"])
                         for m in data.measures}):
        words = payload_words(flits)
        ax.axhline(words / (words + 3), color="0.5", linewidth=1.2,
                   label=f"full uplink, {words} words per packet: {words / (words + 3):.3f}")
    for key in series:
        ax.plot(*curve(data.of(key), _goodput), **data.style(key))
    top = max(m.point.load for m in data.measures)
    ax.set(xlabel="offered load (share of the uplink the work requests occupy)",
           ylabel="goodput (payload words per cycle per endpoint)", title="Goodput",
           xlim=(0, top * 1.02))
    ax.set_ylim(bottom=0)
    legend(fig, ax)
    return Plot("rdma_goodput.png", "Goodput", fig,
                "Goodput against offered load, mean over seeds: payload words of the requests "
                "completed OK within the posting window, per cycle per endpoint; model dashed, "
                "RTL solid, one colour per pattern and variant. Dotted: the payload words "
                "offered (one curve for the variants that share a workload). Grey: what a "
                "full uplink carries, M / (M + 3) words per cycle for M payload words per "
                "packet.")


def _plot_message_latency(data: ReportData) -> Plot | None:
    series = data.series()
    if not series:
        return None
    fig, (ax_mean, ax_p99) = figure(ncols=2)
    for key in series:
        ms = data.of(key)
        ax_mean.plot(*curve(ms, latency("mean")), **data.style(key))
        ax_p99.plot(*curve(ms, latency("p99")), **data.style(key))
    top = max(m.point.load for m in data.measures)
    for ax, stat in ((ax_mean, "mean"), (ax_p99, "99th percentile")):
        ax.set(xlabel="offered load (share of the uplink the work requests occupy)",
               ylabel=f"{stat} message latency (cycles, log scale)",
               title=f"{stat.capitalize()} message latency", yscale="log", xlim=(0, top * 1.02))
        plain_log_ticks(ax.yaxis)
    legend(fig, ax_mean)
    return Plot("rdma_latency.png", "Mean and p99 message latency", fig,
                "Mean and 99th-percentile message latency (posting of a work request to its "
                "completion, requests completed OK) against offered load, mean over seeds; "
                "model dashed, RTL solid.")


def _message_latencies(point: Point, sim: str) -> np.ndarray | None:
    """``done - post`` of the requests one simulator completed OK in one run."""
    records = point.dir / ("model_records.npz" if sim == "model" else "rtl_records.npz")
    workload = point.dir / "workload.npz"
    if not (records.is_file() and workload.is_file()):
        return None
    post = RdmaWorkload.load(workload).wr["post"]
    rec = RdmaRecords.load(records)
    ok = rec.status == STATUS_OK
    return (rec.done[ok] - post[ok]).astype(np.float64)


def _plot_message_latency_cdf(data: ReportData) -> Plot | None:
    return latency_cdf(data, _message_latencies, name="rdma_latency_cdf.png", what="message",
                        population="requests completed OK", files="workload and records")


#: The recovery counters plotted: name, axis label, title.
_RECOVERY = (("retransmissions", "retransmissions", "Retransmissions"),
             ("naks", "NAKs sent", "NAKs sent"), ("timeouts", "timeouts", "Timeouts"))


def _per_thousand_sent(name: str):
    def value(figures: dict) -> float | None:
        sent = sum(figures["counters"].get("tx_data", []))
        return 1000 * figures[name]["total"] / sent if sent else None
    return value


def _fault_axis(data: ReportData) -> str | None:
    """The first ``faults.*_rate`` key the runs vary over two values or more, if any."""
    keys = dict.fromkeys(k for m in data.measures for k in m.point.vary
                         if k.startswith("faults.") and k.endswith("_rate"))
    for key in keys:
        if len({m.point.vary.get(key) for m in data.measures}) > 1:
            return key
    return None


def _recovery_lines(data: ReportData, axis: str | None) -> list:
    """``(measures, style)`` per line: per series, or per (pattern, rest, load, sim)."""
    if axis is None:
        return [(data.of(key), data.style(key)) for key in data.series()]
    groups = defaultdict(list)
    for m in data.measures:
        rest = {k: v for k, v in m.point.vary.items() if k != axis}
        groups[(m.point.pattern, variant_label(rest) if rest else "", m.point.load,
                m.sim)].append(m)
    keys = sorted(groups, key=lambda k: (*k[:3], sim_rank(k[3])))
    colours = sorted({k[:3] for k in keys})
    return [(groups[k], line_style(colours.index(k[:3]), ", ".join(
                x for x in (k[0], k[1], f"load {k[2]:g}", k[3]) if x), k[3]))
            for k in keys]


def _plot_recovery(data: ReportData) -> Plot | None:
    if not data.measures:
        return None
    axis = _fault_axis(data)
    x = offered_load if axis is None else (lambda m: float(m.point.vary[axis]))
    xlabel = ("offered load (share of the uplink the work requests occupy)" if axis is None
              else f"{axis} (varied)")
    fig, axes = figure(ncols=len(_RECOVERY))
    lines = _recovery_lines(data, axis)
    for ax, (name, label, title) in zip(axes, _RECOVERY):
        for measures, style in lines:
            ax.plot(*curve(measures, _per_thousand_sent(name), x=x), **style)
        ax.set(xlabel=xlabel, ylabel=f"{label} per 1,000 data packets sent", title=title)
        ax.set_ylim(bottom=0)
    legend(fig, axes[0])
    against = "offered load" if axis is None else f"the varied {axis}"
    return Plot("rdma_recovery.png", "Retransmissions, NAKs and timeouts", fig,
                f"How the engines recovered, against {against}, mean over seeds: "
                f"retransmitted data packets, NAKs sent and retransmission timeouts, each per "
                f"1,000 data packets sent (retransmissions included), all endpoints; model "
                f"dashed, RTL solid.")


#: The figures of an RDMA report, in order. Each returns None when its data is absent.
PLOTS = (_plot_goodput, _plot_message_latency, _plot_message_latency_cdf, _plot_recovery)


# --------------------------------------------------------------------------
# Checks and tables


def _problems(figures: dict) -> list[str]:
    """What one execution's ``rdma`` figures show wrong (section 10.9's keys)."""
    req, data, rx = figures["requests"], figures["data"], figures["rx_completions"]
    out = []
    if req["not_completed"]:
        out.append(f"{req['not_completed']} of {req['posted']} requests not completed")
    if req["unexpected_status"]:
        out.append(f"{req['unexpected_status']} completed with an unexpected status (first tag "
                   f"{req['first_unexpected']})")
    if req["repeated_completions"]:
        out.append(f"{req['repeated_completions']} completed more than once")
    if data["corrupted"]:
        out.append(f"{data['corrupted']} OK completions with wrong data (first tag "
                   f"{data['first_corrupted']})")
    if data["stray_words"]:
        out.append(f"{data['stray_words']} memory words changed outside the OK completions")
    if rx["count"] != rx["expected"]:
        out.append(f"{rx['count']} receive completions, {rx['expected']} expected")
    return out


def _checks(p: Point) -> list[str]:
    res = p.results
    runs = [(p.sim, res["rdma"])] + ([("model", res["model"])] if p.rtl else [])
    problems = [f"{sim}: {problem}" if p.rtl else problem
                for sim, figures in runs for problem in _problems(figures)]
    match = res.get("match") or {}
    if match.get("passed") is False and not problems and match.get("exact"):
        problems.append(f"{p.sim}: the testbench did not pass (see {p.dir / 'sim'})")
    return problems


def _match_summary(match: dict) -> str:
    return "; ".join([f"RTL differs from the model: {match.get('mismatches', 0)} difference(s)"]
                     + (match.get("problems") or [])[:5])


def _span(values) -> str:
    lo, hi = min(values), max(values)
    return f"{lo}" if lo == hi else f"{lo}–{hi}"


#: Header of the connection-state table: one row per configuration.
CONNECTION_HEADER = ("variant", "endpoints", "QPs per endpoint", "channels per peer", "window",
                     "sender/receiver bits", "bytes per channel", "channels per endpoint",
                     "channel state (bytes)", "one connection per QP (bytes)", "reduction",
                     "channels carrying requests", "QPs carrying requests")


def _connection_state(data: ReportData) -> list[tuple]:
    by_variant = defaultdict(list)
    for m in data.measures:
        if m.sim == "model":
            by_variant[m.point.variant].append(m)
    rows = []
    for variant in sorted(by_variant):
        ms = by_variant[variant]
        cs = ms[0].figures["connection_state"]
        cfg = ms[0].point.results["config"]
        endpoints = int(cfg["switch"]["ports"])
        rows.append([variant, str(endpoints), str(cs["connections_per_endpoint"]),
                     str(cfg["rdma"]["channels_per_peer"]), str(cfg["rdma"]["window"]),
                     f"{cs['sender_bits']}/{cs['receiver_bits']}", f"{cs['bytes_per_channel']:,}",
                     f"{cs['channels_per_endpoint']} ({cs['channels_provisioned_per_endpoint']} "
                     f"provisioned)",
                     f"{cs['aggregated_bytes']:,} ({cs['provisioned_bytes']:,} provisioned)",
                     f"{cs['per_qp_bytes']:,}", f"{cs['reduction']:.2f}×",
                     _span([m.figures["connection_state"]["channels_carrying_traffic"]
                            for m in ms]),
                     _span([m.figures["connection_state"]["qps_carrying_traffic"] for m in ms])])
    if not rows:
        return []
    return [("h", 2, "Connection state"),
            ("p", "Reliability state of channel aggregation against one reliable connection "
                  "per QP, for the whole fabric, both ends of every channel "
                  "(docs/architecture.md section 10.9). A channel or connection needs the "
                  "sender's and the receiver's bits, each rounded up to bytes. Aggregation "
                  "keeps (E − 1)·C channels per endpoint (E·C provisioned in the RTL); one "
                  "connection per QP would keep Q. Reduction = per-QP bytes / channel bytes "
                  "= Q / ((E − 1)·C): below 1 the channels cost more than per-QP connections "
                  "would. The last two columns count the channels and QPs the runs' requests "
                  "meant to succeed used (range over the runs)."),
            ("table", CONNECTION_HEADER, rows, frozenset(range(1, 13)))]


#: Header of the table of points; the tests read cells by these names.
RDMA_TABLE_HEADER = ("pattern", "variant", "load", "seed", "sim",
                     "goodput RTL", "goodput model", "goodput Δ",
                     "mean latency RTL", "mean latency model", "mean latency Δ",
                     "p99 latency RTL", "p99 latency model", "p99 latency Δ",
                     "ok/posted", "retransmissions/NAKs/timeouts", "intact/checked", "checks",
                     "match")
_NUMERIC = frozenset(range(2, 4)) | frozenset(range(5, 17))


def _table_row(p: Point) -> list[str]:
    if p.results is None:
        return failed_row(p, len(RDMA_TABLE_HEADER))
    res = p.results
    figures = res["rdma"]
    req, data = figures["requests"], figures["data"]
    cells = row_head(p) + compared_cells(p, RDMA, (
        (_goodput, format_throughput),
        (latency("mean"), format_latency), (latency("p99"), format_latency)))
    cells += [f"{req['ok']}/{req['posted']}",
              "/".join(str(figures[name]["total"]) for name, _, _ in _RECOVERY),
              f"{data['intact']}/{data['checked']}",
              "failed" if _checks(p) else "ok",
              match_cell(res.get("match"))]
    return cells


def _tables(data: ReportData) -> list[tuple]:
    rows = [_table_row(p) for p in sorted(data.source.points, key=sort_key)]
    return _connection_state(data) + [
        ("h", 2, "Points"),
        ("p", "Δ is RTL minus model. Goodput in payload words per cycle per endpoint (requests "
              "completed OK within the posting window); message latency in cycles, posting to "
              "completion of the requests completed OK. Requests, recovery counts and data are "
              "those of the simulator that ran (the RTL at RTL points); checks: every request "
              "completed once with its intended status, data intact, no stray words, every "
              "receive completion (the Attention section lists what failed)."),
        ("table", RDMA_TABLE_HEADER, rows, _NUMERIC)]


def _traffic(traffic: list[dict]) -> list[str]:
    if not traffic:
        return []
    return [f"posting window (cycles): {distinct(t['cycles'] for t in traffic)}",
            f"bad fraction: {distinct(t.get('bad_fraction', 0.0) for t in traffic)}",
            f"work requests per run: {_span([t['requests'] for t in traffic])}, "
            f"{count(sum(t['requests'] for t in traffic), 'request')} in all",
            f"payload words per run: {_span([t['words'] for t in traffic])}"]


#: Reports of RDMA runs: results.json's ``rdma`` section holds the figures.
RDMA = ReportKind(name="rdma", figures=lambda results: results["rdma"], plots=PLOTS,
                  tables=_tables, match_summary=_match_summary, checks=_checks,
                  traffic=_traffic)
