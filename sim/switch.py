"""Cycle-exact golden model of :class:`superfabric.hdl.switch.Switch`.

The model keeps what decides *when* a flit moves (counts, queues of packet
ids, pointers, the read and egress registers) and leaves out what does not
(memory addresses, payload bits). The cycle rules it follows are written
down in ``docs/architecture.md`` ("Switch timing"); the RTL implements the
same rules, and the scoreboard holds one against the other.
"""

from collections import deque

import numpy as np

from ..config import FabricConfig, PfcConfig
from .backpressure import PauseSchedule, SinkReady
from .ecn import EcnMarker
from .pfc import FRAME_COLUMNS, PfcEgress, PfcIngress, SinkPause
from .islip import ISLIPModel
from .records import Records
from .skid_buffer import SkidBufferModel
from .source import Sources
from .traffic import CE, ECT0, ECT1, Trace

__all__ = ["SwitchModel", "EGRESS_DEPTH", "DEFAULT_STALL_LIMIT"]

#: Egress queue depth; equal to ``superfabric.hdl.switch.EGRESS_DEPTH``.
EGRESS_DEPTH = 4

#: Cycles without any transfer, with packets outstanding, that end a run as stalled.
DEFAULT_STALL_LIMIT = 10_000


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
        n, np_, cap = sw.ports, sw.priorities, sw.buffer_flits
        islip_mode = sw.scheduler == "islip"
        drop_mode = sw.ingress_full == "drop"
        sink = sink or SinkReady(n)
        pause = pause or PauseSchedule(n, np_)
        length = trace.length.tolist()
        req_of = (trace.dst.astype(int) * np_ + trace.prio.astype(int)).tolist()
        rec = Records.empty(len(trace))
        head_cycle, tail_cycle, out_port, dropped = [-1] * len(trace), [-1] * len(trace), [-1] * len(trace), [False] * len(trace)
        ecn = EcnMarker(self._cfg.ecn, n, np_) if self._cfg.ecn.enabled else None
        pfc_on = self._cfg.pfc.enabled
        pfc_in = PfcIngress(self._cfg) if pfc_on else None
        pfc_out = PfcEgress(self._cfg) if pfc_on else None
        sink_pause = sink_pause or (SinkPause(self._cfg, 0.0, 0) if pfc_on else None)
        prio_of = trace.prio.tolist()
        frames = []
        ecn_in = trace.ecn.tolist()
        ecn_out = list(ecn_in)
        ecn_backlog = [-1] * len(trace)

        sources = Sources(trace, n, self._cfg.switch.priorities)
        skids = [SkidBufferModel() for _ in range(n)]
        sched = ISLIPModel(n, np_, sw.islip_iterations)
        # Input buffer state.
        free = [cap] * n
        in_packet = [False] * n
        left = [0] * n
        dropping = [False] * n
        # islip: queues[i][q] holds complete packets; fifo: queues[i][0] holds all.
        queues = [[deque() for _ in range(n * np_ if islip_mode else 1)] for _ in range(n)]
        waiting = [0] * n            # complete packets not yet started, per input
        stored = [0] * n             # flits written and not yet read, per input
        # Read side and crossbar.
        rd_valid = [False] * n
        rd_pkt = [0] * n
        rd_flit = [0] * n
        rd_last = [False] * n
        rd_out = [0] * n
        active = [False] * n
        cur_out = [0] * n
        egress = [deque() for _ in range(n)]
        rx = [0] * n
        tx = [0] * n
        drops = [0] * n

        outstanding = len(trace)
        cycle = 0
        last_progress = 0
        stalled = False
        while outstanding:
            # Nothing inside the switch and no source mid-packet: jump to the
            # next generation cycle (the pointers cannot move meanwhile).
            if not (any(rd_valid) or any(active) or any(len(skid) for skid in skids)
                    or any(waiting) or any(stored) or any(in_packet) or any(egress)
                    or sources.busy() or (pfc_on and pfc_in.busy())):
                nxt = sources.next_generation()
                if nxt is not None and pfc_on and sink_pause.next_frame(cycle) is not None:
                    # Sinks' frames set egress state: do not jump over them.
                    nxt = min(nxt, sink_pause.next_frame(cycle))
                if nxt is not None and nxt > cycle:
                    last_progress += nxt - cycle
                    cycle = nxt
            if cycle - last_progress >= stall_limit:
                stalled = True
                break

            ready_mask = sink.mask(cycle)
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
            paused = pause.mask(cycle)
            if pfc_on:
                sent = pfc_in.step()
                for port, enable, times in sent:
                    frames.append((cycle, port, enable, *times))
                paused |= pfc_out.mask(cycle)
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
            matches = sched.match(level) if any_request else [None] * n
            if ecn is not None:
                # Decide from the backlog at the start of the cycle, before
                # this cycle's writes and reads change it.
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
            progress = False
            for o in range(n):
                queue = egress[o]
                if queue and (ready_mask >> o) & 1:
                    pkt, k, last = queue.popleft()
                    progress = True
                    if k == 0:
                        head_cycle[pkt] = cycle
                        out_port[pkt] = o
                    if last:
                        tail_cycle[pkt] = cycle
                        tx[o] += 1
                        outstanding -= 1
            for i in range(n):
                if rd_valid[i]:
                    egress[rd_out[i]].append((rd_pkt[i], rd_flit[i], rd_last[i]))

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
                    pkt = sources.offer(i, cycle)
                    if pkt >= 0:
                        pushed = (pkt, sources.flit[i])
                        sources.accept(i)
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
                for port, enable, times in sent:
                    for p in range(np_):
                        if enable >> p & 1:
                            sources.pause(port, p, cycle + 1, PfcConfig.quanta_to_cycles(times[p], sw.data_width))
                for port, enable, times in sink_pause.frames(cycle):
                    pfc_out.receive(cycle, port, enable, times)
            if progress:
                last_progress = cycle + 1
            cycle += 1

        rec.head[:] = head_cycle
        rec.tail[:] = tail_cycle
        rec.out_port[:] = out_port
        rec.dropped[:] = dropped
        rec.payload_ok[:] = rec.tail >= 0
        rec.cycles = cycle
        rec.stalled = stalled
        rec.counters = {"rx_packets": rx, "tx_packets": tx, "drops": drops}
        rec.ecn_out[:] = ecn_out
        rec.ecn_backlog[:] = ecn_backlog
        if ecn is not None:
            rec.counters["ecn_marks"] = ecn.marks
        if pfc_on:
            rec.pfc_frames = np.array(frames, np.int64).reshape(-1, FRAME_COLUMNS)
            rec.counters.update(pfc_tx_frames=pfc_in.frames_sent,
                                pfc_rx_frames=pfc_out.frames_received,
                                pfc_paused_cycles=pfc_out.paused_cycles(cycle),
                                pfc_peak_occupancy=pfc_in.peak)
        return rec
