"""Golden model of the stimulus top (``superfabric.hdl.stimulus``): generators, switch, sinks.

:class:`StimulusModel` steps the switch model (:class:`~.switch.SwitchCore`)
with the generator models (:class:`~.traffic_gen.Generators`) as its source
and the sink models (:class:`~.traffic_sink.Sinks`) on what it delivers,
cycle by cycle, and returns the statistics the RTL leaves in its registers
(:class:`StimulusStats`) bit for bit. :func:`compare_stats` holds two of
them against each other, every hash, counter and histogram bucket.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..config import FabricConfig
from ..stimulus import RegisterMap, StimulusSettings, check_stimulus
from .switch import DEFAULT_STALL_LIMIT, SwitchCore
from .traffic import TrafficError, read_npz
from .traffic_gen import Generators
from .traffic_sink import Sinks

__all__ = ["StimulusStats", "StimulusModel", "compare_stats", "PROGRESS_CYCLES"]

_FORMAT = "superfabric.stimulus_stats/1"

#: Cycles between two calls of a run's progress callback.
PROGRESS_CYCLES = 1 << 16


class StimulusStats:
    """The statistics of one stimulus run, as its registers hold them after the run.

    ``values`` maps every name of :attr:`RegisterMap.stats
    <superfabric.stimulus.RegisterMap.stats>` and ``histogram`` to a
    ``uint64`` array: per port ``(ports,)``, per port and class ``(ports,
    priorities)``, the histograms ``(ports, hist_buckets)``, ``cycle`` one
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
        n, np_ = cfg.switch.ports, cfg.switch.priorities
        shapes = {}
        for name, _, words in RegisterMap(cfg).stats:
            shapes[name] = (1,) if words == 1 else (n, np_) if words == n * np_ else (n,)
        shapes["histogram"] = (n, cfg.stimulus.hist_buckets)
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


class StimulusModel:
    """The stimulus top, cycle by cycle (``docs/architecture.md`` section 12)."""

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
        cfg = self._cfg
        if settings.fixed_dst and max(settings.fixed_dst) >= cfg.switch.ports:
            raise TrafficError(f"fixed_dst = {list(settings.fixed_dst)}: outputs must be below "
                               f"switch.ports ({cfg.switch.ports})")
        core = SwitchCore(cfg)
        gens = Generators(cfg, settings, core)
        sinks = Sinks(cfg, settings)
        run_cycles = settings.run_cycles
        cycle = last_progress = 0
        stalled = False
        while cycle < run_cycles or core.outstanding:
            if cycle - last_progress >= stall_limit:
                stalled = True
                break
            generated = gens.generate(cycle)
            delivered = core.step(cycle, gens, sinks.ready())
            if delivered:
                sinks.deliver(cycle, delivered, gens, core)
            if generated or core.progress or not core.outstanding:
                last_progress = cycle + 1
            cycle += 1
            if progress is not None and not cycle % PROGRESS_CYCLES:
                progress(cycle)
        return self._stats(core, gens, sinks, cycle, stalled)

    def _stats(self, core, gens, sinks, cycle, stalled) -> StimulusStats:
        cfg = self._cfg
        values = {"cycle": [cycle], "histogram": sinks.histogram, **core.counters(cycle)}
        for name in ("generated", "generated_flits", "refused"):
            values[name] = getattr(gens, name)
        for name in ("packets", "flits", "window_flits", "latency_sum", "latency_min",
                     "latency_max", "hash", "order_errors", "frame_errors", "ce_packets"):
            values[name] = getattr(sinks, name)
        # Every register wraps at its width.
        widths = {name: width for name, width, _ in RegisterMap(cfg).stats}
        widths["histogram"] = cfg.stimulus.counter_width
        return StimulusStats({
            name: np.asarray(values[name], np.int64).reshape(shape).astype(np.uint64)
            & np.uint64((1 << widths[name]) - 1)
            for name, shape in StimulusStats.shapes(cfg).items()}, stalled=stalled)


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
