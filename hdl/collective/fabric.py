"""The simulation top of a collective on an RDMA fabric (section 15.8.7): at every
accelerator a collective engine posts the WRs of its schedule on its RDMA engine and applies
what arrives into its host memory, with no testbench in the loop.

It is :class:`~..rdma.fabric.RdmaFabric` with the hosts' side replaced: where the RDMA
testbench posts WRs and takes completions every cycle, here each endpoint's
:class:`~.engine.CollectiveEngine` does, and its apply unit reads and writes the host
memory through ports of its own. The testbench loads the tables, the memories and the
schedules, raises ``run`` and waits for ``done``; the top records when each engine started
each step and applied each slot (the ``timeline``), which the testbench reads back with the
memories after the run, so a run costs the testbench nothing per cycle.
"""

from functools import partial

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...formats import rdma_wire as wire
from ...formats.collective import SLOT_BITS, STEP_BITS
from ...formats.packet import port_bits
from ..ports import SharedModule, add_instance
from ..rdma.fabric import RdmaFabric
from .engine import DEPTH, CollectiveEngine, engine_signature

__all__ = ["CYCLE_BITS", "CollectiveFabric"]

#: Bits of the run's cycle counter and of the timeline's entries.
CYCLE_BITS = 32


class CollectiveFabric(RdmaFabric):
    """A collective engine beside the RDMA engine of every accelerator of ``cfg``'s fabric,
    each holding schedules of up to ``depth`` steps and recording up to ``depth`` steps
    and slots in its timeline.

    Ports beside the RDMA top's tables, memories, faults and observation ports:
    ``sched_en``, ``sched_ep``, ``sched_addr``, ``sched_step`` write step ``sched_addr``
    of endpoint ``sched_ep``'s schedule; ``steps`` and ``slots`` (per endpoint) and the
    layout (``outbox``, ``notify``, ``staging``, ``capacity``, ``binary32``, the same on
    every accelerator) are held for the run, which starts in the first cycle of ``run``
    (cycle 0), which ``cycle`` counts; ``done`` rises when every engine is done, and
    ``done_at`` holds, per endpoint, the first cycle its engine was; ``errors`` its failed
    completions.
    ``timeline_addr`` reads entry ``k`` of every endpoint's timeline: ``started_at``, the
    cycle step ``k`` started, and ``applied_at``, the cycle slot ``k`` was applied.
    """

    apply_ports = True

    def __init__(self, cfg, *, depth: int = DEPTH):
        self._depth = depth
        super().__init__(cfg)
        self.modules["collective_engine"] = SharedModule(engine_signature(cfg, depth),
                                                         partial(CollectiveEngine, cfg,
                                                                 depth=depth))

    def _host_ports(self) -> dict:
        cfg, n, depth = self._cfg, self._cfg.endpoints, self._depth
        address = range(cfg.rdma.memory_words)
        return {
            "sched_en": In(1), "sched_ep": In(port_bits(n)), "sched_addr": In(range(depth)),
            "sched_step": In(STEP_BITS),
            "steps": In(n * _bits(depth)), "slots": In(n * (SLOT_BITS + 1)),
            "outbox": In(address), "notify": In(address), "staging": In(address),
            "capacity": In(address), "binary32": In(1), "run": In(1),
            "cycle": Out(CYCLE_BITS), "done": Out(1), "done_at": Out(n * CYCLE_BITS),
            "errors": Out(n * wire.TAG_BITS),
            "timeline_addr": In(range(depth)),
            "started_at": Out(n * CYCLE_BITS), "applied_at": Out(n * CYCLE_BITS),
        }

    def _host_side(self, m: Module, e: int, engine, host) -> None:
        depth, cycle = self._depth, self.cycle
        collective = add_instance(m, self.modules, "collective_engine", f"collective{e}")
        sb = _bits(depth)
        m.d.comb += [
            collective.load_en.eq(self.sched_en & (self.sched_ep == e)),
            collective.load_addr.eq(self.sched_addr), collective.load_step.eq(self.sched_step),
            collective.steps.eq(self.steps[e * sb:(e + 1) * sb] & self.run.replicate(sb)),
            collective.slots.eq(self.slots[e * (SLOT_BITS + 1):(e + 1) * (SLOT_BITS + 1)]),
            self.errors[e * wire.TAG_BITS:(e + 1) * wire.TAG_BITS].eq(collective.errors),
        ]
        for name in ("outbox", "notify", "staging", "capacity", "binary32"):
            m.d.comb += getattr(collective, name).eq(getattr(self, name))
        wiring.connect(m, collective.wr, engine.wr)
        m.d.comb += [collective.free[ch].eq(free) for ch, free in enumerate(engine.free)]
        m.d.comb += [collective.received.eq(engine.rcpl.valid),
                     collective.cpl.valid.eq(engine.cpl.valid),
                     collective.cpl.payload.eq(engine.cpl.payload)]
        for name in ("note_addr", "buffer_addr", "write_en", "write_addr", "write_data"):
            m.d.comb += getattr(host, name).eq(getattr(collective, name))
        for name in ("note_data", "buffer_data"):
            m.d.comb += getattr(collective, name).eq(getattr(host, name))

        # The run's record: when the engine was first done, and its timeline.
        finished = Signal(name=f"finished{e}")
        done_at = self.done_at[e * CYCLE_BITS:(e + 1) * CYCLE_BITS]
        with m.If(self.run & collective.done & ~finished):
            m.d.sync += [finished.eq(1), done_at.eq(cycle)]
        self._all_done.append(finished | (self.run & collective.done))
        for name, count, at in (("started", collective.started, self.started_at),
                                ("applied", collective.applied, self.applied_at)):
            memory = Memory(shape=CYCLE_BITS, depth=depth, init=[])
            m.submodules[f"{name}{e}"] = memory
            before = Signal.like(count, name=f"{name}_before{e}")
            m.d.sync += before.eq(count)
            write, read = memory.write_port(), memory.read_port(domain="comb")
            # A count that moved at the last edge moved in the cycle before this one.
            m.d.comb += [write.en.eq(count != before), write.addr.eq(before),
                         write.data.eq(cycle - 1), read.addr.eq(self.timeline_addr),
                         at[e * CYCLE_BITS:(e + 1) * CYCLE_BITS].eq(read.data)]

    def elaborate(self, platform):
        # Each engine's "done" so far, gathered by the endpoints' host sides.
        self._all_done = []
        m = super().elaborate(platform)
        m.d.sync += self.cycle.eq(self.cycle + self.run)
        m.d.comb += self.done.eq(self.run & Cat(*self._all_done).all())
        return m


def _bits(depth: int) -> int:
    """Bits of a count of up to ``depth`` steps."""
    return depth.bit_length()
