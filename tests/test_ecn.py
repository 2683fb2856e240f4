"""ECN marking: the RED profile in the model, the marker block against the model under
Amaranth's simulator, and the switch RTL against the model on both simulators."""

import json
import random

import numpy as np
import pytest

from superfabric.config import ConfigError, FabricConfig
from superfabric.formats.packet import CE, ECT0, NOT_ECT
from superfabric.hdl.ecn import EcnMarker as EcnMarkerRTL
from superfabric.sim.ecn import EcnMarker
from superfabric.sim.fabric.top import FabricModel
from superfabric.sim.traffic import generate
from superfabric.tools.run import run_point

from block_stimulus import BufferTraffic, drive, simulate

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


# RED ramp, VOQs, mixed ECT / Not-ECT traffic.
RED = ["switch.ports=4", "switch.priorities=2", "switch.buffer_flits=128",
       "switch.islip_iterations=2", "ecn.enabled=true", "ecn.kmin=4", "ecn.kmax=40",
       "ecn.pmax=0.5", "ecn.ect_fraction=0.7"]
# DCTCP step on a 5-port FIFO switch.
STEP = ["switch.ports=5", "switch.priorities=1", "switch.scheduler=fifo", "switch.buffer_flits=64",
        "switch.max_packet_flits=8", "ecn.enabled=true", "ecn.kmin=24", "ecn.kmax=24"]

ECN_CASES = {
    "red": (RED, "hotspot", 0.7, "bimodal:1,4,0.5"),
    "step": (STEP, "incast", 0.9, "fixed:3"),
    # The same two builds overloaded from every input toward every output: the input
    # buffers fill and refuse flits, so the skid buffers in front of them use their
    # second register, and the schedulers and markers see contention on every output.
    "red-overload": (RED, "uniform", 1.0, "bimodal:1,8,0.5"),
    "step-overload": (STEP, "uniform", 1.0, "bimodal:1,8,0.5"),
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


# -- the marker block against the model in Amaranth's simulator -------------------------

#: Cycles per block case.
BLOCK_CYCLES = 3000


#: The thresholds' kinds: a RED ramp, a DCTCP step, marking from an empty queue, and a
#: kmax beyond the largest backlog (the last two are constant branches in the RTL).
MARKER_KINDS = ("ramp", "step", "from-zero", "beyond")


def _marker_case(rng, kind):
    """A random switch size and thresholds of ``kind``."""
    ports, priorities = rng.randrange(2, 17), rng.randrange(1, 9)
    buffer_flits = rng.choice([8, 16, 32, 64])
    most = ports * buffer_flits
    # Thresholds low in the backlog's range: the switch drains the queues as they fill.
    kmin = 0 if kind == "from-zero" else rng.randrange(1, max(2, most // 16))
    kmax = {"step": kmin, "beyond": most + rng.randrange(1, 100)}.get(
        kind, rng.randrange(kmin + 1, max(kmin + 2, most // 4)))
    return [f"switch.ports={ports}", f"switch.priorities={priorities}",
                  f"switch.buffer_flits={buffer_flits}",
                  f"switch.max_packet_flits={rng.choice([1, 4, min(8, buffer_flits)])}",
                  "switch.islip_iterations=1", "ecn.enabled=true", f"ecn.kmin={kmin}",
                  f"ecn.kmax={kmax}", f"ecn.pmax={1.0 if kind == 'beyond' else rng.choice([0.1, 0.5, 1.0])}",
                  f"ecn.lfsr_seed={rng.randrange(1, 1 << 16)}"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", MARKER_KINDS)
@pytest.mark.parametrize("seed", range(2))
def test_marker_block_equals_the_model(kind, seed):

    rng = random.Random(f"{kind}-{seed}")
    overrides = _marker_case(rng, kind)
    cfg = FabricConfig.load(preset="tiny", overrides=overrides)
    sw = cfg.switch
    n, np_ = sw.ports, sw.priorities
    dut = EcnMarkerRTL(cfg)
    model = EcnMarker(cfg.ecn, n, np_)
    traffic = BufferTraffic(rng, ports=n, priorities=np_, buffer_flits=sw.buffer_flits,
                            max_flits=sw.max_packet_flits, load=rng.choice([0.7, 1.0]),
                            stall=rng.choice([0.0, 0.2]), no_credit=rng.choice([0.0, 0.2]),
                            hotspot=0.6)
    marks = [0, 0]     # decisions not marking, marking
    wrong = []

    async def testbench(ctx):
        for cycle in range(BLOCK_CYCLES):
            ev = traffic.next()
            drive(ctx, [(dut.wr[k], ev.wr[k] is not None) for k in range(n)]
                  + [(dut.wr_index[k], ev.wr[k] or 0) for k in range(n)]
                  + [(dut.rd[k], ev.rd[k] is not None) for k in range(n)]
                  + [(dut.rd_index[k], ev.rd[k] or 0) for k in range(n)]
                  + [(dut.start[k], k in ev.starts) for k in range(n)]
                  + [(dut.start_out[k], ev.starts.get(k, 0) // np_) for k in range(n)]
                  + [(dut.start_index[k], ev.starts.get(k, 0)) for k in range(n)])
            # Decisions in input order, from the backlog at the start of the cycle.
            want = {k: model.decide(q // np_, q) for k, q in sorted(ev.starts.items())}
            decided = ctx.get(dut.decided)
            if decided != sum(1 << (q // np_) for q in ev.starts.values()):
                wrong.append((cycle, "decided", decided, sorted(ev.starts.items())))
            for k, (mark, backlog) in want.items():
                got = (bool(ctx.get(dut.mark[k])), ctx.get(dut.backlog_seen[ev.starts[k] // np_]))
                if got != (mark, backlog):
                    wrong.append((cycle, f"input {k} (mark, backlog_seen)", got, (mark, backlog)))
                marks[mark] += 1
            for q in filter(lambda q: q is not None, ev.wr):
                model.backlog[q] += 1
            for q in filter(lambda q: q is not None, ev.rd):
                model.backlog[q] -= 1
            await ctx.tick()

    simulate(dut, testbench)
    assert not wrong, f"{kind} {overrides}: {len(wrong)} differences; first: {wrong[0]}"
    # Both decisions were taken many times (a ramp or step crossed, not just sat on one side).
    assert min(marks) >= 10, (kind, overrides, marks)
