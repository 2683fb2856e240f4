"""A synthesizable statistics sink: one per switch output of the stimulus top.

It takes the output's flits (ready from a seeded draw against a stall
threshold), counts packets and flits per class, sums latencies and keeps
their minimum, maximum and a log-linear histogram, checks per (source,
class) that sequence numbers only move forward, checks each flit against
its packet's head (framing, route, header fields), and folds every
delivered packet's record into a running CRC-32. The model is
``sim/stimulus/traffic_sink.py``; ``docs/architecture.md`` section 12.3 the
specification both follow.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...formats.packet import port_bits
from ...formats.stimulus import DRAW_BITS, TIMESTAMP_BITS, crc32_update, port_bytes, record_bits
from .traffic_gen import port_seed, xorshift64

__all__ = ["TrafficSink", "sink_signature", "crc32_network"]

_CE = 3


def crc32_network(m: Module, crc, record, name: str = "crc"):
    """``superfabric.formats.stimulus.crc32_update(crc, record, len(record))`` as logic, added
    to ``m`` (its ROMs named after ``name``, so that a module can hold several).

    The update is linear: the result is a constant XOR one 32-bit column
    per input bit set. The input bits (32 of state, 96 or 112 of record)
    are cut into nibbles, and each nibble looks up the XOR of its four
    columns in a 16-word ROM; the lookups are XORed together. In gates that
    is a LUT level and an XOR tree, like the usual XOR network, but a
    simulator evaluates it as table reads instead of gathering bits for
    each of the 32 parities.
    """
    width = len(record)
    const = crc32_update(0, 0, width)
    bits = Cat(crc, record)
    columns = [(crc32_update(1 << k, 0, width) if k < 32 else
                crc32_update(0, 1 << (k - 32), width)) ^ const
               for k in range(32 + width)]
    result = Const(const, 32)
    for nibble in range(len(columns) // 4):
        table = []
        for value in range(16):
            word = 0
            for b in range(4):
                if value >> b & 1:
                    word ^= columns[4 * nibble + b]
            table.append(word)
        rom = Memory(shape=32, depth=16, init=table)
        m.submodules[f"{name}_rom{nibble}"] = rom
        lookup = rom.read_port(domain="comb")
        m.d.comb += lookup.addr.eq(bits[4 * nibble:4 * nibble + 4])
        result = result ^ lookup.data
    return result


def _bucket(latency, sub_bits: int, buckets: int):
    """``superfabric.formats.stimulus.latency_bucket`` as logic: find the top bit, keep the
    ``sub_bits`` below it, and saturate at the last bucket."""
    size = 1 << sub_bits
    width = len(latency)
    top = Const(0, range(width))
    for h in range(width):
        top = Mux(latency[h], h, top)
    shift = (top - sub_bits)[:len(top)]
    log = Cat((latency >> shift)[:sub_bits], (top - sub_bits + 1)[:len(top) + 1])
    index = Mux(latency < size, latency, log)
    return Mux(index >= buckets - 1, buckets - 1, index)


def sink_signature(*, layout: data.StructLayout, ports: int, priorities: int,
                   counter_width: int, hist_buckets: int, hist_sub_bits: int) -> wiring.Signature:
    """The ports of a :class:`TrafficSink` (the stimulus top instances its module)."""
    if not isinstance(hist_buckets, int) or hist_buckets < 2 << hist_sub_bits:
        raise ValueError(f"hist_buckets must be an integer >= {2 << hist_sub_bits} "
                         f"(2 * 2**hist_sub_bits), not {hist_buckets!r}")
    return wiring.Signature({
        "i": In(stream.Signature(layout)),
        "port": In(port_bits(ports)),
        "seed": In(64), "key": In(64), "start": In(1), "running": In(1),
        "stall_threshold": In(DRAW_BITS + 1),
        "timestamp": In(TIMESTAMP_BITS),
        "window": In(1),
        "packets": Out(counter_width).array(priorities),
        "flits": Out(counter_width).array(priorities),
        "window_flits": Out(counter_width),
        "latency_sum": Out(counter_width),
        "latency_min": Out(TIMESTAMP_BITS, init=(1 << TIMESTAMP_BITS) - 1),
        "latency_max": Out(TIMESTAMP_BITS),
        "hash": Out(32),
        "order_errors": Out(counter_width),
        "frame_errors": Out(counter_width),
        "ce_packets": Out(counter_width),
        "hist_addr": In(range(hist_buckets)),
        "hist_data": Out(counter_width),
        "cleared": Out(1),
    })


class TrafficSink(wiring.Component):
    """The statistics sink of one output of a ``ports``-port switch or fabric.

    Which output it serves is an input port, ``port``, not a parameter, so that
    every sink of a top is one module (the one with a planted fault another).

    Parameters
    ----------
    layout : data.StructLayout
        The packet layout; ``data`` holds the generation cycle (low 32 bits).
    ports, priorities : int
        The switch's (fabric's endpoint) ports and its classes.
    counter_width : int
        Width of the packet, flit, latency-sum and histogram counters.
    hist_buckets, hist_sub_bits : int
        The latency histogram: ``hist_buckets`` buckets, ``2**hist_sub_bits``
        per power of two.
    fault_packet : int
        0, or K: withhold ``ready`` for one cycle when the head of the K-th
        packet arrives (a planted fault; the model does not have it).

    Ports
    -----
    i : packet stream from the switch output.
    port : the output this sink serves (its packets' ``dst``).
    seed, key, start : ``start`` loads the ready draw's state with the port's seed
        (:func:`~.traffic_gen.port_seed`) from the run's ``seed`` and the port's ``key``.
    running : step the ready draw in this cycle.
    stall_threshold : not ready when the 16-bit draw is below it (0: always ready).
    timestamp : the cycle number (low 32 bits); latency = timestamp - data.
    window : the cycle is inside the generation window.
    packets, flits : per class. window_flits: flits of packets whose tail
        came in the window. latency_sum, latency_min (all ones: none yet),
        latency_max. hash: the running CRC-32. order_errors, frame_errors,
        ce_packets (delivered marked CE).
    hist_addr, hist_data : read a histogram bucket (combinational).
    cleared : the memories are cleared, which takes ``max(hist_buckets, ports *
        priorities)`` cycles after reset; the sink must not see a flit before.
    """

    def __init__(self, *, layout: data.StructLayout, ports: int, priorities: int,
                 counter_width: int, hist_buckets: int, hist_sub_bits: int, fault_packet: int = 0):
        self._layout = layout
        self._ports, self._priorities = ports, priorities
        self._width = counter_width
        self._buckets, self._sub_bits = hist_buckets, hist_sub_bits
        self._fault = fault_packet
        super().__init__(sink_signature(layout=layout, ports=ports, priorities=priorities,
                                        counter_width=counter_width, hist_buckets=hist_buckets,
                                        hist_sub_bits=hist_sub_bits))

    def elaborate(self, platform):
        m = Module()
        taken, tail = self._ready(m)
        self._framing(m, taken)
        latency = Signal(TIMESTAMP_BITS)
        m.d.comb += latency.eq(self.timestamp - self.i.payload.data[:TIMESTAMP_BITS])
        clear_addr, clearing = self._clearing(m)
        self._histogram(m, tail, latency, clear_addr, clearing)
        backwards = self._order(m, tail, clear_addr, clearing)
        hash_next = self._hash(m)
        self._at_tail(m, tail, latency, hash_next, backwards)
        return m

    def _ready(self, m):
        """Ready from the seeded draw (section 12.3), less the planted fault;
        returns ``(taken, tail)``: a flit, and a packet's last flit, is taken."""
        flit = self.i.payload
        # The draw's state is loaded at start, before any draw: no reset needed.
        state = Signal(64, init=1, reset_less=True)
        draw = Signal(64)
        m.d.comb += draw.eq(xorshift64(state))
        with m.If(self.start):
            m.d.sync += state.eq(port_seed(self.seed, self.key))
        with m.Elif(self.running):
            m.d.sync += state.eq(draw)
        ready = draw[:DRAW_BITS] >= self.stall_threshold
        if self._fault:
            # The planted fault: one cycle not ready at the K-th packet's head.
            received = Signal(range(self._fault + 1))
            faulted = Signal()
            withhold = self.i.valid & flit.first & (received == self._fault - 1) & ~faulted
            with m.If(withhold):
                m.d.sync += faulted.eq(1)
            ready = ready & ~withhold
        m.d.comb += self.i.ready.eq(ready)
        taken = self.i.valid & self.i.ready
        tail = taken & flit.last
        if self._fault:
            with m.If(tail & (received != self._fault)):
                m.d.sync += received.eq(received + 1)
        return taken, tail

    def _framing(self, m, taken):
        """Per flit taken: its class's flit count, and a framing error unless it
        matches its packet's head flit and is for this output."""
        flit = self.i.payload
        head = Signal(self._layout)
        index = Signal(range(max(2, 1 << self._layout["length"].shape.width)))
        fields = ["src", "tag", "data", "prio", "length", "ecn"]
        fabric = "vc" in self._layout.members
        if fabric:
            # A fabric's flits also carry the links crossed, the same on every
            # flit of a packet, and leave toward an endpoint on VC 0.
            fields.append("hops")
        same = Cat(flit[name] == head[name] for name in fields).all()
        bad = Mux(index == 0, ~flit.first, flit.first | ~same) | (flit.dst != self.port)
        if fabric:
            bad |= flit.vc != 0
        with m.If(taken):
            m.d.sync += index.eq(Mux(flit.last, 0, index + 1))
            with m.If(index == 0):
                m.d.sync += head.eq(flit)
            with m.If(bad):
                m.d.sync += self.frame_errors.eq(self.frame_errors + 1)
            flits = Array(self.flits)
            m.d.sync += flits[flit.prio].eq(flits[flit.prio] + 1)

    def _clearing(self, m):
        """The memories' clearing after reset, a word per cycle, then ``cleared``;
        returns ``(clear_addr, clearing)``: the word cleared, and whether one is."""
        # A reset then also clears the statistics.
        words = max(self._buckets, self._ports * self._priorities)
        clear_addr = Signal(range(words + 1))
        clearing = clear_addr != words
        with m.If(clearing):
            m.d.sync += clear_addr.eq(clear_addr + 1)
        m.d.comb += self.cleared.eq(~clearing)
        return clear_addr, clearing

    def _histogram(self, m, tail, latency, clear_addr, clearing):
        """The latency histogram: buckets in a memory, read, incremented and
        written back at a tail; ``hist_addr``/``hist_data`` read it out."""
        hist = Memory(shape=self._width, depth=self._buckets, init=[])
        m.submodules.hist = hist
        update = hist.read_port(domain="comb")
        readout = hist.read_port(domain="comb")
        write = hist.write_port()
        bucket = Signal(range(self._buckets))
        m.d.comb += [
            bucket.eq(_bucket(latency, self._sub_bits, self._buckets)),
            update.addr.eq(bucket),
            write.addr.eq(Mux(clearing, clear_addr, bucket)),
            write.data.eq(Mux(clearing, 0, update.data + 1)),
            write.en.eq(tail | (clearing & (clear_addr < self._buckets))),
            readout.addr.eq(self.hist_addr),
            self.hist_data.eq(readout.data),
        ]

    def _order(self, m, tail, clear_addr, clearing):
        """Order: per (source, class) flow, whether a tag was seen and the last
        one; returns ``backwards``, the tail's tag does not move its flow forward."""
        flit = self.i.payload
        flows = self._ports * self._priorities
        tag_bits = self._layout["tag"].shape.width
        last_tag = Memory(shape=data.StructLayout({"tag": tag_bits, "seen": 1}), depth=flows,
                          init=[])
        m.submodules.last_tag = last_tag
        flow = Signal(range(flows))
        m.d.comb += flow.eq(flit.src * self._priorities + flit.prio)
        seen_rd = last_tag.read_port(domain="comb")
        seen_wr = last_tag.write_port()
        ahead = Signal(tag_bits)
        m.d.comb += [seen_rd.addr.eq(flow), ahead.eq(flit.tag - seen_rd.data.tag),
                     seen_wr.addr.eq(Mux(clearing, clear_addr, flow)),
                     seen_wr.data.tag.eq(flit.tag), seen_wr.data.seen.eq(~clearing),
                     seen_wr.en.eq(tail | (clearing & (clear_addr < flows)))]
        return seen_rd.data.seen & ((ahead == 0) | ahead[-1])

    def _hash(self, m):
        """The delivery record of the flit's packet
        (``superfabric.formats.stimulus.delivery_record``) folded into the running
        CRC-32; returns the hash after it."""
        flit = self.i.payload
        w = 8 * port_bytes(self._ports)
        record = Signal(record_bits(self._ports))
        m.d.comb += record.eq(flit.tag | (self.timestamp << 32) | (flit.src << 64)
                              | (self.port << (64 + w)) | (flit.ecn << (64 + 2 * w))
                              | (flit.prio << (72 + 2 * w)))
        return crc32_network(m, self.hash, record)

    def _at_tail(self, m, tail, latency, hash_next, backwards):
        """At a tail: the packet, latency, window, CE and order statistics, and the hash."""
        flit = self.i.payload
        packets = Array(self.packets)
        with m.If(tail):
            m.d.sync += [
                packets[flit.prio].eq(packets[flit.prio] + 1),
                self.latency_sum.eq(self.latency_sum + latency),
                self.hash.eq(hash_next),
            ]
            with m.If(latency < self.latency_min):
                m.d.sync += self.latency_min.eq(latency)
            with m.If(latency > self.latency_max):
                m.d.sync += self.latency_max.eq(latency)
            with m.If(self.window):
                m.d.sync += self.window_flits.eq(self.window_flits + flit.length)
            with m.If(flit.ecn == _CE):
                m.d.sync += self.ce_packets.eq(self.ce_packets + 1)
            with m.If(backwards):
                m.d.sync += self.order_errors.eq(self.order_errors + 1)
