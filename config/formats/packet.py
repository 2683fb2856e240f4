"""The packet format: the flit fields, their widths, the ECN codepoints, and a codec.

A flit's fields, LSB first, are :func:`packet_fields`; ``superfabric.hdl.packet``
builds the stream payload layout from them and ``docs/architecture.md``
section 3 gives their meaning. The testbench packs and unpacks flits with
:class:`FlitCodec`, from the same list.
"""

from ..config import FabricConfig
from ..network.topology import Topology

__all__ = ["port_bits", "length_bits", "prio_bits", "vc_bits", "hops_bits", "ECN_BITS", "NOT_ECT",
           "ECT1", "ECT0", "CE", "packet_fields", "FlitCodec"]

#: Width of the ``ecn`` field.
ECN_BITS = 2
#: ECN codepoints (RFC 3168): Not-ECT, ECT(1), ECT(0), CE.
NOT_ECT, ECT1, ECT0, CE = 0, 1, 2, 3


def port_bits(ports: int) -> int:
    """Bits of a port number (at least one)."""
    return max(1, (ports - 1).bit_length())


def length_bits(max_packet_flits: int) -> int:
    """Bits of the ``length`` field, which holds 1..max_packet_flits."""
    return max_packet_flits.bit_length()


def prio_bits(priorities: int) -> int:
    """Bits of the ``prio`` field, which holds 0..priorities-1 (at least one)."""
    return max(1, (priorities - 1).bit_length())


def vc_bits(vcs: int) -> int:
    """Bits of the ``vc`` field, which holds 0..vcs-1 (at least one)."""
    return max(1, (vcs - 1).bit_length())


def hops_bits(max_links: int) -> int:
    """Bits of the ``hops`` field, which holds 0..max_links (at least one)."""
    return max(1, max_links.bit_length())


def packet_fields(cfg: FabricConfig) -> tuple[tuple[str, int], ...]:
    """``(name, width)`` of every flit field for ``cfg``, LSB first.

    ``dst`` and ``src`` are endpoints (the switch's ports, or a fabric's
    global endpoint ids). A fabric of routers adds, above ``tag``, the
    ``vc`` a flit travels on over a link and the ``hops`` (links) it has
    crossed; the switch's layout has neither.
    """
    sw = cfg.switch
    endpoints = cfg.endpoints
    fields = (("data", sw.data_width), ("first", 1), ("last", 1),
              ("dst", port_bits(endpoints)), ("src", port_bits(endpoints)),
              ("prio", prio_bits(sw.priorities)), ("ecn", ECN_BITS),
              ("length", length_bits(sw.max_packet_flits)), ("tag", sw.tag_width))
    if not cfg.fabric.is_fabric:
        return fields
    max_links = Topology.of(cfg).max_hops - 1
    return fields + (("vc", vc_bits(cfg.fabric.vcs)), ("hops", hops_bits(max_links)))


class FlitCodec:
    """Pack and unpack payloads as Python integers, with shifts and masks taken once.

    Testbenches touch every flit, so they work on integers rather than build
    an Amaranth constant per flit.

    Parameters
    ----------
    fields
        ``(name, width)`` pairs, LSB first (:func:`packet_fields`), or an
        Amaranth ``StructLayout``, whose ``(name, field)`` pairs give their
        own offsets and widths.
    """

    def __init__(self, fields):
        self._fields, offset = {}, 0
        for name, field in fields:
            width = getattr(field, "width", field)
            offset = getattr(field, "offset", offset)
            self._fields[name] = (offset, (1 << width) - 1)
            offset += width
        #: Bits of a payload.
        self.width = offset

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

    def __contains__(self, name: str) -> bool:
        """Whether the payload has the field ``name`` (a fabric's ``vc`` and ``hops``)."""
        return name in self._fields

    def field_spec(self, name: str) -> tuple[int, int]:
        """``(offset, mask)`` of a field, for hot loops that shift and mask themselves."""
        return self._fields[name]

    def field(self, bits: int, name: str) -> int:
        """One field of a payload integer."""
        offset, mask = self._fields[name]
        return (bits >> offset) & mask
