"""cocotb testbench of the skid buffer: random stalls on both sides, held cycle by cycle against the model.

The source offers random flits of the packet layout's width and, when it has
none waiting, stays idle in a cycle with probability ``valid_stall``; an
offered flit is held until the buffer takes it (a stream source must not
withdraw it). The sink is not ready in a cycle with probability
``ready_stall`` (:class:`~superfabric.sim.backpressure.SinkReady`). In every
cycle ``i.ready``, ``o.valid`` and ``o.payload`` must equal what
:class:`~superfabric.sim.skid_buffer.SkidBufferModel` says; at the end every
flit must have come out exactly once, in order.

Parameters (``superfabric.tb.params``): ``flits`` (how many to send,
default 300), ``valid_stall`` and ``ready_stall`` (default 0.3 each),
``seed`` (default the cocotb test seed, which cocotb derives from
``COCOTB_RANDOM_SEED`` and the test name), and ``coverage`` (optional path
where the testbench writes how often each situation occurred, as JSON).
"""

import json
import random
from pathlib import Path

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly

from ..formats.packet import FlitCodec, packet_fields
from ..sim.backpressure import SinkReady
from ..sim.skid_buffer import SkidBufferModel
from . import params as tb_params
from .reset import reset

__all__ = ["TB"]

#: Idle cycles checked after the last flit, so a flit delivered twice is caught.
DRAIN_CYCLES = 4


class TB:
    """Clock, reset, source and sink of one ``skid_buffer`` instance.

    Parameters
    ----------
    dut
        The cocotb handle of the ``skid_buffer`` top.
    cfg : FabricConfig
        The configuration the Verilog was generated from (it sets the payload width).
    seed : int
        Seed of the flits, the source gaps and the sink stalls.
    valid_stall : float
        Probability in ``[0, 1)`` that an idle source offers nothing in a cycle.
    ready_stall : float
        Probability in ``[0, 1)`` that the sink is not ready in a cycle.
    """

    def __init__(self, dut, cfg, *, seed: int, valid_stall: float, ready_stall: float):
        if not 0.0 <= valid_stall < 1.0:
            raise ValueError(f"valid_stall = {valid_stall!r}: must be in [0, 1)")
        self.dut = dut
        self.width = FlitCodec(packet_fields(cfg)).width
        self.valid_stall = valid_stall
        self.sink = SinkReady(1, ready_stall, seed)
        self._rng = random.Random(seed)
        self.model = SkidBufferModel()
        self.cycle = 0
        #: How often the interesting situations occurred, so a run can show it reached them.
        self.coverage = {"full": 0, "push_and_pop": 0, "stalled_output": 0}

    async def reset(self):
        """Start the clock, hold reset for a few cycles, release it after a falling edge."""
        dut = self.dut
        await reset(dut, [dut.i__valid, dut.i__payload, dut.o__ready])

    def flits(self, count: int) -> list[int]:
        """``count`` random payloads covering every bit of the packet layout."""
        return [self._rng.getrandbits(self.width) for _ in range(count)]

    async def step(self, offered: int | None) -> tuple[bool, int | None]:
        """Run one cycle from just after a falling edge to the next one.

        Drives ``offered`` (``None`` for an idle source, whose payload is then
        random so that a buffer capturing it would show) and the sink's ready,
        checks the outputs against the model and advances it. Returns whether
        the offered flit was taken and the flit delivered, if any.
        """
        dut, model, cycle = self.dut, self.model, self.cycle
        dut.i__valid.value = int(offered is not None)
        dut.i__payload.value = offered if offered is not None else self._rng.getrandbits(self.width)
        ready = self.sink.mask(cycle) & 1
        dut.o__ready.value = ready

        await ReadOnly()
        i_ready = int(dut.i__ready.value)
        o_valid = int(dut.o__valid.value)
        head = model.head()
        assert i_ready == int(model.ready()), (
            f"cycle {cycle}: i.ready is {i_ready}, the model says {int(model.ready())}")
        assert o_valid == int(head is not None), (
            f"cycle {cycle}: o.valid is {o_valid}, the model says {int(head is not None)}")
        delivered = None
        if o_valid:
            payload = dut.o__payload.value.to_unsigned()
            assert payload == head, (
                f"cycle {cycle}: o.payload is {payload:#x}, the model says {head:#x}")
            if ready:
                delivered = payload
        taken = offered is not None and bool(i_ready)

        self.coverage["full"] += len(model) == 2
        self.coverage["push_and_pop"] += taken and delivered is not None
        self.coverage["stalled_output"] += bool(o_valid) and not ready
        model.step(offered if taken else None, delivered is not None)
        self.cycle += 1
        await FallingEdge(dut.clk)
        return taken, delivered

    async def run(self, flits: list[int], cycle_limit: int) -> list[int]:
        """Send ``flits`` through the buffer; return what came out, in order."""
        received = []
        sent = 0
        offered = None
        while len(received) < len(flits):
            assert self.cycle < cycle_limit, (
                f"cycle {self.cycle}: only {len(received)} of {len(flits)} flits out "
                f"after {cycle_limit} cycles")
            if offered is None and sent < len(flits) and self._rng.random() >= self.valid_stall:
                offered = flits[sent]
            taken, delivered = await self.step(offered)
            if taken:
                sent += 1
                offered = None
            if delivered is not None:
                received.append(delivered)
        for _ in range(DRAIN_CYCLES):
            _, delivered = await self.step(None)
            if delivered is not None:
                received.append(delivered)
        return received


@cocotb.test()
async def skid_buffer_random_stalls(dut):
    """Random flits, random gaps and backpressure; RTL equals the model in every cycle."""
    cfg, p = tb_params.read()
    seed = p.get("seed", cocotb.RANDOM_SEED)
    count = p.get("flits", 300)
    tb = TB(dut, cfg, seed=seed, valid_stall=p.get("valid_stall", 0.3),
            ready_stall=p.get("ready_stall", 0.3))
    dut._log.info(f"seed {seed}, {count} flits, valid_stall {tb.valid_stall}, "
                  f"ready_stall {tb.sink.stall}")
    assert len(dut.i__payload) == tb.width, (
        f"i__payload is {len(dut.i__payload)} bits, the packet layout {tb.width}")
    await tb.reset()
    flits = tb.flits(count)
    # Even at heavy stalls a flit needs a few cycles on average; the limit
    # only turns a hang into a failure.
    received = await tb.run(flits, cycle_limit=100 * count + 100)
    assert len(received) == len(flits), f"{len(received)} flits out, {len(flits)} sent"
    for n, (got, sent) in enumerate(zip(received, flits)):
        assert got == sent, f"flit {n}: received {got:#x}, sent {sent:#x}"
    if p.get("coverage"):
        Path(p["coverage"]).write_text(json.dumps({"cycles": tb.cycle, **tb.coverage}) + "\n")
