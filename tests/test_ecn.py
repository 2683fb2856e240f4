"""ECN marking: the RED profile in the model, and RTL against model on both simulators."""

import json

import numpy as np
import pytest

from superfabric.config import ConfigError, FabricConfig
from superfabric.formats.packet import CE, ECT0, NOT_ECT
from superfabric.sim.ecn import EcnMarker
from superfabric.sim.fabric import FabricModel
from superfabric.sim.traffic import generate
from superfabric.tools.run import run_point

KMIN, KMAX, PMAX = 20, 84, 0.5


def _expected(q):
    return 0.0 if q < KMIN else 1.0 if q >= KMAX else PMAX * (q - KMIN) / (KMAX - KMIN)


@pytest.fixture(scope="module")
def long_run():
    # Marking does not feed back into timing, so one long uniform run covers
    # backlogs from below kmin to above kmax (multiples of 4 flits dominate).
    cfg = FabricConfig.load(overrides=["ecn.enabled=true", "switch.priorities=1",
                                       f"ecn.kmin={KMIN}", f"ecn.kmax={KMAX}", f"ecn.pmax={PMAX}"])
    trace = generate(cfg, "uniform", load=0.9, cycles=100_000, seed=2, ect_fraction=0.8,
                     packet_lengths="fixed:4")
    return trace, FabricModel(cfg).run(trace)


@pytest.mark.parametrize("point", [28, 36, 48, 60, 72])
def test_marked_fraction_follows_the_profile(long_run, point):
    trace, rec = long_run
    sel = (rec.ecn_backlog == point) & (trace.ecn == ECT0)
    assert sel.sum() > 2000
    fraction = (rec.ecn_out[sel] == CE).mean()
    assert abs(fraction - _expected(point)) <= 0.02, (point, fraction, _expected(point))


def test_no_marks_below_kmin_all_above_kmax_never_not_ect(long_run):
    trace, rec = long_run
    ect = trace.ecn == ECT0
    assert (rec.ecn_backlog >= 0).all()
    assert not (rec.ecn_out[ect & (rec.ecn_backlog < KMIN)] == CE).any()
    above = ect & (rec.ecn_backlog >= KMAX)
    assert above.sum() > 1000 and (rec.ecn_out[above] == CE).all()
    assert (rec.ecn_out[trace.ecn == NOT_ECT] == NOT_ECT).all()
    assert sum(rec.counters["ecn_marks"]) == int((rec.ecn_out == CE).sum())


def test_step_marking_when_kmin_equals_kmax():
    ecn = FabricConfig.load(overrides=["ecn.kmin=30", "ecn.kmax=30"]).ecn
    marker = EcnMarker(ecn, ports=2, priorities=1)
    for q, want in ((29, False), (30, True), (200, True), (0, False)):
        marker.backlog[0] = q
        assert all(marker.decide(0, 0)[0] == want for _ in range(100))


def test_ecn_config_is_validated():
    with pytest.raises(ConfigError, match="ecn.kmin = 9: must not exceed ecn.kmax"):
        FabricConfig.load(overrides=["ecn.kmin=9", "ecn.kmax=8"])
    with pytest.raises(ConfigError, match="ecn.pmax = 1.5"):
        FabricConfig.load(overrides=["ecn.pmax=1.5"])
    with pytest.raises(ConfigError, match="ecn.enabled = 1: must be true or false"):
        FabricConfig.load(overrides=["ecn.enabled=1"])
    with pytest.raises(ConfigError, match="ecn.lfsr_seed = 0"):
        FabricConfig.load(overrides=["ecn.lfsr_seed=0"])


ECN_CASES = {
    # RED ramp, VOQs, mixed ECT / Not-ECT traffic.
    "red": (["switch.ports=4", "switch.priorities=2", "switch.buffer_flits=128",
             "switch.islip_iterations=2", "ecn.enabled=true", "ecn.kmin=4", "ecn.kmax=40",
             "ecn.pmax=0.5", "ecn.ect_fraction=0.7"], "hotspot", 0.7, "bimodal:1,4,0.5"),
    # DCTCP step on a 5-port FIFO switch, incast.
    "step": (["switch.ports=5", "switch.priorities=1", "switch.scheduler=fifo",
              "switch.buffer_flits=64", "switch.max_packet_flits=8", "ecn.enabled=true",
              "ecn.kmin=24", "ecn.kmax=24"], "incast", 0.9, "fixed:3"),
}


@pytest.mark.parametrize("name", sorted(ECN_CASES))
def test_rtl_marks_match_model(name, sim, tmp_path, build_root):
    overrides, pattern, load, lengths = ECN_CASES[name]
    cfg = FabricConfig.load(overrides=overrides)
    res = run_point(cfg, traffic=pattern, load=load, cycles=1200, seed=4, sim=sim,
                    out_dir=tmp_path, packet_lengths=lengths, sink_stall=0.1,
                    build_root=build_root)
    assert res["match"]["exact"], json.dumps(res["match"])
    assert res["ecn"] == res["model"]["ecn"]
    assert 0 < res["ecn"]["marks"] < res["ecn"]["ect_packets"]
    assert sum(res["counters"]["ecn_marks"]) == res["ecn"]["marks"]
    packets = np.load(tmp_path / "packets.npz")
    assert (packets["rtl_ecn_out"] == packets["model_ecn_out"]).all()
    assert (packets["rtl_ecn_backlog"] >= 0).all()
