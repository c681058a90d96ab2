"""``train comm`` refuses bad numbers, devices and run directories before anything is built:
one line, exit status 2."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from societas.marl.cli import app
from societas.marl.comm import cli as comm_cli


@pytest.fixture
def no_training(monkeypatch):
    def refuse(**kwargs):
        raise AssertionError("training started before the options were checked")

    monkeypatch.setattr(comm_cli, "run_cli_training", refuse)


def _one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--steps", str(10**23)], f"error: --steps must be between 1 and 10000000000, got {10**23}"),
        (["--steps", "0"], "error: --steps must be between 1 and 10000000000, got 0"),
        (["--seed", "-5"], "error: --seed must be between 0 and 4294967295, got -5"),
        (["--seed", str(2**64)], f"error: --seed must be between 0 and 4294967295, got {2**64}"),
        (["--num-envs", "0"], "error: --num-envs must be between 1 and 1000000, got 0"),
        (["--eval-episodes", "-1"], "error: --eval-episodes must be between 0 and 1000000, got -1"),
        (["--threads", "100000"], "error: --threads must be between 1 and 1024, got 100000"),
        (
            ["--comm-kwargs", "[["],
            "error: --comm-kwargs: JSON syntax error at line 1, column 3: Expecting value",
        ),
    ],
)
def test_bad_numbers_are_refused_in_one_line(tmp_path, no_training, args, expected):
    r = CliRunner().invoke(app, ["train", "comm", "--out", str(tmp_path / "run"), *args])
    assert _one_error_line(r) == expected
    assert not (tmp_path / "run").exists()


def test_a_bad_device_or_run_directory_is_refused_before_the_run(tmp_path, no_training):
    r = CliRunner().invoke(app, ["train", "comm", "--out", str(tmp_path / "run"), "--device", "gpu"])
    assert _one_error_line(r).startswith("error: --device: unknown device 'gpu'")
    assert not (tmp_path / "run").exists()  # once the run directory was made before the device failed
    a_file = tmp_path / "file"
    a_file.write_text("x")
    r = CliRunner().invoke(app, ["train", "comm", "--out", str(a_file)])
    assert _one_error_line(r) == f"error: --out {a_file}: not a directory"


def test_a_run_directory_that_cannot_be_written_exits_1(tmp_path, monkeypatch):
    def no_room(**kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(comm_cli, "run_cli_training", no_room)
    r = CliRunner().invoke(app, ["train", "comm", "--out", str(tmp_path / "run")])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert r.output.strip() == f"error: --out {tmp_path / 'run'}: No space left on device"
