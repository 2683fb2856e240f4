"""The golden model of the switch against queueing theory and against itself."""

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.sim.backpressure import SinkReady
from superfabric.sim.metrics import summarize
from superfabric.sim.switch import SwitchModel
from superfabric.sim.traffic import Trace, generate

#: Generation to tail delivery of a lone 1-flit packet: skid buffer, buffer
#: write, request, read register, egress queue (docs/architecture.md).
ZERO_LOAD_LATENCY = 4


def _run(overrides, pattern, load, cycles=20_000, seed=1, lengths="fixed:1", stall=0.0):
    cfg = FabricConfig.load(overrides=overrides)
    trace = generate(cfg, pattern, load=load, cycles=cycles, seed=seed, packet_lengths=lengths)
    rec = SwitchModel(cfg).run(trace, sink=SinkReady(cfg.switch.ports, stall, seed))
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


@pytest.mark.parametrize("length", [1, 4, 16])
def test_zero_load_latency(length):
    # Lone packets, far apart: the pipeline depth of docs/architecture.md,
    # plus store-and-forward of the length twice (in and out).
    cfg = FabricConfig.load()
    k = 5
    trace = Trace(gen=np.arange(k, dtype=np.int64) * 100, src=np.arange(k, dtype=np.int16),
                  dst=np.arange(k, dtype=np.int16)[::-1].copy(), prio=np.zeros(k, np.int8),
                  length=np.full(k, length, np.int16), tag=np.arange(k, dtype=np.int64),
                  pattern="hand", load=0.01, seed=0, cycles=k * 100, packet_lengths=f"fixed:{length}")
    rec = SwitchModel(cfg).run(trace)
    assert ((rec.tail - trace.gen) == ZERO_LOAD_LATENCY + 2 * (length - 1)).all()
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
