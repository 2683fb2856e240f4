"""Verilog generation of the fabric's top-level blocks."""

import re
from pathlib import Path

from amaranth.back import verilog
from amaranth.lib import wiring

from ..config import FabricConfig
from ..formats.stimulus import PAGE_WORDS
from ..network.topology import LEAF, SPINE, TORUS_ROUTER
from .collective.engine import CollectiveEngine
from .collective.fabric import CollectiveFabric
from .compression import CompressionUnit
from .fabric.top import Fabric
from .packet import packet_layout
from .ports import Packed, module_ports
from .rdma.engine import RdmaEngine
from .rdma.fabric import RdmaFabric
from .rdma.hosted import HostedRdmaFabric
from .fabric.router import Router
from .skid_buffer import SkidBuffer
from .stimulus.top import Stimulus
from .switch import Switch

__all__ = ["TOPS", "tops", "default_top", "convert", "write_verilog", "verilator_build_args"]

#: Generated top-level blocks, by module name.
TOPS = {
    "switch": lambda cfg: Switch(cfg),
    "skid_buffer": lambda cfg: SkidBuffer(payload_shape=packet_layout(cfg)),
    # One endpoint's engine, for FPGA builds (as endpoint 0; the index
    # only fixes the engine's own address on the fabric).
    "rdma_engine": lambda cfg: RdmaEngine(cfg),
    # The simulation top: engines, host memories, injectors, and the switch or fabric.
    "rdma_fabric": lambda cfg: RdmaFabric(cfg),
    # The same with the hosts in hardware: a run needs no testbench per cycle.
    "rdma_hosted": lambda cfg: HostedRdmaFabric(cfg),
    # The switch, or the fabric, with hardware traffic generators and
    # statistics sinks at its endpoints; for simulators, which pay a clock cycle of
    # all of it for every read, it returns a page of words per read.
    "stimulus": lambda cfg: Stimulus(cfg, readout_words=PAGE_WORDS),
    # A fabric of routers: every router an instance of its tier's module,
    # which the same file holds once; and each tier's module alone.
    "fabric": lambda cfg: Fabric(cfg),
    TORUS_ROUTER: lambda cfg: Router(cfg, TORUS_ROUTER),
    LEAF: lambda cfg: Router(cfg, LEAF),
    SPINE: lambda cfg: Router(cfg, SPINE),
    # The gradient compression unit (section 16), independent of the fabric's parameters.
    "compression": lambda cfg: CompressionUnit(),
    # One accelerator's collective engine (section 15.8), beside its RDMA engine.
    "collective": lambda cfg: CollectiveEngine(cfg),
    # The simulation top of a collective: the RDMA top with a collective engine at every
    # accelerator in place of the testbench's hosts.
    "collective_fabric": lambda cfg: CollectiveFabric(cfg),
}


#: The tops each fabric.topology has.
_TOPOLOGY_TOPS = {
    "switch": ("switch", "skid_buffer", "rdma_engine", "rdma_fabric", "rdma_hosted", "stimulus",
               "compression", "collective", "collective_fabric"),
    "torus": ("fabric", TORUS_ROUTER, "skid_buffer", "rdma_engine", "rdma_fabric", "rdma_hosted",
              "stimulus", "compression", "collective", "collective_fabric"),
    "fat_tree": ("fabric", LEAF, SPINE, "skid_buffer", "rdma_engine", "rdma_fabric",
                 "rdma_hosted", "stimulus", "compression", "collective", "collective_fabric"),
}


def tops(cfg: FabricConfig) -> tuple[str, ...]:
    """The tops that can be generated for ``cfg``'s topology; the first is the default."""
    return _TOPOLOGY_TOPS[cfg.fabric.topology]


def default_top(cfg: FabricConfig) -> str:
    """The top generated when none is named: the switch, or the fabric."""
    return tops(cfg)[0]


def verilator_build_args(cfg: FabricConfig, top: str) -> list[str]:
    """Extra Verilator arguments to build ``top`` with: a top that holds the fabric's
    router modules (the fabric, and the stimulus and RDMA tops around it) is built with
    ``--hierarchical``, each router module compiled once (see _mark)."""
    return (["--hierarchical"] if top in ("fabric", "stimulus", "rdma_fabric", "rdma_hosted",
                                          "collective_fabric")
            and cfg.fabric.is_fabric else [])

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


def _mark(text: str, module: str, hierarchical: bool) -> str:
    """Mark the shared module ``module`` for Verilator, which would otherwise flatten a
    design and compile (and hold in memory) each of its instances apart.

    ``hierarchical``: a hierarchical block (``hier_block``), compiled once, on its own,
    by a build with ``--hierarchical`` (:func:`verilator_build_args`); else a module
    Verilator must not inline (``no_inline_module``), whose code every instance
    shares. Other tools read either mark as a comment.
    """
    mark = "hier_block" if hierarchical else "no_inline_module"
    header = re.compile(rf"^module {module}\([^;]*\);\n", re.M)
    return header.sub(lambda m: m[0] + f"  /* verilator {mark} */\n", text, count=1)


def convert(component: wiring.Component, name: str, *, src: bool = False,
            packed: bool = False) -> str:
    """The Verilog of ``component`` as a module named ``name``, one port per member
    of its signature that is a signal; with ``src``, Amaranth's ``src``
    attributes (the Python file and line of each signal and statement); with
    ``packed``, behind packed ports (:class:`~superfabric.hdl.ports.Packed`).

    Amaranth derives a top's ports from its signature itself, but stops at a
    member that is a constant (the ``ready`` of an ``always_ready`` stream);
    :func:`~superfabric.hdl.ports.module_ports` says why such a member needs
    no port, and leaves it out.
    """
    if packed:
        wrapper = Packed(component)
        return verilog.convert(wrapper, name=name, ports=[port for port, _, _ in wrapper.ports],
                               emit_src=src)
    # Given as signals, the ports keep the names and directions Amaranth gives them.
    ports = [value for _, _, value in module_ports(component.signature, component)]
    return verilog.convert(component, name=name, ports=ports, emit_src=src)


def _modules(cfg: FabricConfig, top: str, component=None) -> list:
    """(module name, component, whether Verilator builds it as a hierarchical block) of
    every module ``top``'s file holds, the top last."""
    component = TOPS[top](cfg) if component is None else component
    shared = getattr(component, "modules", {})
    return ([(name, module.build(), module.hierarchical) for name, module in shared.items()]
            + [(top, component, False)])


def write_verilog(cfg: FabricConfig, out_dir: str | Path, *, top: str | None = None,
                  src: bool = False, component: wiring.Component | None = None) -> Path:
    """Write ``out_dir/<top>.v``, ``out_dir/filelist.f`` and ``out_dir/config.json``.

    ``top`` defaults to :func:`default_top`. The file holds each module the
    top shares among its instances once (``modules``, a fabric's router tiers,
    the stimulus top's generator and sink), then the top. Returns the
    path of the Verilog file. ``src`` keeps Amaranth's ``src`` attributes
    (absolute paths of this machine's Python files, so off by default: the
    file stays the same on every machine); ``superfabric synth`` turns it on
    to name the Amaranth source of a timing path's ends. ``component`` is a top
    that is not one of :data:`TOPS` (the board run, whose ROMs hold a run's
    settings), written as module ``top``.
    """
    top = default_top(cfg) if top is None else top
    if component is None and top not in tops(cfg):
        raise ValueError(f"top = {top!r}: must be one of {', '.join(tops(cfg))} with "
                         f"fabric.topology = {cfg.fabric.topology!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    modules = _modules(cfg, top, component)
    # A hierarchical block is written with packed ports, as its instances bind them.
    text = "".join(convert(component, name, src=src, packed=hierarchical)
                   for name, component, hierarchical in modules)
    for name, _, hierarchical in modules[:-1]:
        text = _mark(text, name, hierarchical)
    path = out / f"{top}.v"
    path.write_text(_header(top, cfg) + _start_combinational(_loop_zero_init(text)))
    (out / "filelist.f").write_text(f"{path.name}\n")
    (out / "config.json").write_text(cfg.to_json() + "\n")
    return path
