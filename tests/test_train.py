"""``superfabric train`` (``tools/train.py``, docs/spec/compression.md section 16.7): training
through the int4 all-reduce keeps binary32's accuracy, results.json, and bad input in one
line."""

import json

import pytest

from superfabric.tools.cli import main
from superfabric.tools.train import run_train, torus_dims


def test_the_torus_of_n_accelerators():
    assert torus_dims(8) == (2, 2, 2)
    assert torus_dims(64) == (4, 4, 4)
    assert torus_dims(384) == (8, 8, 6)
    assert torus_dims(12) == (3, 2, 2)
    assert torus_dims(7) == (7,)


def test_int4_with_error_feedback_keeps_binary32s_accuracy():
    runs = {(c, ef): run_train(accelerators=8, compression=c, error_feedback=ef, steps=100,
                               seed=1)
            for c, ef in (("none", True), ("int4", True))}
    binary32, int4 = runs["none", True], runs["int4", True]
    assert binary32["test_accuracy"] > 0.9
    assert abs(int4["test_accuracy"] - binary32["test_accuracy"]) <= 0.005
    # The same job learns: the loss falls, and int4 stays near binary32's curve.
    assert int4["loss_curve"][-1] < int4["loss_curve"][0] / 4
    assert abs(int4["final_loss"] - binary32["final_loss"]) < 0.01
    assert int4["payload_bytes_on_links"] * 128 == binary32["payload_bytes_on_links"] * 17
    assert binary32["relative_l2_error"]["max"] < 1e-6 < int4["relative_l2_error"]["mean"]


def test_results_json_and_the_plot(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--accelerators", "8", "--compression", "int4",
                 "--no-error-feedback", "--steps", "5", "--seed", "3", "-o", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("train: int4, no EF, 8 accelerators (2x2x2 torus, "
                               "dimwise-direct), 5 steps: test accuracy ")
    res = json.loads((out / "results.json").read_text())
    assert (res["accelerators"], res["compression"], res["error_feedback"], res["steps"],
            res["seed"]) == (8, "int4", False, 5, 3)
    assert len(res["loss_curve"]) == 5 and 0 < res["test_accuracy"] <= 1
    assert res["payload_bytes_on_links"] < res["binary32_payload_bytes_on_links"]
    assert (out / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_seed_repeats_its_run_bit_for_bit():
    one, two = (run_train(accelerators=4, compression="int4", steps=3, seed=2) for _ in "ab")
    assert one["loss_curve"] == two["loss_curve"]


@pytest.mark.parametrize("args, message", [
    (["--accelerators", "1"], "--accelerators = 1: must be in 2..1024"),
    (["--steps", "0"], "--steps = 0: must be at least 1"),
    (["--compression", "fp8"], "--compression = 'fp8': must be one of none, int4"),
    (["--algo", "rings"], "--algo = 'rings': must be one of two-shot, ring, biring"),
    (["--batch", "4"], "--batch = 4: must be in 8..1024 (at least one example per "
                       "accelerator)"),
    (["--lr", "-1"], "--lr = -1: must be a positive number"),
    (["--rounding", "up"], "--rounding = 'up': must be one of stochastic, nearest"),
    (["--seed", "-2"], "--seed = -2: must be at least 0"),
    (["--steps", "many"], "argument --steps: invalid int value: 'many'"),
])
def test_bad_input_is_one_line_and_status_2(args, message, tmp_path, capsys):
    assert main(["train", *args, "-o", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not (tmp_path / "t").exists()
