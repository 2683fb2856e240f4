"""Every operation by every algorithm ends exact on every accelerator, with the documented step
count (docs/spec/collective.md section 15.4)."""

import math

import pytest

from superfabric.sim.collective import dimwise, halving_doubling, tree
from superfabric.sim.collective.library import (ALGORITHMS, SEGMENTED, algorithm, plan,
                                               supports, verify)
from superfabric.sim.collective.schedule import OPS

from .fabrics import FABRICS, peers

#: Message sizes in bytes: tiny (fewer elements than accelerators), uneven, even.
SIZES = [8, 148, 4000]

CASES = [(f, a, op) for f in FABRICS for a in ALGORITHMS for op in OPS
         if supports(a, op, peers(f))]


def test_every_operation_has_algorithms_on_every_fabric():
    for f in FABRICS:
        for op in OPS:
            assert any(supports(a, op, peers(f)) for a in ALGORITHMS), (f, op)
    # The command line: every algorithm runs all-reduce on a torus.
    assert all(supports(a, "allreduce", peers("torus-2x2x2")) for a in ALGORITHMS)


@pytest.mark.parametrize("fabric, algo, op", CASES)
def test_every_accelerator_ends_with_numpys_result(fabric, algo, op):
    p = peers(fabric)
    for nbytes in SIZES:
        schedule = plan(p, op, algo, nbytes)
        for dtype in ("int32", "fp32"):
            verify(schedule, p, dtype, seed=nbytes)
        assert schedule.step_count == ALGORITHMS[algo].steps(p, op)


@pytest.mark.parametrize("fabric, algo, op", [c for c in CASES if c[1] in SEGMENTED])
def test_segmented_schedules_end_with_numpys_result(fabric, algo, op):
    p = peers(fabric)
    # 3 elements: segments across word boundaries; 64: a chunk in a few segments.
    for nbytes, segment in ((148, 3), (4000, 64)):
        schedule = plan(p, op, algo, nbytes, segment=segment)
        assert max(s.length for steps in schedule.steps for s in steps) <= segment
        for dtype in ("int32", "fp32"):
            verify(schedule, p, dtype, seed=nbytes)


@pytest.mark.parametrize("fabric", [("fabric.topology=torus", "fabric.dims=[3, 2]",
                                     "fabric.endpoints_per_router=2"),
                                    ("fabric.topology=torus", "fabric.dims=[5, 3]")])
@pytest.mark.parametrize("algo", ["ring", "biring", "dimwise", "dimwise-direct", "dimwise-all",
                                  "halving-doubling", "tree", "direct"])
def test_fabrics_of_no_power_of_two(fabric, algo):
    p = peers(fabric)
    for op in ALGORITHMS[algo].OPS:
        if supports(algo, op, p):
            for nbytes in (8, 252):
                verify(plan(p, op, algo, nbytes), p, "fp32", seed=1)


def test_the_documented_step_counts():
    p = peers("torus-4x4x4")
    n = p.n
    assert ALGORITHMS["ring"].steps(p, "allreduce") == 2 * (n - 1)
    assert ALGORITHMS["biring"].steps(p, "allreduce") == 4 * (n - 1)
    assert ALGORITHMS["dimwise"].steps(p, "allreduce") == 2 * 3 * (4 - 1)
    assert ALGORITHMS["dimwise-direct"].steps(p, "allreduce") == 2 * 3 * (4 - 1)
    assert ALGORITHMS["dimwise-all"].steps(p, "allreduce") == 3 * 2 * 3 * (4 - 1)
    assert ALGORITHMS["halving-doubling"].steps(p, "allreduce") == 2 * int(math.log2(n))
    assert ALGORITHMS["direct"].steps(p, "alltoall") == n - 1
    odd = peers(("fabric.topology=torus", "fabric.dims=[5, 3]"))
    assert halving_doubling.steps(odd, "allreduce") == 2 * 3 + 1


def test_the_ring_follows_the_torus_one_hop_at_a_time():
    for name in ("torus-2x2x2", "torus-4x4x4"):
        p = peers(name)
        ring = p.ring
        assert sorted(ring) == list(range(p.n))
        assert all(len(p.route(ring[i], ring[(i + 1) % p.n])) == 1 for i in range(p.n))
    leaf = peers("leaf-spine-4")
    h = leaf.topology.hosts_per_leaf
    for k in range(leaf.topology.leaves):
        assert {leaf.topology.endpoint_router(a) for a in leaf.ring[k * h:(k + 1) * h]} == {k}


def test_dimension_rings_are_the_torus_rings():
    p = peers("torus-4x4x4")
    for d in dimwise.axes(p):
        for ring in p.lines(d):
            assert all(len(p.route(ring[i], ring[(i + 1) % 4])) == 1 for i in range(4))


def test_the_double_binary_tree_is_two_trees_over_everyone():
    for name in FABRICS:
        p = peers(name)
        interior = []
        for t in (0, 1):
            parent = tree.parents(p, t)
            assert parent.count(-1) == 1
            for a in range(p.n):
                seen, up = {a}, parent[a]
                while up >= 0:
                    assert up not in seen
                    seen.add(up)
                    up = parent[up]
            interior.append({up for up in parent if up >= 0})
        # NCCL's property: a rank is interior in at most one of the two trees (n even).
        assert len(interior[0] & interior[1]) <= 1


def test_unsupported_pairs_and_bad_names_are_one_line():
    p = peers("leaf-spine-4")
    with pytest.raises(ValueError, match="algo = 'dimwise' cannot run allreduce on this "
                                         "fat_tree of 32 accelerators; these can: ring"):
        algorithm("dimwise", "allreduce", p)
    with pytest.raises(ValueError, match="op = 'reduce': must be one of allreduce"):
        algorithm("ring", "reduce", p)
    with pytest.raises(ValueError, match="algo = 'rings': must be one of ring, biring"):
        algorithm("rings", "allreduce", p)
