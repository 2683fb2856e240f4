"""``superfabric board``: the board top's design files for both boards (PLL, pins, the
expected report) without the FPGA tools; and, under ``make bench``, a bitstream that meets
its clock."""

import json
import re
import subprocess
import sys

import pytest

from superfabric.config import FabricConfig
from superfabric.sim.board.run import report_text
from superfabric.sim.stimulus.metrics import combined_hash
from superfabric.sim.stimulus.top import StimulusModel
from superfabric.sim.stimulus.traffic_gen import stimulus_settings

TINY = FabricConfig.load(preset="tiny")
#: Where each board's UART transmit pin and oscillator are (amaranth-boards' pin names).
PINS = {"ulx3s": ("L4", "clk25_0__io", 25), "orangecrab": ("M18", "clk_0__io", 48)}


def board(*args):
    return subprocess.run([sys.executable, "-m", "superfabric.tools.cli", "board", *args],
                          capture_output=True, text=True)


# ``synth``: the PLL's divisors come from Project Trellis's ecppll, an FPGA tool.
@pytest.mark.synth
@pytest.mark.parametrize("name", sorted(PINS))
def test_design_files_pll_pins_and_expected_report(name, tmp_path):
    res = board("--board", name, "--traffic", "hotspot:fraction=0.5,port=1", "--load", "0.4",
                "--cycles", "500", "--seed", "7", "--clock-mhz", "18", "--no-bitstream",
                "-o", str(tmp_path))
    assert res.returncode == 0, res.stderr
    info = json.loads((tmp_path / "board.json").read_text())
    tx, oscillator, osc_mhz = PINS[name]
    # The clock is the one the PLL's divisors make from the board's oscillator (18 MHz, or
    # the nearest they can: 17.86 from 25 MHz), with the voltage-controlled oscillator in
    # its 400-800 MHz range and the phase detector at 3.125 MHz or more.
    pll = info["pll"]
    assert info["oscillator_mhz"] == osc_mhz
    assert info["clock_mhz"] == osc_mhz * pll["CLKFB_DIV"] / pll["CLKI_DIV"]
    assert info["clock_mhz"] == pytest.approx(18, rel=0.01)
    assert 400 <= info["clock_mhz"] * pll["CLKOP_DIV"] <= 800
    assert osc_mhz / pll["CLKI_DIV"] >= 3.125
    assert info["clocks_per_bit"] == round(info["clock_mhz"] * 1e6 / 115_200)
    assert info["bitstream"] is None

    # The expected report is the model's, for the run asked for.
    settings = stimulus_settings(TINY, "hotspot:fraction=0.5,port=1", load=0.4, cycles=500,
                                 seed=7)
    stats = StimulusModel(TINY).run(settings)
    assert info["model_hash"] == f"{combined_hash(stats['hash']):08x}"
    assert (tmp_path / "expected-uart.txt").read_bytes() == report_text(
        TINY, stats, combined_hash(stats["hash"])).encode()

    build = tmp_path / "build"
    lpf = (build / "top.lpf").read_text()
    assert re.search(rf'LOCATE COMP "uart_0__tx__io" SITE "{tx}";', lpf)
    assert f'FREQUENCY PORT "{oscillator}" {osc_mhz * 1e6:.1f} HZ;' in lpf
    rtlil = (build / "top.il").read_text()
    assert "cell \\EHXPLLL" in rtlil
    for key in ("CLKI_DIV", "CLKFB_DIV", "CLKOP_DIV"):
        assert re.search(rf"parameter \\{key} {pll[key]}\b", rtlil), key
    # The stimulus top's shared modules go to Yosys as Verilog files of their own.
    assert {p.name for p in build.glob("*.v")} >= {"traffic_gen.v", "traffic_sink.v"}
    assert "traffic_gen.v" in (build / "top.ys").read_text()


@pytest.mark.bench
@pytest.mark.synth
def test_ulx3s_bitstream_meets_its_clock(tmp_path):
    """The whole flow (six to seven minutes): Yosys, nextpnr and ecppack from PyPI."""
    res = board("--board", "ulx3s", "--cycles", "2000", "-o", str(tmp_path))
    assert res.returncode == 0, res.stderr[-3000:]
    info = json.loads((tmp_path / "board.json").read_text())
    assert info["timing"] == "PASS" and info["constraint_mhz"] == info["clock_mhz"] == 20
    assert info["fmax_mhz"] >= 20
    assert (tmp_path / "build" / "top.bit").stat().st_size > 100_000
