"""Fmax, the critical path and the worst endpoints of ``superfabric synth`` from nextpnr's
``--report`` JSON, with each end's Amaranth source line.

nextpnr 0.11's report (``--report``, with ``--detailed-timing-report``) holds
each clock's Fmax, the whole critical path of each clock pair (its
segments: clock to output, logic and routing, setup, each with its cells
and delay), and, per net, every timing endpoint's latest arrival time.
Cell names are Yosys's, so the source lines come from Yosys's netlist
(:func:`cell_sources`) and, for memories, from the Verilog
(:func:`memory_sources`). Specification section 13.2.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from ... import hdl
from .eda_tool import ToolFailed
from .scan_wrapper import WRAPPER

__all__ = ["CORE_INSTANCE", "seed_timing", "critical_path", "worst_paths", "cell_sources",
           "memory_sources"]

#: The wrapper's instance name of the block, the first part of every block
#: cell's name after flattening (``core.voq0.mem.0.1``).
CORE_INSTANCE = "core"


def seed_timing(reports: dict[int, dict], freq_mhz: float, top: str, modules: set[str], *,
            sources: dict[str, list[str]], paths: int) -> dict:
    """synth.json's ``timing``: Fmax of every seed, their median, and the median seed's
    critical path and worst paths, from nextpnr's ``--report`` JSON of each seed.

    Parameters
    ----------
    reports : dict
        Seed -> nextpnr's report of that seed's place and route.
    freq_mhz : float
        The clock constraint.
    top, modules, sources
        As for :func:`critical_path`.
    paths : int
        How many worst endpoints (:func:`worst_paths`).

    Returns
    -------
    dict
        ``fmax_mhz`` is the lower median of the seeds' Fmax (for an even
        count the lower of the two middle ones, so that it is one seed's
        own), ``seed`` that seed (the lowest, if several have it),
        ``critical_path`` and ``paths`` its; ``seeds`` each seed's Fmax,
        ``fmax_min_mhz`` and ``fmax_max_mhz`` their range.
    """
    fmax = {}
    for seed, report in reports.items():
        if not report.get("fmax"):
            raise ToolFailed("nextpnr's report.json has no fmax: the design has no clocked path")
        # One clock: the wrapper's clk pin drives everything.
        clock, figures = next(iter(report["fmax"].items()))
        fmax[seed] = round(figures["achieved"], 2)
    # The lower median: one seed's own Fmax, whose critical path is reported.
    median = statistics.median_low(fmax.values())
    seed = min(s for s, f in fmax.items() if f == median)
    report = reports[seed]
    same_clock = [p for p in report.get("critical_paths", [])
                  if "<async>" not in (p.get("from", ""), p.get("to", ""))]
    critical = critical_path(same_clock[0]["path"], top, modules,
                             sources=sources) if same_clock else None
    return {"clock": clock, "constraint_mhz": freq_mhz, "fmax_mhz": median,
            "met": median >= freq_mhz, "seed": seed,
            "seeds": [{"seed": s, "fmax_mhz": f, "met": f >= freq_mhz} for s, f in fmax.items()],
            "fmax_min_mhz": min(fmax.values()), "fmax_max_mhz": max(fmax.values()),
            "critical_path": critical,
            "paths": worst_paths(report, paths, top, modules, sources=sources,
                                 critical=critical)}


def critical_path(segments: list[dict], top: str, modules: set[str], *,
                  sources: dict[str, list[str]] | None = None) -> dict:
    """Start, end, delays and modules of one path of nextpnr's report.

    Parameters
    ----------
    segments : list of dict
        The ``path`` of one ``critical_paths`` entry: ``clk-to-q``, then
        ``routing`` and ``logic`` segments, then ``setup``; each with
        ``from``/``to`` cells and ports and a ``delay`` in ns.
    top : str
        The block's module name (``switch``).
    modules : set of str
        Its module names (``switch.voq0``): a cell ``core.voq0.mem.0.1`` is
        in the longest of them that its name starts with (Amaranth names a
        submodule ``parent.instance``); a cell outside ``core`` is the
        wrapper's.
    sources : dict, optional
        Each netlist cell's source lines (:func:`cell_sources`): the ends'
        ``src``.

    Returns
    -------
    dict
        ``from`` and ``to`` (cell, port, module, src: the cell's source
        lines, empty if unknown), ``delay_ns``, ``logic_ns`` (the cells'
        delays: clock to output, logic, setup), ``routing_ns``,
        ``logic_levels`` (logic segments) and ``modules``, the modules the
        path crosses, in order.
    """
    def end(point: dict) -> dict:
        return _endpoint(point["cell"], point["port"], top, modules, sources or {})

    crossed = []
    for seg in segments:
        for side in ("from", "to"):
            module = _module_of(seg[side]["cell"], top, modules)
            if not crossed or crossed[-1] != module:
                crossed.append(module)
    delay = {kind: sum(s["delay"] for s in segments if s["type"] == kind)
             for kind in ("logic", "routing")}
    return {"from": end(segments[0]["from"]), "to": end(segments[-1]["to"]),
            "delay_ns": round(sum(s["delay"] for s in segments), 3),
            "logic_ns": round(delay["logic"] + sum(s["delay"] for s in segments
                                                   if s["type"] in ("clk-to-q", "setup")), 3),
            "routing_ns": round(delay["routing"], 3),
            "logic_levels": sum(1 for s in segments if s["type"] == "logic"),
            "modules": crossed}


def _endpoint(cell: str, port: str, top: str, modules: set[str], sources: dict) -> dict:
    return {"cell": cell, "port": port, "module": _module_of(cell, top, modules),
            "src": _source_of(cell, sources)}


def _source_of(cell: str, sources: dict) -> list[str]:
    """The source lines of a cell of nextpnr's, whose name may be a netlist cell's with
    a suffix of nextpnr's own (a LUT RAM's ``core.voq2.free_mem.0.0$DPRAM_COMB0``)."""
    while cell not in sources and "$" in cell:
        cell = cell.rpartition("$")[0]
    return sources.get(cell, [])


#: A path's fields that only nextpnr's critical path gives (:func:`worst_paths`).
_PATH_ONLY = ("from", "delay_ns", "logic_ns", "routing_ns", "logic_levels", "modules")


def worst_paths(report: dict, count: int, top: str, modules: set[str], *,
                sources: dict[str, list[str]], critical: dict | None) -> list[dict]:
    """The worst timing endpoints of the clock, one per source line, from nextpnr's
    ``--report`` JSON written with ``--detailed-timing-report``, worst first.

    nextpnr 0.11's report gives the whole path (start, cells, routing) of
    one path per clock pair only, the critical one; its
    ``detailed_net_timings`` give, for every timing endpoint (a flip-flop's
    or block RAM's input), the arrival time of its latest signal and the net
    that brings it. So each entry is the worst endpoint cell of one source
    line (the cell's first ``src``; a cell without one is its own line): the
    bits of one register or the block RAMs of one memory are one entry, at
    the cell and input port with the latest arrival, ranked by that arrival
    time (the endpoint's setup time is not in
    the report, so a block RAM input with a longer setup may close timing
    later than a flip-flop input that arrives later); the entry that ends
    where the critical path ends also has the critical path's start, delays,
    logic levels and modules, the others have them ``None``. Paths from or
    to the wrapper's pins (``<async>``) are left out.

    Parameters
    ----------
    report : dict
        nextpnr's report; without ``detailed_net_timings`` there is no entry.
    count : int
        How many entries (source lines), at most.
    top, modules
        As for :func:`critical_path`.
    sources : dict
        Each netlist cell's source lines (:func:`cell_sources`).
    critical : dict or None
        The critical path (:func:`critical_path`) of the same report.

    Returns
    -------
    list of dict
        ``to`` (cell, port, module, src), ``cells`` (the endpoint cells of
        that source line), ``arrival_ns`` (nextpnr's latest arrival at the
        endpoint, clock to output included, setup excluded),
        ``net`` and ``net_src`` (the net into the endpoint, its source lines
        as nextpnr gives them), and :data:`_PATH_ONLY`'s fields.
    """
    latest = {}
    for net in report.get("detailed_net_timings", []):
        if net["event"] == "<async>":
            continue
        for ep in net["endpoints"]:
            arrival = round(ep["delay"][1], 3)
            if ep["event"] != "<async>" and (ep["cell"] not in latest
                                             or arrival > latest[ep["cell"]][0]):
                latest[ep["cell"]] = (arrival, ep["port"], net)
    # Ties (bits of one register) put the critical path's end first.
    end = critical["to"]["cell"] if critical else None
    ranked = sorted(latest.items(), key=lambda item: (-item[1][0], item[0] != end, item[0]))
    # One entry per source line (a register's bits, a memory's block RAMs), at its worst cell.
    out = {}
    for cell, (arrival, port, net) in ranked:
        line = (_source_of(cell, sources) or [cell])[0]
        if line in out:
            out[line]["cells"] += 1
            continue
        entry = {"to": _endpoint(cell, port, top, modules, sources), "cells": 1,
                 "arrival_ns": arrival, "net": net["net"],
                 "net_src": [_relative(s) for s in net.get("sources", [])]}
        whole = critical and (critical["to"]["cell"], critical["to"]["port"]) == (cell, port)
        entry.update({key: critical[key] if whole else None for key in _PATH_ONLY})
        out[line] = entry
    return list(out.values())[:count]


def cell_sources(netlist: dict, *, top: str,
                 memories: dict[str, list[str]]) -> dict[str, list[str]]:
    """Each cell of Yosys's flattened ``write_json`` netlist: its source lines.

    The netlist's top is the scan wrapper, the block (``top``) flattened
    into it as instance ``core``. Yosys keeps the ``src`` attribute of what a
    cell was mapped from (Amaranth's Python line, ``hdl/voq.py:120``, or the
    wrapper's Verilog line) beside its own techmap library's (``/share/...``),
    which is left out. A memory's block RAM or LUT RAM cells keep only the
    library's; they are named after the memory (``core.voq2.mem.0.2``: memory
    ``mem`` of module ``switch.voq2``), whose source line ``memories`` gives
    (:func:`memory_sources`). Cells that ABC made (most LUTs) have none.
    """
    out = {}
    for name, cell in netlist["modules"][WRAPPER]["cells"].items():
        src = cell.get("attributes", {}).get("src", "")
        lines = [_relative(s) for s in src.split("|") if s and not s.startswith("/share/")]
        parts = name.split(".")
        if not lines and parts[0] == CORE_INSTANCE:
            # The longest prefix of the cell's name that names a memory.
            for k in range(len(parts), 1, -1):
                lines = memories.get(".".join([top, *parts[1:k]]), [])
                if lines:
                    break
        if lines:
            out[name] = lines
    return out


# A module of Yosys's Verilog (``module \switch.voq2 (``), and a memory
# declaration with its src attribute (``(* src = "..." *)`` then ``reg [117:0]
# mem [135:0];``).
_MODULE = re.compile(r"^module \\?(\S+)\s*\(", re.M)
_MEMORY = re.compile(r'^[ \t]*\(\* src = "([^"]*)" \*\)\n'
                     r'[ \t]*reg (?:\[[^\]]*\] )?\\?(\S+) \[', re.M)


def memory_sources(verilog: str) -> dict[str, list[str]]:
    """Every memory of Verilog written with ``src`` attributes: ``module.memory``
    (``switch.voq2.mem``) -> its source lines."""
    starts = [(m.start(), m[1]) for m in _MODULE.finditer(verilog)]
    out = {}
    for k, (begin, module) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(verilog)
        for memory in _MEMORY.finditer(verilog, begin, end):
            out[f"{module}.{memory[2]}"] = [_relative(s) for s in memory[1].split("|")]
    return out


#: The root that the package's source files are named from (``hdl/voq.py``).
_ROOT = Path(hdl.__file__).resolve().parent.parent


def _relative(src: str) -> str:
    """``src`` (``/path/to/hdl/voq.py:120``) relative to the package's root, if inside
    it, or to its ``site-packages`` (``amaranth/lib/fifo.py:162``)."""
    if "site-packages/" in src:  # a library's (a venv may be inside the root)
        return src.rpartition("site-packages/")[2]
    try:
        return Path(src).relative_to(_ROOT).as_posix()
    except ValueError:
        return src


def _module_of(cell: str, top: str, modules: set[str]) -> str:
    """The block module holding ``cell``; ``scan_wrapper`` for the wrapper's own cells."""
    parts = cell.split(".")
    if parts[0] != CORE_INSTANCE or len(parts) < 2:
        return WRAPPER
    best = top
    for k in range(2, len(parts)):
        candidate = ".".join([top, *parts[1:k]])
        if candidate in modules:
            best = candidate
    return best
