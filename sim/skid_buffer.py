"""Golden model of :class:`superfabric.hdl.skid_buffer.SkidBuffer`."""

from collections import deque

__all__ = ["SkidBufferModel"]


class SkidBufferModel:
    """A two-entry FIFO whose ``ready`` and ``valid`` are read from the cycle's start.

    The RTL's output and skid registers behave exactly like this: ``i.ready``
    while fewer than two transfers are held, ``o.valid`` while any is held,
    the oldest first. Call :meth:`ready` and :meth:`head` for the cycle, then
    :meth:`step` with what was transferred on each side.
    """

    __slots__ = ("_items",)

    def __init__(self):
        self._items = deque()

    def __len__(self) -> int:
        return len(self._items)

    def ready(self) -> bool:
        """``i.ready`` in this cycle."""
        return len(self._items) < 2

    def head(self):
        """``o.payload`` in this cycle, or ``None`` when ``o.valid`` is low."""
        return self._items[0] if self._items else None

    def step(self, pushed=None, popped: bool = False) -> None:
        """End the cycle: ``popped`` when ``o`` transferred, ``pushed`` the item ``i`` transferred."""
        if popped:
            self._items.popleft()
        if pushed is not None:
            self._items.append(pushed)
