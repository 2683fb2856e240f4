"""``superfabric synth``: FPGA resources and Fmax of a configuration with Yosys and nextpnr.

The flow, in ``DIR``:

1. ``generate``: the block's Verilog (:func:`superfabric.hdl.verilog.write_verilog`,
   the file ``superfabric generate`` writes, with Amaranth's ``src``
   attributes kept) and the :mod:`scan wrapper
   <superfabric.tools.synth.scan_wrapper>` that gives it registers on every port bit.
2. ``yosys`` (``yosys.log``): the target's synthesis command with module
   boundaries kept, then ``stat -json`` (``stat.json``): the cells of every
   module, so the per-module breakdown costs no second run. The block is
   synthesised apart from the wrapper (``keep_hierarchy``), so its counts
   are its own. ``--flatten`` optimises across the block's modules instead,
   as a flat vendor flow does, and gives no breakdown.
3. ``nextpnr`` (ECP5, iCE40; ``nextpnr.log``, ``report.json``): place and
   route of the flattened netlist with a clock constraint (``--freq``),
   timing allowed to fail so that Fmax is measured either way; with
   ``seeds`` above 1, once per placement seed on the same netlist
   (``nextpnr-seed<S>.log``, ``report-seed<S>.json``), one after the other.

``DIR/synth.json`` then holds the block's resources by category and by
module, the device's capacities and whether it fits, the wrapper's cells,
nextpnr's utilisation, Fmax against the constraint (with several seeds:
each seed's, and the median, the critical path being the median seed's),
the critical path (its start and end cells, their modules and Amaranth
source lines, the modules it crosses, its logic levels and delays), the
worst endpoints (:mod:`~superfabric.tools.synth.timing_report`), tool
versions and the wall time of every step. A design
that does not fit the device is a result too: ``synth.json`` with ``fits``
false, the one-line ``error`` and what the design needs, and no timing. It
is written last, so a directory with it is finished (sweeps skip it).
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

from ...config import FabricConfig
from .eda_tool import ToolFailed, find_tool, run_tool, tool_version
from .device import CATEGORIES, TARGETS, Device, Target, find_device
from .scan_wrapper import WRAPPER, scan_wrapper
from .timing_report import cell_sources, memory_sources, seed_timing

__all__ = ["SCHEMA", "MAX_SEEDS", "MAX_PATHS", "DEFAULT_PATHS", "SynthError", "synthesize",
           "count_option", "count_resources", "fit_problems", "summary_line", "detail_lines"]

#: ``schema`` of synth.json.
SCHEMA = "superfabric-synth/1"

#: Most placement seeds (``--seeds``) and worst paths (``--paths``) of one synthesis.
MAX_SEEDS = 100
MAX_PATHS = 100

#: Worst endpoints listed when ``--paths`` is not given.
DEFAULT_PATHS = 5


class SynthError(ValueError):
    """Bad synth input (target, device, frequency) or a design that does not fit; one line."""


def synthesize(cfg: FabricConfig, out_dir: str | Path, *, target: str, device: str | None = None,
               package: str | None = None, speed: int | None = None,
               freq_mhz: float | None = None, top: str = "switch", flatten: bool = False,
               seed: int = 1, seeds: int | str | None = None, paths: int | str | None = None,
               router: str | None = None, stream=sys.stderr, quiet: bool = False) -> dict:
    """Synthesise ``top`` of ``cfg`` for ``target``, place and route it where the target has
    nextpnr, and write ``out_dir/synth.json``.

    Parameters
    ----------
    target : str
        ``ecp5``, ``ice40`` or ``xilinx``.
    device, package, speed : optional
        The part (default: the target's, :data:`~.fpga_device.DEVICES`), its
        package and speed grade (defaults: the device's).
    freq_mhz : float, optional
        Clock constraint of place and route (default: the target's).
    flatten : bool
        Optimise across module boundaries; no per-module breakdown.
    seed : int
        nextpnr's placement seed (results move a little with it); the first
        of ``seeds``.
    seeds : int, optional
        Place and route the one netlist with seeds ``seed`` to ``seed + seeds
        - 1`` (default 1 seed, :data:`MAX_SEEDS` at most), one after the
        other; ``timing`` holds every seed's Fmax and the median's
        (:func:`~.timing_report.seed_timing`), and the critical path and
        worst paths are the median seed's.
    paths : int, optional
        How many of the worst endpoints ``timing["paths"]`` lists
        (:func:`~.timing_report.worst_paths`; :data:`MAX_PATHS` at most; default
        :data:`DEFAULT_PATHS`).
    router : str, optional
        nextpnr's router, ``router1`` (nextpnr's default) or ``router2``, which
        finishes congested designs that ``router1`` does not (the 8-port
        switch on the LFE5UM-85F: routed in 10 minutes, against more than 100).
    stream, quiet
        Progress lines go to ``stream``, or nowhere when ``quiet``.

    Returns
    -------
    dict
        The content of ``synth.json``.

    Raises
    ------
    SynthError
        Unknown target or device, a bad frequency, package, speed, seed count
        or path count (:func:`count_option`), or a design that does not fit
        the device (``synth.json`` is written then,
        with ``fits`` false, the ``error`` and the resources it needs).
    superfabric.tools.synth.eda_tool.ToolMissing
        A tool of the flow is not installed.
    superfabric.tools.synth.eda_tool.ToolFailed
        A tool failed for another reason (its first error line and log).
    """
    try:
        dev = find_device(target, device)
    except ValueError as e:
        raise SynthError(str(e)) from None
    tgt = TARGETS[target]
    options = _device_options(tgt, dev, package=package, speed=speed, freq_mhz=freq_mhz,
                               router=router, seeds=seeds, paths=paths)
    seeds, paths = options["seeds"], options["paths"]
    # Before minutes of work, the tools must be there.
    for tool in ("yosys", tgt.nextpnr):
        if tool:
            find_tool(tool)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "synth.json").unlink(missing_ok=True)
    say = (lambda text: None) if quiet else (lambda text: (stream.write(text), stream.flush()))
    wall = time.monotonic()
    verilog, step = _generate(cfg, out, top, say)
    steps = [step]
    resources, step = _yosys(cfg, tgt, top, verilog, out, flatten=flatten, stream=stream,
                             quiet=quiet)
    steps.append(step)
    fixed = _synth_fields(cfg, tgt, dev, options, resources, target=target, top=top,
                          flatten=flatten, seed=seed, seeds=seeds)

    # A design that does not fit is a result too: synth.json says what it needs.
    problems = fit_problems(resources["core"]["cells"], tgt, dev)
    if problems:
        message = f"--device = {dev.name}: the design does not fit: {'; '.join(problems)}"
        _write_synth_json(out, fixed, steps, wall, error=message)
        raise SynthError(message)
    if not tgt.nextpnr:
        return _write_synth_json(out, fixed, steps, wall)
    reports = {}
    for run_seed in range(seed, seed + seeds):
        suffix = "" if seeds == 1 else f"-seed{run_seed}"
        result = _nextpnr(tgt, dev, options, run_seed, out, log=f"nextpnr{suffix}.log",
                          report=f"report{suffix}.json", stream=stream, quiet=quiet)
        steps.append(dict(_step(tgt.nextpnr, result), seed=run_seed))
        if result.returncode:
            failure = _nextpnr_failure(result, dev)
            if isinstance(failure, SynthError):
                _write_synth_json(out, fixed, steps, wall, error=str(failure))
            raise failure
        reports[run_seed] = json.loads((out / f"report{suffix}.json").read_text())
    timing = seed_timing(reports, options["freq_mhz"], top, set(resources["modules"]),
                     sources=cell_sources(json.loads((out / "netlist.json").read_text()),
                                          top=top, memories=memory_sources(verilog.read_text())),
                     paths=paths)
    return _write_synth_json(out, fixed, steps, wall, timing=timing,
                             utilization=reports[timing["seed"]].get("utilization", {}))


def _generate(cfg: FabricConfig, out: Path, top: str, say) -> tuple[Path, dict]:
    """Step 1, generate: the block's Verilog and its scan wrapper in ``out``; returns
    the Verilog file and the step's entry of synth.json."""
    from ...hdl.verilog import write_verilog
    t0 = time.monotonic()
    say(f"generate: {top}, {_describe(cfg, top)}\n")
    # With Amaranth's src attributes, which Yosys keeps on the cells they become
    # (the cells and their counts are the same without them).
    verilog = write_verilog(cfg, out, top=top, src=True)
    (out / f"{WRAPPER}.v").write_text(scan_wrapper(verilog.read_text(), top))
    return verilog, {"step": "generate", "seconds": round(time.monotonic() - t0, 2)}


def _yosys(cfg: FabricConfig, tgt: Target, top: str, verilog: Path, out: Path, *,
           flatten: bool, stream, quiet: bool) -> tuple[dict, dict]:
    """Step 2, yosys: synthesis and ``stat -json``; returns the resources
    (:func:`count_resources`) and the step's entry of synth.json.

    Raises
    ------
    superfabric.tools.synth.eda_tool.ToolFailed
        Yosys failed (its first error line and log).
    """
    script = _yosys_script(tgt, top, verilog.name, flatten=flatten,
                           netlist=tgt.nextpnr is not None)
    (out / "synth.ys").write_text(script)
    result = run_tool("yosys", ["-s", "synth.ys"], log=out / "yosys.log", cwd=out,
                      what=f"{tgt.synth.split()[0]} of {top} ({_describe(cfg, top)})",
                      stream=stream, quiet=quiet)
    step = _step("yosys", result)
    if result.returncode:
        raise ToolFailed(f"yosys failed: {result.first_error() or 'no ERROR line'}; "
                         f"see {result.log}")
    stat = json.loads((out / "stat.json").read_text())
    return count_resources(stat, tgt, top), step


def _nextpnr(tgt: Target, dev: Device, options: dict, seed: int, out: Path, *, log: str,
             report: str, stream, quiet: bool):
    """Step 4, nextpnr: place and route the netlist in ``out`` with ``seed``, its output in
    ``out/log`` and its report (with every endpoint's arrival time) in ``out/report``;
    returns the tool's result."""
    args = [*dev.nextpnr_args, *options["nextpnr"], "--json", "netlist.json",
            "--freq", f"{options['freq_mhz']:g}", "--timing-allow-fail", "--seed", str(seed),
            *(["--router", options["router"]] if options["router"] else []),
            "--report", report, "--detailed-timing-report"]
    return run_tool(tgt.nextpnr, args, log=out / log, cwd=out,
                    what=f"place and route on {dev.name} at {options['freq_mhz']:g} MHz, "
                         f"seed {seed}",
                    stream=stream, quiet=quiet)


def _synth_fields(cfg: FabricConfig, tgt: Target, dev: Device, options: dict, resources: dict,
                  *, target: str, top: str, flatten: bool, seed: int, seeds: int) -> dict:
    """synth.json's fields known once Yosys has run, in the file's order; the
    outcome's fields (``fits``, ``error``, ``utilization``, ``timing``, ``steps``,
    ``wall_seconds``) hold their place and are filled by :func:`_write_synth_json`."""
    versions = {"yosys": tool_version("yosys")}
    if tgt.nextpnr:
        versions["nextpnr"] = tool_version(tgt.nextpnr)
    return {
        "schema": SCHEMA,
        "target": target,
        "device": {"name": dev.name, "package": options["package"],
                   "speed": options["speed"], "capacity": dev.capacity},
        "top": top,
        "flatten": flatten,
        "config": cfg.to_dict(),
        "build_key": cfg.build_key,
        "resources": resources["core"]["resources"],
        "cells": resources["core"]["cells"],
        "fits": None,
        "error": None,
        "use": _use(resources["core"]["cells"], tgt, dev),
        "modules": resources["modules"],
        "wrapper": resources["wrapper"],
        "utilization": None,
        "timing": None,
        "seed": seed if tgt.nextpnr else None,
        "seeds": list(range(seed, seed + seeds)) if tgt.nextpnr else None,
        "router": options["router"],
        "tools": versions,
        "steps": None,
        "wall_seconds": None,
    }


def _write_synth_json(out: Path, fixed: dict, steps: list[dict], wall: float, *,
                      error: str | None = None, timing=None, utilization=None) -> dict:
    """Write synth.json (last, and atomically: a directory with it is finished):
    ``fixed`` (:func:`_synth_fields`) with the outcome, the steps so far and the
    wall time since ``wall``; resources always, Fmax when placed and routed.
    Returns its content."""
    synth = dict(fixed, fits=error is None, error=error, utilization=utilization,
                 timing=timing, steps=steps, wall_seconds=round(time.monotonic() - wall, 2))
    tmp = out / "synth.json.tmp"
    tmp.write_text(json.dumps(synth, indent=2) + "\n")
    tmp.replace(out / "synth.json")
    return synth


def summary_line(synth: dict) -> str:
    """One line of a synth.json: resources, Fmax (the median of several seeds, with the
    range) and the critical path's ends."""
    res = synth["resources"]
    line = (f"{synth['target']} {synth['device']['name']}: {res['lut']:,} LUTs, {res['ff']:,} FFs, "
            f"{res['bram']} block RAMs, {res['dsp']} DSPs, {res['lutram']:,} LUT RAMs")
    timing = synth["timing"]
    if timing:
        path = timing["critical_path"]
        seeds = timing.get("seeds") or []
        spread = (f"median of {len(seeds)} seeds, min {timing['fmax_min_mhz']:.1f}, max "
                  f"{timing['fmax_max_mhz']:.1f}; " if len(seeds) > 1 else "")
        line += (f"; Fmax {timing['fmax_mhz']:.1f} MHz ({spread}"
                 f"{'meets' if timing['met'] else 'misses'} {timing['constraint_mhz']:g} MHz)")
        if path:
            line += f", critical path {path['from']['module']} -> {path['to']['module']}"
            if len(seeds) > 1:
                line += f" (seed {timing['seed']}, the median's)"
    return line


def detail_lines(synth: dict) -> list[str]:
    """What follows the summary line: the worst paths with their source lines, the
    utilisation after place and route, and each step's wall time."""
    lines = []
    timing = synth["timing"]
    if timing and timing.get("paths"):
        lines.append(f"worst {len(timing['paths'])} endpoints (seed {timing['seed']}), one per "
                     f"source line, latest arrival, clock to output included, setup not:")
        for k, path in enumerate(timing["paths"], 1):
            end = path["to"]
            others = f", {path['cells'] - 1} more cells of this line" if path["cells"] > 1 else ""
            lines.append(f"  {k}. {path['arrival_ns']:.3f} ns at {end['cell']}.{end['port']} "
                         f"({end['module']}, {', '.join(end['src']) or 'no source line'}{others})")
            if path["logic_levels"] is not None:
                start, levels = path["from"], path["logic_levels"]
                lines.append(f"     the critical path: from {start['cell']}.{start['port']} "
                             f"({start['module']}, {', '.join(start['src']) or 'no source line'}), "
                             f"{levels} logic level{'' if levels == 1 else 's'}, "
                             f"{path['delay_ns']:.3f} ns = {path['logic_ns']:.3f} logic + "
                             f"{path['routing_ns']:.3f} routing")
    if synth.get("utilization"):
        used = [f"{site} {u['used']:,}/{u['available']:,}"
                for site, u in sorted(synth["utilization"].items()) if u["used"]]
        lines.append("placed and routed (nextpnr, wrapper included): " + ", ".join(used))
    if synth.get("steps"):
        steps = ", ".join(f"{s['step']}" + (f" seed {s['seed']}" if "seed" in s else "")
                          + f" {s['seconds']:.1f} s" for s in synth["steps"])
        lines.append(f"steps: {steps}; {synth['wall_seconds']:.1f} s in all")
    return lines


def _describe(cfg: FabricConfig, top: str) -> str:
    if top == "compression":
        # The unit has no fabric parameter: the switch's would mislead.
        return "the int4 quantiser and dequantiser, blocks of 32"
    sw = cfg.switch
    what = f"{sw.ports} ports x {sw.data_width} bits, {sw.priorities} priorities"
    return what if top != "rdma_engine" else f"{what}, {cfg.rdma.qps} QPs"


#: nextpnr's routers (``--router``).
ROUTERS = ("router1", "router2")


def count_option(option: str, value: int | str, *, high: int) -> int:
    """``value`` of ``option`` (``--seeds``, ``--paths``), an int or its text, as a
    whole number from 1 to ``high``.

    Raises
    ------
    SynthError
        One line naming the option, the value and what is allowed.
    """
    number = int(value) if isinstance(value, str) and re.fullmatch(r"[0-9]+", value) else value
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= high:
        raise SynthError(f"{option} = {value!r}: must be a whole number from 1 to {high}")
    return number


def _device_options(tgt: Target, dev: Device, *, package, speed, freq_mhz, router, seeds,
                    paths) -> dict:
    """nextpnr's package and speed options, the router, the clock constraint, the number of
    seeds and of worst paths; checked."""
    if tgt.nextpnr is None:
        for name, value in (("--package", package), ("--speed", speed), ("--freq", freq_mhz),
                            ("--router", router), ("--seeds", seeds), ("--paths", paths)):
            if value is not None:
                raise SynthError(f"{name} = {value}: only for targets with place and route "
                                 f"(ecp5, ice40), not {tgt.name}")
        return {"nextpnr": [], "package": None, "speed": None, "freq_mhz": None, "router": None,
                "seeds": 1, "paths": 0}
    seeds = 1 if seeds is None else count_option("--seeds", seeds, high=MAX_SEEDS)
    paths = DEFAULT_PATHS if paths is None else count_option("--paths", paths, high=MAX_PATHS)
    if router is not None and router not in ROUTERS:
        raise SynthError(f"--router = {router}: must be one of {', '.join(ROUTERS)}")
    freq = tgt.default_freq_mhz if freq_mhz is None else freq_mhz
    if not 0 < freq <= 1000:
        raise SynthError(f"--freq = {freq_mhz}: must be in (0, 1000] MHz")
    if speed is not None and (dev.speed is None or speed not in (6, 7, 8)):
        allowed = "6, 7 or 8" if dev.speed is not None else f"none for {dev.name}"
        raise SynthError(f"--speed = {speed}: must be {allowed}")
    pkg = package or dev.package
    args = ["--package", pkg]
    if dev.speed is not None:
        args += ["--speed", str(speed or dev.speed)]
    args.append("--lpf-allow-unconstrained" if tgt.name == "ecp5" else "--pcf-allow-unconstrained")
    return {"nextpnr": args, "package": pkg, "speed": speed or dev.speed, "freq_mhz": freq,
            "router": router, "seeds": seeds, "paths": paths}


def _yosys_script(tgt: Target, top: str, verilog: str, *, flatten: bool, netlist: bool) -> str:
    """The Yosys script: map, count every module, then flatten for place and route."""
    option = tgt.flatten if flatten else tgt.keep_hierarchy
    lines = [f"read_verilog {verilog} {WRAPPER}.v",
             "hierarchy -check -top " + WRAPPER,
             # The block stays a module of its own under the wrapper, even when
             # its insides are flattened, so its counts exclude the wrapper's.
             f"setattr -mod -set keep_hierarchy 1 {top}",
             f"{tgt.synth} -top {WRAPPER} {option}".rstrip(),
             "tee -q -o stat.json stat -json"]
    if netlist:
        lines += [f"setattr -mod -unset keep_hierarchy {top}", "flatten", "opt_clean",
                  "write_json netlist.json"]
    return "\n".join(lines) + "\n"


def _step(tool: str, result) -> dict:
    return {"step": tool, "seconds": round(result.seconds, 2), "log": result.log.name,
            "compiled_webassembly": result.compiled}


def count_resources(stat: dict, tgt: Target, top: str) -> dict:
    """The block's cells and resources, per module and in total, from Yosys's ``stat -json``.

    Parameters
    ----------
    stat : dict
        ``stat -json`` of the mapped design, the wrapper on top.
    tgt : Target
        How cells count (:attr:`~.fpga_device.Target.counts`).
    top : str
        The block's module name.

    Returns
    -------
    dict
        ``core`` and ``wrapper``: ``{"cells": {type: n}, "resources": {...}}``;
        ``modules``: per module of the block, its own cells' resources and
        its number of instances.
    """
    modules = {name.lstrip("\\"): body.get("num_cells_by_type", {})
               for name, body in stat["modules"].items()}
    if top not in modules or WRAPPER not in modules:
        raise ToolFailed(f"stat.json: modules {top!r} and {WRAPPER!r} expected, "
                         f"found {', '.join(modules)}")
    instances = Counter()

    def walk(name: str, times: int) -> None:
        instances[name] += times
        for cell, n in modules[name].items():
            if cell in modules:
                walk(cell, times * n)

    walk(top, 1)
    core = Counter()
    for name, times in instances.items():
        for cell, n in _own_cells(modules[name], modules).items():
            core[cell] += n * times
    wrapper = _own_cells(modules[WRAPPER], modules)
    return {
        "core": {"cells": dict(sorted(core.items())), "resources": _categorise(core, tgt)},
        "wrapper": {"cells": dict(sorted(wrapper.items())), "resources": _categorise(wrapper, tgt)},
        "modules": {name: {"instances": instances[name],
                           **_categorise(_own_cells(modules[name], modules), tgt)}
                    for name in sorted(instances)},
    }


def _own_cells(cells: dict, modules: dict) -> Counter:
    """A module's primitive cells, without its submodule instances (or Yosys's ``$scopeinfo``)."""
    return Counter({c: n for c, n in cells.items() if c not in modules and not c.startswith("$")})


def _categorise(cells: Counter, tgt: Target) -> dict:
    out = dict.fromkeys(CATEGORIES, 0)
    other = {}
    for cell, n in sorted(cells.items()):
        if cell in tgt.counts:
            category, weight = tgt.counts[cell]
            out[category] += n * weight
        else:
            other[cell] = n
    out["other"] = other
    return out


def fit_problems(cells: dict, tgt: Target, dev: Device) -> list[str]:
    """What the block needs beyond the device's capacity, one phrase each; empty: it fits."""
    return [f"{need:,} {resource} needed, {dev.capacity.get(key, 0):,} available"
            for resource, need, key in _needs(cells, tgt) if need > dev.capacity.get(key, 0)]


def _needs(cells: dict, tgt: Target) -> list[tuple[str, int, str]]:
    return [(resource, sum(cells.get(c, 0) * w for c, w in weights.items()), key)
            for resource, weights, key in tgt.sites]


def _use(cells: dict, tgt: Target, dev: Device) -> list[dict]:
    """Each fit-checked resource: needed, available, and the share of the device."""
    return [{"resource": resource, "used": need, "available": dev.capacity.get(key, 0),
             "percent": round(100.0 * need / dev.capacity[key], 2) if dev.capacity.get(key) else None}
            for resource, need, key in _needs(cells, tgt) if need or dev.capacity.get(key)]


# nextpnr's words when the cells outnumber the device's sites: "no BELs
# remaining to implement cell type", or, from its analytical placer, "Unable
# to find legal placement ... check constraints and utilisation" (the flow
# sets no placement constraints).
_NO_FIT = re.compile(r"no BELs remaining|Unable to find legal placement|utili[sz]ation", re.I)


def _nextpnr_failure(result, dev: Device) -> Exception:
    """A nextpnr failure: the design (with its wrapper) does not fit, or another error."""
    error = result.first_error() or "no ERROR line"
    if _NO_FIT.search(error):
        return SynthError(f"--device = {dev.name}: the design with its scan wrapper does not fit "
                          f"(nextpnr: {error}); see {result.log}")
    return ToolFailed(f"nextpnr failed: {error}; see {result.log}")
