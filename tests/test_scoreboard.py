"""The switch scoreboard is itself tested: equal records compare exact, and every kind of
difference planted into one side is reported, naming the packet and the cycle.

The records are the golden model's own, so they hold every feature the
scoreboard compares (drops, pause frames, ECN codepoints and backlogs,
counters); the RTL's copy then gets one difference at a time.
"""

import copy
import functools

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.formats.packet import CE, ECT0
from superfabric.sim.backpressure import SinkReady
from superfabric.sim.fabric.top import FabricModel
from superfabric.sim.pfc import pause_sources
from superfabric.sim.traffic import generate
from superfabric.tb.scoreboard import compare

#: name -> overrides of the tiny preset: one lossy configuration with ECN, one lossless
#: with PFC and ECN.
CONFIGS = {
    "drop-ecn": ["switch.buffer_flits=32", "switch.max_packet_flits=8", "switch.ingress_full=drop",
                 "ecn.enabled=true", "ecn.kmin=2", "ecn.kmax=24", "ecn.pmax=0.5",
                 "ecn.ect_fraction=0.8"],
    "pfc-ecn": ["switch.ingress_full=drop", "pfc.enabled=true", "pfc.xoff=36", "pfc.xon=20",
                "pfc.headroom=20", "pfc.pause_quanta=64", "ecn.enabled=true", "ecn.kmin=4",
                "ecn.kmax=32", "ecn.ect_fraction=0.8"],
}


@functools.cache
def _run(name):
    """(trace, model records) of a short, busy run."""
    cfg = FabricConfig.load(preset="tiny", overrides=CONFIGS[name])
    trace = generate(cfg, "incast", load=1.0, cycles=600, seed=3,
                     packet_lengths="bimodal:1,6,0.5", ect_fraction=cfg.ecn.ect_fraction)
    sink = SinkReady(cfg.switch.ports, 0.2, 3)
    pause, sink_pause = pause_sources(cfg, 0.2, 3)
    rec = FabricModel(cfg).run(trace, sink=sink, pause=pause, sink_pause=sink_pause)
    return trace, rec


@pytest.fixture(params=sorted(CONFIGS))
def run(request):
    """Each configuration's (trace, model records)."""
    return _run(request.param)


@pytest.fixture
def lossy():
    """The run with drops."""
    trace, rec = _run("drop-ecn")
    assert rec.dropped.sum() > 10
    return trace, rec


@pytest.fixture
def paused():
    """The run with pause frames."""
    trace, rec = _run("pfc-ecn")
    assert len(rec.pfc_frames) > 10
    return trace, rec


def _delivered(rec, k=0):
    """The k-th delivered packet, by departure."""
    return int(np.flatnonzero(rec.tail >= 0)[np.argsort(rec.tail[rec.tail >= 0])][k])


def test_equal_records_are_exact(run):
    trace, model = run
    assert (model.tail >= 0).sum() > 50
    result = compare(trace, copy.deepcopy(model), model)
    assert result.exact, result.report()
    assert result.mismatches == 0 and not result.problems and result.first_mismatch is None


def _per_packet(model, change):
    """Plant ``change`` into one delivered packet of the RTL's copy."""
    rtl = copy.deepcopy(model)
    i = _delivered(model, 7)
    change(rtl, i)
    return rtl, i


#: Differences of one packet's record: field named in the first mismatch, and the change.
PACKET_KINDS = {
    "head cycle": ("head", lambda r, i: r.head.__setitem__(i, r.head[i] + 1)),
    "tail cycle": ("tail", lambda r, i: r.tail.__setitem__(i, r.tail[i] + 1)),
    "output port": ("out_port", lambda r, i: r.out_port.__setitem__(i, (r.out_port[i] + 1) % 4)),
    "ECN codepoint": ("ecn_out", lambda r, i: r.ecn_out.__setitem__(
        i, ECT0 if r.ecn_out[i] == CE else CE)),
    "ECN backlog": ("ecn_backlog", lambda r, i: r.ecn_backlog.__setitem__(i, r.ecn_backlog[i] + 1)),
    "dropped instead of delivered": ("dropped", lambda r, i: (
        r.dropped.__setitem__(i, True), r.head.__setitem__(i, -1), r.tail.__setitem__(i, -1),
        r.out_port.__setitem__(i, -1))),
    "payload bit": ("payload", lambda r, i: r.payload_ok.__setitem__(i, False)),
}


@pytest.mark.parametrize("kind", sorted(PACKET_KINDS))
def test_a_packet_difference_is_named_with_its_tag_and_cycle(run, kind):
    trace, model = run
    field, change = PACKET_KINDS[kind]
    rtl, i = _per_packet(model, change)
    result = compare(trace, rtl, model)
    assert not result.exact and result.mismatches >= 1
    fm = result.first_mismatch
    tag = int(trace.tag[i])
    assert (fm["tag"], fm["field"]) == (tag, field), fm
    assert fm["cycle_model"] == int(model.tail[i])
    # The side-by-side table names the packet with both sides' cycles.
    row = next(line for line in result.table[1:] if int(line.split()[0]) == tag)
    assert f" {int(model.tail[i])} " in row
    assert f"tag {tag}" in result.summary()
    if kind in PROBLEM_LINES:
        line = PROBLEM_LINES[kind](tag, rtl, i)
        assert any(line in p for p in result.problems), (line, result.problems)


#: The problem line a packet difference also gives, beyond the first mismatch.
PROBLEM_LINES = {
    "output port": lambda tag, rtl, i: (f"tag {tag} left by port {rtl.out_port[i]} at cycle "
                                        f"{rtl.tail[i]}, destination"),
    "payload bit": lambda tag, rtl, i: (f"1 packet(s) with corrupted flits, first tag {tag} "
                                        f"(its tail left at cycle {rtl.tail[i]})"),
}


def test_a_packet_the_model_dropped_but_the_rtl_delivered(lossy):
    trace, model = lossy
    i = int(np.flatnonzero(model.dropped)[0])
    rtl = copy.deepcopy(model)
    rtl.dropped[i] = False
    rtl.head[i], rtl.tail[i], rtl.out_port[i] = 400, 401, trace.dst[i]
    rtl.payload_ok[i] = True
    result = compare(trace, rtl, model)
    fm = result.first_mismatch
    assert not result.exact and (fm["tag"], fm["field"]) == (int(trace.tag[i]), "dropped")
    assert fm["cycle_rtl"] == 401


def test_a_counter_difference_is_named(run):
    trace, model = run
    for name in model.counters:
        rtl = copy.deepcopy(model)
        rtl.counters[name][1] += 1
        result = compare(trace, rtl, model)
        assert not result.exact
        assert any(p.startswith(f"counter {name}: RTL {rtl.counters[name]} vs model "
                                f"{model.counters[name]}") for p in result.problems), result.problems


@pytest.mark.parametrize("column", ["cycle", "port", "classes", "time"])
def test_a_pause_frame_difference_is_named_with_its_cycle(paused, column):
    trace, model = paused
    rtl = copy.deepcopy(model)
    k = len(model.pfc_frames) // 2
    rtl.pfc_frames[k, {"cycle": 0, "port": 1, "classes": 2, "time": 3}[column]] += 1
    result = compare(trace, rtl, model)
    assert not result.exact
    (line,) = [p for p in result.problems if p.startswith("pause frames differ")]
    assert f"frame {k}: RTL cycle {rtl.pfc_frames[k, 0]} " in line
    assert f"vs model cycle {model.pfc_frames[k, 0]} " in line


def test_a_missing_pause_frame_is_named(paused):
    trace, model = paused
    rtl = copy.deepcopy(model)
    rtl.pfc_frames = model.pfc_frames[:-1]
    result = compare(trace, rtl, model)
    (line,) = [p for p in result.problems if p.startswith("pause frames differ")]
    k = len(model.pfc_frames) - 1
    assert f"frame {k}: RTL none vs model cycle {model.pfc_frames[k, 0]} " in line


#: Differences of the whole run: the change, and the problem line it must give.
RUN_KINDS = {
    "run length": (lambda r: setattr(r, "cycles", r.cycles + 3),
                   lambda rtl, model: f"run length: RTL {rtl.cycles} cycles, model {model.cycles}"),
    "stall": (lambda r: setattr(r, "stalled", True),
              lambda rtl, model: f"RTL run stalled at cycle {rtl.cycles}"),
}


@pytest.mark.parametrize("kind", sorted(RUN_KINDS))
def test_a_run_difference_is_named_with_its_cycle(run, kind):
    trace, model = run
    change, line = RUN_KINDS[kind]
    rtl = copy.deepcopy(model)
    change(rtl)
    result = compare(trace, rtl, model)
    assert not result.exact
    assert line(rtl, model) in result.problems, result.problems


def test_a_packet_lost_is_named(run):
    trace, model = run
    rtl = copy.deepcopy(model)
    i = _delivered(model, 3)
    rtl.head[i] = rtl.tail[i] = -1
    rtl.out_port[i] = -1
    result = compare(trace, rtl, model)
    assert not result.exact
    assert any(p.startswith("1 packet(s) neither delivered nor dropped, first tag "
                            f"{int(trace.tag[i])}") for p in result.problems), result.problems


def test_order_broken_within_a_flow_is_named(run):
    trace, model = run
    flow = (trace.src.astype(np.int64) * 64 + trace.dst) * 16 + trace.prio
    delivered = np.flatnonzero(model.tail >= 0)
    # Two packets of one flow, delivered: the RTL swaps their departures.
    a, b = next((int(a), int(b)) for a in delivered for b in delivered
                if a < b and flow[a] == flow[b])
    rtl = copy.deepcopy(model)
    rtl.head[a], rtl.head[b] = model.head[b], model.head[a]
    rtl.tail[a], rtl.tail[b] = model.tail[b], model.tail[a]
    result = compare(trace, rtl, model)
    assert not result.exact
    assert any(p.startswith("order broken in flow of tag ") for p in result.problems), \
        result.problems
