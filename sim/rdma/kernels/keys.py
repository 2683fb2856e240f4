"""The protection check and the translation of section 10.3, compiled, over the workload's
tables of every endpoint (for the engines, and through
:class:`superfabric.sim.rdma.keys.KeyTable` for the scoreboard and the metrics).

``keys`` is the workload's int64 ``[E, keys, key_columns(E)]`` array (columns
:data:`~superfabric.sim.rdma.traffic.KEY_COLUMNS`, the peer mask in int64 words of
:data:`~superfabric.sim.rdma.traffic.PEER_WORD_BITS` bits, low word first), ``pages`` the
int64 ``[E, pages]`` page tables; ``prm`` holds the masks (:func:`key_masks`, which
``engine_params`` includes).
"""

from collections import namedtuple

from ....config import FabricConfig
from ....formats import rdma_wire as wire
from ...kernel import kernel
from ..traffic import KEY_COLUMNS, PEER_WORD_BITS

__all__ = ["KeyMasks", "key_masks", "key_allowed", "key_address", "key_addresses"]

_VALID, _KEY, _VA, _WORDS, _PAGE, _ACCESS, _PEERS = (
    KEY_COLUMNS.index(c) for c in ("valid", "key", "va", "words", "page", "access", "peers"))
_VA_MASK = (1 << wire.VA_BITS) - 1
_PEER_SHIFT = PEER_WORD_BITS.bit_length() - 1
assert 1 << _PEER_SHIFT == PEER_WORD_BITS

#: The masks and shift the tables are read with.
KeyMasks = namedtuple("KeyMasks", ["key_mask", "page_mask", "page_shift", "offset_mask",
                                   "addr_mask"])


def key_masks(cfg: FabricConfig) -> KeyMasks:
    """The masks of ``cfg``'s tables: keys, pages, the page's words and the memory's."""
    rd = cfg.rdma
    return KeyMasks(key_mask=rd.keys - 1, page_mask=rd.pages - 1,
                    page_shift=(rd.page_words - 1).bit_length(), offset_mask=rd.page_words - 1,
                    addr_mask=rd.memory_words - 1)


@kernel(inline=True)
def key_allowed(keys, prm, e, key, va, words, right, peer):
    """Endpoint ``e`` lets ``[va, va + words)`` be accessed under ``key`` with ``right``
    (and, for a remote access, ``peer >= 0``, by endpoint ``peer``): ``KeyTable.allowed``."""
    x = key & prm.key_mask
    base = keys[e, x, _VA]
    if not (keys[e, x, _VALID] != 0 and keys[e, x, _KEY] == key and keys[e, x, _ACCESS] & right
            and va >= base and va - base + words <= keys[e, x, _WORDS]):
        return False
    if peer < 0:
        return True
    return (keys[e, x, _PEERS + (peer >> _PEER_SHIFT)] >> (peer & (PEER_WORD_BITS - 1))) & 1 != 0


@kernel(inline=True)
def key_address(keys, pages, prm, e, key, v):
    """The host memory address of virtual address ``v`` in the region of ``key`` at
    endpoint ``e``: one word of ``KeyTable.addresses`` (the entry is not checked; the
    address wraps modulo the memory)."""
    x = key & prm.key_mask
    o = (v - keys[e, x, _VA]) & _VA_MASK
    page = pages[e, (keys[e, x, _PAGE] + (o >> prm.page_shift)) & prm.page_mask]
    return ((page << prm.page_shift) | (o & prm.offset_mask)) & prm.addr_mask


@kernel
def key_addresses(keys, pages, prm, e, key, va, out):
    """:func:`key_address` of ``va``, ``va + 1``, ... into every element of ``out``."""
    for k in range(len(out)):
        out[k] = key_address(keys, pages, prm, e, key, va + k)
