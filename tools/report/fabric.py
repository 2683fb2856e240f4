"""Reports of fabric runs: many routers in a torus or a leaf-spine (docs/architecture.md 11).

The figures of a fabric run are those of a switch run (results.json's top
level) plus its ``fabric`` section. The reference lines are the topology's:
its ideal throughput under uniform traffic and the zero-load latency of the
hops the packets took, instead of the single switch's head-of-line and
output-queued references. A report holding a fabric run is a fabric report;
a one-switch run in it is the fabric of one router.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ...network.topology import Topology
from .data import ReportData, ReportKind
from .plots import Plot, figure, latency_plot, legend, throughput_plot
from .switch import (plot_ecn, plot_latency_cdf, plot_pfc, switch_match_summary,
                            switch_tables, switch_traffic)

__all__ = ["FABRIC", "is_fabric", "link_heatmap"]


def is_fabric(results: dict) -> bool:
    """A run of more than one router."""
    return results["config"].get("fabric", {}).get("topology", "switch") != "switch"


def _fabric(m) -> dict | None:
    return m.figures.get("fabric")


def _topology_label(results: dict) -> str:
    f = results["config"]["fabric"]
    if f["topology"] == "torus":
        return f"torus {'x'.join(str(k) for k in f['dims'])} {f['routing']}"
    if f["topology"] == "fat_tree":
        return f"leaf-spine {f['leaves']}x{f['hosts_per_leaf']}, {f['spines']} spines {f['routing']}"
    return f"switch {results['config']['switch']['ports']} ports"


def _bounds(data: ReportData) -> dict[str, float]:
    """The ideal throughput of every topology in the report, by label."""
    out = {}
    for m in data.measures:
        f = _fabric(m)
        out[_topology_label(m.point.results)] = f["ideal_throughput"] if f else 1.0
    return out


def _plot_throughput(data: ReportData) -> Plot | None:
    references = [(bound, f"topology bound, {label}: {bound:.3f}")
                  for label, bound in sorted(_bounds(data).items())]
    return throughput_plot(
        data, references, unit_in="flits per endpoint per cycle",
        unit_out="flits per endpoint per cycle",
        caption="Accepted throughput against offered load, mean over seeds; model dashed, RTL "
                "solid. The dotted lines are each topology's ideal throughput under uniform "
                "traffic (docs/architecture.md 11.8): 8/k per router for a torus's largest ring "
                "k, bisection-limited; S / (H (1 - 1/L)) for a leaf-spine.")


def _plot_latency(data: ReportData) -> Plot | None:
    def annotate(ax_mean, ax_p99, top):
        zero = {}
        for m in data.measures:
            f = _fabric(m)
            if f and f["zero_load_latency"] is not None:
                zero.setdefault(_topology_label(m.point.results), []).append(
                    f["zero_load_latency"])
        for label, values in sorted(zero.items()):
            ax_mean.axhline(min(values), color="k", linestyle=":", linewidth=1.2,
                            label=f"zero-load latency of the hops taken, {label}: "
                                  f"{min(values):.1f}")
        for label, bound in sorted(_bounds(data).items()):
            if bound < top:
                for ax in (ax_mean, ax_p99):
                    ax.axvline(bound, color="0.4", linestyle="-.", linewidth=1.2,
                               label=f"topology bound, {label}: {bound:.3f}")
    return latency_plot(
        data, annotate, unit_in="flits per endpoint per cycle",
        caption=lambda: "Mean and 99th-percentile latency (generation to tail delivery) "
                        "against offered load, mean over seeds; model dashed, RTL solid. The "
                        "dotted line is the zero-load latency of the paths the packets took, "
                        "from their hop counts and the per-hop pipeline (2L + 2 + H (link "
                        "latency + L + 3)), at the lowest load; the dash-dotted line the "
                        "topology's ideal throughput.")


def _plot_hops(data: ReportData) -> Plot | None:
    if data.chosen_load is None:
        return None
    rows = []
    for key in data.series():
        found = [f for m in data.of(key, data.chosen_load) if (f := _fabric(m))]
        if found:
            rows.append((key, found))
    if not rows:
        return None
    fig, (left, right) = figure(2)
    width = 0.8 / len(rows)
    for i, (key, found) in enumerate(rows):
        style = data.style(key)
        hist = np.mean([np.pad(f["hop_histogram"], (0, 16 - len(f["hop_histogram"])))
                        for f in found], axis=0)
        hops = np.arange(len(hist))
        shift = (i - (len(rows) - 1) / 2) * width
        left.bar(hops + shift, hist / max(hist.sum(), 1), width, color=style["color"],
                 label=style["label"], alpha=style.get("alpha", 1.0),
                 hatch="//" if key[2] == "model" else None, edgecolor="white", linewidth=0.5)
        by = {}
        for f in found:
            for h, v in f["latency_by_hops"].items():
                by.setdefault(int(h), []).append(v["mean"])
        xs = sorted(by)
        right.plot(xs, [np.mean(by[h]) for h in xs], **style)
    used = [h for _, found in rows for f in found for h, n in enumerate(f["hop_histogram"]) if n]
    left.set(xlabel="links crossed", ylabel="share of delivered packets",
             title=f"Hop count at load {data.chosen_load:g}", xlim=(-0.5, max(used) + 0.5))
    right.set(xlabel="links crossed", ylabel="mean latency (cycles)",
              title=f"Latency by hop count at load {data.chosen_load:g}")
    legend(fig, left)
    return Plot("hops.png", "Hops", fig,
                f"Distribution of the links each delivered packet crossed, and mean latency "
                f"per hop count, at offered load {data.chosen_load:g}, mean over seeds; model "
                f"hatched and dashed.")


def _busiest(data: ReportData):
    """The fabric run at the chosen load with the busiest link, and its simulator's figures."""
    best = None
    for m in data.measures:
        f = _fabric(m)
        if f and data.chosen_load is not None and abs(m.point.load - data.chosen_load) < 1e-9:
            peak = max(f["link_utilisation"], default=0.0)
            if best is None or peak > best[0]:
                best = (peak, m, f)
    return best


def link_heatmap(topo: Topology, util: np.ndarray):
    """The figure of every directed link's utilisation ``util`` (``topo.links`` order): on a
    torus each router's busiest outgoing link, per plane of the last dimension; on a
    leaf-spine every uplink and downlink, per tier. Returns the figure and what it shows."""
    if topo.kind == "torus":
        # Per plane of the last dimension, every router's busiest outgoing link.
        dims = list(topo.dims) + [1] * (3 - len(topo.dims))
        busiest = np.zeros(topo.routers)
        for k, (r, _, _, _) in enumerate(topo.links):
            busiest[r] = max(busiest[r], util[k])
        planes = busiest.reshape(dims[2], dims[1], dims[0])
        shown = min(dims[2], 8)
        fig, axes = figure(ncols=shown)
        for z, ax in enumerate(axes):
            image = ax.imshow(planes[z], vmin=0, vmax=max(util.max(), 1e-9), cmap="viridis",
                              origin="lower")
            ax.set(title=f"plane {z}" if len(topo.dims) == 3 else "routers",
                   xlabel="x (dimension 0)", ylabel="y (dimension 1)")
        what = (f"each router's busiest outgoing link, per plane of dimension 2 "
                f"({'the first 8 of ' if dims[2] > 8 else ''}{dims[2]})")
    else:
        up = np.zeros((topo.leaves, topo.spines))
        down = np.zeros((topo.spines, topo.leaves))
        for k, (r, port, peer, _) in enumerate(topo.links):
            if r < topo.leaves:
                up[r, peer - topo.leaves] = util[k]
            else:
                down[r - topo.leaves, port] = util[k]
        fig, (left, right) = figure(2)
        top = max(util.max(), 1e-9)
        image = left.imshow(up.T, vmin=0, vmax=top, cmap="viridis", origin="lower")
        right.imshow(down, vmin=0, vmax=top, cmap="viridis", origin="lower")
        left.set(title="leaf to spine (up)", xlabel="leaf", ylabel="spine")
        right.set(title="spine to leaf (down)", xlabel="leaf", ylabel="spine")
        what = "every uplink and downlink, per tier"
    fig.colorbar(image, ax=fig.axes, label="flits per cycle", shrink=0.8)
    return fig, what


def _plot_links(data: ReportData) -> Plot | None:
    found = _busiest(data)
    if found is None:
        return None
    _, m, f = found
    topo = Topology.of_dict(m.point.results["config"])
    fig, what = link_heatmap(topo, np.asarray(f["link_utilisation"]))
    return Plot("links.png", "Link utilisation", fig,
                f"Link utilisation (flits per cycle over the run) of {what}, in the "
                f"{m.sim} run of {m.point.pattern} at load {data.chosen_load:g} "
                f"({_topology_label(m.point.results)}, seed {m.point.seed}): the run with the "
                f"busiest link at that load.")


#: The report's figures, in order. Each returns None when its data is absent.
PLOTS: tuple[Callable[[ReportData], Plot | None], ...] = (
    _plot_throughput, _plot_latency, plot_latency_cdf, _plot_hops, _plot_links, plot_pfc,
    plot_ecn)

#: Reports of fabric runs: results.json's top level holds the figures, plus ``fabric``.
FABRIC = ReportKind(name="fabric", figures=lambda results: results, plots=PLOTS,
                    tables=switch_tables, match_summary=switch_match_summary,
                    checks=lambda point: [], traffic=switch_traffic)
