"""The CMA-ES operator: children differ only in their numbers, the search converges, a resume redraws the same."""

from __future__ import annotations

import ast
import re

import pytest

from societas.evolve.config import parse_config
from societas.evolve.controller import Controller
from societas.evolve.executors import ProcessExecutor
from societas.evolve.mutation import (
    MutationError,
    MutationRequest,
    Mutator,
    cmaes_children,
    cmaes_rank_key,
    numeric_sites,
)
from societas.evolve.program import Program, frozen_parts_equal
from societas.evolve.task import load_task

CODE = """import math


# EVOLVE-BLOCK-START
def f(x):
    return 1.0 * x + 2.5 * x * x - 0.5 + 4.0 * math.sin(x)
# EVOLVE-BLOCK-END
"""
TARGET = [3.0, -1.0, 0.25, 0.5]
CFG = parse_config({"mutation": {"weights": {"cmaes": 1.0}, "perturb_ints": False}})


def _literals(code: str) -> list[float]:
    """The four numbers of f's return line, signs included (a negative literal is written ``(-x)``)."""
    line = next(line for line in code.splitlines() if line.strip().startswith("return"))
    return [float(m.strip("()")) for m in re.findall(r"\(-[\d.e-]+\)|\d+\.\d*(?:e-?\d+)?", line)]


def _structure(code: str) -> str:
    return re.sub(r"\(?-?\d+\.\d*(e-?\d+)?\)?", "#", code)


def _origin() -> Program:
    return Program(id="origin-1", code=CODE, iteration=0, fitness=-1.0, metrics={"combined_score": -1.0})


def _score(code: str) -> float:
    return -sum((x - t) ** 2 for x, t in zip(_literals(code), TARGET))


def test_children_change_only_the_numbers_and_are_reproducible():
    children = cmaes_children(_origin(), [], 5, CFG)
    assert len(children) == 5
    for code, u in children:
        ast.parse(code)
        assert frozen_parts_equal(CODE, code) and code != CODE
        assert _structure(code) == _structure(CODE)
        assert len(u) == 4 and len(numeric_sites(code, CFG)) == 4
    assert cmaes_children(_origin(), [], 5, CFG) == children  # a resumed run draws the same
    with pytest.raises(MutationError, match="at least two numeric literals"):
        cmaes_children(
            Program(id="o", code="# EVOLVE-BLOCK-START\nx = 1.0\n# EVOLVE-BLOCK-END\n", iteration=0),
            [],
            1,
            CFG,
        )


def test_told_generations_move_the_search_to_the_optimum():
    """A quadratic with its optimum away from the origin's literals: CMA-ES must close most of the gap."""
    origin = _origin()
    history: list[Program] = []
    start = _score(CODE)
    iteration = 1
    for _ in range(30):
        for code, u in cmaes_children(origin, history, 4, CFG):
            history.append(
                Program(
                    id=f"c{iteration}",
                    code=code,
                    iteration=iteration,
                    fitness=_score(code),
                    mutation={"kind": "cmaes", "cmaes": {"origin": origin.id, "u": u}},
                )
            )
            iteration += 1
    best = max(p.fitness for p in history)
    assert best > start / 50  # 15 generations close the gap (28.6) at least 50-fold
    # Without the tells (every batch drawn from the first generation's distribution) it does not get there.
    blind = [_score(code) for _ in range(30) for code, _ in cmaes_children(origin, [], 4, CFG)]
    assert max(blind) < best


def test_failed_and_cascade_stopped_children_rank_last():
    origin = _origin()
    (code, u), *_ = cmaes_children(origin, [], 1, CFG)
    failed = Program(
        id="x", code=code, iteration=1, status="failed", mutation={"cmaes": {"origin": "o", "u": u}}
    )
    stopped = Program(
        id="y",
        code=code,
        iteration=2,
        fitness=5.0,
        artifacts={"cascade": "stopped"},
        mutation={"cmaes": {"origin": "o", "u": u}},
    )
    good = Program(id="z", code=code, iteration=3, fitness=-9.0, mutation={"cmaes": {"origin": "o", "u": u}})
    assert sorted([failed, stopped, good], key=cmaes_rank_key) == [good, stopped, failed]


def test_the_mutator_batches_one_origins_requests():
    mutator = Mutator(CFG, None)
    origin = _origin()
    requests = [MutationRequest(i, "cmaes", origin, [], seed=i) for i in (1, 2, 3)]
    results = mutator.make(requests)
    assert [r.failure for r in results] == [None, None, None]
    assert len({r.code for r in results}) == 3
    assert all(r.info["cmaes"]["origin"] == origin.id for r in results)


@pytest.mark.slow
def test_a_cmaes_run_improves_and_resumes_to_the_same_programs(tmp_path):
    task = load_task(__import__("pathlib").Path(__file__).parent / "tasks" / "curve_fit")
    cfg = parse_config(
        {"max_iterations": 16, "random_seed": 3, "batch_size": 4, "mutation": {"weights": {"cmaes": 1.0}}}
    )
    run = Controller(task, cfg, tmp_path / "a", executor=ProcessExecutor(2))
    try:
        result = run.run()
        programs = run.store.programs()
    finally:
        run.close()
    assert result.best_score > result.seed_score
    assert all(p.mutation.get("kind") == "cmaes" for p in programs if p.iteration > 0)
    # The same run again, killed after 9 iterations (two batches and one program of the third) and resumed.
    partial = Controller(task, cfg, tmp_path / "b", executor=ProcessExecutor(2))
    try:
        partial.config.max_iterations = 8
        partial.run()
    finally:
        partial.close()
    resumed = Controller.resume(tmp_path / "b", max_iterations=16, executor=ProcessExecutor(2))
    try:
        resumed.run()
        again = resumed.store.programs()
    finally:
        resumed.close()
    assert [p.code for p in again] == [p.code for p in programs]
