"""Throughput and latency figures of a hardware-stimulus run, from its counters and histograms.

Where a trace-driven run has a record per packet (``sim/metrics.py``), a
hardware-stimulus run has what its registers hold (:class:`~.stimulus.StimulusStats`):
the same ``results.json`` keys come from counters, and percentiles from the
latency histograms (:func:`percentile`, ``docs/architecture.md`` section 12.6).
"""

from __future__ import annotations

import math
import zlib

import numpy as np

from ...config import FabricConfig
from ...formats.stimulus import StimulusSettings, bucket_bounds
from .top import StimulusStats

__all__ = ["stimulus_summary", "percentile", "combined_hash"]

_PERCENTILES = {"p50": 50.0, "p99": 99.0, "p999": 99.9}


def percentile(histogram: np.ndarray, q: float, *, sub_bits: int, lowest: int,
               highest: int) -> tuple[float, tuple[int, int]]:
    """The ``q``-th percentile (0 < q <= 100) of the latencies counted in ``histogram``.

    The rank is the nearest rank, ``k = ceil(q / 100 * n)`` of ``n``
    latencies. Its bucket ``[lo, hi)`` holds the exact value (the last
    bucket, which also counts overflow, ends at ``highest + 1``); the
    estimate spreads the bucket's ``c`` latencies evenly over ``lo .. hi -
    1`` and takes the one of rank ``k``, then keeps within ``lowest ..
    highest`` (the sinks' minimum and maximum). In buckets of width one it
    is exact. Returns the estimate and the bucket.
    """
    counts = np.asarray(histogram, np.int64)
    n = int(counts.sum())
    k = max(1, math.ceil(q / 100.0 * n))
    cumulative = np.cumsum(counts)
    b = int(np.searchsorted(cumulative, k))
    lo, hi = bucket_bounds(b, sub_bits)
    if b == len(counts) - 1:
        hi = max(hi, highest + 1)
    before = int(cumulative[b] - counts[b])
    c = int(counts[b])
    value = lo + (hi - 1 - lo) * (k - before - 1) / max(c - 1, 1)
    return float(min(max(value, lowest), highest)), (lo, hi)


def combined_hash(hashes) -> int:
    """One word for a run: the CRC-32 of the sinks' hashes, 4 little-endian bytes each, in
    output order."""
    return zlib.crc32(b"".join(int(h).to_bytes(4, "little") for h in hashes))


def stimulus_summary(cfg: FabricConfig, settings: StimulusSettings, stats: StimulusStats) -> dict:
    """The ``results.json`` sections of a hardware-stimulus run (RTL or model alike).

    ``throughput`` and ``throughput_per_port`` count the flits of packets
    whose tail left inside the generation window (``window_flits``), per
    output per cycle of the window; ``offered_load`` the flits generated;
    ``latency`` (generation to tail delivery) has the mean from the sums,
    ``max`` from the sinks and ``p50``/``p99``/``p999`` from the merged
    histogram (:func:`percentile`), their buckets in ``latency_buckets``.
    ``stimulus`` holds the generators' and sinks' own counters and hashes.
    """
    n = cfg.endpoints
    window = max(settings.run_cycles, 1)
    s = {name: v.astype(np.int64) if name != "hash" else v for name, v in stats.values.items()}
    packets = int(s["packets"].sum())
    per_port = s["window_flits"] / window
    latency = {k: None for k in ("mean", "p50", "p99", "p999", "max")}
    buckets = {k: None for k in _PERCENTILES}
    if packets:
        served = s["packets"].sum(axis=1) > 0
        lowest, highest = int(s["latency_min"][served].min()), int(s["latency_max"][served].max())
        latency["mean"] = float(s["latency_sum"].sum() / packets)
        latency["max"] = float(highest)
        merged = s["histogram"].sum(axis=0)
        for key, q in _PERCENTILES.items():
            latency[key], bounds = percentile(merged, q, sub_bits=cfg.stimulus.hist_sub_bits,
                                              lowest=lowest, highest=highest)
            buckets[key] = list(bounds)
    counters = {name: s[name].reshape(-1).tolist()
                for name in ("rx_packets", "tx_packets", "drops", "ecn_marks", "link_flits",
                             "router_peak") if name in s}
    return {
        "throughput": float(per_port.mean()),
        "throughput_per_port": [float(x) for x in per_port],
        "offered_load": float(s["generated_flits"].sum() / window / n),
        "latency": latency,
        "latency_buckets": buckets,
        "packets": {"offered": int(s["generated"].sum()), "delivered": packets,
                    "dropped": int(s["drops"].sum()), "refused": int(s["refused"].sum())},
        "cycles": stats.cycles,
        "stalled": stats.stalled,
        "counters": counters,
        "stimulus": {
            "hash": f"{combined_hash(stats['hash']):08x}",
            "hashes": [f"{int(h):08x}" for h in stats["hash"]],
            **{name: s[name].reshape(-1).tolist() for name in (
                "generated", "refused", "order_errors", "frame_errors", "ce_packets")},
            "packets_per_class": s["packets"].sum(axis=0).tolist(),
            "histogram": s["histogram"].sum(axis=0).tolist(),
        },
    }
