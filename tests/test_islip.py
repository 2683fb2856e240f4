"""iSLIP (``hdl/islip.py``) against its model (``sim/islip.py``) under Amaranth's simulator,
cycle by cycle: random scheduler sizes, and around the scheduler a crossbar that drives its
requests as the switch does (complete packets per virtual output queue, inputs and outputs
busy for a packet's flits, outputs without credit, paused classes), thousands of cycles.

Amaranth's simulator re-evaluates the whole scheduler once per delta cycle, and the
scheduler's combinational depth grows with its iterations, so a cycle costs about
``iterations**2 * ports**2 * priorities`` times a constant (an 8-port, 2-class,
3-iteration scheduler takes some 35 ms a cycle). The sizes drawn here are those that run
thousands of cycles in seconds; the widest scheduler (32 ports) runs a few hundred cycles
(some 0.1 s a cycle) and one with as many iterations as ports a thousand, and schedulers of
every size are held against the model inside the whole switch by the random-configuration
campaign (``superfabric fuzz``).
"""

import random

import pytest
from amaranth.hdl import Cat

from superfabric.hdl.islip import ISLIP
from superfabric.sim.islip import NO_REQUEST, ISLIPModel

from block_stimulus import simulate

#: Cycles per case.
CYCLES = 2000
#: Largest ``iterations**2 * ports**2 * priorities`` drawn: a few seconds per case.
COST_LIMIT = 160
#: Seeds of the cases; each draws a scheduler and a traffic mix.
SEEDS = range(8)
#: Beyond the drawn sizes, with the cycles each runs: the widest scheduler, and one with as
#: many iterations as ports.
EXTREMES = {
    "widest": ({"ports": 32, "priorities": 1, "iterations": 1, "fifo": False, "load": 1.0,
                "max_flits": 2, "no_credit": 0.1, "pause": 0.0}, 300),
    "deepest": ({"ports": 4, "priorities": 2, "iterations": 4, "fifo": False, "load": 2.0,
                 "max_flits": 2, "no_credit": 0.1, "pause": 0.1}, 1000),
}


def _draw(rng: random.Random) -> dict:
    """A scheduler size within :data:`COST_LIMIT` and the traffic around it."""
    while True:
        ports = rng.randrange(2, 33)
        priorities = rng.randrange(1, 9)
        iterations = rng.randrange(1, ports + 1)
        if iterations ** 2 * ports ** 2 * priorities <= COST_LIMIT:
            break
    return {"ports": ports, "priorities": priorities, "iterations": iterations,
            "fifo": rng.random() < 0.25, "load": rng.choice([0.5, 1.0, 2.0]),
            "max_flits": rng.choice([1, 2, 4, 8]), "no_credit": rng.choice([0.0, 0.1, 0.3]),
            "pause": rng.choice([0.0, 0.05, 0.2])}


class _Crossbar:
    """What the switch puts around its scheduler, reduced to what shapes the requests.

    Per input, complete packets waiting per queue ``dst * priorities + prio`` (with
    ``fifo``, one queue in arrival order whose head alone requests); a match takes the
    packet and keeps its input and output busy while its flits cross (an output without
    credit holds the transfer a cycle longer). Each cycle the requests are those of
    :class:`~superfabric.hdl.switch.Switch`: nothing from a busy input, and no bit of a
    busy or credit-less output or of a paused (output, class).
    """

    def __init__(self, rng: random.Random, case: dict):
        self.rng, self.case = rng, case
        n, p = case["ports"], case["priorities"]
        self.queues = [[0] * (n * p) for _ in range(n)]     # islip: packets per queue
        self.fifo = [[] for _ in range(n)]                  # fifo: queues in arrival order
        self.in_busy = [0] * n                              # cycles until the input is free
        self.out_of = [None] * n                            # the output an input sends to

    def requests(self) -> list[int]:
        """This cycle's request vector of every input (bit ``dst * priorities + prio``)."""
        case, rng = self.case, self.rng
        n, p = case["ports"], case["priorities"]
        for k in range(n):
            # Offered flits per cycle over the mean packet length; above 1, queues grow.
            if rng.random() < case["load"] / max(1, case["max_flits"] / 2):
                q = rng.randrange(n * p)
                self.queues[k][q] += 1
                self.fifo[k].append(q)
        busy_out = {self.out_of[k] for k in range(n) if self.in_busy[k]}
        eligible = 0
        for q in range(n * p):
            o = q // p
            if (o not in busy_out and rng.random() >= case["no_credit"]
                    and rng.random() >= case["pause"]):
                eligible |= 1 << q
        reqs = []
        for k in range(n):
            if self.in_busy[k]:
                reqs.append(0)
            elif case["fifo"]:
                reqs.append((1 << self.fifo[k][0]) & eligible if self.fifo[k] else 0)
            else:
                reqs.append(sum(1 << q for q, count in enumerate(self.queues[k]) if count)
                            & eligible)
        return reqs

    def clock(self, matches: list) -> None:
        """The edge: matched inputs start their packets, busy ones move on."""
        p = self.case["priorities"]
        for k, match in enumerate(matches):
            if self.in_busy[k]:
                self.in_busy[k] -= self.rng.random() >= self.case["no_credit"]
            elif match is not None:
                o, prio = match
                q = o * p + prio
                self.queues[k][q] -= 1
                if self.case["fifo"]:
                    assert self.fifo[k].pop(0) == q
                self.in_busy[k] = self.rng.randrange(self.case["max_flits"])
                self.out_of[k] = o


def _levels(reqs: list[int], ports: int, priorities: int) -> list[list[int]]:
    """The model's view of the requests: the highest class input ``i`` requests toward ``o``."""
    return [[max((p for p in range(priorities) if bits >> (o * priorities + p) & 1),
                 default=NO_REQUEST) for o in range(ports)] for bits in reqs]


@pytest.mark.parametrize("seed", SEEDS)
def test_every_cycle_equals_the_model(seed):
    rng = random.Random(seed)
    _check(rng, _draw(rng), CYCLES)


@pytest.mark.slow
@pytest.mark.parametrize("name", EXTREMES)
def test_extreme_sizes_equal_the_model(name):
    case, cycles = EXTREMES[name]
    _check(random.Random(0), case, cycles)


def _check(rng: random.Random, case: dict, cycles: int) -> None:
    """Run ``case`` for ``cycles`` cycles, comparing every match with the model's."""
    n, p, iterations = case["ports"], case["priorities"], case["iterations"]
    dut = ISLIP(ports=n, priorities=p, iterations=iterations)
    model = ISLIPModel(n, p, iterations)
    crossbar = _Crossbar(rng, case)
    matched_classes, contended = set(), 0
    wrong = []

    async def testbench(ctx):
        nonlocal contended
        req = Cat(*dut.req)
        width = n * p
        for cycle in range(cycles):
            reqs = crossbar.requests()
            ctx.set(req, sum(bits << (k * width) for k, bits in enumerate(reqs)))
            want = model.match(_levels(reqs, n, p))
            got = [(ctx.get(dut.match[k].payload.output), ctx.get(dut.match[k].payload.prio))
                   if ctx.get(dut.match[k].valid) else None for k in range(n)]
            if got != want:
                wrong.append((cycle, reqs, got, want))
            matched_classes.update(m[1] for m in want if m is not None)
            # Two inputs or more asked for one output: the pointers decided.
            outputs = [o for bits in reqs for o in range(n) if bits >> (o * p) & ((1 << p) - 1)]
            contended += len(outputs) > len(set(outputs))
            crossbar.clock(want)
            await ctx.tick()

    simulate(dut, testbench)
    assert not wrong, (f"{case}: {len(wrong)} cycles differ; first (cycle, requests, RTL, "
                       f"model): {wrong[0]}")
    # The stimulus reached every class and made inputs compete for outputs.
    assert matched_classes == set(range(p)), (case, matched_classes)
    assert contended >= 50, (case, contended)
