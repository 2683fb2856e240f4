"""Collectives in ``superfabric sweep`` and ``superfabric report`` (``tools/sweep.py``,
``tools/report/collective.py``): sizes and algorithms as ``--vary traffic.KEY`` axes, the
nccl-tests columns and the busbw-by-size table, and bad input in one line with status 2."""

import json

import pytest

from superfabric.tools.cli import main
from superfabric.tools.sweep import split_patterns

from .test_run import SETTINGS

SIZES = (1024, 2048)
ALGOS = ("ring", "dimwise")


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A sweep of two sizes by two algorithms on the 2x2x2 torus, and its report."""
    root = tmp_path_factory.mktemp("collective-sweep")
    out, report = root / "sweep", root / "report"
    assert main(["sweep", "--traffic", "collective:op=allreduce,dtype=fp32", *SETTINGS,
                 "--vary", f"traffic.bytes={','.join(map(str, SIZES))}",
                 "--vary", f"traffic.algo={','.join(ALGOS)}", "--workers", "1",
                 "-o", str(out)]) == 0
    assert main(["report", str(out), "-o", str(report)]) == 0
    return out, report


def test_pattern_parameters_stay_with_their_pattern():
    assert split_patterns("uniform,hotspot") == ["uniform", "hotspot"]
    assert split_patterns("collective:op=allreduce,algo=ring,bytes=64") == \
        ["collective:op=allreduce,algo=ring,bytes=64"]
    assert split_patterns("hotspot:fraction=0.3,port=1,uniform,rdma-incast") == \
        ["hotspot:fraction=0.3,port=1", "uniform", "rdma-incast"]


def test_every_size_and_algorithm_is_a_point(swept):
    out, _ = swept
    points = json.loads((out / "sweep.json").read_text())["points"]
    assert len(points) == len(SIZES) * len(ALGOS)
    seen = set()
    for point in points:
        # A collective has no offered load: its id and record carry none.
        assert point["load"] is None and "-l" not in point["id"]
        res = json.loads((out / "points" / point["id"] / "results.json").read_text())
        co = res["collective"]
        assert point["vary"] == {"traffic.bytes": str(co["bytes"]), "traffic.algo": co["algo"]}
        assert res["traffic"]["pattern"] == point["traffic"] == (
            f"collective:op=allreduce,dtype=fp32,bytes={co['bytes']},algo={co['algo']}")
        assert co["data_ok"] and co["dtype"] == "fp32"
        seen.add((co["bytes"], co["algo"]))
    assert seen == {(s, a) for s in SIZES for a in ALGOS}


def _table(md: str, title: str) -> list[list[str]]:
    """The rows of the first table after the heading ``## title``."""
    lines = md[md.index(f"## {title}\n"):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_the_report_reads_like_nccl_tests(swept):
    out, report = swept
    md = (report / "report.md").read_text()
    assert md.startswith(f"# superfabric report: collective sweep of 4 points {out}")
    assert (report / "busbw.png").is_file() and (report / "time.png").is_file()
    # The timeline is a single run's.
    assert not (report / "timeline.png").exists()
    results = {}
    for p in (out / "points").glob("*/results.json"):
        co = json.loads(p.read_text())["collective"]
        results[co["algo"], co["bytes"]] = co
    runs = _table(md, "Runs")
    assert len(runs) == 4
    for row in runs:
        op, algo, dtype, variant, seed, size, count, cycles, time_us, algbw, busbw = row[:11]
        co = results[algo, int(size.replace(",", ""))]
        assert (op, dtype, variant, seed) == ("allreduce", "fp32", "base", "1")
        assert int(count.replace(",", "")) == co["bytes"] // 4
        assert int(cycles.replace(",", "")) == co["cycles"]
        assert (time_us, algbw, busbw) == (f"{co['time_us']:,.3f}", f"{co['algbw_gbps']:,.3f}",
                                           f"{co['busbw_gbps']:,.3f}")
        assert row[11] == f"{co['alpha_beta_cycles'] / 625:,.3f}"
        assert row[12:] == [f"{co['alpha_beta_ratio']:.2f}", "exact"]
    by_size = _table(md, "Bus bandwidth by size")
    header = md[md.index("## Bus bandwidth by size"):].splitlines()[4]
    assert header == "| size | allreduce dimwise fp32 | allreduce ring fp32 |"
    assert [row[0] for row in by_size] == ["1 KiB", "2 KiB"]
    for row, size in zip(by_size, SIZES):
        assert row[1:] == [f"{results[a, size]['busbw_gbps']:,.3f}" for a in ("dimwise", "ring")]


def test_a_single_run_has_its_timeline(tmp_path):
    out = tmp_path / "run"
    assert main(["run", "--traffic", "collective:op=allgather,algo=ring,bytes=1024", *SETTINGS,
                 "-o", str(out)]) == 0
    assert main(["report", str(out), "-o", str(tmp_path / "report")]) == 0
    md = (tmp_path / "report" / "report.md").read_text()
    assert "![Timeline of the steps](timeline.png)" in md
    assert "7 steps started" not in md and "each of its 56 steps started" in md
    assert "## Bus bandwidth by size" not in md       # one curve: nothing to compare
    assert len(_table(md, "Runs")) == 1


def test_a_failed_point_keeps_its_row(swept, tmp_path):
    import shutil
    out, _ = swept
    copy = tmp_path / "sweep"
    shutil.copytree(out, copy)
    point = json.loads((copy / "sweep.json").read_text())["points"][0]
    (copy / "points" / point["id"] / "results.json").unlink()
    (copy / "points" / point["id"] / "error.json").write_text(
        json.dumps({"point": point, "error": "TrafficError: planted"}))
    assert main(["report", str(copy), "-o", str(tmp_path / "report")]) == 0
    md = (tmp_path / "report" / "report.md").read_text()
    assert "failed points: 1" in md and "TrafficError: planted" in md
    rows = _table(md, "Runs")
    assert len(rows) == 4 and rows[0][0] == point["traffic"] and rows[0][-1] == "error"


@pytest.mark.parametrize("args, message", [
    (["--traffic", "collective", "--loads", "0.5"], "--loads: not for collective traffic"),
    (["--traffic", "collective,uniform"],
     "collective patterns (collective) and switch patterns (uniform) cannot share a sweep"),
    (["--traffic", "collective:bytes=1024", "--vary", "traffic.bytes=64,128"],
     "--vary traffic.bytes: the pattern 'collective:bytes=1024' sets bytes already"),
    (["--traffic", "collective", "--vary", "traffic.bytes=64,6"],
     "bytes = 6 must be a multiple of 4 (with traffic.bytes=6)"),
    (["--traffic", "collective", "--vary", "traffic.algo=ring,spiral"],
     "algo = 'spiral' must be one of"),
])
def test_bad_collective_sweeps_are_one_line(args, message, tmp_path, capsys):
    assert main(["sweep", *SETTINGS, *args, "-o", str(tmp_path / "sweep")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "sweep").exists()


def test_a_report_does_not_mix_collectives_with_rdma_runs(swept, tmp_path, capsys):
    import shutil
    out, _ = swept
    mixed = tmp_path / "mixed"
    shutil.copytree(out, mixed)
    spec = json.loads((mixed / "sweep.json").read_text())
    rdma = {**spec["points"][0], "id": "model-rdma_uniform-l0.1-s1", "traffic": "rdma-uniform",
            "load": 0.1}
    spec["points"].append(rdma)
    (mixed / "sweep.json").write_text(json.dumps(spec))
    (mixed / "points" / rdma["id"]).mkdir()
    (mixed / "points" / rdma["id"] / "error.json").write_text(
        json.dumps({"point": rdma, "error": "planted"}))
    capsys.readouterr()
    assert main(["report", str(mixed), "-o", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "mixes collective traffic (collective:" in err
    assert "and RDMA traffic (rdma-uniform); report them apart" in err
