"""cocotb test of the stimulus top's read side: run, then read given addresses back.

The run is the testbench's (:func:`~.testbench.run_settings`, same parameters); then
the words at the parameter ``addresses`` are read, a block per cycle as the
testbench reads its statistics, and written to ``dump`` as a JSON list. For the
test that holds page reads against word reads (``tests/stimulus/test_top.py``).
"""

import json
from pathlib import Path

import cocotb

from .testbench import run_settings

__all__ = []


@cocotb.test()
async def stimulus_dump(dut):
    """Run the parameters' settings, then save the words at their ``addresses``."""
    tb, p, _, _, _ = await run_settings(dut)
    Path(p["dump"]).write_text(json.dumps(await tb.read(p["addresses"])) + "\n")
