"""The compiled send queues (``sim/rdma/kernels/send_queues.py``) against
:class:`~superfabric.sim.rdma.host.SendQueues`, call by call.

Each case runs the real :class:`RdmaFabricModel` with the class's methods wrapped to
record every call in order (the endpoint, the cycle, the arguments, what it returned,
and the endpoint's offered row and heads after it; for an offer, every ``free(ch)`` it
asked and the answer), then replays the calls into the kernels in the same order and
holds each result, each endpoint's heads and offered row after each call, and the final
tables to the class's. The engines' free window slots reach the kernel as the engine
state's ``nxt``/``ret`` arrays, set per offer so that the contract's formula gives the
recorded answers (and poisoned elsewhere: no window room), so the test needs no engine
kernel.
"""

import math

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.formats import rdma_wire as wire
from superfabric.sim.collective.fabric import data_ok, prepare_collective
from superfabric.sim.kernel import kernel, specialise
from superfabric.sim.rdma.fabric import RdmaFabricModel
from .reference import run_collective
from superfabric.sim.rdma.host import HostDevice, SendQueues
from superfabric.sim.rdma.kernels.send_queues import (
    NEVER, ROWS, heads, owed, send_queues_add, send_queues_next_post, send_queues_offer,
    send_queues_params, send_queues_state, send_queues_taken)
from superfabric.sim.rdma.traffic import generate_rdma

from conftest import CONGESTED, RDMA_SMALL

from ..test_model import _config as _model_config
from ..test_model import _random_requests, _workload

BASE = RDMA_SMALL + ["rdma.retransmit_timeout=256", "rdma.memory_words=4096"]
FAULTS = ["faults.drop_rate=0.01", "faults.duplicate_rate=0.01", "faults.reorder_rate=0.01",
          "faults.corrupt_rate=0.01", "faults.reorder_cycles=8"]
FABRICS = {"switch": ["switch.ports=8"],
           "torus": ["fabric.topology=torus", "fabric.dims=[2, 2, 2]"]}


class Recorder:
    """Wraps :class:`SendQueues`' methods (through ``monkeypatch``) to record every call."""

    def __init__(self, monkeypatch):
        self.host = None
        self.start = None            # per endpoint (offered, heads) as constructed
        self.calls = []
        cls = SendQueues
        init, offer, taken, add, next_post = (cls.__init__, cls.offer, cls.taken, cls.add,
                                              cls.next_post)
        rec = self

        def _init(host, cfg, workload):
            init(host, cfg, workload)
            rec.host = host
            rec.start = [rec.snapshot(e) for e in range(cfg.endpoints)]

        def _offer(host, e, cycle, free):
            asked = []

            def spy(ch):
                asked.append((ch, free(ch)))
                return asked[-1][1]

            row = offer(host, e, cycle, spy)
            rec.calls.append(("offer", e, cycle, (asked,), row, rec.snapshot(e)))
            return row

        def _taken(host, e):
            taken(host, e)
            rec.calls.append(("taken", e, None, (), None, rec.snapshot(e)))

        def _add(host, post, src, qp, dst, *rest):
            row = add(host, post, src, qp, dst, *rest)
            rec.calls.append(("add", src, post - 1, (post, src, qp, dst, *rest), row,
                              rec.snapshot(src)))
            return row

        def _next_post(host, e, cycle):
            first = next_post(host, e, cycle)
            rec.calls.append(("next_post", e, cycle, (), first, None))
            return first

        for name, f in (("__init__", _init), ("offer", _offer), ("taken", _taken),
                        ("add", _add), ("next_post", _next_post)):
            monkeypatch.setattr(cls, name, f)

    def snapshot(self, e):
        """Endpoint ``e``'s offered row, its heads' rows oldest first, and its owed row."""
        host = self.host
        return host.offered[e], sorted(row for row, _ in host._heads[e]), host.owed(e)


def _kernel_snapshot(sq, e):
    return int(sq.offered[e]), heads(sq, e), owed(sq, e)


def _replay(cfg, workload, rec):
    """Replay ``rec``'s calls into the kernels; returns the state and what was exercised."""
    prm = send_queues_params(cfg)
    E, C, W, mask = prm.endpoints, prm.channels, prm.window, prm.psn_mask
    host = rec.host
    sq = send_queues_state(cfg, workload, len(host.rows))
    for e in range(E):
        assert _kernel_snapshot(sq, e) == rec.start[e], f"endpoint {e} as constructed"
    rng = np.random.default_rng(1)
    # Every window full (free = W - mask < 0) except the channels an offer asked about.
    ret = rng.integers(0, mask + 1, (E, (E - 1) * C), dtype=np.int64)
    nxt = (ret + mask) & mask
    offer = specialise(send_queues_offer, sq, prm, 0, 0, nxt, ret)
    taken = specialise(send_queues_taken, sq, prm, 0)
    add = specialise(send_queues_add, sq, prm, *[0] * 10)
    next_post = specialise(send_queues_next_post, sq, prm, 0, 0)
    seen = {"offer": 0, "taken": 0, "add": 0, "next_post": 0, "waited": 0}
    cycle = 0
    for n, (call, e, at, args, want, after) in enumerate(rec.calls):
        cycle = cycle if at is None else at
        where = f"call {n} ({call}), endpoint {e}, cycle {cycle}"
        if call == "offer":
            asked = args[0]
            for ch, free in asked:
                peer = ch // C
                if peer != e:
                    i = (peer - (peer > e)) * C + ch % C
                    nxt[e, i] = (ret[e, i] + W - free) & mask
            got = offer(sq, prm, e, at, nxt, ret)
            for ch, _ in asked:
                peer = ch // C
                if peer != e:
                    i = (peer - (peer > e)) * C + ch % C
                    nxt[e, i] = (ret[e, i] + mask) & mask
            seen["waited"] += len(asked) > (want >= 0 and host.channel[want] >= 0)
        elif call == "taken":
            got = taken(sq, prm, e)
        elif call == "add":
            got = add(sq, prm, *args)
        else:
            got = next_post(sq, prm, e, at)
            want = NEVER if math.isinf(want) else want
        seen[call] += 1
        assert got == want, f"{where}: python {want}, kernel {got}"
        if after is not None:
            mine = _kernel_snapshot(sq, e)
            assert mine == after, f"{where}: (offered, heads, owed) python {after}, kernel {mine}"
    return sq, seen


def _check_final(cfg, sq, host):
    """The kernel's tables and queues equal the class's at the end of the run."""
    n = len(host.rows)
    assert sq.scalars[ROWS] == n
    np.testing.assert_array_equal(sq.wr[:n], np.array(host.rows, np.int64).reshape(n, 10))
    for name in ("post", "source", "channel", "slots"):
        np.testing.assert_array_equal(getattr(sq, name)[:n], getattr(host, name), err_msg=name)
    assert sq.offered.tolist() == host.offered
    for e in range(cfg.endpoints):
        posts = [p for p, s in zip(host.post, host.source) if s == e]
        assert sq.in_order[e] == (posts == sorted(posts)), e
        assert sq.newest_post[e] == (posts[-1] if posts else -NEVER), e
    Q = cfg.rdma.per_endpoint(cfg.endpoints)
    for e in range(cfg.endpoints):
        queues = {}
        for head in heads(sq, e) + [int(sq.offered[e])] * bool(sq.offered[e] >= 0):
            rows, row = [], head
            while row >= 0:
                rows.append(row)
                row = int(sq.next_row[row])
            qp = int(sq.wr[head, 1])
            assert sq.last[head] == rows[-1] and qp not in queues, (e, qp)
            queues[qp] = rows
        assert queues == {q: list(rows) for q, rows in host._queues[e].items() if rows}, e
        q_head = [queues.get(q, [-1])[0] for q in range(Q)]
        assert sq.q_head[e].tolist() == q_head, e


#: The calls, as :func:`_replay_compiled` reads them.
CALLS = {"offer": 0, "taken": 1, "add": 2, "next_post": 3}


@kernel(inline=True)
def _set_free(prm, e, ch, free, nxt, ret):
    """Set the engine state so that channel number ``ch`` of ``e`` has ``free`` window slots
    (poisoned: none, and less than any WR needs, with ``free = W - mask``)."""
    C = prm.channels
    peer = ch // C
    if peer != e:
        i = (peer - (peer > e)) * C + ch % C
        nxt[e, i] = (ret[e, i] + prm.window - free) & prm.psn_mask


@kernel
def _replay_compiled(sq, prm, kind, endpoint, cycle, add_args, ask_first, ask_ch, ask_free,
                     nxt, ret, out):
    """The calls replayed in one compiled loop, as the run loop calls the kernels: call
    ``n`` of ``kind[n]`` (:data:`CALLS`) at ``endpoint[n]`` in ``cycle[n]``; an offer's
    channels are answered ``ask_free`` (``ask_first[n]`` to ``ask_first[n + 1]``), an add
    takes ``add_args[n]``; ``out[n]`` gets what the call returned (0 for taken)."""
    poison = prm.window - prm.psn_mask
    for n in range(kind.shape[0]):
        e = endpoint[n]
        if kind[n] == 0:
            for a in range(ask_first[n], ask_first[n + 1]):
                _set_free(prm, e, ask_ch[a], ask_free[a], nxt, ret)
            out[n] = send_queues_offer(sq, prm, e, cycle[n], nxt, ret)
            for a in range(ask_first[n], ask_first[n + 1]):
                _set_free(prm, e, ask_ch[a], poison, nxt, ret)
        elif kind[n] == 1:
            send_queues_taken(sq, prm, e)
        elif kind[n] == 2:
            a = add_args[n]
            out[n] = send_queues_add(sq, prm, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7],
                                     a[8], a[9])
        else:
            out[n] = send_queues_next_post(sq, prm, e, cycle[n])


def _check_compiled(cfg, workload, rec):
    """The calls replayed inside compiled code give the recorded results and end in the
    class's queues."""
    n = len(rec.calls)
    kind, endpoint, cycle = (np.zeros(n, np.int64) for _ in range(3))
    add_args, ask_first = np.zeros((n, 10), np.int64), np.zeros(n + 1, np.int64)
    asks = []
    for i, (call, e, at, args, _, _) in enumerate(rec.calls):
        kind[i], endpoint[i], cycle[i] = CALLS[call], e, -1 if at is None else at
        if call == "add":
            add_args[i] = args
        elif call == "offer":
            asks.extend(args[0])
        ask_first[i + 1] = len(asks)
    ask = np.array(asks, np.int64).reshape(-1, 2)
    prm = send_queues_params(cfg)
    sq = send_queues_state(cfg, workload, len(rec.host.rows))
    ret = np.random.default_rng(2).integers(0, prm.psn_mask + 1, (cfg.endpoints, (
        cfg.endpoints - 1) * prm.channels), dtype=np.int64)
    nxt = (ret + prm.psn_mask) & prm.psn_mask
    out = np.zeros(n, np.int64)
    _replay_compiled(sq, prm, kind, endpoint, cycle, add_args, ask_first, ask[:, 0].copy(),
                     ask[:, 1].copy(), nxt, ret, out)
    for i, (call, e, at, _, want, _) in enumerate(rec.calls):
        if call != "taken":
            want = NEVER if math.isinf(want) else want
            assert out[i] == want, f"compiled call {i} ({call}), endpoint {e}, cycle {at}: " \
                                   f"python {want}, kernel {out[i]}"
    _check_final(cfg, sq, rec.host)


def _run(monkeypatch, cfg, workload, **kwargs):
    rec = Recorder(monkeypatch)
    records = RdmaFabricModel(cfg).run_reference(workload, **kwargs)
    assert not records.stalled, records.stuck
    return records, *_check(cfg, workload, rec)


def _check(cfg, workload, rec):
    """Both replays of ``rec``; returns the per-call replay's state and what it exercised."""
    sq, seen = _replay(cfg, workload, rec)
    _check_final(cfg, sq, rec.host)
    _check_compiled(cfg, workload, rec)
    return sq, seen


GENERATED = {
    "allreduce-faults": (FAULTS, "rdma-allreduce", 0.3, 800, 0.0),
    # A small window and four QPs per endpoint: heads wait for window room.
    "incast-congested": (CONGESTED + ["rdma.window=4", "rdma.qps=32"], "rdma-incast", 0.6, 400,
                         0.0),
    "uniform-bad": (["faults.drop_rate=0.02"], "rdma-uniform", 0.5, 800, 0.2),
}


@pytest.mark.parametrize("fabric", sorted(FABRICS))
@pytest.mark.parametrize("case", sorted(GENERATED))
def test_generated_workloads_replay_exactly(monkeypatch, fabric, case):
    overrides, pattern, load, cycles, bad = GENERATED[case]
    cfg = FabricConfig.load(preset="tiny", overrides=BASE + FABRICS[fabric] + overrides)
    workload = generate_rdma(cfg, pattern, load=load, cycles=cycles, seed=3, bad_fraction=bad)
    records, sq, seen = _run(monkeypatch, cfg, workload)
    assert seen["offer"] and seen["taken"] == len(workload.wr["post"]) and seen["next_post"]
    assert sq.in_order.all()
    if bad:
        assert (sq.channel[:sq.scalars[ROWS]] < 0).any()
    if case == "incast-congested":
        assert seen["waited"], "no offer passed over a head whose window was full"


class Poster(HostDevice):
    """Posts a WR at each completion it hears, ``count`` in all, some on QPs out of range
    (a spare queue each, reused once empty) and some to itself."""

    def __init__(self, cfg, count):
        self.Q, self.E = cfg.rdma.per_endpoint(cfg.endpoints), cfg.endpoints
        self.left, self.heard, self.done = count, [], False

    def attach(self, host, memories):
        self.host = host

    def completed(self, e, cycle, completion):
        self.heard.append(e)

    def step(self, cycle):
        acted = False
        while self.heard and self.left:
            e = self.heard.pop(0)
            k = self.left
            qp = (self.Q + k % 3, k % self.Q)[k % 2]
            dst = e if k % 5 == 0 else (e + 1 + k % (self.E - 1)) % self.E
            self.host.add(cycle + 1 + k % 4, e, qp, dst, wire.OP_WRITE, 16 * (e + 1) + 1,
                          0x1000 + k, 16 * (dst + 3) + 2, 0x40000 + 64 * k, 1 + k % 20)
            self.left -= 1
            acted = True
        self.done = not self.left
        return acted


def test_bad_requests_and_a_device_replay_exactly(monkeypatch):
    """Bad WRs (QPs out of range, to itself, empty) in the workload and posted by a device
    while the run goes: the spare queues hold the class's dictionary's extra QPs."""
    cfg = _model_config()
    E, Q = cfg.endpoints, cfg.rdma.per_endpoint(cfg.endpoints)
    bad = [{"post": 18 + k, "src": k % E, "qp": Q + k % 2, "dst": (k + 1) % E, "opcode": 0,
            "length": 4} for k in range(6)]
    bad += [{"post": 20, "src": 0, "qp": 6, "dst": 0, "opcode": 0, "length": 4},
            {"post": 20, "src": 1, "qp": 6, "dst": 2, "opcode": 0, "length": 0}]
    workload = _workload(cfg, _random_requests(cfg, 60, seed=5) + bad)
    records, sq, seen = _run(monkeypatch, cfg, workload, device=Poster(cfg, 40))
    assert seen["add"] == 40
    assert not sq.in_order.all()
    posted = sq.wr[len(workload.wr["post"]):sq.scalars[ROWS]]
    assert (posted[:, 1] >= Q).sum() > 10


@pytest.mark.parametrize("dtype", ["int32", "fp32"])
def test_collective_allreduce_replays_exactly(monkeypatch, dtype):
    """A ring all-reduce on the 2x2x2 torus: the collective engines post their WRs while
    the run goes (SendQueues.add); the heads' order and the rows match call by call."""
    cfg = FabricConfig.load(overrides=[o for o in RDMA_SMALL if not o.startswith("rdma.qps=")]
                            + ["rdma.qps=64", "rdma.retransmit_timeout=256"] + FABRICS["torus"])
    prepared = prepare_collective(cfg, op="allreduce", algo="ring", nbytes=2048, dtype=dtype,
                                  seed=5)
    rec = Recorder(monkeypatch)
    records, engines, buffers = run_collective(cfg, prepared)
    assert not records.stalled and data_ok(cfg, prepared, buffers)
    sq, seen = _check(cfg, prepared.workload, rec)
    assert seen["add"] > 0 and seen["add"] == len(rec.host.rows) - len(prepared.workload.wr["post"])
