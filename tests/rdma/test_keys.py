"""The key and page tables (``hdl/rdma/keys.py``) against the model's ``KeyTable``, under
Amaranth's simulator: random registrations written through the table port, random
accesses near and across every region's edges, thousands of lookups, each one's
protection check and translation equal to the model's."""

import random

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring

from superfabric.config import FabricConfig
from superfabric.formats import rdma_wire as wire
from superfabric.hdl.rdma.keys import KeyTables
from superfabric.sim.rdma.keys import KeyTable
from superfabric.sim.rdma.traffic import KEY_COLUMNS

from block_stimulus import simulate

#: name -> overrides: table sizes and page sizes that move the field widths around.
CONFIGS = {
    "small-pages": ["switch.ports=4", "rdma.qps=8", "rdma.keys=8", "rdma.pages=16",
                    "rdma.page_words=4", "rdma.memory_words=64"],
    "default": ["rdma.keys=32", "rdma.pages=64", "rdma.page_words=64", "rdma.memory_words=2048"],
}
LOOKUPS = 3000
#: A registration is rewritten every this many lookups.
REWRITE_EVERY = 50


class _Harness(wiring.Component):
    """The tables and one lookup path, with the access as inputs and the verdicts as outputs."""

    def __init__(self, cfg):
        self._cfg = cfg
        self.tables = KeyTables(cfg)
        self.key = Signal(wire.KEY_BITS)
        self.va = Signal(wire.VA_BITS)
        self.words = Signal(wire.LEN_BITS)
        self.right = Signal(2)
        self.peer = Signal(range(cfg.switch.ports))
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.tables = self.tables
        lookup = self.tables.lookup(m, self.key, "probe")
        self.ok_local = Signal()
        self.ok_remote = Signal()
        self.pa = Signal(range(self._cfg.rdma.memory_words))
        # Rights are constants at every use in the engine: one check per right.
        m.d.comb += [
            self.ok_local.eq(lookup.check(self.va, self.words, wire.ACCESS_LOCAL_READ)),
            self.ok_remote.eq(lookup.check(self.va, self.words, wire.ACCESS_REMOTE_WRITE,
                                           peer=self.peer)),
            self.pa.eq(lookup.translate(self.va)),
        ]
        return m


def _entry(cfg, rng, index):
    """A random registration at table ``index``: mostly valid, rights and peers mixed."""
    rd = cfg.rdma
    words = rng.choice([1, 2, rd.page_words, rng.randrange(1, 4 * rd.page_words + 1)])
    va = rng.randrange(0, (1 << wire.VA_BITS) - words)
    return (int(rng.random() < 0.85), index + rd.keys * rng.randrange(0, (1 << wire.KEY_BITS) // rd.keys),
            va, words, rng.randrange(rd.pages), rng.randrange(4),
            rng.randrange(1 << cfg.switch.ports))


def _access(cfg, rng, entries):
    """An access aimed at a registration's edges (or, now and then, at nothing)."""
    rd = cfg.rdma
    valid, key, va, words, *_ = entries[rng.randrange(rd.keys)]
    if rng.random() < 0.1:
        key = rng.randrange(1 << wire.KEY_BITS)
    start = va + rng.choice([0, 1, -1, words - 1, words, rng.randrange(-2, words + 2)])
    start = min(max(start, 0), (1 << wire.VA_BITS) - 1)
    length = rng.choice([1, 2, max(1, words - (start - va)), rng.randrange(1, 64)])
    return key, start, min(length, (1 << wire.LEN_BITS) - 1), rng.randrange(cfg.switch.ports)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_lookups_equal_the_model(name):
    cfg = FabricConfig.load(overrides=["rdma.enabled=true", *CONFIGS[name]])
    rd = cfg.rdma
    rng = random.Random(name)
    frames = rd.memory_words // rd.page_words
    pages = [rng.randrange(frames) for _ in range(rd.pages)]
    entries = [_entry(cfg, rng, i) for i in range(rd.keys)]
    dut = _Harness(cfg)
    fields = wire.key_entry_fields(cfg)
    seen = {"local": 0, "remote": 0, "refused": 0}
    wrong = []

    async def write(ctx, sel, index, data):
        port = dut.tables.write
        ctx.set(port.en, 1)
        ctx.set(port.sel, sel)
        ctx.set(port.index, index)
        ctx.set(port.data, data)
        await ctx.tick()
        ctx.set(port.en, 0)

    async def register(ctx, index):
        await write(ctx, 0, index, wire.pack(fields, **dict(zip(KEY_COLUMNS, entries[index]))))

    async def testbench(ctx):
        for index, ppn in enumerate(pages):
            await write(ctx, 1, index, ppn)
        for index in range(rd.keys):
            await register(ctx, index)
        for n in range(LOOKUPS):
            if n % REWRITE_EVERY == REWRITE_EVERY - 1:
                index = rng.randrange(rd.keys)
                entries[index] = _entry(cfg, rng, index)
                await register(ctx, index)
            model = KeyTable(np.array(entries, np.int64), np.array(pages, np.int64), cfg)
            key, va, words, peer = _access(cfg, rng, entries)
            for signal, value in ((dut.key, key), (dut.va, va), (dut.words, words),
                                  (dut.peer, peer)):
                ctx.set(signal, value)
            want = (model.allowed(key, va, words, wire.ACCESS_LOCAL_READ),
                    model.allowed(key, va, words, wire.ACCESS_REMOTE_WRITE, peer),
                    model.addresses(key, va, 1)[0])
            got = (bool(ctx.get(dut.ok_local)), bool(ctx.get(dut.ok_remote)), ctx.get(dut.pa))
            if got != want:
                wrong.append((n, key, va, words, peer, got, want))
            seen["local"] += want[0]
            seen["remote"] += want[1]
            seen["refused"] += not (want[0] or want[1])

    simulate(dut, testbench)
    assert not wrong, f"{len(wrong)} lookups differ; first (n, key, va, words, peer, RTL, model): " \
                      f"{wrong[0]}"
    # The accesses reached both verdicts of both checks.
    assert min(seen.values()) > LOOKUPS // 20, seen
