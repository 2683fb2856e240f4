"""The 16-bit Galois LFSR that ECN marking and the link fault injectors draw from.

RTL and model must draw the same numbers bit for bit, so the step and the
per-port start state are written once, here, with bitwise operators,
shifts, negation and ``==`` and without a branch: the same function then
evaluates on a Python integer (the model), on a numpy integer array (one
state per port) and on an Amaranth value (the logic, in ``superfabric.hdl``),
and this module imports neither numpy nor Amaranth.
"""

__all__ = ["LFSR_BITS", "LFSR_TAPS", "DRAW_THRESHOLD_BITS", "lfsr_step", "lfsr_start"]

#: Width of the LFSR state, and of each draw.
LFSR_BITS = 16
#: Feedback taps of the Galois LFSR: x^16 + x^14 + x^13 + x^11 + 1, maximal length.
LFSR_TAPS = 0xB400
#: Width of a threshold compared with a draw: one bit more than a draw, so
#: that ``1 << LFSR_BITS`` (probability 1) is below no draw.
DRAW_THRESHOLD_BITS = LFSR_BITS + 1

_MASK = (1 << LFSR_BITS) - 1
#: Spreads the start states of neighbouring ports apart (2**16 over the golden ratio).
_SPREAD = 0x9E37
#: The start state used in place of zero, the one state the LFSR never leaves.
_NONZERO = 0xACE1


def lfsr_step(state):
    """The state after one step; never zero from a non-zero state.

    The bit shifted out selects the taps: ``-(state & 1)`` is all ones when
    it is set and zero when it is not, so no branch is needed.

    Parameters
    ----------
    state : int, numpy integer array or Amaranth value
        ``LFSR_BITS`` wide. An Amaranth result is wider than the state and
        is meant to be assigned to (truncated by) a ``LFSR_BITS`` signal.
    """
    return (state >> 1) ^ (-(state & 1) & LFSR_TAPS)


def lfsr_start(seed, port: int):
    """The start state of ``port``'s LFSR from a configured ``seed``: distinct per port, never zero.

    Parameters
    ----------
    seed : int or Amaranth value
        The configured seed (``ecn.lfsr_seed``, ``faults.seed``), or the
        RTL input that carries it.
    port : int
        The port (or endpoint) whose LFSR this is.
    """
    state = (seed ^ (port * _SPREAD)) & _MASK
    return state | (-(state == 0) & _NONZERO)
