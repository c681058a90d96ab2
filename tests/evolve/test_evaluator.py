"""Sandboxed cascade evaluation, and containment of hostile candidates."""

from __future__ import annotations

import os
import textwrap
import uuid
from pathlib import Path

import pytest

from societas.agents.sandbox import bwrap_status
from societas.evolve.config import EvaluatorConfig
from societas.evolve.evaluator import TaskError, TaskEvaluator, validate_metrics

BWRAP = bwrap_status()
needs_bwrap = [
    pytest.mark.bwrap,
    pytest.mark.skipif(not BWRAP.available, reason=f"bubblewrap unusable here: {BWRAP.reason}"),
]
CURVE = Path(__file__).parent / "tasks" / "curve_fit"

EVALUATOR = """
import importlib.util, math

def _run(path):
    spec = importlib.util.spec_from_file_location("candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.run()

def evaluate(program_path):
    return _run(program_path)
"""


def make_task(tmp_path: Path, evaluator: str = EVALUATOR) -> Path:
    task = tmp_path / f"task-{uuid.uuid4().hex[:6]}"
    task.mkdir()
    (task / "evaluator.py").write_text(textwrap.dedent(evaluator))
    os.chmod(task, 0o755)  # the sandboxed program runs as an unprivileged uid and must read it
    os.chmod(task / "evaluator.py", 0o644)
    return task


def candidate(body: str) -> str:
    return (
        "import os, sys, math\n# EVOLVE-BLOCK-START\ndef run():\n"
        + textwrap.indent(textwrap.dedent(body), "    ")
        + "# EVOLVE-BLOCK-END\n"
    )


def evaluate(tmp_path, body, **config):
    ev = TaskEvaluator(
        make_task(tmp_path) / "evaluator.py", EvaluatorConfig(**{"timeout": 10, "memory_mb": 512, **config})
    )
    return ev.evaluate(candidate(body))


def test_cascade_runs_stage1_then_evaluate_and_merges_metrics():
    ev = TaskEvaluator(CURVE / "evaluator.py", EvaluatorConfig(timeout=20, cascade_thresholds=[0.05]))
    assert ev.stages == ("evaluate_stage1", "evaluate")
    out = ev.evaluate((CURVE / "initial_program.py").read_text())
    assert out.status == "ok" and out.stages_run == 2
    assert set(out.metrics) == {"combined_score", "mse"}
    assert out.metrics["combined_score"] == pytest.approx(1 / (1 + out.metrics["mse"]))


def test_cascade_stops_below_the_threshold():
    ev = TaskEvaluator(CURVE / "evaluator.py", EvaluatorConfig(timeout=20, cascade_thresholds=[0.99]))
    out = ev.evaluate((CURVE / "initial_program.py").read_text())
    assert out.status == "ok" and out.stages_run == 1 and "mse" not in out.metrics
    assert "below threshold 0.99" in out.artifacts["cascade"]
    single = TaskEvaluator(CURVE / "evaluator.py", EvaluatorConfig(cascade_evaluation=False))
    assert single.stages == ("evaluate",)


def test_openevolve_evaluation_result_objects_and_artifacts_are_accepted(tmp_path):
    task = make_task(
        tmp_path,
        """
        from openevolve.evaluation_result import EvaluationResult
        def evaluate(program_path):
            return EvaluationResult(metrics={"combined_score": 0.5}, artifacts={"note": "hello"})
    """,
    )
    out = TaskEvaluator(task / "evaluator.py", EvaluatorConfig(timeout=10)).evaluate(candidate("return 1\n"))
    assert out.status == "ok" and out.metrics == {"combined_score": 0.5} and out.artifacts["note"] == "hello"


@pytest.mark.parametrize(
    "body, reason",
    [
        ("return {'score': float('nan')}\n", "metric 'score' is not finite"),
        ("return {'score': 'high'}\n", "metric 'score' is not a number"),
        ("return [1, 2]\n", "returned list, expected a dict"),
        ("return {}\n", "metrics dict is empty"),
        ("raise ValueError('bad input')\n", "evaluate raised ValueError: bad input"),
        ("sys.exit(3)\n", "evaluate raised SystemExit"),
        ("os._exit(3)\n", "exit status 3"),
    ],
)
def test_crashes_and_invalid_metrics_fail_with_the_reason(tmp_path, body, reason):
    out = evaluate(tmp_path, body)
    assert out.status == "failed"
    assert reason in out.failure


def test_printing_a_fake_result_marker_does_not_forge_metrics(tmp_path):
    out = evaluate(
        tmp_path, 'print(\'__EVOLVE_RESULT__ {"metrics": {"combined_score": 99}}\')\nos._exit(0)\n'
    )
    assert out.status == "failed" and "no result reported" in out.failure


def test_validate_metrics_names_the_offender():
    assert validate_metrics({"a": 1, "b": 2.5}) == {"a": 1.0, "b": 2.5}
    with pytest.raises(ValueError, match="'flag' is not a number"):
        validate_metrics({"flag": True})


def test_task_evaluator_without_evaluate_is_rejected(tmp_path):
    task = make_task(tmp_path, "def score(path):\n    return {}\n")
    with pytest.raises(TaskError, match="defines no evaluate"):
        TaskEvaluator(task / "evaluator.py", EvaluatorConfig())


# --- hostile candidates ------------------------------------------------------------------


@pytest.mark.parametrize("_", [pytest.param(None, marks=needs_bwrap)])
def test_endless_loop_is_killed_at_the_timeout(tmp_path, _):
    out = evaluate(tmp_path, "while True:\n    pass\n", timeout=1.5)
    assert out.status == "failed" and "timeout after 1.5 s" in out.failure


@pytest.mark.parametrize("_", [pytest.param(None, marks=needs_bwrap)])
def test_memory_blowup_is_contained(tmp_path, _):
    out = evaluate(
        tmp_path, "blocks = []\nwhile True:\n    blocks.append(bytearray(50_000_000))\n", memory_mb=256
    )
    assert out.status == "failed"
    assert "MemoryError" in out.failure or "memory limit" in out.failure


@pytest.mark.parametrize("_", [pytest.param(None, marks=needs_bwrap)])
def test_fork_bomb_is_contained(tmp_path, _):
    out = evaluate(tmp_path, "while True:\n    os.fork()\n", timeout=5, max_processes=16)
    assert out.status == "failed"
    assert "BlockingIOError" in out.failure or "timeout" in out.failure


@pytest.mark.parametrize("_", [pytest.param(None, marks=needs_bwrap)])
def test_network_is_unreachable(tmp_path, _):
    out = evaluate(
        tmp_path, "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)\nreturn {'x': 1}\n"
    )
    assert out.status == "failed"
    assert "OSError" in out.failure or "unreachable" in out.failure


@pytest.mark.parametrize("_", [pytest.param(None, marks=needs_bwrap)])
def test_writes_outside_the_scratch_directory_fail_and_leave_no_file(tmp_path, _):
    target = tmp_path / "escaped.txt"
    os.chmod(tmp_path, 0o777)
    body = f"open({str(target)!r}, 'w').write('x')\nreturn {{'x': 1}}\n"
    out = evaluate(tmp_path, body)
    assert out.status == "failed" and "Error" in out.failure
    assert not target.exists()
    out = evaluate(tmp_path, "open('/usr/evil.txt', 'w').write('x')\nreturn {'x': 1}\n")
    assert out.status == "failed" and ("Read-only file system" in out.failure or "Permission" in out.failure)
    assert not Path("/usr/evil.txt").exists()
    # the scratch directory itself is writable
    assert evaluate(tmp_path, "open('ok.txt', 'w').write('x')\nreturn {'x': 1}\n").status == "ok"
