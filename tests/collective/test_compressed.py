"""The compressed all-reduce (``sim/collective/compressed.py``, docs/spec/compression.md section
16.6): binary32 unchanged, the documented rules bit for bit, one result everywhere, the bytes
of the formula, and two-shot's error below per-hop requantisation's."""

import numpy as np
import pytest

from superfabric.formats.compression import BLOCK, ROUND_NEAREST_EVEN, wire_bytes
from superfabric.sim.collective.alpha_beta import AlphaBeta
from superfabric.sim.collective.compressed import (CompressedAllReduce, Int4Link,
                                                   block_elements, relative_l2_error, two_shot)
from superfabric.sim.collective.executor import replay
from superfabric.sim.collective.library import ALGORITHMS
from superfabric.sim.collective.reference import expected
from superfabric.sim.compression import dequantise, from_bits, quantise, to_bits

from .fabrics import config, peers


def gradients(n: int, elements: int, seed: int = 1) -> list[np.ndarray]:
    """Standard-normal binary32 values, one array per accelerator."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(elements).astype(np.float32) for _ in range(n)]


def round_trip(values: np.ndarray) -> np.ndarray:
    """``values`` quantised with nearest-even rounding in blocks from element 0, decoded."""
    codes, scale, _ = quantise(to_bits(values.reshape(-1, BLOCK)), 1, ROUND_NEAREST_EVEN)
    return from_bits(dequantise(codes, scale)).reshape(-1)


@pytest.mark.parametrize("algo", ["ring", "dimwise", "dimwise-direct", "tree"])
def test_no_compression_is_the_binary32_all_reduce_bit_for_bit(algo):
    p = peers("torus-2x2x2")
    elements = 512
    data = gradients(p.n, elements)
    allreduce = CompressedAllReduce(p, algo=algo, elements=elements, compression="none")
    got = allreduce(data)
    order = ALGORITHMS[algo].order(p, "allreduce", elements)
    for a, lo, hi, values in expected(allreduce.schedule, data, order):
        assert (got[a][lo:hi].view(np.uint32) == values.view(np.uint32)).all(), a


def test_two_shot_is_the_documented_rules_written_out():
    # Direct on 8 accelerators, nearest-even: block j is the owner's own values, then the
    # decoded values of j-1, j-2, ... added in binary32; the sum quantised once for everyone.
    p = peers("torus-2x2x2")
    n, each = p.n, 2 * BLOCK
    data = gradients(p.n, n * each)
    got = CompressedAllReduce(p, algo="direct", elements=n * each, rounding="nearest")(data)
    want = []
    for j in range(n):
        block = slice(j * each, (j + 1) * each)
        total = data[j][block].copy()
        for d in range(1, n):
            total = total + round_trip(data[(j - d) % n][block])
        want.append(round_trip(total))
    want = np.concatenate(want)
    for a in range(n):
        assert (got[a].view(np.uint32) == want.view(np.uint32)).all(), a


@pytest.mark.parametrize("algo", ["ring", "dimwise", "dimwise-direct", "direct",
                                  "halving-doubling", "tree"])
def test_every_accelerator_ends_with_the_same_bits(algo):
    p = peers("torus-2x2x2")
    elements = block_elements(p, algo, 700)
    got = CompressedAllReduce(p, algo=algo, elements=elements, seed=3)(
        gradients(p.n, elements, seed=2))
    for a in range(1, p.n):
        assert (got[a].view(np.uint32) == got[0].view(np.uint32)).all(), a


@pytest.mark.parametrize("algo", ["ring", "dimwise-direct", "direct"])
def test_the_result_does_not_depend_on_the_replays_order(algo):
    # Each quantiser draws in its own step order, whichever order the engines run in.
    p = peers("torus-2x2x2")
    elements = 2 * BLOCK * p.n
    data = gradients(p.n, elements)
    schedule = CompressedAllReduce(p, algo=algo, elements=elements).schedule
    eager, lazy = (replay(schedule, data, eager=e, link=Int4Link(p.n, seed=9))
                   for e in (True, False))
    for a in range(p.n):
        assert (eager[a].view(np.uint32) == lazy[a].view(np.uint32)).all(), a


def test_bytes_on_links_are_17_per_block_on_every_link_crossed():
    p = peers("torus-2x2x2")
    n, elements = p.n, 4 * BLOCK * p.n
    ring = CompressedAllReduce(p, algo="ring", elements=elements)
    # 2(n-1) rounds, every accelerator sending its n-th of the message one hop.
    chunk = elements // n
    assert ring.payload_bytes_on_links == 2 * (n - 1) * n * 17 * chunk // BLOCK
    assert ring.payload_bytes_on_links == 2 * (n - 1) * n * wire_bytes(chunk)
    for algo in ("ring", "dimwise-direct", "direct"):
        int4 = CompressedAllReduce(p, algo=algo, elements=elements)
        binary32 = CompressedAllReduce(p, algo=algo, elements=elements, compression="none")
        assert int4.payload_bytes_on_links * 128 == binary32.payload_bytes_on_links * 17, algo


def test_the_predicted_time_is_of_the_bytes_on_the_wire():
    # The alpha-beta model, each round's chunk at 17 bytes a block: 1 MiB on the 4x4x4 torus
    # two-shot in int4 against the fastest of the binary32 all-reduces.
    p, model = peers("torus-4x4x4"), AlphaBeta.of(config("torus-4x4x4"))
    elements = (1 << 20) // 4
    binary32 = min(CompressedAllReduce(p, algo=a, elements=elements, compression="none")
                   .predicted_cycles(model) for a in ("ring", "dimwise", "dimwise-direct"))
    int4 = CompressedAllReduce(p, algo=two_shot(p), elements=elements)
    assert int4.predicted_cycles(model) <= 0.35 * binary32
    same = CompressedAllReduce(p, algo="ring", elements=elements, compression="none")
    assert same.predicted_cycles(model) == model.predict(p, "allreduce", "ring", 1 << 20)


def test_two_shot_error_is_below_per_hop_requantisation():
    p = peers("torus-4x4x4")
    elements = 2 * BLOCK * p.n
    data = gradients(p.n, elements)
    errors = {algo: relative_l2_error(CompressedAllReduce(p, algo=algo, elements=elements)(
        data)[0], data) for algo in (two_shot(p), "dimwise", "ring")}
    assert two_shot(p) == "dimwise-direct"
    assert errors["dimwise-direct"] < errors["dimwise"] < errors["ring"], errors
    exact = CompressedAllReduce(p, algo="ring", elements=elements, compression="none")(data)
    assert relative_l2_error(exact[0], data) < 1e-6


def test_a_decoded_chunk_is_sent_unchanged():
    # Error feedback's decoded values are what the all-reduce's first quantisation sends.
    p = peers("torus-2x2x2")
    link = Int4Link(p.n, seed=5)
    g = np.stack(gradients(p.n, 4 * BLOCK))
    decoded, residuals = link.error_feedback(g, np.zeros_like(g))
    assert (np.abs(residuals) > 0).any()
    assert np.allclose(decoded + residuals, g, rtol=1e-6, atol=1e-7)
    again, _ = link.error_feedback(decoded, np.zeros_like(g))
    assert (again.view(np.uint32) == decoded.view(np.uint32)).all()


def test_chunks_that_are_not_whole_blocks_are_refused():
    p = peers("torus-2x2x2")
    allreduce = CompressedAllReduce(p, algo="ring", elements=200)
    with pytest.raises(ValueError, match=r"accelerator \d sends elements \d+\.\.\d+, not whole "
                                         r"blocks of 32"):
        allreduce(gradients(p.n, 200))
    assert block_elements(p, "ring", 200) == 256
    assert block_elements(p, "biring", 200) == 512


@pytest.mark.parametrize("field, value, allowed", [
    ("compression", "fp8", "none, int4"), ("rounding", "up", "stochastic, nearest")])
def test_bad_settings_are_one_line(field, value, allowed):
    with pytest.raises(ValueError, match=f"{field} = '{value}': must be one of {allowed}"):
        CompressedAllReduce(peers("torus-2x2x2"), algo="ring", elements=256, **{field: value})
