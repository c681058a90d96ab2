"""AgentConductor loop and sandboxed HumanEval grading."""

from __future__ import annotations

import pytest

from societas.agents import FunctionLLM
from societas.agents.sandbox import Sandbox
from societas.topology.coding import OUTCOMES, assemble_program, grade_code, humaneval_split, humaneval_tasks
from societas.topology.patterns import Conductor

GOOD_YAML = (
    "```yaml\nlayers:\n  - - {name: plan, role: planning, ref: []}\n"
    "  - - {name: code, role: coding, ref: [plan]}\n  - - {name: test, role: testing, ref: [code]}\n```"
)


@pytest.fixture(scope="module")
def task0():
    return humaneval_tasks()[0]


def test_humaneval_ships_164_problems_and_a_fixed_split():
    tasks = humaneval_tasks()
    assert len(tasks) == 164 and tasks[0].task_id == "HumanEval/0"
    assert {t.difficulty for t in tasks} == {"easy", "medium", "hard"}
    train, held = humaneval_split(120, seed=0)
    assert len(train) == 120 and len(held) == 44
    assert not {t.task_id for t in train} & {t.task_id for t in held}
    assert [t.task_id for t in humaneval_split(120, seed=0)[1]] == [t.task_id for t in held]


def test_every_canonical_solution_of_a_sample_passes_in_the_sandbox():
    tasks = humaneval_tasks()
    for t in tasks[::16]:
        r = grade_code(t, t.canonical_solution)
        assert r.outcome == "passed", (t.task_id, r.feedback)


@pytest.mark.parametrize(
    "body,outcome",
    [
        ("    return False", "wrong_answer"),
        ("    return 1/0", "runtime_error"),
        ("    while True:\n        pass", "timeout"),
        ("    x = bytearray(2**34)\n    return x", "memory_limit"),
    ],
)
def test_grades_distinguish_outcomes(task0, body, outcome):
    answer = f"```python\ndef has_close_elements(numbers, threshold):\n{body}\n```"
    r = grade_code(task0, answer, sandbox=Sandbox(timeout_s=2.0, memory_mb=256))
    assert r.outcome == outcome, r.feedback
    assert outcome in OUTCOMES and not r.passed


def test_compile_error_and_no_code(task0):
    assert (
        grade_code(task0, "```python\ndef has_close_elements(a, b)\n    return 1\n```").outcome
        == "compile_error"
    )
    assert grade_code(task0, "I cannot solve this.").outcome == "no_code"


def test_body_only_answers_are_completed_with_the_prompt(task0):
    prog = assemble_program(task0, "```python\n" + task0.canonical_solution + "```")
    assert prog.startswith("from typing import List") and "def has_close_elements" in prog
    assert grade_code(task0, "```python\n" + task0.canonical_solution + "```").passed


def test_conductor_revises_after_parse_error_and_stops_on_success(task0):
    answers = iter(["I think we need a coder.", GOOD_YAML, GOOD_YAML])
    orch = FunctionLLM(lambda m: next(answers))
    seen_prompts = []
    solution = "```python\n" + task0.prompt + task0.canonical_solution + "```"
    workers = FunctionLLM(lambda m: (seen_prompts.append(m), solution)[1])
    res = Conductor(orch, workers, max_turns=3).run(task0)
    assert [t.outcome for t in res.turns] == ["no_yaml", "passed"]  # stopped early
    assert res.passed
    second_prompt = res.turns[1].prompt
    assert second_prompt[-2] == {"role": "assistant", "content": "I think we need a coder."}
    assert "no_yaml" in second_prompt[-1]["content"]
    assert res.turns[1].metrics == {"nodes": 3, "edges": 2, "depth": 3, "density": 2 / 6}
    # the workers ran the orchestrator's topology: planning, then coding, then testing
    assert [e.sender for e in res.turns[1].run.trace] == ["plan", "code", "test", "unit_tests"]
    assert workers.batch_sizes == [1, 1, 1]


def test_conductor_feeds_test_failures_back_and_respects_max_turns(task0):
    orch = FunctionLLM(lambda m: GOOD_YAML)
    workers = FunctionLLM(
        lambda m: "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```"
    )
    res = Conductor(orch, workers, max_turns=2).run(task0)
    assert [t.outcome for t in res.turns] == ["wrong_answer", "wrong_answer"]
    assert not res.passed
    assert "wrong_answer" in res.turns[1].prompt[-1]["content"]
    assert "AssertionError" in res.turns[1].prompt[-1]["content"]


def test_conductor_enforces_the_difficulty_node_cap(task0):
    chain8 = "".join(
        f"  - - {{name: a{i}, role: coding, ref: [{'a' + str(i - 1) if i else ''}]}}\n" for i in range(8)
    )
    big = "```yaml\nlayers:\n" + chain8 + "```"
    capped = Conductor(
        FunctionLLM(lambda m: big), FunctionLLM(lambda m: "x"), max_turns=1, enforce_caps=True
    ).run(task0)
    assert capped.turns[0].outcome == "logic_invalid"
    assert "8 agents, more than the cap of 7" in capped.turns[0].parse_message
    free = Conductor(FunctionLLM(lambda m: big), FunctionLLM(lambda m: "x"), max_turns=1).run(task0)
    assert free.turns[0].outcome == "no_code" and free.turns[0].metrics["depth"] == 8


def test_run_many_batches_the_orchestrator(task0):
    tasks = humaneval_tasks()[:3]
    orch = FunctionLLM(lambda m: "no yaml here")
    res = Conductor(orch, FunctionLLM(lambda m: "x"), max_turns=2).run_many(tasks)
    assert orch.batch_sizes == [3, 3]
    assert all([t.outcome for t in r.turns] == ["no_yaml", "no_yaml"] for r in res)
