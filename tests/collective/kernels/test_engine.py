"""The compiled collective engines (``sim/collective/kernels/engine.py``) against the Python
ones (``sim/collective/engine.py``), call for call: a collective runs on the RDMA model with
the Python engine's methods wrapped to record, per accelerator and call, its inputs, its
outputs, the WRs it posts, the words it writes and its state after; every other write to
the host memories (the RDMA engines', a scenario's) is recorded in its place among the
calls. The record is then replayed into the kernels over one memory array, which so holds,
at every call, the memory the Python engine saw; every output, every write and the state
after every step must be equal. The adder's lanes are held against ``adder.add`` directly."""

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.formats.collective import DEFAULT_NAN
from superfabric.sim import kernel as kernel_module
from superfabric.sim.collective import engine as engine_module
from superfabric.sim.collective.adder import add
from superfabric.sim.collective.engine import CollectiveEngine, CollectiveEngines
from superfabric.sim.collective.fabric import prepare_collective
from superfabric.sim.collective.host_memory import Layout
from superfabric.sim.collective.kernels.engine import (
    NEVER, POST_COLUMNS, STARTED, collective_completed, collective_done,
    collective_next_event, collective_params, collective_posts, collective_received,
    collective_state, collective_step, collective_total_wrs, completion_cycle, engines_of,
    lane_add, stuck, timeline)
from superfabric.sim.rdma import fabric as fabric_module
from superfabric.sim.rdma.host import SendQueues
from rdma.kernels.reference import run_collective

from ..fabrics import FABRICS as PROJECT_FABRICS
from ..test_adder import SPECIAL, pairs
from ..test_apply import BUFFER_WORDS, CAPACITY, initial_memory, run_model, scenario
from ..test_apply import config as apply_config
from ..test_engine import BASE, FABRICS, free_slots, model_engine, random_steps


# -- recording the Python engines --------------------------------------------------------------

class _Memory(list):
    """An endpoint's host memory (the list the model's engines share) that records every
    write: into the engine step under way, else as a write of its own."""

    def __init__(self, words, endpoint: int, recorder: "Recorder"):
        super().__init__(words)
        self.endpoint, self.recorder = endpoint, recorder

    def __setitem__(self, address, value):
        self.recorder.write(self.endpoint, address, value)
        super().__setitem__(address, value)


class Recorder:
    """Every call into the Python collective engines, in order, as ``events``:
    ``("write", e, address, word)`` (a write from outside the engine),
    ``("received", a)``, ``("completed", a, status)``, ``("next", a, cycle, result)``,
    ``("step", a, cycle, acted, posts, writes, state)`` and ``("done", cycle, done)`` (the
    device's flag after each of its cycles)."""

    def __init__(self):
        self.events = []
        self._step = None            # (posts, writes) of the engine step under way

    def memory(self, words, endpoint: int) -> _Memory:
        return _Memory(words, endpoint, self)

    def write(self, endpoint: int, address: int, value) -> None:
        if self._step is not None:
            self._step[1].append((endpoint, address, int(value)))
        else:
            self.events.append(("write", endpoint, address, int(value)))

    def install(self, monkeypatch) -> "Recorder":
        """Wrap the engines' methods, the send queues' ``add`` and the RDMA model's host
        memories."""
        rec = self
        endpoints = fabric_module._endpoints
        step, next_event = CollectiveEngine.step, CollectiveEngine.next_event
        received, completed = CollectiveEngine.received, CollectiveEngines.completed
        device_step, add_wr = CollectiveEngines.step, SendQueues.add

        def _endpoints(cfg, workload):
            memories, engines, injectors = endpoints(cfg, workload)
            memories = [rec.memory(m, e) for e, m in enumerate(memories)]
            for engine, memory in zip(engines, memories):
                engine.memory = memory
            return memories, engines, injectors

        def engine_step(self, cycle, host, memory):
            rec._step = ([], [])
            acted = step(self, cycle, host, memory)
            posts, writes = rec._step
            rec._step = None
            rec.events.append(("step", self.accelerator, cycle, acted, posts, writes,
                               python_state(self)))
            return acted

        def engine_next_event(self, cycle):
            result = next_event(self, cycle)
            rec.events.append(("next", self.accelerator, cycle, result))
            return result

        def engine_received(self):
            rec.events.append(("received", self.accelerator))
            received(self)

        def engines_completed(self, e, cycle, completion):
            rec.events.append(("completed", e, int(completion[2])))
            completed(self, e, cycle, completion)

        def engines_step(self, cycle):
            acted = device_step(self, cycle)
            rec.events.append(("done", cycle, self.done))
            return acted

        def send_queues_add(self, *wr):
            assert rec._step is not None, "a WR posted outside an engine's step"
            rec._step[0].append(tuple(int(x) for x in wr))
            return add_wr(self, *wr)

        monkeypatch.setattr(fabric_module, "_endpoints", _endpoints)
        monkeypatch.setattr(CollectiveEngine, "step", engine_step)
        monkeypatch.setattr(CollectiveEngine, "next_event", engine_next_event)
        monkeypatch.setattr(CollectiveEngine, "received", engine_received)
        monkeypatch.setattr(CollectiveEngines, "completed", engines_completed)
        monkeypatch.setattr(CollectiveEngines, "step", engines_step)
        monkeypatch.setattr(SendQueues, "add", send_queues_add)
        return self


def python_state(engine: CollectiveEngine) -> tuple:
    """A Python engine's state as the kernels' ``engine`` columns ``STARTED .. ERRORS`` and
    its ``seen`` word."""
    return (len(engine.started), engine.applied, engine.done_at, engine.arrivals, engine._new,
            engine._stale, engine._busy_until, -1 if engine._finish is None else engine._finish,
            engine.errors, int(engine._seen))


def kernel_state(st, a: int) -> tuple:
    return tuple(int(x) for x in st.engine[a, STARTED:STARTED + 9]) + (int(st.seen[a]),)


# -- replaying into the kernels ----------------------------------------------------------------

def replay(cfg, schedule, layout, dtype, memory, events):
    """Replay ``events`` into the kernels from host memory ``memory`` (``[E, words]``);
    asserts every call's outputs, writes and state equal the record's. Returns the state
    and the memory."""
    prm = collective_params(cfg, schedule, layout, dtype)
    st = collective_state(cfg, schedule, layout, dtype)
    memory = np.array(memory, np.uint64)
    want = memory.copy()             # the Python engines' memory: every recorded write
    posts = collective_posts(prm)
    step = kernel_module.specialise(collective_step, st, prm, 0, 0, memory, posts)
    next_event = kernel_module.specialise(collective_next_event, st, prm, 0, 0)
    steps = 0
    for n, event in enumerate(events):
        kind = event[0]
        if kind == "write":
            _, e, address, word = event
            memory[e, address] = want[e, address] = word
        elif kind == "received":
            collective_received(st, event[1])
        elif kind == "completed":
            collective_completed(st, event[1], event[2])
        elif kind == "next":
            _, a, cycle, result = event
            got = next_event(st, prm, a, cycle)
            expected = NEVER if result == float("inf") else result
            assert got == expected, (f"call {n}: accelerator {a}, cycle {cycle}: next_event "
                                     f"{got}, the Python engine {expected}")
        elif kind == "step":
            _, a, cycle, acted, wrs, writes, state = event
            got_acted, count = step(st, prm, a, cycle, memory, posts)
            where = f"call {n}: accelerator {a}, cycle {cycle}"
            assert bool(got_acted) == acted, f"{where}: acted {got_acted}, Python {acted}"
            got_wrs = [tuple(int(x) for x in row) for row in posts[:count]]
            assert got_wrs == wrs, f"{where}: posted {got_wrs}, Python {wrs}"
            for e, address, word in writes:
                want[e, address] = word
            bad = np.flatnonzero(memory[a] != want[a])
            assert not bad.size, (f"{where}: word {bad[0]} is {int(memory[a, bad[0]]):#x}, "
                                  f"Python wrote {int(want[a, bad[0]]):#x}")
            assert kernel_state(st, a) == state, (f"{where}: state {kernel_state(st, a)}, "
                                                  f"Python {state}")
            steps += 1
        elif kind == "done":
            assert bool(collective_done(st, prm)) == event[2], f"call {n}: cycle {event[1]}"
    assert np.array_equal(memory, want)
    assert steps, "nothing was replayed"
    return st, memory


def assert_same_end(st, engines: CollectiveEngines) -> None:
    """The kernels' timeline, completion and stall line are the Python engines', and so is
    every engine read through ``engines_of``."""
    got, want = timeline(st), engines.timeline()
    for name in ("started", "applied"):
        assert np.array_equal(got[name], want[name]), name
    assert completion_cycle(st) == engines.completion_cycle
    assert stuck(st) == engines.stuck()
    view = engines_of(st)
    assert view.done == engines.done and view.completion_cycle == engines.completion_cycle
    assert view.stuck() == engines.stuck()
    for name in ("started", "applied"):
        assert np.array_equal(view.timeline()[name], want[name]), name
    for v, e in zip(view.engines, engines.engines, strict=True):
        assert (v.accelerator, v.started, v.applied_at, v.done_at, v.errors, v.arrivals,
                v.applied, v.done(), v.describe()) == (
            e.accelerator, e.started, e.applied_at, e.done_at, e.errors, e.arrivals,
            e.applied, e.done(), e.describe())


# -- collective runs on the RDMA model ---------------------------------------------------------

def _config(fabric, *extra):
    return FabricConfig.load(overrides=BASE + FABRICS[fabric] + list(extra))


def record_run(monkeypatch, cfg, prepared, **run):
    """Run ``prepared`` recording; returns the recorder, the records and the engines."""
    rec = Recorder().install(monkeypatch)
    records, engines, _ = run_collective(cfg, prepared, **run)
    monkeypatch.undo()
    return rec, records, engines


def replay_run(monkeypatch, cfg, prepared, **run):
    """Record a run and replay it; returns the records, the engines and the kernels'
    state."""
    rec, records, engines = record_run(monkeypatch, cfg, prepared, **run)
    st, memory = replay(cfg, prepared.schedule, prepared.layout, prepared.dtype,
                        prepared.workload.memory, rec.events)
    assert np.array_equal(memory, records.memory)
    assert_same_end(st, engines)
    if not records.stalled:
        assert collective_total_wrs(cfg, prepared.schedule) == len(records.taken)
    return records, engines, st


@pytest.mark.parametrize("dtype", ["int32", "fp32", "float32"])
@pytest.mark.parametrize("fabric, algo", [("torus", "ring"), ("torus", "dimwise"),
                                          ("torus", "halving-doubling"), ("leaf-spine", "tree")])
def test_allreduce_replays_exactly(monkeypatch, fabric, algo, dtype):
    cfg = _config(fabric)
    prepared = prepare_collective(cfg, op="allreduce", algo=algo, nbytes=2048, dtype=dtype,
                                  seed=5)
    records, engines, _ = replay_run(monkeypatch, cfg, prepared)
    assert not records.stalled and engines.completion_cycle > 0


def test_tree_on_the_32_host_leaf_spine_replays_exactly(monkeypatch):
    """The double binary tree on the project's 4-leaf leaf-spine (``fabrics.py``), 32
    accelerators."""
    cfg = FabricConfig.load(overrides=BASE + PROJECT_FABRICS["leaf-spine-4"])
    prepared = prepare_collective(cfg, op="allreduce", algo="tree", nbytes=2048, dtype="fp32",
                                  seed=5)
    records, _, _ = replay_run(monkeypatch, cfg, prepared)
    assert not records.stalled


@pytest.mark.parametrize("fabric, op, algo, nbytes, dtype", [
    ("torus", "reducescatter", "dimwise", 2048, "fp32"),
    ("torus", "reducescatter", "ring", 2048, "int32"),
    ("leaf-spine", "allgather", "ring", 2052, "fp32"),     # odd element counts
    ("leaf-spine", "broadcast", "tree", 1024, "int32"),
    ("torus", "alltoall", "direct", 1024, "fp32"),
    ("torus", "allreduce", "ring", 8, "fp32"),             # fewer elements than accelerators
])
def test_other_operations_replay_exactly(monkeypatch, fabric, op, algo, nbytes, dtype):
    cfg = _config(fabric)
    prepared = prepare_collective(cfg, op=op, algo=algo, nbytes=nbytes, dtype=dtype, seed=7)
    records, _, _ = replay_run(monkeypatch, cfg, prepared)
    assert not records.stalled


def test_segmented_allreduce_with_drops_replays_exactly(monkeypatch):
    """Segments (many slots, steps waiting for parts of chunks) and 1 % drops (the RDMA
    engines retransmit and write the staging again between the calls)."""
    cfg = _config("torus", "faults.drop_rate=0.01")
    prepared = prepare_collective(cfg, op="allreduce", algo="halving-doubling", nbytes=2048,
                                  dtype="fp32", seed=3, segment_packets=1)
    records, _, _ = replay_run(monkeypatch, cfg, prepared)
    assert not records.stalled


def test_a_long_apply_replays_exactly(monkeypatch):
    """Whole chunks of 256 words: the apply unit's writes run long after the fabric is
    idle."""
    cfg = _config("torus", "rdma.memory_words=4096")
    prepared = prepare_collective(cfg, op="allreduce", algo="halving-doubling", nbytes=4096,
                                  dtype="int32", seed=1)
    records, _, _ = replay_run(monkeypatch, cfg, prepared, stall_limit=200)
    assert not records.stalled


def test_a_stalled_run_replays_exactly(monkeypatch):
    """A schedule that lost a step: the kernels stall as the Python engines do, and say so
    in the same line."""
    cfg = _config("torus")
    prepared = prepare_collective(cfg, op="allreduce", algo="ring", nbytes=256, dtype="int32",
                                  seed=1)
    s = prepared.schedule
    lost = replace(prepared, schedule=replace(s, steps=(s.steps[0][:-1],) + s.steps[1:]))
    records, engines, st = replay_run(monkeypatch, cfg, lost, stall_limit=500)
    assert records.stalled and stuck(st) and stuck(st) == engines.stuck()
    assert not collective_done(st, collective_params(cfg, lost.schedule, lost.layout, "int32"))


#: binary32 data whose sums take every rule of the adder: NaNs of either sign with payloads
#: (quiet and signalling), infinities of either sign (their difference is DEFAULT_NAN),
#: the largest finite values (sums overflow), subnormals, zeros of either sign.
def special_data(n: int, count: int, dtype: str, rng) -> list[np.ndarray]:
    if dtype == "int32":
        edges = np.array([0, 1, -1, 2**31 - 1, -2**31, 2**30, -2**30], np.int64)
        return [rng.choice(edges, count).astype(np.int32) for _ in range(n)]
    patterns = np.array(SPECIAL, np.uint32)
    finite = np.array([0x7F7FFFFF, 0xFF7FFFFF, 0x7F7FFFFE, 0x7F000000, 0x3F800000],
                      np.uint32)
    out = []
    for _ in range(n):
        bits = np.where(rng.random(count) < 0.15, rng.choice(patterns, count),
                        rng.choice(finite, count))
        out.append(bits.astype(np.uint32).view(np.float32))
    return out


@pytest.mark.parametrize("dtype, algo", [("fp32", "ring"), ("fp32", "halving-doubling"),
                                         ("int32", "ring")])
def test_special_values_replay_exactly(monkeypatch, dtype, algo):
    """Crafted buffers: NaNs, infinities, overflows (binary32), wrap-around (int32)."""
    cfg = _config("torus")
    prepared = prepare_collective(cfg, op="allreduce", algo=algo, nbytes=1024, dtype=dtype,
                                  seed=2)
    s = prepared.schedule
    data = special_data(s.accelerators, s.buffer, dtype, np.random.default_rng(11))
    workload = prepared.layout.workload(cfg, s, data, seed=2, pattern="collective")
    prepared = replace(prepared, data=data, workload=workload)
    records, _, _ = replay_run(monkeypatch, cfg, prepared)
    buffers = prepared.layout.buffers(records.memory, s, dtype)
    if dtype == "fp32":          # the crafted data did reach the adder's NaN rules
        bits = np.concatenate(buffers).view(np.uint32)
        assert (bits == DEFAULT_NAN).any() and ((bits & 0x7FFFFFFF) > 0x7F800000).any()


# -- the apply unit and the sequencer on crafted scenarios -------------------------------------

@pytest.mark.parametrize("latency", [1, 2, 5])
@pytest.mark.parametrize("dtype", ["int32", "fp32"])
def test_apply_scenarios_replay_exactly(monkeypatch, latency, dtype):
    """``test_apply``'s arrivals: slots out of order (reads that find no notification),
    chunks of every parity and length from 0, added or copied."""
    rng = np.random.default_rng(latency * 10 + len(dtype))
    slots = 14
    notify = 64 + slots * CAPACITY
    layout = Layout(BUFFER_WORDS, BUFFER_WORDS, 64, CAPACITY, notify, notify + slots)
    events = scenario(rng, slots, dtype, layout)
    cycles = max(events) + slots * (2 * CAPACITY + 2 * latency + 2) + 10
    memory = initial_memory(rng, layout, dtype)
    cfg = apply_config(latency)
    rec = Recorder().install(monkeypatch)
    applied_at, _ = run_model(cfg, layout, slots, dtype, rec.memory(memory, 0), events, cycles)
    monkeypatch.undo()
    assert len(applied_at) == slots
    schedule = SimpleNamespace(steps=[[]], slots=[slots])
    st, _ = replay(cfg, schedule, layout, dtype, [memory], rec.events)
    assert st.applied_at.tolist() == applied_at


@pytest.mark.parametrize("latency, dtype, qps", [(1, "int32", 8), (2, "fp32", 16),
                                                 (5, "fp32", 32), (2, "int32", 128)])
def test_sequencer_scenarios_replay_exactly(monkeypatch, latency, dtype, qps):
    """``test_engine``'s random steps: chunks from empty to several WRITEs, to random peers on
    1 to 8 QPs a peer, waits for any slot, completions with errors."""
    cfg = FabricConfig.load(overrides=[o for o in BASE if not o.startswith("rdma.qps=")] + [
        f"rdma.qps={qps}", f"rdma.dma_latency={latency}", "rdma.memory_words=512"])
    rng = np.random.default_rng(latency)
    accelerator, slots = 3, 10
    notify = 64 + slots * CAPACITY
    layout = Layout(BUFFER_WORDS, BUFFER_WORDS, 64, CAPACITY, notify, notify + slots)
    events = scenario(rng, slots, dtype, layout)
    steps = random_steps(rng, cfg, accelerator, slots, 24)
    cycles = max(events) + 1500
    free, ready = free_slots(rng, cfg, cycles), rng.random(cycles) < 0.6
    statuses = np.where(rng.random(cycles) < 0.05, rng.integers(0, 4, cycles), -1)
    memory = initial_memory(rng, layout, dtype)
    rec = Recorder().install(monkeypatch)
    _, engine = model_engine(cfg, accelerator, steps, slots, layout, dtype,
                             rec.memory(memory, accelerator), events, free, ready, statuses)
    monkeypatch.undo()
    assert engine.done() and engine.errors > 0
    E = cfg.endpoints
    schedule = SimpleNamespace(steps=[steps if a == accelerator else [] for a in range(E)],
                               slots=[slots if a == accelerator else 0 for a in range(E)])
    rows = np.zeros((E, layout.words), np.uint64)
    rows[accelerator] = memory
    st, _ = replay(cfg, schedule, layout, dtype, rows, rec.events)
    assert st.engine[accelerator, STARTED] == len(steps)
    assert st.started.tolist() == engine.started


# -- the adder ---------------------------------------------------------------------------------

def compiled_sums(here, staged, binary32: bool) -> np.ndarray:
    """The compiled adder's lanes for the pairs (uint32 arrays)."""
    lanes = np.zeros(3, np.uint32)
    values = lanes.view(np.float32)
    return np.array([lane_add(np.uint64(h), np.uint64(s), int(binary32), lanes, values)
                     for h, s in zip(here.tolist(), staged.tolist())], np.uint64).astype(np.uint32)


def python_sums(here, staged, binary32: bool) -> np.ndarray:
    dtype = np.float32 if binary32 else np.int32
    return add(here.view(dtype), staged.view(dtype)).view(np.uint32)


def assert_sums_equal(here, staged, binary32: bool) -> None:
    got, want = compiled_sums(here, staged, binary32), python_sums(here, staged, binary32)
    bad = np.flatnonzero(got != want)
    assert not bad.size, f"{bad.size} of {len(here)} sums differ, first " + ", ".join(
        f"{here[i]:#010x} + {staged[i]:#010x}: {got[i]:#010x} against {want[i]:#010x}"
        for i in bad[:3])


def test_lane_add_special_values_every_pair():
    specials = np.array(SPECIAL, np.uint32)
    here, staged = np.repeat(specials, len(SPECIAL)), np.tile(specials, len(SPECIAL))
    assert_sums_equal(here, staged, binary32=True)
    assert_sums_equal(here, staged, binary32=False)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lane_add_random_patterns(seed):
    rng = np.random.default_rng(seed)
    here, staged = pairs(rng, 6_000)
    assert_sums_equal(here, staged, binary32=True)
    assert_sums_equal(here, staged, binary32=False)


def test_lane_add_nan_rules():
    here = np.array([0x7F800001, 0x7FC00005, 0x3F800000, 0x7F800000, 0xFF800000, 0x80000000,
                     0x80000000, 0x3F800000, 0x7F7FFFFF], np.uint32)
    staged = np.array([0x7FC00005, 0x7F800001, 0xFF800003, 0xFF800000, 0x7F800000, 0x00000000,
                       0x80000000, 0xBF800000, 0x7F7FFFFF], np.uint32)
    want = [0x7FC00001, 0x7FC00005, 0xFFC00003, DEFAULT_NAN, DEFAULT_NAN, 0, 0x80000000, 0,
            0x7F800000]
    assert compiled_sums(here, staged, binary32=True).tolist() == want
    edges = np.array([0x7FFFFFFF, 0x80000000, 0xFFFFFFFF], np.uint32)
    assert compiled_sums(edges, edges, binary32=False).tolist() == [0xFFFFFFFE, 0, 0xFFFFFFFE]


def test_posts_fit_the_params(monkeypatch):
    """``collective_posts`` holds exactly the most WRs a step of the run posts; the params'
    layout is the Python engine's."""
    cfg = _config("torus")
    prepared = prepare_collective(cfg, op="allreduce", algo="ring", nbytes=2048, dtype="fp32",
                                  seed=5)
    prm = collective_params(cfg, prepared.schedule, prepared.layout, "fp32")
    rec, records, _ = record_run(monkeypatch, cfg, prepared)
    posted = [len(event[4]) for event in rec.events if event[0] == "step"]
    assert not records.stalled and max(posted) == prm.max_posts > 1
    python = engine_module.CollectiveEngine(cfg, 0, prepared.schedule, prepared.layout, "fp32")
    assert (prm.piece, prm.qps, prm.latency) == (python._piece, python._Q, python._latency)
