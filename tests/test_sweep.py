"""Sweeps through the command line: points, resume, failures, reports, a real Dask scheduler."""

import io
import json
import os
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
    """A point that runs but fails (links that drop everything: the RDMA run stalls with its
    requests incomplete) is recorded as failed, beside the point that did its job."""
    out = tmp_path / "sweep"
    res = superfabric("sweep", "--preset", "tiny", *RDMA, "--traffic", "rdma-uniform",
                      "--loads", "0.5", "--vary", "faults.drop_rate=0,1.0", "--sim", "model",
                      "--cycles", "600", "--workers", "1", "-o", str(out))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "1 failed" in res.stdout and "requests not completed" in res.stdout
    (error,) = (out / "points").glob("*/error.json")
    err = json.loads(error.read_text())
    assert "drop_rate1.0" in err["point"]["id"] and "\n" not in err["error"]
    assert "stalled" in err["error"]
    # Its results stay, marked failed, so a resume runs it again rather than skip it.
    failed = json.loads((error.parent / "results.json").read_text())
    assert failed["sweep"]["failure"] == err["error"]
    assert failed["rdma"]["requests"]["completed"] < failed["rdma"]["requests"]["posted"]
    again = superfabric("sweep", "--preset", "tiny", *RDMA, "--traffic", "rdma-uniform",
                        "--loads", "0.5", "--vary", "faults.drop_rate=0,1.0", "--sim", "model",
                        "--cycles", "600", "--workers", "1", "-o", str(out))
    assert again.returncode == 1 and "1 skipped" in again.stdout and "1 failed" in again.stdout


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
    (["--traffic", "uniform,rdma-uniform", *RDMA],
     "switch patterns (uniform) and RDMA patterns (rdma-uniform) cannot share a sweep"),
    (["--traffic", "hotspot:fraction=0.3", "--vary", "traffic.fraction=0.1,0.2"],
     "--vary traffic.fraction: the pattern 'hotspot:fraction=0.3' sets fraction already"),
    (["--traffic", "hotspot", "--vary", "traffic.fraction=0.1,2"], "with traffic.fraction=2"),
    (["--traffic", "rdma-uniform", *RDMA, "--bad-fraction", "1.5"], "--bad-fraction"),
    # Found before the first point runs, with run's own check; no point fails one by one.
    (["--traffic", "transpose", "--vary", "switch.ports=4,5"], "with switch.ports=5"),
    (["--traffic", "rdma-uniform", *RDMA, "--vary", "rdma.qps=8,64", "--cycles", "400"],
     "traffic.cycles"),
    (["--traffic", "hotspot:fraction=2"], "fraction"),
    (["--preset", "default", "--traffic", "transpose"], "transpose"),
    (["--lengths", "fixed:99"], "fixed:99"),
    (["--sink-stall", "5"], "traffic.sink_stall"),
    (["--preset", "default", "--priority-weights=1,1"], "priority_weights"),
    (["--loads", "0.1:1.0:0.0000001"], "at most 10,000 points"),
    (["--loads", "0.5,0.5"], "given twice"),
    (["--vary", "switch.ports=4", "--vary", "switch.ports=8"], "given twice"),
])
def test_bad_sweep_arguments_are_one_line(args, field, tmp_path):
    if "--preset" not in args:
        args = ["--preset", "tiny", *args]
    res = superfabric("sweep", *args, "-o", str(tmp_path / "s"))
    assert res.returncode == 2, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and field in res.stderr, res.stderr
    assert not (tmp_path / "s" / "points").exists()
    assert list(tmp_path.iterdir()) == []


def test_loads_apart_in_the_fourth_decimal_keep_every_point(tmp_path):
    """Two loads 0.0004 apart are two directories, each holding its own load."""
    out = tmp_path / "sweep"
    args = ["sweep", "--preset", "tiny", "--loads", "0.5,0.5004", "--sim", "model",
            "--cycles", "200", "--workers", "1", "-o", str(out)]
    results = _sweep_once(args, out, 2)
    assert sorted(results) == ["model-uniform-l0.5-s1", "model-uniform-l0.5004-s1"]
    assert {pid: r["traffic"]["load"] for pid, r in results.items()} == {
        "model-uniform-l0.5-s1": 0.5, "model-uniform-l0.5004-s1": 0.5004}
    for pid, r in results.items():
        assert r["sweep"]["point"]["load"] == r["traffic"]["load"]


@pytest.mark.slow
@pytest.mark.parametrize("change, differs", [
    (["--cycles", "300"], "cycles 200 -> 300"),
    (["--set", "switch.priorities=1"], "config.switch.priorities 2 -> 1"),
    (["--lengths", "fixed:2"], "packet_lengths"),
])
def test_a_changed_setting_is_never_reported_done(change, differs, tmp_path):
    """A rerun into a sweep directory with any setting changed: refused in one line before
    anything is written; with --rerun-changed every point runs again with the new setting."""
    out = tmp_path / "sweep"
    base = ["sweep", "--preset", "tiny", "--loads", "0.3,0.6", "--sim", "model",
            "--workers", "1", "-o", str(out)]
    before = _sweep_once([*base, "--cycles", "200"], out, 2)
    spec = (out / "sweep.json").read_text()
    stamps = {p: (out / "points" / p / "results.json").stat().st_mtime_ns for p in before}
    changed = [*base, "--cycles", "200", *change]
    if "--cycles" in change:
        changed = [*base, *change]
    refused = superfabric(*changed)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert "2 points ran with other settings" in line and differs in line and \
        "--rerun-changed" in line
    assert "already done" not in refused.stderr and refused.stdout == ""
    assert (out / "sweep.json").read_text() == spec
    assert stamps == {p: (out / "points" / p / "results.json").stat().st_mtime_ns for p in before}
    rerun = superfabric(*changed, "--rerun-changed")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "0 skipped" in rerun.stdout and "2 run" in rerun.stdout
    assert "2 rerun: their settings changed" in rerun.stderr
    after = _results(out)
    asked = json.loads((out / "sweep.json").read_text())["points"]
    for point in asked:
        recorded = after[point["id"]]["sweep"]["point"]
        assert recorded == {k: v for k, v in point.items() if k != "id"}
    assert after != before


def test_two_sweeps_into_one_directory_one_runs_the_other_says_why_not(tmp_path):
    """The second sweep starts while the first holds the directory (at the moment the first
    announces its points): it stops in one line; the first runs every point."""
    from superfabric.config import FabricConfig
    from superfabric.tools.sweep import plan_sweep, run_sweep

    out = tmp_path / "sweep"
    args = ["sweep", "--preset", "tiny", "--loads", "0.3,0.6", "--sim", "model",
            "--cycles", "200", "--workers", "1", "-o", str(out)]
    second = []

    class Announce(io.StringIO):
        def write(self, text):
            if "to run" in text and not second:
                second.append(superfabric(*args))
            return super().write(text)

    plan = plan_sweep(base=FabricConfig.load(preset="tiny"), overrides=[], traffic=["uniform"],
                      loads=[0.3, 0.6], seeds=1, sims=["model"], cycles=200)
    summary = run_sweep(plan, out, workers=1, stream=Announce())
    assert summary["ran"] == 2 and not summary["failed"]
    (res,) = second
    assert res.returncode == 2 and res.stdout == "", res.stdout + res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line == (f"superfabric: error: -o = {str(out)!r}: another sweep (process "
                    f"{os.getpid()}) is running in it; wait for it to end, or use another "
                    f"directory")
    assert len(_results(out)) == 2
    # Once the first has ended, the directory is free again.
    again = superfabric(*args)
    assert again.returncode == 0 and "2 skipped" in again.stdout, again.stdout + again.stderr


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


def test_a_point_that_records_no_settings_is_not_taken_as_done(tmp_path):
    """A results.json from before points recorded their settings cannot be checked: the
    resume refuses it as changed rather than report it done."""
    from superfabric.config import FabricConfig
    from superfabric.tools.sweep import plan_sweep, run_sweep

    out = tmp_path / "sweep"
    plan = plan_sweep(base=FabricConfig.load(preset="tiny"), overrides=[], traffic=["uniform"],
                      loads=[0.4], seeds=1, sims=["model"], cycles=200)
    assert run_sweep(plan, out, workers=1, stream=io.StringIO())["ran"] == 1
    (pid,) = _results(out)
    path = out / "points" / pid / "results.json"
    old = json.loads(path.read_text())
    del old["sweep"]["point"]
    path.write_text(json.dumps(old))
    with pytest.raises(SweepError) as e:
        run_sweep(plan, out, workers=1, stream=io.StringIO())
    assert f"1 point ran with other settings (first {pid}: it records no settings" in str(e.value)
    summary = run_sweep(plan, out, workers=1, stream=io.StringIO(), rerun_changed=True)
    assert summary["ran"] == 1 and not summary["failed"]
    assert "point" in json.loads(path.read_text())["sweep"]


def test_the_local_cluster_closes_without_its_shutdown_chatter(tmp_path, capfd, monkeypatch):
    """A worker that logs an error while the sweep's own cluster closes (as a heartbeat
    meeting the closed scheduler does, at random) prints nothing on the sweep's stderr:
    every point is recorded by then. A worker plugin stands in for the race."""
    from distributed.diagnostics.plugin import WorkerPlugin

    from superfabric.config import FabricConfig
    from superfabric.tools import sweep

    class LoudAtClose(WorkerPlugin):
        def teardown(self, worker):
            import logging
            logging.getLogger("distributed.worker").error("shutdown chatter\nTraceback")

    opened = sweep._client

    def client_with_plugin(*args):
        client, cluster = opened(*args)
        client.register_plugin(LoudAtClose())
        return client, cluster

    monkeypatch.setattr(sweep, "_client", client_with_plugin)
    plan = sweep.plan_sweep(base=FabricConfig.load(preset="tiny"), overrides=[],
                            traffic=["uniform"], loads=[0.4], seeds=1, sims=["model"],
                            cycles=200)
    assert sweep.run_sweep(plan, tmp_path / "sweep", workers=1, stream=io.StringIO())["ran"] == 1
    err = capfd.readouterr().err
    assert "shutdown chatter" not in err and "Traceback" not in err


def test_a_pattern_parameter_is_an_axis():
    """``--vary traffic.KEY`` adds the parameter to every pattern: one point per value, the
    value in the pattern, the point's vary and its id; loads still apply to switch traffic."""
    from superfabric.config import FabricConfig
    from superfabric.tools.sweep import plan_sweep

    plan = plan_sweep(base=FabricConfig.load(preset="tiny"), overrides=[],
                      traffic=["hotspot:port=1", "hotspot:port=2"], loads=None, seeds=1,
                      sims=["model"], cycles=200, vary=["traffic.fraction=0.2,0.5"])
    got = {(p["traffic"], p["load"]) for p in plan.points}
    assert len(plan.points) == 2 * 2 * 10 and len({p["id"] for p in plan.points}) == 40
    assert ("hotspot:port=1,fraction=0.5", 0.3) in got
    assert ("hotspot:port=2,fraction=0.2", 1.0) in got
    for p in plan.points:
        value = p["vary"]["traffic.fraction"]
        assert p["traffic"].endswith(f"fraction={value}")
        assert f"fraction_{value}" in p["id"]
