"""cocotb testbench of the switch and of the fabric top: drive a trace, record what
happens to every packet.

The fabric top (docs/architecture.md 11.9) has the switch's ports with the
fabric's endpoints in place of the switch's ports, so one testbench serves
both: for a fabric the sinks also record each packet's ``hops``, the
counters add ``link_flits`` and ``router_peak``, and :class:`FabricMonitor`
watches the routers' ``moved`` (the model's progress, for stall detection)
and, when a run stalls, names a cycle of channels that hold flits and wait
on each other's credits.

Parameters (``superfabric.tb.params``): ``trace`` (an ``.npz`` from
``Trace.save``), ``rtl_records`` (where to write the RTL's records),
``sink_stall`` and ``sink_seed`` (egress backpressure), ``pause_rate`` and
``pause_seed`` (the pause mask schedule, or with PFC the sinks' pause
frames) and ``stall_limit``. The records are held against the golden model
by the caller (``superfabric.tools.run``), once, outside the simulator.

Each concern is one class: the sources (:class:`SourceDriver`), the sinks
and the egress check (:class:`SinkMonitor`), the pause mask
(:class:`PauseMaskDriver`), priority flow control (:class:`PfcMonitor`), the
ECN decisions (:class:`EcnMonitor`), drop accounting (:class:`DropMonitor`)
stall detection (:class:`StallDetector`) and the fabric's progress and stall
report (:class:`FabricMonitor`). They share one cycle loop,
:meth:`SwitchTB.run`, because Python per clock edge is the cost that
matters: every cycle is two triggers whatever the concerns (``drive`` after
the falling edge, ``sample`` in the read-only phase before the rising
edge), a signal is written only when its value changes, payloads are read
only of valid outputs, and idle stretches of the trace pass in one timer.
"""

from collections import deque

import numpy as np

import cocotb
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly

from ..config import PfcConfig
from ..formats.counters import ECN_COUNTERS, PFC_COUNTERS, PORT_COUNTERS
from ..formats.packet import FlitCodec, packet_fields
from ..formats.pfc_frame import pack_request, unpack_request
from ..sim.backpressure import PauseSchedule, SinkReady
from ..network.deadlock import escape_dependencies
from ..sim.fabric.top import DEFAULT_STALL_LIMIT, describe_waits
from ..sim.pfc import FRAME_COLUMNS, SinkPause, pause_sources
from ..sim.records import Records
from ..sim.source import Sources
from ..sim.traffic import Trace
from ..network.topology import Topology
from . import params as tb_params
from .payload import flit_data
from .reset import reset

__all__ = ["SwitchTB", "Tally", "FlitValues", "SourceDriver", "SinkMonitor", "PauseMaskDriver",
           "PfcMonitor", "EcnMonitor", "DropMonitor", "StallDetector", "FabricMonitor"]

#: The ECN backlog recorded for a packet whose head left with no decision taken for it.
NO_DECISION = -2


class Tally:
    """The trace's packets: how many are inside the switch, how many are resolved.

    A packet is inside from its head's acceptance at an input until its
    tail leaves or the switch drops it; then it is resolved. The monitors
    count into the attributes directly: these are the hottest lines.
    """

    def __init__(self, total: int):
        self.total = total
        self.inside = 0
        self.resolved = 0


class FlitValues:
    """Every flit's payload as the source drives it: the packet's header, the data
    pattern of (tag, flit index), ``first`` and ``last``."""

    def __init__(self, codec: FlitCodec, trace: Trace, cfg):
        self._codec = codec
        self._trace = trace
        self._tags = trace.tag.tolist()
        self._length = trace.length.tolist()
        self._data_mask = (1 << cfg.switch.data_width) - 1
        self._tag_mask = (1 << cfg.switch.tag_width) - 1
        self._first = 1 << codec.field_spec("first")[0]
        self._last = 1 << codec.field_spec("last")[0]
        self._headers = {}

    def value(self, pkt: int, flit: int) -> int:
        """The payload of flit ``flit`` of packet ``pkt``."""
        header = self._headers.get(pkt)
        if header is None:
            t = self._trace
            header = self._headers[pkt] = self._codec.pack(
                dst=int(t.dst[pkt]), src=int(t.src[pkt]), prio=int(t.prio[pkt]),
                ecn=int(t.ecn[pkt]), length=self._length[pkt], tag=self._tags[pkt] & self._tag_mask)
        value = header | flit_data(self._tags[pkt], flit, self._data_mask)
        if flit == 0:
            value |= self._first
        if flit == self._length[pkt] - 1:
            value |= self._last
        return value


class SourceDriver:
    """The devices upstream of the inputs: each offers its source queue's next flit;
    a flit is taken when the input is ready in that cycle, and is then in flight
    until the sinks see it leave (:attr:`in_flight`)."""

    def __init__(self, dut, ports: int, sources: Sources, flits: FlitValues, tally: Tally,
                 packets: int):
        self.sources = sources
        self._flits = flits
        self._tally = tally
        self._ports = ports
        self._valid = [getattr(dut, f"i__{k}__valid") for k in range(ports)]
        self._ready = [getattr(dut, f"i__{k}__ready") for k in range(ports)]
        self._payload = [getattr(dut, f"i__{k}__payload") for k in range(ports)]
        self._driven = [None] * ports         # payload on each input, None while valid is low
        self._offered = [-1] * ports
        self._offered_flit = [-1] * ports
        #: Packets whose head an input accepted.
        self.entered = np.zeros(packets, bool)
        #: (packet, flit) -> the payload accepted for it, until it leaves.
        self.in_flight = {}

    def inputs(self) -> list:
        """The handles reset holds at zero."""
        return self._valid + self._payload

    def drive(self, cycle: int) -> None:
        """Offer this cycle's flit on every input that has one."""
        sources, driven, offered, offered_flit = (self.sources, self._driven, self._offered,
                                                  self._offered_flit)
        offer, flit, value_of = sources.offer, sources.flit, self._flits.value
        valid, payload = self._valid, self._payload
        for k in range(self._ports):
            pkt = offer(k, cycle)
            if pkt >= 0:
                # A flit not taken is offered again, unchanged (a stream source
                # must not withdraw it): its payload is already on the input.
                if pkt != offered[k] or flit[k] != offered_flit[k] or driven[k] is None:
                    value = value_of(pkt, flit[k])
                    if driven[k] is None:
                        valid[k].value = 1
                    if driven[k] != value:
                        payload[k].value = value
                        driven[k] = value
                    offered_flit[k] = flit[k]
            elif driven[k] is not None:
                valid[k].value = 0
                driven[k] = None
            offered[k] = pkt

    def sample(self, cycle: int) -> bool:
        """Take the flits the inputs accepted; True if any was."""
        progress = False
        sources, offered, ready = self.sources, self._offered, self._ready
        for k in range(self._ports):
            pkt = offered[k]
            if pkt >= 0 and ready[k].value:
                flit = sources.flit[k]
                if flit == 0:
                    self._tally.inside += 1
                    self.entered[pkt] = True
                self.in_flight[pkt, flit] = self._driven[k]
                sources.accept(k)
                progress = True
        return progress

    def quiesce(self) -> None:
        """Drop ``valid`` on every input, before the clock runs on without the loop."""
        for k in range(self._ports):
            if self._driven[k] is not None:
                self._valid[k].value = 0
                self._driven[k] = None


class SinkMonitor:
    """The devices downstream of the outputs: ``ready`` from the sink pattern; every flit
    leaving is checked against the one the sources sent, and each packet's departure
    recorded."""

    def __init__(self, dut, ports: int, sink: SinkReady, codec: FlitCodec,
                 in_flight: dict, trace: Trace, rec: Records, tally: Tally,
                 ecn: "EcnMonitor | None"):
        self._sink = sink
        self._in_flight = in_flight
        self._rec = rec
        self._tally = tally
        self._ecn = ecn
        self._ports = ports
        self._total = len(trace)
        self._length = trace.length.tolist()
        self._dst = trace.dst.tolist()
        self._valid = [getattr(dut, f"o__{k}__valid") for k in range(ports)]
        self._ready = [getattr(dut, f"o__{k}__ready") for k in range(ports)]
        self._payload = [getattr(dut, f"o__{k}__payload") for k in range(ports)]
        self._tag_field = codec.field_spec("tag")
        # The switch may rewrite ECN (ECT to CE), and a fabric counts the hops:
        # the payload check leaves those fields out and records them per
        # packet, from the head; the scoreboard compares them.
        self._ecn_offset, self._ecn_mask = codec.field_spec("ecn")
        self._keep = ~(self._ecn_mask << self._ecn_offset)
        self._hops_offset, self._hops_mask = (codec.field_spec("hops") if "hops" in codec
                                              else (0, 0))
        self._keep &= ~(self._hops_mask << self._hops_offset)
        rec.ecn_out[:] = trace.ecn        # until delivered: what it was sent with
        self._payload_ok = [True] * len(trace)
        self._expect = [None] * ports     # (packet, next flit) being received on each output
        self._mask = 0
        self._ready_driven = -1

    def inputs(self) -> list:
        """The handles reset holds at zero."""
        return self._ready

    def drive(self, cycle: int) -> None:
        """This cycle's ``ready`` on every output."""
        mask = self._sink.mask(cycle)
        self._mask = mask
        driven = self._ready_driven
        if mask != driven:
            for k in range(self._ports):
                bit = (mask >> k) & 1
                if driven < 0 or bit != (driven >> k) & 1:
                    self._ready[k].value = bit
            self._ready_driven = mask

    def sample(self, cycle: int) -> bool:
        """Record and check the flits that left; True if any did."""
        progress = False
        rec, mask, expect, tally = self._rec, self._mask, self._expect, self._tally
        ecn_offset, ecn_mask = self._ecn_offset, self._ecn_mask
        valid, payload, sent = self._valid, self._payload, self._in_flight
        for k in range(self._ports):
            if not (mask >> k) & 1 or not valid[k].value:
                continue
            progress = True
            value = int(payload[k].value)
            cur = expect[k]
            if cur is None:
                pkt = (value >> self._tag_field[0]) & self._tag_field[1]
                flit = 0     # tags are trace indices (the trace fits the tag width)
                if pkt >= self._total or rec.head[pkt] >= 0:
                    raise AssertionError(f"cycle {cycle}: output {k} delivered unknown or "
                                         f"repeated tag {pkt}")
                rec.head[pkt] = cycle
                rec.out_port[pkt] = k
                rec.ecn_out[pkt] = (value >> ecn_offset) & ecn_mask
                rec.hops[pkt] = (value >> self._hops_offset) & self._hops_mask
                if self._ecn is not None:
                    rec.ecn_backlog[pkt] = self._ecn.decision(k)
            else:
                pkt, flit = cur
            # A flit that leaves before it entered finds nothing sent: None.
            expected = sent.pop((pkt, flit), None)
            if (expected is None or (value ^ expected) & self._keep or self._dst[pkt] != k
                    or (value >> ecn_offset) & ecn_mask != rec.ecn_out[pkt]
                    or (value >> self._hops_offset) & self._hops_mask != rec.hops[pkt]):
                self._payload_ok[pkt] = False
            if flit == self._length[pkt] - 1:
                rec.tail[pkt] = cycle
                expect[k] = None
                tally.inside -= 1
                tally.resolved += 1
            else:
                expect[k] = (pkt, flit + 1)
        return progress

    def finish(self, rec: Records) -> None:
        """Whether each delivered packet arrived intact (an undelivered one did not)."""
        rec.payload_ok[:] = self._payload_ok
        rec.payload_ok[rec.tail < 0] = False


class PauseMaskDriver:
    """The switch's ``pause`` input (per (output, class)), from a seeded schedule."""

    def __init__(self, dut, schedule: PauseSchedule):
        self._pause = dut.pause
        self._schedule = schedule
        self._driven = 0

    def inputs(self) -> list:
        """The handles reset holds at zero."""
        return [self._pause]

    def drive(self, cycle: int) -> None:
        """This cycle's pause mask."""
        paused = self._schedule.mask(cycle)
        if paused != self._driven:
            self._pause.value = paused
            self._driven = paused


class PfcMonitor:
    """Priority flow control at the ports: the sinks' pause frames go into ``pfc_rx``; the
    frames the switch sends upstream (``pfc_tx``) pause the sources from the next cycle
    and are recorded, cycle, port, classes and times."""

    def __init__(self, dut, cfg, sink_pause: SinkPause, sources: Sources):
        self._sink_pause = sink_pause
        self._sources = sources
        self._ports, self._priorities = cfg.endpoints, cfg.switch.priorities
        self._data_width = cfg.switch.data_width
        self._rx_valid = [getattr(dut, f"pfc_rx__{k}__valid") for k in range(self._ports)]
        self._rx = [getattr(dut, f"pfc_rx__{k}__payload") for k in range(self._ports)]
        self._tx_valid = [getattr(dut, f"pfc_tx__{k}__valid") for k in range(self._ports)]
        self._tx = [getattr(dut, f"pfc_tx__{k}__payload") for k in range(self._ports)]
        self._rx_driven = 0
        self._frames = []
        #: (port, class) paused upstream, as the switch's frames say.
        self.xoff = set()

    def inputs(self) -> list:
        """The handles reset holds at zero."""
        return [*self._rx_valid, *self._rx]

    def next_frame(self, cycle: int) -> int | None:
        """The first cycle at or after ``cycle`` in which a sink may send a frame."""
        return self._sink_pause.next_frame(cycle)

    def drive(self, cycle: int) -> None:
        """The sinks' frames of this cycle."""
        valid = 0
        for port, enable, times in self._sink_pause.frames(cycle):
            self._rx[port].value = pack_request(enable, times)
            valid |= 1 << port
        if valid != self._rx_driven:
            self._drive_valid(valid)

    def sample(self, cycle: int) -> bool:
        """Take the frames the switch sent; True if it sent any."""
        bits = [int(valid.value) for valid in self._tx_valid]
        if not any(bits):
            return False
        for k in range(self._ports):
            if bits[k]:
                enable, times = unpack_request(int(self._tx[k].value))
                self._frames.append((cycle, k, enable, *times))
                for p in range(self._priorities):
                    if enable >> p & 1:
                        self._sources.pause(k, p, cycle + 1,
                                            PfcConfig.quanta_to_cycles(times[p], self._data_width))
                        (self.xoff.add if times[p] else self.xoff.discard)((k, p))
        return True

    def quiesce(self) -> None:
        """Drop the ``pfc_rx`` valids, before the clock runs on without the loop."""
        if self._rx_driven:
            self._drive_valid(0)

    def _drive_valid(self, valid: int) -> None:
        """The ``pfc_rx`` valids, bit ``k`` to port ``k``'s."""
        for k, handle in enumerate(self._rx_valid):
            if (valid ^ self._rx_driven) >> k & 1:
                handle.value = valid >> k & 1
        self._rx_driven = valid

    def finish(self, rec: Records) -> None:
        """The frames the switch sent."""
        rec.pfc_frames = np.array(self._frames, np.int64).reshape(-1, FRAME_COLUMNS)


class EcnMonitor:
    """The ECN marking decisions: per output, the backlog each decision saw, in order;
    the packet whose head leaves next toward that output is the one it was taken for."""

    def __init__(self, dut, ports: int):
        self._decided = dut.ecn_decided
        self._seen = [getattr(dut, f"ecn_backlog__{k}") for k in range(ports)]
        self._ports = ports
        self._decisions = [deque() for _ in range(ports)]

    def sample(self, cycle: int) -> bool:
        """Queue this cycle's decisions; they are not progress by themselves."""
        bits = int(self._decided.value)
        if bits:
            for k in range(self._ports):
                if (bits >> k) & 1:
                    self._decisions[k].append(int(self._seen[k].value))
        return False

    def decision(self, output: int) -> int:
        """The backlog of the oldest decision not yet claimed at ``output``."""
        queue = self._decisions[output]
        return queue.popleft() if queue else NO_DECISION


class DropMonitor:
    """With ``ingress_full = "drop"``: a dropped packet is resolved when the drop counters
    say so; which packets they were is known at the end (entered, never delivered)."""

    def __init__(self, dut, ports: int, tally: Tally):
        self._counters = [getattr(dut, f"drops__{k}") for k in range(ports)]
        self._tally = tally
        self._seen = 0

    def sample(self, cycle: int) -> bool:
        """Resolve the packets dropped this cycle; True if any was."""
        now = sum(int(d.value) for d in self._counters)
        if now == self._seen:
            return False
        self._tally.inside -= now - self._seen
        self._tally.resolved += now - self._seen
        self._seen = now
        return True


class StallDetector:
    """Ends a run that stops moving: no flit in or out, no frame, for ``limit`` cycles."""

    def __init__(self, limit: int):
        self._limit = limit
        self._last_progress = 0

    def progress(self, cycle: int) -> None:
        """Something moved in ``cycle``."""
        self._last_progress = cycle + 1

    def skip(self, cycles: int) -> None:
        """The loop let ``cycles`` idle cycles pass, with nothing due: they do not count."""
        self._last_progress += cycles

    def stalled(self, cycle: int) -> bool:
        """Nothing moved for the limit, up to ``cycle``."""
        return cycle - self._last_progress >= self._limit


class FabricMonitor:
    """A fabric's routers, seen from the top: ``moved`` is the model's progress (a flit
    into or out of a skid buffer or out of an egress queue anywhere, which the
    endpoints alone do not show); at a stall, the link credits say which channels
    hold flits and which wait."""

    def __init__(self, dut, cfg):
        self._moved = dut.moved
        self._cfg = cfg
        self._topo = Topology.of(cfg)
        pools = cfg.switch.priorities * cfg.fabric.vcs
        self._credits = [getattr(dut, f"link_credits__{q}")
                         for q in range(len(self._topo.links) * pools)]

    def sample(self, cycle: int) -> bool:
        """Whether any router moved a flit in this cycle."""
        return bool(self._moved.value)

    def stuck(self) -> str:
        """One line naming a cycle of channels (link, class, VC) that hold flits and wait
        on each other: a channel holds flits when its output lacks credits, and waits
        for a next channel of the escape routing (the channel dependency graph of
        section 11.6) whose output has too few for the longest packet; empty if none."""
        import networkx as nx
        cfg = self._cfg
        vcs, pools = cfg.fabric.vcs, cfg.switch.priorities * cfg.fabric.vcs
        credits = [int(c.value) for c in self._credits]
        waits = nx.DiGraph()
        for (a, va), (b, vb) in escape_dependencies(self._topo, cfg.fabric.routing, vcs):
            for p in range(cfg.switch.priorities):
                held, wanted = p * vcs + va, p * vcs + vb
                if (credits[a * pools + held] < cfg.fabric.vc_buffer_flits
                        and credits[b * pools + wanted] < cfg.switch.max_packet_flits):
                    waits.add_edge((a, held), (b, wanted))
        return describe_waits(self._topo, waits, vcs)


class SwitchTB:
    """One switch or fabric instance: reset, and a trace run through its drivers and
    monitors."""

    def __init__(self, dut, cfg):
        self.dut = dut
        self.cfg = cfg
        self.codec = FlitCodec(packet_fields(cfg))

    async def run(self, trace: Trace, sink: SinkReady, pause: PauseSchedule,
                  sink_pause: SinkPause | None = None,
                  stall_limit: int = DEFAULT_STALL_LIMIT) -> Records:
        """Reset, then drive ``trace`` from cycle 0 until every packet is resolved or the run stalls."""
        cfg, dut = self.cfg, self.dut
        n = cfg.endpoints
        if len(trace) > 1 << cfg.switch.tag_width:
            raise ValueError(f"trace of {len(trace)} packets needs switch.tag_width >= "
                             f"{(len(trace) - 1).bit_length()}")
        rec = Records.empty(len(trace))
        tally = Tally(len(trace))
        flits = FlitValues(self.codec, trace, cfg)
        sources = SourceDriver(dut, n, Sources(trace, n, cfg.switch.priorities), flits, tally,
                               len(trace))
        ecn = EcnMonitor(dut, n) if cfg.ecn.enabled else None
        sinks = SinkMonitor(dut, n, sink, self.codec, sources.in_flight, trace, rec, tally, ecn)
        pfc = PfcMonitor(dut, cfg, sink_pause, sources.sources) if cfg.pfc.enabled else None
        drops = (DropMonitor(dut, self._ports(), tally) if cfg.switch.ingress_full == "drop"
                 else None)
        fabric = FabricMonitor(dut, cfg) if cfg.fabric.is_fabric else None
        stall = StallDetector(stall_limit)
        drivers = [sources, sinks, PauseMaskDriver(dut, pause)] + ([pfc] if pfc else [])
        # ECN first: a head leaving in this cycle claims a decision taken in it.
        monitors = [m for m in (ecn, sources, sinks, pfc, drops, fabric) if m is not None]

        await reset(dut, [handle for d in drivers for handle in d.inputs()])
        cycle = 0
        stalled = False
        while tally.resolved < tally.total:
            idle_until = self._idle_until(cycle, tally, sources, pfc)
            if idle_until is not None:
                # Nothing in the switch and nothing to offer until then: drop
                # the inputs and let the clock run. Landing after a falling
                # edge, where inputs are always driven: a write at a rising
                # edge would race the flops sampling it.
                sources.quiesce()
                if pfc is not None:
                    pfc.quiesce()
                await ClockCycles(dut.clk, idle_until - cycle, FallingEdge)
                stall.skip(idle_until - cycle)
                cycle = idle_until
            if stall.stalled(cycle):
                stalled = True
                break
            for driver in drivers:
                driver.drive(cycle)
            await ReadOnly()
            progress = False
            for monitor in monitors:
                if monitor.sample(cycle):
                    progress = True
            if progress:
                stall.progress(cycle)
            cycle += 1
            await FallingEdge(dut.clk)

        # The counters are read in the read-only phase of cycle `cycle`: they
        # hold everything up to the last edge, as the model's do.
        sources.quiesce()
        if pfc is not None:
            pfc.quiesce()
        await ReadOnly()
        sinks.finish(rec)
        if not stalled:
            rec.dropped[:] = sources.entered & (rec.tail < 0)
        rec.cycles = cycle
        rec.stalled = stalled
        rec.counters = self._counters()
        if stalled and fabric is not None:
            rec.stuck = fabric.stuck()
        if pfc is not None:
            pfc.finish(rec)
        return rec

    @staticmethod
    def _idle_until(cycle: int, tally: Tally, sources: SourceDriver,
                    pfc: PfcMonitor | None) -> int | None:
        """The cycle the loop may jump to, when nothing happens before it; else None."""
        if tally.inside or sources.sources.busy() or (pfc is not None and pfc.xoff):
            return None
        nxt = sources.sources.next_generation()
        if nxt is not None and pfc is not None and pfc.next_frame(cycle) is not None:
            nxt = min(nxt, pfc.next_frame(cycle))
        return nxt if nxt is not None and nxt > cycle else None

    def _ports(self) -> int:
        """The ports of every router together (the switch's ports, or a fabric's
        global ports)."""
        topo = Topology.of(self.cfg)
        return sum(topo.ports(r) for r in range(topo.routers))

    def _counters(self) -> dict:
        """Every hardware counter, by the names of :mod:`superfabric.formats.counters`,
        indexed like the model's (``sim/fabric/top.py:counters``)."""
        dut, sw, cfg = self.dut, self.cfg.switch, self.cfg
        ports = self._ports()
        names = [(name, ports) for name in PORT_COUNTERS]
        if cfg.pfc.enabled:
            names += [(name, cfg.endpoints * sw.priorities) for name in PFC_COUNTERS]
        if cfg.ecn.enabled:
            names += [(name, ports * sw.priorities) for name in ECN_COUNTERS]
        if cfg.fabric.is_fabric:
            topo = Topology.of(cfg)
            names += [("link_flits", len(topo.links)), ("router_peak", topo.routers)]
        return {name: [int(getattr(dut, f"{name}__{q}").value) for q in range(count)]
                for name, count in names}


@cocotb.test()
async def switch_trace(dut):
    """Run the trace of the parameters through the switch or the fabric top and write
    the RTL's records."""
    cfg, p = tb_params.read()
    trace = Trace.load(p["trace"])
    sink = SinkReady(cfg.endpoints, p.get("sink_stall", 0.0), p.get("sink_seed", 0))
    pause, sink_pause = pause_sources(cfg, p.get("pause_rate", 0.0), p.get("pause_seed", 0))
    rtl = await SwitchTB(dut, cfg).run(trace, sink, pause, sink_pause,
                                       p.get("stall_limit", DEFAULT_STALL_LIMIT))
    rtl.save(p["rtl_records"])
