"""Honest timing of a model run: every kernel it calls is compiled, or loaded from numba's
cache, before the clock starts (``compile_seconds``), never inside the run it times
(``cycles_per_second``); issue 21.

Each path of ``superfabric run --sim model`` runs in a fresh Python process, so that no
kernel is loaded before its warm-up. A numba dispatcher gains a signature for every
compile and every load from the on-disk cache alike, so counting the signatures of every
kernel just after the warm-up and again after the run catches both, whether the shared
cache is warm or empty; the shared cache keeps a case to a couple of seconds. No figure
of time is asserted.
"""

import json
import subprocess
import sys

import pytest

from conftest import RDMA_SMALL

#: Run in a fresh process: argv[1] a JSON ``{"overrides": [...], "point": {...}}``; prints
#: the kernels whose signature count changed inside the timed region, and the results.
PROBE = r"""
import json, sys
from numba.core.dispatcher import Dispatcher
from superfabric.config import FabricConfig
from superfabric.tools import run

def signatures():
    # Every kernel of the package loaded so far: its compiled (or cache-loaded) signatures.
    return {f"{d.py_func.__module__}.{d.py_func.__qualname__}": len(d.signatures)
            for name, module in list(sys.modules.items()) if name.startswith("superfabric.")
            for d in list(vars(module).values()) if isinstance(d, Dispatcher)}

case = json.loads(sys.argv[1])
warmed = []
warm_up = run._compile

def warm_up_then_count(*args, **kwargs):
    seconds = warm_up(*args, **kwargs)
    warmed.append(signatures())
    return seconds

run._compile = warm_up_then_count
cfg = FabricConfig.load(preset="tiny", overrides=case["overrides"])
results = run.run_point(cfg, sim="model", seed=1, out_dir=case["out"], **case["point"])
after = signatures()
before = warmed[-1] if warmed else {}
print(json.dumps({
    "warmed": len(warmed),
    "kernels": len(after),
    "compiled_in_run": {k: [before.get(k, 0), n] for k, n in after.items()
                        if n != before.get(k, 0)},
    "results": {"cycles": results.get("cycles", results.get("rdma", {}).get("cycles")),
                **{k: results[k] for k in ("wall_seconds", "cycles_per_second",
                                           "compile_seconds")}},
}))
"""

SMALL_TORUS = ["fabric.topology=torus", "fabric.dims=[2, 2]"]
SMALL_TREE = ["fabric.topology=fat_tree", "fabric.leaves=2", "fabric.spines=2",
              "fabric.hosts_per_leaf=2"]
UNIFORM = {"traffic": "uniform", "load": 0.3, "cycles": 200}

#: One case per path of ``run_point`` and per kind of fabric it can run.
CASES = {
    "switch": ([], UNIFORM),
    "switch-pfc-ecn-stalls": (["pfc.enabled=true", "ecn.enabled=true"],
                              {**UNIFORM, "pause_rate": 0.1, "sink_stall": 0.1}),
    "switch-pause-schedule": (["ecn.enabled=true"], {**UNIFORM, "pause_rate": 0.1}),
    "torus-dor": (SMALL_TORUS, UNIFORM),
    "torus-adaptive": (SMALL_TORUS + ["fabric.routing=adaptive", "fabric.vcs=3"], UNIFORM),
    "fat-tree-ecmp": (SMALL_TREE + ["fabric.routing=ecmp"], UNIFORM),
    "fat-tree-adaptive": (SMALL_TREE + ["fabric.routing=adaptive"], UNIFORM),
    "stimulus-switch": ([], {**UNIFORM, "stimulus": "hardware"}),
    "stimulus-torus-stalls": (SMALL_TORUS, {**UNIFORM, "stimulus": "hardware",
                                            "sink_stall": 0.1}),
    "rdma": (RDMA_SMALL + ["pfc.enabled=true", "ecn.enabled=true"],
             {"traffic": "rdma-uniform", "load": 0.3, "cycles": 800}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_no_kernel_compiles_inside_the_timed_run(name, tmp_path):
    overrides, point = CASES[name]
    case = {"overrides": overrides, "point": point, "out": str(tmp_path / "run")}
    res = subprocess.run([sys.executable, "-c", PROBE, json.dumps(case)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    probe = json.loads(res.stdout.strip().splitlines()[-1])
    assert probe["warmed"] == 1, "the run did not warm its kernels exactly once before timing"
    assert probe["kernels"] > 0
    # Each entry: a kernel with its signature count after the warm-up and after the run.
    assert probe["compiled_in_run"] == {}, \
        f"compiled or loaded inside the timed run: {probe['compiled_in_run']}"
    results = probe["results"]
    assert results["compile_seconds"] >= 0.0
    assert results["cycles_per_second"] == results["cycles"] / results["wall_seconds"]
