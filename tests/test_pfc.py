"""Priority flow control: losslessness, thresholds, RTL against model on both simulators."""

import json

import numpy as np
import pytest

from superfabric.config import ConfigError, FabricConfig
from superfabric.sim.pfc import SinkPause, size_thresholds
from superfabric.sim.fabric import FabricModel
from superfabric.sim.traffic import generate
from superfabric.tools.run import run_point


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
