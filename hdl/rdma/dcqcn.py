"""DCQCN at an RDMA engine: the notification point of its receive contexts and the
reaction points and pacers of its channels (``docs/architecture.md`` section 10.13).

The arithmetic is :mod:`superfabric.formats.dcqcn`, evaluated here on
Amaranth values and in the golden model (``sim/rdma/kernels/dcqcn.py``) on integers.
"""

from amaranth.hdl import Array, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ...formats.dcqcn import (ALPHA_BITS, ALPHA_ONE, LINE_RATE, RATE_BITS, DcqcnUnits, alpha_decay,
                             alpha_raise, cut, debt_after, debt_bits, increase, packet_debt,
                             stage_after, stage_bits)
from ..checks import check_count

__all__ = ["NotificationPoint", "ReactionPoint"]


class NotificationPoint(wiring.Component):
    """Pending CNPs of ``contexts`` receive contexts, at most one per ``interval`` cycles each.

    Ports
    -----
    marked : stream of contexts, always ready: a CE-marked data packet for
        that context this cycle; it makes a CNP pending unless one was made
        pending for the context fewer than ``interval`` cycles ago.
    pick : the transmitter takes the CNP of context ``lowest`` this cycle.
    pending : one bit per context; ``lowest`` the first pending context.
    """

    def __init__(self, *, contexts: int, interval: int):
        check_count("contexts", contexts)
        check_count("interval", interval)
        self._contexts, self._interval = contexts, interval
        super().__init__({
            "marked": In(stream.Signature(range(contexts), always_ready=True)),
            "pick": In(1),
            "pending": Out(contexts), "lowest": Out(range(contexts)),
        })

    def elaborate(self, platform):
        m = Module()
        n, interval = self._contexts, self._interval
        first = Const(n - 1, range(n))
        for x in reversed(range(n - 1)):
            first = Mux(self.pending[x], x, first)
        m.d.comb += self.lowest.eq(first)
        for x in range(n):
            # Cycles until the context may make its next CNP pending.
            wait = Signal(range(max(2, interval)), name=f"cnp_wait{x}")
            mark = self.marked.valid & (self.marked.payload == x) & (wait == 0)
            picked = self.pick & (self.lowest == x)
            pending = Signal(name=f"cnp_pending{x}")
            m.d.comb += self.pending[x].eq(pending)
            m.d.sync += pending.eq(mark | (pending & ~picked))
            with m.If(mark):
                m.d.sync += wait.eq(interval - 1)
            with m.Elif(wait != 0):
                m.d.sync += wait.eq(wait - 1)
        return m


class ReactionPoint(wiring.Component):
    """The DCQCN rate machines and pacers of ``channels`` channels.

    Ports
    -----
    cnp : stream of channels, always ready: a CNP for that channel arrived
        this cycle.
    sent : stream of :meth:`sent_layout`, always ready: a data packet of
        ``flits`` flits was picked on ``channel`` this cycle (only while it
        is ``ready``).
    ready : per channel, the pacer lets it start a packet (its debt is zero).
    rate : per channel, the current rate (``superfabric.formats.dcqcn`` units).
    changed : per channel, its rate changed at the last edge.
    """

    def __init__(self, *, channels: int, units: DcqcnUnits, max_packet_flits: int):
        check_count("channels", channels)
        check_count("max_packet_flits", max_packet_flits)
        if not isinstance(units, DcqcnUnits):
            raise TypeError(f"units must be a DcqcnUnits, not {units!r}")
        self._channels, self._units, self._flits = channels, units, max_packet_flits
        super().__init__({
            "cnp": In(stream.Signature(range(channels), always_ready=True)),
            "sent": In(stream.Signature(self.sent_layout(channels, max_packet_flits),
                                        always_ready=True)),
            "ready": Out(channels),
            "rate": Out(RATE_BITS).array(channels),
            "changed": Out(channels),
        })

    @staticmethod
    def sent_layout(channels: int, max_packet_flits: int) -> data.StructLayout:
        """The payload of ``sent``: the channel and the packet's length in flits."""
        return data.StructLayout({"channel": range(channels),
                                  "flits": range(max_packet_flits + 1)})

    def elaborate(self, platform):
        m = Module()
        n, u = self._channels, self._units
        cnp_channel, sent_packet = self.cnp.payload, self.sent.payload
        rate = Array(Signal(RATE_BITS, name=f"rp_rate{c}", init=LINE_RATE) for c in range(n))
        alpha = Array(Signal(ALPHA_BITS, name=f"rp_alpha{c}", init=ALPHA_ONE) for c in range(n))
        # One CNP per cycle at most: the cut, and its multiplier, are shared.
        cut_rate = Signal(RATE_BITS)
        raised = Signal(ALPHA_BITS)
        m.d.comb += [cut_rate.eq(cut(rate[cnp_channel], alpha[cnp_channel], u.min_rate)),
                     raised.eq(alpha_raise(alpha[cnp_channel], u.g_shift))]
        stage = stage_bits(u.fast_recovery)
        for c in range(n):
            target = Signal(RATE_BITS, name=f"rp_target{c}", init=LINE_RATE)
            throttled = Signal(name=f"rp_throttled{c}")
            alpha_count = Signal(range(max(2, u.alpha_timer)), name=f"rp_alpha_count{c}")
            increase_count = Signal(range(max(2, u.increase_timer)), name=f"rp_increase_count{c}")
            timer_stage = Signal(stage, name=f"rp_timer_stage{c}")
            byte_stage = Signal(stage, name=f"rp_byte_stage{c}")
            flits = Signal(range(u.byte_counter + self._flits), name=f"rp_flits{c}")
            debt = Signal(debt_bits(self._flits), name=f"rp_debt{c}")
            changed = Signal(name=f"rp_changed{c}")

            cnp = self.cnp.valid & (cnp_channel == c)
            sent = self.sent.valid & (sent_packet.channel == c)
            running = throttled & ~cnp
            alpha_fire = running & (alpha_count + 1 == u.alpha_timer)
            timer_fire = running & (increase_count + 1 == u.increase_timer)
            total = Signal(range(u.byte_counter + self._flits), name=f"rp_total{c}")
            m.d.comb += total.eq(flits + sent_packet.flits)
            byte_fire = running & sent & (total >= u.byte_counter)
            t_next = Signal(stage, name=f"rp_timer_stage_next{c}")
            b_next = Signal(stage, name=f"rp_byte_stage_next{c}")
            m.d.comb += [t_next.eq(stage_after(timer_stage, timer_fire, u.fast_recovery)),
                         b_next.eq(stage_after(byte_stage, byte_fire, u.fast_recovery))]
            up_rate = Signal(RATE_BITS, name=f"rp_up_rate{c}")
            up_target = Signal(RATE_BITS, name=f"rp_up_target{c}")
            up_rate_value, up_target_value = increase(rate[c], target, t_next, b_next, u)
            m.d.comb += [up_rate.eq(up_rate_value), up_target.eq(up_target_value)]
            stepping = timer_fire | byte_fire
            release = stepping & (up_rate == LINE_RATE)
            rate_next = Signal(RATE_BITS, name=f"rp_rate_next{c}")

            m.d.comb += [self.ready[c].eq(debt == 0), self.rate[c].eq(rate[c]),
                         self.changed[c].eq(changed)]
            charged = Mux(sent, packet_debt(sent_packet.flits), debt)
            m.d.sync += [debt.eq(debt_after(charged, rate[c])),
                         changed.eq(rate_next != rate[c]), rate[c].eq(rate_next)]
            m.d.comb += rate_next.eq(rate[c])
            with m.If(cnp):
                m.d.comb += rate_next.eq(cut_rate)
                m.d.sync += [target.eq(rate[c]), alpha[c].eq(raised), throttled.eq(1),
                             alpha_count.eq(0), increase_count.eq(0), timer_stage.eq(0),
                             byte_stage.eq(0), flits.eq(0)]
            with m.Elif(release):
                # Back at the line rate: the rate limiter is released.
                m.d.comb += rate_next.eq(LINE_RATE)
                m.d.sync += [target.eq(LINE_RATE), alpha[c].eq(ALPHA_ONE), throttled.eq(0),
                             alpha_count.eq(0), increase_count.eq(0), timer_stage.eq(0),
                             byte_stage.eq(0), flits.eq(0)]
            with m.Elif(throttled):
                m.d.sync += [alpha_count.eq(Mux(alpha_fire, 0, alpha_count + 1)),
                             increase_count.eq(Mux(timer_fire, 0, increase_count + 1))]
                with m.If(alpha_fire):
                    m.d.sync += alpha[c].eq(alpha_decay(alpha[c], u.g_shift))
                with m.If(stepping):
                    m.d.comb += rate_next.eq(up_rate)
                    m.d.sync += [target.eq(up_target), timer_stage.eq(t_next),
                                 byte_stage.eq(b_next)]
                with m.If(sent):
                    m.d.sync += flits.eq(Mux(byte_fire, 0, total))
        return m
