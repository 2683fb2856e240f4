"""Golden model of :mod:`superfabric.hdl.rdma.dcqcn`: DCQCN's notification and reaction points.

The rules are ``docs/architecture.md`` section 10.13 and the arithmetic is
:mod:`superfabric.formats.dcqcn`, shared with the RTL. Like the engine
model, these keep timers as the cycle they fire in rather than counting
every cycle, and a pacer's debt as its value at one cycle and the rate
it has been paid off at since: an engine with nothing to do costs nothing.
"""

from ...formats.dcqcn import (ALPHA_ONE, LINE_RATE, DcqcnUnits, alpha_decay, alpha_raise, cut,
                             debt_after, increase, packet_debt, stage_after)

__all__ = ["NotificationPoint", "ReactionPoint", "NEVER"]

#: A cycle that never comes: the next event of a timer that is not running.
NEVER = float("inf")


class NotificationPoint:
    """The CNP side of one engine's receive contexts.

    A CE-marked data packet at context ``x`` (decided at its RETH) makes a
    CNP pending for ``x`` unless one was made pending fewer than
    ``cnp_interval`` cycles before; the transmitter sends the pending CNPs
    lowest context first.
    """

    def __init__(self, units: DcqcnUnits):
        self._interval = units.cnp_interval
        self.pending = set()
        self._last = {}              # context -> cycle its last CNP was made pending

    def marked(self, x: int, cycle: int) -> None:
        """A CE-marked data packet for context ``x`` in ``cycle``."""
        last = self._last.get(x)
        if last is None or cycle - last >= self._interval:
            self.pending.add(x)
            self._last[x] = cycle

    def pick(self) -> int:
        """The context whose CNP the transmitter sends now; it is no longer pending."""
        x = min(self.pending)
        self.pending.discard(x)
        return x


class ReactionPoint:
    """The rate machines of one engine's channels, and their pacers.

    Per channel: the current rate, the target rate, alpha, the timer and
    byte stages, the flits counted toward the byte counter, and whether
    the channel is throttled (from a CNP until its rate is back at the line
    rate; only then do its timers run). ``changes`` lists ``(cycle,
    channel, rate)`` each time a rate changes, the rate holding from the
    next cycle.

    Each cycle: :meth:`eligible` for the pick, then :meth:`step` with the
    cycle's CNP and pick. Only a cycle in which a CNP arrives, a packet is
    picked or :attr:`next_timer` has come changes anything, so the engine
    may leave the others out.
    """

    def __init__(self, units: DcqcnUnits, channels: int):
        self.units = units
        self.rate = [LINE_RATE] * channels
        self.target = [LINE_RATE] * channels
        self.alpha = [ALPHA_ONE] * channels
        self.timer_stage = [0] * channels
        self.byte_stage = [0] * channels
        self.flits = [0] * channels
        self._alpha_at = {}          # throttled channel -> the cycle its alpha timer fires
        self._increase_at = {}       # throttled channel -> the cycle its increase timer fires
        self._debt = [0] * channels  # the pacer's debt at the start of cycle _debt_at
        self._debt_at = [0] * channels
        self._ready = [0] * channels  # the first cycle the debt is paid off
        self.changes = []
        self.next_timer = NEVER

    def throttled(self, ch: int) -> bool:
        """The channel is below the line rate (or recovering to it) since a CNP."""
        return ch in self._alpha_at

    def eligible(self, ch: int, cycle: int) -> bool:
        """The pacer lets the channel start a packet in ``cycle`` (its debt is zero)."""
        return self._ready[ch] <= cycle

    def ready(self, ch: int) -> int:
        """The first cycle the pacer lets the channel start a packet."""
        return self._ready[ch]

    def _settle(self, ch: int, edge: int) -> None:
        """Bring the debt to the start of cycle ``edge + 1``, paid at the rate so far."""
        debt, since, rate = self._debt[ch], self._debt_at[ch], self.rate[ch]
        self._debt[ch] = max(0, debt - rate * (edge + 1 - since))
        self._debt_at[ch] = edge + 1

    def _set_rate(self, ch: int, cycle: int, rate: int) -> None:
        if rate != self.rate[ch]:
            self._settle(ch, cycle)
            self.rate[ch] = rate
            self._ready[ch] = self._debt_at[ch] + -(-self._debt[ch] // rate)
            self.changes.append((cycle, ch, rate))

    def step(self, cycle: int, cnp: int = -1, sent: int = -1, flits: int = 0) -> None:
        """Clock ``cycle``: a CNP for channel ``cnp``, a data packet of ``flits`` flits picked on
        channel ``sent`` (-1: none), and the timers due.

        A CNP restarts its channel's timers and byte counter, so their
        expiries in the same cycle do not count; a timer and a byte-counter
        expiry of one channel in one cycle advance both stages but give one
        increase.
        """
        u = self.units
        byte_fired = -1
        if sent >= 0:
            # The pick needs a zero debt: the packet's, less this cycle's payment.
            self._debt[sent] = debt_after(packet_debt(flits), self.rate[sent])
            self._debt_at[sent] = cycle + 1
            self._ready[sent] = cycle + 1 + -(-self._debt[sent] // self.rate[sent])
            if sent != cnp and self.throttled(sent):
                total = self.flits[sent] + flits
                if total >= u.byte_counter:
                    byte_fired, self.flits[sent] = sent, 0
                else:
                    self.flits[sent] = total
        if cnp >= 0:
            self.target[cnp] = self.rate[cnp]
            new = cut(self.rate[cnp], self.alpha[cnp], u.min_rate)
            self.alpha[cnp] = alpha_raise(self.alpha[cnp], u.g_shift)
            self.timer_stage[cnp] = self.byte_stage[cnp] = self.flits[cnp] = 0
            self._alpha_at[cnp] = cycle + u.alpha_timer
            self._increase_at[cnp] = cycle + u.increase_timer
            self._set_rate(cnp, cycle, new)
        timer_fired = []
        if cycle >= self.next_timer:
            for ch, at in self._alpha_at.items():
                if at == cycle and ch != cnp:
                    self.alpha[ch] = alpha_decay(self.alpha[ch], u.g_shift)
                    self._alpha_at[ch] = cycle + u.alpha_timer
            for ch, at in self._increase_at.items():
                if at == cycle and ch != cnp:
                    self._increase_at[ch] = cycle + u.increase_timer
                    timer_fired.append(ch)
        for ch in sorted(set(timer_fired) | ({byte_fired} - {-1})):
            self._increase(ch, cycle, timer=ch in timer_fired, byte=ch == byte_fired)
        if cnp >= 0 or timer_fired or byte_fired >= 0 or cycle >= self.next_timer:
            self._update_next()

    def _increase(self, ch: int, cycle: int, *, timer: bool, byte: bool) -> None:
        """One rate increase of channel ``ch`` for its expiries in ``cycle``."""
        u = self.units
        t = self.timer_stage[ch] = stage_after(self.timer_stage[ch], timer, u.fast_recovery)
        b = self.byte_stage[ch] = stage_after(self.byte_stage[ch], byte, u.fast_recovery)
        rate, self.target[ch] = increase(self.rate[ch], self.target[ch], t, b, u)
        self._set_rate(ch, cycle, rate)
        if rate == LINE_RATE:
            # Back at the line rate: the rate limiter is released.
            self.alpha[ch] = ALPHA_ONE
            self.timer_stage[ch] = self.byte_stage[ch] = self.flits[ch] = 0
            del self._alpha_at[ch], self._increase_at[ch]

    def _update_next(self) -> None:
        self.next_timer = min(min(self._alpha_at.values(), default=NEVER),
                              min(self._increase_at.values(), default=NEVER))
