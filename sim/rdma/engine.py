"""Golden model of :class:`superfabric.hdl.rdma.engine.RdmaEngine` (sections 10.2-10.8).

One endpoint's engine: the WR segmenter, the per-channel windows of packet
descriptors, the retire unit, the transmitter, the retransmission and
acknowledgement timers, the receiver, and the key checks and translation
of section 10.3. :meth:`RdmaEngine.step` simulates one cycle the way the
text of section 10.6 puts it: every decision from the state at the start
of the cycle, then the updates in the order of its steps.

The model keeps the timers as the cycle they started counting from rather
than counting every cycle: the value is the same, and an engine with
nothing to do costs nothing (``next_event`` says when a timer fires).
"""

from collections import deque, namedtuple

import numpy as np

from ...config import FabricConfig
from ...formats import rdma_wire as wire
from ...formats.counters import RDMA_COUNTERS
from ...formats.packet import CE
from .dcqcn import NEVER, NotificationPoint, ReactionPoint

__all__ = ["RdmaEngine", "KeyTable", "Descriptor", "NEVER"]

_PSN_MASK = wire.PSN_MOD - 1
_VA_MASK = (1 << wire.VA_BITS) - 1
_PEND_ACK, _PEND_SEQ, _PEND_ACC = 1, 2, 4
_EPOCHS = 1 << wire.EPOCH_BITS

#: One window slot (``rdma_wire.descriptor_fields``).
Descriptor = namedtuple("Descriptor", "qp opcode first last lkey va rkey raddr mlen offset words tag")

# Key table columns of the workload (section 10.3).
_VALID, _KEY, _VA, _WORDS, _PAGE, _ACCESS, _PEERS = range(7)


class KeyTable:
    """One endpoint's registration table and page table (section 10.3).

    ``keys`` is an int array ``[keys, 7]`` of (valid, key, va, words, page,
    access, peers), indexed by ``key mod keys``; ``page_table`` an int
    array of physical page numbers.
    """

    def __init__(self, keys: np.ndarray, page_table: np.ndarray, cfg: FabricConfig):
        rd = cfg.rdma
        self._entries = [tuple(int(v) for v in row) for row in np.asarray(keys)]
        self._pages = [int(p) for p in np.asarray(page_table)]
        self._key_mask = rd.keys - 1
        self._page_mask = rd.pages - 1
        self._shift = (rd.page_words - 1).bit_length()
        self._offset_mask = rd.page_words - 1
        self._addr_mask = rd.memory_words - 1

    def allowed(self, key: int, va: int, words: int, right: int, peer: int | None = None) -> bool:
        """The range ``[va, va + words)`` may be accessed under ``key`` with ``right``
        (and, for a remote access, by endpoint ``peer``)."""
        e = self._entries[key & self._key_mask]
        return bool(e[_VALID] and e[_KEY] == key and e[_ACCESS] & right and va >= e[_VA]
                    and va - e[_VA] + words <= e[_WORDS]
                    and (peer is None or e[_PEERS] >> peer & 1))

    def addresses(self, key: int, va: int, words: int) -> list[int]:
        """Host memory addresses of ``va .. va + words - 1`` in the region of ``key``.

        Uses the entry at ``key mod keys`` without checking it; the physical
        address keeps the memory's address bits (it wraps modulo memory_words).
        """
        e = self._entries[key & self._key_mask]
        base, page = e[_VA], e[_PAGE]
        shift, pages, low, mask = self._shift, self._pages, self._offset_mask, self._addr_mask
        out = []
        for v in range(va, va + words):
            o = (v - base) & _VA_MASK
            out.append((pages[(page + (o >> shift)) & self._page_mask] << shift | (o & low)) & mask)
        return out


def _round_robin(members, start: int) -> int:
    """The first member at or after ``start``, wrapping around."""
    after = [m for m in members if m >= start]
    return min(after) if after else min(members)


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
        E, C, W = sw.ports, rd.channels_per_peer, rd.window
        self._E, self._C, self._W = E, C, W
        self._M = wire.payload_words(sw.max_packet_flits)
        self._Q = rd.per_endpoint(E)
        self._rto, self._ato, self._ack_every = rd.retransmit_timeout, rd.ack_timeout, rd.ack_every
        NC = self._NC = E * C
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

    # -- the WR stream --------------------------------------------------------

    def _classify(self, wr) -> tuple[int, int]:
        """The WR's channel (-1 when ``dst`` names no peer) and its error
        status (0: none) under section 10.6 step 1."""
        row = wr[0]
        seen = self._wr_seen
        if seen[0] == row:
            return seen[1], seen[2]
        _, qp, dst, _, lkey, laddr, _, _, length, _ = wr
        E, C = self._E, self._C
        ch = dst * C + qp % C if dst < E and dst != self.endpoint else -1
        if dst == self.endpoint or dst >= E or length == 0 or qp >= self._Q:
            status = wire.STATUS_BAD
        elif not self.tables.allowed(lkey, laddr, length, wire.ACCESS_LOCAL_READ):
            status = wire.STATUS_LOCAL
        else:
            status = wire.STATUS_OK
        self._wr_seen = (row, ch, status)
        return ch, status

    def _drained(self) -> bool:
        """No channel holds a packet.

        A failing WR's ``dst`` may be wrong, so it names no channel of its QP
        for certain: waiting for all keeps its QP's completions in posting order.
        """
        return self.nxt == self.ret

    def free_slots(self, ch: int) -> int:
        """Window slots channel ``ch`` has free: packets the segmenter can still write."""
        return self._W - ((self.nxt[ch] - self.ret[ch]) & _PSN_MASK)

    def _sendable(self, cycle: int) -> list[int]:
        """Channels with a packet to send whose pacer lets them start one in ``cycle``."""
        if self.rp is None:
            return sorted(self._to_send)
        return sorted(ch for ch in self._to_send if self.rp.eligible(ch, cycle))

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

    # -- the uplink -------------------------------------------------------------

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

    # -- one cycle ----------------------------------------------------------------

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
        W = self._W
        nxt, snd, una, ret = self.nxt, self.snd, self.una, self.ret
        cnt = self.counters
        touched = set()              # channels whose state may have changed
        reset = set()                # channels whose retransmission timer restarts at 0
        ctx_touched = set()          # contexts likewise

        # -- decisions, all from the state at the start of the cycle --------
        # 2. Retire.
        r_ch = -1
        completion = None
        if self._to_retire:
            r_ch = _round_robin(self._to_retire, self.ret_ptr)
            slot = ret[r_ch] % W
            d = self.desc[r_ch][slot]
            r_err = self.err[r_ch][slot]
            if d.last:
                failed = self.msgerr[r_ch] or r_err
                completion = (d.qp, d.tag, wire.STATUS_REMOTE if failed else wire.STATUS_OK)

        # 1. Segmenter.
        seg_ch = -1
        taken = False
        if wr is not None:
            ch, status = self._classify(wr)
            if status:
                if completion is None and self._drained():
                    completion = (wr[1], wr[9], status)
                    taken = True
            elif (nxt[ch] - ret[ch]) & _PSN_MASK < W:
                seg_ch = ch

        # Payload reads: a request if the buffer has room for its word (the
        # word is read now, before this cycle's writes), and the word of an
        # earlier request arriving.
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

        # 3. Transmit pick: CNPs, then acknowledgements, then data, each
        # only while its class is not paused.
        pick_x = pick_ch = cnp_x = -1
        data_paused, control_paused = paused
        if self._tx is None:
            if cnp_pending and not control_paused:
                cnp_x = -2           # the notification point names the context below
            elif self._pending and not control_paused:
                pick_x = min(self._pending)
            elif self._to_send and not data_paused:
                sendable = self._sendable(cycle)
                if sendable:
                    pick_ch = _round_robin(sendable, self.tx_ptr)

        # 4 and 6. Timers reaching their timeouts in this cycle.
        fired, ack_fired = [], []
        if cycle >= self._timer_next:
            # A timer holding t in this cycle fires when t + 1 reaches its timeout.
            edge = cycle + 1
            fired = [ch for ch, base in self._rto_base.items() if base + self._rto == edge]
            ack_fired = [x for x, base in self._ack_base.items()
                         if base + self._ato == edge and x != pick_x]

        # 5. Receive.
        ack_t = -1                   # channel of an ACK/NAK that overrides steps 3 and 4
        ack_update = None
        cnp_t = -1                   # channel of a CNP received
        rx_x = -1                    # context of a data packet's verdict
        verdict = None
        write = None
        rx_completion = None
        marked = -1                  # context of a CE-marked data packet
        if rx is not None:
            src, k, last_flit, word, ecn = rx
            if k == 0:
                self._rx_bth = word
                if last_flit:
                    ack_t, ack_update, cnp_t = self._one_flit(src, word)
            elif k == 1:
                self._rx_verdict = self._verdict(src, self._rx_bth, word)
                x = self._rx_verdict[0]
                if x >= 0 and ecn == CE:
                    self.counters["ecn_marked"] += 1
                    marked = x
            else:
                if self._rx_write:
                    write = (self._rx_addr[k - 2], word)
                    if last_flit:
                        rx_completion = self._rx_rcpl
                if last_flit:
                    # The context learns of the packet once it is written.
                    rx_x, verdict = self._rx_verdict

        # -- updates, in the order of the steps --------------------------------
        # 1. Segmenter.
        if seg_ch >= 0:
            _, qp, dst, opcode, lkey, laddr, rkey, raddr, length, tag = wr
            off = self.seg_off
            last = off + self._M >= length
            slot = nxt[seg_ch] % W
            self.desc[seg_ch][slot] = Descriptor(
                qp, opcode, off == 0, last, lkey, (laddr + off) & _VA_MASK, rkey, raddr, length,
                off, length - off if last else self._M, tag)
            self.err[seg_ch][slot] = False
            nxt[seg_ch] = (nxt[seg_ch] + 1) & _PSN_MASK
            self.seg_off = 0 if last else off + self._M
            taken = last
            touched.add(seg_ch)
        # 2. Retire.
        self.retired = r_ch >= 0
        if r_ch >= 0:
            ret[r_ch] = (ret[r_ch] + 1) & _PSN_MASK
            self.msgerr[r_ch] = False if d.last else self.msgerr[r_ch] or r_err
            self.ret_ptr = (r_ch + 1) % self._NC
            touched.add(r_ch)
        if completion is not None:
            cnt["completions"] += 1
            if completion[2] != wire.STATUS_OK:
                cnt["errors"] += 1
        # 3. Transmit pick.
        picked = None
        if cnp_x == -2:
            cnp_x = self.np.pick()
            picked = self._pick_cnp(cnp_x)
            self.cnps.append((cycle, cnp_x))
        elif pick_x >= 0:
            picked = self._pick_acknowledgement(pick_x)
            ctx_touched.add(pick_x)
        elif pick_ch >= 0:
            picked = self._pick_data(pick_ch)
            touched.add(pick_ch)
        # 4. Retransmission timers (a timeout yields to an ACK/NAK for its channel).
        for ch in fired:
            if ch != ack_t:
                snd[ch] = una[ch]
                cnt["timeouts"] += 1
                reset.add(ch)
                touched.add(ch)
        # 5. Receive: an acknowledgement's assignments win over steps 3 and 4.
        if ack_update is not None:
            una[ack_t], new_snd, err_psn = ack_update
            if new_snd is not None:
                snd[ack_t] = new_snd
            if err_psn is not None:
                self.err[ack_t][err_psn % W] = True
                self.epoch[ack_t] = (self.epoch[ack_t] + 1) % _EPOCHS
            reset.add(ack_t)
            touched.add(ack_t)
        if verdict is not None:
            self._apply_verdict(rx_x, verdict)
            ctx_touched.add(rx_x)
        # DCQCN: the notification point, after the pick, then the reaction
        # point with this cycle's CNP and the data packet picked.
        if marked >= 0:
            self.np.marked(marked, cycle)
        if self.rp is not None:
            if cnp_t >= 0 or pick_ch >= 0 or cycle >= self.rp.next_timer:
                self.rp.step(cycle, cnp=cnp_t, sent=pick_ch,
                             flits=picked[1] if pick_ch >= 0 else 0)
        if write is not None:
            self.memory[write[0]] = write[1]
        if rx_completion is not None:
            cnt["rx_completions"] += 1
        # 6. Acknowledgement timers.
        for x in ack_fired:
            self.pend[x] |= _PEND_ACK
            ctx_touched.add(x)
        # The read buffer: the word taken leaves, the word arriving enters.
        if arriving is not None:
            self._in_flight.popleft()
            self._buffered.append(arriving)
        if request is not None:
            self._in_flight.append(request)
        # The transmitter: idle again after its last flit is taken.
        if tx_taken:
            if self._tx_k >= 2:
                self._buffered.popleft()
            self._tx_k += 1
            if self._tx_k == self._tx[1]:
                self._tx = None
        if picked is not None:
            self._tx, self._tx_k, self._rd_next = picked, 0, 0

        if touched or ctx_touched:
            self._refresh(cycle, touched, reset, ctx_touched, pick_x, ack_fired)
        return taken, completion, rx_completion

    # -- pieces of step() -------------------------------------------------------

    def _one_flit(self, src: int, bth: int):
        """Decide on a one-flit packet: ``(channel, update, -1)`` for an ACK/NAK to apply
        (see :meth:`_acknowledgement`), ``(-1, None, channel)`` for a CNP, ``(-1, None,
        -1)`` for a corrupt or stale one."""
        f = wire.unpack(wire.BTH_FIELDS, bth)
        if wire.hcs(bth) != f["hcs"]:
            self.counters["corrupt"] += 1
            return -1, None, -1
        t = src * self._C + f["ch"]
        if f["opcode"] == wire.CNP_OPCODE:
            self.counters["cnp_handled"] += 1
            return -1, None, t if self.rp is not None else -1
        return (*self._acknowledgement(t, f), -1)

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
        x = src * self._C + h["ch"]
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
        return x // self._C, 1, bth, 0, ()

    def _pick_cnp(self, x: int) -> tuple:
        """Step 3 for a CNP of receive context ``x``: the one-flit CNP to latch."""
        bth = wire.pack(wire.BTH_FIELDS, opcode=wire.CNP_OPCODE, ch=x % self._C)
        bth |= wire.hcs(bth) << 16
        self.counters["cnp_sent"] += 1
        return x // self._C, 1, bth, 0, ()

    def _pick_data(self, ch: int) -> tuple:
        """Step 3 for channel ``ch``: returns the packet in slot ``snd mod W``
        for the transmitter to latch."""
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
        return ch // self._C, 2 + d.words, bth, reth, self.tables.addresses(d.lkey, d.va, d.words)

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

    # -- reporting ----------------------------------------------------------------

    def describe_channel(self, ch: int) -> str:
        """One line of channel ``ch``'s state."""
        return (f"endpoint {self.endpoint} channel {ch} (peer {ch // self._C}, index "
                f"{ch % self._C}): una {self.una[ch]} snd {self.snd[ch]} nxt {self.nxt[ch]} "
                f"ret {self.ret[ch]} hsn {self.hsn[ch]}")

    def busy_channels(self) -> list[int]:
        """Channels holding packets not yet retired."""
        return [ch for ch in range(self._NC) if self.ret[ch] != self.nxt[ch]]
