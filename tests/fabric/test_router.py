"""The router RTL in small fabrics under Amaranth's simulator, against FabricModel.

The fabric top (hdl/fabric/top.py) with its routers as Amaranth submodules runs a
trace cycle by cycle: sources offer as the testbench's do, sinks take flits
on a seeded ready pattern, the pause input follows its schedule. Every
packet's head and tail cycles, exit endpoint, hop count and ECN codepoint,
and every counter at the end, must be the model's (docs/architecture.md 11).
A few hundred cycles per fabric: the cocotb runs on Icarus and Verilator
cover long traces.
"""

import numpy as np
import pytest
from amaranth.sim import Simulator

from superfabric.config import FabricConfig
from superfabric.formats.packet import FlitCodec, packet_fields
from superfabric.formats.pfc_frame import pack_request, unpack_request
from superfabric.hdl.fabric.top import Fabric
from superfabric.sim.backpressure import PauseSchedule, SinkReady
from superfabric.sim.fabric.top import FabricModel
from superfabric.sim.pfc import SinkPause
from superfabric.sim.records import Records
from superfabric.sim.source import Sources
from superfabric.sim.traffic import generate
from superfabric.tb.trace_tb import FlitValues
from superfabric.network.topology import Topology

SMALL = ["switch.priorities=2", "switch.buffer_flits=24", "switch.max_packet_flits=4",
         "switch.data_width=8", "switch.tag_width=12", "switch.islip_iterations=2",
         "fabric.vc_buffer_flits=6"]

# name -> (overrides, traffic, load, packet lengths, sink stall, pause rate)
FABRICS = {
    "ring3-m2-dor": (SMALL + ["fabric.topology=torus", "fabric.dims=[3]",
                              "fabric.endpoints_per_router=2"],
                     "uniform", 0.5, "bimodal:1,4,0.5", 0.2, 0.1),
    "torus-2x2-adaptive-latency1": (SMALL + ["fabric.topology=torus", "fabric.dims=[2, 2]",
                                             "fabric.routing=adaptive", "fabric.vcs=3",
                                             "fabric.link_latency=1"],
                                    "uniform", 0.7, "bimodal:1,4,0.5", 0.0, 0.0),
    # Four VCs: two in each dateline class, or two adaptive; a flow keeps one of them.
    "torus-2x2-adaptive-4vcs": (SMALL + ["fabric.topology=torus", "fabric.dims=[2, 2]",
                                         "fabric.routing=adaptive", "fabric.vcs=4"],
                                "uniform", 0.8, "bimodal:1,4,0.5", 0.1, 0.0),
    "ring4-dor-4vcs": (SMALL + ["fabric.topology=torus", "fabric.dims=[4]", "fabric.vcs=4"],
                       "uniform", 0.8, "bimodal:1,4,0.5", 0.1, 0.0),
    "ring4-dor-fifo-drop": (SMALL + ["fabric.topology=torus", "fabric.dims=[4]",
                                     "switch.scheduler=fifo", "switch.ingress_full=drop",
                                     "fabric.link_latency=3"],
                            "uniform", 0.9, "fixed:3", 0.3, 0.0),
    "leaf-spine-ecmp-ecn": (SMALL + ["fabric.topology=fat_tree", "fabric.leaves=3",
                                     "fabric.spines=2", "fabric.hosts_per_leaf=2",
                                     "fabric.routing=ecmp", "ecn.enabled=true", "ecn.kmin=2",
                                     "ecn.kmax=10", "ecn.pmax=0.5"],
                            "uniform", 0.8, "bimodal:1,4,0.5", 0.2, 0.0),
    "leaf-spine-adaptive-pfc": (SMALL + ["fabric.topology=fat_tree", "fabric.leaves=2",
                                         "fabric.spines=2", "fabric.hosts_per_leaf=3",
                                         "fabric.routing=adaptive", "pfc.enabled=true",
                                         "pfc.priorities=[1]", "pfc.xoff=8", "pfc.xon=4",
                                         "pfc.headroom=8", "pfc.pause_quanta=2"],
                                "incast", 1.0, "fixed:2", 0.0, 0.0),
    "ring3-m2-dor-registered-grant-ecn": (SMALL + ["fabric.topology=torus", "fabric.dims=[3]",
                                                   "fabric.endpoints_per_router=2",
                                                   "switch.registered_grant=true",
                                                   "ecn.enabled=true", "ecn.kmin=2",
                                                   "ecn.kmax=10", "ecn.pmax=0.5"],
                                          "uniform", 0.6, "bimodal:1,4,0.5", 0.2, 0.1),
    # Outputs held for starving inputs (section 5.8), at once and after two misses.
    "ring4-dor-starvation-1": (SMALL + ["fabric.topology=torus", "fabric.dims=[4]",
                                        "switch.starvation_limit=1"],
                               "uniform", 0.9, "bimodal:1,4,0.5", 0.2, 0.0),
    "leaf-spine-ecmp-registered-grant-starvation-2": (
        SMALL + ["fabric.topology=fat_tree", "fabric.leaves=3", "fabric.spines=2",
                 "fabric.hosts_per_leaf=2", "fabric.routing=ecmp",
                 "switch.registered_grant=true", "switch.starvation_limit=2"],
        "uniform", 0.9, "fixed:4", 0.2, 0.0),
}

CYCLES = 250


def _run_rtl(cfg, trace, sink, pause, sink_pause, limit):
    """Drive ``trace`` into the fabric under Amaranth's simulator; the Records it makes."""
    topo = Topology.of(cfg)
    e, npr = topo.endpoints, cfg.switch.priorities
    dut = Fabric(cfg, instances=False)
    codec = FlitCodec(packet_fields(cfg))
    flits = FlitValues(codec, trace, cfg)
    sources = Sources(trace, e, npr)
    rec = Records.empty(len(trace))
    rec.ecn_out[:] = trace.ecn
    tag, hops = codec.field_spec("tag"), codec.field_spec("hops")
    ecn = codec.field_spec("ecn")
    frames = []

    async def bench(ctx):
        cycle, resolved, receiving = 0, 0, [None] * e
        while resolved < len(trace) and cycle < limit:
            offered = [sources.offer(k, cycle) for k in range(e)]
            ready = sink.mask(cycle)
            for k in range(e):
                ctx.set(dut.i[k].valid, offered[k] >= 0)
                if offered[k] >= 0:
                    ctx.set(dut.i[k].payload.as_value(), flits.value(offered[k], sources.flit[k]))
                ctx.set(dut.o[k].ready, ready >> k & 1)
            ctx.set(dut.pause, pause.mask(cycle))
            if sink_pause is not None:
                valid = 0
                for port, enable, times in sink_pause.frames(cycle):
                    ctx.set(dut.pfc_rx[port].payload.as_value(), pack_request(enable, times))
                    valid |= 1 << port
                for k in range(e):
                    ctx.set(dut.pfc_rx[k].valid, valid >> k & 1)
                for k in range(e):
                    if ctx.get(dut.pfc_tx[k].valid):
                        enable, times = unpack_request(ctx.get(dut.pfc_tx[k].payload.as_value()))
                        frames.append((cycle, k, enable, *times))
                        for p in range(npr):
                            if enable >> p & 1:
                                sources.pause(k, p, cycle + 1, cfg.pfc.quanta_to_cycles(
                                    times[p], cfg.switch.data_width))
            for k in range(e):
                if offered[k] >= 0 and ctx.get(dut.i[k].ready):
                    sources.accept(k)
            for k in range(e):
                if not (ready >> k & 1 and ctx.get(dut.o[k].valid)):
                    continue
                value = ctx.get(dut.o[k].payload.as_value())
                if receiving[k] is None:
                    pkt = value >> tag[0] & tag[1]
                    receiving[k] = [pkt, 0]
                    rec.head[pkt], rec.out_port[pkt] = cycle, k
                    rec.hops[pkt] = value >> hops[0] & hops[1]
                    rec.ecn_out[pkt] = value >> ecn[0] & ecn[1]
                pkt, flit = receiving[k]
                if flit == trace.length[pkt] - 1:
                    rec.tail[pkt] = cycle
                    receiving[k] = None
                else:
                    receiving[k][1] += 1
            resolved = int((rec.tail >= 0).sum() + _dropped(ctx, dut, topo))
            await ctx.tick()
            cycle += 1
        rec.cycles = cycle
        rec.counters = {name: [ctx.get(c) for c in getattr(dut, name)]
                        for name in _counter_names(cfg)}

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    rec.pfc_frames = np.array(frames, np.int64).reshape(-1, 11)
    return rec


def _dropped(ctx, dut, topo):
    """Packets the endpoint inputs dropped so far (links never drop)."""
    return sum(ctx.get(dut.drops[g]) for g in _endpoint_ports(topo))


def _endpoint_ports(topo):
    base = np.concatenate([[0], np.cumsum([topo.ports(r) for r in range(topo.routers)])])
    return [int(base[topo.endpoint_router(e)]) + topo.endpoint_port(e)
            for e in range(topo.endpoints)]


def _counter_names(cfg):
    names = ["rx_packets", "tx_packets", "drops", "link_flits", "router_peak"]
    if cfg.ecn.enabled:
        names.append("ecn_marks")
    if cfg.pfc.enabled:
        names += ["pfc_tx_frames", "pfc_rx_frames", "pfc_paused_cycles", "pfc_peak_occupancy"]
    return names


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FABRICS))
def test_fabric_rtl_is_the_model(name):
    overrides, pattern, load, lengths, stall, pause_rate = FABRICS[name]
    cfg = FabricConfig.load(overrides=overrides)
    topo = Topology.of(cfg)
    trace = generate(cfg, pattern, load=load, cycles=CYCLES, seed=5, packet_lengths=lengths,
                     ect_fraction=0.8 if cfg.ecn.enabled else 0.0)
    sink = SinkReady(topo.endpoints, stall, 3)
    pause = PauseSchedule(topo.endpoints, cfg.switch.priorities, 0.0 if cfg.pfc.enabled
                          else pause_rate, 4)
    sink_pause = SinkPause(cfg, 0.3, 6) if cfg.pfc.enabled else None
    model = FabricModel(cfg).run(trace, sink=sink, pause=pause, sink_pause=sink_pause)
    assert not model.stalled and len(trace) > 20
    rtl = _run_rtl(cfg, trace, sink, pause, sink_pause, model.cycles + 50)

    delivered = model.tail >= 0
    assert (rtl.head == model.head).all(), np.flatnonzero(rtl.head != model.head)[:10]
    assert (rtl.tail == model.tail).all(), np.flatnonzero(rtl.tail != model.tail)[:10]
    assert (rtl.out_port[delivered] == model.out_port[delivered]).all()
    assert (rtl.hops[delivered] == model.hops[delivered]).all()
    assert (rtl.ecn_out[delivered] == model.ecn_out[delivered]).all()
    assert rtl.cycles == model.cycles
    for counter, values in model.counters.items():
        assert rtl.counters[counter] == values, counter
    if cfg.pfc.enabled:
        assert rtl.pfc_frames.tolist() == model.pfc_frames.tolist()
    # The fabric was exercised: some packet took a longest path, and buffers filled.
    assert model.hops.max() == topo.max_hops - 1
    assert max(model.counters["router_peak"]) > cfg.switch.max_packet_flits


@pytest.mark.parametrize("name", [k for k in sorted(FABRICS) if "starvation" in k])
def test_the_starvation_cases_hold_outputs(name):
    """The cases above that set ``starvation_limit`` exercise the hold: without it,
    some packet of the same trace leaves at another cycle."""
    overrides, pattern, load, lengths, stall, pause_rate = FABRICS[name]
    runs = []
    for limit in (None, "0"):
        cfg = FabricConfig.load(overrides=overrides + (
            [f"switch.starvation_limit={limit}"] if limit else []))
        topo = Topology.of(cfg)
        trace = generate(cfg, pattern, load=load, cycles=CYCLES, seed=5, packet_lengths=lengths)
        runs.append(FabricModel(cfg).run(trace, sink=SinkReady(topo.endpoints, stall, 3)))
    assert (runs[0].tail != runs[1].tail).any()
