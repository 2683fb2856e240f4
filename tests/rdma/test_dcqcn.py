"""DCQCN: the shared fixed-point rules, the golden model of the notification and reaction
points (the compiled engine's, ``sim/rdma/kernels/dcqcn.py``), and their RTL held against
that model cycle by cycle (docs/architecture.md 10.13)."""

import dataclasses
import gc
import random
from types import SimpleNamespace

import numpy as np
import pytest
from amaranth.sim import Simulator

from superfabric.config import FabricConfig
from superfabric.formats.dcqcn import (ALPHA_ONE, LINE_RATE, DcqcnUnits, alpha_decay, alpha_raise,
                                       cut, debt_after, increase, rate_units, stage_after)
from superfabric.hdl.rdma.dcqcn import NotificationPoint, ReactionPoint as RtlReactionPoint
from superfabric.sim.rdma.kernels.channels import NEVER, SET_BITS, channel_number
from superfabric.sim.rdma.kernels.dcqcn import N_RATES, RP_NEXT, np_marked, np_pick, rp_step
from superfabric.sim.rdma.kernels.engine import engine_events_room, engine_params, engine_state
from superfabric.sim.rdma.traffic import key_columns

DCQCN_ON = ["rdma.enabled=true", "ecn.enabled=true", "dcqcn.enabled=true"]
UNITS = FabricConfig.load(overrides=DCQCN_ON).dcqcn.units
#: Short timers and a small byte counter, so that a short run meets every rule.
FAST = DcqcnUnits(cnp_interval=5, alpha_timer=7, increase_timer=9, byte_counter=40,
                  fast_recovery=3, g_shift=2, ai_rate=rate_units(0.02), hai_rate=rate_units(0.1),
                  min_rate=rate_units(0.05))


# -- the shared arithmetic -------------------------------------------------------


def test_a_cut_at_alpha_one_halves_and_never_goes_below_the_minimum():
    assert cut(LINE_RATE, ALPHA_ONE, 10) == LINE_RATE // 2
    assert cut(LINE_RATE, 0, 10) == LINE_RATE
    assert cut(1000, ALPHA_ONE, 800) == 800
    assert cut(3000, ALPHA_ONE // 2, 10) == 3000 - 3000 // 4


def test_alpha_stays_between_zero_and_one():
    assert alpha_raise(ALPHA_ONE, 8) == ALPHA_ONE
    assert alpha_raise(0, 8) == ALPHA_ONE >> 8
    assert alpha_decay(ALPHA_ONE, 8) == ALPHA_ONE - (ALPHA_ONE >> 8)
    # The floored shift stops the decay just below 2**g_shift.
    assert alpha_decay(255, 8) == 255


@pytest.mark.parametrize("timer, byte, phase", [(0, 0, "fast"), (2, 2, "fast"), (2, 4, "additive"), (3, 0, "additive"),
                                                (0, 3, "additive"), (4, 3, "additive"),
                                                (4, 4, "hyper")])
def test_increase_phases(timer, byte, phase):
    rate, target = 20_000, 30_000
    new_rate, new_target = increase(rate, target, timer, byte, FAST)
    step = {"fast": 0, "additive": FAST.ai_rate, "hyper": FAST.hai_rate}[phase]
    assert new_target == target + step
    assert new_rate == (rate + new_target + 1) // 2


def test_the_target_stops_at_the_line_rate_and_the_rate_reaches_it():
    rate, target = increase(LINE_RATE - 1, LINE_RATE - 3, 9, 0, FAST)
    assert (rate, target) == (LINE_RATE, LINE_RATE)


def test_stages_count_to_f_plus_one_and_stay():
    stage = 0
    for _ in range(10):
        stage = stage_after(stage, True, 3)
    assert stage == 4
    assert stage_after(2, False, 3) == 2


def test_debt_is_paid_at_the_rate_and_stops_at_zero():
    assert debt_after(5 * LINE_RATE, LINE_RATE) == 4 * LINE_RATE
    assert debt_after(100, 300) == 0


# -- the golden model -------------------------------------------------------------


class Points:
    """Endpoint 0's notification and reaction points in the compiled engine state under
    ``units``, read as lists: its channels and receive contexts ``0 .. channels - 1`` are
    its state indices."""

    def __init__(self, units: DcqcnUnits, channels: int):
        cfg = self.cfg = FabricConfig.load(overrides=DCQCN_ON)
        E, rd = cfg.endpoints, cfg.rdma
        assert channels <= (E - 1) * rd.channels_per_peer
        tables = SimpleNamespace(keys=np.zeros((E, rd.keys, key_columns(E)), np.int64),
                                 page_table=np.zeros((E, rd.pages), np.int64))
        self.prm = engine_params(cfg)._replace(**dataclasses.asdict(units))
        self.st = engine_state(cfg, tables)
        self.channels = channels
        self._index = {channel_number(self.prm, 0, i): i for i in range(channels)}

    def _row(self, name: str) -> list:
        return getattr(self.st, name)[0, :self.channels].tolist()

    rate = property(lambda self: self._row("rate"))
    target = property(lambda self: self._row("target"))
    alpha = property(lambda self: self._row("alpha"))
    byte_stage = property(lambda self: self._row("byte_stage"))
    flits = property(lambda self: self._row("flits"))

    @property
    def next_timer(self) -> int:
        """The first cycle a rate timer fires, NEVER when none runs."""
        return int(self.st.scalars[0, RP_NEXT])

    @property
    def changes(self) -> list:
        """Every rate change so far, ``(cycle, channel, rate)``."""
        n = int(self.st.n_events[N_RATES])
        return [(c, self._index[ch], r) for c, _, ch, r in self.st.rates[:n].tolist()]

    @property
    def pending(self) -> set:
        """The receive contexts with a CNP pending."""
        words = self.st.np_pending[0]
        return {x for x in range(self.channels) if words[x // SET_BITS] >> (x % SET_BITS) & 1}

    def throttled(self, ch: int) -> bool:
        return self.st.alpha_at[0, ch] != NEVER

    def eligible(self, ch: int, cycle: int) -> bool:
        return self.st.ready[0, ch] <= cycle

    def step(self, cycle: int, cnp: int = -1, sent: int = -1, flits: int = 0) -> None:
        self.st = engine_events_room(self.st, self.cfg)
        rp_step(self.st, self.prm, 0, cycle, cnp, sent, flits)

    def marked(self, x: int, cycle: int) -> None:
        np_marked(self.st, self.prm, 0, x, cycle)

    def pick(self) -> int:
        return int(np_pick(self.st, 0))


def test_a_cnp_cuts_the_rate_and_recovery_brings_it_back_to_the_line_rate():
    rp = Points(UNITS, 2)
    rp.step(100, cnp=1)
    assert rp.rate == [LINE_RATE, LINE_RATE // 2] and rp.target[1] == LINE_RATE
    assert rp.throttled(1) and not rp.throttled(0)
    cycle = 101
    while rp.throttled(1):
        rp.step(cycle)
        cycle += 1
    # Every increase is one increase_timer after the last, starting from the CNP.
    cycles = [c for c, ch, _ in rp.changes]
    assert cycles[0] == 100
    assert all(b - a == UNITS.increase_timer for a, b in zip(cycles, cycles[1:]))
    assert rp.rate[1] == LINE_RATE and rp.alpha[1] == ALPHA_ONE
    assert rp.next_timer == NEVER


def test_alpha_decays_once_per_alpha_timer_without_a_cnp():
    rp = Points(UNITS, 1)
    rp.step(0, cnp=0)
    for cycle in range(1, 3 * UNITS.alpha_timer + 1):
        rp.step(cycle)
    a = ALPHA_ONE
    for _ in range(3):
        a = alpha_decay(a, UNITS.g_shift)
    assert rp.alpha[0] == a


def test_the_pacer_spaces_packets_at_the_channel_rate():
    rp = Points(UNITS, 1)
    rp.step(0, cnp=0)            # half the line rate from cycle 1
    starts, cycle = [], 1
    while len(starts) < 4:
        if rp.eligible(0, cycle):
            starts.append(cycle)
            rp.step(cycle, sent=0, flits=10)
        else:
            rp.step(cycle)
        cycle += 1
    # Ten flits at half the line rate: one packet every 20 cycles.
    assert [b - a for a, b in zip(starts, starts[1:])] == [20, 20, 20]


def test_the_byte_counter_gives_increases_as_the_flits_go():
    rp = Points(FAST, 1)
    rp.step(0, cnp=0)
    rp.step(1, sent=0, flits=30)
    assert rp.byte_stage[0] == 0 and rp.flits[0] == 30
    before = rp.rate[0]
    rp.step(2, sent=0, flits=10)
    assert rp.byte_stage[0] == 1 and rp.flits[0] == 0 and rp.rate[0] > before


def test_a_channel_at_the_line_rate_counts_no_flits_and_waits_only_for_its_flits():
    rp = Points(FAST, 1)
    rp.step(5, sent=0, flits=16)
    assert rp.flits[0] == 0 and not rp.throttled(0)
    assert not rp.eligible(0, 5 + 15) and rp.eligible(0, 5 + 16)


def test_the_notification_point_spaces_cnps_per_context():
    np_ = Points(FAST, 3)
    np_.marked(2, 10)
    np_.marked(2, 12)            # within cnp_interval: no second CNP
    np_.marked(1, 12)
    assert np_.pick() == 1 and np_.pick() == 2 and not np_.pending
    np_.marked(2, 14)
    assert not np_.pending
    np_.marked(2, 15)
    assert np_.pending == {2}


# -- the RTL against the model -----------------------------------------------------


def _simulate(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("units", [FAST, UNITS], ids=["fast", "default"])
def test_reaction_point_rtl_equals_the_model(units):
    """Random CNPs and picks on three channels: rates, readiness and changes cycle by cycle."""
    channels, flits_max, cycles = 3, 16, 1500
    dut = RtlReactionPoint(channels=channels, units=units, max_packet_flits=flits_max)
    model = Points(units, channels)
    rng = random.Random(7)

    async def bench(ctx):
        seen = 0
        for cycle in range(cycles):
            ready = ctx.get(dut.ready)
            for ch in range(channels):
                assert bool(ready >> ch & 1) == model.eligible(ch, cycle), (cycle, ch)
                assert ctx.get(dut.rate[ch]) == model.rate[ch], (cycle, ch)
            cnp = rng.randrange(channels) if rng.random() < 0.03 else -1
            open_ = [ch for ch in range(channels) if model.eligible(ch, cycle)]
            sent = rng.choice(open_) if open_ and rng.random() < 0.5 else -1
            flits = rng.randint(3, flits_max)
            ctx.set(dut.cnp.valid, cnp >= 0)
            ctx.set(dut.cnp.payload, max(cnp, 0))
            ctx.set(dut.sent.valid, sent >= 0)
            ctx.set(dut.sent.payload.channel, max(sent, 0))
            ctx.set(dut.sent.payload.flits, flits)
            model.step(cycle, cnp=cnp, sent=sent, flits=flits if sent >= 0 else 0)
            await ctx.tick()
            changed = ctx.get(dut.changed)
            now = [(c, ch) for c, ch, _ in model.changes[seen:]]
            seen = len(model.changes)
            assert {ch for ch in range(channels) if changed >> ch & 1} == {ch for _, ch in now}
            assert all(c == cycle for c, _ in now)
        assert len(model.changes) > 20

    _simulate(dut, bench)


def test_notification_point_rtl_equals_the_model():
    contexts, cycles = 4, 400
    dut = NotificationPoint(contexts=contexts, interval=FAST.cnp_interval)
    model = Points(FAST, contexts)
    rng = random.Random(3)

    async def bench(ctx):
        picks = 0
        for cycle in range(cycles):
            pending = ctx.get(dut.pending)
            assert {x for x in range(contexts) if pending >> x & 1} == model.pending, cycle
            pick = bool(model.pending) and rng.random() < 0.4
            if pick:
                assert ctx.get(dut.lowest) == min(model.pending)
                model.pick()
                picks += 1
            x = rng.randrange(contexts)
            marked = rng.random() < 0.5
            ctx.set(dut.pick, pick)
            ctx.set(dut.marked.valid, marked)
            ctx.set(dut.marked.payload, x)
            if marked:
                model.marked(x, cycle)
            await ctx.tick()
        assert picks > 50

    _simulate(dut, bench)


# Amaranth counts a component as created before its constructor can refuse
# the arguments, and warns that the refused one was never elaborated.
@pytest.mark.filterwarnings("ignore:.*created but never used")
def test_blocks_refuse_bad_arguments():
    with pytest.raises(ValueError, match="channels must be a positive integer, not 0"):
        RtlReactionPoint(channels=0, units=FAST, max_packet_flits=16)
    with pytest.raises(TypeError, match="units must be a DcqcnUnits"):
        RtlReactionPoint(channels=2, units=None, max_packet_flits=16)
    with pytest.raises(ValueError, match="interval must be a positive integer, not 0"):
        NotificationPoint(contexts=2, interval=0)
    gc.collect()    # warn here, under the filter, not in a later test
