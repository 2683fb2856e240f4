"""The compressed all-reduce: every chunk that crosses a link sent as int4 blocks (section 16.6).

The schedule is any all-reduce of the library; what changes is the link.
The sender quantises the chunk of its buffer a step sends (``sim.compression``,
its own LFSR), the receiver decodes it and adds it in binary32 (or copies
it), in the schedule's order. Which algorithm runs decides how often a
value is quantised: ``dimwise-direct`` on a torus (``direct`` elsewhere) is
the two-shot, every contribution quantised once per dimension on its way to
the owner and the owner's sum once for the all-gather; the ring, or
``dimwise``, requantises a partial sum at every hop, for comparison.
"""

from __future__ import annotations

import numpy as np

from ...formats.compression import (BLOCK, DRAW_STEPS, ROUND_NEAREST_EVEN, ROUND_STOCHASTIC,
                                    wire_bytes)
from ...formats.lfsr import lfsr_start
from ..compression import (dequantise, error_feedback, from_bits, lfsr_advance, quantise,
                           to_bits)
from .executor import link_bytes, replay
from .library import plan
from .schedule import ELEMENT_BYTES, Schedule

__all__ = ["COMPRESSIONS", "ROUNDINGS", "two_shot", "Int4Link", "CompressedAllReduce",
           "block_elements", "relative_l2_error"]

#: What ``compression`` may name: binary32 as it is, or int4 blocks.
COMPRESSIONS = ("none", "int4")
#: Rounding of the quantiser, by the names of the command line.
ROUNDINGS = {"stochastic": ROUND_STOCHASTIC, "nearest": ROUND_NEAREST_EVEN}
#: LFSR steps a block of stochastic rounding takes: one draw per value.
_BLOCK_STEPS = BLOCK * DRAW_STEPS


def two_shot(peers) -> str:
    """The two-shot all-reduce's algorithm on ``peers``' fabric: once per dimension on a
    torus (``dimwise-direct``), else one direct exchange."""
    return "dimwise-direct" if peers.topology.kind == "torus" else "direct"


class Int4Link:
    """The links of a compressed collective: a chunk is quantised at its sender with the
    sender's LFSR and decoded at the receiver (the ``link`` of ``executor.replay``).

    Parameters
    ----------
    accelerators : int
        One quantiser, with its own LFSR, per accelerator.
    rounding : int
        ``ROUND_STOCHASTIC`` or ``ROUND_NEAREST_EVEN``.
    seed : int
        Accelerator ``a``'s LFSR starts at ``lfsr_start(seed, a)`` and runs on from call to
        call, as the hardware's does.
    """

    def __init__(self, accelerators: int, *, rounding: int = ROUND_STOCHASTIC, seed: int = 1):
        if rounding not in ROUNDINGS.values():
            raise ValueError(f"rounding = {rounding!r}: must be one of "
                             f"{', '.join(map(str, ROUNDINGS.values()))}")
        self.rounding = rounding
        self.states = np.array([lfsr_start(seed, a) for a in range(accelerators)], np.int64)

    def _states(self, a: int, blocks: int) -> np.ndarray:
        """The LFSR states accelerator ``a``'s next ``blocks`` blocks start from; its LFSR
        moves past them (nearest-even rounding draws nothing)."""
        if self.rounding != ROUND_STOCHASTIC:
            return np.ones(blocks, np.int64)
        states = lfsr_advance(self.states[a], _BLOCK_STEPS * np.arange(blocks))
        self.states[a] = lfsr_advance(self.states[a], _BLOCK_STEPS * blocks)
        return states

    def error_feedback(self, gradients, residuals):
        """Each accelerator's error feedback (section 16.4) on its quantiser: ``x = g + e``
        quantised in blocks from element 0, ``e <- x - deq(Q(x))``. Returns the decoded
        values, which the all-reduce's first quantisation then sends as they are (a decoded
        block quantises to itself), and the new residuals.

        Parameters
        ----------
        gradients, residuals : array of float32, shape ``(accelerators, elements)``
            ``elements`` a multiple of :data:`BLOCK`.
        """
        gradients = np.asarray(gradients, np.float32)
        n, elements = gradients.shape
        if elements % BLOCK:
            raise ValueError(f"elements = {elements}: must be a multiple of {BLOCK}")
        blocks = elements // BLOCK
        states = np.stack([self._states(a, blocks) for a in range(n)])
        codes, scale, _, residuals = error_feedback(gradients.reshape(n, blocks, BLOCK),
                                                    np.reshape(residuals, (n, blocks, BLOCK)),
                                                    states, self.rounding)
        return (from_bits(dequantise(codes, scale)).reshape(n, elements),
                residuals.reshape(n, elements))

    def __call__(self, sends, buffers) -> list[np.ndarray]:
        """The decoded chunks of ``sends``. An accelerator's sends are quantised in its step
        order, and a copy's sender keeps the decoded chunk it sent, so that every copy of a
        result holds the same bits (a decoded chunk quantises to itself)."""
        out = [None] * len(sends)
        queue = {}
        for i, (a, _) in enumerate(sends):
            queue.setdefault(a, []).append(i)
        # The r-th send of every accelerator at once: one quantiser call for all their blocks.
        for r in range(max((len(q) for q in queue.values()), default=0)):
            batch = [(q[r], *sends[q[r]]) for q in queue.values() if r < len(q)]
            chunks, states = [], []
            for _, a, s in batch:
                chunk = buffers[a][s.src:s.src + s.length]
                if s.src % BLOCK or (s.length % BLOCK and s.src + s.length != len(buffers[a])):
                    raise ValueError(f"compression = 'int4': accelerator {a} sends elements "
                                     f"{s.src}..{s.src + s.length - 1}, not whole blocks of "
                                     f"{BLOCK}; pad the message (block_elements)")
                blocks = -(-s.length // BLOCK)
                padded = np.zeros(blocks * BLOCK, np.float32)
                padded[:s.length] = chunk
                chunks.append(padded.reshape(blocks, BLOCK))
                states.append(self._states(a, blocks))
            codes, scale, _ = quantise(to_bits(np.concatenate(chunks)), np.concatenate(states),
                                       self.rounding)
            decoded = from_bits(dequantise(codes, scale)).reshape(-1)
            at = 0
            for (i, a, s), chunk in zip(batch, chunks):
                out[i] = decoded[at:at + s.length].copy()
                at += chunk.size
                if not s.reduce:
                    buffers[a][s.src:s.src + s.length] = out[i]
        return out


def block_elements(peers, algo: str, elements: int) -> int:
    """The least message of at least ``elements`` elements whose every chunk under ``algo``'s
    all-reduce on ``peers`` is whole blocks: what a compressed all-reduce pads a message to
    (with zeros, 17 bytes a block on the wire)."""
    unit = BLOCK * peers.n
    size = max(1, -(-elements // unit)) * unit
    while True:
        schedule = plan(peers, "allreduce", algo, size * ELEMENT_BYTES)
        if all(s.src % BLOCK == 0 and s.length % BLOCK == 0 for steps in schedule.steps
               for s in steps):
            return size
        size += unit


class CompressedAllReduce:
    """One all-reduce of ``elements`` binary32 values per accelerator, run again and again (a
    training job's gradients), the quantisers' LFSRs running on between runs.

    Parameters
    ----------
    peers : Peers
    algo : str
        An all-reduce algorithm of the library (:func:`two_shot` is the two-shot).
    elements : int
        Values per accelerator; a compressed message must be whole blocks in every chunk
        (:func:`block_elements`).
    compression : str
        ``"none"`` (binary32: the collective as it is) or ``"int4"``.
    rounding : str
        A name of :data:`ROUNDINGS`.
    seed : int
        Seed of the quantisers' LFSRs.
    """

    def __init__(self, peers, *, algo: str, elements: int, compression: str = "int4",
                 rounding: str = "stochastic", seed: int = 1):
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression = {compression!r}: must be one of "
                             f"{', '.join(COMPRESSIONS)}")
        if rounding not in ROUNDINGS:
            raise ValueError(f"rounding = {rounding!r}: must be one of {', '.join(ROUNDINGS)}")
        self.peers, self.compression = peers, compression
        self.schedule: Schedule = plan(peers, "allreduce", algo, elements * ELEMENT_BYTES)
        self.link = None if compression == "none" else \
            Int4Link(peers.n, rounding=ROUNDINGS[rounding], seed=seed)

    @property
    def payload_bytes_on_links(self) -> int:
        """Payload bytes of one all-reduce summed over every link it crosses: each chunk's
        bytes on the wire (binary32, or int4 blocks) times the links of its route."""
        chunk = (lambda length: length * ELEMENT_BYTES) if self.link is None else wire_bytes
        return int(link_bytes(self.schedule, self.peers, chunk).sum())

    def predicted_cycles(self, model) -> int:
        """The all-reduce's cycles as the alpha-beta model ``model`` (an ``AlphaBeta`` of the
        fabric) predicts them, each round's chunk at its bytes on the wire; the quantiser and
        dequantiser are taken to keep up with the link."""
        chunk = (lambda length: length * ELEMENT_BYTES) if self.link is None else wire_bytes
        return model.predict(self.peers, "allreduce", self.schedule.algorithm,
                             self.schedule.elements * ELEMENT_BYTES, chunk)

    def __call__(self, data) -> list[np.ndarray]:
        """Every accelerator's result of all-reducing ``data`` (one binary32 array each)."""
        return replay(self.schedule, [np.asarray(x, np.float32) for x in data], eager=True,
                      link=self.link)


def relative_l2_error(result, data) -> float:
    """``|result - sum| / |sum|``: ``result`` against the exact sum of ``data`` (the
    accelerators' inputs, added in binary64, where binary32's rounding is far below int4's)."""
    exact = np.sum([np.asarray(x, np.float64) for x in data], axis=0)
    norm = np.linalg.norm(exact)
    return float(np.linalg.norm(np.asarray(result, np.float64) - exact) / norm) if norm else 0.0
