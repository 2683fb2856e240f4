"""Seeded sink backpressure: which egress ports are ready in which cycle.

The testbench drives ``o[k].ready`` from this pattern and the golden model
reads the same one, so a stalled sink costs the same cycles in both. Both
patterns are pure functions of (seed, cycle), drawn in blocks: the compiled
model takes whole blocks as arrays, the testbench reads one cycle at a time.
"""

import numpy as np

__all__ = ["SinkReady", "PauseSchedule", "BLOCK"]

#: Cycles per block of the sink-ready pattern, and per call of the compiled run loop.
BLOCK = 4096


class SinkReady:
    """Per-cycle ready mask of the egress ports.

    Each port is independently not ready with probability ``stall`` in each
    cycle, drawn per block of :data:`BLOCK` cycles from
    ``default_rng([seed, block])``.

    Parameters
    ----------
    ports : int
        Number of egress ports.
    stall : float
        Probability in ``[0, 1)`` that a port is not ready in a cycle.
    seed : int
        Seed of the pattern.
    """

    def __init__(self, ports: int, stall: float = 0.0, seed: int = 0):
        if not 0.0 <= stall < 1.0:
            raise ValueError(f"sink stall = {stall!r}: must be in [0, 1)")
        self.ports = ports
        self.stall = float(stall)
        self.seed = int(seed)
        self._all = (1 << ports) - 1
        self._weights = 1 << np.arange(ports, dtype=np.int64)
        self._masks: tuple[int, list[int]] = (-1, [])

    def block(self, block: int) -> np.ndarray:
        """Ready flags of cycles ``block * BLOCK ..`` as a bool array ``[BLOCK, ports]``."""
        if self.stall == 0.0:
            return np.ones((BLOCK, self.ports), np.bool_)
        rng = np.random.default_rng([self.seed, block])
        return rng.random((BLOCK, self.ports)) >= self.stall

    def mask(self, cycle: int) -> int:
        """Bit ``k`` set when port ``k`` is ready in ``cycle``."""
        if self.stall == 0.0:
            return self._all
        block, offset = divmod(cycle, BLOCK)
        if self._masks[0] != block:
            self._masks = (block, (self.block(block).astype(np.int64) @ self._weights).tolist())
        return self._masks[1][offset]


class PauseSchedule:
    """Seeded pause mask per (output, priority), as priority flow control would drive it.

    Time is cut into periods of ``period`` cycles; in each period every
    (output, priority) pair is paused with probability ``rate``, drawn from
    ``default_rng([seed, 1, period_index])``. Bit ``dst * priorities + prio``
    of :meth:`mask` is the switch's ``pause`` input.
    """

    def __init__(self, ports: int, priorities: int, rate: float = 0.0, seed: int = 0,
                 period: int = 64):
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"pause rate = {rate!r}: must be in [0, 1)")
        if period < 1:
            raise ValueError(f"pause period = {period!r}: must be at least 1")
        self.bits = ports * priorities
        self.rate = float(rate)
        self.seed = int(seed)
        self.period = int(period)
        self._cache: dict[int, int] = {}

    def periods(self, first: int, count: int) -> np.ndarray:
        """Pause flags of periods ``first .. first + count - 1``, bool ``[count, bits]``."""
        if self.rate == 0.0:
            return np.zeros((count, self.bits), np.bool_)
        return np.array([np.random.default_rng([self.seed, 1, k]).random(self.bits) < self.rate
                         for k in range(first, first + count)], np.bool_).reshape(count, self.bits)

    def mask(self, cycle: int) -> int:
        """The pause bits in force in ``cycle``."""
        if self.rate == 0.0:
            return 0
        k = cycle // self.period
        value = self._cache.get(k)
        if value is None:
            value = int(sum(1 << b for b in np.flatnonzero(self.periods(k, 1)[0]).tolist()))
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[k] = value
        return value
