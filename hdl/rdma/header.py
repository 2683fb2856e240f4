"""The RDMA engine's layouts in hardware, built from :mod:`superfabric.formats.rdma_wire`.

The field lists are plain data there so that RTL, model, testbench and the
connection-state arithmetic share one definition; this module turns them
into Amaranth layouts and adds the few pieces of logic that belong to the
formats themselves (the header check, PSN order).
"""

from amaranth.hdl import Cat, Const, Mux, unsigned
from amaranth.lib import data

from ...config import FabricConfig
from ...formats import rdma_wire as wire

__all__ = ["struct", "pack", "bth_layout", "reth_layout", "wr_layout", "cpl_layout", "rcpl_layout",
           "key_entry_layout", "descriptor_layout", "hcs", "psn_lt", "psn_within", "data_opcode"]


def struct(fields) -> data.StructLayout:
    """A ``StructLayout`` from a ``(name, width)`` list, LSB first."""
    return data.StructLayout({name: unsigned(width) for name, width in fields})


def bth_layout() -> data.StructLayout:
    """The base transport header, flit 0 of every RDMA packet."""
    return struct(wire.BTH_FIELDS)


def reth_layout() -> data.StructLayout:
    """The RDMA extended transport header, flit 1 of a data packet."""
    return struct(wire.RETH_FIELDS)


def wr_layout(cfg: FabricConfig) -> data.StructLayout:
    """A work request on the engine's WR stream: the wire fields plus ``dst``."""
    return struct(wire.wr_fields(cfg.endpoints))


def cpl_layout() -> data.StructLayout:
    """A send completion."""
    return struct(wire.CPL_FIELDS)


def rcpl_layout(cfg: FabricConfig) -> data.StructLayout:
    """A receive completion (SEND at the target)."""
    return struct(wire.rcpl_fields(cfg.endpoints))


def key_entry_layout(cfg: FabricConfig) -> data.StructLayout:
    """A registration table entry (section 10.3)."""
    return struct(wire.key_entry_fields(cfg))


def descriptor_layout(cfg: FabricConfig) -> data.StructLayout:
    """A window slot (one packet)."""
    return struct(wire.descriptor_fields(wire.payload_words(cfg.switch.max_packet_flits)))


def pack(fields, **values):
    """The value holding ``values`` in the layout ``fields``; missing fields are zero."""
    return Cat(*(values[name][:width] if name in values else Const(0, width)
                 for name, width in fields))


def hcs(bth, reth=None):
    """The header check of :func:`superfabric.formats.rdma_wire.hcs`, as logic."""
    word = bth & ~Const(0xFF << 16, 64)
    if reth is not None:
        word = word ^ reth
    x = word[0:8]
    for k in range(1, 8):
        x = x ^ word[8 * k:8 * k + 8]
    return x


def psn_lt(a, b):
    """``a < b`` in 24-bit serial arithmetic."""
    diff = (b - a)[:wire.PSN_BITS]
    return (diff != 0) & ~diff[wire.PSN_BITS - 1]


def psn_within(x, lo, hi):
    """``lo <= x < hi`` for PSNs closer than 2**23: offsets from ``lo`` compared."""
    return (x - lo)[:wire.PSN_BITS] < (hi - lo)[:wire.PSN_BITS]


def data_opcode(opcode, first, last):
    """The BTH opcode of a data packet from the WR opcode and its place in the message."""
    def by_place(op):
        table = {(f, la): wire.OPCODES[(op, f, la)] for f in (True, False) for la in (True, False)}
        return Mux(first, Mux(last, table[True, True], table[True, False]),
                   Mux(last, table[False, True], table[False, False]))

    return Mux(opcode == wire.OP_SEND, by_place(wire.OP_SEND), by_place(wire.OP_WRITE))
