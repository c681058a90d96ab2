"""Held-out scoring in the report, task settings handed to the evaluator, and run-directory lookup."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from societas.evolve.config import ConfigError, load_config, parse_config
from societas.evolve.controller import Controller
from societas.evolve.evaluator import TaskError, TaskEvaluator
from societas.evolve.executors import ProcessExecutor
from societas.evolve.held_out import HELD_OUT_FILE, held_out_baselines, supports_held_out
from societas.evolve.report import resolve_run_dir, write_report
from societas.evolve.task import load_task

CURVE_FIT = Path(__file__).parent / "tasks" / "curve_fit"

HELD_OUT_CODE = '''

import json as _json
import os as _os


def evaluate_held_out(program_path):
    """Far outside the training range; the number of points comes from the run's task settings."""
    with open(_os.path.join(_os.path.dirname(program_path), "task_settings.json")) as handle:
        points = _json.load(handle)["held_out_points"]
    xs = [2.0 + i / points for i in range(points)]
    mse = _mse(program_path, xs)
    return {"combined_score": 1.0 / (1.0 + mse), "far_mse": mse, "points": float(points)}


def held_out_baselines():
    return {
        "exact": "def predict(xs):\\n    return [1.5 * x * x - 0.7 * x + 0.3 for x in xs]\\n",
        "zero": "def predict(xs):\\n    return [0.0 for x in xs]\\n",
        "broken": "def predict(xs):\\n    raise RuntimeError('no model here')\\n",
    }
'''


@pytest.fixture
def task_dir(tmp_path):
    directory = tmp_path / "curve_fit_held_out"
    shutil.copytree(CURVE_FIT, directory)
    with (directory / "evaluator.py").open("a") as handle:
        handle.write(HELD_OUT_CODE)
    return directory


def _run(task_dir, out, iterations=12):
    task = load_task(task_dir)
    cfg = load_config(task.config_path)
    cfg.max_iterations = iterations
    cfg.evaluator.task_settings = {"held_out_points": 7}
    cfg.held_out.baselines = ["exact", "broken"]
    controller = Controller(task, cfg, out, executor=ProcessExecutor(2))
    try:
        return controller.run()
    finally:
        controller.close()


def test_report_scores_seed_best_and_baselines_on_the_held_out_set_and_caches(task_dir, tmp_path):
    assert supports_held_out(task_dir / "evaluator.py")
    assert set(held_out_baselines(task_dir / "evaluator.py")) == {"exact", "zero", "broken"}
    result = _run(task_dir, tmp_path / "runs" / "r1")
    assert result.best_score > result.seed_score

    seen = []
    figures = write_report(
        tmp_path / "runs", on_held_out=lambda entry, done, total: seen.append((entry.label, total))
    )
    assert figures["run_dir"] == str(tmp_path / "runs" / "r1")  # the --out directory stands for its run
    labels = [label for label, _ in seen]
    assert len(seen) == 4 and all(total == 4 for _, total in seen)
    assert "seed" in labels and "exact" in labels and "broken" in labels and "zero" not in labels
    best_label = next(label for label in labels if label.startswith("best evolved"))
    held = figures["held_out"]
    assert held["exact"] == 1.0  # the hidden curve itself
    assert held["broken"] is None
    # the returned program's held-out score, computed here from its code: 1 / (1 + mse) at x = 2 + i / 7
    namespace: dict = {}
    exec((tmp_path / "runs" / "r1" / "best_program.py").read_text(), namespace)
    xs = [2.0 + i / 7 for i in range(7)]
    mse = sum((p - (1.5 * x * x - 0.7 * x + 0.3)) ** 2 for p, x in zip(namespace["predict"](xs), xs)) / 7
    assert held[best_label] == pytest.approx(1.0 / (1.0 + mse), rel=1e-12)
    assert held["seed"] == pytest.approx(
        1.0 / (1.0 + sum((x * x - (1.5 * x * x - 0.7 * x + 0.3)) ** 2 for x in xs) / 7)
    )

    summary = (tmp_path / "runs" / "r1" / "summary.md").read_text()
    assert "## Held-out set" in summary and "## Training set" in summary
    assert '"held_out_points": 7' in summary
    assert "| exact (baseline) |" in summary and "| seed |" in summary and f"| {best_label} |" in summary
    assert "broken failed" in summary and "no model here" in json.dumps(
        json.loads((tmp_path / "runs" / "r1" / HELD_OUT_FILE).read_text())
    )
    assert "| program | far_mse | points | mean |" in summary
    # points came from task_settings.json in the sandbox
    cache = json.loads((tmp_path / "runs" / "r1" / HELD_OUT_FILE).read_text())
    assert all(r["metrics"].get("points") == 7.0 for r in cache["results"].values() if r["status"] == "ok")

    again = []
    figures2 = write_report(tmp_path / "runs" / "r1", on_held_out=lambda e, d, t: again.append(e.label))
    assert again == ["broken"]  # successes come from held_out.json; failures are retried
    assert figures2["held_out"] == held

    no_held_out = write_report(tmp_path / "runs" / "r1", held_out=False)
    assert "held_out" not in no_held_out
    assert "## Held-out set" not in (tmp_path / "runs" / "r1" / "summary.md").read_text()


def test_unknown_baseline_name_is_a_clear_error(task_dir, tmp_path):
    _run(task_dir, tmp_path / "r", iterations=2)
    config_path = tmp_path / "r" / "config.yaml"
    config_path.write_text(config_path.read_text().replace("- exact", "- exactt"))
    with pytest.raises(ValueError, match=r"exactt.*offers: \['broken', 'exact', 'zero'\]"):
        write_report(tmp_path / "r")


def test_baselines_of_an_evaluator_python_cannot_import_are_a_task_error(tmp_path):
    # Python has no module loader for a ".txt" file, though the file parses as Python.
    evaluator = tmp_path / "evaluator.txt"
    evaluator.write_text(HELD_OUT_CODE)
    with pytest.raises(TaskError, match="evaluator.txt: cannot be loaded as a Python module"):
        held_out_baselines(evaluator)


def test_resolve_run_dir_picks_the_newest_run_and_explains_a_miss(tmp_path):
    for name, created in (("old", 1.0), ("new", 2.0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "programs.db").write_bytes(b"")
        (tmp_path / name / "run.json").write_text(json.dumps({"created": created}))
    assert resolve_run_dir(tmp_path) == tmp_path / "new"
    assert resolve_run_dir(tmp_path / "old") == tmp_path / "old"
    with pytest.raises(FileNotFoundError, match="holds none"):
        resolve_run_dir(tmp_path / "old" / "nothing")


def test_task_settings_must_be_json_and_reach_the_job():
    with pytest.raises(ConfigError, match="evaluator.task_settings"):
        parse_config({"evaluator": {"task_settings": {"bad": float("nan")}}})
    cfg = parse_config({"evaluator": {"task_settings": {"iterations": 5}}})
    job = TaskEvaluator(CURVE_FIT / "evaluator.py", cfg.evaluator).job("x = 1\n")
    assert json.loads(job.task_settings) == {"iterations": 5}
    assert (
        TaskEvaluator(CURVE_FIT / "evaluator.py", parse_config({}).evaluator).job("x = 1\n").task_settings
        == ""
    )
