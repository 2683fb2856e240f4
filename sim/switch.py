"""Cycle-exact golden model of :class:`superfabric.hdl.switch.Switch`.

The model keeps what decides *when* a flit moves (counts, queues of packet
ids, pointers, the read and egress registers) and leaves out what does not
(memory addresses, payload bits). The cycle rules it follows are written
down in ``docs/architecture.md`` ("Switch timing"); the RTL implements the
same rules, and the scoreboard holds one against the other.

:class:`SwitchCore` is the switch alone, stepped one cycle at a time, with
packets registered as they appear, so that devices modelled around it (an
RDMA engine on each port) can create packets in reaction to what it
delivers. :class:`SwitchModel` runs a whole trace on it.
"""

from collections import deque

import numpy as np

from ..config import EGRESS_DEPTH, FabricConfig, PfcConfig
from ..formats.packet import CE, ECT0, ECT1, NOT_ECT
from .backpressure import PauseSchedule, SinkReady
from .ecn import EcnMarker
from .pfc import FRAME_COLUMNS, PfcEgress, PfcIngress, SinkPause
from .islip import ISLIPModel
from .records import Records
from .skid_buffer import SkidBufferModel
from .source import Sources
from .traffic import Trace

__all__ = ["SwitchCore", "SwitchModel", "EGRESS_DEPTH", "DEFAULT_STALL_LIMIT"]


#: Cycles without any transfer, with packets outstanding, that end a run as stalled.
DEFAULT_STALL_LIMIT = 10_000


class SwitchCore:
    """The switch's state and one-cycle step; packets are registered as they appear.

    A packet is known to the switch by the id :meth:`add_packet` returns;
    the source hands its flits to the skid buffers by that id, so a packet
    must be registered before a source offers it (in the cycle it is
    created, at the latest). Call :meth:`step` once per simulated cycle, in
    increasing order. A cycle may be left out only if :meth:`busy` is false,
    no source would offer a flit in it, and it comes before
    :meth:`next_event`: nothing in the switch could move in it, and the
    iSLIP pointers stay put, so stepping it would change nothing.

    ``pause`` drives the pause mask directly (default: never paused); with
    ``[pfc] enabled``, ``sink_pause`` makes the egress sinks send pause
    frames (default: none), and the switch's own frames pause the sources,
    which must then also have ``pause(port, prio, start, cycles)`` as
    :class:`~.source.Sources` has.

    Per packet, lists indexed by id that :meth:`add_packet` grows: as
    registered, ``length``, ``prio``, ``req`` (its queue) and ``ecn_in``;
    as it goes, ``head`` and ``tail`` (egress handover cycles, -1 until
    then), ``out_port``, ``dropped``, ``ecn_out`` (the codepoint it leaves
    with), ``ecn_backlog`` (the backlog its ECN decision saw, -1 if none).
    Per port: ``rx``, ``tx``, ``drops``. ``outstanding`` counts registered
    packets neither delivered nor dropped; ``progress`` tells whether the
    last step moved anything (what a stall detector watches);
    ``pfc_frames`` lists the pause frames sent, rows ``(cycle, port,
    class_enable, *eight times)``.
    """

    def __init__(self, cfg: FabricConfig, *, pause: PauseSchedule | None = None,
                 sink_pause: SinkPause | None = None):
        sw = cfg.switch
        n, np_, cap = sw.ports, sw.priorities, sw.buffer_flits
        self.cfg = cfg
        self.ports, self.priorities = n, np_
        self._islip = sw.scheduler == "islip"
        self._drop = sw.ingress_full == "drop"
        self.pause = pause or PauseSchedule(n, np_)
        self.ecn = EcnMarker(cfg.ecn, n, np_) if cfg.ecn.enabled else None
        self.pfc_on = cfg.pfc.enabled
        self.pfc_in = PfcIngress(cfg) if self.pfc_on else None
        self.pfc_out = PfcEgress(cfg) if self.pfc_on else None
        self.sink_pause = sink_pause or (SinkPause(cfg, 0.0, 0) if self.pfc_on else None)
        self.pfc_frames = []

        # Per packet: what the switch reads of it, then what happens to it.
        self.length = []
        self.req = []                # its queue: dst * priorities + prio
        self.prio = []
        self.ecn_in = []
        self.ecn_out = []
        self.ecn_backlog = []
        self.head = []
        self.tail = []
        self.out_port = []
        self.dropped = []
        self.outstanding = 0
        self.progress = False

        self.skids = [SkidBufferModel() for _ in range(n)]
        self.sched = ISLIPModel(n, np_, sw.islip_iterations)
        # Input buffer state.
        self.free = [cap] * n
        self.in_packet = [False] * n
        self.left = [0] * n
        self.dropping = [False] * n
        # islip: queues[i][q] holds complete packets; fifo: queues[i][0] holds all.
        self.queues = [[deque() for _ in range(n * np_ if self._islip else 1)] for _ in range(n)]
        self.waiting = [0] * n       # complete packets not yet started, per input
        self.stored = [0] * n        # flits written and not yet read, per input
        # Read side and crossbar.
        self.rd_valid = [False] * n
        self.rd_pkt = [0] * n
        self.rd_flit = [0] * n
        self.rd_last = [False] * n
        self.rd_out = [0] * n
        self.active = [False] * n
        self.cur_out = [0] * n
        # Egress queues hold (out_port, packet, flit index, last): the very
        # tuples step() returns, so a handover builds nothing.
        self.egress = [deque() for _ in range(n)]
        self.rx = [0] * n
        self.tx = [0] * n
        self.drops = [0] * n

    def add_packet(self, dst: int, prio: int, length: int, ecn: int = NOT_ECT) -> int:
        """Register a packet toward output ``dst`` in class ``prio``; returns its id (0, 1, ...)."""
        if not (0 <= dst < self.ports and 0 <= prio < self.priorities and length >= 1
                and NOT_ECT <= ecn <= CE):
            self._check([dst], [prio], [length], [ecn])
        pkt = len(self.length)
        self.length.append(length)
        self.req.append(dst * self.priorities + prio)
        self.prio.append(prio)
        self.ecn_in.append(ecn)
        self.ecn_out.append(ecn)
        self.ecn_backlog.append(-1)
        self.head.append(-1)
        self.tail.append(-1)
        self.out_port.append(-1)
        self.dropped.append(False)
        self.outstanding += 1
        return pkt

    def add_packets(self, dst, prio, length, ecn=None) -> range:
        """Register packets in order, as :meth:`add_packet` one by one; returns their ids.

        For a whole trace at once (sequences or arrays): one call per packet
        would cost a run several percent of its time.
        """
        dst, prio, length = (np.asarray(v, np.int64).reshape(-1) for v in (dst, prio, length))
        k = len(dst)
        ecn = np.full(k, NOT_ECT, np.int64) if ecn is None else np.asarray(ecn, np.int64).reshape(-1)
        if not len(prio) == len(length) == len(ecn) == k:
            raise ValueError(f"packets: dst, prio, length and ecn differ in length "
                             f"({k}, {len(prio)}, {len(length)}, {len(ecn)})")
        if k:
            self._check(dst, prio, length, ecn)
        first = len(self.length)
        ecn = ecn.tolist()
        self.length += length.tolist()
        self.req += (dst * self.priorities + prio).tolist()
        self.prio += prio.tolist()
        self.ecn_in += ecn
        self.ecn_out += ecn
        self.ecn_backlog += [-1] * k
        self.head += [-1] * k
        self.tail += [-1] * k
        self.out_port += [-1] * k
        self.dropped += [False] * k
        self.outstanding += k
        return range(first, first + k)

    def _check(self, dst, prio, length, ecn) -> None:
        """Refuse values out of range: they would fail deep inside step(), or not at all."""
        for name, values, low, high in (("dst", dst, 0, self.ports - 1),
                                        ("prio", prio, 0, self.priorities - 1),
                                        ("length", length, 1, None),
                                        ("ecn", ecn, NOT_ECT, CE)):
            values = np.asarray(values)
            lowest, highest = int(values.min()), int(values.max())
            bad = lowest if lowest < low else highest if high is not None and highest > high else None
            if bad is not None:
                allowed = f"at least {low}" if high is None else f"in {low}..{high}"
                raise ValueError(f"packet {name} = {bad}: must be {allowed}")

    def busy(self) -> bool:
        """Anything inside the switch: flits or packets anywhere, or a pause in force upstream."""
        return (any(self.rd_valid) or any(self.active) or any(len(skid) for skid in self.skids)
                or any(self.waiting) or any(self.stored) or any(self.in_packet)
                or any(self.egress) or (self.pfc_on and self.pfc_in.busy()))

    def next_event(self, cycle: int) -> int | None:
        """The first cycle at or after ``cycle`` in which the switch changes state by itself.

        Only the sinks' pause frames do (they set egress state even when the
        switch is empty); ``None`` when there are none to come.
        """
        if self.pfc_on:
            return self.sink_pause.next_frame(cycle)
        return None

    def counters(self, cycle: int) -> dict:
        """The hardware counters at the start of ``cycle`` (the cycle after the last step)."""
        counters = {"rx_packets": list(self.rx), "tx_packets": list(self.tx),
                    "drops": list(self.drops)}
        if self.ecn is not None:
            counters["ecn_marks"] = list(self.ecn.marks)
        if self.pfc_on:
            counters.update(pfc_tx_frames=list(self.pfc_in.frames_sent),
                            pfc_rx_frames=list(self.pfc_out.frames_received),
                            pfc_paused_cycles=self.pfc_out.paused_cycles(cycle),
                            pfc_peak_occupancy=list(self.pfc_in.peak))
        return counters

    def step(self, cycle: int, source, ready_mask: int) -> list[tuple[int, int, int, bool]]:
        """Simulate ``cycle`` (docs/architecture.md, section 5.2) and clock its edge (5.3).

        ``source`` offers the inputs' flits: ``source.offer(port, cycle)``
        (called only while that input's skid buffer is ready) gives a packet
        id or -1, ``source.flit[port]`` the flit index, and
        ``source.accept(port)`` is called when the flit is taken. Bit ``o``
        of ``ready_mask`` is the sink of output ``o`` ready. Returns the
        flits handed to the sinks in this cycle, ``(out_port, packet,
        flit_index, is_last)`` in output order.
        """
        # Every piece of state as a local: this runs once per cycle and
        # attribute lookups would cost the model a noticeable share of its speed.
        n, np_ = self.ports, self.priorities
        islip_mode, drop_mode = self._islip, self._drop
        ecn, pfc_on = self.ecn, self.pfc_on
        pfc_in = self.pfc_in
        length, req_of, prio_of = self.length, self.req, self.prio
        head_cycle, tail_cycle, out_port, dropped = self.head, self.tail, self.out_port, self.dropped
        skids, queues, egress = self.skids, self.queues, self.egress
        free, in_packet, left, dropping = self.free, self.in_packet, self.left, self.dropping
        waiting, stored = self.waiting, self.stored
        rd_valid, rd_pkt, rd_flit, rd_last, rd_out = \
            self.rd_valid, self.rd_pkt, self.rd_flit, self.rd_last, self.rd_out
        active, cur_out = self.active, self.cur_out
        rx, tx, drops = self.rx, self.tx, self.drops
        outstanding = self.outstanding

        finishing = [rd_valid[i] and rd_last[i] for i in range(n)]
        arriving = [False] * n
        for i in range(n):
            if rd_valid[i]:
                arriving[rd_out[i]] = True
        credit = [len(egress[o]) + arriving[o] < EGRESS_DEPTH for o in range(n)]
        out_free = credit[:]
        for i in range(n):
            if active[i] and not finishing[i]:
                out_free[cur_out[i]] = False

        # Requests: the highest class per (input, output) not paused.
        paused = self.pause.mask(cycle)
        if pfc_on:
            sent = pfc_in.step()
            for port, enable, times in sent:
                self.pfc_frames.append((cycle, port, enable, *times))
            paused |= self.pfc_out.mask(cycle)
        level = [[-1] * n for _ in range(n)]
        any_request = False
        for i in range(n):
            if waiting[i] and (finishing[i] or not active[i]):
                row = level[i]
                if islip_mode:
                    for q, queue in enumerate(queues[i]):
                        if queue and not (paused >> q) & 1:
                            o, p = divmod(q, np_)
                            if out_free[o] and p > row[o]:
                                row[o] = p
                                any_request = True
                else:
                    q = req_of[queues[i][0][0]]
                    o, p = divmod(q, np_)
                    if out_free[o] and not (paused >> q) & 1:
                        row[o] = p
                        any_request = True
        matches = self.sched.match(level) if any_request else [None] * n
        if ecn is not None:
            # Decide from the backlog at the start of the cycle, before
            # this cycle's writes and reads change it.
            ecn_in, ecn_out, ecn_backlog = self.ecn_in, self.ecn_out, self.ecn_backlog
            for i in range(n):
                if matches[i] is not None:
                    o, p = matches[i]
                    q = o * np_ + p
                    pkt = (queues[i][q] if islip_mode else queues[i][0])[0]
                    mark, ecn_backlog[pkt] = ecn.decide(o, q)
                    if mark and ecn_in[pkt] in (ECT0, ECT1):
                        ecn_out[pkt] = CE
                        ecn.marks[q] += 1

        # Egress handshakes, then the flits arriving from the read registers.
        delivered = []
        for o in range(n):
            queue = egress[o]
            if queue and (ready_mask >> o) & 1:
                flit = queue.popleft()
                delivered.append(flit)
                _, pkt, k, last = flit
                if k == 0:
                    head_cycle[pkt] = cycle
                    out_port[pkt] = o
                if last:
                    tail_cycle[pkt] = cycle
                    tx[o] += 1
                    outstanding -= 1
        progress = bool(delivered)
        for i in range(n):
            if rd_valid[i]:
                o = rd_out[i]
                egress[o].append((o, rd_pkt[i], rd_flit[i], rd_last[i]))

        # Ingress: skid buffer into the input buffer, source into the skid buffer.
        reserve = [0] * n
        for i in range(n):
            skid = skids[i]
            flit = skid.head()
            popped = False
            if flit is not None:
                pkt, k = flit
                if not in_packet[i]:
                    size = length[pkt]
                    fits = free[i] >= size
                    if fits or drop_mode:
                        popped = True
                        if fits:
                            reserve[i] = size
                            rx[i] += 1
                        else:
                            drops[i] += 1
                            dropped[pkt] = True
                            outstanding -= 1
                        left[i] = size - 1
                        in_packet[i] = size != 1
                        dropping[i] = not fits
                        keep, last = fits, size == 1
                else:
                    popped = True
                    keep, last = not dropping[i], left[i] == 1
                    in_packet[i] = left[i] != 1
                    left[i] -= 1
                if popped and keep:
                    stored[i] += 1
                    if pfc_on:
                        pfc_in.occupancy[i][prio_of[pkt]] += 1
                    if ecn is not None:
                        ecn.backlog[req_of[pkt]] += 1
                    if last:
                        queues[i][req_of[pkt] if islip_mode else 0].append(pkt)
                        waiting[i] += 1
            pushed = None
            if skid.ready():
                pkt = source.offer(i, cycle)
                if pkt >= 0:
                    pushed = (pkt, source.flit[i])
                    source.accept(i)
            if popped or pushed is not None:
                progress = True
            skid.step(pushed, popped)

        # Reads: a new packet for matched inputs, the next flit otherwise.
        for i in range(n):
            match = matches[i]
            if match is not None:
                o, p = match
                queue = queues[i][o * np_ + p] if islip_mode else queues[i][0]
                pkt = queue.popleft()
                waiting[i] -= 1
                rd_valid[i], rd_pkt[i], rd_flit[i], rd_last[i] = True, pkt, 0, length[pkt] == 1
                active[i], cur_out[i], rd_out[i] = True, o, o
                read = True
            elif active[i] and not finishing[i] and credit[cur_out[i]]:
                k = rd_flit[i] + 1
                rd_valid[i], rd_flit[i], rd_last[i] = True, k, k + 1 == length[rd_pkt[i]]
                rd_out[i] = cur_out[i]
                read = True
            else:
                rd_valid[i] = False
                rd_out[i] = cur_out[i]
                active[i] = active[i] and not finishing[i]
                read = False
            if read and ecn is not None:
                ecn.backlog[req_of[rd_pkt[i]]] -= 1
            if read and pfc_on:
                pfc_in.occupancy[i][prio_of[rd_pkt[i]]] -= 1
            free[i] += read - reserve[i]
            stored[i] -= read

        if pfc_on:
            # Frames take effect from the next cycle: at the sources
            # (upstream) for those the switch sent, at egress for the sinks'.
            width = self.cfg.switch.data_width
            for port, enable, times in sent:
                for p in range(np_):
                    if enable >> p & 1:
                        source.pause(port, p, cycle + 1, PfcConfig.quanta_to_cycles(times[p], width))
            for port, enable, times in self.sink_pause.frames(cycle):
                self.pfc_out.receive(cycle, port, enable, times)

        self.outstanding = outstanding
        self.progress = progress
        return delivered


class SwitchModel:
    """Run a trace through the switch, cycle by cycle, and record every packet."""

    def __init__(self, cfg: FabricConfig):
        self._cfg = cfg

    def run(self, trace: Trace, *, sink: SinkReady | None = None,
            pause: PauseSchedule | None = None, sink_pause: SinkPause | None = None,
            stall_limit: int = DEFAULT_STALL_LIMIT) -> Records:
        """Simulate until every packet of ``trace`` is delivered or dropped.

        ``pause`` drives the pause mask directly; with ``[pfc] enabled``,
        ``sink_pause`` makes the egress sinks send pause frames instead.
        Returns the per-packet :class:`~.records.Records`. A run in which
        nothing moves for ``stall_limit`` cycles while packets are
        outstanding stops with ``stalled`` set.
        """
        sw = self._cfg.switch
        core = SwitchCore(self._cfg, pause=pause, sink_pause=sink_pause)
        # Ids are the trace's row indices, which is how Sources names packets.
        core.add_packets(trace.dst, trace.prio, trace.length, trace.ecn)
        sink = sink or SinkReady(sw.ports)
        sources = Sources(trace, sw.ports, sw.priorities)
        busy, step, ready = core.busy, core.step, sink.mask

        cycle = 0
        last_progress = 0
        stalled = False
        while core.outstanding:
            # Nothing inside the switch and no source mid-packet: jump to the
            # next generation cycle (the pointers cannot move meanwhile).
            if not (busy() or sources.busy()):
                nxt = sources.next_generation()
                if nxt is not None:
                    event = core.next_event(cycle)
                    if event is not None:
                        # Sinks' frames set egress state: do not jump over them.
                        nxt = min(nxt, event)
                if nxt is not None and nxt > cycle:
                    last_progress += nxt - cycle
                    cycle = nxt
            if cycle - last_progress >= stall_limit:
                stalled = True
                break
            step(cycle, sources, ready(cycle))
            if core.progress:
                last_progress = cycle + 1
            cycle += 1

        rec = Records.empty(len(trace))
        rec.head[:] = core.head
        rec.tail[:] = core.tail
        rec.out_port[:] = core.out_port
        rec.dropped[:] = core.dropped
        rec.payload_ok[:] = rec.tail >= 0
        rec.cycles = cycle
        rec.stalled = stalled
        rec.counters = core.counters(cycle)
        rec.ecn_out[:] = core.ecn_out
        rec.ecn_backlog[:] = core.ecn_backlog
        if core.pfc_on:
            rec.pfc_frames = np.array(core.pfc_frames, np.int64).reshape(-1, FRAME_COLUMNS)
        return rec
