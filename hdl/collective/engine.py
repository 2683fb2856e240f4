"""The collective engine (section 15.8): one accelerator's sequencer, send queues and apply
unit, beside its RDMA engine; cycle for cycle and word for word the model's engine
(``superfabric.sim.collective.kernels.engine``) with the accelerator's send queues of
``superfabric.sim.rdma.kernels.send_queues``.

The sequencer starts the schedule's steps in order, each once the slots it waits for are
applied; a step's work requests (the chunk's WRITEs, then the notification's SEND) join
its QP's send queue, and the engine offers its RDMA engine the oldest WR at the head of a
send queue whose channel has room for it, as the hosts do. A send queue is a list of steps
linked through a memory as they start (every step is on one QP, ``peer mod Q``), so no
schedule can overflow it; each queue keeps its head step's fields and how far its WRs
have been taken.
"""

from amaranth.hdl import Array, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...config import FabricConfig
from ...formats import rdma_wire as wire
from ...formats.collective import LOCAL_KEY, REMOTE_KEY, SLOT_BITS, STEP_FIELDS, write_words
from ..rdma.header import cpl_layout, wr_layout
from .apply import ApplyUnit

__all__ = ["step_layout", "ceil_divide", "DEPTH", "engine_signature", "CollectiveEngine"]

#: A schedule memory entry (``formats.collective.STEP_FIELDS``, LSB first).
step_layout = data.StructLayout(dict(STEP_FIELDS))

#: What a send queue keeps of its head step: what its WRs are made of.
_head_layout = data.StructLayout({name: width for name, width in STEP_FIELDS
                                  if name in ("peer", "src", "length", "slot")})


def ceil_divide(value, bits: int, divisor: int):
    """``ceil(value / divisor)`` for a ``value`` of ``bits`` bits and a constant ``divisor``,
    as a multiplication by its reciprocal: with ``s = bits + 1 + ceil(log2 divisor)`` and
    ``R = ceil(2**s / divisor)``, ``floor(x R / 2**s) = floor(x / divisor)`` for every ``x``
    below ``2**(bits + 1)`` (Granlund and Montgomery), and ``x = value + divisor - 1`` is."""
    shift = bits + 1 + (divisor - 1).bit_length()
    reciprocal = -(-(1 << shift) // divisor)
    return ((value + divisor - 1) * reciprocal) >> shift


def _head(fields, step) -> list:
    """``fields`` (a :data:`_head_layout`) take their values from ``step``."""
    return [getattr(fields, name).eq(getattr(step, name)) for name in _head_layout.members]


def _oldest(m: Module, fits: list, head: list, depth: int):
    """Whether any queue ``fits``, and the one among them with the lowest ``head`` step: a
    chain of stages, each a signal (an expression would name the stage before twice)."""
    best_found, best_q, best_step = fits[0], Const(0, range(len(fits))), head[0]
    for q in range(1, len(fits)):
        better = fits[q] & (~best_found | (head[q] < best_step))
        stage_q = Signal(range(len(fits)), name=f"oldest_qp{q}")
        stage_step = Signal(range(depth), name=f"oldest_step{q}")
        stage_found = Signal(name=f"oldest_found{q}")
        m.d.comb += [stage_q.eq(Mux(better, q, best_q)),
                     stage_step.eq(Mux(better, head[q], best_step)),
                     stage_found.eq(best_found | fits[q])]
        best_found, best_q, best_step = stage_found, stage_q, stage_step
    return best_found, best_q


#: Steps of the schedule memory, unless a build says otherwise.
DEPTH = 256


def engine_signature(cfg: FabricConfig, depth: int = DEPTH) -> wiring.Signature:
    """The ports of :class:`CollectiveEngine` for ``cfg`` and ``depth``."""
    rd = cfg.rdma
    address = range(rd.memory_words)
    channels = cfg.endpoints * rd.channels_per_peer
    return wiring.Signature({
        "load_en": In(1), "load_addr": In(range(depth)), "load_step": In(step_layout),
        "steps": In(range(depth + 1)), "slots": In(SLOT_BITS + 1), "binary32": In(1),
        "outbox": In(address), "notify": In(address), "staging": In(address),
        "capacity": In(address),
        "wr": Out(stream.Signature(wr_layout(cfg))),
        "free": In(wire.free_slot_bits(rd.window)).array(channels),
        "received": In(1), "cpl": In(stream.Signature(cpl_layout(), always_ready=True)),
        "errors": Out(wire.TAG_BITS),
        "note_addr": Out(address), "note_data": In(64),
        "buffer_addr": Out(address), "buffer_data": In(64),
        "write_en": Out(1), "write_addr": Out(address), "write_data": Out(64),
        "started": Out(range(depth + 1)), "applied": Out(SLOT_BITS + 1), "done": Out(1),
    })


class CollectiveEngine(wiring.Component):
    """One accelerator's collective engine for ``cfg`` (with ``[rdma] enabled``), holding
    schedules of up to ``depth`` steps.

    Attributes
    ----------
    load_en, load_addr, load_step : In
        The schedule memory's write port: step ``load_addr`` (a :data:`step_layout`),
        written before the run.
    steps, slots : In
        The run's steps and receive slots; held for the run, as are the layout's words
        (``outbox``, ``notify``, ``staging``, ``capacity``) and ``binary32``.
    wr : Out(stream.Signature(wr_layout(cfg)))
        Work requests to the RDMA engine; one offered stays offered until it is taken.
        ``tag`` numbers the engine's WRs in the order it posted them.
    free : In, an array per channel
        The RDMA engine's free window slots.
    received : In(1)
        The RDMA engine gives a receive completion.
    cpl : In(stream.Signature(cpl_layout(), always_ready=True))
        The RDMA engine's completions of the engine's WRs; ``errors`` counts those with a
        status other than 0.
    note_addr, note_data, buffer_addr, buffer_data, write_en, write_addr, write_data
        The apply unit's host memory ports (:class:`~.apply.ApplyUnit`).
    started, applied : Out
        Steps started, slots applied.
    done : Out(1)
        Every step started and every slot applied.
    """

    def __init__(self, cfg: FabricConfig, *, depth: int = DEPTH):
        if not cfg.rdma.enabled:
            raise ValueError("rdma.enabled = false: the collective engine needs rdma.enabled "
                             "= true")
        self._cfg, self._depth = cfg, depth
        super().__init__(engine_signature(cfg, depth))

    def elaborate(self, platform):
        cfg, m = self._cfg, Module()
        rd = cfg.rdma
        C, W = rd.channels_per_peer, rd.window
        # Steps go on QP ``peer mod per_endpoint``, so the engine uses at most as many QPs
        # as there are accelerators: a send queue per QP it can use, ``Q``; queue ``q``
        # holds the steps to peers ``p`` with ``p mod Q = q``, and is QP ``q``.
        Q = min(rd.per_endpoint(cfg.endpoints), cfg.endpoints)
        M = wire.payload_words(cfg.switch.max_packet_flits)
        piece = write_words(M)
        address = self.note_addr.shape()

        m.submodules.apply = apply = ApplyUnit(cfg)
        for name in ("received", "binary32", "slots", "notify", "staging", "capacity",
                     "note_data", "buffer_data"):
            m.d.comb += getattr(apply, name).eq(getattr(self, name))
        for name in ("note_addr", "buffer_addr", "write_en", "write_addr", "write_data",
                     "applied"):
            m.d.comb += getattr(self, name).eq(getattr(apply, name))

        m.submodules.schedule = schedule = Memory(shape=step_layout, depth=self._depth, init=[])
        load = schedule.write_port()
        m.d.comb += [load.en.eq(self.load_en), load.addr.eq(self.load_addr),
                     load.data.eq(self.load_step)]
        # Per step, written as it starts: the next step on its QP, the number of its first
        # WR (the tag) and its first staging word at the peer (the layout is the same on
        # every accelerator), so that a queue's next head needs no arithmetic.
        m.submodules.links = links = Memory(shape=range(self._depth), depth=self._depth,
                                            init=[])
        m.submodules.tags = tags = Memory(shape=wire.TAG_BITS, depth=self._depth, init=[])
        m.submodules.dests = dests = Memory(shape=wire.VA_BITS, depth=self._depth, init=[])
        link_write, tag_write, dest_write = (links.write_port(), tags.write_port(),
                                             dests.write_port())

        # The sequencer: step ``started`` starts once the slots it waits for are applied.
        k = self.started
        at_k = schedule.read_port(domain="comb")
        m.d.comb += at_k.addr.eq(k)
        start = Signal()
        m.d.comb += start.eq((k < self.steps) & (at_k.data.wait <= self.applied))
        m.d.sync += k.eq(k + start)
        m.d.comb += self.done.eq((k == self.steps) & (apply.applied == self.slots))
        with m.If(self.cpl.valid & (self.cpl.payload.status != wire.STATUS_OK)):
            m.d.sync += self.errors.eq(self.errors + 1)

        def chunk_words(step):
            return Mux(step.length == 0, 0, (step.src[0] + step.length + 1) >> 1)

        posted = Signal(wire.TAG_BITS)            # WRs posted, for the next step's tags
        writes = ceil_divide(chunk_words(at_k.data), len(at_k.data.length), piece)
        m.d.sync += posted.eq(posted + Mux(start, writes + 1, 0))
        k_dest = Signal(wire.VA_BITS)
        m.d.comb += [k_dest.eq(self.staging + at_k.data.slot * self.capacity),
                     tag_write.addr.eq(k), tag_write.data.eq(posted), tag_write.en.eq(start),
                     dest_write.addr.eq(k), dest_write.data.eq(k_dest),
                     dest_write.en.eq(start)]

        # The send queues: per QP, whether it holds a step, its head and tail steps, the
        # head's fields, the tag of its first WR and its first staging word at the peer,
        # the WRs and the words of its chunk already taken.
        busy = Signal(Q)
        head = [Signal(range(self._depth), name=f"head{q}") for q in range(Q)]
        tail = [Signal(range(self._depth), name=f"tail{q}") for q in range(Q)]
        fields = [Signal(_head_layout, name=f"step{q}") for q in range(Q)]
        base = [Signal(wire.TAG_BITS, name=f"tag{q}") for q in range(Q)]
        dest = [Signal(wire.VA_BITS, name=f"dest{q}") for q in range(Q)]
        taken_wrs = [Signal(wire.TAG_BITS, name=f"taken{q}") for q in range(Q)]
        sent = [Signal(len(at_k.data.length), name=f"sent{q}") for q in range(Q)]

        at_next = schedule.read_port(domain="comb")
        next_link = links.read_port(domain="comb")
        next_tag, next_dest = tags.read_port(domain="comb"), dests.read_port(domain="comb")
        m.d.comb += [at_next.addr.eq(next_link.data), next_tag.addr.eq(next_link.data),
                     next_dest.addr.eq(next_link.data)]

        # Each queue's head WR: a piece of the chunk, or the notification once it is all
        # taken; whether the channel has room for it.
        wrs, fits, sends = [], [], []
        free = Array(self.free)
        for q in range(Q):
            step = fields[q]
            words = chunk_words(step)
            send = sent[q] >= words
            left = words - sent[q]
            length = Signal(wire.LEN_BITS, name=f"length{q}")
            m.d.comb += length.eq(Mux(send, 1, Mux(left > piece, piece, left)))
            wr = Signal(wr_layout(cfg), name=f"wr{q}")
            m.d.comb += [
                wr.qp.eq(q), wr.dst.eq(step.peer), wr.length.eq(length),
                wr.opcode.eq(Mux(send, wire.OP_SEND, wire.OP_WRITE)),
                wr.lkey.eq(LOCAL_KEY), wr.rkey.eq(REMOTE_KEY),
                wr.laddr.eq(Mux(send, self.outbox + head[q], step.src[1:] + sent[q])),
                wr.raddr.eq(Mux(send, self.notify + step.slot, dest[q] + sent[q])),
                wr.tag.eq(base[q] + taken_wrs[q]),
            ]
            # Room for min(ceil(length / M), W) packets, without a division.
            room = Signal(name=f"room{q}")
            slots = free[step.peer * C + q % C]
            m.d.comb += room.eq((slots >= W) | (slots * M >= length))
            wrs.append(wr), fits.append(busy[q] & room), sends.append(send)

        # The offer: the WR held since an earlier cycle, else the oldest head that fits.
        holding = Signal()
        held = Signal(range(Q))
        chosen = Signal(range(Q))
        found = Signal()
        best_found, best_q = _oldest(m, fits, head, self._depth)
        m.d.comb += [found.eq(best_found),
                     chosen.eq(Mux(holding, held, best_q))]
        m.d.comb += self.wr.valid.eq(holding | found)
        with m.Switch(chosen):
            for q in range(Q):
                with m.Case(q):
                    m.d.comb += self.wr.payload.eq(wrs[q])
        taken = self.wr.valid & self.wr.ready
        m.d.sync += [holding.eq(self.wr.valid & ~self.wr.ready), held.eq(chosen)]

        # The queues' updates: the head's WR taken (the step finished at its SEND), the
        # started step joining the tail.
        m.d.comb += next_link.addr.eq(head[0])
        start_qp = at_k.data.peer % Q
        for q in range(Q):
            finish = Signal(name=f"finish{q}")
            m.d.comb += finish.eq(taken & (chosen == q) & sends[q])
            join = start & (start_qp == q)
            with m.If(taken & (chosen == q)):
                m.d.sync += [sent[q].eq(sent[q] + wrs[q].length),
                             taken_wrs[q].eq(taken_wrs[q] + 1)]
            with m.If(finish):
                m.d.comb += next_link.addr.eq(head[q])
            alone = head[q] == tail[q]
            with m.If(finish & ~alone):
                m.d.sync += [head[q].eq(next_link.data), *_head(fields[q], at_next.data),
                             base[q].eq(next_tag.data), dest[q].eq(next_dest.data),
                             sent[q].eq(0), taken_wrs[q].eq(0)]
            with m.Elif((finish | ~busy[q]) & join):
                m.d.sync += [head[q].eq(k), *_head(fields[q], at_k.data), base[q].eq(posted),
                             dest[q].eq(k_dest), sent[q].eq(0), taken_wrs[q].eq(0)]
            with m.If(join):
                m.d.sync += tail[q].eq(k)
                with m.If(busy[q]):
                    m.d.comb += [link_write.en.eq(1), link_write.addr.eq(tail[q]),
                                 link_write.data.eq(k)]
            with m.If(finish & alone & ~join):
                m.d.sync += busy[q].eq(0)
            with m.Elif(join):
                m.d.sync += busy[q].eq(1)
        return m
