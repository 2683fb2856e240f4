"""The model of the board top's run (``hdl/board/run.py``): the text its UART prints.

The run itself is the stimulus model's (``sim/stimulus/top.py``); this is
its report as the board prints it (``superfabric.formats.board``: the lines,
their order and widths), with the run hash the board computes. Section
13.5 of docs/architecture.md.
"""

from __future__ import annotations

from ...config import FabricConfig
from ...formats.board import BANNER, hex_digits, report_lines
from ..stimulus.metrics import combined_hash

__all__ = ["report_text"]


def report_text(cfg: FabricConfig, stats, expected_hash: int) -> str:
    """The report of a run's statistics ``stats`` (a
    :class:`~superfabric.sim.stimulus.top.StimulusStats`) when the model's run hash is
    ``expected_hash``."""
    lines = [BANNER]
    for name, k, bits in report_lines(cfg):
        lines.append(f"{name} {k} {int(stats[name].reshape(-1)[k]):0{hex_digits(bits)}x}")
    lines.append(f"run_hash {combined_hash(stats['hash']):08x} model {expected_hash:08x}")
    return "".join(line + "\r\n" for line in lines)
