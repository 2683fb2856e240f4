"""What every accelerator must hold after a collective: numpy's answer (section 15.5).

Reductions are computed here from the algorithm's documented order (its
``order``: per chunk, a tree whose nodes are left folds), never from the
schedule: int32 is added with wrap-around and must equal ``np.sum`` in any
order; binary32 is added in ``np.float32`` in the documented order, and
every tree must hold every accelerator exactly once.
"""

from __future__ import annotations

import numpy as np

from .schedule import REDUCING, Schedule, blocks

__all__ = ["DTYPES", "inputs", "expected", "leaves", "fold"]

#: The element types, by the names of the command line (``float32`` is ``fp32``).
DTYPES = {"int32": np.int32, "fp32": np.float32, "float32": np.float32}


def inputs(schedule: Schedule, dtype: str, rng: np.random.Generator) -> list[np.ndarray]:
    """Random buffers, one per accelerator (int32 over the whole range, so sums wrap;
    binary32 of mixed signs and magnitudes, so the order of the adds matters)."""
    n, size = schedule.accelerators, schedule.buffer
    if DTYPES[dtype] is np.int32:
        return [rng.integers(-2**31, 2**31, size, dtype=np.int64).astype(np.int32)
                for _ in range(n)]
    return [(rng.standard_normal(size) * 2.0 ** rng.integers(-8, 9, size)).astype(np.float32)
            for _ in range(n)]


def leaves(tree) -> list[int]:
    """The accelerators a reduction tree adds, in order."""
    return [tree] if isinstance(tree, int) else [a for t in tree for a in leaves(t)]


def fold(tree, data: list[np.ndarray]) -> np.ndarray:
    """A reduction tree evaluated over ``data[a]`` (one array per accelerator): a leaf is
    its accelerator's data, a node the left fold ``((t0 + t1) + t2) + ...`` of its
    children, in the arrays' own type."""
    if isinstance(tree, int):
        return data[tree]
    acc = fold(tree[0], data)
    for t in tree[1:]:
        acc = acc + fold(t, data)
    return acc


def expected(schedule: Schedule, data: list[np.ndarray], order, root: int = 0):
    """The regions to compare: ``(accelerator, lo, hi, values)``.

    ``order`` is the algorithm's reduction order (``(lo, hi, tree)`` per chunk), used for
    the reducing operations only.

    Raises
    ------
    ValueError
        A tree does not add every accelerator exactly once, or the chunks do not cover
        the message.
    """
    n, count = schedule.accelerators, schedule.elements
    out = []
    if schedule.op in REDUCING:
        total = np.zeros(count, data[0].dtype)
        covered = np.zeros(count, np.int64)
        for lo, hi, tree in order:
            if sorted(leaves(tree)) != list(range(n)):
                raise ValueError(f"elements {lo}..{hi}: the order adds {sorted(leaves(tree))}, "
                                 f"not every accelerator once")
            if total.dtype == np.int32:
                # Wrap-around adds are associative: numpy's sum, in its own order.
                total[lo:hi] = np.sum(np.stack([x[lo:hi] for x in data]), axis=0,
                                      dtype=np.int32)
            else:
                total[lo:hi] = fold(tree, [x[lo:hi] for x in data])
            covered[lo:hi] += 1
        if (covered != 1).any():
            raise ValueError(f"the order covers element {int(np.argmax(covered != 1))} "
                             f"{int(covered[covered != 1][0])} times")
        if schedule.op == "allreduce":
            return [(a, 0, count, total) for a in range(n)]
        return [(a, lo, hi, total[lo:hi]) for a, (lo, hi) in enumerate(blocks(0, count, n))]
    if schedule.op == "allgather":
        whole = np.concatenate([data[a][lo:hi] for a, (lo, hi) in
                                enumerate(blocks(0, count, n))])
        return [(a, 0, count, whole) for a in range(n)]
    if schedule.op == "broadcast":
        return [(a, 0, count, data[root][:count]) for a in range(n)]
    each = count // n
    return [(a, count + i * each, count + (i + 1) * each, data[i][a * each:(a + 1) * each])
            for a in range(n) for i in range(n) if i != a]
