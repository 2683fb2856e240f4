"""``superfabric train``: data-parallel training whose gradients go through the model's
compressed all-reduce (docs/spec/compression.md section 16.7).

A softmax regression (multinomial logistic regression: 64 pixels to 10
classes, 650 parameters) on scikit-learn's bundled digits (1,797 images of
8x8 pixels, no download), split into training and test sets by the seed.
Every step takes a batch of the training set; each accelerator of a torus
of ``accelerators`` computes the gradient of its shard of the batch; the
gradients are all-reduced (``sim.collective.compressed``), with an
error-feedback residual per accelerator for int4, and the sum, the batch's
mean gradient, updates the weights every accelerator holds alike. Writes
``results.json`` and ``loss.png``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..network.topology import Topology
from ..sim.collective.compressed import (COMPRESSIONS, ROUNDINGS, CompressedAllReduce,
                                         block_elements, relative_l2_error, two_shot)
from ..sim.collective.library import ALGORITHMS, algorithm
from ..sim.collective.peers import Peers
from .run import write_json

__all__ = ["MAX_ACCELERATORS", "CLASSES", "torus_dims", "check_train", "digits", "run_train",
           "TABLE_HEADER", "train_row"]

#: The most accelerators a job takes (the collective library's largest tori are 512).
MAX_ACCELERATORS = 1024
#: The digits' classes, and pixels of an image.
CLASSES, PIXELS = 10, 64
#: Share of the digits held out for the test set.
TEST_FRACTION = 0.25
#: What ``--algo`` may name: the two-shot, or an all-reduce of the library.
ALGOS = ("two-shot",) + tuple(a for a in ALGORITHMS if "allreduce" in ALGORITHMS[a].OPS)


def torus_dims(n: int) -> tuple[int, ...]:
    """The torus of ``n`` accelerators, one a router: up to three dimensions, each at least 2,
    the longest as short as can be (8: 2x2x2; 64: 4x4x4; 384: 8x8x6; a prime: a ring)."""
    best = (n,)
    for a in range(2, math.isqrt(n) + 1):
        for b in range(a, math.isqrt(n // a) + 1):
            if n % (a * b) == 0 and n // (a * b) >= b and n // (a * b) < max(best):
                best = (n // (a * b), b, a)
        if n % a == 0 and n // a >= a and n // a < max(best):
            best = (n // a, a)
    return best


def check_train(*, accelerators: int, compression: str, steps: int, seed: int, algo: str,
                batch: int, lr: float, rounding: str) -> None:
    """Refuse a bad setting in one line (ValueError) naming the value and what is allowed."""
    if not 2 <= accelerators <= MAX_ACCELERATORS:
        raise ValueError(f"--accelerators = {accelerators}: must be in 2..{MAX_ACCELERATORS}")
    if compression not in COMPRESSIONS:
        raise ValueError(f"--compression = {compression!r}: must be one of "
                         f"{', '.join(COMPRESSIONS)}")
    if steps < 1:
        raise ValueError(f"--steps = {steps}: must be at least 1")
    if seed < 0:
        raise ValueError(f"--seed = {seed}: must be at least 0")
    if algo not in ALGOS:
        raise ValueError(f"--algo = {algo!r}: must be one of {', '.join(ALGOS)}")
    if not accelerators <= batch <= 1024:
        raise ValueError(f"--batch = {batch}: must be in {accelerators}..1024 (at least one "
                         f"example per accelerator)")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"--lr = {lr:g}: must be a positive number")
    if rounding not in ROUNDINGS:
        raise ValueError(f"--rounding = {rounding!r}: must be one of {', '.join(ROUNDINGS)}")


def digits(seed: int):
    """The digits as ``(x_train, y_train, x_test, y_test)``: pixels scaled to 0..1, the test
    set a stratified quarter drawn by ``seed``."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(
        x, data.target, test_size=TEST_FRACTION, random_state=seed, stratify=data.target)
    return x_train, y_train, x_test, y_test


def _logits(weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The class scores: ``x @ W + b``, the weights a flat vector of ``W`` then ``b``."""
    w = weights[:PIXELS * CLASSES].reshape(PIXELS, CLASSES)
    return x @ w + weights[PIXELS * CLASSES:PIXELS * CLASSES + CLASSES]


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _loss(weights: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """Mean cross-entropy of the weights on ``(x, y)``."""
    p = _softmax(_logits(weights, x).astype(np.float64))
    return float(-np.log(np.maximum(p[np.arange(len(y)), y], 1e-300)).mean())


def _gradient(weights: np.ndarray, x: np.ndarray, y: np.ndarray, batch: int,
              size: int) -> np.ndarray:
    """An accelerator's share of the batch's mean gradient: its examples' summed gradients
    over the whole batch's size, so that the all-reduce's sum is the mean; padded with
    zeros to ``size``."""
    p = _softmax(_logits(weights, x))
    p[np.arange(len(y)), y] -= 1.0
    out = np.zeros(size, np.float32)
    out[:PIXELS * CLASSES] = (x.T @ p / batch).reshape(-1)
    out[PIXELS * CLASSES:PIXELS * CLASSES + CLASSES] = p.sum(axis=0) / batch
    return out


def run_train(*, accelerators: int, compression: str, error_feedback: bool = True,
              steps: int, seed: int, algo: str = "two-shot", batch: int = 256,
              lr: float = 0.5, rounding: str = "stochastic",
              out_dir: str | Path | None = None) -> dict:
    """Train, and write ``results.json`` and ``loss.png`` into ``out_dir`` when given.

    Returns
    -------
    dict
        The results (section 16.7): ``test_accuracy``, ``loss_curve`` (the training set's
        mean cross-entropy after each step), the settings, the all-reduce's
        ``payload_bytes_on_links`` (one step's, and binary32's for the same schedule) and
        the gradients' ``relative_l2_error`` (mean and largest over the steps).
    """
    check_train(accelerators=accelerators, compression=compression, steps=steps, seed=seed,
                algo=algo, batch=batch, lr=lr, rounding=rounding)
    peers = Peers(Topology("torus", dims=torus_dims(accelerators)))
    name = two_shot(peers) if algo == "two-shot" else algo
    try:
        algorithm(name, "allreduce", peers)
    except ValueError as e:
        raise ValueError(f"--{e}") from None
    size = block_elements(peers, name, PIXELS * CLASSES + CLASSES)
    allreduce = CompressedAllReduce(peers, algo=name, elements=size, compression=compression,
                                    rounding=rounding, seed=seed)
    feedback = error_feedback and compression != "none"
    x_train, y_train, x_test, y_test = digits(seed)
    rng = np.random.default_rng(seed)
    weights = np.zeros(size, np.float32)
    residuals = np.zeros((accelerators, size), np.float32)
    order, at = rng.permutation(len(y_train)), 0
    losses, errors = [], []
    for _ in range(steps):
        if at + batch > len(order):
            order, at = rng.permutation(len(y_train)), 0
        take, at = order[at:at + batch], at + batch
        shards = np.array_split(take, accelerators)
        gradients = np.stack([_gradient(weights, x_train[s], y_train[s], batch, size)
                              for s in shards])
        sent = gradients
        if feedback:
            sent, residuals = allreduce.link.error_feedback(gradients, residuals)
        mean = allreduce(sent)[0]
        errors.append(relative_l2_error(mean, gradients))
        weights = weights - np.float32(lr) * mean
        losses.append(_loss(weights, x_train, y_train))
    accuracy = float((_logits(weights, x_test).argmax(axis=1) == y_test).mean())
    binary32 = CompressedAllReduce(peers, algo=name, elements=size, compression="none")
    results = {
        "accelerators": accelerators, "torus": list(peers.topology.dims),
        "compression": compression, "error_feedback": feedback, "rounding": rounding,
        "algorithm": name, "steps": steps, "seed": seed, "batch": batch, "lr": lr,
        "model": f"softmax regression, {PIXELS * CLASSES + CLASSES} parameters",
        "gradient_elements": size,
        "train_examples": len(y_train), "test_examples": len(y_test),
        "test_accuracy": accuracy, "final_loss": losses[-1], "loss_curve": losses,
        "payload_bytes_on_links": allreduce.payload_bytes_on_links,
        "binary32_payload_bytes_on_links": binary32.payload_bytes_on_links,
        "relative_l2_error": {"mean": float(np.mean(errors)), "max": float(np.max(errors))},
    }
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "results.json", results)
        plot_losses([results], out / "loss.png")
    return results


def label(results: dict) -> str:
    """A run's name in tables and legends: binary32, int4 + EF or int4 without EF."""
    if results["compression"] == "none":
        return "binary32"
    return "int4 + EF" if results["error_feedback"] else "int4, no EF"


def plot_losses(runs: list[dict], path: Path) -> None:
    """The loss curves of ``runs`` in one PNG; beside them, when ``runs`` hold binary32's run
    of the same accelerators, each int4 run's loss less binary32's (the curves themselves
    lie on one another)."""
    from .report.plots import figure, legend
    baseline = {r["accelerators"]: r["loss_curve"] for r in runs if r["compression"] == "none"}
    compared = [r for r in runs if r["compression"] != "none" and r["accelerators"] in baseline]
    fig, axes = figure(2 if compared else 1)
    for r in runs:
        axes[0].plot(np.arange(1, r["steps"] + 1), r["loss_curve"],
                     label=f"{label(r)}, {r['accelerators']} accelerators")
    axes[0].set_yscale("log")
    axes[0].set_ylabel("training loss (cross-entropy)")
    axes[0].set_title("softmax regression on the digits, data-parallel")
    if compared:
        for r in runs:
            if r in compared:
                base = baseline[r["accelerators"]][:r["steps"]]
                axes[1].plot(np.arange(1, len(base) + 1),
                             np.subtract(r["loss_curve"][:len(base)], base))
            else:
                axes[1].plot([], [])        # keeps each run's colour in both panels
        axes[1].axhline(0.0, color="black", linewidth=0.8)
        axes[1].set_ylabel("loss less binary32's, same accelerators")
        axes[1].set_title("int4 against binary32")
    for ax in axes:
        ax.set_xlabel("step")
    legend(fig, axes[0])
    fig.savefig(path, dpi=100)


#: The columns of :func:`train_row`.
TABLE_HEADER = ("accelerators", "gradients", "test accuracy", "final loss",
                "bytes on links / step", "of binary32", "gradient error")


def train_row(results: dict) -> list[str]:
    """The table's row of a run's results."""
    return [str(results["accelerators"]), label(results), f"{results['test_accuracy']:.2%}",
            f"{results['final_loss']:.4f}", f"{results['payload_bytes_on_links']:,}",
            f"{results['payload_bytes_on_links'] / results['binary32_payload_bytes_on_links']:.4f}",
            f"{results['relative_l2_error']['mean']:.3g}"]
