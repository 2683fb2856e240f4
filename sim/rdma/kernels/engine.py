"""Golden model of :class:`superfabric.hdl.rdma.engine.RdmaEngine` (sections 10.2-10.8):
every endpoint's engine as numba kernels over one :class:`EngineState` of preallocated
arrays, cycle for cycle with the RTL.

:func:`engine_offer` is the uplink's flit of a cycle, :func:`engine_step` the cycle (the
decisions from the state at the start of the cycle, then the updates in the order of
section 10.6's steps), :func:`engine_next_event` the next cycle the engine acts and
:func:`engine_free_slots` a channel's free window slots (the RTL's ``free`` port); the key
table is :mod:`.keys`, DCQCN's notification and reaction points :mod:`.dcqcn`. The
channels that can act and the running timers are bit sets and ordered timer lists
(:mod:`.channels`), so an engine with nothing to do costs O(1) per cycle.

Memory: a window slot holds only what the WR table cannot give, the WR's row and the
segment's offset in it (and its error bit); everything else of the RTL's descriptor
derives from the WR table ``wr`` passed to the kernels (int64 ``[rows, 10]``, row ``r`` =
``(r, qp, dst, opcode, lkey, laddr, rkey, raddr, length, tag)``, the send queues' table).
The transmitter keeps the packet it latched as its headers and its payload's key, first
virtual address and words, translated one word at a time as they are read.

Words are 64 bits: the headers, the payload read buffer and the receiver's latched BTH are
uint64, as is the host memory (``[E, memory_words]``, the engine uses row ``e``); fields
are taken out of them in uint64 and only then converted, so no word meets an int64 (numba
would give a float64).
"""

from collections import namedtuple

import numpy as np

from ....config import FabricConfig
from ....formats import rdma_wire as wire
from ....formats.counters import RDMA_COUNTERS
from ....formats.dcqcn import ALPHA_ONE, LINE_RATE
from ....formats.packet import CE
from ...kernel import kernel
from ..host import WR_ROW_FIELDS
from ..records import CNP_COLUMNS, RATE_COLUMNS, event_rows
from ..traffic import key_columns
from .channels import NEVER, peer_of, set_first, set_first_at_most, set_min, set_put, \
    set_words, timer_first, timer_remove, timer_start
from .dcqcn import (ALPHA_HEAD, ALPHA_TAIL, DCQCN_SCALARS, INCREASE_HEAD, INCREASE_TAIL,
                    N_CNP_PENDING, N_CNPS, N_RATES, RP_NEXT, SOONEST, np_marked, np_pick,
                    record_cnp, rp_step)
from .keys import key_address, key_allowed, key_masks

__all__ = ["NEVER", "EngineParams", "EngineState", "engine_params", "engine_state",
           "engine_offer", "engine_step", "engine_next_event", "engine_free_slots",
           "engine_events", "engine_events_room", "event_rows_per_cycle", "engine_counters",
           "engine_busy_channels",
           "describe_channel", "WR_COLUMNS", "OUT_FIELDS", "OUT_TAKEN", "OUT_QP", "OUT_TAG",
           "OUT_STATUS", "OUT_RX_SRC", "OUT_RX_QP", "OUT_RX_LENGTH", "OUT_RETIRED",
           "bth_pack", "reth_pack", "hcs"]

_PSN_MASK = wire.PSN_MOD - 1
# A slot's segment offset is an int16: a message is at most 2**LEN_BITS - 1 words.
assert wire.LEN_BITS < 16
_VA_MASK = (1 << wire.VA_BITS) - 1
_PEND_ACK, _PEND_SEQ, _PEND_ACC = 1, 2, 4
_EPOCHS = 1 << wire.EPOCH_BITS

#: The columns of the WR table ``wr``: the row, then ``WR_ROW_FIELDS``.
WR_COLUMNS = ("row",) + WR_ROW_FIELDS
_QP, _DST, _OPCODE, _LKEY, _LADDR, _RKEY, _RADDR, _LENGTH, _TAG = (
    WR_COLUMNS.index(c) for c in WR_ROW_FIELDS)

#: :func:`engine_step`'s ``out``: whether the WR was taken; the completion's QP, tag and
#: status (tag -1: no completion); the receive completion's source, QP and length (source
#: -1: none); whether a packet retired (the RTL's ``retired``).
(OUT_TAKEN, OUT_QP, OUT_TAG, OUT_STATUS, OUT_RX_SRC, OUT_RX_QP, OUT_RX_LENGTH, OUT_RETIRED,
 OUT_FIELDS) = range(9)

(_TX_DATA, _RETRANSMISSIONS, _TX_ACKS, _NAKS, _TIMEOUTS, _DUPLICATES, _OUT_OF_SEQUENCE,
 _CORRUPT, _COMPLETIONS, _ERRORS, _RX_COMPLETIONS, _ECN_MARKED, _CNP_SENT, _CNP_HANDLED) = (
    RDMA_COUNTERS.index(c) for c in (
        "tx_data", "retransmissions", "tx_acks", "naks", "timeouts", "duplicates",
        "out_of_sequence", "corrupt", "completions", "errors", "rx_completions", "ecn_marked",
        "cnp_sent", "cnp_handled"))

# -- the wire formats, from rdma_wire's field tables -----------------------------------


def _fields(fields, names):
    """Per field of ``fields`` (which must be exactly ``names``) its bit offset as a uint64
    shift and its mask."""
    layout, offset = {}, 0
    for name, width in fields:
        layout[name] = (np.uint64(offset), (1 << width) - 1)
        offset += width
    assert tuple(layout) == names and offset <= 64, (tuple(layout), offset)
    return tuple(layout[n] for n in names)


(_B_OPCODE, _B_ACK_REQ, _B_CH, _B_EPOCH, _B_SYNDROME, _B_HCS, _B_DQP, _B_PSN) = _fields(
    wire.BTH_FIELDS, ("opcode", "ack_req", "ch", "epoch", "syndrome", "hcs", "dqp", "psn"))
_R_RKEY, _R_RADDR, _R_MLEN, _R_OFFSET = _fields(
    wire.RETH_FIELDS, ("rkey", "raddr", "mlen", "offset"))
#: The BTH without its HCS byte (rdma_wire.hcs checks the rest).
_NOT_HCS = ~(np.uint64(_B_HCS[1]) << _B_HCS[0])

#: wire.packet_opcode as a table, indexed ``opcode * 4 + first * 2 + last``.
_PACKET_OPCODE = np.array([wire.OPCODES[(op, bool(f), bool(la))]
                           for op in (0, 1) for f in (0, 1) for la in (0, 1)], np.int64)
assert {wire.OP_WRITE, wire.OP_SEND} == {0, 1}
#: wire.is_last_opcode and wire.is_send_opcode as tables of the 8-bit BTH opcodes.
_LAST_OPCODE = np.array([wire.is_last_opcode(c) for c in range(256)], np.bool_)
_SEND_OPCODE = np.array([wire.is_send_opcode(c) for c in range(256)], np.bool_)


@kernel(inline=True)
def _put(value, field):
    """``value`` in ``field`` (a ``(shift, mask)`` pair) of a word."""
    return np.uint64(value & field[1]) << field[0]


@kernel(inline=True)
def _get(word, field):
    """The ``field`` of uint64 ``word``, as an int64."""
    return np.int64((word >> field[0]) & np.uint64(field[1]))


@kernel(inline=True)
def bth_pack(opcode, ack_req, ch, epoch, syndrome, dqp, psn):
    """``wire.pack(wire.BTH_FIELDS, ...)`` with the HCS byte zero, as a uint64."""
    return (_put(opcode, _B_OPCODE) | _put(ack_req, _B_ACK_REQ) | _put(ch, _B_CH)
            | _put(epoch, _B_EPOCH) | _put(syndrome, _B_SYNDROME) | _put(dqp, _B_DQP)
            | _put(psn, _B_PSN))


@kernel(inline=True)
def reth_pack(rkey, raddr, mlen, offset):
    """``wire.pack(wire.RETH_FIELDS, ...)``, as a uint64."""
    return _put(rkey, _R_RKEY) | _put(raddr, _R_RADDR) | _put(mlen, _R_MLEN) | _put(offset,
                                                                                   _R_OFFSET)


@kernel(inline=True)
def hcs(bth, reth):
    """``wire.hcs(bth, reth)`` (``reth`` 0 for a one-flit packet): the XOR of the bytes of
    the BTH, its HCS byte as 0, and of the RETH."""
    w = (bth & _NOT_HCS) ^ reth
    w ^= w >> np.uint64(32)
    w ^= w >> np.uint64(16)
    w ^= w >> np.uint64(8)
    return np.int64(w & np.uint64(0xFF))


# -- parameters and state --------------------------------------------------------------

#: The configuration as the kernels read it (integers; ``dcqcn`` a bool). The DCQCN units
#: keep ``DcqcnUnits``' names (``formats.dcqcn.increase`` reads them from this tuple).
EngineParams = namedtuple("EngineParams", [
    "endpoints", "C", "W", "M", "Q", "NC", "rto", "ato", "ack_every", "latency", "depth",
    "key_mask", "page_mask", "page_shift", "offset_mask", "addr_mask",
    "dcqcn", "cnp_interval", "alpha_timer", "increase_timer", "byte_counter", "fast_recovery",
    "g_shift", "ai_rate", "hai_rate", "min_rate"])

#: Indices of EngineState.scalars after DCQCN's (:mod:`.dcqcn`): the segmenter's offset
#: in the WR offered; the transmitter's and the retire unit's round-robin pointers; the
#: packet sending (its flits, 0 when idle, destination, next flit, payload key, virtual
#: address and words) and the next payload word to read; the packet picked next (its
#: flits, 0: none, destination, payload key, virtual address and words, and the payload
#: words already requested); the read buffer's ring (first
#: entry, words buffered, then reads in flight); the receiver's latches (a write of the
#: packet's payload, its epoch, the payload's key and first virtual address, the receive
#: completion (source -1: none), the context and verdict of the packet and the verdict's
#: PSN and ack request); the channels holding packets (``nxt != ret``); the sizes of the
#: sets of channels to send and to retire and of contexts pending; the first cycle an
#: engine timer fires and the ends of the retransmission and acknowledgement timer lists;
#: whether the last step retired a packet.
(SEG_OFF, TX_PTR, RET_PTR, TX_LEN, TX_DST, TX_K, TX_KEY, TX_VA, TX_WORDS, RD_NEXT,
 NX_LEN, NX_DST, NX_KEY, NX_VA, NX_WORDS, NX_RD,
 RING_HEAD, RING_BUFFERED, RING_IN_FLIGHT, RX_WRITE, RX_EPOCH, RX_KEY, RX_VA, RX_RCPL_SRC,
 RX_RCPL_QP, RX_RCPL_LEN, RX_X, RX_VERDICT, RX_PSN, RX_ACK_REQ, BUSY, N_SEND, N_RETIRE,
 N_PENDING, TIMER_NEXT, RTO_HEAD, RTO_TAIL, ACK_HEAD, ACK_TAIL, RETIRED,
 SCALARS) = range(DCQCN_SCALARS, DCQCN_SCALARS + 41)

# The receiver's verdict on a data packet (section 10.6 step 5), applied at its last flit.
_V_NONE, _V_BLOCKED, _V_RENAK, _V_DENIED, _V_DUPLICATE, _V_GAP, _V_ACCEPT = range(7)

#: Every engine's state; per channel or receive context arrays are ``[E, (E-1)*C]``,
#: indexed by state index ``rank * C + ch`` (section 10.5's state layout).
EngineState = namedtuple("EngineState", [
    # Channels (sender role): the PSNs, the message error and the epoch.
    "nxt", "snd", "una", "ret", "hsn", "msgerr", "epoch",
    # Window slots [E, NC, W]: the WR row and segment offset of the packet, its error bit.
    "slot_row", "slot_off", "slot_err",
    # Receive contexts (target role).
    "epsn", "nak_sent", "pend", "unacked", "awaiting", "epoch_in", "denied",
    # Bit sets [E, words]: channels to send, to retire; contexts pending; CNPs pending.
    "to_send", "to_retire", "pending", "np_pending",
    # Timer lists: the cycle each counts from (NEVER: stopped) and the links.
    "rto_base", "rto_prev", "rto_next", "ack_base", "ack_prev", "ack_next",
    # DCQCN: the notification point's last CNP per context; the reaction point per channel
    # (one column each when DCQCN is off).
    "np_last", "rate", "target", "alpha", "timer_stage", "byte_stage", "flits", "debt",
    "debt_at", "ready", "alpha_at", "alpha_prev", "alpha_next", "increase_at",
    "increase_prev", "increase_next",
    # The transmitter's headers [E, 4] (BTH and RETH of the packet sending, then of the
    # packet picked next), the read buffer's ring [E, depth] (word,
    # cycle it arrives), the receiver's latched BTH [E].
    "tx_header", "ring_word", "ring_at", "rx_bth",
    "scalars", "counters",
    # The key tables and page tables.
    "keys", "pages",
    # Events: CNPs picked (cycle, endpoint, channel number), rate changes (cycle, endpoint,
    # channel number, rate) and their counts (n_events[N_CNPS], n_events[N_RATES]).
    "cnps", "rates", "n_events",
    # Scratch of one step: the retransmission, acknowledgement and rate timers that fire.
    "fired", "ack_fired", "rp_fired"])


def engine_params(cfg: FabricConfig) -> EngineParams:
    """The kernels' view of ``cfg``."""
    sw, rd = cfg.switch, cfg.rdma
    E, C = cfg.endpoints, rd.channels_per_peer
    u = cfg.dcqcn.units
    return EngineParams(
        endpoints=E, C=C, W=rd.window, M=wire.payload_words(sw.max_packet_flits),
        Q=rd.per_endpoint(E), NC=(E - 1) * C, rto=rd.retransmit_timeout, ato=rd.ack_timeout,
        ack_every=rd.ack_every, latency=rd.dma_latency, depth=rd.dma_latency + 2,
        **key_masks(cfg)._asdict(), dcqcn=bool(cfg.dcqcn.enabled),
        cnp_interval=u.cnp_interval, alpha_timer=u.alpha_timer,
        increase_timer=u.increase_timer, byte_counter=u.byte_counter,
        fast_recovery=u.fast_recovery, g_shift=u.g_shift, ai_rate=u.ai_rate,
        hai_rate=u.hai_rate, min_rate=u.min_rate)


def event_rows_per_cycle(cfg: FabricConfig) -> dict[str, int]:
    """Per event array, the rows one cycle of every engine may add: a CNP, and a rate
    change per channel (none without DCQCN)."""
    E = cfg.endpoints
    dcqcn = cfg.dcqcn.enabled
    return {"cnps": E if dcqcn else 0,
            "rates": E * (E - 1) * cfg.rdma.channels_per_peer if dcqcn else 0}


def engine_state(cfg: FabricConfig, workload) -> EngineState:
    """Every endpoint's engine just after reset, with ``workload``'s key and page tables
    (``keys`` ``[E, rdma.keys, key_columns(E)]``, ``page_table`` ``[E, rdma.pages]``)."""
    prm = engine_params(cfg)
    E, NC, W = cfg.endpoints, prm.NC, prm.W
    start = cfg.rdma.start_psn
    keys = np.array(workload.keys, np.int64)
    pages = np.array(workload.page_table, np.int64)
    if keys.shape != (E, cfg.rdma.keys, key_columns(E)) or pages.shape != (E, cfg.rdma.pages):
        raise ValueError(f"workload tables: keys {keys.shape}, page_table {pages.shape}")
    words = set_words(NC)
    scalars = np.zeros((E, SCALARS), np.int64)
    scalars[:, [ALPHA_HEAD, ALPHA_TAIL, INCREASE_HEAD, INCREASE_TAIL, RTO_HEAD, RTO_TAIL,
                ACK_HEAD, ACK_TAIL, RX_RCPL_SRC, RX_X, SOONEST]] = -1
    scalars[:, [RP_NEXT, TIMER_NEXT]] = NEVER

    def channels(fill=0, dtype=np.int64):
        return np.full((E, NC), fill, dtype)

    def rp(fill=0, dtype=np.int64):
        """A notification or reaction point array: one column without DCQCN (never read)."""
        return np.full((E, NC if prm.dcqcn else 1), fill, dtype)

    rows = {name: 1024 + need for name, need in event_rows_per_cycle(cfg).items()}
    return EngineState(
        nxt=channels(start), snd=channels(start), una=channels(start), ret=channels(start),
        hsn=channels(start), msgerr=channels(False, np.bool_), epoch=channels(0, np.int8),
        slot_row=np.zeros((E, NC, W), np.int32), slot_off=np.zeros((E, NC, W), np.int16),
        slot_err=np.zeros((E, NC, W), np.bool_),
        epsn=channels(start), nak_sent=channels(False, np.bool_), pend=channels(0, np.int8),
        unacked=channels(0, np.int32), awaiting=channels(False, np.bool_),
        epoch_in=channels(0, np.int8), denied=channels(0),
        to_send=np.zeros((E, words), np.int64), to_retire=np.zeros((E, words), np.int64),
        pending=np.zeros((E, words), np.int64), np_pending=np.zeros((E, words), np.int64),
        rto_base=channels(NEVER), rto_prev=channels(-1, np.int32),
        rto_next=channels(-1, np.int32), ack_base=channels(NEVER),
        ack_prev=channels(-1, np.int32), ack_next=channels(-1, np.int32),
        np_last=rp(-NEVER), rate=rp(LINE_RATE), target=rp(LINE_RATE), alpha=rp(ALPHA_ONE),
        timer_stage=rp(), byte_stage=rp(), flits=rp(), debt=rp(), debt_at=rp(), ready=rp(),
        alpha_at=rp(NEVER), alpha_prev=rp(-1, np.int32), alpha_next=rp(-1, np.int32),
        increase_at=rp(NEVER), increase_prev=rp(-1, np.int32), increase_next=rp(-1, np.int32),
        tx_header=np.zeros((E, 4), np.uint64), ring_word=np.zeros((E, prm.depth), np.uint64),
        ring_at=np.zeros((E, prm.depth), np.int64), rx_bth=np.zeros(E, np.uint64),
        scalars=scalars, counters=np.zeros((E, len(RDMA_COUNTERS)), np.int64),
        keys=keys, pages=pages,
        cnps=np.zeros((rows["cnps"], len(CNP_COLUMNS)), np.int64),
        rates=np.zeros((rows["rates"], len(RATE_COLUMNS)), np.int64),
        n_events=np.zeros(2, np.int64),
        fired=np.zeros(max(1, NC), np.int64), ack_fired=np.zeros(max(1, NC), np.int64),
        rp_fired=np.zeros(max(1, NC), np.int64))


def engine_events_room(st: EngineState, cfg: FabricConfig) -> EngineState:
    """``st``, its event arrays grown if they lack room for one more cycle of every engine
    (the kernels drop events past the arrays' end, counting them still)."""
    need = event_rows_per_cycle(cfg)
    for name, n in (("cnps", int(st.n_events[N_CNPS])), ("rates", int(st.n_events[N_RATES]))):
        rows = getattr(st, name)
        if n + need[name] > len(rows):
            grown = np.zeros((2 * (n + need[name]), rows.shape[1]), np.int64)
            grown[:len(rows)] = rows
            st = st._replace(**{name: grown})
    return st


# -- helpers ---------------------------------------------------------------------------


@kernel(inline=True)
def _index(prm, e, peer, ch):
    """The state index of channel ``ch`` toward ``peer`` (section 10.5's state layout)."""
    return (peer - (peer > e)) * prm.C + ch


@kernel
def _classify(st, prm, e, wr, r):
    """WR row ``r``'s channel (-1 when ``dst`` names no peer) and its error status (0:
    none) under section 10.6 step 1."""
    qp, dst, length = wr[r, _QP], wr[r, _DST], wr[r, _LENGTH]
    E = prm.endpoints
    ch = _index(prm, e, dst, qp % prm.C) if dst < E and dst != e else -1
    if dst == e or dst >= E or length == 0 or qp >= prm.Q:
        status = wire.STATUS_BAD
    elif not key_allowed(st.keys, prm, e, wr[r, _LKEY], wr[r, _LADDR], length,
                         wire.ACCESS_LOCAL_READ, -1):
        status = wire.STATUS_LOCAL
    else:
        status = wire.STATUS_OK
    return ch, status


@kernel(inline=True)
def _wakeup(st, prm, e):
    """The first cycle a timer fires, the reaction point's included."""
    sc = st.scalars
    if prm.dcqcn:
        return min(sc[e, TIMER_NEXT], sc[e, RP_NEXT])
    return sc[e, TIMER_NEXT]


@kernel
def _soonest(st, e):
    """The first cycle the pacer lets a channel with a packet to send start one (NEVER:
    none), kept in ``scalars`` until the channels to send or their pacers change."""
    sc = st.scalars
    if sc[e, SOONEST] < 0:
        sc[e, SOONEST] = set_min(st.to_send, st.ready, e, NEVER)
    return sc[e, SOONEST]


# -- the uplink ------------------------------------------------------------------------


@kernel(inline=True)
def engine_free_slots(st, prm, e, ch):
    """The window slots channel number ``ch`` of endpoint ``e``
    has free (all of them toward ``e`` itself)."""
    peer = ch // prm.C
    if peer == e:
        return prm.W
    i = _index(prm, e, peer, ch % prm.C)
    return prm.W - ((st.nxt[e, i] - st.ret[e, i]) & _PSN_MASK)


@kernel(inline=True)
def engine_offer(st, prm, e):
    """The transmitter's flit in this cycle, ``(has, k, word, dst,
    length)`` (``has`` False: none). A payload word is offered once its read arrived."""
    sc = st.scalars
    length = sc[e, TX_LEN]
    k = sc[e, TX_K]
    if length == 0 or (k >= 2 and sc[e, RING_BUFFERED] == 0):
        return False, 0, np.uint64(0), 0, 0
    word = st.tx_header[e, k] if k < 2 else st.ring_word[e, sc[e, RING_HEAD]]
    return True, k, word, sc[e, TX_DST], length


@kernel(inline=True)
def _reading(st, e):
    """Payload reads to request or in flight, or a next packet that may start: the engine
    acts every cycle."""
    sc = st.scalars
    return (sc[e, RING_IN_FLIGHT] > 0
            or (sc[e, TX_LEN] > 0 and sc[e, RD_NEXT] < sc[e, TX_WORDS])
            or (sc[e, NX_LEN] > 0 and (sc[e, TX_LEN] == 0 or sc[e, NX_RD] < sc[e, NX_WORDS])))


@kernel(inline=True)
def engine_next_event(st, prm, e, cycle, wr, r):
    """``cycle`` if endpoint ``e``'s engine acts in it (with WR
    row ``r`` offered, -1: none, and nothing arriving), else the first cycle a timer of it
    fires (or NEVER)."""
    sc = st.scalars
    if (sc[e, TX_LEN] > 0 or sc[e, NX_LEN] > 0 or sc[e, N_PENDING] > 0 or sc[e, N_RETIRE] > 0
            or (prm.dcqcn and sc[e, N_CNP_PENDING] > 0)):
        return cycle
    soonest = NEVER
    if sc[e, N_SEND] > 0:
        if not prm.dcqcn:
            return cycle
        soonest = _soonest(st, e)
        if soonest <= cycle:
            return cycle
    if r >= 0:
        ch, status = _classify(st, prm, e, wr, r)
        if status:
            if sc[e, BUSY] == 0:
                return cycle
        elif (st.nxt[e, ch] - st.ret[e, ch]) & _PSN_MASK < prm.W:
            return cycle
    return min(soonest, _wakeup(st, prm, e))


# -- one cycle -------------------------------------------------------------------------


@kernel(inline=True)
def engine_step(st, prm, e, cycle, wr, r, tx_taken, rx_has, rx_src, rx_k, rx_last, rx_word,
                rx_ecn, data_paused, control_paused, memory, out):
    """Simulate ``cycle`` of endpoint ``e``'s engine and clock its edge.

    ``r`` is the WR row offered (-1: none) of the WR table ``wr``; ``tx_taken`` whether the
    flit of :func:`engine_offer` was taken; ``rx_*`` the flit delivered (``rx_has`` False:
    none; ``rx_word`` uint64); ``*_paused`` the classes the switch's PFC pauses; ``memory``
    the host memories (row ``e`` is read and written). Fills ``out`` (``OUT_*``) and
    returns whether the run made progress (a WR taken, a completion given, a packet
    retired: the fabric's stall rule).

    Compiled into its caller, so that a cycle with nothing to decide costs a few loads and
    stores; the others are :func:`_engine_cycle`'s, compiled in too.
    """
    sc = st.scalars
    out[OUT_TAKEN] = 0
    out[OUT_QP] = out[OUT_STATUS] = out[OUT_RX_QP] = out[OUT_RX_LENGTH] = 0
    out[OUT_TAG] = out[OUT_RX_SRC] = -1
    out[OUT_RETIRED] = 0
    sc[e, RETIRED] = 0
    cnp_pending = prm.dcqcn and sc[e, N_CNP_PENDING] > 0
    free = sc[e, NX_LEN] == 0
    pickable = free and (sc[e, N_PENDING] > 0 or cnp_pending or (
        sc[e, N_SEND] > 0 and (not prm.dcqcn or _soonest(st, e) <= cycle)))
    if (r < 0 and not rx_has and not tx_taken and sc[e, N_RETIRE] == 0
            and cycle < _wakeup(st, prm, e) and not _reading(st, e) and not pickable):
        return False                 # nothing to decide in this cycle
    return _engine_cycle(st, prm, e, cycle, wr, r, tx_taken, rx_has, rx_src, rx_k, rx_last,
                         rx_word, rx_ecn, data_paused, control_paused, memory, out,
                         cnp_pending, free)


@kernel(inline=True)
def _engine_cycle(st, prm, e, cycle, wr, r, tx_taken, rx_has, rx_src, rx_k, rx_last, rx_word,
                  rx_ecn, data_paused, control_paused, memory, out, cnp_pending, free):
    """:func:`engine_step`'s cycle when there is something to decide (``cnp_pending``: a
    CNP is pending; ``free``: no packet is picked next, so the transmitter may pick).

    Inlined: a call of a kernel passes every array of the state on the stack (about 600
    stores for :class:`EngineState`'s 57), which cost twice the engine's own work in a busy
    all-reduce, where every engine has something to decide in every cycle.

    Each part first decides from the state at the start of the cycle, then the updates
    apply in the order of section 10.6's steps, as in the RTL.
    """
    sc, cnt = st.scalars, st.counters
    # -- decisions, all from the state at the start of the cycle --------
    # 2. The retire unit: the slot it retires and the completion of a message's last packet.
    ret_ch, ret_last, ret_err, done, c_qp, c_tag, c_status = _retire_decision(st, prm, e, wr)
    # 1. The segmenter: a failing WR completes once the engine is drained.
    seg_ch, taken = -1, False
    if r >= 0:
        ch, status = _classify(st, prm, e, wr, r)
        if status:
            if not done and sc[e, BUSY] == 0:
                done, c_qp, c_tag, c_status = True, wr[r, _QP], wr[r, _TAG], status
                taken = True
        elif (st.nxt[e, ch] - st.ret[e, ch]) & _PSN_MASK < prm.W:
            seg_ch = ch
    # The payload read requested now (if the buffer has room): the packet sending's words,
    # then the next packet's; and the word arriving.
    request, request_word = False, np.uint64(0)
    if sc[e, RING_BUFFERED] + sc[e, RING_IN_FLIGHT] < prm.depth:
        if sc[e, TX_LEN] > 0 and sc[e, RD_NEXT] < sc[e, TX_WORDS]:
            addr = key_address(st.keys, st.pages, prm, e, sc[e, TX_KEY],
                               sc[e, TX_VA] + sc[e, RD_NEXT])
            sc[e, RD_NEXT] += 1
            request, request_word = True, memory[e, addr]
        elif sc[e, NX_LEN] > 0 and sc[e, NX_RD] < sc[e, NX_WORDS]:
            addr = key_address(st.keys, st.pages, prm, e, sc[e, NX_KEY],
                               sc[e, NX_VA] + sc[e, NX_RD])
            sc[e, NX_RD] += 1
            request, request_word = True, memory[e, addr]
    first_in_flight = (sc[e, RING_HEAD] + sc[e, RING_BUFFERED]) % prm.depth
    arriving = sc[e, RING_IN_FLIGHT] > 0 and st.ring_at[e, first_in_flight] == cycle
    # 3. The transmitter's pick: CNPs, acknowledgements, data, each while not paused.
    pick_cnp, pick_x, pick_ch = _pick_decision(st, prm, e, cycle, free, cnp_pending,
                                               data_paused, control_paused)
    # 4 and 6. The timers reaching their timeouts.
    fired, ack_fired = _timers_fired(st, prm, e, cycle, pick_x)
    # 5. The receiver.
    (ack_t, new_una, new_snd, err_psn, cnp_t, marked, vx, verdict, write_addr, rcpl_src,
     rcpl_qp, rcpl_len) = _receive(st, prm, e, rx_has, rx_src, rx_k, rx_last, rx_word, rx_ecn)

    # -- updates, in the order of the steps --------------------------------
    if seg_ch >= 0:
        taken = _segment(st, prm, e, wr, r, seg_ch)
    if ret_ch >= 0:
        _retire(st, prm, e, ret_ch, ret_last, ret_err)
    if done:
        cnt[e, _COMPLETIONS] += 1
        if c_status != wire.STATUS_OK:
            cnt[e, _ERRORS] += 1
    # 3. The latch: the packet picked, (dst, flits, BTH, RETH, payload key, va, words).
    p_dst, p_len, p_bth, p_reth, p_key, p_va, p_words = _latch(st, prm, e, wr, cycle,
                                                               pick_cnp, pick_x, pick_ch)
    # 4. Go back N on the channels timed out (a timeout yields to an ACK/NAK for it).
    for k in range(fired):
        ch = st.fired[k]
        if ch != ack_t:
            st.snd[e, ch] = st.una[e, ch]
            cnt[e, _TIMEOUTS] += 1
    # 5. An ACK/NAK heard wins over steps 3 and 4.
    if ack_t >= 0:
        st.una[e, ack_t] = new_una
        if new_snd >= 0:
            st.snd[e, ack_t] = new_snd
        if err_psn >= 0:
            st.slot_err[e, ack_t, err_psn % prm.W] = True
            st.epoch[e, ack_t] = (st.epoch[e, ack_t] + 1) % _EPOCHS
    if verdict != _V_NONE:
        _apply_verdict(st, prm, e, vx, verdict)
    # DCQCN: the notification point after the pick, then the reaction point.
    if prm.dcqcn:
        if marked >= 0:
            np_marked(st, prm, e, marked, cycle)
        if cnp_t >= 0 or pick_ch >= 0 or cycle >= sc[e, RP_NEXT]:
            rp_step(st, prm, e, cycle, cnp_t, pick_ch, p_len if pick_ch >= 0 else 0)
    if write_addr >= 0:
        memory[e, write_addr] = rx_word
    if rcpl_src >= 0:
        cnt[e, _RX_COMPLETIONS] += 1
    # 6. Acknowledgement timers.
    for k in range(ack_fired):
        st.pend[e, st.ack_fired[k]] |= _PEND_ACK
    _transmitter_edge(st, prm, e, tx_taken, request, request_word, arriving, cycle,
                      data_paused, control_paused, p_dst, p_len, p_bth, p_reth, p_key, p_va,
                      p_words)
    _refresh(st, prm, e, cycle + 1, (seg_ch, ret_ch, pick_ch), fired, ack_t, pick_x,
             ack_fired, vx if verdict != _V_NONE else -1)

    out[OUT_TAKEN] = taken
    if done:
        out[OUT_QP], out[OUT_TAG], out[OUT_STATUS] = c_qp, c_tag, c_status
    if rcpl_src >= 0:
        out[OUT_RX_SRC], out[OUT_RX_QP], out[OUT_RX_LENGTH] = rcpl_src, rcpl_qp, rcpl_len
    out[OUT_RETIRED] = sc[e, RETIRED]
    return taken or done or ret_ch >= 0


@kernel(inline=True)
def _retire_decision(st, prm, e, wr):
    """Section 10.6 step 2's decision: the channel whose oldest slot retires (-1: none),
    whether that slot is its message's last packet and its error bit, and the completion
    ``(done, qp, tag, status)`` of a last packet."""
    sc = st.scalars
    ret_ch, ret_last, ret_err = -1, False, False
    done, c_qp, c_tag, c_status = False, 0, -1, 0
    if sc[e, N_RETIRE] > 0:
        ret_ch = set_first(st.to_retire, e, sc[e, RET_PTR])
        slot = st.ret[e, ret_ch] % prm.W
        row = st.slot_row[e, ret_ch, slot]
        ret_last = st.slot_off[e, ret_ch, slot] + prm.M >= wr[row, _LENGTH]
        ret_err = st.slot_err[e, ret_ch, slot]
        if ret_last:
            failed = st.msgerr[e, ret_ch] or ret_err
            done, c_qp, c_tag = True, wr[row, _QP], wr[row, _TAG]
            c_status = wire.STATUS_REMOTE if failed else wire.STATUS_OK
    return ret_ch, ret_last, ret_err, done, c_qp, c_tag, c_status


@kernel(inline=True)
def _retire(st, prm, e, ch, last, err):
    """Step 2's update: channel ``ch``'s oldest slot retires."""
    sc = st.scalars
    sc[e, RETIRED] = 1
    nxt_ret = (st.ret[e, ch] + 1) & _PSN_MASK
    st.ret[e, ch] = nxt_ret
    if nxt_ret == st.nxt[e, ch]:
        sc[e, BUSY] -= 1
    st.msgerr[e, ch] = False if last else (st.msgerr[e, ch] or err)
    sc[e, RET_PTR] = (ch + 1) % prm.NC


@kernel(inline=True)
def _pick_decision(st, prm, e, cycle, free, cnp_pending, data_paused, control_paused):
    """Step 3's pick while no packet is picked next (``free``): a CNP, else the context
    owed an acknowledgement (-1: none), else the channel with data to send (-1: none);
    control and data each only while their class is not paused."""
    sc = st.scalars
    pick_cnp, pick_x, pick_ch = False, -1, -1
    if free:
        if cnp_pending and not control_paused:
            pick_cnp = True          # the notification point names the context at the latch
        elif sc[e, N_PENDING] > 0 and not control_paused:
            pick_x = set_first(st.pending, e, 0)
        elif sc[e, N_SEND] > 0 and not data_paused:
            if not prm.dcqcn:
                pick_ch = set_first(st.to_send, e, sc[e, TX_PTR])
            elif _soonest(st, e) <= cycle:
                # The channels whose pacers allow a start, the round robin's pick among them.
                pick_ch = set_first_at_most(st.to_send, st.ready, e, sc[e, TX_PTR], cycle)
    return pick_cnp, pick_x, pick_ch


@kernel(inline=True)
def _timers_fired(st, prm, e, cycle, pick_x):
    """Steps 4 and 6: the channels whose retransmission timers and the contexts whose
    acknowledgement timers time out at this cycle's edge, into ``st.fired`` and
    ``st.ack_fired``; returns their counts. A timer holding t in this cycle fires when
    t + 1 reaches its timeout; a context picked in this cycle (``pick_x``) is not timed
    out."""
    sc = st.scalars
    fired = ack_fired = 0
    if cycle >= sc[e, TIMER_NEXT]:
        edge = cycle + 1
        ch = sc[e, RTO_HEAD]
        while ch >= 0 and st.rto_base[e, ch] + prm.rto <= edge:
            if st.rto_base[e, ch] + prm.rto == edge:
                st.fired[fired] = ch
                fired += 1
            ch = st.rto_next[e, ch]
        x = sc[e, ACK_HEAD]
        while x >= 0 and st.ack_base[e, x] + prm.ato <= edge:
            if st.ack_base[e, x] + prm.ato == edge and x != pick_x:
                st.ack_fired[ack_fired] = x
                ack_fired += 1
            x = st.ack_next[e, x]
    return fired, ack_fired


@kernel(inline=True)
def _latch(st, prm, e, wr, cycle, pick_cnp, pick_x, pick_ch):
    """Step 3's latch: the packet picked as ``(dst, flits, BTH, RETH, payload key, va,
    words)`` (0 flits: none)."""
    if pick_cnp:
        x = np_pick(st, e)
        record_cnp(st, prm, e, cycle, x)
        bth = bth_pack(wire.CNP_OPCODE, 0, x % prm.C, 0, 0, 0, 0)
        bth |= _put(hcs(bth, np.uint64(0)), _B_HCS)
        st.counters[e, _CNP_SENT] += 1
        return peer_of(prm, e, x), 1, bth, np.uint64(0), 0, 0, 0
    if pick_x >= 0:
        bth = _pick_acknowledgement(st, prm, e, pick_x)
        return peer_of(prm, e, pick_x), 1, bth, np.uint64(0), 0, 0, 0
    if pick_ch >= 0:
        bth, reth, key, va, words = _pick_data(st, prm, e, wr, pick_ch)
        return peer_of(prm, e, pick_ch), 2 + words, bth, reth, key, va, words
    return 0, 0, np.uint64(0), np.uint64(0), 0, 0, 0


@kernel(inline=True)
def _refresh(st, prm, e, start, changed, fired, ack_t, pick_x, ack_fired, verdict_x):
    """Bring the sets and the timers up to date with the state at the end of the cycle, in
    the order of the steps: the ``changed`` channels (segmented, retired, picked; -1: none),
    the channels timed out (``st.fired``) and the one acknowledged (``ack_t``), whose timers
    restart, the context picked (``pick_x``) and those timed out (``st.ack_fired``), whose
    timers restart, and the one a verdict changed (``verdict_x``). ``start``: a timer
    restarted at 0 holds 0 in the next cycle."""
    touched = False
    for ch in changed:
        if ch >= 0:
            _refresh_channel(st, prm, e, ch, False, start)
            touched = True
    for k in range(fired):
        _refresh_channel(st, prm, e, st.fired[k], True, start)
        touched = True
    if ack_t >= 0:
        _refresh_channel(st, prm, e, ack_t, True, start)
        touched = True
    if pick_x >= 0:
        _refresh_context(st, prm, e, pick_x, True, start)
        touched = True
    for k in range(ack_fired):
        _refresh_context(st, prm, e, st.ack_fired[k], True, start)
        touched = True
    if verdict_x >= 0:
        _refresh_context(st, prm, e, verdict_x, False, start)
        touched = True
    if touched:
        sc = st.scalars
        sc[e, SOONEST] = -1
        rto = timer_first(st.rto_base, sc, e, RTO_HEAD)
        ato = timer_first(st.ack_base, sc, e, ACK_HEAD)
        sc[e, TIMER_NEXT] = min(NEVER if rto == NEVER else rto + prm.rto - 1,
                                NEVER if ato == NEVER else ato + prm.ato - 1)


@kernel
def _segment(st, prm, e, wr, r, ch):
    """Write WR row ``r``'s packet at ``seg_off`` to slot ``nxt mod W`` of channel ``ch``;
    returns whether it was the last (the WR is taken)."""
    sc = st.scalars
    off = sc[e, SEG_OFF]
    last = off + prm.M >= wr[r, _LENGTH]
    nxt = st.nxt[e, ch]
    slot = nxt % prm.W
    st.slot_row[e, ch, slot] = r
    st.slot_off[e, ch, slot] = off
    st.slot_err[e, ch, slot] = False
    if nxt == st.ret[e, ch]:
        sc[e, BUSY] += 1
    st.nxt[e, ch] = (nxt + 1) & _PSN_MASK
    sc[e, SEG_OFF] = 0 if last else off + prm.M
    return last


@kernel
def _pick_acknowledgement(st, prm, e, x):
    """Step 3 for receive context ``x``: clear the context; returns the one-flit ACK/NAK's
    BTH."""
    pend, epsn = st.pend[e, x], st.epsn[e, x]
    if pend & _PEND_ACC:
        syndrome, psn = wire.SYN_NAK_ACCESS, st.denied[e, x]
    elif pend & _PEND_SEQ:
        syndrome, psn = wire.SYN_NAK_SEQ, epsn
    else:
        syndrome, psn = wire.SYN_ACK, epsn - 1
    bth = bth_pack(wire.ACK_OPCODE, 0, x % prm.C, 0, syndrome, 0, psn & _PSN_MASK)
    bth |= _put(hcs(bth, np.uint64(0)), _B_HCS)
    st.pend[e, x] = 0
    st.unacked[e, x] = 0
    st.counters[e, _NAKS if syndrome != wire.SYN_ACK else _TX_ACKS] += 1
    return bth


@kernel
def _pick_data(st, prm, e, wr, ch):
    """Step 3 for channel ``ch``: the packet in slot ``snd mod W`` for the transmitter,
    ``(BTH, RETH, payload key, virtual address, words)``."""
    s = st.snd[e, ch]
    slot = s % prm.W
    row, off = st.slot_row[e, ch, slot], np.int64(st.slot_off[e, ch, slot])
    length = wr[row, _LENGTH]
    first, last = off == 0, off + prm.M >= length
    words = length - off if last else prm.M
    opcode = _PACKET_OPCODE[(wr[row, _OPCODE] & 1) * 4 + first * 2 + last]
    bth = bth_pack(opcode, last, ch % prm.C, st.epoch[e, ch], 0, wr[row, _QP], s)
    reth = reth_pack(wr[row, _RKEY], wr[row, _RADDR], length, off)
    bth |= _put(hcs(bth, reth), _B_HCS)
    st.snd[e, ch] = (s + 1) & _PSN_MASK
    if s == st.hsn[e, ch]:
        st.hsn[e, ch] = (s + 1) & _PSN_MASK
    else:
        st.counters[e, _RETRANSMISSIONS] += 1
    st.counters[e, _TX_DATA] += 1
    st.scalars[e, TX_PTR] = (ch + 1) % prm.NC
    return bth, reth, wr[row, _LKEY], (wr[row, _LADDR] + off) & _VA_MASK, words


@kernel
def _transmitter_edge(st, prm, e, tx_taken, request, request_word, arriving, cycle,
                      data_paused, control_paused, p_dst, p_len, p_bth, p_reth, p_key, p_va,
                      p_words):
    """Clock the read buffer (the word taken leaves, the word arriving enters, the word
    requested goes in flight) and the transmitter: free after its last flit is taken; the
    packet picked (``p_len`` > 0) starts if it is free, else waits as the next; a next
    packet starts once it is free and its class is not paused."""
    sc = st.scalars
    depth = prm.depth
    if arriving:
        sc[e, RING_IN_FLIGHT] -= 1
        sc[e, RING_BUFFERED] += 1
    if request:
        at = (sc[e, RING_HEAD] + sc[e, RING_BUFFERED] + sc[e, RING_IN_FLIGHT]) % depth
        st.ring_word[e, at] = request_word
        st.ring_at[e, at] = cycle + prm.latency
        sc[e, RING_IN_FLIGHT] += 1
    if tx_taken:
        if sc[e, TX_K] >= 2:
            sc[e, RING_HEAD] = (sc[e, RING_HEAD] + 1) % depth
            sc[e, RING_BUFFERED] -= 1
        sc[e, TX_K] += 1
        if sc[e, TX_K] == sc[e, TX_LEN]:
            sc[e, TX_LEN] = 0
    if p_len > 0 and sc[e, TX_LEN] == 0:
        sc[e, TX_LEN], sc[e, TX_DST], sc[e, TX_K], sc[e, RD_NEXT] = p_len, p_dst, 0, 0
        st.tx_header[e, 0], st.tx_header[e, 1] = p_bth, p_reth
        sc[e, TX_KEY], sc[e, TX_VA], sc[e, TX_WORDS] = p_key, p_va, p_words
    elif p_len > 0:
        sc[e, NX_LEN], sc[e, NX_DST], sc[e, NX_RD] = p_len, p_dst, 0
        st.tx_header[e, 2], st.tx_header[e, 3] = p_bth, p_reth
        sc[e, NX_KEY], sc[e, NX_VA], sc[e, NX_WORDS] = p_key, p_va, p_words
    elif (sc[e, NX_LEN] > 0 and sc[e, TX_LEN] == 0
          and not (control_paused if sc[e, NX_LEN] == 1 else data_paused)):
        sc[e, TX_LEN], sc[e, TX_DST], sc[e, TX_K] = sc[e, NX_LEN], sc[e, NX_DST], 0
        sc[e, RD_NEXT] = sc[e, NX_RD]
        st.tx_header[e, 0], st.tx_header[e, 1] = st.tx_header[e, 2], st.tx_header[e, 3]
        sc[e, TX_KEY], sc[e, TX_VA] = sc[e, NX_KEY], sc[e, NX_VA]
        sc[e, TX_WORDS] = sc[e, NX_WORDS]
        sc[e, NX_LEN] = 0


# -- acknowledgements and the receiver (step 5) ----------------------------------------


@kernel
def _acknowledgement(st, e, t, syndrome, a):
    """Decide on an ACK/NAK of PSN ``a`` for channel ``t``: ``(t, una, snd, err psn)``
    to apply (-1: unchanged), ``t`` -1 for a stale one (section 10.6 step 5)."""
    una = st.una[e, t]
    span = (st.snd[e, t] - una) & _PSN_MASK     # una <= x < snd  <=>  (x - una) < span
    into = (a - una) & _PSN_MASK
    sent = (st.hsn[e, t] - una) & _PSN_MASK
    nxt = (a + 1) & _PSN_MASK
    if syndrome == wire.SYN_ACK and into < sent:
        return t, nxt, nxt if into >= span else -1, -1
    if syndrome == wire.SYN_NAK_SEQ and into <= span:
        return t, a, a, -1
    if syndrome == wire.SYN_NAK_ACCESS and into < sent:
        return t, nxt, nxt, a
    return -1, -1, -1, -1


@kernel
def _receive(st, prm, e, rx_has, src, k, last_flit, word, ecn):
    """Decide on the flit delivered (section 10.6 step 5): ``(ack channel, una, snd,
    err psn, CNP channel, CE-marked context, verdict's context, verdict, write address,
    receive completion's source, QP, length)``, -1 (``_V_NONE``) where none.

    Flit 0 is latched, and a one-flit packet handled now; flit 1 decides a data packet's
    verdict (counted now, applied at its last flit); flits 2.. are written if the packet
    was accepted.
    """
    sc, cnt = st.scalars, st.counters
    ack_t, new_una, new_snd, err_psn, cnp_t, marked = -1, -1, -1, -1, -1, -1
    vx, verdict, write_addr, rcpl_src, rcpl_qp, rcpl_len = -1, _V_NONE, -1, -1, 0, 0
    if rx_has:
        if k == 0:
            st.rx_bth[e] = word
            if last_flit:
                if hcs(word, np.uint64(0)) != _get(word, _B_HCS):
                    cnt[e, _CORRUPT] += 1
                else:
                    t = _index(prm, e, src, _get(word, _B_CH))
                    if _get(word, _B_OPCODE) == wire.CNP_OPCODE:
                        cnt[e, _CNP_HANDLED] += 1
                        if prm.dcqcn:
                            cnp_t = t
                    else:
                        ack_t, new_una, new_snd, err_psn = _acknowledgement(
                            st, e, t, _get(word, _B_SYNDROME), _get(word, _B_PSN))
        elif k == 1:
            _verdict(st, prm, e, src, st.rx_bth[e], word)
            if sc[e, RX_X] >= 0 and ecn == CE:
                cnt[e, _ECN_MARKED] += 1
                marked = sc[e, RX_X]
        else:
            if sc[e, RX_WRITE]:
                write_addr = key_address(st.keys, st.pages, prm, e, sc[e, RX_KEY],
                                         sc[e, RX_VA] + k - 2)
                if last_flit:
                    rcpl_src, rcpl_qp, rcpl_len = (sc[e, RX_RCPL_SRC], sc[e, RX_RCPL_QP],
                                                   sc[e, RX_RCPL_LEN])
            if last_flit:
                # The context learns of the packet once it is written.
                vx, verdict = sc[e, RX_X], sc[e, RX_VERDICT]
    return (ack_t, new_una, new_snd, err_psn, cnp_t, marked, vx, verdict, write_addr,
            rcpl_src, rcpl_qp, rcpl_len)


@kernel
def _verdict(st, prm, e, src, bth, reth):
    """Decide on a data packet at its RETH (section 10.6 step 5): latch its context and
    verdict (context -1 and no verdict if corrupt) and what the payload flits need (write
    key and address, receive completion)."""
    sc, cnt = st.scalars, st.counters
    sc[e, RX_WRITE] = 0
    sc[e, RX_X], sc[e, RX_VERDICT] = -1, _V_NONE
    if hcs(bth, reth) != _get(bth, _B_HCS):
        cnt[e, _CORRUPT] += 1
        return
    x = _index(prm, e, src, _get(bth, _B_CH))
    sc[e, RX_X] = x
    psn, epsn, epoch = _get(bth, _B_PSN), st.epsn[e, x], _get(bth, _B_EPOCH)
    awaiting = st.awaiting[e, x]
    ahead = (epoch - st.epoch_in[e, x]) % _EPOCHS
    if awaiting and ahead == 0 and psn == st.denied[e, x]:
        cnt[e, _DUPLICATES] += 1
        sc[e, RX_VERDICT] = _V_RENAK
        return
    if ahead != (1 if awaiting else 0):
        # Awaiting: the sender has not heard the NAK (access) yet; or a stale packet from
        # an earlier epoch.
        cnt[e, _OUT_OF_SEQUENCE] += 1
        sc[e, RX_VERDICT] = _V_BLOCKED
        return
    sc[e, RX_EPOCH] = epoch
    if psn == epsn:
        rkey, raddr = _get(reth, _R_RKEY), _get(reth, _R_RADDR)
        mlen, offset = _get(reth, _R_MLEN), _get(reth, _R_OFFSET)
        if not key_allowed(st.keys, prm, e, rkey, raddr, mlen, wire.ACCESS_REMOTE_WRITE, src):
            sc[e, RX_VERDICT], sc[e, RX_PSN] = _V_DENIED, psn
            return
        sc[e, RX_WRITE] = 1
        sc[e, RX_KEY], sc[e, RX_VA] = rkey, raddr + offset
        opcode = _get(bth, _B_OPCODE)
        if _SEND_OPCODE[opcode] and _LAST_OPCODE[opcode]:
            sc[e, RX_RCPL_SRC], sc[e, RX_RCPL_QP], sc[e, RX_RCPL_LEN] = src, _get(bth, _B_DQP), mlen
        else:
            sc[e, RX_RCPL_SRC] = -1
        sc[e, RX_VERDICT], sc[e, RX_ACK_REQ] = _V_ACCEPT, _get(bth, _B_ACK_REQ)
        return
    if psn != epsn and (epsn - psn) & _PSN_MASK < wire.PSN_MOD // 2:
        cnt[e, _DUPLICATES] += 1
        sc[e, RX_VERDICT] = _V_DUPLICATE
        return
    cnt[e, _OUT_OF_SEQUENCE] += 1
    sc[e, RX_VERDICT] = _V_GAP


@kernel
def _apply_verdict(st, prm, e, x, verdict):
    """Update context ``x`` with the verdict latched (after the pick's clearing of it in
    this cycle)."""
    sc = st.scalars
    if verdict == _V_BLOCKED:
        return
    if verdict == _V_RENAK:
        st.pend[e, x] |= _PEND_ACC
        return
    # A live packet: its epoch is the context's (a switch ends the wait).
    st.awaiting[e, x] = False
    st.epoch_in[e, x] = sc[e, RX_EPOCH]
    if verdict == _V_DENIED:
        st.pend[e, x] |= _PEND_ACC
        st.epsn[e, x] = (st.epsn[e, x] + 1) & _PSN_MASK
        st.awaiting[e, x] = True
        st.denied[e, x] = sc[e, RX_PSN]
    elif verdict == _V_DUPLICATE:
        st.pend[e, x] |= _PEND_ACK
    elif verdict == _V_GAP:
        if not st.nak_sent[e, x]:
            st.pend[e, x] |= _PEND_SEQ
            st.nak_sent[e, x] = True
    else:
        st.epsn[e, x] = (st.epsn[e, x] + 1) & _PSN_MASK
        st.nak_sent[e, x] = False
        st.unacked[e, x] += 1          # already 0 if picked in this cycle
        if sc[e, RX_ACK_REQ] or st.unacked[e, x] >= prm.ack_every:
            st.pend[e, x] |= _PEND_ACK


# -- bookkeeping -----------------------------------------------------------------------


@kernel
def _refresh_channel(st, prm, e, ch, reset, start):
    """Bring channel ``ch``'s set memberships and retransmission timer up to date at the
    end of the cycle (``reset``: the timer restarts at 0, from ``start``)."""
    sc = st.scalars
    snd, una = st.snd[e, ch], st.una[e, ch]
    set_put(st.to_send, sc, e, N_SEND, ch, snd != st.nxt[e, ch])
    set_put(st.to_retire, sc, e, N_RETIRE, ch, st.ret[e, ch] != una)
    if una == snd:
        timer_remove(st.rto_base, st.rto_prev, st.rto_next, sc, e, RTO_HEAD, RTO_TAIL, ch)
    elif reset or st.rto_base[e, ch] == NEVER:
        timer_start(st.rto_base, st.rto_prev, st.rto_next, sc, e, RTO_HEAD, RTO_TAIL, ch,
                    start)


@kernel
def _refresh_context(st, prm, e, x, reset, start):
    """Bring context ``x``'s pending bit and acknowledgement timer up to date likewise."""
    sc = st.scalars
    set_put(st.pending, sc, e, N_PENDING, x, st.pend[e, x] != 0)
    if not st.unacked[e, x]:
        timer_remove(st.ack_base, st.ack_prev, st.ack_next, sc, e, ACK_HEAD, ACK_TAIL, x)
    elif reset or st.ack_base[e, x] == NEVER:
        timer_start(st.ack_base, st.ack_prev, st.ack_next, sc, e, ACK_HEAD, ACK_TAIL, x, start)


# -- reporting (Python) ----------------------------------------------------------------


def engine_events(st: EngineState) -> tuple[np.ndarray, np.ndarray]:
    """The CNPs and rate changes recorded, as ``RdmaRecords.cnps`` and ``.rates`` hold them
    (``records.event_rows``: sorted by every column in turn)."""
    n_cnps, n_rates = int(st.n_events[N_CNPS]), int(st.n_events[N_RATES])
    if n_cnps > len(st.cnps) or n_rates > len(st.rates):
        raise RuntimeError("engine events dropped: call engine_events_room before each cycle")
    return (event_rows(map(tuple, st.cnps[:n_cnps].tolist()), CNP_COLUMNS),
            event_rows(map(tuple, st.rates[:n_rates].tolist()), RATE_COLUMNS))


def engine_counters(st: EngineState) -> dict[str, list[int]]:
    """The engines' counters as ``RdmaRecords.counters``: per name, per endpoint."""
    return {name: st.counters[:, k].tolist() for k, name in enumerate(RDMA_COUNTERS)}


def engine_busy_channels(st: EngineState, e: int) -> list[int]:
    """State indices of endpoint ``e``'s channels holding packets not yet retired."""
    return np.flatnonzero(st.ret[e] != st.nxt[e]).tolist()


def describe_channel(st: EngineState, prm: EngineParams, e: int, i: int) -> str:
    """One line of the state of endpoint ``e``'s channel at state index ``i``
    (as the fabric's ``stuck`` names it, section 10.11)."""
    rank = i // prm.C
    peer = rank + (rank >= e)
    return (f"endpoint {e} channel {peer * prm.C + i % prm.C} (peer {peer}, "
            f"index {i % prm.C}): una {st.una[e, i]} snd {st.snd[e, i]} nxt {st.nxt[e, i]} "
            f"ret {st.ret[e, i]} hsn {st.hsn[e, i]}")
