"""The training trace (section 10.14.4): seeded and deterministic, shaped as documented,
every buffer freed at most once and after its allocation."""

import pytest

from superfabric.sim.pool.trace import ALLOC, FREE, PoolOp, PoolTrace, pool_trace, training_trace


def test_the_trace_is_deterministic_and_seeded():
    assert training_trace(ranks=2, seed=3) == training_trace(ranks=2, seed=3)
    assert training_trace(ranks=2, seed=3).ops != training_trace(ranks=2, seed=4).ops


def _rank0(trace, ranks):
    """Rank 0's operations: every ranks-th of the lock-step trace."""
    return trace.ops[::ranks]


def test_one_layer_one_step_in_order():
    h, f, s = 8, 32, 4
    trace = training_trace(ranks=2, seed=1, layers=1, hidden=h, heads=2, ffn=f, vocab=10,
                           seq_lengths=(s,), steps=1)
    ops = _rank0(trace, 2)
    sizes = [op.nbytes for op in ops]
    weights = [2 * 3 * h * h, 2 * h * h, 2 * h * f, 2 * f * h]
    shard = 4 * (4 * h * h + 2 * h * f) // 2
    saved = [2 * s * h, 2 * 3 * s * h, 4 * 2 * s, 2 * s * h, 2 * s * h, 2 * s * f, 2 * s * f]
    logits = 4 * s * 5
    assert sizes == weights + [shard] * 3 + saved + [logits, logits, 0] + weights \
        + [2 * s * h] + [0] * 7 + [0, 0] + [0] * 4
    kinds = [op.kind for op in ops]
    assert kinds == [ALLOC] * 16 + [FREE] + [ALLOC] * 5 + [FREE] * 13
    # The backward pass frees the saved activations in the reverse order of the forward.
    forward = [op.buffer for op in ops[7:14]]
    backward = [op.buffer for op in ops[22:29]]
    assert backward == forward[::-1]
    # Ranks run in lock step, rank 0 first, on buffers of their own.
    assert {op.buffer for op in trace.ops[1::2]}.isdisjoint({op.buffer for op in ops})


def test_the_long_lived_buffers_stay():
    trace = training_trace(ranks=4, seed=1)
    live = {op.buffer for op in trace.ops if op.kind == ALLOC} \
        - {op.buffer for op in trace.ops if op.kind == FREE}
    # Four layers of four weight matrices and three optimizer-state shards, per rank.
    assert len(live) == 4 * 4 * 7
    d = trace.describe()
    assert d["allocations"] == len({op.buffer for op in trace.ops})
    assert d["shape"]["ranks"] == 4 and d["distinct_sizes"] > 5


@pytest.mark.parametrize("call, message", [
    (lambda: pool_trace("inference", ranks=1, seed=1), "trace = 'inference'"),
    (lambda: training_trace(ranks=0, seed=1), "ranks = 0"),
    (lambda: training_trace(ranks=1, seed=1, depth=3), "unknown shape keys \\['depth'\\]"),
    (lambda: PoolTrace("x", 0, (PoolOp(FREE, 0, 0),)), "frees a buffer not allocated"),
    (lambda: PoolTrace("x", 0, (PoolOp(ALLOC, 0, 1), PoolOp(ALLOC, 0, 1))), "allocated twice"),
])
def test_bad_traces_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()
