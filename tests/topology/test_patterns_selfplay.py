"""Dr. Zero proposer/solver: rewards by hand, format score, answer hiding,
batching and the arithmetic verifier — checked with scripted FunctionLLMs."""

from __future__ import annotations

import json
import random
from fractions import Fraction

import pytest

from societas.agents import FunctionLLM
from societas.agents.parsers import answers_match, extract_final_answer
from societas.topology.graph import Graph
from societas.topology.patterns.arithmetic import (
    arithmetic_word_problem_task,
    find_arithmetic_expressions,
    safe_eval_arithmetic,
    verify_arithmetic,
)
from societas.topology.patterns.selfplay import (
    STATE_KEY,
    ProposerSolverOutcome,
    answer_leaks,
    difficulty_reward,
    format_score,
    parse_proposal,
    proposer_reward,
    proposer_solver,
    proposer_solver_functions,
)
from societas.topology.runtime import Runtime

GOOD = "Question: Tom has 3 boxes with 4 pens in each box. How many pens does Tom have?\nAnswer: 12"


# -- rewards ------------------------------------------------------------------


@pytest.mark.parametrize("k, expected", [(0, 0.0), (1, 1.0), (2, 0.75), (3, 0.5), (4, 0.25), (5, 0.0)])
def test_difficulty_reward_matches_paper_for_five_attempts(k, expected):
    assert difficulty_reward(k, 5) == pytest.approx(expected)
    assert difficulty_reward(k) == pytest.approx((5 - k) / 4 if 0 < k < 5 else 0.0)


def test_difficulty_reward_other_n_and_bad_input():
    assert difficulty_reward(1, 3) == pytest.approx(1.0)
    assert difficulty_reward(2, 3) == pytest.approx(0.5)
    assert difficulty_reward(3, 9) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="k must be an integer in \\[0, 5\\]"):
        difficulty_reward(6, 5)
    with pytest.raises(ValueError, match="n >= 2"):
        difficulty_reward(0, 1)


def test_proposer_reward_adds_half_format_and_gates_on_format():
    assert proposer_reward(0.75, 1.0) == pytest.approx(1.25)
    assert proposer_reward(0.0, 0.75) == pytest.approx(0.375)
    assert proposer_reward(1.0, 0.0) == 0.0  # malformed pairs earn nothing
    assert proposer_reward(1.0, 0.0, gate=False) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="format score"):
        proposer_reward(0.5, 1.5)


# -- parsing and format ---------------------------------------------------------


def test_parse_proposal_plain_markdown_and_missing_parts():
    p = parse_proposal(GOOD)
    assert (p.question, p.answer, p.problems) == (
        "Tom has 3 boxes with 4 pens in each box. How many pens does Tom have?",
        "12",
        [],
    )
    p = parse_proposal("**Question:** How many legs do 3 cats have?\n**Answer:**\n 12.")
    assert (p.question, p.answer) == ("How many legs do 3 cats have?", "12")
    p = parse_proposal("How many legs do 3 cats have?\nAnswer: 12")
    assert p.question == "How many legs do 3 cats have?" and "no 'Question:' label" in p.problems
    p = parse_proposal("Question: How many legs do 3 cats have?")
    assert p.answer is None and p.problems == ["no 'Answer:' label"]
    p = parse_proposal("Question: a?\nAnswer: 1\nQuestion: How many legs do 3 cats have?\nAnswer: 12")
    assert (p.question, p.answer) == ("How many legs do 3 cats have?", "12")
    assert p.problems == ["2 'Answer:' labels; used the last"]


def test_answer_leaks_is_token_level():
    assert answer_leaks("Tom has 12 pens. How many pens?", "12")
    assert answer_leaks("The capital of France is Paris; what is it?", "paris")
    assert answer_leaks("It costs $1,000. How much?", "1000")
    assert not answer_leaks("What is 12 + 3?", "2")
    assert not answer_leaks("What is 12 + 3?", "15")
    assert answer_leaks("Name the big red dog?", "the big red")  # articles ignored, contiguous words


@pytest.mark.parametrize(
    "text, expected",
    [
        (GOOD, 1.0),
        ("Question: Tom has 3 boxes with 4 pens in each box. How many pens does Tom have\nAnswer: 12", 0.75),
        ("Question: Tom has 12 pens in one box. How many pens does Tom have?\nAnswer: 12", 0.0),  # leak
        (
            GOOD.replace("Answer: 12", "Answer: twelve pens in all of the boxes"),
            (1 + 1 + 0.5 + 1) / 4,
        ),  # 7 words
        (GOOD.replace("Answer: 12", "Answer: " + " ".join(["word"] * 11)), (1 + 1 + 0 + 1) / 4),
        ("Question: How many pens?\nAnswer: 12", (1 + 1 + 1 + 0) / 4),  # 3-word question
        ("Tom has 3 boxes with 4 pens. How many pens does he have?\nAnswer: 12", 0.0),  # no Question label
        ("Question: How many pens does Tom have in all?", 0.0),  # no answer
        ("Question: How many pens does Tom have in all?\nAnswer:", 0.0),  # empty answer
        ("I like pens.", 0.0),
        (
            "Question: How many pens does Tom have in all?\nAnswer: <the number only>",
            0.0,
        ),  # copied placeholder
        ("Question: <the question, ending with '?'>\nAnswer: 12", 0.0),
    ],
)
def test_format_score_hand_values(text, expected):
    assert format_score(text) == pytest.approx(expected)


# -- the graph and the runtime ----------------------------------------------------

PROPOSER_PREFIX = "You are a question writer"


def _scripted(proposal: str, right_seeds=(0, 2), right="12", wrong="13"):
    """One FunctionLLM for both sides: the proposer writes ``proposal``;
    solver attempts answer right when their sampling seed is in ``right_seeds``."""

    def fn(messages, params, sample_index):
        if messages[0]["content"].startswith(PROPOSER_PREFIX):
            return proposal
        ans = right if params.seed in right_seeds else wrong
        return f"Let me think step by step.\nFinal answer: {ans}"

    return FunctionLLM(fn)


def test_graph_structure_and_importable_functions():
    g = proposer_solver(5)
    assert g.nodes == ["proposer", "question"] + [f"solver_{i}" for i in range(1, 6)] + ["grade"]
    assert g.final == "grade"
    assert g.node("question").function == "societas.topology.patterns.selfplay:question_node"
    assert g.node("grade").function == "societas.topology.patterns.selfplay:grade_node"
    assert [g.node(f"solver_{i}").params["seed"] for i in range(1, 6)] == [0, 1, 2, 3, 4]
    assert all(g.node(f"solver_{i}").params["temperature"] > 0 for i in range(1, 6))
    assert set(proposer_solver_functions()) == {g.node("question").function, g.node("grade").function}
    g2 = proposer_solver(3, proposer_llm="big", solver_params={"temperature": 1.0}, solver_seed=None)
    assert g2.spec.llms == {"default": "embedded", "big": "embedded"}
    assert g2.node("proposer").llm == "big" and "seed" not in g2.node("solver_1").params
    with pytest.raises(ValueError, match="n_solvers >= 2"):
        proposer_solver(1)
    with pytest.raises(ValueError, match="verify must be"):
        proposer_solver(verify="sympy")


def test_full_run_exact_k_reward_and_batching():
    llm = _scripted(GOOD)
    res = Runtime(proposer_solver(5), llm=llm).run(arithmetic_word_problem_task(0))
    assert llm.batch_sizes == [1, 5]  # the proposer, then all five solvers in one call
    out = ProposerSolverOutcome.from_result(res)
    assert out.question == "Tom has 3 boxes with 4 pens in each box. How many pens does Tom have?"
    assert out.answer == "12"
    assert out.solver_answers == ["12", "13", "12", "13", "13"]
    assert out.correct == [True, False, True, False, False]
    assert (out.k, out.n) == (2, 5)
    assert out.difficulty == pytest.approx(0.75)
    assert out.format == pytest.approx(1.0)
    assert out.reward == pytest.approx(1.25)
    assert out.verified is None  # no arithmetic expression in the question
    summary = json.loads(res.output)
    assert summary["k"] == 2 and summary["reward"] == pytest.approx(1.25)
    assert res.state[STATE_KEY]["proposer_text"] == GOOD


def test_solvers_never_see_the_answer():
    llm = _scripted(GOOD)
    res = Runtime(proposer_solver(5), llm=llm).run("Write a question.")
    solver_events = [e for e in res.trace if e.role == "solver"]
    assert len(solver_events) == 5 and {e.batch_size for e in solver_events} == {5}
    for e in solver_events:
        text = "\n".join(m["content"] for m in e.prompt)
        assert "Answer: 12" not in text and "12" not in text
        assert "Tom has 3 boxes with 4 pens in each box." in text
        assert "Write a question." not in text  # the proposer's instruction is not shown either
    assert res.outputs["question"] == [
        "Tom has 3 boxes with 4 pens in each box. How many pens does Tom have?"
    ]


def test_outcome_from_grade_json_when_state_is_missing():
    res = Runtime(proposer_solver(5), llm=_scripted(GOOD, right_seeds=(1,))).run("t")
    res.state = {}
    out = ProposerSolverOutcome.from_result(res)
    assert (out.k, out.difficulty, out.reward) == (1, 1.0, 1.5)


def test_outcome_of_a_stopped_run_is_a_clear_error():
    res = Runtime(proposer_solver(3), llm=_scripted(GOOD), max_calls=1).run("t")
    assert res.stopped == "call_budget" and res.output is None
    with pytest.raises(ValueError, match="no grade result"):
        ProposerSolverOutcome.from_result(res)


def test_leaky_proposal_earns_nothing_even_with_good_difficulty():
    leaky = "Question: Tom has 12 pens in one box. How many pens does Tom have?\nAnswer: 12"
    out = ProposerSolverOutcome.from_result(Runtime(proposer_solver(5), llm=_scripted(leaky)).run("t"))
    assert out.k == 2 and out.difficulty == pytest.approx(0.75)
    assert out.format == 0.0 and out.reward == 0.0
    assert "answer leaks into the question" in out.format_problems


def test_unparsable_proposal_passes_raw_text_and_records_failure():
    llm = _scripted("I like pens very much.")
    res = Runtime(proposer_solver(3), llm=llm).run("t")
    assert res.outputs["question"] == ["I like pens very much."]
    out = ProposerSolverOutcome.from_result(res)
    assert out.answer is None and out.k == 0 and out.reward == 0.0 and out.format == 0.0
    assert "no 'Answer:' label" in out.format_problems
    assert res.state[STATE_KEY]["parsed"] is False


def test_arithmetic_check_in_outcome_and_yaml_round_trip():
    prop = "Question: A shop sells 6 * (3 + 4) apples each day. How many apples is that?\nAnswer: {}"
    g = Graph.from_yaml_text(proposer_solver(2).to_yaml())  # function refs resolve by import from YAML too
    right = ProposerSolverOutcome.from_result(Runtime(g, llm=_scripted(prop.format(42), right="42")).run("t"))
    assert right.verified is True and right.k == 1 and right.reward == pytest.approx(1.0 + 0.5)
    wrong = ProposerSolverOutcome.from_result(Runtime(g, llm=_scripted(prop.format(41), right="41")).run("t"))
    assert wrong.verified is False
    off = proposer_solver(2, verify=None)
    assert (
        ProposerSolverOutcome.from_result(Runtime(off, llm=_scripted(prop.format(42))).run("t")).verified
        is None
    )


def test_runtime_seed_derives_distinct_solver_seeds_when_solver_seed_is_none():
    seen = []

    def fn(messages, params, sample_index):
        if messages[0]["content"].startswith(PROPOSER_PREFIX):
            return GOOD
        seen.append(params.seed)
        return "Final answer: 12"

    Runtime(proposer_solver(4, solver_seed=None), llm=FunctionLLM(fn), seed=7).run("t")
    assert len(seen) == 4 and len(set(seen)) == 4 and None not in seen


# -- arithmetic domain --------------------------------------------------------------


def test_safe_eval_arithmetic_values_and_refusals():
    assert safe_eval_arithmetic("2 ** 10 + (3 - 1) / 4") == Fraction(2049, 2)
    assert safe_eval_arithmetic("-3 * -(2 + 1)") == 9
    assert safe_eval_arithmetic("0.1 + 0.2") == Fraction(3, 10)  # exact, no float error
    assert safe_eval_arithmetic("6 × 7 ÷ 2") == 21
    for expr, msg in [
        ("__import__('os')", "not allowed"),
        ("x + 1", "not allowed"),
        ("(1).real", "not allowed"),
        ("1 / 0", "division by zero"),
        ("9 ** 9 ** 9", "exponent"),
        ("2 ** 0.5", "exponent"),
        ("10 ** 60", "out of range"),
        ("1 +", "not an arithmetic expression"),
        ("1" * 300, "characters"),
        ("True + 1", "not allowed"),
    ]:
        with pytest.raises(ValueError, match=msg):
            safe_eval_arithmetic(expr)


def test_find_and_verify_arithmetic():
    assert find_arithmetic_expressions("What is 12 * (3 + 4)? Add 5 apples.") == ["12 * (3 + 4)"]
    # a range such as "3-4 years" reads as a subtraction (a known limit); "3-year-old" does not
    assert find_arithmetic_expressions("Tom is 3-4 years old? No: a 3-year-old.") == ["3-4"]
    assert find_arithmetic_expressions("No maths here, just 7 cats.") == []
    assert verify_arithmetic("What is 12 * (3 + 4)?", "84") is True
    assert verify_arithmetic("What is 12 * (3 + 4)?", "84.0") is True
    assert verify_arithmetic("What is 12 * (3 + 4)?", "1,084") is False
    assert verify_arithmetic("What is 1 / 4 + 1 / 4?", "1/2") is True
    assert verify_arithmetic("What is 10 / 4?", "2.5") is True
    assert verify_arithmetic("What is 12 * (3 + 4)?", "eighty-four") is False
    assert verify_arithmetic("How many cats are there?", "7") is None


def test_arithmetic_task_is_reproducible_and_varied():
    assert arithmetic_word_problem_task(3) == arithmetic_word_problem_task(random.Random(3))
    tasks = {arithmetic_word_problem_task(s) for s in range(20)}
    assert len(tasks) > 10
    t = arithmetic_word_problem_task(0)
    assert "Question:" in t and "Answer:" in t and "whole number" in t
    with pytest.raises(TypeError, match="random.Random"):
        arithmetic_word_problem_task("seed")


@pytest.mark.slow
def test_proposer_solver_runs_on_the_embedded_model(embedded_llm):
    g = proposer_solver(2, proposer_params={"max_new_tokens": 24}, solver_params={"max_new_tokens": 12})
    res = Runtime(g, llm=embedded_llm, seed=0).run(arithmetic_word_problem_task(0))
    out = ProposerSolverOutcome.from_result(res)
    # whatever the model wrote, the outcome is the grading of the run's own messages
    assert out.format == format_score(res.outputs["proposer"][-1])
    solvers = [n for n in g.nodes if g.node(n).role == "solver"]
    assert out.n == len(solvers) == 2
    assert out.solver_answers == [extract_final_answer(res.outputs[n][-1]) for n in solvers]
    assert out.correct == [bool(out.answer) and answers_match(a, out.answer) for a in out.solver_answers]
    assert out.k == sum(out.correct)
    assert out.difficulty == difficulty_reward(out.k, 2)
    assert out.reward == proposer_reward(out.difficulty, out.format)
    assert [e.batch_size for e in res.trace if e.role == "solver"] == [2, 2]
