"""Tests of the egress queue: the model's rules alone, and the RTL (``hdl/egress_queue.py``)
against them (``sim/egress_queue.py``) in Amaranth's simulator, cycle by cycle, with a
writer that keeps the credit rule, as the router's crossbar does, and a sink that stalls
at random."""

import random

import pytest
from amaranth.hdl import Shape, Value, unsigned

from superfabric.config import EGRESS_DEPTH, FabricConfig
from superfabric.hdl.egress_queue import EgressQueue
from superfabric.hdl.packet import packet_layout
from superfabric.sim.egress_queue import EgressQueueModel

from block_stimulus import simulate


# -- the model alone -------------------------------------------------------------------


def test_model_credit_counts_the_arriving_flit_not_the_leaving_one():
    model = EgressQueueModel()
    for k in range(EGRESS_DEPTH - 1):
        assert model.credit(False) and model.credit(True)
        model.step(pushed=k)
    # Three held: room for one more, but not if one is arriving now.
    assert model.credit(False) and not model.credit(True)
    model.step(pushed=3)
    assert not model.credit(False) and len(model) == EGRESS_DEPTH


def test_model_is_a_fifo_across_the_ring():
    model = EgressQueueModel()
    out = []
    for k in range(3 * EGRESS_DEPTH):
        out.append(model.head())
        model.step(pushed=k, popped=model.head() is not None)
    assert out == [None] + list(range(3 * EGRESS_DEPTH - 1))
    assert model.head() == 3 * EGRESS_DEPTH - 1 and len(model) == 1


# -- RTL against the model in Amaranth's simulator -------------------------------------


def simulate_queue(payload_shape, *, flits, seed, write_rate, ready_stall):
    """Write ``flits`` into an :class:`EgressQueue` under its credit rule (a read issued
    while ``credit`` arrives at the next edge, as the crossbar's does) and drain it with a
    randomly stalling sink. Every cycle ``credit``, ``i.ready``, ``o.valid`` and
    ``o.payload`` are held against :class:`EgressQueueModel`. Returns the flits delivered
    and how many cycles the queue was full (``i.ready`` low, with nothing arriving)."""
    dut = EgressQueue(payload_shape=payload_shape)
    width = Shape.cast(payload_shape).width
    rng = random.Random(seed)
    delivered = []
    full_cycles = 0

    async def testbench(ctx):
        nonlocal full_cycles
        model = EgressQueueModel()
        i_payload, o_payload = Value.cast(dut.i.payload), Value.cast(dut.o.payload)
        sent = 0
        in_flight = None          # the flit read last cycle, written at this edge
        cycle = 0
        while len(delivered) < len(flits):
            assert cycle < 100 * len(flits), f"cycle {cycle}: {len(delivered)} flits out"
            ready = int(rng.random() >= ready_stall)
            ctx.set(dut.i.valid, in_flight is not None)
            ctx.set(i_payload, rng.getrandbits(width) if in_flight is None else in_flight)
            ctx.set(dut.o.ready, ready)

            credit, i_ready, o_valid = ctx.get(dut.credit), ctx.get(dut.i.ready), ctx.get(dut.o.valid)
            head = model.head()
            want = model.credit(in_flight is not None)
            assert credit == want, f"cycle {cycle}: credit is {credit}, the model says {int(want)}"
            assert i_ready or in_flight is None, (
                f"cycle {cycle}: a flit arrives at a full queue under the credit rule")
            assert o_valid == (head is not None), (
                f"cycle {cycle}: o.valid is {o_valid}, the model says {int(head is not None)}")
            if o_valid:
                payload = ctx.get(o_payload)
                assert payload == head, (
                    f"cycle {cycle}: o.payload is {payload:#x}, the model says {head:#x}")
                if ready:
                    delivered.append(payload)
            full_cycles += len(model) == EGRESS_DEPTH
            model.step(in_flight, bool(o_valid and ready))
            # The writer's read of this cycle, allowed by the credit of this cycle.
            in_flight = None
            if credit and sent < len(flits) and rng.random() < write_rate:
                in_flight = flits[sent]
                sent += 1
            cycle += 1
            await ctx.tick()

    simulate(dut, testbench)
    return delivered, full_cycles


@pytest.mark.parametrize("seed, write_rate, ready_stall", [
    (1, 1.0, 0.0),
    (2, 1.0, 0.5),
    (3, 0.5, 0.3),
    (4, 0.9, 0.8),
])
def test_rtl_matches_model(seed, write_rate, ready_stall):
    rng = random.Random(seed)
    flits = [rng.getrandbits(8) for _ in range(300)]
    delivered, full_cycles = simulate_queue(unsigned(8), flits=flits, seed=seed,
                                            write_rate=write_rate, ready_stall=ready_stall)
    assert delivered == flits
    if ready_stall >= 0.5:
        assert full_cycles > 0, "the queue never filled"


def test_rtl_matches_model_with_packet_layout():
    layout = packet_layout(FabricConfig.load(preset="tiny"))
    rng = random.Random(5)
    flits = [rng.getrandbits(layout.size) for _ in range(200)]
    delivered, full_cycles = simulate_queue(layout, flits=flits, seed=5, write_rate=1.0,
                                            ready_stall=0.6)
    assert delivered == flits
    assert full_cycles > 0

