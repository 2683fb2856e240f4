"""The packet format: the flit fields, their widths and the ECN codepoints.

A flit's fields, LSB first, are :func:`packet_fields`; ``superfabric.hdl.packet``
builds the stream payload layout from them and ``docs/architecture.md``
section 3 gives their meaning.
"""

from ..config import FabricConfig

__all__ = ["port_bits", "length_bits", "prio_bits", "ECN_BITS", "NOT_ECT", "ECT1", "ECT0", "CE",
           "packet_fields"]

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


def packet_fields(cfg: FabricConfig) -> tuple[tuple[str, int], ...]:
    """``(name, width)`` of every flit field for ``cfg``, LSB first."""
    sw = cfg.switch
    return (("data", sw.data_width), ("first", 1), ("last", 1),
            ("dst", port_bits(sw.ports)), ("src", port_bits(sw.ports)),
            ("prio", prio_bits(sw.priorities)), ("ecn", ECN_BITS),
            ("length", length_bits(sw.max_packet_flits)), ("tag", sw.tag_width))
