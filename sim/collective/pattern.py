"""The ``collective:`` traffic pattern of ``superfabric run`` (docs/spec/collective.md section
15.8.4): its parameters, checked like every pattern's, and the plan it asks for. Light to
import: the RDMA model loads only when a collective is planned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...config import ConfigError, FabricConfig
from ..traffic import PatternParam, TrafficError, parse_pattern
from .library import ALGORITHM_NAMES
from .reference import DTYPES
from .schedule import ELEMENT_BYTES, OPS

if TYPE_CHECKING:
    from .fabric import CollectivePlan

__all__ = ["PATTERN", "SEGMENT_PACKETS", "MAX_SEGMENT_PACKETS", "RECORDS", "PATTERN_PARAMS",
           "parse_collective"]

#: The traffic pattern of ``superfabric run`` that runs a collective.
PATTERN = "collective"
#: Full packets' payload in a segment of a chunk by default (section 15.2).
SEGMENT_PACKETS = 16
#: The most full packets' payload a segment may name.
MAX_SEGMENT_PACKETS = 1 << 12
#: What the model's run records (``records=``): ``full``, every record of
#: :class:`~superfabric.sim.rdma.records.RdmaRecords`; ``summary``, all but the two that grow
#: with the cycles and the traffic (``queue_depth``, a row per cycle, and the ``delivered``
#: packets with their words), left empty: a long collective's results need only its
#: completions, counters and memories.
RECORDS = ("full", "summary")
#: Its parameters (``collective:op=allreduce,algo=ring,bytes=4096,dtype=int32,segment=16``).
PATTERN_PARAMS = {PATTERN: {
    "op": PatternParam("allreduce", str, 0, 0, "the operation", OPS),
    "algo": PatternParam("ring", str, 0, 0, "the algorithm", ALGORITHM_NAMES),
    "bytes": PatternParam(4096, int, ELEMENT_BYTES, 1 << 28,
                          "bytes per accelerator, a multiple of 4"),
    "dtype": PatternParam("int32", str, 0, 0, "the element type", tuple(DTYPES)),
    "segment": PatternParam(SEGMENT_PACKETS, int, 0, MAX_SEGMENT_PACKETS,
                            "full packets' payload per segment of a chunk, 0 whole chunks"),
    "records": PatternParam("full", str, 0, 0, "the model's records: full, or summary "
                            "without the per-cycle queue depths and the delivered packets",
                            RECORDS),
}}


def parse_collective(cfg: FabricConfig, traffic: str, *, seed: int) -> CollectivePlan:
    """The plan of the ``collective:...`` pattern ``traffic``.

    Raises
    ------
    TrafficError
        A parameter out of range, a size not a multiple of 4 bytes, or an algorithm that
        cannot run the operation on this fabric; one line naming the pattern.
    ConfigError
        The host memory or the page table is too small for it.
    """
    _, p = parse_pattern(traffic, cfg.endpoints, names=(PATTERN,), params=PATTERN_PARAMS)
    if p["bytes"] % ELEMENT_BYTES:
        raise TrafficError(f"traffic.pattern = {traffic!r}: bytes = {p['bytes']} must be a "
                           f"multiple of {ELEMENT_BYTES}")
    from .fabric import prepare_collective       # the RDMA model only when a collective runs

    try:
        return prepare_collective(cfg, op=p["op"], algo=p["algo"], nbytes=p["bytes"],
                                  dtype=p["dtype"], seed=seed, segment_packets=p["segment"],
                                  pattern=traffic, records=p["records"])
    except (TrafficError, ConfigError):
        raise
    except ValueError as e:
        raise TrafficError(f"traffic.pattern = {traffic!r}: {e}") from None
