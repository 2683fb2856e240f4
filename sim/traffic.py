"""Seeded, reproducible traffic for an N-port packet switch.

:func:`generate` turns a pattern name, an offered load, a run length and a
seed into a :class:`Trace`: one row per packet (generation cycle, input,
output, traffic class, length in flits, tag), sorted by generation cycle.
The testbench drives the RTL from the trace and the golden model replays the
same trace, so both see exactly the same packets.

Offered load
    ``load`` is the offered load of every active input, in flits per cycle
    (``1.0`` is line rate). Except for ``bursty``, injection is a Bernoulli
    process per input and cycle: a packet is generated at cycle ``c`` with
    probability ``load / mean_length``, so the offered flit rate equals
    ``load``. The generation cycle does not depend on whether the input is
    still sending an earlier packet: the testbench keeps a source queue per
    input, and the queueing delay in it is part of the measured latency.

Patterns
    A pattern is a name, optionally followed by ``:key=value,...``
    parameters, e.g. ``"hotspot:fraction=0.3,port=2"``. ``N`` is the
    number of endpoints (``switch.ports`` for one switch, the topology's for
    a fabric); "uniform" always means over all ``N`` endpoints, the packet's
    own included.

    ``uniform``
        Every packet goes to an output drawn uniformly from all ``N`` ports,
        its own port included (as in BookSim's ``uniform``).
    ``permutation``
        One random permutation ``perm`` of the ports, drawn from the seed and
        fixed for the run; input ``i`` always sends to ``perm[i]``. A fixed
        point (``perm[i] == i``) is allowed.
    ``transpose``
        For ``N = 2**(2h)``: the output is the input with the high and low
        ``h`` bits of the port number swapped. Any other ``N`` is an error.
    ``bitcomp``
        Output ``N - 1 - src``; for ``N`` a power of two this is the bit
        complement of the port number.
    ``hotspot:fraction=F,port=P``
        With probability ``F`` (default 0.25) the packet goes to port ``P``
        (default 0), otherwise to a uniform output (which may also be
        ``P``, so ``P`` receives ``F + (1 - F) / N`` of the packets).
    ``incast:sources=S,sink=K``
        ``S`` inputs (default ``N - 1``), the ports other than ``K``
        (default 0) in ascending order, all send to ``K``. The other inputs
        are idle.
    ``all-to-all``
        Input ``i`` sends its k-th packet to ``(i + 1 + k mod (N - 1)) mod N``:
        every other output in turn, ``i + 1``, ``i + 2``, ... skipping itself,
        at the Bernoulli injection times.
    ``ring-allreduce:chunk=C``
        Ring all-reduce: input ``i`` sends only to ``(i + 1) mod N``. The
        collective is ``2 (N - 1)`` steps (``N - 1`` reduce-scatter, then
        ``N - 1`` all-gather) of ``C`` packets per input; packet ``k`` of an
        input belongs to step ``k // C`` and an input stops after
        ``2 (N - 1) C`` packets. On a torus the rings run along each
        dimension in turn: ``2 (k_0 - 1)`` steps to the +1 neighbour in
        dimension 0, then ``2 (k_1 - 1)`` in dimension 1, and so on. The default ``C`` is the smallest that lets
        the expected packets of the run fill all the steps, so the last step
        may be cut by the end of the run. Every packet is in the highest
        traffic class. The trace is open loop: steps are paced by the
        injection load, not by the completion of the previous step.
    ``tornado``
        On a torus, every endpoint sends to the endpoint of the same local
        port at the router ``ceil(k_d / 2) - 1`` steps ahead in every
        dimension (Dally and Towles' adversary for rings); elsewhere to
        ``(i + ceil(N / 2) - 1) mod N``.
    ``neighbour``
        A halo exchange: on a torus, the k-th packet of an endpoint goes to
        the endpoint of the same local port one step ahead in dimension ``k
        mod D``, its +1 neighbour in every dimension in turn; elsewhere to
        ``(i + 1) mod N``.
    ``bursty:burst=B``
        An on/off source per input. A burst has a geometric number of packets
        with mean ``B`` (default 8), all to one output drawn uniformly from
        all ``N`` ports, generated back to back (one packet every
        ``mean_length`` cycles, i.e. at line rate). Off periods are
        exponential with the mean that makes the long-run offered load equal
        ``load``; at ``load = 1`` there are none.

Reproducibility
    The same arguments give the same trace, bit for bit, with the same numpy
    version. The seed is split (:class:`numpy.random.SeedSequence`) into one
    stream each for injection times, destinations, classes and lengths, so
    for the Bernoulli patterns the injection times depend only on the seed,
    the load, the mean length, the run length and which inputs are active:
    two patterns run with one seed see the same arrival process.

Only numpy, the standard library and :mod:`superfabric.config` are imported,
so the model and the tools can generate traffic without Amaranth.
"""

from __future__ import annotations

import math
import numbers
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import FabricConfig
from ..formats.packet import ECT0, NOT_ECT
from ..network.topology import Topology

__all__ = ["TrafficError", "PATTERNS", "Trace", "PacketLengths", "PatternParam", "generate",
           "parse_lengths", "tornado", "parse_pattern", "read_npz", "bernoulli_arrivals",
           "check_integer", "check_load", "check_priority_weights", "check_traffic"]

PATTERNS: tuple[str, ...] = ("uniform", "permutation", "transpose", "bitcomp", "hotspot",
                             "incast", "all-to-all", "ring-allreduce", "bursty", "tornado",
                             "neighbour")

# Written into every saved trace so that loading a foreign .npz fails clearly.
_FORMAT = "superfabric.traffic/2"

# Cycles per block of the Bernoulli draw: bounds the temporary matrix to
# 64 Ki x 32 ports x 8 bytes = 16 MiB however long the run is.
_BLOCK_CYCLES = 1 << 16


class TrafficError(ValueError):
    """A traffic argument a user supplied is not allowed.

    The message is one line: the field, the value, and what is allowed.
    """


# -- packet lengths -----------------------------------------------------------


@dataclass(frozen=True)
class PacketLengths:
    """A packet length distribution, as parsed by :func:`parse_lengths`.

    Attributes
    ----------
    spec : str
        The text it was parsed from, e.g. ``"bimodal:1,16,0.8"``.
    flits : tuple of int
        The possible lengths, in flits.
    weights : tuple of float
        The probability of each length; they sum to 1.
    """

    spec: str
    flits: tuple[int, ...]
    weights: tuple[float, ...]

    @property
    def mean(self) -> float:
        """The mean packet length, in flits."""
        return float(sum(f * w for f, w in zip(self.flits, self.weights)))

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw ``n`` lengths (``int16``) from ``rng``."""
        return np.asarray(self.flits, dtype=np.int16)[_draw_categorical(rng, self.weights, n)]


def _draw_categorical(rng: np.random.Generator, weights, n: int) -> np.ndarray:
    """Draw ``n`` indices into ``weights`` (non-negative, not all zero) from ``rng``."""
    total = np.cumsum(weights, dtype=np.float64)
    draw = rng.random(n)
    index = np.zeros(n, dtype=np.intp)
    # The index is the number of cumulative points at or below the draw: one
    # pass per point is faster than np.searchsorted for the few (<= 8)
    # entries here. Dividing by the last partial sum puts every point after
    # the last non-zero weight at exactly 1.0, above any draw, and a draw on
    # a point counts it, so a zero-weight entry is never drawn.
    for point in total[:-1] / total[-1]:
        index += draw >= point
    return index


def parse_lengths(spec: str, max_packet_flits: int) -> PacketLengths:
    """Parse a packet length specification.

    Parameters
    ----------
    spec : str
        ``"fixed:N"``: every packet is ``N`` flits, ``1 <= N <= max_packet_flits``.
        ``"bimodal:SHORT,LONG,P_SHORT"``: ``SHORT`` flits with probability
        ``P_SHORT``, else ``LONG``; ``1 <= SHORT <= LONG <= max_packet_flits``,
        ``0 <= P_SHORT <= 1``.
    max_packet_flits : int
        The longest packet the switch accepts (``switch.max_packet_flits``).

    Returns
    -------
    PacketLengths

    Raises
    ------
    TrafficError
        If ``spec`` is malformed or out of range; the message names
        ``traffic.packet_lengths``.
    """
    where = f"traffic.packet_lengths = {spec!r}"
    allowed = (f"'fixed:N' or 'bimodal:SHORT,LONG,P_SHORT' with flits in "
               f"1..{max_packet_flits} (switch.max_packet_flits)")
    if not isinstance(spec, str):
        raise TrafficError(f"{where}: must be {allowed}")
    kind, _, args = spec.partition(":")
    fields = args.split(",")

    def flits(text: str, what: str) -> int:
        value = _number(text, integer=True)
        if value is None or not 1 <= value <= max_packet_flits:
            raise TrafficError(f"{where}: {what} = {text!r} must be an integer in "
                               f"1..{max_packet_flits} (switch.max_packet_flits)")
        return value

    if kind == "fixed" and len(fields) == 1:
        return PacketLengths(spec, (flits(fields[0], "N"),), (1.0,))
    if kind == "bimodal" and len(fields) == 3:
        short, long = flits(fields[0], "SHORT"), flits(fields[1], "LONG")
        if short > long:
            raise TrafficError(f"{where}: SHORT = {short} must not exceed LONG = {long}")
        p_short = _number(fields[2])
        if p_short is None or not 0.0 <= p_short <= 1.0:
            raise TrafficError(f"{where}: P_SHORT = {fields[2]!r} must be a number in 0..1")
        return PacketLengths(spec, (short, long), (p_short, 1.0 - p_short))
    raise TrafficError(f"{where}: must be {allowed}")


# -- the trace ----------------------------------------------------------------

_COLUMNS = {"gen": np.int64, "src": np.int16, "dst": np.int16,
            "prio": np.int8, "length": np.int16, "tag": np.int64, "ecn": np.int8}

_META = {"pattern": str, "load": float, "seed": int, "cycles": int, "packet_lengths": str}


@dataclass(frozen=True)
class Trace:
    """The packets of one run, one array element per packet, in generation order.

    Packets are sorted by generation cycle, ties by input port ascending;
    an input never generates two packets in one cycle. The arrays are made
    read-only, as the trace is a value shared by the RTL run and the model.

    Attributes
    ----------
    gen : numpy.ndarray of int64
        Generation cycle, ascending, in ``0..cycles-1``.
    src : numpy.ndarray of int16
        Input port.
    dst : numpy.ndarray of int16
        Output port.
    prio : numpy.ndarray of int8
        Traffic class, ``0..switch.priorities-1`` (higher is served first).
    length : numpy.ndarray of int16
        Packet length in flits, ``1..switch.max_packet_flits``.
    tag : numpy.ndarray of int64
        Index of the packet in the trace, ``0..n-1``. The RTL carries
        ``tag mod 2**switch.tag_width``.
    pattern : str
        The pattern as given, parameters included.
    load : float
        Offered load per input, flits per cycle. On the class,
        ``Trace.load(path)`` is the loader instead (see :meth:`load`).
    seed : int
    cycles : int
        Length of the generation window, in cycles.
    packet_lengths : str
        The packet length specification as given.
    ecn : numpy.ndarray of int8
        ECN codepoint each packet is sent with: ``ECT0`` for ECN-capable
        packets, ``NOT_ECT`` otherwise. All ``NOT_ECT`` when not given.
    """

    gen: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    prio: np.ndarray
    length: np.ndarray
    tag: np.ndarray
    pattern: str
    load: float
    seed: int
    cycles: int
    packet_lengths: str
    ecn: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.gen)
        if self.ecn is None:
            object.__setattr__(self, "ecn", np.zeros(n, np.int8))
        for name, dtype in _COLUMNS.items():
            column = getattr(self, name)
            if not isinstance(column, np.ndarray) or column.dtype != dtype or column.shape != (n,):
                raise TypeError(f"Trace.{name}: must be a 1-D {np.dtype(dtype)} array "
                                f"of {n} packets")
            column.flags.writeable = False

    @classmethod
    def empty(cls) -> "Trace":
        """A trace of no packets, its columns of the types of every trace's: what a
        warm-up runs to compile the kernels a run of real packets calls."""
        return cls(**{name: np.zeros(0, dtype) for name, dtype in _COLUMNS.items()},
                   pattern="empty", load=0.0, seed=0, cycles=0, packet_lengths="fixed:1")

    def __len__(self) -> int:
        """The number of packets."""
        return len(self.gen)

    # The generated __eq__ would compare arrays element-wise and then fail on
    # their truth value; a trace is equal to another when every column is.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        return (all(getattr(self, m) == getattr(other, m) for m in _META)
                and all(np.array_equal(getattr(self, c), getattr(other, c)) for c in _COLUMNS))

    def offered_flits(self) -> int:
        """The total flits of all packets."""
        return int(self.length.sum())

    def describe(self) -> dict:
        """A JSON-friendly summary.

        Returns
        -------
        dict
            ``pattern``, ``load``, ``seed``, ``cycles``, ``packet_lengths``,
            ``packets`` and ``flits``, as plain Python values.
        """
        return {"pattern": self.pattern, "load": float(self.load), "seed": int(self.seed),
                "cycles": int(self.cycles), "packet_lengths": self.packet_lengths,
                "packets": len(self), "flits": self.offered_flits()}

    def save(self, path: str | Path) -> None:
        """Write the trace to ``path`` as an uncompressed ``.npz`` file.

        The file is written at ``path`` exactly (no ``.npz`` suffix is added).
        """
        with open(path, "wb") as f:
            np.savez(f, format=np.str_(_FORMAT),
                     **{c: getattr(self, c) for c in _COLUMNS},
                     **{m: np.asarray(getattr(self, m)) for m in _META})


def _load(cls: type[Trace], path: str | Path) -> Trace:
    """Read a trace written by :meth:`Trace.save`.

    Parameters
    ----------
    path : str or pathlib.Path

    Returns
    -------
    Trace

    Raises
    ------
    TrafficError
        If the file is missing or is not a trace.
    """
    data = read_npz(path, _FORMAT, "trace", "a traffic trace", (*_COLUMNS, *_META))
    try:
        return cls(**{c: data[c] for c in _COLUMNS},
                   **{m: kind(data[m]) for m, kind in _META.items()})
    except TypeError as e:
        raise TrafficError(f"{path}: not a traffic trace ({e})") from None


def read_npz(path: str | Path, fmt: str, kind: str, what: str, names) -> dict:
    """The arrays of an ``.npz`` file of format ``fmt`` holding every one of ``names``.

    A missing file, another format or a missing array is a one-line
    :class:`TrafficError` naming the ``kind`` of file and ``what`` it should be
    ("a traffic trace").
    """
    try:
        with np.load(path, allow_pickle=False) as f:
            data = {k: f[k] for k in f.files}
    except FileNotFoundError:
        raise TrafficError(f"{path}: no such {kind} file") from None
    except (OSError, ValueError, zipfile.BadZipFile):
        raise TrafficError(f"{path}: not a .npz {kind} file") from None
    if "format" not in data or str(data["format"]) != fmt:
        raise TrafficError(f"{path}: not {what} (format must be {fmt!r})")
    missing = [k for k in names if k not in data]
    if missing:
        raise TrafficError(f"{path}: not {what} (no {missing[0]!r})")
    return data


# The spec names both the field ``load`` (the offered load) and the class
# method ``load`` (read a file). Defined in the class body, the method would
# become the field's default; attached afterwards, ``Trace.load(path)`` reads
# a file while ``trace.load`` is the instance's value.
Trace.load = classmethod(_load)


# -- patterns -----------------------------------------------------------------


@dataclass(frozen=True)
class PatternParam:
    """One parameter of a traffic pattern: its default, type, range and meaning; a ``str``
    parameter takes one of ``choices`` (its range unused)."""

    default: float | int | str | None
    kind: type
    lo: float
    hi: float
    doc: str
    choices: tuple[str, ...] = ()


def _pattern_params(ports: int) -> dict[str, dict[str, PatternParam]]:
    """The parameters each pattern takes, with their ranges for ``ports`` ports."""
    port = PatternParam(0, int, 0, ports - 1, "a port number")
    return {
        "hotspot": {"fraction": PatternParam(0.25, float, 0.0, 1.0,
                                             "share of packets sent to the hot port"),
                    "port": port},
        "incast": {"sources": PatternParam(ports - 1, int, 1, ports - 1,
                                           "inputs sending to the sink"),
                   "sink": port},
        "ring-allreduce": {"chunk": PatternParam(None, int, 1, math.inf,
                                                 "packets per input per step")},
        "bursty": {"burst": PatternParam(8.0, float, 1.0, math.inf, "mean packets per burst")},
    }


def parse_pattern(pattern: str, ports: int, *, names: tuple[str, ...] = PATTERNS,
                  params: dict[str, dict[str, PatternParam]] | None = None) -> tuple[str, dict]:
    """Split ``name:key=value,...`` and check every parameter against its range.

    ``names`` are the patterns allowed and ``params`` the parameters each
    takes (default: the switch patterns of this module); returns the name
    and every parameter's value, defaults filled in.
    """
    where = f"traffic.pattern = {pattern!r}"
    if not isinstance(pattern, str):
        raise TrafficError(f"{where}: must be one of {', '.join(names)}")
    name, colon, args = pattern.partition(":")
    if name not in names:
        raise TrafficError(f"{where}: unknown pattern {name!r} (allowed: {', '.join(names)})")
    table = (_pattern_params(ports) if params is None else params).get(name, {})
    values = {key: p.default for key, p in table.items()}
    given = set()
    for item in args.split(",") if colon else ():
        key, eq, text = (s.strip() for s in item.partition("="))
        if not table:
            raise TrafficError(f"{where}: {name} takes no parameters")
        if key not in table or not eq:
            raise TrafficError(f"{where}: {item!r} must be key=value with key one of "
                               f"{', '.join(table)}")
        if key in given:
            raise TrafficError(f"{where}: {key} given twice")
        given.add(key)
        p = table[key]
        if p.kind is str:
            if text not in p.choices:
                raise TrafficError(f"{where}: {key} = {text!r} must be one of "
                                   f"{', '.join(p.choices)} ({p.doc})")
            values[key] = text
            continue
        value = _number(text, integer=p.kind is int)
        if value is None or not p.lo <= value <= p.hi:
            bounds = f">= {p.lo:g}" if p.hi == math.inf else f"in {p.lo:g}..{p.hi:g}"
            kind = "an integer" if p.kind is int else "a number"
            raise TrafficError(f"{where}: {key} = {text!r} must be {kind} {bounds} ({p.doc})")
        values[key] = value
    if name == "transpose":
        bits = ports.bit_length() - 1
        if ports != 1 << bits or bits % 2:
            raise TrafficError(
                f"{where}: needs a power of two of endpoints with an even number of "
                f"address bits (4, 16, 64, ...), got {ports} ports")
    return name, values


def _number(text: str, *, integer: bool = False) -> float | int | None:
    """``text`` as a finite number (an int if ``integer``), or None."""
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# -- injection ----------------------------------------------------------------


def bernoulli_arrivals(rng: np.random.Generator, p: float, cycles: int,
                        senders: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bernoulli(p) arrivals per sender and cycle, sorted by (cycle, sender).

    The matrix is cycles x senders in row-major order, so ``np.nonzero``
    returns the arrivals already in trace order. Drawing it block by block
    takes the same numbers from ``rng`` as one draw would.
    """
    gens, srcs = [], []
    for start in range(0, cycles, _BLOCK_CYCLES):
        rows = min(_BLOCK_CYCLES, cycles - start)
        cycle, column = np.nonzero(rng.random((rows, senders.size)) < p)
        gens.append(cycle + start)
        srcs.append(senders[column])
    return np.concatenate(gens).astype(np.int64), np.concatenate(srcs).astype(np.int16)


def _bursty_arrivals(inject: np.random.Generator, route: np.random.Generator, ports: int,
                     load: float, mean_length: float, burst: float,
                     cycles: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """On/off arrivals per input, sorted by (cycle, input), with their outputs."""
    on_mean = burst * mean_length
    off_mean = on_mean * (1.0 - load) / load
    gens, srcs, dsts = [], [], []
    for port in range(ports):
        # Start in the steady state (on with probability load; the burst and
        # the off period are both memoryless), so a short run offers the same
        # load as a long one instead of opening with every input in a burst.
        start = 0.0 if inject.random() < load else inject.exponential(off_mean)
        sizes, offs, to = [], [], []
        end = start
        # At least one block, even when the first silence outlasts the run.
        while not sizes or end < cycles:
            k = int(max(cycles - end, 0) / (on_mean + off_mean)) + 16
            sizes.append(inject.geometric(1.0 / burst, k))
            offs.append(inject.exponential(off_mean, k))
            to.append(route.integers(0, ports, k))
            end += float(np.sum(sizes[-1] * mean_length + offs[-1]))
        size, off = np.concatenate(sizes), np.concatenate(offs)
        begin = start + np.concatenate(([0.0], np.cumsum(size * mean_length + off)[:-1]))
        first = np.cumsum(size) - size
        within = np.arange(size.sum()) - np.repeat(first, size)
        # Packets of a burst are mean_length >= 1 apart, and a burst begins at
        # least mean_length after the last one, so floor() keeps them apart.
        t = np.repeat(begin, size) + within * mean_length
        keep = t < cycles
        gens.append(np.floor(t[keep]).astype(np.int64))
        srcs.append(np.full(int(keep.sum()), port, dtype=np.int16))
        dsts.append(np.repeat(np.concatenate(to), size)[keep].astype(np.int16))
    gen, src, dst = np.concatenate(gens), np.concatenate(srcs), np.concatenate(dsts)
    # (cycle, input) is unique, so the order is total; the inputs are sorted
    # runs, which the stable sort merges in O(n log ports).
    order = np.argsort(gen * ports + src, kind="stable")
    return gen[order], src[order], dst[order]


def _index_within_source(src: np.ndarray, ports: int) -> np.ndarray:
    """For each packet, how many packets its input generated before it."""
    order = np.argsort(src, kind="stable")
    counts = np.bincount(src, minlength=ports)
    index = np.empty(src.size, dtype=np.int64)
    index[order] = np.arange(src.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return index


def _torus_step(topo: Topology, src: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """The endpoints at the same local port ``steps[:, d]`` routers ahead in every
    dimension ``d`` of the torus."""
    m = topo.endpoints_per_router
    router, port = src // m, src % m
    dst, stride = np.zeros_like(router), 1
    for d, k in enumerate(topo.dims):
        dst += (router // stride % k + steps[:, d]) % k * stride
        stride *= k
    return dst * m + port


def tornado(topo: Topology, src: np.ndarray, ports: int) -> np.ndarray:
    """Where each endpoint of ``src`` sends under ``tornado`` (see the module notes)."""
    s = np.asarray(src, np.int64)
    if topo.kind == "torus":
        steps = np.zeros((s.size, len(topo.dims)), np.int64)
        steps[:] = [-(-k // 2) - 1 for k in topo.dims]
        return _torus_step(topo, s, steps)
    return (s + -(-ports // 2) - 1) % ports


def ring_steps(topo: Topology, ports: int) -> int:
    """Steps of one ring all-reduce: ``2 (N - 1)``, or on a torus ``2 (k_d - 1)`` per
    dimension, the rings run one dimension after another."""
    if topo.kind == "torus":
        return sum(2 * (k - 1) for k in topo.dims)
    return 2 * (ports - 1)


def _route(name: str, params: dict, src: np.ndarray, ports: int, rng: np.random.Generator,
           topo: Topology) -> np.ndarray:
    """The output of every packet of a Bernoulli pattern."""
    s = src.astype(np.int64)
    if name == "tornado":
        return tornado(topo, s, ports).astype(np.int16)
    if topo.kind == "torus" and name in ("neighbour", "ring-allreduce"):
        steps = np.zeros((s.size, len(topo.dims)), np.int64)
        if name == "neighbour":
            steps[np.arange(s.size), _index_within_source(src, ports) % len(topo.dims)] = 1
        else:
            # Step j of an input's ring all-reduce runs in the dimension
            # whose block of 2 (k_d - 1) steps holds j.
            step = _index_within_source(src, ports) // params["chunk"]
            bounds = np.cumsum([2 * (k - 1) for k in topo.dims])
            steps[np.arange(s.size), np.searchsorted(bounds, step, side="right")] = 1
        return _torus_step(topo, s, steps).astype(np.int16)
    if name == "uniform":
        dst = rng.integers(0, ports, src.size)
    elif name == "permutation":
        dst = rng.permutation(ports)[s]
    elif name == "transpose":
        half = (ports.bit_length() - 1) // 2
        low = (1 << half) - 1
        dst = ((s & low) << half) | (s >> half)
    elif name == "bitcomp":
        dst = ports - 1 - s
    elif name == "hotspot":
        hot = rng.random(src.size) < params["fraction"]
        dst = np.where(hot, params["port"], rng.integers(0, ports, src.size))
    elif name == "incast":
        dst = np.full(src.size, params["sink"])
    elif name == "all-to-all":
        dst = (s + 1 + _index_within_source(src, ports) % (ports - 1)) % ports
    else:
        assert name in ("ring-allreduce", "neighbour"), name
        dst = (s + 1) % ports
    return dst.astype(np.int16)


# -- generate -----------------------------------------------------------------


def generate(cfg: FabricConfig, pattern: str, *, load: float, cycles: int, seed: int,
             packet_lengths: str = "fixed:1",
             priority_weights: list[float] | None = None, ect_fraction: float = 0.0) -> Trace:
    """Generate the packets of one run.

    Parameters
    ----------
    cfg : FabricConfig
        The fabric; uses its endpoints, ``switch.priorities`` and
        ``switch.max_packet_flits``.
    pattern : str
        One of :data:`PATTERNS`, optionally with ``:key=value,...``
        parameters; see the module documentation for each.
    load : float
        Offered load per active input, flits per cycle, ``0 < load <= 1``.
    cycles : int
        Packets are generated in cycles ``0..cycles-1``; ``cycles >= 1``.
    seed : int
        ``seed >= 0``; the same arguments give the same trace.
    packet_lengths : str
        ``"fixed:N"`` or ``"bimodal:SHORT,LONG,P_SHORT"``, see
        :func:`parse_lengths`.
    priority_weights : list of float, optional
        One non-negative weight per traffic class (``switch.priorities``
        entries, not all zero), normalised; the class of each packet is drawn
        from them. Default: uniform over all classes. Not allowed with
        ``ring-allreduce``, whose packets are all in the highest class.

    Returns
    -------
    Trace

    Raises
    ------
    TrafficError
        If any argument is out of range; the one-line message names the
        field, the value and what is allowed.
    """
    sw = cfg.switch
    ports = cfg.endpoints
    name, params, lengths, weights = check_traffic(
        cfg, pattern, load=load, cycles=cycles, seed=seed, packet_lengths=packet_lengths,
        priority_weights=priority_weights, ect_fraction=ect_fraction)
    load, cycles, seed = float(load), int(cycles), int(seed)

    # One stream per purpose, so a pattern that draws destinations does not
    # shift the injection times another pattern sees with the same seed.
    inject, route, classes, sizes, capable = (np.random.default_rng(s)
                                              for s in np.random.SeedSequence(seed).spawn(5))
    rate = load / lengths.mean
    if name == "bursty":
        gen, src, dst = _bursty_arrivals(inject, route, ports, load, lengths.mean,
                                         params["burst"], cycles)
    else:
        senders = np.arange(ports, dtype=np.int16)
        if name == "incast":
            senders = senders[senders != params["sink"]][:params["sources"]]
        gen, src = bernoulli_arrivals(inject, rate, cycles, senders)
        topo = Topology.of(cfg)
        if name == "ring-allreduce":
            steps = ring_steps(topo, ports)
            if params["chunk"] is None:
                params["chunk"] = max(1, math.ceil(cycles * rate / steps))
            done = _index_within_source(src, ports) >= steps * params["chunk"]
            gen, src = gen[~done], src[~done]
        dst = _route(name, params, src, ports, route, topo)

    n = gen.size
    if name == "ring-allreduce":
        prio = np.full(n, sw.priorities - 1, dtype=np.int8)
    else:
        prio = _draw_categorical(classes, weights, n).astype(np.int8)
    ecn = np.where(capable.random(n) < ect_fraction, ECT0, NOT_ECT).astype(np.int8)
    return Trace(gen=gen, src=src, dst=dst, prio=prio, length=lengths.draw(sizes, n),
                 tag=np.arange(n, dtype=np.int64), pattern=pattern, load=load, seed=seed,
                 cycles=cycles, packet_lengths=packet_lengths, ecn=ecn)


def check_traffic(cfg: FabricConfig, pattern: str, *, load: float, cycles: int, seed: int,
                  packet_lengths: str = "fixed:1", priority_weights: list[float] | None = None,
                  ect_fraction: float = 0.0):
    """Every check :func:`generate` makes of its arguments, without drawing a packet.

    Returns
    -------
    tuple
        The pattern's name and parameters (:func:`parse_pattern`), the
        :class:`PacketLengths` and the normalised class weights.

    Raises
    ------
    TrafficError
        As :func:`generate`.
    """
    name, params = parse_pattern(pattern, cfg.endpoints)
    check_load(load)
    check_integer("traffic.cycles", cycles, 1, "cycles of packet generation")
    check_integer("traffic.seed", seed, 0, "random seed")
    lengths = parse_lengths(packet_lengths, cfg.switch.max_packet_flits)
    weights = check_priority_weights(priority_weights, cfg.switch.priorities, name)
    if isinstance(ect_fraction, bool) or not isinstance(ect_fraction, numbers.Real) \
            or not 0.0 <= ect_fraction <= 1.0:
        raise TrafficError(f"traffic.ect_fraction = {ect_fraction!r}: must be in 0..1 "
                           f"(share of ECN-capable packets)")
    return name, params, lengths, weights


def check_load(load: object) -> None:
    """Refuse an offered load outside (0, 1] with a one-line :class:`TrafficError`."""
    if isinstance(load, bool) or not isinstance(load, numbers.Real) or not 0.0 < load <= 1.0:
        raise TrafficError(f"traffic.load = {load!r}: must be in (0, 1] "
                           f"(offered flits per input per cycle, 1 = line rate)")


def check_integer(where: str, value: object, lo: int, doc: str) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < lo:
        raise TrafficError(f"{where} = {value!r}: must be an integer >= {lo} ({doc})")


def check_priority_weights(weights: list[float] | None, priorities: int, pattern: str) -> np.ndarray:
    """The checked class weights, uniform if none are given."""
    where = f"traffic.priority_weights = {weights!r}"
    if weights is None:
        return np.ones(priorities)
    if pattern == "ring-allreduce":
        raise TrafficError(f"{where}: not allowed with ring-allreduce "
                           f"(its packets are all in the highest class)")
    allowed = (f"must be {priorities} (switch.priorities) non-negative numbers, "
               f"one per class, not all zero")
    try:
        w = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise TrafficError(f"{where}: {allowed}") from None
    if (w.shape != (priorities,) or not np.all(np.isfinite(w)) or np.any(w < 0)
            or w.sum() <= 0):
        raise TrafficError(f"{where}: {allowed}")
    return w
