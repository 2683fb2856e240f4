"""Run the stimulus top on an RTL simulator and collect its statistics (``--stimulus hardware``).

:func:`run_stimulus_rtl` builds (or reuses) the ``stimulus`` top for the
configuration, runs ``superfabric.tb.stimulus.testbench`` with the run's settings
and returns the statistics the RTL left in its registers, with the wall
times of the run. While the simulator runs, the progress file the
testbench writes between chunks is followed and handed to a callback, so
a long run can show a progress bar in the calling process.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...config import FabricConfig
from ...sim.stimulus.top import StimulusStats
from ...sim.fabric.top import DEFAULT_STALL_LIMIT
from ...formats.stimulus import StimulusSettings
from ..runner import DEFAULT_BUILD_ROOT, run_cocotb_following

__all__ = ["run_stimulus_rtl"]


def run_stimulus_rtl(cfg: FabricConfig, settings: StimulusSettings, *, sim: str,
                     out_dir: str | Path, waves: bool | None = None,
                     stall_limit: int = DEFAULT_STALL_LIMIT,
                     build_root: str | Path = DEFAULT_BUILD_ROOT,
                     progress=None) -> tuple[StimulusStats, dict]:
    """Run ``settings`` on the stimulus top; returns ``(statistics, timing)``.

    ``timing`` holds ``run_seconds`` (from the start write to ``done``),
    ``readout_seconds``, ``cycles`` and ``chunks``. ``progress(line)``, if
    given, gets each progress line of the testbench (``cycle``,
    ``run_cycles``, ``generated``, ``delivered``, ``dropped``, ``done``,
    ``seconds``) as a dict. Writes ``rtl_stats.npz``, ``timing.json``,
    ``progress.jsonl`` and the cocotb test directory ``sim/`` into ``out_dir``.
    """
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    stats_path, timing_path, progress_path = (out / "rtl_stats.npz", out / "timing.json",
                                              out / "progress.jsonl")
    for path in (stats_path, timing_path, progress_path):
        path.unlink(missing_ok=True)
    params = {"settings": settings.to_dict(), "rtl_stats": str(stats_path),
              "timing": str(timing_path), "progress": str(progress_path),
              "stall_limit": stall_limit}
    result = run_cocotb_following(progress_path, progress, cfg,
                                  "superfabric.tb.stimulus.testbench", sim=sim,
                                  test_dir=out / "sim", top="stimulus", waves=waves,
                                  params=params, build_root=build_root)
    if not stats_path.exists():
        raise RuntimeError(f"the {sim} run wrote no statistics; see "
                           f"{result.test_dir / 'sim.log'}")
    return StimulusStats.load(stats_path), json.loads(timing_path.read_text())
