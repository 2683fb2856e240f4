"""The engine kernels' per-channel bookkeeping: names of a state index, sets of channels and
running timers, over preallocated arrays indexed ``[e, i]`` (endpoint, state index).

The engine keeps the sets of the channels that can act and the running timers; a kernel
cannot allocate, so a set is a bit mask in int64 words of :data:`SET_BITS` bits with its
size in a scalar, and the timers of one kind are a doubly linked list in the order they
were (re)started. Every timer of a
kind restarts at ``cycle + constant`` with the cycle never going back, so that order is
also the order of the firing cycles: the first timer to fire is the list's head, and the
timers firing together are a prefix of the list. Both cost O(1) per change, so an engine
with nothing to do costs nothing.
"""

from ...kernel import kernel

__all__ = ["NEVER", "SET_BITS", "set_words", "peer_of", "channel_number", "set_put",
           "set_first", "set_first_at_most", "set_min", "timer_remove", "timer_start",
           "timer_first"]

#: A cycle that never comes: the next event of a timer that is not running.
NEVER = 1 << 62

#: Members per int64 word of a set: 32, so that a word is never negative and its bits are
#: the same numbers compiled and under ``NUMBA_DISABLE_JIT`` (Python ints, no wrap at 64).
SET_BITS = 32
_SET_SHIFT = 5


def set_words(members: int) -> int:
    """Words of a set of ``members`` possible members."""
    return max(1, -(-members // SET_BITS))


@kernel(inline=True)
def peer_of(prm, e, i):
    """The peer of endpoint ``e``'s channel or receive context at state index ``i``."""
    rank = i // prm.C
    return rank + (rank >= e)


@kernel(inline=True)
def channel_number(prm, e, i):
    """The channel number (``peer * C + ch``, as the ports and records name it) of state
    index ``i`` of endpoint ``e``."""
    return peer_of(prm, e, i) * prm.C + i % prm.C


@kernel(inline=True)
def _bit(b):
    """The position of the one bit set in ``b`` (a word of a set)."""
    n = 0
    if b >= 1 << 16:
        n += 16
        b >>= 16
    if b >= 1 << 8:
        n += 8
        b >>= 8
    if b >= 1 << 4:
        n += 4
        b >>= 4
    if b >= 1 << 2:
        n += 2
        b >>= 2
    if b >= 2:
        n += 1
    return n


@kernel
def set_put(bits, sc, e, count, i, member):
    """Make ``i`` a member of endpoint ``e``'s set ``bits`` or not (``member``), keeping
    its size in ``sc[e, count]``."""
    w = i >> _SET_SHIFT
    b = 1 << (i & (SET_BITS - 1))
    has = bits[e, w] & b != 0
    if member and not has:
        bits[e, w] |= b
        sc[e, count] += 1
    elif has and not member:
        bits[e, w] &= ~b
        sc[e, count] -= 1


@kernel
def set_first(bits, e, ptr):
    """The first member of endpoint ``e``'s non-empty set ``bits`` at or after ``ptr``,
    wrapping (the round-robin rule of ``superfabric.sim.arbiter.first_at_or_after``, over
    a set of several words)."""
    w0 = ptr >> _SET_SHIFT
    high = bits[e, w0] & ~((1 << (ptr & (SET_BITS - 1))) - 1)
    if high:
        return (w0 << _SET_SHIFT) + _bit(high & -high)
    words = bits.shape[1]
    for k in range(1, words + 1):
        w = (w0 + k) % words
        if bits[e, w]:
            return (w << _SET_SHIFT) + _bit(bits[e, w] & -bits[e, w])
    return -1


@kernel
def set_first_at_most(bits, values, e, ptr, limit):
    """The first member ``i`` of endpoint ``e``'s set ``bits`` at or after ``ptr``,
    wrapping, with ``values[e, i] <= limit``; -1 for none."""
    words = bits.shape[1]
    w0 = ptr >> _SET_SHIFT
    below = (1 << (ptr & (SET_BITS - 1))) - 1
    for k in range(words + 1):
        w = (w0 + k) % words
        m = bits[e, w]
        if k == 0:
            m &= ~below
        elif k == words:
            m &= below
        while m:
            b = m & -m
            i = (w << _SET_SHIFT) + _bit(b)
            if values[e, i] <= limit:
                return i
            m ^= b
    return -1


@kernel
def set_min(bits, values, e, none):
    """The least ``values[e, i]`` over the members ``i`` of endpoint ``e``'s set ``bits``
    (``none`` when it is empty)."""
    least = none
    for w in range(bits.shape[1]):
        m = bits[e, w]
        while m:
            b = m & -m
            least = min(least, values[e, (w << _SET_SHIFT) + _bit(b)])
            m ^= b
    return least


@kernel
def timer_remove(at, prev, nxt, sc, e, head, tail, i):
    """Stop timer ``i`` of endpoint ``e`` (``at[e, i]``, NEVER when not running): it leaves
    the list whose ends are ``sc[e, head]`` and ``sc[e, tail]``."""
    if at[e, i] == NEVER:
        return
    p, n = prev[e, i], nxt[e, i]
    if p >= 0:
        nxt[e, p] = n
    else:
        sc[e, head] = n
    if n >= 0:
        prev[e, n] = p
    else:
        sc[e, tail] = p
    at[e, i] = NEVER


@kernel
def timer_start(at, prev, nxt, sc, e, head, tail, i, value):
    """(Re)start timer ``i`` of endpoint ``e`` at ``value``, no earlier than any timer of
    the list: it goes last, keeping the list in firing order."""
    if sc[e, tail] != i:
        timer_remove(at, prev, nxt, sc, e, head, tail, i)
        t = sc[e, tail]
        prev[e, i] = t
        nxt[e, i] = -1
        if t >= 0:
            nxt[e, t] = i
        else:
            sc[e, head] = i
        sc[e, tail] = i
    at[e, i] = value


@kernel(inline=True)
def timer_first(at, sc, e, head):
    """The value of the list's first timer (the earliest), NEVER when none runs."""
    h = sc[e, head]
    return NEVER if h < 0 else at[e, h]
