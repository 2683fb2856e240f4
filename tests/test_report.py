"""Reports of a run and of a sweep: content, self-contained HTML, rendering in Chromium."""

import base64
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.tools.report import (TABLE_HEADER, ReportError, format_latency,
                                      format_throughput, hol_saturation, oq_queueing_delay,
                                      write_report)
from superfabric.tools.run import run_point

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PATTERNS = ("uniform", "hotspot:fraction=0.3,port=1")
LOADS = (0.3, 0.6, 0.9)
SEEDS = (1, 2)
VARY = {"switch.islip_iterations": 2}
CYCLES = 1000
#: The relabelled RTL copy that disagrees with the model, and by how much.
MISMATCH_ID = "verilator-uniform-l0.600-s2"
MISMATCH_THROUGHPUT_DELTA = 0.0125
FAILED_ID = "model-uniform-l1.000-s1"
FAILED_ERROR = "TrafficError: load = 1.0: the switch caught fire"


def table_rows(markdown: str) -> list[dict]:
    """The rows of the report's table of points, as dicts keyed by the header."""
    header = "| " + " | ".join(TABLE_HEADER) + " |"
    lines = markdown.splitlines()
    start = lines.index(header) + 2                     # skip the alignment row
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows.append(dict(zip(TABLE_HEADER, cells)))
    return rows


def section(markdown: str, title: str) -> str:
    """The text of one ``## title`` section of the report."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", markdown, re.S | re.M)
    assert match, f"no section {title!r}"
    return match.group(1)


def relabel_as_rtl(src: Path, dst: Path, *, sim: str, match: dict,
                   throughput_delta: float = 0.0) -> None:
    """Copy a model run as if ``sim`` had run it (a fixture: no RTL is simulated).

    The model's packet records double as the RTL's, so the CDF has an RTL
    curve; ``throughput_delta`` makes the RTL's figure differ visibly.
    """
    dst.mkdir(parents=True)
    res = json.loads((src / "results.json").read_text())
    res["simulator"] = sim
    res["match"] = match
    res["throughput"] += throughput_delta
    res["build_seconds"] = 0.0
    res["sweep"]["id"] = dst.name
    (dst / "results.json").write_text(json.dumps(res))
    with np.load(src / "packets.npz") as cols:
        packets = dict(cols)
    for name in ("out", "head", "tail", "dropped"):
        packets[f"rtl_{name}"] = packets[f"model_{name}"]
    packets["rtl_payload_ok"] = np.ones(len(packets["tag"]), bool)
    np.savez_compressed(dst / "packets.npz", **packets)


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    """A sweep as ``superfabric sweep`` lays it out: model points, RTL copies, one failure."""
    root = tmp_path_factory.mktemp("sweep")
    cfg = FabricConfig.load(preset="tiny")
    exact = {"exact": True, "mismatches": 0, "first_mismatch": None, "problems": []}
    differs = {"exact": False, "mismatches": 3, "problems": [],
               "first_mismatch": {"tag": 17, "field": "tail", "rtl": 41, "model": 40,
                                  "cycle_rtl": 41, "cycle_model": 40}}
    points = []
    for pattern in PATTERNS:
        for load in LOADS:
            for seed in SEEDS:
                slug = pattern.split(":")[0]
                pid = f"model-{slug}-l{load:.3f}-s{seed}"
                out = root / "points" / pid
                res = run_point(cfg, traffic=pattern, load=load, cycles=CYCLES, seed=seed,
                                sim="model", out_dir=out)
                res["sweep"] = {"id": pid, "vary": VARY, "worker": None}
                (out / "results.json").write_text(json.dumps(res))
                rtl_id = f"verilator-{slug}-l{load:.3f}-s{seed}"
                bad = rtl_id == MISMATCH_ID
                relabel_as_rtl(out, root / "points" / rtl_id, sim="verilator",
                               match=differs if bad else exact,
                               throughput_delta=MISMATCH_THROUGHPUT_DELTA if bad else 0.0)
                for sim, i in (("model", pid), ("verilator", rtl_id)):
                    points.append({"id": i, "vary": VARY, "config": cfg.to_dict(),
                                   "traffic": pattern, "load": load, "seed": seed, "sim": sim,
                                   "cycles": CYCLES})
    failed = {"id": FAILED_ID, "vary": VARY, "config": cfg.to_dict(), "traffic": "uniform",
              "load": 1.0, "seed": 1, "sim": "model", "cycles": CYCLES}
    (root / "points" / FAILED_ID).mkdir()
    (root / "points" / FAILED_ID / "error.json").write_text(
        json.dumps({"point": failed, "error": FAILED_ERROR}))
    points.append(failed)
    spec = {"traffic": list(PATTERNS), "loads": [*LOADS, 1.0], "seeds": len(SEEDS),
            "sims": ["model", "verilator"], "cycles": CYCLES, "vary": ["switch.islip_iterations=2"],
            "base": cfg.to_dict()}
    (root / "sweep.json").write_text(json.dumps({"spec": spec, "points": points}))
    return root


@pytest.fixture(scope="module")
def sweep_report(sweep_dir, tmp_path_factory) -> Path:
    """The report of :func:`sweep_dir`; returns the path of report.html."""
    return write_report(sweep_dir, tmp_path_factory.mktemp("report"))


def test_reference_values():
    """The reference curves use REFERENCES.md's figures."""
    assert hol_saturation(8) == pytest.approx(0.618)
    assert hol_saturation(5) == pytest.approx(2 - 2 ** 0.5)
    # REFERENCES.md: N=16, p=0.9 gives 4.22 slots of output-queued delay.
    assert oq_queueing_delay(16, 0.9) == pytest.approx(4.22, abs=0.005)


def test_report_of_one_run(tmp_path):
    """A single model run: every file is written and the table shows its figures."""
    run = tmp_path / "run"
    res = run_point(FabricConfig.load(preset="tiny"), traffic="uniform", load=0.5,
                    cycles=2000, seed=3, sim="model", out_dir=run)
    html = write_report(run, tmp_path / "report")
    out = html.parent
    assert html == out / "report.html"
    for name in ("report.md", "report.html", "throughput.png", "latency.png",
                 "latency_cdf.png", "port_throughput.png"):
        assert (out / name).stat().st_size > 0, name
    md = (out / "report.md").read_text()
    (row,) = table_rows(md)
    assert (row["pattern"], row["load"], row["seed"], row["sim"]) == \
        ("uniform", "0.5", "3", "model")
    assert row["throughput model"] == format_throughput(res["throughput"])
    assert row["mean latency model"] == format_latency(res["latency"]["mean"])
    assert row["p99 latency model"] == format_latency(res["latency"]["p99"])
    # A model run has no RTL side to compare with.
    assert row["throughput RTL"] == row["throughput Δ"] == row["match"] == "-"
    assert row["delivered/dropped"] == f"{res['packets']['delivered']}/{res['packets']['dropped']}"
    assert "Model runs only" in section(md, "Attention")
    # Without ECN there is no marking curve.
    assert not (out / "ecn_marking.png").exists()


def test_ecn_and_pfc_runs_have_their_plots(tmp_path):
    run = tmp_path / "run"
    cfg = FabricConfig.load(preset="tiny", overrides=["ecn.enabled=true", "ecn.kmin=4",
                                                      "ecn.kmax=40", "pfc.enabled=true"])
    res = run_point(cfg, traffic="incast", load=0.8, cycles=2000, seed=3, sim="model",
                    out_dir=run, packet_lengths="fixed:4", pause_rate=0.2)
    assert res["ecn"]["marks"] > 0 and res["pfc"]["frames_sent"] > 0
    html = write_report(run, tmp_path / "report")
    md = (html.parent / "report.md").read_text()
    for png, title in (("ecn_marking.png", "ECN marking curve"), ("pfc.png", "Priority flow control")):
        assert (html.parent / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert title in md


def test_sweep_report_table(sweep_dir, sweep_report):
    """Every point of the sweep is a row, the failed one included."""
    md = (sweep_report.parent / "report.md").read_text()
    rows = table_rows(md)
    expected = len(json.loads((sweep_dir / "sweep.json").read_text())["points"])
    assert len(rows) == expected == 2 * len(PATTERNS) * len(LOADS) * len(SEEDS) + 1
    keys = {(r["pattern"], r["load"], r["seed"], r["sim"]) for r in rows}
    for pattern in PATTERNS:
        for load in LOADS:
            for seed in SEEDS:
                for sim in ("model", "verilator"):
                    assert (pattern, f"{load:g}", str(seed), sim) in keys
    assert all(r["variant"] == "islip_iterations=2" for r in rows)
    (bad,) = [r for r in rows if r["match"] == "3 mismatches"]
    assert (bad["pattern"], bad["load"], bad["seed"]) == ("uniform", "0.6", "2")
    assert bad["throughput Δ"] == "+" + format_throughput(MISMATCH_THROUGHPUT_DELTA)
    (failed,) = [r for r in rows if r["match"] == "error"]
    assert (failed["load"], failed["throughput model"]) == ("1", "-")


def test_sweep_report_flags_mismatch_and_failure(sweep_report):
    """The mismatch and the failed point are named at the top, before any plot."""
    md = (sweep_report.parent / "report.md").read_text()
    attention = section(md, "Attention")
    assert md.index("## Attention") < md.index("## Plots")
    differ = re.search(r"RTL and model differ at: 1 of 12 RTL points\*\*\n\n- (.*)", attention)
    assert differ, attention
    assert MISMATCH_ID in differ.group(1) and "3 packet(s) differ" in differ.group(1)
    assert "first: tag 17 (tail): RTL 41 vs model 40" in differ.group(1)
    assert "failed points: 1" in attention
    assert f"{FAILED_ID}): {FAILED_ERROR}" in attention
    assert "agree exactly" not in attention


def test_sweep_report_html_is_self_contained(sweep_report):
    """Every PNG is valid and inlined in the HTML; nothing is fetched from elsewhere."""
    html = sweep_report.read_text()
    pngs = sorted(sweep_report.parent.glob("*.png"))
    assert [p.name for p in pngs] == ["latency.png", "latency_cdf.png", "port_throughput.png",
                                      "throughput.png"]
    for png in pngs:
        data = png.read_bytes()
        assert data.startswith(PNG_MAGIC), png.name
        assert f'src="data:image/png;base64,{base64.b64encode(data).decode()}"' in html, png.name
    assert html.count("<img ") == len(pngs)
    assert not re.search(r"https?://", html)
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:)""", html)


def test_all_agree_is_said(tmp_path, sweep_dir):
    """Without the mismatching point, the report says RTL and model agree."""
    sweep = json.loads((sweep_dir / "sweep.json").read_text())
    keep = [p for p in sweep["points"] if p["id"] != MISMATCH_ID and p["sim"] == "verilator"
            and p["traffic"] == "uniform"]
    src = tmp_path / "sweep"
    for p in keep:
        shutil.copytree(sweep_dir / "points" / p["id"], src / "points" / p["id"])
    (src / "sweep.json").write_text(json.dumps({"spec": sweep["spec"], "points": keep}))
    md = (write_report(src, tmp_path / "report", cdf_load=0.3).parent / "report.md").read_text()
    attention = section(md, "Attention")
    assert f"RTL and model agree exactly at every RTL point ({len(keep)} points: verilator)" \
        in attention
    assert "differ" not in attention and "failed" not in attention
    assert "latency at offered load 0.3," in md


def test_not_a_run_directory(tmp_path):
    """A directory with neither results.json nor sweep.json is a one-line ReportError."""
    with pytest.raises(ReportError) as e:
        write_report(tmp_path, tmp_path / "report")
    message = str(e.value)
    assert str(tmp_path) in message and "\n" not in message
    assert not (tmp_path / "report").exists()


def test_cdf_load_must_be_present(sweep_dir, tmp_path):
    """A CDF load no run has is a one-line ReportError listing the loads present."""
    with pytest.raises(ReportError, match=r"--cdf-load = 0.5: .*0.3, 0.6, 0.9$"):
        write_report(sweep_dir, tmp_path / "report", cdf_load=0.5)


# --------------------------------------------------------------------------
# The HTML in a real browser


def require_chromium() -> str:
    """The chromium executable; skip when missing, but fail under CI, which must render."""
    exe = shutil.which("chromium")
    if exe is None:
        message = "chromium not on PATH (install it with tools/install-browser.sh)"
        if os.environ.get("CI"):
            pytest.fail(f"chromium is required in CI: {message}")
        pytest.skip(message)
    return exe


def chromium(exe: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    """Run headless Chromium once, with a private profile so parallel runs don't collide."""
    # As root Chromium refuses to start without --no-sandbox.
    cmd = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
           "--virtual-time-budget=5000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)


class _BodyAttributes(HTMLParser):
    def __init__(self):
        super().__init__()
        self.attrs = None

    def handle_starttag(self, tag, attrs):
        if tag == "body" and self.attrs is None:
            self.attrs = dict(attrs)


def test_html_renders_in_chromium(sweep_report, tmp_path):
    """Chromium decodes every embedded image, runs no failing script, and draws the page."""
    exe = require_chromium()
    url = sweep_report.resolve().as_uri()
    dom = chromium(exe, tmp_path / "profile", "--dump-dom", url).stdout
    parser = _BodyAttributes()
    parser.feed(dom)
    body = parser.attrs
    assert body is not None, dom[:500]
    assert "data-errors" not in body, body["data-errors"]
    assert int(body["data-images-total"]) == len(list(sweep_report.parent.glob("*.png"))) > 0
    assert body["data-images-loaded"] == body["data-images-total"]

    shot = tmp_path / "shot.png"
    chromium(exe, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,2000", url)
    data = shot.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000
