"""The ``fabric`` section of ``results.json``: links, hops and the topology's bounds
(docs/architecture.md sections 11.7 and 11.8)."""

import numpy as np

from ...config import FabricConfig
from ...network.topology import Topology
from ..records import Records
from ..traffic import Trace

__all__ = ["fabric_summary", "ideal_throughput", "zero_load_latency"]


def zero_load_latency(hops, length, link_latency: int):
    """Generation to tail delivery of a lone packet of ``length`` flits over ``hops``
    links: the switch's ``2 L + 2`` (section 5.4) plus, per link, its latency and the
    next router's store-and-forward pipeline, ``L + 3``."""
    return 2 * length + 2 + hops * (link_latency + length + 3)


def ideal_throughput(topo: Topology) -> float:
    """The topology's bound on accepted throughput under uniform traffic, flits per
    endpoint per cycle, capped at 1 by injection.

    A torus with bidirectional links is bisection-limited at ``8 / k`` per
    router for the largest ring ``k`` (Dally and Towles, *Principles and
    Practices of Interconnection Networks*, section 3.3: the ``4 k^(n-1)``
    channels of the bisection carry a quarter of all traffic each way),
    shared by its endpoints. A leaf-spine carries ``1 - 1 / leaves`` of each
    leaf's traffic up its ``spines`` uplinks.
    """
    if topo.kind == "torus":
        return min(1.0, 8.0 / max(topo.dims) / topo.endpoints_per_router)
    if topo.kind == "fat_tree":
        return min(1.0, topo.spines / (topo.hosts_per_leaf * (1.0 - 1.0 / topo.leaves)))
    return 1.0


def fabric_summary(cfg: FabricConfig, trace: Trace, rec: Records) -> dict:
    """Links, hops and bounds of a fabric run.

    Link utilisation is flits per cycle of every directed link over the run
    (``rec.cycles``); latency per hop count is generation to tail delivery,
    as everywhere; the zero-load latency is :func:`zero_load_latency` of each
    delivered packet, averaged.
    """
    topo = Topology.of(cfg)
    delivered = rec.tail >= 0
    hops = rec.hops[delivered].astype(np.int64)
    latency = (rec.tail - trace.gen)[delivered].astype(np.float64)
    by_hops = {}
    for h in np.unique(hops).tolist():
        lat = latency[hops == h]
        by_hops[str(h)] = {"packets": int(lat.size), "mean": float(lat.mean()),
                           "p99": float(np.percentile(lat, 99))}
    zero = zero_load_latency(hops, trace.length[delivered].astype(np.int64),
                             cfg.fabric.link_latency)
    flits = np.asarray(rec.counters.get("link_flits", []), np.float64)
    return {
        "topology": topo.kind,
        "routers": topo.routers,
        "endpoints": topo.endpoints,
        "routing": cfg.fabric.routing,
        "links": [list(link) for link in topo.links],
        "link_utilisation": (flits / max(rec.cycles, 1)).tolist(),
        "hop_histogram": np.bincount(hops, minlength=topo.max_hops).tolist(),
        "mean_hops": float(hops.mean()) if hops.size else None,
        "latency_by_hops": by_hops,
        "peak_occupancy": rec.counters.get("router_peak", []),
        "zero_load_latency": float(zero.mean()) if hops.size else None,
        "ideal_throughput": ideal_throughput(topo),
        # A stalled run's cycle of channels waiting on each other (11.7).
        "stuck": rec.stuck or None,
    }
