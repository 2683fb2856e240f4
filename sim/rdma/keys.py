"""Golden model of :class:`superfabric.hdl.rdma.keys.KeyTables` (section 10.3), one
endpoint at a time.

One endpoint's registration table and page table: the protection check of a range under
a key and the translation of its virtual addresses to host memory addresses, for the
scoreboard, the metrics and the tests. The rule is the engines' own, compiled
(:mod:`.kernels.keys`), called from Python.
"""

import numpy as np

from ...config import FabricConfig
from .kernels.keys import key_addresses, key_allowed, key_masks

__all__ = ["KeyTable"]


class KeyTable:
    """One endpoint's registration table and page table (section 10.3).

    ``keys`` is an int array of rows (valid, key, va, words, page, access, then the peer
    mask in int64 words, ``sim.rdma.traffic.key_entry``), indexed by ``key mod keys``;
    ``page_table`` an int array of physical page numbers.
    """

    def __init__(self, keys: np.ndarray, page_table: np.ndarray, cfg: FabricConfig):
        # The kernels read every endpoint's tables: this one is endpoint 0 of one.
        self._keys = np.ascontiguousarray(keys, np.int64)[None]
        self._pages = np.ascontiguousarray(page_table, np.int64)[None]
        self._masks = key_masks(cfg)

    def allowed(self, key: int, va: int, words: int, right: int, peer: int | None = None) -> bool:
        """The range ``[va, va + words)`` may be accessed under ``key`` with ``right``
        (and, for a remote access, by endpoint ``peer``)."""
        return bool(key_allowed(self._keys, self._masks, 0, key, va, words, right,
                                -1 if peer is None else peer))

    def addresses(self, key: int, va: int, words: int) -> np.ndarray:
        """Host memory addresses of ``va .. va + words - 1`` in the region of ``key``.

        Uses the entry at ``key mod keys`` without checking it; the physical
        address keeps the memory's address bits (it wraps modulo memory_words).
        """
        out = np.empty(words, np.int64)
        key_addresses(self._keys, self._pages, self._masks, 0, key, va, out)
        return out
