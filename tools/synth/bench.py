"""FPGA resources and Fmax of the default switch at 4, 8 and 16 ports, on ECP5 and Xilinx
7-series: the ``switch-synth`` page of ``make bench`` (``make bench-synth``).

Each target is one resumable ``superfabric synth --vary switch.ports=...``
sweep under ``build/bench-synth/<target>`` (ECP5: Yosys, then nextpnr place
and route for Fmax; Xilinx: Yosys mapping only), reported beside it in
``build/bench-synth/<target>-report``. On the 2-core machine the ECP5
points take most of the time (place and route grows faster than the design);
ECP5 routes with nextpnr's ``router2``, which finishes the congested 8-port
switch (``router1`` did not, in 100 minutes).
"""

from pathlib import Path

from ...config import FabricConfig
from ..report.synth import load_synth_source, write_synth_report
from ..results_page import Column, ResultsPage
from .sweep import plan_synth_sweep, run_synth_sweep

__all__ = ["PORTS", "ROOT", "TARGETS", "switch_table"]

#: Port counts of the table.
PORTS = (4, 8, 16)
#: The targets, each one sweep: ECP5 placed and routed, 7-series mapped by Yosys.
TARGETS = ("ecp5", "xilinx")
#: Where the sweeps and their reports go.
ROOT = Path("build/bench-synth")


def _sweep(cfg: FabricConfig, target: str) -> dict:
    """Run (or resume) one target's sweep and report it: per port count, its ``synth.json``
    (None when the point failed)."""
    out = ROOT / target
    plan = plan_synth_sweep(cfg, overrides=[], vary=[f"switch.ports={','.join(map(str, PORTS))}"],
                            target=target, router="router2" if target == "ecp5" else None)
    run_synth_sweep(plan, out)
    write_synth_report(out, ROOT / f"{target}-report")
    return {p["vary"]["switch.ports"]: p.get("synth") for p in load_synth_source(out)["points"]}


def _cells(synth: dict | None, routed: bool) -> list[str]:
    """A point's cells: LUTs, FFs, block RAMs, LUT RAMs (routed: and Fmax, the critical
    path, the build's minutes)."""
    if synth is None:
        return ["failed"] + ["-"] * (6 if routed else 3)
    res = synth["resources"]
    cells = [f"{res['lut']:,}", f"{res['ff']:,}", f"{res['bram']}", f"{res['lutram']:,}"]
    if not routed:
        return cells
    if not synth["fits"]:
        first = synth["use"][0]       # what the switch runs out of first: LUT sites
        cells += ["does not fit", f"{first['resource']} {first['percent']:.0f} % of the device"]
    else:
        cp = synth["timing"]["critical_path"]
        cells += [f"{synth['timing']['fmax_mhz']:.2f}",
                  f"{cp['from']['module']} -> {cp['to']['module']}, {cp['logic_levels']} levels"]
    return cells + [f"{synth['wall_seconds'] / 60:.1f}"]


def switch_table() -> ResultsPage:
    """The default switch at :data:`PORTS` on both :data:`TARGETS`, one row per port count."""
    cfg = FabricConfig.load(preset="default")
    page = ResultsPage(
        "switch-synth", "The default switch on ECP5 and Xilinx 7-series at 4, 8 and 16 ports",
        "make bench-synth",
        "`superfabric synth --preset default --target ecp5 --router router2 --vary "
        "switch.ports=4,8,16` and the same with `--target xilinx`, into `build/bench-synth/` "
        "(resumable): on ECP5 Yosys, then nextpnr's placement and routing on the LFE5UM-85F "
        "(speed 6) against a 100 MHz constraint, seed 1; on 7-series (XC7K325T) Yosys's "
        "mapping only, no place and route. The default preset otherwise: 64-bit flits, "
        "four traffic classes, 512-flit input buffers, iSLIP of 3 iterations. Fmax: "
        "nextpnr's, in MHz; the critical path from and to the Amaranth module of its ends; "
        "build: the ECP5 point's wall time on this machine, in minutes.")
    results = {target: _sweep(cfg, target) for target in TARGETS}
    headers = ("ports", "ECP5 LUT4", "ECP5 FF", "DP16KD", "ECP5 LUT RAM", "Fmax",
               "critical path", "build", "7-series LUT", "7-series FF", "RAMB18",
               "7-series LUT RAM")
    widths = (5, 9, 7, 6, 12, 12, 46, 5, 12, 11, 6, 16)
    page.table(*(Column(h, w, right=h != "critical path") for h, w in zip(headers, widths)))
    for ports in PORTS:
        page.row(ports, *_cells(results["ecp5"].get(ports), True),
                 *_cells(results["xilinx"].get(ports), False))
    tools = {t: next((s for s in results[t].values() if s), None) for t in TARGETS}
    if tools["ecp5"] and tools["xilinx"]:
        ecp5, xilinx = tools["ecp5"], tools["xilinx"]
        page.note(f"ECP5 {ecp5['device']['name']} speed {ecp5['device']['speed']} "
                  f"({ecp5['tools']['yosys']}, {ecp5['tools']['nextpnr']}); Xilinx 7-series "
                  f"{xilinx['device']['name']} ({xilinx['tools']['yosys']}). Every point's "
                  f"per-module breakdown and worst paths: the sweep's report, "
                  f"`build/bench-synth/<target>-report/`.")
    return page
