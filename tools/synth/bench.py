"""FPGA resources and Fmax of the default switch at 4, 8 and 16 ports, on ECP5 and Xilinx 7-series.

A benchmark, not a test: it prints the README's table and asserts nothing.
Each target is one resumable ``superfabric synth --vary switch.ports=...``
sweep under ``build/bench-synth/<target>`` (ECP5: Yosys, then nextpnr place
and route for Fmax; Xilinx: Yosys mapping only), reported beside it in
``build/bench-synth/<target>-report``. On the 2-core machine the three ECP5
points take most of the time (place and route grows faster than the design);
ECP5 routes with nextpnr's ``router2``, which finishes the congested 8-port
switch (``router1`` did not, in 100 minutes).
"""

import sys
from pathlib import Path

from ...config import FabricConfig
from ..report.synth import load_synth_source, write_synth_report
from .sweep import plan_synth_sweep, run_synth_sweep

#: Port counts of the table.
PORTS = (4, 8, 16)

#: Where the sweeps and their reports go.
ROOT = Path("build/bench-synth")


def _cells(synth: dict | None, fmax: bool) -> list[str]:
    """A point's table cells: LUTs, FFs, block RAMs, LUT RAMs (and Fmax, critical path)."""
    if synth is None:
        return ["failed"] + ["-"] * (5 if fmax else 3)
    res = synth["resources"]
    cells = [f"{res['lut']:,}", f"{res['ff']:,}", f"{res['bram']}", f"{res['lutram']:,}"]
    if fmax:
        timing = synth["timing"]
        if not synth["fits"]:
            first = synth["use"][0]  # LUT sites: what a switch runs out of first
            cells += ["does not fit", f"{first['resource']} {first['percent']:.0f} % of the device"]
        else:
            cp = timing["critical_path"]
            cells += [f"{timing['fmax_mhz']:.1f}", f"{cp['from']['module']} -> "
                      f"{cp['to']['module']}, {cp['logic_levels']} levels"]
    return cells


def main() -> int:
    """Run (or resume) both sweeps, report them, and print the Markdown table."""
    cfg = FabricConfig.load(preset="default")
    results = {}
    for target in ("ecp5", "xilinx"):
        out = ROOT / target
        plan = plan_synth_sweep(cfg, overrides=[], vary=[f"switch.ports={','.join(map(str, PORTS))}"],
                                target=target, router="router2" if target == "ecp5" else None)
        run_synth_sweep(plan, out)
        write_synth_report(out, ROOT / f"{target}-report")
        source = load_synth_source(out)
        results[target] = {p["vary"]["switch.ports"]: p.get("synth") for p in source["points"]}
    ecp5 = next(s for s in results["ecp5"].values() if s and s["timing"])
    xilinx = next(s for s in results["xilinx"].values() if s)
    print(f"ECP5 {ecp5['device']['name']} speed {ecp5['device']['speed']} ({ecp5['tools']['yosys']}, "
          f"{ecp5['tools']['nextpnr']}, clock constraint {ecp5['timing']['constraint_mhz']:g} MHz); "
          f"Xilinx 7-series {xilinx['device']['name']} ({xilinx['tools']['yosys']})")
    print()
    print("| ports | ECP5 LUT4 | ECP5 FF | DP16KD | ECP5 LUT RAM | Fmax (MHz) | critical path | "
          "7-series LUT | 7-series FF | RAMB18 | 7-series LUT RAM |")
    print("|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    for ports in PORTS:
        print(f"| {ports} | " + " | ".join(_cells(results["ecp5"][ports], True)
                                          + _cells(results["xilinx"][ports], False)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
