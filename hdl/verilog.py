"""Verilog generation of the fabric's top-level blocks."""

import re
from pathlib import Path

from amaranth.back import verilog

from ..config import FabricConfig
from .packet import packet_layout
from .rdma_engine import RdmaEngine
from .rdma_fabric import RdmaFabric
from .skid_buffer import SkidBuffer
from .stimulus import Stimulus
from .switch import Switch

__all__ = ["TOPS", "write_verilog"]

#: Generated top-level blocks, by module name.
TOPS = {
    "switch": lambda cfg: Switch(cfg),
    "skid_buffer": lambda cfg: SkidBuffer(packet_layout(cfg)),
    # One endpoint's engine, for FPGA builds (as endpoint 0; the index
    # only fixes the engine's own address on the fabric).
    "rdma_engine": lambda cfg: RdmaEngine(cfg, 0),
    # The simulation top: engines, host memories, injectors and switch.
    "rdma_fabric": lambda cfg: RdmaFabric(cfg),
    # The switch with hardware traffic generators and statistics sinks.
    "stimulus": lambda cfg: Stimulus(cfg),
}

# Verilator's -Wall flags patterns that Yosys's Verilog backend writes on
# purpose; each is waived for the generated file only, with the reason:
_LINT_WAIVERS = {
    # Operands are written at their natural width and rely on Verilog's
    # (well-defined) context-determined extension and truncation; the widths
    # themselves are checked by Amaranth's typed IR before emission.
    "WIDTHEXPAND": "natural-width operands, extended by Verilog's sizing rules",
    "WIDTHTRUNC": "natural-width operands, truncated by Verilog's sizing rules",
    # Multiplexers become `case` statements over every reachable value
    # with the default assigned before the case.
    "CASEINCOMPLETE": "case statements preceded by a default assignment",
    # Registers carry their reset value as an initialiser so that simulation
    # starts in the reset state even before `rst` is pulsed.
    "PROCASSINIT": "register initialisers equal to the reset values",
    # Struct payloads are kept whole on module ports and views; a block that
    # reads only some fields leaves the other bits of those wires unread.
    "UNUSEDSIGNAL": "unread fields of struct-typed payload wires",
    # The submodules share the top's file and are written before it.
    "DECLFILENAME": "submodules written before the top module in its file",
}


_TRIGGER = re.compile(r"^(\s*)reg (\\\$auto\$verilog_backend\S*)\s+= 0;$", re.M)


def _start_combinational(text: str) -> str:
    """Give every module's combinational blocks an event at time zero under Icarus.

    Yosys writes each combinational process as ``always @*`` that reads a
    dummy register initialised to 0, meant to run the block once at start.
    Icarus Verilog applies that initialiser before the blocks wait on it,
    so a block whose inputs never change (an idle scheduler) would stay X
    for ever. Under Icarus only (``__ICARUS__``), the register goes from X
    to 0 at ``#0`` instead, which runs every such block once after all of
    them wait. Other tools see the original declaration.
    """
    return _TRIGGER.sub(
        lambda m: (f"`ifdef __ICARUS__\n{m[1]}reg {m[2]} ;\n{m[1]}initial #0 {m[2]} = 1'b0;\n"
                   f"`else\n{m[0]}\n`endif"), text)


_ZERO_INIT = re.compile(r"^(\s*)initial begin\n((?:\s*(\S+)\[\d+\] = \d+'h0+;\n)+)\s*end\n", re.M)


def _loop_zero_init(text: str) -> str:
    """Write a memory's all-zero initialiser as one loop instead of a line per word.

    Yosys spells out every word, which for the RDMA fabric's host memories
    is hundreds of thousands of lines that the simulators must compile.
    Only blocks that set every word of one memory to zero, in order, change.
    """
    count = 0

    def loop(m):
        nonlocal count
        indent, body, name = m[1], m[2], m[3]
        lines = body.strip().splitlines()
        expected = [f"{name}[{k}] =" for k in range(len(lines))]
        if [ln.strip().rsplit(" ", 1)[0] for ln in lines] != expected or len(lines) < 64:
            return m[0]
        count += 1
        var = f"zero_init_{count}"
        return (f"{indent}integer {var};\n{indent}initial for ({var} = 0; {var} < {len(lines)}; "
                f"{var} = {var} + 1) {name}[{var}] = 0;\n")
    return _ZERO_INIT.sub(loop, text)


def _header(top: str, cfg: FabricConfig) -> str:
    lines = [f"// superfabric {top}: generated from the configuration below; do not edit.",
             "// Configuration key: " + cfg.build_key,
             "// Lint waivers for the code generator's idioms (Verilator -Wall):"]
    for rule, why in _LINT_WAIVERS.items():
        lines.append(f"//   {rule}: {why}")
    lines.append("/* verilator lint_off " + " */\n/* verilator lint_off ".join(_LINT_WAIVERS) + " */")
    return "\n".join(lines) + "\n"


def write_verilog(cfg: FabricConfig, out_dir: str | Path, *, top: str = "switch") -> Path:
    """Write ``out_dir/<top>.v``, ``out_dir/filelist.f`` and ``out_dir/config.json``.

    Returns the path of the Verilog file.
    """
    if top not in TOPS:
        raise ValueError(f"top = {top!r}: must be one of {', '.join(TOPS)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    component = TOPS[top](cfg)
    text = verilog.convert(component, name=top, emit_src=False)
    path = out / f"{top}.v"
    path.write_text(_header(top, cfg) + _start_combinational(_loop_zero_init(text)))
    (out / "filelist.f").write_text(f"{path.name}\n")
    (out / "config.json").write_text(cfg.to_json() + "\n")
    return path
