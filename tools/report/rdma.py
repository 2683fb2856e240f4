"""RDMA runs in ``superfabric report``: goodput, message latency, recovery, connection state.

A run of ``rdma-*`` traffic keeps its figures in the ``rdma`` section of
``results.json`` (the RTL's for RTL runs) and the golden model's in
``model`` (``docs/architecture.md`` section 10.9). Sources, curves averaged
over seeds, the attention list, provenance and the Markdown and HTML output
are shared with switch reports (:mod:`superfabric.tools.report.build`); this
module is the :data:`RDMA` :class:`~superfabric.tools.report.data.ReportKind`:
the plots, the checks a run's own figures must pass, the connection-state
table and the table of points.

Recovery counts are plotted per 1,000 data packets sent (``tx_data``,
retransmissions included), so runs of different loads and lengths compare;
against the fault rate when the runs vary one (``faults.*_rate``), else
against offered load. Congestion (section 10.13): the channels' rates and the
congested queue's depth against time, from the records of one run per series
at the chosen load, and a table of pause frames, CNPs, queue, fairness and the
victim per point.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ...formats.rdma_wire import STATUS_OK, payload_words
from ...network.topology import Topology
from ...sim.rdma.metrics import rate_steps
from ...sim.rdma.records import RdmaRecords
from ...sim.rdma.traffic import RdmaWorkload
from .data import (ReportData, ReportKind, curve, latency, line_style, offered_load,
                          sim_rank)
from .document import (compared_cells, count, failed_row, format_latency, format_throughput,
                              match_cell, row_head, sort_key)
from .fabric import link_heatmap
from .plots import Plot, figure, latency_cdf, legend, plain_log_ticks
from .source import Point, distinct, variant_label

__all__ = ["CONGESTION_HEADER", "CONNECTION_HEADER", "PLOTS", "RDMA", "RDMA_TABLE_HEADER"]


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


def _several_loads(data: ReportData) -> bool:
    """The runs span two offered loads or more: a plot against the load has a curve to draw
    (one load is a point on each axis, which the single run's plots show better)."""
    return len({m.point.load for m in data.measures}) > 1


def _plot_goodput(data: ReportData) -> Plot | None:
    series = data.series()
    if not series or not _several_loads(data):
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
    if not series or not _several_loads(data):
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


def _single_run(data: ReportData) -> list[tuple[str, Point, RdmaRecords, np.ndarray]]:
    """A report of one run: ``(simulator, point, records, OK)`` per simulator whose records
    it holds (the model's, and the RTL's at an RTL point), ``OK`` the requests completed OK;
    empty for a report of several runs."""
    ok = data.source.ok
    if len(ok) != 1:
        return []
    sims = ["model"] + ([ok[0].sim] if ok[0].rtl else [])
    runs = []
    for sim in sims:
        rec = _records(ok[0], sim)
        if rec is not None:
            runs.append((sim, ok[0], rec, rec.status == STATUS_OK))
    return runs


#: Bins of a single run's curves against time.
_TIME_BINS = 64


def _plot_accelerators(data: ReportData) -> Plot | None:
    """A single run: every accelerator's goodput and message latency, side by side."""
    runs = _single_run(data)
    if not runs or not (runs[0][1].dir / "workload.npz").is_file():
        return None
    wr = RdmaWorkload.load(runs[0][1].dir / "workload.npz").wr
    topo = Topology.of_dict(runs[0][1].results["config"])
    A, P = topo.accelerators, topo.ports_per_accelerator
    src = np.array(topo.endpoint_accelerator, np.int64)[wr["src"]]
    fig, (ax_good, ax_lat) = figure(ncols=2)
    width = 0.8 / len(runs)
    x = np.arange(A)
    for k, (sim, point, rec, ok) in enumerate(runs):
        style = line_style(k, sim, sim)
        words = np.bincount(src[ok], weights=wr["length"][ok], minlength=A)[:A]
        ax_good.bar(x + k * width, words / max(rec.cycles, 1), width, color=style["color"],
                    label=sim)
        latency_ = (rec.done - wr["post"]).astype(np.float64)
        for a in range(A):
            mine = latency_[ok & (src == a)]
            if len(mine):
                ax_lat.bar(a + k * width, np.percentile(mine, 99), width, color=style["color"],
                           alpha=0.45)
                ax_lat.bar(a + k * width, mine.mean(), width, color=style["color"])
    who = "endpoint (accelerator)" if P == 1 else f"accelerator (its {P} ports together)"
    ax_good.set(xlabel=who, ylabel="goodput (payload words per cycle)",
                title="Goodput per accelerator", xticks=x)
    ax_lat.set(xlabel=who, ylabel="message latency (cycles)",
               title="Mean (solid) and p99 (light) message latency", xticks=x)
    legend(fig, ax_good)
    return Plot("rdma_endpoints.png", "Per accelerator", fig,
                "One run: per accelerator (the sender; with several ports, all of them), the "
                "payload words of its requests completed OK per simulated cycle, and the mean "
                "and 99th percentile of their latency (posting to completion); one bar per "
                "simulator.")


def _plot_over_time(data: ReportData) -> Plot | None:
    """A single run: goodput and the flits queued in the fabric against time."""
    runs = _single_run(data)
    if not runs or not (runs[0][1].dir / "workload.npz").is_file():
        return None
    wr = RdmaWorkload.load(runs[0][1].dir / "workload.npz").wr
    fig, (ax_good, ax_queue) = figure(ncols=2)
    for k, (sim, point, rec, ok) in enumerate(runs):
        style = line_style(k, sim, sim)
        style.pop("marker")
        span = max(rec.cycles, 1)
        edges = np.linspace(0, span, _TIME_BINS + 1)
        words, _ = np.histogram(rec.done[ok], bins=edges, weights=wr["length"][ok])
        ax_good.plot(edges[:-1], words / np.diff(edges), **style)
        depth = rec.queue_depth
        if depth.size:
            total = depth.sum(axis=1)
            bins = np.minimum((np.arange(len(total)) * _TIME_BINS) // span, _TIME_BINS - 1)
            most = np.zeros(_TIME_BINS, np.int64)
            np.maximum.at(most, bins, total)
            ax_queue.plot(edges[:-1], most, **style)
    window = runs[0][1].results["traffic"].get("cycles")
    for ax in (ax_good, ax_queue):
        if window:
            ax.axvline(window, color="0.4", linestyle=":", linewidth=1.2,
                       label="end of the posting window")
        ax.set_ylim(bottom=0)
    ax_good.set(xlabel="cycle", ylabel="goodput (payload words per cycle, all endpoints)",
                title="Goodput against time")
    ax_queue.set(xlabel="cycle", ylabel="flits queued for the endpoints (most per bin)",
                 title="Queued flits against time")
    legend(fig, ax_good)
    return Plot("rdma_time.png", "Goodput and queues against time", fig,
                f"One run in {_TIME_BINS} bins of time: the payload words of the requests "
                "completed OK in each (by their completion's cycle) per cycle, all endpoints "
                "together, and the most flits inside the fabric bound for the endpoints "
                "(taken at an input, not yet handed to a sink) at any cycle of the bin; model "
                "dashed, RTL solid.")


def _plot_links(data: ReportData) -> Plot | None:
    """A single run on a fabric: the link heatmap of its RTL run, else of the model's."""
    runs = [run for run in _single_run(data) if len(run[2].link_flits)]
    if not runs:
        return None
    sim, point, rec, _ = runs[-1]
    topo = Topology.of_dict(point.results["config"])
    fig, what = link_heatmap(topo, np.asarray(rec.link_flits) / max(rec.cycles, 1))
    return Plot("rdma_links.png", "Link utilisation", fig,
                f"Link utilisation (flits per cycle over the run: data, acknowledgements, CNPs) "
                f"of {what}, in the {sim} run of {point.pattern}.")


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


def _records(point: Point, sim: str) -> RdmaRecords | None:
    path = point.dir / ("model_records.npz" if sim == "model" else "rtl_records.npz")
    return RdmaRecords.load(path) if path.is_file() else None


def _congested_runs(data: ReportData, needs_rates: bool) -> list[tuple]:
    """``(series, point, records)``: per series, its first seed's run at the chosen load
    with PFC or ECN, whose records hold the rates (if ``needs_rates``) or the queue depths."""
    if data.chosen_load is None:
        return []
    runs = []
    for key in data.series():
        for m in sorted(data.of(key, data.chosen_load), key=lambda m: m.point.seed):
            cfg = m.point.results["config"]
            if not (cfg["pfc"]["enabled"] or cfg["ecn"]["enabled"]):
                continue
            rec = _records(m.point, m.sim)
            if rec is not None and (len(rec.rates) if needs_rates else rec.queue_depth.size):
                runs.append((key, m.point, rec))
                break
    return runs


#: Runs whose channels' rates one figure shows, one panel each.
_RATE_PANELS = 3
#: Cycles per point of the queue depth's curve (its largest depth in them).
_QUEUE_BIN = 256


def _plot_rates(data: ReportData) -> Plot | None:
    runs = _congested_runs(data, needs_rates=True)[:_RATE_PANELS]
    if not runs:
        return None
    fig, axes = figure(ncols=len(runs))
    for ax, (key, point, rec) in zip(axes, runs):
        ports = _target_ports(point)
        C = int(point.results["config"]["rdma"]["channels_per_peer"])
        channels = sorted({(int(e), int(ch)) for _, e, ch, _ in rec.rates if ch // C in ports})
        for e, ch in channels:
            cycles, shares = rate_steps(rec, e, ch)
            ax.step(np.append(cycles, rec.cycles), np.append(shares, shares[-1]), where="post",
                    linewidth=1.0, label=f"endpoint {e}, channel {ch}")
        # Each of the target's ports is a downlink that its senders' channels share.
        sharing = len(point.results["rdma"]["congestion"]["senders"]) * C
        ax.axhline(len(ports) / sharing, color="0.3", linestyle=":", linewidth=1.2,
                   label=f"fair share, {len(ports)}/{sharing}")
        ax.set(xlabel="cycle", ylabel="rate (share of the line rate, log scale)", yscale="log",
               title=", ".join(key), xlim=(0, rec.cycles))
        plain_log_ticks(ax.yaxis)
        ax.legend(fontsize="x-small", ncols=2)
    return Plot("rdma_rates.png", "Channel rates against time", fig,
                f"DCQCN's rate of every channel toward the congested accelerator against "
                f"time, one run per series at load {data.chosen_load:g} (its first seed; the "
                f"RTL's records at RTL points): a share of the line rate, cut by each CNP "
                f"and recovered by the timers and byte counter; dotted, the fair share of "
                f"the target's downlinks.")


def _target_ports(point) -> list[int]:
    """The congested accelerator's endpoints; results written before accelerators had
    several ports name the one endpoint only."""
    congestion = point.results["rdma"]["congestion"]
    return congestion.get("target_ports", [congestion["target"]])


def _plot_queue(data: ReportData) -> Plot | None:
    runs = _congested_runs(data, needs_rates=False)
    if not runs:
        return None
    fig, (ax,) = figure()
    kmax = set()
    for key, point, rec in runs:
        depth = rec.queue_depth[:, _target_ports(point)].sum(axis=1)
        bins = -(-len(depth) // _QUEUE_BIN)
        padded = np.zeros(bins * _QUEUE_BIN, depth.dtype)
        padded[:len(depth)] = depth
        style = data.style(key)
        style.pop("marker")
        ax.plot(np.arange(bins) * _QUEUE_BIN, padded.reshape(bins, _QUEUE_BIN).max(axis=1),
                **style)
        ecn = point.results["config"]["ecn"]
        if ecn["enabled"]:
            kmax.add(int(ecn["kmax"]))
    for k in sorted(kmax):
        ax.axhline(k, color="0.3", linestyle=":", linewidth=1.2, label=f"ecn.kmax = {k}")
    ax.set(xlabel="cycle", ylabel=f"flits bound for the congested accelerator (most per "
                                  f"{_QUEUE_BIN} cycles)", title="Congested queue")
    ax.set_ylim(bottom=0)
    legend(fig, ax)
    return Plot("rdma_queue.png", "The congested queue against time", fig,
                f"The flits inside the switch or fabric bound for the congested accelerator "
                f"(taken at an input, not yet handed to a sink) against time, the largest in each "
                f"{_QUEUE_BIN} cycles, one run per series at load {data.chosen_load:g} "
                f"(its first seed); model dashed, RTL solid; dotted, the ECN marking "
                f"threshold above which every ECN-capable packet is marked.")


#: The figures of an RDMA report, in order. Each returns None when its data is absent.
PLOTS = (_plot_goodput, _plot_message_latency, _plot_accelerators, _plot_over_time,
         _plot_links, _plot_message_latency_cdf, _plot_recovery, _plot_rates, _plot_queue)


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
                     str(cs["channels_per_endpoint"]), f"{cs['aggregated_bytes']:,}",
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
                  "keeps (E − 1)·C channels per endpoint, as the RTL does; one "
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


#: Header of the congestion table: one row per point that paused, marked or slowed.
CONGESTION_HEADER = ("pattern", "variant", "load", "seed", "sim", "pause frames RTL",
                     "pause frames model", "CNPs", "queue p99 (flits)", "ecn.kmax",
                     "Jain's index", "converged at (cycle)", "victim's share of its demand")


def _congestion(data: ReportData) -> list[tuple]:
    rows = []
    for p in sorted(data.source.points, key=sort_key):
        if p.results is None:
            continue
        c = p.results["rdma"]["congestion"]
        model = p.results["model"]["congestion"]
        if not (c["pause_frames"]["sent"] or c["cnp"]["sent"] or c["victim"]):
            continue
        frames = (str(c["pause_frames"]["pauses"]) if p.rtl else "-",
                  str(model["pause_frames"]["pauses"]))
        rows.append(row_head(p) + [
            *frames, str(c["cnp"]["sent"]), f"{c['queue']['p99']:.0f}",
            "-" if c["queue"]["kmax"] is None else str(c["queue"]["kmax"]),
            "-" if c["jain"] is None else f"{c['jain']:.3f}",
            "never" if c["converge_cycle"] is None else f"{c['converge_cycle']:,}",
            "-" if c["victim"] is None or c["victim"]["share"] is None
            else f"{c['victim']['share']:.0%}"])
    if not rows:
        return []
    return [("h", 2, "Congestion"),
            ("p", "Per point with pause frames, CNPs or a victim (docs/architecture.md section "
                  "10.13): the pause frames that paused (non-zero time) sent by the switch, "
                  "the CNPs sent, the 99th percentile over the run's cycles of the flits bound "
                  "for the congested accelerator, Jain's index over the senders' goodput toward "
                  "it, the first cycle from which every 8,192-cycle window is fair (index at "
                  "least 0.95), and for rdma-victim the victim's goodput to the bystander over "
                  "what it posted there. Figures are the RTL's at RTL points."),
            ("table", CONGESTION_HEADER, rows, frozenset(range(2, 12)))]


def _tables(data: ReportData) -> list[tuple]:
    rows = [_table_row(p) for p in sorted(data.source.points, key=sort_key)]
    return _connection_state(data) + _congestion(data) + [
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
