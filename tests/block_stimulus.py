"""Stimulus for block tests under Amaranth's simulator.

The blocks that count buffered flits (ECN's backlog per (output, class), PFC's occupancy
per (input, class)) see only the flits the switch writes into and reads out of its input
buffers; :class:`BufferTraffic` makes those events the way
:class:`~superfabric.hdl.switch.Switch` does. :func:`drive` sets many inputs at once;
:func:`simulate` runs a testbench on a block.
"""

import random
from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Value
from amaranth.sim import Simulator

__all__ = ["BufferCycle", "BufferTraffic", "drive", "simulate"]


def simulate(dut, testbench) -> None:
    """Run the async ``testbench`` on ``dut`` with a clock, to its end."""
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()


def drive(ctx, values) -> None:
    """Set every ``(signal, value)`` of ``values`` in one step.

    A testbench's ``ctx.set`` settles the design each time, and a large block settles
    slowly; one assignment to the concatenation settles it once.
    """
    signals, word, offset = [], 0, 0
    for signal, value in values:
        if not isinstance(value, int):
            # A struct's fields, as ctx.set would take them.
            value = Const.cast(signal.shape().const(value)).value
        signal = Value.cast(signal)
        signals.append(signal)
        width = len(signal)
        word |= (int(value) & ((1 << width) - 1)) << offset
        offset += width
    ctx.set(Cat(*signals), word)


@dataclass
class BufferCycle:
    """One cycle's events per input ``k``: the queue ``dst * priorities + prio`` of the flit
    written (``wr[k]``) and read (``rd[k]``), None for none; ``starts[k]``, the queue of a
    packet whose head is read this cycle (then also ``rd[k]``)."""

    wr: list
    rd: list
    starts: dict


class BufferTraffic:
    """Packets written flit by flit into each input buffer and read out flit by flit.

    A packet is admitted only when all its flits fit the buffer (backpressure), is written
    one flit per cycle unless the source stalls (probability ``stall``), and once complete
    may start: a free input (its previous packet read to the tail) starts one complete
    packet toward an output that no other input feeds or starts toward in that cycle (a
    matching, as the scheduler's), reading its head that cycle and then one flit per cycle
    unless the output lacks credit (probability ``no_credit``).
    The offered load is ``load`` for ``period`` cycles and none for the next ``period``, so
    buffers fill and drain again and again; a ``hotspot`` share of the packets goes to
    queue ``hot_queue``, the rest to queues drawn uniformly.
    """

    def __init__(self, rng: random.Random, *, ports: int, priorities: int, buffer_flits: int,
                 max_flits: int, load: float, stall: float, no_credit: float,
                 hotspot: float = 0.0, hot_queue: int = 0, period: int = 300):
        self.rng = rng
        self.ports, self.priorities = ports, priorities
        self.buffer_flits, self.max_flits = buffer_flits, max_flits
        self.load, self.stall, self.no_credit = load, stall, no_credit
        self.hotspot, self.hot_queue, self.period = hotspot, hot_queue, period
        self.cycle = 0
        self.reserved = [0] * ports           # flits admitted and not yet read
        self.writing = [None] * ports         # (queue, flits left to write)
        self.complete = [[] for _ in range(ports)]   # (queue, length) ready to start
        self.reading = [None] * ports         # (queue, flits left to read)
        self.length = [0] * ports             # of the packet being written

    def next(self) -> BufferCycle:
        """The events of the next cycle."""
        rng, n = self.rng, self.ports
        offered = self.load if (self.cycle // self.period) % 2 == 0 else 0.0
        self.cycle += 1
        wr, rd, starts = [None] * n, [None] * n, {}
        for k in range(n):
            if self.writing[k] is None and rng.random() < offered * 2 / (self.max_flits + 1):
                length = rng.randrange(1, self.max_flits + 1)
                if self.reserved[k] + length <= self.buffer_flits:
                    self.reserved[k] += length
                    hot = rng.random() < self.hotspot
                    q = self.hot_queue if hot else rng.randrange(n * self.priorities)
                    self.writing[k] = (q, length)
                    self.length[k] = length
            if self.writing[k] is not None and rng.random() >= self.stall:
                q, left = self.writing[k]
                wr[k] = q
                self.writing[k] = (q, left - 1) if left > 1 else None
                if left == 1:
                    self.complete[k].append((q, self.length[k]))
        fed = {q // self.priorities for q, _ in filter(None, self.reading)}
        for k in rng.sample(range(n), n):
            if self.reading[k] is not None:
                q, left = self.reading[k]
                if rng.random() >= self.no_credit:
                    rd[k] = q
                    self.reading[k] = (q, left - 1) if left > 1 else None
                    self.reserved[k] -= 1
                continue
            waiting = [j for j, (q, _) in enumerate(self.complete[k])
                       if q // self.priorities not in fed]
            if waiting and rng.random() >= self.no_credit:
                q, length = self.complete[k].pop(rng.choice(waiting))
                starts[k] = rd[k] = q
                fed.add(q // self.priorities)
                self.reading[k] = (q, length - 1) if length > 1 else None
                self.reserved[k] -= 1
        return BufferCycle(wr, rd, starts)
