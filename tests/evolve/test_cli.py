"""``python -m societas.evolve``: JSON output, exit codes, report, and a SIGKILL mid-run followed by --resume."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from societas.evolve.cli import app as evolve_app
from societas.evolve.config import load_config
from societas.evolve.controller import Controller
from societas.evolve.task import load_task

from .test_controller import signature

REPO = Path(__file__).resolve().parents[2]
TASK = Path(__file__).parent / "tasks" / "curve_fit"


def cli(*args, check=True, timeout=120):
    proc = subprocess.run(
        [sys.executable, "-m", "societas.evolve", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def cli_here(*args):
    """The same command line in this process (typer's runner), for the exits on bad input, which
    stop before anything runs: a process of their own would import torch again (8 s each)."""
    r = CliRunner().invoke(evolve_app, [str(a) for a in args], prog_name="python -m societas.evolve")
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return subprocess.CompletedProcess(args, r.exit_code, r.stdout, r.stderr)


def last_json(proc):
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_run_json_and_report(tmp_path):
    proc = cli("run", TASK, "--iterations", 12, "--workers", 2, "--out", tmp_path, "--json")
    result = last_json(proc)
    assert set(result) == {
        "best_score",
        "best_training_score",
        "validation_score",
        "selected_by",
        "seed_score",
        "evaluated",
        "failed",
        "run_dir",
        "sandbox",
        "unconfined",
    }
    # The test task has no validation set: the returned program is the best on training.
    assert result["selected_by"] == "training" and result["validation_score"] is None
    assert result["best_score"] == result["best_training_score"]
    assert result["sandbox"] in ("bwrap", "rlimit")
    assert result["unconfined"] == (result["sandbox"] == "rlimit")
    assert result["best_score"] >= result["seed_score"] > 0
    run_dir = Path(result["run_dir"])
    assert {"config.yaml", "metrics.jsonl", "programs.db", "summary.md", "summary.json", "run.json"} <= {
        p.name for p in run_dir.iterdir()
    }
    (run_dir / "summary.md").unlink()
    report = last_json(cli("report", run_dir, "--json"))
    summary = (run_dir / "summary.md").read_text()
    assert "```diff" in summary and "--- seed/initial_program.py" in summary
    assert "| island | members |" in summary and "| 1 |" in summary
    png = (run_dir / "plots" / "fitness.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert report["best_score"] == result["best_score"]


def test_scripted_llm_through_the_cli(tmp_path):
    proc = cli(
        "run",
        TASK,
        "--iterations",
        8,
        "--out",
        tmp_path,
        "--json",
        "--llm",
        "function:tests.evolve.scripted_llm:answer",
    )
    result = last_json(proc)
    assert result["best_score"] > result["seed_score"]


def test_bad_config_exits_2_naming_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("database:\n  num_islands: 0\n")
    proc = cli("run", TASK, "--config", bad, "--out", tmp_path, "--json", check=False)  # a real process
    assert proc.returncode == 2
    assert "database.num_islands" in last_json(proc)["error"]
    proc = cli_here("run", tmp_path / "nope", "--json")
    assert proc.returncode == 2 and "is not a directory" in last_json(proc)["error"]


def test_run_without_task_or_resume_exits_2(tmp_path):
    proc = cli_here("run", "--out", tmp_path, "--json")
    assert proc.returncode == 2
    assert last_json(proc)["error"] == "give a TASK directory, or --resume RUN_DIR"


def test_ray_executor_without_ray_exits_2_naming_the_extra(tmp_path):
    try:
        import ray  # noqa: F401
    except ImportError:
        proc = cli("run", TASK, "--executor", "ray", "--out", tmp_path, "--json", check=False)
        assert proc.returncode == 2 and "'ray' extra" in last_json(proc)["error"]


def test_sigkill_mid_run_then_resume_loses_nothing(tmp_path):
    # A slower copy of the task, so the kill lands mid-run.
    task = tmp_path / "slow_curve"
    shutil.copytree(TASK, task)
    evaluator = task / "evaluator.py"
    evaluator.write_text(
        evaluator.read_text().replace(
            "def evaluate(program_path):\n", "def evaluate(program_path):\n    import time; time.sleep(0.2)\n"
        )
    )
    for path in (task, *task.iterdir()):
        path.chmod(0o755)
    out = tmp_path / "runs"
    iterations = 30
    # The killed run cannot remove its in-flight sandbox scratch directories: keep them in tmp_path.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "societas.evolve",
            "run",
            str(task),
            "--iterations",
            str(iterations),
            "--workers",
            "2",
            "--out",
            str(out),
            "--json",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    try:
        deadline = time.monotonic() + 60
        committed = 0
        while time.monotonic() < deadline:
            dbs = list(out.glob("*/programs.db"))
            if dbs:
                try:
                    with sqlite3.connect(dbs[0]) as conn:
                        committed = conn.execute("SELECT COUNT(*) FROM programs").fetchone()[0]
                except sqlite3.OperationalError:
                    committed = 0
                if committed >= 10:
                    break
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    run_dir = next(out.iterdir())
    before = signature(run_dir)
    assert 10 <= len(before) < iterations + 1, "the kill should land mid-run"

    resumed = cli("run", "--resume", run_dir, "--json")
    after = signature(run_dir)
    assert [row[0] for row in after] == list(range(iterations + 1))  # every iteration exactly once
    assert all(row in after for row in before)  # nothing committed was lost or changed
    assert last_json(resumed)["run_dir"] == str(run_dir)

    # ... and the result equals an uninterrupted run with the same seed.
    cfg = load_config(task / "config.yaml")
    cfg.max_iterations = iterations
    ctl = Controller(load_task(task), cfg, tmp_path / "clean")
    ctl.run()
    ctl.close()
    assert signature(tmp_path / "clean") == after
