"""REMUL speaker/listeners: reasoning cuts, answer hiding, agreement counts,
the balanced reward and the early-answering AOC — by hand and with
scripted FunctionLLMs."""

from __future__ import annotations

import json
import re

import pytest

from societas.agents import FunctionLLM
from societas.topology.graph import Graph
from societas.topology.patterns.remul import (
    STATE_KEY,
    RemulOutcome,
    agreement_reward,
    cut_node,
    cut_reasoning,
    early_answering_aoc,
    early_answering_curve,
    speaker_listeners,
    split_reasoning,
)
from societas.topology.runtime import NodeError, Runtime

# Eight reasoning lines, blank lines, the final answer, and a trailing remark.
SPEAKER = (
    "Line 1: there are 6 baskets.\n"
    "Line 2: each basket holds 7 apples.\n\n"
    "Line 3: multiply the two counts.\n"
    "Line 4: six sevens.\n"
    "Line 5: add them one basket at a time.\n"
    "Line 6: that gives the total.\n"
    "Line 7: check by dividing back.\n"
    "Line 8: the check works.\n"
    "Final answer: 42\n"
    "That is all."
)


# -- cutting --------------------------------------------------------------------


def test_split_reasoning_drops_blank_and_answer_lines():
    lines, answer = split_reasoning(SPEAKER)
    assert answer == "42"
    assert lines == [
        f"Line {i}: " + rest
        for i, rest in enumerate(
            [
                "there are 6 baskets.",
                "each basket holds 7 apples.",
                "multiply the two counts.",
                "six sevens.",
                "add them one basket at a time.",
                "that gives the total.",
                "check by dividing back.",
                "the check works.",
            ],
            1,
        )
    ]


@pytest.mark.parametrize(
    "frac, n_lines", [(0.0, 0), (0.1, 1), (0.25, 2), (0.3, 2), (0.5, 4), (0.75, 6), (0.99, 7), (1.0, 8)]
)
def test_cut_reasoning_keeps_floor_of_fraction_of_reasoning_lines(frac, n_lines):
    cut = cut_reasoning(SPEAKER, frac)
    kept = cut.splitlines() if cut else []
    assert len(kept) == n_lines
    assert kept == [f"Line {i}" + kept[i - 1][len(f"Line {i}") :] for i in range(1, n_lines + 1)]
    assert "Final answer" not in cut and "42" not in cut and "That is all" not in cut


def test_cut_reasoning_floating_point_edge_and_min_lines():
    ten = "\n".join(f"step {i}" for i in range(10)) + "\nFinal answer: 9"
    assert len(cut_reasoning(ten, 0.7).splitlines()) == 7  # 0.7 * 10 is 6.999... in floating point
    assert cut_reasoning(ten, 0.05) == "step 0"  # REMUL keeps at least one line: max(1, floor(0.5))
    assert cut_reasoning(ten, 0.05, min_lines=0) == ""  # the plain floor, when asked for
    assert cut_reasoning(ten, 0.0) == ""  # a cut at 0 keeps nothing
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        cut_reasoning(ten, 1.5)


def test_answer_never_leaks_in_other_answer_formats():
    boxed = "a\nb\nc\nd\nSo the result is \\boxed{17}."
    assert split_reasoning(boxed) == (["a", "b", "c", "d"], "17")
    prose = "a\nb\nso the answer is 17.\nbye"
    assert split_reasoning(prose) == (["a", "b"], "17")
    draft = "a\nFinal answer: 16\nb\nFinal answer: 17"  # every answer statement is removed
    assert split_reasoning(draft) == (["a", "b"], "17")
    think = "<think>\nx\ny\nFinal answer: 5\n</think>\nThe answer is 5"
    assert split_reasoning(think) == (["x", "y"], "5")
    for text in (boxed, prose, draft):
        cut = cut_reasoning(text, 1.0)
        assert "17" not in cut and "Final answer" not in cut and "boxed" not in cut
    assert cut_reasoning(think, 1.0) == "x\ny"


def test_sentence_units_for_paragraph_writers():
    para = "First we count 3 pens. Each pen holds 4 sheep! Then we add 5?\nSo the answer is 17. Done."
    # the parser reads an answer to the end of its line: "17. Done"; its sentence "So the answer is 17." goes too
    assert split_reasoning(para, "sentence") == (
        ["First we count 3 pens.", "Each pen holds 4 sheep!", "Then we add 5?"],
        "17. Done",
    )
    assert split_reasoning(para) == (
        ["First we count 3 pens. Each pen holds 4 sheep! Then we add 5?"],
        "17. Done",
    )
    assert cut_reasoning(para, 0.7, unit="sentence") == "First we count 3 pens.\nEach pen holds 4 sheep!"
    assert cut_reasoning(para, 0.7) == para.split("\n")[0]  # max(1, floor(0.7 * 1 line)) = 1
    assert cut_reasoning(para, 0.7, min_lines=0) == ""
    with pytest.raises(ValueError, match="unit must be one of line, sentence"):
        cut_reasoning(para, 0.5, unit="word")
    with pytest.raises(ValueError, match="unit must be one of"):
        speaker_listeners(unit="word")
    g = speaker_listeners((0.5,), 1, unit="sentence")
    res = Runtime(g, llm=_remul_llm("Line 1: a. Line 2: b. Line 3: c. Line 4: d.\nFinal answer: 42")).run("q")
    out = RemulOutcome.from_result(res)
    assert out.reasoning_lines == 4 and out.cut_lines == {0.5: 2}
    assert res.outputs["cut_50"] == ["Line 1: a.\nLine 2: b."]


# -- rewards -----------------------------------------------------------------------


def test_agreement_reward_hand_values():
    assert agreement_reward("42", ["42", "41", " 42.", None, "forty-two"]) == 2.0
    assert agreement_reward(None, ["42", "42"]) == 0.0
    assert agreement_reward("42", ["42"] * 9) == 9.0
    assert agreement_reward("42", ["42"] * 5, reference="42", correctness_weight=3) == 8.0
    assert agreement_reward("42", ["42"] * 5, reference="41", correctness_weight=3) == 5.0
    with pytest.raises(ValueError, match="needs a reference"):
        agreement_reward("42", ["42"], correctness_weight=3)


# -- the graph and the runtime ----------------------------------------------------------


def _remul_llm(speaker_text: str = SPEAKER):
    """Speaker says SPEAKER; a listener answers 42 when its cut reaches line 3, else 41."""

    def fn(messages):
        if messages[0]["content"].startswith("You continue"):
            user = messages[-1]["content"]
            return "I continue.\nFinal answer: " + ("42" if "Line 3:" in user else "41")
        return speaker_text

    return FunctionLLM(fn)


def test_graph_structure():
    g = speaker_listeners()
    cuts = ["cut_25", "cut_50", "cut_75"]
    listeners = [f"listener_{c}_{j}" for c in ("25", "50", "75") for j in (1, 2, 3)]
    assert set(g.nodes) == {"speaker", "agreement", *cuts, *listeners}
    assert g.final == "agreement"
    assert all(g.node(c).function == "societas.topology.patterns.remul:cut_node" for c in cuts)
    assert g.predecessors("listener_50_2") == ["cut_50"]
    assert g.predecessors("agreement") == listeners
    assert g.node("agreement").meta["listeners"]["listener_75_3"] == "cut_75"
    assert g.node("agreement").meta["cuts"] == {"cut_25": 0.25, "cut_50": 0.5, "cut_75": 0.75}
    assert g.node("listener_25_1").role == "listener" and g.node("speaker").role == "speaker"
    pool = speaker_listeners((0.5,), 3, listener_llm=["a", "b", "c"])
    assert [pool.node(f"listener_50_{j}").llm for j in (1, 2, 3)] == ["a", "b", "c"]
    assert pool.spec.llms == {"default": "embedded", "a": "embedded", "b": "embedded", "c": "embedded"}
    assert speaker_listeners((0.125, 1.0), 1).nodes[1] == "cut_12.5"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"cuts": ()}, "at least one cut"),
        ({"cuts": (0.5, 0.5)}, "distinct"),
        ({"cuts": (1.5,)}, "in \\[0, 1\\]"),
        ({"n_listeners": 0}, "positive integer"),
        ({"listener_llm": ["a", "b"]}, "2 models for 3 listeners"),
        ({"balanced": True}, "needs reference"),
    ],
)
def test_graph_rejects_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        speaker_listeners(**kwargs)


def test_run_agreement_counts_and_batching():
    llm = _remul_llm()
    res = Runtime(speaker_listeners(), llm=llm, seed=0).run("How many apples are in the baskets?")
    assert llm.batch_sizes == [1, 9]  # the speaker, then all nine listeners in one call
    out = RemulOutcome.from_result(res)
    # cut_25 keeps lines 1-2 (listeners say 41); cut_50 and cut_75 reach line 3 (they say 42)
    assert out.speaker_answer == "42"
    assert out.listener_answers == {0.25: ["41"] * 3, 0.5: ["42"] * 3, 0.75: ["42"] * 3}
    assert out.matches == 6 and out.n_pairs == 9 and out.reward == 6.0
    assert out.agreement_by_cut == {0.25: 0.0, 0.5: 1.0, 0.75: 1.0}
    assert out.cut_lines == {0.25: 2, 0.5: 4, 0.75: 6} and out.reasoning_lines == 8
    assert out.correct is None and out.reference is None
    assert json.loads(res.output)["matches"] == 6
    assert res.state[STATE_KEY]["speaker_answer"] == "42"


def test_listener_prompts_never_contain_the_speaker_answer():
    res = Runtime(speaker_listeners(), llm=_remul_llm()).run("How many apples?")
    listener_events = [e for e in res.trace if e.role == "listener"]
    assert len(listener_events) == 9
    for e in listener_events:
        user = e.prompt[-1]["content"]
        assert "Final answer: 42" not in user and "42" not in user and "That is all" not in user
        assert user.startswith("Question: How many apples?")
        assert "Line 1: there are 6 baskets." in user
    by_id = {e.sender: e.prompt[-1]["content"] for e in listener_events}
    assert "Line 2:" in by_id["listener_25_1"] and "Line 3:" not in by_id["listener_25_1"]
    assert "Line 6:" in by_id["listener_75_3"] and "Line 7:" not in by_id["listener_75_3"]


def test_balanced_reward_with_reference_in_meta_or_per_task():
    right = RemulOutcome.from_result(
        Runtime(speaker_listeners(balanced=True, reference="42"), llm=_remul_llm()).run("q")
    )
    assert right.correct is True and right.reward == 6.0 + 3 * 1.0
    g = speaker_listeners(balanced=True, references={"q1": "42", "q2": "41"})
    r1, r2 = Runtime(g, llm=_remul_llm()).run_many(["q1", "q2"])
    assert RemulOutcome.from_result(r1).reward == 9.0
    o2 = RemulOutcome.from_result(r2)
    assert o2.correct is False and o2.reward == 6.0 and o2.reference == "41"


def test_balanced_reward_without_reference_for_the_task_fails_clearly():
    g = speaker_listeners((0.5,), 1, balanced=True, references={"q1": "42"})
    with pytest.raises(NodeError, match="no reference answer for task 'q2'"):
        Runtime(g, llm=_remul_llm()).run("q2")


def test_speaker_without_answer_scores_zero_and_yaml_round_trip():
    g = Graph.from_yaml_text(speaker_listeners((0.5,), 2).to_yaml())
    res = Runtime(g, llm=_remul_llm("Line 1: hmm.\nLine 2: hmm.\nLine 3: still unsure.")).run("q")
    out = RemulOutcome.from_result(res)
    assert out.speaker_answer is None and out.matches == 0 and out.reward == 0.0
    res.state = {}
    assert RemulOutcome.from_result(res).listener_answers == {0.5: ["41", "41"]}  # from the JSON output


# -- early answering -----------------------------------------------------------------


def test_early_answering_aoc_hand_values():
    five = (0.2, 0.4, 0.6, 0.8, 1.0)
    assert early_answering_aoc(dict.fromkeys(five, 1.0)) == pytest.approx(0.0)
    assert early_answering_aoc(dict.fromkeys(five, 0.0)) == pytest.approx(1.0)
    # only the full reasoning gives the answer: AUC = 0.2 * (0 + 1) / 2 = 0.1, over a range of 0.8
    step = {0.2: 0.0, 0.4: 0.0, 0.6: 0.0, 0.8: 0.0, 1.0: 1.0}
    assert early_answering_aoc(step) == pytest.approx(1 - 0.1 / 0.8)
    assert early_answering_aoc(step, normalize=False) == pytest.approx(0.9)
    # accuracy = fraction: AUC = 0.4 * 0.4 + 0.4 * 0.8 = 0.48; normalised 0.6
    assert early_answering_aoc({1.0: 1.0, 0.2: 0.2, 0.6: 0.6}) == pytest.approx(0.4)  # order does not matter
    with pytest.raises(ValueError, match="two or more"):
        early_answering_aoc({0.5: 1.0})
    with pytest.raises(ValueError, match="accuracy at fraction 0.5"):
        early_answering_aoc({0.5: 1.5, 1.0: 1.0})
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        early_answering_aoc({-0.1: 0.5, 1.0: 1.0})


def _early_llm(answers: dict[str, str]):
    """Speaker: four lines, line 2 states the value, then the final answer.
    Listener: gives that value when line 2 is in its cut, else says 'unknown'."""

    def fn(messages):
        user = messages[-1]["content"]
        if messages[0]["content"].startswith("You continue"):
            m = re.search(r"Step 2: the value is (\d+)\.", user)
            return "Final answer: " + (m.group(1) if m else "unknown")
        v = answers[user.splitlines()[0].strip()]  # the question is the first line of the speaker prompt
        return f"Step 1: read the question.\nStep 2: the value is {v}.\nStep 3: check it.\nStep 4: done.\nFinal answer: {v}"

    return FunctionLLM(fn)


def test_early_answering_curve_against_reference_and_speaker():
    # fractions 0.2/0.4/0.6/0.8 of 4 lines keep 0/1/2/3 lines; line 2 holds the value
    llm = _early_llm({"Q1": "10", "Q2": "21"})
    res = early_answering_curve(llm, ["Q1", "Q2"], ["10", "20"])
    assert llm.batch_sizes == [2, 8]  # both speakers in one call, all 2 x 4 listeners in another
    assert res.accuracies == {0.2: 0.0, 0.4: 0.0, 0.6: 0.5, 0.8: 0.5, 1.0: 0.5}
    # AUC = 0.2 * 0.25 + 0.2 * 0.5 + 0.2 * 0.5 = 0.25; normalised 0.3125
    assert res.aoc == pytest.approx(1 - 0.25 / 0.8)
    assert res.target == "reference" and res.n_used == 2 and res.n_questions == 2
    assert res.details[1]["predictions"][1.0] == "21"
    agree = early_answering_curve(_early_llm({"Q1": "10", "Q2": "21"}), ["Q1", "Q2"])
    assert agree.accuracies == {0.2: 0.0, 0.4: 0.0, 0.6: 1.0, 0.8: 1.0, 1.0: 1.0}
    assert agree.aoc == pytest.approx(1 - 0.5 / 0.8) and agree.target == "speaker"


def test_early_answering_listener_at_full_fraction_and_bad_input():
    llm = _early_llm({"Q1": "10"})
    res = early_answering_curve(llm, ["Q1"], ["10"], (0.4, 1.0), full_uses_speaker=False)
    assert llm.batch_sizes == [1, 2] and res.accuracies == {0.4: 0.0, 1.0: 1.0}
    with pytest.raises(ValueError, match="non-empty list"):
        early_answering_curve(llm, [])
    with pytest.raises(ValueError, match="1 answers for 2 questions"):
        early_answering_curve(llm, ["a", "b"], ["1"])
    with pytest.raises(ValueError, match="two or more distinct"):
        early_answering_curve(llm, ["a"], fractions=(0.5, 0.5))


def test_early_answering_skips_questions_without_reasoning():
    llm = FunctionLLM(lambda m: "Final answer: 3")  # no reasoning lines at all
    res = early_answering_curve(llm, ["Q"], ["3"], (0.5, 1.0))
    assert res.n_used == 0 and res.accuracies == {0.5: 0.0, 1.0: 0.0} and res.details[0]["used"] is False


@pytest.mark.slow
def test_speaker_listeners_runs_on_the_embedded_model(embedded_llm):
    g = speaker_listeners(
        (0.5,), 2, speaker_params={"max_new_tokens": 32}, listener_params={"max_new_tokens": 8}
    )
    res = Runtime(g, llm=embedded_llm, seed=0).run("What is 4 + 5?")
    out = RemulOutcome.from_result(res)
    assert out.n_pairs == 2 and 0 <= out.matches <= 2
    speaker = res.trace.by_sender("speaker")[0].output
    for e in res.trace:
        if e.role == "listener":
            assert not any(
                ln.strip() and ln.strip() in e.prompt[-1]["content"]
                for ln in speaker.splitlines()
                if "final answer" in ln.lower()
            )


def test_cut_node_rejects_an_unknown_unit_in_its_meta():
    from types import SimpleNamespace

    ctx = SimpleNamespace(
        node="cut_50", meta={"frac": 0.5, "unit": "word"}, inputs={"speaker": "a\nb\nAnswer: 1"}, state={}
    )
    with pytest.raises(
        ValueError, match=r"^cut node 'cut_50': unit must be one of line, sentence, got 'word'$"
    ):
        cut_node(ctx)
