"""Traffic sources: the devices upstream of each switch input.

Shared by the golden model and the cocotb testbench, so that both offer
exactly the same flit in every cycle. A source keeps its generated packets
in one queue per traffic class (the wait there counts toward latency, as in
BookSim), starts the oldest packet of a class that is not paused, no earlier
than its generation cycle, and sends its flits back to back. Priority flow
control pauses a class from a cycle on; a packet already started completes.
"""

import numpy as np

from .traffic import Trace

__all__ = ["Sources"]


class Sources:
    """The per-input, per-class source queues of a trace."""

    def __init__(self, trace: Trace, ports: int, priorities: int = 8):
        self.ports = ports
        self.length = trace.length.tolist()
        gen = trace.gen.tolist()
        prio = trace.prio.tolist()
        self._queues = [[[] for _ in range(priorities)] for _ in range(ports)]
        for pkt in np.argsort(trace.src, kind="stable").tolist():   # generation order per input
            self._queues[int(trace.src[pkt])][prio[pkt]].append(pkt)
        self._gen = gen
        self._prio = prio
        self._next = [[0] * priorities for _ in range(ports)]
        self._pending = [len(trace.src[trace.src == i]) for i in range(ports)]
        self._paused_from = [[0] * priorities for _ in range(ports)]
        self._paused_until = [[0] * priorities for _ in range(ports)]
        self.packet = [-1] * ports   # packet being sent, -1 if none
        self.flit = [0] * ports      # index of the flit offered next

    def offer(self, port: int, cycle: int) -> int:
        """The packet whose flit ``self.flit[port]`` the source offers in ``cycle``, or -1."""
        pkt = self.packet[port]
        if pkt < 0:
            best = -1
            for p, queue in enumerate(self._queues[port]):
                n = self._next[port][p]
                if n < len(queue) and self._gen[queue[n]] <= cycle and \
                        not self._paused_from[port][p] <= cycle < self._paused_until[port][p]:
                    if best < 0 or queue[n] < best:      # trace order = generation order
                        best = queue[n]
            if best >= 0:
                pkt = self.packet[port] = best
                self.flit[port] = 0
        return pkt

    def accept(self, port: int) -> None:
        """The offered flit was transferred."""
        pkt = self.packet[port]
        self.flit[port] += 1
        if self.flit[port] == self.length[pkt]:
            self.packet[port] = -1
            self._next[port][self._prio[pkt]] += 1     # it was its class's oldest
            self._pending[port] -= 1

    def pause(self, port: int, prio: int, start: int, cycles: int) -> None:
        """Pause class ``prio`` of ``port`` for ``cycles`` cycles from ``start`` (0: resume)."""
        self._paused_from[port][prio] = start
        self._paused_until[port][prio] = start + cycles

    def idle(self, port: int) -> bool:
        """Nothing under way and nothing queued."""
        return self.packet[port] < 0 and self._pending[port] == 0

    def next_generation(self) -> int | None:
        """The earliest generation cycle of a packet not yet started, if any."""
        pending = [self._gen[q[self._next[i][p]]]
                   for i in range(self.ports) if self.packet[i] < 0
                   for p, q in enumerate(self._queues[i]) if self._next[i][p] < len(q)]
        return min(pending) if pending else None

    def busy(self) -> bool:
        """A packet is part-way through being sent."""
        return any(p >= 0 for p in self.packet)
