"""The running hashes of a hardware-hosted RDMA run, from a run's records (section 10.16).

:func:`record_hashes` folds what :class:`~.records.RdmaRecords` holds (the model's, or
the testbench's that steps every cycle) into the hashes every endpoint's hardware host
keeps (``hdl/rdma/host.py``), record for record as ``superfabric.formats.rdma_hash``
defines them, so a run with the hosts in hardware is held against the model by
comparing a few words per endpoint. :func:`hash_mismatches` says which differ.
"""

from __future__ import annotations

import zlib

import numpy as np

from ...config import FabricConfig
from ...formats.counters import RDMA_COUNTERS
from ...formats.pfc_frame import pack_request
from ...formats.rdma_hash import HASHES, fold, rate_fold
from .records import RdmaRecords
from .traffic import RdmaWorkload

__all__ = ["record_hashes", "hash_mismatches"]


def record_hashes(cfg: FabricConfig, workload: RdmaWorkload, rec: RdmaRecords) -> np.ndarray:
    """``[endpoint, hash]`` (:data:`~superfabric.formats.rdma_hash.HASHES` order) of
    ``rec``, a run of ``workload``."""
    E = cfg.endpoints
    nc = E * cfg.rdma.channels_per_peer
    out = np.zeros((E, len(HASHES)), np.int64)
    column = {kind: k for k, kind in enumerate(HASHES)}
    wr = workload.wr
    src, tag = np.asarray(wr["src"], np.int64), np.asarray(wr["tag"], np.int64)

    def add(kind, e, **values):
        k = column[kind]
        out[e, k] = fold(int(out[e, k]), kind, nc, **values)

    for i in np.flatnonzero(rec.taken >= 0)[np.argsort(rec.taken[rec.taken >= 0],
                                                       kind="stable")].tolist():
        add("taken", int(src[i]), cycle=int(rec.taken[i]), tag=int(tag[i]))
    for i in np.flatnonzero(rec.done >= 0)[np.argsort(rec.done[rec.done >= 0],
                                                      kind="stable")].tolist():
        add("completion", int(src[i]), cycle=int(rec.done[i]), tag=int(tag[i]),
            status=int(rec.status[i]))
    for cycle, e, s, qp, length in rec.rx_completions.tolist():
        add("receive", e, cycle=cycle, src=s, qp=qp, length=length)
    for cycle, e, context in rec.cnps.tolist():
        add("cnp", e, cycle=cycle, context=context)
    changes = {}
    for cycle, e, channel, rate in rec.rates.tolist():
        changes.setdefault((cycle, e), []).append((channel, rate))
    for (cycle, e), rates in sorted(changes.items()):
        add("rate", e, cycle=cycle, fold=rate_fold(rates),
            mask=sum(1 << channel for channel, _ in rates))
    for row in rec.pfc_frames.tolist():
        cycle, port, enable, times = row[0], row[1], row[2], row[3:]
        add("pause", port, cycle=cycle, request=pack_request(enable, times))
    depth = np.asarray(rec.queue_depth, np.int64) & 0xFFFF
    memory = np.asarray(rec.memory, np.uint64)
    for e in range(E):
        out[e, column["depth"]] = zlib.crc32(depth[:, e].astype("<u2").tobytes())
        out[e, column["memory"]] = zlib.crc32(memory[e].astype("<u8").tobytes())
    return out


def hash_mismatches(cfg: FabricConfig, expected: dict, got: dict) -> list[str]:
    """One line per difference between two hosted runs' results (``cycles``, ``counters``
    ``[endpoint, counter]`` in ``RDMA_COUNTERS`` order, ``hashes`` ``[endpoint, hash]``),
    ``expected`` the model's: the run's end, then per endpoint each counter and each hash
    that differs, by name."""
    lines = []
    if expected["cycles"] != got["cycles"]:
        lines.append(f"cycles: the model ends its run at {expected['cycles']}, the RTL at "
                     f"{got['cycles']}")
    for e in range(cfg.endpoints):
        for k, name in enumerate(RDMA_COUNTERS):
            a, b = int(expected["counters"][e][k]), int(got["counters"][e][k])
            if a != b:
                lines.append(f"endpoint {e} counter {name}: model {a}, RTL {b}")
        for k, kind in enumerate(HASHES):
            a, b = int(expected["hashes"][e][k]), int(got["hashes"][e][k])
            if a != b:
                lines.append(f"endpoint {e} {kind} hash: model {a:08x}, RTL {b:08x}")
    return lines
