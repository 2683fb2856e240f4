"""Golden model of the hardware statistics sinks (``superfabric.hdl.stimulus.traffic_sink``).

:class:`Sinks` holds every output's counters, latency histogram, order
state and running hash as numpy arrays; :func:`ready_mask` and
:func:`sink_flit` are its per-cycle kernels, loops over ints and arrays
compiled like the switch's. The bucket scheme and the
hash are those of :mod:`superfabric.formats.stimulus` (the kernels compute them in
that style, and the tests hold them equal); ``docs/architecture.md``
section 12.3 is the specification.
"""

from __future__ import annotations

import numpy as np

from ...config import FabricConfig
from ...formats.stimulus import (CRC32_POLY, DRAW_BITS, SINK_KEY, TIMESTAMP_BITS, StimulusSettings,
                        port_bytes, port_key, port_seed)
from ...formats.packet import CE
from ..kernel import kernel
from .traffic_gen import xorshift_u64

__all__ = ["CRC32_TABLE", "ready_draws", "ready_mask", "sink_flit", "Sinks"]

_M16 = np.uint64((1 << DRAW_BITS) - 1)
_MASK32 = (1 << TIMESTAMP_BITS) - 1


def _crc_table() -> np.ndarray:
    table = np.zeros(256, np.int64)
    for byte in range(256):
        c = byte
        for _ in range(8):
            c = (c >> 1) ^ (CRC32_POLY if c & 1 else 0)
        table[byte] = c
    return table


#: The byte table of the reflected CRC-32 (zlib's), for :func:`sink_flit`.
CRC32_TABLE = _crc_table()


@kernel(inline=True)
def ready_draws(stall_threshold, state, ready):
    """Step every sink's draw and set ``ready[o]`` for the sinks ready this cycle.

    A sink is not ready when its 16-bit draw is below ``stall_threshold``.
    With a threshold of 0 every sink is always ready and the draws, which
    then decide nothing, are not stepped.
    """
    for o in range(state.shape[0]):
        if stall_threshold == 0:
            ready[o] = True
            continue
        r = xorshift_u64(state[o])
        state[o] = r
        ready[o] = int(r & _M16) >= stall_threshold


def ready_mask(stall_threshold, state) -> int:
    """:func:`ready_draws` as a mask, bit ``o`` per sink ready this cycle."""
    ready = np.zeros(state.shape[0], np.bool_)
    ready_draws(stall_threshold, state, ready)
    return int(sum(1 << o for o in np.flatnonzero(ready).tolist()))


@kernel(inline=True)
def _crc_byte(c, byte, table):
    return table[(c ^ byte) & 0xFF] ^ (c >> 8)


@kernel(inline=True)
def sink_flit(o, cycle, in_window, tag_bits, sub_bits, port_bytes, src, seq, gen, prio, length,
              ecn, last, packets, flits, window_flits, latency_sum, latency_min, latency_max, crc,
              order_errors, ce_packets, hist, last_seq, seen, table):
    """Count one flit delivered at output ``o`` in ``cycle`` (section 12.3).

    ``src``, ``seq`` (the tag), ``gen``, ``prio``, ``length`` and ``ecn``
    (as delivered) describe its packet; ``last`` marks its tail, at which
    the packet's latency, histogram bucket, order check and hash record are
    taken (its source and output fields ``port_bytes`` wide,
    ``superfabric.formats.stimulus.port_bytes``). The arrays are the sinks' state,
    updated in place.
    """
    flits[o, prio] += 1
    if not last:
        return
    packets[o, prio] += 1
    if in_window:
        window_flits[o] += length
    latency = (cycle - gen) & _MASK32
    latency_sum[o] += latency
    if latency < latency_min[o]:
        latency_min[o] = latency
    if latency > latency_max[o]:
        latency_max[o] = latency
    size = 1 << sub_bits
    if latency < size:
        bucket = latency
    else:
        h = 0
        while latency >> (h + 1):
            h += 1
        bucket = ((h - sub_bits + 1) << sub_bits) | ((latency >> (h - sub_bits)) & (size - 1))
    buckets = hist.shape[1]
    hist[o, min(bucket, buckets - 1)] += 1
    if ecn == CE:
        ce_packets[o] += 1
    flow = src * packets.shape[1] + prio
    tag = seq & ((1 << tag_bits) - 1)
    if seen[o, flow]:
        ahead = (tag - last_seq[o, flow]) & ((1 << tag_bits) - 1)
        if ahead == 0 or ahead >> (tag_bits - 1):
            order_errors[o] += 1
    seen[o, flow] = 1
    last_seq[o, flow] = tag
    # The record of superfabric.formats.stimulus.delivery_record, byte by byte.
    c = crc[o] ^ 0xFFFFFFFF
    for k in range(4):
        c = _crc_byte(c, (tag >> (8 * k)) & 0xFF, table)
    for k in range(4):
        c = _crc_byte(c, (cycle >> (8 * k)) & 0xFF, table)
    for k in range(port_bytes):
        c = _crc_byte(c, (src >> (8 * k)) & 0xFF, table)
    for k in range(port_bytes):
        c = _crc_byte(c, (o >> (8 * k)) & 0xFF, table)
    c = _crc_byte(c, ecn, table)
    c = _crc_byte(c, prio, table)
    crc[o] = c ^ 0xFFFFFFFF


class Sinks:
    """Every output's sink: ready draws and statistics, as numpy arrays (the names of
    :attr:`superfabric.formats.stimulus.RegisterMap.stats`)."""

    def __init__(self, cfg: FabricConfig, settings: StimulusSettings):
        sw, st = cfg.switch, cfg.stimulus
        n, np_ = cfg.endpoints, sw.priorities
        self.tag_bits = sw.tag_width
        self.port_bytes = port_bytes(n)
        self.sub_bits = st.hist_sub_bits
        self.run_cycles = settings.run_cycles
        self.stall_threshold = settings.sink_stall
        self.state = np.array([port_seed(settings.seed, port_key(SINK_KEY, o)) for o in range(n)],
                              np.uint64)
        zeros = lambda *shape: np.zeros(shape or (n,), np.int64)
        self.packets, self.flits = zeros(n, np_), zeros(n, np_)
        self.window_flits, self.latency_sum, self.latency_max = zeros(), zeros(), zeros()
        self.latency_min = np.full(n, _MASK32, np.int64)
        self.hash, self.order_errors, self.ce_packets = zeros(), zeros(), zeros()
        # The model's flits are whole by construction: no framing errors.
        self.frame_errors = zeros()
        self.histogram = zeros(n, st.hist_buckets)
        self.last_seq, self.seen = zeros(n, n * np_), zeros(n, n * np_)

    def ready(self) -> int:
        """This cycle's ready mask (call once per cycle, in order)."""
        return ready_mask(self.stall_threshold, self.state)

    def deliver(self, cycle: int, delivered, generators, core) -> None:
        """Count the flits ``core.step`` handed over in ``cycle``; packet fields come from
        ``generators`` (source, tag, generation cycle) and ``core`` (class, length, ECN out)."""
        in_window = cycle < self.run_cycles
        for o, pkt, _, last in delivered:
            sink_flit(o, cycle, in_window, self.tag_bits, self.sub_bits, self.port_bytes,
                      int(generators.src[pkt]), int(generators.seq[pkt]), int(generators.gen[pkt]),
                      core.prio[pkt], core.length[pkt], core.ecn_out[pkt], last,
                      self.packets, self.flits, self.window_flits, self.latency_sum,
                      self.latency_min, self.latency_max, self.hash, self.order_errors,
                      self.ce_packets, self.histogram, self.last_seq, self.seen, CRC32_TABLE)
