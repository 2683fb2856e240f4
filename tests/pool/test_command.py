"""``superfabric pool`` (``tools/pool.py``): the trace replayed on each allocator, its
results.json and table, and the same figures every time."""

import json

import pytest

from superfabric.tools.cli import main


@pytest.mark.parametrize("allocator", ["best-fit", "buddy"])
def test_the_command_writes_results_and_the_table(allocator, tmp_path, capsys):
    out = tmp_path / "pool"
    assert main(["pool", "--allocator", allocator, "--accelerators", "8", "--memory-mib", "128",
                 "-o", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    pool = res["pool"]
    assert pool["allocator"] == allocator and pool["accelerators"] == 8
    assert pool["page_bytes"] == 256 * 8 and pool["pool_bytes"] == 8 * 128 << 20
    assert res["trace"]["name"] == "training" and res["trace"]["shape"]["ranks"] == 8
    assert pool["allocations"] == res["trace"]["allocations"]
    assert 0 < pool["peak"]["use"] <= 1
    # Every request found room, and what stays is the weights and optimizer state of each
    # rank's four layers, mapped.
    assert pool["failed"] == 0 and pool["live_at_end"] == 8 * 4 * 7
    weights, shards = 2 * 12 * 512 ** 2, 3 * 4 * 12 * 512 ** 2 // 8     # a layer's, bytes
    assert pool["mapped_pages_at_end"] * pool["page_bytes"] == 8 * 4 * (weights + shards)
    for name in ("internal", "external"):
        figures = pool["fragmentation"][name]
        assert 0 <= figures["mean"] <= figures["max"] < 1
    stdout = capsys.readouterr().out.splitlines()
    assert stdout[0].split() == ["allocator", "pool", "page", "peak", "use", "internal", "at",
                                 "peak", "internal", "mean", "external", "at", "peak",
                                 "external", "mean", "external", "max", "failed"]
    assert stdout[1].split()[0] == allocator
    table = (out / "pool.md").read_text().splitlines()
    assert len(table) == 3 and table[2].startswith(f"| {allocator} | 8 x 128 MiB | 2 KiB |")
    # The same seed gives the same figures.
    assert main(["pool", "--allocator", allocator, "--accelerators", "8", "--memory-mib", "128",
                 "-o", str(tmp_path / "again")]) == 0
    assert json.loads((tmp_path / "again" / "results.json").read_text())["pool"] == pool


def test_best_fit_keeps_fragmentation_under_five_percent(tmp_path):
    # The source design's goal, on the default trace and pool.
    assert main(["pool", "-o", str(tmp_path)]) == 0
    pool = json.loads((tmp_path / "results.json").read_text())["pool"]
    assert pool["failed"] == 0
    frag = pool["fragmentation"]
    assert frag["internal"]["at_peak"] < 0.05 and frag["external"]["at_peak"] < 0.05
    assert frag["internal"]["mean"] < 0.05 and frag["external"]["mean"] < 0.05
