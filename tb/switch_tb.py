"""cocotb testbench of the switch: drive a trace, record every packet, compare with the model.

Parameters (``superfabric.tb.params``): ``trace`` (an ``.npz`` from
``Trace.save``), ``rtl_records`` (where to write the RTL's records),
``model_records`` (the golden model's records to hold the RTL against;
optional), ``sink_stall`` and ``sink_seed`` (egress backpressure),
``pause_rate`` and ``pause_seed`` (the pause mask schedule),
``stall_limit``, and ``report`` (where a mismatch report goes).

Python per clock edge is the cost that matters: one coroutine drives and
samples every port, twice per cycle (drive after the falling edge, sample in
the read-only phase before the rising edge), writes a signal only when its
value changes, reads payloads only of valid outputs, and skips idle
stretches of the trace with a single timer.
"""

from collections import deque
from pathlib import Path

import numpy as np

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly

from ..hdl.packet import FlitCodec, packet_layout
from ..config import PfcConfig
from ..hdl.pfc_frame import REQUEST_LAYOUT
from ..sim.backpressure import PauseSchedule, SinkReady
from ..sim.pfc import FRAME_COLUMNS, SinkPause, pause_sources
from ..sim.records import Records
from ..sim.source import Sources
from ..sim.fabric import DEFAULT_STALL_LIMIT
from ..sim.traffic import Trace
from . import params as tb_params
from .payload import flit_data
from .scoreboard import compare

__all__ = ["SwitchTB"]


def _times(times):
    """Eight pause times as the side channel's array field (list of 8 ints -> int)."""
    return sum(t << (16 * j) for j, t in enumerate(times))


def _untimes(bits):
    return [(bits >> (16 * j)) & 0xFFFF for j in range(8)]


class SwitchTB:
    """Clock, reset, sources and sinks of one switch instance."""

    def __init__(self, dut, cfg):
        self.dut = dut
        self.cfg = cfg
        sw = cfg.switch
        self.ports = sw.ports
        self.codec = FlitCodec(packet_layout(cfg))
        self.data_mask = (1 << sw.data_width) - 1
        self.tag_mask = (1 << sw.tag_width) - 1
        self.in_valid = [getattr(dut, f"i__{k}__valid") for k in range(self.ports)]
        self.in_ready = [getattr(dut, f"i__{k}__ready") for k in range(self.ports)]
        self.in_payload = [getattr(dut, f"i__{k}__payload") for k in range(self.ports)]
        self.out_valid = [getattr(dut, f"o__{k}__valid") for k in range(self.ports)]
        self.out_ready = [getattr(dut, f"o__{k}__ready") for k in range(self.ports)]
        self.out_payload = [getattr(dut, f"o__{k}__payload") for k in range(self.ports)]

    async def reset(self):
        """Start the clock, hold reset for a few cycles, release it after a falling edge."""
        dut = self.dut
        Clock(dut.clk, 10, unit="ns").start()
        dut.rst.value = 1
        dut.pause.value = 0
        for k in range(self.ports):
            self.in_valid[k].value = 0
            self.in_payload[k].value = 0
            self.out_ready[k].value = 0
        await ClockCycles(dut.clk, 3)
        await FallingEdge(dut.clk)
        dut.rst.value = 0

    def _header(self, trace, pkt):
        return self.codec.pack(dst=int(trace.dst[pkt]), src=int(trace.src[pkt]),
                               prio=int(trace.prio[pkt]), ecn=int(trace.ecn[pkt]),
                               length=int(trace.length[pkt]),
                               tag=int(trace.tag[pkt]) & self.tag_mask)

    async def run(self, trace: Trace, sink: SinkReady, pause: PauseSchedule,
                  sink_pause: SinkPause | None = None,
                  stall_limit: int = DEFAULT_STALL_LIMIT) -> Records:
        """Drive ``trace`` from cycle 0 (the first after reset) until every packet is resolved."""
        n = self.ports
        if len(trace) > self.tag_mask + 1:
            raise ValueError(f"trace of {len(trace)} packets needs switch.tag_width >= "
                             f"{(len(trace) - 1).bit_length()}")
        codec, dut = self.codec, self.dut
        length = trace.length.tolist()
        tags = trace.tag.tolist()
        dst = trace.dst.tolist()
        rec = Records.empty(len(trace))
        head, tail, out_port = rec.head, rec.tail, rec.out_port
        payload_ok = [True] * len(trace)
        sources = Sources(trace, n, self.cfg.switch.priorities)
        headers = {}
        driven = [None] * n           # payload currently on each input, None when valid is low
        ready_driven = -1
        pause_driven = 0
        expect = [None] * n           # (packet, next flit) being received on each output
        inside = 0                    # packets accepted at an input and not yet resolved
        resolved = 0
        drops_seen = 0
        entered = [False] * len(trace)
        drop_counters = ([getattr(dut, f"drops__{k}") for k in range(n)]
                         if self.cfg.switch.ingress_full == "drop" else [])
        tag_field = codec.field_spec("tag")
        # The switch may rewrite ECN (ECT to CE): the payload check leaves the
        # field out and records it per packet; the scoreboard compares it.
        ecn_offset, ecn_mask = codec.field_spec("ecn")
        keep = ~(ecn_mask << ecn_offset)
        ecn_out = rec.ecn_out
        ecn_out[:] = trace.ecn        # until delivered: what it was sent with
        ecn_backlog = rec.ecn_backlog
        ecn_on = self.cfg.ecn.enabled
        decided = dut.ecn_decided if ecn_on else None
        seen = [getattr(dut, f"ecn_backlog__{k}") for k in range(n)] if ecn_on else []
        decisions = [deque() for _ in range(n)]
        # Priority flow control: frames the switch sends upstream pause the
        # sources from the next cycle; the sinks' frames go into pfc_rx.
        pfc_on = self.cfg.pfc.enabled
        np_ = self.cfg.switch.priorities
        pfc_codec = FlitCodec(REQUEST_LAYOUT) if pfc_on else None
        tx_valid = dut.pfc_tx_valid if pfc_on else None
        tx = [getattr(dut, f"pfc_tx__{k}") for k in range(n)] if pfc_on else []
        rx = [getattr(dut, f"pfc_rx__{k}") for k in range(n)] if pfc_on else []
        rx_driven = 0
        xoff = set()                  # (port, class) paused upstream, as the frames say
        frames = []
        first_bit = 1 << codec.field_spec("first")[0]
        last_bit = 1 << codec.field_spec("last")[0]
        cycle = 0
        last_progress = 0
        stalled = False
        total = len(trace)

        while resolved < total:
            if inside == 0 and not sources.busy() and not xoff:
                nxt = sources.next_generation()
                if nxt is not None and pfc_on and sink_pause.next_frame(cycle) is not None:
                    nxt = min(nxt, sink_pause.next_frame(cycle))
                if nxt is not None and nxt > cycle:
                    # Idle: nothing in the switch, nothing to offer until nxt.
                    for k in range(n):
                        if driven[k] is not None:
                            self.in_valid[k].value = 0
                            driven[k] = None
                    # Land after a falling edge, where inputs are always driven:
                    # a write at a rising edge would race the flops sampling it.
                    if rx_driven:
                        dut.pfc_rx_valid.value = rx_driven = 0
                    await ClockCycles(dut.clk, nxt - cycle, FallingEdge)
                    last_progress += nxt - cycle
                    cycle = nxt
            if cycle - last_progress >= stall_limit:
                stalled = True
                break

            # Drive this cycle's inputs (we are just after a falling edge).
            offered = [-1] * n
            for k in range(n):
                pkt = sources.offer(k, cycle)
                if pkt >= 0:
                    offered[k] = pkt
                    flit = sources.flit[k]
                    hdr = headers.get(pkt)
                    if hdr is None:
                        hdr = headers[pkt] = self._header(trace, pkt)
                    value = hdr | flit_data(tags[pkt], flit, self.data_mask)
                    if flit == 0:
                        value |= first_bit
                    if flit == length[pkt] - 1:
                        value |= last_bit
                    if driven[k] is None:
                        self.in_valid[k].value = 1
                    if driven[k] != value:
                        self.in_payload[k].value = value
                        driven[k] = value
                elif driven[k] is not None:
                    self.in_valid[k].value = 0
                    driven[k] = None
            mask = sink.mask(cycle)
            if mask != ready_driven:
                for k in range(n):
                    bit = (mask >> k) & 1
                    if ready_driven < 0 or bit != (ready_driven >> k) & 1:
                        self.out_ready[k].value = bit
                ready_driven = mask

            paused = pause.mask(cycle)
            if paused != pause_driven:
                dut.pause.value = paused
                pause_driven = paused
            if pfc_on:
                valid = 0
                for port, enable, times in sink_pause.frames(cycle):
                    rx[port].value = pfc_codec.pack(class_enable=enable, times=_times(times))
                    valid |= 1 << port
                if valid != rx_driven:
                    dut.pfc_rx_valid.value = rx_driven = valid

            await ReadOnly()
            progress = False
            if ecn_on:
                bits = int(decided.value)
                if bits:
                    for k in range(n):
                        if (bits >> k) & 1:
                            decisions[k].append(int(seen[k].value))
            for k in range(n):
                pkt = offered[k]
                if pkt >= 0 and self.in_ready[k].value:
                    if sources.flit[k] == 0:
                        inside += 1
                        entered[pkt] = True
                    sources.accept(k)
                    progress = True
            for k in range(n):
                if not (mask >> k) & 1 or not self.out_valid[k].value:
                    continue
                progress = True
                value = int(self.out_payload[k].value)
                cur = expect[k]
                if cur is None:
                    tag = (value >> tag_field[0]) & tag_field[1]
                    pkt = tag   # tags are trace indices (the trace fits the tag width)
                    flit = 0
                    if pkt >= total or head[pkt] >= 0:
                        raise AssertionError(f"cycle {cycle}: output {k} delivered unknown or "
                                             f"repeated tag {tag}")
                    head[pkt] = cycle
                    out_port[pkt] = k
                    ecn_out[pkt] = (value >> ecn_offset) & ecn_mask
                    if ecn_on:
                        ecn_backlog[pkt] = decisions[k].popleft() if decisions[k] else -2
                else:
                    pkt, flit = cur
                expected = headers.get(pkt)
                if expected is None:
                    expected = headers[pkt] = self._header(trace, pkt)
                expected |= flit_data(tags[pkt], flit, self.data_mask)
                if flit == 0:
                    expected |= first_bit
                if flit == length[pkt] - 1:
                    expected |= last_bit
                if ((value ^ expected) & keep or dst[pkt] != k
                        or (value >> ecn_offset) & ecn_mask != ecn_out[pkt]):
                    payload_ok[pkt] = False
                if flit == length[pkt] - 1:
                    tail[pkt] = cycle
                    expect[k] = None
                    inside -= 1
                    resolved += 1
                else:
                    expect[k] = (pkt, flit + 1)
            if pfc_on:
                bits = int(tx_valid.value)
                for k in range(n) if bits else ():
                    if (bits >> k) & 1:
                        frame = pfc_codec.unpack(int(tx[k].value))
                        enable, times = frame["class_enable"], _untimes(frame["times"])
                        frames.append((cycle, k, enable, *times))
                        for p in range(np_):
                            if enable >> p & 1:
                                sources.pause(k, p, cycle + 1, PfcConfig.quanta_to_cycles(
                                    times[p], self.cfg.switch.data_width))
                                (xoff.add if times[p] else xoff.discard)((k, p))
                        progress = True
            # A dropped packet is resolved when the drop counters say so; which
            # packets they were is known at the end: entered, never delivered.
            drops_now = sum(int(d.value) for d in drop_counters)
            if drops_now != drops_seen:
                resolved += drops_now - drops_seen
                inside -= drops_now - drops_seen
                drops_seen = drops_now
                progress = True
            if progress:
                last_progress = cycle + 1
            cycle += 1
            await FallingEdge(dut.clk)

        # Counters are read in the read-only phase of cycle `cycle`: they hold
        # everything up to the last edge, as the model's do.
        for k in range(n):
            if driven[k] is not None:
                self.in_valid[k].value = 0
        if pfc_on and rx_driven:
            dut.pfc_rx_valid.value = 0
        await ReadOnly()
        rec.payload_ok[:] = payload_ok
        rec.payload_ok[rec.tail < 0] = False
        if not stalled:
            rec.dropped[:] = np.array(entered, bool) & (rec.tail < 0)
        rec.cycles = cycle
        rec.stalled = stalled
        rec.counters = {
            "rx_packets": [int(getattr(dut, f"rx_packets__{k}").value) for k in range(n)],
            "tx_packets": [int(getattr(dut, f"tx_packets__{k}").value) for k in range(n)],
            "drops": [int(getattr(dut, f"drops__{k}").value) for k in range(n)],
        }
        if pfc_on:
            rec.pfc_frames = np.array(frames, np.int64).reshape(-1, FRAME_COLUMNS)
            for name in ("pfc_tx_frames", "pfc_rx_frames", "pfc_paused_cycles",
                         "pfc_peak_occupancy"):
                rec.counters[name] = [int(getattr(dut, f"{name}__{q}").value)
                                      for q in range(n * np_)]
        if ecn_on:
            rec.counters["ecn_marks"] = [int(getattr(dut, f"ecn_marks__{q}").value)
                                         for q in range(n * self.cfg.switch.priorities)]
        return rec


@cocotb.test()
async def switch_trace(dut):
    """Run the trace of the parameters and hold the RTL against the golden model."""
    cfg, p = tb_params.read()
    trace = Trace.load(p["trace"])
    sink = SinkReady(cfg.switch.ports, p.get("sink_stall", 0.0), p.get("sink_seed", 0))
    pause, sink_pause = pause_sources(cfg, p.get("pause_rate", 0.0), p.get("pause_seed", 0))
    tb = SwitchTB(dut, cfg)
    await tb.reset()
    rtl = await tb.run(trace, sink, pause, sink_pause, p.get("stall_limit", DEFAULT_STALL_LIMIT))
    rtl.save(p["rtl_records"])
    if p.get("model_records"):
        model = Records.load(p["model_records"])
        result = compare(trace, rtl, model)
        if p.get("report") and not result.exact:
            Path(p["report"]).write_text(result.report())
        assert result.exact, result.summary()
