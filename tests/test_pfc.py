"""Priority flow control: losslessness, thresholds, the ingress and egress blocks against
the model under Amaranth's simulator, and the switch RTL against the model on both simulators."""

import json
import random

import numpy as np
import pytest

from superfabric.config import ConfigError, FabricConfig
from superfabric.hdl.pfc import PfcEgress, PfcIngress
from superfabric.sim.pfc import (SinkPause, lossless_classes, paused_cycles, pfc_egress_receive,
                                 pfc_ingress_step, size_thresholds)
from superfabric.sim.fabric.top import FabricModel
from superfabric.sim.traffic import generate
from superfabric.tools.run import run_point

from block_stimulus import BufferTraffic, drive, simulate


def _sized(preset="default", **link):
    """A PFC configuration whose thresholds come from the sizing helper."""
    cfg = FabricConfig.load(preset=preset, overrides=["pfc.enabled=true",
                                                      "switch.ingress_full=drop"])
    t = size_thresholds(cfg, **(link or dict(link_gbps=100, cable_m=0, mtu_bytes=64,
                                             response_ns=0)))
    return FabricConfig.load(preset=preset, overrides=[
        "pfc.enabled=true", "switch.ingress_full=drop",
        f"pfc.xoff={t['xoff']}", f"pfc.xon={t['xon']}", f"pfc.headroom={t['headroom']}"])


def test_incast_is_lossless_with_pfc_and_not_without():
    cfg = _sized()
    trace = generate(cfg, "incast", load=1.0, cycles=4000, seed=1, packet_lengths="bimodal:1,16,0.5")
    rec = FabricModel(cfg).run(trace)
    assert not rec.dropped.any() and (rec.tail >= 0).all()
    assert len(rec.pfc_frames) > 0
    limit = cfg.pfc.xoff + cfg.pfc.headroom
    assert 0 < max(rec.counters["pfc_peak_occupancy"]) <= limit
    off = FabricConfig.from_dict({**cfg.to_dict(), "pfc": {**cfg.to_dict()["pfc"], "enabled": False}})
    rec_off = FabricModel(off).run(trace)
    assert rec_off.dropped.sum() > 0
    assert sum(rec_off.counters["drops"]) == int(rec_off.dropped.sum())


def test_frames_pause_refresh_and_resume():
    cfg = _sized()
    trace = generate(cfg, "incast", load=1.0, cycles=3000, seed=2)
    rec = FabricModel(cfg).run(trace)
    frames = rec.pfc_frames
    times = frames[:, 3:]
    pauses = (times == cfg.pfc.pause_quanta).any(axis=1)
    resumes = ~pauses
    assert pauses.any() and resumes.any()
    assert set(np.unique(times)) <= {0, cfg.pfc.pause_quanta}
    # Per (port, class): pause and resume alternate, starting with a pause,
    # and refreshes come at most every half pause.
    for port in np.unique(frames[:, 1]):
        mine = frames[frames[:, 1] == port]
        for p in range(cfg.switch.priorities):
            rows = mine[(mine[:, 2] >> p) & 1 == 1]
            if not len(rows):
                continue
            assert rows[0, 3 + p] > 0
            gaps = np.diff(rows[:, 0])
            refresh = cfg.pfc.refresh_cycles(cfg.switch.data_width)
            both_paused = (rows[1:, 3 + p] > 0) & (rows[:-1, 3 + p] > 0)
            assert (gaps[both_paused] == refresh).all()
    assert sum(rec.counters["pfc_tx_frames"]) == int(sum(bin(e).count("1") for e in frames[:, 2]))


def test_sink_pause_stops_the_class_toward_that_output():
    cfg = _sized()
    trace = generate(cfg, "uniform", load=0.5, cycles=3000, seed=3)
    sink = SinkPause(cfg, 0.3, seed=3)
    rec = FabricModel(cfg).run(trace, sink_pause=sink)
    free = FabricModel(cfg).run(trace)
    assert sum(rec.counters["pfc_rx_frames"]) > 0
    assert sum(rec.counters["pfc_paused_cycles"]) > 0
    assert (rec.tail - trace.gen).mean() > (free.tail - trace.gen).mean()
    # No packet of a paused (output, class) starts while the pause holds.
    starts = rec.head - 2        # a head leaves 2 cycles after its start
    for o, p in {(int(d), int(q)) for d, q in zip(trace.dst, trace.prio)}:
        mine = starts[(trace.dst == o) & (trace.prio == p)]
        for cycle in range(0, 3000, sink.period):
            if any(f[0] == o and (f[1] >> p) & 1 and f[2][p] for f in sink.frames(cycle)):
                window = (mine > cycle) & (mine <= cycle + sink.period)
                assert not window.any(), (o, p, cycle)


def test_stall_is_detected_not_a_hang():
    # Sinks that never stop pausing: no progress, the run ends as stalled.
    cfg = _sized()
    trace = generate(cfg, "uniform", load=0.3, cycles=500, seed=4)
    rec = FabricModel(cfg).run(trace, sink_pause=SinkPause(cfg, 0.999, seed=4), stall_limit=400)
    assert rec.stalled
    assert (rec.tail < 0).any()


def test_pfc_config_is_validated():
    for overrides, message in (
            (["pfc.enabled=true", "pfc.xon=96"], "pfc.xon = 96: must be below pfc.xoff"),
            (["pfc.enabled=true", "pfc.xoff=500"], "pfc.xoff = 500: must be at most"),
            (["pfc.enabled=true", "pfc.priorities=[4]"], "pfc.priorities = [4]: class 4"),
            (["pfc.enabled=true", "pfc.xoff=120"], "must fit switch.buffer_flits"),
            (["pfc.enabled=true", "switch.data_width=48"], "switch.data_width = 48"),
            (["pfc.priorities=[1, 1]"], "distinct class numbers")):
        with pytest.raises(ConfigError) as e:
            FabricConfig.load(overrides=overrides)
        assert message in str(e.value) and "\\n" not in str(e.value)


def test_sizing_helper_follows_the_link():
    cfg = FabricConfig.load(overrides=["pfc.enabled=true"])
    short = size_thresholds(cfg, link_gbps=100, cable_m=1, mtu_bytes=64, response_ns=0)
    long = size_thresholds(cfg, link_gbps=100, cable_m=3, mtu_bytes=64, response_ns=0)
    assert long["headroom"] > short["headroom"]
    assert long["xoff"] + long["headroom"] <= cfg.switch.buffer_flits // 4
    assert short["xon"] < short["xoff"]
    with pytest.raises(ValueError, match="switch.buffer_flits"):
        size_thresholds(cfg, link_gbps=400, cable_m=100, mtu_bytes=4096, response_ns=1000)


PFC_CASES = {
    "incast": ("incast", 1.0, "bimodal:1,4,0.5", 0.0, []),
    "ring-sinks": ("ring-allreduce", 0.9, "fixed:3", 0.25, []),
    "uniform-ecn": ("uniform", 0.8, "bimodal:1,6,0.5", 0.2, ["ecn.enabled=true", "ecn.kmin=4",
                                                            "ecn.kmax=32", "ecn.ect_fraction=0.8"]),
}


@pytest.mark.parametrize("name", sorted(PFC_CASES))
def test_rtl_pause_frames_match_model(name, sim, tmp_path, build_root):
    pattern, load, lengths, pause_rate, extra = PFC_CASES[name]
    cfg = FabricConfig.load(preset="tiny", overrides=["pfc.enabled=true", "switch.ingress_full=drop",
                                                      "pfc.xoff=36", "pfc.xon=20", "pfc.headroom=20",
                                                      "pfc.pause_quanta=64", *extra])
    res = run_point(cfg, traffic=pattern, load=load, cycles=700, seed=5, sim=sim, out_dir=tmp_path,
                    packet_lengths=lengths, pause_rate=pause_rate, build_root=build_root)
    assert res["match"]["exact"], json.dumps(res["match"])
    assert res["packets"]["dropped"] == 0
    assert res["pfc"] == res["model"]["pfc"]
    assert res["pfc"]["frames_sent"] > 0 or pause_rate > 0
    assert res["pfc"]["peak_occupancy"] <= res["pfc"]["occupancy_limit"]
    if pause_rate:
        assert sum(map(sum, res["pfc"]["received_per_port_class"])) > 0


# -- the ingress and egress blocks against the model in Amaranth's simulator ------------

#: Cycles per block case.
BLOCK_CYCLES = 3000


def _pfc_block_config(rng) -> FabricConfig:
    """A random switch with PFC: lossless classes, thresholds low enough to cross often
    (``xon = 0`` now and then, the RTL's constant branch), a pause of at most 64 cycles so
    refreshes come often, and any power-of-two flit width (quanta convert to cycles by a
    shift up or down)."""
    ports, priorities = rng.randrange(2, 13), rng.randrange(1, 9)
    lossless = sorted(rng.sample(range(priorities), rng.randrange(1, priorities + 1)))
    buffer_flits = rng.choice([16, 32, 64])
    headroom = rng.randrange(0, 5)
    xoff = rng.randrange(2, max(3, min(12, buffer_flits // len(lossless) - headroom)))
    xon = 0 if rng.random() < 0.25 else rng.randrange(1, xoff)
    data_width = 1 << rng.randrange(3, 11)
    quanta = max(1, rng.choice([1, 2, 4, 8]) * data_width // 512)
    return FabricConfig.load(preset="tiny", overrides=[
        f"switch.ports={ports}", f"switch.priorities={priorities}",
        f"switch.buffer_flits={buffer_flits}", f"switch.max_packet_flits={rng.choice([1, 4, 8])}",
        "switch.islip_iterations=1", f"switch.data_width={data_width}",
        "pfc.enabled=true", f"pfc.priorities={lossless}", f"pfc.xoff={xoff}", f"pfc.xon={xon}",
        f"pfc.headroom={headroom}", f"pfc.pause_quanta={quanta}"])


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_ingress_block_equals_the_model(seed):

    rng = random.Random(seed)
    cfg = _pfc_block_config(rng)
    sw, pfc = cfg.switch, cfg.pfc
    n, np_ = sw.ports, sw.priorities
    refresh_period = pfc.refresh_cycles(sw.data_width)
    dut = PfcIngress(cfg, refresh=refresh_period)
    occupancy, refresh = np.zeros((n, np_), np.int64), np.zeros((n, np_), np.int64)
    paused = np.zeros((n, np_), np.bool_)
    frames_sent, peak = np.zeros(n * np_, np.int64), np.zeros(n * np_, np.int64)
    enable, times = np.zeros(n, np.int64), np.zeros((n, 8), np.int64)
    lossless = lossless_classes(cfg)
    traffic = BufferTraffic(rng, ports=n, priorities=np_, buffer_flits=sw.buffer_flits,
                            max_flits=sw.max_packet_flits, load=rng.choice([0.6, 1.0]),
                            stall=0.1, no_credit=rng.choice([0.3, 0.6]), hotspot=0.5,
                            hot_queue=pfc.priorities[0])
    seen = {"pause": 0, "refresh": 0, "resume": 0}
    wrong = []

    async def testbench(ctx):
        for cycle in range(BLOCK_CYCLES):
            ev = traffic.next()
            drive(ctx, [(dut.wr[k], ev.wr[k] is not None) for k in range(n)]
                  + [(dut.wr_prio[k], (ev.wr[k] or 0) % np_) for k in range(n)]
                  + [(dut.rd[k], ev.rd[k] is not None) for k in range(n)]
                  + [(dut.rd_prio[k], (ev.rd[k] or 0) % np_) for k in range(n)])
            # Counters are registers: they show the model's state before this cycle's step.
            got = [(ctx.get(dut.frames_sent[q]), ctx.get(dut.peak[q])) for q in range(n * np_)]
            if got != list(zip(frames_sent.tolist(), peak.tolist())):
                wrong.append((cycle, "(frames_sent, peak)", got, list(zip(frames_sent, peak))))
            was_paused = paused.copy()
            pfc_ingress_step(occupancy, paused, refresh, frames_sent, peak, lossless, pfc.xoff,
                             pfc.xon, pfc.pause_quanta, refresh_period, enable, times)
            tx_valid = sum(ctx.get(dut.tx[k].valid) << k for k in range(n))
            for k in range(n):
                frame = ctx.get(dut.tx[k].payload)
                got = (tx_valid >> k & 1, frame.class_enable, list(frame.times))
                want = (int(enable[k] != 0), int(enable[k]), times[k].tolist())
                if got != want:
                    wrong.append((cycle, f"port {k} (tx_valid, class_enable, times)", got, want))
                for p in range(np_):
                    if enable[k] >> p & 1:
                        kind = ("resume" if not paused[k, p] else
                                "refresh" if was_paused[k, p] else "pause")
                        seen[kind] += 1
            for k in range(n):
                if ev.wr[k] is not None:
                    occupancy[k, ev.wr[k] % np_] += 1
                if ev.rd[k] is not None:
                    occupancy[k, ev.rd[k] % np_] -= 1
            await ctx.tick()

    simulate(dut, testbench)
    assert not wrong, f"{cfg.switch} {cfg.pfc}: {len(wrong)} differences; first: {wrong[0]}"
    # Every event of the XOFF/XON machines happened, many times; with xon = 0 a class
    # never resumes, so it pauses once and refreshes from then on.
    least = {"pause": 10, "refresh": 10, "resume": 10} if pfc.xon else {"pause": 1, "refresh": 10}
    assert all(seen[kind] >= count for kind, count in least.items()), (cfg.pfc, seen)


@pytest.mark.parametrize("seed", range(4))
def test_egress_block_equals_the_model(seed):

    rng = random.Random(seed)
    cfg = _pfc_block_config(rng)
    sw = cfg.switch
    n, np_ = sw.ports, sw.priorities
    dut = PfcEgress(cfg)
    start, until, before, received = (np.zeros(n * np_, np.int64) for _ in range(4))
    # Frames as a peer sends them: any classes, times from zero (resume) to the longest.
    rate = rng.choice([0.02, 0.1])
    spans = [0, 0]        # pauses that ran out by themselves, pauses cut short by a frame
    wrong = []

    def frame():
        times = [rng.choice([0, 1, 2, rng.randrange(1, 64), rng.randrange(1, 1 << 16)])
                 for _ in range(8)]
        return rng.randrange(1, 256), times

    async def testbench(ctx):
        for cycle in range(BLOCK_CYCLES):
            frames = {o: frame() for o in range(n) if rng.random() < rate}
            drive(ctx, [(dut.rx[o].valid, o in frames) for o in range(n)]
                  + [(dut.rx[o].payload, {"class_enable": frames[o][0], "times": frames[o][1]}
                      if o in frames else 0) for o in range(n)])
            want_pause = sum(1 << q for q in range(n * np_) if start[q] <= cycle < until[q])
            got = (ctx.get(dut.pause), [ctx.get(dut.frames_received[q]) for q in range(n * np_)],
                   [ctx.get(dut.paused_cycles[q]) for q in range(n * np_)])
            want = (want_pause, received.tolist(), paused_cycles(start, until, before, cycle))
            if got != want:
                wrong.append((cycle, "(pause, frames_received, paused_cycles)", got, want))
            for o, (enable, times) in frames.items():
                for p in range(np_):
                    q = o * np_ + p
                    if enable >> p & 1 and start[q] <= cycle < until[q]:
                        spans[1] += 1
                pfc_egress_receive(start, until, before, received, np_, sw.data_width, cycle, o,
                                   enable, np.array(times, np.int64))
            spans[0] += sum(int(until[q] == cycle + 1) for q in range(n * np_))
            await ctx.tick()

    simulate(dut, testbench)
    assert not wrong, f"{cfg.switch}: {len(wrong)} differences; first: {wrong[0]}"
    assert min(spans) >= 10, spans
