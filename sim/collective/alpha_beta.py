"""The alpha-beta model of a collective on the configured fabric and nccl-tests' bandwidths
(section 15.6); ``library.auto`` asks it.

A round's segment costs ``alpha(h) + beta(m)`` and its apply: ``alpha(h) =
engine_cycles + h * hop_cycles`` for a path through ``h`` routers, ``beta(m)``
the cycles to serialise ``m`` bytes and the segment's notification at one flit
of ``switch.data_width`` bits a cycle, every packet of at most
``switch.max_packet_flits`` flits carrying the RDMA header's two flits and a
gap (the RDMA transmitter's pick and its wait for the first payload word), and
the apply the receiving engine's (section 15.8.3). The
rounds (``rounds`` of each algorithm: the hops and the bytes every accelerator
sends in each round) run as a pipeline: a segment leaves once the port is free
and the segment of the round before it depends on is applied. Unsegmented,
and with the apply left out, this is Hockney's ``T = a * alpha + b * m * beta``
of Thakur, Rabenseifner and Gropp (2005).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...formats.rdma_wire import payload_words
from .engine import apply_cycles
from .library import algorithm, segment_of
from .schedule import ELEMENT_BYTES, elements_of

__all__ = ["NOTIFY_BYTES", "APPLY_WORD_BYTES", "ENGINE_CYCLES", "packet_gap", "AlphaBeta",
           "algbw", "busbw_factor", "busbw"]

#: Bytes of a step's notification: one word, sent after its chunk (section 15.8.2).
NOTIFY_BYTES = 8
#: Bytes the apply unit takes a cycle: a 64-bit word of the host memory (section 15.8.3).
APPLY_WORD_BYTES = 8
#: Cycles the engine takes per step (read the schedule entry, post the WRITE, start the
#: DMA read): a stand-in until the collective engine's RTL measures it.
ENGINE_CYCLES = 16


def packet_gap(dma_latency: int, header_flits: int) -> int:
    """Idle cycles between the RDMA transmitter's packets (section 10.6): the cycle of the
    pick, then the cycles its first payload word, requested after the pick, arrives after
    the header flits (``dma_latency + 1`` cycles after the first)."""
    return 1 + max(0, dma_latency + 1 - header_flits)


@dataclass(frozen=True)
class AlphaBeta:
    """The cost of one round of a collective, in cycles.

    Attributes
    ----------
    engine_cycles : int
        Per step, at the engine.
    hop_cycles : int
        Per router on the path: the link's latency, the router's pipeline (3) and the step's
        last packet, its notification, stored and forwarded (section 11.8).
    flit_bytes, header_flits, packet_flits : int
        The link: bytes a flit carries, header flits per packet, flits of the longest
        packet.
    dma_latency : int
        The host memory's read latency, which the apply unit pays per slot (section 15.8.3).
    gap : int
        Idle cycles between an accelerator's packets (:func:`packet_gap`).
    """

    engine_cycles: int
    hop_cycles: int
    flit_bytes: int
    header_flits: int
    packet_flits: int
    dma_latency: int
    gap: int

    @classmethod
    def of(cls, cfg, *, engine_cycles: int = ENGINE_CYCLES, hop_cycles: int | None = None,
           gap: int | None = None) -> "AlphaBeta":
        """The model of a ``FabricConfig``; ``hop_cycles`` defaults to
        ``fabric.link_latency + header_flits + 1 + 3`` (a step's last packet is its
        notification, a header and one word, stored and forwarded), ``gap`` to the RDMA
        transmitter's (:func:`packet_gap` of ``rdma.dma_latency``)."""
        sw = cfg.switch
        header_flits = sw.max_packet_flits - payload_words(sw.max_packet_flits)
        if gap is None:
            gap = packet_gap(cfg.rdma.dma_latency, header_flits)
        if hop_cycles is None:
            hop_cycles = cfg.fabric.link_latency + header_flits + 1 + 3
        for name, value in (("engine_cycles", engine_cycles), ("gap", gap)):
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} = {value!r}: must be a whole number >= 0")
        if sw.max_packet_flits < 3:
            raise ValueError(f"switch.max_packet_flits = {sw.max_packet_flits}: must be at "
                             f"least 3 (two header flits and a payload flit)")
        return cls(engine_cycles, hop_cycles, sw.data_width // 8, header_flits,
                   sw.max_packet_flits, cfg.rdma.dma_latency, gap)

    @property
    def payload_bytes(self) -> int:
        """Payload bytes of a full packet."""
        return (self.packet_flits - self.header_flits) * self.flit_bytes

    def segment_elements(self, packets: int) -> int:
        """Elements in a segment of ``packets`` full packets' payload (section 15.2)."""
        return packets * self.payload_bytes // ELEMENT_BYTES

    @property
    def beta(self) -> float:
        """Cycles per byte of a long message: a full packet's flits and gap over its payload."""
        return (self.packet_flits + self.gap) / self.payload_bytes

    def alpha(self, hops: int) -> int:
        """Latency of a step whose path passes ``hops`` routers."""
        return self.engine_cycles + hops * self.hop_cycles

    def serialise(self, nbytes: int) -> int:
        """Cycles an accelerator's port is busy sending ``nbytes`` (a write of none is one
        header-only packet)."""
        packets = max(1, -(-nbytes // self.payload_bytes))
        return -(-nbytes // self.flit_bytes) + packets * (self.header_flits + self.gap)

    def predict(self, peers, op: str, algo: str, nbytes: int,
                chunk_bytes=lambda elements: elements * ELEMENT_BYTES, segment: int = 0) -> int:
        """Predicted cycles of ``op`` over ``nbytes`` per accelerator by ``algo``, its chunks
        in segments of ``segment`` elements (0: whole; ignored by an algorithm that does not
        cut them, ``library.SEGMENTED``); a piece of ``e`` elements is ``chunk_bytes(e)``
        bytes on the wire (binary32 by default; ``formats.compression.wire_bytes``
        compressed, section 16.6).

        Per round, every accelerator's port sends the round's segments one after the other,
        each with its notification. Segments pair with the round before's from the last:
        a segment leaves once the port is free and its partner (the data it forwards; none
        for the first segments of a round longer than the one before) is applied. A segment
        is applied ``alpha`` after its serialisation ends, once the apply unit is free, in
        ``apply_cycles`` of its words on the wire (the dequantiser of a compressed chunk
        taken to keep up). The time is when the last segment is applied."""
        segment = segment_of(algo, segment)
        port = unit = 0
        applied = []                # per segment of the round before, when it was applied
        for pairs, elements in algorithm(algo, op, peers).rounds(peers, op, elements_of(nbytes)):
            hops, sharing = peers.load(pairs)
            pieces = [elements]
            if segment and elements > segment:
                pieces = [segment] * (elements // segment) + [elements % segment] * bool(
                    elements % segment)
            shift, now = len(applied) - len(pieces), []
            for i, piece in enumerate(pieces):
                ready = applied[i + shift] if i + shift >= 0 else 0
                start = max(port, ready)
                port = start + sharing * (self.serialise(chunk_bytes(piece))
                                          + self.serialise(NOTIFY_BYTES))
                unit = max(unit, port + self.alpha(hops)) + apply_cycles(
                    -(-chunk_bytes(piece) // APPLY_WORD_BYTES), self.dma_latency)
                now.append(unit)
            applied = now
        return unit


def algbw(nbytes: int, seconds: float) -> float:
    """nccl-tests' algorithm bandwidth in GB/s: the message size over the time."""
    return nbytes / seconds / 1e9


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' bus bandwidth factor (doc/PERFORMANCE.md): ``2(n-1)/n`` all-reduce,
    ``(n-1)/n`` reduce-scatter, all-gather and all-to-all, 1 broadcast."""
    factors = {"allreduce": 2 * (n - 1) / n, "reducescatter": (n - 1) / n,
               "allgather": (n - 1) / n, "alltoall": (n - 1) / n, "broadcast": 1.0}
    if op not in factors:
        raise ValueError(f"op = {op!r}: must be one of {', '.join(factors)}")
    return factors[op]


def busbw(op: str, n: int, nbytes: int, seconds: float) -> float:
    """nccl-tests' bus bandwidth in GB/s: the algorithm bandwidth times the factor, comparable
    to the link's peak whatever the operation and ``n``."""
    return algbw(nbytes, seconds) * busbw_factor(op, n)
