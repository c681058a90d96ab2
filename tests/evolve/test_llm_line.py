"""The one-line LLM mutation: what the model is shown, how its answer is read, and what is refused."""

from __future__ import annotations

import pytest

from societas.agents.llm import FunctionLLM
from societas.evolve.blocks import BlockLibrary
from societas.evolve.config import parse_config
from societas.evolve.mutation import (
    LLMEnsemble,
    MutationError,
    MutationRequest,
    Mutator,
    apply_line_answer,
    build_line_prompt,
    line_sites,
    validate_child,
)
from societas.evolve.program import Program, frozen_parts_equal
from societas.evolve.task import load_task

TASK = load_task("cfr")
SEED = TASK.initial_program


def _site(target: str, hook: str = "PolicyAccumulator.update"):
    return next(s for s in line_sites(SEED) if s.target == target and s.hook == hook)


def test_sites_know_their_scope():
    weight = _site("weight")
    assert weight.has_number
    assert {"t", "cum_policy", "policy", "reach", "ctx", "self", "torch"} <= weight.scope
    assert "contribution" not in weight.scope  # assigned after the line
    assert {s.hook for s in line_sites(SEED)} == {
        "RegretAccumulator.__init__",
        "RegretAccumulator.update",
        "PolicyFromRegret.__init__",
        "PolicyFromRegret.update",
        "PolicyAccumulator.__init__",
        "PolicyAccumulator.update",
    } - {"RegretAccumulator.__init__", "PolicyFromRegret.__init__", "PolicyAccumulator.__init__"}


def test_the_prompt_blanks_the_line_and_starts_the_answer():
    site = _site("weight")
    messages = build_line_prompt(SEED, site, "the contract text")
    user = messages[1]["content"]
    assert "weight = ???" in user and "t**1.0" not in user and "the contract text" in user
    assert "contribution = reach.unsqueeze(-1) * policy" in user  # the rest of the hook is shown
    assert messages[-1] == {"role": "assistant", "content": "weight ="}


@pytest.mark.parametrize(
    "answer",
    [
        "weight = t**2.0",
        "```python\nweight = t**2.0\n```",
        "Sure! Here it is:\nweight = t ** 2.0  # quadratic",
        "weight = t**2.0;",
    ],
)
def test_chatty_and_fenced_answers_are_read(answer):
    child = apply_line_answer(SEED, _site("weight"), answer)
    validate_child(SEED, child, 100_000)
    assert "weight = t**2.0" in child.replace("t ** 2.0", "t**2.0") and frozen_parts_equal(SEED, child)


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("weight = contribution * 2", "uses 'contribution'"),
        ("weight = t.__class__", "dunder attribute"),
        ("weight = eval('t')", "calls eval"),
        ("weight = ...", "placeholder"),
        ("weight = t ** 1.0", "same expression"),
        ("weight = (t", "does not parse"),
        ("I cannot help with that", "no line `weight = ...`"),
    ],
)
def test_bad_answers_are_refused_with_the_reason(answer, reason):
    with pytest.raises(MutationError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        apply_line_answer(SEED, _site("weight"), answer)


def test_the_mutator_continues_the_started_answer_and_takes_the_first_good_of_three():
    seen = []

    def model(messages, params, index):
        seen.append((messages[-1]["content"], params.n))
        return [" weight", " t**2.0", " t**3.0"][index]  # the first repeats nothing usable

    cfg = parse_config({"mutation": {"weights": {"llm_line": 1.0}}})
    library = BlockLibrary.load(TASK.blocks_path)
    mutator = Mutator(cfg, LLMEnsemble([(FunctionLLM(model), 1.0)]), library)
    parent = Program(id="p", code=SEED, iteration=0, fitness=-1.0)
    requests = [MutationRequest(i, "llm_line", parent, [], seed=i, model_index=0) for i in range(1, 4)]
    results = mutator.make(requests)
    assert all(r.failure is None for r in results), [r.failure for r in results]
    assert all(r.info["kind"] == "llm_line" for r in results)
    for result in results:
        validate_child(SEED, result.code, 100_000)
    assert all(n == 3 for _, n in seen)
    # Only the knobs: lines with a number, or pipeline variables set more than once (never t or legal).
    assert {content.split(" =")[0] for content, _ in seen} <= {"regret", "weight", "positive", "contribution"}
