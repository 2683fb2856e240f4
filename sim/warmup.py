"""Compiling the model's kernels before a timed run.

Its own module because it warms both the fabric's run loop and the switch's
stepping entry, and :mod:`.switch` builds on :mod:`.fabric`: living in either
would make the two import each other.
"""

import time

import numpy as np

from ..config import FabricConfig
from .fabric.top import FabricModel
from .pfc import SinkPause
from .switch import SwitchCore
from .traffic import Trace

__all__ = ["compile_kernels"]


def compile_kernels() -> float:
    """Compile the model's kernels (or load them from numba's cache); returns the seconds.

    The first run in a process pays this; :func:`~superfabric.tools.run.run_point`
    calls it first, so that a run's ``cycles_per_second`` leaves it out and
    ``compile_seconds`` reports it.
    """
    t0 = time.perf_counter()
    cfg = FabricConfig.load(preset="tiny", overrides=["pfc.enabled=true", "ecn.enabled=true"])
    one = Trace(gen=np.zeros(1, np.int64), src=np.zeros(1, np.int16), dst=np.ones(1, np.int16),
                prio=np.zeros(1, np.int8), length=np.ones(1, np.int16), tag=np.zeros(1, np.int64),
                pattern="warm-up", load=1.0, seed=0, cycles=1, packet_lengths="fixed:1")
    FabricModel(cfg).run(one, sink_pause=SinkPause(cfg, 0.5, 0))
    SwitchCore(cfg).warm()
    return time.perf_counter() - t0
