"""Tests of the RDMA workload generator (:mod:`superfabric.sim.rdma.traffic`)."""

import numpy as np
import pytest

from superfabric.config import ConfigError, FabricConfig
from superfabric.formats.rdma_wire import (ACCESS_LOCAL_READ, ACCESS_REMOTE_WRITE, OP_SEND, OP_WRITE,
                                       STATUS_BAD, STATUS_LOCAL, STATUS_OK, STATUS_REMOTE,
                                       payload_words)
from superfabric.sim.rdma.keys import KeyTable
from superfabric.sim.rdma.traffic import (BAD_KINDS, RDMA_PATTERNS, WR_COLUMNS, RdmaWorkload,
                                          generate_rdma, wr_cost)
from superfabric.sim.traffic import TrafficError

RUN = dict(load=0.5, cycles=10_000, seed=3)
#: The patterns that give every QP of every endpoint work; the incast ones load only
#: their senders (tested at the end, on fewer QPs).
EVERY_QP = ("rdma-uniform", "rdma-allreduce")
INCAST = ["rdma.qps=64", "rdma.memory_words=65536", "rdma.pages=256"]


@pytest.fixture(scope="module")
def cfg():
    """The default preset: 8 endpoints, 1024 QPs (128 each), 16 Ki words of memory each."""
    return FabricConfig.load(preset="default")


@pytest.fixture(scope="module", params=EVERY_QP)
def workload(request, cfg):
    """Each pattern with a fifth of its WRs made bad."""
    return generate_rdma(cfg, request.param, bad_fraction=0.2, **RUN)


def tables(cfg, w):
    return [KeyTable(w.keys[e], w.page_table[e], cfg) for e in range(w.endpoints)]


def rows(w, mask=None):
    """(row, src, dst, length) of each selected row, as ints."""
    wr = w.wr
    for i in np.flatnonzero(np.ones(len(w), bool) if mask is None else mask):
        yield int(i), int(wr["src"][i]), int(wr["dst"][i]), int(wr["length"][i])


def qp_peer(w):
    """(src, qp) -> dst of the WRs meant to succeed."""
    good = w.wr["expect"] == STATUS_OK
    return {(int(s), int(q)): int(d) for s, q, d in
            zip(w.wr["src"][good], w.wr["qp"][good], w.wr["dst"][good])}


# -- reproducibility and shape -------------------------------------------------


@pytest.mark.parametrize("pattern", RDMA_PATTERNS)
def test_same_arguments_same_workload(cfg, pattern):
    if pattern not in EVERY_QP:
        cfg = FabricConfig.load(overrides=INCAST)
    a = generate_rdma(cfg, pattern, bad_fraction=0.1, **RUN)
    b = generate_rdma(cfg, pattern, bad_fraction=0.1, **RUN)
    assert len(a) > 0 and a == b
    c = generate_rdma(cfg, pattern, bad_fraction=0.1, **{**RUN, "seed": 4})
    assert a != c


def test_save_and_load_round_trip(workload, tmp_path):
    path = tmp_path / "w.npz"
    workload.save(path)
    back = RdmaWorkload.load(path)
    assert back == workload
    assert back.describe() == workload.describe()


def test_loading_something_else_is_one_line(tmp_path):
    with pytest.raises(TrafficError, match="no such workload file"):
        RdmaWorkload.load(tmp_path / "missing.npz")
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(TrafficError, match="not an RDMA workload"):
        RdmaWorkload.load(tmp_path / "other.npz")


def test_columns_order_and_tables(cfg, workload):
    wr, E, r = workload.wr, cfg.switch.ports, cfg.rdma
    for name, dtype in WR_COLUMNS.items():
        assert wr[name].dtype == dtype and not wr[name].flags.writeable
    assert np.array_equal(wr["tag"], np.arange(len(workload)))
    # Sorted by (src, post, row): each endpoint's WRs are offered in row order.
    key = wr["src"].astype(np.int64) * (1 << 40) + wr["post"]
    assert np.all(np.diff(key) >= 0)
    assert wr["post"].min() >= 0 and wr["post"].max() < workload.cycles
    assert workload.keys.shape == (E, r.keys, 7)
    assert workload.page_table.shape == (E, r.pages)
    assert workload.memory.shape == (E, r.memory_words) and workload.memory.dtype == np.uint64
    half = r.memory_words // 2
    assert np.all(workload.memory[:, half:] == 0)
    assert len(np.unique(workload.memory[:, :half])) > 0.99 * E * half


# -- QPs and peers ---------------------------------------------------------------


def test_every_one_of_1024_qps_carries_a_good_wr(cfg, workload):
    assert cfg.rdma.qps == 1024
    assert workload.describe()["qps_used"] == 1024
    assert len(qp_peer(workload)) == 1024


def test_one_peer_per_qp_never_itself(cfg, workload):
    wr, E = workload.wr, cfg.switch.ports
    peer = qp_peer(workload)
    assert all(s != d for (s, _), d in peer.items())
    not_self = wr["bad_kind"] != 1 + [k for k, _ in BAD_KINDS].index("self")
    for s, q, d in zip(wr["src"][not_self], wr["qp"][not_self], wr["dst"][not_self]):
        assert peer[int(s), int(q)] == d
    if workload.pattern == "rdma-allreduce":
        assert all(d == (s + 1) % E for (s, _), d in peer.items())
    else:
        # Peers are spread evenly: every endpoint talks to every other one.
        for s in range(E):
            assert {d for (src, _), d in peer.items() if src == s} == set(range(E)) - {s}


# -- memory, keys and translation ---------------------------------------------------


def test_every_wr_fails_exactly_as_intended(cfg, workload):
    # The status an engine must give by section 10.3's checks, from the tables.
    t, wr = tables(cfg, workload), workload.wr
    for i, s, d, n in rows(workload):
        if d == s or n == 0:
            status = STATUS_BAD
        elif not t[s].allowed(int(wr["lkey"][i]), int(wr["laddr"][i]), n, ACCESS_LOCAL_READ):
            status = STATUS_LOCAL
        elif not t[d].allowed(int(wr["rkey"][i]), int(wr["raddr"][i]), n, ACCESS_REMOTE_WRITE, s):
            status = STATUS_REMOTE
        else:
            status = STATUS_OK
        assert status == wr["expect"][i], (i, BAD_KINDS[wr["bad_kind"][i] - 1])


def test_good_ranges_are_disjoint_inside_the_receive_area(cfg, workload):
    t, wr, half = tables(cfg, workload), workload.wr, cfg.rdma.memory_words // 2
    written = np.zeros(workload.memory.shape, np.int64)
    for i, s, d, n in rows(workload, wr["expect"] == STATUS_OK):
        target = np.array(t[d].addresses(int(wr["rkey"][i]), int(wr["raddr"][i]), n))
        assert target.min() >= half and target.max() < cfg.rdma.memory_words
        written[d, target] += 1
    assert written.max() == 1
    # A bad WR, even if an engine ignored every check, lands on no good range.
    peer = qp_peer(workload)
    for i, s, d, n in rows(workload, wr["expect"] != STATUS_OK):
        d = peer[s, int(wr["qp"][i])]
        target = t[d].addresses(int(wr["rkey"][i]), int(wr["raddr"][i]), n)
        assert not written[d, target].any(), (i, BAD_KINDS[wr["bad_kind"][i] - 1])


def test_good_sources_read_the_send_area(cfg, workload):
    t, wr, half = tables(cfg, workload), workload.wr, cfg.rdma.memory_words // 2
    for i, s, d, n in rows(workload, wr["expect"] == STATUS_OK):
        source = np.array(t[s].addresses(int(wr["lkey"][i]), int(wr["laddr"][i]), n))
        assert source.min() >= 0 and source.max() < half


def test_translation_is_a_permutation_of_pages_not_the_identity(cfg, workload):
    r, E = cfg.rdma, cfg.switch.ports
    frames = r.memory_words // r.page_words
    assert workload.page_table.min() >= 0 and workload.page_table.max() < frames
    t = tables(cfg, workload)
    for e in range(E):
        valid = workload.keys[e][workload.keys[e, :, 0] == 1]
        assert len(valid) == 3
        pages = []
        for _, key, va, words, _, _, _ in valid:
            pa = np.array(t[e].addresses(int(key), int(va), int(words)))
            assert len(np.unique(pa)) == words
            pages.append(np.unique(pa // r.page_words))
            if words > r.page_words:
                assert not np.array_equal(pa, pa[0] + np.arange(words))
        assert sorted(np.concatenate(pages).tolist()) == list(range(frames))


def test_registrations(cfg, workload):
    r, E = cfg.rdma, cfg.switch.ports
    everyone = (1 << E) - 1
    for e in range(E):
        entries = workload.keys[e][workload.keys[e, :, 1] != 0]
        assert len(entries) == 4
        assert np.all(entries[:, 1] % r.keys == np.flatnonzero(workload.keys[e, :, 1]))
        assert np.all(entries[:, 1] >= r.keys)          # high bits are never zero
        by_access = {(int(v), int(a), int(p)) for v, _, _, _, _, a, p in entries}
        assert by_access == {(1, ACCESS_LOCAL_READ, 0),
                             (1, ACCESS_REMOTE_WRITE, everyone & ~(1 << e)),
                             (1, ACCESS_REMOTE_WRITE, 1 << (e + 1) % E),
                             (0, ACCESS_LOCAL_READ | ACCESS_REMOTE_WRITE, everyone & ~(1 << e))}


# -- bad requests ---------------------------------------------------------------------


def test_bad_kinds_are_all_present_and_even(workload):
    bad = workload.describe()["bad_requests"]
    assert all(count > 0 for count in bad.values()), bad
    assert max(bad.values()) - min(bad.values()) <= 1
    wr = workload.wr
    for k, (_, status) in enumerate(BAD_KINDS):
        assert np.all(wr["expect"][wr["bad_kind"] == k + 1] == status)
    assert np.all(wr["expect"][wr["bad_kind"] == 0] == STATUS_OK)


def test_bad_share(cfg):
    w = generate_rdma(cfg, "rdma-uniform", bad_fraction=0.2, **RUN)
    assert sum(w.describe()["bad_requests"].values()) == round(0.2 * len(w))
    none = generate_rdma(cfg, "rdma-uniform", **RUN)
    assert not none.wr["bad_kind"].any() and np.all(none.wr["expect"] == STATUS_OK)


def test_good_wrs_do_not_depend_on_the_bad_share(cfg):
    a = generate_rdma(cfg, "rdma-uniform", **RUN)
    b = generate_rdma(cfg, "rdma-uniform", bad_fraction=0.3, **RUN)
    good = b.wr["bad_kind"] == 0
    for column in WR_COLUMNS:
        if column not in ("expect", "bad_kind"):
            assert np.array_equal(a.wr[column][good], b.wr[column][good]), column


def test_two_endpoints_have_no_peer_kind():
    cfg = FabricConfig.load(overrides=["switch.ports=2", "switch.islip_iterations=1",
                                       "rdma.qps=64"])
    bad = generate_rdma(cfg, "rdma-uniform", bad_fraction=0.3, **RUN).describe()["bad_requests"]
    assert bad.pop("peer") == 0 and all(v > 0 for v in bad.values())


# -- the patterns ---------------------------------------------------------------------


def test_uniform_offers_the_load_and_the_mix():
    cfg = FabricConfig.load(overrides=["rdma.memory_words=131072", "rdma.pages=512"])
    w = generate_rdma(cfg, "rdma-uniform", load=0.4, cycles=60_000, seed=1)
    wr, mtu = w.wr, payload_words(cfg.switch.max_packet_flits)
    offered = wr_cost(wr["length"].astype(np.int64), mtu).sum() / w.cycles / cfg.switch.ports
    assert abs(offered - 0.4) < 0.02
    assert abs(np.mean(wr["opcode"] == OP_SEND) - 0.25) < 0.02
    length = wr["length"]
    assert length.min() >= 1 and length.max() <= 256
    for (lo, hi), share in (((1, 4), 0.6), ((5, 32), 0.3), ((33, 256), 0.1)):
        assert abs(np.mean((length >= lo) & (length <= hi)) - share) < 0.02


def test_allreduce_is_a_ring_of_chunks(cfg):
    w = generate_rdma(cfg, "rdma-allreduce", **RUN)
    wr, E, Q = w.wr, cfg.switch.ports, cfg.rdma.qps // cfg.switch.ports
    mtu = payload_words(cfg.switch.max_packet_flits)
    steps = 2 * (E - 1)
    assert np.all(wr["opcode"] == OP_WRITE) and np.all(wr["dst"] == (wr["src"] + 1) % E)
    posts = np.unique(wr["post"])
    gap = int(posts[1])
    assert np.array_equal(posts, gap * np.arange(steps))
    step = wr["post"] // gap
    words = np.bincount(wr["src"] * steps + step, weights=wr["length"])
    assert len(np.unique(words)) == 1            # one chunk per endpoint and step
    chunk = int(words[0])
    assert E * chunk <= cfg.rdma.memory_words // 2
    assert len(np.unique(wr["length"])) > 10 and wr["length"].max() <= 4095
    cost = np.bincount(wr["src"] * steps + step, weights=wr_cost(wr["length"], mtu))
    assert cost.max() / gap <= RUN["load"] < cost.max() / (gap - 1)
    # The run fills about the window it was given.
    assert 0.8 * w.cycles < steps * gap <= 1.1 * w.cycles
    # Reduce-scatter then all-gather: the chunk index each step reads.
    for e in range(E):
        mine = wr["src"] == e
        base = wr["laddr"][mine].min()
        for s in range(steps):
            at = mine & (step == s)
            c = (e - s) % E if s < E - 1 else (e + 1 - (s - E + 1)) % E
            assert (wr["laddr"][at].min() - base) // chunk == c
    assert len(qp_peer(w)) == E * Q


def test_allreduce_chunk_is_capped_by_the_receive_area(cfg):
    long = generate_rdma(cfg, "rdma-allreduce", load=1.0, cycles=200_000, seed=1)
    words = np.bincount(long.wr["dst"], weights=long.wr["length"])
    steps = 2 * (cfg.switch.ports - 1)
    remote = cfg.rdma.memory_words // 2 - cfg.rdma.page_words
    assert words.max() <= remote and words.max() > remote - steps * 64
    assert long.wr["post"].max() < long.cycles / 2


# -- errors -----------------------------------------------------------------------------


@pytest.mark.parametrize("change, field, shown", [
    (dict(load=0), "traffic.load", "0"),
    (dict(load=1.5), "traffic.load", "1.5"),
    (dict(load=True), "traffic.load", "True"),
    (dict(load="0.5"), "traffic.load", "'0.5'"),
    (dict(cycles=0), "traffic.cycles", "0"),
    (dict(cycles=10.0), "traffic.cycles", "10.0"),
    (dict(seed=-1), "traffic.seed", "-1"),
    (dict(bad_fraction=-0.1), "traffic.bad_fraction", "-0.1"),
    (dict(bad_fraction=1.5), "traffic.bad_fraction", "1.5"),
    (dict(bad_fraction=True), "traffic.bad_fraction", "True"),
    (dict(pattern="uniform"), "traffic.pattern", "rdma-uniform, rdma-allreduce"),
    (dict(pattern="rdma-uniform:x=1"), "traffic.pattern", "takes no parameters"),
    (dict(cycles=1000), "traffic.cycles", "fewer than its 128 QPs"),
    (dict(pattern="rdma-allreduce", cycles=500), "traffic.cycles", "use at least"),
])
def test_bad_arguments_are_one_line(cfg, change, field, shown):
    args = {"pattern": "rdma-uniform", **RUN, **change}
    with pytest.raises(TrafficError) as info:
        generate_rdma(cfg, args.pop("pattern"), **args)
    message = str(info.value)
    assert "\n" not in message and message.startswith(field) and shown in message, message


@pytest.mark.parametrize("overrides, pattern, field, shown", [
    (["rdma.keys=2"], "rdma-uniform", "rdma.keys = 2", "at least 4"),
    (["rdma.page_words=8192"], "rdma-uniform", "rdma.page_words = 8192", "at most"),
    (["rdma.pages=32"], "rdma-uniform", "rdma.pages = 32", "at least 64"),
    (["rdma.memory_words=256", "rdma.page_words=16"], "rdma-uniform", "rdma.memory_words = 256",
     "at least 512"),
    (["rdma.memory_words=4096"], "rdma-uniform", "rdma.memory_words = 4096",
     "use rdma.memory_words = 16384"),
    (["rdma.memory_words=256", "rdma.page_words=16"], "rdma-allreduce",
     "rdma.memory_words = 256", "use at least"),
    (["switch.max_packet_flits=2"], "rdma-uniform", "switch.max_packet_flits = 2", "at least 3"),
    (["rdma.qps=4"], "rdma-uniform", "rdma.qps = 4", "multiple of the endpoints (8)"),
])
def test_configurations_that_cannot_hold_the_workload(overrides, pattern, field, shown):
    cfg = FabricConfig.load(overrides=overrides)
    with pytest.raises(ConfigError) as info:
        generate_rdma(cfg, pattern, **RUN)
    message = str(info.value)
    assert "\n" not in message and message.startswith(field) and shown in message, message


# -- rdma-incast and rdma-victim -------------------------------------------------------


@pytest.fixture(scope="module")
def incast_cfg():
    """The default preset with 8 QPs per endpoint and room for an incast's data."""
    return FabricConfig.load(overrides=INCAST)


def test_incast_sends_every_request_of_its_senders_to_the_target(incast_cfg):
    w = generate_rdma(incast_cfg, "rdma-incast:target=2,senders=4", **RUN)
    wr = w.wr
    assert set(wr["src"].tolist()) == {3, 4, 5, 6} and set(wr["dst"].tolist()) == {2}
    # Every QP of every sender carries requests, in turn.
    assert {(int(s), int(q)) for s, q in zip(wr["src"], wr["qp"])} == \
        {(s, q) for s in (3, 4, 5, 6) for q in range(8)}
    mtu = payload_words(incast_cfg.switch.max_packet_flits)
    assert wr["length"].min() >= mtu // 2 and wr["length"].max() <= 4 * mtu
    # The senders offer the load of their uplinks.
    assert wr_cost(wr["length"], mtu).sum() / w.cycles / 4 == pytest.approx(0.5, rel=0.15)
    d = w.describe()
    assert (d["target"], d["senders"], d["victim"]) == (2, [3, 4, 5, 6], None)


def test_victim_also_sends_to_the_bystander_on_its_other_qps(incast_cfg):
    w = generate_rdma(incast_cfg, "rdma-victim:side_load=0.3", **RUN)
    wr = w.wr
    d = w.describe()
    assert (d["target"], d["victim"], d["bystander"], d["side_load"]) == (0, 1, 7, 0.3)
    assert d["senders"] == [1, 2, 3, 4, 5, 6, 7]
    aside = wr["dst"] == 7
    assert set(wr["src"][aside].tolist()) == {1} and set(wr["qp"][aside].tolist()) == {4, 5, 6, 7}
    victim_to_target = (wr["src"] == 1) & (wr["dst"] == 0)
    assert set(wr["qp"][victim_to_target].tolist()) == {0, 1, 2, 3}
    assert set(wr["dst"][~aside].tolist()) == {0}
    mtu = payload_words(incast_cfg.switch.max_packet_flits)
    for mask, load in ((aside, 0.3), (victim_to_target, 0.5), (~aside, 0.5 * 7)):
        assert wr_cost(wr["length"][mask], mtu).sum() / w.cycles == pytest.approx(load, rel=0.2)


def test_victim_with_fewer_senders_takes_the_ones_after_the_target(incast_cfg):
    w = generate_rdma(incast_cfg, "rdma-victim:target=6,senders=3,victim=0,bystander=3,"
                                  "side_load=0.3", **RUN)
    wr = w.wr
    d = w.describe()
    # The 3 after 6, wrapping, in ascending order; the victim one of them.
    assert (d["target"], d["senders"], d["victim"], d["bystander"]) == (6, [0, 1, 7], 0, 3)
    aside = wr["dst"] == 3
    assert set(wr["src"][aside].tolist()) == {0}
    assert set(wr["src"][~aside].tolist()) == {0, 1, 7} and set(wr["dst"][~aside].tolist()) == {6}


def test_victim_senders_default_is_every_endpoint_but_the_target(incast_cfg):
    """The default draws the same workload as naming all E - 1 senders, so workloads made
    before ``senders`` existed are unchanged (the model digests hold them too)."""
    default = generate_rdma(incast_cfg, "rdma-victim:target=2,side_load=0.3", **RUN)
    named = generate_rdma(incast_cfg, "rdma-victim:target=2,senders=7,side_load=0.3", **RUN)
    assert default.describe()["senders"] == [0, 1, 3, 4, 5, 6, 7]
    assert all(np.array_equal(default.wr[c], named.wr[c]) for c in default.wr)


@pytest.mark.parametrize("dims, endpoints, checked", [
    ([4, 4, 4], 64, (0, 62, 63)),
    ([8, 8, 6], 384, (0, 63, 64, 200, 383)),
])
def test_peer_masks_name_every_endpoint(dims, endpoints, checked):
    """The remote region admits every endpoint but its own, the restricted one only its
    peer: on 64 endpoints endpoint 63 (the int64 column's sign bit) included, on 384 every
    word of the mask (six columns)."""
    cfg = FabricConfig.load(overrides=["fabric.topology=torus", f"fabric.dims={dims}",
                                       f"rdma.qps={endpoints}", "rdma.memory_words=4096",
                                       "rdma.page_words=64", "rdma.pages=64"])
    w = generate_rdma(cfg, "rdma-incast:target=0,senders=1", load=0.5, cycles=400, seed=1)
    assert w.keys.shape[2] == 6 + endpoints // 64
    keys = tables(cfg, w)
    for e in checked:
        # The remote region: remote write only, larger than the one-page restricted one.
        writable = w.keys[e][w.keys[e, :, 5] == ACCESS_REMOTE_WRITE]
        for row, peers in ((writable[:, 3].argmax(), [p for p in range(endpoints) if p != e]),
                           (writable[:, 3].argmin(), [(e + 1) % endpoints])):
            _, key, va = (int(v) for v in writable[row, :3])
            assert [p for p in range(endpoints)
                    if keys[e].allowed(key, va, 1, ACCESS_REMOTE_WRITE, p)] == peers


@pytest.mark.parametrize("pattern, shown", [
    ("rdma-incast:target=8", "target = '8' must be an integer in 0..7"),
    ("rdma-incast:senders=0", "senders = '0' must be an integer in 1..7"),
    ("rdma-incast:x=1", "'x=1' must be key=value with key one of target, senders"),
    ("rdma-victim:victim=0", "target 0, victim 0 and bystander 7 must be three different"),
    ("rdma-victim:side_load=0.6", "side_load = 0.6 must be above 0 and at most 1 - traffic.load"),
    ("rdma-victim:share=0.5", "key one of target, senders, victim, bystander, side_load"),
    ("rdma-victim:senders=0", "senders = '0' must be an integer in 1..7"),
    ("rdma-victim:target=3,senders=2,victim=6", "victim 6 must be one of the 2 senders "
                                               "(the endpoints after the target 3: 4, 5)"),
])
def test_bad_incast_parameters_are_one_line(incast_cfg, pattern, shown):
    with pytest.raises(TrafficError) as info:
        generate_rdma(incast_cfg, pattern, **RUN)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"traffic.pattern = {pattern!r}: ")
    assert shown in message, message


def test_victim_needs_two_qps_per_endpoint():
    cfg = FabricConfig.load(overrides=["rdma.qps=8", "rdma.memory_words=65536", "rdma.pages=256"])
    with pytest.raises(ConfigError, match=r"^rdma.qps = 8: must be at least 16 for rdma-victim"):
        generate_rdma(cfg, "rdma-victim", **RUN)
