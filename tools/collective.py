"""``superfabric collective-plan``: a collective's schedule on the configured fabric, its step
counts and the alpha-beta prediction of every algorithm (docs/spec/collective.md section 15).

Writes ``plan.json``: the plan (operation, algorithm, size, predictions) and every
accelerator's schedule memory image, the words the collective engine will load.
"""

from __future__ import annotations

from pathlib import Path

from ..network.topology import Topology
from ..sim.collective.alpha_beta import AlphaBeta
from ..sim.collective.executor import ScheduleError
from ..sim.collective.library import (ALGORITHM_NAMES, ALGORITHMS, plan, segment_of, supports,
                                     verify)
from ..sim.collective.pattern import MAX_SEGMENT_PACKETS, SEGMENT_PACKETS
from ..sim.collective.peers import Peers
from ..sim.collective.schedule import ELEMENT_BYTES, OPS, elements_of
from .run import write_json

__all__ = ["check_plan", "collective_plan"]

#: Step fields in the printed table, as ``Step`` names them.
COLUMNS = ("peer", "reduce", "src", "dst", "length", "slot", "wait")


def check_plan(*, op: str, algo: str, nbytes: int, show: int, segment: int) -> None:
    """Refuse a bad setting in one line (ValueError) naming the value and what is allowed."""
    if op not in OPS:
        raise ValueError(f"--op = {op!r}: must be one of {', '.join(OPS)}")
    if algo not in ALGORITHM_NAMES:
        raise ValueError(f"--algo = {algo!r}: must be one of {', '.join(ALGORITHM_NAMES)}")
    try:
        elements_of(nbytes)
    except ValueError as e:
        raise ValueError(f"--{e}") from None
    if show < 0:
        raise ValueError(f"--steps = {show}: must be at least 0")
    if not 0 <= segment <= MAX_SEGMENT_PACKETS:
        raise ValueError(f"--segment = {segment}: must be in 0..{MAX_SEGMENT_PACKETS}")


def _describe(topo: Topology) -> str:
    if topo.kind == "torus":
        return f"{'x'.join(map(str, topo.dims))} torus"
    if topo.kind == "fat_tree":
        return f"{topo.leaves}-leaf leaf-spine"
    return "switch"


def collective_plan(cfg, *, op: str, algo: str, nbytes: int, accelerator: int, show: int,
                    check: bool, out_dir: str | Path,
                    segment: int = SEGMENT_PACKETS) -> tuple[list[str], bool]:
    """Build the plan, its chunks in segments of ``segment`` full packets' payload (0:
    whole), write ``plan.json`` under ``out_dir``; the lines to print, and whether the
    ``check`` (every accelerator's result against numpy's) passed.

    Raises
    ------
    ValueError
        The algorithm cannot run the operation on this fabric, or ``accelerator`` is not one
        of it; one line.
    """
    peers = Peers.of(cfg)
    if not 0 <= accelerator < peers.n:
        raise ValueError(f"--accelerator = {accelerator}: must be in 0..{peers.n - 1}")
    model = AlphaBeta.of(cfg)
    elements = model.segment_elements(segment)
    schedule = plan(peers, op, algo, nbytes, model, elements)
    predicted = {a: model.predict(peers, op, a, nbytes, segment=elements) for a in ALGORITHMS
                 if supports(a, op, peers)}
    mine = schedule.steps[accelerator]
    mhz = cfg.fabric.clock_mhz
    lines = [f"collective-plan: {op} of {nbytes} bytes on the {_describe(peers.topology)} of "
             f"{peers.n} accelerators: {schedule.algorithm}"
             + (" (auto)" if algo == "auto" else ""),
             f"steps: {schedule.step_count} at the busiest accelerator, "
             f"{sum(len(s) for s in schedule.steps)} in all; accelerator {accelerator}: "
             f"{len(mine)} steps, {schedule.slots[accelerator]} chunks received",
             f"alpha-beta prediction in cycles (us at {mhz:g} MHz): " + ", ".join(
                 f"{a} {t} ({t / mhz:.3f}){' *' if a == schedule.algorithm else ''}"
                 for a, t in predicted.items())]
    if show and mine:
        lines.append(f"accelerator {accelerator}, steps 0..{min(show, len(mine)) - 1}:")
        lines.append("  step " + " ".join(f"{c:>8}" for c in COLUMNS))
        for k, step in enumerate(mine[:show]):
            lines.append(f"  {k:>4} " + " ".join(f"{int(getattr(step, c)):>8}" for c in COLUMNS))
    ok = True
    if check:
        try:
            for dtype in ("int32", "fp32"):
                verify(schedule, peers, dtype)
            lines.append("check: int32 and fp32 equal numpy's on every accelerator, bit for bit")
        except (AssertionError, ScheduleError) as e:
            ok = False
            lines.append(f"check: failed: {e}")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    write_json(Path(out_dir) / "plan.json", {
        "op": op, "algorithm": schedule.algorithm, "requested": algo, "bytes": nbytes,
        "segment_bytes": segment_of(schedule.algorithm, elements) * ELEMENT_BYTES,
        "elements": schedule.elements, "buffer_elements": schedule.buffer,
        "step_count": schedule.step_count, "predicted_cycles": predicted,
        "schedules": [schedule.words(a) for a in range(peers.n)],
        "config": cfg.to_dict()})
    lines.append(f"plan: {Path(out_dir) / 'plan.json'}")
    return lines, ok
