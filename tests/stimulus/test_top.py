"""The stimulus top: its model's figures, percentiles from buckets, and the RTL held against
the model by hashes, counters and histograms on both simulators; a planted fault is caught;
a page read returns the words of single-word reads; a hardware sweep builds once."""

import json

import numpy as np
import pytest

from superfabric.config import ConfigError, FabricConfig
from superfabric.sim.stimulus.top import StimulusModel, StimulusStats, compare_stats
from superfabric.sim.stimulus.metrics import percentile, stimulus_summary
from superfabric.sim.stimulus.traffic_gen import stimulus_settings
from superfabric.formats.stimulus import PAGE_WORDS, RegisterMap, latency_bucket
from superfabric.hdl.stimulus.top import Stimulus
from superfabric.network.topology import Topology
from superfabric.tb.runner import run_cocotb
from superfabric.tools.run import run_point
from superfabric.tools.sweep import plan_sweep, run_sweep

from conftest import refusal, require_simulator

TINY = FabricConfig.load(preset="tiny")
#: 5 ports, 3 classes, head-of-line FIFO, drop when full, ECN marking, 8-bit tags.
FIFO_DROP_ECN = FabricConfig.load(overrides=[
    "switch.ports=5", "switch.priorities=3", "switch.scheduler=fifo", "switch.ingress_full=drop",
    "switch.buffer_flits=40", "switch.max_packet_flits=8", "switch.islip_iterations=2",
    "switch.tag_width=8", "ecn.enabled=true", "ecn.kmin=4", "ecn.kmax=20", "ecn.ect_fraction=0.7",
    "stimulus.source_queue=4", "stimulus.hist_buckets=48", "stimulus.hist_sub_bits=2"])


def model_run(cfg, pattern, load, cycles, lengths="fixed:1", seed=1, **kw):
    settings = stimulus_settings(cfg, pattern, load=load, cycles=cycles, seed=seed,
                                 packet_lengths=lengths, **kw)
    stats = StimulusModel(cfg).run(settings)
    return settings, stats, stimulus_summary(cfg, settings, stats)


# -- the model ------------------------------------------------------------------------


def test_zero_load_latency_is_the_switch_pipeline():
    # One flit at a time through an empty switch: 4 cycles (docs section 5.4), every packet.
    _, stats, summary = model_run(TINY, "uniform", 0.002, 20000)
    assert summary["packets"]["delivered"] > 100
    assert stats["latency_min"].min() == 4 and stats["latency_max"].max() == 4
    assert summary["latency"]["p99"] == 4.0


def test_uniform_load_is_carried_and_every_packet_accounted_for():
    _, stats, summary = model_run(FabricConfig.load(), "uniform", 0.5, 4000, "bimodal:1,8,0.5")
    assert abs(summary["throughput"] - 0.5) < 0.03
    assert abs(summary["offered_load"] - 0.5) < 0.03
    pk = summary["packets"]
    assert pk["offered"] == pk["delivered"] and pk["refused"] == pk["dropped"] == 0
    assert stats["order_errors"].sum() == 0
    assert stats["histogram"].sum() == pk["delivered"]
    # Uniform over the *other* outputs: no input sends to itself.
    assert stats["rx_packets"].tolist() == stats["generated"].tolist()


def test_patterns_in_hardware():
    _, stats, _ = model_run(TINY, "incast:sources=2,sink=3", 1.0, 500, "fixed:2")
    assert stats["generated"].tolist()[2:] == [0, 0] and stats["generated"][:2].min() > 0
    assert stats["packets"].sum(axis=1).tolist()[:3] == [0, 0, 0]
    assert stats["refused"].sum() > 0                  # 2 inputs at line rate into one output
    # The limit is reached long before the window ends: an idle wait, not a stall.
    settings, stats, _ = model_run(TINY, "ring-allreduce:chunk=20", 0.5, 30000)
    assert stats["generated"].tolist() == [settings.limit] * 4 == [120] * 4
    assert not stats.stalled and stats.cycles == 30000
    assert stats["packets"][:, :-1].sum() == 0         # all in the highest class
    _, stats, _ = model_run(TINY, "hotspot:fraction=0.5,port=1", 0.3, 5000)
    per_output = stats["packets"].sum(axis=1)
    # Inputs 0, 2, 3 send half their packets to 1, the rest uniformly over their 3 other
    # outputs; input 1 sends its hot half to itself and none of the rest.
    assert per_output[1] / per_output.sum() == pytest.approx((3 * (0.5 + 0.5 / 3) + 0.5) / 4,
                                                             abs=0.02)


def test_drops_and_ecn_are_counted():
    _, stats, summary = model_run(FIFO_DROP_ECN, "incast", 1.0, 1500, "bimodal:1,8,0.5")
    pk = summary["packets"]
    assert pk["dropped"] > 0 and pk["offered"] == pk["delivered"] + pk["dropped"]
    assert stats["ce_packets"].sum() > 0 and stats["ecn_marks"].sum() == stats["ce_packets"].sum()


def test_percentiles_come_from_buckets():
    rng = np.random.default_rng(1)
    latencies = np.concatenate([rng.integers(4, 30, 5000), rng.integers(30, 3000, 200)])
    sub_bits, buckets = 4, 256
    hist = np.bincount([latency_bucket(int(v), sub_bits, buckets) for v in latencies],
                       minlength=buckets)
    for q in (50, 99, 99.9):
        value, (lo, hi) = percentile(hist, q, sub_bits=sub_bits, lowest=int(latencies.min()),
                                     highest=int(latencies.max()))
        exact = np.sort(latencies)[int(np.ceil(q / 100 * len(latencies))) - 1]
        assert lo <= exact < hi and lo <= value < hi
    # Below 2 * 2**sub_bits buckets are one cycle wide: the percentile is exact.
    assert percentile(hist, 50, sub_bits=sub_bits, lowest=4, highest=2999)[0] == \
        np.sort(latencies)[len(latencies) // 2 - 1]


def test_compare_names_a_single_differing_word():
    _, stats, _ = model_run(TINY, "uniform", 0.5, 300)
    assert compare_stats(stats, stats)["exact"]
    values = {k: v.copy() for k, v in stats.values.items()}
    values["histogram"][2, 5] += 1
    match = compare_stats(StimulusStats(values), stats)
    assert not match["exact"] and match["mismatches"] == 1
    assert match["first_mismatch"]["name"] == "histogram" and match["first_mismatch"]["index"] == [2, 5]


def test_the_stimulus_top_refuses_what_it_cannot_wrap():
    for overrides, field in ((["switch.data_width=16"], "switch.data_width"),
                             (["pfc.enabled=true"], "pfc.enabled")):
        with pytest.raises(ConfigError) as e:
            StimulusModel(FabricConfig.load(overrides=overrides))
        assert field in str(e.value) and "\n" not in str(e.value)


# -- RTL against the model ---------------------------------------------------------------

# (pattern, load, cycles, lengths, sink stall)
CASES = [
    ("uniform", 0.8, 500, "fixed:1", 0.0),
    ("hotspot:fraction=0.5", 0.7, 400, "bimodal:1,4,0.5", 0.2),
    ("incast", 1.0, 300, "fixed:4", 0.0),
    ("all-to-all", 0.8, 300, "bimodal:1,8,0.5", 0.0),
    ("bursty:burst=6", 0.6, 400, "fixed:2", 0.1),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0].split(":")[0] for c in CASES])
def test_rtl_matches_model(case, sim, tmp_path, build_root):
    pattern, load, cycles, lengths, stall = case
    res = run_point(TINY, traffic=pattern, load=load, cycles=cycles, seed=7, sim=sim,
                    out_dir=tmp_path, packet_lengths=lengths, sink_stall=stall,
                    stimulus="hardware", build_root=build_root)
    assert res["match"]["exact"], json.dumps(res["match"])
    assert res["packets"]["delivered"] == res["packets"]["offered"] > 0
    assert res["stimulus"]["hash"] == res["model"]["stimulus"]["hash"]
    assert res["latency"] == res["model"]["latency"]


def test_rtl_matches_model_with_drops_and_ecn(tmp_path, build_root):
    require_simulator("icarus")
    res = run_point(FIFO_DROP_ECN, traffic="uniform", load=1.0, cycles=400, seed=3, sim="icarus",
                    out_dir=tmp_path, packet_lengths="bimodal:1,8,0.5", stimulus="hardware",
                    build_root=build_root)
    assert res["match"]["exact"], json.dumps(res["match"])
    assert res["packets"]["dropped"] > 0 and sum(res["stimulus"]["ce_packets"]) > 0


def test_a_page_read_returns_the_words_of_single_word_reads(tmp_path, build_root):
    """Every address of the tiny stimulus top after a run, read a word per cycle and a page
    per cycle (the simulation top's), against what the register map and the model say is
    there: a word out of place in a page, or a histogram bucket of the wrong sink, fails."""
    require_simulator("verilator")
    settings, stats, _ = model_run(TINY, "uniform", 0.6, 300, "bimodal:1,8,0.5", seed=4)
    regmap = RegisterMap(TINY)
    expected = [0] * (1 << regmap.address_bits)
    expected[regmap.CONTROL] = 0b111                    # done, running, armed
    for address, value in regmap.writes(settings):
        expected[address] = value
    values = (int(v) for name, _, _ in regmap.stats for v in stats[name].ravel())
    for (_, address), value in zip(regmap.stat_words(), values, strict=True):
        expected[address] = value
    for (port, bucket), value in np.ndenumerate(stats["histogram"]):
        expected[regmap.hist_address(port, bucket)] = int(value)
    assert len(set(stats["histogram"].sum(axis=1))) > 1     # the sinks' buckets differ
    for words in (1, PAGE_WORDS):
        dump = tmp_path / f"words{words}.json"
        # The generated stimulus top reads a page; one reading a word is built apart.
        component = None if words == PAGE_WORDS else (
            f"readout{words}", lambda: Stimulus(TINY, readout_words=words))
        res = run_cocotb(TINY, "superfabric.tb.stimulus.dump", sim="verilator",
                         test_dir=tmp_path / f"sim{words}", top="stimulus",
                         params={"settings": settings.to_dict(), "dump": str(dump),
                                 "addresses": list(range(len(expected)))},
                         build_root=build_root, component=component)
        assert res.passed
        got = json.loads(dump.read_text())
        wrong = [a for a, (g, e) in enumerate(zip(got, expected)) if g != e]
        assert not wrong, (words, [(a, got[a], expected[a]) for a in wrong[:5]])


@pytest.mark.parametrize("words", [0, 3, 2 * PAGE_WORDS, 4.0])
def test_the_read_side_takes_a_power_of_two_up_to_a_page(words):
    message = refusal(lambda: Stimulus(TINY, readout_words=words), ValueError)
    assert message == (f"readout_words must be a power of two from 1 to {PAGE_WORDS}, "
                       f"not {words!r}")


def test_a_two_thread_verilator_model_is_exact(tmp_path, build_root, monkeypatch):
    """--threads 2 (through the variable it sets): a build of its own, on two threads, whose
    run matches the model statistic by statistic, as the one-thread build's does."""
    require_simulator("verilator")
    monkeypatch.setenv("SUPERFABRIC_VERILATOR_THREADS", "2")
    res = run_point(TINY, traffic="uniform", load=0.6, cycles=2000, seed=3, sim="verilator",
                    out_dir=tmp_path, stimulus="hardware", build_root=build_root)
    assert res["threads"] == 2
    assert res["match"]["exact"], json.dumps(res["match"])
    assert res["packets"]["delivered"] > 0
    built = json.loads(next((build_root / "sim" / "verilator").glob(
        "stimulus-*-threads2-O1/built.json")).read_text())
    assert built["threads"] == 2 and built["cxx_opt"] == "1"


def test_a_planted_fault_is_caught_by_the_hash(tmp_path, build_root):
    # Output 0's sink withholds ready for one cycle at its 20th packet: that packet, and
    # maybe some after it, leave a cycle late, which only the RTL does.
    require_simulator("icarus")
    cfg = FabricConfig.load(preset="tiny", overrides=["stimulus.fault_packet=20"])
    res = run_point(cfg, traffic="uniform", load=0.6, cycles=300, seed=2, sim="icarus",
                    out_dir=tmp_path, stimulus="hardware", build_root=build_root)
    match = res["match"]
    assert not match["exact"]
    assert any(p.startswith("hash[0]") for p in match["problems"]), match["problems"]
    assert "hash[0]" in (tmp_path / "mismatch.txt").read_text()
    # The moved packet is still delivered, in order, its flits whole.
    assert res["packets"]["delivered"] == res["packets"]["offered"]
    assert sum(res["stimulus"]["order_errors"]) == sum(res["stimulus"]["frame_errors"]) == 0


#: Small fabrics inside the stimulus top (section 12.9): a 2x2 torus with dor and a
#: leaf-spine of 2 leaves of 2 hosts and 2 spines with ECMP.
FABRICS = {
    "torus": FabricConfig.load(preset="tiny", overrides=["fabric.topology=torus",
                                                         "fabric.dims=[2, 2]"]),
    "leaf_spine": FabricConfig.load(preset="tiny", overrides=[
        "fabric.topology=fat_tree", "fabric.routing=ecmp", "fabric.leaves=2", "fabric.spines=2",
        "fabric.hosts_per_leaf=2"]),
}


@pytest.mark.parametrize("routing, in_order", [("ecmp", True), ("adaptive", False)])
def test_ecmp_keeps_every_flow_in_order_on_a_leaf_spine(routing, in_order):
    # ECMP gives a flow one spine and one VC on every link (section 11.4), so its packets
    # share one queue at every router and arrive in order, as RDMA's go-back-N needs;
    # adaptive routing spreads a flow over spines and VCs, which the sinks see reordered.
    cfg = FabricConfig.load(overrides=[
        "fabric.topology=fat_tree", f"fabric.routing={routing}", "fabric.leaves=4",
        "fabric.spines=2", "fabric.hosts_per_leaf=4"])
    _, stats, summary = model_run(cfg, "uniform", 0.6, 3000, "bimodal:1,8,0.5")
    assert summary["packets"]["delivered"] > 2000
    assert (stats["order_errors"].sum() == 0) == in_order


@pytest.mark.parametrize("fabric", FABRICS)
def test_rtl_matches_model_on_a_fabric(fabric, sim, tmp_path, build_root):
    cfg = FABRICS[fabric]
    res = run_point(cfg, traffic="uniform", load=0.6, cycles=400, seed=5, sim=sim,
                    out_dir=tmp_path, packet_lengths="bimodal:1,6,0.5", sink_stall=0.1,
                    stimulus="hardware", build_root=build_root)
    assert res["match"]["exact"], json.dumps(res["match"])
    assert res["packets"]["delivered"] == res["packets"]["offered"] > 0
    stats = StimulusStats.load(tmp_path / "rtl_stats.npz")
    # The fabric's own counters are statistics too (and equal to the model's, above):
    # the links carried flits (in a 2x2 torus dor takes the plus link only), every
    # router held some.
    topo = Topology.of(cfg)
    assert stats["link_flits"].shape == (len(topo.links),)
    assert stats["router_peak"].shape == (topo.routers,)
    assert stats["link_flits"].sum() > 0 and stats["router_peak"].min() > 0
    # Counters per global port: every packet entered the fabric at an endpoint input.
    assert stats["rx_packets"].sum() > res["packets"]["delivered"]
    assert sum(res["stimulus"]["frame_errors"]) == 0


def test_the_top_s_own_code_at_another_optimisation_is_exact(tmp_path, build_root,
                                                              monkeypatch):
    """--cxx-opt 0 (through the variable it sets) on a fabric's stimulus top: a build of its
    own whose top's C++ is compiled at -O0 while its router block keeps Verilator's -Os,
    and whose run matches the model statistic by statistic."""
    require_simulator("verilator")
    monkeypatch.setenv("SUPERFABRIC_VERILATOR_CXX_OPT", "0")
    res = run_point(FABRICS["torus"], traffic="uniform", load=0.6, cycles=400, seed=5,
                    sim="verilator", out_dir=tmp_path, stimulus="hardware",
                    build_root=build_root)
    assert res["cxx_opt"] == "0"
    assert res["match"]["exact"], json.dumps(res["match"])
    assert res["packets"]["delivered"] == res["packets"]["offered"] > 0
    built = next((build_root / "sim" / "verilator").glob("stimulus-*-O0"))
    assert json.loads((built / "built.json").read_text())["cxx_opt"] == "0"
    # The last -O of each compile is the one in force (None: gcc's default, which
    # Verilator leaves its rarely run code at).
    last = {}
    for line in (built / "build.log").read_text().splitlines():
        words = line.split()
        if "-c" in words and words[-1].endswith(".cpp"):
            last[words[-1].rsplit("/", 1)[-1]] = ([w for w in words if w.startswith("-O")]
                                                  or [None])[-1]
    top = {opt for name, opt in last.items() if name.startswith("Vtop_")}
    router = {opt for name, opt in last.items() if name.startswith("Vrouter_")}
    assert top == {"-O0"} and "-Os" in router and "-O0" not in router, last


def test_a_planted_fault_is_caught_in_a_fabric(tmp_path, build_root):
    require_simulator("icarus")
    cfg = FabricConfig.load(preset="tiny", overrides=[
        "fabric.topology=torus", "fabric.dims=[2, 2]", "stimulus.fault_packet=15"])
    res = run_point(cfg, traffic="uniform", load=0.6, cycles=300, seed=2, sim="icarus",
                    out_dir=tmp_path, stimulus="hardware", build_root=build_root)
    match = res["match"]
    assert not match["exact"]
    assert any(p.startswith("hash[0]") for p in match["problems"]), match["problems"]
    assert res["packets"]["delivered"] == res["packets"]["offered"]


def test_hardware_sweep_builds_once(tmp_path):
    require_simulator("icarus")
    plan = plan_sweep(base=TINY, overrides=[], traffic=["uniform", "hotspot"], loads=[0.3, 0.7],
                      seeds=2, sims=["icarus"], cycles=200, stimulus="hardware")
    build_root = tmp_path / "build"
    summary = run_sweep(plan, tmp_path / "sweep", workers=2, build_root=build_root)
    assert summary["ran"] == 8 and not summary["failed"] and not summary["mismatched"]
    builds = [p for p in (build_root / "sim" / "icarus").iterdir() if p.is_dir()]
    assert len(builds) == 1 and builds[0].name.startswith("stimulus-"), builds
    results = [json.loads(p.read_text())
               for p in (tmp_path / "sweep" / "points").glob("*/results.json")]
    assert {r["traffic"]["settings"]["seed"] for r in results} == {1, 2}
    assert len({r["stimulus"]["hash"] for r in results}) == 8
    assert all(r["sweep"]["id"].startswith("icarus-hw-") for r in results)
