"""How a cocotb testbench receives its configuration and parameters.

The runner writes ``config.json`` and ``params.json`` into the test
directory and names them in ``SUPERFABRIC_CONFIG`` and
``SUPERFABRIC_PARAMS``; the testbench reads them back here. Files rather
than environment values keep traces and long parameter sets out of the
environment, and leave a record of the run next to its results.
"""

import json
import os
from pathlib import Path

from ..config import FabricConfig

__all__ = ["write", "read"]


def write(test_dir: Path, cfg: FabricConfig, params: dict) -> dict[str, str]:
    """Write the files; return the environment that names them."""
    cfg_path = test_dir / "config.json"
    params_path = test_dir / "params.json"
    cfg_path.write_text(cfg.to_json() + "\n")
    params_path.write_text(json.dumps(params, indent=2, sort_keys=True) + "\n")
    return {"SUPERFABRIC_CONFIG": str(cfg_path), "SUPERFABRIC_PARAMS": str(params_path)}


def read() -> tuple[FabricConfig, dict]:
    """The configuration and parameters of the current cocotb run."""
    cfg = FabricConfig.from_json(Path(os.environ["SUPERFABRIC_CONFIG"]).read_text())
    params = json.loads(Path(os.environ["SUPERFABRIC_PARAMS"]).read_text())
    return cfg, params
