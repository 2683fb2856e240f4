"""Tests of the RDMA run figures (:mod:`superfabric.sim.rdma.metrics`) on hand-built records."""

import json
import math

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.formats.counters import RDMA_COUNTERS
from superfabric.formats.rdma_wire import OP_SEND, STATUS_NAMES, STATUS_OK
from superfabric.sim.rdma.keys import KeyTable
from superfabric.sim.rdma.metrics import (FAIR_JAIN, FAIRNESS_WINDOW, RECOVERY_COUNTERS,
                                          connection_state, jain_index, rdma_summary)
from superfabric.sim.rdma.records import RdmaRecords
from superfabric.sim.rdma.traffic import BAD_KINDS, generate_rdma, wr_cost

LATENCY = 10


@pytest.fixture(scope="module")
def cfg():
    """Four endpoints with four QPs each."""
    return FabricConfig.load(preset="tiny", overrides=["rdma.qps=16"])


@pytest.fixture(scope="module")
def workload(cfg):
    return generate_rdma(cfg, "rdma-uniform", load=0.3, cycles=2000, seed=5, bad_fraction=0.2)


def ideal(cfg, w) -> RdmaRecords:
    """What a perfect fabric does: every WR done LATENCY cycles after its post with the
    intended status, every good range written, each endpoint's counters its number."""
    E = cfg.switch.ports
    wr = w.wr
    rec = RdmaRecords.empty(len(w), E, cfg.rdma.memory_words)
    rec.taken[:] = wr["post"]
    rec.done[:] = wr["post"] + LATENCY
    rec.status[:] = wr["expect"]
    rec.completions[:] = 1
    memory = w.memory.copy()
    tables = [KeyTable(w.keys[e], w.page_table[e], cfg) for e in range(E)]
    for i in np.flatnonzero(wr["expect"] == STATUS_OK):
        s, d, n = int(wr["src"][i]), int(wr["dst"][i]), int(wr["length"][i])
        memory[d, tables[d].addresses(int(wr["rkey"][i]), int(wr["raddr"][i]), n)] = \
            memory[s, tables[s].addresses(int(wr["lkey"][i]), int(wr["laddr"][i]), n)]
    rec.memory = memory
    sends = np.flatnonzero((wr["expect"] == STATUS_OK) & (wr["opcode"] == OP_SEND))
    rec.rx_completions = np.array([(wr["post"][i] + LATENCY, wr["dst"][i], wr["src"][i],
                                    wr["qp"][i], wr["length"][i]) for i in sends],
                                  np.int64).reshape(-1, 5)
    rec.counters = {name: [10 * k + e for e in range(E)] for k, name in enumerate(RDMA_COUNTERS)}
    rec.cycles = int(rec.done.max()) + 1
    return rec


def test_a_perfect_run(cfg, workload):
    rec = ideal(cfg, workload)
    s = rdma_summary(cfg, workload, rec)
    wr, n, E = workload.wr, len(workload), cfg.switch.ports
    good = wr["expect"] == STATUS_OK
    req = s["requests"]
    assert (req["posted"], req["taken"], req["completed"], req["ok"]) == (n, n, n, good.sum())
    assert req["by_status"] == {name: int((wr["expect"] == st).sum())
                                for st, name in STATUS_NAMES.items()}
    assert (req["not_completed"], req["unexpected_status"], req["first_unexpected"],
            req["repeated_completions"]) == (0, 0, None, 0)
    assert s["latency"] == {"mean": LATENCY, "p50": LATENCY, "p99": LATENCY, "p999": LATENCY,
                            "max": LATENCY}
    assert s["data"] == {"checked": good.sum(), "intact": good.sum(), "corrupted": 0,
                         "first_corrupted": None, "stray_words": 0}
    assert s["rx_completions"] == {"count": int((good & (wr["opcode"] == OP_SEND)).sum()),
                                   "expected": int((good & (wr["opcode"] == OP_SEND)).sum())}
    for name in RECOVERY_COUNTERS:
        k = RDMA_COUNTERS.index(name)
        assert s[name] == {"per_endpoint": [10 * k + e for e in range(E)],
                           "total": sum(10 * k + e for e in range(E))}
    assert s["counters"] == rec.counters
    assert (s["cycles"], s["stalled"], s["stuck"]) == (rec.cycles, False, None)
    json.dumps(s)


def test_offered_load_and_goodput(cfg, workload):
    rec = ideal(cfg, workload)
    wr, E, window = workload.wr, cfg.switch.ports, workload.cycles
    mtu = cfg.switch.max_packet_flits - 2
    length = wr["length"].astype(np.int64)
    good = wr["expect"] == STATUS_OK
    # Completions after the posting window count for goodput_run only.
    late = np.zeros(len(workload), bool)
    late[np.flatnonzero(good)[-5:]] = True
    rec.done[late] = window + 100
    rec.cycles = window + 101
    s = rdma_summary(cfg, workload, rec)
    assert s["offered_load"] == pytest.approx(wr_cost(length, mtu).sum() / window / E)
    assert s["offered_words"] == pytest.approx(length.sum() / window / E)
    assert s["goodput"] == pytest.approx(length[good & ~late].sum() / window / E)
    assert s["goodput_run"] == pytest.approx(length[good].sum() / rec.cycles / E)
    assert 0.2 < s["offered_load"] < 0.4


def test_latency_percentiles_of_ok_completions_only(cfg, workload):
    rec = ideal(cfg, workload)
    good = np.flatnonzero(workload.wr["expect"] == STATUS_OK)
    rec.done[good] = workload.wr["post"][good] + np.arange(good.size)
    rec.done[workload.wr["expect"] != STATUS_OK] = 10 ** 6      # not counted
    lat = rdma_summary(cfg, workload, rec)["latency"]
    k = np.arange(good.size)
    assert lat == {"mean": pytest.approx(k.mean()), "p50": pytest.approx(np.percentile(k, 50)),
                   "p99": pytest.approx(np.percentile(k, 99)),
                   "p999": pytest.approx(np.percentile(k, 99.9)), "max": good.size - 1}


def test_nothing_completed(cfg, workload):
    rec = RdmaRecords.empty(len(workload), cfg.switch.ports, cfg.rdma.memory_words)
    rec.memory = workload.memory.copy()
    rec.stalled, rec.stuck, rec.cycles = True, "endpoint 0 channel 1: una 0 snd 3", 500
    s = rdma_summary(cfg, workload, rec)
    assert s["requests"]["completed"] == 0 and s["requests"]["not_completed"] == len(workload)
    assert s["latency"] == {k: None for k in ("mean", "p50", "p99", "p999", "max")}
    assert s["goodput"] == 0 and s["data"]["checked"] == 0 and s["data"]["stray_words"] == 0
    assert s["stalled"] and s["stuck"].startswith("endpoint 0")


def test_wrong_status_corrupted_data_and_stray_words(cfg, workload):
    rec = ideal(cfg, workload)
    wr, E = workload.wr, cfg.switch.ports
    tables = [KeyTable(workload.keys[e], workload.page_table[e], cfg) for e in range(E)]
    peer_kind = 1 + [kind for kind, _ in BAD_KINDS].index("peer")
    bad = np.flatnonzero(wr["bad_kind"] == peer_kind)
    good = np.flatnonzero(wr["expect"] == STATUS_OK)
    # A remote error completed OK: nothing was written, so its range is corrupted.
    rec.status[bad[0]] = STATUS_OK
    # A good WR completed twice, and one word of another good WR flipped.
    rec.completions[good[0]] = 2
    i = good[1]
    d = int(wr["dst"][i])
    word = tables[d].addresses(int(wr["rkey"][i]), int(wr["raddr"][i]), 1)[0]
    rec.memory[d, word] ^= np.uint64(1)
    # A word changed where no OK completion writes: the send area.
    rec.memory[0, 0] ^= np.uint64(1)
    s = rdma_summary(cfg, workload, rec)
    assert s["requests"]["unexpected_status"] == 1
    assert s["requests"]["first_unexpected"] == int(wr["tag"][bad[0]])
    assert s["requests"]["repeated_completions"] == 1
    data = s["data"]
    assert data["checked"] == good.size + 1
    assert data["corrupted"] == 2 and data["intact"] == good.size - 1
    assert data["first_corrupted"] == min(int(wr["tag"][i]), int(wr["tag"][bad[0]]))
    assert data["stray_words"] == 1


# -- connection state -------------------------------------------------------------


def test_connection_state_of_the_default_preset():
    cfg = FabricConfig.load(preset="default")
    st = connection_state(cfg)
    # Descriptor of M = 14: qp 16, opcode, first, last, lkey 16, va 24, rkey 16,
    # raddr 24, mlen 12, offset 12, words 4, tag 32 = 159 bits, plus err.
    # Sender: five PSNs, timer, msgerr and a 2-bit epoch; receiver: epsn and
    # denied, five flags and its epoch, unacked and the ack timer.
    assert st["sender_bits"] == 5 * 24 + 12 + 3 + 32 * 160 == 5255
    assert st["receiver_bits"] == 2 * 24 + 7 + 6 + 7 == 68
    assert st["bytes_per_channel"] == 657 + 9
    assert st["channels_per_endpoint"] == 14
    assert st["aggregated_bytes"] == 8 * 14 * 666 == 74_592
    assert st["connections_per_endpoint"] == 128 and st["per_qp_bytes"] == 1024 * 666
    assert st["reduction"] == pytest.approx(128 / 14)


@pytest.mark.parametrize("overrides", [
    ["rdma.channels_per_peer=1"], ["rdma.window=64"], ["rdma.qps=256"],
    ["rdma.retransmit_timeout=100", "rdma.ack_timeout=3"], ["switch.max_packet_flits=64"],
])
def test_connection_state_formula(overrides):
    cfg = FabricConfig.load(preset="default", overrides=overrides)
    E, r = cfg.switch.ports, cfg.rdma
    C, W, Q = r.channels_per_peer, r.window, r.qps // E
    M = cfg.switch.max_packet_flits - 2
    descriptor = 16 + 1 + 1 + 1 + 16 + 24 + 16 + 24 + 12 + 12 + M.bit_length() + 32
    sender = 120 + r.retransmit_timeout.bit_length() + 3 + W * (descriptor + 1)
    receiver = 48 + 7 + W.bit_length() + r.ack_timeout.bit_length()
    per_channel = math.ceil(sender / 8) + math.ceil(receiver / 8)
    st = connection_state(cfg)
    assert (st["sender_bits"], st["receiver_bits"], st["bytes_per_channel"]) == \
        (sender, receiver, per_channel)
    assert st["aggregated_bytes"] == E * (E - 1) * C * per_channel
    assert st["per_qp_bytes"] == r.qps * per_channel
    assert st["reduction"] == pytest.approx(Q / ((E - 1) * C))


def test_channels_and_qps_carrying_traffic(cfg):
    allreduce = generate_rdma(cfg, "rdma-allreduce", load=0.5, cycles=3000, seed=1)
    st = connection_state(cfg, allreduce)
    E, C = cfg.switch.ports, cfg.rdma.channels_per_peer
    # A ring: each endpoint uses its C channels to its successor only.
    assert st["channels_carrying_traffic"] == E * C
    assert st["qps_carrying_traffic"] == cfg.rdma.qps
    uniform = generate_rdma(cfg, "rdma-uniform", load=0.5, cycles=3000, seed=1)
    assert connection_state(cfg, uniform)["qps_carrying_traffic"] == cfg.rdma.qps


# -- congestion -------------------------------------------------------------------------


def test_jain_index():
    assert jain_index([3, 3, 3]) == pytest.approx(1.0)
    assert jain_index([1, 0, 0, 0]) == pytest.approx(0.25)
    assert jain_index([1, 2]) == pytest.approx(9 / 10)
    assert jain_index([]) is None and jain_index([0, 0]) is None


@pytest.fixture(scope="module")
def victim_cfg():
    return FabricConfig.load(preset="tiny", overrides=[
        "rdma.enabled=true", "rdma.qps=16", "rdma.memory_words=65536", "rdma.pages=1024",
        "pfc.enabled=true", "ecn.enabled=true", "dcqcn.enabled=true"])


@pytest.fixture(scope="module")
def victim_workload(victim_cfg):
    return generate_rdma(victim_cfg, "rdma-victim:side_load=0.2", load=0.4,
                         cycles=3 * FAIRNESS_WINDOW, seed=2)


def test_congestion_of_a_hand_built_victim_run(victim_cfg, victim_workload):
    cfg, w = victim_cfg, victim_workload
    wr = w.wr
    rec = ideal(cfg, w)
    E = cfg.switch.ports
    # The bystander's requests come back late: half of the victim's demand
    # completes after the posting window.
    aside = np.flatnonzero((wr["src"] == 1) & (wr["dst"] == 3))
    rec.done[aside[::2]] = w.cycles + 5
    rec.queue_depth = np.zeros((rec.cycles, E), np.int32)
    rec.queue_depth[:, 0] = np.arange(rec.cycles) % 100      # 0..99 flits toward the target
    rec.pfc_frames = np.array([[5, 2, 1, 256, *[0] * 7], [9, 2, 1, 0, *[0] * 7],
                               [12, 1, 1, 256, *[0] * 7]], np.int64)
    rec.rates = np.array([[40, 1, 0, 1000], [50, 2, 1, 32768]], np.int64)
    c = rdma_summary(cfg, w, rec)["congestion"]
    assert (c["target"], c["senders"]) == (0, [1, 2, 3])
    assert c["queue"]["max"] == 99 and c["queue"]["p50"] == pytest.approx(49.5, abs=1)
    assert c["queue"]["kmax"] == cfg.ecn.kmax
    assert c["queue"]["cycles_over_kmax"] == int((rec.queue_depth[:, 0] > cfg.ecn.kmax).sum())
    assert c["pause_frames"] == {"sent": 3, "pauses": 2, "resumes": 1, "per_port": [0, 1, 2, 0]}
    assert c["cnp"] == {"sent": sum(rec.counters["cnp_sent"]),
                        "handled": sum(rec.counters["cnp_handled"]),
                        "ecn_marked": sum(rec.counters["ecn_marked"])}
    mine = (wr["src"] == 1) & (wr["dst"] == 3)
    demand = wr["length"][mine].sum() / w.cycles
    got = wr["length"][mine & (rec.done < w.cycles)].sum() / w.cycles
    assert c["victim"]["demand"] == pytest.approx(demand) and c["victim"]["goodput"] == \
        pytest.approx(got) and c["victim"]["share"] == pytest.approx(got / demand)
    assert 0.3 < c["victim"]["share"] < 0.7
    goodput = [wr["length"][(wr["src"] == e) & (wr["dst"] == 0) & (rec.done < w.cycles)].sum()
               / w.cycles for e in (1, 2, 3)]
    assert c["goodput_per_sender"] == pytest.approx(goodput)
    assert c["jain"] == pytest.approx(jain_index(goodput)) and c["jain"] > 0.9
    assert c["window"] == FAIRNESS_WINDOW and len(c["jain_per_window"]) == 3
    assert c["rate_changes"] == 2 and c["lowest_rate"] == pytest.approx(1000 / 65536)


def test_convergence_is_the_first_window_from_which_every_one_is_fair(victim_cfg,
                                                                       victim_workload):
    cfg, w = victim_cfg, victim_workload
    wr = w.wr
    rec = ideal(cfg, w)
    assert rdma_summary(cfg, w, rec)["congestion"]["converge_cycle"] == 0
    # Sender 2 gets nothing done in the first window, then its share.
    early = np.flatnonzero((wr["src"] == 2) & (rec.done < FAIRNESS_WINDOW))
    rec.done[early] = w.cycles + 1
    c = rdma_summary(cfg, w, rec)["congestion"]
    assert c["jain_per_window"][0] < FAIR_JAIN <= min(c["jain_per_window"][1:])
    assert c["converge_cycle"] == FAIRNESS_WINDOW
    # Unfair in the last window: never converged.
    late = np.flatnonzero((wr["src"] == 2) & (rec.done >= 2 * FAIRNESS_WINDOW))
    rec.done[late] = w.cycles + 1
    assert rdma_summary(cfg, w, rec)["congestion"]["converge_cycle"] is None


def test_a_run_without_congestion_control_has_no_rates_and_no_victim(cfg, workload):
    c = rdma_summary(cfg, workload, ideal(cfg, workload))["congestion"]
    assert c["rate_changes"] == 0 and c["lowest_rate"] is None and c["victim"] is None
    assert c["pause_frames"]["sent"] == 0 and c["queue"]["kmax"] is None
