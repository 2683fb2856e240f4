"""The input buffer of one router port: virtual output queues in one shared memory."""

from dataclasses import dataclass

from amaranth.hdl import Signal, Module, Mux, Array, Cat, Const, Value, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..config import FabricConfig
from ..formats.packet import vc_bits
from .packet import packet_layout, pools
from .checks import check_config, check_count

__all__ = ["VOQBuffer"]


@dataclass
class _Admission:
    """The flit on ``i`` as ingress sees it (section 4.2): ``write``, it is kept
    and written this cycle into queue ``q_wr`` (its packet's queue, 0 with one
    queue), ``is_last`` the regenerated ``last``; ``q_packet``, the packet's
    queue in the request space; ``pool`` and ``length``, its head's pool and
    length (valid on a head flit)."""

    write: Value
    is_last: Value
    q_wr: Value
    q_packet: Value
    pool: Value
    length: Value


@dataclass
class _Reader:
    """The read side as the linked-list writer needs it: ``read``, a flit of queue
    ``read_q`` is read this cycle; ``head``, the queues' head pointers; ``rd_q``, the
    queue of the flit in the read register."""

    read: Value
    read_q: Value
    head: Array
    rd_q: Value


class VOQBuffer(wiring.Component):
    """Store-and-forward input buffer of one router port, shared by its queues.

    With ``scheduler = "islip"`` the buffer holds one queue per (output,
    VC, priority), ``q = (out * vcs + vc) * priorities + prio``: the virtual
    output queues (the switch has one VC, ``q = dst * priorities + prio``).
    With ``scheduler = "fifo"`` it holds a single queue in arrival order and
    a descriptor FIFO that tells the scheduler where the head packet goes,
    so the head of line blocks everything behind it.

    Space is accounted in pools: an endpoint input has one pool of
    ``switch.buffer_flits``; a link input (``link=True``) one pool of
    ``fabric.vc_buffer_flits`` per (class, VC the flit arrives on), pool
    ``prio * fabric.vcs + vc`` (docs/architecture.md 11.3).

    Flits live in one memory (so it maps to block RAM) as linked lists,
    their next pointers in a second memory of the same depth, ``capacity``
    entries each: so the flit memory's depth is the pools' flits (512 at the
    default preset, within a block RAM's 512-deep wide mode). A flit is
    written at a freshly allocated address; if its queue holds an unread
    flit, the same edge writes the new address as that tail's next pointer,
    else the address becomes the queue's head. Both memories are read at the
    same address in the same cycle; the pointer memory's read is transparent
    to its write, so a reader of a tail flit whose successor is written in
    that cycle sees the new link. Free addresses need no memory of their
    own: the one a read frees waits a cycle in a register, a second waits in
    another, and the rest are a linked list through the pointer memory,
    which the list reads and writes in cycles the queues leave its ports
    free (section 4.2). The pointer memory starts as that list of every
    address, so no start-up sequence is needed and a flit may come at cycle 0.

    Ingress frames packets by the head flit's ``length`` (``last`` is
    regenerated from it, so a malformed ``last`` can never corrupt the
    buffer's accounting) and admits a packet only when ``length`` flits of
    its pool are free: ``ingress_full = "backpressure"`` then holds
    ``i.ready`` low on the head flit; ``"drop"`` accepts and discards the
    whole packet. A length of zero is read as one. The head's queue is
    ``route_out``/``route_vc`` (the routing decision of that cycle) and its
    class.

    The read side is driven by the router: ``start`` with ``start_q`` reads
    the head flit of that queue's oldest complete packet, ``advance`` reads
    the next flit of the packet under way. A read shows up one cycle later
    in ``rd_payload`` with ``rd_valid`` high; ``rd_last`` says it was the
    tail, i.e. the packet has been read out entirely; ``rd_pool`` is the
    pool the flit was read from, which its slot returns to at that edge.

    Parameters
    ----------
    cfg : FabricConfig
        The packet layout, buffer sizes, scheduler and ingress mode.
    outputs : int
        Output ports of the router (default ``switch.ports``).
    vcs : int
        VCs per output (1 for the switch).
    link : bool
        A link input: one pool per (class, VC), else one pool.
    """

    def __init__(self, cfg: FabricConfig, *, outputs: int | None = None, vcs: int = 1,
                 link: bool = False):
        check_config(cfg)
        if outputs is not None:
            check_count("outputs", outputs)
        check_count("vcs", vcs)
        sw = cfg.switch
        self._cfg = cfg
        self._layout = packet_layout(cfg)
        self._outputs = sw.ports if outputs is None else outputs
        if link and "vc" not in self._layout.members:
            raise ValueError("link = True needs a fabric's packet layout, with a vc field")
        self._vcs = vcs
        self._pools = pools(cfg) if link else 1
        self._pool_flits = cfg.fabric.vc_buffer_flits if link else sw.buffer_flits
        self._requests = self._outputs * vcs * sw.priorities
        self._queues = self._requests if sw.scheduler == "islip" else 1
        #: Flits the buffer admits, over all its pools.
        self.capacity = self._pools * self._pool_flits
        super().__init__({
            "i": In(stream.Signature(self._layout)),
            # The routing decision for the head flit on i.
            "route_out": In(range(self._outputs)),
            "route_vc": In(vc_bits(vcs)),
            # Bit (out * vcs + vc) * priorities + prio: that queue holds a complete packet.
            "req": Out(unsigned(self._requests)),
            "start": In(1),
            "start_q": In(range(self._requests)),
            "advance": In(1),
            "rd_valid": Out(1),
            "rd_last": Out(1),
            "rd_payload": Out(self._layout),
            "rd_pool": Out(range(max(self._pools, 2))),
            "wr_valid": Out(1),      # a flit is written this cycle ...
            "wr_index": Out(range(self._outputs * sw.priorities)),  # ... toward out * priorities + prio
            "wr_prio": Out(range(max(sw.priorities, 2))),   # ... of this class
            "rx_packet": Out(1),     # pulse: a packet was admitted (head flit)
            "drop_packet": Out(1),   # pulse: a packet was dropped (head flit)
        })

    def _pool(self, payload):
        """The pool a flit's packet is accounted in."""
        if self._pools == 1:
            return Const(0, 1)
        return payload.prio * self._cfg.fabric.vcs + payload.vc

    def elaborate(self, platform):
        m = Module()
        capacity = self.capacity
        addr_bits = max(1, (capacity - 1).bit_length())

        m.submodules.mem = mem = Memory(shape=self._layout, depth=capacity, init=[])
        # Every address starts on the free list, in order (see _free_addresses).
        m.submodules.links = links = Memory(shape=unsigned(addr_bits), depth=capacity,
                                            init=[(a + 1) % capacity for a in range(capacity)])
        wr, link_wr = mem.write_port(), links.write_port()
        rd = mem.read_port(domain="sync")
        link_rd = links.read_port(domain="sync", transparent_for=(link_wr,))
        # Unreserved flits per pool. A read frees its slot in the pool of
        # the packet read, which is known once its head is in the read
        # register (rd_pool): the slot counts as free from the cycle after
        # the read, as if it had been returned at the read's edge.
        free = Array(Signal(range(self._pool_flits + 1), init=self._pool_flits, name=f"free{k}")
                     for k in range(self._pools))
        rd_valid = Signal()
        new = Signal(addr_bits)   # the address a flit written this cycle takes

        ing = self._ingress(m, free, rd_valid)
        reader = self._read_side(m, rd, link_rd, rd_valid)
        tail_link = self._linked_list_write(m, wr, new, ing, rd, link_rd, rd_valid, reader)
        self._free_addresses(m, link_wr, link_rd, new, tail_link, ing.write, reader.read, rd.addr)
        self._space_accounting(m, free, rd_valid, ing)
        self._store_and_forward(m, ing)
        return m

    def _free_addresses(self, m, link_wr, link_rd, new, tail_link, write, read, freed):
        """Free addresses, kept without a memory of their own (section 4.2): the
        address a read frees (``freed``) waits one cycle in ``recycled``, a
        second free address waits in ``spare``, and the rest form a linked list
        through the pointer memory, on the ports the queues leave unused that
        cycle. A write takes ``recycled``, else ``spare`` (``new``). Drives the
        pointer memory's ports: the read side's reads, else the list's; the
        queue's ``tail_link`` write ``(en, addr)`` of ``new``, else the list's."""
        capacity, abits = self.capacity, len(new)
        recycled = Signal(abits)
        recycled_valid = Signal()
        spare = Signal(abits, init=0)
        spare_valid = Signal(init=1)
        list_head = Signal(abits, init=1 % capacity)
        list_tail = Signal(abits, init=capacity - 1)
        list_empty = Signal(init=capacity == 1)
        # The list's head is on the pointer memory's read data the cycle after a
        # refill read the link of the head before it.
        head_on_port = Signal()
        head_now = Signal(abits)
        m.d.comb += [head_now.eq(Mux(head_on_port, link_rd.data, list_head)),
                     new.eq(Mux(recycled_valid, recycled, spare))]
        use_recycled = write & recycled_valid
        use_spare = write & ~recycled_valid
        spare_left = spare_valid & ~use_spare
        # A read frees an address: it waits in recycled, and one still there moves
        # to spare, or to the list's tail if spare is taken. Such a cycle writes no
        # flit (it would have taken recycled), so the write port is the list's.
        displaced = read & recycled_valid & ~use_recycled
        to_spare = Signal()
        append = Signal()
        # Without a read the read port is the list's: an empty spare takes its head.
        refill = Signal()
        m.d.comb += [to_spare.eq(displaced & ~spare_left), append.eq(displaced & spare_left),
                     refill.eq(~read & ~spare_left & ~list_empty)]
        # A free address must be at hand for every write the accounting admits:
        # spare is empty only after a write that also read (recycled then holds the
        # read's address) or when the list is empty, and every cycle without a read
        # refills it; so a write finds recycled or spare valid.
        with m.If(read):
            m.d.sync += [recycled.eq(freed), recycled_valid.eq(1)]
        with m.Elif(use_recycled):
            m.d.sync += recycled_valid.eq(0)
        with m.If(to_spare):
            m.d.sync += [spare.eq(recycled), spare_valid.eq(1)]
        with m.Elif(refill):
            m.d.sync += [spare.eq(head_now), spare_valid.eq(1)]
        with m.Elif(use_spare):
            m.d.sync += spare_valid.eq(0)
        m.d.sync += [list_head.eq(head_now), head_on_port.eq(refill)]
        with m.If(refill & (head_now == list_tail)):
            m.d.sync += list_empty.eq(1)
        with m.If(append):
            m.d.sync += [list_tail.eq(recycled), list_empty.eq(0)]
            with m.If(list_empty):
                m.d.sync += [list_head.eq(recycled), head_on_port.eq(0)]
        tail_en, tail_addr = tail_link
        m.d.comb += [
            link_rd.en.eq(read | refill),
            link_rd.addr.eq(Mux(read, freed, head_now)),
            # An empty list's tail is a stale address, perhaps a queue's by now.
            link_wr.en.eq(tail_en | (append & ~list_empty)),
            link_wr.addr.eq(Mux(tail_en, tail_addr, list_tail)),
            link_wr.data.eq(Mux(tail_en, new, recycled)),
        ]

    def _ingress(self, m, free, rd_valid):
        """Ingress, framing and admission (section 4.2): drives ``i.ready``, the
        ``wr_*`` and ``rx_packet``/``drop_packet`` ports; returns the flit's
        :class:`_Admission`."""
        np_ = self._cfg.switch.priorities
        in_packet = Signal()          # a packet's head has been taken
        dropping = Signal()           # ... and it is being discarded
        left = Signal(range(1 << self._layout["length"].shape.width))
        wr_q = Signal(range(self._requests))     # its queue
        wr_index = Signal.like(self.wr_index)    # out * priorities + prio
        wr_prio = Signal(range(max(np_, 2)))

        # Named signals, each computed once: the Verilog would repeat an
        # expression at every use.
        p = self._layout(self.i.payload)
        length = Signal.like(p.length)
        pool = Signal(range(max(self._pools, 2)))
        fits = Signal()
        q_in = Signal(range(self._requests))
        index_in = Signal.like(self.wr_index)
        m.d.comb += [
            length.eq(Mux(p.length == 0, 1, p.length)),
            pool.eq(self._pool(p)),
            fits.eq(free[pool] + (rd_valid & (self.rd_pool == pool)) >= length),
            q_in.eq(self.route_out * np_ + p.prio if self._vcs == 1 else
                    (self.route_out * self._vcs + self.route_vc) * np_ + p.prio),
            index_in.eq(self.route_out * np_ + p.prio),
        ]
        is_head = ~in_packet
        if self._cfg.switch.ingress_full == "backpressure":
            m.d.comb += self.i.ready.eq(~is_head | fits)
        else:
            m.d.comb += self.i.ready.eq(1)
        accept = self.i.valid & self.i.ready
        keep = Mux(is_head, fits, ~dropping)
        is_last = Mux(is_head, length == 1, left == 1)
        q_wr = Signal.like(q_in)
        m.d.comb += q_wr.eq(Mux(is_head, q_in, wr_q) if self._queues > 1 else 0)
        write = Signal()
        m.d.comb += [write.eq(accept & keep), self.wr_valid.eq(write),
                     self.wr_index.eq(Mux(is_head, index_in, wr_index)),
                     self.wr_prio.eq(Mux(is_head, p.prio, wr_prio))]

        with m.If(accept):
            with m.If(is_head):
                m.d.sync += [left.eq(length - 1), in_packet.eq(length != 1),
                             dropping.eq(~fits), wr_q.eq(q_in), wr_index.eq(index_in),
                             wr_prio.eq(p.prio)]
            with m.Else():
                m.d.sync += [left.eq(left - 1), in_packet.eq(left != 1)]
        m.d.comb += [
            self.rx_packet.eq(accept & is_head & fits),
            self.drop_packet.eq(accept & is_head & ~fits),
        ]
        return _Admission(write=write, is_last=is_last, q_wr=q_wr,
                          q_packet=Mux(is_head, q_in, wr_q), pool=pool, length=length)

    def _linked_list_write(self, m, wr, new, ing, rd, link_rd, rd_valid, reader):
        """A kept flit at the freshly allocated address ``new``, linked behind its
        queue's tail if the queue holds an unread flit, else its new head; it becomes
        the tail. ``reader``: the read side's :class:`_Reader`. Returns the tail's
        link write ``(en, addr)`` (its data is ``new``)."""
        nq = self._queues
        head, rd_q = reader.head, reader.rd_q
        tail = Array(Signal(len(wr.addr), name=f"tail{q}") for q in range(nq))
        # holds[q]: queue q has a flit written and not yet read.
        holds = Array(Signal(name=f"holds{q}") for q in range(nq))
        stored = self._layout(wr.data)
        tail_en = Signal()
        tail_addr = Signal.like(new)
        m.d.comb += [
            wr.en.eq(ing.write),
            wr.addr.eq(new),
            wr.data.eq(self.i.payload),
            stored.last.eq(ing.is_last),
            tail_en.eq(ing.write & holds[ing.q_wr]),
            tail_addr.eq(tail[ing.q_wr]),
        ]
        # Entry by entry: an Array target would be a case over every queue for
        # every queue in the Verilog. A read of a queue's tail empties it, unless
        # a flit is written into it at the same edge.
        for q in range(nq):
            writing = ing.write & (ing.q_wr == q)
            draining = reader.read & (reader.read_q == q) & (rd.addr == tail[q])
            with m.If(writing):
                m.d.sync += [tail[q].eq(new), holds[q].eq(1)]
            with m.Elif(draining):
                m.d.sync += holds[q].eq(0)
            # The head follows the reader (the link read with the flit); a flit
            # written into an empty queue is its head, whatever the reader saw.
            with m.If(rd_valid & (rd_q == q)):
                m.d.sync += head[q].eq(link_rd.data)
            with m.If(writing & ~holds[q]):
                m.d.sync += head[q].eq(new)
        return tail_en, tail_addr

    def _read_side(self, m, rd, link_rd, rd_valid):
        """``start``/``advance`` read a queue's head or the next flit of the packet
        under way; drives the ``rd_*`` ports. Returns the :class:`_Reader`."""
        nq = self._queues
        head = Array(Signal(len(rd.addr), name=f"head{q}") for q in range(nq))
        rd_q = Signal(range(max(nq, 2)))  # never zero-width: lint-clean for one queue
        rd_first = Signal()               # the read register holds a packet's head
        payload = self._layout(rd.data)
        start_q_phys = self.start_q if nq > 1 else 0
        # The queue's head follows the reader, so a queue started again right after
        # its previous packet's tail continues from the right entry.
        start_addr = Mux(rd_valid & (rd_q == start_q_phys), link_rd.data, head[start_q_phys])
        # The link of the flit last read, kept while the packet pauses: the free
        # list reads the pointer memory in cycles without a read.
        held_link = Signal.like(rd.addr)
        with m.If(rd_valid):
            m.d.sync += held_link.eq(link_rd.data)
        read = self.start | self.advance
        read_q = Signal.like(rd_q)
        m.d.comb += [
            rd.en.eq(read),
            rd.addr.eq(Mux(self.start, start_addr, Mux(rd_valid, link_rd.data, held_link))),
            read_q.eq(Mux(self.start, start_q_phys, rd_q)),
            self.rd_valid.eq(rd_valid),
            self.rd_payload.eq(rd.data),
            self.rd_last.eq(rd_valid & payload.last),
        ]
        m.d.sync += [rd_valid.eq(read), rd_first.eq(self.start)]
        with m.If(self.start):
            m.d.sync += rd_q.eq(start_q_phys)
        # The pool of the packet under way, from its head flit only.
        if self._pools > 1:
            rd_pool_held = Signal(range(self._pools))
            head_pool = Signal(range(self._pools))
            m.d.comb += head_pool.eq(self._pool(payload))
            with m.If(rd_first):
                m.d.sync += rd_pool_held.eq(head_pool)
            m.d.comb += self.rd_pool.eq(Mux(rd_first, head_pool, rd_pool_held))
        return _Reader(read=read, read_q=read_q, head=head, rd_q=rd_q)

    def _space_accounting(self, m, free, rd_valid, ing):
        """Each pool's unreserved flits: a head admitted reserves its packet's
        length, a flit read returns its slot."""
        for k in range(self._pools):
            reserve = Mux(self.rx_packet & (ing.pool == k), ing.length, 0)
            m.d.sync += free[k].eq(free[k] - reserve + (rd_valid & (self.rd_pool == k)))

    def _store_and_forward(self, m, ing):
        """Store-and-forward: ``req`` shows the queues holding a complete packet."""
        nq, capacity = self._queues, self.capacity
        complete = Signal()
        m.d.comb += complete.eq(ing.write & ing.is_last)
        if nq > 1:
            pkt_bits = capacity.bit_length()
            pkts = [Signal(pkt_bits, name=f"pkts{q}") for q in range(nq)]
            for q, count in enumerate(pkts):
                inc = complete & (ing.q_wr == q)
                dec = self.start & (self.start_q == q)
                m.d.sync += count.eq(count + inc - dec)
            m.d.comb += self.req.eq(Cat(count != 0 for count in pkts))
        else:
            # One queue: the head packet's queue comes from a descriptor FIFO
            # written when the packet is complete.
            m.submodules.desc = desc = SyncFIFO(width=self._requests.bit_length(), depth=capacity)
            m.d.comb += [
                desc.w_en.eq(complete),
                desc.w_data.eq(ing.q_packet),
                desc.r_en.eq(self.start),
                self.req.eq(Mux(desc.r_rdy, Const(1, self._requests) << desc.r_data, 0)),
            ]
