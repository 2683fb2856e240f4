"""The compiled collective engines (``sim/collective/kernels/engine.py``) on runs the other
collective tests do not make: the double binary tree on 32 accelerators, segments over lossy
links, and buffers whose sums take every rule of the adder; and the adder's lanes held
against ``adder.add``, pair by pair."""

from dataclasses import replace

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.formats.collective import DEFAULT_NAN
from superfabric.sim.collective.adder import add
from superfabric.sim.collective.executor import replay
from superfabric.sim.collective.fabric import data_ok, prepare_collective, run_collective
from superfabric.sim.collective.host_memory import words_of
from superfabric.sim.collective.kernels.engine import (collective_params, collective_total_wrs,
                                                       lane_add)

from ..fabrics import FABRICS as PROJECT_FABRICS
from ..test_adder import SPECIAL, pairs
from ..test_engine import BASE, FABRICS


def _config(fabric, *extra):
    return FabricConfig.load(overrides=BASE + FABRICS[fabric] + list(extra))


def _run(cfg, prepared):
    """Run ``prepared``; it must finish with every engine done and its WRs taken."""
    records, engines, buffers = run_collective(cfg, prepared)
    assert not records.stalled, records.stuck
    assert len(records.taken) == collective_total_wrs(cfg, prepared.schedule)
    assert (records.taken >= 0).all() and all(e.done() for e in engines.engines)
    return records, engines, buffers


def test_tree_on_the_32_host_leaf_spine():
    """The double binary tree on the project's 4-leaf leaf-spine (``fabrics.py``), 32
    accelerators."""
    cfg = FabricConfig.load(overrides=BASE + PROJECT_FABRICS["leaf-spine-4"])
    prepared = prepare_collective(cfg, op="allreduce", algo="tree", nbytes=2048, dtype="fp32",
                                  seed=5)
    assert prepared.schedule.accelerators == 32
    assert data_ok(cfg, prepared, _run(cfg, prepared)[2])


def test_segmented_allreduce_with_drops():
    """Segments (many slots, steps waiting for parts of chunks) and 1 % drops (the RDMA
    engines retransmit and write the staging again between the engines' reads)."""
    cfg = _config("torus", "faults.drop_rate=0.01")
    prepared = prepare_collective(cfg, op="allreduce", algo="halving-doubling", nbytes=2048,
                                  dtype="fp32", seed=3, segment_packets=1)
    records, _, buffers = _run(cfg, prepared)
    assert sum(records.counters["retransmissions"]) > 0 and data_ok(cfg, prepared, buffers)


def test_a_step_posts_at_most_the_params_wrs():
    """``collective_params.max_posts`` is the most WRs one step of the schedule posts: its
    WRITEs of at most ``piece`` words and its SEND."""
    cfg = _config("torus")
    prepared = prepare_collective(cfg, op="allreduce", algo="ring", nbytes=2048, dtype="fp32",
                                  seed=5)
    prm = collective_params(cfg, prepared.schedule, prepared.layout, "fp32")
    posts = [-(-words_of(s.src, s.length)[1] // prm.piece) + 1
             for steps in prepared.schedule.steps for s in steps]
    assert prm.max_posts == max(posts) > 1
    assert sum(posts) == collective_total_wrs(cfg, prepared.schedule)


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
def test_special_values(dtype, algo):
    """Crafted buffers: NaNs, infinities, overflows (binary32), wrap-around (int32), summed
    as the executor sums them in the same order, bit for bit but for the NaNs' payloads
    (numpy's are not the adder's): a NaN exactly where the executor has one."""
    cfg = _config("torus")
    prepared = prepare_collective(cfg, op="allreduce", algo=algo, nbytes=1024, dtype=dtype,
                                  seed=2)
    s = prepared.schedule
    data = special_data(s.accelerators, s.buffer, dtype, np.random.default_rng(11))
    workload = prepared.layout.workload(cfg, s, data, seed=2, pattern="collective")
    prepared = replace(prepared, data=data, workload=workload)
    _, _, buffers = _run(cfg, prepared)
    with np.errstate(over="ignore", invalid="ignore"):      # the crafted sums, on purpose
        expected = replay(s, data, eager=True)
    for want, got in zip(expected, buffers, strict=True):
        nan = np.isnan(want) if dtype == "fp32" else np.zeros(len(want), bool)
        if dtype == "fp32":
            assert np.array_equal(np.isnan(got), nan)
        assert np.array_equal(want.view(np.uint32)[~nan], got.view(np.uint32)[~nan])
    if dtype == "fp32":          # the crafted data did reach the adder's NaN rules
        bits = np.concatenate(buffers).view(np.uint32)
        assert (bits == DEFAULT_NAN).any() and ((bits & 0x7FFFFFFF) > 0x7F800000).any()


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
