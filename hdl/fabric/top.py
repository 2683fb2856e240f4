"""The fabric top: every router of the topology and the links between them (docs/architecture.md 11.9)."""

from functools import partial

from amaranth.hdl import Cat, Signal, Module, Value, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ...config import FabricConfig
from ...formats.counters import COUNTER_WIDTH
from ...network.topology import Topology
from ..packet import packet_layout
from ..pfc import frame_signature
from ..ports import SharedModule, instance, module_ports, stream_wires
from .router import Router, router_capacity, router_signature
from .routing import credit_bits, tier_router
from ..checks import check_config

__all__ = ["Fabric"]


class Fabric(wiring.Component):
    """All routers of the fabric of ``cfg``, wired as ``superfabric.network.topology`` says.

    Each router is an instance of its tier's module (``router`` in a torus,
    ``leaf_router`` and ``spine_router`` in a fat tree), with its index and
    its outputs' ECN seeds tied to constants, so that the Verilog holds each
    router once. A link is a pipeline of ``link_latency`` registers from an
    output to its peer's input (valid and flit), and a reverse one of
    ``link_latency - 1`` registers for the credits, which leave the router
    already one cycle after their read (docs/architecture.md 11.3, 11.9).

    With ``instances=False`` the routers are Amaranth submodules instead of
    instances of separately written modules, for Amaranth's simulator; the
    logic is the same.

    Ports (named like the switch's, per endpoint ``e`` or global port ``g``)
    -----
    i, o : the endpoints' packet streams.
    pause : bit ``e * priorities + prio`` stops new packets of that class
        toward endpoint ``e``.
    rx_packets, tx_packets, drops : per global port (router ``r``'s port
        ``p`` is ``g = base(r) + p``, section 11.2).
    link_flits : flits sent over each directed link, by link id.
    router_peak : per router, the most flits its buffers held at the end of
        a cycle.
    link_credits : the credits of link ``k``'s output for pool ``prio * vcs
        + vc``, at ``k * priorities * vcs + pool``; moved: some router moved
        a flit in this cycle. For the testbench's stall detection and report.
    pfc_* : with ``[pfc] enabled``, per endpoint ``e`` (the frame streams
        ``pfc_tx[e]``, ``pfc_rx[e]``) and per ``e * priorities + prio``
        (counters).
    ecn_marks : with ``[ecn] enabled``, per ``g * priorities + prio``;
        ``ecn_decided`` bit ``e`` and ``ecn_backlog[e]``: the decisions of
        the endpoint outputs.
    """

    def __init__(self, cfg: FabricConfig, *, instances: bool = True):
        check_config(cfg)
        topo = Topology.of(cfg)
        if topo.kind == "switch":
            raise ValueError("fabric.topology = 'switch': the fabric top needs a torus or a "
                             "fat_tree (the switch's top is Switch)")
        sw = cfg.switch
        self._cfg = cfg
        self._topo = topo
        self._instances = instances
        self._kinds = [topo.router_kind(r) for r in range(topo.routers)]
        #: The router modules, each once, by module name.
        self.modules = {kind: SharedModule(router_signature(cfg, kind), partial(Router, cfg, kind),
                                           hierarchical=True)
                        for kind in self._kinds}
        # The routers' ports, which are this top's wires: the components
        # themselves, or interfaces bound to instances of their modules.
        self._routers = [Router(cfg, kind) if not instances else
                         self.modules[kind].signature.create(path=(f"router{r}",))
                         for r, kind in enumerate(self._kinds)]
        nports = [topo.ports(r) for r in range(topo.routers)]
        self._base = [sum(nports[:r]) for r in range(topo.routers)]
        ports, e, np_ = sum(nports), topo.endpoints, sw.priorities
        capacity = {kind: router_capacity(cfg, kind) for kind in self.modules}
        edge = [kind for kind in self.modules if topo.endpoint_ports(tier_router(topo, kind))]
        members = {
            "i": In(stream.Signature(packet_layout(cfg))).array(e),
            "o": Out(stream.Signature(packet_layout(cfg))).array(e),
            "pause": In(unsigned(e * np_)),
            "rx_packets": Out(COUNTER_WIDTH).array(ports),
            "tx_packets": Out(COUNTER_WIDTH).array(ports),
            "drops": Out(COUNTER_WIDTH).array(ports),
            "link_flits": Out(COUNTER_WIDTH).array(len(topo.links)),
            "router_peak": Out(range(max(capacity.values()) + 1)).array(topo.routers),
            "link_credits": Out(credit_bits(cfg)).array(len(topo.links) * np_ * cfg.fabric.vcs),
            "moved": Out(1),
        }
        if cfg.pfc.enabled:
            members.update({
                "pfc_tx": Out(frame_signature()).array(e),
                "pfc_rx": In(frame_signature()).array(e),
                "pfc_tx_frames": Out(COUNTER_WIDTH).array(e * np_),
                "pfc_rx_frames": Out(COUNTER_WIDTH).array(e * np_),
                "pfc_paused_cycles": Out(COUNTER_WIDTH).array(e * np_),
                "pfc_peak_occupancy": Out(sw.buffer_flits.bit_length()).array(e * np_),
            })
        if cfg.ecn.enabled:
            members.update({
                "ecn_marks": Out(COUNTER_WIDTH).array(ports * np_),
                "ecn_decided": Out(e),
                "ecn_backlog": Out(max(capacity[kind] for kind in edge).bit_length()).array(e),
            })
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg, topo = self._cfg, self._topo
        np_ = cfg.switch.priorities
        # The ports of each router that meet a wire of this top, by name, bound to it when
        # the router's instance is made; a submodule's port is assigned to it.
        wires = [{} for _ in self._routers]
        ports = [] if self._instances else [
            {name: (flow, value) for name, flow, value in module_ports(router.signature, router)}
            for router in self._routers]

        def join(r, port, wire):
            """Router ``r``'s port named ``port`` onto ``wire``, of the same width: the
            instance's port is the wire itself (:func:`~..ports.instance` says why)."""
            if self._instances:
                wires[r][port] = wire
                return
            flow, value = ports[r][port]
            m.d.comb += value.eq(wire) if flow == In else wire.eq(value)

        for r, router in enumerate(self._routers):
            m.d.comb += router.router_id.eq(r)
            base, n = self._base[r], topo.ports(r)
            if cfg.ecn.enabled:
                for o in range(n):
                    m.d.comb += router.ecn_seed[o].eq(cfg.ecn.port_seed(base + o))
                for q in range(n * np_):
                    m.d.comb += self.ecn_marks[base * np_ + q].eq(router.ecn_marks[q])
            for p in range(n):
                for name in ("rx_packets", "tx_packets", "drops"):
                    join(r, f"{name}__{p}", getattr(self, name)[base + p])
            m.d.comb += self.router_peak[r].eq(router.router_peak)
        for e in range(topo.endpoints):
            self._endpoint(m, e, join)
        for k, link in enumerate(topo.links):
            self._link(m, k, *link, join)
        for r, router in enumerate(self._routers):
            if self._instances:
                kind = self._kinds[r]
                module = self.modules[kind]
                m.submodules[f"router{r}"] = instance(kind, module.signature, router, wires[r],
                                                      packed=module.hierarchical)
            else:
                m.submodules[f"router{r}"] = router
        m.d.comb += self.moved.eq(Cat(router.moved for router in self._routers).any())
        return m

    def _endpoint(self, m, e, join):
        """Endpoint ``e``'s ports onto its router's."""
        cfg, topo = self._cfg, self._topo
        np_ = cfg.switch.priorities
        r, p = topo.endpoint_router(e), topo.endpoint_port(e)
        router = self._routers[r]
        for port, wire in {**stream_wires(f"i__{p}", self.i[e]),
                           **stream_wires(f"o__{p}", self.o[e])}.items():
            join(r, port, wire)
        classes = slice(e * np_, (e + 1) * np_)
        local = slice(p * np_, (p + 1) * np_)
        m.d.comb += router.pause[local].eq(self.pause[classes])
        if cfg.pfc.enabled:
            wiring.connect(m, wiring.flipped(self.pfc_rx[e]), router.pfc_rx[p])
            wiring.connect(m, router.pfc_tx[p], wiring.flipped(self.pfc_tx[e]))
            for c in range(np_):
                for name in ("pfc_tx_frames", "pfc_rx_frames", "pfc_paused_cycles",
                             "pfc_peak_occupancy"):
                    m.d.comb += getattr(self, name)[e * np_ + c].eq(
                        getattr(router, name)[p * np_ + c])
        if cfg.ecn.enabled:
            m.d.comb += [self.ecn_decided[e].eq(router.ecn_decided[p]),
                         self.ecn_backlog[e].eq(router.ecn_backlog[p])]

    def _link(self, m, k, r, port, peer, peer_port, join):
        """Link ``k`` from output ``port`` of router ``r`` to input ``peer_port`` of ``peer``:
        the flits forward, the credits back, ``link_latency`` cycles each way."""
        topo, latency = self._topo, self._cfg.fabric.link_latency
        j, jp = port - topo.endpoint_ports(r), peer_port - topo.endpoint_ports(peer)
        sender, receiver = self._routers[r], self._routers[peer]
        join(r, f"link_flits__{j}", self.link_flits[k])
        pools = self._cfg.switch.priorities * self._cfg.fabric.vcs
        for pool in range(pools):
            join(r, f"link_credits__{j * pools + pool}", self.link_credits[k * pools + pool])
        valid, flit = sender.link_o[j].valid, Value.cast(sender.link_o[j].payload)
        for s in range(latency):
            # The flit registers need no reset: they are ignored while valid is low. They
            # hold the flit's bits, not its fields: a field's name on every register of
            # every link would be most of a large fabric's Verilog.
            stage_valid = Signal(name=f"link{k}_valid{s}")
            stage_flit = Signal(len(flit), name=f"link{k}_flit{s}", reset_less=True)
            m.d.sync += [stage_valid.eq(valid), stage_flit.eq(flit)]
            valid, flit = stage_valid, stage_flit
        join(peer, f"link_i__{jp}__valid", valid)
        join(peer, f"link_i__{jp}__payload", flit)
        back, pool = receiver.credit_o[jp].valid, receiver.credit_o[jp].pool
        for s in range(latency - 1):
            stage_back = Signal(name=f"link{k}_credit{s}")
            stage_pool = Signal.like(pool, name=f"link{k}_pool{s}", reset_less=True)
            m.d.sync += [stage_back.eq(back), stage_pool.eq(pool)]
            back, pool = stage_back, stage_pool
        join(r, f"credit_i__{j}__valid", back)
        join(r, f"credit_i__{j}__pool", pool)
