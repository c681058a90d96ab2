"""The evolution loop on the OpenEvolve-format curve-fitting task."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from societas.agents.llm import FunctionLLM
from societas.evolve.config import load_config
from societas.evolve.controller import Controller, RunError
from societas.evolve.database import ProgramStore
from societas.evolve.evaluator import TaskError, WarmPool
from societas.evolve.executors import ExecutorError, ProcessExecutor, RayExecutor
from societas.evolve.mutation import LLMEnsemble
from societas.evolve.program import Program
from societas.evolve.report import write_report
from societas.evolve.task import load_task

from .scripted_llm import answer
from .test_tables import run_without_llm

TASK = Path(__file__).parent / "tasks" / "curve_fit"


def signature(run_dir):
    store = ProgramStore(Path(run_dir) / "programs.db")
    try:
        return [
            (p.iteration, p.id, p.parent_id, p.island, p.status, p.metrics, p.mutation.get("kind"))
            for p in store.programs()
        ]
    finally:
        store.close()


def run(tmp_path, name, iterations=16, executor=None, llms=None, **overrides):
    task = load_task(TASK)
    cfg = load_config(task.config_path)
    cfg.max_iterations = iterations
    for key, value in overrides.items():
        setattr(cfg, key, value)
    ctl = Controller(task, cfg, tmp_path / name, llms=llms, executor=executor)
    try:
        return ctl.run()
    finally:
        ctl.close()


def test_openevolve_task_runs_unchanged_and_improves(tmp_path):
    result = run(tmp_path, "a", iterations=24)
    assert result.iterations == 24 and result.evaluated + result.mutation_failed == 25
    assert result.best_score > result.seed_score
    lines = (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 25
    assert (tmp_path / "a" / "best_program.py").read_text().count("EVOLVE-BLOCK-START") == 1


def test_same_seed_gives_the_same_run_whatever_the_workers_or_executor(tmp_path, monkeypatch):
    a = run(tmp_path, "w1", executor=ProcessExecutor(1))
    b = run(tmp_path, "w4", executor=ProcessExecutor(4))
    assert signature(tmp_path / "w1") == signature(tmp_path / "w4")
    assert a.best_score == b.best_score

    class Ref:
        def __init__(self, fn, job):
            self.fn, self.job = fn, job

    fake = types.ModuleType("ray")
    state = {"init": None}
    fake.is_initialized = lambda: state["init"] is not None
    fake.init = lambda **kw: state.update(init=kw, started=kw)
    fake.shutdown = lambda: state.update(init=None, shut=True)
    fake.remote = lambda **opts: lambda fn: types.SimpleNamespace(remote=lambda job: Ref(fn, job))
    # finish in reverse submission order, as a cluster might
    fake.wait = lambda pending, num_returns=1: ([pending[-1]], pending[:-1])
    fake.get = lambda ref: ref.fn(ref.job)
    monkeypatch.setitem(sys.modules, "ray", fake)
    run(tmp_path, "ray", executor=RayExecutor(workers=2))
    assert state["started"]["num_cpus"] == 2
    assert state.get("shut"), "a local Ray instance started by the executor is shut down on close"
    assert signature(tmp_path / "ray") == signature(tmp_path / "w1")
    other = run(tmp_path, "s2", random_seed=8)
    assert signature(tmp_path / "s2") != signature(tmp_path / "w1")
    assert other.seed_score == a.seed_score


def test_grouped_evaluation_gives_the_same_run_as_a_sandbox_each(tmp_path):
    task = load_task(TASK)
    cfg = load_config(task.config_path)
    cfg.max_iterations = 12
    cfg.batch_size = 6
    cfg.evaluator.group_size = 3
    single_cfg = load_config(task.config_path)
    single_cfg.max_iterations = 12
    single_cfg.batch_size = 6
    for name, config in (("grouped", cfg), ("ungrouped", single_cfg)):
        ctl = Controller(task, config, tmp_path / name, executor=ProcessExecutor(2))
        try:
            ctl.run()
        finally:
            ctl.close()
        assert isinstance(ctl.pool, WarmPool) == (name == "grouped")  # grouped: sandboxes that stay up
    grouped = signature(tmp_path / "grouped")
    assert grouped == signature(tmp_path / "ungrouped")
    assert len(grouped) == 13 and sum(1 for p in grouped if p[4] == "ok") > 6


def test_llm_children_join_the_warm_pool_and_the_run_is_the_same(tmp_path):
    # Half the children come from a (scripted) LLM in the side thread; on the warm pool they are
    # queued as soon as they are made, behind the other children of their batch.
    task = load_task(TASK)
    signatures = []
    for name, group in (("warm", 4), ("alone", 1)):
        cfg = load_config(task.config_path)
        cfg.max_iterations = 12
        cfg.batch_size = 6
        cfg.evaluator.group_size = group
        cfg.mutation.weights = {"llm": 0.5, "constant": 0.5}
        llm = FunctionLLM(answer, name="scripted")
        ctl = Controller(task, cfg, tmp_path / name, llms=LLMEnsemble([(llm, 1.0)]))
        try:
            ctl.run()
        finally:
            ctl.close()
        assert llm.calls >= 1
        signatures.append(signature(tmp_path / name))
    assert signatures[0] == signatures[1]
    kinds = {p[6] for p in signatures[0]}
    assert {"llm", "constant"} <= kinds


def test_a_time_budget_ends_the_run_early_and_a_resume_finishes_it(tmp_path):
    result = run(tmp_path, "budget", iterations=40, time_budget_minutes=1e-9)
    assert result.iterations == 0  # the budget was spent before the first batch could start
    store = ProgramStore(tmp_path / "budget" / "programs.db")
    try:
        assert store.get_meta("stopped_by_time_budget") == {"after_iteration": 0, "minutes": 1e-9}
    finally:
        store.close()
    write_report(tmp_path / "budget")
    summary = (tmp_path / "budget" / "summary.md").read_text()
    assert "- iterations: 0 of 40 (the search stopped at its time budget of 1e-09 minutes)" in summary
    ctl = Controller.resume(tmp_path / "budget", max_iterations=8)
    try:
        assert ctl.config.time_budget_minutes == 1e-9
        ctl.config.time_budget_minutes = None
        assert ctl.run().iterations == 8
    finally:
        ctl.close()


def test_real_ray_executor_gives_the_same_run(tmp_path):
    pytest.importorskip("ray")
    local = run(tmp_path, "local", iterations=8, executor=ProcessExecutor(1))
    remote = run(tmp_path, "ray", iterations=8, executor=RayExecutor(workers=2))
    assert signature(tmp_path / "ray") == signature(tmp_path / "local")
    assert remote.best_score == local.best_score


def test_ray_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ExecutorError, match=r"install the 'ray' extra"):
        RayExecutor(2)


def test_scripted_llm_diffs_improve_and_malformed_answers_are_recorded(tmp_path):
    llm = FunctionLLM(answer, name="scripted")
    cfg_llm = LLMEnsemble([(llm, 1.0)])
    task = load_task(TASK)
    cfg = load_config(task.config_path)
    cfg.max_iterations = 16
    cfg.mutation.weights = {"llm": 1.0}
    ctl = Controller(task, cfg, tmp_path / "llm", llms=cfg_llm)
    result = ctl.run()
    ctl.close()
    assert result.best_score > result.seed_score + 0.05
    assert llm.calls == 4 and llm.batch_sizes == [4, 4, 4, 4]  # one batched call per batch
    programs = ProgramStore(tmp_path / "llm" / "programs.db").programs()
    # Children the novelty filter rejected (duplicates, not evaluated) are mutation failures of their own.
    failed = [p for p in programs if p.status == "mutation_failed" and "novelty" not in p.artifacts]
    assert failed, "the script answers malformed text for some seeds"
    assert all(p.failure.startswith("malformed LLM answer") and p.artifacts["llm_response"] for p in failed)
    assert all(p.mutation["model"] == "scripted" for p in programs[1:])
    best = next(p for p in programs if p.id == result.best_id)
    assert best.mutation["detail"] == "diff" and best.generation >= 1


def test_resume_continues_without_reevaluating(tmp_path, monkeypatch):
    run(tmp_path, "full", iterations=12)
    partial = run(tmp_path, "part", iterations=6)
    assert partial.iterations == 6
    before = signature(tmp_path / "part")
    import societas.evolve.controller as controller_module

    evaluated = []
    real = controller_module.run_evaluation
    monkeypatch.setattr(controller_module, "run_evaluation", lambda job: evaluated.append(job) or real(job))
    ctl = Controller.resume(tmp_path / "part", max_iterations=12)
    ctl.run()
    ctl.close()
    after = signature(tmp_path / "part")
    assert after[: len(before)] == before
    assert after == signature(tmp_path / "full")
    assert len(evaluated) <= 6  # only the new iterations (minus failed mutations) were evaluated


def test_resume_refuses_a_changed_task_or_seed(tmp_path):
    run(tmp_path, "r", iterations=2)
    task = load_task(TASK)
    cfg = load_config(task.config_path)
    cfg.random_seed = 99
    with pytest.raises(RunError, match="started with seed 7"):
        Controller(task, cfg, tmp_path / "r")


def test_failing_seed_program_stops_the_run(tmp_path):
    task_dir = tmp_path / "broken"
    task_dir.mkdir()
    (task_dir / "initial_program.py").write_text(
        (TASK / "initial_program.py").read_text().replace("return a * x * x", "return undefined_name * x")
    )
    (task_dir / "evaluator.py").write_text((TASK / "evaluator.py").read_text())
    for path in (task_dir, *task_dir.iterdir()):
        path.chmod(0o755)
    ctl = Controller(load_task(task_dir), load_config(TASK / "config.yaml"), tmp_path / "run")
    with pytest.raises(RunError, match="seed program failed.*NameError"):
        ctl.run()
    ctl.close()


def test_bad_task_directories_are_named(tmp_path):
    with pytest.raises(TaskError, match="no initial_program.py"):
        load_task(tmp_path)
    (tmp_path / "initial_program.py").write_text("x = 1\n")
    (tmp_path / "evaluator.py").write_text("def evaluate(p):\n    return {}\n")
    with pytest.raises(TaskError, match="no EVOLVE-BLOCK"):
        load_task(tmp_path)


def test_progress_best_includes_the_seed(tmp_path):
    """The progress bar's "best" starts at the seed's fitness: a child worse than the seed
    never shows as the best so far (it showed 0.331 while the seed had 0.983)."""
    task = load_task(TASK)
    cfg = load_config(task.config_path)
    cfg.max_iterations = 4
    seen = []
    ctl = Controller(task, cfg, tmp_path / "p", on_progress=seen.append)
    try:
        result = ctl.run()
    finally:
        ctl.close()
    assert len(seen) == 4 and result.seed_score is not None
    assert all(s["best_score"] >= result.seed_score for s in seen)
    assert seen[-1]["best_score"] == result.best_score


def test_an_llm_server_that_cannot_answer_stops_the_run_before_it_starts(tmp_path):
    import socket

    from societas.agents.llm.openai_compat import OpenAICompatibleLLM

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    llm = OpenAICompatibleLLM(f"http://127.0.0.1:{port}/v1", "MODEL", max_retries=0)
    task = load_task(TASK)
    cfg = load_config(task.config_path)
    cfg.max_iterations = 4
    ctl = Controller(task, cfg, tmp_path / "down", llms=LLMEnsemble([(llm, 1.0)]))
    try:
        with pytest.raises(RunError, match="cannot reach the server at .*; nothing was run"):
            ctl.run()
    finally:
        ctl.close()
        llm.close()


def test_an_llm_that_keeps_failing_stops_the_run_keeping_what_was_committed(tmp_path):
    def broken(prompts, params):
        raise ConnectionError("server went away")

    task = load_task(TASK)
    cfg = load_config(task.config_path)
    cfg.max_iterations = 40
    cfg.mutation.weights = {"llm": 1.0}
    ctl = Controller(task, cfg, tmp_path / "flaky", llms=LLMEnsemble([(FunctionLLM(broken, name="b"), 1.0)]))
    try:
        with pytest.raises(
            RunError, match="failed 12 children in a row, the last with 'LLM error: ConnectionError"
        ):
            ctl.run()
    finally:
        ctl.close()
    programs = ProgramStore(tmp_path / "flaky" / "programs.db").programs()
    assert 12 <= len(programs) - 1 < 40  # stopped early, everything before the stop committed
    assert all(p.status == "mutation_failed" for p in programs[1:])


def _one_number_task(root: Path, body: str = "3") -> Path:
    """A task whose only literal is one small integer: the constant operator moves it by one, so most of
    its children are programs the database already holds."""
    root.mkdir()
    (root / "initial_program.py").write_text(
        f"# EVOLVE-BLOCK-START\ndef value():\n    return {body}\n# EVOLVE-BLOCK-END\n"
    )
    (root / "evaluator.py").write_text(
        "import importlib.util\n\n\n"
        "def evaluate(program_path):\n"
        "    spec = importlib.util.spec_from_file_location('program', program_path)\n"
        "    module = importlib.util.module_from_spec(spec)\n"
        "    spec.loader.exec_module(module)\n"
        "    return {'combined_score': -abs(module.value() - 20)}\n"
    )
    (root / "config.yaml").write_text(
        "max_iterations: 12\nrandom_seed: 3\n"
        "database:\n  num_islands: 1\n"
        "mutation:\n  weights: {constant: 1.0}\n  additive_probability: 1.0\n"
    )
    return root


def test_duplicates_of_llm_free_operators_are_drawn_again(tmp_path):
    """A child the novelty filter rejects is drawn again from its parent (up to ``novelty.redraws``
    times): the rejections it replaces are recorded with the child that was evaluated instead, the
    report counts them, and the run stays reproducible."""
    task = load_task(_one_number_task(tmp_path / "task"))

    def go(name, redraws):
        cfg = load_config(task.config_path)
        cfg.llm.models = []
        cfg.novelty.redraws = redraws
        ctl = Controller(task, cfg, tmp_path / name)
        try:
            result = ctl.run()
        finally:
            ctl.close()
        store = ProgramStore(tmp_path / name / "programs.db")
        try:
            return result, store.programs()
        finally:
            store.close()

    _, plain_programs = go("plain", 0)
    _, again_programs = go("again", 3)
    rejected = [p for p in plain_programs if "novelty" in p.artifacts]
    assert len(rejected) >= 3  # the setting this is about: without redraws, duplicates use up iterations
    assert not any("redrawn" in p.mutation for p in plain_programs)
    redrawn = [p for p in again_programs if "redrawn" in p.mutation]
    assert redrawn and all(r.startswith("exact") for p in redrawn for r in p.mutation["redrawn"])
    # A child is given up only after all its redraws were duplicates too; one redrawn into something
    # new is evaluated.
    for p in again_programs:
        if "novelty" in p.artifacts:
            assert len(p.mutation["redrawn"]) == 3
    assert any(p.status == "ok" for p in redrawn)
    # No program is evaluated twice, not even two children of one batch (which the filter learns only
    # after their evaluation).
    for programs in (plain_programs, again_programs):
        evaluated = [p.code for p in programs if p.status != "mutation_failed"]
        assert len(set(evaluated)) == len(evaluated)
    assert any("queued before it" in p.artifacts.get("novelty", "") for p in plain_programs)
    write_report(tmp_path / "again", held_out=False)
    summary = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert summary["novelty_redrawn"] == sum(len(p.mutation["redrawn"]) for p in redrawn)
    assert "were drawn again from the same parent" in (tmp_path / "again" / "summary.md").read_text()
    # Same seed, same run.
    _, twice = go("twice", 3)
    assert [(p.id, p.code, p.mutation.get("redrawn")) for p in twice] == [
        (p.id, p.code, p.mutation.get("redrawn")) for p in again_programs
    ]


def test_an_operator_that_keeps_making_duplicates_hands_over_on_its_second_redraw(tmp_path):
    """``3 * 1`` has two small integers: the constant operator soon remakes programs the database holds.
    A child rejected twice is then made by the other configured operator (which the plan draws for one
    child in a hundred), and is evaluated instead of using up the iteration."""
    root = _one_number_task(tmp_path / "task", "3 * 1")
    (root / "config.yaml").write_text(
        "max_iterations: 24\nrandom_seed: 3\ndatabase:\n  num_islands: 1\n"
        "adaptive:\n  enabled: false\n"  # the plan keeps to the configured weights
        "mutation:\n  weights: {constant: 1.0, operator: 0.01}\n  additive_probability: 1.0\n"
    )
    programs, _, _ = run_without_llm(root, tmp_path / "run")
    handed = [p for p in programs if p.mutation.get("planned") == "constant"]
    assert handed and all(p.mutation["kind"] == "operator" for p in handed)
    assert all(len(p.mutation["redrawn"]) >= 2 for p in handed)
    assert any(p.status == "ok" for p in handed)
    # The first redraw stays with the constant operator.
    assert any(p.mutation["kind"] == "constant" and len(p.mutation.get("redrawn", [])) == 1 for p in programs)


def test_literals_whose_changes_break_the_program_lose_credit(tmp_path):
    """``n`` must stay 3 (any other value is an error, scored 0 as OpenEvolve's evaluators do); ``v`` is
    free to move toward 20. The run credits each literal with what its changes gave: ``n``'s changes are
    never kept."""
    root = _one_number_task(tmp_path / "task")
    (root / "initial_program.py").write_text(
        "# EVOLVE-BLOCK-START\ndef value():\n    n = 3\n    v = 5\n    return n, v\n# EVOLVE-BLOCK-END\n"
    )
    # OpenEvolve's way with an invalid program: score 0 and an ``error`` entry, not an exception
    evaluator = (root / "evaluator.py").read_text()
    (root / "evaluator.py").write_text(
        evaluator.replace(
            "    return {'combined_score': -abs(module.value() - 20)}\n",
            "    n, v = module.value()\n"
            "    if n != 3:\n"
            "        return {'combined_score': 0.0, 'error': f'n must be 3, not {n}'}\n"
            "    return {'combined_score': 1 / (1 + abs(v - 20))}\n",
        )
    )
    (root / "config.yaml").write_text(
        "max_iterations: 40\nrandom_seed: 1\ndatabase:\n  num_islands: 1\n"
        "mutation:\n  weights: {constant: 1.0}\n  additive_probability: 1.0\n  max_constants: 1\n"
    )
    task = load_task(root)
    ctl = Controller(task, load_config(task.config_path), tmp_path / "run")
    try:
        ctl.run()
        credit = dict(ctl.mutator.site_credit)
        programs = ctl.store.programs()
    finally:
        ctl.close()
    by_id = {p.id: p for p in programs}
    touched: dict[str, list[Program]] = {"n": [], "v": []}
    for p in programs:
        if p.mutation.get("sites") and p.status != "mutation_failed":
            touched["n" if "line 3" in p.mutation["detail"] else "v"].append(p)
    [n_key], [v_key] = ({k for p in touched[side] for k in p.mutation["sites"]} for side in ("n", "v"))
    assert credit[n_key][0] == len(touched["n"]) and credit[v_key][0] == len(touched["v"])
    # An LLM-free child never has a parent the evaluator reported an error for (it could not repair
    # it), so every change of n breaks a valid program and none is kept.
    assert all("error" not in by_id[p.parent_id].artifacts for p in programs if p.parent_id)
    assert sum("error" in p.artifacts for p in programs) >= 3
    assert credit[n_key][1] == 0 and credit[v_key][1] > 0
    # Every change of n broke a working program: after the fourth (and the others planned in batches
    # before its result was in), n is left alone for the rest of the run.
    changed = sorted(p.iteration for p in touched["n"])
    assert credit[n_key] == [len(changed), 0, len(changed), len(changed)] and len(changed) >= 4
    assert changed[-1] < changed[3] + 8 < max(p.iteration for p in programs) - 20
