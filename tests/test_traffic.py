"""Tests of the traffic generators (:mod:`superfabric.sim.traffic`)."""

import json

import numpy as np
import pytest

from superfabric.network.topology import Topology
from superfabric.config import FabricConfig
from superfabric.sim.traffic import PATTERNS, Trace, TrafficError, generate, parse_lengths


@pytest.fixture(scope="module")
def cfg():
    """The default fabric: 8 ports, 4 classes, packets of up to 16 flits."""
    return FabricConfig.load(preset="default")


def per_source(trace, port):
    """The packets of one input, in generation order."""
    return np.flatnonzero(trace.src == port)


def config_with(ports):
    """The default fabric with ``ports`` ports (one iSLIP iteration fits any port count)."""
    return FabricConfig.load(preset="default",
                             overrides=[f"switch.ports={ports}", "switch.islip_iterations=1"])


# -- reproducibility and shape --------------------------------------------------


@pytest.mark.parametrize("pattern", PATTERNS)
def test_same_arguments_same_trace(cfg, pattern):
    cfg = config_with(16) if pattern == "transpose" else cfg
    args = dict(load=0.6, cycles=5000, seed=7, packet_lengths="bimodal:1,8,0.5")
    a, b = generate(cfg, pattern, **args), generate(cfg, pattern, **args)
    assert len(a) > 0
    assert a == b
    for column in ("gen", "src", "dst", "prio", "length", "tag"):
        assert np.array_equal(getattr(a, column), getattr(b, column))


@pytest.mark.parametrize("pattern", ["uniform", "permutation", "hotspot", "bursty"])
def test_different_seed_different_trace(cfg, pattern):
    a = generate(cfg, pattern, load=0.6, cycles=5000, seed=1)
    b = generate(cfg, pattern, load=0.6, cycles=5000, seed=2)
    assert a != b
    assert not np.array_equal(a.dst, b.dst) or not np.array_equal(a.gen, b.gen)


def test_patterns_share_the_arrival_process_of_a_seed(cfg):
    # Documented: injection has its own stream, so comparing patterns at one
    # seed compares the same arrivals.
    a = generate(cfg, "uniform", load=0.4, cycles=5000, seed=3)
    b = generate(cfg, "bitcomp", load=0.4, cycles=5000, seed=3)
    assert np.array_equal(a.gen, b.gen) and np.array_equal(a.src, b.src)
    assert not np.array_equal(a.dst, b.dst)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_trace_sorted_typed_and_tagged(cfg, pattern):
    cfg = config_with(16) if pattern == "transpose" else cfg
    t = generate(cfg, pattern, load=0.9, cycles=3000, seed=5, packet_lengths="bimodal:2,16,0.7")
    assert (t.gen.dtype, t.src.dtype, t.dst.dtype) == (np.int64, np.int16, np.int16)
    assert (t.prio.dtype, t.length.dtype, t.tag.dtype) == (np.int8, np.int16, np.int64)
    assert t.gen.min() >= 0 and t.gen.max() < t.cycles
    # Sorted by (gen, src) with no input generating twice in one cycle.
    key = t.gen * cfg.switch.ports + t.src
    assert np.all(np.diff(key) > 0)
    assert np.array_equal(t.tag, np.arange(len(t)))
    assert t.src.min() >= 0 and t.src.max() < cfg.switch.ports
    assert t.dst.min() >= 0 and t.dst.max() < cfg.switch.ports
    assert set(np.unique(t.length)) <= {2, 16}
    assert t.prio.min() >= 0 and t.prio.max() < cfg.switch.priorities


def test_trace_arrays_are_read_only(cfg):
    t = generate(cfg, "uniform", load=0.5, cycles=100, seed=0)
    with pytest.raises(ValueError):
        t.dst[0] = 3


# -- offered load ---------------------------------------------------------------


@pytest.mark.parametrize("pattern", ["uniform", "all-to-all", "bursty"])
@pytest.mark.parametrize("load, lengths", [(0.3, "fixed:1"), (0.7, "bimodal:1,16,0.8"),
                                           (0.5, "fixed:4")])
def test_offered_load_matches(cfg, pattern, load, lengths):
    t = generate(cfg, pattern, load=load, cycles=200_000, seed=11, packet_lengths=lengths)
    rate = t.offered_flits() / (cfg.switch.ports * t.cycles)
    assert rate == pytest.approx(load, rel=0.03)
    # Every input offers the load, not just the sum.
    for port in range(cfg.switch.ports):
        flits = int(t.length[per_source(t, port)].sum())
        assert flits / t.cycles == pytest.approx(load, rel=0.1 if pattern == "bursty" else 0.03)


@pytest.mark.parametrize("pattern", ["uniform", "all-to-all", "ring-allreduce", "bursty"])
def test_a_run_may_have_no_packets(cfg, pattern, tmp_path):
    t = generate(cfg, pattern, load=1e-9, cycles=1, seed=0)
    assert len(t) == 0 and t.offered_flits() == 0
    t.save(tmp_path / "empty.npz")
    assert Trace.load(tmp_path / "empty.npz") == t


def test_full_load_fixed_one_flit_is_every_cycle(cfg):
    t = generate(cfg, "uniform", load=1.0, cycles=1000, seed=0)
    assert len(t) == 1000 * cfg.switch.ports


# -- destination rules ----------------------------------------------------------


def test_uniform_covers_all_outputs_including_self(cfg):
    t = generate(cfg, "uniform", load=0.5, cycles=40_000, seed=2)
    counts = np.bincount(t.dst, minlength=cfg.switch.ports)
    assert np.all(np.abs(counts / len(t) - 1 / cfg.switch.ports) < 0.01)
    assert np.mean(t.src == t.dst) == pytest.approx(1 / cfg.switch.ports, abs=0.01)


def test_permutation_is_a_fixed_bijection(cfg):
    perms = set()
    for seed in range(4):
        t = generate(cfg, "permutation", load=0.5, cycles=2000, seed=seed)
        perm = np.full(cfg.switch.ports, -1)
        for port in range(cfg.switch.ports):
            dsts = np.unique(t.dst[per_source(t, port)])
            assert dsts.size == 1, f"input {port} sends to {dsts}"
            perm[port] = dsts[0]
        assert sorted(perm) == list(range(cfg.switch.ports))
        perms.add(tuple(perm))
    assert len(perms) > 1, "the permutation must come from the seed"


@pytest.mark.parametrize("ports", [4, 16])
def test_transpose_swaps_address_halves(ports):
    t = generate(config_with(ports), "transpose", load=0.5, cycles=2000, seed=0)
    half = (ports.bit_length() - 1) // 2
    src = t.src.astype(int)
    expected = ((src & ((1 << half) - 1)) << half) | (src >> half)
    assert np.array_equal(t.dst, expected)
    if ports == 16:
        assert t.dst[t.src == 0b0111][0] == 0b1101


@pytest.mark.parametrize("ports", [2, 8, 6])
def test_transpose_rejects_odd_or_non_power_of_two_ports(ports):
    with pytest.raises(TrafficError, match=rf"traffic\.pattern = 'transpose'.*got {ports} ports"):
        generate(config_with(ports), "transpose", load=0.5, cycles=10, seed=0)


@pytest.mark.parametrize("ports", [8, 5])
def test_bitcomp(ports):
    t = generate(config_with(ports), "bitcomp", load=0.5, cycles=1000, seed=0)
    assert np.array_equal(t.dst, ports - 1 - t.src)
    if ports == 8:
        assert np.array_equal(t.dst, t.src ^ 7)


def test_hotspot_fraction_and_port(cfg):
    t = generate(cfg, "hotspot:fraction=0.3,port=2", load=0.5, cycles=40_000, seed=4)
    share = np.bincount(t.dst, minlength=8) / len(t)
    # The uniform remainder may land on the hot port too.
    assert share[2] == pytest.approx(0.3 + 0.7 / 8, abs=0.01)
    assert np.all(np.abs(np.delete(share, 2) - 0.7 / 8) < 0.01)
    assert t.pattern == "hotspot:fraction=0.3,port=2"


def test_hotspot_defaults(cfg):
    t = generate(cfg, "hotspot", load=0.5, cycles=40_000, seed=4)
    assert np.mean(t.dst == 0) == pytest.approx(0.25 + 0.75 / 8, abs=0.01)


def test_incast_only_to_sink_from_lowest_other_ports(cfg):
    t = generate(cfg, "incast:sources=3,sink=1", load=0.5, cycles=5000, seed=0)
    assert set(np.unique(t.dst)) == {1}
    assert set(np.unique(t.src)) == {0, 2, 3}
    default = generate(cfg, "incast", load=0.5, cycles=5000, seed=0)
    assert set(np.unique(default.dst)) == {0}
    assert set(np.unique(default.src)) == set(range(1, 8))


def test_all_to_all_cycles_through_the_other_outputs(cfg):
    ports = cfg.switch.ports
    t = generate(cfg, "all-to-all", load=0.5, cycles=3000, seed=0)
    for port in range(ports):
        dst = t.dst[per_source(t, port)]
        k = np.arange(dst.size)
        assert np.array_equal(dst, (port + 1 + k % (ports - 1)) % ports)
        assert port not in dst[:ports - 1] and set(dst[:ports - 1]) == set(range(ports)) - {port}


def test_ring_allreduce_neighbour_class_and_steps(cfg):
    ports, chunk = cfg.switch.ports, 5
    t = generate(cfg, f"ring-allreduce:chunk={chunk}", load=0.5, cycles=5000, seed=0)
    assert np.array_equal(t.dst, (t.src + 1) % ports)
    assert np.all(t.prio == cfg.switch.priorities - 1)
    # Each input stops after 2 (N - 1) steps of `chunk` packets.
    assert np.array_equal(np.bincount(t.src, minlength=ports),
                          np.full(ports, 2 * (ports - 1) * chunk))


def test_ring_allreduce_default_chunk_covers_the_run(cfg):
    t = generate(cfg, "ring-allreduce", load=0.5, cycles=20_000, seed=0)
    counts = np.bincount(t.src, minlength=cfg.switch.ports)
    # Expected 10 000 packets per input; the steps must not stop it early.
    assert np.all(counts > 9_500)
    assert t.gen.max() > 19_900


def test_bursty_runs_share_a_destination(cfg):
    ports, burst = cfg.switch.ports, 8
    t = generate(cfg, f"bursty:burst={burst}", load=0.5, cycles=100_000, seed=9,
                 packet_lengths="fixed:4")
    runs, gaps = [], []
    for port in range(ports):
        idx = per_source(t, port)
        dst, gen = t.dst[idx], t.gen[idx]
        change = np.flatnonzero(np.diff(dst) != 0)
        runs.append(np.diff(np.concatenate(([-1], change, [dst.size - 1]))))
        gaps.append(np.diff(gen))
    runs, gaps = np.concatenate(runs), np.concatenate(gaps)
    # Back-to-back bursts to the same output merge: mean run = burst N / (N - 1).
    assert runs.mean() == pytest.approx(burst * ports / (ports - 1), rel=0.1)
    # Inside a burst packets are one packet time (4 cycles) apart; a burst
    # of mean 8 packets has 7 such gaps per gap between bursts.
    assert gaps.min() == 4
    assert np.mean(gaps == 4) == pytest.approx(7 / 8, abs=0.03)
    uniform = generate(cfg, "uniform", load=0.5, cycles=20_000, seed=9)
    assert np.mean(np.diff(uniform.dst[per_source(uniform, 0)]) == 0) < 0.2


def test_bursty_short_runs_are_not_biased(cfg):
    # Each input starts on or off as in steady state; starting every input
    # with a burst would offer about 0.34 here instead of 0.2.
    rates = [generate(cfg, "bursty:burst=8", load=0.2, cycles=40, seed=seed).offered_flits()
             / (cfg.switch.ports * 40) for seed in range(200)]
    assert np.mean(rates) == pytest.approx(0.2, rel=0.1)


def test_bursty_at_line_rate_has_no_gaps(cfg):
    t = generate(cfg, "bursty", load=1.0, cycles=2000, seed=1, packet_lengths="fixed:2")
    for port in range(cfg.switch.ports):
        assert np.all(np.diff(t.gen[per_source(t, port)]) == 2)


# -- lengths and classes --------------------------------------------------------


def test_fixed_lengths(cfg):
    t = generate(cfg, "uniform", load=0.5, cycles=2000, seed=0, packet_lengths="fixed:5")
    assert np.all(t.length == 5)
    assert t.offered_flits() == 5 * len(t)


def test_bimodal_lengths(cfg):
    t = generate(cfg, "uniform", load=0.5, cycles=40_000, seed=0,
                 packet_lengths="bimodal:2,12,0.75")
    assert set(np.unique(t.length)) == {2, 12}
    assert np.mean(t.length == 2) == pytest.approx(0.75, abs=0.01)


def test_parse_lengths_mean():
    assert parse_lengths("fixed:3", 16).mean == 3
    assert parse_lengths("bimodal:1,16,0.8", 16).mean == pytest.approx(0.8 + 0.2 * 16)
    assert parse_lengths("bimodal:1,16,1", 16).flits == (1, 16)


def test_default_priorities_uniform(cfg):
    t = generate(cfg, "uniform", load=0.5, cycles=20_000, seed=0)
    share = np.bincount(t.prio, minlength=cfg.switch.priorities) / len(t)
    assert np.all(np.abs(share - 1 / cfg.switch.priorities) < 0.01)


def test_priority_weights(cfg):
    t = generate(cfg, "uniform", load=0.5, cycles=20_000, seed=0,
                 priority_weights=[0, 1, 0, 3])
    assert set(np.unique(t.prio)) == {1, 3}
    assert np.mean(t.prio == 3) == pytest.approx(0.75, abs=0.01)


# -- files and summaries --------------------------------------------------------


def test_save_load_round_trip(cfg, tmp_path):
    t = generate(cfg, "hotspot:port=3", load=0.4, cycles=3000, seed=8,
                 packet_lengths="bimodal:1,16,0.5")
    path = tmp_path / "trace.npz"
    t.save(path)
    back = Trace.load(path)
    assert back == t
    assert back.dst.dtype == np.int16 and back.prio.dtype == np.int8
    assert (back.pattern, back.load, back.seed, back.cycles, back.packet_lengths) == (
        "hotspot:port=3", 0.4, 8, 3000, "bimodal:1,16,0.5")
    assert back.describe() == t.describe()


def test_save_writes_exactly_the_given_path(cfg, tmp_path):
    t = generate(cfg, "uniform", load=0.4, cycles=100, seed=8)
    t.save(tmp_path / "trace.bin")
    assert [p.name for p in tmp_path.iterdir()] == ["trace.bin"]


def test_load_rejects_missing_and_foreign_files(tmp_path):
    with pytest.raises(TrafficError, match="no such trace file"):
        Trace.load(tmp_path / "absent.npz")
    np.savez(tmp_path / "other.npz", x=np.arange(3))
    with pytest.raises(TrafficError, match="not a traffic trace"):
        Trace.load(tmp_path / "other.npz")
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(TrafficError, match="not a .npz trace file"):
        Trace.load(tmp_path / "text.npz")


def test_describe_is_plain_json(cfg):
    t = generate(cfg, "bursty:burst=4", load=0.25, cycles=4000, seed=6,
                 packet_lengths="fixed:2")
    d = t.describe()
    assert json.loads(json.dumps(d)) == d
    assert d == {"pattern": "bursty:burst=4", "load": 0.25, "seed": 6, "cycles": 4000,
                 "packet_lengths": "fixed:2", "packets": len(t), "flits": 2 * len(t)}
    assert all(type(v) in (str, int, float) for v in d.values())


# -- errors ---------------------------------------------------------------------


GOOD = dict(pattern="uniform", load=0.5, cycles=100, seed=0)


@pytest.mark.parametrize("change, field, shown", [
    (dict(load=1.5), "traffic.load", "1.5"),
    (dict(load=0), "traffic.load", "0"),
    (dict(load=float("nan")), "traffic.load", "nan"),
    (dict(load=True), "traffic.load", "True"),
    (dict(load="0.5"), "traffic.load", "'0.5'"),
    (dict(cycles=0), "traffic.cycles", "0"),
    (dict(cycles=10.0), "traffic.cycles", "10.0"),
    (dict(seed=-1), "traffic.seed", "-1"),
    (dict(seed=1.5), "traffic.seed", "1.5"),
    (dict(pattern="butterfly"), "traffic.pattern", "'butterfly'"),
    (dict(pattern="uniform:x=1"), "traffic.pattern", "'uniform:x=1'"),
    (dict(pattern="hotspot:fraction=1.5"), "traffic.pattern", "fraction = '1.5'"),
    (dict(pattern="hotspot:port=8"), "traffic.pattern", "port = '8'"),
    (dict(pattern="hotspot:heat=1"), "traffic.pattern", "'heat=1'"),
    (dict(pattern="hotspot:port"), "traffic.pattern", "'port'"),
    (dict(pattern="hotspot:port=1,port=2"), "traffic.pattern", "port given twice"),
    (dict(pattern="incast:sources=8"), "traffic.pattern", "sources = '8'"),
    (dict(pattern="incast:sink=-1"), "traffic.pattern", "sink = '-1'"),
    (dict(pattern="bursty:burst=0.5"), "traffic.pattern", "burst = '0.5'"),
    (dict(pattern="ring-allreduce:chunk=0"), "traffic.pattern", "chunk = '0'"),
    (dict(pattern="ring-allreduce:chunk=2.5"), "traffic.pattern", "chunk = '2.5'"),
    (dict(packet_lengths="fixed:0"), "traffic.packet_lengths", "'fixed:0'"),
    (dict(packet_lengths="fixed:17"), "traffic.packet_lengths", "N = '17'"),
    (dict(packet_lengths="bimodal:1,16"), "traffic.packet_lengths", "'bimodal:1,16'"),
    (dict(packet_lengths="bimodal:8,2,0.5"), "traffic.packet_lengths", "SHORT = 8"),
    (dict(packet_lengths="bimodal:1,16,1.5"), "traffic.packet_lengths", "P_SHORT = '1.5'"),
    (dict(packet_lengths="pareto:3"), "traffic.packet_lengths", "'pareto:3'"),
    (dict(priority_weights=[1, 1]), "traffic.priority_weights", "[1, 1]"),
    (dict(priority_weights=[1, -1, 1, 1]), "traffic.priority_weights", "[1, -1, 1, 1]"),
    (dict(priority_weights=[0, 0, 0, 0]), "traffic.priority_weights", "[0, 0, 0, 0]"),
    (dict(priority_weights=["a", 1, 1, 1]), "traffic.priority_weights", "['a', 1, 1, 1]"),
    (dict(pattern="ring-allreduce", priority_weights=[1, 1, 1, 1]),
     "traffic.priority_weights", "not allowed with ring-allreduce"),
])
def test_bad_arguments_name_field_and_value(cfg, change, field, shown):
    args = {**GOOD, **change}
    with pytest.raises(TrafficError) as info:
        generate(cfg, args.pop("pattern"), **args)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(field)
    assert shown in message


def test_unknown_pattern_lists_the_allowed_ones(cfg):
    with pytest.raises(TrafficError) as info:
        generate(cfg, "butterfly", load=0.5, cycles=10, seed=0)
    assert all(p in str(info.value) for p in PATTERNS)


def test_parameter_error_lists_the_allowed_keys(cfg):
    with pytest.raises(TrafficError, match="key one of fraction, port"):
        generate(cfg, "hotspot:heat=1", load=0.5, cycles=10, seed=0)


# -- patterns of a fabric of many routers -------------------------------------------


def _torus(dims, m=1):
    return FabricConfig.load(overrides=["fabric.topology=torus", f"fabric.dims={list(dims)}",
                                        f"fabric.endpoints_per_router={m}"])


def test_a_fabric_draws_over_all_its_endpoints():
    trace = generate(_torus((4, 4, 4)), "uniform", load=0.5, cycles=400, seed=1)
    assert set(trace.src.tolist()) == set(range(64)) == set(trace.dst.tolist())


def test_tornado_goes_half_way_round_every_ring_less_one():
    cfg = _torus((8, 5), m=2)
    topo = Topology.of(cfg)
    trace = generate(cfg, "tornado", load=0.3, cycles=200, seed=2)
    for s, d in zip(trace.src.tolist(), trace.dst.tolist()):
        xs, xd = topo.coords(s // 2), topo.coords(d // 2)
        assert (xd[0] - xs[0]) % 8 == 3 and (xd[1] - xs[1]) % 5 == 2 and s % 2 == d % 2
    one = generate(FabricConfig.load(), "tornado", load=0.5, cycles=100, seed=0)
    assert ((one.dst - one.src) % 8 == 3).all()


def test_neighbour_is_a_halo_exchange_over_every_dimension_in_turn():
    cfg = _torus((4, 3, 5))
    topo = Topology.of(cfg)
    trace = generate(cfg, "neighbour", load=0.6, cycles=300, seed=3)
    for e in range(topo.endpoints):
        mine = trace.dst[trace.src == e].tolist()
        for k, d in enumerate(mine):
            step = [(b - a) % n for a, b, n in zip(topo.coords(e), topo.coords(d), topo.dims)]
            assert step == [1 if j == k % 3 else 0 for j in range(3)]


def test_ring_allreduce_on_a_torus_runs_the_dimensions_in_turn():
    cfg = _torus((4, 3))
    topo = Topology.of(cfg)
    trace = generate(cfg, "ring-allreduce:chunk=2", load=1.0, cycles=200, seed=4)
    for e in range(topo.endpoints):
        mine = trace.dst[trace.src == e].tolist()
        # 2 (4 - 1) steps of 2 packets along dimension 0, then 2 (3 - 1) along 1.
        assert len(mine) == 2 * (2 * 3 + 2 * 2)
        dims = [0 if topo.coords(d)[0] != topo.coords(e)[0] else 1 for d in mine]
        assert dims == [0] * 12 + [1] * 8
