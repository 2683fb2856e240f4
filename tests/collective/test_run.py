"""``superfabric run --traffic collective:...`` (``tools/run.py``): the collective section of
results.json, and bad input in one line with status 2."""

import json

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.sim.rdma.records import RdmaRecords
from superfabric.tools.cli import main
from superfabric.tools.run import run_point

from conftest import BUILD_ROOT, RDMA_SMALL, require_simulator

#: RDMA_SMALL with eight QPs per accelerator, on the 2x2x2 torus.
SMALL = [o for o in RDMA_SMALL if not o.startswith("rdma.qps=")] + ["rdma.qps=64"]
SETTINGS = [a for o in SMALL + ["fabric.topology=torus", "fabric.dims=[2, 2, 2]"]
            for a in ("--set", o)]


def test_the_collective_section(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--traffic", "collective:op=allreduce,algo=ring,bytes=2048,dtype=float32",
                 *SETTINGS, "--sim", "model", "-o", str(out)]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("model: allreduce of 2,048 bytes by ring on 8 accelerators: ")
    assert line.endswith("data exact")
    co = json.loads((out / "results.json").read_text())["collective"]
    assert (co["op"], co["algo"], co["dtype"], co["bytes"], co["accelerators"]) == \
        ("allreduce", "ring", "float32", 2048, 8)
    assert co["data_ok"] is True and co["errors"] == 0 and not co["stalled"]
    assert 0 < co["cycles"] <= co["run_cycles"]
    assert co["algbw"] == pytest.approx(2048 / co["cycles"])
    assert co["busbw"] == pytest.approx(co["algbw"] * 2 * 7 / 8)
    assert co["alpha_beta_ratio"] == pytest.approx(co["cycles"] / co["alpha_beta_cycles"])
    # In real units at the default clock, 625 MHz: GB/s = bytes/cycle * MHz / 1000.
    assert co["time_us"] == co["cycles"] / 625
    assert co["algbw_gbps"] == pytest.approx(co["algbw"] * 625 / 1000, rel=1e-12)
    assert co["busbw_gbps"] == pytest.approx(co["busbw"] * 625 / 1000, rel=1e-12)
    assert co["link_gbps"] == 5.0
    assert f"{co['cycles']:,} cycles ({co['time_us']:,.3f} us)" in line
    assert f"({co['busbw_gbps']:.3f} GB/s)" in line
    assert (out / "workload.npz").exists() and (out / "model_records.npz").exists()
    timeline = np.load(out / "collective.npz")
    assert timeline["started"].shape == (8 * 14, 3) and timeline["applied"].shape == (8 * 14, 3)
    assert timeline["applied"][:, 2].max() + 1 == co["cycles"]


def test_the_clock_changes_the_units_only(tmp_path):
    runs = {}
    for mhz in (625, 1000):
        out = tmp_path / str(mhz)
        assert main(["run", "--traffic", "collective:op=allgather,algo=ring,bytes=1024",
                     *SETTINGS, "--set", f"fabric.clock_mhz={mhz}", "-o", str(out)]) == 0
        runs[mhz] = json.loads((out / "results.json").read_text())["collective"]
        assert runs[mhz]["time_us"] == runs[mhz]["cycles"] / mhz
        # An all-gather's bus bandwidth factor is (n - 1) / n.
        assert runs[mhz]["busbw_gbps"] == pytest.approx(
            runs[mhz]["algbw_gbps"] * 7 / 8, rel=1e-12)
        assert runs[mhz]["algbw_gbps"] == pytest.approx(
            1024 / runs[mhz]["time_us"] / 1000, rel=1e-12)
    slow, fast = runs[625], runs[1000]
    assert fast["time_us"] < slow["time_us"] and fast["link_gbps"] == 8.0
    cycles = ("cycles", "algbw", "busbw", "alpha_beta_cycles", "run_cycles", "work_requests")
    assert [fast[k] for k in cycles] == [slow[k] for k in cycles]
    assert fast["busbw_gbps"] == pytest.approx(slow["busbw_gbps"] * 1000 / 625, rel=1e-12)


def test_segments_bring_the_ring_to_its_alpha_beta_prediction(tmp_path):
    # 32 KiB: chunks of 4 KiB, three segments of 16 packets' payload (1,792 bytes) each.
    # Cycles are simulated, so the figures are the model's, not the machine's.
    room = [a for o in SMALL + ["fabric.topology=torus", "fabric.dims=[2, 2, 2]"]
            if not o.startswith(("rdma.memory_words=", "rdma.pages="))
            for a in ("--set", o)] + ["--set", "rdma.memory_words=16384", "--set",
                                      "rdma.pages=256"]
    runs = {}
    for segment in (0, 16):
        out = tmp_path / str(segment)
        assert main(["run", "--traffic", f"collective:op=allreduce,algo=ring,bytes=32768,"
                     f"dtype=fp32,segment={segment}", *room, "-o", str(out)]) == 0
        runs[segment] = json.loads((out / "results.json").read_text())["collective"]
        assert runs[segment]["data_ok"] is True
    whole, cut = runs[0], runs[16]
    assert (whole["segment_bytes"], cut["segment_bytes"]) == (0, 1792)
    assert cut["steps"] == 3 * whole["steps"]
    # Overlapping each segment's apply with the next one's transfer saves over a quarter.
    assert cut["cycles"] < 0.75 * whole["cycles"]
    # The model predicts both within 10 %: the pipeline, and the transfer plus apply.
    for run in (whole, cut):
        assert 0.9 < run["alpha_beta_ratio"] < 1.1


@pytest.mark.parametrize("traffic, extra, message", [
    ("collective:op=gather", [], "op = 'gather' must be one of allreduce, reducescatter"),
    ("collective:bytes=6", [], "bytes = 6 must be a multiple of 4"),
    ("collective:bytes=0", [], "bytes = '0' must be an integer in 4.."),
    ("collective:dtype=bf16", [], "dtype = 'bf16' must be one of int32, fp32, float32"),
    ("collective:segment=-1", [], "segment = '-1' must be an integer in 0..4096"),
    ("collective:segment=1.5", [], "segment = '1.5' must be an integer in 0..4096"),
    ("collective:algo=dimwise,op=alltoall", [], "algo = 'dimwise' cannot run alltoall"),
    ("collective:bytes=65536", [], "rdma.memory_words = 2048: the allreduce of 65536 bytes"),
    ("collective", ["--bad-fraction", "0.1"], "traffic.bad_fraction = 0.1: must be 0"),
    ("collective:records=none", [], "records = 'none' must be one of full, summary"),
    ("collective:records=summary", ["--capture-link", "0:1"],
     "records = summary keeps no delivered packets: --capture-link needs records = full"),
    ("collective:records=summary", ["--pcap", "run.pcap"],
     "records = summary keeps no delivered packets: --pcap needs records = full"),
    ("collective", ["--set", "fabric.endpoints_per_router=2", "--set",
                    "fabric.ports_per_accelerator=2"],
     "fabric.ports_per_accelerator = 2: must be 1 for collective traffic"),
])
def test_bad_input_is_one_line_and_status_2(traffic, extra, message, tmp_path, capsys):
    assert main(["run", "--traffic", traffic, *SETTINGS, *extra, "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_a_summary_run_has_the_same_collective_section_and_lighter_records(tmp_path):
    sections, records = {}, {}
    for kind in ("full", "summary"):
        out = tmp_path / kind
        assert main(["run", "--traffic", f"collective:bytes=2048,records={kind}", *SETTINGS,
                     "-o", str(out)]) == 0
        sections[kind] = json.loads((out / "results.json").read_text())["collective"]
        records[kind] = RdmaRecords.load(out / "model_records.npz")
    assert sections["summary"] == sections["full"]
    full, summary = records["full"], records["summary"]
    assert np.array_equal(summary.done, full.done) and summary.counters == full.counters
    assert len(full.queue_depth) == full.cycles and len(full.delivered) and full.memory.size
    assert summary.queue_depth.size == 0 and not len(summary.delivered)
    assert summary.memory.shape == (8, 0)


def test_past_64_accelerators_the_peer_mask_takes_more_words(tmp_path):
    """Accelerator 63's bit is the sign bit of the registration entry's first int64 peer
    mask word (as for rdma-* traffic); on 128 accelerators the mask takes two words, and
    every accelerator still writes to every peer it must."""
    torus = ["--set", "rdma.enabled=true", "--set", "fabric.topology=torus"]
    for dims, n, nbytes in (("[4, 4, 4]", 64, 1024), ("[8, 4, 4]", 128, 64)):
        out = tmp_path / str(n)
        assert main(["run", "--traffic", f"collective:op=allreduce,algo=dimwise,bytes={nbytes}",
                     *torus, "--set", f"fabric.dims={dims}", "-o", str(out)]) == 0
        co = json.loads((out / "results.json").read_text())["collective"]
        assert co["accelerators"] == n and co["data_ok"] and co["errors"] == 0


def test_an_rtl_run_is_held_against_the_model(tmp_path):
    """``--sim verilator``: the collective_fabric top runs the collective too, and the
    ``match`` section says it equals the model (``tests/collective/test_rtl.py``'s build)."""
    require_simulator("verilator")
    cfg = FabricConfig.load(overrides=SMALL + ["fabric.topology=torus", "fabric.dims=[2, 2, 2]"])
    res = run_point(cfg, traffic="collective:op=allreduce,algo=halving-doubling,bytes=1024",
                    load=0.0, cycles=0, seed=3, sim="verilator", out_dir=tmp_path,
                    build_root=BUILD_ROOT)
    m = res["match"]
    assert m["exact"] and m["data_ok"] and m["passed"], m["problems"]
    co, model = res["collective"], res["model"]
    assert co["data_ok"] and co["cycles"] == model["cycles"] and res["cycles_per_second"] > 0
    assert co["work_requests"] is None and model["work_requests"] > 0
    assert (tmp_path / "rtl_run.npz").exists() and not (tmp_path / "mismatch.txt").exists()
