"""The scan wrapper that ``superfabric synth`` places and routes around a generated block.

A switch has far more port bits than an FPGA has pins (the 8x8 default
about 1,900), and a block embedded in a larger design sees its neighbours'
registers, not pins. The wrapper gives the block exactly that: every input
bit but the clock is a flip-flop of one shift chain fed from pin
``scan_in``, and every output bit is folded into a signature register
(``signature <= outputs ^ rotate(signature)``, one LUT2 and one flip-flop
per bit, whose last bit is pin ``scan_out``). So the design needs three pins,
every port bit stays live (nothing is optimised away as constant or unread),
and the timing is register to register through the block, as in a real
design. Its cells are counted apart from the block's (``synth.json``'s
``wrapper``); it is not a test structure for a board.
"""

from __future__ import annotations

import re

__all__ = ["WRAPPER", "scan_wrapper", "top_ports"]

#: Module name of the wrapper.
WRAPPER = "scan_wrapper"

_PORT = re.compile(r"^\s*(input|output)\s+(?:\[(\d+):(\d+)\]\s+)?(\\\S+|[A-Za-z_][\w$]*)\s*;",
                   re.M)


def top_ports(verilog: str, top: str) -> list[tuple[str, str, int]]:
    """``(direction, name, width)`` of each port of module ``top``, in declaration order.

    ``verilog`` is Yosys's Verilog backend output (as Amaranth writes it):
    one ``input [msb:lsb] name;`` declaration a line.

    Raises
    ------
    ValueError
        When the module is not in the text or declares no port.
    """
    body = re.search(rf"^module {re.escape(top)}\(.*?^endmodule", verilog, re.S | re.M)
    if body is None:
        raise ValueError(f"module {top!r} not found in the generated Verilog")
    ports = [(direction, name, abs(int(msb) - int(lsb)) + 1 if msb else 1)
             for direction, msb, lsb, name in _PORT.findall(body[0])]
    if not ports:
        raise ValueError(f"module {top!r} declares no port")
    return ports


def scan_wrapper(verilog: str, top: str, *, clock: str = "clk") -> str:
    """Verilog of :data:`WRAPPER`: module ``top`` between a scan chain and a signature register.

    Parameters
    ----------
    verilog : str
        The generated Verilog holding ``top``.
    clock : str
        The block's clock input, driven from the wrapper's ``clk`` pin.
    """
    ports = top_ports(verilog, top)
    inputs = [(n, w) for d, n, w in ports if d == "input" and n != clock]
    outputs = [(n, w) for d, n, w in ports if d == "output"]
    n_in = sum(w for _, w in inputs)
    n_out = sum(w for _, w in outputs)
    connections = [f".{clock}(clk)"]
    connections += _slices(inputs, "chain")
    connections += _slices(outputs, "observed")
    # A one-bit chain or signature has no bits to shift from; pad both to two.
    n_in, n_out = max(n_in, 2), max(n_out, 2)
    lines = [
        f"// superfabric synth: {top} between a scan chain and a signature register.",
        f"module {WRAPPER}(clk, scan_in, scan_out);",
        "  input clk;", "  input scan_in;", "  output scan_out;",
        f"  reg [{n_in - 1}:0] chain;",
        f"  reg [{n_out - 1}:0] signature;",
        f"  wire [{n_out - 1}:0] observed;",
        f"  always @(posedge clk) chain <= {{chain[{n_in - 2}:0], scan_in}};",
        f"  always @(posedge clk) signature <= observed ^ "
        f"{{signature[{n_out - 2}:0], signature[{n_out - 1}]}};",
        f"  assign scan_out = signature[{n_out - 1}];",
    ]
    if n_out > sum(w for _, w in outputs):
        lines.append(f"  assign observed[{n_out - 1}:{sum(w for _, w in outputs)}] = 0;")
    lines.append(f"  {_ident(top)} core (\n    " + ",\n    ".join(connections) + "\n  );")
    lines.append("endmodule")
    return "\n".join(lines) + "\n"


def _slices(ports: list[tuple[str, int]], vector: str) -> list[str]:
    out, low = [], 0
    for name, width in ports:
        out.append(f".{_ident(name)}({vector}[{low + width - 1}:{low}])")
        low += width
    return out


def _ident(name: str) -> str:
    """A Verilog identifier; an escaped one keeps the space that ends it."""
    return f"{name} " if name.startswith("\\") else name
