"""Throughput and latency figures of a run, from its per-packet records."""

import numpy as np

from .records import Records
from .traffic import Trace

__all__ = ["summarize", "latency_figures", "ecn_summary", "pfc_summary"]


def summarize(trace: Trace, rec: Records, ports: int) -> dict:
    """The ``throughput``, ``latency`` and ``packets`` sections of ``results.json``.

    Throughput counts the flits of packets whose tail left within the
    trace's ``cycles`` (the measurement window), per output per cycle,
    averaged over outputs: 1.0 is line rate. Latency runs from a packet's
    generation to its tail's delivery, so time in the source queue counts.
    """
    delivered = rec.tail >= 0
    in_window = delivered & (rec.tail < trace.cycles)
    flits = trace.length.astype(np.int64)
    per_port = np.bincount(rec.out_port[in_window].astype(np.int64), weights=flits[in_window],
                           minlength=ports)[:ports] / max(trace.cycles, 1)
    latency = latency_figures(rec.tail[delivered] - trace.gen[delivered])
    return {
        "throughput": float(per_port.mean()),
        "throughput_per_port": [float(x) for x in per_port],
        "offered_load": float(flits.sum() / max(trace.cycles, 1) / ports),
        "latency": latency,
        "packets": {"offered": int(len(trace)), "delivered": int(delivered.sum()),
                    "dropped": int(rec.dropped.sum())},
        "cycles": int(rec.cycles),
        "stalled": bool(rec.stalled),
        "counters": rec.counters,
        **({"ecn": ecn_summary(trace, rec)} if (rec.ecn_backlog >= 0).any() else {}),
        **({"pfc": pfc_summary(rec, ports)} if "pfc_tx_frames" in rec.counters else {}),
    }


def latency_figures(cycles: np.ndarray) -> dict:
    """Mean, median, 99th and 99.9th percentiles (numpy's linear interpolation) and maximum
    of ``cycles``; all None when there are none."""
    if not len(cycles):
        return {k: None for k in ("mean", "p50", "p99", "p999", "max")}
    lat = cycles.astype(np.float64)
    # One call: one partial sort of a large run's millions of latencies for all three.
    p50, p99, p999 = np.percentile(lat, (50, 99, 99.9)).tolist()
    return {"mean": float(lat.mean()), "p50": p50, "p99": p99, "p999": p999,
            "max": float(lat.max())}


def pfc_summary(rec: Records, ports: int) -> dict:
    """The ``pfc`` section: pause frames, paused cycles and peak occupancy per port and class.

    Per-port lists are ``[port][class]``: frames sent upstream by each input
    port, received from downstream at each output port, cycles each output
    was paused, and the peak flits each input stored per class.
    """
    def per_port(values):
        per = len(values) // ports
        return [values[k * per:(k + 1) * per] for k in range(ports)]

    c = rec.counters
    return {
        "frames_sent": int(len(rec.pfc_frames)),
        "pause_frames_sent": int((rec.pfc_frames[:, 3:] > 0).any(axis=1).sum())
        if len(rec.pfc_frames) else 0,
        "sent_per_port_class": per_port(c["pfc_tx_frames"]),
        "received_per_port_class": per_port(c["pfc_rx_frames"]),
        "paused_cycles_per_port_class": per_port(c["pfc_paused_cycles"]),
        "peak_occupancy_per_port_class": per_port(c["pfc_peak_occupancy"]),
        "peak_occupancy": int(max(c["pfc_peak_occupancy"], default=0)),
    }


def ecn_summary(trace: Trace, rec: Records, bins: int = 16) -> dict:
    """The ``ecn`` section: marks, marked fraction, and the marking curve.

    Over the ECN-capable packets that were scheduled (so had a decision):
    the histogram of the backlog their decision saw, and the fraction marked
    in each backlog bin, which traces the configured RED profile.
    """
    capable = np.isin(trace.ecn, (1, 2)) & (rec.ecn_backlog >= 0)
    marked = capable & (rec.ecn_out == 3)
    q = rec.ecn_backlog[capable]
    top = int(q.max()) + 1 if len(q) else 1
    edges = np.unique(np.linspace(0, top, bins + 1).astype(np.int64))
    hist, _ = np.histogram(q, bins=edges)
    hit, _ = np.histogram(rec.ecn_backlog[marked], bins=edges)
    return {
        "marks": int(marked.sum()),
        "ect_packets": int(capable.sum()),
        "marked_fraction": float(marked.sum() / capable.sum()) if capable.any() else 0.0,
        "backlog_bins": edges.tolist(),
        "backlog_histogram": hist.tolist(),
        "marked_fraction_per_bin": [float(h / c) if c else None for h, c in zip(hit, hist)],
        "marks_per_queue": rec.counters.get("ecn_marks"),
    }
