"""Traffic sources: the devices upstream of each switch input.

Shared by the golden model and the cocotb testbench, so that both offer
exactly the same flit in every cycle. A source keeps its generated packets
in one queue per traffic class (the wait there counts toward latency, as in
BookSim), starts the oldest packet of a class that is not paused, no earlier
than its generation cycle, and sends its flits back to back. Priority flow
control pauses a class from a cycle on; a packet already started completes.

The state is a :class:`SourceState` of arrays and the rules are compiled
functions on it, which the model's run loop calls directly; the testbench
uses them through :class:`Sources`.
"""

from collections import namedtuple

import numpy as np
from .kernel import kernel, specialise

from .traffic import Trace

__all__ = ["SourceState", "source_state", "source_offer", "source_accept", "source_pause",
           "source_next_generation", "source_busy", "Sources", "NONE"]

#: "No packet" and "no cycle" in the compiled state.
NONE = -1

SourceState = namedtuple("SourceState", [
    "order",          # packet ids grouped by (input, class), generation order within each
    "next",           # [input, class]: position in `order` of the class's oldest unsent packet
    "end",            # [input, class]: one past the class's last position in `order`
    "gen", "length", "prio",  # per packet, from the trace
    "packet",         # [input]: the packet being sent, NONE if none
    "flit",           # [input]: the index of the flit offered next
    "pending",        # [input]: packets not yet completely sent
    "paused_from", "paused_until",  # [input, class]: a pause holds in from <= cycle < until
])


def source_state(trace: Trace, ports: int, priorities: int) -> SourceState:
    """The sources of ``trace`` before cycle 0."""
    # A stable sort on a small integer key keeps generation order within
    # each (input, class) and is a radix sort in numpy.
    key = (trace.src * priorities + trace.prio).astype(np.int16)
    order = np.argsort(key, kind="stable").astype(np.int64)
    counts = np.bincount(key, minlength=ports * priorities).reshape(ports, priorities)
    end = np.cumsum(counts).reshape(ports, priorities)
    # Copies: the trace's arrays are read-only, which numba would compile apart.
    return SourceState(order=order, next=end - counts, end=end, gen=trace.gen.copy(),
                       length=trace.length.copy(), prio=trace.prio.copy(),
                       packet=np.full(ports, NONE, np.int64), flit=np.zeros(ports, np.int64),
                       pending=counts.sum(axis=1),
                       paused_from=np.zeros((ports, priorities), np.int64),
                       paused_until=np.zeros((ports, priorities), np.int64))


@kernel(inline=True)
def source_offer(s, port, cycle):
    """The packet whose flit ``s.flit[port]`` the source offers in ``cycle``, or NONE."""
    pkt = s.packet[port]
    if pkt < 0:
        for p in range(s.next.shape[1]):
            k = s.next[port, p]
            if k < s.end[port, p]:
                candidate = s.order[k]
                if s.gen[candidate] <= cycle and not (
                        s.paused_from[port, p] <= cycle < s.paused_until[port, p]):
                    # The oldest of the classes' heads: trace order is generation order.
                    if pkt < 0 or candidate < pkt:
                        pkt = candidate
        if pkt >= 0:
            s.packet[port] = pkt
            s.flit[port] = 0
    return pkt


@kernel(inline=True)
def source_accept(s, port):
    """The offered flit was transferred."""
    pkt = s.packet[port]
    s.flit[port] += 1
    if s.flit[port] == s.length[pkt]:
        s.packet[port] = NONE
        s.next[port, s.prio[pkt]] += 1         # it was its class's oldest
        s.pending[port] -= 1


@kernel(inline=True)
def source_pause(s, port, prio, start, cycles):
    """Pause class ``prio`` of ``port`` for ``cycles`` cycles from ``start`` (0: resume)."""
    s.paused_from[port, prio] = start
    s.paused_until[port, prio] = start + cycles


@kernel(inline=True)
def source_next_generation(s):
    """The earliest generation cycle of a packet not yet started at an idle input, or NONE."""
    best = NONE
    for port in range(s.next.shape[0]):
        if s.packet[port] >= 0:
            continue
        for p in range(s.next.shape[1]):
            k = s.next[port, p]
            if k < s.end[port, p]:
                g = s.gen[s.order[k]]
                if best < 0 or g < best:
                    best = g
    return best


@kernel(inline=True)
def source_busy(s):
    """A packet is part-way through being sent."""
    for port in range(s.packet.shape[0]):
        if s.packet[port] >= 0:
            return True
    return False


class _Flits:
    """``flit[port]`` as a Python int: the payload arithmetic of the testbench needs
    unbounded integers, not int64."""

    __slots__ = ("_flit",)

    def __init__(self, flit: np.ndarray):
        self._flit = flit

    def __getitem__(self, port: int) -> int:
        return int(self._flit[port])


class Sources:
    """The per-input, per-class source queues of a trace, for the testbench.

    A thin handle on :class:`SourceState` and its compiled rules.
    """

    def __init__(self, trace: Trace, ports: int, priorities: int = 8):
        self.ports = ports
        self.state = state = source_state(trace, ports, priorities)
        self.flit = _Flits(state.flit)
        # Called every cycle for every port: skip numba's per-call dispatch.
        self._offer = specialise(source_offer, state, 0, 0)
        self._accept = specialise(source_accept, state, 0)
        self._pause = specialise(source_pause, state, 0, 0, 0, 0)

    def offer(self, port: int, cycle: int) -> int:
        """The packet whose flit ``self.flit[port]`` the source offers in ``cycle``, or -1."""
        return self._offer(self.state, port, cycle)

    def accept(self, port: int) -> None:
        """The offered flit was transferred."""
        self._accept(self.state, port)

    def pause(self, port: int, prio: int, start: int, cycles: int) -> None:
        """Pause class ``prio`` of ``port`` for ``cycles`` cycles from ``start`` (0: resume)."""
        self._pause(self.state, port, prio, start, cycles)

    def idle(self, port: int) -> bool:
        """Nothing under way and nothing queued."""
        return self.state.packet[port] < 0 and self.state.pending[port] == 0

    def next_generation(self) -> int | None:
        """The earliest generation cycle of a packet not yet started, if any."""
        g = int(source_next_generation(self.state))
        return None if g < 0 else g

    def busy(self) -> bool:
        """A packet is part-way through being sent."""
        return bool(source_busy(self.state))
