"""What the stimulus top, its model and its testbench share: one definition of each.

The stimulus top (``hdl/stimulus/top.py``) wraps the switch with a traffic
generator on every input and a statistics sink on every output. Its run
settings are registers written after reset (:class:`StimulusSettings`, at
the addresses of :class:`RegisterMap`), so one simulator build, or one FPGA
bitstream, serves every pattern, load and seed. This module holds the
pieces that must agree bit for bit between the RTL (``hdl/stimulus/traffic_gen.py``,
``hdl/stimulus/traffic_sink.py``), the golden model (``sim/stimulus/traffic_gen.py``,
``sim/stimulus/traffic_sink.py``) and the testbench: the register map, the draws'
widths, the per-port seeds, the latency buckets and the delivery hash.
Standard library only, like the configuration; ``docs/architecture.md``
section 12 is the specification.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..config import ConfigError, FabricConfig
from .counters import COUNTER_WIDTH
from .packet import ECT0
from ..network.topology import Topology

__all__ = ["MODES", "INJECT_BITS", "DRAW_BITS", "TIMESTAMP_BITS", "CSR_DATA_BITS",
           "GENERATED_ECN", "GENERATOR_KEY", "SINK_KEY", "StimulusSettings", "RegisterMap",
           "check_stimulus", "port_key", "port_seed", "xorshift64", "latency_bucket",
           "bucket_bounds", "port_bytes", "record_bits", "delivery_record", "crc32_update",
           "CRC32_POLY", "ENABLE_BITS", "PAGE_WORDS", "readout_blocks", "readout_values"]

#: Destination modes of the generators, by register code (the index).
MODES = ("uniform", "fixed", "hotspot", "rotate", "bursty")

#: Bits of the injection draw: an injection threshold is a probability times 2**24.
INJECT_BITS = 24
#: Bits of every other draw (destination, hot spot, class, length, ECN, burst end, sink stall).
DRAW_BITS = 16
#: Bits of the generation cycle carried in each flit's data, and of a latency.
TIMESTAMP_BITS = 32
#: Width of the configuration port's data words.
CSR_DATA_BITS = 64
#: Inputs per word of the ``enable`` register (one word per 64 inputs).
ENABLE_BITS = CSR_DATA_BITS
#: Words of a page of the configuration port's read side: the most words it returns in one
#: cycle, so the histograms' sink stride is at least this (a page holds one bucket).
PAGE_WORDS = 64
#: The codepoint of ECN-capable generated packets: ECT(0) (RFC 3168).
GENERATED_ECN = ECT0

#: Multipliers that give every port's generator and sink a distinct seed key.
GENERATOR_KEY = 0x9E3779B97F4A7C15
SINK_KEY = 0xD1B54A32D192ED03

_MASK64 = (1 << 64) - 1
_MASK32 = (1 << 32) - 1


def check_stimulus(cfg: FabricConfig) -> None:
    """Refuse a configuration the stimulus top cannot wrap, with one :class:`ConfigError` line."""
    if cfg.switch.data_width < TIMESTAMP_BITS:
        raise ConfigError(f"switch.data_width = {cfg.switch.data_width}: must be at least "
                          f"{TIMESTAMP_BITS} for the stimulus top (every flit carries its "
                          f"packet's {TIMESTAMP_BITS}-bit generation cycle)")
    for section in ("pfc", "rdma"):
        if getattr(cfg, section).enabled:
            raise ConfigError(f"{section}.enabled = true: must be false for the stimulus top (its "
                              f"generators send switch traffic and obey no pause frames)")


# -- seeds and draws ----------------------------------------------------------------


def xorshift64(x: int) -> int:
    """One step of Marsaglia's xorshift64 (shifts 13, 7, 17); never reaches 0 from a non-zero state."""
    x ^= (x << 13) & _MASK64
    x ^= x >> 7
    x ^= (x << 17) & _MASK64
    return x


def port_key(base: int, port: int) -> int:
    """The seed key of ``port``: ``base * (port + 1)`` modulo 2**64, odd times non-zero, never 0."""
    return (base * (port + 1)) & _MASK64


def port_seed(seed: int, key: int) -> int:
    """A port's start state: the run seed XOR its key, or the key when that is 0."""
    return ((seed ^ key) & _MASK64) or key


# -- latency histogram ----------------------------------------------------------------


def latency_bucket(latency: int, sub_bits: int, buckets: int) -> int:
    """The bucket of ``latency`` in the log-linear histogram (the last bucket also takes overflow).

    Below ``2 * 2**sub_bits`` every latency has its own bucket; above, each
    power of two ``[2**h, 2**(h+1))`` is cut into ``2**sub_bits`` equal
    buckets, so a bucket is never wider than ``2**-sub_bits`` of its lower bound.
    """
    size = 1 << sub_bits
    if latency < size:
        index = latency
    else:
        h = latency.bit_length() - 1
        index = ((h - sub_bits + 1) << sub_bits) | ((latency >> (h - sub_bits)) & (size - 1))
    return min(index, buckets - 1)


def bucket_bounds(index: int, sub_bits: int) -> tuple[int, int]:
    """The latencies ``lo <= v < hi`` of bucket ``index`` (before overflow into the last one)."""
    size = 1 << sub_bits
    if index < size:
        return index, index + 1
    octave, offset = divmod(index, size)
    lo = (size + offset) << (octave - 1)
    return lo, lo + (1 << (octave - 1))


# -- delivery hash --------------------------------------------------------------------

#: The reflected CRC-32 polynomial of zlib, IEEE 802.3 and PNG.
CRC32_POLY = 0xEDB88320
#: Endpoints whose numbers fit the record's one-byte source and output fields.
_ONE_BYTE_ENDPOINTS = 256


def port_bytes(endpoints: int) -> int:
    """Bytes of the record's source and output fields: 1 up to 256 endpoints, else 2
    (a fabric's endpoint numbers go up to 1023)."""
    return 1 if endpoints <= _ONE_BYTE_ENDPOINTS else 2


def record_bits(endpoints: int) -> int:
    """Bits of one delivery record with ``endpoints`` endpoints: 96, or 112 above 256."""
    return 8 * (10 + 2 * port_bytes(endpoints))


def delivery_record(tag: int, src: int, output: int, cycle: int, ecn: int, prio: int, *,
                    endpoints: int = _ONE_BYTE_ENDPOINTS) -> int:
    """The record of one delivered packet, as ``record_bits(endpoints) // 8`` little-endian
    bytes: tag (32 bits), tail delivery cycle (low 32 bits), source and output
    (:func:`port_bytes` each), ECN codepoint and class (a byte each)."""
    w = 8 * port_bytes(endpoints)
    return ((tag & _MASK32) | (cycle & _MASK32) << 32 | src << 64 | output << (64 + w)
            | ecn << (64 + 2 * w) | prio << (72 + 2 * w))


def crc32_update(crc: int, record: int, bits: int = record_bits(_ONE_BYTE_ENDPOINTS)) -> int:
    """``zlib.crc32(record.to_bytes(bits // 8, "little"), crc)``, bit by bit: the definition
    the RTL's XOR network is derived from (the model uses a table of the same polynomial)."""
    c = crc ^ _MASK32
    for k in range(bits):
        c = (c >> 1) ^ (CRC32_POLY if (c ^ (record >> k)) & 1 else 0)
    return c ^ _MASK32


# -- run settings and register map ------------------------------------------------------


@dataclass(frozen=True)
class StimulusSettings:
    """The register values of one run (what ``superfabric.sim.stimulus.traffic_gen.stimulus_settings``
    derives from a pattern, a load and a seed).

    Thresholds are probabilities scaled to their draw: ``inject`` and
    ``burst_start`` to 2**24, the others to 2**16; a draw below its
    threshold is a hit, so the largest value means always.
    """

    seed: int               #: 64-bit run seed; each port's start state is derived from it
    run_cycles: int         #: generation window: packets are generated in cycles 0..run_cycles-1
    mode: str               #: destination mode, one of MODES
    inject: int             #: injection per cycle (in bursts: per cycle while on), of 2**24
    burst_start: int        #: bursty: an off input turns on, of 2**24
    burst_end: int          #: bursty: a burst ends after a packet, of 2**16
    hot_port: int           #: hotspot: the hot output
    hot_threshold: int      #: hotspot: a packet goes to the hot output, of 2**16
    len_short: int          #: packet lengths in flits: short when the draw is below len_threshold
    len_long: int
    len_threshold: int
    ect_threshold: int      #: a packet is ECN-capable (ECT(0)), of 2**16
    sink_stall: int         #: a sink is not ready in a cycle, of 2**16
    enable: int             #: bit per input: the input generates
    limit: int              #: packets per input, 0 for no limit
    prio_thresholds: tuple  #: P-1 cumulative class thresholds of 2**16: class = thresholds <= draw
    fixed_dst: tuple        #: fixed mode: the output of each input

    def to_dict(self) -> dict:
        """A JSON-friendly dict; :meth:`from_dict` is the inverse."""
        data = asdict(self)
        data["prio_thresholds"] = list(self.prio_thresholds)
        data["fixed_dst"] = list(self.fixed_dst)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "StimulusSettings":
        return cls(**{**data, "prio_thresholds": tuple(data["prio_thresholds"]),
                      "fixed_dst": tuple(data["fixed_dst"])})


def _bits(values: int) -> int:
    return max(1, (values - 1).bit_length())


class RegisterMap:
    """Addresses of the stimulus top's configuration port (``csr_*``), for one configuration.

    Address 0 is ``control``: writing bit 0 arms a run, reading gives the
    status (bit 0 done, bit 1 running, bit 2 armed). Then the settings registers, one
    word each, in the order of :attr:`settings` (written and read back at
    the same address), from 1. The statistics follow from :attr:`stats_base`
    in the order of :attr:`stats`; the histograms from :attr:`hist_base`,
    bucket ``b`` of sink ``o`` at ``hist_base + b * sink_stride + o``: bucket-major, so an
    aligned page of :data:`PAGE_WORDS` words is one bucket of consecutive sinks, which
    every sink's memory gives in the same cycle. Every word is
    :data:`CSR_DATA_BITS` wide, values zero-extended.
    """

    CONTROL = 0

    def __init__(self, cfg: FabricConfig):
        sw, st = cfg.switch, cfg.stimulus
        topo = Topology.of(cfg)
        n, p, cw = cfg.endpoints, sw.priorities, st.counter_width
        pb, lb = _bits(n), sw.max_packet_flits.bit_length()
        ports = sum(topo.ports(r) for r in range(topo.routers))
        #: (name, width, words) of every settings register, in address order.
        self.settings = [
            ("seed", 64, 1), ("run_cycles", cw, 1), ("mode", 3, 1),
            ("inject", INJECT_BITS + 1, 1), ("burst_start", INJECT_BITS + 1, 1),
            ("burst_end", DRAW_BITS + 1, 1), ("hot_port", pb, 1), ("hot_threshold", DRAW_BITS + 1, 1),
            ("len_short", lb, 1), ("len_long", lb, 1), ("len_threshold", DRAW_BITS + 1, 1),
            ("ect_threshold", DRAW_BITS + 1, 1), ("sink_stall", DRAW_BITS + 1, 1),
            ("enable", min(n, ENABLE_BITS), -(-n // ENABLE_BITS)), ("limit", cw, 1),
            ("prio_thresholds", DRAW_BITS + 1, p - 1), ("fixed_dst", pb, n),
        ]
        #: (name, width, words) of every statistics word, in readout order. Per endpoint
        #: (and class) arrays are endpoint-major: word ``endpoint * priorities + prio``;
        #: the router counters are per global port (router ``r``'s port ``q`` is
        #: ``base(r) + q``, the fabric's numbering; the switch's ports are its endpoints).
        self.stats = [
            ("cycle", cw, 1),
            ("generated", cw, n), ("generated_flits", cw, n), ("refused", cw, n),
            ("packets", cw, n * p), ("flits", cw, n * p), ("window_flits", cw, n),
            ("latency_sum", cw, n), ("latency_min", TIMESTAMP_BITS, n),
            ("latency_max", TIMESTAMP_BITS, n), ("hash", 32, n), ("order_errors", cw, n),
            ("frame_errors", cw, n), ("ce_packets", cw, n),
            ("rx_packets", COUNTER_WIDTH, ports), ("tx_packets", COUNTER_WIDTH, ports),
            ("drops", COUNTER_WIDTH, ports),
        ]
        #: The shape of every statistic: ``(words,)``, or ``(endpoints, priorities)``
        #: and ``(ports, priorities)`` for the per-class ones.
        self.shapes = {name: (words,) for name, _, words in self.stats}
        for name in ("packets", "flits"):
            self.shapes[name] = (n, p)
        if cfg.ecn.enabled:
            self.stats.append(("ecn_marks", COUNTER_WIDTH, ports * p))
            self.shapes["ecn_marks"] = (ports, p)
        if cfg.fabric.is_fabric:
            # The fabric's own counters: flits per directed link (by link id) and
            # each router's peak occupancy (section 11.7).
            self.stats += [("link_flits", COUNTER_WIDTH, len(topo.links)),
                           ("router_peak", COUNTER_WIDTH, topo.routers)]
            self.shapes.update(link_flits=(len(topo.links),), router_peak=(topo.routers,))
        self.hist_buckets = st.hist_buckets
        self.ports = n
        self._address = {}
        address = 1
        for name, _, words in self.settings:
            self._address[name] = address
            address += words
        self.stats_base = 1 << _bits(address)
        address = self.stats_base
        for name, _, words in self.stats:
            self._address[name] = address
            address += words
        #: Addresses from one histogram bucket to the next: a power of two, at least the
        #: sinks and a page.
        self.sink_stride = max(PAGE_WORDS, 1 << _bits(n))
        size = st.hist_buckets * self.sink_stride
        self.hist_base = 1 << _bits(max(address, size))
        #: Width of ``csr_addr``.
        self.address_bits = _bits(self.hist_base + size)

    def address(self, name: str, index: int = 0) -> int:
        """The address of word ``index`` of register or statistic ``name``."""
        return self._address[name] + index

    def hist_address(self, port: int, bucket: int) -> int:
        """The address of bucket ``bucket`` of sink ``port``'s histogram."""
        return self.hist_base + bucket * self.sink_stride + port

    def stat_words(self) -> list[tuple[str, int]]:
        """``(name, address)`` of every statistics word, in readout order."""
        return [(name, self.address(name, k)) for name, _, words in self.stats
                for k in range(words)]

    def writes(self, settings: StimulusSettings) -> list[tuple[int, int]]:
        """The ``(address, value)`` writes that load ``settings``, in address order."""
        out = []
        for name, _, words in self.settings:
            value = getattr(settings, name)
            if name == "mode":
                value = MODES.index(value)
            if name == "enable":
                value = tuple(value >> (ENABLE_BITS * k) & ((1 << ENABLE_BITS) - 1)
                              for k in range(words))
            values = value if isinstance(value, tuple) else (value,)
            out.extend((self.address(name, k), int(v)) for k, v in enumerate(values))
        return out


# -- reading back a block of words per cycle ----------------------------------------------


def readout_blocks(addresses, words: int) -> list[int]:
    """The first addresses of the aligned blocks of ``words`` words (the stimulus top's
    ``readout_words``) that hold ``addresses``, each once, in address order: what a host
    reads, one block per cycle, to get the words at ``addresses``."""
    return sorted({address - address % words for address in addresses})


def readout_values(addresses, blocks: list[int], data: list[int], words: int) -> list[int]:
    """The words at ``addresses``, out of ``data``: the words of ``blocks``
    (:func:`readout_blocks`) one after the other, ``words`` per block."""
    index = {block: k for k, block in enumerate(blocks)}
    return [data[index[address - address % words] * words + address % words]
            for address in addresses]
