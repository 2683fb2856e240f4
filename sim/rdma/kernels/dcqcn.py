"""Golden model of :mod:`superfabric.hdl.rdma.dcqcn`: DCQCN's notification and reaction
points (section 10.13), compiled, over the engine state
(``superfabric.sim.rdma.kernels.engine.EngineState``) of every endpoint.

The notification point (:func:`np_marked`, :func:`np_pick`) makes a CNP pending for a
receive context at a CE-marked data packet unless one was made pending fewer than
``cnp_interval`` cycles before; the transmitter sends the pending CNPs lowest context
first. The reaction point (:func:`rp_step`) keeps per channel the rate, the target,
alpha, the timer and byte stages, the flits toward the byte counter and the pacer's debt;
only a cycle in which a CNP arrives, a packet is picked or a timer fires changes anything.
Timers are kept as the cycle they fire in, and a pacer's debt as its value at one cycle
and the rate it has been paid off at since: an engine with nothing to do costs nothing.

The arithmetic is :mod:`superfabric.formats.dcqcn`'s own functions, compiled in (they are
written without branches, so they need no change); ``increase`` reads its units from the
engine parameters, which carry ``DcqcnUnits``' field names. Their arguments are converted
with ``int`` and ``bool`` (no-ops when compiled) so that under ``NUMBA_DISABLE_JIT`` they
meet Python numbers, not numpy scalars (whose booleans refuse the unary minus of
``select``). The throttled channels' alpha and increase timers are ordered lists
(:mod:`.channels`), so a cycle in which nothing fires costs nothing; a rate change is
recorded as ``(cycle, endpoint, channel number, rate)`` in ``st.rates`` as it happens.
"""

from numba.extending import register_jitable

from ....formats import dcqcn as arithmetic
from ....formats.dcqcn import (ALPHA_ONE, LINE_RATE, alpha_decay, alpha_raise, cut, debt_after,
                               increase, packet_debt, stage_after)
from ...kernel import kernel
from .channels import NEVER, channel_number, set_first, set_put, timer_first, timer_remove, \
    timer_start

__all__ = ["N_CNPS", "N_RATES", "ALPHA_HEAD", "ALPHA_TAIL", "INCREASE_HEAD", "INCREASE_TAIL",
           "RP_NEXT", "N_CNP_PENDING", "SOONEST", "DCQCN_SCALARS", "np_marked", "np_pick",
           "rp_step", "record_cnp"]

for _rule in (arithmetic.select, cut, alpha_raise, alpha_decay, increase, stage_after,
              packet_debt, debt_after):
    register_jitable(_rule)

#: Indices of ``st.n_events``: CNPs and rate changes recorded.
N_CNPS, N_RATES = range(2)

#: The notification and reaction points' columns of the engine's ``scalars`` (the first
#: ``DCQCN_SCALARS``): the ends of the alpha and increase timer lists, the first cycle a
#: timer fires, the CNPs pending, and the first cycle a
#: channel with a packet to send may start one (-1: not known since the last change).
(ALPHA_HEAD, ALPHA_TAIL, INCREASE_HEAD, INCREASE_TAIL, RP_NEXT, N_CNP_PENDING, SOONEST,
 DCQCN_SCALARS) = range(8)


@kernel
def record_cnp(st, prm, e, cycle, x):
    """Record a CNP of endpoint ``e``'s context ``x`` picked in ``cycle``."""
    n = st.n_events[N_CNPS]
    if n < st.cnps.shape[0]:
        st.cnps[n, 0] = cycle
        st.cnps[n, 1] = e
        st.cnps[n, 2] = channel_number(prm, e, x)
    st.n_events[N_CNPS] = n + 1


@kernel
def np_marked(st, prm, e, x, cycle):
    """A CE-marked data packet for context ``x`` in ``cycle``."""
    if cycle - st.np_last[e, x] >= prm.cnp_interval:
        set_put(st.np_pending, st.scalars, e, N_CNP_PENDING, x, True)
        st.np_last[e, x] = cycle


@kernel
def np_pick(st, e):
    """The context whose CNP the transmitter sends now, the lowest with one pending: it is
    no longer pending."""
    x = set_first(st.np_pending, e, 0)
    set_put(st.np_pending, st.scalars, e, N_CNP_PENDING, x, False)
    return x


@kernel
def _settle(st, e, ch, edge):
    """Bring channel ``ch``'s pacer debt to the start of cycle ``edge + 1``."""
    paid = st.debt[e, ch] - st.rate[e, ch] * (edge + 1 - st.debt_at[e, ch])
    st.debt[e, ch] = max(0, paid)
    st.debt_at[e, ch] = edge + 1


@kernel
def _set_rate(st, prm, e, ch, cycle, rate):
    """Channel ``ch``'s rate is ``rate`` from the next cycle; a change is recorded."""
    if rate != st.rate[e, ch]:
        _settle(st, e, ch, cycle)
        st.rate[e, ch] = rate
        st.ready[e, ch] = st.debt_at[e, ch] + (st.debt[e, ch] + rate - 1) // rate
        n = st.n_events[N_RATES]
        if n < st.rates.shape[0]:
            st.rates[n, 0] = cycle
            st.rates[n, 1] = e
            st.rates[n, 2] = channel_number(prm, e, ch)
            st.rates[n, 3] = rate
        st.n_events[N_RATES] = n + 1


@kernel
def _increase(st, prm, e, ch, cycle, timer, byte):
    """One rate increase of channel ``ch`` for its expiries in ``cycle``."""
    sc = st.scalars
    t = stage_after(int(st.timer_stage[e, ch]), bool(timer), prm.fast_recovery)
    b = stage_after(int(st.byte_stage[e, ch]), bool(byte), prm.fast_recovery)
    st.timer_stage[e, ch] = t
    st.byte_stage[e, ch] = b
    rate, target = increase(int(st.rate[e, ch]), int(st.target[e, ch]), t, b, prm)
    st.target[e, ch] = target
    _set_rate(st, prm, e, ch, cycle, rate)
    if rate == LINE_RATE:
        # Back at the line rate: the rate limiter is released.
        st.alpha[e, ch] = ALPHA_ONE
        st.timer_stage[e, ch] = st.byte_stage[e, ch] = st.flits[e, ch] = 0
        timer_remove(st.alpha_at, st.alpha_prev, st.alpha_next, sc, e, ALPHA_HEAD, ALPHA_TAIL,
                     ch)
        timer_remove(st.increase_at, st.increase_prev, st.increase_next, sc, e, INCREASE_HEAD,
                     INCREASE_TAIL, ch)


@kernel
def rp_step(st, prm, e, cycle, cnp, sent, flits):
    """Clock ``cycle`` with a CNP for channel ``cnp`` and a data packet of ``flits`` flits
    picked on channel ``sent`` (-1: none), and the timers due.

    A CNP restarts its channel's timers and byte counter, so their expiries in the same
    cycle do not count; a timer and a byte-counter expiry of one channel in one cycle
    advance both stages but give one increase."""
    sc = st.scalars
    sc[e, SOONEST] = -1
    byte_fired = -1
    if sent >= 0:
        # The pick needs a zero debt: the packet's, less this cycle's payment.
        rate = int(st.rate[e, sent])
        debt = debt_after(packet_debt(int(flits)), rate)
        st.debt[e, sent] = debt
        st.debt_at[e, sent] = cycle + 1
        st.ready[e, sent] = cycle + 1 + (debt + rate - 1) // rate
        if sent != cnp and st.alpha_at[e, sent] != NEVER:
            total = st.flits[e, sent] + flits
            if total >= prm.byte_counter:
                byte_fired = sent
                st.flits[e, sent] = 0
            else:
                st.flits[e, sent] = total
    if cnp >= 0:
        st.target[e, cnp] = st.rate[e, cnp]
        new = cut(int(st.rate[e, cnp]), int(st.alpha[e, cnp]), prm.min_rate)
        st.alpha[e, cnp] = alpha_raise(int(st.alpha[e, cnp]), prm.g_shift)
        st.timer_stage[e, cnp] = st.byte_stage[e, cnp] = st.flits[e, cnp] = 0
        timer_start(st.alpha_at, st.alpha_prev, st.alpha_next, sc, e, ALPHA_HEAD, ALPHA_TAIL,
                    cnp, cycle + prm.alpha_timer)
        timer_start(st.increase_at, st.increase_prev, st.increase_next, sc, e, INCREASE_HEAD,
                    INCREASE_TAIL, cnp, cycle + prm.increase_timer)
        _set_rate(st, prm, e, cnp, cycle, new)
    fired = 0
    due = cycle >= sc[e, RP_NEXT]
    if due:
        # The timers firing are a prefix of each list; one restarted goes last, later.
        ch = sc[e, ALPHA_HEAD]
        while ch >= 0 and st.alpha_at[e, ch] <= cycle:
            after = st.alpha_next[e, ch]
            if st.alpha_at[e, ch] == cycle and ch != cnp:
                st.alpha[e, ch] = alpha_decay(int(st.alpha[e, ch]), prm.g_shift)
                timer_start(st.alpha_at, st.alpha_prev, st.alpha_next, sc, e, ALPHA_HEAD,
                            ALPHA_TAIL, ch, cycle + prm.alpha_timer)
            ch = after
        ch = sc[e, INCREASE_HEAD]
        while ch >= 0 and st.increase_at[e, ch] <= cycle:
            after = st.increase_next[e, ch]
            if st.increase_at[e, ch] == cycle and ch != cnp:
                timer_start(st.increase_at, st.increase_prev, st.increase_next, sc, e,
                            INCREASE_HEAD, INCREASE_TAIL, ch, cycle + prm.increase_timer)
                st.rp_fired[fired] = ch
                fired += 1
            ch = after
    # One increase per channel whose timer or byte counter expired (each channel's increase
    # is its own, so their order is free).
    for k in range(fired):
        ch = st.rp_fired[k]
        _increase(st, prm, e, ch, cycle, True, ch == byte_fired)
        if ch == byte_fired:
            byte_fired = -1
    if byte_fired >= 0:
        _increase(st, prm, e, byte_fired, cycle, False, True)
    if cnp >= 0 or fired or byte_fired >= 0 or due:
        sc[e, RP_NEXT] = min(timer_first(st.alpha_at, sc, e, ALPHA_HEAD),
                             timer_first(st.increase_at, sc, e, INCREASE_HEAD))
