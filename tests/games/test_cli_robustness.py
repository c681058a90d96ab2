"""The games command line refuses what it cannot run before building a tree (one line, exit 2)
and, without a terminal, reports progress as plain lines every SOCIETAS_PROGRESS_EVERY_S seconds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from societas.marl.games import cli as games_cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_tree(monkeypatch):
    """Fail the test if a command builds a game tree: every check must come first."""

    def refuse(*args, **kwargs):
        raise AssertionError("a game tree was built before the options were checked")

    monkeypatch.setattr(games_cli, "load_game", refuse)


def _one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    "args,expected",
    [
        (
            ["solve", "--game", "kuhn_poker", "--iterations", str(10**23)],
            f"error: --iterations must be between 1 and 10000000, got {10**23}",
        ),
        (
            ["solve", "--game", "kuhn_poker", "--iterations", "0"],
            "error: --iterations must be between 1 and 10000000, got 0",
        ),
        (
            ["solve", "--game", "kuhn_poker", "--eval-every", "0"],
            "error: --eval-every must be between 1 and 10000000, got 0",
        ),
        (
            ["table", "--games", "kuhn_poker", "--iterations", str(10**23)],
            f"error: --iterations must be between 1 and 10000000, got {10**23}",
        ),
        (
            ["table", "--games", "kuhn_poker", "--points", "0"],
            "error: --points must be between 1 and 10000, got 0",
        ),
        (
            ["psro", "--game", "kuhn_poker", "--iterations", str(10**23)],
            f"error: --iterations must be between 1 and 10000, got {10**23}",
        ),
        (
            ["psro", "--game", "kuhn_poker", "--seed", "-1"],
            "error: --seed must be between 0 and 4294967295, got -1",
        ),
        (
            ["psro", "--game", "kuhn_poker(players=3)", "--iterations", "2000"],
            "error: --iterations 2000: the meta-game of 3 players would take 179 GiB (at most 16 GiB); "
            "use fewer iterations",
        ),
    ],
)
def test_numbers_out_of_range_are_refused_before_any_tree(no_tree, args, expected):
    assert _one_error_line(CliRunner().invoke(games_cli.app, args)) == expected


def test_output_paths_are_checked_before_the_run(no_tree, tmp_path):
    runner = CliRunner()
    a_file = tmp_path / "file"
    a_file.write_text("x")
    solve = ["solve", "--game", "kuhn_poker", "--plot"]
    r = runner.invoke(games_cli.app, [*solve, str(tmp_path)])
    assert _one_error_line(r) == (
        f"error: --plot {tmp_path}: is a directory; give a file name such as {tmp_path / 'curve.png'}"
    )
    r = runner.invoke(games_cli.app, [*solve, str(a_file / "curve.png")])
    assert _one_error_line(r) == f"error: --plot {a_file / 'curve.png'}: {a_file} is not a directory"
    r = runner.invoke(games_cli.app, [*solve, str(tmp_path / "curve.nope")])
    assert _one_error_line(r).startswith(
        f"error: --plot {tmp_path / 'curve.nope'}: unknown image format 'nope'; known: "
    )
    r = runner.invoke(games_cli.app, ["psro", "--game", "kuhn_poker", "--plot", str(tmp_path)])
    assert _one_error_line(r).startswith(f"error: --plot {tmp_path}: is a directory")
    r = runner.invoke(games_cli.app, ["table", "--games", "kuhn_poker", "--out", str(a_file)])
    assert _one_error_line(r) == f"error: --out {a_file}: not a directory"


@pytest.mark.parametrize(
    "command", [["solve", "--game", "kuhn_poker"], ["psro", "--game", "kuhn_poker"], ["table"]]
)
def test_a_bad_progress_interval_is_refused(no_tree, monkeypatch, command):
    monkeypatch.setenv("SOCIETAS_PROGRESS_EVERY_S", "soon")
    r = CliRunner().invoke(games_cli.app, command)
    assert (
        _one_error_line(r) == "error: SOCIETAS_PROGRESS_EVERY_S='soon' must be a positive number of seconds"
    )


def test_solve_without_a_terminal_writes_plain_progress_lines():
    env = {**os.environ, "SOCIETAS_PROGRESS_EVERY_S": "0.01"}
    r = subprocess.run(
        [sys.executable, "-m", "societas.marl.games", "solve", "--game", "kuhn_poker", "--iterations", "300"]
        + ["--device", "cpu", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    pattern = re.compile(r"^cfr on kuhn_poker: (\d+)/300 \(\d+:\d\d\)$")
    done = [int(m.group(1)) for m in map(pattern.match, lines) if m]
    assert len(done) >= 2, lines  # several lines during the run, not one bar at the end
    assert done == sorted(done) and done[-1] == 300, lines  # the last line is the final state
    assert not [ln for ln in lines if not pattern.match(ln)], lines  # nothing but progress lines


def test_psro_without_a_terminal_writes_plain_progress_lines():
    env = {**os.environ, "SOCIETAS_PROGRESS_EVERY_S": "0.01"}
    r = subprocess.run(
        [sys.executable, "-m", "societas.marl.games", "psro", "--game", "kuhn_poker", "--iterations", "6"]
        + ["--device", "cpu"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    pattern = re.compile(
        r"^psro uniform on kuhn_poker: (\d)/6, latest exploitability [0-9.e-]+ \(\d+:\d\d\)$"
    )
    done = [int(m.group(1)) for m in map(pattern.match, r.stderr.splitlines()) if m]
    assert done and done == sorted(done) and done[-1] == 6, r.stderr
