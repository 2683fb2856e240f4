"""The simulation top of an RDMA run with its hosts in hardware (section 10.16): at every
endpoint an :class:`~.host.RdmaHost` posts the workload's WRs on the RDMA engine by the
send queues' rule and folds what the engine did into running hashes, with no testbench in
the loop.

It is :class:`~.fabric.RdmaFabric` with the hosts' side replaced, as the collective top
replaces it with collective engines. Before the run the testbench (or a plain C++ harness,
``tools/rdma_harness.cpp``) writes the tables, the memories and the fault settings as for
the RDMA top, and every endpoint's WRs and queue heads through ``host_*``; it raises
``run`` in the cycle after the fault settings' load, and cycle 0 follows; it waits for
``done``, the cycle after every WR's completion, in which ``cycle`` holds the run's cycles
and ``counters`` the engines' counters; then it sweeps the host memories through
``mem_addr`` with ``sweep`` high and reads ``hashes``. Every input is registered on the
way in, so each takes effect a cycle after the testbench sets it.
"""

from functools import partial

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...formats.packet import port_bits
from ...formats.rdma_hash import CYCLE_BITS, HASH_BITS, HASHES
from ...formats.rdma_wire import host_rows_bits, queue_depth_bits
from ..pfc_frame import REQUEST_LAYOUT
from ..ports import SharedModule, add_instance, behind_registered_reset
from .fabric import RdmaFabric
from .host import DEPTH, RdmaHost, entry_layout, host_signature

__all__ = ["HostedRdmaFabric"]


class HostedRdmaFabric(RdmaFabric):
    """A hardware host beside the RDMA engine of every endpoint of ``cfg``'s switch or
    fabric, each holding up to ``depth`` WRs.

    Ports beside the RDMA top's tables, memories, faults and observation ports:
    ``host_en``, ``host_ep``, ``host_sel``, ``host_addr``, ``host_data`` write endpoint
    ``host_ep``'s host (``RdmaHost``'s ``load_*``); ``rows`` (per endpoint) its WRs,
    held for the run, which starts in the cycle after ``run`` rises (cycle 0), which
    ``cycle`` counts until ``done``; ``done`` rises in the cycle after the last WR's
    completion and stays; ``sweep`` folds the words at ``mem_addr`` into the memory
    hashes; ``hashes`` holds every endpoint's (``formats/rdma_hash.py``'s ``HASHES``,
    endpoint 0's first). Every input, these and the RDMA top's, takes effect a cycle after
    it is set.
    """

    def __init__(self, cfg, *, depth: int = DEPTH):
        self._depth = depth
        super().__init__(cfg)
        self.modules["rdma_host"] = SharedModule(host_signature(cfg, depth),
                                                 partial(RdmaHost, cfg, depth=depth))

    def _host_ports(self) -> dict:
        n, depth = self._cfg.endpoints, self._depth
        return {
            "host_en": In(1), "host_ep": In(port_bits(n)), "host_sel": In(1),
            "host_addr": In(range(depth)), "host_data": In(entry_layout(self._cfg, depth).size),
            "rows": In(n * host_rows_bits(depth)), "run": In(1), "sweep": In(1),
            "cycle": Out(CYCLE_BITS), "done": Out(1),
            "hashes": Out(n * len(HASHES) * HASH_BITS),
        }

    def _host_side(self, m: Module, e: int, engine, host) -> None:
        rb = host_rows_bits(self._depth)
        hw = add_instance(m, self.modules, "rdma_host", f"rdma_host{e}")
        self._hosts.append(hw)
        wiring.connect(m, hw.wr, engine.wr)
        wiring.connect(m, engine.cpl, hw.cpl)
        wiring.connect(m, engine.rcpl, hw.rcpl)
        m.d.comb += [hw.free[k].eq(engine.free[k]) for k in range(len(engine.free))]
        r = self._registered
        m.d.comb += [
            hw.load_en.eq(r["host_en"] & (r["host_ep"] == e)), hw.load_sel.eq(r["host_sel"]),
            hw.load_addr.eq(r["host_addr"]), hw.load_data.eq(r["host_data"]),
            hw.rows.eq(r["rows"][e * rb:(e + 1) * rb]),
            hw.run.eq(r["run"]), hw.stop.eq(self.done), hw.cycle.eq(self.cycle),
            hw.sweep.eq(r["sweep"]),
        ]

    def _load_inputs(self) -> dict:
        return {name: self._registered[name] for name in self.LOAD_INPUTS}

    def elaborate(self, platform):
        # Every input reaches the logic through a register, a cycle late, the reset too:
        # the hosts' offer and hashes are most of the top's logic, and hung on a top input
        # they took 71 % of the plain harness's time.
        return behind_registered_reset(self._elaborate_core(platform), "core")

    def _elaborate_core(self, platform):
        """Everything but the reset register, in the ``sync`` domain."""
        # Without reset: a write in the first cycle after reset, while the registered
        # reset still holds the rest, must not be lost.
        self._registered = {name: Signal.like(getattr(self, name), name=f"{name}_r",
                                              reset_less=True)
                            for name in ("host_en", "host_ep", "host_sel", "host_addr",
                                         "host_data", "rows", "run", "sweep",
                                         *self.LOAD_INPUTS)}
        self._hosts = []
        m = super().elaborate(platform)
        m.d.sync += [reg.eq(getattr(self, name)) for name, reg in self._registered.items()]
        cfg, n = self._cfg, self._cfg.endpoints
        nc = n * cfg.rdma.channels_per_peer
        cb, db, rq = port_bits(nc), queue_depth_bits(cfg), REQUEST_LAYOUT.size
        # The swept word: the host memories read at the registered address.
        word = self.mem_rdata
        finished = Signal(n)
        for e, hw in enumerate(self._hosts):
            # The observation ports of the RDMA top, endpoint e's share of each.
            m.d.comb += [
                hw.cnp_valid.eq(self.events[n + e]),
                hw.cnp_context.eq(self.cnp_context[e * cb:(e + 1) * cb]),
                hw.rate.eq(self.rate[e]),
                hw.rate_changed.eq(self.rate_changed[e * nc:(e + 1) * nc]),
                hw.pause_valid.eq(self.events[e]), hw.pause.eq(self.pfc_tx[e * rq:(e + 1) * rq]),
                hw.depth.eq(self.queue_depth[e * db:(e + 1) * db]),
                hw.word.eq(word[64 * e:64 * (e + 1)]),
                finished[e].eq(hw.finished),
            ]
        running = self._registered["run"]
        m.d.comb += [self.done.eq(running & finished.all()),
                     self.hashes.eq(Cat(*(Cat(*hw.hashes) for hw in self._hosts)))]
        m.d.sync += self.cycle.eq(self.cycle + (running & ~self.done))
        return m
