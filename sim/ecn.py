"""Golden model of ECN marking at the switch's egress (the ``[ecn]`` section), compiled.

Mirrors the RTL in ``superfabric.hdl.ecn``: a backlog counter per (output,
priority) of flits stored in all input buffers, and per output a 16-bit
Galois LFSR that steps once at every packet start toward that output. The
decision is taken when a packet is scheduled, from the backlog at the start
of that cycle; it marks the packet CE only if the packet is ECN-capable.
:func:`ecn_decide` is the rule the switch model's cycle kernel calls;
:class:`EcnMarker` holds the state for a caller outside the kernel.
"""

import numpy as np

from ..config import EcnConfig
from ..formats.lfsr import lfsr_step as _lfsr_step
from .kernel import kernel

__all__ = ["lfsr_step", "ecn_decide", "EcnMarker"]

#: The one LFSR step of :mod:`superfabric.formats.lfsr`, compiled for the kernels that call it.
lfsr_step = kernel(inline=True)(_lfsr_step)


@kernel(inline=True)
def ecn_decide(backlog, lfsr, kmin, kmax, slope, output, queue):
    """The decision for a packet starting toward ``queue`` (= output * priorities + prio).

    Steps the output's LFSR and returns ``(mark, backlog)``; call before
    this cycle's backlog updates.
    """
    q = backlog[queue]
    r = lfsr[output]
    lfsr[output] = lfsr_step(r)
    if q >= kmax:
        return True, q
    if q < kmin:
        return False, q
    return r < ((q - kmin) * slope) >> 16, q


class EcnMarker:
    """Backlog accounting, LFSRs and decisions of one switch, outside the kernel."""

    def __init__(self, ecn: EcnConfig, ports: int, priorities: int):
        self.kmin, self.kmax, self.slope = ecn.kmin, ecn.kmax, ecn.slope
        self.backlog = np.zeros(ports * priorities, np.int64)
        self.lfsr = np.array([ecn.port_seed(o) for o in range(ports)], np.int64)

    def decide(self, output: int, queue: int) -> tuple[bool, int]:
        """As :func:`ecn_decide`, on this marker's state."""
        mark, q = ecn_decide(self.backlog, self.lfsr, self.kmin, self.kmax, self.slope,
                             output, queue)
        return bool(mark), int(q)
