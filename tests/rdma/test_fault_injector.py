"""The link fault injector (``hdl/rdma/fault_injector.py``) against its model
(``sim/rdma/kernels/fault_injector.py``) under Amaranth's simulator, cycle by cycle: a random
engine upstream (packets of random lengths, idle gaps), random backpressure downstream,
fault rates high enough that every decision happens many times, thousands of cycles."""

import random

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.hdl.rdma.fault_injector import FaultInjector as FaultInjectorRTL, FaultState
from superfabric.sim.rdma.kernels.fault_injector import (DROP, DUP, HOLD, IDLE, PASS, REPLAY,
                                                         injector_commit, injector_params,
                                                         injector_prepare, injector_quiet,
                                                         injector_state)

from block_stimulus import simulate

CYCLES = 4000
PORT = 2

#: name -> ([faults] overrides, the injector states the run must visit).
FAULTS = {
    "everything": (["faults.drop_rate=0.15", "faults.duplicate_rate=0.15",
                    "faults.reorder_rate=0.15", "faults.corrupt_rate=0.15",
                    "faults.reorder_cycles=3", "faults.seed=4321"],
                   {IDLE, PASS, DROP, DUP, HOLD, REPLAY, "corrupt"}),
    "reorder-long-hold": (["faults.reorder_rate=0.4", "faults.corrupt_rate=0.2",
                           "faults.reorder_cycles=12", "faults.seed=77"],
                          {IDLE, PASS, HOLD, REPLAY, "corrupt"}),
    "none": ([], {IDLE, PASS}),
}


class Injector:
    """Endpoint ``port``'s injector in the model's state of every endpoint's, with flits
    ``(k, word, dst, length)`` or None: its state, this cycle's action (after
    :meth:`prepare`), whether it holds a packet and whether it corrupts the one under way."""

    def __init__(self, cfg, port: int):
        self.st, self.prm, self.port = injector_state(cfg), injector_params(cfg), port

    state = property(lambda self: int(self.st.state[self.port]))
    act = property(lambda self: int(self.st.act[self.port]))
    held = property(lambda self: bool(self.st.held[self.port]))
    corrupt = property(lambda self: bool(self.st.corrupt[self.port]))

    @staticmethod
    def _flit(flit):
        if flit is None:
            return False, 0, np.uint64(0), 0, 0
        k, word, dst, length = flit
        return True, k, np.uint64(word), dst, length

    def quiet(self) -> bool:
        """Nothing under way and nothing held."""
        return bool(injector_quiet(self.st, self.port))

    def prepare(self, offered):
        """The flit offered to the switch this cycle, or None."""
        has, k, word, dst, length = injector_prepare(self.st, self.prm, self.port,
                                                     *self._flit(offered))
        return (int(k), int(word), int(dst), int(length)) if has else None

    def commit(self, sent: bool, offered) -> bool:
        """Clock the edge (``sent``: the switch took the flit); whether the engine's flit
        was taken."""
        return bool(injector_commit(self.st, self.prm, self.port, sent, *self._flit(offered)))


class _Engine:
    """The transmitter upstream: whole packets, flit by flit, held until taken; idle gaps."""

    def __init__(self, rng: random.Random, max_flits: int, ports: int, idle: float):
        self._rng, self._max, self._ports, self._idle = rng, max_flits, ports, idle
        self.packet = None          # (words, dst, tag) being sent
        self.k = 0

    def offered(self):
        """This cycle's flit ``(k, word, dst, length)``, or None."""
        if self.packet is None and self._rng.random() >= self._idle:
            length = self._rng.choice([1, 2, 3, self._rng.randrange(1, self._max + 1)])
            self.packet = ([self._rng.getrandbits(64) for _ in range(length)],
                           self._rng.randrange(self._ports), self._rng.getrandbits(32))
            self.k = 0
        if self.packet is None:
            return None
        words, dst, _ = self.packet
        return self.k, words[self.k], dst, len(words)

    def taken(self):
        """The offered flit was taken."""
        self.k += 1
        if self.k == len(self.packet[0]):
            self.packet = None


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_every_cycle_equals_the_model(name):
    overrides, expected = FAULTS[name]
    cfg = FabricConfig.load(preset="tiny", overrides=["rdma.enabled=true", "rdma.qps=8",
                                                      *overrides])
    faults = cfg.faults
    rng = random.Random(name)
    dut = FaultInjectorRTL(cfg)
    model = Injector(cfg, PORT)
    engine = _Engine(rng, cfg.switch.max_packet_flits, cfg.switch.ports, idle=0.3)
    visited = {}      # injector state (and "corrupt") -> cycles in it
    wrong = []

    async def testbench(ctx):
        for k, threshold in enumerate(faults.thresholds()):
            ctx.set(dut.thresholds[k], threshold)
        ctx.set(dut.reorder_cycles, faults.reorder_cycles)
        ctx.set(dut.seed, faults.link_seed(PORT))
        ctx.set(dut.load, 1)
        await ctx.tick()
        ctx.set(dut.load, 0)
        for cycle in range(CYCLES):
            offered = engine.offered()
            ready = rng.random() < 0.75
            ctx.set(dut.i.valid, offered is not None)
            if offered is not None:
                k, word, dst, length = offered
                ctx.set(dut.i.payload, {"data": word, "dst": dst, "length": length,
                                        "first": k == 0, "last": k == length - 1,
                                        "tag": engine.packet[2]})
            ctx.set(dut.o.ready, ready)
            out = model.prepare(offered)
            got_valid = bool(ctx.get(dut.o.valid))
            if got_valid != (out is not None):
                wrong.append((cycle, "o.valid", got_valid, out))
            elif out is not None:
                k, word, dst, length = out
                p = ctx.get(dut.o.payload)
                got = (p.data, p.dst, p.length, p.first, p.last)
                want = (word, dst, length, int(k == 0), int(k == length - 1))
                if got != want:
                    wrong.append((cycle, "o.payload (data, dst, length, first, last)", got, want))
            taken = model.commit(out is not None and ready, offered)
            if offered is not None and bool(ctx.get(dut.i.ready)) != taken:
                wrong.append((cycle, "i.ready", not taken, taken))
            for state in (model.state, "corrupt" if model.corrupt else None):
                visited[state] = visited.get(state, 0) + 1
            if taken:
                engine.taken()
            await ctx.tick()

    simulate(dut, testbench)
    assert not wrong, f"{len(wrong)} differences; first (cycle, signal, RTL, model): {wrong[0]}"
    visited.pop(None, None)
    assert set(visited) == expected and min(visited.values()) >= 20, visited


def test_the_rtl_states_are_the_models():
    # The model numbers its states as integers (it never imports Amaranth).
    assert {state.name: state.value for state in FaultState} == {
        "IDLE": IDLE, "PASS": PASS, "DROP": DROP, "DUP": DUP, "HOLD": HOLD, "REPLAY": REPLAY}
