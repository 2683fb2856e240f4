"""Tests of the skid buffer: the model alone, the RTL against the model in
Amaranth's simulator, and the generated Verilog under Icarus and Verilator."""

import json
import random

import pytest
from amaranth.hdl import Shape, Value, unsigned
from amaranth.sim import Simulator

from superfabric.config import FabricConfig
from superfabric.hdl.packet import packet_layout
from superfabric.hdl.skid_buffer import SkidBuffer
from superfabric.sim.skid_buffer import SkidBufferModel
from superfabric.tb.runner import run_cocotb


# -- the model alone -------------------------------------------------------------------


def test_model_holds_two_transfers_oldest_first():
    model = SkidBufferModel()
    assert model.ready() and model.head() is None
    model.step(pushed=10)
    assert model.ready() and model.head() == 10
    model.step(pushed=11)
    assert not model.ready() and model.head() == 10
    model.step(popped=True)
    assert model.ready() and model.head() == 11
    model.step(pushed=12, popped=True)
    assert model.head() == 12 and len(model) == 1
    model.step(popped=True)
    assert model.head() is None and len(model) == 0


def test_model_keeps_a_zero_payload():
    # A payload of 0 is a transfer, not "nothing pushed".
    model = SkidBufferModel()
    model.step(pushed=0)
    assert model.head() == 0 and len(model) == 1


# -- RTL against the model in Amaranth's simulator -------------------------------------


def simulate(payload_shape, *, flits, seed, valid_stall, ready_stall):
    """Push ``flits`` through a :class:`SkidBuffer` with random stalls on both sides.

    Every cycle, ``i.ready``, ``o.valid`` and ``o.payload`` are held against
    :class:`SkidBufferModel`. Returns the flits delivered, in order, and how
    many cycles the buffer held two transfers.
    """
    dut = SkidBuffer(payload_shape=payload_shape)
    width = Shape.cast(payload_shape).width
    rng = random.Random(seed)
    delivered = []
    full_cycles = 0

    async def testbench(ctx):
        nonlocal full_cycles
        model = SkidBufferModel()
        i_payload, o_payload = Value.cast(dut.i.payload), Value.cast(dut.o.payload)
        sent = 0
        offered = None
        cycle = 0
        while len(delivered) < len(flits):
            assert cycle < 100 * len(flits), f"cycle {cycle}: {len(delivered)} flits out"
            if offered is None and sent < len(flits) and rng.random() >= valid_stall:
                offered = flits[sent]
            ready = int(rng.random() >= ready_stall)
            ctx.set(dut.i.valid, offered is not None)
            ctx.set(i_payload, rng.getrandbits(width) if offered is None else offered)
            ctx.set(dut.o.ready, ready)

            i_ready, o_valid = ctx.get(dut.i.ready), ctx.get(dut.o.valid)
            head = model.head()
            assert i_ready == model.ready(), (
                f"cycle {cycle}: i.ready is {i_ready}, the model says {int(model.ready())}")
            assert o_valid == (head is not None), (
                f"cycle {cycle}: o.valid is {o_valid}, the model says {int(head is not None)}")
            popped = bool(o_valid and ready)
            if o_valid:
                payload = ctx.get(o_payload)
                assert payload == head, (
                    f"cycle {cycle}: o.payload is {payload:#x}, the model says {head:#x}")
                if ready:
                    delivered.append(payload)
            pushed = offered if offered is not None and i_ready else None
            if pushed is not None:
                sent += 1
                offered = None
            full_cycles += len(model) == 2
            model.step(pushed, popped)
            cycle += 1
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    return delivered, full_cycles


@pytest.mark.parametrize("seed, valid_stall, ready_stall", [
    (1, 0.0, 0.0),
    (2, 0.3, 0.3),
    (3, 0.1, 0.7),
    (4, 0.7, 0.1),
])
def test_rtl_matches_model(seed, valid_stall, ready_stall):
    rng = random.Random(seed)
    flits = [rng.getrandbits(8) for _ in range(300)]
    delivered, full_cycles = simulate(unsigned(8), flits=flits, seed=seed,
                                      valid_stall=valid_stall, ready_stall=ready_stall)
    assert delivered == flits
    if ready_stall:
        assert full_cycles > 0, "the skid register never filled"


def test_rtl_matches_model_with_packet_layout():
    layout = packet_layout(FabricConfig.load(preset="tiny"))
    rng = random.Random(5)
    flits = [rng.getrandbits(layout.size) for _ in range(200)]
    delivered, full_cycles = simulate(layout, flits=flits, seed=5, valid_stall=0.2, ready_stall=0.5)
    assert delivered == flits
    assert full_cycles > 0


# -- generated Verilog under cocotb ----------------------------------------------------


@pytest.mark.parametrize("seed, valid_stall, ready_stall", [
    (11, 0.3, 0.3),
    (12, 0.1, 0.7),
    (13, 0.7, 0.1),
])
def test_cocotb_random_stalls(sim, build_root, tmp_path, seed, valid_stall, ready_stall):
    cfg = FabricConfig.load(preset="tiny")
    coverage = tmp_path / "coverage.json"
    result = run_cocotb(cfg, "superfabric.tb.skid_buffer_tb", sim=sim, top="skid_buffer",
                        test_dir=tmp_path / "cocotb", build_root=build_root, seed=seed,
                        params={"flits": 300, "valid_stall": valid_stall,
                                "ready_stall": ready_stall, "coverage": str(coverage)})
    assert result.passed, f"{result.failed} of {result.tests} failed; see {result.test_dir}/sim.log"
    seen = json.loads(coverage.read_text())
    assert seen["full"] > 0 and seen["push_and_pop"] > 0 and seen["stalled_output"] > 0, seen
