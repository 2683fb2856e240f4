"""A synthesizable traffic generator: one per switch input of the stimulus top.

Each cycle of the generation window it steps a seeded xorshift64 twice and
cuts the two words into draws: a Bernoulli injection against a threshold
(the load as a fraction of 2**24), the destination (by mode), the class,
the length and the ECN codepoint. A generated packet waits in a bounded
queue of pending packets and is sent flit by flit, back to back, from the
cycle it was generated; a generation that finds the queue full is refused
and counted. Every flit carries its packet's generation cycle in ``data``
and the input's sequence number in ``tag``. The model is
``sim/stimulus/traffic_gen.py``; ``docs/architecture.md`` section 12.2 the
specification both follow.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ...formats.stimulus import DRAW_BITS, GENERATED_ECN, INJECT_BITS, MODES, TIMESTAMP_BITS
from ...formats.packet import port_bits

__all__ = ["Mode", "settings_layout", "xorshift64", "generator_signature", "TrafficGenerator"]


class Mode(enum.Enum, shape=3):
    """How a generator picks its packets' outputs (register codes of ``superfabric.formats.stimulus.MODES``)."""

    UNIFORM = MODES.index("uniform")    # uniform over the other outputs
    FIXED = MODES.index("fixed")        # the input's fixed_dst
    HOTSPOT = MODES.index("hotspot")    # hot_port with hot_threshold / 2**16, else uniform
    ROTATE = MODES.index("rotate")      # all-to-all: input + 1, + 2, ... every other output in turn
    BURSTY = MODES.index("bursty")      # on/off bursts, each to one uniform output


def settings_layout(*, ports: int, priorities: int, max_packet_flits: int,
                    counter_width: int) -> data.StructLayout:
    """The run settings every generator reads (registers of the stimulus top)."""
    draw, inject = DRAW_BITS + 1, INJECT_BITS + 1
    length = max_packet_flits.bit_length()
    return data.StructLayout({
        "mode": Mode,
        "inject": inject, "burst_start": inject, "burst_end": draw,
        "hot_port": port_bits(ports), "hot_threshold": draw,
        "len_short": length, "len_long": length, "len_threshold": draw,
        "ect_threshold": draw, "limit": counter_width,
        "prio_thresholds": data.ArrayLayout(draw, max(priorities - 1, 1)),
    })


def xorshift64(x):
    """One step of xorshift64 (``superfabric.formats.stimulus.xorshift64``) as logic."""
    x = x ^ (x << 13)[:64]
    x = x ^ (x >> 7)
    return x ^ (x << 17)[:64]


def port_seed(seed, key):
    """``superfabric.formats.stimulus.port_seed`` as logic: a port's start state from the
    run's ``seed`` and the port's ``key``.

    A generator and a sink compute their own from ``key``, a port tied to a constant at
    the instance, rather than taking the result from the top: XOR with a constant is a
    different pattern of inverted bits for each port, which the Verilog generator and
    Verilator assemble bit range by bit range, and at the 8x8x6 torus the top's 768 of
    them were about 50,000 statements of its C++, in the code run at every clock edge."""
    mixed = seed ^ key
    return Mux(mixed == 0, key, mixed)


def generator_signature(*, layout: data.StructLayout, ports: int, priorities: int,
                        counter_width: int) -> wiring.Signature:
    """The ports of a :class:`TrafficGenerator` (the stimulus top instances its module)."""
    for name, value, low in (("ports", ports, 2), ("priorities", priorities, 1),
                             ("counter_width", counter_width, 1)):
        if not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, not {value!r}")
    if layout["data"].shape.width < TIMESTAMP_BITS:
        raise ValueError(f"the layout's data field must hold at least {TIMESTAMP_BITS} bits, "
                         f"not {layout['data'].shape.width}")
    max_flits = (1 << layout["length"].shape.width) - 1
    settings = settings_layout(ports=ports, priorities=priorities, max_packet_flits=max_flits,
                               counter_width=counter_width)
    return wiring.Signature({
        "o": Out(stream.Signature(layout)),
        "settings": In(settings),
        "port": In(port_bits(ports)),
        "fixed_dst": In(port_bits(ports)),
        "enable": In(1),
        "seed": In(64),
        "key": In(64),
        "start": In(1),
        "stepping": In(1),
        "timestamp": In(TIMESTAMP_BITS),
        "generated": Out(counter_width),
        "generated_flits": Out(counter_width),
        "refused": Out(counter_width),
    })


class TrafficGenerator(wiring.Component):
    """The traffic generator of one input of a ``ports``-port switch or fabric.

    Which input it serves is an input port, ``port``, not a parameter, so that
    every generator of a top is one module.

    Parameters
    ----------
    layout : data.StructLayout
        The packet layout (``superfabric.hdl.packet.packet_layout``); its
        ``data`` field must hold at least 32 bits.
    ports, priorities : int
        The switch's (fabric's endpoint) ports and its traffic classes.
    queue_depth : int
        Packets the generator holds generated but not yet sent, the one
        being sent included.
    counter_width : int
        Width of the packet counters (and of ``settings.limit``).

    Ports
    -----
    o : packet stream toward the switch input.
    settings : the run settings (:func:`settings_layout`).
    port : the input this generator serves (its packets' ``src``).
    fixed_dst, enable : this input's output in mode FIXED; whether it generates.
    seed, key, start : ``start`` loads the xorshift state with the port's seed
        (:func:`port_seed`) from the run's ``seed`` and the port's ``key``.
    stepping : draw in this cycle (the run is on and inside its generation window).
    timestamp : the cycle number, carried by each packet generated in it.
    generated, generated_flits, refused : packets (and their flits) generated
        and kept, and generations refused because the queue was full.
    """

    def __init__(self, *, layout: data.StructLayout, ports: int, priorities: int,
                 queue_depth: int, counter_width: int):
        if not isinstance(queue_depth, int) or queue_depth < 2:
            raise ValueError(f"queue_depth must be an integer >= 2, not {queue_depth!r}")
        self._layout = layout
        self._ports, self._priorities = ports, priorities
        self._depth = queue_depth
        super().__init__(generator_signature(layout=layout, ports=ports, priorities=priorities,
                                             counter_width=counter_width))

    def elaborate(self, platform):
        m = Module()
        layout, port, n = self._layout, self.port, self._ports
        cfg = self.settings
        pb = port_bits(n)

        # The xorshift state is loaded at start, before any draw, so it needs
        # no reset: a reset value would only be overwritten.
        state = Signal(64, init=1, reset_less=True)
        a = Signal(64)
        b = Signal(64)
        m.d.comb += [a.eq(xorshift64(state)), b.eq(xorshift64(a))]
        with m.If(self.start):
            m.d.sync += state.eq(port_seed(self.seed, self.key))
        with m.Elif(self.stepping):
            m.d.sync += state.eq(b)
        d_inject, d_dst, d_hot = a[:24], a[24:40], a[40:56]
        d_prio, d_length, d_ect, d_end = b[:16], b[16:32], b[32:48], b[48:64]

        # Uniform over the other outputs: scale the draw to 0..n-2, skip this port.
        index = (d_dst * (n - 1))[DRAW_BITS:]
        uniform = Signal(pb)
        m.d.comb += uniform.eq(Mux(index >= port, index + 1, index))

        hit = d_inject < cfg.inject
        bursty = cfg.mode == Mode.BURSTY
        on = Signal()
        burst_dst = Signal(pb)
        with m.If(self.stepping & bursty):
            with m.If(on):
                with m.If(hit & (d_end < cfg.burst_end)):
                    m.d.sync += on.eq(0)
            with m.Elif(d_inject < cfg.burst_start):
                m.d.sync += [on.eq(1), burst_dst.eq(uniform)]
        inject = Mux(bursty, on & hit, hit)

        fifo_entry = data.StructLayout({
            "timestamp": TIMESTAMP_BITS, "dst": pb, "prio": layout["prio"].shape,
            "length": layout["length"].shape, "ecn": 2, "seq": layout["tag"].shape,
        })
        m.submodules.pending = pending = SyncFIFO(width=fifo_entry.size, depth=self._depth)
        limit_ok = (cfg.limit == 0) | (self.generated < cfg.limit)
        wanted = self.stepping & self.enable & limit_ok & inject
        full = pending.level == self._depth
        kept = Signal()
        m.d.comb += kept.eq(wanted & ~full)

        offset = Signal(range(1, n), init=1)     # ROTATE: the next packet's distance
        rotated = port + offset
        dst = Signal(pb)
        with m.Switch(cfg.mode):
            with m.Case(Mode.UNIFORM):
                m.d.comb += dst.eq(uniform)
            with m.Case(Mode.FIXED):
                m.d.comb += dst.eq(self.fixed_dst)
            with m.Case(Mode.HOTSPOT):
                m.d.comb += dst.eq(Mux(d_hot < cfg.hot_threshold, cfg.hot_port, uniform))
            with m.Case(Mode.ROTATE):
                m.d.comb += dst.eq(Mux(rotated >= n, rotated - n, rotated))
                with m.If(kept):
                    m.d.sync += offset.eq(Mux(offset == n - 1, 1, offset + 1))
            with m.Default():
                m.d.comb += dst.eq(burst_dst)

        new = Signal(fifo_entry)
        classes = self._priorities - 1
        m.d.comb += [
            new.timestamp.eq(self.timestamp), new.dst.eq(dst),
            new.prio.eq(sum(d_prio >= cfg.prio_thresholds[k] for k in range(classes))
                        if classes else 0),
            new.length.eq(Mux(d_length < cfg.len_threshold, cfg.len_short, cfg.len_long)),
            new.ecn.eq(Mux(d_ect < cfg.ect_threshold, GENERATED_ECN, 0)),
            new.seq.eq(self.generated),
        ]
        with m.If(kept):
            m.d.sync += [self.generated.eq(self.generated + 1),
                         self.generated_flits.eq(self.generated_flits + new.length)]
        with m.If(wanted & full):
            m.d.sync += self.refused.eq(self.refused + 1)

        # The oldest pending packet is offered; with none pending, a packet
        # generated in this cycle is offered at once.
        head = Signal(fifo_entry)
        m.d.comb += head.eq(Mux(pending.r_rdy, pending.r_data, new))
        flit = Signal(range(max(2, 1 << layout["length"].shape.width)))
        last = flit == head.length - 1
        sent = self.o.valid & self.o.ready
        m.d.comb += [
            self.o.valid.eq(pending.r_rdy | kept),
            self.o.payload.data.eq(head.timestamp),
            self.o.payload.first.eq(flit == 0),
            self.o.payload.last.eq(last),
            self.o.payload.dst.eq(head.dst),
            self.o.payload.src.eq(port),
            self.o.payload.prio.eq(head.prio),
            self.o.payload.ecn.eq(head.ecn),
            self.o.payload.length.eq(head.length),
            self.o.payload.tag.eq(head.seq),
            # A packet generated and sent whole in this cycle never waits.
            pending.w_en.eq(kept & ~(~pending.r_rdy & sent & last)),
            pending.w_data.eq(new),
            pending.r_en.eq(pending.r_rdy & sent & last),
        ]
        with m.If(sent):
            m.d.sync += flit.eq(Mux(last, 0, flit + 1))
        return m
