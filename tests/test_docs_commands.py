"""Every ``superfabric`` command the README and the docs show, run as written, so an
example that no longer works fails the suite.

The commands are found, whatever the pages look like, in three places: lines
of fenced code blocks, lines of indented blocks (both with ``\\``
continuations, and an optional ``$`` prompt), and inline code spans, which may
wrap across lines. A span or line that starts with ``superfabric`` and gives
at least one option is an example. Not examples, and not run:

- a synopsis: a token made of alternatives or optional parts (``|``,
  ``[--set``, ``(--preset``, ``...``) or an upper-case placeholder (``DIR``,
  ``L``, ``N``) anywhere but as the value of ``-o``, which is given a
  directory of the test's own.

The examples run in document order, in one directory per page (a report
reads what an earlier example wrote), each as a user runs it, and must exit
with status 0; or with the status the sentence that shows the command names
("... is one line and exit status 2: `superfabric run ...`"). So that the
suite stays minutes long, each example is transformed, and only in these
ways:

- ``--sim icarus`` / ``--sim verilator`` (or a list with them) becomes
  ``--sim model``: the golden model takes the same arguments and refuses
  the same values; the RTL itself is held against the model by the RTL
  tests (``tests/test_switch_rtl.py``, ``tests/fabric/``, ``tests/rdma/``),
  one build each.
- ``--cycles`` is at most :data:`CYCLES` (and given when the example leaves
  the default); ``--seeds`` is 1; a ``--loads START:STOP:STEP``
  range keeps its two ends; ``fuzz --configs`` is 2.
- ``-o`` is added where an example leaves it out.
- ``generate`` runs as written: its Verilog is what the example promises,
  and no smaller configuration would check that (a fabric's stimulus top
  takes a few minutes).
- ``board`` runs with ``--no-bitstream``: the model's run, the PLL, the
  design files and the expected report, not the bitstream's minutes of
  Yosys and nextpnr, which ``make bench TABLES=board`` runs.
- ``synth``, and a ``report`` of a directory only ``synth`` would write, are
  checked up to the point where the FPGA tools would start (arguments,
  configuration, top, target and device): a synthesis takes minutes per
  design, and ``tests/test_synth*.py`` run the flow itself.
"""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The most cycles an example runs here.
CYCLES = 2000
#: Simulators an example's ``--sim`` may name that become the model here.
RTL_SIMS = ("icarus", "verilator")


def pages() -> list[Path]:
    """The README and every Markdown page under ``docs/``."""
    found = [ROOT / "README.md"] if (ROOT / "README.md").is_file() else []
    return found + sorted((ROOT / "docs").rglob("*.md"))


def _expected_status(text: str, start: int) -> int:
    """The exit status the sentence showing the command at ``start`` names, else 0."""
    ends = [m.end() for m in re.finditer(r"[.!?]\s|\n\s*\n", text[:start])]
    sentence = text[ends[-1] if ends else 0:start]
    named = re.findall(r"exit status (\d)", sentence)
    return int(named[-1]) if named else 0


def extract(text: str) -> list[tuple[int, str, int]]:
    """The ``superfabric`` commands of a Markdown page.

    Returns
    -------
    list of (int, str, int)
        Per command, in page order: its line number, the command on one
        line, and the exit status the page says it ends with.
    """
    found = []
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    fence = None
    blocks = set()
    i = 0
    while i < len(lines):
        line = lines[i].rstrip("\n")
        marker = re.match(r"\s*(```|~~~)", line)
        if marker:
            fence = None if fence == marker.group(1) else (fence or marker.group(1))
            i += 1
            continue
        body = line.strip()
        body = body[2:] if body.startswith("$ ") else body
        in_block = fence is not None or line.startswith(("    ", "\t"))
        if in_block and body.startswith("superfabric "):
            first = i
            while body.endswith("\\") and i + 1 < len(lines):
                i += 1
                body = body[:-1].rstrip() + " " + lines[i].strip()
            blocks.update(range(first, i + 1))
            found.append((first + 1, body, _expected_status(text, offsets[first])))
        i += 1
    # Inline spans, outside the blocks already read (a span may wrap lines).
    prose = "".join(line if n not in blocks and not re.match(r"\s*(```|~~~)", line) else "\n"
                    for n, line in enumerate(lines))
    fenced = [(m.start(), m.end()) for m in re.finditer(r"(```|~~~).*?\1", prose, flags=re.S)]
    for m in re.finditer(r"`(superfabric\s[^`]+)`", prose):
        if any(a <= m.start() < b for a, b in fenced):
            continue
        found.append((prose.count("\n", 0, m.start()) + 1,
                      " ".join(m.group(1).replace("\\\n", " ").split()),
                      _expected_status(prose, m.start())))
    return sorted(found)


def is_synopsis(argv: list[str]) -> bool:
    """A command line that describes a command rather than being one (see the module)."""
    for k, token in enumerate(argv):
        if "|" in token and "=" not in token or token in ("...", "…") or "..." in token:
            return True
        if token[:1] in "[(" or token[-1:] in "])" and "=" not in token:
            return True
        if re.fullmatch(r"[A-Z][A-Z_]*", token) and not (k and argv[k - 1] in ("-o", "--out")):
            return True
    return False


def transform(argv: list[str], out: str) -> list[str]:
    """The example as run here (see the module for each change)."""
    argv = list(argv)
    command = argv[0]

    def value_of(option):
        return argv.index(option) + 1 if option in argv else None

    if (k := value_of("--sim")) is not None:
        sims = [s for s in argv[k].split(",") if s not in RTL_SIMS]
        argv[k] = ",".join(dict.fromkeys(sims or ["model"]))
        if "model" not in argv[k]:
            argv[k] = "model"
    if command == "board" and "--no-bitstream" not in argv:
        argv.append("--no-bitstream")
    if command in ("run", "sweep", "board"):
        if (k := value_of("--cycles")) is not None:
            argv[k] = str(min(int(argv[k]), CYCLES))
        else:
            argv += ["--cycles", str(CYCLES)]
    if command == "sweep":
        if (k := value_of("--seeds")) is not None:
            argv[k] = "1"
        if (k := value_of("--loads")) is not None and ":" in argv[k]:
            start, stop, _ = argv[k].split(":")
            argv[k] = f"{start},{stop}"
    if command == "fuzz" and (k := value_of("--configs")) is not None:
        argv[k] = "2"
    k = value_of("-o") or value_of("--out")
    if k is None:
        argv += ["-o", out]
    elif re.fullmatch(r"[A-Z][A-Z_]*", argv[k]):
        argv[k] = out
    return argv


def examples() -> list:
    """Every example of every page, as pytest parameters: (page, line, argv, status)."""
    params = []
    for page in pages():
        for line, command, status in extract(page.read_text()):
            try:
                argv = shlex.split(command)[1:]
            except ValueError:
                continue
            if not any(a.startswith("-") for a in argv) or is_synopsis(argv):
                continue
            name = f"{page.relative_to(ROOT)}:{line}"
            params.append(pytest.param(page, argv, status, id=name))
    return params


EXAMPLES = examples()


@pytest.fixture(scope="module")
def workdirs(tmp_path_factory):
    """One directory per page, shared by its examples in page order."""
    made = {}

    def workdir(page: Path) -> Path:
        if page not in made:
            made[page] = tmp_path_factory.mktemp(page.stem)
        return made[page]
    return workdir


#: ``-o`` of examples checked without running them: a report of one of these is checked too.
_NOT_RUN: set[str] = set()


def _check_without_tools(argv: list[str]) -> None:
    """``synth`` (and a report of its directory) up to where the FPGA tools start."""
    from superfabric.tools import cli
    from superfabric.tools.synth.device import find_device
    args = cli._parser().parse_args(argv)
    if args.command == "synth":
        cli._top_config(args)
        find_device(args.target, args.device)
        _NOT_RUN.add(str(Path(args.out)))


@pytest.mark.docs
@pytest.mark.parametrize("page, argv, status", EXAMPLES)
def test_example_runs(page, argv, status, workdirs):
    cwd = workdirs(page)
    out = f"out-{len(list(cwd.iterdir()))}"
    argv = transform(argv, out)
    if argv[0] == "synth" or argv[0] == "report" and str(Path(argv[1])) in _NOT_RUN:
        _check_without_tools(argv)
        return
    res = subprocess.run([sys.executable, "-m", "superfabric.tools.cli", *argv], cwd=cwd,
                         capture_output=True, text=True)
    assert res.returncode == status, (f"superfabric {shlex.join(argv)}: exit status "
                                      f"{res.returncode}, the page says {status}\n"
                                      f"{res.stdout[-3000:]}{res.stderr[-3000:]}")
    assert "Traceback" not in res.stderr


@pytest.mark.docs
def test_the_pages_show_examples():
    """The extraction finds examples (an empty list would pass vacuously)."""
    assert len(EXAMPLES) >= 5, [p.id for p in EXAMPLES]


def test_extraction_reads_blocks_spans_and_synopses():
    text = ("Run it:\n\n    superfabric run --preset tiny \\\n        --cycles 300 -o DIR\n\n"
            "```console\n$ superfabric sweep --loads 0.1:1.0:0.1 -o s\n```\n\n"
            "A bad value is one line and exit status 2: `superfabric run\n--load 2`.\n"
            "Synopsis: `superfabric run --sim model|icarus -o DIR`, a mention: "
            "`superfabric report`.\n")
    found = extract(text)
    assert [(line, cmd, status) for line, cmd, status in found] == [
        (3, "superfabric run --preset tiny --cycles 300 -o DIR", 0),
        (7, "superfabric sweep --loads 0.1:1.0:0.1 -o s", 0),
        (10, "superfabric run --load 2", 2),
        (12, "superfabric report", 0),
        (12, "superfabric run --sim model|icarus -o DIR", 0),
    ]
    assert is_synopsis(shlex.split(found[4][1])[1:])
    assert not is_synopsis(["run", "--set", "fabric.dims=[4,4,4]", "-o", "DIR"])
    assert transform(["sweep", "--loads", "0.1:1.0:0.1", "--seeds", "2", "--sim",
                      "model,verilator", "-o", "DIR"], "o") == [
        "sweep", "--loads", "0.1,1.0", "--seeds", "1", "--sim", "model", "-o", "o",
        "--cycles", str(CYCLES)]
