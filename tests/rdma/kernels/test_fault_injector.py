"""The compiled fault injectors (``sim/rdma/kernels/fault_injector.py``) against
:class:`~superfabric.sim.rdma.fault_injector.FaultInjector`, call by call.

Each case runs the real :class:`RdmaFabricModel` with the class's ``prepare``,
``commit`` and ``quiet`` wrapped to record every call in order per endpoint (the cycle,
the engine's flit, whether the switch took the injector's, what the call returned and,
after a commit, the injector's whole state), then replays the calls into the kernels,
every endpoint in one state, and holds each result and each state to the class's. The
runs with faults must reach every action of the injector (and a corrupted flit, a
reordered packet released by its timer and behind a packet, a drop while one is held).
"""

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.sim.collective.fabric import data_ok, prepare_collective
from superfabric.sim.kernel import kernel, specialise
from superfabric.sim.rdma.fabric import RdmaFabricModel
from .reference import run_collective
from superfabric.sim.rdma.fault_injector import (DROP, DUP, HOLD, IDLE, PASS, REPLAY,
                                                  FaultInjector)
from superfabric.sim.rdma.host import SendQueues
from superfabric.sim.rdma.kernels.fault_injector import (
    injector_commit, injector_params, injector_prepare, injector_quiet, injector_state)
from superfabric.sim.rdma.traffic import generate_rdma

from conftest import CONGESTED, RDMA_SMALL

BASE = RDMA_SMALL + ["rdma.retransmit_timeout=256", "rdma.memory_words=4096"]
#: Every kind of fault, drops at 1 %. The draws are successive LFSR states, and below
#: 2**15 a state's predecessor is twice it, so which actions can follow which depends
#: on the thresholds (drop D, duplicate U, reorder H): a drop while a packet is held needs
#: a hold at an even x < 2 D (the next draw is x / 2), so U < 2 D; a duplicate at r then
#: needs 2 r past H (else that draw held a packet and r is drawn while held), so H < 2 U.
#: Holds short enough that some end on the timer.
FAULTS = ["faults.drop_rate=0.01", "faults.duplicate_rate=0.005", "faults.reorder_rate=0.01",
          "faults.corrupt_rate=0.03", "faults.reorder_cycles=6"]
FABRICS = {"switch": ["switch.ports=8"],
           "torus": ["fabric.topology=torus", "fabric.dims=[2, 2, 2]"]}
#: What a run with faults must show, beyond every action.
EVENTS = {"corrupt", "timer release", "release behind a packet", "drop while held"}


def _snapshot(inj):
    return (inj.lfsr, inj.state, bool(inj.held), inj.hold_count, bool(inj.corrupt), inj.flip,
            tuple(inj.store), inj.store_dst, inj.replay, inj._act)


def _kernel_snapshot(st, e):
    n = int(st.store_len[e])
    return (int(st.lfsr[e]), int(st.state[e]), bool(st.held[e]), int(st.hold_count[e]),
            bool(st.corrupt[e]), int(st.flip[e]), tuple(int(w) for w in st.store[e, :n]),
            int(st.store_dst[e]), int(st.replay[e]), int(st.act[e]))


class Recorder:
    """Wraps :class:`FaultInjector`'s methods (through ``monkeypatch``) to record every
    call; :meth:`SendQueues.offer`, called first in every cycle, gives the cycle."""

    def __init__(self, monkeypatch):
        self.port = {}               # id(injector) -> its endpoint
        self.injectors = {}          # endpoint -> its injector
        self.start = {}              # endpoint -> its injector's state as constructed
        self.calls = []
        self.cycle = 0
        self.seen = set()            # actions and EVENTS the run reached
        init, prepare, commit, quiet = (FaultInjector.__init__, FaultInjector.prepare,
                                        FaultInjector.commit, FaultInjector.quiet)
        offer = SendQueues.offer
        rec = self

        def _init(inj, faults, port):
            init(inj, faults, port)
            rec.port[id(inj)] = port
            rec.injectors[port] = inj
            rec.start[port] = _snapshot(inj)

        def _offer(host, e, cycle, free):
            rec.cycle = cycle
            return offer(host, e, cycle, free)

        def _prepare(inj, offered):
            out = prepare(inj, offered)
            rec.calls.append(("prepare", rec.port[id(inj)], rec.cycle, (offered,), out,
                              _snapshot(inj)))
            rec.seen.add(inj._act)
            if out is not None and offered is not None and out[1] != offered[1]:
                rec.seen.add("corrupt")
            return out

        def _commit(inj, sent, offered):
            act, held, timer = inj._act, inj.held, inj.hold_count == inj._release_after
            taken = commit(inj, sent, offered)
            rec.calls.append(("commit", rec.port[id(inj)], rec.cycle, (sent, offered), taken,
                              _snapshot(inj)))
            if held and inj.state == REPLAY and act in (IDLE, PASS):
                rec.seen.add("timer release" if act == IDLE and timer
                             else "release behind a packet")
            if held and act == DROP:
                rec.seen.add("drop while held")
            return taken

        def _quiet(inj):
            q = quiet(inj)
            rec.calls.append(("quiet", rec.port[id(inj)], rec.cycle, (), q, None))
            return q

        monkeypatch.setattr(SendQueues, "offer", _offer)
        for name, f in (("__init__", _init), ("prepare", _prepare), ("commit", _commit),
                        ("quiet", _quiet)):
            monkeypatch.setattr(FaultInjector, name, f)


def _flit(flit):
    """A recorded flit as the kernels' arguments ``has, k, word, dst, length``."""
    if flit is None:
        return False, 0, np.uint64(0), 0, 0
    k, word, dst, length = flit
    return True, k, np.uint64(word), dst, length


def _replay(cfg, rec):
    """Replay ``rec``'s calls into one state of every endpoint's injector."""
    st, prm = injector_state(cfg), injector_params(cfg)
    for e in range(cfg.endpoints):
        assert _kernel_snapshot(st, e) == rec.start[e], f"endpoint {e} as constructed"
    none = _flit(None)
    prepare = specialise(injector_prepare, st, prm, 0, *none)
    commit = specialise(injector_commit, st, prm, 0, False, *none)
    quiet = specialise(injector_quiet, st, 0)
    counts = {"prepare": 0, "commit": 0, "quiet": 0}
    for n, (call, e, cycle, args, want, after) in enumerate(rec.calls):
        where = f"call {n} ({call}), endpoint {e}, cycle {cycle}"
        if call == "prepare":
            has, k, word, dst, length = prepare(st, prm, e, *_flit(args[0]))
            got = (k, int(word), dst, length) if has else None
        elif call == "commit":
            got = commit(st, prm, e, args[0], *_flit(args[1]))
        else:
            got = quiet(st, e)
        counts[call] += 1
        assert got == want, f"{where}: python {want}, kernel {got}"
        if after is not None:
            mine = _kernel_snapshot(st, e)
            assert mine == after, f"{where}: state python {after}, kernel {mine}"
    return counts


#: The calls, as :func:`_replay_compiled` reads them.
PREPARE, COMMIT, QUIET = range(3)


@kernel
def _replay_compiled(st, prm, kind, endpoint, sent, flits, words, out, out_words):
    """The calls replayed in one compiled loop, as the run loop calls the kernels: call
    ``n`` of ``kind[n]`` at ``endpoint[n]`` with the engine's flit ``flits[n]`` (has, k,
    dst, length) and ``words[n]``; ``out[n]`` gets a prepare's flit (its word in
    ``out_words[n]``), a commit's taken or the quiet flag."""
    for n in range(kind.shape[0]):
        e, has, k, dst, length = endpoint[n], flits[n, 0] != 0, flits[n, 1], flits[n, 2], \
            flits[n, 3]
        if kind[n] == PREPARE:
            has, k, out_words[n], dst, length = injector_prepare(st, prm, e, has, k, words[n],
                                                                 dst, length)
            out[n, 0], out[n, 1], out[n, 2], out[n, 3] = has, k, dst, length
        elif kind[n] == COMMIT:
            out[n, 0] = injector_commit(st, prm, e, sent[n] != 0, has, k, words[n], dst, length)
        else:
            out[n, 0] = injector_quiet(st, e)


def _check_compiled(cfg, rec):
    """The calls replayed inside compiled code give the recorded results and end in the
    class's states."""
    n = len(rec.calls)
    kind, endpoint, sent = (np.zeros(n, np.int64) for _ in range(3))
    flits, words = np.zeros((n, 4), np.int64), np.zeros(n, np.uint64)
    for i, (call, e, _, args, _, _) in enumerate(rec.calls):
        kind[i], endpoint[i] = {"prepare": PREPARE, "commit": COMMIT, "quiet": QUIET}[call], e
        flit = args[-1] if args else None
        if call == "commit":
            sent[i] = args[0]
        if flit is not None:
            flits[i], words[i] = (1, flit[0], flit[2], flit[3]), flit[1]
    st, prm = injector_state(cfg), injector_params(cfg)
    out, out_words = np.zeros((n, 4), np.int64), np.zeros(n, np.uint64)
    _replay_compiled(st, prm, kind, endpoint, sent, flits, words, out, out_words)
    for i, (call, e, cycle, _, want, _) in enumerate(rec.calls):
        if call == "prepare":
            got = (int(out[i, 1]), int(out_words[i]), int(out[i, 2]), int(out[i, 3])) \
                if out[i, 0] else None
        else:
            got = bool(out[i, 0])
        assert got == want, f"compiled call {i} ({call}), endpoint {e}, cycle {cycle}: " \
                            f"python {want}, kernel {got}"
    for e, inj in rec.injectors.items():
        assert _kernel_snapshot(st, e) == _snapshot(inj), f"endpoint {e} at the end"


def _check_run(cfg, rec, faults):
    counts = _replay(cfg, rec)
    _check_compiled(cfg, rec)
    assert counts["prepare"] == counts["commit"] > 0 and counts["quiet"] > 0
    if faults:
        missing = ({IDLE, PASS, DROP, DUP, HOLD, REPLAY} | EVENTS) - rec.seen
        assert not missing, f"the run never reached {missing}"


GENERATED = {
    "allreduce-faults": (FAULTS + ["rdma.memory_words=16384", "rdma.pages=256"],
                         "rdma-allreduce", 0.5, 3000, 0.0),
    "incast-congested": (CONGESTED + FAULTS, "rdma-incast", 0.6, 400, 0.0),
    "uniform-bad": (FAULTS, "rdma-uniform", 0.5, 800, 0.2),
}


@pytest.mark.parametrize("fabric", sorted(FABRICS))
@pytest.mark.parametrize("case", sorted(GENERATED))
def test_generated_workloads_replay_exactly(monkeypatch, fabric, case):
    overrides, pattern, load, cycles, bad = GENERATED[case]
    cfg = FabricConfig.load(preset="tiny", overrides=BASE + FABRICS[fabric] + overrides)
    workload = generate_rdma(cfg, pattern, load=load, cycles=cycles, seed=3, bad_fraction=bad)
    rec = Recorder(monkeypatch)
    records = RdmaFabricModel(cfg).run_reference(workload)
    assert not records.stalled, records.stuck
    _check_run(cfg, rec, faults=case == "allreduce-faults")


@pytest.mark.parametrize("dtype", ["int32", "fp32"])
def test_collective_allreduce_replays_exactly(monkeypatch, dtype):
    """A ring all-reduce on the 2x2x2 torus over lossy links (the collective engines post
    their WRs as the run goes)."""
    cfg = FabricConfig.load(overrides=[o for o in RDMA_SMALL if not o.startswith("rdma.qps=")]
                            + ["rdma.qps=64", "rdma.retransmit_timeout=256"] + FABRICS["torus"]
                            + FAULTS)
    prepared = prepare_collective(cfg, op="allreduce", algo="ring", nbytes=2048, dtype=dtype,
                                  seed=5)
    rec = Recorder(monkeypatch)
    records, engines, buffers = run_collective(cfg, prepared)
    assert not records.stalled and data_ok(cfg, prepared, buffers)
    _check_run(cfg, rec, faults=False)
