"""The fabric top's RTL against the fabric model, packet by packet and cycle by cycle.

The switch testbench drives the fabric's endpoints through the runner that
``superfabric run`` uses. Each configuration is one build per simulator
(cached under build/test) and runs several short traces. Every routing runs
on both simulators on a small fabric (a 2x2 and a 3x4 torus, leaf-spines of
4 leaves of 2 hosts). The issue's sizes (the 4x4x4 torus, ``dor`` and
``adaptive``, the leaf-spine of 8 leaves of 8 hosts and 4 spines, ``ecmp``
and ``adaptive``) are marked ``bench``: on Verilator each is a build of
several minutes on a fresh 2-core machine, and Icarus, which simulates every
router instance separately, runs the 64-router torus at about 3 cycles/s
(its two short windows took ten minutes of a `make test`), so ``make bench``
runs them, not ``make test``.
"""

import functools
import json
import re

import pytest

from superfabric.config import FabricConfig
from superfabric.tools import run
from superfabric.tools.cli import main
from superfabric.tools.run import run_point

from conftest import require_simulator

TORUS = ["fabric.topology=torus", "fabric.dims=[4,4,4]"]
LEAF_SPINE = ["fabric.topology=fat_tree", "fabric.leaves=8", "fabric.hosts_per_leaf=8",
              "fabric.spines=4"]

# name -> overrides of the tiny preset (its switch widths keep the builds small).
CONFIGS = {
    "torus-dor": TORUS + ["fabric.routing=dor", "fabric.vcs=2"],
    "torus-adaptive": TORUS + ["fabric.routing=adaptive", "fabric.vcs=3"],
    "leaf-spine-ecmp": LEAF_SPINE + ["fabric.routing=ecmp"],
    "leaf-spine-adaptive": LEAF_SPINE + ["fabric.routing=adaptive"],
    "torus-2x2-dor": ["fabric.topology=torus", "fabric.dims=[2,2]", "fabric.routing=dor",
                      "fabric.vcs=2"],
    # Rings of unequal length: the escape takes the longest first, not dimension order.
    "torus-3x4-adaptive": ["fabric.topology=torus", "fabric.dims=[3,4]",
                           "fabric.routing=adaptive", "fabric.vcs=3"],
    "leaf-spine-4x2-ecmp": ["fabric.topology=fat_tree", "fabric.leaves=4",
                            "fabric.hosts_per_leaf=2", "fabric.spines=2", "fabric.routing=ecmp"],
    "leaf-spine-4x2-adaptive": ["fabric.topology=fat_tree", "fabric.leaves=4",
                                "fabric.hosts_per_leaf=2", "fabric.spines=2",
                                "fabric.routing=adaptive"],
    # A 4-router ring with one VC and small buffers: deadlocks within a few
    # hundred cycles (section 11.6's override).
    "ring-deadlock": ["fabric.topology=torus", "fabric.dims=[4]", "fabric.vcs=1",
                      "fabric.allow_deadlock=true", "fabric.vc_buffer_flits=16"],
}

# (config, pattern, load, cycles, lengths, simulators)
ICARUS, VERILATOR, BOTH = ("icarus",), ("verilator",), ("icarus", "verilator")
CASES = [
    ("torus-dor", "uniform", 0.3, 400, "bimodal:1,4,0.5", VERILATOR),
    ("torus-dor", "tornado", 0.5, 300, "fixed:2", VERILATOR),
    ("torus-adaptive", "uniform", 0.4, 400, "bimodal:1,4,0.5", VERILATOR),
    ("torus-adaptive", "tornado", 0.6, 300, "fixed:2", VERILATOR),
    ("leaf-spine-ecmp", "uniform", 0.4, 400, "bimodal:1,4,0.5", VERILATOR),
    ("leaf-spine-ecmp", "hotspot", 0.2, 300, "fixed:2", VERILATOR),
    ("leaf-spine-adaptive", "uniform", 0.5, 400, "bimodal:1,4,0.5", VERILATOR),
    ("leaf-spine-adaptive", "permutation", 0.8, 300, "fixed:3", VERILATOR),
    # The 64-router torus on Icarus too (bench): about 3 cycles/s, so short traces.
    ("torus-dor", "uniform", 0.3, 120, "bimodal:1,4,0.5", ICARUS),
    ("torus-dor", "tornado", 0.5, 120, "fixed:2", ICARUS),
    ("torus-2x2-dor", "uniform", 0.5, 300, "bimodal:1,4,0.5", BOTH),
    ("torus-2x2-dor", "neighbour", 0.8, 300, "fixed:2", BOTH),
    # Inputs of a router booking the same adaptive (output, VC) in a cycle.
    ("torus-3x4-adaptive", "uniform", 0.4, 150, "bimodal:1,4,0.5", BOTH),
    # Long packets at full load: the first choice's adaptive VC, the escape, another
    # minimal direction (the first lacks room, or another leads it, and the escape
    # cannot start), and the escape when no adaptive VC has room.
    ("torus-3x4-adaptive", "uniform", 1.0, 150, "bimodal:2,16,0.5", BOTH),
    ("leaf-spine-4x2-ecmp", "uniform", 0.6, 300, "bimodal:1,4,0.5", BOTH),
    ("leaf-spine-4x2-adaptive", "uniform", 0.6, 300, "bimodal:1,4,0.5", BOTH),
    ("leaf-spine-4x2-adaptive", "permutation", 0.8, 300, "fixed:3", BOTH),
]
#: The issue's sizes, whose routings the small fabrics above cover on both simulators in
#: `make test`: `make bench` runs them.
FULL_SIZE = {"torus-dor", "torus-adaptive", "leaf-spine-ecmp", "leaf-spine-adaptive"}
RUNS = [pytest.param(sim, case, id=f"{sim}-" + "-".join(map(str, case[:3])),
                     marks=[pytest.mark.bench] if case[0] in FULL_SIZE else [])
        for case in CASES for sim in case[5]]


def _config(name):
    return FabricConfig.load(preset="tiny", overrides=CONFIGS[name])


@pytest.mark.parametrize("sim, case", RUNS)
def test_fabric_rtl_matches_model(sim, case, tmp_path, build_root):
    require_simulator(sim)
    name, pattern, load, cycles, lengths, _ = case
    cfg = _config(name)
    res = run_point(cfg, traffic=pattern, load=load, cycles=cycles, seed=5, sim=sim,
                    out_dir=tmp_path, packet_lengths=lengths, build_root=build_root)
    match = res["match"]
    detail = (tmp_path / "mismatch.txt").read_text() if not match["exact"] else ""
    assert match["exact"], json.dumps(match) + "\n" + detail
    pk = res["packets"]
    assert pk["offered"] > 0 and pk["delivered"] == pk["offered"]
    # The traffic really crossed the fabric, and the RTL's figures are the model's.
    assert res["fabric"]["mean_hops"] >= 0.98
    assert sum(res["counters"]["link_flits"]) > 0
    assert res["fabric"] == res["model"]["fabric"]
    assert res["counters"] == res["model"]["counters"]


def _channels(stuck: str) -> set[str]:
    return set(re.findall(r"router \d+ port \d+ class \d+ vc \d+", stuck))


def test_deadlock_stalls_at_the_model_cycle(sim, tmp_path, build_root):
    # Under the override, the RTL stalls in the model's cycle, with every
    # packet's record the model's, and names the same cycle of channels.
    cfg = _config("ring-deadlock")
    res = run_point(cfg, traffic="uniform", load=1.0, cycles=300, seed=1, sim=sim,
                    out_dir=tmp_path, packet_lengths="fixed:8", stall_limit=100,
                    build_root=build_root)
    assert res["stalled"] and res["model"]["stalled"]
    assert res["cycles"] == res["model"]["cycles"]
    match = res["match"]
    assert match["mismatches"] == 0, json.dumps(match)
    assert match["problems"] == [f"RTL run stalled at cycle {res['cycles']}",
                                 f"model run stalled at cycle {res['cycles']}"]
    rtl, model = res["fabric"]["stuck"], res["model"]["fabric"]["stuck"]
    assert rtl.startswith("deadlock: router ") and model.startswith("deadlock: router ")
    assert len(_channels(rtl)) == 4
    assert _channels(rtl) == _channels(model)
    assert res["packets"]["delivered"] < res["packets"]["offered"]



def test_cli_runs_a_fabric_on_rtl(sim, tmp_path, build_root, capsys, monkeypatch):
    # `superfabric run` on the fabric top: results.json with the fabric
    # section and the match; the ring's tornado traffic does not deadlock.
    # The command's runs share the tests' build cache.
    monkeypatch.setattr(run, "run_point", functools.partial(run.run_point, build_root=build_root))
    out = tmp_path / "run"
    sets = [arg for o in CONFIGS["ring-deadlock"] for arg in ("--set", o)]
    code = main(["run", "--preset", "tiny", *sets, "--traffic", "tornado", "--load", "1.0",
                 "--cycles", "300", "--lengths", "fixed:8", "--sim", sim, "-o", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "match: exact" in printed
    res = json.loads((out / "results.json").read_text())
    assert res["simulator"] == sim and res["match"]["exact"]
    assert res["fabric"]["topology"] == "torus" and res["fabric"]["routers"] == 4
    assert res["fabric"]["hop_histogram"] == res["model"]["fabric"]["hop_histogram"]
    # Tornado on a ring of 4: every packet to the router k/2 - 1 = 1 ahead.
    assert res["fabric"]["mean_hops"] == 1
