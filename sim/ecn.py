"""Golden model of ECN marking at the switch's egress (the ``[ecn]`` section).

Mirrors the RTL in ``superfabric.hdl.ecn``: a backlog counter per (output,
priority) of flits stored in all input buffers, and per output a 16-bit
Galois LFSR that steps once at every packet start toward that output. The
decision is taken when a packet is scheduled, from the backlog at the start
of that cycle; it marks the packet CE only if the packet is ECN-capable.
"""

from ..config import EcnConfig
from ..lfsr import lfsr_step

__all__ = ["EcnMarker"]


class EcnMarker:
    """Backlog accounting, LFSRs, decisions and mark counters of one switch."""

    def __init__(self, ecn: EcnConfig, ports: int, priorities: int):
        self.kmin, self.kmax, self.slope = ecn.kmin, ecn.kmax, ecn.slope
        self.backlog = [0] * (ports * priorities)
        self.lfsr = [ecn.port_seed(o) for o in range(ports)]
        self.marks = [0] * (ports * priorities)

    def decide(self, output: int, queue: int) -> tuple[bool, int]:
        """The decision for a packet starting toward ``queue`` (= output * priorities + prio).

        Returns ``(mark, backlog)``; call before this cycle's backlog updates.
        """
        q = self.backlog[queue]
        r = self.lfsr[output]
        self.lfsr[output] = lfsr_step(r)
        if q >= self.kmax:
            return True, q
        if q < self.kmin:
            return False, q
        return r < ((q - self.kmin) * self.slope) >> 16, q
