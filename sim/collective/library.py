"""The collective algorithm library: which algorithm serves which operation (section 15.4).

Every algorithm offers ``build`` (the schedule), ``order`` (the reduction
order its adds follow, for the reference), ``steps`` (its documented step
count) and ``rounds`` (its alpha-beta rounds). ``plan`` builds the schedule
of one collective on one fabric, ``algo="auto"`` choosing by the alpha-beta
model (``superfabric.sim.collective.alpha_beta``).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from . import biring, dimwise, direct, halving_doubling, rings, tree
from .executor import replay
from .reference import DTYPES, expected, inputs
from .schedule import OPS, REDUCING, Schedule, elements_of

__all__ = ["ALGORITHMS", "ALGORITHM_NAMES", "SEGMENTED", "supports", "algorithm", "segment_of",
           "plan", "auto", "verify"]

#: The algorithms, in the order ``auto`` breaks ties.
ALGORITHMS = {
    "ring": rings,
    "biring": biring,
    "dimwise": dimwise,
    "dimwise-all": SimpleNamespace(OPS=dimwise.ALL_OPS, build=dimwise.build_all,
                                   order=dimwise.order_all, steps=dimwise.steps_all,
                                   rounds=dimwise.rounds_all),
    "dimwise-direct": SimpleNamespace(OPS=dimwise.OPS, build=dimwise.build_direct,
                                      order=dimwise.order_direct, steps=dimwise.steps,
                                      rounds=dimwise.rounds_direct),
    "halving-doubling": halving_doubling,
    "tree": tree,
    "direct": direct,
}
#: What ``algo`` may name.
ALGORITHM_NAMES = tuple(ALGORITHMS) + ("auto",)
#: The algorithms whose chunks are cut into pipelined segments; the tree pipelines by its
#: own segment count (section 15.4.5).
SEGMENTED = tuple(a for a in ALGORITHMS if a != "tree")


def supports(name: str, op: str, peers) -> bool:
    """Whether algorithm ``name`` can run ``op`` on ``peers``' fabric."""
    if op not in ALGORITHMS[name].OPS:
        return False
    if name.startswith("dimwise"):
        return peers.topology.kind == "torus" and len(dimwise.axes(peers)) > 0
    if name == "halving-doubling" and op in ("reducescatter", "allgather"):
        return peers.n & (peers.n - 1) == 0
    return peers.n > 1


def algorithm(name: str, op: str, peers):
    """The module (or namespace) of algorithm ``name`` for ``op``.

    Raises
    ------
    ValueError
        Unknown operation or algorithm, or a pair the fabric cannot run; one line.
    """
    if op not in OPS:
        raise ValueError(f"op = {op!r}: must be one of {', '.join(OPS)}")
    if name not in ALGORITHMS:
        raise ValueError(f"algo = {name!r}: must be one of {', '.join(ALGORITHM_NAMES)}")
    if not supports(name, op, peers):
        which = [a for a in ALGORITHMS if supports(a, op, peers)]
        raise ValueError(f"algo = {name!r} cannot run {op} on this {peers.topology.kind} of "
                         f"{peers.n} accelerators; these can: {', '.join(which)}")
    return ALGORITHMS[name]


def segment_of(name: str, segment: int) -> int:
    """The segment, in elements, algorithm ``name`` cuts its chunks into when asked for
    ``segment`` (0: whole chunks; always 0 for an algorithm not in :data:`SEGMENTED`)."""
    return segment if name in SEGMENTED else 0


def plan(peers, op: str, algo: str, nbytes: int, model=None, segment: int = 0) -> Schedule:
    """The schedule of ``op`` over ``nbytes`` per accelerator by ``algo``, its chunks in
    segments of ``segment`` elements (0: whole); ``"auto"`` takes the algorithm of least
    predicted time under ``model`` (an ``AlphaBeta``)."""
    if algo == "auto":
        algo = auto(model, peers, op, nbytes, segment)
    module, elements = algorithm(algo, op, peers), elements_of(nbytes)
    if algo in SEGMENTED:
        return module.build(peers, op, elements, segment)
    return module.build(peers, op, elements)


def auto(model, peers, op: str, nbytes: int, segment: int = 0) -> str:
    """The algorithm of least time ``model.predict`` (an ``AlphaBeta``) predicts for ``op``
    over ``nbytes`` in segments of ``segment`` elements on ``peers``' fabric (ties: the
    first in :data:`ALGORITHMS`)."""
    if model is None:
        raise ValueError("algo = 'auto' needs the alpha-beta model of the fabric")
    names = [a for a in ALGORITHMS if supports(a, op, peers)]
    if not names:
        raise ValueError(f"op = {op!r}: no algorithm runs it on {peers.n} accelerators")
    return min(names, key=lambda a: model.predict(peers, op, a, nbytes, segment=segment))


def verify(schedule: Schedule, peers, dtype: str, seed: int = 0) -> None:
    """Replay ``schedule`` eagerly and lazily on random ``dtype`` data and compare every
    accelerator's result with numpy's, bit for bit.

    Raises
    ------
    ScheduleError
        The schedule breaks a rule or deadlocks.
    AssertionError
        An accelerator ends with data other than numpy's; the message names it.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype = {dtype!r}: must be one of {', '.join(DTYPES)}")
    data = inputs(schedule, dtype, np.random.default_rng(seed))
    order = None
    if schedule.op in REDUCING:
        order = ALGORITHMS[schedule.algorithm].order(peers, schedule.op, schedule.elements)
    want = expected(schedule, data, order)
    for eager in (True, False):
        got = replay(schedule, data, eager=eager)
        for a, lo, hi, values in want:
            same = got[a][lo:hi].view(np.uint32) == values.view(np.uint32)
            if not same.all():
                replayed = "eager" if eager else "lazy"
                raise AssertionError(f"{schedule.algorithm} {schedule.op} ({replayed}): "
                                     f"accelerator {a} element {lo + int(np.argmin(same))} "
                                     f"differs from numpy's")
