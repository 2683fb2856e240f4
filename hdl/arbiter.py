"""The round-robin arbiter: the first request at or after a pointer, wrapping.

iSLIP's grant and accept steps (``hdl/islip.py``), a router input's next
starvation target (``hdl/fabric/router.py``) and the RDMA engine's retire
and transmit picks (``hdl/rdma/engine.py``) are this rule; the golden
model is :func:`superfabric.sim.arbiter.first_at_or_after`.
"""

from amaranth.hdl import Signal, Mux, Cat, Const

__all__ = ["round_robin_pick", "round_robin_grant", "class_round_robin_grant", "one_hot_index"]


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
    _check_n(n)
    high = Signal(n, name=f"{name}_high")
    sel = Signal(n, name=f"{name}_sel")
    first = Signal(n, name=f"{name}_first")
    found = Signal(name=f"{name}_found")
    m.d.comb += [high.eq(mask & _at_or_after(ptr, n)), sel.eq(Mux(high.any(), high, mask)),
                 first.eq(sel & (~sel + 1)), found.eq(mask.any())]
    return found, first


def class_round_robin_grant(m, masks, ptrs, n, name):
    """The round-robin choice within the highest class that requests: ``masks[p]`` the
    ``n`` request bits of class ``p`` (the highest class wins), ``ptrs[p]`` its pointer.
    Returns ``(found, first, classes)``: ``first`` the first set bit of the highest
    non-empty mask at or after that class's pointer, wrapping, alone (zero when none);
    ``classes`` one bit per class, the class of ``first`` alone.

    Choosing the class first and then arbitrating within it puts a class multiplexer in
    front of the arbiter. Here every class's requests at or after its pointer, then all
    of them, are laid out from the highest class down in one vector, and its lowest set
    bit (``x & -x``, one carry chain) is the choice and its class at once. With one class
    this is :func:`round_robin_grant`'s rule, which keeps its own form: its callers pick
    among up to 256 requesters, where a chain of ``2 n`` bits would cost more than the
    multiplexer it saves."""
    _check_n(n)
    segments = []
    for p in reversed(range(len(masks))):
        segments += [masks[p] & _at_or_after(ptrs[p], n), masks[p]]
    wide = Signal(2 * n * len(masks), name=f"{name}_wide")
    lowest = Signal.like(wide, name=f"{name}_lowest")
    m.d.comb += [wide.eq(Cat(*segments)), lowest.eq(wide & (~wide + 1))]
    # Segment 2j and 2j + 1 are class len(masks) - 1 - j.
    seg = [lowest[k * n:(k + 1) * n] for k in range(len(segments))]
    first = Signal(n, name=f"{name}_first")
    classes = Signal(len(masks), name=f"{name}_classes")
    found = Signal(name=f"{name}_found")
    m.d.comb += [
        first.eq(Cat(Cat(s[k] for s in seg).any() for k in range(n))),
        classes.eq(Cat((seg[2 * j] | seg[2 * j + 1]).any()
                       for j in reversed(range(len(masks))))),
        found.eq(Cat(*masks).any()),
    ]
    return found, first, classes


def _check_n(n):
    """Refuse a requester count that is not a positive integer."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, not {n!r}")


def _at_or_after(ptr, n):
    """Bit ``k`` set for ``k >= ptr``; bit ``n - 1`` always (no pointer exceeds ``n - 1``),
    written as a constant so that lint sees no always-true comparison."""
    return Cat(*(ptr <= k for k in range(n - 1)), Const(1, 1))


def one_hot_index(m, bits, n, name):
    """The index of the one set bit of the ``n`` bits ``bits`` (0 when none): each bit of
    the index the OR of the bits whose position has it set."""
    index = Signal(range(n), name=f"{name}_index")
    m.d.comb += index.eq(Cat(Cat(bits[k] for k in range(n) if k >> b & 1).any()
                             for b in range(len(index))))
    return index
