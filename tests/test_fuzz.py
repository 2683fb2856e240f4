"""The random-configuration campaign (``superfabric fuzz``): what it draws, what it writes,
that a case reruns with its one command, its verdicts and exit status, and a small
fixed-seed campaign of RTL against the model on both simulators."""

import json
import subprocess
from collections import Counter

import pytest

from superfabric.config import FabricConfig
from superfabric.sim.traffic import generate
from superfabric.tools import fuzz
from superfabric.tools.cli import main
from superfabric.tools.fuzz import SIZE_LIMIT_KB, draw_case, run_campaign, verilog_kb
from superfabric.tools.run import SIMS

#: Draws per simulator in the test of the distribution.
DRAWS = 200
#: The campaign run on each simulator in the test suite: few cases, each a small build.
RTL_CAMPAIGN = {"configs": 2, "seed": 6, "size_limit": 200}


def _size(case) -> float:
    sw = case.config.switch
    return verilog_kb(sw.ports, sw.priorities, sw.islip_iterations)


@pytest.mark.parametrize("sim", SIMS)
def test_draws_are_valid_and_cover_the_space(sim):
    cases = [draw_case(0, k, sim) for k in range(DRAWS)]
    assert [c.config for c in cases[:5]] == [draw_case(0, k, sim).config for k in range(5)]
    sw = [c.config.switch for c in cases]
    seen = Counter()
    for c in cases:
        cfg = c.config
        assert FabricConfig.from_dict(cfg.to_dict()) == cfg
        seen.update({"pfc": cfg.pfc.enabled, "no pfc": not cfg.pfc.enabled,
                     "ecn": cfg.ecn.enabled, "no ecn": not cfg.ecn.enabled,
                     "fixed": c.lengths.startswith("fixed"),
                     "bimodal": c.lengths.startswith("bimodal"),
                     "sink stalls": c.sink_stall > 0, "pauses": c.pause_rate > 0,
                     c.config.switch.scheduler: True, c.config.switch.ingress_full: True})
        if cfg.pfc.enabled:
            assert cfg.pfc.xon >= 1     # xon = 0 never resumes: a stall, not a test
    assert all(count >= DRAWS // 20 for count in seen.values()) and len(seen) == 12, seen
    assert len({c.traffic.partition(":")[0] for c in cases}) >= 10
    assert {s.priorities for s in sw} == set(range(1, 9))
    assert min(s.ports for s in sw) == 2
    if sim == "model":
        assert max(s.ports for s in sw) >= 28
    else:
        # RTL draws lean toward small builds, none above the limit.
        assert max(map(_size, cases)) <= SIZE_LIMIT_KB
        assert sorted(map(_size, cases))[DRAWS // 2] <= 2 * fuzz.TYPICAL_KB
    # The traffic of every case is valid for its configuration, and tags tell its packets apart.
    for c in cases[:40]:
        trace = generate(c.config, c.traffic, load=c.load, cycles=c.cycles, seed=c.seed,
                         packet_lengths=c.lengths)
        assert len(trace) <= 1 << c.config.switch.tag_width


def test_a_case_reruns_with_its_command(tmp_path):
    outcomes = run_campaign(configs=2, seed=5, sim="model", out_dir=tmp_path / "fuzz")
    assert [o["result"] for o in outcomes] == ["ok", "ok"]
    case_dir = tmp_path / "fuzz" / "case-001"
    first = json.loads((case_dir / "results.json").read_text())
    assert FabricConfig.load(path=case_dir / "config.toml") == draw_case(5, 1, "model").config
    (case_dir / "results.json").unlink()
    subprocess.run(["sh", str(case_dir / "rerun.sh")], check=True, capture_output=True)
    again = json.loads((case_dir / "results.json").read_text())
    for key in ("config", "traffic", "packets", "cycles", "latency", "counters"):
        assert again[key] == first[key], key
    summary = (tmp_path / "fuzz" / "summary.md").read_text()
    assert summary.count("| ok |") == 2 and "2 of 2 cases passed" in summary
    assert json.loads((tmp_path / "fuzz" / "fuzz.json").read_text())["cases"] == json.loads(
        json.dumps(outcomes))


def _fake_run(verdicts):
    """A stand-in for ``run_point`` that returns (or raises) each of ``verdicts`` in turn."""
    verdicts = iter(verdicts)

    def run_point(cfg, **kwargs):
        verdict = next(verdicts)
        if isinstance(verdict, Exception):
            raise verdict
        return {"match": verdict, "packets": {"offered": 4, "delivered": 4, "dropped": 0},
                "cycles": 40, "stalled": False}
    return run_point


def test_a_mismatch_or_an_error_exits_1_and_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(fuzz, "run_point", _fake_run([
        {"exact": True, "mismatches": 0}, {"exact": False, "mismatches": 3},
        RuntimeError("the icarus run wrote no records")]))
    # The verdicts come from the stand-in, whatever the simulator named.
    assert main(["fuzz", "--configs", "3", "--sim", "model", "-o", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| case-")]
    assert [row.rsplit("|", 2)[1].strip() for row in rows] == [
        "exact", "MISMATCH (3 packets)", "error: the icarus run wrote no records"]
    assert "1 of 3 cases passed; 2 failed" in out
    assert "RuntimeError" in (tmp_path / "case-002" / "error.txt").read_text()
    monkeypatch.setattr(fuzz, "run_point", _fake_run([{"exact": True, "mismatches": 0}]))
    assert main(["fuzz", "--configs", "1", "--sim", "model", "-o", str(tmp_path)]) == 0


@pytest.mark.parametrize("args, message", [
    (["--configs", "0"], "--configs = 0: must be at least 1"),
    (["--sim", "vcs"], "--sim = 'vcs': must be one of model, icarus, verilator"),
    (["--seed", "-1"], "--seed = -1: must be at least 0"),
    (["--max-kb", "10"], "--max-kb = 10: must be at least"),
])
def test_bad_arguments_are_one_line_exit_2(args, message, tmp_path, capsys):
    assert main(["fuzz", *args, "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not list(tmp_path.iterdir())


def test_fixed_seed_campaign_is_exact(sim, tmp_path, build_root):
    outcomes = run_campaign(**RTL_CAMPAIGN, sim=sim, out_dir=tmp_path, build_root=build_root)
    assert [o["result"] for o in outcomes] == ["exact"] * RTL_CAMPAIGN["configs"], outcomes
    for o in outcomes:
        results = json.loads((tmp_path / o["case"] / "results.json").read_text())
        assert results["match"]["exact"] and results["packets"]["offered"] > 0
        assert FabricConfig.load(path=tmp_path / o["case"] / "config.toml").key == o["config"]
