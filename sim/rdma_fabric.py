"""Cycle-exact golden model of :class:`superfabric.hdl.rdma_fabric.RdmaFabric`.

``switch.ports`` endpoints, each an RDMA engine (:mod:`.rdma_engine`) with
its host memory and a fault injector (:mod:`.fault_injector`) on its
uplink, attached to the switch model (:class:`~.switch.SwitchCore`).
Endpoint ``e`` offers its WRs in row order on its WR stream: a WR is
offered in cycle ``c`` when it is the endpoint's next untaken WR and its
``post <= c``. The rules are docs/architecture.md section 10.

Every decision of a cycle is made from the state at its start: the
engines' offered flits, then the injectors' (which pass or replace them),
then the switch's cycle (which takes the injectors' flits and delivers
flits to the engines), then the injectors' and engines' updates.
"""

import numpy as np

from ..config import FabricConfig
from .fault_injector import FaultInjector
from .rdma_engine import NEVER, KeyTable, RdmaEngine
from .rdma_records import RX_COMPLETION_COLUMNS, RdmaRecords
from .switch import SwitchCore

__all__ = ["RdmaFabricModel", "default_stall_limit"]

#: The workload's WR columns, in the order the engine takes a WR.
_WR_FIELDS = ("qp", "dst", "opcode", "lkey", "laddr", "rkey", "raddr", "length", "tag")

#: The class RDMA packets travel in (section 10.4).
_RDMA_PRIO = 0


def default_stall_limit(cfg: FabricConfig) -> int:
    """Cycles without a WR taken or a completion given that end a run as stalled."""
    return 8 * cfg.rdma.retransmit_timeout + 10_000


class _Uplinks:
    """The injectors' side of the switch inputs, as :meth:`SwitchCore.step` expects a source."""

    def __init__(self, ports: int):
        self.packet = [-1] * ports   # switch id of the packet offered, -1 for none
        self.flit = [0] * ports
        self.sent = [False] * ports

    def offer(self, port: int, cycle: int) -> int:
        return self.packet[port]

    def accept(self, port: int) -> None:
        self.sent[port] = True


class RdmaFabricModel:
    """Run a workload of work requests through the RDMA fabric, cycle by cycle."""

    def __init__(self, cfg: FabricConfig):
        if not cfg.rdma.enabled:
            raise ValueError("rdma.enabled = false: the RDMA fabric needs rdma.enabled = true")
        self._cfg = cfg

    def _check(self, workload) -> None:
        """Refuse tables or memories whose shape does not match the configuration."""
        cfg = self._cfg
        E, rd = cfg.switch.ports, cfg.rdma
        for name, shape in (("keys", (E, rd.keys, 7)), ("page_table", (E, rd.pages)),
                            ("memory", (E, rd.memory_words))):
            got = np.shape(getattr(workload, name))
            if got != shape:
                raise ValueError(f"workload.{name}: shape {got}, must be {shape}")
        missing = [c for c in ("post", "src") + _WR_FIELDS if c not in workload.wr]
        if missing:
            raise ValueError(f"workload.wr: column {missing[0]!r} missing")
        tags = np.asarray(workload.wr["tag"])
        wrong = np.flatnonzero(tags != np.arange(len(tags)))
        if wrong.size:
            i = int(wrong[0])
            raise ValueError(f"workload.wr['tag'][{i}] = {int(tags[i])}: must be the row index {i} "
                             f"(a completion names its WR by tag)")

    def run(self, workload, *, stall_limit: int | None = None) -> RdmaRecords:
        """Simulate until every WR has its completion; returns :class:`RdmaRecords`.

        The run ends after the cycle in which the last completion is given,
        or as stalled when no WR is taken and no completion given for
        ``stall_limit`` cycles (default :func:`default_stall_limit`).
        """
        self._check(workload)
        cfg = self._cfg
        E = cfg.switch.ports
        stall_limit = default_stall_limit(cfg) if stall_limit is None else stall_limit
        wr = workload.wr
        n = len(wr["post"])
        post = np.asarray(wr["post"]).tolist()
        src = np.asarray(wr["src"]).tolist()
        columns = [np.asarray(wr[c]).tolist() for c in _WR_FIELDS]
        rows = [(i, *fields) for i, fields in enumerate(zip(*columns))]
        queue = [[i for i in range(n) if src[i] == e] for e in range(E)]
        head = [0] * E               # position of each endpoint's next untaken WR in its queue

        memories = [m.tolist() for m in np.asarray(workload.memory, np.uint64)]
        engines = [RdmaEngine(cfg, e, KeyTable(workload.keys[e], workload.page_table[e], cfg),
                              memories[e]) for e in range(E)]
        injectors = [FaultInjector(cfg.faults, e) for e in range(E)]
        switch = SwitchCore(cfg)
        uplinks = _Uplinks(E)
        all_ready = (1 << E) - 1
        words = {}                   # switch packet id -> data words as they entered the switch
        origin = {}                  # switch packet id -> source endpoint
        current = [-1] * E           # packet id of the injector's packet under way

        rec = RdmaRecords.empty(n, E, cfg.rdma.memory_words)
        taken_at, done_at, status, count, order = [-1] * n, [-1] * n, [-1] * n, [0] * n, [-1] * n
        given = [0] * E
        rx_completions = []

        outstanding = n
        cycle = 0
        last_progress = 0
        stalled = False
        while outstanding:
            offered = [rows[q[h]] if h < len(q) and post[q[h]] <= cycle else None
                       for q, h in zip(queue, head)]
            if not switch.busy() and all(inj.quiet() for inj in injectors):
                # Nothing in the switch or the injectors: jump to the first
                # cycle in which an engine acts, a WR is due or a timer fires.
                nxt = min(min(eng.next_event(cycle, w) for eng, w in zip(engines, offered)),
                          min((post[q[h]] for q, h in zip(queue, head) if h < len(q)
                               and post[q[h]] > cycle), default=NEVER))
                if nxt > cycle:
                    cycle = int(min(nxt, last_progress + stall_limit))
                    offered = [rows[q[h]] if h < len(q) and post[q[h]] <= cycle else None
                               for q, h in zip(queue, head)]
            if cycle - last_progress >= stall_limit:
                stalled = True
                break

            flits = [eng.offer() for eng in engines]
            outs = [inj.prepare(flit) for inj, flit in zip(injectors, flits)]
            for e, out in enumerate(outs):
                uplinks.sent[e] = False
                if out is None:
                    uplinks.packet[e] = -1
                    continue
                k, word, dst, length = out
                if current[e] < 0:
                    current[e] = switch.add_packet(dst, _RDMA_PRIO, length)
                    words[current[e]] = []
                    origin[current[e]] = e
                uplinks.packet[e] = current[e]
                uplinks.flit[e] = k
            delivered = switch.step(cycle, uplinks, all_ready)
            rx = [None] * E
            for o, pkt, k, last in delivered:
                rx[o] = (origin[pkt], k, last, words[pkt][k])
                if last:
                    del words[pkt], origin[pkt]
            progress = False
            for e in range(E):
                if uplinks.sent[e]:
                    pkt = current[e]
                    k, word, _, length = outs[e]
                    words[pkt].append(word)
                    if k == length - 1:
                        current[e] = -1
                tx_taken = injectors[e].commit(uplinks.sent[e], flits[e])
                taken, completion, rx_completion = engines[e].step(cycle, offered[e], tx_taken, rx[e])
                if taken:
                    taken_at[offered[e][0]] = cycle
                    head[e] += 1
                    progress = True
                if completion is not None:
                    i = completion[1]            # the tag: the WR's row
                    if count[i] == 0:
                        outstanding -= 1
                    count[i] += 1
                    done_at[i], status[i], order[i] = cycle, completion[2], given[e]
                    given[e] += 1
                    progress = True
                if rx_completion is not None:
                    rx_completions.append((cycle, e, *rx_completion))
                # A packet retired is progress too: a long message completes
                # only at its last packet.
                progress = progress or engines[e].retired
            if progress:
                last_progress = cycle + 1
            cycle += 1

        rec.taken[:], rec.done[:], rec.status[:] = taken_at, done_at, status
        rec.completions[:], rec.order[:] = count, order
        rec.rx_completions = np.array(rx_completions, np.int64).reshape(-1, len(RX_COMPLETION_COLUMNS))
        rec.memory = np.array(memories, np.uint64).reshape(E, cfg.rdma.memory_words)
        rec.counters = {name: [eng.counters[name] for eng in engines] for name in rec.counters}
        rec.cycles = cycle
        rec.stalled = stalled
        if stalled:
            rec.stuck = _stuck(engines, queue, head, count)
        return rec


def _stuck(engines, queue, head, count) -> str:
    """One line on the first endpoint that still owes completions."""
    for e, eng in enumerate(engines):
        owed = sum(1 for i in queue[e] if count[i] == 0)
        if not owed:
            continue
        busy = eng.busy_channels()
        if busy:
            where = eng.describe_channel(busy[0])
        else:
            where = f"endpoint {e}: WR stream blocked at row {queue[e][head[e]]}"
        return f"{where}; {owed} WR(s) of endpoint {e} without completion"
    return ""
