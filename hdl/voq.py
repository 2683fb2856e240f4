"""The input buffer of one switch port: virtual output queues in one shared memory."""

from amaranth.hdl import Signal, Module, Mux, Array, Cat, Const, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..config import FabricConfig
from .packet import packet_layout

__all__ = ["VOQBuffer"]


class VOQBuffer(wiring.Component):
    """Store-and-forward input buffer of ``buffer_flits`` flits, shared by its queues.

    With ``scheduler = "islip"`` the buffer holds one queue per (output,
    priority), ``q = dst * priorities + prio``: the virtual output queues.
    With ``scheduler = "fifo"`` it holds a single queue in arrival order and
    a descriptor FIFO that tells the scheduler where the head packet goes,
    so the head of line blocks everything behind it.

    Flits live in one memory (so it maps to block RAM) as linked lists.
    Every queue owns one spare "dummy" entry at its tail: a flit is written
    into the tail entry together with the address of a freshly allocated
    entry that becomes the new tail, so a next pointer is always written in
    the same cycle as its flit and a reader never sees a stale link. The
    memory therefore has ``buffer_flits + queues`` entries; the accounting
    admits ``buffer_flits``. Free entries are kept in a free-list FIFO whose
    memory starts filled with every spare address, so no start-up sequence
    is needed; its read port shows the first address one clock after
    power-up, so the first flit may come at cycle 1 (behind the switch's
    skid buffer it cannot come sooner).

    Ingress frames packets by the head flit's ``length`` (``last`` is
    regenerated from it, so a malformed ``last`` can never corrupt the
    buffer's accounting) and admits a packet only when ``length`` flits are
    free: ``ingress_full = "backpressure"`` then holds ``i.ready`` low on the
    head flit; ``"drop"`` accepts and discards the whole packet. A length of
    zero is read as one.

    The read side is driven by the switch: ``start`` with ``start_q`` reads
    the head flit of that queue's oldest complete packet, ``advance`` reads
    the next flit of the packet under way. A read shows up one cycle later
    in ``rd_payload`` with ``rd_valid`` high; ``rd_last`` says it was the
    tail, i.e. the packet has been read out entirely.
    """

    def __init__(self, cfg: FabricConfig):
        sw = cfg.switch
        self._cfg = cfg
        self._layout = packet_layout(cfg)
        self._requests = sw.ports * sw.priorities
        self._queues = self._requests if sw.scheduler == "islip" else 1
        super().__init__({
            "i": In(stream.Signature(self._layout)),
            # Bit dst * priorities + prio: that queue holds a complete packet.
            "req": Out(unsigned(self._requests)),
            "start": In(1),
            "start_q": In(range(self._requests)),
            "advance": In(1),
            "rd_valid": Out(1),
            "rd_last": Out(1),
            "rd_payload": Out(self._layout),
            "free_flits": Out(range(sw.buffer_flits + 1)),
            "wr_valid": Out(1),      # a flit is written this cycle ...
            "wr_index": Out(range(self._requests)),   # ... toward dst * priorities + prio
            "wr_prio": Out(range(max(sw.priorities, 2))),   # ... of this class
            "rx_packet": Out(1),     # pulse: a packet was admitted (head flit)
            "drop_packet": Out(1),   # pulse: a packet was dropped (head flit)
        })

    def elaborate(self, platform):
        m = Module()
        sw = self._cfg.switch
        nq = self._queues
        depth = sw.buffer_flits + nq
        addr_bits = max(1, (depth - 1).bit_length())
        entry = data.StructLayout({"payload": self._layout, "next": unsigned(addr_bits)})

        m.submodules.mem = mem = Memory(shape=entry, depth=depth, init=[])
        wr = mem.write_port()
        rd = mem.read_port(domain="sync")

        # Free list: a FIFO of spare addresses whose read port always shows
        # the entry at the read pointer, so an allocation needs no extra cycle.
        # Transparency lets an address freed in one cycle be reused in the next.
        m.submodules.free_mem = free_mem = Memory(
            shape=unsigned(addr_bits), depth=sw.buffer_flits,
            init=[nq + k for k in range(sw.buffer_flits)])
        free_wr = free_mem.write_port()
        free_rd = free_mem.read_port(domain="sync", transparent_for=(free_wr,))
        free_rd_ptr = Signal(range(sw.buffer_flits))
        free_wr_ptr = Signal(range(sw.buffer_flits))

        def wrap_inc(ptr):
            return Mux(ptr == sw.buffer_flits - 1, 0, ptr + 1)

        # Queue pointers start on the queues' own dummy entries 0..nq-1.
        head = Array(Signal(addr_bits, init=q, name=f"head{q}") for q in range(nq))
        tail = Array(Signal(addr_bits, init=q, name=f"tail{q}") for q in range(nq))
        free_flits = Signal(range(sw.buffer_flits + 1), init=sw.buffer_flits)
        m.d.comb += self.free_flits.eq(free_flits)

        # ---- ingress: framing, admission, linked-list write ---------------
        in_packet = Signal()          # a packet's head has been taken
        dropping = Signal()           # ... and it is being discarded
        left = Signal(range(1 << self._layout["length"].shape.width))
        wr_req = Signal(range(self._requests))   # dst * priorities + prio
        wr_prio = Signal(range(max(sw.priorities, 2)))

        p = self._layout(self.i.payload)
        length = Mux(p.length == 0, 1, p.length)
        fits = free_flits >= length
        is_head = ~in_packet
        req_in = p.dst * sw.priorities + p.prio
        if sw.ingress_full == "backpressure":
            m.d.comb += self.i.ready.eq(~is_head | fits)
        else:
            m.d.comb += self.i.ready.eq(1)
        accept = self.i.valid & self.i.ready
        keep = Mux(is_head, fits, ~dropping)
        is_last = Mux(is_head, length == 1, left == 1)
        q_wr = Mux(is_head, req_in, wr_req) if nq > 1 else 0
        write = Signal()
        m.d.comb += [write.eq(accept & keep), self.wr_valid.eq(write),
                     self.wr_index.eq(Mux(is_head, req_in, wr_req)),
                     self.wr_prio.eq(Mux(is_head, p.prio, wr_prio))]

        with m.If(accept):
            with m.If(is_head):
                m.d.sync += [left.eq(length - 1), in_packet.eq(length != 1),
                             dropping.eq(~fits), wr_req.eq(req_in), wr_prio.eq(p.prio)]
            with m.Else():
                m.d.sync += [left.eq(left - 1), in_packet.eq(left != 1)]
        m.d.comb += [
            self.rx_packet.eq(accept & is_head & fits),
            self.drop_packet.eq(accept & is_head & ~fits),
        ]

        stored = self._layout(wr.data.payload)
        m.d.comb += [
            wr.en.eq(write),
            wr.addr.eq(tail[q_wr]),
            wr.data.payload.eq(self.i.payload),
            stored.last.eq(is_last),
            wr.data.next.eq(free_rd.data),
        ]
        with m.If(write):
            m.d.sync += tail[q_wr].eq(free_rd.data)

        # ---- read side ------------------------------------------------------
        rd_valid = Signal()
        rd_q = Signal(range(max(nq, 2)))  # never zero-width: lint-clean for one queue
        out = entry(rd.data)
        start_q_phys = self.start_q if nq > 1 else 0
        start_addr = Mux(rd_valid & (rd_q == start_q_phys), out.next, head[start_q_phys])
        read = self.start | self.advance
        m.d.comb += [
            rd.en.eq(read),
            rd.addr.eq(Mux(self.start, start_addr, out.next)),
            self.rd_valid.eq(rd_valid),
            self.rd_payload.eq(out.payload),
            self.rd_last.eq(rd_valid & self._layout(out.payload).last),
        ]
        m.d.sync += rd_valid.eq(read)
        with m.If(self.start):
            m.d.sync += rd_q.eq(start_q_phys)
        # The queue's head follows the reader, so a queue started again right
        # after its previous packet's tail continues from the right entry.
        with m.If(rd_valid):
            m.d.sync += head[rd_q].eq(out.next)

        # ---- free list and space accounting ---------------------------------
        m.d.comb += [
            free_wr.en.eq(read),
            free_wr.addr.eq(free_wr_ptr),
            free_wr.data.eq(rd.addr),
            free_rd.addr.eq(Mux(write, wrap_inc(free_rd_ptr), free_rd_ptr)),
        ]
        with m.If(write):
            m.d.sync += free_rd_ptr.eq(wrap_inc(free_rd_ptr))
        with m.If(read):
            m.d.sync += free_wr_ptr.eq(wrap_inc(free_wr_ptr))
        reserve = Mux(self.rx_packet, length, 0)
        m.d.sync += free_flits.eq(free_flits - reserve + read)

        # ---- requests: complete packets per queue ---------------------------
        complete = write & is_last
        if nq > 1:
            pkt_bits = (sw.buffer_flits).bit_length()
            pkts = [Signal(pkt_bits, name=f"pkts{q}") for q in range(nq)]
            for q, count in enumerate(pkts):
                inc = complete & (q_wr == q)
                dec = self.start & (self.start_q == q)
                m.d.sync += count.eq(count + inc - dec)
            m.d.comb += self.req.eq(Cat(count != 0 for count in pkts))
        else:
            # One queue: the head packet's destination and class come from a
            # descriptor FIFO written when the packet is complete.
            m.submodules.desc = desc = SyncFIFO(width=self._requests.bit_length(),
                                                depth=sw.buffer_flits)
            m.d.comb += [
                desc.w_en.eq(complete),
                desc.w_data.eq(Mux(is_head, req_in, wr_req)),
                desc.r_en.eq(self.start),
                self.req.eq(Mux(desc.r_rdy, Const(1, self._requests) << desc.r_data, 0)),
            ]
        return m
