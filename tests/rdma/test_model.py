"""The RDMA fabric's golden model: completions, protection, recovery from link faults, timing."""

from dataclasses import dataclass

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.formats import rdma_wire as wire
from superfabric.formats.counters import RDMA_COUNTERS
from superfabric.formats.packet import NOT_ECT
from superfabric.sim.rdma.fabric import RdmaFabricModel
from superfabric.sim.rdma.kernels.channels import channel_number
from superfabric.sim.rdma.kernels.engine import (OUT_FIELDS, WR_COLUMNS, engine_params,
                                                 engine_state, engine_step)
from superfabric.sim.rdma.kernels.fault_injector import DROP, HOLD, IDLE, REPLAY
from superfabric.sim.rdma.records import RdmaRecords
from superfabric.sim.rdma.traffic import generate_rdma

from .test_fault_injector import Injector

# Registration table indices of the two regions every endpoint registers.
LOCAL, REMOTE = 1, 2
LOCAL_VA, REMOTE_VA = 0x1000, 0x40000


@dataclass
class Workload:
    """The shape of ``sim.rdma_traffic``'s workload, built by hand."""

    wr: dict
    keys: np.ndarray
    page_table: np.ndarray
    memory: np.ndarray


def _config(*overrides):
    return FabricConfig.load(preset="tiny", overrides=[
        "rdma.enabled=true", "rdma.qps=32", "rdma.window=4", "rdma.ack_every=2",
        "rdma.ack_timeout=16", "rdma.retransmit_timeout=300", "rdma.memory_words=4096",
        "rdma.page_words=64", "rdma.pages=128", *overrides])


def _local_key(e):
    return LOCAL + 16 * (e + 1)


def _remote_key(e):
    return REMOTE + 16 * (e + 3)


def _workload(cfg, requests, seed=0):
    """A workload for ``requests``: dicts of post, src, qp, dst, opcode, length,
    optionally lkey, rkey, laddr, raddr. Each endpoint registers its lower
    half of memory (random words, scrambled pages) for local reads and its
    upper half for remote writes by every other endpoint; every request
    gets a fresh receive range at its ``dst``."""
    E, rd = cfg.switch.ports, cfg.rdma
    rng = np.random.default_rng(seed)
    half = rd.memory_words // 2
    frames = rd.memory_words // rd.page_words
    keys = np.zeros((E, rd.keys, 7), np.int64)
    page_table = rng.integers(0, frames, (E, rd.pages), dtype=np.int64)
    memory = np.zeros((E, rd.memory_words), np.uint64)
    for e in range(E):
        memory[e, :half] = rng.integers(0, 1 << 64, half, dtype=np.uint64, endpoint=False)
        page_table[e, :frames] = np.concatenate((rng.permutation(frames // 2),
                                                 frames // 2 + rng.permutation(frames // 2)))
        others = ((1 << E) - 1) & ~(1 << e)
        keys[e, LOCAL] = (1, _local_key(e), LOCAL_VA, half, 0, wire.ACCESS_LOCAL_READ, 0)
        keys[e, REMOTE] = (1, _remote_key(e), REMOTE_VA, half, frames // 2,
                           wire.ACCESS_REMOTE_WRITE, others)
    rows = sorted(range(len(requests)), key=lambda i: (requests[i]["src"], requests[i]["post"], i))
    requests = [requests[i] for i in rows]
    used = [0] * E
    columns = {c: [] for c in ("post", "src", "qp", "dst", "opcode", "lkey", "laddr", "rkey",
                               "raddr", "length", "tag", "expect")}
    for i, r in enumerate(requests):
        src, dst, length = r["src"], r["dst"], r["length"]
        row = dict(r, tag=i, expect=r.get("expect", wire.STATUS_OK))
        row.setdefault("lkey", _local_key(src))
        row.setdefault("laddr", LOCAL_VA + int(rng.integers(0, half - length + 1)))
        row.setdefault("rkey", _remote_key(dst % E))
        if "raddr" not in row:
            row["raddr"] = REMOTE_VA + used[dst % E]
            used[dst % E] += length
        for c in columns:
            columns[c].append(row[c])
    wr = {c: np.array(v, np.int64) for c, v in columns.items()}
    return Workload(wr=wr, keys=keys, page_table=page_table, memory=memory)


def _translate(cfg, w, e, key, va, length):
    """Physical addresses of ``[va, va + length)`` under ``key`` at endpoint ``e`` (section 10.3)."""
    rd = cfg.rdma
    entry = w.keys[e, key % rd.keys]
    o = va - entry[2] + np.arange(length)
    shift = rd.page_words.bit_length() - 1
    pages = w.page_table[e][(entry[4] + (o >> shift)) % rd.pages]
    return (pages * rd.page_words + (o & (rd.page_words - 1))) % rd.memory_words


def _expected_memory(cfg, w, status):
    """Host memories after the WRs that completed with status 0 wrote their targets."""
    memory = w.memory.copy()
    for i in np.flatnonzero(status == wire.STATUS_OK):
        src, dst, n = int(w.wr["src"][i]), int(w.wr["dst"][i]), int(w.wr["length"][i])
        data = w.memory[src, _translate(cfg, w, src, int(w.wr["lkey"][i]), int(w.wr["laddr"][i]), n)]
        memory[dst, _translate(cfg, w, dst, int(w.wr["rkey"][i]), int(w.wr["raddr"][i]), n)] = data
    return memory


def _random_requests(cfg, count, seed, *, spacing=40):
    """WRITEs and SENDs of 1..40 words (up to three packets at the tiny preset's
    14-word MTU) over a few QPs per endpoint, each QP with a fixed peer."""
    E = cfg.switch.ports
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        src = int(rng.integers(0, E))
        qp = int(rng.integers(0, 6))
        out.append({"post": int(rng.integers(0, count * spacing // E)), "src": src, "qp": qp,
                    "dst": (src + 1 + qp % (E - 1)) % E, "opcode": int(rng.random() < 0.3),
                    "length": int(rng.integers(1, 41))})
    return out


def _check_complete(cfg, w, rec, status):
    """Every WR completed exactly once with ``status``, in per-QP posting order,
    and every target memory holds exactly what the WRs that succeeded wrote."""
    assert not rec.stalled, rec.stuck
    assert (rec.completions == 1).all()
    assert (rec.status == status).all(), np.flatnonzero(rec.status != status)
    assert (rec.taken >= w.wr["post"]).all() and (rec.done >= rec.taken).all()
    assert rec.cycles == rec.done.max() + 1
    for e in range(cfg.switch.ports):
        mine = np.flatnonzero(w.wr["src"] == e)
        assert sorted(rec.order[mine].tolist()) == list(range(mine.size))
        for qp in np.unique(w.wr["qp"][mine]):
            rows = mine[w.wr["qp"][mine] == qp]
            assert (np.diff(rec.done[rows]) > 0).all() and (np.diff(rec.order[rows]) > 0).all()
    np.testing.assert_array_equal(rec.memory, _expected_memory(cfg, w, status))
    sends = np.flatnonzero((w.wr["opcode"] == wire.OP_SEND) & (status == wire.STATUS_OK))
    got = sorted(map(tuple, rec.rx_completions[:, 1:].tolist()))
    want = sorted((int(w.wr["dst"][i]), int(w.wr["src"][i]), int(w.wr["qp"][i]),
                   int(w.wr["length"][i])) for i in sends)
    assert got == want


def test_lossless_run_completes_every_wr_once_in_order():
    cfg = _config()
    w = _workload(cfg, _random_requests(cfg, 120, seed=3))
    rec = RdmaFabricModel(cfg).run(w)
    _check_complete(cfg, w, rec, np.zeros(len(w.wr["tag"]), np.int8))
    c = {name: sum(v) for name, v in rec.counters.items()}
    mtu = wire.payload_words(cfg.switch.max_packet_flits)
    assert c["tx_data"] == int((-(-w.wr["length"] // mtu)).sum())
    assert c["completions"] == len(w.wr["tag"]) and c["errors"] == 0
    assert c["rx_completions"] == int((w.wr["opcode"] == wire.OP_SEND).sum())
    for name in ("retransmissions", "naks", "timeouts", "duplicates", "out_of_sequence", "corrupt"):
        assert c[name] == 0, name


def test_bad_keys_and_requests_fail_and_write_nothing():
    cfg = _config()
    E = cfg.switch.ports
    requests = _random_requests(cfg, 30, seed=5)
    bad = [
        # status 1: a key nobody registered at the local region's index
        {"post": 10, "src": 0, "qp": 7, "dst": 1, "opcode": 0, "length": 20,
         "lkey": _local_key(0) + 16, "expect": wire.STATUS_LOCAL},
        # status 1: one word past the local region's end
        {"post": 12, "src": 1, "qp": 7, "dst": 2, "opcode": 0, "length": 5,
         "laddr": LOCAL_VA + cfg.rdma.memory_words // 2 - 4, "expect": wire.STATUS_LOCAL},
        # status 2: the target's local key, which has no remote write right
        {"post": 14, "src": 2, "qp": 7, "dst": 3, "opcode": 1, "length": 30,
         "rkey": _local_key(3), "raddr": LOCAL_VA, "expect": wire.STATUS_REMOTE},
        # status 2: a mismatching key at the remote region's index
        {"post": 16, "src": 3, "qp": 7, "dst": 0, "opcode": 0, "length": 3,
         "rkey": _remote_key(0) + 16, "expect": wire.STATUS_REMOTE},
        # status 3: to itself, empty, QP out of range
        {"post": 18, "src": 0, "qp": 6, "dst": 0, "opcode": 0, "length": 4, "expect": wire.STATUS_BAD},
        {"post": 18, "src": 1, "qp": 6, "dst": 2, "opcode": 0, "length": 0, "expect": wire.STATUS_BAD},
        {"post": 18, "src": 2, "qp": cfg.rdma.qps // E, "dst": 3, "opcode": 0, "length": 4,
         "expect": wire.STATUS_BAD},
    ]
    w = _workload(cfg, requests + bad)
    rec = RdmaFabricModel(cfg).run(w)
    _check_complete(cfg, w, rec, w.wr["expect"].astype(np.int8))
    assert sum(rec.counters["errors"]) == len(bad)
    assert sum(rec.counters["naks"]) >= 2


FAULTS = ["faults.drop_rate=0.06", "faults.duplicate_rate=0.06", "faults.reorder_rate=0.06",
          "faults.corrupt_rate=0.06", "faults.reorder_cycles=20"]


def test_link_faults_still_complete_every_wr_once():
    cfg = _config(*FAULTS)
    w = _workload(cfg, _random_requests(cfg, 200, seed=7), seed=7)
    rec = RdmaFabricModel(cfg).run(w)
    _check_complete(cfg, w, rec, np.zeros(len(w.wr["tag"]), np.int8))
    c = {name: sum(v) for name, v in rec.counters.items()}
    # Drops and reorders open gaps (out of sequence, NAKs, go back N);
    # duplicates and replays arrive twice; corruption fails the HCS; a
    # message's dropped last packet or a dropped last ACK needs the timer.
    for name in ("retransmissions", "naks", "timeouts", "duplicates", "out_of_sequence", "corrupt"):
        assert c[name] > 0, (name, c)
    assert c["errors"] == 0


@pytest.mark.parametrize("pattern", ["rdma-uniform", "rdma-allreduce"])
def test_generated_workload_gets_the_statuses_it_expects(pattern):
    # Every kind of deliberately bad WR of the generator, among good ones.
    cfg = _config("rdma.memory_words=16384", "rdma.pages=256")
    w = generate_rdma(cfg, pattern, load=0.7, cycles=3000, seed=4, bad_fraction=0.1)
    rec = RdmaFabricModel(cfg).run(w)
    assert (w.wr["expect"] != wire.STATUS_OK).sum() > 10
    _check_complete(cfg, w, rec, w.wr["expect"])


def test_nak_access_after_go_back_n_is_not_stale():
    # A NAK (access) for PSN 5 reaching the sender after a go back N set
    # una = snd = 5 (packet 5 was sent before: hsn = 6) must still mark it.
    cfg = _config()
    w = _workload(cfg, [])
    prm, st = engine_params(cfg), engine_state(cfg, w)
    t = 0                    # channel 0 toward peer 1 (state index 0 of endpoint 0)
    assert channel_number(prm, 0, t) == 1 * cfg.rdma.channels_per_peer
    st.ret[0, t], st.una[0, t], st.snd[0, t], st.nxt[0, t], st.hsn[0, t] = 5, 5, 5, 6, 6
    bth = wire.pack(wire.BTH_FIELDS, opcode=wire.ACK_OPCODE, syndrome=wire.SYN_NAK_ACCESS, psn=5)
    bth |= wire.hcs(bth) << 16
    no_wr = np.zeros((1, len(WR_COLUMNS)), np.int64)
    engine_step(st, prm, 0, 0, no_wr, -1, False, True, 1, 0, True, np.uint64(bth), NOT_ECT,
                False, False, np.array(w.memory, np.uint64), np.zeros(OUT_FIELDS, np.int64))
    assert (st.una[0, t], st.snd[0, t]) == (6, 6) and st.slot_err[0, t, 5 % cfg.rdma.window]


def test_duplicates_keep_protection_errors():
    # A duplicated NAK arrives twice (the copy is stale): the error is reported.
    cfg = _config("faults.duplicate_rate=0.2")
    bad = {"post": 50, "src": 2, "qp": 7, "dst": 3, "opcode": 0, "length": 30,
           "rkey": _local_key(3), "raddr": LOCAL_VA, "expect": wire.STATUS_REMOTE}
    w = _workload(cfg, _random_requests(cfg, 60, seed=11) + [bad], seed=11)
    rec = RdmaFabricModel(cfg).run(w)
    _check_complete(cfg, w, rec, w.wr["expect"].astype(np.int8))


def test_lossy_links_never_write_a_denied_message():
    # A NAK (access) that is lost, corrupted or overtaken by a later ACK
    # leaves the sender to complete the WR with status 0 (section 10.6,
    # known limitation), but the target never writes the denied range.
    cfg = _config("faults.drop_rate=0.2", "faults.reorder_rate=0.1", "faults.corrupt_rate=0.1")
    bad = [{"post": 20 * k, "src": k % 4, "qp": 7, "dst": (k + 1) % 4, "opcode": 0,
            "length": 1 + 7 * k, "rkey": _remote_key((k + 1) % 4) + 16,
            "expect": wire.STATUS_REMOTE} for k in range(8)]
    w = _workload(cfg, _random_requests(cfg, 40, seed=13) + bad, seed=13)
    rec = RdmaFabricModel(cfg).run(w)
    assert not rec.stalled and (rec.completions == 1).all()
    good = w.wr["expect"] == wire.STATUS_OK
    assert (rec.status[good] == wire.STATUS_OK).all()
    assert (rec.status[~good] == wire.STATUS_REMOTE).all()
    np.testing.assert_array_equal(rec.memory, _expected_memory(cfg, w, np.where(good, 0, 2)))


def test_dead_link_stalls_and_names_the_channel():
    cfg = _config("faults.drop_rate=1.0")
    w = _workload(cfg, [{"post": 0, "src": 1, "qp": 0, "dst": 2, "opcode": 0, "length": 3}])
    rec = RdmaFabricModel(cfg).run(w, stall_limit=1000)
    # Taken in cycle 0, so the stall is declared at the start of cycle 1 + 1000.
    assert rec.stalled and rec.cycles == 1001
    assert rec.taken[0] == 0 and rec.done[0] == -1 and rec.completions[0] == 0
    assert rec.stuck.startswith("endpoint 1 channel 4 (peer 2, index 0): una 0 snd ")
    assert "nxt 1" in rec.stuck
    # Picked in cycle 1, the timer fires at 1 + 300, the packet is picked
    # again in the next cycle, and so on: at 301, 602 and 903.
    assert rec.counters["timeouts"][1] == 3


@pytest.mark.parametrize("words", [1, 5, 14])
@pytest.mark.parametrize("latency", [1, 4])
def test_zero_load_write_completes_on_time(words, latency):
    # One single-packet WRITE from endpoint 0 to endpoint 1, posted at p, with
    # host reads answered after D = dma_latency cycles:
    #   p        the segmenter takes it (slot written, nxt = 1)            10.6.1
    #   p+1      the idle transmitter picks it (snd != nxt)                10.6.3
    #   p+2      its flit 0 is offered, passes the injector and enters the
    #            switch at g = p+2; the first payload word is requested
    #   g+1      flit 1 (the RETH)
    #   g+D+1    the first payload word, buffered at edge g+D, is offered;
    #            then one word per cycle: the last flit at g+D+words, which
    #            is where a packet of L = words + 2 flits generated at g' =
    #            g+D-1 and sent back to back would end (g' = g for D = 1)
    #   g'+L+3   its head reaches endpoint 1 (g'+L+4 the RETH: accept)    5.4, 10.6.5
    #   g'+2L+2  its last flit is written; the context takes the accepted
    #            packet: ack request, so pend_ack                          10.6.5
    #   g'+2L+3  endpoint 1's idle transmitter picks the ACK               10.6.3
    #   g'+2L+4  the ACK (1 flit) enters the switch at g" = g'+2L+4, from
    #            and to other ports than the data packet, so at zero load
    #   g"+4     it reaches endpoint 0: una = 1                            5.4, 10.6.5
    #   g"+5     retire: the message's last packet, completion status 0    10.6.2
    # so done = p + 2 + (D - 1) + 2 (words + 2) + 4 + 9 = p + 2 words + D + 14.
    cfg = _config(f"rdma.dma_latency={latency}")
    D = cfg.rdma.dma_latency
    p = 7
    w = _workload(cfg, [{"post": p, "src": 0, "qp": 0, "dst": 1, "opcode": 0, "length": words}])
    rec = RdmaFabricModel(cfg).run(w)
    assert rec.taken[0] == p
    assert rec.done[0] == p + 2 * words + D + 14
    assert rec.cycles == p + 2 * words + D + 15
    _check_complete(cfg, w, rec, np.zeros(1, np.int8))
    assert rec.counters["tx_acks"] == [0, 1, 0, 0] and rec.counters["tx_data"] == [1, 0, 0, 0]


def test_send_raises_one_receive_completion_at_its_last_packet():
    cfg = _config()
    w = _workload(cfg, [{"post": 0, "src": 3, "qp": 5, "dst": 1, "opcode": 1, "length": 30}])
    rec = RdmaFabricModel(cfg).run(w)
    _check_complete(cfg, w, rec, np.zeros(1, np.int8))
    (cycle, endpoint, src, qp, length), = rec.rx_completions.tolist()
    assert (endpoint, src, qp, length) == (1, 3, 5, 30)
    assert cycle < rec.done[0]


def test_injector_forwards_everything_without_faults():
    cfg = _config()
    inj = Injector(cfg, 0)
    for k in range(3):
        flit = (k, 100 + k, 2, 3)
        assert inj.prepare(flit) == flit
        assert inj.commit(True, flit)
    assert inj.quiet()


def test_injector_duplicates_then_replays_the_stored_copy():
    cfg = _config("faults.duplicate_rate=1.0")
    inj = Injector(cfg, 0)
    flits = [(k, 100 + k, 2, 2) for k in range(2)]
    assert inj.prepare(flits[0]) == flits[0]
    assert not inj.commit(False, flits[0])          # switch not ready: the head waits
    for f in flits:
        assert inj.prepare(f) == f and inj.commit(True, f)
    for f in flits:                                  # the copy, from the next cycle
        assert inj.prepare(None) == f and not inj.commit(True, None)
    assert inj.quiet()


def test_injector_releases_a_held_packet_after_reorder_cycles():
    cfg = _config("faults.reorder_rate=1.0", "faults.reorder_cycles=3")
    inj = Injector(cfg, 0)
    flit = (0, 7, 1, 1)
    assert inj.prepare(flit) is None and inj.commit(False, flit)   # held
    for _ in range(3):                               # idle, nothing offered: counts 1, 2, 3
        assert inj.prepare(None) is None and not inj.commit(False, None)
    assert inj.prepare(None) is None and not inj.commit(False, None)  # count reached: REPLAY next
    assert inj.prepare(None) == flit and not inj.commit(True, None)
    assert inj.quiet()


def test_injector_drops_a_packet_while_it_holds_another_and_still_releases_that():
    cfg = _config("faults.drop_rate=0.5", "faults.reorder_rate=0.5", "faults.reorder_cycles=3")
    inj = Injector(cfg, 0)
    actions, held_word = [], None
    for k in range(200):                             # one-flit packets, back to back
        flit = (0, 100 + k, 1, 1)
        held = inj.held
        out = inj.prepare(flit)
        actions.append((held, inj.act))
        if held and inj.act == DROP:
            # Dropped and taken, nothing offered; the held packet stays held.
            assert out is None and inj.commit(False, flit) and inj.held
            break
        if inj.act == HOLD:
            held_word = flit[1]
        inj.commit(out is not None, flit)
    else:
        pytest.fail(f"no drop while a packet was held in {actions}")
    while inj.state != REPLAY:                       # idle: the hold's timer runs out
        assert inj.prepare(None) is None and not inj.commit(False, None)
    assert inj.prepare(None) == (0, held_word, 1, 1) and not inj.commit(True, None)
    assert inj.quiet() and inj.state == IDLE


def test_records_round_trip(tmp_path):
    cfg = _config()
    w = _workload(cfg, _random_requests(cfg, 10, seed=1))
    rec = RdmaFabricModel(cfg).run(w)
    rec.save(tmp_path / "r.npz")
    back = RdmaRecords.load(tmp_path / "r.npz")
    for name in ("taken", "done", "status", "completions", "order", "rx_completions", "memory"):
        np.testing.assert_array_equal(getattr(back, name), getattr(rec, name))
    assert (back.cycles, back.stalled, back.stuck) == (rec.cycles, rec.stalled, rec.stuck)
    assert back.counters == rec.counters and list(back.counters) == list(RDMA_COUNTERS)


@pytest.mark.parametrize("faults", [[], ["faults.drop_rate=0.1", "faults.reorder_rate=0.05"]])
def test_psns_wrap_at_24_bits(faults):
    # Channels start 40 PSNs short of 2**24, so every busy channel crosses the
    # wrap; with drops, go back N and NAKs cross it too.
    start = (1 << 24) - 40
    cfg = _config(f"rdma.start_psn={start}", *faults)
    w = _workload(cfg, _random_requests(cfg, 120, seed=21, spacing=8), seed=21)
    rec = RdmaFabricModel(cfg).run(w)
    _check_complete(cfg, w, rec, np.zeros(len(w.wr["post"]), np.int8))
    assert sum(rec.counters["tx_data"]) > 4 * 40     # more packets than PSNs left before the wrap
    if faults:
        assert sum(rec.counters["retransmissions"]) > 0


@pytest.mark.parametrize("overrides, seed", [
    # A reordered packet from before a switch of epoch arrived after the
    # first packet of the next epoch; with a 1-bit epoch it deadlocked a
    # channel (every later packet refused as stale).
    (["rdma.channels_per_peer=1"], 1),
    # Tiny packets (3 words) make a denied 218-word message 73 packets long,
    # each denied on its own: slow, but retiring packets is progress.
    (["rdma.channels_per_peer=1", "rdma.window=2", "rdma.ack_every=2",
      "switch.max_packet_flits=5", "switch.buffer_flits=64", "rdma.dma_latency=9"], 23),
])
def test_lossy_links_with_many_bad_requests_complete_every_request(overrides, seed):
    from superfabric.sim.rdma.traffic import generate_rdma
    from superfabric.tb.rdma.scoreboard import verify
    cfg = FabricConfig.load(preset="tiny", overrides=[
        "rdma.enabled=true", "rdma.qps=8", "rdma.memory_words=2048", "rdma.page_words=64",
        "rdma.pages=64", "rdma.retransmit_timeout=300", "faults.drop_rate=0.08",
        "faults.duplicate_rate=0.05", "faults.reorder_rate=0.08", "faults.corrupt_rate=0.05",
        f"faults.seed={seed}", *overrides])
    w = generate_rdma(cfg, "rdma-uniform", load=0.3, cycles=900, seed=seed, bad_fraction=0.4)
    rec = RdmaFabricModel(cfg).run(w)
    assert verify(cfg, w, rec) == []
    assert sum(rec.counters["naks"]) > 0 and sum(rec.counters["timeouts"]) > 0
