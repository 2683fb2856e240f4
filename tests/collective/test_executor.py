"""The symbolic executor catches broken schedules and counts the bytes on every link
(docs/spec/collective.md section 15.5)."""

import dataclasses

import numpy as np
import pytest

from superfabric.sim.collective import rings
from superfabric.sim.collective.executor import ScheduleError, check, link_bytes, replay
from superfabric.sim.collective.library import plan, verify
from superfabric.sim.collective.reference import fold
from superfabric.sim.collective.schedule import Builder

from .fabrics import peers

P = peers("torus-2x2x2")


def _with(schedule, accelerator, index, step=None):
    """``schedule`` with one step of ``accelerator`` replaced by ``step``, or removed."""
    steps = list(schedule.steps[accelerator])
    if step is None:
        del steps[index]
    else:
        steps[index] = step
    return dataclasses.replace(schedule, steps=schedule.steps[:accelerator] + (tuple(steps),)
                               + schedule.steps[accelerator + 1:])


def test_a_missing_step_leaves_its_slot_unfilled():
    s = plan(P, "allreduce", "ring", 256)
    with pytest.raises(ScheduleError, match="accelerator 1: receive slot 3 is filled by no step"):
        check(_with(s, 0, 3))


def test_a_missing_dependency_sends_stale_data():
    s = plan(P, "allreduce", "ring", 256)
    step = s.steps[2][4]
    broken = _with(s, 2, 4, step._replace(wait=step.wait - 1))
    broken = _with(broken, 2, 3, broken.steps[2][3]._replace(wait=step.wait - 1))
    with pytest.raises(AssertionError, match=r"ring allreduce \(eager\): accelerator"):
        verify(broken, P, "int32")


def test_a_dependency_that_never_arrives_is_a_deadlock_naming_the_step():
    s = plan(P, "allreduce", "halving-doubling", 256)
    # Partners 0 and 4 each wait for the other's first chunk before sending theirs.
    broken = _with(s, 0, 0, s.steps[0][0]._replace(wait=1))
    broken = _with(broken, 4, 0, s.steps[4][0]._replace(wait=1))
    with pytest.raises(ScheduleError, match="deadlock: accelerator 0 step 0 waits for slot 0, "
                                            "sent by accelerator 4 step 0, which never issues"):
        replay(broken, [np.zeros(s.buffer, np.int32)] * 8, eager=True)


@pytest.mark.parametrize("field, value, fragment", [
    ("peer", 0, "peer 0 must be another of 0..7"),
    ("peer", 8, "peer 8 must be another of 0..7"),
    ("length", 1000, "1000 elements at .* leave the buffer of 64"),
    ("slot", 0, "slot 0 of accelerator .* is already filled"),
    ("wait", 99, "wait 99 must be"),
])
def test_static_rules(field, value, fragment):
    s = plan(P, "allreduce", "ring", 256)
    with pytest.raises(ScheduleError, match=fragment):
        check(_with(s, 0, 1, s.steps[0][1]._replace(**{field: value})))


def test_a_chunk_overwritten_before_it_is_sent_shows_in_the_lazy_replay():
    # Accelerator 0 sends element 0 to 1 without waiting for anything, while 2 overwrites
    # that element at 0: eager sends the old value, lazy the new; verify runs both.
    b = Builder(3, "broadcast", "race", 1, 1)
    b.send(0, 1, 0, 1, reduce=False)
    b.send(2, 0, 0, 1, reduce=False)
    race = b.schedule()
    data = [np.array([v], np.int32) for v in (10, 11, 12)]
    assert replay(race, data, eager=True)[1][0] == 10
    assert replay(race, data, eager=False)[1][0] == 12


def test_a_copy_where_an_add_belongs_is_caught():
    s = plan(P, "reducescatter", "halving-doubling", 256)
    with pytest.raises(AssertionError, match="accelerator"):
        verify(_with(s, 3, 1, s.steps[3][1]._replace(reduce=False)), P, "fp32")


def test_float_reductions_follow_the_documented_order_not_any_order():
    arrays = [np.array([x], np.float32) for x in (1e8, 1.0, -1e8, 1.0)]
    assert fold((0, 1, 2, 3), arrays)[0] == np.float32(1.0)
    assert fold(((0, 2), (1, 3)), arrays)[0] == np.float32(2.0)


def test_the_float_reference_is_the_documented_order_not_the_schedule(monkeypatch):
    # Document the ring's folds backwards: int32 sums agree, binary32 bits do not.
    s = plan(P, "allreduce", "ring", 4096)
    documented = rings.order(P, "allreduce", s.elements)
    monkeypatch.setattr(rings, "order", lambda *_: [(lo, hi, t[::-1]) for lo, hi, t in documented])
    verify(s, P, "int32")
    with pytest.raises(AssertionError, match="ring allreduce"):
        verify(s, P, "fp32")


def test_link_bytes_follow_the_routes():
    s = plan(P, "allreduce", "ring", 4096)
    carried = link_bytes(s, P)
    # Ring neighbours are one link apart: every step's bytes cross exactly one link.
    assert carried.sum() == sum(st.length * 4 for steps in s.steps for st in steps)
    assert (carried > 0).sum() == P.n
    d = plan(P, "alltoall", "direct", 4096)
    routed = sum(st.length * 4 * len(P.route(a, st.peer)) for a, steps in enumerate(d.steps)
                 for st in steps)
    assert link_bytes(d, P).sum() == routed > 0
