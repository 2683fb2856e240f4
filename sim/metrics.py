"""Throughput and latency figures of a run, from its per-packet records."""

import numpy as np

from .records import Records
from .traffic import Trace

__all__ = ["summarize"]


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
    lat = (rec.tail[delivered] - trace.gen[delivered]).astype(np.float64)
    if len(lat):
        latency = {"mean": float(lat.mean()), "p50": float(np.percentile(lat, 50)),
                   "p99": float(np.percentile(lat, 99)), "p999": float(np.percentile(lat, 99.9)),
                   "max": float(lat.max())}
    else:
        latency = {k: None for k in ("mean", "p50", "p99", "p999", "max")}
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
    }
