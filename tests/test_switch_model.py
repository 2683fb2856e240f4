"""The golden model of the switch against queueing theory and against itself."""

from collections import deque

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.sim.backpressure import SinkReady
from superfabric.sim.metrics import summarize
from superfabric.sim.fabric.top import FabricModel
from superfabric.sim.fabric.core import FabricCore
from superfabric.sim.traffic import Trace, generate

#: Generation to tail delivery of a lone 1-flit packet: skid buffer, buffer
#: write, request, read register, egress queue (docs/architecture.md).
ZERO_LOAD_LATENCY = 4


def _run(overrides, pattern, load, cycles=20_000, seed=1, lengths="fixed:1", stall=0.0):
    cfg = FabricConfig.load(overrides=overrides)
    trace = generate(cfg, pattern, load=load, cycles=cycles, seed=seed, packet_lengths=lengths)
    rec = FabricModel(cfg).run(trace, sink=SinkReady(cfg.switch.ports, stall, seed))
    return cfg, trace, rec, summarize(trace, rec, cfg.switch.ports)


def test_fifo_saturates_at_head_of_line_limit():
    # Karol et al.: 0.618 for N = 8 with one FIFO per input.
    _, _, _, s = _run(["switch.scheduler=fifo"], "uniform", 1.0)
    assert abs(s["throughput"] - 0.618) <= 0.02, s["throughput"]


def test_islip_accepts_nearly_line_rate():
    _, _, _, s = _run(["switch.islip_iterations=3"], "uniform", 1.0)
    assert s["throughput"] >= 0.95, s["throughput"]


@pytest.mark.parametrize("load", [0.3, 0.6, 0.9])
def test_latency_not_below_output_queued_bound(load):
    cfg, _, _, s = _run([], "uniform", load)
    n = cfg.switch.ports
    bound = (n - 1) / n * load / (2 * (1 - load))
    assert s["latency"]["mean"] - ZERO_LOAD_LATENCY >= bound, (s["latency"]["mean"], bound)
    assert abs(s["throughput"] - load) <= 0.02


@pytest.mark.parametrize("registered", [False, True])
@pytest.mark.parametrize("length", [1, 4, 16])
def test_zero_load_latency(length, registered):
    # Lone packets, far apart: the pipeline depth of docs/architecture.md,
    # plus store-and-forward of the length twice (in and out); a registered
    # grant adds its one cycle from match to start (section 5.4).
    cfg = FabricConfig.load(overrides=[f"switch.registered_grant={str(registered).lower()}"])
    k = 5
    trace = Trace(gen=np.arange(k, dtype=np.int64) * 100, src=np.arange(k, dtype=np.int16),
                  dst=np.arange(k, dtype=np.int16)[::-1].copy(), prio=np.zeros(k, np.int8),
                  length=np.full(k, length, np.int16), tag=np.arange(k, dtype=np.int64),
                  pattern="hand", load=0.01, seed=0, cycles=k * 100, packet_lengths=f"fixed:{length}")
    rec = FabricModel(cfg).run(trace)
    assert ((rec.tail - trace.gen) == ZERO_LOAD_LATENCY + registered + 2 * (length - 1)).all()
    assert ((rec.tail - rec.head) == length - 1).all()


def test_lossless_under_overload_delivers_everything():
    cfg, trace, rec, s = _run(["switch.buffer_flits=64"], "incast", 1.0, cycles=3000,
                              lengths="bimodal:1,8,0.5")
    assert s["packets"]["dropped"] == 0
    assert s["packets"]["delivered"] == len(trace)
    assert not rec.stalled
    # The sink port is the bottleneck: it runs at line rate, others idle.
    assert s["throughput_per_port"][0] > 0.95


def test_drop_mode_drops_whole_packets_and_counts_them():
    cfg, trace, rec, s = _run(["switch.buffer_flits=32", "switch.ingress_full=drop"],
                              "incast", 1.0, cycles=3000, lengths="bimodal:1,8,0.5")
    dropped = rec.dropped
    assert dropped.any()
    assert (rec.tail[dropped] < 0).all() and (rec.head[dropped] < 0).all()
    assert (rec.tail[~dropped] >= 0).all()
    assert sum(rec.counters["drops"]) == int(dropped.sum())
    per_port = np.bincount(trace.src[dropped], minlength=cfg.switch.ports).tolist()
    assert rec.counters["drops"] == per_port


def test_packets_leave_at_their_destination_in_order():
    _, trace, rec, _ = _run(["switch.priorities=3"], "uniform", 0.8, cycles=3000,
                            lengths="bimodal:1,5,0.6", stall=0.2)
    assert (rec.out_port == trace.dst).all()
    for key in set(zip(trace.src.tolist(), trace.dst.tolist(), trace.prio.tolist())):
        sel = (trace.src == key[0]) & (trace.dst == key[1]) & (trace.prio == key[2])
        assert (np.diff(rec.head[sel]) > 0).all()


def test_strict_priority_serves_the_high_class_first():
    # Incast with two classes: the high class's latency stays near zero-load.
    cfg, trace, rec, _ = _run(["switch.priorities=2"], "incast", 0.5, cycles=4000)
    lat = rec.tail - trace.gen
    high, low = lat[trace.prio == 1].mean(), lat[trace.prio == 0].mean()
    assert high < low, (high, low)


def test_sink_backpressure_slows_delivery_and_is_reproducible():
    _, _, rec_a, s_a = _run([], "uniform", 0.5, cycles=3000, stall=0.3)
    _, _, rec_b, _ = _run([], "uniform", 0.5, cycles=3000, stall=0.3)
    _, _, _, s_free = _run([], "uniform", 0.5, cycles=3000, stall=0.0)
    assert (rec_a.tail == rec_b.tail).all()
    assert s_a["latency"]["mean"] > s_free["latency"]["mean"]


class _Endpoints:
    """A hand-made dynamic source: packets are created while the switch runs.

    Each input sends its packets in creation order, back to back, with the
    interface of :class:`~superfabric.sim.source.Sources` that
    :meth:`FabricCore.step` calls.
    """

    def __init__(self, core):
        self.core = core
        self.backlog = [deque() for _ in range(core.ports)]
        self.packet = [-1] * core.ports
        self.flit = [0] * core.ports

    def send(self, src, dst, length):
        pkt = self.core.add_packet(dst, 0, length)
        self.backlog[src].append(pkt)
        return pkt

    def offer(self, port, cycle):
        if self.packet[port] < 0 and self.backlog[port]:
            self.packet[port], self.flit[port] = self.backlog[port].popleft(), 0
        return self.packet[port]

    def accept(self, port):
        self.flit[port] += 1
        if self.flit[port] == self.core.length[self.packet[port]]:
            self.packet[port] = -1


def test_core_steps_a_packet_created_mid_run_at_zero_load_latency():
    # docs/architecture.md 5.4: generated in cycle g, flit k of an L-flit
    # packet is handed over in g + L + 3 + k, so the tail in g + 2L + 2.
    cfg = FabricConfig.load()
    core = FabricCore(cfg)
    ends = _Endpoints(core)
    g, length, every = 7, 4, (1 << cfg.switch.ports) - 1
    seen = []
    for cycle in range(40):
        if cycle == g:
            pkt = ends.send(2, 5, length)
        assert core.busy() == (g < cycle <= g + 2 * length + 2)
        seen += [(cycle, flit) for flit in core.step(cycle, ends, every)]
    assert pkt == 0
    assert seen == [(g + length + 3 + k, (5, pkt, k, k == length - 1)) for k in range(length)]
    assert (core.head.tolist(), core.tail.tolist(), core.out_port.tolist()) == \
        ([g + length + 3], [g + 2 * length + 2], [5])
    assert core.outstanding == 0 and core.counters(40)["tx_packets"][5] == 1


def test_core_delivers_packets_created_in_reaction_to_deliveries():
    # Ping-pong between ports 0 and 3: each 1-flit packet is answered in the
    # cycle after its delivery, so a leg takes 4 + 1 cycles; a burst added
    # mid-run on other ports (1 -> 6) is delivered too and changes nothing.
    cfg = FabricConfig.load()
    core = FabricCore(cfg)
    ends = _Endpoints(core)
    every = (1 << cfg.switch.ports) - 1
    src = {ends.send(0, 3, 1): 0}
    tails, burst = [], []
    for cycle in range(60):
        if cycle == 20:
            burst = [ends.send(1, 6, 2) for _ in range(3)]
        for o, pkt, k, last in core.step(cycle, ends, every):
            if pkt in src and last:
                tails.append(cycle)
                if len(tails) < 10:
                    src[ends.send(o, src[pkt], 1)] = o    # created now, offered next cycle
    assert tails == [5 * leg + 4 for leg in range(10)]
    assert [core.out_port[p] for p in burst] == [6, 6, 6]
    assert core.tail[burst[0]] == 20 + 2 * 2 + 2
    assert all(core.tail[p] > core.tail[q] for p, q in zip(burst[1:], burst))
    assert core.outstanding == 0 and not core.busy()


def test_core_with_packets_created_at_generation_matches_the_trace_run():
    # Registering packets only when they are generated, and stepping every
    # cycle (no idle jumps), gives the records of the whole-trace run.
    cfg = FabricConfig.load(overrides=["switch.priorities=1", "switch.buffer_flits=32",
                                       "switch.ingress_full=drop"])
    n = cfg.switch.ports
    trace = generate(cfg, "uniform", load=0.6, cycles=2000, seed=3, packet_lengths="bimodal:1,8,0.5")
    sink = SinkReady(n, 0.2, 3)
    rec = FabricModel(cfg).run(trace, sink=sink)
    core = FabricCore(cfg)
    ends = _Endpoints(core)
    row, cycle = 0, 0
    while row < len(trace) or core.outstanding:
        while row < len(trace) and trace.gen[row] == cycle:
            assert ends.send(int(trace.src[row]), int(trace.dst[row]), int(trace.length[row])) == row
            row += 1
        core.step(cycle, ends, sink.mask(cycle))
        cycle += 1
    assert rec.dropped.any() and cycle == rec.cycles
    assert core.head.tolist() == rec.head.tolist() and core.tail.tolist() == rec.tail.tolist()
    assert core.dropped.tolist() == rec.dropped.tolist()
    assert core.counters(cycle) == rec.counters
