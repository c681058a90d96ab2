"""``evolve run`` / ``report`` on hostile or broken input: one line, the right exit status, nothing started.

Unreadable and alias-bomb configs, resuming a missing or broken run directory,
two writers on one run directory, absurd option values, progress without a
terminal, and the sandbox backend (unavailable, or unconfined by name).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import societas.agents.sandbox.core as sandbox_core
from societas.agents.documents import DocumentError
from societas.agents.sandbox import BwrapStatus, Sandbox, SandboxError
from societas.evolve.cli import app
from societas.evolve.config import ConfigError, load_config, parse_config
from societas.evolve.controller import LOCK_FILE, Controller, RunError, RunLock, RunLockedError
from societas.evolve.database import ProgramStore
from societas.evolve.evaluator import TaskError
from societas.evolve.task import load_task
from societas.evolve.task_settings import load_task_settings

from .test_held_out_report import HELD_OUT_CODE

REPO = Path(__file__).resolve().parents[2]
TASK = Path(__file__).parent / "tasks" / "curve_fit"


def evolve(*args, env=None):
    """``python -m societas.evolve run|report ...`` in-process; the result has .exit_code, .stdout, .stderr."""
    return CliRunner().invoke(app, [*map(str, args)], env=env)


def error_of(result):
    """The JSON error (--json) and the single stderr line of a failed command."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return json.loads(result.stdout.strip().splitlines()[-1])["error"]


def make_run(tmp_path, name="run", iterations=2) -> Path:
    task = load_task(TASK)
    cfg = load_config(task.config_path)
    cfg.max_iterations = iterations
    ctl = Controller(task, cfg, tmp_path / name)
    try:
        ctl.run()
    finally:
        ctl.close()
    return tmp_path / name


@pytest.fixture
def no_sandbox_env(monkeypatch):
    """Neither the CI switch that forbids the unconfined backend nor the one that asks for it."""
    monkeypatch.delenv("SOCIETAS_REQUIRE_BWRAP", raising=False)
    monkeypatch.delenv("SOCIETAS_SANDBOX", raising=False)


# ---------------------------------------------------------------- configs


def test_a_config_that_is_not_utf8_is_named(tmp_path):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("max_iterations: 3\n# caf\xe9\n".encode("latin-1"))
    result = evolve("run", TASK, "--config", bad, "--out", tmp_path / "runs", "--json")
    assert result.exit_code == 2
    message = error_of(result)
    assert str(bad) in message and "not UTF-8" in message
    assert not (tmp_path / "runs").exists()


def billion_laughs() -> str:
    lines = [
        "evaluator:",
        "  task_settings:",
        '    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
    ]
    for prev, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"    {name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_in_task_settings_is_refused_at_once(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(billion_laughs())
    assert len(bomb.read_bytes()) < 600
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "societas.evolve", "run", str(TASK), "--config", str(bomb)]
        + ["--out", str(tmp_path / "runs"), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=90,
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    message = json.loads(proc.stdout.strip().splitlines()[-1])["error"]
    assert str(bomb) in message and "too large" in message
    assert elapsed < 30  # the interpreter and torch start; the refusal itself takes well under a second
    with pytest.raises(ConfigError, match="too large"):
        load_config(bomb)


def test_numbers_out_of_range_in_a_config_name_the_field():
    with pytest.raises(ConfigError, match="max_iterations"):
        parse_config({"max_iterations": 10**23})
    with pytest.raises(ConfigError, match="evaluator.parallel_evaluations"):
        parse_config({"evaluator": {"parallel_evaluations": 10**6}})
    with pytest.raises(ConfigError, match="evaluator.sandbox"):
        parse_config({"evaluator": {"sandbox": "none"}})
    assert parse_config({"evaluator": {"sandbox": "rlimit"}}).evaluator.sandbox == "rlimit"


@pytest.mark.parametrize(
    "option, value, expected",
    [
        ("--iterations", -1, "--iterations must be between 0 and 10000000, got -1"),
        ("--workers", 0, "--workers must be between 1 and 1024, got 0"),
        ("--workers", 10**9, "--workers must be between 1 and 1024"),
        ("--seed", 2**70, "--seed must be between"),
        ("--sandbox", "none", "--sandbox must be one of auto, bwrap, rlimit, got 'none'"),
        ("--log-level", "LOUD", "--log-level must be"),
    ],
)
def test_bad_option_values_exit_2_with_one_line(tmp_path, option, value, expected):
    result = evolve("run", TASK, option, value, "--out", tmp_path / "runs", "--json")
    assert result.exit_code == 2
    assert error_of(result).startswith(expected)
    assert not (tmp_path / "runs").exists()


def test_an_absurd_iteration_count_is_refused_before_anything_starts(tmp_path):
    # In a child process with a timeout: accepting the value would start a run that never ends.
    proc = subprocess.run(
        [sys.executable, "-m", "societas.evolve", "run", str(TASK), "--iterations", str(10**23)]
        + ["--out", str(tmp_path / "runs"), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["error"] == (
        "--iterations must be between 0 and 10000000, got 100000000000000000000000"
    )
    assert not (tmp_path / "runs").exists()


def test_report_workers_out_of_range_exit_2(tmp_path):
    result = evolve("report", tmp_path, "--workers", 0, "--json")
    assert result.exit_code == 2 and error_of(result) == "--workers must be between 1 and 1024, got 0"


def test_unreadable_task_and_settings_files_are_named(tmp_path):
    task = tmp_path / "task"
    shutil.copytree(TASK, task)
    (task / "initial_program.py").write_bytes(b"# EVOLVE-BLOCK-START\nx = '\xff'\n# EVOLVE-BLOCK-END\n")
    with pytest.raises(TaskError, match=r"initial_program\.py: not UTF-8"):
        load_task(task)
    (tmp_path / "task_settings.json").write_text("[1, 2]")
    with pytest.raises(DocumentError, match=r"task_settings\.json: expected a JSON object"):
        load_task_settings(str(task / "evaluator.py"), str(tmp_path / "p.py"), {"iterations": 1}, "t", ())


# ---------------------------------------------------------------- resume


def test_resume_of_a_missing_directory_is_one_clear_line(tmp_path):
    missing = tmp_path / "no-such-run"
    result = evolve("run", "--resume", missing, "--json")
    assert result.exit_code == 2
    message = error_of(result)
    assert message == f"cannot resume {missing}: no such run directory"
    assert "Errno" not in message and not missing.exists()


def test_resume_of_a_run_with_a_malformed_config_is_one_line(tmp_path):
    run_dir = make_run(tmp_path)
    (run_dir / "config.yaml").write_text("database: [unclosed\n")
    result = evolve("run", "--resume", run_dir, "--json")
    assert result.exit_code == 2
    message = error_of(result)
    assert str(run_dir / "config.yaml") in message and "YAML syntax error" in message
    (run_dir / "config.yaml").write_text("database:\n  num_islands: 0\n")
    result = evolve("run", "--resume", run_dir, "--json")
    assert result.exit_code == 2 and "database.num_islands" in error_of(result)


def test_resume_of_a_run_whose_database_was_deleted_is_refused(tmp_path):
    run_dir = make_run(tmp_path)
    for name in ("programs.db", "programs.db-wal", "programs.db-shm"):
        (run_dir / name).unlink(missing_ok=True)
    result = evolve("run", "--resume", run_dir, "--json")
    assert result.exit_code == 2
    message = error_of(result)
    assert str(run_dir / "programs.db") in message and "missing" in message
    assert not (run_dir / "programs.db").exists(), "nothing may start again from scratch"
    with pytest.raises(RunError, match="programs.db is missing"):
        Controller.resume(run_dir)


def test_resume_refuses_a_task_or_config_beside_it(tmp_path):
    run_dir = make_run(tmp_path)
    result = evolve("run", TASK, "--resume", run_dir, "--json")
    assert result.exit_code == 2 and "give no TASK, --config or --seed-programs" in error_of(result)


# ---------------------------------------------------------------- one writer


def test_a_second_writer_is_refused_naming_the_holder(tmp_path):
    run_dir = make_run(tmp_path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from societas.evolve.controller import RunLock\n"
            "lock = RunLock(sys.argv[1])\n"
            "print('locked', flush=True)\n"
            "time.sleep(120)\n",
            str(run_dir),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        result = evolve("run", "--resume", run_dir, "--iterations", 4, "--json")
        assert time.monotonic() - started < 10
        assert result.exit_code == 2
        message = error_of(result)
        assert f"in use by process {holder.pid}" in message and str(run_dir / LOCK_FILE) in message
        with pytest.raises(RunLockedError, match=f"process {holder.pid}") as caught:
            Controller.resume(run_dir)
        assert caught.value.pid == holder.pid
        assert signature_count(run_dir) == 3, "the refused resume changed nothing"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    # A killed holder leaves run.lock behind, but not its lock.
    lock = RunLock(run_dir)
    assert (run_dir / LOCK_FILE).read_text().strip() == str(os.getpid())
    lock.release()


def signature_count(run_dir):
    store = ProgramStore(run_dir / "programs.db")
    try:
        return len(store.programs())
    finally:
        store.close()


def test_two_controllers_on_one_directory_in_one_process(tmp_path):
    task = load_task(TASK)
    cfg = load_config(task.config_path)
    first = Controller(task, cfg, tmp_path / "r")
    try:
        with pytest.raises(RunLockedError, match=f"in use by process {os.getpid()}"):
            Controller(task, cfg, tmp_path / "r")
    finally:
        first.close()
    Controller(task, cfg, tmp_path / "r").close()  # released on close


# ---------------------------------------------------------------- progress without a terminal


def test_progress_lines_without_a_terminal(tmp_path):
    task = tmp_path / "held_out_task"
    shutil.copytree(TASK, task)
    with (task / "evaluator.py").open("a") as handle:
        handle.write(HELD_OUT_CODE)
    for path in (task, *task.iterdir()):
        path.chmod(0o755)
    config = load_config(TASK / "config.yaml").model_dump(mode="json")
    config["evaluator"]["task_settings"] = {"held_out_points": 5}
    config["held_out"]["baselines"] = ["zero"]
    (task / "config.yaml").write_text(yaml.safe_dump(config))
    env = {"SOCIETAS_PROGRESS_EVERY_S": "0.001"}
    result = evolve(
        "run", task, "--iterations", 12, "--workers", 2, "--out", tmp_path / "runs", "--json", env=env
    )
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    progress = [line for line in lines if line.startswith("evolve: ")]
    assert progress, result.stderr
    assert progress[-1].startswith("evolve: 12/12, best ")
    assert all(", evals/min " in line and ", failed " in line for line in progress)
    assert any(line.startswith("held-out: 3/3") for line in lines), result.stderr

    run_dir = Path(json.loads(result.stdout.strip().splitlines()[-1])["run_dir"])
    (run_dir / "held_out.json").unlink()
    report = evolve("report", run_dir, "--json", env=env)
    assert report.exit_code == 0, report.output
    assert any(line.startswith("held-out: 3/3") for line in report.stderr.splitlines()), report.stderr


def test_a_bad_progress_interval_is_one_line(tmp_path):
    result = evolve("run", TASK, "--out", tmp_path, "--json", env={"SOCIETAS_PROGRESS_EVERY_S": "often"})
    assert result.exit_code == 2
    assert "SOCIETAS_PROGRESS_EVERY_S='often'" in error_of(result)


# ---------------------------------------------------------------- sandbox


def test_an_unavailable_sandbox_refuses_the_run_in_one_line(tmp_path, monkeypatch, no_sandbox_env):
    reason = "bubblewrap (bwrap) is not installed"
    monkeypatch.setattr(sandbox_core, "bwrap_status", lambda: BwrapStatus(False, None, reason, False))
    for extra in ([], ["--sandbox", "bwrap"], ["--sandbox", "auto"]):
        result = evolve("run", TASK, "--out", tmp_path / "runs", "--json", *extra)
        assert result.exit_code == 2, result.output
        message = error_of(result)
        assert message.startswith("the sandbox cannot run the evaluations: ") and reason in message
        assert "rlimit" in message  # says how to opt out
        assert not (tmp_path / "runs").exists(), "no run directory for a run that cannot evaluate"


def test_a_sandbox_that_fails_to_start_refuses_the_run(tmp_path, monkeypatch):
    def broken(self, *args, **kwargs):
        raise SandboxError("cannot start the bwrap sandbox: boom")

    monkeypatch.setattr(Sandbox, "run", broken)
    result = evolve("run", TASK, "--out", tmp_path / "runs", "--json")
    assert result.exit_code == 2
    assert "cannot start the bwrap sandbox: boom" in error_of(result)


def test_unconfined_by_name_is_recorded_and_said_first(tmp_path, no_sandbox_env):
    result = evolve(
        "run",
        TASK,
        "--iterations",
        3,
        "--sandbox",
        "rlimit",
        "--out",
        tmp_path / "runs",
        "--json",
        "--no-held-out",
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout.strip().splitlines()[-1])
    assert payload["sandbox"] == "rlimit" and payload["unconfined"] is True
    assert result.stderr.startswith("warning: candidates run unconfined (no sandbox isolation)")
    run_dir = Path(payload["run_dir"])
    assert load_config(run_dir / "config.yaml").evaluator.sandbox == "rlimit"
    store = ProgramStore(run_dir / "programs.db")
    try:
        assert store.get_meta("sandbox_backends") == ["rlimit"]
    finally:
        store.close()
    summary = (run_dir / "summary.md").read_text()
    assert summary.splitlines()[0].startswith("> **Warning: candidates ran unconfined (no sandbox isolation)")

    text = evolve("report", run_dir, "--no-held-out")
    assert text.exit_code == 0
    assert text.stderr.startswith("warning: candidates ran unconfined")


def test_unconfined_through_the_environment_is_recorded(tmp_path, no_sandbox_env):
    result = evolve(
        "run",
        TASK,
        "--iterations",
        2,
        "--out",
        tmp_path / "runs",
        "--json",
        "--no-held-out",
        env={"SOCIETAS_SANDBOX": "rlimit"},
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout.strip().splitlines()[-1])
    assert payload["sandbox"] == "rlimit" and payload["unconfined"] is True
    assert "Warning: candidates ran unconfined" in (Path(payload["run_dir"]) / "summary.md").read_text()


def test_a_confined_run_has_no_warning(tmp_path):
    if not sandbox_core.bwrap_available():
        pytest.skip("bubblewrap cannot run here")
    run_dir = make_run(tmp_path)
    result = evolve("report", run_dir, "--no-held-out", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout.splitlines()[-1])["unconfined"] is False
    assert "unconfined" not in (run_dir / "summary.md").read_text()
    store = ProgramStore(run_dir / "programs.db")
    try:
        assert store.get_meta("sandbox_backends") == ["bwrap"]
    finally:
        store.close()


def test_report_names_a_broken_run_json(tmp_path):
    run_dir = make_run(tmp_path)
    (run_dir / "run.json").write_text("{not json")
    result = evolve("report", run_dir, "--json")
    assert result.exit_code == 2
    assert str(run_dir / "run.json") in error_of(result)


# ---------------------------------------------------------------- LLM request time limit


@pytest.mark.parametrize("where", ["option", "config"])
def test_llm_timeout_bounds_each_request_to_a_server_that_hangs(tmp_path, where):
    """A server that answers after 30 s: with a 0.5 s limit the LLM mutations fail fast and the run ends."""
    from tests.agents.openai_server import OpenAITestServer

    def never_soon(prompt, body):
        return "```python\nprint(1)\n```"

    with OpenAITestServer(never_soon, delay_s=30.0) as srv:
        uri = f"openai:{srv.url}#test-model"
        cfg = yaml.safe_load((TASK / "config.yaml").read_text())
        cfg["max_iterations"] = 2
        cfg["mutation"] = {"weights": {"llm": 1.0}}
        cfg["llm"] = {"models": [{"name": uri}]}
        args = ["run", str(TASK), "--config", tmp_path / "config.yaml", "--out", tmp_path / "runs"]
        args += ["--no-held-out", "--json"]
        if where == "option":
            args += ["--llm-timeout", "0.5"]
        else:
            cfg["llm"]["timeout"] = 0.5
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
        started = time.monotonic()
        result = evolve(*args)
        elapsed = time.monotonic() - started
    assert result.exit_code == 0, result.output
    assert elapsed < 25, f"the run waited {elapsed:.1f} s on a server that hangs"
    assert json.loads(result.stdout.strip().splitlines()[-1])["evaluated"] >= 1


def test_llm_timeout_without_an_openai_llm_is_refused(tmp_path):
    result = evolve("run", TASK, "--llm-timeout", "5", "--out", tmp_path, "--json", "--no-held-out")
    assert result.exit_code == 2
    assert "--llm-timeout applies to OpenAI-compatible LLMs" in error_of(result)
    bad = evolve("run", TASK, "--llm-timeout", "0", "--out", tmp_path, "--json")
    assert bad.exit_code == 2 and "--llm-timeout must be above 0" in error_of(bad)


def test_an_evaluator_that_is_not_utf8_is_named(tmp_path):
    from societas.evolve.config import EvaluatorConfig
    from societas.evolve.evaluator import TaskEvaluator

    bad = tmp_path / "evaluator.py"
    bad.write_bytes(b"# caf\xe9\ndef evaluate(path):\n    return {}\n")
    with pytest.raises(TaskError, match=r"evaluator\.py: not UTF-8 text"):
        TaskEvaluator(bad, EvaluatorConfig())
