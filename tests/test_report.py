"""Reports of a run and of a sweep: content, self-contained HTML, rendering in Chromium."""

import base64
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.network.topology import Topology
from superfabric.tools.report.build import (TABLE_HEADER, ReportError, format_latency,
                                      format_throughput, hol_saturation, oq_queueing_delay,
                                      write_report)
from superfabric.sim.rdma.metrics import connection_state
from superfabric.tools.report.rdma import CONGESTION_HEADER, CONNECTION_HEADER, RDMA_TABLE_HEADER
from superfabric.tools.run import run_point

from conftest import require_tool

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


def table_rows(markdown: str, columns=TABLE_HEADER) -> list[dict]:
    """The rows of the report's table with this header, as dicts keyed by the header."""
    header = "| " + " | ".join(columns) + " |"
    lines = markdown.splitlines()
    start = lines.index(header) + 2                     # skip the alignment row
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows.append(dict(zip(columns, cells)))
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
    """The reference curves use the literature's figures (Karol et al. 1987; the output queue)."""
    assert hol_saturation(8) == pytest.approx(0.618)
    assert hol_saturation(5) == pytest.approx(2 - 2 ** 0.5)
    # W = ((N-1)/N) p / (2(1-p)): N=16, p=0.9 gives 4.22 slots of output-queued delay.
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


@pytest.mark.parametrize("overrides, bound", [
    (["fabric.topology=torus", "fabric.dims=[4, 4]"], "1.000"),
    (["fabric.topology=fat_tree", "fabric.routing=ecmp", "fabric.leaves=4",
      "fabric.hosts_per_leaf=4", "fabric.spines=2"], "0.667")])
def test_fabric_run_has_the_topologys_plots(tmp_path, overrides, bound):
    """A fabric run: hops, links, and the topology's references instead of the switch's."""
    run = tmp_path / "run"
    cfg = FabricConfig.load(preset="tiny", overrides=overrides)
    res = run_point(cfg, traffic="uniform", load=0.5, cycles=1500, seed=3, sim="model",
                    out_dir=run)
    assert res["fabric"]["ideal_throughput"] == pytest.approx(float(bound), abs=5e-4)
    html = write_report(run, tmp_path / "report")
    md = (html.parent / "report.md").read_text()
    for png in ("throughput.png", "latency.png", "hops.png", "links.png"):
        assert (html.parent / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    assert not (html.parent / "port_throughput.png").exists()
    assert "Link utilisation" in md and "topology's ideal throughput" in md
    assert "HOL limit" not in md and "output-queued" not in md
    (row,) = table_rows(md)
    assert row["throughput model"] == format_throughput(res["throughput"])


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
    assert_self_contained(sweep_report, ["latency.png", "latency_cdf.png", "port_throughput.png",
                                         "throughput.png"])


def assert_self_contained(report: Path, names: list[str]) -> None:
    """The report's PNGs are ``names``, valid, inlined in the HTML, and nothing else is loaded."""
    html = report.read_text()
    pngs = sorted(report.parent.glob("*.png"))
    assert [p.name for p in pngs] == names
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
    assert_renders_in_chromium(sweep_report, tmp_path)


def assert_renders_in_chromium(report: Path, tmp_path: Path) -> None:
    """Every image of ``report`` decodes in headless Chromium, no script fails, the page draws."""
    exe = require_tool("chromium", "tools/install-debian-tools.sh")
    url = report.resolve().as_uri()
    dom = chromium(exe, tmp_path / "profile", "--dump-dom", url).stdout
    parser = _BodyAttributes()
    parser.feed(dom)
    body = parser.attrs
    assert body is not None, dom[:500]
    assert "data-errors" not in body, body["data-errors"]
    assert int(body["data-images-total"]) == len(list(report.parent.glob("*.png"))) > 0
    assert body["data-images-loaded"] == body["data-images-total"]

    shot = tmp_path / "shot.png"
    chromium(exe, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,2000", url)
    data = shot.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000


# --------------------------------------------------------------------------
# Reports of RDMA runs

#: A small RDMA fabric: four endpoints of two QPs each, small memories.
RDMA = ["rdma.enabled=true", "rdma.qps=8", "rdma.memory_words=2048", "rdma.page_words=64",
        "rdma.pages=64"]
RDMA_PATTERNS = ("rdma-uniform", "rdma-allreduce")
RDMA_LOADS = (0.3, 0.6)
DROP_RATES = (0, 0.1)
RDMA_CYCLES = 600
RDMA_MISMATCH_ID = "verilator-rdma_uniform-drop_rate0.1-l0.600-s2"
RDMA_MISMATCH_GOODPUT_DELTA = -0.0125
RDMA_MISMATCH_STRAY_WORDS = 5
RDMA_FAILED_ID = "model-rdma_uniform-drop_rate0-l0.050-s1"
RDMA_FAILED_ERROR = "TrafficError: traffic.cycles = 600: endpoint 0 posts only 1 work requests"
RDMA_PNGS = ["rdma_goodput.png", "rdma_latency.png", "rdma_latency_cdf.png", "rdma_recovery.png"]
#: A single run's: per endpoint and against time, where a sweep's are against offered load.
RDMA_RUN_PNGS = ["rdma_endpoints.png", "rdma_latency_cdf.png", "rdma_recovery.png",
                 "rdma_time.png"]


def rdma_config(drop_rate: float) -> FabricConfig:
    return FabricConfig.load(preset="tiny", overrides=[*RDMA, f"faults.drop_rate={drop_rate}"])


def relabel_rdma_as_rtl(src: Path, dst: Path, *, sim: str, match: dict,
                        goodput_delta: float = 0.0, stray_words: int = 0) -> None:
    """Copy an RDMA model run as if ``sim`` had run it (a fixture: no RTL is simulated).

    The model's records double as the RTL's; ``goodput_delta`` and
    ``stray_words`` make the RTL's figures differ from the model's.
    """
    dst.mkdir(parents=True)
    res = json.loads((src / "results.json").read_text())
    res["simulator"] = sim
    res["match"] = match
    res["rdma"]["goodput"] += goodput_delta
    res["rdma"]["data"]["stray_words"] = stray_words
    res["build_seconds"] = 0.0
    res["sweep"]["id"] = dst.name
    (dst / "results.json").write_text(json.dumps(res))
    for name in ("workload.npz", "model_records.npz"):
        shutil.copy(src / name, dst / name)
    shutil.copy(src / "model_records.npz", dst / "rtl_records.npz")


@pytest.fixture(scope="module")
def rdma_sweep_dir(tmp_path_factory) -> Path:
    """An RDMA sweep over a drop rate: model points, RTL copies of some, one failure."""
    root = tmp_path_factory.mktemp("rdma_sweep")
    exact = {"exact": True, "mismatches": 0, "first_mismatch": None, "problems": [],
             "passed": True}
    first = "WR 7 (endpoint 1, qp 0, to 2, 3 words): done RTL 212, model 210 (from cycle 150)"
    differs = {"exact": False, "mismatches": 2, "first_mismatch": first,
               "problems": [first, "counter retransmissions: RTL [1, 0, 0, 0], model [0, 0, 0, 0]"],
               "passed": False}
    points = []
    for drop in DROP_RATES:
        cfg = rdma_config(drop)
        vary = {"faults.drop_rate": drop}
        for pattern in RDMA_PATTERNS:
            for load in RDMA_LOADS:
                for seed in SEEDS:
                    tail = f"{pattern.replace('-', '_')}-drop_rate{drop}-l{load:.3f}-s{seed}"
                    pid = f"model-{tail}"
                    out = root / "points" / pid
                    res = run_point(cfg, traffic=pattern, load=load, cycles=RDMA_CYCLES,
                                    seed=seed, sim="model", out_dir=out)
                    res["sweep"] = {"id": pid, "vary": vary, "worker": None}
                    (out / "results.json").write_text(json.dumps(res))
                    entry = {"vary": vary, "config": cfg.to_dict(), "traffic": pattern,
                             "load": load, "seed": seed, "cycles": RDMA_CYCLES}
                    points.append({"id": pid, "sim": "model", **entry})
                    if pattern == "rdma-uniform" and drop:
                        rtl_id = f"verilator-{tail}"
                        bad = rtl_id == RDMA_MISMATCH_ID
                        relabel_rdma_as_rtl(
                            out, root / "points" / rtl_id, sim="verilator",
                            match=differs if bad else exact,
                            goodput_delta=RDMA_MISMATCH_GOODPUT_DELTA if bad else 0.0,
                            stray_words=RDMA_MISMATCH_STRAY_WORDS if bad else 0)
                        points.append({"id": rtl_id, "sim": "verilator", **entry})
    failed = {"id": RDMA_FAILED_ID, "vary": {"faults.drop_rate": 0},
              "config": rdma_config(0).to_dict(), "traffic": "rdma-uniform", "load": 0.05,
              "seed": 1, "sim": "model", "cycles": RDMA_CYCLES}
    (root / "points" / RDMA_FAILED_ID).mkdir()
    (root / "points" / RDMA_FAILED_ID / "error.json").write_text(
        json.dumps({"point": failed, "error": RDMA_FAILED_ERROR}))
    points.append(failed)
    spec = {"traffic": list(RDMA_PATTERNS), "loads": [0.05, *RDMA_LOADS], "seeds": len(SEEDS),
            "sims": ["model", "verilator"], "cycles": RDMA_CYCLES,
            "vary": ["faults.drop_rate=0,0.1"], "base": rdma_config(0).to_dict()}
    (root / "sweep.json").write_text(json.dumps({"spec": spec, "points": points}))
    return root


@pytest.fixture(scope="module")
def rdma_report(rdma_sweep_dir, tmp_path_factory) -> Path:
    """The report of :func:`rdma_sweep_dir`; returns the path of report.html."""
    return write_report(rdma_sweep_dir, tmp_path_factory.mktemp("rdma_report"))


def test_rdma_report_of_one_run(tmp_path):
    """A single RDMA model run: its plots, its row and its connection state."""
    cfg = rdma_config(0.1)
    res = run_point(cfg, traffic="rdma-allreduce", load=0.6, cycles=RDMA_CYCLES, seed=3,
                    sim="model", out_dir=tmp_path / "run")
    out = write_report(tmp_path / "run", tmp_path / "report").parent
    for name in ("report.md", "report.html", *RDMA_RUN_PNGS):
        assert (out / name).stat().st_size > 0, name
    # One load: no plot against the load, whose axes would hold a point each.
    assert not (out / "rdma_goodput.png").exists() and not (out / "rdma_latency.png").exists()
    md = (out / "report.md").read_text()
    assert md.startswith("# superfabric report: RDMA run ")
    for title in ("Per accelerator", "Goodput and queues against time", "Message latency CDF"):
        assert f"![{title}](" in md, title
    assert "Model runs only" in section(md, "Attention")
    assert "Every point ran to completion (1 point)." in section(md, "Attention")
    (row,) = table_rows(md, RDMA_TABLE_HEADER)
    rdma = res["rdma"]
    assert (row["pattern"], row["variant"], row["load"], row["seed"], row["sim"]) == \
        ("rdma-allreduce", "base", "0.6", "3", "model")
    assert row["goodput model"] == format_throughput(rdma["goodput"])
    assert row["mean latency model"] == format_latency(rdma["latency"]["mean"])
    assert row["p99 latency model"] == format_latency(rdma["latency"]["p99"])
    assert row["ok/posted"] == f"{rdma['requests']['ok']}/{rdma['requests']['posted']}"
    assert row["retransmissions/NAKs/timeouts"] == \
        f"{rdma['retransmissions']['total']}/{rdma['naks']['total']}/{rdma['timeouts']['total']}"
    assert row["intact/checked"] == f"{rdma['data']['intact']}/{rdma['data']['checked']}"
    assert (row["checks"], row["match"], row["goodput RTL"]) == ("ok", "-", "-")
    # One fault rate only: recovery is plotted against load.
    assert "How the engines recovered, against offered load" in md
    # The switch's figures are not drawn for RDMA runs.
    assert not (out / "throughput.png").exists()


def test_rdma_single_run_bars_are_each_endpoints_words(tmp_path):
    """The per-endpoint goodput bars are the payload words of each sender's requests
    completed OK per simulated cycle; the time curve adds up to all of them."""
    from superfabric.sim.rdma.records import RdmaRecords
    from superfabric.sim.rdma.traffic import RdmaWorkload
    from superfabric.tools.report.data import ReportData, measures
    from superfabric.tools.report.rdma import RDMA, _plot_accelerators, _plot_over_time
    from superfabric.tools.report.source import load_source

    run_point(rdma_config(0.05), traffic="rdma-uniform", load=0.5, cycles=RDMA_CYCLES, seed=2,
              sim="model", out_dir=tmp_path / "run")
    source = load_source(tmp_path / "run")
    data = ReportData(source=source, measures=measures(source.ok, RDMA), chosen_load=0.5,
                      kind=RDMA)
    wr = RdmaWorkload.load(tmp_path / "run" / "workload.npz").wr
    rec = RdmaRecords.load(tmp_path / "run" / "model_records.npz")
    ok = rec.status == 0
    expected = np.bincount(wr["src"][ok], weights=wr["length"][ok], minlength=4) / rec.cycles
    good_ax = _plot_accelerators(data).figure.axes[0]
    assert np.allclose([bar.get_height() for bar in good_ax.patches], expected)
    assert expected.min() > 0
    time_ax = _plot_over_time(data).figure.axes[0]
    x, y = time_ax.lines[0].get_data()
    assert np.isclose((y * np.diff(np.append(x, rec.cycles))).sum(), wr["length"][ok].sum())


def test_rdma_report_of_a_torus_run_draws_its_links(tmp_path):
    """An RDMA run on the 2x2x2 torus: the report draws the link heatmap, every router's
    busiest outgoing link per plane, from the run's flits per link; the switch has none."""
    from superfabric.sim.rdma.records import RdmaRecords
    from superfabric.tools.report.data import ReportData, measures
    from superfabric.tools.report.rdma import RDMA as RDMA_REPORT, _plot_links
    from superfabric.tools.report.source import load_source

    cfg = FabricConfig.load(preset="tiny", overrides=RDMA + [
        "rdma.memory_words=4096", "fabric.topology=torus", "fabric.dims=[2, 2, 2]"])
    run_point(cfg, traffic="rdma-allreduce", load=0.3, cycles=RDMA_CYCLES, seed=3,
              sim="model", out_dir=tmp_path / "run")
    out = write_report(tmp_path / "run", tmp_path / "report").parent
    assert (out / "rdma_links.png").stat().st_size > 0
    assert "![Link utilisation](" in (out / "report.md").read_text()
    source = load_source(tmp_path / "run")
    data = ReportData(source=source, measures=measures(source.ok, RDMA_REPORT), chosen_load=0.3,
                      kind=RDMA_REPORT)
    rec = RdmaRecords.load(tmp_path / "run" / "model_records.npz")
    topo = Topology.of(cfg)
    busiest = np.zeros(topo.routers)
    for k, (r, _, _, _) in enumerate(topo.links):
        busiest[r] = max(busiest[r], rec.link_flits[k] / rec.cycles)
    planes = [ax.images[0].get_array() for ax in _plot_links(data).figure.axes
              if ax.images]
    assert np.allclose(np.concatenate([p.ravel() for p in planes]), busiest) and busiest.max() > 0
    switch = tmp_path / "switch"
    run_point(rdma_config(0.0), traffic="rdma-allreduce", load=0.3, cycles=RDMA_CYCLES, seed=3,
              sim="model", out_dir=switch)
    assert not (write_report(switch, tmp_path / "switch-report").parent / "rdma_links.png").exists()


def test_rdma_report_of_a_congested_run(tmp_path):
    """PFC and DCQCN: the rates and the congested queue against time, and the congestion row."""
    cfg = FabricConfig.load(preset="tiny", overrides=[
        "rdma.enabled=true", "rdma.qps=8", "rdma.channels_per_peer=1", "rdma.memory_words=8192",
        "rdma.page_words=64", "rdma.pages=128", "pfc.enabled=true", "ecn.enabled=true",
        "ecn.kmin=32", "ecn.kmax=128", "ecn.pmax=0.5", "dcqcn.enabled=true"])
    res = run_point(cfg, traffic="rdma-victim:side_load=0.3", load=0.6, cycles=2000, seed=1,
                    sim="model", out_dir=tmp_path / "run")
    out = write_report(tmp_path / "run", tmp_path / "report")
    assert_self_contained(out, sorted(RDMA_RUN_PNGS + ["rdma_queue.png", "rdma_rates.png"]))
    md = (out.parent / "report.md").read_text()
    assert md.index("## Connection state") < md.index("## Congestion") < md.index("## Points")
    (row,) = table_rows(md, CONGESTION_HEADER)
    c = res["rdma"]["congestion"]
    assert c["cnp"]["sent"] > 0 and c["victim"] is not None
    assert (row["pause frames RTL"], row["pause frames model"]) == \
        ("-", str(c["pause_frames"]["pauses"]))
    assert row["CNPs"] == str(c["cnp"]["sent"]) and row["ecn.kmax"] == "128"
    assert row["queue p99 (flits)"] == f"{c['queue']['p99']:.0f}"
    assert row["Jain's index"] == f"{c['jain']:.3f}"
    assert row["victim's share of its demand"] == f"{c['victim']['share']:.0%}"
    assert "DCQCN's rate of every channel toward the congested accelerator" in md
    assert "The flits inside the switch or fabric bound for the congested accelerator" in md


def test_rdma_report_connection_state(rdma_report):
    """One row per configuration, with the bytes and the reduction of section 10.9."""
    md = (rdma_report.parent / "report.md").read_text()
    assert md.index("## Plots") < md.index("## Connection state") < md.index("## Points")
    rows = table_rows(md, CONNECTION_HEADER)
    assert [r["variant"] for r in rows] == [f"drop_rate={d}" for d in DROP_RATES]
    for row, drop in zip(rows, DROP_RATES):
        cs = connection_state(rdma_config(drop))
        assert row["channel state (bytes)"] == f"{cs['aggregated_bytes']:,}"
        assert row["one connection per QP (bytes)"] == f"{cs['per_qp_bytes']:,}"
        assert row["reduction"] == f"{cs['reduction']:.2f}×"
        assert row["bytes per channel"] == f"{cs['bytes_per_channel']:,}"
        assert (row["endpoints"], row["QPs per endpoint"], row["channels per peer"]) == \
            ("4", "2", "2")


def test_rdma_report_table(rdma_sweep_dir, rdma_report):
    """Every point is a row, with its figures; the failed one included."""
    md = (rdma_report.parent / "report.md").read_text()
    rows = table_rows(md, RDMA_TABLE_HEADER)
    sweep = json.loads((rdma_sweep_dir / "sweep.json").read_text())
    assert len(rows) == len(sweep["points"]) == \
        len(DROP_RATES) * len(RDMA_PATTERNS) * len(RDMA_LOADS) * len(SEEDS) \
        + len(RDMA_LOADS) * len(SEEDS) + 1
    by_key = {(r["pattern"], r["variant"], r["load"], r["seed"], r["sim"]): r for r in rows}
    for p in sweep["points"][:-1]:
        res = json.loads((rdma_sweep_dir / "points" / p["id"] / "results.json").read_text())
        row = by_key[(p["traffic"], f"drop_rate={p['vary']['faults.drop_rate']}",
                      f"{p['load']:g}", str(p["seed"]), p["sim"])]
        column = "goodput model" if p["sim"] == "model" else "goodput RTL"
        assert row[column] == format_throughput(res["rdma"]["goodput"])
        total = res["rdma"]["retransmissions"]["total"]
        assert row["retransmissions/NAKs/timeouts"].startswith(f"{total}/")
    (bad,) = [r for r in rows if r["match"] == "2 mismatches"]
    assert (bad["pattern"], bad["variant"], bad["load"], bad["seed"]) == \
        ("rdma-uniform", "drop_rate=0.1", "0.6", "2")
    assert bad["goodput Δ"] == format_throughput(RDMA_MISMATCH_GOODPUT_DELTA)
    assert bad["checks"] == "failed"
    assert {r["match"] for r in rows if r["sim"] == "verilator"} == {"exact", "2 mismatches"}
    (failed,) = [r for r in rows if r["match"] == "error"]
    assert (failed["load"], failed["goodput model"]) == ("0.05", "-")
    # Without drops nothing is retransmitted; with 10 % dropped, something is.
    recovery = {d: [int(r["retransmissions/NAKs/timeouts"].split("/")[0]) for r in rows
                    if r["variant"] == f"drop_rate={d}" and r["match"] != "error"]
                for d in DROP_RATES}
    assert set(recovery[0]) == {0} and sum(recovery[0.1]) > 0


def test_rdma_report_flags_mismatch_failure_and_checks(rdma_report):
    """The mismatch, the failed point and the run that failed its checks are named first."""
    md = (rdma_report.parent / "report.md").read_text()
    attention = section(md, "Attention")
    assert md.index("## Attention") < md.index("## Plots")
    differ = re.search(r"RTL and model differ at: 1 of 4 RTL points\*\*\n\n- (.*)", attention)
    assert differ, attention
    assert RDMA_MISMATCH_ID in differ.group(1)
    assert "RTL differs from the model: 2 difference(s); WR 7 (endpoint 1" in differ.group(1)
    assert "failed points: 1" in attention
    assert f"{RDMA_FAILED_ID}): {RDMA_FAILED_ERROR}" in attention
    checks = re.search(r"runs that failed their checks: 1\*\*\n\n- (.*)", attention)
    assert checks, attention
    assert RDMA_MISMATCH_ID in checks.group(1)
    assert (f"verilator: {RDMA_MISMATCH_STRAY_WORDS} memory words changed outside the OK "
            f"completions") in checks.group(1)
    assert "model:" not in checks.group(1)


def test_rdma_report_plots(rdma_report):
    """The RDMA figures, inlined; recovery against the varied drop rate."""
    assert_self_contained(rdma_report, RDMA_PNGS)
    md = (rdma_report.parent / "report.md").read_text()
    for title in ("Goodput", "Mean and p99 message latency", "Message latency CDF",
                  "Retransmissions, NAKs and timeouts"):
        assert f"![{title}](" in md, title
    assert "How the engines recovered, against the varied faults.drop_rate" in md
    assert "Distribution of message latency at offered load 0.6," in md
    assert "- bad fraction: 0.0" in section(md, "Provenance")


def test_rdma_html_renders_in_chromium(rdma_report, tmp_path):
    """The RDMA report renders like the switch report: every image decodes, no script fails."""
    assert_renders_in_chromium(rdma_report, tmp_path)


def test_switch_and_rdma_runs_are_not_mixed(rdma_sweep_dir, tmp_path):
    """A sweep directory holding both kinds of run is a one-line ReportError."""
    sweep = json.loads((rdma_sweep_dir / "sweep.json").read_text())
    keep = [p for p in sweep["points"] if p["sim"] == "model" and p["load"] == 0.3][:1]
    src = tmp_path / "sweep"
    shutil.copytree(rdma_sweep_dir / "points" / keep[0]["id"], src / "points" / keep[0]["id"])
    switch_id = "model-uniform-l0.300-s1"
    res = run_point(FabricConfig.load(preset="tiny"), traffic="uniform", load=0.3, cycles=200,
                    seed=1, sim="model", out_dir=src / "points" / switch_id)
    res["sweep"] = {"id": switch_id, "vary": {}, "worker": None}
    (src / "points" / switch_id / "results.json").write_text(json.dumps(res))
    points = keep + [{"id": switch_id, "vary": {}, "traffic": "uniform", "load": 0.3,
                      "seed": 1, "sim": "model", "cycles": 200}]
    (src / "sweep.json").write_text(json.dumps({"spec": {}, "points": points}))
    with pytest.raises(ReportError) as e:
        write_report(src, tmp_path / "report")
    message = str(e.value)
    assert "\n" not in message and str(src) in message
    assert "switch traffic (uniform)" in message and "RDMA traffic (rdma-uniform)" in message
    assert not (tmp_path / "report").exists()
