"""The golden model held to digests of its own records, taken before its cycle kernel
was compiled: every column, every counter, every pause frame and ECN decision of a set
of seeded runs that together use every feature of the switch and of the RDMA fabric.

A digest that changes means the model's behaviour changed. If that is intended (a
change of the specification in docs/architecture.md), regenerate the file with
``python tests/test_model_digests.py`` and say why in the commit.
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.formats.counters import DCQCN_COUNTERS
from superfabric.sim.backpressure import SinkReady
from superfabric.sim.pfc import pause_sources
from superfabric.sim.rdma.fabric import RdmaFabricModel
from superfabric.sim.rdma.traffic import generate_rdma
from superfabric.sim.fabric.top import FabricModel
from superfabric.sim.traffic import generate

DIGESTS = Path(__file__).parent / "data" / "model_digests.json"

_FIFO5_DROP = ["switch.ports=5", "switch.priorities=3", "switch.scheduler=fifo",
               "switch.ingress_full=drop", "switch.buffer_flits=40", "switch.max_packet_flits=8"]
_PFC = ["pfc.enabled=true", "switch.ingress_full=drop"]
_ECN = ["ecn.enabled=true", "ecn.kmin=16", "ecn.kmax=64", "ecn.pmax=0.2"]

#: name -> (overrides, pattern, load, cycles, lengths, sink stall, pause rate, stall limit)
SWITCH_CASES = {
    "islip8-uniform": ([], "uniform", 0.8, 3000, "fixed:1", 0.0, 0.0, None),
    "islip8-bimodal-stall": ([], "uniform", 1.0, 2000, "bimodal:1,16,0.7", 0.2, 0.0, None),
    "islip8-hotspot-pause": ([], "hotspot:fraction=0.4,port=3", 0.7, 2500, "bimodal:1,4,0.5",
                             0.0, 0.2, None),
    "islip8-drop-incast": (["switch.ingress_full=drop", "switch.buffer_flits=64"], "incast", 1.0,
                           1500, "fixed:8", 0.1, 0.0, None),
    "fifo8-uniform": (["switch.scheduler=fifo"], "uniform", 1.0, 2000, "fixed:1", 0.0, 0.0, None),
    "fifo5-drop-bimodal": (_FIFO5_DROP, "uniform", 1.0, 2000, "bimodal:1,8,0.5", 0.2, 0.0, None),
    "fifo5-drop-bursty": (_FIFO5_DROP, "bursty", 0.8, 2000, "bimodal:1,8,0.7", 0.3, 0.2, None),
    "pfc-incast": (_PFC, "incast", 1.0, 3000, "fixed:1", 0.0, 0.0, None),
    "pfc-allreduce-sinkpause": (["pfc.enabled=true"], "ring-allreduce", 0.9, 3000, "fixed:4",
                                0.0, 0.2, None),
    "ecn-hotspot": (_ECN + ["ecn.ect_fraction=0.7"], "hotspot", 0.6, 3000, "fixed:1", 0.0, 0.0,
                    None),
    "ecn-pfc-stall": (_ECN + _PFC, "all-to-all", 0.9, 2000, "bimodal:2,8,0.5", 0.15, 0.1, None),
    "islip16-1it-permutation": (["switch.ports=16", "switch.islip_iterations=1"], "permutation",
                                1.0, 1500, "fixed:2", 0.0, 0.0, None),
    "islip16-transpose-bursty": (["switch.ports=16"], "transpose", 0.9, 1500, "fixed:3", 0.05,
                                 0.0, None),
    "islip32-8prio": (["switch.ports=32", "switch.priorities=8", "switch.islip_iterations=4",
                       "switch.buffer_flits=256"], "uniform", 0.9, 1000, "bimodal:1,6,0.6",
                      0.0, 0.0, None),
    "islip3-bitcomp": (["switch.ports=3", "switch.priorities=1"], "bitcomp", 1.0, 1500,
                       "fixed:1", 0.3, 0.0, None),
    "stalled": ([], "uniform", 0.9, 1500, "fixed:4", 0.0, 0.95, 40),
}

_RDMA_TINY = ["rdma.enabled=true", "rdma.qps=8", "rdma.memory_words=2048", "rdma.page_words=64",
              "rdma.pages=64"]
_CONGESTED = ["rdma.enabled=true", "rdma.qps=8", "rdma.channels_per_peer=1",
              "rdma.memory_words=8192", "rdma.page_words=64", "rdma.pages=128",
              "pfc.enabled=true", "ecn.enabled=true", "ecn.kmin=32", "ecn.kmax=128",
              "ecn.pmax=0.5", "dcqcn.enabled=true"]
#: The class layout of the runs recorded before congestion control: ACKs and NAKs shared
#: the data class (``rdma.control_priority`` now defaults to a class of their own).
_ONE_CLASS = ["rdma.control_priority=0"]
#: name -> (preset, overrides, pattern, load, cycles, bad fraction)
RDMA_CASES = {
    "rdma-allreduce-drops": ("default", ["rdma.enabled=true", "faults.drop_rate=0.01"]
                             + _ONE_CLASS, "rdma-allreduce", 0.5, 10_000, 0.0),
    "rdma-allreduce-drops-classes": ("default", ["rdma.enabled=true", "faults.drop_rate=0.01"],
                                     "rdma-allreduce", 0.5, 10_000, 0.0),
    "rdma-uniform-faults": ("tiny", _RDMA_TINY + _ONE_CLASS + ["faults.drop_rate=0.03",
                                                  "faults.duplicate_rate=0.03",
                                                  "faults.reorder_rate=0.05",
                                                  "faults.corrupt_rate=0.03"],
                            "rdma-uniform", 0.6, 1500, 0.2),
    "rdma-victim-dcqcn-faults": ("tiny", _CONGESTED + ["faults.drop_rate=0.02",
                                                       "faults.corrupt_rate=0.02"],
                                 "rdma-victim:side_load=0.3", 0.6, 2000, 0.0),
}


def _digest(arrays: dict, scalars: dict) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    h.update(json.dumps(scalars, sort_keys=True).encode())
    return h.hexdigest()


def switch_digest(name: str) -> str:
    overrides, pattern, load, cycles, lengths, stall, pause_rate, stall_limit = SWITCH_CASES[name]
    cfg = FabricConfig.load(overrides=overrides)
    trace = generate(cfg, pattern, load=load, cycles=cycles, seed=11, packet_lengths=lengths,
                     ect_fraction=cfg.ecn.ect_fraction)
    pause, sink_pause = pause_sources(cfg, pause_rate, 11)
    kwargs = {} if stall_limit is None else {"stall_limit": stall_limit}
    rec = FabricModel(cfg).run(trace, sink=SinkReady(cfg.switch.ports, stall, 11), pause=pause,
                               sink_pause=sink_pause, **kwargs)
    arrays = {k: getattr(rec, k) for k in ("out_port", "head", "tail", "dropped", "payload_ok",
                                           "ecn_out", "ecn_backlog", "pfc_frames")}
    return _digest(arrays, {"cycles": rec.cycles, "stalled": rec.stalled,
                            "counters": rec.counters, "packets": len(trace)})


def rdma_digest(name: str) -> str:
    preset, overrides, pattern, load, cycles, bad = RDMA_CASES[name]
    cfg = FabricConfig.load(preset=preset, overrides=overrides)
    workload = generate_rdma(cfg, pattern, load=load, cycles=cycles, seed=11, bad_fraction=bad)
    rec = RdmaFabricModel(cfg).run(workload)
    columns = ["taken", "done", "status", "completions", "order", "rx_completions", "memory"]
    counters = dict(rec.counters)
    # Without PFC and ECN nothing is paused, marked or cut: the digest covers what the
    # records held before congestion control, so those digests still date from then.
    if cfg.pfc.enabled or cfg.ecn.enabled:
        columns += ["cnps", "rates", "pfc_frames", "queue_depth"]
    else:
        assert not any(np.any(counters.pop(k)) for k in DCQCN_COUNTERS)
        assert len(rec.cnps) == len(rec.rates) == len(rec.pfc_frames) == 0
    arrays = {k: getattr(rec, k) for k in columns}
    return _digest(arrays, {"cycles": rec.cycles, "stalled": rec.stalled, "stuck": rec.stuck,
                            "counters": counters, "wrs": len(workload)})


#: A fabric run held to the same digest compiled and as Python: a torus with adaptive
#: routing, two classes, PFC and ECN.
_TORUS = ["fabric.topology=torus", "fabric.dims=[2, 3]", "fabric.endpoints_per_router=2",
          "fabric.routing=adaptive", "fabric.vcs=3", "switch.priorities=2",
          "pfc.priorities=[0, 1]"] + _PFC + _ECN


def torus_digest() -> str:
    cfg = FabricConfig.load(overrides=_TORUS)
    trace = generate(cfg, "uniform", load=0.6, cycles=600, seed=11,
                     packet_lengths="bimodal:1,8,0.5", ect_fraction=0.5)
    rec = FabricModel(cfg).run(trace)
    arrays = {k: getattr(rec, k) for k in ("out_port", "head", "tail", "dropped", "hops", "path",
                                           "ecn_out", "ecn_backlog", "pfc_frames")}
    return _digest(arrays, {"cycles": rec.cycles, "counters": rec.counters})


def _expected() -> dict:
    return json.loads(DIGESTS.read_text())


@pytest.mark.parametrize("name", sorted(SWITCH_CASES))
def test_switch_model_digest(name):
    assert switch_digest(name) == _expected()["switch"][name]


@pytest.mark.parametrize("name", sorted(RDMA_CASES))
def test_rdma_model_digest(name):
    assert rdma_digest(name) == _expected()["rdma"][name]


def test_the_kernels_run_as_python_to_the_same_digests():
    # NUMBA_DISABLE_JIT runs the kernels' rules as plain Python for debugging (sim/kernel.py).
    # There numpy's rules for Python scalars, not numba's, type the arithmetic on the
    # state's narrow fields (a class held in int8 in a queue's number, a port's in int32
    # shifted): the same runs must give the same records. The widest switch (32 ports,
    # 8 classes), PFC with ECN, the RDMA fabric with DCQCN, and a torus.
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import test_model_digests as t; "
            "print(json.dumps([t.switch_digest('islip32-8prio'), t.switch_digest('ecn-pfc-stall'), "
            "t.rdma_digest('rdma-victim-dcqcn-faults'), t.torus_digest()]))")
    run = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent)],
                         env={**os.environ, "NUMBA_DISABLE_JIT": "1"}, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    expected = _expected()
    assert json.loads(run.stdout) == [expected["switch"]["islip32-8prio"],
                                      expected["switch"]["ecn-pfc-stall"],
                                      expected["rdma"]["rdma-victim-dcqcn-faults"], torus_digest()]


def test_cases_exercise_what_they_claim():
    # The set is only worth its digests if the runs really drop, pause,
    # mark, stall and so on: check each feature shows up somewhere.
    seen = {"dropped": False, "pfc_frames": False, "marked": False, "stalled": False}
    for name in ("fifo5-drop-bimodal", "pfc-incast", "ecn-hotspot", "stalled"):
        overrides, pattern, load, cycles, lengths, stall, pause_rate, stall_limit = \
            SWITCH_CASES[name]
        cfg = FabricConfig.load(overrides=overrides)
        trace = generate(cfg, pattern, load=load, cycles=cycles, seed=11, packet_lengths=lengths,
                         ect_fraction=cfg.ecn.ect_fraction)
        pause, sink_pause = pause_sources(cfg, pause_rate, 11)
        kwargs = {} if stall_limit is None else {"stall_limit": stall_limit}
        rec = FabricModel(cfg).run(trace, sink=SinkReady(cfg.switch.ports, stall, 11),
                                   pause=pause, sink_pause=sink_pause, **kwargs)
        seen["dropped"] |= bool(rec.dropped.any())
        seen["pfc_frames"] |= len(rec.pfc_frames) > 0
        seen["marked"] |= bool(sum(rec.counters.get("ecn_marks", [])))
        seen["stalled"] |= rec.stalled
    assert all(seen.values()), seen


if __name__ == "__main__":
    DIGESTS.parent.mkdir(exist_ok=True)
    DIGESTS.write_text(json.dumps({"switch": {n: switch_digest(n) for n in sorted(SWITCH_CASES)},
                                   "rdma": {n: rdma_digest(n) for n in sorted(RDMA_CASES)}},
                                  indent=2) + "\n")
    print(f"wrote {DIGESTS}", file=sys.stderr)
