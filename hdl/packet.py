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
through :class:`FlitCodec`, which takes its offsets from the layout object.
"""

from amaranth.hdl import unsigned
from amaranth.lib import data, stream

from ..config import FabricConfig
from ..formats.packet import packet_fields

__all__ = ["packet_layout", "packet_signature", "FlitCodec"]


def packet_layout(cfg: FabricConfig) -> data.StructLayout:
    """The flit payload layout for ``cfg``: :func:`~superfabric.formats.packet.packet_fields`, LSB first."""
    return data.StructLayout({name: unsigned(width) for name, width in packet_fields(cfg)})


def packet_signature(cfg: FabricConfig) -> stream.Signature:
    """The packet stream signature (``valid``/``ready``/``payload``) for ``cfg``."""
    return stream.Signature(packet_layout(cfg))


class FlitCodec:
    """Pack and unpack flit payloads as Python integers, from the layout's own offsets.

    Testbenches touch every flit, so they avoid building ``Const`` objects per
    flit and use shifts and masks taken once from the ``StructLayout``.
    """

    def __init__(self, layout: data.StructLayout):
        self.layout = layout
        self.width = layout.size
        self._fields = {name: (f.offset, (1 << f.width) - 1) for name, f in layout}

    def pack(self, **fields: int) -> int:
        """The payload integer holding ``fields`` (missing fields are zero)."""
        bits = 0
        for name, value in fields.items():
            offset, mask = self._fields[name]
            bits |= (value & mask) << offset
        return bits

    def unpack(self, bits: int) -> dict[str, int]:
        """All fields of a payload integer."""
        return {name: (bits >> offset) & mask for name, (offset, mask) in self._fields.items()}

    def field_spec(self, name: str) -> tuple[int, int]:
        """``(offset, mask)`` of a field, for hot loops that shift and mask themselves."""
        return self._fields[name]

    def field(self, bits: int, name: str) -> int:
        """One field of a payload integer."""
        offset, mask = self._fields[name]
        return (bits >> offset) & mask
