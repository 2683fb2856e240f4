"""The schedule format (config/formats/collective.py, docs/spec/collective.md section 15.2)."""

import pytest

from superfabric.formats.collective import (STEP_BITS, STEP_FIELDS, STEP_WORDS, step_fields,
                                            step_words)
from superfabric.sim.collective.schedule import Builder, Step, blocks, elements_of


def test_a_step_packs_into_two_words_and_back():
    assert STEP_BITS <= 64 * STEP_WORDS and STEP_WORDS == 2
    fields = {name: (1 << width) - 1 - k for k, (name, width) in enumerate(STEP_FIELDS)}
    assert step_fields(step_words(**fields)) == fields
    step = Step(peer=5, src=7, dst=9, length=100, reduce=True, slot=3, wait=2)
    assert step_fields(step.words()) == {"peer": 5, "reduce": 1, "src": 7, "dst": 9,
                                         "length": 100, "slot": 3, "wait": 2}


def test_a_field_that_does_not_fit_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"step peer = 1024: must be 0 \.\. 1023"):
        step_words(peer=1024)


def test_blocks_are_balanced_and_cover_the_range():
    assert blocks(0, 10, 4) == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert blocks(0, 2, 8) == [(0, 0), (0, 0), (0, 0), (0, 1), (1, 1), (1, 1), (1, 1), (1, 2)]


@pytest.mark.parametrize("nbytes", [0, -4, 6, 8.0])
def test_a_message_is_whole_elements(nbytes):
    with pytest.raises(ValueError, match="bytes = .*: must be a positive multiple of 4"):
        elements_of(nbytes)


def test_the_builder_numbers_slots_per_receiver_and_waits_for_what_was_named():
    b = Builder(3, "allreduce", "test", 4, 4)
    first = b.send(0, 1, 0, 2, reduce=True)
    b.send(2, 1, 2, 4, reduce=False)
    b.send(1, 2, 0, 2, reduce=True, after=(first,))
    s = b.schedule()
    assert s.slots == (0, 2, 1)
    assert s.steps[1] == (Step(2, 0, 0, 2, True, 0, 1),)
    assert s.steps[2] == (Step(1, 2, 2, 2, False, 1, 0),)
    with pytest.raises(ValueError, match="arrives at 1, not at 0"):
        b.send(0, 2, 0, 1, reduce=True, after=(first,))


def test_segments_wait_only_for_the_segments_they_overlap():
    b = Builder(3, "allreduce", "test", 10, 10, segment=4)
    first = b.send(0, 1, 0, 10, reduce=True)
    b.send(1, 2, 2, 10, reduce=True, after=(first,))
    s = b.schedule()
    # 0 .. 9 in segments from lo: 0..3, 4..7, 8..9, each its own slot at 1.
    assert [(t.src, t.length, t.slot) for t in s.steps[0]] == [(0, 4, 0), (4, 4, 1), (8, 2, 2)]
    # 2..5 overlaps slots 0 and 1, 6..9 slots 1 and 2: each waits for the later.
    assert [(t.src, t.length, t.wait) for t in s.steps[1]] == [(2, 4, 2), (6, 4, 3)]
    assert s.slots == (0, 3, 2)
    with pytest.raises(ValueError, match="segment = -1: must be a whole number of elements"):
        Builder(3, "allreduce", "test", 10, 10, segment=-1)
