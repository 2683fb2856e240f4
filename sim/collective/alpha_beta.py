"""The alpha-beta model of a collective on the configured fabric and nccl-tests' bandwidths
(section 15.6); ``library.auto`` asks it.

A round costs ``alpha(h) + beta(m)``: ``alpha(h) = engine_cycles + h *
hop_cycles`` for a path through ``h`` routers, and ``beta(m)`` the cycles to
serialise ``m`` bytes at one flit of ``switch.data_width`` bits a cycle,
every packet of at most ``switch.max_packet_flits`` flits carrying the RDMA
header's two flits and a one-cycle gap. An algorithm's time is the sum over
its rounds (``rounds`` of each algorithm: the hops and the bytes every
accelerator sends in each round); for large messages this is Hockney's
``T = a * alpha + b * m * beta`` of Thakur, Rabenseifner and Gropp (2005).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...formats.rdma_wire import payload_words
from .library import algorithm
from .schedule import ELEMENT_BYTES, elements_of

__all__ = ["ENGINE_CYCLES", "PACKET_GAP", "AlphaBeta", "algbw", "busbw_factor", "busbw"]

#: Cycles the engine takes per step (read the schedule entry, post the WRITE, start the
#: DMA read): a stand-in until the collective engine's RTL measures it.
ENGINE_CYCLES = 16
#: Idle cycles between an engine's packets (the RDMA engine's, section 10.10).
PACKET_GAP = 1


@dataclass(frozen=True)
class AlphaBeta:
    """The cost of one round of a collective, in cycles.

    Attributes
    ----------
    engine_cycles : int
        Per step, at the engine.
    hop_cycles : int
        Per router on the path: the link's latency, the router's pipeline (3) and a packet
        stored and forwarded (section 11.8).
    flit_bytes, header_flits, packet_flits, gap : int
        The link: bytes a flit carries, header flits per packet, flits of the longest
        packet, idle cycles between packets.
    """

    engine_cycles: int
    hop_cycles: int
    flit_bytes: int
    header_flits: int
    packet_flits: int
    gap: int = PACKET_GAP

    @classmethod
    def of(cls, cfg, *, engine_cycles: int = ENGINE_CYCLES, hop_cycles: int | None = None,
           gap: int = PACKET_GAP) -> "AlphaBeta":
        """The model of a ``FabricConfig``; ``hop_cycles`` defaults to
        ``fabric.link_latency + switch.max_packet_flits + 3``."""
        sw = cfg.switch
        for name, value in (("engine_cycles", engine_cycles), ("gap", gap)):
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} = {value!r}: must be a whole number >= 0")
        if hop_cycles is None:
            hop_cycles = cfg.fabric.link_latency + sw.max_packet_flits + 3
        if sw.max_packet_flits < 3:
            raise ValueError(f"switch.max_packet_flits = {sw.max_packet_flits}: must be at "
                             f"least 3 (two header flits and a payload flit)")
        return cls(engine_cycles, hop_cycles, sw.data_width // 8,
                   sw.max_packet_flits - payload_words(sw.max_packet_flits),
                   sw.max_packet_flits, gap)

    @property
    def payload_bytes(self) -> int:
        """Payload bytes of a full packet."""
        return (self.packet_flits - self.header_flits) * self.flit_bytes

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
                chunk_bytes=lambda elements: elements * ELEMENT_BYTES) -> int:
        """Predicted cycles of ``op`` over ``nbytes`` per accelerator by ``algo``; a round's
        chunk of ``e`` elements is ``chunk_bytes(e)`` bytes on the wire (binary32 by default;
        ``formats.compression.wire_bytes`` compressed, section 16.6)."""
        total = 0
        for pairs, elements in algorithm(algo, op, peers).rounds(peers, op, elements_of(nbytes)):
            hops, sharing = peers.load(pairs)
            total += self.alpha(hops) + sharing * self.serialise(chunk_bytes(elements))
        return total


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
