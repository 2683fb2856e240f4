"""The collective engine's apply unit (``hdl/collective/apply.py``) against its model, the
apply unit of the compiled collective engine (``sim/collective/kernels/engine.py``): the
same notifications, staged chunks and receive completions in the same cycles give the same
slot applied in the same cycle and the same memory, word for word."""

from types import SimpleNamespace

import numpy as np
import pytest
from amaranth.sim import Simulator

from superfabric.config import FabricConfig
from superfabric.formats.collective import notify_word
from superfabric.hdl.collective.apply import ApplyUnit
from superfabric.hdl.verilog import write_verilog
from superfabric.sim.collective.host_memory import Layout, words_of
from superfabric.sim.collective.kernels.engine import (
    APPLIED, collective_params, collective_posts, collective_received, collective_state,
    collective_step)
from superfabric.sim.kernel import specialise

from conftest import assert_lint_clean, require_simulator

BUFFER_WORDS = 40
CAPACITY = 12


def config(latency: int) -> FabricConfig:
    return FabricConfig.load(overrides=[f"rdma.dma_latency={latency}", "rdma.memory_words=512",
                                        "rdma.page_words=64"])


def scenario(rng, slots: int, dtype: str, layout: Layout):
    """A run's arrivals: per cycle, the words the RDMA engine writes and whether it gives a
    receive completion. Every slot's chunk is written to its staging, then its notification
    with the completion, as a channel delivers them; slots arrive in a shuffled order (so
    some reads find no notification yet), with gaps, sometimes two completions a cycle
    apart; chunks of 0 to 2 * CAPACITY - 1 elements, either parity, added or copied."""
    events = {}
    cycle = 1
    for slot in rng.permutation(slots):
        length = int(rng.integers(0, 2 * CAPACITY - 1))
        parity = int(rng.integers(0, 2))
        dst = int(rng.integers(0, 2 * BUFFER_WORDS - length))
        staged = words_of(parity, length)[1]
        if dtype == "fp32":
            values = (rng.standard_normal(2 * staged) * 4).astype(np.float32).view(np.uint32)
        else:
            values = rng.integers(0, 1 << 32, 2 * staged, dtype=np.uint64).astype(np.uint32)
        for k, word in enumerate(values.view(np.uint64).tolist()):
            events.setdefault(cycle, []).append((layout.staging_at(slot) + k, word))
            cycle += int(rng.integers(0, 2))
        word = notify_word(reduce=int(rng.random() < 0.8), parity=parity, dst=dst, length=length)
        events.setdefault(cycle, []).append((layout.notify + slot, word, "completion"))
        cycle += int(rng.choice([1, 1, 2, 5, 30]))
    return events


def initial_memory(rng, layout: Layout, dtype: str) -> list[int]:
    memory = [0] * layout.words
    if dtype == "fp32":
        buffer = (rng.standard_normal(2 * BUFFER_WORDS)).astype(np.float32).view(np.uint64)
    else:
        buffer = rng.integers(0, 1 << 63, BUFFER_WORDS, dtype=np.uint64)
    memory[:BUFFER_WORDS] = buffer.tolist()
    return memory


def run_model(cfg, layout, slots, dtype, memory, events, cycles):
    """The model's engine of one accelerator with no step (its apply unit alone) over
    ``events``: the cycles its slots were applied, and the memory at the end."""
    schedule = SimpleNamespace(steps=[[]], slots=[slots])
    prm = collective_params(cfg, schedule, layout, dtype)
    st = collective_state(cfg, schedule, layout, dtype)
    rows, posts = np.array([memory], np.uint64), collective_posts(prm)
    step = specialise(collective_step, st, prm, 0, 0, rows, posts)
    for cycle in range(cycles):
        for event in events.get(cycle, ()):
            rows[0, event[0]] = event[1]
            if len(event) == 3:
                collective_received(st, 0)
        step(st, prm, 0, cycle, rows, posts)
    return st.applied_at[:st.engine[0, APPLIED]].tolist(), rows[0].tolist()


class HostMemory:
    """A host memory behind a unit's ports, as :class:`~superfabric.hdl.rdma.host_memory.
    HostMemory` answers: a read gives the word as it was in the request's cycle, ``D``
    cycles later; writes land at the end of their cycle, the RDMA engine's and the unit's
    alike. Per cycle: :meth:`drive` before the unit's outputs are read, :meth:`commit`
    after the clock edge."""

    def __init__(self, dut, memory: list[int], latency: int):
        self.dut, self.memory = dut, memory
        self._note, self._buffer = [0] * latency, [0] * latency
        self._reads = self._writes = None

    def drive(self, ctx, writes) -> None:
        """Present the data due in this cycle and sample the unit's requests; ``writes``
        are the RDMA engine's ``(address, word)`` in this cycle."""
        dut, memory = self.dut, self.memory
        ctx.set(dut.note_data, self._note[0])
        ctx.set(dut.buffer_data, self._buffer[0])
        self._reads = (memory[ctx.get(dut.note_addr) % len(memory)],
                       memory[ctx.get(dut.buffer_addr) % len(memory)])
        self._writes = list(writes)
        if ctx.get(dut.write_en):
            self._writes.append((ctx.get(dut.write_addr), ctx.get(dut.write_data)))

    def commit(self) -> None:
        for address, word in self._writes:
            self.memory[address] = word
        self._note = self._note[1:] + [self._reads[0]]
        self._buffer = self._buffer[1:] + [self._reads[1]]


def set_layout(ctx, dut, layout: Layout, slots: int, dtype: str) -> None:
    ctx.set(dut.binary32, int(dtype == "fp32"))
    ctx.set(dut.slots, slots)
    ctx.set(dut.notify, layout.notify)
    ctx.set(dut.staging, layout.staging)
    ctx.set(dut.capacity, layout.capacity)


def run_rtl(cfg, layout, slots, dtype, memory, events, cycles):
    dut = ApplyUnit(cfg)
    ports = HostMemory(dut, memory, cfg.rdma.dma_latency)
    applied_at = []

    async def testbench(ctx):
        set_layout(ctx, dut, layout, slots, dtype)
        for cycle in range(cycles):
            arrived = events.get(cycle, ())
            ctx.set(dut.received, any(len(e) == 3 for e in arrived))
            applied = ctx.get(dut.applied)
            ports.drive(ctx, [e[:2] for e in arrived])
            await ctx.tick()
            ports.commit()
            if ctx.get(dut.applied) != applied:
                applied_at.append(cycle)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    return applied_at, memory


@pytest.mark.parametrize("latency", [1, 2, 5])
@pytest.mark.parametrize("dtype", ["int32", "fp32"])
def test_rtl_applies_as_the_model(latency, dtype):
    rng = np.random.default_rng(latency * 10 + len(dtype))
    slots = 14
    staging = 64
    notify = staging + slots * CAPACITY
    layout = Layout(BUFFER_WORDS, BUFFER_WORDS, staging, CAPACITY, notify, notify + slots)
    events = scenario(rng, slots, dtype, layout)
    cycles = max(events) + slots * (2 * CAPACITY + 2 * latency + 2) + 10
    memory = initial_memory(rng, layout, dtype)
    cfg = config(latency)
    want_at, want = run_model(cfg, layout, slots, dtype, list(memory), events, cycles)
    got_at, got = run_rtl(cfg, layout, slots, dtype, list(memory), events, cycles)
    assert len(want_at) == slots, "the model did not apply every slot"
    assert got_at == want_at, f"slots applied at {got_at}, the model at {want_at}"
    bad = [a for a in range(len(want)) if got[a] != want[a]]
    assert not bad, (f"{len(bad)} words differ, first {bad[0]}: RTL {got[bad[0]]:#018x}, "
                     f"model {want[bad[0]]:#018x}")
    assert got[:BUFFER_WORDS] != memory[:BUFFER_WORDS]


def test_the_apply_unit_is_lint_clean(tmp_path):
    require_simulator("verilator")
    require_simulator("icarus")
    path = write_verilog(config(2), tmp_path, top="apply_unit", component=ApplyUnit(config(2)))
    assert_lint_clean(tmp_path, path)
