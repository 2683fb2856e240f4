"""``superfabric collective-plan`` (``tools/collective.py``): the plan printed and written, the
schedule memory images, and bad input in one line."""

import json

import pytest

from superfabric.formats.collective import step_fields
from superfabric.tools.cli import main

TORUS = ["--set", "fabric.topology=torus", "--set", "fabric.dims=[2,2,2]"]


def test_the_plan_is_printed_and_written(tmp_path, capsys):
    out = tmp_path / "plan"
    assert main(["collective-plan", *TORUS, "--algo", "ring", "--bytes", "4096", "--steps", "3",
                 "--check", "-o", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("collective-plan: allreduce of 4096 bytes on the 2x2x2 torus of 8 "
                        "accelerators: ring")
    assert lines[1].startswith("steps: 14 at the busiest accelerator, 112 in all")
    assert "ring" in lines[2] and " *" in lines[2]
    assert lines[4].split() == ["step", "peer", "reduce", "src", "dst", "length", "slot", "wait"]
    assert len([line for line in lines if line.startswith("     ")]) == 3
    assert lines[-2].startswith("check: int32 and fp32 equal numpy's")
    plan = json.loads((out / "plan.json").read_text())
    assert plan["algorithm"] == "ring" and plan["step_count"] == 14
    assert len(plan["schedules"]) == 8 and len(plan["schedules"][0]) == 2 * 14
    first = step_fields(plan["schedules"][0][:2])
    assert first["length"] == 128 and first["wait"] == 0 and first["reduce"] == 1
    # Every prediction in cycles and in microseconds at the presets' 625 MHz.
    assert lines[2].startswith("alpha-beta prediction in cycles (us at 625 MHz): ")
    ring = plan["predicted_cycles"]["ring"]
    assert f"ring {ring} ({ring / 625:.3f}) *" in lines[2]


def test_segments_as_run_cuts_them(tmp_path, capsys):
    # 64 KiB ring on 8: chunks of 2,048 elements, in segments of 16 packets (448 elements):
    # four whole and one of 256, five steps where whole chunks take one.
    plans = {}
    for segment in ("16", "0"):
        out = tmp_path / segment
        assert main(["collective-plan", *TORUS, "--algo", "ring", "--bytes", "65536",
                     "--segment", segment, "-o", str(out)]) == 0
        plans[segment] = json.loads((out / "plan.json").read_text())
    cut, whole = plans["16"], plans["0"]
    assert (cut["segment_bytes"], whole["segment_bytes"]) == (1792, 0)
    assert (cut["step_count"], whole["step_count"]) == (70, 14)
    assert [step_fields(cut["schedules"][0][k:k + 2])["length"] for k in range(0, 10, 2)] == \
        [448, 448, 448, 448, 256]
    assert cut["predicted_cycles"]["ring"] < 0.7 * whole["predicted_cycles"]["ring"]
    # The tree pipelines by its own count: the same prediction either way.
    assert cut["predicted_cycles"]["tree"] == whole["predicted_cycles"]["tree"]


def test_auto_names_the_pick(tmp_path, capsys):
    assert main(["collective-plan", *TORUS, "--bytes", "8", "-o", str(tmp_path)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("(auto)")
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["requested"] == "auto"
    assert plan["predicted_cycles"][plan["algorithm"]] == min(plan["predicted_cycles"].values())


@pytest.mark.parametrize("args, message", [
    (["--bytes", "6"], "--bytes = 6: must be a positive multiple of 4"),
    (["--op", "reduce"], "--op = 'reduce': must be one of allreduce, reducescatter"),
    (["--algo", "rings"], "--algo = 'rings': must be one of ring, biring"),
    (["--algo", "dimwise"], "algo = 'dimwise' cannot run allreduce on this switch of 8 "
                            "accelerators; these can: ring"),
    (["--accelerator", "8"], "--accelerator = 8: must be in 0..7"),
    (["--steps", "-1"], "--steps = -1: must be at least 0"),
    (["--segment", "-1"], "--segment = -1: must be in 0..4096"),
    (["--segment", "4097"], "--segment = 4097: must be in 0..4096"),
])
def test_bad_input_is_one_line_and_status_2(args, message, tmp_path, capsys):
    assert main(["collective-plan", *args, "-o", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
