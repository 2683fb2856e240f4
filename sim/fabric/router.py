"""Cycle-exact golden model of one router of the fabric, compiled (docs/architecture.md 5, 11).

A router is the switch of section 4 with a routing decision at ingress,
virtual channels and credit-based flow control on its link ports (section
11). The state of every router of a fabric lives in one
:class:`RouterState` of numpy arrays: per packet, per global port (router
``r``'s ports are ``base[r] .. base[r] + ports[r] - 1``, its endpoint ports
first; views of one record per port, :func:`port_records`), per (input,
queue), per link. :func:`router_cycle` is one cycle of
one router, sections 5.2 and 5.3 with the changes of 11.5 (and of 5.7 with
``registered_grant``): it calls one rule per step, named after it
(:func:`output_status`, :func:`request`, :func:`match_starts`,
:func:`egress_handover`, :func:`ingress`, :func:`issue_reads`, ...), and
those call the rules of the blocks (``sim/skid_buffer.py``, ``sim/voq.py``,
``sim/egress_queue.py``, ``sim/islip.py``, ``sim/ecn.py``, ``sim/pfc.py``)
that the block tests hold against the RTL. The fabric's run loop
(:mod:`.top`) calls it for every router and moves the links. The switch is
the fabric of one router whose ports are all endpoints.
"""

from collections import namedtuple

import numpy as np
from numba.extending import register_jitable

from ...network import routing
from ...config import FabricConfig
from ...formats.packet import CE, ECT0, ECT1
from ...network.topology import Topology
from ..ecn import ecn_decide
from ..egress_queue import EGRESS_DEPTH, egress_credit, egress_pop, egress_push
from ..islip import highest_class, islip_match
from ..kernel import kernel
from ..pfc import FRAME_COLUMNS, lossless_classes, pfc_egress_receive, pfc_ingress_step
from ..records import Records
from ..skid_buffer import SKID_DEPTH, skid_pop, skid_push, skid_ready
from ..source import NONE
from ..voq import (frame_flit, pool_index, queue_index, queue_parts, voq_clock, voq_dequeue,
                   voq_enqueue, voq_fits)

__all__ = ["RouterState", "RouterParams", "router_params", "router_state", "packet_arrays",
           "fabric_room",
           "trace_packets", "router_busy", "router_quiet", "router_reached", "router_cycle",
           "EGRESS_DEPTH", "OUTSTANDING",
           "PROGRESS", "FRAMES", "PACKETS", "IN_FLIGHT", "OVERFLOW", "FREE", "SWITCH", "TORUS",
           "FAT_TREE"]

#: Indices of RouterState.scalars: packets outstanding, whether the last
#: cycle moved a flit, pause frames recorded, packets registered, flits and
#: credits in flight on links, a flit that arrived at a full link input (a
#: broken credit invariant, which the caller reports), and the ids on the
#: stack of free packet slots (with ``recycle``).
OUTSTANDING, PROGRESS, FRAMES, PACKETS, IN_FLIGHT, OVERFLOW, FREE = range(7)

#: RouterParams.topology.
SWITCH, TORUS, FAT_TREE = range(3)

#: The fields of a flit in RouterState.skid: its packet, its index in the packet, its VC.
SKID_PKT, SKID_FLIT, SKID_VC = range(3)

# The routing functions are defined once, in superfabric.network.routing, as plain
# Python; these make them callable from compiled code.
for _rule in (routing.dimension_rank, routing.torus_dor_hop, routing.class_vcs,
              routing.best_vc, routing.ecmp_hash, routing.ecmp_vc, routing.torus_escape,
              routing.dor_margin, routing.torus_route, routing.fat_tree_route):
    register_jitable(_rule)

#: The configuration as the kernels read it (all integers; flags are 0 or 1).
RouterParams = namedtuple("RouterParams", [
    "priorities", "islip", "drop", "iterations",
    "ecn_on", "kmin", "kmax", "slope",
    "pfc_on", "xoff", "xon", "quanta", "refresh_period", "data_width",
    "topology", "routers", "endpoints", "max_ports", "vcs", "adaptive", "max_packet",
    "per_router", "leaves", "spines", "links", "link_latency", "registered_grant",
    "starvation_limit",   # switch.starvation_limit with iSLIP, else 0
    "recycle",    # a packet's id goes back to free_ids when it is delivered or dropped
    "capture_link"])  # the link whose packets go to p_link_cycle and p_link_ecn, -1 none

#: Everything the routers hold, as arrays; docs/architecture.md sections 5.1 and 11.
RouterState = namedtuple("RouterState", [
    # Per packet (indexed by id): what it is ...
    "p_length", "p_prio", "p_src", "p_dst", "p_ecn_in",
    # ... where it is queued (its queue and arriving pool at the router that holds it) ...
    "p_req", "p_pool", "p_next",
    # ... and what happens to it: delivery, links crossed.
    "p_ecn_out", "p_ecn_backlog", "p_head", "p_tail", "p_out", "p_dropped", "p_hops", "p_path",
    "p_link_cycle", "p_link_ecn",
    "scalars", "free_ids",
    # Per router: its first global port and port count, and whether its next
    # cycle can be skipped (router_quiet); per port of the topology: the
    # endpoint it faces (-1: a link), its output and input links.
    "base", "nports", "quiet", "port_endpoint", "port_link", "in_link", "dims",
    # Per link: the global output port feeding it and the input port it feeds;
    # the flits on it, a slot per cycle of latency.
    "link_src", "link_dst", "fwd_pkt", "fwd_flit", "fwd_vc", "fwd_valid",
    # Per input: the credits on its link back upstream, a slot per cycle of latency (by
    # input, not by link, so that only the router that sends them writes near them,
    # whichever thread steps it: docs/spec/timing.md 5.9).
    "back_pool",
    # Per input: skid buffer (its flits, oldest first, fields SKID_*), ingress
    # framing, space per pool.
    "skid_n", "skid",
    "free", "in_packet", "left", "dropping", "waiting", "stored", "wr_ecn",
    # Per (input, queue): the complete packets, oldest first; per [input,
    # output * vcs + vc] the classes with a complete packet, as a bit mask; per input,
    # the local outputs it has a complete packet for, as a bit mask (what it requests
    # from, so that a cycle looks at those only).
    "q_head", "q_tail", "q_count", "nonempty", "toward",
    # Per input: read register and crossbar state.
    "rd_valid", "rd_pkt", "rd_flit", "rd_last", "rd_out", "rd_pool", "rd_ecn", "active",
    "cur_out", "cur_vc",
    # Per output: the egress queue, a ring of EGRESS_DEPTH flits; credits per [class, vc]
    # and, per VC, the classes whose credits hold the longest packet (credit_ok: all of
    # them on an endpoint output's VC 0 and on an adaptive VC), kept as the credits change.
    "eg_n", "eg_first", "eg_pkt", "eg_flit", "eg_last", "eg_vc", "credits", "credit_ok",
    # Counters per port and per link; the routers' peak occupancy.
    "rx", "tx", "drops", "link_flits", "peak_stored",
    # iSLIP pointers per [global port, class] and scratch of one match; the
    # grant register per input (registered_grant: output, -1 for none; class; VC).
    "g_ptr", "a_ptr", "req", "grants", "match_out", "match_prio", "match_vc", "grant_to",
    "grant_prio", "gr_out", "gr_prio", "gr_vc",
    # Starvation (section 5.8) per input: packets started past a packet for its target
    # output that it could not request, and that output; per output, the input it waits
    # for (-1: none); per router, its starving inputs and whether it holds an output.
    "misses", "target", "held_for", "starving", "holding",
    # ECN per (output, class) and per output.
    "backlog", "lfsr", "marks",
    # PFC ingress per [input, class] and per input * priorities + class.
    "occupancy", "xoff_state", "refresh", "frames_sent", "peak",
    # PFC egress per output * priorities + class: pause intervals and frames received.
    "pause_start", "pause_until", "paused_before", "frames_received", "lossless",
    # Pause frames sent: rows (cycle, endpoint, class_enable, eight times); this cycle's.
    "frames", "tx_enable", "tx_times",
    # Scratch of one cycle, per port.
    "finishing", "credit", "out_free", "reserve", "reserve_pool", "paused_classes",
    "booked", "book_port", "book_vc", "book_prio", "book_len"])


def router_params(cfg: FabricConfig, topo: Topology, *, recycle: bool = False,
                  capture_link: int = -1) -> RouterParams:
    """The kernels' view of ``cfg``; ``recycle`` for runs that reuse packet ids;
    ``capture_link``, a link whose packets are recorded as they enter it (-1: none)."""
    sw, ecn, pfc, f = cfg.switch, cfg.ecn, cfg.pfc, cfg.fabric
    kind = {"switch": SWITCH, "torus": TORUS, "fat_tree": FAT_TREE}[topo.kind]
    return RouterParams(
        priorities=sw.priorities, islip=int(sw.scheduler == "islip"),
        drop=int(sw.ingress_full == "drop"), iterations=sw.islip_iterations,
        ecn_on=int(ecn.enabled), kmin=ecn.kmin, kmax=ecn.kmax, slope=ecn.slope,
        pfc_on=int(pfc.enabled), xoff=pfc.xoff, xon=pfc.xon, quanta=pfc.pause_quanta,
        refresh_period=pfc.refresh_cycles(sw.data_width), data_width=sw.data_width,
        topology=kind, routers=topo.routers, endpoints=topo.endpoints,
        max_ports=max(topo.ports(r) for r in range(topo.routers)),
        vcs=f.vcs if kind != SWITCH else 1, adaptive=int(f.routing == "adaptive"),
        max_packet=sw.max_packet_flits,
        per_router=(topo.endpoints_per_router if kind == TORUS else
                    topo.hosts_per_leaf if kind == FAT_TREE else topo.switch_ports),
        leaves=topo.leaves, spines=topo.spines, links=len(topo.links),
        link_latency=f.link_latency, registered_grant=int(sw.registered_grant),
        starvation_limit=sw.starvation_limit if sw.scheduler == "islip" else 0,
        recycle=int(recycle), capture_link=capture_link)


def packet_arrays(capacity: int, max_links: int) -> dict:
    """Per-packet arrays for ``capacity`` packets, none registered; the dtypes are
    those of :class:`~.traffic.Trace` and :class:`~.records.Records`."""
    rec = Records.empty(capacity, max_links)
    return {"p_length": np.zeros(capacity, np.int16), "p_prio": np.zeros(capacity, np.int8),
            "p_src": np.zeros(capacity, np.int16), "p_dst": np.zeros(capacity, np.int16),
            "p_ecn_in": np.zeros(capacity, np.int8), "p_req": np.zeros(capacity, np.int64),
            "p_pool": np.zeros(capacity, np.int64), "p_next": np.full(capacity, NONE, np.int64),
            "p_ecn_out": rec.ecn_out, "p_ecn_backlog": rec.ecn_backlog, "p_head": rec.head,
            "p_tail": rec.tail, "p_out": rec.out_port, "p_dropped": rec.dropped,
            "p_hops": rec.hops, "p_path": rec.path, "p_link_cycle": rec.link_cycle,
            "p_link_ecn": rec.link_ecn}


def trace_packets(trace, rec: Records) -> dict:
    """Per-packet arrays of a whole trace, its ids the trace's rows; the packets'
    fates are written straight into ``rec``."""
    n = len(trace)
    rec.ecn_out[:] = trace.ecn
    # Copies: the trace's arrays are read-only, which numba would compile apart.
    return {"p_length": trace.length.copy(), "p_prio": trace.prio.copy(),
            "p_src": trace.src.copy(), "p_dst": trace.dst.copy(), "p_ecn_in": trace.ecn.copy(),
            "p_req": np.empty(n, np.int64), "p_pool": np.empty(n, np.int64),
            "p_next": np.empty(n, np.int64), "p_ecn_out": rec.ecn_out,
            "p_ecn_backlog": rec.ecn_backlog, "p_head": rec.head, "p_tail": rec.tail,
            "p_out": rec.out_port, "p_dropped": rec.dropped, "p_hops": rec.hops,
            "p_path": rec.path, "p_link_cycle": rec.link_cycle, "p_link_ecn": rec.link_ecn}


def fabric_room(cfg: FabricConfig, topo: Topology) -> int:
    """Flits the fabric can hold at once (buffers, skid buffers, egress queues, read
    registers, links): a bound on the packets inside it, for runs that recycle ids."""
    sw, f = cfg.switch, cfg.fabric
    room = 0
    for r in range(topo.routers):
        m = topo.endpoint_ports(r)
        links = topo.ports(r) - m
        room += m * sw.buffer_flits + links * sw.priorities * f.vcs * f.vc_buffer_flits
        room += topo.ports(r) * (2 + 4 + 1)
    return room + len(topo.links) * f.link_latency


def port_records(ports: int, fields: list) -> dict:
    """Per-port state as one record per port: ``fields`` are ``(name, dtype[, shape[,
    fill]])``; returns each field as an array over the ports (a view of the records,
    of that shape after the port), filled with ``fill`` (default 0).

    The fabric's state outgrows the caches (an 8x8x6 torus holds megabytes of it), and
    a router's cycle reads each port's fields step after step: held as an array per
    field, that is a cache line from each of some seventy arrays per router; as
    records (528 bytes a port on that torus), a router's ports lie together and are
    read in order.
    """
    spec = [(f[0], f[1], f[2] if len(f) > 2 else ()) for f in fields]
    block = np.zeros(ports, np.dtype(spec, align=True))
    views = {}
    for name, *rest in fields:
        view = block[name]
        if len(rest) > 2:
            view[...] = rest[2]
        views[name] = view
    return views


def router_state(cfg: FabricConfig, topo: Topology, packets: dict) -> RouterState:
    """Every router just after reset, with the per-packet arrays ``packets``."""
    sw, f = cfg.switch, cfg.fabric
    prm = router_params(cfg, topo)
    p, v, n = sw.priorities, prm.vcs, prm.max_ports
    nports = np.array([topo.ports(r) for r in range(topo.routers)], np.int64)
    base = np.concatenate([[0], np.cumsum(nports)[:-1]]).astype(np.int64)
    ports = int(nports.sum())
    queues = n * v * p if sw.scheduler == "islip" else 1
    links = max(1, len(topo.links))
    latency = f.link_latency

    def ints(*shape, fill=0):
        return np.full(shape, fill, np.int64)

    def flags(*shape):
        return np.zeros(shape, np.bool_)

    port_endpoint, port_link, in_link = ints(ports, fill=-1), ints(ports, fill=-1), \
        ints(ports, fill=-1)
    link_src, link_dst = ints(links), ints(links)
    free = ints(ports, p * v)
    for e in range(topo.endpoints):
        port_endpoint[base[topo.endpoint_router(e)] + topo.endpoint_port(e)] = e
    for r in range(topo.routers):
        m = topo.endpoint_ports(r)
        free[base[r]:base[r] + m, 0] = sw.buffer_flits
        free[base[r] + m:base[r] + nports[r], :] = f.vc_buffer_flits
    for k, (r, port, peer, peer_port) in enumerate(topo.links):
        link_src[k] = base[r] + port
        link_dst[k] = base[peer] + peer_port
        port_link[base[r] + port] = k
        in_link[base[peer] + peer_port] = k
    credits = np.zeros((ports, p, v), np.int64)
    credits[port_link >= 0] = f.vc_buffer_flits
    # At reset every pool downstream is empty and holds the longest packet (the
    # configuration wants vc_buffer_flits >= max_packet_flits): every class on every VC.
    credit_ok = ints(ports, v)
    credit_ok[port_link >= 0] = (1 << p) - 1
    credit_ok[port_link < 0, 0] = (1 << p) - 1
    lfsr = np.array([cfg.ecn.port_seed(g) for g in range(ports)], np.int64)
    # Each field as narrow as its values allow, so that more of the state stays cached:
    # bit masks over ports, counters, the LFSR and the port numbers that are shifted 64
    # bits; packet ids, flit counts and other port numbers 32; classes, VCs and class
    # masks 16 (so that 1 << class fits as numpy's Python-scalar rules keep the type,
    # under NUMBA_DISABLE_JIT); the small queues' counts 8.
    b1, i8, i16, i32, i64 = np.bool_, np.int8, np.int16, np.int32, np.int64
    record = port_records(ports, [
        # What every cycle of a router reads of each of its ports, in the order of its steps
        # (output_status, request, match_starts, egress_handover, ingress, issue_reads) ...
        ("rd_valid", b1), ("rd_last", b1), ("finishing", b1), ("credit", b1),
        ("out_free", b1), ("active", b1), ("in_packet", b1), ("dropping", b1),
        ("eg_n", i8), ("skid_n", i8), ("eg_first", i8), ("cur_vc", i16),
        ("match_prio", i16), ("match_vc", i16), ("rd_pool", i16), ("reserve_pool", i16),
        ("paused_classes", i16), ("credit_ok", i16, (v,)),
        ("rd_out", i64), ("cur_out", i32), ("gr_out", i32, (), -1),
        ("port_link", i32, (), -1), ("port_endpoint", i32, (), -1), ("in_link", i32, (), -1),
        ("held_for", i32, (), -1), ("match_out", i32), ("book_port", i32, (), -1),
        ("waiting", i32), ("stored", i32), ("reserve", i32), ("rd_pkt", i32),
        ("rd_flit", i32), ("rd_ecn", i32), ("left", i32), ("wr_ecn", i32),
        ("toward", i64), ("req", i64, (p,)),
        ("free", i32, (p * v,)), ("credits", i32, (p, v)),
        ("eg_pkt", i32, (EGRESS_DEPTH,)), ("eg_flit", i32, (EGRESS_DEPTH,)),
        ("eg_last", b1, (EGRESS_DEPTH,)), ("eg_vc", i16, (EGRESS_DEPTH,)),
        ("skid", i32, (SKID_DEPTH, 3)),
        # ... and what only a packet's arrival, match or start touches.
        ("g_ptr", i64, (p,)), ("a_ptr", i64, (p,)), ("grants", i64, (p,)),
        ("grant_to", i32), ("grant_prio", i16), ("gr_prio", i16), ("gr_vc", i16),
        ("book_vc", i16), ("book_prio", i16), ("book_len", i32), ("booked", i32, (p, v)),
        ("q_head", i32, (queues,), NONE), ("q_tail", i32, (queues,), NONE),
        ("q_count", i32, (queues,)), ("nonempty", i16, (n * v,)),
        ("misses", i32), ("target", i32), ("rx", i64), ("tx", i64), ("drops", i64),
        ("lfsr", i64), ("occupancy", i32, (p,)), ("xoff_state", b1, (p,)),
        ("refresh", i64, (p,)), ("tx_enable", i16), ("tx_times", i32, (8,)),
        ("back_pool", i16, (latency,), -1)])
    for name, value in (("port_endpoint", port_endpoint), ("port_link", port_link),
                        ("in_link", in_link), ("free", free), ("credits", credits),
                        ("credit_ok", credit_ok), ("lfsr", lfsr)):
        record[name][...] = value
    return RouterState(
        **packets, **record, scalars=ints(7), free_ids=ints(len(packets["p_length"])),
        base=base, nports=nports, quiet=np.ones(topo.routers, np.bool_),
        dims=np.array(list(topo.dims) or [1], np.int64),
        link_src=link_src, link_dst=link_dst, fwd_pkt=ints(links, latency),
        fwd_flit=ints(links, latency), fwd_vc=ints(links, latency),
        fwd_valid=flags(links, latency),
        link_flits=ints(links), peak_stored=ints(topo.routers),
        starving=ints(topo.routers), holding=np.zeros(topo.routers, np.bool_),
        backlog=ints(ports * p), marks=ints(ports * p),
        frames_sent=ints(ports * p), peak=ints(ports * p),
        pause_start=ints(ports * p), pause_until=ints(ports * p),
        paused_before=ints(ports * p), frames_received=ints(ports * p),
        lossless=lossless_classes(cfg), frames=ints(64, FRAME_COLUMNS))


@kernel(inline=True)
def router_busy(st, prm, r):
    """Anything inside router ``r``: flits or packets anywhere, or a pause in force upstream."""
    base, n = st.base[r], st.nports[r]
    for g in range(base, base + n):
        if (st.rd_valid[g] or st.active[g] or st.skid_n[g] or st.waiting[g] or st.stored[g]
                or st.in_packet[g] or st.eg_n[g]):
            return True
    if prm.pfc_on:
        for g in range(base, base + n):
            for p in range(prm.priorities):
                if st.xoff_state[g, p]:
                    return True
    return False


@kernel(inline=True)
def router_quiet(st, prm, r):
    """Router ``r``'s next cycle changes nothing unless a flit or a sink's pause frame
    reaches it (docs/spec/timing.md 5.5): it holds nothing (:func:`router_busy`, which
    also covers the running PFC refresh timers) and sent no pause frame in this cycle
    (a router's frame outputs hold until its next cycle rewrites them)."""
    if router_busy(st, prm, r):
        return False
    if prm.pfc_on:
        for g in range(st.base[r], st.base[r] + st.nports[r]):
            if st.tx_enable[g]:
                return False
    return True


@kernel(inline=True)
def router_reached(st, prm, r, offer_pkt, sink_enable):
    """A flit is offered to an input of router ``r`` in this cycle, or (PFC) a sink's
    pause frame reaches one of its endpoint outputs."""
    for g in range(st.base[r], st.base[r] + st.nports[r]):
        if offer_pkt[g] >= 0:
            return True
        if prm.pfc_on and st.port_endpoint[g] >= 0 and sink_enable[st.port_endpoint[g]]:
            return True
    return False


@kernel(inline=True)
def _release(st, pkt):
    """Packet ``pkt`` has left the fabric: its id can be reused."""
    st.free_ids[st.scalars[FREE]] = pkt
    st.scalars[FREE] += 1


@kernel(inline=True)
def _reserved(prm, v):
    """VC ``v`` is adaptive on a torus: its room is reserved when a packet is routed to it."""
    return prm.topology == TORUS and prm.adaptive and v >= routing.ESCAPE_VCS


@kernel(inline=True)
def _route(st, prm, r, base, n, pkt):
    """Output port and VC of a packet whose head enters router ``r`` (section 11.4).

    An adaptive choice books the packet's length in its (output, class, VC)
    if the credits at the start of the cycle, less what lower inputs booked
    there in this cycle, still hold it; else the packet takes its escape. So
    the bookings of a cycle never overdraw the credits.
    """
    if prm.topology == SWITCH:
        return int(st.p_dst[pkt]), 0
    credits = st.credits[base:base + n]
    src, dst, prio = st.p_src[pkt], st.p_dst[pkt], st.p_prio[pkt]
    if prm.topology == TORUS:
        out, vc = routing.torus_route(st.dims, prm.per_router, r, src, dst, prio, prm.vcs,
                                      prm.adaptive, credits, prm.max_packet)
        if _reserved(prm, vc):
            if credits[out, prio, vc] - st.booked[base + out, prio, vc] < st.p_length[pkt]:
                return routing.torus_escape(st.dims, prm.per_router, r, src, dst, prio, prm.vcs,
                                            prm.adaptive)
            st.booked[base + out, prio, vc] += st.p_length[pkt]
        return out, vc
    return routing.fat_tree_route(prm.leaves, prm.spines, prm.per_router, r, src, dst, prio,
                                  prm.vcs, prm.adaptive, credits)


@kernel(inline=True)
def credits_changed(st, prm, go, p, v):
    """Output ``go``'s credits of class ``p`` on VC ``v`` changed: whether they still hold
    the longest packet (virtual cut-through), in ``credit_ok``. An adaptive VC's room is
    reserved at ingress instead, so all its classes stay eligible."""
    if _reserved(prm, v) or st.credits[go, p, v] >= prm.max_packet:
        st.credit_ok[go, v] |= 1 << p
    else:
        st.credit_ok[go, v] &= ~(1 << p)


@kernel(inline=True)
def port_class(g, prio, priorities):
    """The row of (global port ``g``, class ``prio``) in the per-(port, class) arrays of
    ECN and PFC: ``g * priorities + prio``."""
    return g * priorities + prio


@kernel(inline=True)
def channel_index(out, vc, vcs):
    """The column of (output ``out``, VC ``vc``) in ``nonempty``: ``out * vcs + vc``."""
    return out * vcs + vc


@kernel(inline=True)
def output_status(st, prm, base, n):
    """Steps 2 and 3 (sections 5.2, 11.5, 5.7): ``finishing`` per input; ``credit`` and
    ``out_free`` per output (a flit arriving in its egress queue at this edge counted).
    The classes each link output's VC has room downstream for are ``credit_ok``, kept as
    its credits change (:func:`credits_changed`). An adaptive VC's packets had their room
    reserved at ingress, where ``booked`` counts this cycle's bookings."""
    npr, nvc = prm.priorities, prm.vcs
    arriving = 0
    for g in range(base, base + n):
        st.finishing[g] = st.rd_valid[g] and st.rd_last[g]
        if st.rd_valid[g]:
            arriving |= 1 << st.rd_out[g]
    adaptive = prm.topology == TORUS and prm.adaptive
    for o in range(n):
        g = base + o
        st.credit[g] = egress_credit(st.eg_n, g, arriving >> o & 1)
        st.out_free[g] = st.credit[g]
        if adaptive and st.port_link[g] >= 0:
            for v in range(nvc):
                for p in range(npr):
                    st.booked[g, p, v] = 0
    for g in range(base, base + n):
        if st.active[g] and not st.finishing[g]:
            st.out_free[base + st.cur_out[g]] = False
        if st.gr_out[g] >= 0:
            # A registered grant reserves its output until it starts.
            st.out_free[base + st.gr_out[g]] = False


@kernel(inline=True)
def pfc_send(st, prm, base, n, cycle):
    """PFC at the endpoint ingress ports (section 4.11): this cycle's pause frames,
    from the occupancy at its start, recorded in ``st.frames``; returns how many."""
    npr = prm.priorities
    m = 0
    while m < n and st.port_endpoint[base + m] >= 0:
        m += 1
    sent = pfc_ingress_step(
        st.occupancy[base:base + m], st.xoff_state[base:base + m], st.refresh[base:base + m],
        st.frames_sent[base * npr:(base + m) * npr], st.peak[base * npr:(base + m) * npr],
        st.lossless, prm.xoff, prm.xon, prm.quanta, prm.refresh_period,
        st.tx_enable[base:base + m], st.tx_times[base:base + m])
    row = st.scalars[FRAMES]
    for g in range(base, base + m):
        if st.tx_enable[g]:
            st.frames[row, 0] = cycle
            st.frames[row, 1] = st.port_endpoint[g]
            st.frames[row, 2] = st.tx_enable[g]
            for j in range(8):
                st.frames[row, 3 + j] = st.tx_times[g, j]
            row += 1
    st.scalars[FRAMES] = row
    return sent


@kernel(inline=True)
def hold_outputs(st, prm, r, base, n):
    """Section 5.8: per output of router ``r``, the input it waits for, the lowest
    starving input (``starvation_limit`` packets started past one for its target) whose
    target it is; -1 for none. Nothing to do while the router has no starving input and
    holds nothing (most cycles)."""
    if prm.starvation_limit == 0 or not (st.starving[r] or st.holding[r]):
        return
    st.holding[r] = st.starving[r] > 0
    for g in range(base, base + n):
        st.held_for[g] = -1
    for i in range(n - 1, -1, -1):
        g = base + i
        if st.misses[g] == prm.starvation_limit:
            st.held_for[base + st.target[g]] = i


@kernel(inline=True)
def _class_toward(st, prm, g, go, o):
    """The highest class input ``g`` may request toward output ``go`` (local ``o``):
    an eligible queue, not paused; -1 for none."""
    nvc = prm.vcs
    classes = 0
    for v in range(nvc):
        classes |= st.nonempty[g, channel_index(o, v, nvc)] & st.credit_ok[go, v]
    return highest_class(classes & ~st.paused_classes[go])


@kernel(inline=True)
def _queued(st, prm, g, o):
    """The classes input ``g`` holds a complete packet of for local output ``o``, on any
    VC, as a bit mask."""
    nvc = prm.vcs
    classes = 0
    for v in range(nvc):
        classes |= st.nonempty[g, channel_index(o, v, nvc)]
    return classes


@kernel(inline=True)
def _free_for(st, go, i):
    """Output ``go`` is free for local input ``i``: free, and held for none or for it."""
    return st.out_free[go] and (st.held_for[go] < 0 or st.held_for[go] == i)


@kernel(inline=True)
def request(st, prm, r, base, n, cycle, paused):
    """Step 4 (sections 5.2, 5.8, 11.5): the highest class per (input, output) with an
    eligible queue that is not paused, as bit masks of inputs per (output, class) in
    ``st.req``; an output held for an input is free for that input only, and a free
    input it is held for requests it alone if it can (only while router ``r`` holds an
    output). Returns whether any input requests."""
    npr, nvc = prm.priorities, prm.vcs
    for g in range(base, base + n):
        e = st.port_endpoint[g]
        blocked = 0
        for p in range(npr):
            st.req[g, p] = 0
            if e >= 0 and (paused[e * npr + p]
                           or (prm.pfc_on and st.pause_until[port_class(g, p, npr)] > cycle)):
                blocked |= 1 << p
        st.paused_classes[g] = blocked
    any_request = False
    holds = st.holding[r]
    for i in range(n):
        g = base + i
        if (st.waiting[g] == 0 or (st.active[g] and not st.finishing[g])
                or st.gr_out[g] >= 0):
            continue
        if prm.islip:
            if holds and st.misses[g] == prm.starvation_limit:
                o = st.target[g]
                go = base + o
                p = _class_toward(st, prm, g, go, o) if st.held_for[go] == i else -1
                if p >= 0 and st.out_free[go]:
                    st.req[go, p] |= 1 << i
                    any_request = True
                    continue
            toward = st.toward[g]
            for o in range(n):
                go = base + o
                if not toward >> o & 1 or not st.out_free[go] or (
                        holds and st.held_for[go] >= 0 and st.held_for[go] != i):
                    continue
                p = _class_toward(st, prm, g, go, o)
                if p >= 0:
                    st.req[go, p] |= 1 << i
                    any_request = True
        else:
            o, v, p = queue_parts(st.p_req[st.q_head[g, 0]], nvc, npr)
            go = base + o
            if (st.out_free[go] and st.credit_ok[go, v] >> p & 1
                    and not st.paused_classes[go] >> p & 1):
                st.req[go, p] |= 1 << i
                any_request = True
    return any_request


@kernel(inline=True)
def _blocked(st, prm, g, go, o, i):
    """Section 5.8: input ``g`` (local ``i``) holds a complete packet for output ``go``
    (local ``o``) of a class not paused that it could not request in this cycle (not
    free for it, or short of credits)."""
    if not st.toward[g] >> o & 1:
        return False
    return (_queued(st, prm, g, o) & ~st.paused_classes[go]) != 0 and (
        not _free_for(st, go, i) or _class_toward(st, prm, g, go, o) < 0)


@kernel(inline=True)
def count_misses(st, prm, r, base, n):
    """Section 5.8, at this cycle's matches: a starving input counts from 0 again once it
    is free (whether it got its target or not, so it is starving only while busy).
    Another input matched past a packet for its target that it could not request
    counts one more miss; else, past packets for other outputs, the first of them after
    its target (round robin) becomes its target, its first miss; past none (as when
    its one complete packet is the one it starts), it counts from 0."""
    limit = prm.starvation_limit
    for i in range(n):
        g = base + i
        if st.misses[g] == limit:
            if not (st.active[g] and not st.finishing[g]) and st.gr_out[g] < 0:
                st.misses[g] = 0
                st.starving[r] -= 1
        elif st.match_out[g] >= 0:
            t = st.target[g]
            if st.waiting[g] <= 1:
                st.misses[g] = 0
            elif st.misses[g] and _blocked(st, prm, g, base + t, t, i):
                st.misses[g] += 1
                st.starving[r] += st.misses[g] == limit
            else:
                # The round robin of arbiter.first_at_or_after, from t + 1, scanned only
                # as far as the first blocked output.
                st.misses[g] = 0
                for k in range(1, n + 1):
                    o = (t + k) % n
                    if _blocked(st, prm, g, base + o, o, i):
                        st.target[g] = o
                        st.misses[g] = 1
                        st.starving[r] += limit == 1
                        break


@kernel(inline=True)
def match_starts(st, prm, r, base, n, any_request):
    """Step 5 (sections 5.2, 11.5, 5.7): iSLIP's match of each input, then the VC it
    starts, the lowest eligible; with ``registered_grant`` the starts are last cycle's
    matches, and this cycle's wait in the grant register."""
    npr, nvc = prm.priorities, prm.vcs
    if any_request:
        islip_match(st.req[base:base + n], st.g_ptr[base:base + n], st.a_ptr[base:base + n],
                    prm.iterations, st.match_out[base:base + n], st.match_prio[base:base + n],
                    st.grant_to[base:base + n], st.grant_prio[base:base + n],
                    st.grants[base:base + n])
        for g in range(base, base + n):
            o = st.match_out[g]
            if o < 0:
                continue
            if prm.islip:
                p, go = st.match_prio[g], base + o
                for v in range(nvc):
                    if (st.nonempty[g, channel_index(o, v, nvc)] & st.credit_ok[go, v]) >> p & 1:
                        st.match_vc[g] = v
                        break
            else:
                st.match_vc[g] = queue_parts(st.p_req[st.q_head[g, 0]], nvc, npr)[1]
    else:
        for g in range(base, base + n):
            st.match_out[g] = -1
    if prm.starvation_limit:
        count_misses(st, prm, r, base, n)
    if prm.registered_grant:
        for g in range(base, base + n):
            o, p, v = st.match_out[g], st.match_prio[g], st.match_vc[g]
            st.match_out[g] = st.gr_out[g]
            st.match_prio[g] = st.gr_prio[g]
            st.match_vc[g] = st.gr_vc[g]
            st.gr_out[g] = o
            st.gr_prio[g] = p
            st.gr_vc[g] = v


@kernel(inline=True)
def ecn_decisions(st, prm, base, n):
    """ECN (sections 4.10, 5.6): the decision for every packet starting in this cycle,
    from the backlog at its start, before this cycle's writes and reads change it, in
    input order."""
    npr, nvc = prm.priorities, prm.vcs
    for g in range(base, base + n):
        o = st.match_out[g]
        if o < 0:
            continue
        p = st.match_prio[g]
        pkt = st.q_head[g, queue_index(o, st.match_vc[g], p, nvc, npr) if prm.islip else 0]
        decision = port_class(base + o, p, npr)
        mark, seen = ecn_decide(st.backlog, st.lfsr, prm.kmin, prm.kmax, prm.slope, base + o,
                                decision)
        st.p_ecn_backlog[pkt] = seen
        # ECN-capable as it arrives here: a packet marked CE upstream is
        # not marked (or counted) again.
        if mark and (st.p_ecn_out[pkt] == ECT0 or st.p_ecn_out[pkt] == ECT1):
            st.p_ecn_out[pkt] = CE
            st.marks[decision] += 1


@kernel(inline=True)
def egress_handover(st, prm, base, n, cycle, slot, ready, delivered):
    """Step 6 (sections 5.2, 11.5): each output's egress handshake, a link output always
    ready. A flit toward a link enters its slot of this cycle; a flit toward an endpoint
    is written into ``delivered``. Returns the flits delivered, the packets whose
    tails were, and whether any output handed a flit over."""
    handed = 0
    tails = 0
    moved = False
    for go in range(base, base + n):
        link = st.port_link[go]
        e = st.port_endpoint[go]
        if st.eg_n[go] == 0 or (link < 0 and not ready[e]):
            continue
        j = egress_pop(st.eg_n, st.eg_first, go)
        moved = True
        pkt, k, last = st.eg_pkt[go, j], st.eg_flit[go, j], st.eg_last[go, j]
        if last:
            st.tx[go] += 1
        if link >= 0:
            st.fwd_pkt[link, slot] = pkt
            st.fwd_flit[link, slot] = k
            st.fwd_vc[link, slot] = st.eg_vc[go, j]
            st.fwd_valid[link, slot] = True
            st.scalars[IN_FLIGHT] += 1
            st.link_flits[link] += 1
            if k == 0:
                st.p_path[pkt, st.p_hops[pkt]] = link
                st.p_hops[pkt] += 1
                if link == prm.capture_link:
                    # The codepoint as it crosses: later routers may still mark it.
                    st.p_link_cycle[pkt] = cycle
                    st.p_link_ecn[pkt] = st.p_ecn_out[pkt]
            continue
        delivered[handed, 0] = e
        delivered[handed, 1] = pkt
        delivered[handed, 2] = k
        delivered[handed, 3] = last
        handed += 1
        if k == 0:
            st.p_head[pkt] = cycle
            st.p_out[pkt] = e
        if last:
            st.p_tail[pkt] = cycle
            tails += 1
            if prm.recycle:
                _release(st, pkt)
    return handed, tails, moved


@kernel(inline=True)
def crossbar_write(st, base, n):
    """The edge (section 5.3): every valid read register's flit joins the egress queue
    of its ``rd_out``, on the input's VC (at most one per output)."""
    for g in range(base, base + n):
        if st.rd_valid[g]:
            go = base + st.rd_out[g]
            j = egress_push(st.eg_n, st.eg_first, go)
            st.eg_pkt[go, j] = st.rd_pkt[g]
            st.eg_flit[go, j] = st.rd_flit[g]
            st.eg_last[go, j] = st.rd_last[g]
            st.eg_vc[go, j] = st.cur_vc[g]


@kernel(inline=True)
def admit_head(st, prm, r, base, n, g, pkt):
    """Step 7 for a head flit on input ``g``'s skid buffer (sections 4.2, 11.4): if it
    fits its pool, its length is reserved and the routing decision files the packet in
    its queue; if not, in drop mode the packet is dropped, and in backpressure mode
    the flit stays. Returns ``(taken, keep, last, dropped)``."""
    npr = prm.priorities
    size = st.p_length[pkt]
    pool = 0 if st.in_link[g] < 0 else pool_index(st.p_prio[pkt], st.skid[g, 0, SKID_VC],
                                                     prm.vcs)
    fits = voq_fits(st.free, g, pool, size)
    if not (fits or prm.drop):
        return False, False, False, False
    if fits:
        st.reserve[g] = size
        st.reserve_pool[g] = pool
        st.rx[g] += 1
        out, vc = _route(st, prm, r, base, n, pkt)
        if _reserved(prm, vc):
            st.book_port[g] = base + out
            st.book_vc[g] = vc
            st.book_prio[g] = st.p_prio[pkt]
            st.book_len[g] = size
        st.p_req[pkt] = queue_index(out, vc, st.p_prio[pkt], prm.vcs, npr)
        st.p_pool[pkt] = pool
        st.wr_ecn[g] = port_class(base + out, st.p_prio[pkt], npr)
    else:
        st.drops[g] += 1
        st.p_dropped[pkt] = True
    keep, last = frame_flit(st.in_packet, st.left, st.dropping, g, size, fits)
    return True, keep, last, not fits


@kernel(inline=True)
def store_flit(st, prm, g, pkt, last):
    """A kept flit is written into input ``g``'s buffer; its packet's last flit makes it
    complete: it joins the tail of its queue."""
    st.stored[g] += 1
    if prm.pfc_on:
        st.occupancy[g, st.p_prio[pkt]] += 1
    if prm.ecn_on:
        st.backlog[st.wr_ecn[g]] += 1
    if last:
        q = st.p_req[pkt] if prm.islip else 0
        voq_enqueue(st.q_head, st.q_tail, st.q_count, st.p_next, g, q, pkt)
        st.waiting[g] += 1
        if prm.islip:
            o, v, p = queue_parts(q, prm.vcs, prm.priorities)
            st.nonempty[g, channel_index(o, v, prm.vcs)] |= 1 << p
            st.toward[g] |= 1 << o


@kernel(inline=True)
def ingress(st, prm, r, base, n, offer_pkt, offer_flit, offer_vc):
    """Step 7 (sections 5.2, 11.5): each skid buffer's oldest flit into the input buffer
    (the routing decision taken as a head flit is admitted), then the source's or the
    link's flit into the skid buffer. Returns whether a flit moved and how many packets
    were dropped."""
    moved = False
    dropped = 0
    for g in range(base, base + n):
        st.reserve[g] = 0
        popped = False
        if st.skid_n[g]:
            pkt = st.skid[g, 0, SKID_PKT]
            keep = last = False
            if not st.in_packet[g]:
                popped, keep, last, lost = admit_head(st, prm, r, base, n, g, pkt)
                dropped += lost
            else:
                popped = True
                keep, last = frame_flit(st.in_packet, st.left, st.dropping, g, 0, False)
            if popped and not keep and last and prm.recycle:
                _release(st, pkt)           # the dropped packet's last flit is gone
            if popped and keep:
                store_flit(st, prm, g, pkt, last)
        pushed = offer_pkt[g] >= 0
        if popped or pushed:
            moved = True
        if popped:
            skid_pop(st.skid_n, st.skid, g)
        if pushed:
            if not skid_ready(st.skid_n, g):
                st.scalars[OVERFLOW] = g + 1
            else:
                j = skid_push(st.skid_n, g)
                st.skid[g, j, SKID_PKT] = offer_pkt[g]
                st.skid[g, j, SKID_FLIT] = offer_flit[g]
                st.skid[g, j, SKID_VC] = offer_vc[g]
    return moved, dropped


@kernel(inline=True)
def start_packet(st, prm, base, g, o):
    """Step 8 for input ``g`` matched to output ``o``: the oldest complete packet of its
    queue leaves it for the read register, taking its length from the credits of a link
    output (section 11.3)."""
    npr, nvc = prm.priorities, prm.vcs
    p, v = st.match_prio[g], st.match_vc[g]
    q = queue_index(o, v, p, nvc, npr) if prm.islip else 0
    pkt = voq_dequeue(st.q_head, st.q_count, st.p_next, g, q)
    st.waiting[g] -= 1
    if prm.islip and st.q_count[g, q] == 0:
        st.nonempty[g, channel_index(o, v, nvc)] &= ~(1 << p)
        if not _queued(st, prm, g, o):
            st.toward[g] &= ~(1 << o)
    go = base + o
    if st.port_link[go] >= 0 and not _reserved(prm, v):
        st.credits[go, p, v] -= st.p_length[pkt]
        credits_changed(st, prm, go, p, v)
    st.rd_valid[g] = True
    st.rd_pkt[g] = pkt
    st.rd_flit[g] = 0
    st.rd_last[g] = st.p_length[pkt] == 1
    st.active[g] = True
    st.cur_out[g] = o
    st.rd_out[g] = o
    st.cur_vc[g] = v
    st.rd_pool[g] = st.p_pool[pkt]
    st.rd_ecn[g] = port_class(go, p, npr)


@kernel(inline=True)
def read_flit(st, prm, g, slot):
    """A flit read from input ``g`` (a start or an advance): it leaves the ECN backlog
    and the PFC occupancy, and from a link input returns a credit upstream."""
    pkt = st.rd_pkt[g]
    if prm.ecn_on:
        st.backlog[st.rd_ecn[g]] -= 1
    if prm.pfc_on:
        st.occupancy[g, st.p_prio[pkt]] -= 1
    if st.in_link[g] >= 0:
        st.back_pool[g, slot] = st.rd_pool[g]
        st.scalars[IN_FLIGHT] += 1


@kernel(inline=True)
def issue_reads(st, prm, r, base, n, slot):
    """Step 8 (sections 5.2, 11.5) and the input buffers' edge (5.3): a new packet for
    matched inputs, the next flit for inputs under way with credit; the space, the
    adaptive bookings and the router's peak occupancy at the edge."""
    stored = 0
    for g in range(base, base + n):
        o = st.match_out[g]
        read = False
        if o >= 0:
            start_packet(st, prm, base, g, o)
            read = True
        elif st.active[g] and not st.finishing[g] and st.credit[base + st.cur_out[g]]:
            k = st.rd_flit[g] + 1
            st.rd_valid[g] = True
            st.rd_flit[g] = k
            st.rd_last[g] = k + 1 == st.p_length[st.rd_pkt[g]]
            st.rd_out[g] = st.cur_out[g]
            read = True
        else:
            st.rd_valid[g] = False
            st.rd_out[g] = st.cur_out[g]
            st.active[g] = st.active[g] and not st.finishing[g]
        if read:
            read_flit(st, prm, g, slot)
        voq_clock(st.free, g, st.rd_pool[g], read, st.reserve_pool[g], st.reserve[g])
        if st.book_port[g] >= 0:
            # The room reserved by an adaptive routing decision, at the edge.
            st.credits[st.book_port[g], st.book_prio[g], st.book_vc[g]] -= st.book_len[g]
            credits_changed(st, prm, st.book_port[g], st.book_prio[g], st.book_vc[g])
            st.book_port[g] = -1
        st.stored[g] -= read
        stored += st.stored[g]
    if stored > st.peak_stored[r]:
        st.peak_stored[r] = stored


@kernel(inline=True)
def pfc_receive(st, prm, base, n, cycle, sink_enable, sink_times):
    """The sinks' pause frames of this cycle load the egress timers of their endpoint
    outputs (section 4.11), in force from the next cycle."""
    for g in range(base, base + n):
        e = st.port_endpoint[g]
        if e >= 0 and sink_enable[e]:
            pfc_egress_receive(st.pause_start, st.pause_until, st.paused_before,
                               st.frames_received, prm.priorities, prm.data_width, cycle, g,
                               sink_enable[e], sink_times[e])


@kernel(inline=True)
def router_cycle(st, prm, r, cycle, offer_pkt, offer_flit, offer_vc, ready, paused, sink_enable,
                 sink_times, delivered):
    """Simulate ``cycle`` of router ``r`` (docs/architecture.md 5.2, 11.5) and clock its edge (5.3).

    Per global port ``g``: ``offer_pkt[g]`` is the packet whose flit
    ``offer_flit[g]`` (on VC ``offer_vc[g]``, link inputs) is offered to the
    input (NONE for none; a source offers only while the skid buffer holds
    fewer than two flits, and then the flit is taken). Per endpoint ``e``:
    ``ready[e]``, its sink is ready; ``paused[e * priorities + p]``, the pause
    input's bit; ``sink_enable[e]`` and ``sink_times[e]``, the pause frame its
    sink sends (enable 0: none). Writes the flits handed to endpoint sinks
    into ``delivered`` as rows ``(endpoint, packet, flit, last)`` in output
    order, link handovers into the links' slots of this cycle, and the
    router's own pause frames into ``st.tx_enable`` and ``st.tx_times``.
    Returns how many flits were delivered to endpoints and how many frames
    sent. Each step is a rule of its own, called in the order of section 5.2.
    """
    base, n = st.base[r], st.nports[r]
    slot = cycle % prm.link_latency
    output_status(st, prm, base, n)
    frames_now = pfc_send(st, prm, base, n, cycle) if prm.pfc_on else 0
    hold_outputs(st, prm, r, base, n)
    any_request = request(st, prm, r, base, n, cycle, paused)
    match_starts(st, prm, r, base, n, any_request)
    if prm.ecn_on:
        ecn_decisions(st, prm, base, n)
    handed, tails, handed_over = egress_handover(st, prm, base, n, cycle, slot, ready, delivered)
    crossbar_write(st, base, n)
    taken, dropped = ingress(st, prm, r, base, n, offer_pkt, offer_flit, offer_vc)
    issue_reads(st, prm, r, base, n, slot)
    # The router's own frames pause the sources, which is the caller's part.
    if prm.pfc_on:
        pfc_receive(st, prm, base, n, cycle, sink_enable, sink_times)
    st.scalars[OUTSTANDING] -= tails + dropped
    progress = handed_over or taken
    st.scalars[PROGRESS] = st.scalars[PROGRESS] or progress
    return handed, frames_now
