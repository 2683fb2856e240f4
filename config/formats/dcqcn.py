"""DCQCN's fixed-point arithmetic, written once for the RTL, the golden model and the testbench.

Rates are fractions of the line rate (one flit per cycle) in units of
``2**-16``: :data:`LINE_RATE` is the line rate; ``alpha`` is a fraction in
units of ``2**-16``, :data:`ALPHA_ONE` being 1. Every rule of the reaction
point and of the pacer (``docs/architecture.md`` section 10.13) is a
function here, written with ``+``, ``-``, ``*``, shifts, comparisons, ``&``
and ``^`` and without a branch, as :mod:`superfabric.formats.lfsr` is: the same
function evaluates on Python integers (the model) and on Amaranth values
(the logic, in ``superfabric.hdl.rdma.dcqcn``), so the two cannot drift apart.
An Amaranth result may be wider than its value; it is meant to be assigned
to (truncated by) a signal of the widths given here.
"""

from dataclasses import dataclass

__all__ = ["RATE_FRACTION_BITS", "LINE_RATE", "RATE_BITS", "ALPHA_ONE", "ALPHA_BITS",
           "DcqcnUnits", "rate_units", "stage_bits", "debt_bits", "select", "cut", "alpha_raise",
           "alpha_decay", "increase", "stage_after", "packet_debt", "debt_after"]

#: Fraction bits of a rate.
RATE_FRACTION_BITS = 16
#: The line rate, one flit per cycle, in rate units.
LINE_RATE = 1 << RATE_FRACTION_BITS
#: Width of a rate register: 0 .. LINE_RATE.
RATE_BITS = RATE_FRACTION_BITS + 1
#: Fraction bits of alpha, and alpha = 1.
_ALPHA_FRACTION_BITS = 16
ALPHA_ONE = 1 << _ALPHA_FRACTION_BITS
#: Width of the alpha register: 0 .. ALPHA_ONE.
ALPHA_BITS = _ALPHA_FRACTION_BITS + 1


def rate_units(fraction: float) -> int:
    """A share of the line rate in rate units, rounded to the nearest unit."""
    return round(fraction * LINE_RATE)


@dataclass(frozen=True)
class DcqcnUnits:
    """The ``[dcqcn]`` values as the hardware and the model use them: integers.

    Times are cycles, ``byte_counter`` flits, rates rate units, ``g_shift``
    the gain ``g = 2**-g_shift``.
    """

    cnp_interval: int
    alpha_timer: int
    increase_timer: int
    byte_counter: int
    fast_recovery: int
    g_shift: int
    ai_rate: int
    hai_rate: int
    min_rate: int


def stage_bits(fast_recovery: int) -> int:
    """Width of a stage counter: it counts 0 .. F + 1 and stays at F + 1."""
    return (fast_recovery + 1).bit_length()


def debt_bits(max_packet_flits: int) -> int:
    """Width of a pacer's debt: at most one longest packet, in flits times LINE_RATE."""
    return (max_packet_flits * LINE_RATE).bit_length()


def select(cond, a, b):
    """``a`` if ``cond`` else ``b``: ``-cond`` is all ones when it is set, zero when not."""
    return b ^ ((a ^ b) & -cond)


def cut(rate, alpha, min_rate: int):
    """The rate after a CNP: ``rate * (1 - alpha / 2)``, floored, and no lower than ``min_rate``."""
    lower = rate - ((rate * alpha) >> (_ALPHA_FRACTION_BITS + 1))
    return select(lower < min_rate, min_rate, lower)


def alpha_raise(alpha, g_shift: int):
    """Alpha after a CNP: ``(1 - g) * alpha + g``; stays within 0 .. ALPHA_ONE."""
    return alpha - (alpha >> g_shift) + (ALPHA_ONE >> g_shift)


def alpha_decay(alpha, g_shift: int):
    """Alpha after an alpha timer period without a CNP: ``(1 - g) * alpha``.

    The shift floors, so alpha stops decaying at ``2**g_shift - 1`` units.
    """
    return alpha - (alpha >> g_shift)


def increase(rate, target, timer_stage, byte_stage, u: DcqcnUnits):
    """One rate increase: ``(rate, target)`` after it, from the stages counted so far.

    Fast recovery while both stages are below F (the target stays); hyper
    increase when both are above F (the target gains ``hai_rate``);
    additive increase otherwise (``ai_rate``). The target never exceeds
    the line rate; the rate moves halfway to the target, rounded up, so it
    reaches a target it is one unit short of.
    """
    f = u.fast_recovery
    fast = (timer_stage < f) & (byte_stage < f)
    hyper = (timer_stage > f) & (byte_stage > f)
    raised = target + select(hyper, u.hai_rate, u.ai_rate)
    capped = select(raised > LINE_RATE, LINE_RATE, raised)
    new_target = select(fast, target, capped)
    return (rate + new_target + 1) >> 1, new_target


def stage_after(stage, fired, fast_recovery: int):
    """A stage counter after a cycle: one more if its counter ``fired``, up to F + 1."""
    return select(fired & (stage <= fast_recovery), stage + 1, stage)


def packet_debt(flits):
    """The pacer's debt for a packet of ``flits`` flits: the rate units of its cycles at line rate."""
    return flits << RATE_FRACTION_BITS


def debt_after(debt, rate):
    """The pacer's debt one cycle later: ``rate`` paid off, never below zero."""
    return select(debt > rate, debt - rate, 0)
