"""Sandboxed cascade evaluation, and containment of hostile candidates."""

from __future__ import annotations

import os
import random as host_random
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pytest

from societas.agents.sandbox import bwrap_status
from societas.evolve.config import EvaluatorConfig
from societas.evolve.evaluator import (
    TaskError,
    TaskEvaluator,
    evaluation_seed,
    run_evaluation,
    split_metrics,
    validate_metrics,
)

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
        ("return {'score': float('nan')}\n", "no finite number among the metrics (score=NaN)"),
        ("return {'score': 'high'}\n", "no finite number among the metrics (score=high)"),
        ("return [1, 2]\n", "returned list, expected a dict"),
        ("return {}\n", "no finite number among the metrics (an empty dict)"),
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


def test_split_metrics_reads_results_the_way_openevolve_does():
    metrics, artifacts = split_metrics(
        {
            "combined_score": 0.25,
            "n": 3,
            "error": "timeout after 30 s",
            "ok": True,
            "bad": float("inf"),
            "trace": [1, 2],
            "artifacts": {"stderr": "warn", "data": {"x": 1}},
        }
    )
    assert metrics == {"combined_score": 0.25, "n": 3.0}
    assert artifacts == {
        "error": "timeout after 30 s",
        "ok": "true",
        "bad": "Infinity",
        "trace": "[1, 2]",
        "stderr": "warn",
        "data": '{"x": 1}',
    }
    with pytest.raises(ValueError, match="no finite number among the metrics \\(error=boom\\)"):
        split_metrics({"error": "boom"})
    with pytest.raises(ValueError, match="combined_score is not a finite number: NaN"):
        split_metrics({"combined_score": float("nan"), "other": 1.0})
    with pytest.raises(ValueError, match="metrics must be a dict, got list"):
        split_metrics([1])


@pytest.mark.parametrize(
    "returned",
    [
        # OpenEvolve's EvaluationResult shape as a plain dict (k_module_problem's error results)
        '{"metrics": {"combined_score": 0.5, "accuracy": 0.5}, "artifacts": {"status": "ERROR", "why": 3}}',
        # metrics and a string at the top level, artifacts as a nested mapping
        '{"combined_score": 0.5, "accuracy": 0.5, "status": "ERROR", "artifacts": {"why": 3}}',
        # an object with .metrics and .artifacts
        "EvaluationResult(metrics={'combined_score': 0.5, 'accuracy': 0.5}, "
        "artifacts={'status': 'ERROR', 'why': 3})",
        # bytes artifacts are decoded
        "EvaluationResult(metrics={'combined_score': 0.5, 'accuracy': 0.5}, "
        "artifacts={'status': b'ERROR', 'why': '3'})",
    ],
)
def test_every_openevolve_result_shape_gives_the_same_metrics_and_artifacts(tmp_path, returned):
    task = make_task(
        tmp_path,
        f"""
        from openevolve.evaluation_result import EvaluationResult
        def evaluate(program_path):
            return {returned}
    """,
    )
    out = TaskEvaluator(task / "evaluator.py", EvaluatorConfig(timeout=10)).evaluate(candidate("return 1\n"))
    assert out.status == "ok", out.failure
    assert out.metrics == {"combined_score": 0.5, "accuracy": 0.5}
    assert out.artifacts["status"] == "ERROR" and out.artifacts["why"] == "3"


def test_an_evaluator_artifact_named_like_ours_is_renamed(tmp_path):
    task = make_task(
        tmp_path,
        """
        def evaluate(program_path):
            return {"score": 1.0, "failure": "not really", "cascade": "mine"}
    """,
    )
    out = TaskEvaluator(task / "evaluator.py", EvaluatorConfig(timeout=10)).evaluate(candidate("return 1\n"))
    assert out.status == "ok" and out.failure is None
    assert out.artifacts["evaluator_failure"] == "not really" and out.artifacts["evaluator_cascade"] == "mine"


def test_random_and_numpy_start_from_the_jobs_seed_in_every_stage(tmp_path):
    task = make_task(
        tmp_path,
        """
        import random
        import numpy as np
        def evaluate_stage1(program_path):
            return {"combined_score": 1.0, "r1": random.random(), "n1": float(np.random.rand())}
        def evaluate(program_path):
            return {"combined_score": 1.0, "r2": random.random(), "n2": float(np.random.rand())}
    """,
    )
    ev = TaskEvaluator(task / "evaluator.py", EvaluatorConfig(timeout=10, cascade_thresholds=[0.0]))
    code = candidate("return 1\n")
    first, again = ev.evaluate(code), ev.evaluate(code)
    other = ev.evaluate(candidate("return 2\n"))
    assert first.status == "ok" and first.metrics == again.metrics
    # The same seed in both stages (reseeded, not continued), and what random.seed(seed) gives.
    assert first.metrics["r1"] == first.metrics["r2"] and first.metrics["n1"] == first.metrics["n2"]
    seed = evaluation_seed(0, code)
    assert first.metrics["r1"] == host_random.Random(seed).random()
    assert first.metrics["n1"] == np.random.RandomState(seed % 2**32).rand()
    assert other.metrics["r1"] != first.metrics["r1"]
    explicit = run_evaluation(ev.job(code, seed=1234))
    assert explicit.metrics["r1"] == host_random.Random(1234).random()


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
