"""Run the board top's :class:`~superfabric.hdl.board.run.BoardRun` on an RTL simulator and
return what its UART printed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ...config import FabricConfig
from ...formats.stimulus import StimulusSettings
from ...hdl.board.run import BoardRun
from ..runner import DEFAULT_BUILD_ROOT, run_cocotb

__all__ = ["run_board_rtl"]


def run_board_rtl(cfg: FabricConfig, settings: StimulusSettings, *, expected_hash: int,
                  clocks_per_bit: int, sim: str, out_dir: str | Path,
                  build_root: str | Path = DEFAULT_BUILD_ROOT) -> dict:
    """Build the board run of ``settings`` (its ROMs hold them, so a build per run) and
    simulate it to the end of its report; returns ``text`` (what the UART sent),
    ``mismatch``, ``running`` and ``finished`` (the LEDs at the end) and ``ns``."""
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    result = out / "board.json"
    result.unlink(missing_ok=True)
    made_of = json.dumps([settings.to_dict(), expected_hash, clocks_per_bit], sort_keys=True)
    key = hashlib.sha256(made_of.encode()).hexdigest()[:12]
    run = run_cocotb(cfg, "superfabric.tb.board.testbench", sim=sim, test_dir=out / "sim",
                     top="board", params={"clocks_per_bit": clocks_per_bit, "out": str(result)},
                     build_root=build_root,
                     component=(key, lambda: BoardRun(cfg, settings, expected_hash=expected_hash,
                                                      clocks_per_bit=clocks_per_bit)))
    if run.failed or not result.exists():
        raise RuntimeError(f"the board run failed on {sim}; see {out / 'sim' / 'sim.log'}")
    return json.loads(result.read_text())
