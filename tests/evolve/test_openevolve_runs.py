"""Runs of OpenEvolve-format tasks: --llm none, same-seed reproducibility, artifacts in prompts,
novelty rejection, adaptive operator choice and the cascade's ranking."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from societas.agents.llm import FunctionLLM
from societas.evolve.config import load_config, parse_config
from societas.evolve.controller import ADAPTIVE_META, Controller
from societas.evolve.database import Population, ProgramStore
from societas.evolve.evaluator import TaskEvaluator
from societas.evolve.mutation import LLMEnsemble
from societas.evolve.program import Program
from societas.evolve.report import write_report
from societas.evolve.task import load_task

REPO = Path(__file__).resolve().parents[2]
NOISY = Path(__file__).parent / "tasks" / "noisy_min"
CURVE = Path(__file__).parent / "tasks" / "curve_fit"
CHOICE = Path(__file__).parent / "tasks" / "pipeline_choice"


def cli(*args, timeout=300):
    proc = subprocess.run(
        [sys.executable, "-m", "societas.evolve", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def database(run_dir: Path) -> list[tuple]:
    with sqlite3.connect(run_dir / "programs.db") as db:
        rows = db.execute(
            "SELECT iteration, id, status, fitness, data FROM programs ORDER BY iteration"
        ).fetchall()
    out = []
    for iteration, pid, status, fitness, data in rows:
        record = json.loads(data)
        out.append((iteration, pid, status, fitness, record["metrics"], record["mutation"].get("kind")))
    return out


def test_an_openevolve_config_runs_with_llm_none_and_the_same_seed_gives_the_same_database(tmp_path):
    runs = []
    for name in ("first", "second"):
        proc = cli("run", NOISY, "--llm", "none", "--out", tmp_path / name, "--no-held-out", "--json")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        runs.append((result, proc.stderr))
    (first, stderr), (second, _) = runs
    # said once, with the operators it uses
    notes = [line for line in stderr.splitlines() if "--llm none" in line]
    assert len(notes) == 1 and "LLM-free operators only" in notes[0] and "constant" in notes[0]
    # the config's keys without effect were named, and nothing was refused
    assert "checkpoint_interval has no effect here" in stderr
    assert first["best_score"] > first["seed_score"]  # the search improves on the seed without an LLM
    a, b = database(Path(first["run_dir"])), database(Path(second["run_dir"]))
    assert len(a) == 17 and a == b  # seeded evaluations: the same programs, metrics and ids
    # the string metric became an artifact, the numbers stayed metrics
    seed = ProgramStore(Path(first["run_dir"]) / "programs.db").get(a[0][1])
    assert seed is not None and set(seed.metrics) == {"combined_score", "value"}
    assert seed.artifacts["status"] == "searched" and "minimum is near" in seed.artifacts["feedback"]
    summary = (Path(first["run_dir"]) / "summary.md").read_text()
    assert "## Artifacts of the returned program" in summary and "`feedback`: x = " in summary
    # a different seed gives a different seed score (the evaluation's random numbers changed)
    other = cli(
        "run", NOISY, "--llm", "none", "--seed", 12, "--iterations", 0, "--out", tmp_path / "o", "--json"
    )
    assert json.loads(other.stdout.strip().splitlines()[-1])["seed_score"] != first["seed_score"]


def test_a_categorical_task_improves_without_an_llm_by_moving_strings_among_named_options(tmp_path):
    """The seed chooses four wrong stages; the options are listed only in its comments."""
    proc = cli("run", CHOICE, "--llm", "none", "--out", tmp_path, "--no-held-out", "--json")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["seed_score"] == 0.0 and result["best_score"] >= 0.5
    with sqlite3.connect(Path(result["run_dir"]) / "programs.db") as db:
        details = [
            json.loads(data)["mutation"].get("detail", "")
            for (data,) in db.execute("SELECT data FROM programs")
        ]
    options = [
        {"csv_reader", "json_reader", "xml_reader", "parquet_reader", "sql_reader"},
        {"normalize", "standardize", "minmax", "robust", "none"},
        {"lbfgs", "adam", "sgd", "newton", "bisection"},
        {"json", "xml", "csv", "yaml", "protobuf"},
    ]
    moves = [m for d in details for m in re.findall(r'"(\w+)" -> "(\w+)"', d)]
    assert moves and all(any({a, b} <= group for group in options) for a, b in moves)
    # operator, function and crossover find nothing to change here: their children were made by another
    summary = (Path(result["run_dir"]) / "summary.md").read_text()
    assert re.search(
        r"found nothing to change in their parent, made by another .*: (crossover|function|operator) \d+",
        summary,
    )


def prompt_recorder(prompts: list[str], answer):
    def reply(messages):
        prompts.append(messages[-1]["content"])
        return answer(messages[-1]["content"])

    return reply


def test_artifacts_reach_the_next_prompt_and_duplicates_are_not_evaluated(tmp_path):
    prompts: list[str] = []

    def same_program(prompt: str) -> str:
        # The parent again with a comment and different spacing: an exact duplicate once normalised.
        return (
            "<<<<<<< SEARCH\n    best_x, best_y = 0.0, f(0.0)\n=======\n"
            "    best_x, best_y = 0.0,  f(0.0)   # start at zero\n>>>>>>> REPLACE\n"
        )

    task = load_task(NOISY)
    config = load_config(task.config_path)
    config.max_iterations = 8
    config.mutation.weights = {"llm": 1.0}
    llm = FunctionLLM(prompt_recorder(prompts, same_program), name="scripted")
    ctl = Controller(task, config, tmp_path / "run", llms=LLMEnsemble([(llm, 1.0)]))
    try:
        result = ctl.run()
    finally:
        ctl.close()
    assert prompts and all("the minimum is near x = 1.77" in p for p in prompts)
    assert all("### feedback" in p for p in prompts)
    programs = ProgramStore(tmp_path / "run" / "programs.db").programs()
    children = [p for p in programs if p.iteration > 0]
    assert len(children) == 8
    assert all(
        p.status == "mutation_failed" and p.artifacts["novelty"].startswith("exact duplicate of")
        for p in children
    )
    assert all(p.eval_seconds == 0 and not p.metrics for p in children)  # never evaluated
    assert result.evaluated == 1  # the seed alone
    figures = write_report(tmp_path / "run", held_out=False)
    summary = (tmp_path / "run" / "summary.md").read_text()
    assert (
        "8 children were not evaluated because the database already held them: 8 exact duplicates" in summary
    )
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["novelty_rejected"] == 8
    assert figures["best_id"] == programs[0].id


def test_near_duplicates_are_rejected_for_llm_children_but_not_for_constant_tweaks(tmp_path):
    task = load_task(NOISY)
    config = load_config(task.config_path)
    config.max_iterations = 12
    config.mutation.weights = {"constant": 1.0}
    config.novelty.similarity_threshold = 0.5  # everything is a near duplicate of the seed
    ctl = Controller(task, config, tmp_path / "const")
    try:
        ctl.run()
    finally:
        ctl.close()
    programs = ProgramStore(tmp_path / "const" / "programs.db").programs()
    assert not any("novelty" in p.artifacts for p in programs)  # constant children: exact duplicates only
    config.mutation.weights = {"operator": 1.0}
    config.novelty.exact_only = []
    ctl = Controller(task, config, tmp_path / "op")
    try:
        ctl.run()
    finally:
        ctl.close()
    programs = ProgramStore(tmp_path / "op" / "programs.db").programs()
    near = [
        p for p in programs if "novelty" in p.artifacts and p.artifacts["novelty"].startswith("similarity")
    ]
    assert near and all(re.match(r"similarity 0\.\d+ to \S+ >= 0\.5", p.artifacts["novelty"]) for p in near)


def test_the_adaptive_weights_follow_what_the_operators_produce(tmp_path):
    task = load_task(CURVE)
    config = load_config(task.config_path)
    config.max_iterations = 24
    config.batch_size = 4
    # 'function' cannot change this task's program (no function pair in it): it never improves.
    config.mutation.weights = {"constant": 0.5, "function": 0.5}
    ctl = Controller(task, config, tmp_path / "run")
    try:
        ctl.run()
    finally:
        ctl.close()
    store = ProgramStore(tmp_path / "run" / "programs.db")
    history = store.get_meta(ADAPTIVE_META)
    programs = store.programs()
    store.close()
    assert [h[0] for h in history] == [0, 4, 8, 12, 16, 20, 24]
    assert all(abs(sum(w.values()) - 1) < 1e-9 for _, w in history)
    assert history[0][1] == pytest.approx({"constant": 0.5, "function": 0.5})
    improved = sum(
        1
        for p in programs
        if p.mutation.get("kind") == "constant" and p.ok and p.fitness > programs[0].fitness
    )
    assert improved > 0
    assert history[-1][1]["constant"] > 0.8  # the operator that produces improvements takes the batches
    kinds = [p.mutation.get("kind") for p in programs if p.iteration > 12]
    assert kinds.count("constant") > kinds.count("function")
    write_report(tmp_path / "run", held_out=False)
    summary = (tmp_path / "run" / "summary.md").read_text()
    assert (
        "## Adaptive choice of operator and model" in summary
        and "![adaptive weights](plots/adaptive.png)" in summary
    )
    assert (tmp_path / "run" / "plots" / "adaptive.png").stat().st_size > 10_000
    # switched off: the configured weights plan every batch, and nothing is recorded
    config.adaptive.enabled = False
    ctl = Controller(task, config, tmp_path / "off")
    try:
        ctl.run()
    finally:
        ctl.close()
    store = ProgramStore(tmp_path / "off" / "programs.db")
    assert store.get_meta(ADAPTIVE_META) is None
    store.close()


def test_a_program_the_cascade_stopped_never_outranks_a_fully_evaluated_one():
    config = parse_config({"database": {"num_islands": 1}})
    population = Population(config.database)
    seed = Program("seed", "x = 0\n", 0, fitness=-9.0)
    partial = Program("partial", "x = 1\n", 1, fitness=0.4, stopped_at="evaluate_stage1")
    full = Program("full", "x = 2\n", 2, fitness=-8.0)
    partial_better = Program("partial2", "x = 3\n", 3, fitness=0.45, stopped_at="evaluate_stage1")
    for program in (seed, partial, full, partial_better):
        population.add(program)
    assert population.best() is full
    ranked = [p.id for p in population.ranked(population.islands[0])]
    assert ranked == ["full", "seed", "partial2", "partial"]  # partial ones among themselves by score


def test_stopped_programs_rank_among_themselves_until_one_runs_every_stage(tmp_path):
    task = load_task(CURVE)
    config = load_config(task.config_path)
    config.max_iterations = 8
    config.evaluator.cascade_thresholds = [0.999]  # above the seed's stage-1 score: all stop there
    config.mutation.weights = {"constant": 1.0}
    ctl = Controller(task, config, tmp_path / "run")
    try:
        result = ctl.run()
    finally:
        ctl.close()
    programs = ProgramStore(tmp_path / "run" / "programs.db").programs()
    stopped = [p for p in programs if p.ok and not p.complete]
    assert len(stopped) == len([p for p in programs if p.ok])  # the seed too: the same cascade as all
    assert all(p.stopped_at == "evaluate_stage1" and "mse" not in p.metrics for p in stopped)
    # With no fully evaluated program, the best is the best of the stopped ones, by their stage-1 score.
    assert result.best_score == max(p.fitness for p in stopped)
    write_report(tmp_path / "run", held_out=False)
    summary = (tmp_path / "run" / "summary.md").read_text()
    assert "of the cascade's first stages (neither ran them all)" in summary
    # A fully evaluated program outranks every stopped one, and the report then compares it with
    # the seed on the stage both ran.
    store = ProgramStore(tmp_path / "run" / "programs.db")
    seed = programs[0]
    full = Program(
        "full",
        seed.code + "\n",
        99,
        parent_id=seed.id,
        metrics={"combined_score": 0.1, "mse": 9.0},
        fitness=0.1,
        stage_scores={"evaluate_stage1": seed.fitness + 0.01, "evaluate": 0.1},
    )
    store.add(full)
    store.close()
    write_report(tmp_path / "run", held_out=False)
    summary = (tmp_path / "run" / "summary.md").read_text()
    assert "beats the seed on the score after `evaluate_stage1`, the last cascade stage both ran" in summary
    assert "only against programs stopped at the same stage" in summary


def test_artifact_storage_settings_are_honoured(tmp_path):
    task = load_task(NOISY)
    for name, settings in (("off", {"enable_artifacts": False}), ("small", {"max_artifact_storage": 30})):
        config = parse_config(
            {"max_iterations": 0, "evaluator": {"timeout": 30, "cascade_evaluation": False, **settings}}
        )
        ctl = Controller(task, config, tmp_path / name)
        try:
            ctl.run()
        finally:
            ctl.close()
        seed = ProgramStore(tmp_path / name / "programs.db").programs()[0]
        if name == "off":
            assert seed.artifacts == {}
        else:
            assert (
                sum(len(v) for v in seed.artifacts.values()) <= 30 and seed.artifacts["status"] == "searched"
            )


def test_the_circle_packing_example_scores_valid_packings_and_explains_invalid_ones():
    task = load_task(REPO / "examples" / "circle_packing")
    config = load_config(task.config_path)
    evaluator = TaskEvaluator(task.evaluator_path, config.evaluator)
    seed = evaluator.evaluate(task.initial_program)
    assert seed.status == "ok" and seed.metrics["validity"] == 1.0
    # By hand: the radii the seed's construction gives sum to 1.65544 (a centre circle, rings of 8 and 17).
    assert seed.metrics["sum_radii"] == pytest.approx(1.6554427288, abs=1e-9)
    assert seed.metrics["combined_score"] == pytest.approx(seed.metrics["sum_radii"] / 2.635)
    overlapping = task.initial_program.replace(
        "    return centers, largest_radii(centers)", "    return centers, largest_radii(centers) * 1.5"
    )
    assert overlapping != task.initial_program
    bad = evaluator.evaluate(overlapping)
    assert bad.status == "ok" and bad.metrics["combined_score"] == 0.0
    assert "overlap" in bad.artifacts["invalid"] or "outside the unit square" in bad.artifacts["invalid"]
