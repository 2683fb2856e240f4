"""The alpha-beta model, auto, and nccl-tests' bandwidths (docs/spec/collective.md section 15.6)."""

import dataclasses
import math
from collections import Counter

import numpy as np
import pytest

from superfabric.sim.collective.alpha_beta import (NOTIFY_BYTES, AlphaBeta, algbw, busbw,
                                                   busbw_factor, credit_pace, exchanges,
                                                   start_gap)
from superfabric.network.routing import ecmp_vc
from superfabric.sim.collective.apply import apply_cycles
from superfabric.sim.collective.library import ALGORITHMS, auto, plan, supports
from superfabric.sim.collective.schedule import OPS, elements_of

from .fabrics import FABRICS, config, peers


def test_beta_follows_the_link_and_the_packet():
    m = AlphaBeta.of(config("torus-2x2x2"))
    # 64-bit flits, 16-flit packets: 14 payload words; with rdma.dma_latency = 4 an idle
    # RDMA transmitter's pick and its wait for the first payload word cost 4 cycles, and
    # then the packets stream back to back.
    assert (m.flit_bytes, m.header_flits, m.payload_bytes) == (8, 2, 112)
    assert m.dma_latency == 4 and m.gap == 4 and start_gap(1, 2) == 1
    assert m.serialise(0) == 2 and m.serialise(8) == 1 + 2 and m.serialise(112) == 14 + 2
    assert m.serialise(113) == 15 + 4
    # A 32-flit VC buffer holds two packets, and a packet's credits are back 2 * 16 + 2 * 2
    # + 3 = 39 cycles after its head left: one flow gets 32 of every 39 cycles of a link.
    assert m.pace == credit_pace(config("torus-2x2x2")) == 39 / 32
    assert m.beta == pytest.approx(39 / 32 * 16 / 112)
    deep = AlphaBeta.of(config(("fabric.topology=torus", "fabric.vc_buffer_flits=40")))
    assert deep.pace == 1 and deep.beta == pytest.approx(16 / 112)
    assert AlphaBeta.of(config(("fabric.topology=switch",))).pace == 1
    assert m.alpha(2) == m.engine_cycles + 2 * m.hop_cycles
    # The notification, a header and a word, is a step's last packet through a router.
    assert m.hop_cycles == config("torus-2x2x2").fabric.link_latency + 3 + 3
    wide = AlphaBeta.of(config(("fabric.topology=torus", "switch.data_width=128")))
    assert wide.beta == pytest.approx(m.beta / 2)
    with pytest.raises(ValueError, match="engine_cycles = -1: must be a whole number >= 0"):
        AlphaBeta.of(config("torus-2x2x2"), engine_cycles=-1)


def test_a_notification_waits_behind_a_longer_packet_at_every_router():
    m = AlphaBeta.of(config("torus-2x2x2"))
    assert m.packets(0) == [2] and m.packets(8) == [3] and m.packets(112) == [16]
    assert m.packets(128) == [16, 4] and m.transit(112, 0) == 0
    # Nothing longer ahead of it: the notification's own store and forward at each router.
    assert m.transit(0, 2) == m.transit(8, 2) == 2 * m.hop_cycles
    # By hand, link_latency 2 (a router sends a packet 5 cycles after its tail arrived): a
    # full packet [0, 16) and the notification [16, 19) leave the port back to back; the
    # first router sends them in [21, 37) and [37, 40), the second in [42, 58) and
    # [58, 61): 61 - 19 = 42, where alone the notification takes 16.
    assert m.transit(112, 2) == 42 == 2 * m.hop_cycles + 26
    # A full packet, a 4-flit one and the notification: [0, 16), [16, 20), [20, 23); then
    # [21, 37), [37, 41), [41, 44); then [42, 58), [58, 62), [62, 65): 65 - 23 = 42.
    assert m.transit(128, 2) == 42


def test_a_write_is_slowed_by_the_most_writes_on_a_link_of_its_route():
    p = peers("torus-4x4x4")
    # Dimension order: 0 -> 2 and 1 -> 3 both cross the link from 1 to 2, on the lower
    # dateline class (VC 0 of 2); 4 -> 5 is alone.
    assert p.route(0, 2)[1] == p.route(1, 3)[0]
    assert p.lanes(0, 2)[1] == p.lanes(1, 3)[0] == (p.route(1, 3)[0], 0)
    assert p.sharing(((0, 2), (1, 3), (4, 5))) == [(2, 2.0), (2, 2.0), (1, 1.0)]
    # 3 -> 1 crosses the link from 0 to 1 after the dateline, on the upper class: the two
    # writes share the link but not a VC's credits.
    assert p.lanes(3, 1)[1] == (p.route(0, 2)[0], 1)
    assert p.sharing(((0, 2), (3, 1))) == [(2, 1.0), (2, 1.0)]
    # One sender's writes leave its port one after the other: they take turns on the link
    # but never hold its credits together.
    assert p.sharing(((0, 2), (0, 1))) == [(2, 1.0), (2, 1.0)]
    # With four VCs a class has two, and a flow keeps the one its hash picks (ecmp_vc):
    # these two share the link but not a buffer.
    four = peers(("fabric.topology=torus", "fabric.dims=[4, 4, 4]", "fabric.vcs=4"))
    assert [vc for _, vc in four.lanes(0, 2)] == [ecmp_vc(0, 2, 0, 2)] * 2 == [1, 1]
    assert [vc for _, vc in four.lanes(1, 3)] == [ecmp_vc(1, 3, 0, 2)] * 2 == [0, 0]
    assert four.sharing(((0, 2), (1, 3))) == [(2, 1), (2, 1)]
    # Two flows on one VC get a buffer's flits per credit round trip between them.
    m = AlphaBeta.of(config("torus-4x4x4"))
    assert m._on_links(np.array([100]), np.array([2]), np.array([False]),
                       np.array([2.0])).tolist() == [math.ceil(100 * 2 * 39 / 32)]


@pytest.mark.parametrize("fabric", sorted(FABRICS))
def test_the_rounds_are_the_schedules_writes(fabric):
    """Every write the model prices is one the schedule sends, at its own size: with fewer
    elements than accelerators most chunks are empty, and an odd count leaves them
    unequal."""
    p = peers(fabric)
    for op in OPS:
        for name in (a for a in ALGORITHMS if supports(a, op, p)):
            for nbytes in (8, 1028):
                rounds = ALGORITHMS[name].rounds(p, op, elements_of(nbytes))
                assert all(len(pairs) == len(elements) for pairs, elements in rounds)
                priced = Counter((src, dst, e) for pairs, elements in rounds
                                 for (src, dst), e in zip(pairs, elements))
                sent = Counter((a, step.peer, step.length) for a, steps in
                               enumerate(plan(p, op, name, nbytes).steps) for step in steps)
                assert priced == sent, (name, op, nbytes)


@pytest.mark.parametrize("fabric", sorted(FABRICS))
def test_an_exchange_is_whole_turns_in_which_no_one_writes_twice(fabric):
    # The exchanges of direct and dimension-wise direct cover their rounds, a turn a round,
    # each an accelerator's one write of the turn; the turns of one exchange wait for none
    # of each other in the schedule (its steps' waits name only an earlier phase's slots).
    p = peers(fabric)
    for op in OPS:
        for name in (a for a in ("direct", "dimwise-direct") if supports(a, op, p)):
            turns = exchanges(p, op, name)
            rounds = ALGORITHMS[name].rounds(p, op, elements_of(1028))
            if op == "broadcast":
                assert turns == []
                continue
            assert sum(turns) == len(rounds) and turns, (name, op)
            for pairs, _ in rounds:
                senders = [src for src, _ in pairs]
                assert len(senders) == len(set(senders)) == p.n, (name, op)
            # A turn's writes are step k of every schedule, so one exchange's steps are
            # consecutive: none of them waits for a slot its own exchange fills.
            steps = plan(p, op, name, 1028).steps
            first = 0
            for count in turns:
                filled = {a: {s.slot for b in range(p.n) for s in steps[b][first:first + count]
                              if s.peer == a} for a in range(p.n)}
                for a in range(p.n):
                    for s in steps[a][first:first + count]:
                        assert not any(slot < s.wait for slot in filled[a]), (name, op, a)
                first += count


def test_an_exchanges_writes_arrive_together_and_are_applied_in_turn():
    # Posted at once, a direct reduce-scatter's n - 1 writes leave the port back to back
    # and arrive at the exchange's end, where the receiver applies them one after the
    # other: at least the port's writes, a transit and n - 1 applies (not one apply after
    # the last, as if each had been applied while the next was sent), and less than n - 1
    # turns each waiting for the one before (as rounds in turn it was priced 826).
    p, m = peers("torus-2x2x2"), AlphaBeta.of(config("torus-2x2x2"))
    chunk = 1024 // p.n
    send = m.serialise(chunk) + m.serialise(NOTIFY_BYTES)
    apply = apply_cycles(chunk // 8, m.dma_latency)
    predicted = m.predict(p, "reducescatter", "direct", 1024)
    assert (p.n - 1) * (send + apply) + m.transit(chunk, 2) <= predicted \
        < (p.n - 1) * (send + m.transit(chunk, 2) + apply)


def test_an_exchange_takes_turns_with_all_its_writes_on_its_busiest_link():
    # One spine: each leaf's uplink carries the inter-leaf writes of both its hosts, 12 of
    # the exchange's 56, where a port sends 7; the turns interleave them, so the uplink, not
    # a turn's share of it, holds the port (measured: 631 cycles, 1.22 x this prediction;
    # 1.42 x without the bound).
    overrides = ("fabric.topology=fat_tree", "fabric.leaves=4", "fabric.spines=1",
                 "fabric.hosts_per_leaf=2", "fabric.routing=ecmp")
    p, m = peers(overrides), AlphaBeta.of(config(overrides))
    pairs = tuple((a, (a + d) % p.n) for d in range(1, p.n) for a in range(p.n))
    busiest = max(share for share, _ in p.sharing(pairs))
    assert busiest == 12
    chunk = 1024 // p.n
    flits = m.serialise(chunk) + m.serialise(NOTIFY_BYTES)
    apply = apply_cycles(chunk // 8, m.dma_latency)
    assert m.predict(p, "reducescatter", "direct", 1024) >= \
        busiest * flits + m.transit(chunk, 3) + (p.n - 1) * apply


def paced(m, flits: int, idle: bool) -> int:
    """Cycles ``flits`` take through a link: after an idle port the buffer's worth at once,
    the rest at the pace of the credits."""
    free = min(flits, m.buffer) if idle else 0
    return math.ceil(free + (flits - free) * m.pace)


def test_the_ring_matches_its_closed_form():
    # Patarasuk and Yuan: 2(n-1) steps of alpha plus a 1/n chunk, one hop (two routers)
    # each, at the link's pace; unsegmented, each step also waits for its chunk's
    # notification and apply, and so starts an idle transmitter.
    for name in ("torus-2x2x2", "torus-4x4x4"):
        p, m = peers(name), AlphaBeta.of(config(name))
        n, nbytes = p.n, 1 << 20
        chunk = -(-nbytes // 4 // n) * 4
        send = paced(m, m.serialise(chunk) + m.serialise(NOTIFY_BYTES), True)
        step = (m.gap + send + m.engine_cycles + m.transit(chunk, 2)
                + apply_cycles(chunk // 8, m.dma_latency))
        assert m.predict(p, "allreduce", "ring", nbytes) == 2 * (n - 1) * step


def test_the_segmented_ring_is_a_pipeline():
    # R rounds of S segments: the port sends every segment of every round one after the
    # other, without a fresh start, once the first has gone round (its transfer, its transit
    # and its apply), when the port, not the latency, is the limit: L + (R S - 1) t.
    p, m = peers("torus-2x2x2"), AlphaBeta.of(config("torus-2x2x2"))
    n, nbytes, segment = p.n, 1 << 20, 512
    chunk, rounds = (1 << 20) // 4 // n, 2 * (n - 1)
    s = chunk // segment
    assert chunk % segment == 0
    flits = m.serialise(4 * segment) + m.serialise(NOTIFY_BYTES)
    t = paced(m, flits, False)
    latency = (m.gap + paced(m, flits, True) + m.engine_cycles + m.transit(4 * segment, 2)
               + apply_cycles(segment // 2, m.dma_latency))
    assert s * t > latency
    assert m.predict(p, "allreduce", "ring", nbytes, segment=segment) == \
        latency + (rounds * s - 1) * t
    # Segments overlap the apply with the next transfer: far less than unsegmented.
    assert m.predict(p, "allreduce", "ring", nbytes) > 1.5 * latency + (rounds * s - 1) * t
    # The tree pipelines by its own count, so a segment does not change its prediction.
    assert m.predict(p, "allreduce", "tree", nbytes, segment=segment) == \
        m.predict(p, "allreduce", "tree", nbytes)



def test_a_streaming_port_pays_for_the_acknowledgements_it_sends():
    # With VC buffers that cover the credit loop the port is the limit: every segment after
    # the first holds it for its flits and for the ACKs of as many packets received, one per
    # rdma.ack_every, each its flit and its data's restart (gap): 68 cycles for four 16-flit
    # packets in the model's runs. A port that waits for its data sends them while it waits.
    overrides = ("fabric.topology=torus", "fabric.dims=[2, 2, 2]", "fabric.vc_buffer_flits=40")
    p = peers(overrides)
    m = AlphaBeta.of(config(overrides))
    assert m.ack_every == 4 and m.pace == 1
    assert list(m.acks(np.array([4, 17, 3]))) == [4, 17, 3]
    quiet = dataclasses.replace(m, ack_every=0)
    assert list(quiet.acks(np.array([4, 17]))) == [0, 0]
    rounds, segment = 2 * (p.n - 1), 512
    s = (1 << 20) // 4 // p.n // segment
    packets = len(m.packets(4 * segment)) + len(m.packets(NOTIFY_BYTES))
    assert m.predict(p, "allreduce", "ring", 1 << 20, segment=segment) \
        - quiet.predict(p, "allreduce", "ring", 1 << 20, segment=segment) \
        == (rounds * s - 1) * (packets * m.gap // 4)
    # Whole chunks: every step waits for the chunk it forwards, so no ACK is priced.
    assert m.predict(p, "allreduce", "ring", 1 << 20) == quiet.predict(p, "allreduce", "ring",
                                                                       1 << 20)

def test_the_both_ways_ring_is_two_rings_that_do_not_wait_for_each_other():
    # A write forwards what its sender got from its other neighbour, not what came back from
    # its receiver: an 8-byte both-ways ring takes the one-way ring's time and its second
    # direction's last write, not a round's latency more per round (it took 1.2 times the
    # ring's before; measured on the 4x4x4 it takes the ring's).
    for name in ("torus-2x2x2", "torus-4x4x4"):
        p, m = peers(name), AlphaBeta.of(config(name))
        ring, both = (m.predict(p, "allreduce", a, 8) for a in ("ring", "biring"))
        assert ring < both < ring + m.alpha(2)


def test_a_layer_of_writes_shorter_than_the_rounds_longest_is_priced():
    # Dimension-wise all on the 8x8x6 torus at 1 MiB: its shares' writes differ in length,
    # and a layer of short ones has no piece in a round's first columns (this raised once).
    # Every port still sends its 2 (n - 1) / n of the message, at most a flit a cycle.
    torus = ("fabric.topology=torus", "fabric.dims=[8, 8, 6]")
    p, m = peers(torus), AlphaBeta.of(config(torus))
    nbytes = 1 << 20
    least = 2 * (p.n - 1) / p.n * nbytes / m.flit_bytes
    assert m.predict(p, "allreduce", "dimwise-all", nbytes, segment=m.segment_elements(16)) \
        > least


def test_dimwise_has_the_rings_bandwidth_and_far_fewer_steps():
    p, m = peers("torus-4x4x4"), AlphaBeta.of(config("torus-4x4x4"))
    big = 1 << 24
    ring, dim = (m.predict(p, "allreduce", a, big) for a in ("ring", "dimwise"))
    assert dim < ring < 1.01 * dim
    small_ring, small_dim = (m.predict(p, "allreduce", a, 8) for a in ("ring", "dimwise"))
    assert small_dim * 5 < small_ring


@pytest.mark.parametrize("fabric", sorted(FABRICS))
@pytest.mark.parametrize("op", OPS)
def test_auto_picks_the_least_predicted_time(fabric, op):
    p, m = peers(fabric), AlphaBeta.of(config(fabric))
    for nbytes, segment in ((8, 0), (4096, 448), (1 << 16, 0), (1 << 16, 448), (1 << 24, 0)):
        pick = auto(m, p, op, nbytes, segment)
        times = {a: m.predict(p, op, a, nbytes, segment=segment) for a in ALGORITHMS
                 if supports(a, op, p)}
        assert times[pick] == min(times.values())
        assert plan(p, op, "auto", nbytes, m, segment).algorithm == pick


def test_auto_changes_its_mind_with_the_size_on_the_torus():
    p, m = peers("torus-4x4x4"), AlphaBeta.of(config("torus-4x4x4"))
    small, large = auto(m, p, "allreduce", 8), auto(m, p, "allreduce", 1 << 24)
    assert small != large
    # Small messages are latency-bound: fewer steps; large are bandwidth-bound.
    assert ALGORITHMS[small].steps(p, "allreduce") < ALGORITHMS["ring"].steps(p, "allreduce")
    assert m.predict(p, "allreduce", large, 1 << 24) <= m.predict(p, "allreduce", "ring",
                                                                   1 << 24)


def test_auto_needs_the_model():
    with pytest.raises(ValueError, match="algo = 'auto' needs the alpha-beta model"):
        plan(peers("torus-2x2x2"), "allreduce", "auto", 8)


def test_nccl_tests_bus_bandwidth_factors():
    n = 8
    assert busbw_factor("allreduce", n) == 2 * 7 / 8
    for op in ("reducescatter", "allgather", "alltoall"):
        assert busbw_factor(op, n) == 7 / 8
    assert busbw_factor("broadcast", n) == 1
    assert algbw(1 << 30, 0.5) == pytest.approx(2 * (1 << 30) / 1e9)
    assert busbw("allreduce", n, 1 << 30, 0.5) == pytest.approx(algbw(1 << 30, 0.5) * 1.75)
    with pytest.raises(ValueError, match="op = 'reduce': must be one of allreduce"):
        busbw_factor("reduce", n)
