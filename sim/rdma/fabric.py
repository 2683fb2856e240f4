"""Cycle-exact golden model of :class:`superfabric.hdl.rdma.fabric.RdmaFabric`.

:meth:`RdmaFabricModel.run` runs the compiled loop (:mod:`.kernels.run`);
:meth:`RdmaFabricModel.run_reference` is the same model as Python objects, cycle by
cycle, which the kernels' tests hold the compiled loop against. Below, the reference.

``cfg.endpoints`` endpoints, each an RDMA engine (:mod:`.engine`) with
its host memory and a fault injector (:mod:`.fault_injector`) on its
uplink, attached to the switch or the fabric of routers
(:class:`~superfabric.sim.fabric.core.FabricCore`; below "the switch" is
either).
Endpoint ``e`` offers its WRs from per-QP send queues (:mod:`.host`):
in cycle ``c`` the oldest posted WR at the head of a send queue whose
channel has room for it. The rules are docs/architecture.md section 10.

Every decision of a cycle is made from the state at its start: the
engines' offered flits, then the injectors' (which pass or replace them),
then the switch's cycle (which takes the injectors' flits and delivers
flits to the engines), then the injectors' and engines' updates.
"""

import numpy as np

from ...config import FabricConfig
from .fault_injector import FaultInjector
from .engine import RdmaEngine
from .host import HostDevice, SendQueues
from .keys import KeyTable
from .traffic import key_columns
from .records import (CNP_COLUMNS, DELIVERED_COLUMNS, RATE_COLUMNS, RX_COMPLETION_COLUMNS,
                      RdmaRecords, event_rows)
from ..fabric.core import FabricCore
from .kernels.run import (check_workload, default_stall_limit, packet_class,
                          run as compiled_run)

__all__ = ["RdmaFabricModel", "default_stall_limit", "packet_class"]

class _Uplinks:
    """The injectors' side of the switch inputs, as :meth:`FabricCore.step` expects a source.

    With PFC the switch's pause frames land here (:meth:`pause`); the
    engines obey them, a paused class starting no packet.
    """

    def __init__(self, ports: int, priorities: int):
        self.packet = [-1] * ports   # switch id of the packet offered, -1 for none
        self.flit = [0] * ports
        self.sent = [False] * ports
        self._from = [[0] * priorities for _ in range(ports)]
        self._until = [[0] * priorities for _ in range(ports)]

    def offer(self, port: int, cycle: int) -> int:
        return self.packet[port]

    def accept(self, port: int) -> None:
        self.sent[port] = True

    def pause(self, port: int, prio: int, start: int, cycles: int) -> None:
        """A frame pauses class ``prio`` of ``port`` for ``cycles`` from ``start`` (0: resume)."""
        self._from[port][prio] = start
        self._until[port][prio] = start + cycles

    def paused(self, port: int, prio: int, cycle: int) -> bool:
        """Class ``prio`` of ``port`` is paused in ``cycle``."""
        return self._from[port][prio] <= cycle < self._until[port][prio]


class RdmaFabricModel:
    """Run a workload of work requests through the RDMA fabric, cycle by cycle."""

    def __init__(self, cfg: FabricConfig):
        if not cfg.rdma.enabled:
            raise ValueError("rdma.enabled = false: the RDMA fabric needs rdma.enabled = true")
        self._cfg = cfg

    def warm(self) -> None:
        """Compile the run loop (or load it from numba's cache) for this configuration,
        before a run that is timed: a run of no WR."""
        from .traffic import WR_COLUMNS, RdmaWorkload
        cfg, E, rd = self._cfg, self._cfg.endpoints, self._cfg.rdma
        empty = RdmaWorkload("warm", 0.0, 0, 0, {c: np.zeros(0, t) for c, t in WR_COLUMNS.items()},
                             np.zeros((E, rd.keys, key_columns(E)), np.int64),
                             np.zeros((E, rd.pages), np.int64),
                             np.zeros((E, rd.memory_words), np.uint64))
        self.run(empty)

    def run(self, workload, *, stall_limit: int | None = None, collective=None,
            capture_link: int = -1) -> RdmaRecords:
        """Simulate until every WR has its completion (and the collective engines of
        ``collective``, ``(schedule, layout, dtype)``, are done); returns
        :class:`RdmaRecords`. The loop is compiled (:func:`.kernels.run.run`); the run
        ends as :meth:`run_reference` says, which it equals record for record."""
        return compiled_run(self._cfg, workload, stall_limit=stall_limit, collective=collective,
                            capture_link=capture_link)[0]

    def run_reference(self, workload, *, stall_limit: int | None = None,
                      device: HostDevice | None = None, capture_link: int = -1) -> RdmaRecords:
        """Simulate until every WR has its completion; returns :class:`RdmaRecords`.

        The run ends after the cycle in which the last completion is given
        (and ``device``, when given, is done), or as stalled when no WR is
        taken, no completion given and the device makes no progress for
        ``stall_limit`` cycles (default :func:`default_stall_limit`). A cycle
        follows section 10.11's order: the hosts' offers, the engines' and the
        injectors' flits (:func:`_offer_to_switch`), the switch's cycle and its
        deliveries (:func:`_egress`), then the injectors' and the engines' updates,
        then the device's (:class:`~superfabric.sim.rdma.host.HostDevice`), which may
        post further WRs; the records then hold the workload's WRs and the device's after
        them. ``capture_link`` (a link id of the fabric) records in the delivered rows the
        cycle each packet entered that link and its codepoint there.
        """
        check_workload(self._cfg, workload)
        cfg = self._cfg
        E = cfg.endpoints
        stall_limit = default_stall_limit(cfg) if stall_limit is None else stall_limit
        wr = workload.wr
        host = SendQueues(cfg, workload)
        rows = host.rows
        device = HostDevice() if device is None else device
        data_class, control_class = cfg.rdma.data_priority, cfg.rdma.control_priority
        kinds = {length: packet_class(cfg, length)
                 for length in range(1, cfg.switch.max_packet_flits + 1)}

        memories, engines, injectors = _endpoints(cfg, workload)
        switch = FabricCore(cfg, capture_link=capture_link)
        uplinks = _Uplinks(E, cfg.switch.priorities)
        all_ready = (1 << E) - 1
        words = {}                   # switch packet id -> data words as they entered the switch
        origin = {}                  # switch packet id -> source endpoint
        current = [-1] * E           # packet id of the injector's packet under way
        depth = [0] * E              # flits inside the switch per output
        depth_rows = np.zeros((1024, E), np.int32)
        wrs = _WrProgress(len(wr["post"]), E)
        capture = _Deliveries(E)
        device.attach(host, memories)

        def offers(cycle):
            return [rows[r] if r >= 0 else None
                    for r in (host.offer(e, cycle, engines[e].free_slots) for e in range(E))]

        cycle = 0
        last_progress = 0
        stalled = False
        while wrs.outstanding or not device.done:
            offered = offers(cycle)
            nxt = min(_idle_until(cycle, switch, injectors, engines, host, offered),
                      device.next_event(cycle))
            if nxt > cycle:
                cycle = int(min(nxt, last_progress + stall_limit))
                offered = offers(cycle)
            if cycle - last_progress >= stall_limit:
                stalled = True
                break
            depth_rows = _record_depth(depth_rows, cycle, depth)
            # The classes the switch's pause frames hold in this cycle, before
            # this cycle's frames (which hold from the next).
            paused = [(uplinks.paused(e, data_class, cycle),
                       uplinks.paused(e, control_class, cycle)) for e in range(E)]

            flits = [eng.offer() for eng in engines]
            outs = [inj.prepare(flit) for inj, flit in zip(injectors, flits)]
            _offer_to_switch(switch, uplinks, outs, current, kinds, words, origin)
            rx = _egress(cycle, switch, switch.step(cycle, uplinks, all_ready), origin, words,
                         depth, capture)
            _entered(uplinks, outs, current, words, depth)
            progress = _endpoint_updates(cycle, engines, injectors, host, wrs, uplinks.sent,
                                         flits, offered, rx, paused, device)
            if device.step(cycle) or progress:
                last_progress = cycle + 1
            wrs.grow(len(rows))
            cycle += 1

        rec = RdmaRecords.empty(len(rows), E, cfg.rdma.memory_words)
        wrs.fill(rec)
        rec.memory = np.array(memories, np.uint64).reshape(E, cfg.rdma.memory_words)
        _engine_records(rec, engines)
        rec.pfc_frames = switch.pfc_frames
        rec.queue_depth = depth_rows[:cycle].copy()
        capture.fill(rec)
        rec.cycles, rec.stalled = cycle, stalled
        if stalled:
            rec.stuck = _stuck(engines, host, wrs.count) or device.stuck()
        return rec


class _WrProgress:
    """What a run learns of each WR row, in lists (cheap to update every cycle):
    ``taken``, the cycle the engine took it; ``done``, ``status`` and ``order``, of
    its last completion; ``count``, the completions naming it. Per endpoint
    ``given``, the completions given so far; ``rx_completions``, the receive
    completions' rows; ``outstanding``, the WRs still without a completion."""

    def __init__(self, wrs: int, endpoints: int):
        self.taken = [-1] * wrs
        self.done = [-1] * wrs
        self.status = [-1] * wrs
        self.count = [0] * wrs
        self.order = [-1] * wrs
        self.given = [0] * endpoints
        self.rx_completions = []
        self.outstanding = wrs

    def grow(self, wrs: int) -> None:
        """Rows for the WRs a device posted, up to ``wrs`` in all, none taken yet."""
        new = wrs - len(self.taken)
        if new > 0:
            for column in (self.taken, self.done, self.status, self.order):
                column.extend([-1] * new)
            self.count.extend([0] * new)
            self.outstanding += new

    def record(self, e: int, cycle: int, row: int | None, completion, rx_completion) -> None:
        """Endpoint ``e``'s engine step in ``cycle``: it took WR ``row`` (None: none), gave
        ``completion`` and ``rx_completion`` (None: none)."""
        if row is not None:
            self.taken[row] = cycle
        if completion is not None:
            i = completion[1]            # the tag: the WR's row
            if self.count[i] == 0:
                self.outstanding -= 1
            self.count[i] += 1
            self.done[i], self.status[i], self.order[i] = cycle, completion[2], self.given[e]
            self.given[e] += 1
        if rx_completion is not None:
            self.rx_completions.append((cycle, e, *rx_completion))

    def fill(self, rec: RdmaRecords) -> None:
        """Copy the WRs' columns and the receive completions into ``rec``."""
        rec.taken[:], rec.done[:], rec.status[:] = self.taken, self.done, self.status
        rec.completions[:], rec.order[:] = self.count, self.order
        rec.rx_completions = np.array(self.rx_completions, np.int64).reshape(
            -1, len(RX_COMPLETION_COLUMNS))


def _endpoints(cfg: FabricConfig, workload) -> tuple[list, list, list]:
    """Per endpoint its host memory (a list of words, which its engine reads and
    writes in place), its engine and its uplink's fault injector."""
    memories = [m.tolist() for m in np.asarray(workload.memory, np.uint64)]
    engines = [RdmaEngine(cfg, e, KeyTable(workload.keys[e], workload.page_table[e], cfg),
                          memories[e]) for e in range(cfg.endpoints)]
    injectors = [FaultInjector(cfg.faults, e) for e in range(cfg.endpoints)]
    return memories, engines, injectors


def _endpoint_updates(cycle: int, engines, injectors, host, wrs: "_WrProgress", sent, flits,
                      offered, rx, paused, device: HostDevice) -> bool:
    """The injectors' and the engines' updates at the end of ``cycle``: ``sent``, the
    switch took each uplink's flit; ``flits``, the engines' offered flits;
    ``offered``, the hosts' WRs; ``rx``, the flits delivered; ``paused``, the classes
    paused. The engines' completions go to ``device`` too. Returns whether the run made
    progress (a WR taken, a completion given, a packet retired)."""
    progress = False
    for e, (engine, injector) in enumerate(zip(engines, injectors)):
        tx_taken = injector.commit(sent[e], flits[e])
        taken, completion, rx_completion = engine.step(cycle, offered[e], tx_taken, rx[e],
                                                       paused[e])
        if taken:
            host.taken(e)
        if taken or completion is not None or rx_completion is not None:
            wrs.record(e, cycle, offered[e][0] if taken else None, completion, rx_completion)
            if completion is not None:
                device.completed(e, cycle, completion)
            if rx_completion is not None:
                device.received(e, cycle, rx_completion)
        # A packet retired is progress too: a long message completes
        # only at its last packet.
        if taken or completion is not None or engine.retired:
            progress = True
    return progress


def _idle_until(cycle: int, switch, injectors, engines, host, offered) -> float:
    """Idle skip (section 10.11): with nothing in the switch or the injectors, the
    first cycle in which an engine acts, a WR is due or a timer fires; else ``cycle``."""
    if switch.busy() or not all(inj.quiet() for inj in injectors):
        return cycle
    return min(min(eng.next_event(cycle, w) for eng, w in zip(engines, offered)),
               min(host.next_post(e, cycle) for e in range(len(engines))))


def _record_depth(depth_rows: np.ndarray, cycle: int, depth: list[int]) -> np.ndarray:
    """``depth`` as ``cycle``'s row of the queue depths; returns the rows, grown when full."""
    if cycle >= len(depth_rows):
        grown = np.zeros((max(2 * len(depth_rows), cycle + 1), depth_rows.shape[1]), np.int32)
        grown[:len(depth_rows)] = depth_rows
        depth_rows = grown
    depth_rows[cycle] = depth
    return depth_rows


def _offer_to_switch(switch, uplinks, outs, current, kinds, words, origin) -> None:
    """The injectors' flits ``outs`` onto the switch's inputs ``uplinks``: a packet is
    registered with the switch (its class from ``kinds``) when an injector first offers
    its head, and keeps its id in ``current`` while it waits."""
    for e, out in enumerate(outs):
        uplinks.sent[e] = False
        if out is None:
            uplinks.packet[e] = -1
            continue
        k, word, dst, length = out
        if current[e] < 0:
            prio, ecn = kinds[length]
            current[e] = switch.add_packet(dst, prio, length, ecn, src=e)
            words[current[e]] = []
            origin[current[e]] = e
        uplinks.packet[e] = current[e]
        uplinks.flit[e] = k


class _Deliveries:
    """The packets the switch hands to the engines, for :attr:`RdmaRecords.delivered`:
    per output the cycle its packet under way began, and the rows and words so far."""

    def __init__(self, endpoints: int):
        self.head = [0] * endpoints
        self.rows = []
        self.words = []

    def flit(self, cycle: int, output: int, src: int, k: int, last: bool, ecn: int,
             words: list, link: tuple) -> None:
        """Flit ``k`` of a packet from ``src`` reached ``output``; at its last, the packet
        (``words``, every flit's; ``link``, the cycle it entered the captured link and its
        codepoint there) is recorded."""
        if k == 0:
            self.head[output] = cycle
        if last:
            self.rows.append((self.head[output], output, src, k + 1, ecn, *link))
            self.words.extend(words)

    def fill(self, rec: RdmaRecords) -> None:
        """Copy the delivered packets into ``rec``."""
        rec.delivered = np.array(self.rows, np.int64).reshape(-1, len(DELIVERED_COLUMNS))
        rec.delivered_words = np.array(self.words, np.uint64)


def _egress(cycle, switch, delivered, origin, words, depth, capture: _Deliveries) -> list:
    """The switch's ``delivered`` flits as each output's engine receives them:
    ``(source, flit, last, data word, ECN)``, None where none; each also goes to
    ``capture``. A packet's words are forgotten after its last flit."""
    rx = [None] * len(depth)
    if delivered:
        ecn_out, link_cycle, link_ecn = switch.ecn_out, switch.link_cycle, switch.link_ecn
        for o, pkt, k, last in delivered:
            rx[o] = (origin[pkt], k, last, words[pkt][k], int(ecn_out[pkt]))
            capture.flit(cycle, o, origin[pkt], k, last, rx[o][4], words[pkt],
                         (int(link_cycle[pkt]), int(link_ecn[pkt])))
            depth[o] -= 1
            if last:
                del words[pkt], origin[pkt]
    return rx


def _entered(uplinks, outs, current, words, depth) -> None:
    """The flits the switch took this cycle: their data words as they entered it,
    their outputs' depths, and the end of an injector's packet at its last flit."""
    for e, out in enumerate(outs):
        if uplinks.sent[e]:
            pkt = current[e]
            k, word, dst, length = out
            words[pkt].append(word)
            depth[dst] += 1
            if k == length - 1:
                current[e] = -1


def _engine_records(rec: RdmaRecords, engines) -> None:
    """The engines' counters, CNPs picked and rate changes into ``rec``."""
    rec.counters = {name: [eng.counters[name] for eng in engines] for name in rec.counters}
    rec.cnps = event_rows([(c, e, x) for e, eng in enumerate(engines) for c, x in eng.cnps],
                          CNP_COLUMNS)
    rec.rates = event_rows([(c, e, ch, r) for e, eng in enumerate(engines)
                            for c, ch, r in eng.rate_changes()], RATE_COLUMNS)


def _stuck(engines, host, count) -> str:
    """One line on the first endpoint that still owes completions."""
    src = host.source
    for e, eng in enumerate(engines):
        owed = sum(1 for i, s in enumerate(src) if s == e and count[i] == 0)
        if not owed:
            continue
        busy = eng.busy_channels()
        if busy:
            where = eng.describe_channel(busy[0])
        else:
            where = f"endpoint {e}: WR stream blocked at row {host.owed(e)}"
        return f"{where}; {owed} WR(s) of endpoint {e} without completion"
    return ""
