"""Golden model of :class:`superfabric.hdl.rdma.keys.KeyTables` (section 10.3).

One endpoint's registration table and page table: the protection check of
a range under a key and the translation of its virtual addresses to host
memory addresses.
"""

import numpy as np

from ...config import FabricConfig
from ...formats import rdma_wire as wire
from .traffic import key_entry

__all__ = ["KeyTable"]

_VA_MASK = (1 << wire.VA_BITS) - 1

# Key table columns of the workload (section 10.3).
_VALID, _KEY, _VA, _WORDS, _PAGE, _ACCESS, _PEERS = range(7)


class KeyTable:
    """One endpoint's registration table and page table (section 10.3).

    ``keys`` is an int array of rows (valid, key, va, words, page, access, then the peer
    mask in int64 words, ``sim.rdma.traffic.key_entry``), indexed by ``key mod keys``;
    ``page_table`` an int array of physical page numbers.
    """

    def __init__(self, keys: np.ndarray, page_table: np.ndarray, cfg: FabricConfig):
        rd = cfg.rdma
        self._entries = [tuple(key_entry(row).values()) for row in np.asarray(keys)]
        self._pages = [int(p) for p in np.asarray(page_table)]
        self._key_mask = rd.keys - 1
        self._page_mask = rd.pages - 1
        self._shift = (rd.page_words - 1).bit_length()
        self._offset_mask = rd.page_words - 1
        self._addr_mask = rd.memory_words - 1

    def allowed(self, key: int, va: int, words: int, right: int, peer: int | None = None) -> bool:
        """The range ``[va, va + words)`` may be accessed under ``key`` with ``right``
        (and, for a remote access, by endpoint ``peer``)."""
        e = self._entries[key & self._key_mask]
        return bool(e[_VALID] and e[_KEY] == key and e[_ACCESS] & right and va >= e[_VA]
                    and va - e[_VA] + words <= e[_WORDS]
                    and (peer is None or e[_PEERS] >> peer & 1))

    def addresses(self, key: int, va: int, words: int) -> list[int]:
        """Host memory addresses of ``va .. va + words - 1`` in the region of ``key``.

        Uses the entry at ``key mod keys`` without checking it; the physical
        address keeps the memory's address bits (it wraps modulo memory_words).
        """
        e = self._entries[key & self._key_mask]
        base, page = e[_VA], e[_PAGE]
        shift, pages, low, mask = self._shift, self._pages, self._offset_mask, self._addr_mask
        out = []
        for v in range(va, va + words):
            o = (v - base) & _VA_MASK
            out.append((pages[(page + (o >> shift)) & self._page_mask] << shift | (o & low)) & mask)
        return out
