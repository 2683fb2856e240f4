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
from amaranth.lib import data, stream

from ..config import FabricConfig
from ..formats.packet import packet_fields

__all__ = ["packet_layout", "packet_signature"]


def packet_layout(cfg: FabricConfig) -> data.StructLayout:
    """The flit payload layout for ``cfg``: the fields of
    :func:`~superfabric.formats.packet.packet_fields`, LSB first."""
    return data.StructLayout({name: unsigned(width) for name, width in packet_fields(cfg)})


def packet_signature(cfg: FabricConfig) -> stream.Signature:
    """The packet stream signature (``valid``/``ready``/``payload``) for ``cfg``."""
    return stream.Signature(packet_layout(cfg))
