"""``python -m societas.marl train comm|routing``: both commands are mounted under one
``train`` group and write their run directories; errors exit 2 in one line."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from societas.marl.cli import app


def _last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def test_train_comm_and_routing_are_mounted(tmp_path):
    runner = CliRunner()
    res = runner.invoke(
        app,
        [
            "train",
            "comm",
            "--env",
            "speaker_listener",
            "--comm",
            "commnet",
            "--steps",
            "6400",
            "--num-envs",
            "64",
            "--eval-episodes",
            "4",
            "--threads",
            "1",
            "--out",
            str(tmp_path / "comm"),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = _last_json(res.output)
    assert out["comm"] == "commnet" and out["env_steps"] >= 6400
    for name in ("config.yaml", "metrics.jsonl", "learning_curve.png", "model.pt", "summary.md"):
        assert (tmp_path / "comm" / name).exists(), name

    res = runner.invoke(
        app,
        [
            "train",
            "routing",
            "--method",
            "gptswarm",
            "--steps",
            "20",
            "--out",
            str(tmp_path / "routing"),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = _last_json(res.output)
    assert out["method"] == "gptswarm" and "fully_connected" in out["table"]
    assert (tmp_path / "routing" / "learning_curve.png").exists()


def test_unknown_names_exit_2_naming_them(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["train", "comm", "--comm", "telepathy", "--out", str(tmp_path / "x")])
    assert res.exit_code == 2 and "telepathy" in res.output and "tarmac" in res.output
    res = runner.invoke(app, ["train", "routing", "--method", "oracle", "--out", str(tmp_path / "y")])
    assert res.exit_code == 2 and "method" in res.output and "gdesigner" in res.output
