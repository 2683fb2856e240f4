"""The fabric-scale benchmark's plumbing, without timing anything: BookSim2's output parser
on a canned output, and the command line of ``make bench``."""

import pytest

from superfabric.tools import bench
from superfabric.tools.booksim import BookSimSpeed, parse_speed

#: The end of a BookSim2 run of ``torus444_dor2`` (abridged): its statistics, the line giving
#: the cycles it simulated, and its total run time in seconds.
BOOKSIM_OUTPUT = """\
BEGIN Configuration File: torus444_dor2
topology = torus;
END Configuration File: torus444_dor2
Class 0:
Packet latency average = 11.6139
	minimum = 1
	maximum = 57
Overall average accepted rate = 0.299843 (1 samples)
Time taken is 14000 cycles
====== Overall Traffic Statistics ======
====== Traffic class 0 ======
Packet latency average = 11.6139 (1 samples)
Total run time 2.51482
"""


def test_booksim_output_gives_cycles_and_run_time():
    speed = parse_speed(BOOKSIM_OUTPUT)
    assert speed == BookSimSpeed(cycles=14_000, seconds=2.51482)
    assert speed.cycles_per_second == pytest.approx(14_000 / 2.51482)


def test_booksim_cycles_of_several_simulations_add_up():
    text = BOOKSIM_OUTPUT.replace("Time taken is 14000 cycles",
                                  "Time taken is 14000 cycles\nTime taken is 6000 cycles")
    assert parse_speed(text).cycles == 20_000


@pytest.mark.parametrize("cut, message", [
    ("Time taken is 14000 cycles\n", "Time taken"),
    ("Total run time 2.51482\n", "Total run time"),
])
def test_booksim_output_cut_short_is_refused(cut, message):
    with pytest.raises(ValueError, match=message):
        parse_speed(BOOKSIM_OUTPUT.replace(cut, ""))


def test_booksim_zero_run_time_is_refused():
    with pytest.raises(ValueError, match="must be positive"):
        parse_speed(BOOKSIM_OUTPUT.replace("Total run time 2.51482", "Total run time 0"))


def test_bench_runs_every_table_by_default_with_the_scale_defaults():
    args = bench.parse_args([])
    assert args.tables == list(bench.TABLES) and "scale" in bench.TABLES
    assert args.scale_dims is None
    assert (args.scale_cycles, args.runs, args.peers) == (bench.SCALE_CYCLES, 3, None)


def test_bench_scale_table_options(tmp_path):
    (tmp_path / "booksim2").mkdir()
    args = bench.parse_args(["scale", "--scale-dims", "4x4x4", "8x8x8", "--scale-cycles",
                             "2000", "--runs", "1", "--peers", str(tmp_path)])
    assert args.tables == ["scale"]
    assert args.scale_dims == ["4x4x4", "8x8x8"]
    assert (args.scale_cycles, args.runs, args.peers) == (2000, 1, tmp_path)


def test_bench_scale_rows_are_the_issues_sizes():
    assert sorted({bench.dims_name(dims) for dims, _, _ in bench.SCALE}) == \
        ["4x4x4", "6x6x6", "8x8x6", "8x8x8"]
    assert [load for dims, load, _ in bench.SCALE if dims == (4, 4, 4)] == [0.2, 0.3]


@pytest.mark.parametrize("argv, message", [
    (["nosuch"], "table 'nosuch'"),
    (["scale", "--scale-dims", "5x5x5"], "invalid choice: '5x5x5'"),
    (["scale", "--scale-cycles", "0"], "--scale-cycles 0: must be at least 1"),
    (["scale", "--runs", "0"], "--runs 0: must be at least 1"),
    (["scale", "--peers", "/nonexistent/peers"], "has no booksim2/"),
])
def test_bench_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.parse_args(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_scale_table_without_peers_has_the_model_columns_only(monkeypatch):
    monkeypatch.setattr(bench.booksim, "find_peers", lambda peers: None)
    exe, configs, why = bench._booksim(None)
    assert (exe, configs) == (None, None)
    assert "no `../shared/peers/`" in why and "model's columns only" in why


def test_scale_table_says_how_to_get_missing_build_tools(monkeypatch, tmp_path):
    monkeypatch.setattr(bench.booksim, "find_peers", lambda peers: tmp_path)
    monkeypatch.setattr(bench.booksim, "missing_tools", lambda: ["flex", "bison"])
    exe, _, why = bench._booksim(None)
    assert exe is None
    assert "needs flex, bison" in why and "apt-get install" in why
