"""Collectives on the RTL fabric (``collective_fabric``) against the golden model, on both
simulators: the collective engines run the schedule with no testbench in the loop, and every
step's start, every slot's application, every engine's end, every RDMA counter and every
host memory word equal the model's; every accelerator holds numpy's answer.

One Verilator build of the 2x2x2 torus serves every algorithm, operation and data type (the
schedule and the layout are run-time inputs); Icarus runs a 2x2 torus; the leaf-spine, a
build of its own, is in ``make bench``.
"""

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.sim.collective.fabric import prepare_collective, run_collective
from superfabric.tb.collective.runner import compare, run_collective_rtl

from conftest import BUILD_ROOT, RDMA_SMALL, require_simulator

#: One QP per peer (the settings of ``test_run.py``'s RTL run: one build serves both).
BASE = [o for o in RDMA_SMALL if not o.startswith("rdma.qps=")] + ["rdma.qps=64"]
TORUS = ["fabric.topology=torus", "fabric.dims=[2, 2, 2]"]
LEAF_SPINE = ["fabric.topology=fat_tree", "fabric.leaves=4", "fabric.spines=2",
              "fabric.hosts_per_leaf=2", "fabric.routing=ecmp"]


def _run(sim, tmp_path, fabric, *, op="allreduce", algo, dtype, nbytes=2048):
    cfg = FabricConfig.load(overrides=BASE + fabric)
    prepared = prepare_collective(cfg, op=op, algo=algo, nbytes=nbytes, dtype=dtype, seed=7)
    records, engines, _ = run_collective(cfg, prepared)
    assert not records.stalled, records.stuck
    rtl, match = run_collective_rtl(cfg, prepared, (records, engines), sim=sim,
                                    out_dir=tmp_path, build_root=BUILD_ROOT)
    assert match["exact"], match["problems"]
    assert match["data_ok"] and match["passed"]
    return prepared, records, engines, rtl


@pytest.mark.parametrize("algo, dtype", [("ring", "fp32"), ("dimwise", "int32"),
                                         ("halving-doubling", "fp32")])
def test_torus_allreduce_exact(algo, dtype, tmp_path):
    """All-reduce on the 2x2x2 torus, RTL equal to the model in every cycle and word."""
    require_simulator("verilator")
    prepared, records, engines, rtl = _run("verilator", tmp_path, TORUS, algo=algo,
                                           dtype=dtype)
    # The run did what a collective does: every accelerator sent, received and applied.
    assert (rtl["counters"].sum(axis=1) > 0).all()
    assert [int(x) for x in rtl["done_at"]] == [e.done_at for e in engines.engines]


@pytest.mark.parametrize("op, algo, nbytes", [("allgather", "ring", 2052),
                                              ("alltoall", "direct", 1024)])
def test_torus_other_operations_exact(op, algo, nbytes, tmp_path):
    """Copies rather than sums, chunks that cross words (an odd element count), and
    chunks to every peer at once: still exact."""
    require_simulator("verilator")
    _run("verilator", tmp_path, TORUS, op=op, algo=algo, dtype="fp32", nbytes=nbytes)


def test_a_difference_is_named(tmp_path):
    """The comparison can fail, and names what differs: a step one cycle late, a counter,
    a memory word."""
    require_simulator("verilator")
    prepared, records, engines, rtl = _run("verilator", tmp_path, TORUS, algo="ring",
                                           dtype="int32", nbytes=256)
    rtl["started"][2, 3] += 1
    rtl["counters"][5, 0] += 1
    rtl["memory"][6, 9] ^= 1
    problems = compare(rtl, records, engines)
    assert len(problems) == 3, problems
    assert problems[0].startswith("accelerator 2 step 3: started at cycle ")
    assert problems[1].startswith("accelerator 5 counter ")
    assert problems[2].startswith("accelerator 6 memory word 9: ")


def test_small_torus_exact_icarus(tmp_path):
    """Icarus on a 2x2 torus of 4 accelerators: the ring all-reduce, exact."""
    require_simulator("icarus")
    _run("icarus", tmp_path, ["fabric.topology=torus", "fabric.dims=[2, 2]"], algo="ring",
         dtype="fp32", nbytes=1024)


@pytest.mark.bench
def test_leaf_spine_tree_allreduce_exact(tmp_path):
    """The double binary tree on the 4-leaf leaf-spine: RTL equal to the model."""
    require_simulator("verilator")
    _run("verilator", tmp_path, LEAF_SPINE, algo="tree", dtype="fp32")
