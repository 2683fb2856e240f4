"""Allocate/free traces of the pool (section 10.14.4): the ``training`` trace, shaped like
a data-parallel transformer training job.

A trace is a sequence of operations, each allocating a buffer (a number of bytes) or
freeing one allocated before; buffers are numbered in the order they are allocated.
Generated once from a seed, it is the same on every run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

__all__ = ["ALLOC", "FREE", "PoolOp", "PoolTrace", "TRACES", "pool_trace", "training_trace"]

ALLOC = "alloc"
FREE = "free"


class PoolOp(NamedTuple):
    """Allocate ``nbytes`` bytes for ``buffer``, or free it (``nbytes`` 0)."""
    kind: str
    buffer: int
    nbytes: int


@dataclass(frozen=True)
class PoolTrace:
    """A named, seeded sequence of :class:`PoolOp`; ``shape`` holds what it was made of."""
    name: str
    seed: int
    ops: tuple[PoolOp, ...]
    shape: dict = field(default_factory=dict)

    def __post_init__(self):
        live = set()
        for op in self.ops:
            if op.kind == ALLOC:
                if op.buffer in live or op.nbytes < 1:
                    raise ValueError(f"{op}: a buffer allocated twice, or of no bytes")
                live.add(op.buffer)
            elif op.kind == FREE and op.buffer in live:
                live.remove(op.buffer)
            else:
                raise ValueError(f"{op}: frees a buffer not allocated, or is no operation")

    def describe(self) -> dict:
        """The trace in ``results.json``: name, seed, shape, operations, allocations,
        the distinct sizes, and the peak of the bytes live at once."""
        live, peak, sizes = 0, 0, {}
        for op in self.ops:
            if op.kind == ALLOC:
                live += op.nbytes
                sizes[op.buffer] = op.nbytes
                peak = max(peak, live)
            else:
                live -= sizes[op.buffer]
        return {"name": self.name, "seed": self.seed, "shape": dict(self.shape),
                "operations": len(self.ops), "allocations": len(sizes),
                "distinct_sizes": len(set(sizes.values())), "peak_live_bytes": peak}


#: The training trace's model, by default: a four-layer slice (one pipeline stage) of a
#: small GPT (hidden 512, 8 heads, MLP 2048, a 32,000-token vocabulary), bf16 activations
#: and weights, Adam's fp32 master weights and two moments sharded over the data-parallel
#: ranks (ZeRO stage 1). On 8 ranks its peak is about 105 MiB a rank.
TRAINING_SHAPE = {"layers": 4, "hidden": 512, "heads": 8, "ffn": 2048, "vocab": 32000,
                  "micro_batch": 1, "seq_lengths": (256, 512, 768, 1024), "steps": 4}
_BF16, _FP32 = 2, 4


def training_trace(*, ranks: int, seed: int, **shape) -> PoolTrace:
    """The allocations of ``ranks`` data-parallel ranks of a transformer's training, in
    lock step (operation ``k`` of every rank, rank 0 first, then operation ``k + 1``).

    Every rank first allocates its long-lived buffers: per layer the four weight matrices
    (QKV ``3h^2``, projection ``h^2``, the MLP's ``h f`` and ``f h``, bf16) and its shard
    of the optimizer state (fp32 master weights, Adam's two moments: three buffers of
    ``4 * 12 h^2 / ranks`` bytes). Then per step, with the sequence length ``s`` drawn
    for each (step, rank) from ``seq_lengths`` (seeded), micro-batch ``b``:

    - forward, layer by layer: the activations kept for the backward pass, bf16 (the
      layer's input ``bsh``, Q, K and V ``3bsh``, the attention's softmax statistics
      ``4 b heads s`` in fp32 as FlashAttention keeps them, the attention output ``bsh``,
      the MLP's input ``bsh``, its hidden layer before and after GELU ``2 bsf``); then the
      last layer's logits over a ``vocab / ranks`` shard, fp32;
    - backward: the logits' gradient, the logits freed; per layer from the last, its
      weight gradients (the four matrices, bf16), the gradient of its input ``bsh``, then
      its activations freed in the reverse order of their allocation, and the gradient
      of the layer above's input freed;
    - optimizer step: every weight gradient freed, in the order allocated.

    The long-lived buffers stay allocated at the end.
    """
    unknown = set(shape) - set(TRAINING_SHAPE)
    if unknown:
        raise ValueError(f"training trace: unknown shape keys {sorted(unknown)}; allowed: "
                         f"{', '.join(TRAINING_SHAPE)}")
    if not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks = {ranks!r}: must be a positive integer")
    p = {**TRAINING_SHAPE, **shape}
    h, f, layers, b = p["hidden"], p["ffn"], p["layers"], p["micro_batch"]
    rng = np.random.default_rng(seed)
    lengths = rng.choice(np.asarray(p["seq_lengths"]), size=(p["steps"], ranks))
    per_rank = []
    for r in range(ranks):
        ops: list[tuple[str, str, int]] = []     # (kind, rank-local name, bytes)
        matrices = (3 * h * h, h * h, h * f, f * h)
        for layer in range(layers):
            for m, params in enumerate(matrices):
                ops.append((ALLOC, f"w{layer}.{m}", _BF16 * params))
            shard = _FP32 * sum(matrices) // ranks
            for state in ("master", "m", "v"):
                ops.append((ALLOC, f"{state}{layer}", shard))
        for step in range(p["steps"]):
            s = int(lengths[step, r])
            bsh, bsf = b * s * h, b * s * f
            saved = (("x", _BF16 * bsh), ("qkv", _BF16 * 3 * bsh),
                     ("lse", _FP32 * b * p["heads"] * s), ("attn", _BF16 * bsh),
                     ("mlp_in", _BF16 * bsh), ("fc1", _BF16 * bsf), ("gelu", _BF16 * bsf))
            tag = f"s{step}."
            for layer in range(layers):
                ops += [(ALLOC, f"{tag}{name}{layer}", n) for name, n in saved]
            logits = _FP32 * b * s * (-(-p["vocab"] // ranks))
            ops += [(ALLOC, f"{tag}logits", logits), (ALLOC, f"{tag}dlogits", logits),
                    (FREE, f"{tag}logits", 0)]
            above = f"{tag}dlogits"
            for layer in reversed(range(layers)):
                ops += [(ALLOC, f"{tag}dw{layer}.{m}", _BF16 * n) for m, n in enumerate(matrices)]
                ops.append((ALLOC, f"{tag}dx{layer}", _BF16 * bsh))
                ops += [(FREE, f"{tag}{name}{layer}", 0) for name, _ in reversed(saved)]
                ops.append((FREE, above, 0))
                above = f"{tag}dx{layer}"
            ops.append((FREE, above, 0))
            ops += [(FREE, f"{tag}dw{layer}.{m}", 0) for layer in reversed(range(layers))
                    for m in range(len(matrices))]
        per_rank.append(ops)
    numbers: dict[tuple[int, str], int] = {}
    merged = []
    for k in range(len(per_rank[0])):
        for r, ops in enumerate(per_rank):
            kind, name, nbytes = ops[k]
            if kind == ALLOC:
                numbers[r, name] = len(numbers)
            merged.append(PoolOp(kind, numbers[r, name], nbytes))
    return PoolTrace("training", seed, tuple(merged),
                     {**p, "seq_lengths": list(p["seq_lengths"]), "ranks": ranks})


#: Trace name -> generator (keyword arguments ``ranks`` and ``seed``).
TRACES = {"training": training_trace}


def pool_trace(name: str, *, ranks: int, seed: int) -> PoolTrace:
    """The trace ``name`` of :data:`TRACES` for ``ranks`` ranks."""
    if name not in TRACES:
        raise ValueError(f"trace = {name!r}: must be one of {', '.join(TRACES)}")
    return TRACES[name](ranks=ranks, seed=seed)
