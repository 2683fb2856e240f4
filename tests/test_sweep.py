"""Sweeps through the command line: points, resume, failures, reports, a real Dask scheduler."""

import json
import socket
import subprocess
import sys

import pytest

from superfabric.tools.sweep import SweepError, parse_loads

from conftest import require_simulator

#: A small RDMA fabric: four endpoints of two QPs each, small memories.
RDMA = ["--set", "rdma.enabled=true", "--set", "rdma.qps=8", "--set", "rdma.memory_words=2048",
        "--set", "rdma.page_words=64", "--set", "rdma.pages=64"]


def superfabric(*args, **kw):
    """Run the console entry point as a user would."""
    return subprocess.run([sys.executable, "-m", "superfabric.tools.cli", *args],
                          capture_output=True, text=True, **kw)


def _results(sweep_dir):
    return {p.parent.name: json.loads(p.read_text())
            for p in (sweep_dir / "points").glob("*/results.json")}


def _sweep_once(args, out, points):
    """Run the sweep: it succeeds and writes exactly the ``points`` it planned."""
    first = superfabric(*args)
    assert first.returncode == 0, first.stdout + first.stderr
    results = _results(out)
    assert len(results) == points
    spec = json.loads((out / "sweep.json").read_text())
    assert sorted(p["id"] for p in spec["points"]) == sorted(results)
    return results


def _resume_and_report(args, out, results, tmp_path):
    """Run the sweep again: every point is skipped and left untouched; then
    report it and return the report's Markdown."""
    stamps = {p: (out / "points" / p / "results.json").stat().st_mtime_ns for p in results}
    again = superfabric(*args)
    assert again.returncode == 0, again.stderr
    assert f"{len(results)} skipped" in again.stdout and "0 run" in again.stdout
    assert stamps == {p: (out / "points" / p / "results.json").stat().st_mtime_ns for p in results}
    report = superfabric("report", str(out), "-o", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    return (tmp_path / "report" / "report.md").read_text()


def test_parse_loads():
    assert parse_loads("0.1:1.0:0.1") == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    assert parse_loads("0.5,0.9") == [0.5, 0.9]
    for bad in ("0:1:0.5", "0.1:1.0:0", "a,b", "0.5,1.5"):
        with pytest.raises(SweepError) as e:
            parse_loads(bad)
        assert "--loads" in str(e.value) and bad in str(e.value)


def test_sweep_runs_resumes_and_reports(tmp_path):
    require_simulator("icarus")
    out = tmp_path / "sweep"
    args = ["sweep", "--preset", "tiny", "--traffic", "uniform,hotspot", "--loads", "0.3,0.7",
            "--seeds", "2", "--sim", "model,icarus", "--cycles", "300", "--workers", "2",
            "-o", str(out)]
    results = _sweep_once(args, out, 2 * 2 * 2 * 2)
    for pid, res in results.items():
        assert res["sweep"]["id"] == pid
        assert res["config"]["switch"]["ports"] == 4      # the preset, not the default
        assert res["simulator"] in ("model", "icarus")
        if res["simulator"] == "icarus":
            assert res["match"]["exact"], pid
    md = _resume_and_report(args, out, results, tmp_path)
    for res in results.values():
        assert f"{res['throughput']:.4f}" in md
    assert (tmp_path / "report" / "report.html").exists()


def test_failed_point_is_recorded_not_lost(tmp_path):
    # transpose needs a power-of-four port count: the 5-port points fail at run time.
    out = tmp_path / "sweep"
    res = superfabric("sweep", "--preset", "tiny", "--traffic", "transpose", "--loads", "0.5",
                      "--vary", "switch.ports=4,5", "--sim", "model", "--cycles", "200",
                      "--workers", "1", "-o", str(out))
    assert res.returncode == 1
    assert "1 failed" in res.stdout and "transpose" in res.stdout
    errors = list((out / "points").glob("*/error.json"))
    assert len(errors) == 1
    err = json.loads(errors[0].read_text())
    assert "ports5" in err["point"]["id"] and "\n" not in err["error"]
    assert len(_results(out)) == 1


@pytest.mark.slow
def test_cut_short_results_are_flagged_then_run_again(tmp_path):
    """A results.json that is not valid JSON: the report flags that point and reports the
    rest; the sweep does not count it as done, but runs it again."""
    out = tmp_path / "sweep"
    args = ["sweep", "--preset", "tiny", "--loads", "0.3,0.6", "--sim", "model", "--cycles", "200",
            "--workers", "1", "-o", str(out)]
    results = _sweep_once(args, out, 2)
    cut, kept = sorted(results)
    path = out / "points" / cut / "results.json"
    path.write_text(path.read_text()[:100])
    report = superfabric("report", str(out), "-o", str(tmp_path / "flagged"))
    assert report.returncode == 0, report.stderr
    md = (tmp_path / "flagged" / "report.md").read_text()
    assert "**failed points: 1**" in md
    (flagged,) = [line for line in md.splitlines() if line.startswith("- ") and cut in line]
    assert f"{path}: not valid JSON" in flagged
    assert f"{results[kept]['throughput']:.4f}" in md
    again = superfabric(*args)
    assert again.returncode == 0, again.stderr
    assert "1 skipped" in again.stdout and "1 run" in again.stdout
    rerun = json.loads(path.read_text())
    for key in ("packets", "throughput", "latency", "traffic", "config"):
        assert rerun[key] == results[cut][key], key
    md = _resume_and_report(args, out, results, tmp_path)
    assert "failed points" not in md


@pytest.mark.slow
def test_rdma_sweep_runs_resumes_and_reports(tmp_path):
    """RDMA patterns over loads, seeds and a fault rate: every point, resumable, reported."""
    out = tmp_path / "sweep"
    args = ["sweep", "--preset", "tiny", *RDMA, "--traffic", "rdma-uniform,rdma-allreduce",
            "--loads", "0.3,0.6", "--seeds", "2", "--vary", "faults.drop_rate=0,0.1",
            "--sim", "model", "--cycles", "600", "--workers", "1", "-o", str(out)]
    results = _sweep_once(args, out, 2 * 2 * 2 * 2)
    for pid, res in results.items():
        assert res["sweep"]["id"] == pid and res["simulator"] == "model"
        drop = res["sweep"]["vary"]["faults.drop_rate"]
        assert res["config"]["faults"]["drop_rate"] == drop and f"drop_rate{drop}-" in pid
        assert res["config"]["rdma"]["qps"] == 8           # the --set, under the vary
        assert (out / "points" / pid / "workload.npz").is_file()
        rdma = res["rdma"]
        assert rdma["requests"]["completed"] == rdma["requests"]["posted"] > 0
        assert rdma["data"]["corrupted"] == rdma["data"]["stray_words"] == 0
        if drop == 0:
            assert rdma["retransmissions"]["total"] == 0
    lossy = [r for r in results.values() if r["config"]["faults"]["drop_rate"] > 0]
    assert sum(r["rdma"]["retransmissions"]["total"] for r in lossy) > 0
    md = _resume_and_report(args, out, results, tmp_path)
    for title in ("## Attention", "## Plots", "## Connection state", "## Points"):
        assert title in md, title
    assert "against the varied faults.drop_rate" in md
    for res in results.values():
        assert f"{res['rdma']['goodput']:.4f}" in md
    for png in ("rdma_goodput.png", "rdma_latency.png", "rdma_latency_cdf.png",
                "rdma_recovery.png"):
        assert (tmp_path / "report" / png).stat().st_size > 0, png


def test_failed_rdma_point_is_recorded_not_lost(tmp_path):
    # 16 QPs per endpoint cannot each get a request in 400 cycles: that point fails at run time.
    out = tmp_path / "sweep"
    res = superfabric("sweep", "--preset", "tiny", *RDMA, "--traffic", "rdma-uniform",
                      "--loads", "0.5", "--vary", "rdma.qps=8,64", "--sim", "model",
                      "--cycles", "400", "--workers", "1", "-o", str(out))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "1 failed" in res.stdout and "traffic.cycles" in res.stdout
    (error,) = (out / "points").glob("*/error.json")
    err = json.loads(error.read_text())
    assert "qps64" in err["point"]["id"] and "\n" not in err["error"]
    assert err["error"].startswith("TrafficError: traffic.cycles")
    (ok,) = _results(out).values()
    assert ok["config"]["rdma"]["qps"] == 8


@pytest.mark.slow
def test_rdma_sweep_with_bad_requests(tmp_path):
    """--bad-fraction reaches every point: the bad requests fail with the status meant."""
    out = tmp_path / "sweep"
    res = superfabric("sweep", "--preset", "tiny", *RDMA, "--traffic", "rdma-uniform",
                      "--loads", "0.3", "--bad-fraction", "0.3", "--sim", "model",
                      "--cycles", "800", "--workers", "1", "-o", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    (point,) = _results(out).values()
    requests = point["rdma"]["requests"]
    assert point["traffic"]["bad_fraction"] == 0.3
    assert requests["ok"] < requests["completed"] == requests["posted"]
    assert requests["unexpected_status"] == 0


@pytest.mark.parametrize("args,field", [
    (["--loads", "0.5:0.1:0"], "--loads"),
    (["--sim", "model,questa"], "--sim"),
    (["--traffic", "uniform,zipf"], "--traffic"),
    (["--vary", "switch.ports"], "--vary"),
    (["--vary", "switch.ports=4,64"], "switch.ports"),
    (["--seeds", "0"], "--seeds"),
    (["--traffic", "uniform,rdma-uniform", *RDMA], "--traffic"),
    (["--traffic", "rdma-uniform"], "rdma.enabled"),
    (["--traffic", "rdma-allreduce", *RDMA, "--vary", "rdma.enabled=true,false"], "rdma.enabled"),
    (["--traffic", "rdma-uniform", *RDMA, "--sink-stall", "0.1"], "--sink-stall"),
    (["--traffic", "rdma-uniform", *RDMA, "--lengths", "fixed:4"], "--lengths"),
    (["--traffic", "uniform", "--bad-fraction", "0.2"], "--bad-fraction"),
    (["--traffic", "rdma-uniform", *RDMA, "--bad-fraction", "1.5"], "--bad-fraction"),
])
def test_bad_sweep_arguments_are_one_line(args, field, tmp_path):
    res = superfabric("sweep", "--preset", "tiny", *args, "-o", str(tmp_path / "s"))
    assert res.returncode == 2, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and field in res.stderr, res.stderr
    assert not (tmp_path / "s" / "points").exists()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_sweep_on_a_real_dask_scheduler(tmp_path):
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    scheduler = subprocess.Popen([sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1",
                                  "--port", str(port), "--no-dashboard"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        worker = subprocess.Popen([sys.executable, "-m", "dask", "worker", address,
                                   "--nworkers", "1", "--nthreads", "1", "--no-dashboard",
                                   "--host", "127.0.0.1", "--name", "superfabric-test-worker"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        from distributed import Client
        with Client(address, timeout=30) as client:
            client.wait_for_workers(1, timeout=60)
            workers = set(client.scheduler_info()["workers"])
        out = tmp_path / "sweep"
        res = superfabric("sweep", "--preset", "tiny", "--traffic", "uniform", "--loads", "0.2,0.6",
                          "--sim", "model", "--cycles", "500", "--scheduler", address,
                          "-o", str(out), timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
        results = _results(out)
        assert len(results) == 2
        # Every point ran on the external worker, not on a local cluster.
        assert {r["sweep"]["worker"] for r in results.values()} == workers
    finally:
        for proc in (worker, scheduler):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
