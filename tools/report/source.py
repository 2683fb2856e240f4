"""What a report is made from: run and sweep directories, read into :class:`Source`.

A run directory holds ``results.json`` and ``packets.npz`` (written by
:func:`superfabric.tools.run.run_point`), or for RDMA traffic
``workload.npz`` and the records; a sweep directory holds ``sweep.json``
and, per point, a run directory ``points/<id>/`` or, when the point failed,
``points/<id>/error.json``. Every problem with them is a :class:`ReportError`
naming the file, in one line, except for one sweep point's unreadable
``results.json``: that point is reported as failed, with the problem as its
error, and the rest of the sweep is reported.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ...sim.collective.pattern import PATTERN as COLLECTIVE
from ...sim.rdma.traffic import RDMA_PATTERNS

__all__ = ["ReportError", "Point", "Source", "KIND_NAMES", "load_source", "read_json",
           "pattern_kind", "variant_label", "distinct"]


class ReportError(ValueError):
    """A report source that cannot be used; the message is one line naming it."""


@dataclass(frozen=True)
class Point:
    """One run of the report: a run directory, or a sweep point that failed.

    Attributes
    ----------
    id : str
        The sweep point's id, or the run directory's name.
    dir : pathlib.Path
        The run directory.
    pattern, load, seed, sim
        The traffic pattern (with its parameters), offered load, seed and
        simulator of the run.
    vary : dict
        The config keys this sweep point varies (``{}`` for a single run).
    results : dict or None
        The parsed ``results.json``; ``None`` when the point failed.
    error : str or None
        The one-line error of a failed point.
    """

    id: str
    dir: Path
    pattern: str
    load: float | None
    seed: int
    sim: str
    vary: dict = field(default_factory=dict)
    results: dict | None = None
    error: str | None = None

    @property
    def variant(self) -> str:
        """The varied config keys as ``key=value, ...``; ``base`` when none."""
        return variant_label(self.vary)

    @property
    def rtl(self) -> bool:
        """True when an RTL simulator ran (and the model ran beside it)."""
        return self.sim != "model"

    @property
    def kind(self) -> str:
        """:func:`pattern_kind` of its pattern."""
        return pattern_kind(self.pattern)

    def describe(self) -> str:
        """Pattern, variant, load (none for a collective), seed and simulator, for the
        report's lists."""
        load = "" if self.load is None else f"load {self.load:g}, "
        return f"{self.pattern}, {self.variant}, {load}seed {self.seed}, {self.sim} ({self.id})"


#: Each kind of run as a sentence names it.
KIND_NAMES = {"switch": "switch", "rdma": "RDMA", "collective": "collective"}


def pattern_kind(pattern: str) -> str:
    """``rdma`` for an ``rdma-*`` pattern, ``collective`` for ``collective:``, ``switch``
    otherwise."""
    # The one rule: prepare_point dispatches by it, and superfabric run's --threads.
    name = pattern.partition(":")[0]
    return "collective" if name == COLLECTIVE else "rdma" if name in RDMA_PATTERNS else "switch"


def variant_label(vary: dict) -> str:
    """The varied config keys as ``key=value, ...``; ``base`` when none."""
    # Sweep ids use the last part of a key too; a config has one [switch]
    # section today, so the short name is unambiguous and keeps legends short.
    short = [k.split(".")[-1] for k in vary]
    names = short if len(set(short)) == len(short) else list(vary)
    return ", ".join(f"{n}={v}" for n, v in zip(names, vary.values())) or "base"


def distinct(values) -> str:
    """The distinct values, sorted, comma-separated."""
    return ", ".join(str(v) for v in sorted(set(values), key=lambda v: (str(type(v)), v)))


@dataclass
class Source:
    """What a report is made from.

    Attributes
    ----------
    path : pathlib.Path
        The run or sweep directory.
    points : list of Point
        Every run, failed sweep points included.
    spec : dict or None
        The sweep command's arguments (``sweep.json``); ``None`` for one run.
    missing : list of str
        Sweep points with neither ``results.json`` nor ``error.json`` (not run
        yet, or interrupted).
    """

    path: Path
    points: list[Point]
    spec: dict | None = None
    missing: list[str] = field(default_factory=list)

    @property
    def ok(self) -> list[Point]:
        """The points that ran and wrote ``results.json``."""
        return [p for p in self.points if p.results is not None]

    @property
    def kind(self) -> str:
        """``switch``, ``rdma`` or ``collective``, from the patterns of the points (or of the
        sweep's spec).

        Raises
        ------
        ReportError
            When the source holds more than one kind of run.
        """
        patterns = [p.pattern for p in self.points] or list((self.spec or {}).get("traffic", []))
        kinds = defaultdict(list)
        for pattern in patterns:
            kinds[pattern_kind(pattern)].append(pattern)
        if len(kinds) > 1:
            (a, first), (b, second) = list(kinds.items())[:2]
            raise ReportError(f"{self.path}: mixes {KIND_NAMES[a]} traffic ({distinct(first)}) "
                              f"and {KIND_NAMES[b]} traffic ({distinct(second)}); report them "
                              f"apart")
        return next(iter(kinds), "switch")


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    except OSError as e:
        raise ReportError(f"{path}: cannot be read ({e.strerror})") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path}: must hold a JSON object, not {type(data).__name__}")
    return data


#: The sections of results.json the report reads, for every run and per kind of run.
_RESULTS_KEYS = ("config", "simulator", "traffic", "model")
_KIND_KEYS = {"switch": ("packets", "throughput", "latency"), "rdma": ("rdma",),
              "collective": ("collective",)}


def _load(pattern: str, load) -> float | None:
    """A run's offered load: none for a collective (it runs until it is done), else a number."""
    return None if pattern_kind(pattern) == "collective" else float(load)


def _point_from_results(path: Path) -> Point:
    res = read_json(path)
    try:
        traffic = res["traffic"]
        sweep = res.get("sweep") or {}
        point = Point(id=sweep.get("id", path.parent.name), dir=path.parent,
                      pattern=traffic["pattern"], load=_load(traffic["pattern"],
                                                             traffic.get("load")),
                      seed=int(traffic["seed"]), sim=res["simulator"],
                      vary=sweep.get("vary") or {}, results=res)
    except (KeyError, TypeError, ValueError) as e:
        raise ReportError(f"{path}: not a superfabric results file (missing or bad {e})") from None
    missing = [k for k in _RESULTS_KEYS + _KIND_KEYS[point.kind] if k not in res]
    if missing:
        raise ReportError(f"{path}: not a superfabric results file of {point.kind} traffic "
                          f"{point.pattern!r} (no {', '.join(missing)})")
    return point


def _failed_point(point: dict, pdir: Path, error: str) -> Point:
    """A sweep point that has no results, from its entry in the plan."""
    return Point(id=point["id"], dir=pdir, pattern=point["traffic"],
                 load=_load(point["traffic"], point.get("load")),
                 seed=int(point["seed"]), sim=point["sim"], vary=point.get("vary") or {},
                 error=" ".join(error.split()))


def _point_from_error(path: Path) -> Point:
    data = read_json(path)
    try:
        return _failed_point(data["point"], path.parent, str(data.get("error", "unknown error")))
    except (KeyError, TypeError, ValueError) as e:
        raise ReportError(f"{path}: not a superfabric sweep error file "
                          f"(missing or bad {e})") from None


def _point_from_sweep(entry: dict, pdir: Path) -> Point:
    """A sweep point with a ``results.json``: its results, or failed with the file's problem."""
    try:
        return _point_from_results(pdir / "results.json")
    except ReportError as problem:
        try:
            return _failed_point(entry, pdir, str(problem))
        except (KeyError, TypeError, ValueError) as e:
            raise ReportError(f"{pdir.parent.parent / 'sweep.json'}: point {entry['id']!r} "
                              f"is not a superfabric sweep point (missing or bad {e})") from None


def load_source(src: str | Path) -> Source:
    """Read a run directory or a sweep directory.

    Parameters
    ----------
    src : str or pathlib.Path
        A directory with ``results.json`` (one run) or ``sweep.json`` (a
        sweep; its list of points is authoritative).

    Returns
    -------
    Source

    Raises
    ------
    ReportError
        When ``src`` holds neither file, or one of its files is unreadable.
    """
    path = Path(src)
    if (path / "sweep.json").is_file():
        sweep = read_json(path / "sweep.json")
        points, missing = [], []
        for entry in sweep.get("points", []):
            pid = entry.get("id") if isinstance(entry, dict) else None
            if not pid:
                raise ReportError(f"{path / 'sweep.json'}: a point without an id: {entry!r}")
            pdir = path / "points" / pid
            if (pdir / "results.json").is_file():
                points.append(_point_from_sweep(entry, pdir))
            elif (pdir / "error.json").is_file():
                points.append(_point_from_error(pdir / "error.json"))
            else:
                missing.append(pid)
        return Source(path=path, points=points, spec=sweep.get("spec") or {}, missing=missing)
    if (path / "results.json").is_file():
        return Source(path=path, points=[_point_from_results(path / "results.json")])
    raise ReportError(f"{path}: neither a run directory (results.json) nor a sweep directory "
                      f"(sweep.json)")
