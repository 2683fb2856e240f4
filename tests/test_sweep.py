"""Sweeps through the command line: points, resume, failures, reports, a real Dask scheduler."""

import json
import socket
import subprocess
import sys
import time

import pytest

from superfabric.tools.sweep import SweepError, parse_loads

from conftest import require_simulator


def superfabric(*args, **kw):
    """Run the console entry point as a user would."""
    return subprocess.run([sys.executable, "-m", "superfabric.tools.cli", *args],
                          capture_output=True, text=True, **kw)


def _results(sweep_dir):
    return {p.parent.name: json.loads(p.read_text())
            for p in (sweep_dir / "points").glob("*/results.json")}


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
    first = superfabric(*args)
    assert first.returncode == 0, first.stdout + first.stderr
    results = _results(out)
    assert len(results) == 2 * 2 * 2 * 2
    spec = json.loads((out / "sweep.json").read_text())
    assert sorted(p["id"] for p in spec["points"]) == sorted(results)
    for pid, res in results.items():
        assert res["sweep"]["id"] == pid
        assert res["config"]["switch"]["ports"] == 4      # the preset, not the default
        assert res["simulator"] in ("model", "icarus")
        if res["simulator"] == "icarus":
            assert res["match"]["exact"], pid
    stamps = {p: (out / "points" / p / "results.json").stat().st_mtime_ns for p in results}

    again = superfabric(*args)
    assert again.returncode == 0, again.stderr
    assert "16 skipped" in again.stdout and "0 run" in again.stdout
    assert stamps == {p: (out / "points" / p / "results.json").stat().st_mtime_ns for p in results}

    report = superfabric("report", str(out), "-o", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    md = (tmp_path / "report" / "report.md").read_text()
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


@pytest.mark.parametrize("args,field", [
    (["--loads", "0.5:0.1:0"], "--loads"),
    (["--sim", "model,questa"], "--sim"),
    (["--traffic", "uniform,zipf"], "--traffic"),
    (["--vary", "switch.ports"], "--vary"),
    (["--vary", "switch.ports=4,64"], "switch.ports"),
    (["--seeds", "0"], "--seeds"),
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
