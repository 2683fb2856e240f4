"""Memory registration: the key table and page table of one endpoint (section 10.3).

Every access the engine makes to host memory goes through here: a local
read of a WR's payload under its ``lkey``, a remote write of a received
packet under the ``rkey`` it carries. A range is allowed only when the key
names a valid entry, the entry grants the right (and, for remote access,
lists the peer), and the whole range lies inside the region. That is the
protection boundary of the fabric: a peer reaches only what was registered
for it.
"""

from amaranth.hdl import Signal, Module, Cat
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In

from ...config import FabricConfig
from ...formats import rdma_wire as wire
from .header import key_entry_layout
from ..checks import check_config

__all__ = ["KeyTables", "TABLE_WRITE", "table_width"]


def _bits(n: int) -> int:
    return max(1, (n - 1).bit_length())


def table_width(cfg: FabricConfig) -> int:
    """Bits of the table write port's data: a key entry or a physical page number."""
    return max(key_entry_layout(cfg).size, _bits(cfg.rdma.memory_words // cfg.rdma.page_words))


def TABLE_WRITE(cfg: FabricConfig) -> wiring.Signature:
    """The table write port: ``sel`` 0 writes key entry ``index``, 1 page entry ``index``."""
    width = table_width(cfg)
    return wiring.Signature({"en": wiring.Out(1), "sel": wiring.Out(1), "index": wiring.Out(16),
                             "data": wiring.Out(width)})


class KeyTables(wiring.Component):
    """Key and page tables with combinational lookups.

    Each :meth:`lookup` adds a read port on both tables and returns a
    :class:`Lookup` whose ``check`` and ``translate`` build the logic for
    one access path. The tables are asynchronous-read memories, so a
    check and a translation complete in the cycle their inputs appear.
    """

    def __init__(self, cfg: FabricConfig):
        check_config(cfg)
        self._cfg = cfg
        self._entry = key_entry_layout(cfg)
        self._ppn_bits = _bits(cfg.rdma.memory_words // cfg.rdma.page_words)
        self.keys = Memory(shape=self._entry, depth=cfg.rdma.keys, init=[])
        self.pages = Memory(shape=self._ppn_bits, depth=cfg.rdma.pages, init=[])
        super().__init__({"write": In(TABLE_WRITE(cfg))})

    def lookup(self, m: Module, key, name: str) -> "Lookup":
        """A lookup path for ``key``; ``m`` is the module that uses it."""
        return Lookup(self, m, key, name)

    def elaborate(self, platform):
        m = Module()
        m.submodules.keys = self.keys
        m.submodules.pages = self.pages
        kw = self.keys.write_port()
        pw = self.pages.write_port()
        m.d.comb += [
            kw.addr.eq(self.write.index), kw.data.eq(self.write.data[:self._entry.size]),
            kw.en.eq(self.write.en & (self.write.sel == 0)),
            pw.addr.eq(self.write.index), pw.data.eq(self.write.data[:self._ppn_bits]),
            pw.en.eq(self.write.en & (self.write.sel == 1)),
        ]
        return m


class Lookup:
    """One read path through the key table (and the page table)."""

    def __init__(self, tables: KeyTables, m: Module, key, name: str):
        cfg = tables._cfg
        self._m, self._cfg, self._name = m, cfg, name
        self._tables = tables
        self._key = key
        port = tables.keys.read_port(domain="comb")
        m.d.comb += port.addr.eq(key)
        self.entry = port.data

    def check(self, va, words, right: int, peer=None):
        """The range ``[va, va + words)`` is allowed for ``right`` (and ``peer``)."""
        e = self.entry
        offset = Signal(wire.VA_BITS + 1, name=f"{self._name}_offset")
        self._m.d.comb += offset.eq(va - e.va)
        ok = (e.valid & (e.key == self._key) & ((e.access & right) != 0)
              & (va >= e.va) & (offset + words <= e.words))
        if peer is not None:
            ok = ok & e.peers.bit_select(peer, 1)
        return ok

    def translate(self, va):
        """The physical word address of ``va`` in this key's region."""
        cfg = self._cfg.rdma
        shift = (cfg.page_words - 1).bit_length()
        e = self.entry
        offset = Signal(wire.VA_BITS, name=f"{self._name}_va_offset")
        self._m.d.comb += offset.eq(va - e.va)
        port = self._tables.pages.read_port(domain="comb")
        self._m.d.comb += port.addr.eq(e.page + (offset >> shift))
        pa = Signal(range(cfg.memory_words), name=f"{self._name}_pa")
        self._m.d.comb += pa.eq(Cat(offset[:shift], port.data))
        return pa
