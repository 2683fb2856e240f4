"""The simulation top of an RDMA fabric: engines, host memories, fault injectors, and the
switch or the fabric of routers between them.

Endpoint ``e`` is an :class:`~.engine.RdmaEngine` with its host
memory, whose uplink passes a :class:`~.fault_injector.FaultInjector` into
the endpoint's input ``e`` of the switch (:class:`~..switch.Switch`) or of
the fabric (:class:`~..fabric.top.Fabric`, a torus or a leaf-spine of
routers, each router tier a module of its own) and whose downlink is its
output ``e``; below, "the switch" is either. The host
memories stand in for the hosts behind the DMA ports; the testbench loads
and reads them through the ``mem_*`` port, and writes the registration
tables through ``tbl_*``, before and after the run. Per-endpoint ports are
packed into one vector each (endpoint ``e`` at ``[e*w : (e+1)*w]``) so that
the testbench touches a handful of signals per cycle. The engine, the fault
injector and the host memory are modules of their own, written once and
instanced per endpoint (``hdl/ports.py:SharedModule``), so that generating
and compiling the top costs one of each, not one per endpoint.

With ``[pfc] enabled`` the switch's pause frames reach the engines, which
obey them like any upstream device (a pause timer per class, loaded by a
frame, section 4.11); the engines, as sinks, never pause the switch. The
testbench observes the frames, the CNPs, the rate changes and each output's
queue depth through ports that are zero when their feature is off, behind
one ``events`` vector read every cycle.
"""

from functools import partial

from amaranth.hdl import Module, Cat, Const, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...config import FabricConfig
from ...network.topology import Topology
from ...formats.counters import COUNTER_WIDTH, RDMA_COUNTERS
from ...formats.dcqcn import LINE_RATE, RATE_BITS
from ...formats.packet import port_bits
from ...formats.rdma_wire import free_slot_bits, queue_depth_bits
from ...formats.lfsr import DRAW_THRESHOLD_BITS, LFSR_BITS, lfsr_start
from .fault_injector import FaultInjector, fault_injector_signature
from ..pfc import PfcEgress
from ..pfc_frame import REQUEST_LAYOUT
from ..ports import SharedModule, add_instance
from .engine import RdmaEngine, engine_signature
from .host_memory import HostMemory, host_memory_signature
from .header import cpl_layout, rcpl_layout, wr_layout
from .keys import table_width
from ..fabric.top import Fabric
from ..switch import Switch
from ..checks import check_config

__all__ = ["RdmaFabric"]


class RdmaFabric(wiring.Component):
    """RDMA endpoints on the switch or fabric of ``cfg``, one per accelerator, for simulation.

    Observation ports: ``events`` (bit ``e`` input ``e`` sent a pause frame,
    bit ``E + e`` engine ``e`` sent a CNP, bit ``2E + e`` a rate of engine
    ``e`` changed at the last edge), ``pfc_tx`` (the frames), ``cnp_context``,
    ``rate`` (per endpoint, every channel's rate), ``rate_changed`` (per channel),
    ``queue_depth`` (per output, the flits taken at an input and not yet
    handed to its sink), ``free`` (per channel, free window slots) and, on a fabric,
    ``link_flits`` (per directed link, the flits sent over it).
    """

    def __init__(self, cfg: FabricConfig):
        check_config(cfg)
        if not cfg.rdma.enabled:
            raise ValueError("rdma.enabled = false: the RDMA fabric needs rdma.enabled = true")
        self._cfg = cfg
        self._core = Fabric(cfg) if cfg.fabric.is_fabric else Switch(cfg)
        #: The modules the top instances, each written once whatever the number of
        #: endpoints: a fabric's router tiers, the engine (its endpoint an input), the
        #: fault injector and the host memory. On a fabric, built ``--hierarchical``, the
        #: engine, whose state grows with the endpoints, is a hierarchical block compiled
        #: once (``SharedModule``); the switch's top is built flat.
        self.modules = {
            **getattr(self._core, "modules", {}),
            "rdma_engine": SharedModule(engine_signature(cfg), partial(RdmaEngine, cfg),
                                        hierarchical=cfg.fabric.is_fabric),
            "fault_injector": SharedModule(fault_injector_signature(cfg),
                                           partial(FaultInjector, cfg)),
            "host_memory": SharedModule(host_memory_signature(cfg, apply=self.apply_ports),
                                        partial(HostMemory, cfg, apply=self.apply_ports)),
        }
        n = cfg.endpoints
        nc = n * cfg.rdma.channels_per_peer
        free_bits = free_slot_bits(cfg.rdma.window)
        super().__init__({
            **self._host_ports(),
            "tbl_en": In(1), "tbl_ep": In(port_bits(n)), "tbl_sel": In(1), "tbl_index": In(16),
            "tbl_data": In(table_width(cfg)),
            "mem_we": In(1), "mem_addr": In(range(cfg.rdma.memory_words)),
            "mem_wdata": In(n * 64), "mem_rdata": Out(n * 64),
            "fault_thresholds": In(4 * DRAW_THRESHOLD_BITS), "fault_reorder_cycles": In(16),
            "fault_seed": In(LFSR_BITS), "fault_load": In(1),
            "counters": Out(n * len(RDMA_COUNTERS) * COUNTER_WIDTH),
            "retired": Out(n),
            "events": Out(3 * n),
            "pfc_tx": Out(n * REQUEST_LAYOUT.size),
            "cnp_context": Out(n * port_bits(nc)),
            # Per endpoint: a vector of every channel's rate would pass Amaranth's
            # width limit at 64 endpoints.
            "rate": Out(nc * RATE_BITS).array(n), "rate_changed": Out(n * nc),
            "queue_depth": Out(n * queue_depth_bits(cfg)),
            "free": Out(n * nc * free_bits),
            # On a fabric, the flits sent over each directed link (Topology.links order).
            **({"link_flits": Out(COUNTER_WIDTH * len(Topology.of(cfg).links))}
               if cfg.fabric.is_fabric else {}),
        })

    #: Whether the host memories have an apply unit's ports (:class:`HostMemory`).
    apply_ports = False

    #: The inputs that load the tables, the host memories and the fault settings.
    LOAD_INPUTS = ("tbl_en", "tbl_ep", "tbl_sel", "tbl_index", "tbl_data", "mem_we", "mem_addr",
                   "mem_wdata", "fault_thresholds", "fault_reorder_cycles", "fault_seed",
                   "fault_load")

    def _load_inputs(self) -> dict:
        """The signals :data:`LOAD_INPUTS` drive, by name, as the top's blocks take them:
        here the ports themselves."""
        return {name: getattr(self, name) for name in self.LOAD_INPUTS}

    def _host_ports(self) -> dict:
        """The ports of the hosts' side: the testbench posts WRs and takes completions."""
        cfg, n = self._cfg, self._cfg.endpoints
        return {
            "wr_valid": In(n), "wr_ready": Out(n), "wr_data": In(n * wr_layout(cfg).size),
            "cpl_valid": Out(n), "cpl_data": Out(n * cpl_layout().size),
            "rcpl_valid": Out(n), "rcpl_data": Out(n * rcpl_layout(cfg).size),
        }

    def _host_side(self, m: Module, e: int, engine, host) -> None:
        """Endpoint ``e``'s host side: its engine's WRs and completions to the top's ports."""
        cfg = self._cfg
        wrw, cw, rw = wr_layout(cfg).size, cpl_layout().size, rcpl_layout(cfg).size
        m.d.comb += [
            engine.wr.valid.eq(self.wr_valid[e]), self.wr_ready[e].eq(engine.wr.ready),
            engine.wr.payload.eq(self.wr_data[e * wrw:(e + 1) * wrw]),
            self.cpl_valid[e].eq(engine.cpl.valid),
            self.cpl_data[e * cw:(e + 1) * cw].eq(engine.cpl.payload),
            self.rcpl_valid[e].eq(engine.rcpl.valid),
            self.rcpl_data[e * rw:(e + 1) * rw].eq(engine.rcpl.payload),
        ]

    def elaborate(self, platform):
        cfg = self._cfg
        n = cfg.endpoints
        m = Module()
        load = self._load_inputs()
        switch = self._core
        m.submodules["fabric" if cfg.fabric.is_fabric else "switch"] = switch
        nc = n * cfg.rdma.channels_per_peer
        if cfg.pfc.enabled:
            # The engines' pause timers: per (endpoint, class), loaded by the
            # frames of the switch input the engine sends into.
            obey = m.submodules.obey = PfcEgress(cfg, ports=n)
            m.d.comb += self.pfc_tx.eq(Cat(switch.pfc_tx[e].payload for e in range(n)))
            for e in range(n):
                wiring.connect(m, switch.pfc_tx[e], obey.rx[e])
        counters, frees, changed, contexts, cnps = [], [], [], [], []
        entering = []
        for e in range(n):
            engine = add_instance(m, self.modules, "rdma_engine", f"engine{e}")
            inject = add_instance(m, self.modules, "fault_injector", f"inject{e}")
            host = add_instance(m, self.modules, "host_memory", f"host{e}")
            m.d.comb += engine.endpoint.eq(e)

            wiring.connect(m, engine.tx, inject.i)
            wiring.connect(m, inject.o, switch.i[e])
            wiring.connect(m, switch.o[e], engine.rx)
            entering.append((switch.i[e].valid & switch.i[e].ready, switch.i[e].payload.dst))
            frees.extend(engine.free)
            if cfg.pfc.enabled:
                p = cfg.switch.priorities
                m.d.comb += engine.paused.eq(Cat(obey.pause[e * p + cfg.rdma.data_priority],
                                                 obey.pause[e * p + cfg.rdma.control_priority]))
            if cfg.dcqcn.enabled:
                m.d.comb += self.rate[e].eq(Cat(*engine.rate))
                changed.append(engine.rate_changed)
                contexts.append(engine.cnp.payload)
                cnps.append(engine.cnp.valid)
            else:
                m.d.comb += self.rate[e].eq(Cat(Const(LINE_RATE, RATE_BITS) for _ in range(nc)))
                changed.append(Const(0, nc))
                contexts.append(Const(0, port_bits(nc)))
                cnps.append(Const(0, 1))
            t = DRAW_THRESHOLD_BITS
            m.d.comb += [
                inject.thresholds[k].eq(load["fault_thresholds"][t * k:t * (k + 1)])
                for k in range(4)
            ]
            # FaultsConfig.link_seed, applied to the seed input.
            m.d.comb += [inject.reorder_cycles.eq(load["fault_reorder_cycles"]),
                         inject.seed.eq(lfsr_start(load["fault_seed"], e)),
                         inject.load.eq(load["fault_load"])]

            self._host_side(m, e, engine, host)
            m.d.comb += [
                engine.tables.en.eq(load["tbl_en"] & (load["tbl_ep"] == e)),
                engine.tables.sel.eq(load["tbl_sel"]), engine.tables.index.eq(load["tbl_index"]),
                engine.tables.data.eq(load["tbl_data"]),
            ]
            counters.extend(engine.counters)
            m.d.comb += self.retired[e].eq(engine.retired)

            # Host memory: the engine's DMA ports, and the testbench's port
            # for loading and reading back.
            wiring.connect(m, engine.dma, host.dma)
            m.d.comb += [host.load_we.eq(load["mem_we"]), host.load_addr.eq(load["mem_addr"]),
                         host.load_wdata.eq(load["mem_wdata"][64 * e:64 * e + 64]),
                         self.mem_rdata[64 * e:64 * e + 64].eq(host.load_rdata)]
        m.d.comb += self.counters.eq(Cat(*counters))
        if cfg.fabric.is_fabric:
            m.d.comb += self.link_flits.eq(Cat(*switch.link_flits))
        m.d.comb += [self.free.eq(Cat(*frees)),
                     self.rate_changed.eq(Cat(*changed)),
                     self.cnp_context.eq(Cat(*contexts))]
        pfc_sent = (Cat(switch.pfc_tx[e].valid for e in range(n)) if cfg.pfc.enabled
                    else Const(0, n))
        m.d.comb += self.events.eq(Cat(pfc_sent, *cnps, *(c.any() for c in changed)))

        # Each output's queue: flits taken at the inputs toward it, less those handed over.
        depth_bits = queue_depth_bits(cfg)
        for o in range(n):
            depth = Signal(depth_bits, name=f"queue_depth{o}")
            arriving = sum(taken & (dst == o) for taken, dst in entering)
            leaving = switch.o[o].valid & switch.o[o].ready
            m.d.sync += depth.eq(depth + arriving - leaving)
            m.d.comb += self.queue_depth[o * depth_bits:(o + 1) * depth_bits].eq(depth)
        return m
