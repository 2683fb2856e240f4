"""The fabric configuration: one frozen, validated value for RTL, model and testbench.

A configuration comes from a preset (``tiny``, ``default``, ``large``), from a
TOML file, and from ``section.key=value`` overrides, in that order. Every
value is checked when the configuration is built; a bad value, an unknown key
or a wrong type raises :class:`ConfigError` whose message names the field,
the value and what is allowed, in one line. The configuration serialises to
JSON so the testbench and the model receive exactly the values the Verilog
was generated from.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .formats.dcqcn import LINE_RATE, DcqcnUnits, rate_units
from .formats.pfc_frame import QUANTUM_BITS
from .formats.lfsr import lfsr_start

__all__ = ["ConfigError", "SwitchConfig", "EcnConfig", "PfcConfig", "RdmaConfig", "DcqcnConfig",
           "FaultsConfig", "TopologyConfig", "StimulusConfig", "FabricConfig", "PRESETS",
           "EGRESS_DEPTH"]

PRESETS = ("tiny", "default", "large")

#: Flits each egress queue of the switch holds: fixed, not configurable. At
#: least three are needed for one flit per cycle, because the credit check
#: counts the flits queued and the one in flight from the input buffer's read
#: register but not the one leaving this cycle (so that ``ready`` never feeds
#: the scheduler); one more is a spare.
EGRESS_DEPTH = 4


class ConfigError(ValueError):
    """A configuration value a user supplied is not allowed.

    The message is one line: the field, the value, and what is allowed.
    """


def _ranged(lo: int, hi: int, doc: str):
    return field(metadata={"range": (lo, hi), "doc": doc})


def _choice(choices: tuple[str, ...], doc: str):
    return field(metadata={"choices": choices, "doc": doc})


def _flag(doc: str):
    return field(metadata={"bool": True, "doc": doc})


def _fraction(doc: str):
    return field(metadata={"fraction": True, "doc": doc})


def _sizes(count: tuple[int, int], each: tuple[int, int], doc: str):
    return field(metadata={"sizes": (count, each), "doc": doc})


def _positive(doc: str):
    return field(metadata={"positive": True, "doc": doc})


@dataclass(frozen=True)
class SwitchConfig:
    """The ``[switch]`` section: the crossbar and its input buffers."""

    ports: int = _ranged(2, 32, "switch ports (inputs = outputs)")
    data_width: int = _ranged(8, 1024, "bits per flit")
    priorities: int = _ranged(1, 8, "traffic classes; a higher number is served first")
    max_packet_flits: int = _ranged(1, 256, "longest packet, in flits")
    buffer_flits: int = _ranged(1, 65536, "input buffer per port, in flits")
    scheduler: str = _choice(("fifo", "islip"), "one FIFO per input, or virtual output queues with iSLIP")
    islip_iterations: int = _ranged(1, 32, "iSLIP request-grant-accept iterations per cycle")
    ingress_full: str = _choice(("backpressure", "drop"), "what ingress does when a packet does not fit")
    tag_width: int = _ranged(8, 32, "bits of the opaque per-packet tag")
    registered_grant: bool = _flag("register the iSLIP match before the buffer read, "
                                   "one more cycle per packet start")
    starvation_limit: int = _ranged(0, 255, "packets an input may start past a packet for one "
                                    "output it cannot request before that output waits "
                                    "for it (iSLIP; 0: never)")

    def _check(self) -> None:
        if self.buffer_flits < self.max_packet_flits:
            raise ConfigError(
                f"switch.buffer_flits = {self.buffer_flits}: must be at least "
                f"switch.max_packet_flits ({self.max_packet_flits}) so the longest packet fits")
        if self.islip_iterations > self.ports:
            raise ConfigError(
                f"switch.islip_iterations = {self.islip_iterations}: must be in 1..{self.ports} "
                f"(switch.ports); more iterations cannot add matches")


@dataclass(frozen=True)
class FabricConfig:
    """The whole fabric configuration. Sections are frozen dataclasses."""

    switch: SwitchConfig
    ecn: EcnConfig
    pfc: PfcConfig
    rdma: RdmaConfig
    dcqcn: DcqcnConfig
    faults: FaultsConfig
    fabric: TopologyConfig
    stimulus: StimulusConfig

    # -- construction -----------------------------------------------------

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "config") -> "FabricConfig":
        """Build and validate a configuration from nested dicts (TOML or JSON shape).

        Every section and key must be present; use :meth:`load` to start from
        a preset and override only some keys.
        """
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: must be a table of sections, got {type(data).__name__}")
        sections = {f.name: f.type for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(sections))
        if unknown:
            raise ConfigError(f"{unknown[0]}: unknown section (allowed: {', '.join(sections)})")
        built = {}
        for name in sections:
            if name not in data:
                raise ConfigError(f"{name}: section missing")
            built[name] = _build_section(name, _SECTIONS[name], data[name])
        _check_across(built["switch"], built["pfc"])
        _check_rdma(built["switch"], built["pfc"], built["rdma"])
        _check_dcqcn(built["ecn"], built["rdma"], built["dcqcn"])
        cfg = cls(**built)
        _check_fabric(cfg)
        if cfg.rdma.enabled and cfg.rdma.qps % cfg.endpoints:
            raise ConfigError(f"rdma.qps = {cfg.rdma.qps}: must be a multiple of the endpoints "
                              f"({cfg.endpoints}: switch.ports, or the fabric's endpoint ports)")
        return cfg

    @classmethod
    def load(cls, *, preset: str | None = None, path: str | Path | None = None,
             overrides: tuple[str, ...] | list[str] = ()) -> "FabricConfig":
        """Start from ``preset`` (default ``default``), merge the TOML file at
        ``path`` over it, then apply ``section.key=value`` overrides."""
        data = preset_dict("default" if preset is None else preset)
        if path is not None:
            _merge(data, read_toml(path), str(path))
        for item in overrides:
            section, key, value = parse_override(item)
            _merge(data, {section: {key: value}}, "--set")
        return cls.from_dict(data)

    # -- serialisation ----------------------------------------------------

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The configuration as nested plain dicts, JSON and TOML friendly."""
        data = dataclasses.asdict(self)
        data["pfc"]["priorities"] = list(self.pfc.priorities)
        data["fabric"]["dims"] = list(self.fabric.dims)
        return data

    @property
    def endpoints(self) -> int:
        """Endpoint ports of the fabric: the switch's ports, or the topology's."""
        from .network.topology import Topology
        return Topology.of(self).endpoints

    @property
    def accelerators(self) -> int:
        """Accelerators: the endpoints over ``fabric.ports_per_accelerator``."""
        return self.endpoints // self.fabric.ports_per_accelerator

    def to_json(self) -> str:
        """A canonical JSON text (sorted keys), equal for equal configurations."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=2)

    def to_toml(self) -> str:
        """The configuration as a TOML file with every section and key, which
        ``superfabric ... --config FILE`` reads back to an equal configuration."""
        sections = []
        for section, values in self.to_dict().items():
            keys = "".join(f"{key} = {_toml_value(value)}\n" for key, value in values.items())
            sections.append(f"[{section}]\n{keys}")
        return "\n".join(sections)

    @classmethod
    def from_json(cls, text: str) -> "FabricConfig":
        """Inverse of :meth:`to_json`."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"config JSON: {e.msg} at line {e.lineno}") from None
        return cls.from_dict(data, source="config JSON")

    def replace(self, **sections: Any) -> "FabricConfig":
        """A copy with whole sections replaced (validated again)."""
        return FabricConfig.from_dict({**self.to_dict(), **{
            k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v
            for k, v in sections.items()}})

    @property
    def key(self) -> str:
        """A short stable digest of the configuration."""
        import hashlib
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:12]

    @property
    def link_gbps(self) -> float:
        """GB/s (10**9 bytes a second) a link carries each way: a flit of
        ``switch.data_width`` bits a cycle at ``fabric.clock_mhz``."""
        return self.switch.data_width / 8 * self.fabric.clock_mhz / 1000

    @property
    def build_key(self) -> str:
        """A digest of what the hardware is generated from, for build directories:
        the ``[faults]`` settings are run-time inputs of the RTL, the clock only
        converts cycles to time and the ports' grouping into accelerators is the
        workloads' (every port has its own engine either way), so all three are left
        out."""
        import hashlib
        data = self.to_dict()
        del data["faults"]
        del data["fabric"]["clock_mhz"]
        del data["fabric"]["ports_per_accelerator"]
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class EcnConfig:
    """The ``[ecn]`` section: RED/DCQCN-style ECN marking at each egress, per priority.

    The queue length a decision sees is the backlog toward the packet's
    (output, priority): flits stored in all input buffers for it, at the
    start of the cycle the packet is scheduled. Below ``kmin`` nothing is
    marked, from ``kmax`` every ECN-capable packet is, in between the
    probability rises linearly from 0 to ``pmax``; ``kmin == kmax`` is
    DCTCP's step marking. The random draw is a 16-bit LFSR per output.
    """

    enabled: bool = _flag("mark ECN-capable packets CE by queue length")
    kmin: int = _ranged(0, 1 << 20, "backlog in flits where marking starts")
    kmax: int = _ranged(0, 1 << 20, "backlog in flits from which every ECT packet is marked")
    pmax: float = _fraction("marking probability just below kmax")
    lfsr_seed: int = _ranged(1, 0xFFFF, "seed of the marking LFSRs (never zero)")
    ect_fraction: float = _fraction("share of generated packets that are ECN-capable (ECT(0))")

    def _check(self) -> None:
        if self.kmin > self.kmax:
            raise ConfigError(f"ecn.kmin = {self.kmin}: must not exceed ecn.kmax ({self.kmax})")

    def port_seed(self, port: int) -> int:
        """The LFSR's start state at egress ``port``: distinct per port, never zero."""
        return lfsr_start(self.lfsr_seed, port)

    @property
    def slope(self) -> int:
        """Marking threshold per flit above kmin, in 1/2**32: mark when
        ``lfsr < ((backlog - kmin) * slope) >> 16`` (RTL and model alike)."""
        if self.kmax == self.kmin:
            return 0
        return int(self.pmax * (1 << 32)) // (self.kmax - self.kmin)


def _classes(doc: str):
    return field(metadata={"classes": True, "doc": doc})


@dataclass(frozen=True)
class PfcConfig:
    """The ``[pfc]`` section: IEEE 802.1Qbb priority flow control.

    Each ingress port counts, per lossless class, the flits it stores. When
    that occupancy reaches ``xoff`` the port sends a pause frame upstream for
    the class (``pause_quanta`` quanta of 512 bit times), refreshes it every
    half pause while the occupancy stays at or above ``xon``, and sends a
    zero-quanta frame (resume) when it falls below ``xon``. ``headroom``
    absorbs what is in flight meanwhile. Pause frames received at an egress
    port stop the scheduler starting packets of the class toward it.
    """

    enabled: bool = _flag("send and obey priority flow control")
    priorities: tuple = _classes("lossless traffic classes (list of class numbers)")
    xoff: int = _ranged(1, 65536, "per-class ingress occupancy in flits that sends a pause")
    xon: int = _ranged(0, 65536, "occupancy in flits below which the pause is lifted")
    headroom: int = _ranged(0, 65536, "flits reserved above xoff for what is in flight")
    pause_quanta: int = _ranged(1, 65535, "pause time sent, in quanta of 512 bit times")

    @staticmethod
    def quanta_to_cycles(quanta: int, data_width: int) -> int:
        """Cycles of a pause of ``quanta`` quanta (512 bit times each) on a link
        carrying ``data_width`` bits per cycle, rounded up."""
        return -(-quanta * QUANTUM_BITS // data_width)

    def refresh_cycles(self, data_width: int) -> int:
        """Cycles between pause refreshes: half the pause time, so it never lapses."""
        return max(1, self.quanta_to_cycles(self.pause_quanta, data_width) // 2)

    def _check(self) -> None:
        if self.xon >= self.xoff:
            raise ConfigError(f"pfc.xon = {self.xon}: must be below pfc.xoff ({self.xoff})")


def _power_of_two(lo: int, hi: int, doc: str):
    return field(metadata={"range": (lo, hi), "power_of_two": True, "doc": doc})


@dataclass(frozen=True)
class RdmaConfig:
    """The ``[rdma]`` section: one connection-aggregation engine per endpoint.

    Every endpoint owns ``qps / E`` queue pairs (``E``: the switch's ports or the
    fabric's endpoints); QP ``q`` talking to
    peer ``d`` uses channel ``d * channels_per_peer + q mod
    channels_per_peer``, and reliability state (PSNs, window, timer) exists
    per channel only. ``docs/architecture.md`` section 10 has the protocol.
    """

    enabled: bool = _flag("attach an RDMA engine to every endpoint (switch port or accelerator)")
    qps: int = _ranged(1, 1 << 16, "queue pairs in total, a multiple of the endpoints")
    channels_per_peer: int = _ranged(1, 8, "reliable channels from an endpoint to each peer")
    window: int = _power_of_two(2, 256, "packets in flight per channel")
    ack_every: int = _ranged(1, 256, "packets a receiver accepts before it must acknowledge")
    ack_timeout: int = _ranged(1, 65535, "cycles a receiver holds back an acknowledgement")
    retransmit_timeout: int = _ranged(2, 1 << 20, "cycles without progress before going back N")
    keys: int = _power_of_two(2, 1024, "memory registration table entries per endpoint")
    pages: int = _power_of_two(2, 1 << 16, "page table entries per endpoint")
    page_words: int = _power_of_two(1, 1 << 16, "64-bit words per page")
    memory_words: int = _power_of_two(2, 1 << 24, "host memory per endpoint, in 64-bit words")
    dma_latency: int = _ranged(1, 64, "cycles from a DMA read request to its data")
    start_psn: int = _ranged(0, (1 << 24) - 1, "first PSN of every channel (24 bits; one near "
                             "16777215 makes a run wrap)")
    data_priority: int = _ranged(0, 7, "traffic class of the data packets")
    control_priority: int = _ranged(0, 7, "traffic class of acknowledgements, NAKs and CNPs")

    def _check(self) -> None:
        if self.ack_every > self.window:
            raise ConfigError(f"rdma.ack_every = {self.ack_every}: must be at most rdma.window "
                              f"({self.window}), or a full window would wait for the ack timer")
        if self.retransmit_timeout <= self.ack_timeout:
            raise ConfigError(f"rdma.retransmit_timeout = {self.retransmit_timeout}: must exceed "
                              f"rdma.ack_timeout ({self.ack_timeout}), or held-back "
                              f"acknowledgements would cause retransmissions")
        if self.page_words > self.memory_words:
            raise ConfigError(f"rdma.page_words = {self.page_words}: must be at most "
                              f"rdma.memory_words ({self.memory_words})")

    def per_endpoint(self, ports: int) -> int:
        """Queue pairs per endpoint."""
        return self.qps // ports


@dataclass(frozen=True)
class DcqcnConfig:
    """The ``[dcqcn]`` section: DCQCN congestion control at the RDMA engines.

    The switch marks ECN-capable data packets CE by queue length (``[ecn]``);
    a receiving engine (the notification point) answers a marked packet with
    a CNP to the sending channel, at most one per ``cnp_interval`` cycles
    per channel; the sending channel (the reaction point) cuts its rate by
    ``alpha / 2`` on a CNP and recovers it on a timer and a flit counter, in
    fast recovery, additive and hyper increase, and a pacer holds its
    packets to that rate. Times are in cycles, the byte counter in flits,
    rates are shares of the line rate (one flit per cycle).
    ``docs/architecture.md`` section 10.13 has the rules and the scaling of
    the published parameters to these units.
    """

    enabled: bool = _flag("DCQCN rate control at the RDMA engines, driven by ECN marks")
    cnp_interval: int = _ranged(1, 1 << 20, "cycles a channel's receive context waits between CNPs")
    alpha_timer: int = _ranged(1, 1 << 20, "cycles without a CNP after which alpha decays")
    increase_timer: int = _ranged(1, 1 << 20, "cycles between timer rate increases")
    byte_counter: int = _ranged(1, 1 << 24, "flits sent between byte-counter rate increases")
    fast_recovery: int = _ranged(1, 31, "fast recovery stages F before additive increase")
    g_shift: int = _ranged(1, 15, "alpha gain g = 2**-g_shift")
    ai_rate: float = _fraction("additive increase step, a share of the line rate")
    hai_rate: float = _fraction("hyper increase step, a share of the line rate")
    min_rate: float = _fraction("lowest rate a CNP cuts to, a share of the line rate")

    def _check(self) -> None:
        smallest = 1 / LINE_RATE
        for name in ("min_rate", "ai_rate"):
            value = getattr(self, name)
            if rate_units(value) < 1:
                why = ("a channel at rate 0 would never send" if name == "min_rate"
                       else "a cut rate could never rise above its last target")
                raise ConfigError(f"dcqcn.{name} = {value!r}: must be at least 2**-16 = "
                                  f"{smallest:.3g} of the line rate ({why})")
        if self.hai_rate < self.ai_rate:
            raise ConfigError(f"dcqcn.hai_rate = {self.hai_rate!r}: must be at least "
                              f"dcqcn.ai_rate ({self.ai_rate!r}); hyper increase is the faster one")
        if self.alpha_timer <= self.cnp_interval:
            raise ConfigError(f"dcqcn.alpha_timer = {self.alpha_timer}: must exceed "
                              f"dcqcn.cnp_interval ({self.cnp_interval}), or alpha decays between "
                              f"the CNPs of a congested channel")

    @property
    def units(self) -> DcqcnUnits:
        """The values as integers: cycles, flits, rate units (``superfabric.formats.dcqcn``)."""
        return DcqcnUnits(cnp_interval=self.cnp_interval, alpha_timer=self.alpha_timer,
                          increase_timer=self.increase_timer, byte_counter=self.byte_counter,
                          fast_recovery=self.fast_recovery, g_shift=self.g_shift,
                          ai_rate=rate_units(self.ai_rate), hai_rate=rate_units(self.hai_rate),
                          min_rate=rate_units(self.min_rate))


@dataclass(frozen=True)
class FaultsConfig:
    """The ``[faults]`` section: what the link fault injectors do to packets.

    One injector per endpoint uplink draws once per packet from a 16-bit
    LFSR and drops, duplicates, reorders or corrupts (one header bit) it
    with these probabilities. The RTL takes them as run-time inputs, so
    changing them does not rebuild the simulator.
    """

    drop_rate: float = _fraction("probability that a packet is dropped")
    duplicate_rate: float = _fraction("probability that a packet is sent twice")
    reorder_rate: float = _fraction("probability that a packet is held back behind the next one")
    corrupt_rate: float = _fraction("probability that one header bit of a packet is flipped")
    reorder_cycles: int = _ranged(1, 65535, "longest hold of a reordered packet, in idle cycles")
    seed: int = _ranged(1, 0xFFFF, "seed of the injectors' LFSRs (never zero)")

    #: The order in which the rates split the LFSR's range.
    KINDS = ("drop", "duplicate", "reorder", "corrupt")

    def _check(self) -> None:
        total = self.drop_rate + self.duplicate_rate + self.reorder_rate + self.corrupt_rate
        if total > 1:
            raise ConfigError(f"faults.drop_rate + duplicate_rate + reorder_rate + corrupt_rate = "
                              f"{total:g}: must be at most 1")

    def thresholds(self) -> tuple[int, int, int, int]:
        """Cumulative 17-bit thresholds on the 16-bit draw: drop below the first,
        duplicate below the second, and so on (RTL and model alike)."""
        out, acc = [], 0.0
        for rate in (self.drop_rate, self.duplicate_rate, self.reorder_rate, self.corrupt_rate):
            acc += rate
            out.append(min(1 << 16, round(acc * (1 << 16))))
        return tuple(out)

    def link_seed(self, port: int) -> int:
        """The LFSR's start state on ``port``'s uplink: distinct per port, never zero."""
        return lfsr_start(self.seed, port)

    @property
    def active(self) -> bool:
        return self.thresholds()[-1] > 0


@dataclass(frozen=True)
class TopologyConfig:
    """The ``[fabric]`` section: many routers in a topology (docs/architecture.md section 11).

    ``topology = "switch"`` is one router whose ports are all endpoints (the
    switch of ``[switch]``); ``"torus"`` a k-ary n-cube of ``dims`` with
    ``endpoints_per_router`` endpoints per router; ``"fat_tree"`` a two-level
    leaf-spine. An accelerator has ``ports_per_accelerator`` endpoint ports: on
    one router of a torus (or the switch), one per rail of leaves on a
    leaf-spine (section 11.2). Router-to-router links carry ``vcs`` virtual
    channels per traffic class with credit-based flow control. ``clock_mhz`` is
    the clock the cycles are taken at, for results in microseconds and GB/s only.
    """

    topology: str = _choice(("switch", "torus", "fat_tree"),
                            "one crossbar, a torus, or a leaf-spine fat tree")
    dims: tuple = _sizes((1, 3), (2, 16), "torus: routers per dimension")
    endpoints_per_router: int = _ranged(1, 8, "torus: endpoints attached to each router")
    leaves: int = _ranged(2, 32, "fat_tree: leaf routers")
    spines: int = _ranged(1, 16, "fat_tree: spine routers")
    hosts_per_leaf: int = _ranged(1, 16, "fat_tree: endpoints attached to each leaf")
    ports_per_accelerator: int = _ranged(1, 8, "endpoint ports of each accelerator, each "
                                         "with its own RDMA engine")
    routing: str = _choice(("dor", "adaptive", "ecmp"),
                           "torus: dor or adaptive; fat_tree: ecmp or adaptive")
    vcs: int = _ranged(1, 8, "virtual channels per traffic class on router-to-router links")
    vc_buffer_flits: int = _ranged(1, 4096, "input buffer per (class, VC) at a router link port")
    link_latency: int = _ranged(1, 64, "cycles each way on a router-to-router link")
    allow_deadlock: bool = _flag("run a configuration whose channel dependency graph has a cycle")
    clock_mhz: float = _positive("the fabric's clock in MHz: turns cycles into microseconds "
                                 "and GB/s in results, never changes a run")

    #: Routing functions allowed per topology.
    ROUTINGS = {"switch": ("dor", "adaptive", "ecmp"), "torus": ("dor", "adaptive"),
                "fat_tree": ("ecmp", "adaptive")}

    def _check(self) -> None:
        allowed = self.ROUTINGS[self.topology]
        if self.routing not in allowed:
            names = " or ".join(repr(r) for r in allowed)
            raise ConfigError(f"fabric.routing = {self.routing!r}: must be {names} with "
                              f"fabric.topology = {self.topology!r}")
        if self.topology == "torus" and self.routing == "adaptive" and self.vcs < 3:
            raise ConfigError(f"fabric.vcs = {self.vcs}: must be at least 3 with "
                              f"fabric.routing = 'adaptive' (two escape VCs and one or "
                              f"more adaptive VCs)")

    @property
    def is_fabric(self) -> bool:
        """More than one switch: routing, VCs and credits are in play."""
        return self.topology != "switch"


def _check_fabric(cfg: "FabricConfig") -> None:
    """Rules of a multi-router fabric, the deadlock check last (docs/architecture.md 11.6)."""
    f, sw = cfg.fabric, cfg.switch
    # An accelerator's ports are on one router, or one on each rail of leaves (11.2).
    key, value, why = {
        "switch": ("switch.ports", sw.ports, "an accelerator's ports are the switch's"),
        "torus": ("fabric.endpoints_per_router", f.endpoints_per_router,
                  "an accelerator's ports are on one router"),
        "fat_tree": ("fabric.leaves", f.leaves,
                     "port k of every accelerator is on the k-th rail of leaves")}[f.topology]
    if value % f.ports_per_accelerator:
        raise ConfigError(f"fabric.ports_per_accelerator = {f.ports_per_accelerator}: must "
                          f"divide {key} ({value}) with fabric.topology = {f.topology!r} ({why})")
    if not f.is_fabric:
        return
    if f.vc_buffer_flits < sw.max_packet_flits:
        raise ConfigError(f"fabric.vc_buffer_flits = {f.vc_buffer_flits}: must be at least "
                          f"switch.max_packet_flits ({sw.max_packet_flits}) so a packet fits a VC")
    from .network.deadlock import dependency_cycle, describe_cycle
    from .network.topology import Topology
    topo = Topology.of(cfg)
    if topo.endpoints > 1024:
        raise ConfigError(f"fabric.topology = {f.topology!r}: {topo.endpoints} endpoints, must "
                          f"be at most 1024")
    if f.allow_deadlock:
        return
    cycle = dependency_cycle(topo, f.routing, f.vcs)
    if cycle is not None:
        hint = ("dor needs vcs >= 2 (a dateline VC per ring)" if f.topology == "torus"
                else "the routing")
        raise ConfigError(f"fabric.vcs = {f.vcs}: the {f.topology}'s channel dependency graph "
                          f"has a cycle ({describe_cycle(topo, cycle)}); {hint}, or set "
                          f"fabric.allow_deadlock = true to watch it deadlock")


@dataclass(frozen=True)
class StimulusConfig:
    """The ``[stimulus]`` section: build-time sizes of the stimulus top's generators and sinks.

    Only what shapes the hardware is here. The run itself (pattern, load,
    lengths, class weights, seed, run length) is written into the top's
    configuration registers after reset, so one build serves every point
    of a sweep (``docs/architecture.md`` section 11).
    """

    source_queue: int = _ranged(2, 256, "packets a generator holds generated but not yet sent")
    hist_buckets: int = _ranged(2, 4096, "latency histogram buckets per sink")
    hist_sub_bits: int = _ranged(0, 8, "log2 of the histogram's buckets per power of two")
    counter_width: int = _ranged(32, 64, "bits of the cycle, packet, flit, latency-sum and "
                                 "histogram counters")
    fault_packet: int = _ranged(0, (1 << 32) - 1, "0: none; K: a planted fault for tests, output "
                                "0's sink withholds ready for one cycle at the head of its K-th "
                                "packet (the model does not mirror it)")

    def _check(self) -> None:
        least = 2 << self.hist_sub_bits
        if self.hist_buckets < least:
            raise ConfigError(f"stimulus.hist_buckets = {self.hist_buckets}: must be at least "
                              f"{least} (2 * 2**stimulus.hist_sub_bits), the buckets of width one")


_SECTIONS = {"switch": SwitchConfig, "ecn": EcnConfig, "pfc": PfcConfig, "rdma": RdmaConfig,
             "dcqcn": DcqcnConfig, "faults": FaultsConfig, "fabric": TopologyConfig,
             "stimulus": StimulusConfig}


def _check_rdma(sw: SwitchConfig, pfc: PfcConfig, rdma: RdmaConfig) -> None:
    """Rules for the RDMA engines; they matter only when the engines are there."""
    if not rdma.enabled:
        return
    if sw.data_width != 64:
        raise ConfigError(f"switch.data_width = {sw.data_width}: must be 64 with rdma.enabled "
                          f"(the RDMA headers are 64-bit words)")
    if sw.max_packet_flits < 3:
        raise ConfigError(f"switch.max_packet_flits = {sw.max_packet_flits}: must be at least 3 "
                          f"with rdma.enabled (two header flits and a payload word)")
    for name in ("data_priority", "control_priority"):
        value = getattr(rdma, name)
        if value >= sw.priorities:
            raise ConfigError(f"rdma.{name} = {value}: must be a class of the switch, "
                              f"0..{sw.priorities - 1} (switch.priorities = {sw.priorities})")
    if pfc.enabled and rdma.control_priority == rdma.data_priority:
        raise ConfigError(f"rdma.control_priority = {rdma.control_priority}: must differ from "
                          f"rdma.data_priority with pfc.enabled, or a pause of the data class "
                          f"would hold back the acknowledgements and CNPs")


def _check_dcqcn(ecn: EcnConfig, rdma: RdmaConfig, dcqcn: DcqcnConfig) -> None:
    """DCQCN lives in the RDMA engines and reacts to the switch's ECN marks."""
    if not dcqcn.enabled:
        return
    if not rdma.enabled:
        raise ConfigError("dcqcn.enabled = true: needs rdma.enabled = true (DCQCN runs in the "
                          "RDMA engines)")
    if not ecn.enabled:
        raise ConfigError("dcqcn.enabled = true: needs ecn.enabled = true (the switch's CE "
                          "marks drive it)")


def _check_across(sw: SwitchConfig, pfc: PfcConfig) -> None:
    """Rules that tie sections together; PFC's matter only when it runs."""
    if not pfc.enabled:
        return
    for c in pfc.priorities:
        if c >= sw.priorities:
            raise ConfigError(f"pfc.priorities = {list(pfc.priorities)}: class {c} does not exist "
                              f"(switch.priorities = {sw.priorities}, classes 0..{sw.priorities - 1})")
    if pfc.xoff > sw.buffer_flits - pfc.headroom:
        raise ConfigError(f"pfc.xoff = {pfc.xoff}: must be at most switch.buffer_flits - "
                          f"pfc.headroom ({sw.buffer_flits} - {pfc.headroom} = "
                          f"{sw.buffer_flits - pfc.headroom})")
    need = len(pfc.priorities) * (pfc.xoff + pfc.headroom)
    if need > sw.buffer_flits:
        raise ConfigError(
            f"pfc.xoff = {pfc.xoff}: {len(pfc.priorities)} lossless classes x (xoff + "
            f"headroom {pfc.headroom}) = {need} flits must fit switch.buffer_flits "
            f"({sw.buffer_flits}), or congested classes could overflow the shared buffer")
    if sw.data_width & (sw.data_width - 1):
        raise ConfigError(f"switch.data_width = {sw.data_width}: must be a power of two "
                          f"with pfc.enabled (pause quanta convert to cycles by a shift)")


def _build_section(name: str, cls: type, values: Any):
    if not isinstance(values, dict):
        raise ConfigError(f"{name}: must be a table of keys, got {values!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(
            f"{name}.{unknown[0]}: unknown key (allowed: {', '.join(fields)})")
    kwargs = {}
    for fname, f in fields.items():
        where = f"{name}.{fname}"
        if fname not in values:
            raise ConfigError(f"{where}: missing")
        kwargs[fname] = _check_value(where, f, values[fname])
    section = cls(**kwargs)
    section._check()
    return section


def _check_value(where: str, f: dataclasses.Field, value: Any) -> Any:
    meta = f.metadata
    if "range" in meta:
        lo, hi = meta["range"]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ConfigError(f"{where} = {value!r}: must be an integer in {lo}..{hi} ({meta['doc']})")
        if meta.get("power_of_two") and value & (value - 1):
            raise ConfigError(f"{where} = {value!r}: must be a power of two in {lo}..{hi} "
                              f"({meta['doc']})")
    elif "bool" in meta:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} = {value!r}: must be true or false ({meta['doc']})")
    elif "fraction" in meta:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ConfigError(f"{where} = {value!r}: must be a number in 0..1 ({meta['doc']})")
        value = float(value)
    elif "positive" in meta:
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not 0 < value < math.inf):
            raise ConfigError(f"{where} = {value!r}: must be a positive finite number "
                              f"({meta['doc']})")
        value = float(value)
    elif "classes" in meta:
        if (not isinstance(value, (list, tuple)) or len(set(value)) != len(value)
                or any(isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= 7
                       for c in value)):
            raise ConfigError(f"{where} = {value!r}: must be a list of distinct class numbers "
                              f"0..7 ({meta['doc']})")
        value = tuple(sorted(value))
    elif "sizes" in meta:
        (lo_n, hi_n), (lo, hi) = meta["sizes"]
        if (not isinstance(value, (list, tuple)) or not lo_n <= len(value) <= hi_n
                or any(isinstance(k, bool) or not isinstance(k, int) or not lo <= k <= hi
                       for k in value)):
            raise ConfigError(f"{where} = {value!r}: must be a list of {lo_n} to {hi_n} integers "
                              f"in {lo}..{hi} ({meta['doc']})")
        value = tuple(value)
    elif "choices" in meta:
        if value not in meta["choices"]:
            allowed = " or ".join(repr(c) for c in meta["choices"])
            raise ConfigError(f"{where} = {value!r}: must be {allowed} ({meta['doc']})")
    return value


def _toml_value(value: Any) -> str:
    """A value of the configuration as TOML: booleans, integers, floats, strings, lists of them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)      # a TOML basic string for the configuration's names
    return "[" + ", ".join(_toml_value(v) for v in value) + "]"


def _merge(base: dict, extra: Any, source: str) -> None:
    if not isinstance(extra, dict):
        raise ConfigError(f"{source}: must be a table of sections")
    for section, values in extra.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{section} = {values!r}: a key outside any section; keys belong "
                              f"in a section such as [{next(iter(base))}]")
        if section not in base:
            raise ConfigError(f"{section}: unknown section (allowed: {', '.join(base)})")
        base[section].update(values)


def read_toml(path: str | Path) -> dict:
    """Read a TOML file; a missing file or a syntax error is a :class:`ConfigError`."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: TOML syntax error: {e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start}): a TOML file must be UTF-8") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config file: {e.strerror}") from None


def preset_dict(name: str) -> dict:
    """The nested dict of a built-in preset."""
    if name not in PRESETS:
        raise ConfigError(f"preset = {name!r}: must be one of {', '.join(PRESETS)}")
    text = resources.files("superfabric").joinpath("presets", f"{name}.toml").read_text()
    return tomllib.loads(text)


def parse_override(item: str) -> tuple[str, str, Any]:
    """Split ``section.key=value``; the value is read as TOML, else taken as a string."""
    lhs, sep, rhs = item.partition("=")
    section, dot, key = lhs.strip().partition(".")
    if not sep or not dot or not section or not key:
        raise ConfigError(f"--set {item!r}: must look like section.key=value")
    rhs = rhs.strip()
    try:
        value = tomllib.loads(f"v = {rhs}")["v"]
    except tomllib.TOMLDecodeError:
        value = rhs
    return section, key, value
