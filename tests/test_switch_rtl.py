"""The switch RTL against the golden model, packet by packet and cycle by cycle.

Every case runs on both Icarus and Verilator through the same runner that
``superfabric run`` uses. Configurations are few on purpose (each is one
Verilator build, cached under build/test); cases per configuration are many.
"""

import json

import pytest

from superfabric.config import FabricConfig
from superfabric.tools.run import run_point

# name -> overrides of the default preset
CONFIGS = {
    # 4 ports, 2 classes, VOQs and 2-iteration iSLIP, lossless.
    "tiny": ["switch.ports=4", "switch.priorities=2", "switch.buffer_flits=128",
             "switch.islip_iterations=2"],
    # 5 ports (not a power of two), 3 classes, head-of-line FIFO, drop when full.
    "fifo5drop": ["switch.ports=5", "switch.priorities=3", "switch.scheduler=fifo",
                  "switch.ingress_full=drop", "switch.buffer_flits=40",
                  "switch.max_packet_flits=8"],
    # tiny with the iSLIP match registered before the read, PFC and ECN on:
    # every rule that a registered grant moves a cycle.
    "registered": ["switch.ports=4", "switch.priorities=2", "switch.buffer_flits=128",
                   "switch.islip_iterations=2", "switch.registered_grant=true",
                   "switch.ingress_full=drop", "pfc.enabled=true", "pfc.priorities=[0, 1]",
                   "pfc.xoff=36", "pfc.xon=20", "pfc.headroom=20", "pfc.pause_quanta=64",
                   "ecn.enabled=true", "ecn.kmin=4", "ecn.kmax=32", "ecn.ect_fraction=0.8"],
}

# (config, pattern, load, cycles, lengths, sink stall, pause rate)
CASES = [
    ("tiny", "uniform", 0.9, 1500, "fixed:1", 0.0, 0.0),
    # Low load: idle stretches between packets, which the testbench skips.
    ("tiny", "uniform", 0.05, 2000, "bimodal:1,4,0.5", 0.0, 0.0),
    ("tiny", "uniform", 0.7, 1500, "bimodal:1,6,0.5", 0.25, 0.0),
    ("tiny", "hotspot:fraction=0.5", 0.8, 1200, "bimodal:1,4,0.5", 0.0, 0.2),
    ("tiny", "incast", 1.0, 800, "fixed:4", 0.1, 0.0),
    ("tiny", "transpose", 0.9, 1000, "fixed:2", 0.0, 0.0),
    ("tiny", "bitcomp", 1.0, 800, "fixed:1", 0.3, 0.0),
    ("tiny", "all-to-all", 0.8, 1000, "bimodal:2,8,0.5", 0.0, 0.3),
    ("tiny", "ring-allreduce", 0.9, 1000, "fixed:4", 0.0, 0.0),
    ("tiny", "bursty:burst=6", 0.6, 1500, "fixed:3", 0.1, 0.0),
    ("tiny", "permutation", 1.0, 800, "fixed:16", 0.0, 0.0),
    ("fifo5drop", "uniform", 1.0, 1500, "bimodal:1,8,0.5", 0.2, 0.0),
    ("fifo5drop", "incast:sources=4,sink=2", 1.0, 1000, "bimodal:1,8,0.5", 0.0, 0.0),
    ("fifo5drop", "hotspot", 0.6, 1500, "fixed:1", 0.0, 0.2),
    ("fifo5drop", "bursty", 0.8, 1500, "bimodal:1,8,0.7", 0.3, 0.0),
    ("registered", "uniform", 0.9, 1000, "fixed:1", 0.0, 0.0),
    ("registered", "incast", 1.0, 700, "bimodal:1,4,0.5", 0.0, 0.0),
    ("registered", "hotspot:fraction=0.5", 0.8, 800, "bimodal:1,6,0.5", 0.1, 0.2),
    ("registered", "ring-allreduce", 0.9, 700, "fixed:3", 0.25, 0.0),
    ("registered", "permutation", 1.0, 600, "fixed:16", 0.0, 0.0),
]


def _id(case):
    cfg, pattern, load, _, lengths, stall, pause = case
    return (f"{cfg}-{pattern.split(':')[0]}-{load}-{lengths.replace(':', '').replace(',', '_')}"
            f"-s{stall}-p{pause}")


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_rtl_matches_model(case, sim, tmp_path, build_root):
    name, pattern, load, cycles, lengths, stall, pause = case
    cfg = FabricConfig.load(overrides=CONFIGS[name])
    res = run_point(cfg, traffic=pattern, load=load, cycles=cycles, seed=7, sim=sim,
                    out_dir=tmp_path, packet_lengths=lengths, sink_stall=stall,
                    pause_rate=pause, build_root=build_root)
    match = res["match"]
    detail = (tmp_path / "mismatch.txt").read_text() if not match["exact"] else ""
    assert match["exact"], json.dumps(match) + "\n" + detail
    pk = res["packets"]
    assert pk["offered"] > 0
    assert pk["delivered"] + pk["dropped"] == pk["offered"]
    if cfg.switch.ingress_full == "backpressure" or cfg.pfc.enabled:
        assert pk["dropped"] == 0
    assert res["model"]["packets"] == pk
    assert res["model"]["throughput"] == res["throughput"]
    if cfg.pfc.enabled:
        assert res["pfc"] == res["model"]["pfc"]
    if cfg.ecn.enabled:
        assert res["ecn"] == res["model"]["ecn"]


def test_drop_mode_really_drops_in_rtl(sim, tmp_path, build_root):
    # Overload a small buffer: drops happen, in RTL and model alike (counters included).
    cfg = FabricConfig.load(overrides=CONFIGS["fifo5drop"])
    res = run_point(cfg, traffic="incast", load=1.0, cycles=800, seed=3, sim=sim,
                    out_dir=tmp_path, packet_lengths="fixed:8", build_root=build_root)
    assert res["match"]["exact"], json.dumps(res["match"])
    assert res["packets"]["dropped"] > 0
    assert sum(res["counters"]["drops"]) == res["packets"]["dropped"]


def test_lossless_overload_delivers_everything(sim, tmp_path, build_root):
    cfg = FabricConfig.load(overrides=CONFIGS["tiny"])
    res = run_point(cfg, traffic="incast", load=1.0, cycles=1000, seed=5, sim=sim,
                    out_dir=tmp_path, packet_lengths="fixed:8", build_root=build_root)
    assert res["match"]["exact"], json.dumps(res["match"])
    assert res["packets"]["dropped"] == 0
    assert res["packets"]["delivered"] == res["packets"]["offered"]
    assert res["counters"]["tx_packets"][0] == res["packets"]["offered"]
