"""The RDMA scoreboard is itself tested: equal records compare clean, and every kind of
difference planted into the RTL's copy is reported, naming the work request and the cycle
(or the endpoint and address of a memory word, the counter, the receive completion, the
CNP, rate change or pause frame, the cycle and output of a queue depth).

The records are the golden model's own, of a lossy run with bad requests among the
good, so they hold every status, retransmissions and receive completions.
"""

import copy
import functools

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.formats import rdma_wire as wire
from superfabric.formats.counters import RDMA_COUNTERS
from superfabric.sim.rdma.fabric import RdmaFabricModel
from superfabric.sim.rdma.records import CNP_COLUMNS, RATE_COLUMNS, RX_COMPLETION_COLUMNS
from superfabric.sim.rdma.traffic import generate_rdma
from superfabric.tb.rdma.scoreboard import compare, verify

from conftest import CONGESTED, RDMA_SMALL


@functools.cache
def _run():
    cfg = FabricConfig.load(preset="tiny", overrides=RDMA_SMALL + [
        "rdma.retransmit_timeout=256", "faults.drop_rate=0.05", "faults.duplicate_rate=0.03",
        "faults.reorder_rate=0.03", "faults.corrupt_rate=0.03"])
    workload = generate_rdma(cfg, "rdma-uniform", load=0.3, cycles=800, seed=1, bad_fraction=0.3)
    return cfg, workload, RdmaFabricModel(cfg).run(workload)


@pytest.fixture
def run():
    """(configuration, workload, model records), and the RTL's records: a copy to plant into."""
    cfg, workload, model = _run()
    return cfg, workload, model, copy.deepcopy(model)


def _who(workload, i):
    return f"WR {i} (endpoint {int(workload.wr['src'][i])}, qp {int(workload.wr['qp'][i])}, "


def _ok_write(workload, model, k=0):
    """The k-th WRITE completed OK."""
    ok = (model.status == wire.STATUS_OK) & (workload.wr["opcode"] == wire.OP_WRITE)
    return int(np.flatnonzero(ok)[k])


def test_equal_records_are_clean(run):
    cfg, workload, model, rtl = run
    statuses = set(model.status.tolist())
    assert {wire.STATUS_OK, wire.STATUS_LOCAL, wire.STATUS_REMOTE, wire.STATUS_BAD} <= statuses
    assert len(model.rx_completions) > 0 and sum(model.counters["retransmissions"]) > 0
    assert compare(workload, rtl, model) == []
    assert verify(cfg, workload, rtl) == []


#: Differences of one WR's record: the field and the change.
WR_KINDS = {
    "taken cycle": ("taken", lambda r, i: r.taken.__setitem__(i, r.taken[i] + 1)),
    "completion cycle": ("done", lambda r, i: r.done.__setitem__(i, r.done[i] + 1)),
    "completion status": ("status", lambda r, i: r.status.__setitem__(i, wire.STATUS_REMOTE)),
    "completion order": ("order", lambda r, i: r.order.__setitem__(i, r.order[i] + 100)),
    "completed twice": ("completions", lambda r, i: r.completions.__setitem__(i, 2)),
}


@pytest.mark.parametrize("kind", sorted(WR_KINDS))
def test_a_wr_difference_is_named_with_the_wr_and_the_cycle(run, kind):
    cfg, workload, model, rtl = run
    field, change = WR_KINDS[kind]
    i = _ok_write(workload, model, 5)
    change(rtl, i)
    problems = compare(workload, rtl, model)
    when = min(int(model.taken[i]), int(rtl.taken[i]))
    expected = (f"{_who(workload, i)}to {int(workload.wr['dst'][i])}, "
                f"{int(workload.wr['length'][i])} words): {field} RTL {int(getattr(rtl, field)[i])}, "
                f"model {int(getattr(model, field)[i])} (from cycle {when})")
    assert problems == [expected]


def test_the_first_difference_in_time_comes_first(run):
    cfg, workload, model, rtl = run
    late, early = sorted((_ok_write(workload, model, 9), _ok_write(workload, model, 2)),
                         key=lambda i: -model.taken[i])
    rtl.done[late] += 1
    rtl.done[early] += 1
    problems = compare(workload, rtl, model)
    assert problems[0].startswith(_who(workload, early)) and problems[1].startswith(
        _who(workload, late))


@pytest.mark.parametrize("column", RX_COMPLETION_COLUMNS)
def test_a_receive_completion_difference_is_named(run, column):
    cfg, workload, model, rtl = run
    k = len(model.rx_completions) // 2
    rtl.rx_completions = model.rx_completions.copy()
    rtl.rx_completions[k, RX_COMPLETION_COLUMNS.index(column)] += 1
    (line,) = compare(workload, rtl, model)
    shown = dict(zip(RX_COMPLETION_COLUMNS, model.rx_completions[k].tolist()))
    assert line.startswith(f"receive completion {k}: RTL ") and f"model {shown}" in line
    assert f"'cycle': {shown['cycle'] + (column == 'cycle')}" in line


def test_a_missing_receive_completion_is_named(run):
    cfg, workload, model, rtl = run
    rtl.rx_completions = model.rx_completions[:-1]
    (line,) = compare(workload, rtl, model)
    k = len(model.rx_completions) - 1
    assert line.startswith(f"receive completion {k}: RTL None, model {{'cycle': "
                           f"{int(model.rx_completions[k, 0])}")
    assert any(p.startswith("receive completions: ") for p in verify(cfg, workload, rtl))


@pytest.mark.parametrize("name", RDMA_COUNTERS)
def test_a_counter_difference_is_named(run, name):
    cfg, workload, model, rtl = run
    rtl.counters[name] = list(model.counters[name])
    rtl.counters[name][2] += 1
    assert compare(workload, rtl, model) == [
        f"counter {name}: RTL {rtl.counters[name]}, model {list(model.counters[name])}"]


def test_a_memory_word_difference_is_named_with_its_address(run):
    cfg, workload, model, rtl = run
    i = _ok_write(workload, model, 3)
    dst = int(workload.wr["dst"][i])
    written = np.flatnonzero(model.memory[dst] != workload.memory[dst])
    address = int(written[len(written) // 2])
    rtl.memory = model.memory.copy()
    rtl.memory[dst, address] ^= 1 << 40
    (line,) = compare(workload, rtl, model)
    assert line == (f"endpoint {dst} memory: 1 words differ; first at address {address}: "
                    f"RTL {int(rtl.memory[dst, address]):#x}, "
                    f"model {int(model.memory[dst, address]):#x}")
    (own,) = verify(cfg, workload, rtl)
    assert own.startswith(f"endpoint {dst} memory: 1 words differ from the initial memory") and \
        f"first at address {address}: {int(rtl.memory[dst, address]):#x}" in own


def test_a_missing_endpoint_memory_is_named(run):
    cfg, workload, model, rtl = run
    rtl.memory = model.memory[:-1]
    problems = compare(workload, rtl, model)
    assert problems == [f"memories: RTL {len(rtl.memory)} endpoints of {rtl.memory.shape[1]} "
                        f"words, model {len(model.memory)} of {model.memory.shape[1]}"]


def test_a_different_run_length_or_stall_is_named(run):
    cfg, workload, model, rtl = run
    rtl.cycles += 1
    assert compare(workload, rtl, model) == [
        f"run length: RTL {rtl.cycles} cycles (stalled False), model {model.cycles} "
        f"(stalled False)"]
    rtl.cycles, rtl.stalled, rtl.stuck = model.cycles, True, "endpoint 1 channel 3 (peer 1): ..."
    assert compare(workload, rtl, model)[0].startswith(f"run length: RTL {rtl.cycles} cycles "
                                                       f"(stalled True)")
    assert verify(cfg, workload, rtl)[0] == f"stalled at cycle {rtl.cycles}: {rtl.stuck}"


def test_verify_names_a_wr_completed_with_the_wrong_status(run):
    cfg, workload, model, rtl = run
    i = _ok_write(workload, model, 4)
    rtl.status[i] = wire.STATUS_LOCAL
    problems = verify(cfg, workload, rtl)
    assert problems[0] == (f"{_who(workload, i)}to {int(workload.wr['dst'][i])}, "
                           f"{int(workload.wr['length'][i])} words): status local protection "
                           f"error at cycle {int(rtl.done[i])}, expected ok")


def test_verify_names_a_wr_never_completed(run):
    cfg, workload, model, rtl = run
    i = _ok_write(workload, model, 6)
    rtl.completions[i], rtl.done[i], rtl.status[i] = 0, -1, -1
    assert verify(cfg, workload, rtl)[0].startswith(
        f"{_who(workload, i)}to {int(workload.wr['dst'][i])}, {int(workload.wr['length'][i])} "
        f"words): completed 0 times, not once (taken at cycle {int(rtl.taken[i])})")


def test_verify_names_completions_out_of_qp_order(run):
    cfg, workload, model, rtl = run
    wr = workload.wr
    ok = np.flatnonzero(model.completions == 1)
    a, b = next((int(a), int(b)) for a in ok for b in ok if a < b and wr["src"][a] == wr["src"][b]
                and wr["qp"][a] == wr["qp"][b])
    rtl.order[a], rtl.order[b] = model.order[b], model.order[a]
    problems = verify(cfg, workload, rtl)
    assert any(p.startswith(_who(workload, b)) and f"before WR {a} posted earlier on the same QP"
               in p for p in problems), problems


# -- congestion: CNPs, rate changes, pause frames, queue depths ----------------------


@functools.cache
def _congested_run():
    cfg = FabricConfig.load(preset="tiny", overrides=RDMA_SMALL + CONGESTED)
    workload = generate_rdma(cfg, "rdma-incast", load=0.6, cycles=400, seed=1)
    return cfg, workload, RdmaFabricModel(cfg).run(workload)


@pytest.fixture
def congested():
    """A 3-to-1 incast with PFC and DCQCN: CNPs, rate changes and pause frames to plant into."""
    cfg, workload, model = _congested_run()
    return cfg, workload, model, copy.deepcopy(model)


def test_a_congested_run_has_every_event_and_compares_clean(congested):
    cfg, workload, model, rtl = congested
    assert len(model.cnps) and len(model.rates) and len(model.pfc_frames)
    assert model.queue_depth.shape == (model.cycles, cfg.switch.ports)
    assert compare(workload, rtl, model) == [] and verify(cfg, workload, rtl) == []


@pytest.mark.parametrize("table, what, columns", [
    ("cnps", "CNP", CNP_COLUMNS), ("rates", "rate change", RATE_COLUMNS),
    ("pfc_frames", "pause frame", ("cycle", "port", "class_enable"))])
def test_an_event_difference_is_named_with_its_row(congested, table, what, columns):
    cfg, workload, model, rtl = congested
    rows = getattr(model, table).copy()
    k = len(rows) // 2
    rows[k, len(columns) - 1] += 1
    setattr(rtl, table, rows)
    (line,) = compare(workload, rtl, model)
    shown = dict(zip(columns, getattr(model, table)[k].tolist()[:len(columns)]))
    assert line.startswith(f"{what} {k}: RTL ") and all(f"'{c}': {v}" in line.split("model")[1]
                                                        for c, v in shown.items())


def test_a_missing_cnp_is_named(congested):
    cfg, workload, model, rtl = congested
    rtl.cnps = model.cnps[1:]
    (line,) = compare(workload, rtl, model)
    assert line.startswith("CNP 0: RTL ") and f"({len(model.cnps) - 1} and {len(model.cnps)} in all)" in line


def test_a_queue_depth_difference_is_named_with_its_cycle_and_output(congested):
    cfg, workload, model, rtl = congested
    rtl.queue_depth = model.queue_depth.copy()
    cycle = int(np.flatnonzero(model.queue_depth[:, 0])[5])
    rtl.queue_depth[cycle, 0] += 3
    assert compare(workload, rtl, model) == [
        f"queue depth: first at cycle {cycle}, output 0: RTL {int(rtl.queue_depth[cycle, 0])}, "
        f"model {int(model.queue_depth[cycle, 0])}"]


def test_link_flits_difference():
    """On a fabric the flits each link carried are compared too: one link's count off by
    one is one line naming the link and both counts."""
    cfg = FabricConfig.load(preset="tiny", overrides=RDMA_SMALL + [
        "rdma.memory_words=4096", "fabric.topology=torus", "fabric.dims=[2, 2, 2]"])
    workload = generate_rdma(cfg, "rdma-allreduce", load=0.3, cycles=400, seed=1)
    model = RdmaFabricModel(cfg).run(workload)
    rtl = copy.deepcopy(model)
    assert compare(workload, rtl, model) == [] and model.link_flits.sum() > 0
    k = int(np.flatnonzero(model.link_flits)[0])
    rtl.link_flits[k] += 1
    assert compare(workload, rtl, model) == [
        f"link flits: 1 links differ; first link {k}: RTL {int(model.link_flits[k]) + 1}, "
        f"model {int(model.link_flits[k])}"]
