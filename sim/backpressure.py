"""Seeded sink backpressure: which egress ports are ready in which cycle.

The testbench drives ``o[k].ready`` from this pattern and the golden model
reads the same one, so a stalled sink costs the same cycles in both.
"""

import numpy as np

__all__ = ["SinkReady", "PauseSchedule"]

_BLOCK = 4096


class SinkReady:
    """Per-cycle ready mask of the egress ports.

    Each port is independently not ready with probability ``stall`` in each
    cycle. The pattern is a pure function of ``(seed, cycle)``, computed in
    blocks of cycles on demand, so runs of any length need no up-front array.

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
        self._blocks: dict[int, list[int]] = {}

    def mask(self, cycle: int) -> int:
        """Bit ``k`` set when port ``k`` is ready in ``cycle``."""
        if self.stall == 0.0:
            return self._all
        block, offset = divmod(cycle, _BLOCK)
        masks = self._blocks.get(block)
        if masks is None:
            rng = np.random.default_rng([self.seed, block])
            ready = rng.random((_BLOCK, self.ports)) >= self.stall
            weights = 1 << np.arange(self.ports, dtype=np.int64)
            masks = (ready.astype(np.int64) @ weights).tolist()
            if len(self._blocks) > 64:
                self._blocks.clear()
            self._blocks[block] = masks
        return masks[offset]


class PauseSchedule:
    """Seeded pause mask per (output, priority), as priority flow control would drive it.

    Time is cut into periods of ``period`` cycles; in each period every
    (output, priority) pair is paused with probability ``rate``. Bit
    ``dst * priorities + prio`` of :meth:`mask` is the switch's ``pause``
    input. A pure function of ``(seed, cycle)``, shared by testbench and model.
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

    def mask(self, cycle: int) -> int:
        """The pause bits in force in ``cycle``."""
        if self.rate == 0.0:
            return 0
        k = cycle // self.period
        value = self._cache.get(k)
        if value is None:
            paused = np.random.default_rng([self.seed, 1, k]).random(self.bits) < self.rate
            value = int(sum(1 << b for b in np.flatnonzero(paused).tolist()))
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[k] = value
        return value
