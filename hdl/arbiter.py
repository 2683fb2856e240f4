"""The round-robin arbiter: the first request at or after a pointer, wrapping.

iSLIP's grant and accept steps (``hdl/islip.py``), a router input's next
starvation target (``hdl/fabric/router.py``) and the RDMA engine's retire
and transmit picks (``hdl/rdma/engine.py``) are this rule; the golden
model is :func:`superfabric.sim.arbiter.first_at_or_after`.
"""

from amaranth.hdl import Signal, Mux, Cat, Const

__all__ = ["round_robin_pick", "round_robin_grant", "one_hot_index"]


def round_robin_pick(m, mask, ptr, n, name):
    """Index of the first set bit of ``mask`` at or after ``ptr``, wrapping, in ``m``.

    Combinational logic added to the caller's module (an arbiter is a few
    gates on its caller's signals; iSLIP places one per output and per input
    for every iteration). Signals are named after ``name``.

    Parameters
    ----------
    m : Module
        The module the logic goes into.
    mask : Value
        ``n`` request bits.
    ptr : Value
        The round-robin pointer, below ``n``.
    n : int
        Requesters, at least 1.
    name : str
        Prefix of the signals' names.

    Returns
    -------
    (found, index)
        ``found``: some bit of ``mask`` is set; ``index``, meaningful only
        when ``found``: the first set bit at or after ``ptr``, wrapping.
    """
    found, first = round_robin_grant(m, mask, ptr, n, name)
    return found, one_hot_index(m, first, n, name)


def round_robin_grant(m, mask, ptr, n, name):
    """:func:`round_robin_pick`'s choice as one bit per requester: ``(found, first)``,
    ``first`` the first set bit of ``mask`` at or after ``ptr``, alone (zero when none).

    The lowest set bit of the requests at or after the pointer (or of all of them, when
    none is) is isolated as ``x & -x``: an addition, which an FPGA's carry chain makes
    a few fast levels, where a chain of ``n`` multiplexers would make ``n`` slow ones."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, not {n!r}")
    # Bit k is set for k >= ptr; bit n-1 always (no pointer exceeds n-1),
    # written as a constant so that lint sees no always-true comparison.
    at_or_after = Cat(*(ptr <= k for k in range(n - 1)), Const(1, 1))
    high = Signal(n, name=f"{name}_high")
    sel = Signal(n, name=f"{name}_sel")
    first = Signal(n, name=f"{name}_first")
    found = Signal(name=f"{name}_found")
    m.d.comb += [high.eq(mask & at_or_after), sel.eq(Mux(high.any(), high, mask)),
                 first.eq(sel & (~sel + 1)), found.eq(mask.any())]
    return found, first


def one_hot_index(m, bits, n, name):
    """The index of the one set bit of the ``n`` bits ``bits`` (0 when none): each bit of
    the index the OR of the bits whose position has it set."""
    index = Signal(range(n), name=f"{name}_index")
    m.d.comb += index.eq(Cat(Cat(bits[k] for k in range(n) if k >> b & 1).any()
                             for b in range(len(index))))
    return index
