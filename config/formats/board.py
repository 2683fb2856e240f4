"""What the board top prints on its UART when a run ends: the report's text and the program
that makes it (docs/architecture.md section 13.5).

The board top (``superfabric.hdl.board``) runs one stimulus run and then
reads statistics through the stimulus top's configuration port and prints
them, one line each, as lowercase hexadecimal of the statistic's width::

    superfabric stimulus run
    cycle 0 0000000003e8
    generated 0 00000000004b
    ...
    run_hash 5c1f0e2a model 5c1f0e2a

``run_hash`` is :func:`~superfabric.sim.stimulus.metrics.combined_hash` of
the sinks' hashes, which the board computes itself (CRC-32, bit-serial);
``model`` is the golden model's, built into the bitstream. Lines end in
CR LF, as a terminal wants them.

:func:`report_program` is the board's side: the text as a program of
:data:`OPCODES` that the board top executes from a ROM. The model's side,
the text from a run's statistics, is ``superfabric.sim.board.run.report_text``.
"""

from __future__ import annotations

from ..config import FabricConfig
from .stimulus import RegisterMap

__all__ = ["BANNER", "REPORT_STATS", "OPCODES", "report_lines", "report_program", "hex_digits"]

BANNER = "superfabric stimulus run"

#: The statistics printed, in order: the run's length, the generators' packets, the sinks'
#: packets and flits per class, their largest latency, hashes and error counts, and the
#: drops at every port.
REPORT_STATS = ("cycle", "generated", "packets", "flits", "latency_max", "hash", "order_errors",
                "frame_errors", "drops")

#: The board's program: ``CHAR c`` prints byte ``c``; ``LOAD a`` reads the configuration
#: port's word at ``a`` into the value register; ``HEX k`` prints its nibble ``k``;
#: ``FOLD`` shifts its low 32 bits into the run hash's CRC; ``HASH`` puts the finished
#: CRC in the value register; ``END`` stops.
OPCODES = {"CHAR": 0, "LOAD": 1, "HEX": 2, "FOLD": 3, "HASH": 4, "END": 5}


def hex_digits(bits: int) -> int:
    """Hexadecimal digits of a ``bits``-wide value."""
    return -(-bits // 4)


def report_lines(cfg: FabricConfig) -> list[tuple[str, int, int]]:
    """``(statistic, word, bits)`` of every statistics line, in order."""
    regmap = RegisterMap(cfg)
    widths = {name: (width, words) for name, width, words in regmap.stats}
    return [(name, k, widths[name][0]) for name in REPORT_STATS for k in range(widths[name][1])]


def report_program(cfg: FabricConfig, expected_hash: int) -> list[tuple[str, int]]:
    """The report as ``(opcode, argument)`` steps; the hashes are folded into the run hash
    after they are printed, sink by sink, in the order ``combined_hash`` takes them."""
    regmap = RegisterMap(cfg)
    program = []

    def text(s):
        program.extend(("CHAR", ord(c)) for c in s)

    def value(bits):
        program.extend(("HEX", k) for k in reversed(range(hex_digits(bits))))

    text(BANNER + "\r\n")
    for name, k, bits in report_lines(cfg):
        text(f"{name} {k} ")
        program.append(("LOAD", regmap.address(name, k)))
        value(bits)
        text("\r\n")
        if name == "hash":
            program.append(("FOLD", 0))
    text("run_hash ")
    program.append(("HASH", 0))
    value(32)
    text(f" model {expected_hash:08x}\r\n")
    program.append(("END", 0))
    return program
