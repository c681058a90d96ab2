"""Societies of thought: personas, the society graph, and behaviour counting
checked against hand-counted traces and scripted FunctionLLM runs."""

from __future__ import annotations

import re

import pytest

from societas.agents import FunctionLLM
from societas.topology.errors import SpecError
from societas.topology.patterns.society import BIG_FIVE, DEFAULT_PERSONAS, Persona, society_of_thought
from societas.topology.patterns.society_behaviours import (
    BEHAVIOURS,
    BehaviourClassifier,
    BehaviourCounts,
    LexicalBehaviourClassifier,
    LLMBehaviourClassifier,
    count_behaviours,
    parse_behaviour_labels,
    split_sentences,
)
from societas.topology.runtime import Runtime
from societas.topology.trace import Trace, TraceEvent


def _ev(
    sender: str, rnd: int, text: str, *, role: str = "persona", kind: str = "agent", step: int | None = None
) -> TraceEvent:
    return TraceEvent(
        step=rnd if step is None else step,
        round=rnd,
        sender=sender,
        receivers=[],
        kind=kind,
        role=role,
        prompt=[],
        output=text,
    )


def _trace(rows: list[tuple[str, int, str]], extra: list[TraceEvent] = ()) -> Trace:
    return Trace([_ev(s, r, t) for s, r, t in rows] + list(extra))


# -- personas ---------------------------------------------------------------


def test_default_personas_are_eight_distinct_profiles():
    assert len(DEFAULT_PERSONAS) >= 8
    names = [p.name for p in DEFAULT_PERSONAS]
    assert len(set(names)) == len(names)
    profiles = [p.trait_profile() for p in DEFAULT_PERSONAS]
    assert len(set(profiles)) == len(profiles)  # pairwise distinct Big Five profiles
    assert all(None not in prof for prof in profiles)  # every trait set
    assert len({p.expertise for p in DEFAULT_PERSONAS}) == len(DEFAULT_PERSONAS)


def test_persona_describe_mentions_name_traits_and_expertise():
    p = Persona(
        "dana", {"neuroticism": "high", "openness": "low"}, "statistics", "blunt", title="a statistician"
    )
    text = p.describe()
    assert text.startswith("Your name is dana; you are a statistician.")
    # traits come out in Big Five order whatever the input order
    assert "Personality: low openness, high neuroticism." in text
    assert "Expertise: statistics." in text and "Style: blunt." in text
    assert list(p.traits) == ["openness", "neuroticism"]
    same = Persona(
        "dana", {"openness": "low", "neuroticism": "high"}, "statistics", "blunt", title="a statistician"
    )
    assert same == p and len({p, same, DEFAULT_PERSONAS[0]}) == 2  # hashable, order-insensitive traits


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"traits": {"humour": "high"}}, "unknown trait 'humour'"),
        ({"traits": {"openness": "very high"}}, "level 'very high'"),
        ({"name": "two words"}, "must be a valid node id"),
        ({"expertise": "  "}, "expertise must not be empty"),
    ],
)
def test_persona_rejects_bad_input(kwargs, message):
    base = {"name": "x", "traits": {"openness": "high"}, "expertise": "maths", "style": "calm"}
    with pytest.raises(ValueError, match=message):
        Persona(**{**base, **kwargs})


# -- graph ------------------------------------------------------------------


def test_society_graph_structure():
    g = society_of_thought(4, rounds=3, params={"temperature": 0.5, "max_new_tokens": 32})
    personas = [p.name for p in DEFAULT_PERSONAS[:4]]
    assert g.nodes == personas + ["aggregator"]
    assert g.spec.rounds == 3
    assert g.final == "aggregator"
    # fully connected with self-loops, plus one edge per persona to the aggregator
    assert set(g.edges) == {(a, b) for a in personas for b in personas} | {
        (a, "aggregator") for a in personas
    }
    assert len(g.edges) == 4 * 4 + 4
    metas = [g.node(n).meta for n in personas]
    assert [m["persona_name"] for m in metas] == personas
    assert len({m["persona"] for m in metas}) == 4
    assert all(g.node(n).role == "persona" for n in personas)
    assert g.node("aggregator").role == "aggregator"
    assert g.node("statistician").params == {"temperature": 0.5, "max_new_tokens": 32}
    assert g.cyclic_components() == [set(personas)]


def test_society_accepts_persona_objects_and_names():
    custom = Persona("ada", {"openness": "high"}, "maths", "brief")
    g = society_of_thought(personas=[custom, "teacher"], rounds=1)
    assert g.nodes == ["ada", "teacher", "aggregator"]
    assert g.node("ada").meta["persona"] == custom.describe()


@pytest.mark.parametrize(
    "kwargs, exc, message",
    [
        ({"n_personas": 1}, ValueError, "at least two personas"),
        ({"n_personas": 9}, ValueError, "only 8 default personas"),
        ({"rounds": 0}, ValueError, "at least one round"),
        ({"personas": ["teacher", "teacher"]}, ValueError, "repeated: teacher"),
        ({"personas": ["teacher", "wizard"]}, ValueError, "unknown persona 'wizard'"),
        ({"personas": ["teacher", "writer"], "n_personas": 3}, ValueError, "n_personas=3 but 2"),
        ({"personas": ["teacher", 3]}, TypeError, "personas\\[1\\]"),
    ],
)
def test_society_rejects_bad_input(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        society_of_thought(**kwargs)


def test_society_unknown_llm_name_is_a_spec_error():
    with pytest.raises(SpecError, match="unknown LLM 'big'"):
        society_of_thought(llm="big")


def _persona_llm():
    """Says who it is and how many messages it read, so visibility is observable."""

    def fn(messages):
        system, user = messages[0]["content"], messages[-1]["content"]
        m = re.search(r"Your name is (\w+)", system)
        who = m.group(1) if m else "aggregator"
        # personas read "### Message from" sections, the aggregator a numbered list of quotes
        seen = user.count("### Message from ") + len(re.findall(r'^\d+\. \S+ said: "', user, re.M))
        return f"I am {who}; saw {seen} messages. Final answer: {seen}"

    return FunctionLLM(fn)


def test_society_runtime_batches_personas_and_shows_previous_round():
    g = society_of_thought(4, rounds=2)
    llm = _persona_llm()
    res = Runtime(g, llm=llm).run("How many apples?")
    assert llm.batch_sizes == [4, 4, 1]
    personas = [p.name for p in DEFAULT_PERSONAS[:4]]
    for p in personas:
        assert res.outputs[p] == [
            f"I am {p}; saw 0 messages. Final answer: 0",
            f"I am {p}; saw 4 messages. Final answer: 4",
        ]
    by_round = {(e.sender, e.round): e for e in res.trace if e.kind == "agent"}
    for p in personas:
        ev1 = by_round[(p, 1)]
        system, user = ev1.prompt[0]["content"], ev1.prompt[-1]["content"]
        assert DEFAULT_PERSONAS[personas.index(p)].describe() in system
        assert user.startswith("How many apples?") and user.endswith("End with 'Final answer: <answer>'.")
        for other in personas:
            label = "your previous answer" if other == p else "previous round"
            assert f"### Message from {other} ({label})\nI am {other}; saw 0 messages." in user
        assert by_round[(p, 0)].batch_size == 4
    agg = by_round[("aggregator", 0)].prompt[-1]["content"]
    assert agg.count("saw 4 messages") == 4 and "saw 0 messages" not in agg  # only the last round
    # the aggregator reads quotes, not headers a small model echoes back
    assert "### Message from" not in agg and agg.startswith("Task: How many apples?")
    assert f'1. {personas[0]} said: "I am {personas[0]}; saw 4 messages. Final answer: 4"' in agg
    assert res.output == "I am aggregator; saw 4 messages. Final answer: 4"
    counts = count_behaviours(res.trace)
    assert counts.n_messages == 8  # persona messages only; the aggregator is not a persona
    assert counts.total == 0


# -- lexical classifier ------------------------------------------------------

HAND_TRACE = [
    # round 0
    ("statistician", 0, "The total is 12 apples. How did you count the baskets?\nFinal answer: 12"),
    ("physicist", 0, "I think the total is 15. Alternatively, we could count by rows.\nFinal answer: 15"),
    (
        "teacher",
        0,
        "Let us look at it from a teacher's perspective. What is the price of one apple?\nFinal answer: 12",
    ),
    # round 1
    (
        "statistician",
        1,
        "I disagree with physicist, 15 is wrong. One apple has a price of 2 dollars.\nFinal answer: 12",
    ),
    (
        "physicist",
        1,
        "Good point, statistician, you are right. Statistician, I counted the baskets by rows, so I was wrong.\nFinal answer: 12",
    ),
    ("teacher", 1, "The price of one apple is 2 dollars. I agree with the statistician.\nFinal answer: 12"),
    # round 2
    ("statistician", 2, "What is the price of one basket?\nFinal answer: 12"),
    ("physicist", 2, "I agree with you all now.\nFinal answer: 12"),
    ("teacher", 2, "That is not wrong, but on the other hand the price is unknown.\nFinal answer: 12"),
]


def test_lexical_classifier_matches_hand_counts():
    extra = [
        _ev("aggregator", 0, "I disagree. What? Alternatively.", role="aggregator", step=3),
        _ev("grade", 0, "wrong, I disagree", role=None, kind="function", step=3),
    ]
    trace = _trace(HAND_TRACE, extra)
    res = LexicalBehaviourClassifier().classify(trace)
    # Hand count:
    #  perspective: physicist r0 "Alternatively", teacher r0 "from a teacher's perspective",
    #               teacher r2 "on the other hand"                                         -> 3
    #  conflict:    statistician r1 "I disagree ... wrong" (one sentence)                    -> 1
    #               ("I was wrong" is a revision; "not wrong" is no conflict)
    #  reconciliation: physicist r1 "I was wrong" (revision); physicist r2 "I agree" after
    #               the round-1 conflict. Round-1 "you are right"/"I agree" come before any
    #               earlier-round conflict, so they do not count                              -> 2
    #  question-answering: statistician r0's baskets question answered by physicist r1 (names
    #               the asker, shares "baskets"); teacher r0's price question answered by
    #               statistician r1 (shares "price" and "apple"); teacher r1 answering its own
    #               question does not count; round-2 questions have no next round            -> 2
    assert res.counts == {"question_answering": 2, "perspective_shift": 3, "conflict": 1, "reconciliation": 2}
    assert res.total == 8 and res.n_messages == 9 and res.errors == []
    per = {(e.sender, e.round): e.counts for e in res.events}
    assert per[("physicist", 1)] == {
        "question_answering": 1,
        "perspective_shift": 0,
        "conflict": 0,
        "reconciliation": 1,
    }
    assert per[("statistician", 1)] == {
        "question_answering": 1,
        "perspective_shift": 0,
        "conflict": 1,
        "reconciliation": 0,
    }
    assert per[("physicist", 2)]["reconciliation"] == 1
    assert per[("teacher", 1)] == dict.fromkeys(BEHAVIOURS, 0)
    pairs = [(q.asker, q.replier, q.via) for q in res.qa_pairs]
    assert pairs == [("statistician", "physicist", "name"), ("teacher", "statistician", "overlap")]
    assert res.qa_pairs[0].answer == "Statistician, I counted the baskets by rows, so I was wrong."
    assert res.qa_pairs[0].question_index == 0 and res.qa_pairs[0].answer_index == 4
    d = res.to_dict()
    assert d["question_answering"] == 2 and d["total"] == 8 and len(d["events"]) == 9


def test_lexical_agreement_after_disagreement_and_negations():
    trace = _trace(
        [
            ("a", 0, "The answer is 5."),
            ("b", 0, "I don't agree, it is 6."),
            ("a", 1, "You are right, it is 6."),
            ("b", 1, "Which is right? Good point."),  # question sentence never counts as agreement
        ]
    )
    res = LexicalBehaviourClassifier(roles=None).classify(trace)
    assert res.counts == {"question_answering": 0, "perspective_shift": 0, "conflict": 1, "reconciliation": 2}
    per = {(e.sender, e.round): e.counts["reconciliation"] for e in res.events}
    assert per == {("a", 0): 0, ("b", 0): 0, ("a", 1): 1, ("b", 1): 1}


def test_lexical_conflict_earlier_in_same_message_enables_agreement():
    trace = _trace([("a", 0, "At first I disagree with you. After checking, I agree.")])
    res = LexicalBehaviourClassifier().classify(trace)
    assert res.conflict == 1 and res.reconciliation == 1


def test_lexical_overlap_threshold_and_aliases():
    rows = [
        ("alice", 0, "What colour is the red barn roof?"),  # content words: colour, red, barn, roof
        ("bob", 1, "The barn is big."),  # shares 1 of 4 < max(2, ceil(0.5 * 4)) = 2
        ("carol", 1, "Ally, the barn is tall."),  # names alice by an alias and shares "barn"
    ]
    plain = LexicalBehaviourClassifier().classify(_trace(rows))
    assert plain.question_answering == 0
    aliased = LexicalBehaviourClassifier(aliases={"alice": ["Ally"]}).classify(_trace(rows))
    assert aliased.question_answering == 1 and aliased.qa_pairs[0].replier == "carol"
    overlap = _trace(rows[:1] + [("bob", 1, "The red barn roof has a green colour.")])
    assert LexicalBehaviourClassifier().classify(overlap).question_answering == 1
    # a reply two rounds later is not an answer (the asker's question was read in the next round)
    late = Trace([_ev("alice", 0, rows[0][2]), _ev("bob", 2, "The red barn roof has a green colour.")])
    assert LexicalBehaviourClassifier().classify(late).question_answering == 0


def test_lexical_cues_are_replaceable():
    trace = _trace([("a", 0, "Let me flip it around. Nope.")])
    clf = LexicalBehaviourClassifier(
        cues={"perspective_shift": [r"\bflip it around\b"], "conflict": [r"\bnope\b"]}
    )
    assert clf.classify(trace).counts == {
        "question_answering": 0,
        "perspective_shift": 1,
        "conflict": 1,
        "reconciliation": 0,
    }
    with pytest.raises(ValueError, match="unknown cue list"):
        LexicalBehaviourClassifier(cues={"sarcasm": []})


def test_split_sentences():
    assert split_sentences("One. Two? Three!\n- four\n1. five\n\n") == [
        "One.",
        "Two?",
        "Three!",
        "four",
        "five",
    ]
    assert split_sentences("Pi is 3.14 exactly.") == ["Pi is 3.14 exactly."]


def test_count_behaviours_default_and_protocol():
    trace = _trace(HAND_TRACE)
    assert count_behaviours(trace).counts == LexicalBehaviourClassifier().classify(trace).counts
    assert isinstance(LexicalBehaviourClassifier(), BehaviourClassifier)
    with pytest.raises(TypeError, match="classify"):
        count_behaviours(trace, classifier=object())
    with pytest.raises(TypeError, match="expected a Trace"):
        LexicalBehaviourClassifier().classify([])


# -- LLM classifier ------------------------------------------------------------


def test_parse_behaviour_labels_variants_and_errors():
    ok, err = parse_behaviour_labels(
        "question answering: 2\nPerspective-Shift = yes\n**conflict**: 0\n- reconciliation: no"
    )
    assert err is None and ok == {
        "question_answering": 2,
        "perspective_shift": 1,
        "conflict": 0,
        "reconciliation": 0,
    }
    bad, err = parse_behaviour_labels(
        "conflict: 1\nconflict: 2\nquestion_answering: 0\nperspective_shift: 0\nreconciliation: 0"
    )
    assert bad is None and "conflict given twice" in err
    bad, err = parse_behaviour_labels("I think there is some conflict here.")
    assert bad is None and err.startswith("missing question_answering")


def test_llm_classifier_scripted_labels_and_errors():
    trace = _trace(HAND_TRACE[:6])

    def fn(messages):
        msg = messages[-1]["content"].split("Message to label (from ", 1)[1]
        if msg.startswith("teacher):\nLet us"):
            return "question_answering: 0\nperspective_shift: 1\nconflict: 0\nreconciliation: 0"
        if msg.startswith("physicist):\nGood point"):
            return "I cannot tell."  # unparsable: an error, not zeros
        if msg.startswith("statistician):\nI disagree"):
            return "Question_Answering: 1\nperspective shift: 0\nConflict: 1\nreconciliation: 0"
        return "question_answering: 0\nperspective_shift: 0\nconflict: 0\nreconciliation: 0"

    llm = FunctionLLM(fn)
    res = LLMBehaviourClassifier(llm).classify(trace)
    assert llm.batch_sizes == [6]  # every message in one batched call
    assert res.counts == {"question_answering": 1, "perspective_shift": 1, "conflict": 1, "reconciliation": 0}
    assert res.n_errors == 1 and res.n_messages == 6
    assert res.errors[0].startswith("event 4 (physicist, round 1): unparsable labels (missing")
    bad = [e for e in res.events if e.error]
    assert [(e.sender, e.round) for e in bad] == [("physicist", 1)]
    # the round-1 prompt shows the others' round-0 messages as context
    prompt = LLMBehaviourClassifier(llm).prompt_for([(i, e) for i, e in enumerate(trace.events)], 3)
    user = prompt[-1]["content"]
    assert "[physicist] I think the total is 15." in user and "[teacher] Let us look" in user
    assert "[statistician]" not in user


def test_llm_classifier_classify_many_is_one_call():
    traces = [_trace(HAND_TRACE[:3]), _trace(HAND_TRACE[3:6])]
    llm = FunctionLLM(lambda m: "question_answering: 1\nperspective_shift: 0\nconflict: 0\nreconciliation: 0")
    out = LLMBehaviourClassifier(llm).classify_many(traces)
    assert llm.batch_sizes == [6]
    assert [r.question_answering for r in out] == [3, 3]
    assert isinstance(out[0], BehaviourCounts) and out[0].classifier == "llm"


def test_llm_classifier_empty_trace_makes_no_call():
    llm = FunctionLLM(lambda m: "")
    res = LLMBehaviourClassifier(llm).classify(Trace())
    assert llm.calls == 0 and res.total == 0 and res.n_messages == 0


def test_big_five_order():
    assert BIG_FIVE == ("openness", "conscientiousness", "extraversion", "agreeableness", "neuroticism")


@pytest.mark.slow
def test_society_runs_on_the_embedded_model(embedded_llm):
    g = society_of_thought(2, rounds=1, params={"temperature": 0.7, "max_new_tokens": 12})
    res = Runtime(g, llm=embedded_llm, seed=0).run("What is 2 + 3?")
    assert [e.sender for e in res.trace] == ["statistician", "physicist", "aggregator"]
    assert res.trace[0].batch_size == 2
    counts = count_behaviours(res.trace)
    assert counts.n_messages == 2 and counts.errors == []


def test_demo_society_aggregator_reads_quotes_not_headers():
    """examples/specs/society.yaml (make demo-society): the aggregator gets the last round as a
    numbered list of quotes; with "### Message from" headers the embedded model echoed a header."""
    from pathlib import Path

    from societas.topology import GraphSpec

    spec = GraphSpec.from_yaml_file(Path(__file__).parents[2] / "examples" / "specs" / "society.yaml")
    llm = FunctionLLM(lambda messages: "Final answer: 0.05")
    res = Runtime(spec, llm=llm).run("A bat and a ball cost 1.10 dollars.")
    agg = [e for e in res.trace if e.sender == "aggregator"][0].prompt[-1]["content"]
    assert "### Message from" not in agg and agg.startswith("Task: A bat and a ball")
    assert [line.split(" said:")[0] for line in agg.splitlines() if ' said: "' in line] == [
        "1. sceptic",
        "2. intuitive",
        "3. teacher",
    ]
