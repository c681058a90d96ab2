"""Durable runs from the command line: a run killed with SIGKILL resumes from its last
completed step without running a completed node again; interrupts are answered with
``resume --input``; bad checkpoint files and unknown threads get one-line errors."""

from __future__ import annotations

import json
import os
import pty
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHAIN = """
name: durable
nodes:
  - {id: a, kind: function, function: "tests.topology.durable_nodes:step"}
  - {id: b, kind: function, function: "tests.topology.durable_nodes:step"}
  - {id: c, kind: function, function: "tests.topology.durable_nodes:step"}
edges: [a -> b, b -> c]
"""

APPROVAL = """
name: approval
nodes:
  - {id: a, kind: function, function: "tests.topology.durable_nodes:step"}
  - {id: ok, kind: interrupt, prompt: "Ship it?"}
  - {id: c, kind: function, function: "tests.topology.durable_nodes:step"}
edges: [a -> ok, ok -> c]
"""


def _cli(args, env, check_rc=None):
    proc = subprocess.run(
        [sys.executable, "-m", "societas.topology", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    if check_rc is not None:
        assert proc.returncode == check_rc, proc.stderr
    return proc


def test_killed_run_resumes_without_rerunning_completed_nodes(tmp_path):
    spec = tmp_path / "chain.yaml"
    spec.write_text(CHAIN)
    log = tmp_path / "log.txt"
    db = tmp_path / "runs.db"
    env = {"SOCIETAS_TEST_LOG": str(log), "SOCIETAS_TEST_KILL_AT": "b"}
    proc = _cli(["run", str(spec), "--task", "go", "--checkpoint", str(db), "--thread", "t1", "--json"], env)
    assert proc.returncode == -signal.SIGKILL
    assert log.read_text().split() == ["a", "b"]
    proc = _cli(["resume", "--checkpoint", str(db), "--thread", "t1", "--json"], env, check_rc=0)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["output"] == "c(b(a()))"
    # a completed before the kill and did not run again; b, killed mid-step, ran once more
    assert log.read_text().split() == ["a", "b", "b", "c"]
    steps = [r[0] for r in sqlite3.connect(db).execute("select step from checkpoints order by step")]
    assert steps == [0, 1, 2]


def test_interrupt_is_answered_with_resume_input(tmp_path):
    spec = tmp_path / "approval.yaml"
    spec.write_text(APPROVAL)
    env = {"SOCIETAS_TEST_LOG": str(tmp_path / "log.txt")}
    db = tmp_path / "runs.db"
    proc = _cli(
        ["run", str(spec), "--task", "go", "--checkpoint", str(db), "--thread", "x", "--json"], env, 0
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["stopped"] == "interrupted" and out["interrupt"]["question"] == "Ship it?"
    assert out["resume"] == f"societas resume --checkpoint {db} --thread x --input ANSWER"
    proc = _cli(["resume", "--checkpoint", str(db), "--thread", "x", "--input", "yes", "--json"], env, 0)
    assert json.loads(proc.stdout.strip().splitlines()[-1])["output"] == "c(yes)"


@pytest.mark.parametrize(
    "setup, fragment",
    [
        ("garbage", "not"),
        ("unknown-thread", "nope"),
    ],
)
def test_bad_checkpoint_files_and_threads_get_one_line_errors(tmp_path, setup, fragment):
    db = tmp_path / "runs.db"
    env = {"SOCIETAS_TEST_LOG": str(tmp_path / "log.txt")}
    if setup == "garbage":
        db.write_bytes(b"this is not a database at all" * 10)
    else:
        spec = tmp_path / "chain.yaml"
        spec.write_text(CHAIN)
        _cli(["run", str(spec), "--task", "go", "--checkpoint", str(db), "--thread", "t1"], env, 0)
    proc = _cli(["resume", "--checkpoint", str(db), "--thread", "nope"], env)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --checkpoint") and fragment in lines[0], (
        proc.stderr
    )
    assert "Traceback" not in proc.stderr


def test_checkpoint_and_thread_go_together(tmp_path):
    spec = tmp_path / "chain.yaml"
    spec.write_text(CHAIN)
    proc = _cli(
        ["run", str(spec), "--task", "go", "--thread", "t"], {"SOCIETAS_TEST_LOG": str(tmp_path / "l")}
    )
    assert proc.returncode == 2 and "go together" in proc.stderr


def test_at_a_terminal_the_cli_asks_the_interrupt_and_goes_on(tmp_path):
    spec = tmp_path / "approval.yaml"
    spec.write_text(APPROVAL)
    master, slave = pty.openpty()
    os.write(master, b"ship\n")  # the answer waits in the terminal's input
    proc = subprocess.run(
        [sys.executable, "-m", "societas.topology", "run", str(spec), "--task", "go", "--json"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "SOCIETAS_TEST_LOG": str(tmp_path / "log.txt")},
        stdin=slave,
        capture_output=True,
        text=True,
        timeout=120,
    )
    os.close(slave)
    os.close(master)
    assert proc.returncode == 0, proc.stderr
    assert "Ship it?" in proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["output"] == "c(ship)" and out["stopped"] is None
