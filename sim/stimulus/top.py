"""Golden model of the stimulus top (``superfabric.hdl.stimulus.top``): generators, switch, sinks.

:class:`StimulusModel` runs the router kernel (:mod:`.router`) with the
generators' rule (:func:`~.traffic_gen.draw_cycle`) as its sources and the
sinks' (:func:`~.traffic_sink.sink_flit`) on what it delivers, the whole run
in compiled code (:func:`stimulus_block`); packet ids are reused once a
packet has left, so a run of any length needs memory for the packets in
flight only. It returns the statistics the RTL leaves in its registers
(:class:`StimulusStats`) bit for bit. :func:`compare_stats` holds two of
them against each other, every hash, counter and histogram bucket.
"""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path

import numpy as np

from ...config import FabricConfig
from ...formats.stimulus import (GENERATOR_KEY, MODES, SINK_KEY, TIMESTAMP_BITS, RegisterMap,
                        StimulusSettings, check_stimulus, port_bytes, port_key, port_seed)
from ...network.topology import Topology
from ..fabric.top import DEFAULT_STALL_LIMIT, deliver_links, endpoint_ports, return_credits
from ..kernel import kernel
from ..fabric.router import (FREE, OUTSTANDING, PROGRESS, fabric_room, packet_arrays, router_cycle,
                             router_params, router_state)
from ..source import NONE
from ..skid_buffer import skid_ready
from ..traffic import TrafficError, read_npz
from .traffic_gen import KNOBS, draw_cycle
from .traffic_sink import CRC32_TABLE, ready_draws, sink_flit

__all__ = ["StimulusStats", "StimulusModel", "compare_stats", "PROGRESS_CYCLES"]

_FORMAT = "superfabric.stimulus_stats/1"

#: Cycles between two calls of a run's progress callback.
PROGRESS_CYCLES = 1 << 16


class StimulusStats:
    """The statistics of one stimulus run, as its registers hold them after the run.

    ``values`` maps every name of :attr:`RegisterMap.stats
    <superfabric.formats.stimulus.RegisterMap.stats>` and ``histogram`` to a
    ``uint64`` array of the shape :attr:`RegisterMap.shapes
    <superfabric.formats.stimulus.RegisterMap.shapes>` gives it (per endpoint, per
    endpoint and class, per global port, link or router), the histograms
    ``(endpoints, hist_buckets)``, ``cycle`` one
    word (the cycle the run ended in, at whose start every generated packet
    was delivered or dropped). ``stalled`` marks a run stopped by its stall
    detector instead.
    """

    def __init__(self, values: dict[str, np.ndarray], *, stalled: bool = False):
        self.values = {name: np.asarray(v, np.uint64) for name, v in values.items()}
        self.stalled = bool(stalled)

    @property
    def cycles(self) -> int:
        """The cycle the run ended in (its length, from cycle 0)."""
        return int(self.values["cycle"][0])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.values[name]

    @classmethod
    def shapes(cls, cfg: FabricConfig) -> dict[str, tuple[int, ...]]:
        """The shape of every statistic for ``cfg``, in readout order."""
        shapes = dict(RegisterMap(cfg).shapes)
        shapes["histogram"] = (cfg.endpoints, cfg.stimulus.hist_buckets)
        return shapes

    @classmethod
    def from_words(cls, cfg: FabricConfig, words: dict[str, list[int]], *,
                   stalled: bool = False) -> "StimulusStats":
        """Statistics from the words read back, per name in register order."""
        shapes = cls.shapes(cfg)
        return cls({name: np.array(words[name], np.uint64).reshape(shape)
                    for name, shape in shapes.items()}, stalled=stalled)

    def save(self, path: str | Path) -> None:
        """Write an uncompressed ``.npz`` (format ``superfabric.stimulus_stats/1``)."""
        with open(path, "wb") as f:
            np.savez(f, format=np.str_(_FORMAT), stalled=np.bool_(self.stalled), **self.values)

    @classmethod
    def load(cls, path: str | Path) -> "StimulusStats":
        data = read_npz(path, _FORMAT, "statistics", "stimulus statistics", ("cycle", "stalled"))
        stalled = bool(data.pop("stalled"))
        data.pop("format")
        return cls(data, stalled=stalled)


GeneratorState = namedtuple("GeneratorState", [
    # The settings draw_cycle reads, then its per-endpoint state (sim/stimulus/traffic_gen.py).
    "knobs", "prio_thresholds", "fixed_dst", "enable", "state", "on", "burst_dst", "offset",
    "generated", "generated_flits", "refused", "level", "new", "new_dst", "new_prio",
    "new_length", "new_ecn",
    # Per endpoint: the ring of pending packets, its oldest, the flit it offers next.
    "pending", "head", "flit",
    # Per packet slot: source endpoint, tag (the source's count of packets before it),
    # generation cycle.
    "src", "seq", "born"])

SinkState = namedtuple("SinkState", [
    "state", "packets", "flits", "window_flits", "latency_sum", "latency_min", "latency_max",
    "hash", "order_errors", "ce_packets", "histogram", "last_seq", "seen", "table", "ready"])

# What stimulus_block returns as its status.
_DONE, _STALLED, _NEXT = range(3)


@kernel
def stimulus_block(st, prm, gen, snk, cycle, end, run_cycles, last_progress, stall_limit,
                   tag_bits, sub_bits, port_bytes, stall_threshold, endpoint_port, offer_pkt, offer_flit,
                   offer_vc, paused, sink_enable, sink_times, delivered, arrived):
    """Run the stimulus top from ``cycle`` to ``end`` at most (section 12.4).

    Every cycle: the generators draw (in the generation window) and their
    new packets take free packet slots; the sinks draw their ready; every
    endpoint offers its oldest pending packet's next flit; the links move;
    every router runs its cycle and the sinks count what reaches them.
    Returns ``(cycle, last_progress, status)``.
    """
    depth = gen.pending.shape[1]
    endpoints = gen.level.shape[0]
    while cycle < end:
        if not (cycle < run_cycles or st.scalars[OUTSTANDING] > 0):
            return cycle, last_progress, _DONE
        if cycle - last_progress >= stall_limit:
            return cycle, last_progress, _STALLED
        generated = 0
        if cycle < run_cycles:
            draw_cycle(gen.knobs, gen.prio_thresholds, gen.fixed_dst, gen.enable, gen.state,
                       gen.on, gen.burst_dst, gen.offset, gen.generated, gen.generated_flits,
                       gen.refused, gen.level, depth, gen.new, gen.new_dst, gen.new_prio,
                       gen.new_length, gen.new_ecn)
            for p in range(endpoints):
                if not gen.new[p]:
                    continue
                st.scalars[FREE] -= 1
                pkt = st.free_ids[st.scalars[FREE]]
                st.p_length[pkt] = gen.new_length[p]
                st.p_prio[pkt] = gen.new_prio[p]
                st.p_src[pkt] = p
                st.p_dst[pkt] = gen.new_dst[p]
                st.p_ecn_in[pkt] = gen.new_ecn[p]
                st.p_ecn_out[pkt] = gen.new_ecn[p]
                st.p_ecn_backlog[pkt] = -1
                st.p_dropped[pkt] = False
                st.p_hops[pkt] = 0
                gen.src[pkt] = p
                gen.seq[pkt] = gen.generated[p] - 1
                gen.born[pkt] = cycle
                slot = gen.head[p] + gen.level[p]
                gen.pending[p, slot - depth if slot >= depth else slot] = pkt
                gen.level[p] += 1
                st.scalars[OUTSTANDING] += 1
                generated += 1
        ready_draws(stall_threshold, snk.state, snk.ready)
        st.scalars[PROGRESS] = 0
        for p in range(endpoints):
            g = endpoint_port[p]
            offer_pkt[g] = NONE
            if skid_ready(st.skid_n, g) and gen.level[p]:
                pkt = gen.pending[p, gen.head[p]]
                offer_pkt[g] = pkt
                offer_flit[g] = gen.flit[p]
                offer_vc[g] = 0
                gen.flit[p] += 1
                if gen.flit[p] == st.p_length[pkt]:
                    gen.flit[p] = 0
                    gen.head[p] = gen.head[p] + 1 if gen.head[p] + 1 < depth else 0
                    gen.level[p] -= 1
        deliver_links(st, prm, cycle, offer_pkt, offer_flit, offer_vc, arrived)
        in_window = cycle < run_cycles
        for r in range(prm.routers):
            handed, _ = router_cycle(st, prm, r, cycle, offer_pkt, offer_flit, offer_vc,
                                     snk.ready, paused, sink_enable, sink_times, delivered)
            for j in range(handed):
                e, pkt = delivered[j, 0], delivered[j, 1]
                sink_flit(e, cycle, in_window, tag_bits, sub_bits, port_bytes, gen.src[pkt],
                          gen.seq[pkt], gen.born[pkt], np.int64(st.p_prio[pkt]),
                          np.int64(st.p_length[pkt]),
                          np.int64(st.p_ecn_out[pkt]), delivered[j, 3], snk.packets, snk.flits,
                          snk.window_flits, snk.latency_sum, snk.latency_min, snk.latency_max,
                          snk.hash, snk.order_errors, snk.ce_packets, snk.histogram,
                          snk.last_seq, snk.seen, snk.table)
        return_credits(st, prm, arrived)
        if generated or st.scalars[PROGRESS] or not st.scalars[OUTSTANDING]:
            last_progress = cycle + 1
        cycle += 1
    return cycle, last_progress, _NEXT


class StimulusModel:
    """The stimulus top, cycle by cycle (``docs/architecture.md`` section 12), compiled."""

    def __init__(self, cfg: FabricConfig):
        check_stimulus(cfg)
        self._cfg = cfg

    def run(self, settings: StimulusSettings, *, stall_limit: int = DEFAULT_STALL_LIMIT,
            progress=None) -> StimulusStats:
        """Run ``settings`` from cycle 0 to the end of the run (section 12.4).

        The run ends in the first cycle ``c >= run_cycles`` at whose start
        every generated packet was delivered or dropped, or, stalled, after
        ``stall_limit`` cycles with packets in flight in which nothing was
        generated, moved or delivered. ``progress(cycle)``, if given, is called every
        :data:`PROGRESS_CYCLES` cycles.
        """
        st, gen, snk, block = self._start(settings, stall_limit)
        cycle = last_progress = 0
        status = _NEXT
        while status == _NEXT:
            cycle, last_progress, status = block(cycle, cycle + PROGRESS_CYCLES, last_progress)
            if progress is not None and status == _NEXT:
                progress(cycle)
        self.state = st
        return self._stats(st, gen, snk, cycle, status == _STALLED)

    def warm(self, settings: StimulusSettings, *,
             stall_limit: int = DEFAULT_STALL_LIMIT) -> None:
        """Compile :func:`stimulus_block` (or load it from numba's cache) for a :meth:`run`
        of ``settings``, before a run that is timed.

        numba compiles a kernel once per type signature of its arguments: the state of
        a run of the same settings gives it the very types the run's calls have, in a
        call of no cycles.
        """
        _, _, _, block = self._start(settings, stall_limit)
        block(0, 0, 0)

    def _start(self, settings: StimulusSettings, stall_limit: int):
        """The state of a run of ``settings`` before cycle 0, ``(routers, generators,
        sinks, block)``, where ``block(cycle, end, last_progress)`` runs
        :func:`stimulus_block` on it."""
        cfg = self._cfg
        topo = Topology.of(cfg)
        n, np_ = topo.endpoints, cfg.switch.priorities
        if settings.fixed_dst and max(settings.fixed_dst) >= n:
            raise TrafficError(f"fixed_dst = {list(settings.fixed_dst)}: outputs must be below "
                               f"the {n} endpoints")
        prm = router_params(cfg, topo, recycle=True)
        slots = packet_slots(cfg, topo)
        st = router_state(cfg, topo, packet_arrays(slots, topo.max_hops - 1))
        st.free_ids[:] = np.arange(slots)[::-1]
        st.scalars[FREE] = slots
        gen = _generators(cfg, settings, n, slots)
        snk = _sinks(cfg, settings, n)
        ports = len(st.port_endpoint)
        scratch = (endpoint_ports(st, topo), np.full(ports, NONE, np.int64),
                   np.zeros(ports, np.int64), np.zeros(ports, np.int64),
                   np.zeros(n * np_, np.bool_), np.zeros(n, np.int64), np.zeros((n, 8), np.int64),
                   np.zeros((max(prm.max_ports, 1), 4), np.int64),
                   np.zeros(len(st.link_src), np.int64))

        def block(cycle: int, end: int, last_progress: int):
            return stimulus_block(st, prm, gen, snk, cycle, end, settings.run_cycles,
                                  last_progress, stall_limit, cfg.switch.tag_width,
                                  cfg.stimulus.hist_sub_bits, port_bytes(n), settings.sink_stall,
                                  *scratch)
        return st, gen, snk, block

    def _stats(self, st, gen, snk, cycle, stalled) -> StimulusStats:
        cfg = self._cfg
        counters = {"rx_packets": st.rx, "tx_packets": st.tx, "drops": st.drops}
        if cfg.ecn.enabled:
            counters["ecn_marks"] = st.marks
        if cfg.fabric.is_fabric:
            counters.update(link_flits=st.link_flits, router_peak=st.peak_stored)
        values = {"cycle": [cycle], "histogram": snk.histogram, **counters,
                  "frame_errors": np.zeros(cfg.endpoints, np.int64)}
        for name in ("generated", "generated_flits", "refused"):
            values[name] = getattr(gen, name)
        for name in ("packets", "flits", "window_flits", "latency_sum", "latency_min",
                     "latency_max", "hash", "order_errors", "ce_packets"):
            values[name] = getattr(snk, name)
        # Every register wraps at its width.
        widths = {name: width for name, width, _ in RegisterMap(cfg).stats}
        widths["histogram"] = cfg.stimulus.counter_width
        return StimulusStats({
            name: np.asarray(values[name], np.int64).reshape(shape).astype(np.uint64)
            & np.uint64((1 << widths[name]) - 1)
            for name, shape in StimulusStats.shapes(cfg).items()}, stalled=stalled)


def packet_slots(cfg: FabricConfig, topo: Topology) -> int:
    """Packet ids a stimulus run needs at most at once: every pending packet, and a
    packet per flit of room anywhere in the fabric (:func:`~..fabric.router.fabric_room`)."""
    return topo.endpoints * cfg.stimulus.source_queue + fabric_room(cfg, topo)


def _generators(cfg: FabricConfig, settings: StimulusSettings, n: int,
                slots: int) -> GeneratorState:
    zeros = lambda *shape: np.zeros(shape or (n,), np.int64)       # noqa: E731
    return GeneratorState(
        knobs=np.array([MODES.index(settings.mode) if k == "mode" else getattr(settings, k)
                        for k in KNOBS], np.int64),
        prio_thresholds=np.array(settings.prio_thresholds, np.int64),
        fixed_dst=np.array(settings.fixed_dst, np.int64),
        enable=np.array([(settings.enable >> p) & 1 for p in range(n)], np.int64),
        state=np.array([port_seed(settings.seed, port_key(GENERATOR_KEY, p)) for p in range(n)],
                       np.uint64),
        on=zeros(), burst_dst=zeros(), offset=np.ones(n, np.int64), generated=zeros(),
        generated_flits=zeros(), refused=zeros(), level=zeros(), new=zeros(), new_dst=zeros(),
        new_prio=zeros(), new_length=zeros(), new_ecn=zeros(),
        pending=zeros(n, cfg.stimulus.source_queue), head=zeros(), flit=zeros(),
        src=zeros(slots), seq=zeros(slots), born=zeros(slots))


def _sinks(cfg: FabricConfig, settings: StimulusSettings, n: int) -> SinkState:
    np_ = cfg.switch.priorities
    zeros = lambda *shape: np.zeros(shape or (n,), np.int64)       # noqa: E731
    return SinkState(
        state=np.array([port_seed(settings.seed, port_key(SINK_KEY, o)) for o in range(n)],
                       np.uint64),
        packets=zeros(n, np_), flits=zeros(n, np_), window_flits=zeros(), latency_sum=zeros(),
        latency_min=np.full(n, (1 << TIMESTAMP_BITS) - 1, np.int64), latency_max=zeros(),
        hash=zeros(), order_errors=zeros(), ce_packets=zeros(),
        histogram=zeros(n, cfg.stimulus.hist_buckets), last_seq=zeros(n, n * np_),
        seen=zeros(n, n * np_), table=CRC32_TABLE, ready=np.zeros(n, np.bool_))


def compare_stats(rtl: StimulusStats, model: StimulusStats, *, limit: int = 20) -> dict:
    """Hold every statistic of ``rtl`` against ``model``; the ``match`` of ``results.json``.

    Returns ``exact`` (no difference and neither run stalled),
    ``mismatches`` (differing words), ``first_mismatch`` (``name``,
    ``index``, ``rtl``, ``model`` of the first, in readout order, or null)
    and ``problems`` (one line each, at most ``limit``).
    """
    problems, mismatches, first = [], 0, None
    for who, stats in (("RTL", rtl), ("model", model)):
        if stats.stalled:
            problems.append(f"{who} run stalled at cycle {stats.cycles}")
    for name, want in model.values.items():
        got = rtl.values.get(name)
        if got is None or got.shape != want.shape:
            mismatches += want.size
            problems.append(f"{name}: RTL has {None if got is None else got.shape}, "
                            f"model {want.shape}")
            continue
        for index in np.argwhere(got != want).tolist():
            mismatches += 1
            where = tuple(index) if want.ndim > 1 else index[0]
            if first is None:
                first = {"name": name, "index": list(index), "rtl": int(got[tuple(index)]),
                         "model": int(want[tuple(index)])}
            if len(problems) < limit:
                problems.append(f"{name}[{where}]: RTL {int(got[tuple(index)])} vs model "
                                f"{int(want[tuple(index)])}")
    return {"exact": not problems, "mismatches": mismatches, "first_mismatch": first,
            "problems": problems[:limit]}
