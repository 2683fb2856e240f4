"""The alpha-beta model of a collective on the configured fabric and nccl-tests' bandwidths
(section 15.6); ``library.auto`` asks it.

A segment costs ``alpha(h) + beta(m)`` and its apply: ``alpha(h) =
engine_cycles + h * hop_cycles`` for a path through ``h`` routers (more when a
longer packet of its chunk is ahead of its notification: ``transit``), ``beta(m)``
the cycles to serialise ``m`` bytes and the segment's notification at one flit
of ``switch.data_width`` bits a cycle, every packet of at most
``switch.max_packet_flits`` flits carrying the RDMA header's two flits, back to back
(the RDMA transmitter picks the next packet and reads its payload while one is
sending; a port that was idle first waits ``gap`` cycles, and a streaming one loses ``gap``
to each coalesced ACK it sends), no faster than a link's
credits come back (``pace``, shared by the writes on one VC), and the apply the
receiving engine's (section 15.8.3). The rounds (``rounds`` of each algorithm: who
writes to whom and the elements of each write, those its schedule sends, so a small
message's empty chunks cost only their header) run as a pipeline at every accelerator: a
segment leaves once its port is free and the segment of the round before it forwards is
applied there; writes that share a link take turns on it, flit by flit, and those of
several senders on one VC share its credits. The turns of a direct exchange, posted at
once, go out together and arrive together (``exchanges``). Unsegmented, and with the apply
left out, this is Hockney's ``T = a * alpha + b * m * beta`` of Thakur, Rabenseifner and
Gropp (2005).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ...formats.rdma_wire import payload_words
from . import dimwise, direct
from .apply import apply_cycles
from .library import algorithm, segment_of
from .schedule import ELEMENT_BYTES, elements_of

__all__ = ["NOTIFY_BYTES", "APPLY_WORD_BYTES", "ENGINE_CYCLES", "start_gap", "credit_loop",
           "credit_pace", "exchanges", "priced_rounds", "AlphaBeta", "algbw", "busbw_factor",
           "busbw"]

#: Bytes of a step's notification: one word, sent after its chunk (section 15.8.2).
NOTIFY_BYTES = 8
#: Bytes the apply unit takes a cycle: a 64-bit word of the host memory (section 15.8.3).
APPLY_WORD_BYTES = 8
#: Cycles a step costs at the engine beyond its data's way (section 15.6): none, measured.
#: It starts in the cycle after the apply it waited for and posts its WRs in that cycle,
#: and the RDMA transmitter's pick is in ``gap``.
ENGINE_CYCLES = 0


def start_gap(dma_latency: int, header_flits: int) -> int:
    """Idle cycles of an idle RDMA transmitter before its packet's flits stream (section
    10.6): the cycle of the pick, then the cycles its first payload word, requested after
    the pick, arrives after the header flits (``dma_latency + 1`` cycles after the first).
    A packet picked while another is sending has its words read by then: no gap."""
    return 1 + max(0, dma_latency + 1 - header_flits)


def credit_loop(cfg) -> int:
    """Cycles from a packet's head leaving a router-to-router link's sender to its last
    credit's return (section 11.8): ``2 L + 2 link_latency + 3``, its flits on the link,
    stored and forwarded at the next router, read out, the credits' way back."""
    return 2 * cfg.switch.max_packet_flits + 2 * cfg.fabric.link_latency + 3


def credit_pace(cfg) -> float:
    """Cycles a router-to-router link takes per flit of one flow (section 11.8)."""
    return float(_pace(credit_loop(cfg), cfg.fabric.vc_buffer_flits, 1))


def _pace(loop: int, buffer: int, crowd):
    """Cycles per flit of each of ``crowd`` flows that share a VC buffer of ``buffer`` flits
    whose credits take ``loop`` cycles to come back, at least 1: together they get
    ``buffer`` flits per round trip."""
    return np.maximum(1.0, crowd * loop / buffer)


def exchanges(peers, op: str, algo: str) -> list[int]:
    """The turns of each exchange among ``algo``'s rounds for ``op``, in order (none: its
    rounds wait in turn). Direct's writes of a phase (``direct.build``) and dimension-wise
    direct's of an axis (``dimwise.build_direct``) wait only for the phase before, so an
    engine posts them at once: ``n - 1`` turns a phase, ``k - 1`` along an axis of ``k``."""
    # Read from the algorithms here, not declared by their rounds, so that a measured sweep
    # point stays valid (``tools.collective_sweep.PRICING``).
    if algo == "direct" and op != "broadcast":
        return [peers.n - 1] * (direct.steps(peers, op) // (peers.n - 1))
    if algo == "dimwise-direct":
        axes = [peers.digits[d] - 1 for d in dimwise.axes(peers)]
        return {"allreduce": axes + axes[::-1], "reducescatter": axes,
                "allgather": axes[::-1]}[op]
    return []


def priced_rounds(peers, op: str, algo: str, elements: int) -> list:
    """The rounds the model prices: ``algo``'s for ``op`` over ``elements``, the turns of
    each exchange (:func:`exchanges`) as one round; each ``(pairs, elements, writes per
    turn)``, the last ``()`` for a round that is not an exchange."""
    rounds = list(algorithm(algo, op, peers).rounds(peers, op, elements))
    turns = exchanges(peers, op, algo)
    if not turns:
        return [(pairs, sizes, ()) for pairs, sizes in rounds]
    if sum(turns) != len(rounds):
        raise ValueError(f"exchanges of {sum(turns)} turns for {len(rounds)} rounds")
    out, first = [], 0
    for count in turns:
        group = rounds[first:first + count]
        out.append((sum((p for p, _ in group), ()), sum((e for _, e in group), ()),
                    tuple(len(p) for p, _ in group)))
        first += count
    return out


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
        Idle cycles of a port that was idle before its packets stream (:func:`start_gap`).
    loop : int
        Cycles a packet's credits take to come back over a router-to-router link
        (:func:`credit_loop`; 0 on a switch, which has none).
    buffer : int
        Flits a link's VC buffer holds (``fabric.vc_buffer_flits``): a stream into an idle
        link sends that many before the credits hold it.
    ack_every : int
        Packets an RDMA receiver acknowledges at once (``rdma.ack_every``; 0: none priced).
        A streaming port that sends one of those ACKs loses ``gap`` cycles (:meth:`acks`).
    """

    engine_cycles: int
    hop_cycles: int
    flit_bytes: int
    header_flits: int
    packet_flits: int
    dma_latency: int
    gap: int
    loop: int = 0
    buffer: int = 1
    ack_every: int = 0

    @classmethod
    def of(cls, cfg, *, engine_cycles: int = ENGINE_CYCLES, hop_cycles: int | None = None,
           gap: int | None = None) -> "AlphaBeta":
        """The model of a ``FabricConfig``; ``hop_cycles`` defaults to
        ``fabric.link_latency + header_flits + 1 + 3`` (a step's last packet is its
        notification, a header and one word, stored and forwarded), ``gap`` to the RDMA
        transmitter's (:func:`start_gap` of ``rdma.dma_latency``)."""
        sw = cfg.switch
        header_flits = sw.max_packet_flits - payload_words(sw.max_packet_flits)
        if gap is None:
            gap = start_gap(cfg.rdma.dma_latency, header_flits)
        if hop_cycles is None:
            hop_cycles = cfg.fabric.link_latency + header_flits + 1 + 3
        for name, value in (("engine_cycles", engine_cycles), ("gap", gap)):
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} = {value!r}: must be a whole number >= 0")
        if sw.max_packet_flits < 3:
            raise ValueError(f"switch.max_packet_flits = {sw.max_packet_flits}: must be at "
                             f"least 3 (two header flits and a payload flit)")
        return cls(engine_cycles, hop_cycles, sw.data_width // 8, header_flits,
                   sw.max_packet_flits, cfg.rdma.dma_latency, gap,
                   credit_loop(cfg) if cfg.fabric.topology != "switch" else 0,
                   cfg.fabric.vc_buffer_flits, cfg.rdma.ack_every)

    @property
    def payload_bytes(self) -> int:
        """Payload bytes of a full packet."""
        return (self.packet_flits - self.header_flits) * self.flit_bytes

    def segment_elements(self, packets: int) -> int:
        """Elements in a segment of ``packets`` full packets' payload (section 15.2)."""
        return packets * self.payload_bytes // ELEMENT_BYTES

    @property
    def pace(self) -> float:
        """Cycles per flit of a long stream of one flow on a router-to-router link
        (:func:`credit_pace`)."""
        return float(_pace(self.loop, self.buffer, 1))

    @property
    def beta(self) -> float:
        """Cycles per byte of a long message over a link: a full packet's flits, at the
        link's pace, over its payload."""
        return self.packet_flits * self.pace / self.payload_bytes

    def acks(self, packets):
        """Cycles a streaming port loses to the coalesced ACKs of ``packets`` received: one
        ACK per ``ack_every`` packets, each taking the port for its flit and its data's
        restart, the ``gap`` of an idle transmitter (section 10.6), as the model's runs
        show: 16-flit packets leave a ring's port at 68 cycles in 4 when it acknowledges
        as much as it sends."""
        return packets * self.gap // self.ack_every if self.ack_every else packets * 0

    def alpha(self, hops: int) -> int:
        """Latency of a step whose path passes ``hops`` routers."""
        return self.engine_cycles + hops * self.hop_cycles

    def serialise(self, nbytes: int) -> int:
        """Cycles an accelerator's port is busy sending ``nbytes`` once its packets stream
        (a write of none is one header-only packet)."""
        return sum(self.packets(nbytes))

    def packets(self, nbytes: int) -> list[int]:
        """The flits of the packets of a write of ``nbytes`` (of none: one header-only
        packet), in order."""
        flits = -(-nbytes // self.flit_bytes)
        payload = self.packet_flits - self.header_flits
        full, rest = divmod(flits, payload)
        return [self.packet_flits] * full + [self.header_flits + rest] * (bool(rest) or not full)

    @functools.lru_cache(maxsize=4096)
    def transit(self, nbytes: int, hops: int) -> int:
        """Cycles from the end of a step's last packet at the port, its notification, to the
        notification's arrival, through ``hops`` routers behind the ``nbytes`` of its chunk.

        Every router stores and forwards a packet whole, ``hop_cycles - 3`` after it arrived
        (the link and the pipeline) once its output is free; the port and every router send
        them back to back, so a notification behind a longer packet waits at every router
        for that packet's tail: ``hops * hop_cycles`` behind a packet no longer than
        itself."""
        lengths = self.packets(nbytes) + self.packets(NOTIFY_BYTES)
        delay, ends, now = self.hop_cycles - lengths[-1], [], 0
        for flits in lengths:
            now += flits
            ends.append(now)
        last = now
        for _ in range(hops):
            free = 0
            for i, flits in enumerate(lengths):
                free = ends[i] = max(ends[i] + delay, free) + flits
        return ends[-1] - last

    def predict(self, peers, op: str, algo: str, nbytes: int,
                chunk_bytes=lambda elements: elements * ELEMENT_BYTES, segment: int = 0) -> int:
        """Predicted cycles of ``op`` over ``nbytes`` per accelerator by ``algo``, its chunks
        in segments of ``segment`` elements (0: whole; ignored by an algorithm that does not
        cut them, ``library.SEGMENTED``); a piece of ``e`` elements is ``chunk_bytes(e)``
        bytes on the wire (binary32 by default; ``formats.compression.wire_bytes``
        compressed, section 16.6).

        Per round, every accelerator's port sends its writes' segments one after the other,
        each with its notification, every write at its own size (a small message's writes
        differ: some chunks are empty). At every accelerator, segments pair with those it
        got in the last round it got any, from the last: a segment leaves once the port is
        free and its partner (the data it forwards; none for the first segments of a write
        longer than the one it got) is applied; a port that waited for that first pays
        ``gap``, and one that did not sends the ACKs of what it gets meanwhile (:meth:`acks`,
        of as many packets as the segment's). A write forwards what came from others than
        its receiver (a ring's other direction comes back from there), or all of it when all
        came from there. A segment holds its port for the longest of its serialisation (and
        those ACKs), the flits of the most of the
        round's writes that share a link of its route (the link carries theirs in the port's
        idle cycles) and its own flits at the pace of the credits it shares with the round's
        writes on one VC class of a link (:meth:`_on_links`), arrives ``engine_cycles +
        transit`` after that, and is applied once the receiver's apply unit is free, in
        ``apply_cycles`` of its words on the wire (the dequantiser of a compressed chunk
        taken to keep up). An exchange (:func:`exchanges`) is one round of turns whose
        writes leave a column of segments at a time, each a flow of its own that takes turns
        on a link with the whole exchange's writes, and arrive when their column is sent.
        The time is when the last segment is applied."""
        segment = segment_of(algo, segment)
        rounds = priced_rounds(peers, op, algo, elements_of(nbytes))
        # Per round, per write, the bytes of each of its segments on the wire, right-aligned
        # in the round's columns (-1: none), so a write's last segment is in the last column.
        sized = []
        for pairs, elements, _ in rounds:
            distinct, which = np.unique(elements, return_inverse=True)
            pieces = [[chunk_bytes(e) for e in self._cut(int(e), segment)] for e in distinct]
            k = max(len(p) for p in pieces)
            wire = np.full((len(distinct), k), -1, np.int64)
            for row, p in enumerate(pieces):
                wire[row, k - len(p):] = p
            sized.append((pairs, wire[which.reshape(-1)]))
        n, width = peers.n, max((w.shape[1] for _, w in sized), default=1)
        # The layers of each round's pairs (rounds repeat them); an exchange's are its turns.
        shapes = [(pairs, turns) for pairs, _, turns in rounds]
        layered = {shape: self._layers(peers, *shape) for shape in set(shapes)}
        depth = max((len(l) for l, _ in layered.values()), default=1)
        port, unit = np.zeros(n, np.int64), np.zeros(n, np.int64)
        # Per layer of the last round an accelerator got data in, per accelerator: when it
        # applied each piece, right-aligned in ``width`` columns, how many pieces it got
        # and from whom (-1: nothing in that layer).
        got = np.zeros((depth, n, width), np.int64)
        count, source = np.zeros((depth, n), np.int64), np.full((depth, n), -1, np.int64)
        for (_, wire), shape in zip(sized, shapes):
            layers, receivers = layered[shape]
            exchange = bool(shape[1])
            fresh, k = got.copy(), wire.shape[1]
            fresh_count, fresh_source = count.copy(), source.copy()
            fresh_count[:, receivers], fresh_source[:, receivers] = 0, -1
            forwarding = []
            for layer, (index, src, dst, share, crowd, hops) in enumerate(layers):
                fresh_count[layer, dst] = (wire[index] >= 0).sum(axis=1)
                fresh_source[layer, dst] = src
                # A write forwards what its sender got from others than its receiver (a
                # ring's other direction comes back from there), or else what it got; an
                # exchange's, all it got (it reduced every piece into what it sends).
                others = (source[:, src] != dst) & (count[:, src] > 0)
                forwarding.append(count[:, src] > 0 if exchange
                                  else others | ~others.any(axis=0))
            # A port sends a layer's segments, then the next layer's; an exchange's turns
            # go out together, a column at a time, and its column arrives whole (the
            # transmitter takes its channels in turn, a packet each).
            together = ([[(layer, i) for layer in range(len(layers))] for i in range(k)]
                        if exchange else [[(layer, i)] for layer in range(len(layers))
                                          for i in range(k)])
            for group in together:
                arrivals = []
                if exchange:
                    # The column: when each port began it, and the least it takes on its
                    # busiest link, whose writes the turns interleave (-1: not begun).
                    begun, least = np.full(n, -1, np.int64), np.zeros(n, np.int64)
                for layer, i in group:
                    index, src, dst, share, crowd, hops = layers[layer]
                    on = wire[index, i] >= 0
                    if not on.any():        # this layer's writes are all shorter
                        continue
                    s, d, column = src[on], dst[on], width - k + i
                    send, flits, packets, alpha, apply = self._writes(wire[index[on], i],
                                                                      hops[on])
                    held = forwarding[layer][:, on] & (column >= width - count[:, s])
                    ready = np.where(held, got[:, s, column], 0).max(axis=0)
                    # A port that waited for the data starts its transmitter afresh; one that
                    # streams sends the ACKs of what it gets between its packets (in a
                    # symmetric collective as many as it sends: its own write's, here).
                    idle = ready >= port[s]
                    send = send + np.where(idle, 0, self.acks(packets))
                    start = np.maximum(port[s], ready) + np.where(idle, self.gap, 0)
                    if exchange:
                        # A turn's write is a flow of its own: its links' buffers take their
                        # share at once, and it takes turns on a link with the exchange's
                        # writes, not its turn's (``share``: of the whole exchange).
                        begun[s] = np.where(begun[s] < 0, start, begun[s])
                        least[s] = np.maximum(least[s], begun[s] + share[on] * flits)
                        port[s] = start + np.maximum(send, self._on_links(flits, hops[on], True,
                                                                          crowd[on]))
                    else:
                        port[s] = start + np.maximum(np.maximum(send, share[on] * flits),
                                                     self._on_links(flits, hops[on], idle,
                                                                    crowd[on]))
                    arrivals.append((layer, column, s, d, alpha, apply))
                if exchange:
                    port = np.maximum(port, least)
                for layer, column, s, d, alpha, apply in arrivals:
                    unit[d] = np.maximum(unit[d], port[s] + alpha) + apply
                    fresh[layer, d, column] = unit[d]
            got, count, source = fresh, fresh_count, fresh_source
        return int(unit.max())

    def _on_links(self, flits, hops, idle, crowd):
        """Cycles ``flits`` take through the links of routes through ``hops`` routers, each
        route's flows sharing a VC's credits with ``crowd`` flows in all: at the pace those
        credits allow, but for the flow's part of the buffer that a link takes at once after
        its port was ``idle``."""
        free = np.where(idle, np.minimum(flits, self.buffer / crowd), 0)
        paced = np.ceil(free + (flits - free) * _pace(self.loop, self.buffer, crowd))
        return np.where(hops > 1, paced.astype(np.int64), flits)

    @staticmethod
    def _cut(elements: int, segment: int) -> list[int]:
        """The elements of each segment of a write of ``elements`` (``Builder``'s cut)."""
        if not segment or elements <= segment:
            return [elements]
        return [segment] * (elements // segment) + [elements % segment] * bool(
            elements % segment)

    def _writes(self, nbytes, hops):
        """Per write of ``nbytes[i]`` bytes on the wire through ``hops[i]`` routers: the
        cycles its port is busy (it and its notification), their flits, their packets, from
        the end of that to its arrival, and its apply; five arrays."""
        distinct, which = np.unique(np.stack([nbytes, hops], axis=1), axis=0,
                                    return_inverse=True)
        costs = np.array([self._write(int(b), int(h)) for b, h in distinct], np.int64)
        return costs[which.reshape(-1)].T

    @functools.lru_cache(maxsize=4096)
    def _write(self, nbytes: int, hops: int) -> tuple[int, int, int, int, int]:
        """:meth:`_writes` of one write."""
        return (self.serialise(nbytes) + self.serialise(NOTIFY_BYTES),
                sum(self.packets(nbytes)) + sum(self.packets(NOTIFY_BYTES)),
                len(self.packets(nbytes)) + len(self.packets(NOTIFY_BYTES)),
                self.engine_cycles + self.transit(nbytes, hops),
                apply_cycles(-(-nbytes // APPLY_WORD_BYTES), self.dma_latency))

    @staticmethod
    def _layers(peers, pairs, turns=()):
        """``pairs`` as layers in which no accelerator sends or receives twice, in order, per
        layer ``(index in pairs, src, dst, share, crowd, hops)`` arrays (``Peers.sharing``);
        and every accelerator that receives. An exchange's ``turns`` (writes per turn) are
        its layers, each sharing credits with its own writes (``crowd``) and links with the
        whole exchange's (``share``)."""
        if turns:
            layers, first, whole = [], 0, peers.sharing(pairs)
            for count in turns:
                turn = pairs[first:first + count]
                layers.append([(first + k, src, dst, whole[first + k][0], crowd,
                                peers.hops(src, dst))
                               for k, ((src, dst), (_, crowd))
                               in enumerate(zip(turn, peers.sharing(turn)))])
                first += count
            return ([tuple(np.array(c) for c in zip(*layer)) for layer in layers],
                    np.array(sorted({dst for _, dst in pairs}), np.int64))
        layers, sent, received = [], {}, {}
        for index, ((src, dst), (share, crowd)) in enumerate(zip(pairs, peers.sharing(pairs))):
            # The first layer after every one this sender or this receiver is in already.
            i = max(sent.get(src, 0), received.get(dst, 0))
            if i == len(layers):
                layers.append([])
            layers[i].append((index, src, dst, share, crowd, peers.hops(src, dst)))
            sent[src] = received[dst] = i + 1
        return ([tuple(np.array(c) for c in zip(*layer)) for layer in layers],
                np.array(sorted(received), np.int64))
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
