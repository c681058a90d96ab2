"""Successive halving on the evaluation cascade (``evaluator.halving_keep``, ASHA's rule)."""

from __future__ import annotations

import math
import os
import textwrap
from pathlib import Path

import pytest

from societas.agents.sandbox import bwrap_status
from societas.evolve.config import parse_config
from societas.evolve.controller import Controller
from societas.evolve.database import ProgramStore
from societas.evolve.executors import ProcessExecutor
from societas.evolve.report import cascade_stats
from societas.evolve.task import load_task

BWRAP = bwrap_status()
pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(not BWRAP.available, reason=f"bubblewrap unusable here: {BWRAP.reason}"),
]

# Stage 2 (the rung) is the value with a little of its square; stage 3 the value.
EVALUATOR = """
import importlib.util

def _value(path):
    spec = importlib.util.spec_from_file_location("candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return float(module.value())

def evaluate_stage1(path):
    return {"combined_score": _value(path)}

def evaluate_stage2(path):
    v = _value(path)
    return {"combined_score": v - 0.01 * v * v}

def evaluate_stage3(path):
    return {"combined_score": _value(path)}

def evaluate(path):
    return {"combined_score": _value(path)}
"""

PROGRAM = """
# EVOLVE-BLOCK-START
def value():
    return 1.5 * 2.0 - 0.75
# EVOLVE-BLOCK-END
"""


def make_task(tmp_path: Path) -> Path:
    task = tmp_path / "halving_task"
    task.mkdir()
    (task / "evaluator.py").write_text(textwrap.dedent(EVALUATOR))
    (task / "initial_program.py").write_text(textwrap.dedent(PROGRAM).lstrip())
    for path in (tmp_path, task, task / "evaluator.py", task / "initial_program.py"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return task


def config(iterations: int, keep: float | None):
    return parse_config(
        {
            "max_iterations": iterations,
            "random_seed": 3,
            "batch_size": 4,
            "database": {"num_islands": 1},
            "evaluator": {
                "timeout": 20,
                "memory_mb": 512,
                "cascade_thresholds": [],
                "parallel_evaluations": 2,
                "halving_keep": keep,
                "halving_min_scores": 4,
            },
            "mutation": {"weights": {"constant": 1.0}, "constant_sigma": 0.5, "max_constants": 2},
        }
    )


def run(tmp_path, name, iterations, keep=0.5):
    task = load_task(
        make_task(tmp_path) if not (tmp_path / "halving_task").exists() else tmp_path / "halving_task"
    )
    controller = Controller(task, config(iterations, keep), tmp_path / name, executor=ProcessExecutor(2))
    try:
        controller.run()
    finally:
        controller.close()
    store = ProgramStore(tmp_path / name / "programs.db")
    try:
        return sorted(store.programs(), key=lambda p: p.iteration)
    finally:
        store.close()


def test_only_candidates_among_the_best_half_at_the_rung_reach_the_last_stage(tmp_path):
    programs = run(tmp_path, "asha", 24)
    rung, last = "evaluate_stage2", "evaluate_stage3"
    stopped = promoted = 0
    for program in programs:
        if program.iteration <= 0:
            continue
        assert program.status == "ok", program.failure
        # The cut, recomputed here from the rung scores of the batches before this one.
        start = (program.iteration - 1) // 4 * 4 + 1
        before = sorted((p.stage_scores[rung] for p in programs if p.iteration < start), reverse=True)
        cut = before[math.ceil(0.5 * len(before)) - 1] if len(before) >= 4 else -math.inf
        if program.stage_scores[rung] >= cut:
            assert list(program.stage_scores) == ["evaluate_stage1", rung, last]
            assert "cascade" not in program.artifacts
            promoted += 1
        else:
            assert list(program.stage_scores) == ["evaluate_stage1", rung]
            assert program.artifacts["cascade"].startswith(f"stopped after {rung}")
            assert program.fitness == program.stage_scores[rung]
            stopped += 1
    assert stopped >= 4 and promoted >= 4
    stats = cascade_stats(programs)
    assert stats["stopped_after"] == {"evaluate_stage1": 0, rung: stopped}
    assert stats["completed"] == promoted + 1  # and the seed
    # The rung's score is a monotone function of the final score over this range, so the ranks agree.
    assert stats["rank_correlation"]["spearman"] == pytest.approx(1.0)
    assert stats["rank_correlation"]["pairs"] == promoted + 1


def test_without_halving_every_candidate_runs_every_stage_and_a_resume_keeps_the_cut(tmp_path):
    plain = run(tmp_path, "plain", 8, keep=None)
    assert all(len(p.stage_scores) == 3 for p in plain)
    straight = run(tmp_path, "straight", 16)
    run(tmp_path, "resumed", 8)
    resumed = run(tmp_path, "resumed", 16)
    assert [(p.id, p.stage_scores, p.fitness) for p in resumed] == [
        (p.id, p.stage_scores, p.fitness) for p in straight
    ]
