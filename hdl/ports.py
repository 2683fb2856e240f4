"""The ports of a generated module, named and directed from its signature, and the
modules a top writes once and instances many times."""

from dataclasses import dataclass
from typing import Callable

from amaranth.hdl import (Cat, ClockDomain, ClockSignal, Const, DomainRenamer, Elaboratable,
                          Instance, Module, ResetSignal,
                          Signal, Value)
from amaranth.lib import wiring
from amaranth.lib.wiring import In

__all__ = ["module_ports", "Packed", "SharedModule", "instance", "add_instance", "stream_wires",
           "behind_registered_reset"]


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
    return [(_name(path), flow, value) for path, flow, value in _leaves(signature, interface)]


def _name(path, *, indices: bool = True) -> str:
    """A port's name from its member path, as Amaranth's Verilog generator joins it;
    without ``indices``, the name of the packed port that holds it (:class:`Packed`)."""
    return "__".join(str(part) for part in path if indices or not isinstance(part, int))


def _leaves(signature: wiring.Signature, interface):
    """(path, flow, value) of each port of :func:`module_ports`."""
    leaves = []
    for path, member, value in signature.flatten(interface):
        value = Value.cast(value)
        if not isinstance(value, Const):
            leaves.append((path, member.flow, value))
    return leaves


def _pack(leaves):
    """The packed ports (:class:`Packed`) of ``leaves`` ((path, flow, value)): (name, flow,
    values), one port for each member and each signal of a stream or interface member,
    an array's elements side by side in index order (element 0 at the low bits:
    ``link_i__payload`` holds every ``link_i[k].payload``)."""
    groups = {}
    for path, flow, value in leaves:
        name = _name(path, indices=False)
        group = groups.setdefault(name, (flow, []))
        assert group[0] == flow, name
        group[1].append(value)
    return [(name, flow, values) for name, (flow, values) in groups.items()]


class Packed(Elaboratable):
    """``component`` behind packed ports (:func:`_pack`), as the module that a
    Verilator hierarchical block is written as.

    Verilator builds a hierarchical block apart and calls it from its parent through a
    generated function of one argument per port, with a temporary and copies per port,
    for every instance; a fabric's router has about a hundred ports, and with a port per
    element the 8x8x6 torus's stimulus top's own C++ was 168 MB (128 MB packed). Packed,
    an array of ports is one argument. The component is the submodule ``core``.
    """

    def __init__(self, component: wiring.Component):
        self.core = component
        self.ports = [(Signal(len(Cat(*values)), name=name), flow, values)
                      for name, flow, values in _pack(_leaves(component.signature, component))]

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = self.core
        for port, flow, values in self.ports:
            m.d.comb += Cat(*values).eq(port) if flow == In else port.eq(Cat(*values))
        return m


@dataclass(frozen=True)
class SharedModule:
    """A block that a top's Verilog file holds once, as a module of its own, and that
    the top instances wherever it uses the block (a fabric's routers of one tier, the
    stimulus top's generators and sinks, the RDMA top's engines, fault injectors and
    host memories).

    Written once, the block is elaborated and converted once, whatever the number of
    its instances, and the Verilog of a fabric of hundreds of endpoints stays small.

    Attributes
    ----------
    signature : wiring.Signature
        The block's ports: :meth:`~amaranth.lib.wiring.Signature.create` gives the
        interface that a top wires and binds to an :func:`instance`.
    build : callable
        Makes the block's component, for the Verilog generator to write the module
        (called once per file).
    hierarchical : bool
        Verilator builds the module as a hierarchical block of its own
        (``--hierarchical``), compiled apart from the top, written and instanced with
        packed ports (:class:`Packed` says why); else as a module it
        must not inline, whose code its instances share. Verilator cannot see inside
        a hierarchical block, so it takes every output to depend on every input, and a
        stream's ``ready`` answering its ``valid`` across two of them reads as a
        combinational loop (``UNOPTFLAT``), evaluated until it settles. A fabric's
        routers are linked through registers. A generator or a sink meets its router's
        ports directly and is a module of the top, small whatever the fabric. An RDMA
        engine meets them too, through its fault injector, but is hierarchical on a
        fabric: its Verilog grows with the endpoints (section 10.15), and with every
        engine's logic held apart a 64-endpoint top does not build in 23.5 GiB.
    """

    signature: wiring.Signature
    build: Callable[[], wiring.Component]
    hierarchical: bool = False


def instance(module: str, signature: wiring.Signature, ports, wires=None, *,
             packed: bool = False) -> Instance:
    """An instance of the generated module ``module``, its ports bound to the interface
    ``ports`` (of ``signature``) by the names the Verilog generator gives them.

    ``wires`` maps some of those names to wires of the top that the ports drive, or
    read, themselves, in place of the interface's signals: a port assigned to a wire
    of the same width would be a second copy of it, and in a fabric of hundreds of
    routers such copies are a third of the top that the generator has to build.

    ``packed``: the module was written with :class:`Packed`; ``wires`` still names the
    ports as :func:`module_ports` does, and each packed port is bound to the
    concatenation of its elements' wires.
    """
    wires = {} if wires is None else wires
    leaves, names = [], set()
    for path, flow, value in _leaves(signature, ports):
        name = _name(path)
        wire = Value.cast(wires.get(name, value))
        if len(wire) != len(value):
            raise ValueError(f"wires[{name!r}] is {len(wire)} bits wide, not {len(value)} like "
                             f"the port of module {module!r}")
        leaves.append((path, flow, wire))
        names.add(name)
    unknown = set(wires) - names
    if unknown:
        raise ValueError(f"wires = {sorted(unknown)!r}: not ports of module {module!r}")
    bound = ([(name, flow, Cat(*values)) for name, flow, values in _pack(leaves)] if packed
             else [(_name(path), flow, wire) for path, flow, wire in leaves])
    return Instance(module, ("i", "clk", ClockSignal()), ("i", "rst", ResetSignal()),
                    *(("i" if flow == In else "o", name, value) for name, flow, value in bound))


def add_instance(m, modules: dict[str, SharedModule], module: str, name: str, wires=None):
    """Add to ``m`` an instance ``name`` of the shared module ``module`` (one of the top's
    ``modules``), the ports named in ``wires`` bound to its wires (as :func:`instance`);
    returns its interface, for the top to wire the others."""
    signature = modules[module].signature
    ports = signature.create(path=(name,))
    m.submodules[name] = instance(module, signature, ports, wires,
                                  packed=modules[module].hierarchical)
    return ports


def stream_wires(port: str, interface) -> dict[str, Value]:
    """The signals of the stream ``interface`` by the names of a module's stream port
    ``port`` (``payload``, ``valid`` and ``ready`` after it): :func:`instance`'s ``wires``
    for a port that drives, or reads, a stream of the top."""
    return {f"{port}__{name}": Value.cast(getattr(interface, name))
            for name in ("payload", "valid", "ready")}


def behind_registered_reset(body, domain: str) -> Module:
    """``body``, an elaboratable of the ``sync`` domain, as submodule ``domain`` of a module
    whose reset reaches it through a register, a cycle late: logic that depends
    combinationally on a top-level input is evaluated by a simulator at every evaluation
    (both clock edges, and each of cocotb's callbacks), and through the reset of each
    register that would be all of it. The tops whose runs need no testbench per cycle (the
    stimulus top, the hosted RDMA top) register their other inputs too."""
    m = Module()
    rst = Signal(init=1, reset_less=True)
    m.d.sync += rst.eq(ResetSignal())
    inner = ClockDomain(domain, local=True)
    m.domains += inner
    m.d.comb += [inner.clk.eq(ClockSignal()), inner.rst.eq(rst)]
    m.submodules[domain] = DomainRenamer(domain)(body)
    return m
