"""Bad input to every command is one line and exit status 2; --help states the defaults;
a run that fails exits 1."""

import argparse
import json
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
    "pool": ["pool", "--accelerators", "2", "--memory-mib", "4"],
    "collective-plan": ["collective-plan", "--bytes", "64"],
    "train": ["train", "--steps", "1"],
    "board": ["board", "--board", "ulx3s", "--cycles", "100", "--no-bitstream"],
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


#: A small RDMA fabric of the tiny preset (four endpoints of two QPs).
RDMA = ["--set", "rdma.enabled=true", "--set", "rdma.qps=8", "--set", "rdma.memory_words=2048",
        "--set", "rdma.page_words=64", "--set", "rdma.pages=64"]

#: Bad input a user can type, per subcommand, and a word the one-line error must contain.
#: ``OUT`` stands for the output directory of the case (inside the test's own directory).
#: A run of the tiny preset on its torus (4x4x4, one endpoint per router).
TORUS_RUN = ["run", "--preset", "tiny", "--set", "fabric.topology=torus"]

BAD_INPUT = [
    # -- every command: the output directory --
    *[(COMMANDS[c] + ["-o", "/proc/superfabric/x"], "cannot create") for c in sorted(COMMANDS)],
    *[(COMMANDS[c] + ["-o", ""], "must name a directory") for c in sorted(COMMANDS)],
    (["synth", "--preset", "tiny", "--target", "ecp5", "-o", "/proc/superfabric/x"],
     "cannot create"),
    (["synth", "--preset", "tiny", "--target", "ecp5", "-o", ""], "must name a directory"),
    # -- the command line itself --
    ([], "command"),
    (["bogus"], "bogus"),
    (["run", "--preset", "tiny", "-o", "OUT", "--bogus"], "--bogus"),
    (["run", "--preset", "tiny"], "-o"),
    # -- configuration, through generate --
    (["generate", "--preset", "nope", "-o", "OUT"], "--preset"),
    (["generate", "--preset", "tiny", "--config", "missing.toml", "-o", "OUT"], "--config"),
    (["generate", "--config", "missing.toml", "-o", "OUT"], "missing.toml"),
    (["generate", "--set", "switch.ports=1", "-o", "OUT"], "switch.ports"),
    (["generate", "--set", "switch.nokey=1", "-o", "OUT"], "nokey"),
    (["generate", "--set", "nosection.ports=4", "-o", "OUT"], "nosection"),
    (["generate", "--set", "noequals", "-o", "OUT"], "--set"),
    (["generate", "--set", "switch.ports=4", "--set", "switch.ports=8", "-o", "OUT"],
     "given twice"),
    (["generate", "--top", "bogus", "-o", "OUT"], "--top"),
    (["generate", "--top", "rdma_engine", "-o", "OUT"], "rdma.enabled"),
    (["generate", "--top", "collective", "-o", "OUT"], "rdma.enabled"),
    (["generate", "--set", "fabric.topology=fat_tree", "-o", "OUT"], "fabric.routing"),
    (["generate", "--set", "fabric.topology=torus", "--set", "fabric.routing=adaptive",
      "--set", "fabric.vcs=2", "-o", "OUT"], "vcs"),
    (["generate", "--set", "fabric.topology=torus", "--set", "fabric.vcs=1", "-o", "OUT"],
     "cycle"),
    # -- run --
    (["run", "--preset", "tiny", "--load", "0", "-o", "OUT"], "traffic.load"),
    (["run", "--preset", "tiny", "--load", "1.5", "-o", "OUT"], "traffic.load"),
    (["run", "--preset", "tiny", "--load", "nan", "-o", "OUT"], "traffic.load"),
    (["run", "--preset", "tiny", "--load", "half", "-o", "OUT"], "--load"),
    (["run", "--preset", "tiny", "--cycles", "0", "-o", "OUT"], "traffic.cycles"),
    (["run", "--preset", "tiny", "--cycles", "1e3", "-o", "OUT"], "--cycles"),
    (["run", "--preset", "tiny", "--seed", "-1", "-o", "OUT"], "traffic.seed"),
    (["run", "--preset", "tiny", "--traffic", "zipf", "-o", "OUT"], "zipf"),
    (["run", "--preset", "tiny", "--traffic", "hotspot:fraction=2", "-o", "OUT"], "fraction"),
    (["run", "--preset", "tiny", "--traffic", "hotspot:heat=2", "-o", "OUT"], "heat"),
    (["run", "--preset", "tiny", "--traffic", "uniform:x=1", "-o", "OUT"], "uniform"),
    (["run", "--preset", "default", "--traffic", "transpose", "-o", "OUT"], "transpose"),
    (["run", "--preset", "tiny", "--lengths", "fixed:99", "-o", "OUT"], "fixed:99"),
    (["run", "--preset", "tiny", "--lengths", "bimodal:4,2,0.5", "-o", "OUT"], "SHORT"),
    (["run", "--preset", "tiny", "--lengths", "garbage", "-o", "OUT"], "garbage"),
    (["run", "--preset", "tiny", "--sink-stall", "5", "-o", "OUT"], "traffic.sink_stall"),
    (["run", "--preset", "tiny", "--sink-stall", "-0.1", "-o", "OUT"], "traffic.sink_stall"),
    (["run", "--preset", "tiny", "--pause-rate", "1", "-o", "OUT"], "traffic.pause_rate"),
    (["run", "--preset", "default", "--priority-weights=1,1", "-o", "OUT"], "priority_weights"),
    (["run", "--preset", "tiny", "--priority-weights=a,b", "-o", "OUT"], "--priority-weights"),
    (["run", "--preset", "tiny", "--priority-weights=0,0", "-o", "OUT"], "priority_weights"),
    (["run", "--preset", "tiny", "--sim", "questa", "-o", "OUT"], "--sim"),
    (["run", "--preset", "tiny", "--stimulus", "magic", "-o", "OUT"], "--stimulus"),
    (["run", "--preset", "tiny", "--sim", "verilator", "--threads", "0", "-o", "OUT"],
     "--threads = 0: must be in 1..64"),
    (["run", "--preset", "tiny", "--sim", "icarus", "--threads", "2", "-o", "OUT"],
     "--threads = 2: only Verilator and model runs have threads"),
    (["run", "--preset", "tiny", "--stimulus", "hardware", "--threads", "2", "-o", "OUT"],
     "--threads = 2: the model of --stimulus hardware runs on one thread"),
    (["run", "--preset", "tiny", "--sim", "verilator", "--cxx-opt", "O1", "-o", "OUT"],
     "--cxx-opt = 'O1': must be one of 0, 1, 2, 3, s"),
    (["run", "--preset", "tiny", "--sim", "icarus", "--cxx-opt", "s", "-o", "OUT"],
     "--cxx-opt = 's': only Verilator runs are compiled from C++"),
    (["run", "--preset", "tiny", "--bad-fraction", "0.1", "-o", "OUT"], "traffic.bad_fraction"),
    (["run", "--preset", "tiny", "--traffic", "rdma-uniform", "-o", "OUT"], "rdma.enabled"),
    (["run", "--preset", "tiny", *RDMA, "--traffic", "rdma-uniform", "--bad-fraction", "2",
      "-o", "OUT"], "traffic.bad_fraction"),
    (["run", "--preset", "tiny", *RDMA, "--traffic", "rdma-uniform", "--sink-stall", "0.1",
      "-o", "OUT"], "traffic.sink_stall"),
    (["run", "--preset", "tiny", *RDMA, "--traffic", "rdma-victim:senders=4", "-o", "OUT"],
     "senders = '4' must be an integer in 1..3"),
    (["run", "--preset", "tiny", *RDMA, "--traffic", "rdma-victim:senders=1,victim=2",
      "-o", "OUT"], "victim 2 must be one of the 1 senders"),
    (["run", "--preset", "tiny", "--stimulus", "hardware", "--pause-rate", "0.1", "-o", "OUT"],
     "traffic.pause_rate"),
    (["run", "--preset", "tiny", "--stimulus", "hardware", "--set", "pfc.enabled=true",
      "-o", "OUT"], "pfc.enabled"),
    (["run", "--preset", "tiny", "--set", "switch.ports=4", "--set", "switch.ports=8",
      "-o", "OUT"], "given twice"),
    (["run", "--preset", "tiny", "--set", "faults.drop_rate=2", "-o", "OUT"], "drop_rate"),
    # -- sweep: every point checked as run checks it, before the first one runs --
    (["sweep", "--preset", "tiny", "--traffic", "hotspot:fraction=2", "-o", "OUT"], "fraction"),
    (["sweep", "--preset", "default", "--traffic", "transpose", "-o", "OUT"], "transpose"),
    (["sweep", "--preset", "tiny", "--lengths", "fixed:99", "-o", "OUT"], "fixed:99"),
    (["sweep", "--preset", "tiny", "--sink-stall", "5", "-o", "OUT"], "traffic.sink_stall"),
    (["sweep", "--preset", "default", "--priority-weights=1,1", "-o", "OUT"], "priority_weights"),
    (["sweep", "--preset", "tiny", "--loads", "0.1:1.0:0.0000001", "-o", "OUT"], "at most"),
    (["sweep", "--preset", "tiny", "--loads", "0.1:inf:0.1", "-o", "OUT"], "--loads"),
    (["sweep", "--preset", "tiny", "--loads", "0.5,0.5", "-o", "OUT"], "given twice"),
    (["sweep", "--preset", "tiny", "--seeds", "2000", "-o", "OUT"], "at most"),
    (["sweep", "--preset", "tiny", "--seeds", "0", "-o", "OUT"], "--seeds"),
    (["sweep", "--preset", "tiny", "--cycles", "0", "-o", "OUT"], "--cycles"),
    (["sweep", "--preset", "tiny", "--workers", "0", "-o", "OUT"], "--workers"),
    (["sweep", "--preset", "tiny", "--scheduler", "garbage", "-o", "OUT"], "--scheduler"),
    (["sweep", "--preset", "tiny", "--scheduler", "udp://127.0.0.1:8786", "-o", "OUT"],
     "--scheduler"),
    (["sweep", "--preset", "tiny", "--scheduler", "tcp://127.0.0.1:notaport", "-o", "OUT"],
     "--scheduler"),
    (["sweep", "--preset", "tiny", "--scheduler", "tcp://127.0.0.1:1", "--scheduler-timeout",
      "1", "-o", "OUT"], "cannot reach"),
    (["sweep", "--preset", "tiny", "--scheduler-timeout", "0", "-o", "OUT"],
     "--scheduler-timeout"),
    (["sweep", "--preset", "tiny", "--vary", "switch.ports=4", "--vary", "switch.ports=8",
      "-o", "OUT"], "given twice"),
    (["sweep", "--preset", "tiny", "--set", "switch.ports=4", "--set", "switch.ports=8",
      "-o", "OUT"], "given twice"),
    (["sweep", "--preset", "tiny", "--vary", "switch.ports=4,5", "--traffic", "transpose",
      "-o", "OUT"], "with switch.ports=5"),
    (["sweep", "--preset", "tiny", "--vary", "switch.nokey=1,2", "-o", "OUT"], "nokey"),
    (["sweep", "--preset", "tiny", *RDMA, "--traffic", "rdma-uniform", "--vary",
      "rdma.qps=8,64", "--cycles", "400", "-o", "OUT"], "traffic.cycles"),
    (["sweep", "--preset", "tiny", "--stimulus", "hardware", "--set", "pfc.enabled=true",
      "-o", "OUT"], "pfc.enabled"),
    # -- fuzz --
    (["fuzz", "--configs", "0", "-o", "OUT"], "--configs"),
    (["fuzz", "--seed", "-1", "-o", "OUT"], "--seed"),
    (["fuzz", "--sim", "questa", "-o", "OUT"], "--sim"),
    (["fuzz", "--max-kb", "0", "-o", "OUT"], "--max-kb"),
    # -- report --
    (["report", "missing-dir", "-o", "OUT"], "missing-dir"),
    (["report", ".", "-o", "OUT"], "."),
    (["report", ".", "--cdf-load", "high", "-o", "OUT"], "--cdf-load"),
    # -- pool --
    (["pool", "--allocator", "first-fit", "-o", "OUT"], "--allocator"),
    (["pool", "--accelerators", "0", "-o", "OUT"], "--accelerators"),
    (["pool", "--accelerators", "2000", "-o", "OUT"], "--accelerators"),
    (["pool", "--memory-mib", "0", "-o", "OUT"], "--memory-mib"),
    (["pool", "--memory-mib", "129", "-o", "OUT"], "--memory-mib"),
    (["pool", "--memory-mib", "lots", "-o", "OUT"], "--memory-mib"),
    (["pool", "--trace", "inference", "-o", "OUT"], "--trace"),
    (["pool", "--seed", "-1", "-o", "OUT"], "--seed"),
    (["pool", "--set", "rdma.page_words=3", "-o", "OUT"], "rdma.page_words"),
    # -- collective-plan --
    (["collective-plan", "--op", "reduce", "-o", "OUT"], "--op"),
    (["collective-plan", "--algo", "nccl", "-o", "OUT"], "--algo"),
    (["collective-plan", "--algo", "dimwise", "-o", "OUT"], "dimwise"),
    (["collective-plan", "--bytes", "6", "-o", "OUT"], "--bytes"),
    (["collective-plan", "--bytes", "lots", "-o", "OUT"], "--bytes"),
    (["collective-plan", "--accelerator", "8", "-o", "OUT"], "--accelerator"),
    (["collective-plan", "--steps", "-1", "-o", "OUT"], "--steps"),
    (["collective-plan", "--set", "fabric.dims=[1]", "-o", "OUT"], "fabric.dims"),
    # -- train --
    (["train", "--accelerators", "1", "-o", "OUT"], "--accelerators"),
    (["train", "--compression", "fp16", "-o", "OUT"], "--compression"),
    (["train", "--steps", "0", "-o", "OUT"], "--steps"),
    (["train", "--algo", "nccl", "-o", "OUT"], "--algo"),
    (["train", "--batch", "2", "-o", "OUT"], "--batch"),
    (["train", "--lr", "nan", "-o", "OUT"], "--lr"),
    # -- run --capture-link: a link of the fabric, before anything runs --
    (["run", "--preset", "tiny", "--capture-link", "0:1", "-o", "OUT"], "no links"),
    (TORUS_RUN + ["--capture-link", "0-1", "-o", "OUT"], "ROUTER:PORT"),
    (TORUS_RUN + ["--capture-link", "64:1", "-o", "OUT"], "0..63"),
    (TORUS_RUN + ["--capture-link", "0:0", "-o", "OUT"], "link ports are 1, 2, 3, 4, 5, 6"),
    (TORUS_RUN + ["--stimulus", "hardware", "--capture-link", "0:1", "-o", "OUT"],
     "records no packets"),
    # -- board: refused before the model runs --
    (["board", "-o", "OUT"], "--board"),
    (["board", "--board", "de10nano", "-o", "OUT"], "--board"),
    (["board", "--board", "ulx3s", "--fpga", "99F", "-o", "OUT"], "--fpga"),
    (["board", "--board", "orangecrab", "--fpga", "45F", "-o", "OUT"], "25F, 85F"),
    (["board", "--board", "ulx3s", "--clock-mhz", "1", "-o", "OUT"], "--clock-mhz"),
    (["board", "--board", "ulx3s", "--clock-mhz", "500", "-o", "OUT"], "--clock-mhz"),
    (["board", "--board", "ulx3s", "--baud", "3000000", "-o", "OUT"], "--baud"),
    (["board", "--board", "ulx3s", "--traffic", "zipf", "-o", "OUT"], "zipf"),
    (["board", "--board", "ulx3s", "--traffic", "neighbour", "-o", "OUT"], "hardware generators"),
    (["board", "--board", "ulx3s", "--load", "2", "-o", "OUT"], "traffic.load"),
    # -- synth: refused before any FPGA tool runs --
    (["synth", "--preset", "tiny", "-o", "OUT"], "--target"),
    (["synth", "--preset", "tiny", "--target", "stratix", "-o", "OUT"], "stratix"),
    (["synth", "--preset", "tiny", "--target", "ecp5", "--device", "nope", "-o", "OUT"], "nope"),
    (["synth", "--preset", "tiny", "--target", "ecp5", "--vary", "switch.ports=4,8",
      "--workers", "0", "-o", "OUT"], "--workers"),
    (["synth", "--preset", "tiny", "--target", "ecp5", "--vary", "switch.ports=4",
      "--vary", "switch.ports=8", "-o", "OUT"], "given twice"),
]


def _case_id(case) -> str:
    return " ".join(case[0])[:80] or "(no arguments)"


@pytest.mark.parametrize("argv, word", BAD_INPUT, ids=[_case_id(c) for c in BAD_INPUT])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(argv, word, tmp_path, monkeypatch,
                                                         capsys):
    """Each bad input: exit status 2, one line on stderr naming what is wrong, no
    traceback, and nothing written, neither the output directory nor anything else."""
    from superfabric.tools.cli import main
    monkeypatch.chdir(tmp_path)
    out = str(tmp_path / "out")
    assert main([out if a == "OUT" else a for a in argv]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("superfabric: error: ") and word in lines[0], lines[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("variable, value, allowed", [
    ("SUPERFABRIC_VERILATOR_THREADS", "0", "a whole number in 1..64"),
    ("SUPERFABRIC_VERILATOR_THREADS", "two", "a whole number in 1..64"),
    ("SUPERFABRIC_VERILATOR_THREADS", "65", "a whole number in 1..64"),
    ("SUPERFABRIC_VERILATOR_CXX_OPT", "O2", "one of 0, 1, 2, 3, s"),
    ("SUPERFABRIC_VERILATOR_CXX_OPT", "fast", "one of 0, 1, 2, 3, s")])
def test_a_bad_verilator_variable_is_one_line_exit_2(variable, value, allowed, tmp_path,
                                                     monkeypatch, capsys):
    """The variables --threads and --cxx-opt stand for are checked as they are."""
    from superfabric.tools.cli import main
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(variable, value)
    assert main(["run", "--preset", "tiny", "--sim", "verilator", "-o", "out"]) == 2
    err = capsys.readouterr().err
    assert err == f"superfabric: error: {variable} = {value!r}: must be {allowed}\n"
    assert list(tmp_path.iterdir()) == []


def test_bad_input_table_is_broad():
    """The table covers every subcommand, with at least sixty cases."""
    assert len(BAD_INPUT) >= 60
    assert {argv[0] for argv, _ in BAD_INPUT if argv} >= {"generate", "run", "sweep", "fuzz",
                                                          "report", "synth", "pool",
                                                          "collective-plan"}


def test_no_traceback_end_to_end(tmp_path):
    """As a user runs it, a path that cannot be created: one line, exit 2."""
    line = _one_line(superfabric(*COMMANDS["sweep"], "-o", "/proc/superfabric/x"))
    assert line == ("superfabric: error: -o = '/proc/superfabric/x': cannot create it (No such "
                    "file or directory)")


def test_help_states_every_default():
    """Every option of every subcommand says its default (flags are off by default, and
    required options have none)."""
    from superfabric.tools.cli import _parser
    parser = _parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in sub.choices.items():
        text = " ".join(command.format_help().split())
        for action in command._actions:
            if (not action.option_strings or action.required or action.nargs == 0
                    or action.dest == "help"):
                continue
            formatter = command._get_formatter()
            helped = " ".join(formatter._expand_help(action).split()) if action.help else ""
            assert "default" in helped, f"{name} {action.option_strings[0]}: {helped!r}"
            assert helped in text


def test_run_that_fails_exits_1(tmp_path):
    """An RDMA run whose links drop everything completes no request: it says so and exits 1."""
    res = superfabric("run", "--preset", "tiny", *RDMA, "--set", "faults.drop_rate=1.0",
                      "--traffic", "rdma-uniform", "--cycles", "600", "-o", str(tmp_path / "r"))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "FAILED: " in res.stdout and "requests not completed" in res.stdout
    assert "stalled at cycle" in res.stdout
    assert (tmp_path / "r" / "results.json").is_file()


def test_a_model_run_on_two_threads_says_so_and_runs_as_on_one(tmp_path):
    """--threads with --sim model steps the fabric's routers on that many threads (spec 5.9):
    results.json states it, and the run is the one-thread run."""
    runs = {}
    for threads in (1, 2):
        out = tmp_path / f"t{threads}"
        res = superfabric("run", "--set", "fabric.topology=torus", "--set", "fabric.dims=[2, 2]",
                          "--cycles", "400", "--load", "0.6", "--threads", str(threads),
                          "-o", str(out))
        assert res.returncode == 0, res.stdout + res.stderr
        runs[threads] = json.loads((out / "results.json").read_text())
    assert runs[2]["threads"] == runs[2]["model"]["threads"] == 2
    assert runs[1]["threads"] == 1
    for key in ("cycles", "throughput", "latency", "packets", "counters", "fabric"):
        assert runs[2][key] == runs[1][key], key


def test_every_one_line_error_names_an_exception_class():
    """main() looks the errors up by module and name (it imports none of them): a rename
    must not turn a one-line error into a traceback."""
    import importlib
    from superfabric.tools.cli import _ONE_LINE_ERRORS
    for status, where in _ONE_LINE_ERRORS:
        assert status in (1, 2)
        for module, name in where:
            assert issubclass(getattr(importlib.import_module(f"superfabric.{module}"), name),
                              Exception)


def test_a_model_run_imports_neither_scapy_nor_the_report(tmp_path):
    code = ("import sys; from superfabric.tools.cli import main; "
            f"main({COMMANDS['run'] + ['-o', str(tmp_path)]!r}); "
            "print(sorted(m for m in ('scapy', 'superfabric.tools.report.build') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
