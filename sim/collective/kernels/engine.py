"""Golden model of the collective engine at every accelerator (section 15.8), as numba
kernels for the compiled run loop of the RDMA model; its RTL is
:mod:`superfabric.hdl.collective.engine`.

Each accelerator's engine walks its schedule (section 15.2) on its RDMA engine: a step,
once its ``wait`` is met, posts WRITEs of its chunk from the buffer to the peer's staging
area for the slot, then a one-word SEND of the chunk's notification (from the outbox) to
the peer's notification word for the slot, all on one QP, so the channel's order puts the
data in the peer's memory before the notification's receive completion. The receiving
engine counts receive completions; its apply unit, when idle and owed one, reads the next
slot's notification word and, when it is there, adds (or copies) the staged chunk into
the buffer, one word a cycle. The host memory layout is
:class:`~superfabric.sim.collective.host_memory.Layout`.

One :class:`CollectiveState` holds every accelerator's engine as arrays; each kernel takes
the accelerator ``a`` (which is endpoint ``a``, its host memory row ``memory[a]``). The
schedule's steps are flat arrays, accelerator ``a``'s at ``step_base[a] .. step_base[a + 1]``;
its receive slots' cycles likewise at ``slot_base[a]``. Per accelerator the few integers
that change are one row of ``engine`` (columns :data:`STARTED` ...), so an engine with
nothing to do costs a handful of reads a cycle: :func:`collective_step`
and :func:`collective_next_event` are compiled into their callers (about 13 ns an idle
accelerator's cycle, both), the rare starts and reads (:func:`_start`, :func:`_read`) called.

The apply unit computes a slot's words when it reads its notification (from the memory at
that cycle) and keeps them in its row of ``writes`` until
each is due: one slot's words at a time, since the next read waits for the last write.
The adds are :mod:`superfabric.sim.collective.adder`'s, lane by lane on the 32-bit
halves of the 64-bit words (:func:`lane_add`).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import NamedTuple

import numpy as np

from ....config import FabricConfig
from ....formats.collective import (DEFAULT_NAN, LOCAL_KEY, NOTIFY_FIELDS, REMOTE_KEY,
                                    write_words)
from ....formats.rdma_wire import OP_SEND, OP_WRITE, STATUS_OK, payload_words
from ...kernel import kernel
from ...rdma.kernels.channels import NEVER
from ..apply import apply_cycles
from ..host_memory import Layout, words_of
from ..reference import DTYPES

__all__ = ["NEVER", "CollectiveParams", "CollectiveState", "collective_params",
           "collective_state", "collective_posts", "collective_total_wrs", "lane_add",
           "collective_received", "collective_completed", "collective_next_event",
           "collective_step", "collective_done", "timeline", "completion_cycle", "stuck",
           "EngineView", "engines_of",
           "POST_COLUMNS", "STARTED", "APPLIED", "DONE_AT", "ARRIVALS", "NEW", "STALE",
           "BUSY_UNTIL", "FINISH", "ERRORS", "WRITE_AT", "WRITE_FIRST", "WRITE_COUNT",
           "WRITE_HEAD", "ENGINE_COLUMNS", "DONE"]


#: The columns of ``CollectiveState.engine``, per accelerator: steps started, slots applied,
#: the cycle after it was done (-1: not yet), receive completions counted, those given in
#: this cycle, the arrivals when a notification read found nothing (-1: never), the apply
#: unit's last busy cycle, the slot it works on (-1: none), WRs completed with an error; its
#: pending writes: the cycle of the first, its word address, how many, how many written.
(STARTED, APPLIED, DONE_AT, ARRIVALS, NEW, STALE, BUSY_UNTIL, FINISH, ERRORS, WRITE_AT,
 WRITE_FIRST, WRITE_COUNT, WRITE_HEAD) = range(13)
ENGINE_COLUMNS = 13

#: ``CollectiveState.scalars``: accelerators whose ``done_at`` is set (the device is done when
#: all are).
DONE = 0

#: A WR an engine posts, as ``send_queues_add`` takes it.
POST_COLUMNS = ("post", "src", "qp", "dst", "opcode", "lkey", "laddr", "rkey", "raddr",
                "length")


def _field(name: str) -> tuple[int, int]:
    """The shift and mask of notification field ``name`` (``NOTIFY_FIELDS``, LSB first)."""
    offset = 0
    for field, width in NOTIFY_FIELDS:
        if field == name:
            return offset, (1 << width) - 1
        offset += width
    raise KeyError(name)


_VALID, _REDUCE, _PARITY, _DST, _LENGTH = (_field(n) for n in
                                           ("valid", "reduce", "parity", "dst", "length"))
_VALID_SHIFT, _VALID_MASK = np.uint64(_VALID[0]), np.uint64(_VALID[1])
_REDUCE_SHIFT, _REDUCE_MASK = np.uint64(_REDUCE[0]), np.uint64(_REDUCE[1])
_PARITY_SHIFT, _PARITY_MASK = np.uint64(_PARITY[0]), np.uint64(_PARITY[1])
_DST_SHIFT, _DST_MASK = np.uint64(_DST[0]), np.uint64(_DST[1])
_LENGTH_SHIFT, _LENGTH_MASK = np.uint64(_LENGTH[0]), np.uint64(_LENGTH[1])
_LOW = np.uint64(0xFFFFFFFF)
_HALF = np.uint64(32)
_SIGN_OFF = np.uint64(0x7FFFFFFF)
_INFINITY = np.uint64(0x7F800000)
_QUIET = np.uint64(0x00400000)
_DEFAULT_NAN = np.uint64(DEFAULT_NAN)


class CollectiveParams(NamedTuple):
    """The configuration as the kernels read it (integers; ``binary32`` 0 or 1)."""

    accelerators: int
    latency: int          # rdma.dma_latency
    qps: int              # QPs per endpoint: a step's QP is its peer mod this
    piece: int            # words of every WRITE of a chunk but its last
    binary32: int         # 1: binary32 adds, 0: int32
    outbox: int           # the Layout's addresses
    staging: int
    capacity: int
    notify: int
    max_posts: int        # the most WRs one step posts


class CollectiveState(NamedTuple):
    """Every accelerator's engine; see the module's text for the layout."""

    step_base: np.ndarray    # int64 [A + 1]
    step_peer: np.ndarray    # int64 [steps], the schedule's fields that the engine reads
    step_src: np.ndarray
    step_length: np.ndarray
    step_slot: np.ndarray
    step_wait: np.ndarray
    slot_base: np.ndarray    # int64 [A + 1]
    started: np.ndarray      # int64 [steps]: the cycle each step started (-1: not yet)
    applied_at: np.ndarray   # int64 [slots]: the cycle each slot was applied (-1: not yet)
    engine: np.ndarray       # int64 [A, ENGINE_COLUMNS]
    seen: np.ndarray         # uint64 [A]: the next slot's notification word
    writes: np.ndarray       # uint64 [A, capacity + 1]: the words of the slot being applied
    scalars: np.ndarray      # int64 [1]: DONE
    lanes: np.ndarray        # uint32 [3]: scratch of lane_add, and ...
    lane_values: np.ndarray  # float32 [3]: ... the same memory as binary32


def _binary32(dtype: str) -> int:
    """1 for a binary32 element type, 0 for int32 (``reference.DTYPES``'s names)."""
    return int(DTYPES[dtype] is np.float32)


def _posts_of(cfg: FabricConfig, step) -> int:
    """The WRs a step posts: its WRITEs and its notification's SEND."""
    piece = write_words(payload_words(cfg.switch.max_packet_flits))
    return -(-words_of(step.src, step.length)[1] // piece) + 1


def collective_params(cfg: FabricConfig, schedule, layout: Layout,
                      dtype: str) -> CollectiveParams:
    """The kernels' view of ``cfg``, the schedule's layout and the element type."""
    rd = cfg.rdma
    steps = [s for steps_ in schedule.steps for s in steps_]
    return CollectiveParams(
        accelerators=len(schedule.steps), latency=rd.dma_latency,
        qps=rd.per_endpoint(cfg.endpoints),
        piece=write_words(payload_words(cfg.switch.max_packet_flits)),
        binary32=_binary32(dtype), outbox=layout.outbox, staging=layout.staging,
        capacity=layout.capacity, notify=layout.notify,
        max_posts=max((_posts_of(cfg, s) for s in steps), default=1))


def collective_state(cfg: FabricConfig, schedule, layout: Layout,
                     dtype: str) -> CollectiveState:
    """Every accelerator's engine before cycle 0 (``dtype`` only checked here: the params
    carry it)."""
    _binary32(dtype)
    A = len(schedule.steps)
    counts = [len(s) for s in schedule.steps]
    step_base = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    slot_base = np.concatenate([[0], np.cumsum(schedule.slots)]).astype(np.int64)
    flat = [s for steps in schedule.steps for s in steps]

    def column(name):
        return np.array([int(getattr(s, name)) for s in flat], np.int64)

    engine = np.zeros((A, ENGINE_COLUMNS), np.int64)
    engine[:, STALE] = engine[:, BUSY_UNTIL] = engine[:, FINISH] = -1
    idle = np.array([not counts[a] and not schedule.slots[a] for a in range(A)], bool)
    engine[:, DONE_AT] = np.where(idle, 0, -1)
    lanes = np.zeros(3, np.uint32)
    return CollectiveState(
        step_base=step_base, step_peer=column("peer"), step_src=column("src"),
        step_length=column("length"), step_slot=column("slot"), step_wait=column("wait"),
        slot_base=slot_base, started=np.full(len(flat), -1, np.int64),
        applied_at=np.full(int(slot_base[-1]), -1, np.int64), engine=engine,
        seen=np.zeros(A, np.uint64), writes=np.zeros((A, layout.capacity + 1), np.uint64),
        scalars=np.array([int(idle.sum())], np.int64), lanes=lanes,
        lane_values=lanes.view(np.float32))


def collective_posts(prm: CollectiveParams) -> np.ndarray:
    """The array :func:`collective_step` writes one step's WRs into."""
    return np.zeros((prm.max_posts, len(POST_COLUMNS)), np.int64)


def collective_total_wrs(cfg: FabricConfig, schedule) -> int:
    """Every WR the engines post in a run of ``schedule`` (the send queues' room for them)."""
    return sum(_posts_of(cfg, s) for steps in schedule.steps for s in steps)


@kernel(inline=True)
def lane_add(here, staged, binary32, lanes, lane_values):
    """``here + staged`` as the adder (``adder.add``), on 32-bit patterns held in uint64:
    int32 with wrap-around; binary32 rounded to nearest even, a NaN sum being the buffer's
    NaN quieted, else the chunk's, else :data:`DEFAULT_NAN`. ``lanes`` and ``lane_values``
    are one scratch memory seen as uint32 and float32 (a bit cast without allocation)."""
    if not binary32:
        return (here + staged) & _LOW
    lanes[0] = here
    lanes[1] = staged
    lane_values[2] = lane_values[0] + lane_values[1]
    total = np.uint64(lanes[2])
    if total & _SIGN_OFF <= _INFINITY:
        return total
    if here & _SIGN_OFF > _INFINITY:
        return here | _QUIET
    if staged & _SIGN_OFF > _INFINITY:
        return staged | _QUIET
    return _DEFAULT_NAN


@kernel(inline=True)
def _may_start(st, a):
    """The next step's wait is met."""
    i = st.step_base[a] + st.engine[a, STARTED]
    return i < st.step_base[a + 1] and st.step_wait[i] <= st.engine[a, APPLIED]


@kernel(inline=True)
def _may_read(st, a, cycle):
    """The apply unit is idle and owed a slot it has not found missing."""
    row = st.engine[a]
    return (cycle > row[BUSY_UNTIL] and row[ARRIVALS] > row[APPLIED]
            and row[ARRIVALS] > row[STALE]
            and row[APPLIED] < st.slot_base[a + 1] - st.slot_base[a])


@kernel(inline=True)
def collective_received(st, a):
    """The RDMA engine of ``a`` gave a receive completion: a notification has landed."""
    st.engine[a, NEW] += 1


@kernel(inline=True)
def collective_completed(st, a, status):
    """The RDMA engine of ``a`` completed a WR with ``status``."""
    if status != STATUS_OK:
        st.engine[a, ERRORS] += 1


@kernel(inline=True)
def collective_next_event(st, prm, a, cycle):
    """``cycle`` if engine ``a`` acts in it, else :data:`NEVER`."""
    if cycle <= st.engine[a, BUSY_UNTIL] or _may_start(st, a) or _may_read(st, a, cycle):
        return cycle
    return NEVER


@kernel(inline=True)
def collective_done(st, prm):
    """Every engine's ``done_at`` is set (after a step): the run may end."""
    return st.scalars[DONE] == prm.accelerators


@kernel(inline=True)
def _post(posts, n, post, src, qp, dst, opcode, lkey, laddr, rkey, raddr, length):
    """Row ``n`` of ``posts``: a WR as ``send_queues_add`` takes it."""
    row = posts[n]
    row[0], row[1], row[2], row[3], row[4] = post, src, qp, dst, opcode
    row[5], row[6], row[7], row[8], row[9] = lkey, laddr, rkey, raddr, length


@kernel
def _start(st, prm, a, cycle, posts):
    """Start the next step: its WRITEs and its notification's SEND into ``posts``, offered
    from the next cycle; returns how many."""
    k = st.engine[a, STARTED]
    i = st.step_base[a] + k
    peer, src, length, slot = st.step_peer[i], st.step_src[i], st.step_length[i], st.step_slot[i]
    qp = peer % prm.qps
    first = src // 2
    words = (src % 2 + length + 1) // 2 if length else 0
    staging = prm.staging + slot * prm.capacity
    n = 0
    for off in range(0, words, prm.piece):
        _post(posts, n, cycle + 1, a, qp, peer, OP_WRITE, LOCAL_KEY, first + off, REMOTE_KEY,
              staging + off, min(prm.piece, words - off))
        n += 1
    _post(posts, n, cycle + 1, a, qp, peer, OP_SEND, LOCAL_KEY, prm.outbox + k, REMOTE_KEY,
          prm.notify + slot, 1)
    st.started[i] = cycle
    st.engine[a, STARTED] = k + 1
    return n + 1


@kernel
def _read(st, prm, a, cycle, memory):
    """Read the next slot's notification word (as it was at the start of ``cycle``); if it
    is there, compute the slot's words, written one a cycle from ``cycle + 2 D + 1``."""
    row = st.engine[a]
    D = prm.latency
    word = st.seen[a]
    if not (word >> _VALID_SHIFT) & _VALID_MASK:
        row[STALE] = row[ARRIVALS]
        row[BUSY_UNTIL] = cycle + D
        return
    reduce = (word >> _REDUCE_SHIFT) & _REDUCE_MASK
    parity = np.int64((word >> _PARITY_SHIFT) & _PARITY_MASK)
    dst = np.int64((word >> _DST_SHIFT) & _DST_MASK)
    length = np.int64((word >> _LENGTH_SHIFT) & _LENGTH_MASK)
    first = dst // 2
    words = (dst % 2 + length + 1) // 2 if length else 0
    row[BUSY_UNTIL] = cycle + apply_cycles(words, D) - 1
    row[FINISH] = row[APPLIED]
    row[WRITE_AT] = cycle + 2 * D + 1
    row[WRITE_FIRST] = first
    row[WRITE_COUNT] = words
    row[WRITE_HEAD] = 0
    staging = prm.staging + row[APPLIED] * prm.capacity
    lo = dst - 2 * first
    mem, out = memory[a], st.writes[a]
    for j in range(words):
        value = mem[first + j]
        for lane in range(2):
            t = 2 * j + lane - lo
            if 0 <= t < length:
                e = parity + t
                shift = np.uint64(32 * lane)
                chunk = (mem[staging + e // 2] >> np.uint64(32 * (e % 2))) & _LOW
                if reduce:
                    chunk = lane_add((value >> shift) & _LOW, chunk, prm.binary32, st.lanes,
                                     st.lane_values)
                value = (value & ~(_LOW << shift)) | (chunk << shift)
        out[j] = value


@kernel(inline=True)
def collective_step(st, prm, a, cycle, memory, posts):
    """Engine ``a``'s ``cycle``, decided from the state at its start: the WRs it posts go
    to ``posts`` (rows ``0 .. n_posts - 1``, a step's WRITEs then its SEND), its writes
    reach ``memory[a]``. Returns ``(acted, n_posts)``."""
    row = st.engine[a]
    acted = False
    n = 0
    if _may_start(st, a):
        n = _start(st, prm, a, cycle, posts)
        acted = True
    if _may_read(st, a, cycle):
        _read(st, prm, a, cycle, memory)
        acted = True
    # A word written is progress: a long apply leaves the fabric idle, not stalled.
    j = row[WRITE_HEAD]
    if j < row[WRITE_COUNT] and row[WRITE_AT] + j == cycle:
        memory[a, row[WRITE_FIRST] + j] = st.writes[a, j]
        row[WRITE_HEAD] = j + 1
        acted = True
    if row[FINISH] >= 0 and cycle == row[BUSY_UNTIL]:
        st.applied_at[st.slot_base[a] + row[APPLIED]] = cycle
        row[APPLIED] += 1
        row[FINISH] = -1
        acted = True
    row[ARRIVALS] += row[NEW]
    row[NEW] = 0
    slots = st.slot_base[a + 1] - st.slot_base[a]
    if row[APPLIED] < slots:
        st.seen[a] = memory[a, prm.notify + row[APPLIED]]
    if (row[DONE_AT] < 0 and row[STARTED] == st.step_base[a + 1] - st.step_base[a]
            and row[APPLIED] == slots):
        row[DONE_AT] = cycle + 1
        st.scalars[DONE] += 1
    return acted, n


def timeline(st: CollectiveState) -> dict:
    """Every engine's steps and slots in time: ``started`` rows ``(accelerator, step,
    cycle)`` and ``applied`` rows ``(accelerator, slot, cycle)`` (int64), of what has
    happened."""
    def rows(base, counts, cycles):
        out = [(a, i, int(cycles[base[a] + i])) for a in range(len(base) - 1)
               for i in range(int(counts[a]))]
        return np.array(out, np.int64).reshape(-1, 3)
    return {"started": rows(st.step_base, st.engine[:, STARTED], st.started),
            "applied": rows(st.slot_base, st.engine[:, APPLIED], st.applied_at)}


def completion_cycle(st: CollectiveState) -> int:
    """The cycle after the last engine was done: the collective's time."""
    return int(st.engine[:, DONE_AT].max())


def stuck(st: CollectiveState) -> str:
    """One line on the first engine not done, "" if none (why a run stalled)."""
    return next((e.describe() for e in engines_of(st).engines if not e.done()), "")


class EngineView:
    """One accelerator's engine in a :class:`CollectiveState`, read as an object
    (``started``, ``applied_at``, ``done_at``, ``errors``, ``arrivals``, ``applied``,
    ``done()``, ``describe()``), for the run's summary."""

    def __init__(self, st: CollectiveState, accelerator: int):
        a = self.accelerator = accelerator
        row = st.engine[a]
        steps, slots = st.step_base[a:a + 2].tolist(), st.slot_base[a:a + 2].tolist()
        self.started = st.started[steps[0]:steps[0] + int(row[STARTED])].tolist()
        self.applied_at = st.applied_at[slots[0]:slots[0] + int(row[APPLIED])].tolist()
        self.done_at, self.errors = int(row[DONE_AT]), int(row[ERRORS])
        self.arrivals = int(row[ARRIVALS])
        self._waits = st.step_wait[steps[0]:steps[1]].tolist()
        self._slots = slots[1] - slots[0]

    @property
    def applied(self) -> int:
        """Receive slots applied."""
        return len(self.applied_at)

    def done(self) -> bool:
        """Started every step and applied every slot (section 15.2, rule 3)."""
        return len(self.started) == len(self._waits) and self.applied == self._slots

    def describe(self) -> str:
        """One line on where the engine is: the step it waits to start, the slots applied."""
        k = len(self.started)
        waiting = (f"step {k} waits for slot {self._waits[k] - 1}"
                   if k < len(self._waits) else "every step started")
        return (f"collective engine {self.accelerator}: {waiting}; {self.applied} of "
                f"{self._slots} slots applied, {self.arrivals} notifications received")


def engines_of(st: CollectiveState) -> SimpleNamespace:
    """Every engine of ``st`` read as objects (``engines``, ``done``,
    ``timeline()``, ``completion_cycle``, ``stuck()``), a snapshot of the state now: what
    ``sim.collective.fabric.collective_summary`` and the tests read of a run's engines."""
    engines = [EngineView(st, a) for a in range(len(st.engine))]
    return SimpleNamespace(engines=engines, done=all(e.done_at >= 0 for e in engines),
                           timeline=lambda: timeline(st), completion_cycle=completion_cycle(st),
                           stuck=lambda: stuck(st))
