"""Line and toggle coverage of the RTL, from Verilator runs made with ``SUPERFABRIC_COVERAGE``.

``python -m superfabric.tools.coverage DATA -o OUT`` takes the coverage data that
Verilator runs wrote into ``DATA`` (one file per run, named after its build, and one
``<build>.json`` per build saying what it is), and writes into ``OUT``:

- ``data/<build>.dat``, each build's runs merged (counts of equal points added), and
  ``coverage.dat``, all of them, in Verilator's format (``verilator_coverage`` reads them);
- ``annotated/<build>/``, the build's generated Verilog with, before every line that holds
  coverage points, the fewest hits among them (``%000000`` marks a line with a point
  never hit, as ``verilator_coverage --annotate`` does);
- ``summary.md`` and ``summary.json``: per build and per block (a module with its
  instances folded together: ``switch.voq0`` and ``switch.voq1`` are ``voq``), line and
  toggle points hit and in total; and per part of the design (the switch, the RDMA
  engines) the same over every build.

Verilator's line coverage counts blocks and branches (each ``if``/``case`` arm and each
straight run of statements is a point), not text lines; toggle coverage counts every bit
of every signal going 0 to 1 and 1 to 0. The merging and annotating are done here: the
Verilator that ``tools/install-simulators.sh`` builds has no ``verilator_coverage``
binary (only the simulator's). Points that no stimulus can reach are left out
and counted apart: Yosys writes every combinational process with a trigger register that
holds 0 for ever (``if ($auto$verilog_backend...) begin end``), so the branch it guards
is never taken (and its other arm always is) and the register never toggles.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

__all__ = ["read_data", "merge", "write_data", "annotate", "read_points", "block_of",
           "summarise", "report", "main"]

#: First line of a Verilator coverage data file.
HEADER = "# SystemC::Coverage-3"

#: The name of the code generator's trigger registers, which never change.
GENERATOR_TRIGGER = "$auto$verilog_backend"

#: The parts of the design a summary totals, by the block names their modules fold to.
PARTS = {"switch": lambda top, block: top == "switch" or block.startswith("switch"),
         "rdma engine": lambda top, block: block.startswith("engine"),
         "link fault injector": lambda top, block: block.startswith("inject")}


@lru_cache(maxsize=None)
def _source(path: str) -> tuple[str, ...]:
    try:
        return tuple(Path(path).read_text(errors="replace").splitlines())
    except OSError:
        return ()


def _unreachable(fields: dict) -> bool:
    """The point is on a line of the code generator's trigger register."""
    lines = _source(fields.get("f", ""))
    number = int(fields.get("l", 0))
    return 0 < number <= len(lines) and GENERATOR_TRIGGER in lines[number - 1]


def read_data(path: Path) -> dict[str, int]:
    """The points of a Verilator coverage data file: ``{key: count}``, the key being the
    point's fields as Verilator writes them."""
    points = {}
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("C '"):
            key, _, count = line[3:].rpartition("' ")
            points[key] = points.get(key, 0) + int(count)
    return points


def merge(paths) -> dict[str, int]:
    """The points of several runs of one build, their counts added."""
    total = {}
    for path in paths:
        for key, count in read_data(path).items():
            total[key] = total.get(key, 0) + count
    return total


def write_data(points: dict[str, int], path: Path) -> None:
    """Write ``points`` in Verilator's coverage data format."""
    path.write_text(HEADER + "\n" + "".join(f"C '{key}' {count}\n" for key, count in points.items()))


def _fields(key: str) -> dict[str, str]:
    return dict(item.split("\x02", 1) for item in key.split("\x01") if "\x02" in item)


def annotate(points: dict[str, int], out_dir: Path) -> None:
    """Copy every source the points name into ``out_dir``, each line that holds points
    preceded by the fewest hits among them (``%`` when that is zero)."""
    fewest = defaultdict(dict)     # source -> line -> fewest hits
    for key, count in points.items():
        f = _fields(key)
        lines = fewest[f.get("f", "")]
        number = int(f.get("l", 0))
        lines[number] = min(count, lines.get(number, count))
    out_dir.mkdir(parents=True, exist_ok=True)
    for source, lines in fewest.items():
        text = _source(source)
        if not text:
            continue
        out = [(f"{'%' if lines[k] < 1 else ' '}{min(lines[k], 999999):06d}\t" if k in lines
                else "\t") + line for k, line in enumerate(text, 1)]
        (out_dir / Path(source).name).write_text("\n".join(out) + "\n")


def read_points(points: dict[str, int]):
    """``(kind, module, count)`` per point, ``kind`` being ``line`` or ``toggle`` (branch
    points count as lines), or ``unreachable`` for the code generator's trigger registers
    (read from the sources)."""
    for key, count in points.items():
        fields = _fields(key)
        page = fields.get("page", "")
        kind, _, module = page.partition("/")
        kind = ("unreachable" if _unreachable(fields) else
                "toggle" if kind == "v_toggle" else "line")
        yield kind, module, count


def block_of(module: str) -> str:
    """The block a generated module belongs to: its path below the top with instance
    numbers dropped (``switch.voq3.desc`` is ``voq.desc``; the top is itself)."""
    parts = module.lstrip("\\").split(".")
    if len(parts) == 1:
        return parts[0]
    return ".".join(re.sub(r"\d+$", "", p) for p in parts[1:])


def summarise(points) -> dict:
    """``{block: {"line": [hit, total], "toggle": [hit, total], "unreachable": [hit, total]}}``
    of ``(kind, module, count)``."""
    out = defaultdict(lambda: {"line": [0, 0], "toggle": [0, 0], "unreachable": [0, 0]})
    for kind, module, count in points:
        tally = out[block_of(module)][kind]
        tally[0] += count > 0
        tally[1] += 1
    return dict(sorted(out.items()))


def _percent(hit: int, total: int) -> str:
    return f"{100 * hit / total:.1f} %" if total else "-"


def _describe(info: dict) -> str:
    sw = info["config"]["switch"]
    extras = [name for name in ("pfc", "ecn", "rdma") if info["config"][name]["enabled"]]
    sched = f"islip x{sw['islip_iterations']}" if sw["scheduler"] == "islip" else "fifo"
    return " ".join([info["top"], f"{sw['ports']} ports, {sw['priorities']} classes,", sched,
                     sw["ingress_full"], *extras])


def _table(rows: list[tuple[str, dict]]) -> list[str]:
    lines = ["| block | lines hit / total | lines | toggles hit / total | toggles | unreachable |",
             "|---|---|---|---|---|---|"]
    for name, t in rows:
        (lh, lt), (th, tt) = t["line"], t["toggle"]
        lines.append(f"| {name} | {lh:,} / {lt:,} | {_percent(lh, lt)} | {th:,} / {tt:,} | "
                     f"{_percent(th, tt)} | {t['unreachable'][1]:,} |")
    return lines


def report(data_dir: Path, out_dir: Path) -> dict:
    """Merge, annotate and summarise the runs in ``data_dir`` into ``out_dir``; return the summary."""
    runs = defaultdict(list)
    for path in sorted(data_dir.glob("*.dat")):
        runs[path.name.split(".", 1)[0]].append(path)
    if not runs:
        raise SystemExit(f"coverage: {data_dir}: no coverage data (run Verilator tests with "
                         f"SUPERFABRIC_COVERAGE={data_dir})")
    merged_dir, annotated = out_dir / "data", out_dir / "annotated"
    merged_dir.mkdir(parents=True, exist_ok=True)
    everything = {}
    builds = {}
    parts = {name: {"line": [0, 0], "toggle": [0, 0], "unreachable": [0, 0]} for name in PARTS}
    for build, files in runs.items():
        points = merge(files)
        write_data(points, merged_dir / f"{build}.dat")
        annotate(points, annotated / build)
        everything.update(points)     # builds never share a point: their sources differ
        info = json.loads((data_dir / f"{build}.json").read_text())
        blocks = summarise(read_points(points))
        builds[build] = {"describe": _describe(info), "runs": len(files), "blocks": blocks}
        for block, tally in blocks.items():
            for part, belongs in PARTS.items():
                if belongs(info["top"], block):
                    for kind in tally:
                        parts[part][kind][0] += tally[kind][0]
                        parts[part][kind][1] += tally[kind][1]
    write_data(everything, out_dir / "coverage.dat")
    summary = {"parts": parts, "builds": builds}
    lines = ["# RTL coverage (Verilator line and toggle points)", "",
             "## By part, over every build", "", *_table(list(parts.items())), ""]
    for build, b in builds.items():
        lines += [f"## {build}: {b['describe']} ({b['runs']} runs)", "",
                  *_table(list(b["blocks"].items())), ""]
    lines.append(f"Unreachable: points of the code generator's trigger registers, left out of "
                 f"the figures. Annotated sources: {annotated}/<build>/ (points below one hit: "
                 f"%000000).")
    (out_dir / "summary.md").write_text("\n".join(lines) + "\n")
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m superfabric.tools.coverage DATA -o OUT``."""
    p = argparse.ArgumentParser(prog="python -m superfabric.tools.coverage",
                                description="merge, annotate and summarise Verilator coverage")
    p.add_argument("data", type=Path, help="directory the runs wrote their coverage data into")
    p.add_argument("-o", "--out", type=Path, required=True, help="report directory")
    args = p.parse_args(argv)
    summary = report(args.data, args.out)
    print("\n".join(_table(list(summary["parts"].items()))))
    print(f"coverage: {args.out / 'summary.md'}, annotated sources under {args.out / 'annotated'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
