"""Seeded work requests, memory registrations and host memory for the RDMA engines.

:func:`generate_rdma` turns a pattern, an offered load, a run length and a
seed into an :class:`RdmaWorkload`: the work requests (WRs) every endpoint
posts, its registration table and page table, and its host memory at the
start. The golden model and the testbench load the same workload, so both
see exactly the same requests, tables and memory
(``docs/architecture.md`` section 10.10).

Endpoints and QPs
    ``E = cfg.endpoints`` endpoints (the switch's ports or the fabric's),
    ``Q = rdma.qps / cfg.endpoints`` local QPs each. QP
    ``q`` of endpoint ``e`` has one fixed peer, never ``e``; every WR on it
    names that peer (except the deliberately bad ``self`` kind). Every QP
    carries at least one WR meant to succeed.

Rails
    With ``P = fabric.ports_per_accelerator`` above 1, everything below is
    drawn once per port ``k``, a *rail*, over ``E = cfg.accelerators``
    accelerators (accelerator ``a`` standing for its port ``k``), from the
    seed's ``SeedSequence`` children ``5k .. 5k+4``; then the rails' endpoint
    numbers and peer masks are mapped to the fabric's endpoints
    (``Topology.accelerator_endpoint``) and their rows merged, each endpoint's
    in its rail's order (``docs/architecture.md`` section 10.10). Port ``k``
    talks to port ``k`` of its peers only; pattern parameters name accelerators.

Host memory and registrations (all sizes in 64-bit words)
    Host memory is ``rdma.memory_words`` words, ``P = memory_words /
    page_words`` physical pages. The lower half is the *send area* (seeded
    random words), the upper half the *receive area* (zeros). Four entries
    of the registration table, at distinct random indices, with keys
    ``index + keys * h`` for a random non-zero ``h``:

    - ``local``: valid, local read, over the send area; every WR's ``lkey``.
    - ``remote``: valid, remote write, peers all endpoints but itself, over
      the receive area less one page; every WR's ``rkey``.
    - ``restricted``: valid, remote write, over that last receive page, with
      one peer only, ``(e + 1) mod E``; used by bad WRs only.
    - ``stale``: *not valid* (deregistered) but otherwise a region over the
      send area with both rights for every peer, so an engine that ignored
      the valid bit would visibly read or overwrite the send area.

    Each region starts at a random, unaligned virtual address and takes
    consecutive page table entries from a random start (wrapping modulo
    ``rdma.pages``); the entries hold a seeded permutation of the physical
    pages of the half the region covers, so translation is never the
    identity. Unused entries hold random physical page numbers.

Receive ranges
    Every WR gets a fresh range of its (drawn) length in the remote region
    of its QP's peer, allocated in row order, so a WR meant to succeed
    writes words that no other WR writes and the target memory can be
    checked per message. When the traffic does not fit the remote region a
    one-line :class:`~superfabric.config.ConfigError` names
    ``rdma.memory_words`` and the size needed; lengths are never shrunk.

Offered load
    A packet of ``n`` payload words costs ``n + 2`` flits and one idle cycle
    of the uplink (the transmitter idles a cycle between packets), so a WR
    of ``L`` words costs ``L + 3 * ceil(L / M)`` cycles, ``M`` the payload
    words per packet (``switch.max_packet_flits - 2``). ``load`` is the
    share of the uplink's cycles the WRs would occupy; acknowledgements and
    retransmissions are not counted.

Patterns
    ``rdma-uniform``
        Per endpoint, a WR is posted in each cycle ``0..cycles-1`` with
        probability ``load / mean cost`` (Bernoulli). QP peers are spread
        evenly over the other endpoints (a seeded shuffle, ``q``'s rank
        modulo ``E - 1``). An endpoint's first ``Q`` WRs use each QP once in
        a seeded order, later ones a uniform QP. 75 % WRITE, 25 % SEND.
        Lengths: 1-4 words with probability 0.6, 5-32 with 0.3, 33-256 with
        0.1, uniform within each bucket (mean 21.5 words). If an endpoint
        draws fewer than ``Q`` WRs, a one-line error asks for more cycles.
    ``rdma-allreduce``
        Ring all-reduce mapped onto RDMA WRITEs: every QP of endpoint ``e``
        talks to ``(e + 1) mod E``. ``2 (E - 1)`` steps; in step ``s`` each
        endpoint writes one chunk of the vector (``E`` chunks) to its
        successor: chunk ``(e - s) mod E`` in the reduce-scatter steps
        ``s < E - 1``, chunk ``(e + 1 - (s - E + 1)) mod E`` in the
        all-gather steps. A chunk is split into ``m = max(ceil(Q / steps),
        ceil(chunk / 32))`` messages of varied size (shares drawn uniformly
        in 0.5..1.5, at least one word each); the messages take the
        endpoint's QPs in a seeded rotating order, so every QP carries at
        least one. Step ``s`` is posted at ``s * step_gap``, with
        ``step_gap = ceil(largest step cost / load)``. The chunk is the
        largest that lets the steps fill ``cycles`` at ``load`` and lets all
        ``2 (E - 1)`` chunks (plus room for a bad WR's boundary test) fit the
        receiver's remote region; so the posts end at about ``cycles`` or,
        if the memory is the limit, earlier. The reduction itself (a step
        sending data computed from what the previous step received) is not
        modelled: every step sends the send area's initial words, and steps
        are paced by time, not by the completion of the previous step.
    ``rdma-alltoall``
        Pairwise-exchange all-to-all as RDMA WRITEs: ``E - 1`` steps; in
        step ``s`` endpoint ``e`` writes block ``d = (e + 1 + s) mod E`` of
        its send area (``E`` blocks of ``chunk`` words) to endpoint ``d``, so
        every step is a permutation and every pair exchanges one block. The
        chunk, its messages, the QPs and the step gap follow the rules of
        ``rdma-allreduce`` with ``E - 1`` steps.
    ``rdma-incast:target=T,senders=N``
        ``N`` senders (default every endpoint but the target, default 0;
        the first ``N`` after it, ascending and wrapping) each post, like
        ``rdma-uniform``, a Bernoulli stream at ``load`` of WRITEs (75 %)
        and SENDs of ``M / 2`` to ``4 M`` words, uniform, all to the target,
        on their QPs in turn. At ``load`` above ``1 / N`` of a sender's
        uplink the target's downlink is congested for as long as they post.
    ``rdma-victim:target=T,senders=N,victim=V,bystander=B,side_load=S``
        The incast of ``N`` senders (default every endpoint but the target;
        the first ``N`` after it, wrapping, taken in ascending order), where
        the victim (default ``T + 1``; one of the senders) also posts a
        second Bernoulli stream at load ``S`` (default: the load; ``load + S
        <= 1``) to the bystander (default ``T - 1``), an endpoint whose
        downlink nothing else loads: the victim's first ``Q / 2`` QPs (at
        least one) talk to the target, the others to the bystander. The
        victim's WRs to the bystander share its uplink, and its switch input
        (on a fabric, its router's input and whatever links its two routes
        share), with the congested ones.

Deliberately bad WRs (``bad_fraction``)
    That share of the WRs, taken from those that are not the first of their
    QP (so every QP keeps a good WR), is made bad, spread evenly over
    :data:`BAD_KINDS`; ``expect`` holds the status the engine must report
    and ``bad_kind`` the kind (index + 1, 0 for a good WR):

    - ``lkey`` (status 1): in turn a key whose index is the local region's
      but whose high bits differ, the stale key, or the endpoint's own
      remote key (registered, without the local read right).
    - ``local_range`` (1): in turn one word past the local region's end, or
      ending exactly at its start.
    - ``rkey`` (2): in turn a mismatching key at the remote region's index,
      the target's stale key, or the target's local key (no remote write).
    - ``remote_range`` (2): in turn one word past the remote region's end
      (the last words of the region are kept free of other WRs), or ending
      exactly at its start.
    - ``peer`` (2): the target's restricted region, which admits only
      ``(target + 1) mod E``; only WRs from other sources qualify, so with
      two endpoints this kind is absent and its share goes to the others.
    - ``self`` (3): ``dst`` is the sender itself.
    - ``empty`` (3): ``length`` 0.

    Bad WRs keep their own receive ranges or point outside the remote
    region's written part, so no good WR's range is touched by a bad one.

Errors
    Traffic arguments raise :class:`~superfabric.sim.traffic.TrafficError`,
    configuration values the workload cannot live with raise
    :class:`~superfabric.config.ConfigError`; both one line naming the
    field, the value and what is allowed.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...config import ConfigError, FabricConfig
from ...formats.rdma_wire import (ACCESS_LOCAL_READ, ACCESS_REMOTE_WRITE, KEY_BITS, OP_SEND,
                                 OP_WRITE, STATUS_BAD, STATUS_LOCAL, STATUS_OK, STATUS_REMOTE,
                                 VA_BITS, payload_words)
from ..traffic import (PatternParam, TrafficError, bernoulli_arrivals, check_integer,
                      parse_pattern, read_npz)

__all__ = ["RDMA_PATTERNS", "WR_COLUMNS", "KEY_COLUMNS", "BAD_KINDS", "RdmaWorkload",
           "generate_rdma", "wr_cost", "incast_roles", "pattern_roles",
           "PEER_WORD_BITS", "peer_words", "key_columns", "mask_columns", "key_entry"]

RDMA_PATTERNS: tuple[str, ...] = ("rdma-uniform", "rdma-allreduce", "rdma-alltoall", "rdma-incast",
                                  "rdma-victim")

#: The columns of :attr:`RdmaWorkload.wr` and their types.
WR_COLUMNS = {"post": np.int64, "src": np.int16, "qp": np.int32, "dst": np.int16,
              "opcode": np.int8, "lkey": np.int32, "laddr": np.int32, "rkey": np.int32,
              "raddr": np.int32, "length": np.int32, "tag": np.int64, "expect": np.int8,
              "bad_kind": np.int8}

#: The fields of a registration entry (section 10.3). The last axis of
#: :attr:`RdmaWorkload.keys` holds them in this order, the peer mask (``peers``, a bit per
#: endpoint) as :func:`peer_words` columns of :data:`PEER_WORD_BITS` bits, low word first.
KEY_COLUMNS = ("valid", "key", "va", "words", "page", "access", "peers")
#: Bits of a peer mask an int64 column holds.
PEER_WORD_BITS = 64
_WORD_MASK = (1 << PEER_WORD_BITS) - 1

#: Kinds of deliberately bad WRs and the completion status each must get.
BAD_KINDS = (("lkey", STATUS_LOCAL), ("local_range", STATUS_LOCAL), ("rkey", STATUS_REMOTE),
             ("remote_range", STATUS_REMOTE), ("peer", STATUS_REMOTE), ("self", STATUS_BAD),
             ("empty", STATUS_BAD))

# rdma-uniform: message length buckets (lowest, highest words) and their weights.
_UNIFORM_SIZES = ((1, 4), (5, 32), (33, 256))
_UNIFORM_WEIGHTS = (0.6, 0.3, 0.1)
_SEND_SHARE = 0.25
# rdma-allreduce: mean message length a chunk is cut into.
_ALLREDUCE_MESSAGE_WORDS = 32
# rdma-incast, rdma-victim: message lengths from half a packet's payload to four packets'.
_INCAST_PACKETS = (0.5, 4)
# Regions start this far from both ends of the 24-bit VA space, so a range
# that ends at a region's start or runs one word past its end stays a
# representable address.
_VA_MARGIN = 4096

_ROLES = ("local", "remote", "restricted", "stale")
_FORMAT = "superfabric.rdma_workload/1"
_META = {"pattern": str, "load": float, "seed": int, "cycles": int}


def wr_cost(length: np.ndarray | int, mtu_words: int) -> np.ndarray | int:
    """Uplink cycles of a WR of ``length`` words: per packet ``words + 2`` flits
    and one idle cycle, ``mtu_words`` payload words per packet."""
    return length + 3 * -(-length // mtu_words)


# -- the workload -------------------------------------------------------------


@dataclass(frozen=True)
class RdmaWorkload:
    """The work requests of one run and the endpoints' tables and memory.

    Attributes
    ----------
    pattern, load, seed, cycles
        As given to :func:`generate_rdma`. On the class, ``RdmaWorkload.load``
        is the file loader instead (see :meth:`load`).
    wr : dict of str to numpy.ndarray
        One row per WR, the columns of :data:`WR_COLUMNS`: ``post`` (cycle
        from which it is offered), ``src`` (endpoint), ``qp`` (local QP),
        ``dst``, ``opcode`` (``OP_WRITE`` / ``OP_SEND``), ``lkey``,
        ``laddr``, ``rkey``, ``raddr``, ``length`` (words), ``tag`` (the row
        index), ``expect`` (the status the generator intends) and
        ``bad_kind`` (0, or 1 + index into :data:`BAD_KINDS`). Rows are
        sorted by ``(src, post, row)``: each endpoint offers its WRs in row
        order.
    keys : numpy.ndarray of int64, shape ``[E, rdma.keys, key_columns(E)]``
        The registration tables, columns :data:`KEY_COLUMNS` (``peers`` a
        bit mask of endpoints, in :func:`peer_words` columns; :func:`key_entry` reads a
        row); a key's entry is ``key mod rdma.keys``.
    page_table : numpy.ndarray of int64, shape ``[E, rdma.pages]``
        Physical page numbers.
    memory : numpy.ndarray of uint64, shape ``[E, rdma.memory_words]``
        Host memory at the start.
    ports_per_accelerator : int
        ``fabric.ports_per_accelerator`` of the configuration it was made for: the
        pattern's roles (an incast's target and senders) are accelerators.
    """

    pattern: str
    load: float
    seed: int
    cycles: int
    wr: dict
    keys: np.ndarray
    page_table: np.ndarray
    memory: np.ndarray
    ports_per_accelerator: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.wr, dict) or set(self.wr) != set(WR_COLUMNS):
            raise TypeError(f"RdmaWorkload.wr: must be a dict with columns {', '.join(WR_COLUMNS)}")
        n = len(self.wr["post"])
        for name, dtype in WR_COLUMNS.items():
            column = self.wr[name]
            if not isinstance(column, np.ndarray) or column.dtype != dtype or column.shape != (n,):
                raise TypeError(f"RdmaWorkload.wr[{name!r}]: must be a 1-D {np.dtype(dtype)} "
                                f"array of {n} rows")
        tables = (("keys", np.int64, 3), ("page_table", np.int64, 2), ("memory", np.uint64, 2))
        for name, dtype, ndim in tables:
            a = getattr(self, name)
            if not isinstance(a, np.ndarray) or a.dtype != dtype or a.ndim != ndim \
                    or a.shape[0] != self.keys.shape[0]:
                raise TypeError(f"RdmaWorkload.{name}: must be a {ndim}-D {np.dtype(dtype)} "
                                f"array with one row per endpoint")
        P = self.ports_per_accelerator
        if isinstance(P, bool) or not isinstance(P, int) or P < 1 or self.keys.shape[0] % P:
            raise TypeError(f"RdmaWorkload.ports_per_accelerator = {P!r}: must be a positive "
                            f"integer dividing the endpoints ({self.keys.shape[0]})")
        if self.keys.shape[2] != key_columns(self.keys.shape[0]):
            raise TypeError(f"RdmaWorkload.keys: last axis must hold {', '.join(KEY_COLUMNS)} "
                            f"(the peer mask in {peer_words(self.keys.shape[0])} columns)")
        # A value shared by the model and the testbench: nobody may edit it.
        for a in (*self.wr.values(), self.keys, self.page_table, self.memory):
            a.flags.writeable = False

    def __len__(self) -> int:
        """The number of work requests."""
        return len(self.wr["post"])

    # Arrays compare element-wise, so the generated __eq__ cannot be used.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RdmaWorkload):
            return NotImplemented
        return (all(getattr(self, m) == getattr(other, m) for m in _META)
                and all(np.array_equal(self.wr[c], other.wr[c]) for c in WR_COLUMNS)
                and all(np.array_equal(getattr(self, t), getattr(other, t))
                        for t in ("keys", "page_table", "memory")))

    @property
    def endpoints(self) -> int:
        """The number of endpoints (``cfg.endpoints`` of the configuration it was made for)."""
        return self.keys.shape[0]

    @property
    def accelerators(self) -> int:
        """The number of accelerators (``cfg.accelerators``)."""
        return self.endpoints // self.ports_per_accelerator

    def describe(self) -> dict:
        """A JSON-friendly summary.

        Returns
        -------
        dict
            ``pattern``, ``load``, ``seed``, ``cycles``, ``endpoints``,
            ``accelerators``, ``ports_per_accelerator``, ``requests``, ``words``
            (payload of all WRs), ``writes``, ``sends``, ``good_requests`` and
            ``good_words`` (WRs meant to succeed), ``bad_requests`` (per kind),
            ``qps_used`` (QPs with a good WR), ``message_words``
            (``min``, ``mean``, ``max`` over good WRs), ``last_post``; for
            ``rdma-allreduce`` and ``rdma-alltoall`` also ``steps`` and ``step_gap``.
        """
        wr, n = self.wr, len(self)
        good = wr["expect"] == STATUS_OK
        lengths = wr["length"][good]
        qps = np.unique(wr["src"][good].astype(np.int64) << 32 | wr["qp"][good])
        d = {"pattern": self.pattern, "load": float(self.load), "seed": int(self.seed),
             "cycles": int(self.cycles), "endpoints": self.endpoints,
             "accelerators": self.accelerators,
             "ports_per_accelerator": int(self.ports_per_accelerator), "requests": n,
             "words": int(wr["length"].sum()),
             "writes": int((wr["opcode"] == OP_WRITE).sum()),
             "sends": int((wr["opcode"] == OP_SEND).sum()),
             "good_requests": int(good.sum()), "good_words": int(lengths.sum()),
             "bad_requests": {kind: int((wr["bad_kind"] == k + 1).sum())
                              for k, (kind, _) in enumerate(BAD_KINDS)},
             "qps_used": int(qps.size),
             "message_words": {"min": int(lengths.min()) if lengths.size else None,
                               "mean": float(lengths.mean()) if lengths.size else None,
                               "max": int(lengths.max()) if lengths.size else None},
             "last_post": int(wr["post"].max()) if n else None}
        if self.pattern in ("rdma-allreduce", "rdma-alltoall"):
            posts = np.unique(wr["post"])
            d["steps"] = int(posts.size)
            d["step_gap"] = int(posts[1] - posts[0]) if posts.size > 1 else None
        roles = incast_roles(self)
        if roles is not None:
            d.update(roles)
        return d

    def save(self, path: str | Path) -> None:
        """Write the workload to ``path`` as an uncompressed ``.npz`` file."""
        with open(path, "wb") as f:
            np.savez(f, format=np.str_(_FORMAT),
                     **{f"wr_{c}": self.wr[c] for c in WR_COLUMNS},
                     keys=self.keys, page_table=self.page_table, memory=self.memory,
                     ports_per_accelerator=np.asarray(self.ports_per_accelerator),
                     **{m: np.asarray(getattr(self, m)) for m in _META})


def _load(cls: type[RdmaWorkload], path: str | Path) -> RdmaWorkload:
    """Read a workload written by :meth:`RdmaWorkload.save`.

    Raises
    ------
    TrafficError
        If the file is missing or is not a workload.
    """
    names = [*(f"wr_{c}" for c in WR_COLUMNS), "keys", "page_table", "memory", *_META]
    data = read_npz(path, _FORMAT, "workload", "an RDMA workload", names)
    try:
        # Files written before accelerators had several ports have one.
        ports = int(data.get("ports_per_accelerator", 1))
        return cls(wr={c: data[f"wr_{c}"] for c in WR_COLUMNS}, keys=data["keys"],
                   page_table=data["page_table"], memory=data["memory"],
                   ports_per_accelerator=ports,
                   **{m: kind(data[m]) for m, kind in _META.items()})
    except TypeError as e:
        raise TrafficError(f"{path}: not an RDMA workload ({e})") from None


# As for Trace: the field ``load`` and the loader share a name, so the loader
# is attached after the class body, where it cannot become the field's default.
RdmaWorkload.load = classmethod(_load)


# -- generate -----------------------------------------------------------------


@dataclass
class _Layout:
    """Per-endpoint regions: key and VA of each role (filled in per endpoint), the
    words of each role, and the one peer each restricted region admits."""

    key: dict      # role -> int64[E]
    va: dict       # role -> int64[E]
    words: dict    # role -> int
    restricted_peer: np.ndarray


def generate_rdma(cfg: FabricConfig, pattern: str, *, load: float, cycles: int, seed: int,
                  bad_fraction: float = 0.0) -> RdmaWorkload:
    """Generate the work requests, tables and host memory of one RDMA run.

    Parameters
    ----------
    cfg : FabricConfig
        Uses ``cfg.endpoints``, ``switch.max_packet_flits`` and the ``[rdma]``
        sizes; ``rdma.enabled`` need not be set.
    pattern : str
        One of :data:`RDMA_PATTERNS`, with its parameters for ``rdma-incast``
        and ``rdma-victim`` (``rdma-incast:senders=3``).
    load : float
        Offered share of each endpoint's uplink, ``0 < load <= 1``.
    cycles : int
        WRs are posted in cycles ``0..cycles-1``; ``cycles >= 1``.
    seed : int
        ``seed >= 0``; the same arguments give the same workload.
    bad_fraction : float
        Share of deliberately bad WRs, ``0..1`` (see the module notes).

    Returns
    -------
    RdmaWorkload

    Raises
    ------
    TrafficError
        A traffic argument is out of range, or the run is too short for
        every QP to carry a WR.
    ConfigError
        A configuration value cannot hold the workload (registration
        entries, pages, host memory).
    """
    if isinstance(load, bool) or not isinstance(load, numbers.Real) or not 0.0 < load <= 1.0:
        raise TrafficError(f"traffic.load = {load!r}: must be in (0, 1] "
                           f"(offered share of each endpoint's uplink)")
    check_integer("traffic.cycles", cycles, 1, "cycles of posting")
    check_integer("traffic.seed", seed, 0, "random seed")
    if isinstance(bad_fraction, bool) or not isinstance(bad_fraction, numbers.Real) \
            or not 0.0 <= bad_fraction <= 1.0:
        raise TrafficError(f"traffic.bad_fraction = {bad_fraction!r}: must be in 0..1 "
                           f"(share of deliberately bad work requests)")
    load, cycles, seed, bad_fraction = float(load), int(cycles), int(seed), float(bad_fraction)
    name, params = _pattern(pattern, cfg.accelerators, load)
    _check_config(cfg, name)

    # Five streams per rail, one per purpose, so e.g. the bad share does not move the
    # posts; rail 0's are the seed's first five children, as with one port.
    P = cfg.fabric.ports_per_accelerator
    streams = np.random.SeedSequence(seed).spawn(5 * P)
    rails = [_rail(cfg, name, params, pattern, load, cycles, bad_fraction,
                   [np.random.default_rng(s) for s in streams[5 * k:5 * k + 5]])
             for k in range(P)]
    wr, keys, page_table, memory = rails[0] if P == 1 else _join_rails(cfg, rails)
    wr["tag"] = np.arange(len(wr["post"]), dtype=np.int64)
    wr = {c: np.asarray(wr[c]).astype(dtype) for c, dtype in WR_COLUMNS.items()}
    return RdmaWorkload(pattern=pattern, load=load, seed=seed, cycles=cycles, wr=wr, keys=keys,
                        page_table=page_table, memory=memory, ports_per_accelerator=P)


def _rail(cfg, name, params, pattern, load, cycles, bad_fraction, rngs):
    """One rail's WRs, tables and memory, its accelerators numbered ``0..A-1``."""
    layout_rng, post_rng, pick_rng, size_rng, bad_rng = rngs
    keys, page_table, memory, layout = _registrations(cfg, layout_rng)
    if name == "rdma-uniform":
        wr = _uniform(cfg, layout, load, cycles, post_rng, pick_rng, size_rng)
    elif name == "rdma-allreduce":
        wr = _allreduce(cfg, layout, load, cycles, pick_rng, size_rng)
    elif name == "rdma-alltoall":
        wr = _alltoall(cfg, layout, load, cycles, pick_rng, size_rng)
    else:
        wr = _incast(cfg, layout, load, cycles, post_rng, pick_rng, size_rng,
                     _roles(name, params, cfg.accelerators))
    wr["lkey"] = layout.key["local"][wr["src"]]
    wr["rkey"] = layout.key["remote"][wr["dst"]]
    _choose_bad(wr, layout, bad_fraction, bad_rng)
    _remote_ranges(cfg, pattern, wr, layout)
    _make_bad(cfg, wr, layout, bad_rng)
    return wr, keys, page_table, memory


def _join_rails(cfg, rails):
    """The rails' WRs, tables and memories as one fabric's: accelerator ``a`` of rail ``k``
    is the endpoint of port ``k`` of ``a`` (``Topology.accelerator_endpoint``), and a peer
    mask's bit ``a`` becomes that endpoint's bit. Each endpoint keeps its rows' order."""
    from ...network.topology import Topology
    topo = Topology.of(cfg)
    E, A = topo.endpoints, topo.accelerators
    ports = np.array(topo.accelerator_ports, np.int64)           # [A, P]
    fixed = len(KEY_COLUMNS) - 1
    keys = np.zeros((E, cfg.rdma.keys, key_columns(E)), np.int64)
    page_table = np.zeros((E, cfg.rdma.pages), np.int64)
    memory = np.zeros((E, cfg.rdma.memory_words), np.uint64)
    parts = []
    for k, (wr, rail_keys, rail_pages, rail_memory) in enumerate(rails):
        endpoint = ports[:, k]
        page_table[endpoint], memory[endpoint] = rail_pages, rail_memory
        for a in range(A):
            for i, row in enumerate(rail_keys[a]):
                peers = key_entry(row)["peers"]
                mask = sum(1 << int(endpoint[b]) for b in range(A) if peers >> b & 1)
                keys[endpoint[a], i] = [*row[:fixed], *mask_columns(mask, E)]
        parts.append({**wr, "src": endpoint[wr["src"]], "dst": endpoint[wr["dst"]]})
    wr = {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}
    order = np.argsort(wr["src"], kind="stable")
    return {c: v[order] for c, v in wr.items()}, keys, page_table, memory


def _pattern_params(ports: int) -> dict[str, dict[str, PatternParam]]:
    """The parameters of the RDMA patterns that take some, for ``ports`` endpoints."""
    endpoint = f"an endpoint, 0..{ports - 1}"
    target = PatternParam(0, int, 0, ports - 1, f"the congested endpoint, {endpoint}")
    senders = PatternParam(ports - 1, int, 1, max(1, ports - 1),
                           "endpoints sending to the target")
    return {
        "rdma-incast": {"target": target, "senders": senders},
        "rdma-victim": {"target": target, "senders": senders,
                        "victim": PatternParam(None, int, 0, ports - 1,
                                               f"the sender that also writes to the bystander, "
                                               f"{endpoint}"),
                        "bystander": PatternParam(None, int, 0, ports - 1,
                                                  f"the uncongested target, {endpoint}"),
                        "side_load": PatternParam(None, float, 0.0, 1.0,
                                                  "the victim's load to the bystander, a share of "
                                                  "its uplink (default: the load)")},
    }


def _pattern(pattern: str, ports: int, load: float) -> tuple[str, dict]:
    """The pattern's name and parameters (every one checked, defaults filled in)."""
    name, params = parse_pattern(pattern, ports, names=RDMA_PATTERNS,
                                 params=_pattern_params(ports))
    if name == "rdma-victim":
        where = f"traffic.pattern = {pattern!r}"
        t = params["target"]
        v = params["victim"] = (t + 1) % ports if params["victim"] is None else params["victim"]
        b = params["bystander"] = ((t - 1) % ports if params["bystander"] is None
                                   else params["bystander"])
        if ports < 3:
            raise TrafficError(f"{where}: needs at least 3 endpoints (target, victim, "
                               f"bystander), got {ports}")
        if len({t, v, b}) < 3:
            raise TrafficError(f"{where}: target {t}, victim {v} and bystander {b} must be "
                               f"three different endpoints")
        senders = _senders(t, params["senders"], ports)
        if v not in senders:
            raise TrafficError(f"{where}: victim {v} must be one of the {len(senders)} senders "
                               f"(the endpoints after the target {t}: "
                               f"{', '.join(map(str, senders))})")
        side = params["side_load"] = load if params["side_load"] is None else params["side_load"]
        if not 0 < side <= 1 - load + 1e-12:
            raise TrafficError(f"{where}: side_load = {side:g} must be above 0 and at most "
                               f"1 - traffic.load = {1 - load:g} (the victim also offers the load "
                               f"to the target on the same uplink)")
    return name, params


def _roles(name: str, params: dict, ports: int) -> dict:
    """Who sends to whom in ``rdma-incast`` and ``rdma-victim``."""
    t = params["target"]
    if name == "rdma-incast":
        senders = _senders(t, params["senders"], ports)
        return {"target": t, "senders": senders, "victim": None, "bystander": None,
                "side_load": 0.0}
    # Ascending, so that with every endpoint a sender (the default) the posts are
    # drawn as they were before the parameter existed.
    return {"target": t, "senders": sorted(_senders(t, params["senders"], ports)),
            "victim": params["victim"], "bystander": params["bystander"],
            "side_load": params["side_load"]}


def _senders(target: int, count: int, ports: int) -> list[int]:
    """The ``count`` endpoints after ``target``, wrapping: an incast's senders."""
    return [(target + 1 + k) % ports for k in range(count)]


def incast_roles(workload: "RdmaWorkload") -> dict | None:
    """For ``rdma-incast`` and ``rdma-victim`` workloads, ``target``, ``senders``,
    ``victim``, ``bystander`` (accelerators) and ``side_load`` (None, None and 0 for an
    incast); None for the other patterns."""
    return pattern_roles(workload.pattern, workload.accelerators, workload.load)


def pattern_roles(pattern: str, accelerators: int, load: float) -> dict | None:
    """:func:`incast_roles` of the workload ``pattern`` would make for ``accelerators`` at
    ``load``, without making it; a bad pattern raises :class:`TrafficError`."""
    name, params = _pattern(pattern, accelerators, load)
    if name not in ("rdma-incast", "rdma-victim"):
        return None
    return _roles(name, params, accelerators)


def _check_config(cfg: FabricConfig, pattern: str) -> None:
    """The configuration values the workload needs, each a one-line ConfigError."""
    sw, r = cfg.switch, cfg.rdma
    if payload_words(sw.max_packet_flits) < 1:
        raise ConfigError(f"switch.max_packet_flits = {sw.max_packet_flits}: must be at least 3 "
                          f"for rdma traffic (two header flits and a payload word)")
    E, A = cfg.endpoints, cfg.accelerators
    if r.qps % E or r.qps < E:
        raise ConfigError(f"rdma.qps = {r.qps}: must be a non-zero multiple of the endpoints "
                          f"({E}) for rdma traffic")
    if r.keys < len(_ROLES):
        raise ConfigError(f"rdma.keys = {r.keys}: must be at least {len(_ROLES)} for rdma "
                          f"traffic (local, remote, peer-restricted and deregistered entries)")
    frames = r.memory_words // r.page_words
    if frames < 4:
        raise ConfigError(f"rdma.page_words = {r.page_words}: must be at most rdma.memory_words "
                          f"/ 4 ({r.memory_words // 4}) for rdma traffic (send area, remote "
                          f"region and restricted page are whole pages)")
    if r.pages < frames:
        raise ConfigError(f"rdma.pages = {r.pages}: must be at least {frames} (rdma.memory_words "
                          f"/ rdma.page_words) for rdma traffic, one entry per page of memory")
    if pattern == "rdma-alltoall" and r.qps < E * (A - 1):
        raise ConfigError(f"rdma.qps = {r.qps}: must be at least {E * (A - 1)} for rdma-alltoall "
                          f"(a QP has one peer, and every endpoint writes to all {A - 1} others "
                          f"of its rail)")
    if pattern == "rdma-victim" and r.qps < 2 * E:
        raise ConfigError(f"rdma.qps = {r.qps}: must be at least {2 * E} for rdma-victim "
                          f"(two QPs per endpoint: the victim talks to two targets)")
    longest = _UNIFORM_SIZES[-1][1]
    if pattern == "rdma-uniform" and r.memory_words // 2 < longest:
        raise ConfigError(f"rdma.memory_words = {r.memory_words}: must be at least {2 * longest} "
                          f"for rdma-uniform (its longest message, {longest} words, must fit the "
                          f"send area, the lower half)")


def _registrations(cfg: FabricConfig, rng: np.random.Generator):
    """A rail's registration tables, page tables, host memory and the regions' layout."""
    E, r = cfg.accelerators, cfg.rdma
    frames = r.memory_words // r.page_words
    half = frames // 2
    send_words = half * r.page_words
    words = {"local": send_words, "remote": (half - 1) * r.page_words,
             "restricted": r.page_words, "stale": send_words}
    everyone = (1 << E) - 1
    high = (1 << KEY_BITS) // r.keys
    keys = np.zeros((E, r.keys, key_columns(E)), np.int64)
    page_table = rng.integers(0, frames, (E, r.pages), dtype=np.int64)
    memory = np.zeros((E, r.memory_words), np.uint64)
    layout = _Layout(key={k: np.zeros(E, np.int64) for k in _ROLES},
                     va={k: np.zeros(E, np.int64) for k in _ROLES}, words=words,
                     restricted_peer=(np.arange(E) + 1) % E)
    for e in range(E):
        memory[e, :send_words] = rng.integers(0, 1 << 64, send_words, dtype=np.uint64,
                                              endpoint=False)
        # Consecutive entries from a random start: local, remote, restricted.
        start = int(rng.integers(0, r.pages))
        page_table[e, (start + np.arange(frames)) % r.pages] = np.concatenate(
            (rng.permutation(half), half + rng.permutation(half)))
        first = {"local": start, "remote": (start + half) % r.pages,
                 "restricted": (start + frames - 1) % r.pages, "stale": start}
        rights = {"local": ACCESS_LOCAL_READ, "remote": ACCESS_REMOTE_WRITE,
                  "restricted": ACCESS_REMOTE_WRITE,
                  "stale": ACCESS_LOCAL_READ | ACCESS_REMOTE_WRITE}
        peers = {role: mask_columns(mask, E) for role, mask in
                 (("local", 0), ("remote", everyone & ~(1 << e)),
                  ("restricted", 1 << int(layout.restricted_peer[e])),
                  ("stale", everyone & ~(1 << e)))}
        index = rng.permutation(r.keys)[:len(_ROLES)]
        for role, i in zip(_ROLES, index):
            key = int(i) + r.keys * int(rng.integers(1, high))
            va = int(rng.integers(_VA_MARGIN, (1 << VA_BITS) - words[role] - _VA_MARGIN + 1))
            keys[e, i] = (role != "stale", key, va, words[role], first[role], rights[role],
                          *peers[role])
            layout.key[role][e], layout.va[role][e] = key, va
    return keys, page_table, memory, layout


def peer_words(endpoints: int) -> int:
    """Columns of the keys array that hold a peer mask of ``endpoints`` bits."""
    return max(1, -(-endpoints // PEER_WORD_BITS))


def key_columns(endpoints: int) -> int:
    """The length of the keys array's last axis with ``endpoints`` endpoints."""
    return len(KEY_COLUMNS) - 1 + peer_words(endpoints)


def mask_columns(mask: int, endpoints: int) -> list[int]:
    """A peer mask as the keys array holds it: :func:`peer_words` int64 columns, low word
    first, each the word's 64 bits in two's complement (so that a word's top bit is its
    sign bit)."""
    words = [(mask >> (PEER_WORD_BITS * k)) & _WORD_MASK for k in range(peer_words(endpoints))]
    return [w - (1 << PEER_WORD_BITS) if w >> (PEER_WORD_BITS - 1) else w for w in words]


def key_entry(row) -> dict[str, int]:
    """A row of the keys array as the fields of :data:`KEY_COLUMNS`, the peer mask joined."""
    fixed = len(KEY_COLUMNS) - 1
    values = [int(v) for v in row]
    peers = sum((w & _WORD_MASK) << (PEER_WORD_BITS * k) for k, w in enumerate(values[fixed:]))
    return dict(zip(KEY_COLUMNS, values[:fixed] + [peers]))


def _uniform(cfg, layout, load, cycles, post_rng, pick_rng, size_rng) -> dict:
    """rdma-uniform: Bernoulli posts, fixed QP peers, mixed WRITE/SEND and sizes."""
    E, Q = cfg.accelerators, cfg.rdma.qps // cfg.endpoints
    mtu = payload_words(cfg.switch.max_packet_flits)
    mean_cost = sum(w * float(np.mean(wr_cost(np.arange(lo, hi + 1), mtu)))
                    for (lo, hi), w in zip(_UNIFORM_SIZES, _UNIFORM_WEIGHTS))
    post, src = bernoulli_arrivals(post_rng, load / mean_cost, cycles,
                                    np.arange(E, dtype=np.int16))
    order = np.argsort(src, kind="stable")
    post, src = post[order], src[order]
    counts = np.bincount(src, minlength=E)
    if counts.min() < Q:
        e = int(counts.argmin())
        # Enough for Q + 4 standard deviations of Bernoulli posts.
        need = math.ceil((Q + 4 * math.sqrt(Q)) * mean_cost / load)
        raise TrafficError(f"traffic.cycles = {cycles}: {_who(cfg, e)} posts only {counts[e]} "
                           f"work requests at load {load:g}, fewer than its {Q} QPs, and every "
                           f"QP must carry one; use about {need} cycles or more")
    n = post.size
    within = np.arange(n) - np.repeat(np.cumsum(counts) - counts, counts)
    rank = pick_rng.permuted(np.tile(np.arange(Q), (E, 1)), axis=1)
    peer = (np.arange(E)[:, None] + 1 + rank % (E - 1)) % E
    first_q = pick_rng.permuted(np.tile(np.arange(Q), (E, 1)), axis=1)
    qp = np.where(within < Q, first_q[src, np.minimum(within, Q - 1)],
                  pick_rng.integers(0, Q, n))
    opcode = np.where(pick_rng.random(n) < _SEND_SHARE, OP_SEND, OP_WRITE)
    bucket = size_rng.choice(len(_UNIFORM_SIZES), n, p=_UNIFORM_WEIGHTS)
    lo = np.array([b[0] for b in _UNIFORM_SIZES])[bucket]
    hi = np.array([b[1] for b in _UNIFORM_SIZES])[bucket]
    length = lo + (size_rng.random(n) * (hi - lo + 1)).astype(np.int64)
    send_words = layout.words["local"]
    laddr = layout.va["local"][src] + (size_rng.random(n) * (send_words - length + 1)).astype(
        np.int64)
    return {"post": post, "src": src, "qp": qp, "dst": peer[src, qp], "opcode": opcode,
            "length": length, "laddr": laddr}


def _allreduce(cfg, layout, load, cycles, pick_rng, size_rng) -> dict:
    """rdma-allreduce: 2 (E - 1) steps of one chunk to the successor, as WRITEs."""
    E = cfg.accelerators

    def schedule(e, s):
        chunk = (e - s) % E if s < E - 1 else (e + 1 - (s - (E - 1))) % E
        return (e + 1) % E, chunk, slice(None)

    return _stepped(cfg, layout, load, cycles, pick_rng, size_rng, "rdma-allreduce",
                    2 * (E - 1), schedule)


def _alltoall(cfg, layout, load, cycles, pick_rng, size_rng) -> dict:
    """rdma-alltoall: E - 1 steps; in step ``s`` endpoint ``e`` writes its block for
    ``(e + 1 + s) mod E`` (the block's index is the peer) to that peer, on the QPs
    ``q`` with ``q mod (E - 1) = s``, whose peer that is."""
    E, Q = cfg.accelerators, cfg.rdma.qps // cfg.endpoints
    step_of_qp = np.arange(Q) % (E - 1)

    def schedule(e, s):
        peer = (e + 1 + s) % E
        return peer, peer, step_of_qp == s

    return _stepped(cfg, layout, load, cycles, pick_rng, size_rng, "rdma-alltoall", E - 1,
                    schedule)


def _stepped(cfg, layout, load, cycles, pick_rng, size_rng, name, steps, schedule) -> dict:
    """A collective's WRITEs in ``steps`` timed steps: ``schedule(e, s)`` gives the peer
    endpoint ``e`` writes to in step ``s``, the chunk of its send area it writes and the
    QPs it may use (an index into its QPs: those whose peer that is); the chunk size, the
    messages a chunk is cut into and the step gap as the module's docstring says for
    ``rdma-allreduce``."""
    E, Q = cfg.accelerators, cfg.rdma.qps // cfg.endpoints
    mtu = payload_words(cfg.switch.max_packet_flits)
    fewest = -(-Q // steps)      # messages per step so that every QP gets one

    def messages(chunk):
        return max(fewest, -(-chunk // _ALLREDUCE_MESSAGE_WORDS))

    def cost(chunk):             # a bound on a step's uplink cycles; sizes are drawn later
        return chunk + 3 * (messages(chunk) + chunk // mtu)

    def longest(chunk):          # bound on a message: shares at most 3x the mean, plus rounding
        m = messages(chunk)
        return 2 + 3 * (chunk - m) // m

    # Room for every chunk and for a bad WR that runs past the region's end.
    remote_words = layout.words["remote"]

    def fits(chunk):
        return chunk * steps + longest(chunk) - 1 <= remote_words

    budget = load * cycles / steps
    if not fits(fewest):
        need = 2 * (layout.words["restricted"] + steps * fewest + longest(fewest))
        raise ConfigError(f"rdma.memory_words = {cfg.rdma.memory_words}: too small for "
                          f"{name}, whose {steps} steps of at least {fewest} words must "
                          f"fit the receive area; use at least {1 << (need - 1).bit_length()}")
    if cost(fewest) > budget:
        need = math.ceil(steps * cost(fewest) / load)
        raise TrafficError(f"traffic.cycles = {cycles}: too short for {name} at load "
                           f"{load:g}, whose {steps} steps need at least {fewest} one-word "
                           f"messages each so that every one of the {Q} QPs carries one; use at "
                           f"least {need} cycles")
    lo, hi = fewest, remote_words + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) and cost(mid) <= budget else (lo, mid)
    chunk, m = lo, messages(lo)

    src, step, dst, qp, length, laddr = [], [], [], [], [], []
    for e in range(E):
        rotation = pick_rng.permutation(Q)
        for s in range(steps):
            weight = size_rng.uniform(0.5, 1.5, m)
            share = (chunk - m) * weight / weight.sum()
            sizes = np.floor(share).astype(np.int64)
            sizes[np.argsort(sizes - share)[:chunk - m - sizes.sum()]] += 1
            sizes += 1
            peer, c, usable = schedule(e, s)
            mine = rotation[np.isin(rotation, np.arange(Q)[usable])]
            src.append(np.full(m, e))
            step.append(np.full(m, s))
            dst.append(np.full(m, peer))
            qp.append(mine[(s * m + np.arange(m)) % mine.size])
            length.append(sizes)
            laddr.append(layout.va["local"][e] + c * chunk + np.cumsum(sizes) - sizes)
    src, step, length = np.concatenate(src), np.concatenate(step), np.concatenate(length)
    step_cost = np.bincount(src * steps + step, weights=wr_cost(length, mtu))
    gap = math.ceil(step_cost.max() / load)
    return {"post": step * gap, "src": src, "qp": np.concatenate(qp), "dst": np.concatenate(dst),
            "opcode": np.full(src.size, OP_WRITE), "length": length,
            "laddr": np.concatenate(laddr)}


def _incast(cfg, layout, load, cycles, post_rng, pick_rng, size_rng, roles) -> dict:
    """rdma-incast and rdma-victim: Bernoulli posts of every sender to the target, and of
    the victim to the bystander."""
    Q = cfg.rdma.qps // cfg.endpoints
    mtu = payload_words(cfg.switch.max_packet_flits)
    lo, hi = max(1, round(_INCAST_PACKETS[0] * mtu)), round(_INCAST_PACKETS[1] * mtu)
    mean_cost = float(np.mean(wr_cost(np.arange(lo, hi + 1), mtu)))
    senders = np.array(roles["senders"], np.int16)
    post, src = bernoulli_arrivals(post_rng, load / mean_cost, cycles, senders)
    dst = np.full(post.size, roles["target"], np.int64)
    victim = roles["victim"]
    if victim is not None:
        side, side_src = bernoulli_arrivals(post_rng, roles["side_load"] / mean_cost, cycles,
                                            np.array([victim], np.int16))
        post, src = np.concatenate((post, side)), np.concatenate((src, side_src))
        dst = np.concatenate((dst, np.full(side.size, roles["bystander"], np.int64)))
    order = np.lexsort((dst, post, src))
    post, src, dst = post[order], src[order], dst[order]
    n = post.size
    # Each flow takes its sender's QPs in turn; the victim's first half (at
    # least one) talk to the target, the others to the bystander.
    first = np.zeros(n, np.int64)
    count = np.full(n, Q, np.int64)
    if victim is not None:
        half = max(1, Q // 2)
        mine = src == victim
        aside = dst == roles["bystander"]
        first[aside] = half
        count[mine] = np.where(aside[mine], Q - half, half)
    flow = src.astype(np.int64) * cfg.accelerators + dst
    rank = np.zeros(n, np.int64)
    for f in np.unique(flow):
        rows = np.flatnonzero(flow == f)
        rank[rows] = np.arange(rows.size)
    qp = first + rank % count
    if np.unique(src.astype(np.int64) * Q + qp).size < len(senders) * Q:
        # Enough for Q + 4 standard deviations of Bernoulli posts on the thinnest flow.
        thinnest = min(load, roles["side_load"]) if victim is not None else load
        need = math.ceil((Q + 4 * math.sqrt(Q)) * mean_cost / thinnest)
        raise TrafficError(f"traffic.cycles = {cycles}: the senders post too few work requests "
                           f"at load {load:g} for each of their {Q} QPs to carry one; use about "
                           f"{need} cycles or more")
    opcode = np.where(pick_rng.random(n) < _SEND_SHARE, OP_SEND, OP_WRITE)
    length = size_rng.integers(lo, hi + 1, n)
    send_words = layout.words["local"]
    laddr = layout.va["local"][src] + (size_rng.random(n) * (send_words - length + 1)).astype(
        np.int64)
    return {"post": post, "src": src, "qp": qp, "dst": dst, "opcode": opcode, "length": length,
            "laddr": laddr}


def _choose_bad(wr, layout, bad_fraction, rng) -> None:
    """Pick the bad rows and their kinds (``bad_kind``, ``expect``), evenly over the kinds."""
    n = len(wr["post"])
    wr["bad_kind"] = np.zeros(n, np.int8)
    wr["expect"] = np.full(n, STATUS_OK, np.int8)
    # The first WR of each QP stays good, so every QP carries a good one.
    qp_id = wr["src"].astype(np.int64) * (1 << 32) + wr["qp"]
    _, first = np.unique(qp_id, return_index=True)
    free = np.ones(n, bool)
    free[first] = False
    eligible = {kind: free.copy() for kind, _ in BAD_KINDS}
    eligible["peer"] &= layout.restricted_peer[wr["dst"]] != wr["src"]
    kinds = [k for k, (kind, _) in enumerate(BAD_KINDS) if eligible[kind].any()]
    total = min(round(bad_fraction * n), int(free.sum()))
    # The most constrained kind (peer) picks first, so the others cannot
    # take all of its rows.
    kinds.sort(key=lambda k: int(eligible[BAD_KINDS[k][0]].sum()))
    for j, k in enumerate(kinds):
        kind, status = BAD_KINDS[k]
        want = total // len(kinds) + (j < total % len(kinds))
        rows = np.flatnonzero(eligible[kind] & free)
        rows = rng.choice(rows, min(want, rows.size), replace=False)
        free[rows] = False
        wr["bad_kind"][rows] = k + 1
        wr["expect"][rows] = status


def _kind_rows(wr, kind):
    """The rows of one bad kind in row order, and each one's flavour (0, 1, 2, ...)."""
    k = [name for name, _ in BAD_KINDS].index(kind) + 1
    rows = np.flatnonzero(wr["bad_kind"] == k)
    return rows, np.arange(rows.size)


def _remote_ranges(cfg, pattern, wr, layout) -> None:
    """Give every WR a fresh range in its QP peer's remote region, in row order.

    Ranges are allocated for every row, bad ones included and with the
    drawn length, so the good WRs' ranges do not depend on ``bad_fraction``.
    The last words of a region stay free when a bad WR runs past its end.
    """
    E = cfg.accelerators
    dst, length = wr["dst"].astype(np.int64), wr["length"].astype(np.int64)
    order = np.argsort(dst, kind="stable")
    used = np.bincount(dst, weights=length, minlength=E).astype(np.int64)
    offset = np.empty_like(length)
    offset[order] = np.cumsum(length[order]) - length[order]
    offset -= (np.cumsum(used) - used)[dst]
    wr["raddr"] = layout.va["remote"][dst] + offset
    rows, flavour = _kind_rows(wr, "remote_range")
    past_end = rows[flavour % 2 == 0]
    guard = np.zeros(E, np.int64)
    np.maximum.at(guard, dst[past_end], length[past_end] - 1)
    need = used + guard
    room = layout.words["remote"]
    if need.max() > room:
        d = int(need.argmax())
        suggest = 1 << (2 * (int(need.max()) + layout.words["restricted"]) - 1).bit_length()
        raise ConfigError(f"rdma.memory_words = {cfg.rdma.memory_words}: {_who(cfg, d)} must "
                          f"receive {int(need[d])} words of {pattern} traffic but its remote "
                          f"region holds {room} (the upper half less one page); use "
                          f"rdma.memory_words = {suggest} or lower traffic.load or traffic.cycles")


def _who(cfg, a) -> str:
    """Accelerator ``a`` of a rail in an error message: its endpoint with one port."""
    P = cfg.fabric.ports_per_accelerator
    return f"endpoint {a}" if P == 1 else f"a port of accelerator {a} (one of {P})"


def _make_bad(cfg, wr, layout, rng) -> None:
    """Rewrite the bad rows so that each fails exactly as its kind says."""
    keys = cfg.rdma.keys
    high = (1 << KEY_BITS) // keys

    def other_key(key):
        # Same entry index, other non-zero high bits: a key nobody registered.
        h = (key // keys - 1 + int(rng.integers(1, high - 1))) % (high - 1) + 1
        return key % keys + keys * h

    def inside(role, end, length):
        span = layout.words[role] - length
        return layout.va[role][end] + (int(rng.integers(0, span + 1)) if span >= 0 else 0)

    for i, f in zip(*_kind_rows(wr, "lkey")):
        e, L = wr["src"][i], wr["length"][i]
        if f % 3 == 0:
            wr["lkey"][i] = other_key(layout.key["local"][e])
        elif f % 3 == 1:
            wr["lkey"][i] = layout.key["stale"][e]
        else:
            wr["lkey"][i] = layout.key["remote"][e]
            wr["laddr"][i] = inside("remote", e, L)
    for i, f in zip(*_kind_rows(wr, "local_range")):
        e, L = wr["src"][i], wr["length"][i]
        start = layout.va["local"][e]
        wr["laddr"][i] = start + layout.words["local"] - L + 1 if f % 2 == 0 else start - L
    for i, f in zip(*_kind_rows(wr, "rkey")):
        d, L = wr["dst"][i], wr["length"][i]
        if f % 3 == 0:
            wr["rkey"][i] = other_key(layout.key["remote"][d])
        else:
            role = "stale" if f % 3 == 1 else "local"
            wr["rkey"][i] = layout.key[role][d]
            wr["raddr"][i] = inside(role, d, L)
    for i, f in zip(*_kind_rows(wr, "remote_range")):
        d, L = wr["dst"][i], wr["length"][i]
        start = layout.va["remote"][d]
        wr["raddr"][i] = start + layout.words["remote"] - L + 1 if f % 2 == 0 else start - L
    for i, _ in zip(*_kind_rows(wr, "peer")):
        d = wr["dst"][i]
        wr["length"][i] = L = min(wr["length"][i], layout.words["restricted"])
        wr["rkey"][i] = layout.key["restricted"][d]
        wr["raddr"][i] = inside("restricted", d, L)
    rows, _ = _kind_rows(wr, "self")
    wr["dst"][rows] = wr["src"][rows]
    rows, _ = _kind_rows(wr, "empty")
    wr["length"][rows] = 0
