"""The ports of a generated module, named and directed from its signature."""

from amaranth.hdl import Const, Value
from amaranth.lib import wiring

__all__ = ["module_ports"]


def module_ports(signature: wiring.Signature, interface) -> list[tuple[str, wiring.Flow, Value]]:
    """(name, flow, value) of each port of a module whose ports are ``interface``
    (an object of ``signature``), named as Amaranth's Verilog generator names them:
    the member's path joined by ``__``.

    A member whose value is a constant has no port. A stream with
    ``always_ready`` (or ``always_valid``) holds the constant 1 in place of
    its ``ready`` (``valid``) signal: the protocol says the wire is always
    high, so neither side needs it, and Amaranth 0.5 refuses a constant as
    a module port ("Only signals and IO ports may be added as ports"). Both
    the generator of a top (:func:`superfabric.hdl.verilog.write_verilog`)
    and an instance of a generated module (the fabric's routers) leave it out
    here, so that their port lists agree.
    """
    ports = []
    for path, member, value in signature.flatten(interface):
        value = Value.cast(value)
        if isinstance(value, Const):
            continue
        ports.append(("__".join(str(part) for part in path), member.flow, value))
    return ports
