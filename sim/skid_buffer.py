"""Golden model of :class:`superfabric.hdl.skid_buffer.SkidBuffer` (docs/architecture.md 4.1), compiled.

The RTL's output and skid registers behave exactly like a two-entry FIFO
whose ``i.ready`` ("fewer than two held") and ``o`` (the oldest held) are
read from the state at the start of the cycle. :func:`skid_ready`,
:func:`skid_pop` and :func:`skid_push` are those rules over arrays of
buffers (buffer ``g`` holds ``count[g]`` transfers, ``items[g, 0]`` the
oldest, each a row of fields); the router's cycle kernel calls them for its
inputs, and :class:`SkidBufferModel` holds one buffer for a caller outside
the kernel (the block tests).
"""

import numpy as np

from .kernel import kernel

__all__ = ["SKID_DEPTH", "skid_ready", "skid_pop", "skid_push", "SkidBufferModel"]

#: Transfers a skid buffer holds at most: its output register and its skid register.
SKID_DEPTH = 2


@kernel(inline=True)
def skid_ready(count, g):
    """``i.ready`` of buffer ``g`` in this cycle: it holds fewer than two transfers."""
    return count[g] < SKID_DEPTH


@kernel(inline=True)
def skid_pop(count, items, g):
    """``o`` of buffer ``g`` transferred: its oldest transfer leaves, the other moves up."""
    for f in range(items.shape[2]):
        items[g, 0, f] = items[g, 1, f]
    count[g] -= 1


@kernel(inline=True)
def skid_push(count, g):
    """``i`` of buffer ``g`` transferred (after any pop of the same edge); returns the
    row of ``items[g]`` the caller writes the transfer's fields into."""
    row = count[g]
    count[g] += 1
    return row


class SkidBufferModel:
    """One skid buffer: :func:`skid_ready`, :func:`skid_pop` and :func:`skid_push` on it.

    Call :meth:`ready` and :meth:`head` for the cycle, then :meth:`step` with
    what was transferred on each side. The rules track transfers by a serial
    number, as the router's kernel tracks flits by packet and index; the
    payloads (of any width) are kept beside, by that number.
    """

    __slots__ = ("_count", "_items", "_payloads", "_pushed")

    def __init__(self):
        self._count = np.zeros(1, np.int64)
        self._items = np.zeros((1, SKID_DEPTH, 1), np.int64)
        self._payloads = {}
        self._pushed = 0

    def __len__(self) -> int:
        return int(self._count[0])

    def ready(self) -> bool:
        """``i.ready`` in this cycle."""
        return bool(skid_ready(self._count, 0))

    def head(self):
        """``o.payload`` in this cycle, or ``None`` when ``o.valid`` is low."""
        return self._payloads[int(self._items[0, 0, 0])] if self._count[0] else None

    def step(self, pushed=None, popped: bool = False) -> None:
        """End the cycle: ``popped`` when ``o`` transferred, ``pushed`` the item ``i`` transferred."""
        if popped:
            del self._payloads[int(self._items[0, 0, 0])]
            skid_pop(self._count, self._items, 0)
        if pushed is not None:
            self._items[0, skid_push(self._count, 0), 0] = self._pushed
            self._payloads[self._pushed] = pushed
            self._pushed += 1
