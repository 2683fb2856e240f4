"""BookSim2, the peer simulator the fabric-scale benchmark compares the golden model with.

BookSim2 is not a dependency of superfabric: its source and the configurations behind the
published comparison are in ``../shared/peers/`` beside the repository, when that folder is
there (its ``README.md``). :func:`build` copies the source into the git-ignored ``build/``
folder and compiles it there; :func:`run` runs one configuration at one injection rate and
returns its speed, simulated cycles over its own total run time (:func:`parse_speed`), and
:func:`run_stats` what the run measured of the traffic (:func:`parse_stats`).
"""

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BookSimSpeed", "BookSimStats", "TOOLS", "build", "find_peers", "missing_tools",
           "parse_speed", "parse_stats", "run", "run_stats"]

#: The source tree of this package (tools/..): ``build/`` and the peers are found from it.
REPO = Path(__file__).resolve().parent.parent
#: What building BookSim2 needs (its Makefile runs flex and bison on its config parser).
TOOLS = ("make", "g++", "flex", "bison")


@dataclass(frozen=True)
class BookSimSpeed:
    """One BookSim2 run: the cycles it simulated ("Time taken is N cycles", summed over its
    simulations) and its "Total run time" in seconds."""
    cycles: int
    seconds: float

    @property
    def cycles_per_second(self) -> float:
        return self.cycles / self.seconds


@dataclass(frozen=True)
class BookSimStats:
    """What one BookSim2 run measured of all its traffic (its "Overall Traffic Statistics"):
    the mean packet latency in cycles from the packet's creation, and the accepted flit
    rate per node."""
    latency: float
    accepted: float


#: The heading of the statistics over the whole run, after the per-sample ones.
_OVERALL = "====== Overall Traffic Statistics ======"


def parse_stats(output: str) -> BookSimStats:
    """The overall mean packet latency and accepted flit rate in BookSim2's standard output
    ``output`` (its first traffic class's).

    Raises
    ------
    ValueError
        When ``output`` has no overall statistics: BookSim2 prints none for a load it finds
        unstable (past saturation it stops, "Simulation unstable"), nor for a run cut short.
    """
    wanted = {"Packet latency average": None, "Accepted flit rate average": None}
    for line in output.partition(_OVERALL)[2].splitlines():
        name, equals, value = line.partition(" = ")
        if equals and name in wanted and wanted[name] is None:
            wanted[name] = float(value.split()[0])
    missing = [name for name, value in wanted.items() if value is None]
    if missing:
        raise ValueError(f"BookSim2 output has no overall '{missing[0]}' (unstable or cut "
                         f"short)")
    return BookSimStats(*wanted.values())


def parse_speed(output: str) -> BookSimSpeed:
    """The simulated cycles and run seconds in BookSim2's standard output ``output``.

    Raises
    ------
    ValueError
        When ``output`` has no "Time taken is N cycles" line or no "Total run time" line (a
        run that failed or was cut short), or a run time that is not positive.
    """
    cycles, seconds = 0, None
    for line in output.splitlines():
        words = line.split()
        if words[:3] == ["Time", "taken", "is"] and len(words) >= 5 and words[4] == "cycles":
            cycles += int(words[3])
        elif words[:3] == ["Total", "run", "time"] and len(words) == 4:
            seconds = float(words[3])
    if not cycles:
        raise ValueError("BookSim2 output has no 'Time taken is N cycles' line")
    if seconds is None:
        raise ValueError("BookSim2 output has no 'Total run time' line")
    if seconds <= 0:
        raise ValueError(f"BookSim2 total run time {seconds}: must be positive")
    return BookSimSpeed(cycles, seconds)


def find_peers(peers: Path | None = None) -> Path | None:
    """The peers folder: ``peers`` when given, else ``../shared/peers`` beside
    this source tree or beside the repository's main checkout (this tree may be a git
    worktree elsewhere); None when there is none."""
    if peers is not None:
        return peers
    roots = [REPO]
    try:
        common = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--path-format=absolute",
                                 "--git-common-dir"], capture_output=True, text=True, timeout=30)
        if common.returncode == 0:
            roots.append(Path(common.stdout.strip()).parent)
    except (OSError, subprocess.TimeoutExpired):
        pass
    for root in roots:
        candidate = root.parent / "shared" / "peers"
        if (candidate / "booksim2").is_dir():
            return candidate
    return None


def missing_tools() -> list[str]:
    """The tools of :data:`TOOLS` not on ``PATH``."""
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def build(peers: Path, build_root: Path = REPO / "build") -> Path:
    """The BookSim2 executable, built from ``peers/booksim2`` in ``build_root/booksim`` the
    first time (a copy: the peers folder is never written into)."""
    tree = build_root / "booksim"
    exe = tree / "src" / "booksim"
    if not exe.exists():
        if not tree.exists():
            build_root.mkdir(parents=True, exist_ok=True)
            shutil.copytree(peers / "booksim2", tree)
        out = subprocess.run(["make", "-C", str(tree / "src")], capture_output=True, text=True)
        if out.returncode or not exe.exists():
            raise RuntimeError(f"building BookSim2 in {tree} failed: "
                               f"{out.stderr.strip().splitlines()[-3:]}")
    return exe


def _output(exe: Path, config: Path, injection_rate: float) -> str:
    """BookSim2 ``exe``'s standard output on ``config`` at ``injection_rate`` (packets per node
    per cycle, flits with 1-flit packets)."""
    # Not the exit status: BookSim2's main() returns -1 when its simulation succeeds. A run
    # that failed has no speed in its output.
    out = subprocess.run([str(exe), str(config), f"injection_rate={injection_rate}"],
                         capture_output=True, text=True)
    return out.stdout or out.stderr


def run(exe: Path, config: Path, injection_rate: float) -> BookSimSpeed:
    """Run BookSim2 ``exe`` on ``config`` at ``injection_rate`` (packets per node per cycle,
    flits with 1-flit packets) and return its speed."""
    output = _output(exe, config, injection_rate)
    try:
        return parse_speed(output)
    except ValueError as err:
        raise RuntimeError(f"BookSim2 on {config.name} failed ({err}): "
                           f"{output.strip().splitlines()[-3:]}") from None


def run_stats(exe: Path, config: Path, injection_rate: float) -> BookSimStats | None:
    """Run BookSim2 ``exe`` on ``config`` at ``injection_rate`` and return what it measured of
    the traffic; None when it found that load unstable (it ran, and said so).

    Raises
    ------
    RuntimeError
        When the run failed otherwise (no speed in its output either).
    """
    output = _output(exe, config, injection_rate)
    try:
        return parse_stats(output)
    except ValueError as err:
        if "Simulation unstable" in output:
            return None
        raise RuntimeError(f"BookSim2 on {config.name} failed ({err}): "
                           f"{output.strip().splitlines()[-3:]}") from None
