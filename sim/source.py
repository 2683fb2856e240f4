"""Traffic sources: the devices upstream of each switch input.

Shared by the golden model and the cocotb testbench, so that both offer
exactly the same flit in every cycle. A source keeps its generated packets
in a queue (the wait there counts toward latency, as in BookSim) and sends
each packet's flits back to back, starting a packet no earlier than its
generation cycle.
"""

import numpy as np

from .traffic import Trace

__all__ = ["Sources"]


class Sources:
    """The per-input source queues of a trace."""

    def __init__(self, trace: Trace, ports: int):
        self.ports = ports
        self.length = trace.length.tolist()
        gen = trace.gen.tolist()
        order = np.argsort(trace.src, kind="stable")   # trace is sorted by generation
        counts = np.bincount(trace.src, minlength=ports)
        bounds = np.concatenate([[0], np.cumsum(counts)]).tolist()
        order = order.tolist()
        self._queue = [order[bounds[i]:bounds[i + 1]] for i in range(ports)]
        self._gen = [[gen[p] for p in q] for q in self._queue]
        self._next = [0] * ports
        self.packet = [-1] * ports   # packet being sent, -1 if none
        self.flit = [0] * ports      # index of the flit offered next

    def offer(self, port: int, cycle: int) -> int:
        """The packet whose flit ``self.flit[port]`` the source offers in ``cycle``, or -1."""
        pkt = self.packet[port]
        if pkt < 0:
            n = self._next[port]
            if n < len(self._queue[port]) and self._gen[port][n] <= cycle:
                pkt = self.packet[port] = self._queue[port][n]
                self.flit[port] = 0
        return pkt

    def accept(self, port: int) -> None:
        """The offered flit was transferred."""
        self.flit[port] += 1
        if self.flit[port] == self.length[self.packet[port]]:
            self.packet[port] = -1
            self._next[port] += 1

    def idle(self, port: int) -> bool:
        """Nothing under way and nothing queued."""
        return self.packet[port] < 0 and self._next[port] == len(self._queue[port])

    def next_generation(self) -> int | None:
        """The earliest generation cycle of a packet not yet started, if any."""
        pending = [self._gen[i][self._next[i]] for i in range(self.ports)
                   if self.packet[i] < 0 and self._next[i] < len(self._queue[i])]
        return min(pending) if pending else None

    def busy(self) -> bool:
        """A packet is part-way through being sent."""
        return any(p >= 0 for p in self.packet)
