"""Golden model of the hardware traffic generators (``superfabric.hdl.stimulus.traffic_gen``).

:func:`stimulus_settings` turns a pattern, a load, packet lengths, class
weights and a seed into the register values of a run
(:class:`~superfabric.formats.stimulus.StimulusSettings`). :class:`Generators`
holds every generator's state as numpy arrays and steps them with
:func:`draw_cycle`, a loop over ints and arrays compiled like the switch's
kernels, then registers the new packets with the switch model
and offers their flits to it as the source of
:meth:`~superfabric.sim.fabric.core.FabricCore.step`. ``docs/architecture.md``
section 12.2 is the cycle specification the RTL and this model share.
"""

from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable

from ...config import FabricConfig
from ...formats.stimulus import (DRAW_BITS, GENERATED_ECN, GENERATOR_KEY, INJECT_BITS, MODES,
                        StimulusSettings, port_key, port_seed)
from ...formats.packet import NOT_ECT
from ..kernel import kernel
from ...network.topology import Topology
from ..traffic import (TrafficError, tornado, check_integer, check_load, check_priority_weights,
                      parse_lengths, parse_pattern)

__all__ = ["HARDWARE_PATTERNS", "stimulus_settings", "xorshift_u64", "draw_cycle", "Generators", "KNOBS"]

#: The traffic patterns the generators produce (those of ``sim/traffic.py`` but the
#: neighbour halo exchange, which rotates over a torus's dimensions).
HARDWARE_PATTERNS = ("uniform", "permutation", "transpose", "bitcomp", "hotspot", "incast",
                     "all-to-all", "ring-allreduce", "bursty", "tornado")

_INJECT_ONE = 1 << INJECT_BITS
_DRAW_ONE = 1 << DRAW_BITS


def _scaled(p: float, one: int) -> int:
    """A probability as a threshold of a draw in ``0..one-1`` (``one`` means always)."""
    return min(one, max(0, round(p * one)))


def stimulus_settings(cfg: FabricConfig, pattern: str, *, load: float, cycles: int, seed: int,
                      packet_lengths: str = "fixed:1", priority_weights=None,
                      sink_stall: float = 0.0) -> StimulusSettings:
    """The register values of a hardware-stimulus run.

    Parameters as for :func:`superfabric.sim.traffic.generate`, plus
    ``sink_stall``, the probability that a sink is not ready in a cycle.
    The patterns map onto the generators' modes: ``uniform`` (over the
    *other* outputs), ``hotspot`` (the other packets uniform over the other
    outputs), ``all-to-all`` (mode ``rotate``) and ``bursty`` keep their
    modes; ``permutation`` (``numpy.random.default_rng(seed).permutation``),
    ``transpose``, ``bitcomp``, ``incast`` (only its sources enabled) and
    ``ring-allreduce`` (every packet in the highest class, ``2 (N - 1) chunk``
    packets per input) are mode ``fixed`` with a destination per input.
    Bad values raise :class:`~superfabric.sim.traffic.TrafficError`.
    """
    sw = cfg.switch
    n, np_ = cfg.endpoints, sw.priorities
    name, params = parse_pattern(pattern, n)
    if name not in HARDWARE_PATTERNS:
        raise TrafficError(f"traffic.pattern = {pattern!r}: the hardware generators make "
                           f"{', '.join(HARDWARE_PATTERNS)}")
    check_load(load)
    check_integer("traffic.cycles", cycles, 1, "cycles of packet generation")
    check_integer("traffic.seed", seed, 0, "random seed")
    if seed >> 64:
        raise TrafficError(f"traffic.seed = {seed!r}: must be below 2**64 (the seed register)")
    if cycles >> cfg.stimulus.counter_width:
        raise TrafficError(f"traffic.cycles = {cycles!r}: must be below 2**{cfg.stimulus.counter_width} "
                           f"(stimulus.counter_width)")
    if isinstance(sink_stall, bool) or not 0.0 <= sink_stall < 1.0:
        raise TrafficError(f"traffic.sink_stall = {sink_stall!r}: must be in [0, 1)")
    lengths = parse_lengths(packet_lengths, sw.max_packet_flits)
    weights = check_priority_weights(priority_weights, np_, name)
    short, long = lengths.flits[0], lengths.flits[-1]
    mean = lengths.mean
    ports = np.arange(n)
    mode, enable, fixed, limit = "fixed", (1 << n) - 1, ports.tolist(), 0
    inject = _scaled(load / mean, _INJECT_ONE)
    burst_start = burst_end = 0
    if name in ("uniform", "hotspot", "bursty"):
        mode = name
    elif name == "all-to-all":
        mode = "rotate"
    elif name == "permutation":
        fixed = np.random.default_rng(seed).permutation(n).tolist()
    elif name == "transpose":
        half = (n.bit_length() - 1) // 2
        fixed = (((ports & ((1 << half) - 1)) << half) | (ports >> half)).tolist()
    elif name == "bitcomp":
        fixed = (n - 1 - ports).tolist()
    elif name == "tornado":
        fixed = tornado(Topology.of(cfg), ports, n).tolist()
    elif name == "incast":
        fixed = [params["sink"]] * n
        senders = [k for k in range(n) if k != params["sink"]][:params["sources"]]
        enable = sum(1 << k for k in senders)
    else:
        assert name == "ring-allreduce", name
        fixed = ((ports + 1) % n).tolist()
        chunk = params["chunk"] or max(1, math.ceil(cycles * load / mean / (2 * (n - 1))))
        limit = 2 * (n - 1) * chunk
        weights = np.eye(np_)[-1]
    if mode == "bursty":
        burst = params["burst"]
        # On: line rate, one packet per mean length; the burst ends after a
        # packet with probability 1 / burst; off periods are geometric with
        # the mean that makes the long-run load `load` (at most
        # burst * mean / (burst * mean + 1): an input is off at least a cycle).
        inject = _scaled(1.0 / mean, _INJECT_ONE)
        burst_end = _scaled(1.0 / burst, _DRAW_ONE)
        start = 1.0 if load >= 1.0 else load / (burst * mean * (1.0 - load))
        burst_start = max(1, _scaled(start, _INJECT_ONE))
    cumulative = np.cumsum(weights)[:-1] / weights.sum()
    return StimulusSettings(
        seed=int(seed), run_cycles=int(cycles), mode=mode, inject=inject,
        burst_start=burst_start, burst_end=burst_end,
        hot_port=int(params.get("port", 0)) if name == "hotspot" else 0,
        hot_threshold=_scaled(params["fraction"], _DRAW_ONE) if name == "hotspot" else 0,
        len_short=short, len_long=long, len_threshold=_scaled(lengths.weights[0], _DRAW_ONE),
        ect_threshold=_scaled(cfg.ecn.ect_fraction, _DRAW_ONE),
        sink_stall=_scaled(sink_stall, _DRAW_ONE), enable=enable, limit=limit,
        prio_thresholds=tuple(_scaled(c, _DRAW_ONE) for c in cumulative),
        fixed_dst=tuple(int(d) for d in fixed))


# -- the per-cycle kernel -------------------------------------------------------------

#: The settings :func:`draw_cycle` reads, by index into its ``knobs`` array.
KNOBS = ("mode", "inject", "burst_start", "burst_end", "hot_port", "hot_threshold",
         "len_short", "len_long", "len_threshold", "ect_threshold", "limit")
(_MODE, _INJECT, _BURST_START, _BURST_END, _HOT_PORT, _HOT_THRESHOLD, _LEN_SHORT, _LEN_LONG,
 _LEN_THRESHOLD, _ECT_THRESHOLD, _LIMIT) = range(len(KNOBS))
_UNIFORM, _FIXED, _HOTSPOT, _ROTATE, _BURSTY = (MODES.index(m) for m in
                                                ("uniform", "fixed", "hotspot", "rotate", "bursty"))

_S7, _S13, _S17 = np.uint64(7), np.uint64(13), np.uint64(17)
_S16, _S24, _S32, _S40, _S48 = (np.uint64(s) for s in (16, 24, 32, 40, 48))
_M16 = np.uint64(_DRAW_ONE - 1)
_M24 = np.uint64(_INJECT_ONE - 1)


# Registered rather than compiled on its own: it is called on numpy uint64
# values from Python too (a compiled one would take and return Python ints,
# which numba types as signed).
@register_jitable
def xorshift_u64(x):
    """:func:`superfabric.formats.stimulus.xorshift64` on a numpy ``uint64``."""
    x ^= x << _S13
    x ^= x >> _S7
    x ^= x << _S17
    return x


@kernel(inline=True)
def draw_cycle(knobs, prio_thresholds, fixed_dst, enable, state, on, burst_dst, offset,
               generated, generated_flits, refused, level, depth,
               new, new_dst, new_prio, new_length, new_ecn):
    """One generation cycle of every generator (section 12.2), from the state at its start.

    ``state`` (``uint64``) and the other per-port ``int64`` arrays are
    updated in place; ``new[p]`` is set to 1 when input ``p`` generated a
    packet it keeps, described by ``new_dst``, ``new_prio``, ``new_length``
    and ``new_ecn``. ``level`` is each generator's count of pending packets
    at the start of the cycle (the caller adds the new ones).
    """
    ports = state.shape[0]
    mode = knobs[_MODE]
    for p in range(ports):
        a = xorshift_u64(state[p])
        b = xorshift_u64(a)
        state[p] = b
        d_inject = int(a & _M24)
        d_dst = int((a >> _S24) & _M16)
        d_hot = int((a >> _S40) & _M16)
        d_prio = int(b & _M16)
        d_length = int((b >> _S16) & _M16)
        d_ect = int((b >> _S32) & _M16)
        d_end = int((b >> _S48) & _M16)
        index = (d_dst * (ports - 1)) >> DRAW_BITS
        uniform = index + 1 if index >= p else index
        hit = d_inject < knobs[_INJECT]
        if mode == _BURSTY:
            if on[p]:
                if hit and d_end < knobs[_BURST_END]:
                    on[p] = 0
                inject = hit
            else:
                if d_inject < knobs[_BURST_START]:
                    on[p] = 1
                    burst_dst[p] = uniform
                inject = False
        else:
            inject = hit
        limit = knobs[_LIMIT]
        new[p] = 0
        if not (inject and enable[p] and (limit == 0 or generated[p] < limit)):
            continue
        if level[p] == depth:
            refused[p] += 1
            continue
        if mode == _UNIFORM:
            dst = uniform
        elif mode == _FIXED:
            dst = fixed_dst[p]
        elif mode == _HOTSPOT:
            dst = knobs[_HOT_PORT] if d_hot < knobs[_HOT_THRESHOLD] else uniform
        elif mode == _ROTATE:
            dst = (p + offset[p]) % ports
            offset[p] = 1 if offset[p] == ports - 1 else offset[p] + 1
        else:
            dst = burst_dst[p]
        prio = 0
        for threshold in prio_thresholds:
            if d_prio >= threshold:
                prio += 1
        length = knobs[_LEN_SHORT] if d_length < knobs[_LEN_THRESHOLD] else knobs[_LEN_LONG]
        new[p] = 1
        new_dst[p] = dst
        new_prio[p] = prio
        new_length[p] = length
        new_ecn[p] = GENERATED_ECN if d_ect < knobs[_ECT_THRESHOLD] else NOT_ECT
        generated[p] += 1
        generated_flits[p] += length


class Generators:
    """Every input's generator, and the source of the switch model that offers their packets.

    Pending packets (generated, not yet sent) wait in a ring of
    ``stimulus.source_queue`` entries per input; the oldest is offered, its
    flits back to back, from the cycle it was generated. Per packet id (as
    :meth:`~superfabric.sim.fabric.core.FabricCore.add_packet` returns it):
    ``src``, ``seq`` (its tag: the input's count of packets before it) and
    ``gen`` (its generation cycle), numpy arrays grown as needed. ``core``
    is the :class:`~superfabric.sim.fabric.core.FabricCore` the packets go to.
    """

    def __init__(self, cfg: FabricConfig, settings: StimulusSettings, core):
        n = cfg.switch.ports
        self.core = core
        self.ports = n
        self.depth = cfg.stimulus.source_queue
        self.run_cycles = settings.run_cycles
        self.knobs = np.array([MODES.index(settings.mode) if k == "mode" else getattr(settings, k)
                               for k in KNOBS], np.int64)
        self.prio_thresholds = np.array(settings.prio_thresholds, np.int64)
        self.fixed_dst = np.array(settings.fixed_dst, np.int64)
        self.enable = np.array([(settings.enable >> p) & 1 for p in range(n)], np.int64)
        self.state = np.array([port_seed(settings.seed, port_key(GENERATOR_KEY, p))
                               for p in range(n)], np.uint64)
        zeros = lambda: np.zeros(n, np.int64)
        self.on, self.burst_dst = zeros(), zeros()
        self.offset = np.ones(n, np.int64)
        self.generated, self.generated_flits, self.refused = zeros(), zeros(), zeros()
        self.level, self.head = zeros(), zeros()
        self.new, self.new_dst, self.new_prio, self.new_length, self.new_ecn = (
            zeros(), zeros(), zeros(), zeros(), zeros())
        self.pending = np.zeros((n, self.depth), np.int64)
        #: Index of the flit each input offers next (the source protocol's ``flit``).
        self.flit = [0] * n
        self.src = np.zeros(1024, np.int64)
        self.seq = np.zeros(1024, np.int64)
        self.gen = np.zeros(1024, np.int64)

    def generate(self, cycle: int) -> int:
        """Draw ``cycle``'s packets (nothing from ``run_cycles`` on) and register them with
        the switch model; returns how many."""
        if cycle >= self.run_cycles:
            return 0
        draw_cycle(self.knobs, self.prio_thresholds, self.fixed_dst, self.enable, self.state,
                   self.on, self.burst_dst, self.offset, self.generated, self.generated_flits,
                   self.refused, self.level, self.depth, self.new, self.new_dst, self.new_prio,
                   self.new_length, self.new_ecn)
        count = 0
        for p in np.flatnonzero(self.new).tolist():
            pkt = self.core.add_packet(int(self.new_dst[p]), int(self.new_prio[p]),
                                  int(self.new_length[p]), int(self.new_ecn[p]))
            if pkt >= len(self.src):
                self.src, self.seq, self.gen = (np.concatenate([a, np.zeros_like(a)])
                                                for a in (self.src, self.seq, self.gen))
            self.src[pkt] = p
            self.seq[pkt] = self.generated[p] - 1
            self.gen[pkt] = cycle
            self.pending[p, (self.head[p] + self.level[p]) % self.depth] = pkt
            self.level[p] += 1
            count += 1
        return count

    # -- the source protocol of FabricCore.step ----------------------------------------

    def offer(self, port: int, cycle: int) -> int:
        """The packet whose flit ``flit[port]`` input ``port`` offers, or -1."""
        return int(self.pending[port, self.head[port]]) if self.level[port] else -1

    def accept(self, port: int) -> None:
        """The offered flit was taken; after a packet's last flit the next one is offered."""
        self.flit[port] += 1
        if self.flit[port] == self.core.length[self.pending[port, self.head[port]]]:
            self.flit[port] = 0
            self.head[port] = (self.head[port] + 1) % self.depth
            self.level[port] -= 1

    def pause(self, port: int, prio: int, start: int, cycles: int) -> None:
        """Generators obey no pause frames: the stimulus top refuses ``pfc.enabled``."""
        raise AssertionError("the stimulus top runs without priority flow control")
