"""The packet format of the fabric: one stream, one flit per transfer.

A packet is a run of flits on an :mod:`amaranth.lib.stream` interface whose
payload is :func:`packet_layout`. ``first`` and ``last`` frame the packet.
The header fields (``dst``, ``src``, ``prio``, ``ecn``, ``length``, ``tag``)
travel as sideband on every flit and are defined on the first one: blocks
read them there (the switch routes and reserves buffer space from the head
flit), and a source should hold them constant for the rest of the packet so
that a waveform reads naturally. The fields and their widths are
:func:`superfabric.formats.packet.packet_fields`, their meaning is in
``docs/architecture.md`` section 3; the testbench packs and unpacks flits
with :class:`superfabric.formats.packet.FlitCodec`, from the same list.
"""

from amaranth.hdl import unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import Out

from ..config import FabricConfig
from ..formats.packet import packet_fields

__all__ = ["packet_layout", "packet_signature", "link_signature", "credit_signature", "pools"]


def packet_layout(cfg: FabricConfig) -> data.StructLayout:
    """The flit payload layout for ``cfg``: the fields of
    :func:`~superfabric.formats.packet.packet_fields`, LSB first."""
    return data.StructLayout({name: unsigned(width) for name, width in packet_fields(cfg)})


def packet_signature(cfg: FabricConfig) -> stream.Signature:
    """The packet stream signature (``valid``/``ready``/``payload``) for ``cfg``."""
    return stream.Signature(packet_layout(cfg))


def link_signature(cfg: FabricConfig) -> stream.Signature:
    """A router-to-router flit channel: a packet stream that is always ready,
    because the sender's credits guarantee the room (docs/architecture.md 11.3);
    the generated modules have no port for its constant ``ready``."""
    return stream.Signature(packet_layout(cfg), always_ready=True)


def pools(cfg: FabricConfig) -> int:
    """Buffer pools of a link input, one per (class, VC): pool ``prio * vcs + vc``."""
    return cfg.switch.priorities * cfg.fabric.vcs


def credit_signature(cfg: FabricConfig) -> wiring.Signature:
    """The reverse channel of a link: ``valid`` returns one credit of ``pool``."""
    return wiring.Signature({"valid": Out(1), "pool": Out(range(max(pools(cfg), 2)))})
