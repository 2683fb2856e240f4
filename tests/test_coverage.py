"""Coverage builds and their report: a coverage build is a build of its own, its runs leave
data named after it, and the report merges, annotates and counts it per block."""

import json

from superfabric.config import FabricConfig
from superfabric.tb.runner import COVERAGE_ENV, build, run_cocotb, verilator_cxx_opt
from superfabric.tools.coverage import (block_of, merge, read_data, read_points, report,
                                       summarise, write_data)

from conftest import require_simulator


def _point(page, count, line=1):
    keys = {"f": "switch.v", "l": str(line), "page": page, "o": "block", "h": "TOP.switch"}
    return "C '" + "".join(f"\x01{k}\x02{v}" for k, v in keys.items()) + f"\x01' {count}\n"


def test_points_are_counted_per_block(tmp_path):
    data = tmp_path / "coverage.dat"
    data.write_text("# SystemC::Coverage-3\n" + _point("v_line/switch", 3) + _point("v_line/switch", 0, 2)
                    + _point("v_line/switch.voq0", 1) + _point("v_line/switch.voq1", 0)
                    + _point("v_branch/switch.voq1", 2) + _point("v_toggle/switch.voq0", 0))
    assert summarise(read_points(read_data(data))) == {
        "switch": {"line": [1, 2], "toggle": [0, 0], "unreachable": [0, 0]},
        "voq": {"line": [2, 3], "toggle": [0, 1], "unreachable": [0, 0]}}
    # Runs of one build add up, point by point, and write back in Verilator's format.
    write_data(merge([data, data]), tmp_path / "twice.dat")
    assert read_data(tmp_path / "twice.dat") == {k: 2 * v for k, v in read_data(data).items()}
    assert block_of("\\rdma_fabric.engine3.tables") == "engine.tables"
    assert block_of("rdma_fabric.switch.voq12") == "switch.voq"


def test_coverage_build_runs_and_report(tmp_path, monkeypatch, build_root):
    require_simulator("verilator")
    cfg = FabricConfig.load(preset="tiny")
    plain = build(cfg, sim="verilator", top="skid_buffer", build_root=build_root)
    monkeypatch.setenv(COVERAGE_ENV, str(tmp_path / "data"))
    result = run_cocotb(cfg, "superfabric.tb.skid_buffer_tb", sim="verilator", top="skid_buffer",
                        test_dir=tmp_path / "cocotb", build_root=build_root, seed=3,
                        params={"flits": 200, "valid_stall": 0.3, "ready_stall": 0.3})
    assert result.passed
    # Its own build, beside the plain one, which it leaves as it was; the C++ level
    # marks both names last.
    covered = build(cfg, sim="verilator", top="skid_buffer", build_root=build_root)
    level = f"-O{verilator_cxx_opt()}"
    assert plain.name.endswith(level)
    assert covered.name == plain.name.removesuffix(level) + "-coverage" + level
    assert not json.loads((plain / "built.json").read_text()).get("coverage")
    files = list((tmp_path / "data").glob(f"{covered.name}.*.dat"))
    assert len(files) == 1
    summary = report(tmp_path / "data", tmp_path / "out")
    lines, toggles, unreachable = summary["builds"][covered.name]["blocks"]["skid_buffer"].values()
    # Random stalls on both sides reach every branch of the buffer and move every bit; the
    # generator's trigger registers are left out (their empty branch is never taken).
    assert lines[0] == lines[1] > 0 and toggles[0] == toggles[1] > 0
    assert unreachable[0] < unreachable[1]
    assert (tmp_path / "out" / "annotated" / covered.name / "skid_buffer.v").exists()
    assert "skid_buffer" in (tmp_path / "out" / "summary.md").read_text()
