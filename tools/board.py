"""``superfabric board``: a bitstream of the stimulus top for a real ECP5 board.

The run (pattern, load, length, seed) is fixed at build time: the board top
(``hdl/board/``) holds its settings in a ROM, runs it once after the PLL
locks (again at each press of its button), and prints its statistics and
run hash on the UART. The golden model runs the same settings first: its
run hash is built into the bitstream, the board lights its mismatch LED when
its own differs, and ``DIR/expected-uart.txt`` is the text the UART must
print, byte for byte.

The flow is amaranth's build for the board's amaranth-boards platform (Yosys,
nextpnr-ecp5, ecppack), the tools from PyPI (``yowasp-*``), in ``DIR/build``;
nextpnr refuses a placement that misses the clock, so a bitstream meets it.
``DIR/board.json`` holds the board, clock, PLL, resources, Fmax and the run.
Section 13.5 of docs/architecture.md; docs/fpga.md tells how to load it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..config import FabricConfig
from ..sim.board.run import report_text
from ..formats.stimulus import StimulusSettings
from ..sim.stimulus.metrics import combined_hash
from ..sim.stimulus.top import StimulusModel
from .synth.eda_tool import ToolFailed, ToolMissing, find_tool

__all__ = ["BoardError", "DEFAULT_CLOCK_MHZ", "DEFAULT_BAUD", "pll_parameters", "build_board"]

#: The run's clock: what the 4-port stimulus top (``tiny``) meets on an LFE5U-85F, speed 6.
DEFAULT_CLOCK_MHZ = 20.0
DEFAULT_BAUD = 115_200
#: The ECP5 PLL's output range, MHz (Lattice TN1263).
PLL_RANGE_MHZ = (3.125, 400.0)


class BoardError(ValueError):
    """Bad board input (board, FPGA size, clock, baud); one line."""


def pll_parameters(in_mhz: float, out_mhz: float) -> dict:
    """The ECP5 PLL's divisors for ``out_mhz`` from ``in_mhz``, as ``yowasp-ecppll`` (Project
    Trellis's calculator) chooses them: ``CLKI_DIV``, ``CLKFB_DIV``, ``CLKOP_DIV``,
    ``CLKOP_CPHASE``, and ``mhz``, the frequency they give (the nearest it can make)."""
    exe = find_tool("ecppll")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pll.v"
        # Relative: the WebAssembly build sees the working directory, not every path.
        done = subprocess.run([exe, "-i", f"{in_mhz:g}", "-o", f"{out_mhz:g}", "-f", out.name],
                              capture_output=True, text=True, cwd=tmp)
        if done.returncode or not out.exists():
            raise ToolFailed(f"ecppll: no PLL for {out_mhz:g} MHz from {in_mhz:g} MHz: "
                             f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")
        text = out.read_text()
    params = {name: int(value) for name, value in
              re.findall(r"\.(CLKI_DIV|CLKFB_DIV|CLKOP_DIV|CLKOP_CPHASE)\((\d+)\)", text)}
    params["mhz"] = in_mhz * params["CLKFB_DIV"] / params["CLKI_DIV"]
    return params


def _check(board: str, fpga: str | None, clock_mhz: float, baud: int):
    from ..hdl.board.top import BOARDS
    if board not in BOARDS:
        raise BoardError(f"--board = {board!r}: must be one of {', '.join(BOARDS)}")
    sizes = BOARDS[board].platforms
    if fpga is not None and fpga not in sizes:
        raise BoardError(f"--fpga = {fpga!r}: the {board} comes with {', '.join(sizes)}")
    if not PLL_RANGE_MHZ[0] <= clock_mhz <= PLL_RANGE_MHZ[1]:
        raise BoardError(f"--clock-mhz = {clock_mhz:g}: must be within the ECP5 PLL's "
                         f"{PLL_RANGE_MHZ[0]:g}..{PLL_RANGE_MHZ[1]:g} MHz")
    if not 300 <= baud <= clock_mhz * 1e6 / 16:
        raise BoardError(f"--baud = {baud}: must be 300..{clock_mhz * 1e6 / 16:,.0f} (16 clock "
                         f"cycles per bit at least)")
    return BOARDS[board]


def _nextpnr_figures(log: Path) -> dict:
    """Fmax and the utilisation lines of nextpnr's log (the last, routed, report)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    fmax = re.findall(r"Max frequency for clock\s+'[^']*':\s*([\d.]+) MHz "
                      r"\(([A-Z]+) at ([\d.]+) MHz\)", text)
    used = {name: int(n) for name, n in re.findall(r"Info:\s+(\w+):\s+(\d+)/\s*\d+", text)}
    return {"fmax_mhz": float(fmax[-1][0]) if fmax else None,
            "timing": fmax[-1][1] if fmax else None,
            "constraint_mhz": float(fmax[-1][2]) if fmax else None,
            "resources": {k: used[k] for k in ("TRELLIS_COMB", "TRELLIS_FF", "DP16KD",
                                              "EHXPLLL") if k in used}}


def build_board(cfg: FabricConfig, settings: StimulusSettings, out_dir: str | Path, *,
                board: str, fpga: str | None = None, clock_mhz: float = DEFAULT_CLOCK_MHZ,
                baud: int = DEFAULT_BAUD, bitstream: bool = True, stream=sys.stderr) -> dict:
    """Run the model, write ``expected-uart.txt``, and (with ``bitstream``) build the board
    top in ``out_dir/build``; returns what ``board.json`` holds."""
    from ..hdl.board.run import BoardRun
    from ..hdl.board.top import BoardTop
    from ..hdl.verilog import convert
    from ..tb.runner import activity

    spec = _check(board, fpga, clock_mhz, baud)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stats = StimulusModel(cfg).run(settings)
    expected = combined_hash(stats["hash"])
    (out / "expected-uart.txt").write_text(report_text(cfg, stats, expected), newline="")
    platform = spec.platform(fpga)
    oscillator = platform.lookup(spec.clock, 0).clock.frequency / 1e6
    pll = pll_parameters(oscillator, clock_mhz)
    clock_hz = pll["mhz"] * 1e6
    run = BoardRun(cfg, settings, expected_hash=expected,
                   clocks_per_bit=round(clock_hz / baud))
    for name, module in run.modules.items():
        platform.add_file(f"{name}.v", convert(module.build(), name, packed=module.hierarchical))
    result = {
        "board": board, "fpga": fpga or spec.default_size, "device": platform.device,
        "package": platform.package, "speed": platform.speed,
        "clock_mhz": pll["mhz"], "oscillator_mhz": oscillator, "pll": pll, "baud": baud,
        "clocks_per_bit": round(clock_hz / baud), "connect": spec.how_to_connect,
        "load": None,
        "settings": settings.to_dict(), "config": cfg.to_dict(), "model_hash": f"{expected:08x}",
        "model_cycles": stats.cycles, "bitstream": None,
    }
    build = out / "build"
    plan = platform.prepare(BoardTop(spec, run, clock_hz=clock_hz, pll=pll), name="top")
    if bitstream:
        env = {**os.environ, "YOSYS": find_tool("yosys"),
               "NEXTPNR_ECP5": find_tool("nextpnr-ecp5"), "ECPPACK": find_tool("ecppack")}
        for program in spec.programs:
            if shutil.which(program) is None:
                raise ToolMissing(f"{program}: not on PATH; the {board} build runs it (install "
                                  f"it with: bash tools/install-debian-tools.sh {program})")
        start = time.monotonic()
        try:
            with activity(f"superfabric: building the {board} bitstream at {pll['mhz']:g} MHz in "
                          f"{build} (logs top.rpt, top.tim)", stream,
                          short=f"superfabric: building the {board} bitstream"):
                plan.execute_local(build, env=env)
        except subprocess.CalledProcessError:
            figures = _nextpnr_figures(build / "top.tim")
            if figures["timing"] == "FAIL":
                raise ToolFailed(f"nextpnr: timing not met at {pll['mhz']:g} MHz (Fmax "
                                 f"{figures['fmax_mhz']:g} MHz); lower --clock-mhz; see "
                                 f"{build / 'top.tim'}") from None
            raise ToolFailed(f"the {board} build failed; see {build / 'top.rpt'} and "
                             f"{build / 'top.tim'}") from None
        figures = _nextpnr_figures(build / "top.tim")
        if figures["timing"] != "PASS" or abs(figures["constraint_mhz"] - pll["mhz"]) > 0.01:
            # nextpnr ignores a constraint on a net it cannot find, with a warning only.
            raise ToolFailed(f"nextpnr checked no constraint of {pll['mhz']:g} MHz on the run's "
                             f"clock; see {build / 'top.tim'}")
        result.update(figures, seconds=time.monotonic() - start, bitstream=str(build / "top.bit"),
                      load=spec.load.format(bit=build / "top.bit"))
    else:
        plan.extract(build)
    (out / "board.json").write_text(json.dumps(result, indent=2) + "\n")
    return result
