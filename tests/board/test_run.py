"""The board top's run (hdl/board/run.py) on both RTL simulators: its UART prints, byte for
byte, the report of the model's run (formats/board.py) and lights no mismatch; a planted
fault changes the run hash and lights it; its Verilog lints clean."""

import zlib

import pytest

from superfabric.config import FabricConfig
from superfabric.formats.board import BANNER, report_lines, report_program
from superfabric.sim.board.run import report_text
from superfabric.formats.stimulus import RegisterMap
from superfabric.hdl.board.run import BoardRun
from superfabric.hdl.verilog import write_verilog
from superfabric.sim.stimulus.metrics import combined_hash
from superfabric.sim.stimulus.top import StimulusModel
from superfabric.sim.stimulus.traffic_gen import stimulus_settings
from superfabric.tb.board.runner import run_board_rtl

from conftest import assert_lint_clean, require_simulator

TINY = FabricConfig.load(preset="tiny")
#: Output 0's fifth packet a cycle late: its sink's hash, and so the run hash, change.
FAULTY = FabricConfig.load(preset="tiny", overrides=["stimulus.fault_packet=5"])
#: A few bits' time in simulation; a board divides its clock by about 174.
CLOCKS_PER_BIT = 4


def model_run(cfg, pattern="uniform", load=0.3, cycles=300):
    settings = stimulus_settings(cfg, pattern, load=load, cycles=cycles, seed=3,
                                 packet_lengths="bimodal:1,4,0.5")
    stats = StimulusModel(cfg).run(settings)
    return settings, stats, combined_hash(stats["hash"])


def test_report_program_prints_what_the_model_report_says():
    # The program's text, with each LOAD's value put in, is the model's report.
    _, stats, expected = model_run(TINY)
    regmap = RegisterMap(TINY)
    at = {regmap.address(name, k): int(stats[name].reshape(-1)[k])
          for name, k, _ in report_lines(TINY)}
    text, value, folded = "", 0, b""
    for op, arg in report_program(TINY, expected):
        if op == "CHAR":
            text += chr(arg)
        elif op == "LOAD":
            value = at[arg]
        elif op == "HEX":
            text += "0123456789abcdef"[value >> 4 * arg & 15]
        elif op == "FOLD":
            folded += value.to_bytes(4, "little")
        elif op == "HASH":
            value = zlib.crc32(folded)
    assert text == report_text(TINY, stats, expected)
    assert text.startswith(BANNER + "\r\n") and text.endswith(
        f"run_hash {expected:08x} model {expected:08x}\r\n")


@pytest.mark.parametrize("sim", ["icarus", "verilator"])
def test_the_uart_prints_the_models_report(sim, tmp_path):
    require_simulator(sim)
    settings, stats, expected = model_run(TINY)
    assert stats["packets"].sum() > 100
    board = run_board_rtl(TINY, settings, expected_hash=expected, clocks_per_bit=CLOCKS_PER_BIT,
                          sim=sim, out_dir=tmp_path)
    assert board["text"] == report_text(TINY, stats, expected)
    assert (board["finished"], board["mismatch"], board["running"]) == (1, 0, 0)


def test_a_fault_lights_the_mismatch_led(tmp_path):
    require_simulator("icarus")
    settings, stats, expected = model_run(TINY)
    board = run_board_rtl(FAULTY, settings, expected_hash=expected,
                          clocks_per_bit=CLOCKS_PER_BIT, sim="icarus", out_dir=tmp_path)
    assert (board["finished"], board["mismatch"]) == (1, 1)
    got, want = board["text"].splitlines(), report_text(TINY, stats, expected).splitlines()
    differ = [w.split()[:2] for g, w in zip(got, want) if g != w]
    # Sink 0's hash and the run hash, nothing else: every packet still arrives.
    assert differ == [["hash", "0"], ["run_hash", f"{expected:08x}"]]
    # The board's run hash is that of the sink hashes it printed, and the model's follows.
    printed = [int(line.split()[2], 16) for line in got if line.startswith("hash ")]
    _, run_hash, _, model = got[-1].split()
    assert int(run_hash, 16) == combined_hash(printed) != expected == int(model, 16)


def test_board_run_verilog_lints_clean(tmp_path):
    require_simulator("verilator")
    require_simulator("icarus")
    settings, _, expected = model_run(TINY, cycles=50)
    verilog = write_verilog(TINY, tmp_path, top="board", component=BoardRun(
        TINY, settings, expected_hash=expected, clocks_per_bit=174))
    assert_lint_clean(tmp_path, verilog, top="board")
