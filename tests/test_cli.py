"""The command line's output option: a file where a directory belongs is one line, exit 2."""

import os
import subprocess
import sys

import pytest

#: Each command that writes into ``-o``, with the arguments it needs besides.
COMMANDS = {
    "generate": ["generate", "--preset", "tiny"],
    "run": ["run", "--preset", "tiny", "--cycles", "100", "--sim", "model"],
    "sweep": ["sweep", "--preset", "tiny", "--loads", "0.5", "--cycles", "100", "--sim", "model"],
    "fuzz": ["fuzz", "--configs", "1", "--sim", "model"],
    "report": ["report", "."],
}


def superfabric(*args):
    """Run the console entry point as a user would, capturing its output."""
    return subprocess.run([sys.executable, "-m", "superfabric.tools.cli", *args],
                          capture_output=True, text=True)


def _one_line(res) -> str:
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_output_that_is_a_file_is_one_line_exit_2(command, tmp_path):
    existing = tmp_path / "results.txt"
    existing.write_text("keep me\n")
    line = _one_line(superfabric(*COMMANDS[command], "-o", str(existing)))
    assert line == (f"superfabric: error: -o = {str(existing)!r}: is a file; must be a "
                    f"directory (created when missing)")
    line = _one_line(superfabric(*COMMANDS[command], "-o", str(existing / "run")))
    assert f"-o = {str(existing / 'run')!r}: {str(existing)!r} is a file" in line
    assert existing.read_text() == "keep me\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_output_below_a_read_only_directory_is_one_line_exit_2(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    line = _one_line(superfabric(*COMMANDS["run"], "-o", str(locked / "run")))
    assert f"{str(locked)!r} is not writable" in line
