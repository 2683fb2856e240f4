"""Golden model of :class:`superfabric.hdl.rdma.engine.RdmaEngine` (sections 10.2-10.8).

One endpoint's engine: the WR segmenter, the per-channel windows of packet
descriptors, the retire unit, the transmitter, the retransmission and
acknowledgement timers and the receiver; the key checks and translation
of section 10.3 are :class:`~superfabric.sim.rdma.keys.KeyTable`.
:meth:`RdmaEngine.step` simulates one cycle the way the text of section
10.6 puts it: every decision from the state at the start of the cycle,
then the updates in the order of its steps. Its parts are methods named
after the engine's: the segmenter, the retire unit (completions), the
transmitter, the acknowledger (ACK/NAKs made and heard, with their
timers) and the receiver.

The model keeps the timers as the cycle they started counting from rather
than counting every cycle: the value is the same, and an engine with
nothing to do costs nothing (``next_event`` says when a timer fires).
"""

from collections import deque, namedtuple

from ...config import FabricConfig
from ...formats import rdma_wire as wire
from ...formats.counters import RDMA_COUNTERS
from ...formats.packet import CE
from ..arbiter import first_at_or_after_wide
from .dcqcn import NEVER, NotificationPoint, ReactionPoint
from .keys import KeyTable

__all__ = ["RdmaEngine", "Descriptor", "NEVER"]

_PSN_MASK = wire.PSN_MOD - 1
_VA_MASK = (1 << wire.VA_BITS) - 1
_PEND_ACK, _PEND_SEQ, _PEND_ACC = 1, 2, 4
_EPOCHS = 1 << wire.EPOCH_BITS

#: One window slot (``rdma_wire.descriptor_fields``).
Descriptor = namedtuple("Descriptor", "qp opcode first last lkey va rkey raddr mlen offset words tag")

#: What the receiver decided on a flit (:meth:`RdmaEngine._receive`): an ACK/NAK's channel and
#: update, a CNP's channel, a CE-marked packet's context, the context and verdict applied at a
#: packet's last flit, the host write and the receive completion; -1 or ``None`` where none.
_Received = namedtuple("_Received", "ack_t ack_update cnp_t marked x verdict write completion",
                       defaults=(-1, None, -1, -1, -1, None, None, None))


def _channel_mask(channels) -> int:
    """``channels`` as the round-robin arbiter's requests: bit ``ch`` for channel ``ch``."""
    mask = 0
    for ch in channels:
        mask |= 1 << ch
    return mask


class RdmaEngine:
    """The engine of endpoint ``endpoint``, with its key tables and host memory.

    ``memory`` is the host memory as a list of ints, read by the
    transmitter and written by the receiver in place.

    Each cycle: :meth:`offer` gives the transmitter's flit, then
    :meth:`step` simulates the cycle with the WR offered on the WR stream,
    whether the flit was taken, the flit the switch delivered and the
    classes paused. With ``[dcqcn] enabled`` the engine is also a
    notification point (:attr:`np`) and a reaction point (:attr:`rp`) of
    section 10.13; ``cnps`` lists ``(cycle, context)`` of every CNP it sent.
    """

    def __init__(self, cfg: FabricConfig, endpoint: int, tables: KeyTable, memory: list[int]):
        sw, rd = cfg.switch, cfg.rdma
        self.endpoint = endpoint
        self.tables = tables
        self.memory = memory
        E, C, W = cfg.endpoints, rd.channels_per_peer, rd.window
        self._E, self._C, self._W = E, C, W
        self._M = wire.payload_words(sw.max_packet_flits)
        self._Q = rd.per_endpoint(E)
        self._rto, self._ato, self._ack_every = rd.retransmit_timeout, rd.ack_timeout, rd.ack_every
        # The state of the channels and receive contexts toward the other
        # endpoints, in channel order (section 10.5): index i holds channel
        # channel(i); the engine has none toward itself.
        NC = self._NC = (E - 1) * C
        # Channels (sender role).
        start = rd.start_psn
        self.nxt, self.snd, self.una, self.ret, self.hsn = ([start] * NC for _ in range(5))
        self.msgerr = [False] * NC
        self.epoch = [0] * NC        # counts, mod 4, the NAKs (access) heard
        self.desc = [[None] * W for _ in range(NC)]
        self.err = [[False] * W for _ in range(NC)]
        # Receive contexts (target role); pend is a mask of _PEND_* bits.
        self.epsn = [start] * NC
        self.nak_sent = [False] * NC
        self.pend = [0] * NC
        self.unacked = [0] * NC
        # After a denial: packets of the denial's epoch are refused (and a
        # resent denied packet NAKed again) until the sender switches epoch.
        self.awaiting = [False] * NC
        self.epoch_in = [0] * NC     # the epoch the context accepts
        self.denied = [0] * NC
        # Who can act: channels with snd != nxt, with ret != una; contexts
        # with a pending bit. Running timers, as the cycle they count from
        # (the timer's value in cycle c is c - base).
        self._to_send, self._to_retire, self._pending = set(), set(), set()
        self._rto_base = {}          # channels with una != snd
        self._ack_base = {}          # contexts with unacked > 0
        self._timer_next = NEVER     # the first cycle a timer fires
        self.seg_off = 0
        self.tx_ptr = 0
        self.ret_ptr = 0
        # Transmitter: None (idle) or the packet latched by the pick, (dst,
        # length, BTH, RETH, host addresses of the payload words).
        self._tx = None
        self._tx_k = 0
        self.retired = False         # the last step retired a packet (progress for stall detection)
        # Payload reads: the next word to request, the requests in flight as
        # (cycle the word arrives, word), and the words buffered for sending.
        self._latency = rd.dma_latency
        self._depth = rd.dma_latency + 2      # hdl.rdma_engine.read_buffer_depth
        self._rd_next = 0
        self._in_flight = deque()
        self._buffered = deque()
        # Receiver: the latched BTH, source and verdict of the packet coming in.
        self._rx_bth = 0
        self._rx_write = False
        self._rx_epoch = 0            # the epoch of the packet whose decision is pending
        self._rx_addr = []
        self._rx_rcpl = None
        self._rx_verdict = (-1, None)
        self._wr_seen = (-1, 0, 0)   # (row, channel, status) of the WR last classified
        self.counters = dict.fromkeys(RDMA_COUNTERS, 0)
        # DCQCN (section 10.13): without it no CNP is made and every channel
        # keeps the line rate, so the pacer never holds a packet back.
        self.dcqcn = cfg.dcqcn.enabled
        units = cfg.dcqcn.units
        self.np = NotificationPoint(units) if self.dcqcn else None
        self.rp = ReactionPoint(units, NC) if self.dcqcn else None
        self.cnps = []

    # -- the WR stream -----------------------------------------------------------------

    def _classify(self, wr) -> tuple[int, int]:
        """The WR's channel (-1 when ``dst`` names no peer) and its error
        status (0: none) under section 10.6 step 1."""
        row = wr[0]
        seen = self._wr_seen
        if seen[0] == row:
            return seen[1], seen[2]
        _, qp, dst, _, lkey, laddr, _, _, length, _ = wr
        E, C = self._E, self._C
        ch = self._index(dst, qp % C) if dst < E and dst != self.endpoint else -1
        if dst == self.endpoint or dst >= E or length == 0 or qp >= self._Q:
            status = wire.STATUS_BAD
        elif not self.tables.allowed(lkey, laddr, length, wire.ACCESS_LOCAL_READ):
            status = wire.STATUS_LOCAL
        else:
            status = wire.STATUS_OK
        self._wr_seen = (row, ch, status)
        return ch, status

    def _index(self, peer: int, ch: int) -> int:
        """The state index of channel (or receive context) ``ch`` toward ``peer``:
        ``rank * C + ch``, ``rank = peer - (peer > endpoint)`` (section 10.5)."""
        return (peer - (peer > self.endpoint)) * self._C + ch

    def _peer(self, index: int) -> int:
        """The peer of the channel or receive context at state ``index``."""
        rank = index // self._C
        return rank + (rank >= self.endpoint)

    def channel(self, index: int) -> int:
        """The channel number (``peer * C + ch``, as the ports and records name it)
        of state ``index``."""
        return self._peer(index) * self._C + index % self._C

    def _drained(self) -> bool:
        """No channel holds a packet.

        A failing WR's ``dst`` may be wrong, so it names no channel of its QP
        for certain: waiting for all keeps its QP's completions in posting order.
        """
        return self.nxt == self.ret

    def free_slots(self, ch: int) -> int:
        """Window slots channel number ``ch`` has free: packets the segmenter can still
        write (all of them toward the engine itself, which has no such channel)."""
        peer = ch // self._C
        if peer == self.endpoint:
            return self._W
        i = self._index(peer, ch % self._C)
        return self._W - ((self.nxt[i] - self.ret[i]) & _PSN_MASK)

    def _sendable(self, cycle: int) -> int:
        """Channels with a packet to send whose pacer lets them start one in ``cycle``,
        as a mask (:func:`_channel_mask`)."""
        if self.rp is None:
            return _channel_mask(self._to_send)
        return _channel_mask(ch for ch in self._to_send if self.rp.eligible(ch, cycle))

    def _wakeup(self) -> float:
        """The first cycle a timer fires, the RP's included."""
        return self._timer_next if self.rp is None else min(self._timer_next, self.rp.next_timer)

    def next_event(self, cycle: int, wr) -> float:
        """``cycle`` if the engine acts in it (with ``wr`` offered, nothing
        arriving), else the first cycle a timer of it fires (or ``NEVER``)."""
        if (self._tx is not None or self._pending or self._to_retire
                or (self.np is not None and self.np.pending)):
            return cycle
        if self._to_send:
            if self.rp is None:
                return cycle
            soonest = min(self.rp.ready(ch) for ch in self._to_send)
            if soonest <= cycle:
                return cycle
        else:
            soonest = NEVER
        if wr is not None:
            ch, status = self._classify(wr)
            if (self._drained() if status
                    else (self.nxt[ch] - self.ret[ch]) & _PSN_MASK < self._W):
                return cycle
        return min(soonest, self._wakeup())

    # -- the uplink --------------------------------------------------------------------

    def offer(self):
        """The transmitter's flit in this cycle, ``(k, word, dst, length)``, or ``None``.

        A payload word is offered once its read has arrived in the buffer.
        """
        tx = self._tx
        if tx is None:
            return None
        k = self._tx_k
        if k >= 2 and not self._buffered:
            return None
        word = tx[2] if k == 0 else tx[3] if k == 1 else self._buffered[0]
        return k, word, tx[0], tx[1]

    def _reading(self) -> bool:
        """Payload reads to request or in flight: the engine acts every cycle."""
        tx = self._tx
        return tx is not None and (self._rd_next < len(tx[4]) or bool(self._in_flight))

    # -- one cycle ---------------------------------------------------------------------

    def step(self, cycle: int, wr, tx_taken: bool, rx, paused: tuple[bool, bool] = (False, False)):
        """Simulate ``cycle`` and clock its edge.

        ``wr`` is the offered WR, ``(row, qp, dst, opcode, lkey, laddr, rkey,
        raddr, length, tag)``, or ``None``; ``tx_taken`` whether the flit of
        :meth:`offer` was taken; ``rx`` the flit delivered to this endpoint,
        ``(src, k, last, word, ecn)``, or ``None``; ``paused`` whether the
        data class and the control class are paused by the switch's PFC in
        this cycle (a paused class starts no packet).

        Returns ``(taken, completion, rx_completion)``: whether the WR was
        taken, the completion given ``(qp, tag, status)`` or ``None``, the
        receive completion given ``(src, qp, length)`` or ``None``.

        Each part of the engine first decides from the state at the start of
        the cycle, then the updates apply in the order of section 10.6's steps
        (a later step's assignment wins over an earlier one's).
        """
        self.retired = False
        cnp_pending = self.np is not None and bool(self.np.pending)
        pickable = self._tx is None and (
            self._pending or cnp_pending
            or (self._to_send and (self.rp is None
                                   or any(self.rp.eligible(ch, cycle) for ch in self._to_send))))
        if (wr is None and rx is None and not tx_taken and not self._to_retire
                and cycle < self._wakeup() and not self._reading() and not pickable):
            return False, None, None         # nothing to decide in this cycle

        # -- decisions, all from the state at the start of the cycle --------
        retiring, completion = self._retire_pick()
        seg_ch, taken, completion = self._segmenter(wr, completion)
        request, arriving = self._payload_reads(cycle)
        pick_cnp, pick_x, pick_ch = self._transmit_pick(cycle, paused, cnp_pending)
        fired, ack_fired = self._timeouts(cycle, pick_x)
        got = self._receive(rx)

        # -- updates, in the order of the steps --------------------------------
        touched = set()              # channels whose state may have changed
        reset = set()                # channels whose retransmission timer restarts at 0
        ctx_touched = set()          # contexts likewise
        if seg_ch >= 0:
            taken = self._segment(wr, seg_ch)
            touched.add(seg_ch)
        self._retire(retiring, completion, touched)
        picked = self._latch(cycle, pick_cnp, pick_x, pick_ch, touched, ctx_touched)
        self._go_back_n(fired, got.ack_t, touched, reset)
        if got.ack_update is not None:
            self._acknowledged(got.ack_t, got.ack_update)
            reset.add(got.ack_t)
            touched.add(got.ack_t)
        if got.verdict is not None:
            self._apply_verdict(got.x, got.verdict)
            ctx_touched.add(got.x)
        self._congestion(cycle, got.marked, got.cnp_t, pick_ch, picked)
        if got.write is not None:
            self.memory[got.write[0]] = got.write[1]
        if got.completion is not None:
            self.counters["rx_completions"] += 1
        # 6. Acknowledgement timers.
        for x in ack_fired:
            self.pend[x] |= _PEND_ACK
            ctx_touched.add(x)
        self._transmitter_edge(tx_taken, picked, request, arriving)

        if touched or ctx_touched:
            self._refresh(cycle, touched, reset, ctx_touched, pick_x, ack_fired)
        return taken, completion, got.completion

    # -- segmenter (step 1) ------------------------------------------------------------

    def _segmenter(self, wr, completion):
        """Decide on the offered WR: ``(channel, taken, completion)``.

        The channel is the one a packet is segmented into (-1: none); a
        failing WR completes with its status once the engine is drained,
        unless the retire unit gives ``completion`` in this cycle.
        """
        seg_ch = -1
        taken = False
        if wr is not None:
            ch, status = self._classify(wr)
            if status:
                if completion is None and self._drained():
                    completion = (wr[1], wr[9], status)
                    taken = True
            elif (self.nxt[ch] - self.ret[ch]) & _PSN_MASK < self._W:
                seg_ch = ch
        return seg_ch, taken, completion

    def _segment(self, wr, ch: int) -> bool:
        """Write the WR's packet at ``seg_off`` to slot ``nxt mod W`` of channel
        ``ch``; returns whether it was the last (the WR is taken)."""
        _, qp, dst, opcode, lkey, laddr, rkey, raddr, length, tag = wr
        off = self.seg_off
        last = off + self._M >= length
        slot = self.nxt[ch] % self._W
        self.desc[ch][slot] = Descriptor(
            qp, opcode, off == 0, last, lkey, (laddr + off) & _VA_MASK, rkey, raddr, length,
            off, length - off if last else self._M, tag)
        self.err[ch][slot] = False
        self.nxt[ch] = (self.nxt[ch] + 1) & _PSN_MASK
        self.seg_off = 0 if last else off + self._M
        return last

    # -- completion: the retire unit (step 2) ------------------------------------------

    def _retire_pick(self):
        """Decide on the retire unit: ``(retiring, completion)``.

        ``retiring`` is ``(channel, descriptor, err bit)`` of the slot retired
        or ``None``; ``completion`` the one given on a message's last packet.
        """
        if not self._to_retire:
            return None, None
        ch = first_at_or_after_wide(_channel_mask(self._to_retire), self.ret_ptr)
        slot = self.ret[ch] % self._W
        d = self.desc[ch][slot]
        err = self.err[ch][slot]
        completion = None
        if d.last:
            failed = self.msgerr[ch] or err
            completion = (d.qp, d.tag, wire.STATUS_REMOTE if failed else wire.STATUS_OK)
        return (ch, d, err), completion

    def _retire(self, retiring, completion, touched: set) -> None:
        """Retire the slot picked and count the completion given (the retire
        unit's or a failing WR's)."""
        self.retired = retiring is not None
        if retiring is not None:
            ch, d, err = retiring
            self.ret[ch] = (self.ret[ch] + 1) & _PSN_MASK
            self.msgerr[ch] = False if d.last else self.msgerr[ch] or err
            self.ret_ptr = (ch + 1) % self._NC
            touched.add(ch)
        if completion is not None:
            self.counters["completions"] += 1
            if completion[2] != wire.STATUS_OK:
                self.counters["errors"] += 1

    # -- transmitter (step 3 and the payload reads) ------------------------------------

    def _payload_reads(self, cycle: int):
        """The payload read requested in ``cycle`` and the word arriving in it.

        A request is made if the buffer has room for its word (the word is
        read now, before this cycle's writes): ``(cycle it arrives, word)``
        or ``None``. The word of an earlier request arriving, or ``None``.
        """
        tx = self._tx
        if (tx is not None and self._rd_next < len(tx[4])
                and len(self._buffered) + len(self._in_flight) < self._depth):
            addr = tx[4][self._rd_next]
            self._rd_next += 1
            request = (cycle + self._latency, self.memory[addr])
        else:
            request = None
        arriving = self._in_flight[0][1] if (self._in_flight
                                             and self._in_flight[0][0] == cycle) else None
        return request, arriving

    def _transmit_pick(self, cycle: int, paused, cnp_pending: bool):
        """Decide on the pick of an idle transmitter: ``(cnp, context, channel)``.

        CNPs, then acknowledgements (the lowest context with a pending bit),
        then data (round robin over the sendable channels), each only while
        its class is not paused; -1 where nothing is picked.
        """
        pick_cnp, pick_x, pick_ch = False, -1, -1
        data_paused, control_paused = paused
        if self._tx is None:
            if cnp_pending and not control_paused:
                pick_cnp = True          # the notification point names the context at the latch
            elif self._pending and not control_paused:
                pick_x = min(self._pending)
            elif self._to_send and not data_paused:
                sendable = self._sendable(cycle)
                if sendable:
                    pick_ch = first_at_or_after_wide(sendable, self.tx_ptr)
        return pick_cnp, pick_x, pick_ch

    def _latch(self, cycle: int, pick_cnp: bool, pick_x: int, pick_ch: int,
               touched: set, ctx_touched: set):
        """Apply the pick to its context or channel; returns the packet for the
        transmitter to latch (see :meth:`_pick_data`) or ``None``."""
        if pick_cnp:
            x = self.np.pick()
            self.cnps.append((cycle, self.channel(x)))
            return self._pick_cnp(x)
        if pick_x >= 0:
            ctx_touched.add(pick_x)
            return self._pick_acknowledgement(pick_x)
        if pick_ch >= 0:
            touched.add(pick_ch)
            return self._pick_data(pick_ch)
        return None

    def _pick_cnp(self, x: int) -> tuple:
        """Step 3 for a CNP of receive context ``x``: the one-flit CNP to latch."""
        bth = wire.pack(wire.BTH_FIELDS, opcode=wire.CNP_OPCODE, ch=x % self._C)
        bth |= wire.hcs(bth) << 16
        self.counters["cnp_sent"] += 1
        return self._peer(x), 1, bth, 0, ()

    def _pick_data(self, ch: int) -> tuple:
        """Step 3 for channel ``ch``: returns the packet in slot ``snd mod W``
        for the transmitter to latch, ``(dst, length, BTH, RETH, host addresses
        of the payload words)``."""
        s = self.snd[ch]
        d = self.desc[ch][s % self._W]
        bth = wire.pack(wire.BTH_FIELDS, opcode=wire.packet_opcode(d.opcode, d.first, d.last),
                        ack_req=d.last, ch=ch % self._C, epoch=self.epoch[ch], dqp=d.qp, psn=s)
        reth = wire.pack(wire.RETH_FIELDS, rkey=d.rkey, raddr=d.raddr, mlen=d.mlen,
                         offset=d.offset)
        bth |= wire.hcs(bth, reth) << 16
        self.snd[ch] = (s + 1) & _PSN_MASK
        if s == self.hsn[ch]:
            self.hsn[ch] = (s + 1) & _PSN_MASK
        else:
            self.counters["retransmissions"] += 1
        self.counters["tx_data"] += 1
        self.tx_ptr = (ch + 1) % self._NC
        return self._peer(ch), 2 + d.words, bth, reth, self.tables.addresses(d.lkey, d.va, d.words)

    def _transmitter_edge(self, tx_taken: bool, picked, request, arriving) -> None:
        """Clock the read buffer (the word taken leaves, the word arriving
        enters) and the transmitter: idle again after its last flit is
        taken, busy with ``picked`` if the pick latched a packet."""
        if arriving is not None:
            self._in_flight.popleft()
            self._buffered.append(arriving)
        if request is not None:
            self._in_flight.append(request)
        if tx_taken:
            if self._tx_k >= 2:
                self._buffered.popleft()
            self._tx_k += 1
            if self._tx_k == self._tx[1]:
                self._tx = None
        if picked is not None:
            self._tx, self._tx_k, self._rd_next = picked, 0, 0

    # -- acknowledger (steps 3, 4 and 6, and the acknowledgements of step 5) -----------

    def _timeouts(self, cycle: int, pick_x: int):
        """Steps 4 and 6: the channels whose retransmission timer and the
        contexts whose ack timer (unless picked, ``pick_x``) reach their
        timeouts in ``cycle``."""
        if cycle < self._timer_next:
            return [], []
        # A timer holding t in this cycle fires when t + 1 reaches its timeout.
        edge = cycle + 1
        fired = [ch for ch, base in self._rto_base.items() if base + self._rto == edge]
        ack_fired = [x for x, base in self._ack_base.items()
                     if base + self._ato == edge and x != pick_x]
        return fired, ack_fired

    def _go_back_n(self, fired, ack_t: int, touched: set, reset: set) -> None:
        """Step 4: go back N on the channels timed out (a timeout yields to an
        ACK/NAK for its channel, ``ack_t``)."""
        for ch in fired:
            if ch != ack_t:
                self.snd[ch] = self.una[ch]
                self.counters["timeouts"] += 1
                reset.add(ch)
                touched.add(ch)

    def _acknowledgement(self, t: int, f: dict):
        """Decide on an ACK/NAK for channel ``t``: ``(t, (una, snd or None, err psn or
        None))`` to apply, ``(-1, None)`` for a stale one."""
        a, una = f["psn"], self.una[t]
        span = (self.snd[t] - una) & _PSN_MASK       # una <= x < snd  <=>  (x - una) < span
        into = (a - una) & _PSN_MASK
        syndrome = f["syndrome"]
        sent = (self.hsn[t] - una) & _PSN_MASK
        if syndrome == wire.SYN_ACK and into < sent:
            # Against hsn: after a go back N, ACKs of packets sent before it
            # still arrive; one beyond snd moves snd up past what it covers.
            nxt = (a + 1) & _PSN_MASK
            return t, (nxt, nxt if into >= span else None, None)
        if syndrome == wire.SYN_NAK_SEQ and into <= span:
            return t, (a, a, None)
        # A NAK (access) names a packet that was sent, perhaps before a go
        # back N moved snd below it: it is checked against hsn, not snd.
        if syndrome == wire.SYN_NAK_ACCESS and into < sent:
            nxt = (a + 1) & _PSN_MASK
            return t, (nxt, nxt, a)
        return -1, None

    def _acknowledged(self, t: int, update) -> None:
        """Step 5 at the sender: apply an ACK/NAK's ``update`` (see
        :meth:`_acknowledgement`) to channel ``t``; it wins over steps 3 and 4."""
        self.una[t], new_snd, err_psn = update
        if new_snd is not None:
            self.snd[t] = new_snd
        if err_psn is not None:
            self.err[t][err_psn % self._W] = True
            self.epoch[t] = (self.epoch[t] + 1) % _EPOCHS

    def _pick_acknowledgement(self, x: int) -> tuple:
        """Step 3 for receive context ``x``: clear the context; returns the
        one-flit ACK/NAK for the transmitter to latch."""
        pend, epsn = self.pend[x], self.epsn[x]
        if pend & _PEND_ACC:
            syndrome, psn = wire.SYN_NAK_ACCESS, self.denied[x]
        elif pend & _PEND_SEQ:
            syndrome, psn = wire.SYN_NAK_SEQ, epsn
        else:
            syndrome, psn = wire.SYN_ACK, epsn - 1
        bth = wire.pack(wire.BTH_FIELDS, opcode=wire.ACK_OPCODE, ch=x % self._C,
                        syndrome=syndrome, psn=psn & _PSN_MASK)
        bth |= wire.hcs(bth) << 16
        self.pend[x] = 0
        self.unacked[x] = 0
        self.counters["naks" if syndrome != wire.SYN_ACK else "tx_acks"] += 1
        return self._peer(x), 1, bth, 0, ()

    # -- receiver (step 5) -------------------------------------------------------------

    def _receive(self, rx) -> "_Received":
        """Decide on the flit delivered, ``(src, k, last, word, ecn)`` or ``None``.

        Flit 0 is latched, and a one-flit packet handled now; flit 1 decides
        a data packet's verdict (counted now, applied at its last flit);
        flits 2.. are written if the packet was accepted.
        """
        if rx is None:
            return _Received()
        src, k, last_flit, word, ecn = rx
        if k == 0:
            self._rx_bth = word
            if last_flit:
                return _Received(*self._one_flit(src, word))
            return _Received()
        if k == 1:
            self._rx_verdict = self._verdict(src, self._rx_bth, word)
            x = self._rx_verdict[0]
            if x >= 0 and ecn == CE:
                self.counters["ecn_marked"] += 1
                return _Received(marked=x)
            return _Received()
        write = completion = None
        if self._rx_write:
            write = (self._rx_addr[k - 2], word)
            if last_flit:
                completion = self._rx_rcpl
        if last_flit:
            # The context learns of the packet once it is written.
            x, verdict = self._rx_verdict
            return _Received(x=x, verdict=verdict, write=write, completion=completion)
        return _Received(write=write, completion=completion)

    def _one_flit(self, src: int, bth: int):
        """Decide on a one-flit packet: ``(channel, update, -1)`` for an ACK/NAK to apply
        (see :meth:`_acknowledgement`), ``(-1, None, channel)`` for a CNP, ``(-1, None,
        -1)`` for a corrupt or stale one."""
        f = wire.unpack(wire.BTH_FIELDS, bth)
        if wire.hcs(bth) != f["hcs"]:
            self.counters["corrupt"] += 1
            return -1, None, -1
        t = self._index(src, f["ch"])
        if f["opcode"] == wire.CNP_OPCODE:
            self.counters["cnp_handled"] += 1
            return -1, None, t if self.rp is not None else -1
        return (*self._acknowledgement(t, f), -1)

    def _verdict(self, src: int, bth: int, reth: int):
        """Decide on a data packet at its RETH: ``(context, verdict)``, ``(-1, None)`` if corrupt.

        Latches what the payload flits need (write addresses, receive
        completion); the verdict applies at the packet's last flit.
        """
        self._rx_write = False
        h = wire.unpack(wire.BTH_FIELDS, bth)
        if wire.hcs(bth, reth) != h["hcs"]:
            self.counters["corrupt"] += 1
            return -1, None
        r = wire.unpack(wire.RETH_FIELDS, reth)
        x = self._index(src, h["ch"])
        psn, epsn = h["psn"], self.epsn[x]
        ahead = (h["epoch"] - self.epoch_in[x]) % _EPOCHS
        if self.awaiting[x] and ahead == 0 and psn == self.denied[x]:
            self.counters["duplicates"] += 1
            return x, "renak"
        if ahead != (1 if self.awaiting[x] else 0):
            # Awaiting: the sender has not heard the NAK (access) yet; or a
            # stale packet from an earlier epoch.
            self.counters["out_of_sequence"] += 1
            return x, "blocked"
        self._rx_epoch = h["epoch"]
        if psn == epsn:
            if not self.tables.allowed(r["rkey"], r["raddr"], r["mlen"],
                                       wire.ACCESS_REMOTE_WRITE, peer=src):
                return x, ("denied", psn)
            self._rx_write = True
            self._rx_addr = self.tables.addresses(
                r["rkey"], r["raddr"] + r["offset"], min(self._M, r["mlen"] - r["offset"]))
            send_last = wire.is_send_opcode(h["opcode"]) and wire.is_last_opcode(h["opcode"])
            self._rx_rcpl = (src, h["dqp"], r["mlen"]) if send_last else None
            return x, ("accept", h["ack_req"])
        if wire.psn_lt(psn, epsn):
            self.counters["duplicates"] += 1
            return x, "duplicate"
        self.counters["out_of_sequence"] += 1
        return x, "gap"

    def _apply_verdict(self, x: int, verdict) -> None:
        """Update context ``x`` (after the pick's clearing of it in this cycle)."""
        if verdict == "blocked":
            return
        if verdict == "renak":
            self.pend[x] |= _PEND_ACC
            return
        # A live packet: its epoch is the context's (a switch ends the wait).
        self.awaiting[x], self.epoch_in[x] = False, self._rx_epoch
        if verdict[0] == "denied":
            self.pend[x] |= _PEND_ACC
            self.epsn[x] = (self.epsn[x] + 1) & _PSN_MASK
            self.awaiting[x], self.denied[x] = True, verdict[1]
        elif verdict == "duplicate":
            self.pend[x] |= _PEND_ACK
        elif verdict == "gap":
            if not self.nak_sent[x]:
                self.pend[x] |= _PEND_SEQ
                self.nak_sent[x] = True
        else:
            self.epsn[x] = (self.epsn[x] + 1) & _PSN_MASK
            self.nak_sent[x] = False
            self.unacked[x] += 1          # already 0 if picked in this cycle
            if verdict[1] or self.unacked[x] >= self._ack_every:
                self.pend[x] |= _PEND_ACK


    # -- DCQCN (section 10.13) ---------------------------------------------------------

    def _congestion(self, cycle: int, marked: int, cnp_t: int, pick_ch: int, picked) -> None:
        """The notification point, after the pick, then the reaction point with
        this cycle's CNP and the data packet picked (``picked``, on ``pick_ch``)."""
        if marked >= 0:
            self.np.marked(marked, cycle)
        if self.rp is not None:
            if cnp_t >= 0 or pick_ch >= 0 or cycle >= self.rp.next_timer:
                self.rp.step(cycle, cnp=cnp_t, sent=pick_ch,
                             flits=picked[1] if pick_ch >= 0 else 0)

    # -- bookkeeping -------------------------------------------------------------------


    def _refresh(self, cycle: int, touched, reset, ctx_touched, pick_x: int, ack_fired) -> None:
        """Bring the sets of channels and contexts that can act, and the
        running timers, up to date with the state at the end of ``cycle``."""
        nxt, snd, una, ret = self.nxt, self.snd, self.una, self.ret
        start = cycle + 1            # a timer restarted at 0 holds 0 in the next cycle
        for ch in touched:
            (self._to_send.add if snd[ch] != nxt[ch] else self._to_send.discard)(ch)
            (self._to_retire.add if ret[ch] != una[ch] else self._to_retire.discard)(ch)
            if una[ch] == snd[ch]:
                self._rto_base.pop(ch, None)
            elif ch in reset or ch not in self._rto_base:
                self._rto_base[ch] = start
        for x in ctx_touched:
            (self._pending.add if self.pend[x] else self._pending.discard)(x)
            if not self.unacked[x]:
                self._ack_base.pop(x, None)
            elif x == pick_x or x in ack_fired or x not in self._ack_base:
                self._ack_base[x] = start
        self._timer_next = min(
            min(self._rto_base.values(), default=NEVER) + self._rto - 1,
            min(self._ack_base.values(), default=NEVER) + self._ato - 1)

    # -- reporting ---------------------------------------------------------------------

    def describe_channel(self, ch: int) -> str:
        """One line of the state of the channel at state index ``ch``."""
        return (f"endpoint {self.endpoint} channel {self.channel(ch)} (peer {self._peer(ch)}, "
                f"index {ch % self._C}): una {self.una[ch]} snd {self.snd[ch]} nxt {self.nxt[ch]} "
                f"ret {self.ret[ch]} hsn {self.hsn[ch]}")

    def rate_changes(self) -> list[tuple[int, int, int]]:
        """The reaction point's rate changes, ``(cycle, channel number, rate)``."""
        return [(c, self.channel(i), r) for c, i, r in self.rp.changes] if self.rp else []

    def busy_channels(self) -> list[int]:
        """State indices of the channels holding packets not yet retired."""
        return [ch for ch in range(self._NC) if self.ret[ch] != self.nxt[ch]]
