"""Termination conditions: what each one decides, how they combine, their data form and its errors."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import BaseModel, ValidationError, field_validator

from societas.topology.conditions import (
    AllOf,
    AnyOf,
    Condition,
    ConditionError,
    ConditionView,
    FunctionCondition,
    MaxMessages,
    MaxSteps,
    MaxTokens,
    TextMention,
    Timeout,
    check_condition_data,
    condition_from_data,
)
from societas.topology.errors import FieldProblem, SpecError, spec_error_from_validation
from societas.topology.trace import TraceEvent


def ev(sender: str, output: str, *, kind: str = "agent", step: int = 0, tokens=(0, 0), **meta) -> TraceEvent:
    return TraceEvent(
        step=step,
        round=0,
        sender=sender,
        receivers=[],
        kind=kind,  # type: ignore[arg-type]
        role=None,
        prompt=[],
        output=output,
        prompt_tokens=tokens[0],
        completion_tokens=tokens[1],
        meta=dict(meta),
    )


def view(events=(), new=None, **kw) -> ConditionView:
    events = list(events)
    return ConditionView(events=events, new_events=events if new is None else list(new), **kw)


# Importable from this module for the function-ref round trip.
def stop_when_flag(v: ConditionView) -> bool:
    return bool(v.state.get("flag"))


# ---------------------------------------------------------------------------
# the view
# ---------------------------------------------------------------------------


def test_messages_keep_output_kinds_and_drop_partial_turns():
    events = [
        ev("a", "1"),
        ev("b", "2", kind="function"),
        ev("c", "3", kind="tool"),
        ev("d", "4", kind="interrupt"),
        ev("e", "5", kind="graph"),
        ev("a", "thinking", partial=True),
        ev("a", "not partial", partial=False),
        ev("x", "control", kind="router"),
    ]
    v = view(events)
    assert [e.output for e in v.messages] == ["1", "2", "3", "4", "5", "not partial"]


def test_tokens_sum_prompt_and_completion_of_all_events():
    v = view([ev("a", "x", tokens=(10, 5)), ev("b", "y", tokens=(3, 2), partial=True)], new=[])
    assert v.tokens == 20


# ---------------------------------------------------------------------------
# each condition
# ---------------------------------------------------------------------------


def test_text_mention_looks_at_new_outputs_only():
    old = ev("critic", "FINAL ANSWER: 3", step=0)
    new = ev("critic", "keep going", step=1)
    c = TextMention("FINAL ANSWER")
    assert not c.check(view([old, new], new=[new]))
    assert c.check(view([old, new], new=[old]))


def test_text_mention_filters_by_sender_and_skips_partial_turns():
    c = TextMention("DONE", sources=["critic"])
    assert not c.check(view([ev("solver", "DONE")]))
    assert c.check(view([ev("solver", "x"), ev("critic", "we are DONE")]))
    assert not c.check(view([ev("critic", "DONE", partial=True)]))
    assert c.reason(view([ev("critic", "DONE")])) == "critic mentioned 'DONE'"


def test_counting_conditions_hold_at_their_threshold():
    assert not MaxSteps(3).check(view(steps=2)) and MaxSteps(3).check(view(steps=3))
    msgs = [ev("a", "x"), ev("a", "y", partial=True), ev("b", "z")]
    assert not MaxMessages(3).check(view(msgs)) and MaxMessages(2).check(view(msgs))
    toks = [ev("a", "x", tokens=(40, 59))]
    assert not MaxTokens(100).check(view(toks)) and MaxTokens(99).check(view(toks))
    assert not Timeout(2).check(view(elapsed_s=1.99)) and Timeout(2).check(view(elapsed_s=2.0))


def test_reason_says_why_and_is_none_when_not_holding():
    assert MaxSteps(3).reason(view(steps=2)) is None
    assert MaxSteps(3).reason(view(steps=4)) == "4 steps done (max_steps 3)"
    assert "max_tokens 5" in (MaxTokens(5).reason(view([ev("a", "x", tokens=(5, 0))])) or "")
    both = MaxSteps(1) & Timeout(1)
    assert both.reason(view(steps=1, elapsed_s=0.5)) is None
    assert (
        both.reason(view(steps=1, elapsed_s=1.5))
        == "1 steps done (max_steps 1) and 1.5 s elapsed (timeout_s 1)"
    )


def test_function_condition_passes_the_view_and_returns_its_answer():
    seen = []

    def fn(v: ConditionView) -> bool:
        seen.append(v.steps)
        return v.steps > 1

    c = FunctionCondition(fn)
    assert c.check(view(steps=1)) is False
    assert c.check(view(steps=2)) is True
    assert seen == [1, 2]


def test_function_condition_raising_names_the_function_and_the_exception():
    def explode(v: ConditionView) -> bool:
        raise KeyError("score")

    with pytest.raises(ConditionError) as info:
        FunctionCondition(explode, ref="mypkg.stops:explode").check(view())
    assert "mypkg.stops:explode" in str(info.value) and "KeyError" in str(info.value)
    assert "score" in str(info.value)
    # Without a ref the qualified name identifies it.
    with pytest.raises(ConditionError, match="explode"):
        FunctionCondition(explode).check(view())


@pytest.mark.parametrize("value", [1, None, "yes", 0.0])
def test_function_condition_non_bool_answer_is_an_error(value):
    c = FunctionCondition(lambda v: value, ref="pkg:f")
    with pytest.raises(ConditionError, match=rf"pkg:f returned {type(value).__name__}.*not a bool"):
        c.check(view())


# ---------------------------------------------------------------------------
# combinations, equality, repr
# ---------------------------------------------------------------------------


def test_or_and_and_combine_and_flatten():
    a, b, c, d = MaxSteps(1), MaxMessages(2), MaxTokens(3), Timeout(4)
    assert a | b | c == AnyOf(a, b, c)
    assert (a | b) | (c | d) == AnyOf(a, b, c, d)
    assert a & b & c == AllOf(a, b, c)
    mixed = a | (b & c)
    assert mixed == AnyOf(a, AllOf(b, c))
    assert isinstance(mixed.conditions[1], AllOf)  # type: ignore[attr-defined]
    assert (a | b) & c == AllOf(AnyOf(a, b), c)


def test_any_and_all_decide():
    c = MaxSteps(5) | TextMention("STOP")
    assert c.check(view(steps=5))
    assert c.check(view([ev("a", "STOP")], steps=1))
    assert not c.check(view([ev("a", "go")], steps=1))
    d = MaxSteps(2) & MaxMessages(2)
    assert not d.check(view([ev("a", "x")], steps=3))
    assert d.check(view([ev("a", "x"), ev("b", "y")], steps=2))


def test_equality_and_hash_are_by_value():
    assert MaxSteps(3) == MaxSteps(3) and MaxSteps(3) != MaxSteps(4)
    assert MaxSteps(3) != MaxMessages(3)
    assert TextMention("x", ["a"]) == TextMention("x", ("a",))
    assert TextMention("x") != TextMention("x", ["a"])
    assert Timeout(30) == Timeout(30.0)
    assert len({MaxSteps(3), MaxSteps(3), AnyOf(MaxSteps(3))}) == 2
    assert (MaxSteps(1) | MaxSteps(2)) != (MaxSteps(2) | MaxSteps(1))  # order is kept


def test_repr_is_readable():
    c = TextMention("DONE", sources=["critic"]) | MaxSteps(10) | (MaxTokens(500) & Timeout(30))
    assert (
        repr(c) == "TextMention('DONE', sources=['critic']) | MaxSteps(10) | (MaxTokens(500) & Timeout(30))"
    )
    assert repr(AnyOf(MaxSteps(1))) == "AnyOf(MaxSteps(1))"
    assert repr(FunctionCondition(stop_when_flag, ref="x.y:z")) == "FunctionCondition(x.y:z)"


def test_or_with_something_else_is_a_type_error():
    with pytest.raises(TypeError):
        MaxSteps(1) | 3  # type: ignore[operator]


@pytest.mark.parametrize(
    ("make", "param"),
    [
        (lambda: MaxSteps(0), "n"),
        (lambda: MaxSteps(True), "n"),
        (lambda: MaxMessages(2.0), "n"),  # type: ignore[arg-type]
        (lambda: MaxTokens(-5), "n"),
        (lambda: Timeout(0), "seconds"),
        (lambda: Timeout(math.inf), "seconds"),
        (lambda: Timeout(math.nan), "seconds"),
        (lambda: Timeout(False), "seconds"),
        (lambda: TextMention(""), "text"),
        (lambda: TextMention("x", sources=[]), "sources"),
        (lambda: TextMention("x", sources="critic"), "sources"),
        (lambda: FunctionCondition(42), "fn"),  # type: ignore[arg-type]
        (lambda: FunctionCondition(stop_when_flag, ref="not a ref"), "ref"),
        (lambda: AnyOf(), "at least one"),
        (lambda: AllOf(MaxSteps(1), "x"), "conditions"),  # type: ignore[arg-type]
    ],
)
def test_bad_constructor_arguments_name_the_parameter(make, param):
    with pytest.raises(ValueError, match=param):
        make()


# ---------------------------------------------------------------------------
# data form
# ---------------------------------------------------------------------------

ALL_KINDS = [
    TextMention("FINAL ANSWER"),
    TextMention("X", sources=["critic", "judge"]),
    MaxSteps(10),
    MaxMessages(20),
    MaxTokens(5000),
    Timeout(30),
    Timeout(0.25),
    FunctionCondition(stop_when_flag, ref=f"{__name__}:stop_when_flag"),
    MaxSteps(3) | TextMention("DONE"),
    MaxSteps(3) & MaxTokens(9),
    AnyOf(AllOf(MaxSteps(1), AnyOf(Timeout(2), MaxMessages(4))), TextMention("q", ["a"])),
    AnyOf(MaxSteps(7)),
]


@pytest.mark.parametrize("cond", ALL_KINDS, ids=repr)
def test_round_trip_through_data_and_json(cond: Condition):
    data = cond.to_data()
    again = condition_from_data(json.loads(json.dumps(data)))
    assert again == cond
    assert again.to_data() == data
    assert check_condition_data(data) == data  # the normalised form is the written form


def test_data_form_is_exactly_as_documented():
    c = TextMention("X", sources=["critic"]) | MaxSteps(10) | (MaxTokens(5000) & Timeout(30))
    assert c.to_data() == {
        "any": [
            {"mention": "X", "from": ["critic"]},
            {"max_steps": 10},
            {"all": [{"max_tokens": 5000}, {"timeout_s": 30.0}]},
        ]
    }


def test_function_ref_imports_module_attr_and_works():
    c = condition_from_data({"function": f"{__name__}:stop_when_flag"})
    assert isinstance(c, FunctionCondition) and c.fn is stop_when_flag
    assert c.check(view(state={"flag": True})) and not c.check(view(state={}))


def test_function_ref_through_resolve():
    registry = {"my_stop": stop_when_flag}
    c = condition_from_data({"any": [{"function": "my_stop"}]}, resolve=registry.__getitem__)
    assert c == AnyOf(FunctionCondition(stop_when_flag, ref="my_stop"))
    assert condition_from_data(c.to_data(), resolve=registry.__getitem__) == c
    with pytest.raises(SpecError) as info:
        condition_from_data({"any": [{"max_steps": 1}, {"function": "other"}]}, resolve=registry.__getitem__)
    assert info.value.path == "any[1].function"
    assert "'other'" in info.value.message and "KeyError" in info.value.message


def test_bare_function_name_without_resolve_says_to_give_it_to_the_runtime():
    with pytest.raises(SpecError) as info:
        condition_from_data({"function": "my_stop"}, prefix=("until",))
    assert info.value.path == "until.function"
    assert "'my_stop'" in info.value.message and "Runtime" in info.value.message


def test_unimportable_and_non_callable_refs_are_errors():
    with pytest.raises(SpecError, match="cannot import 'no_such_module_xyz:f'"):
        condition_from_data({"function": "no_such_module_xyz:f"})
    with pytest.raises(SpecError, match="not a function"):
        condition_from_data({"function": "math:pi"})


def test_function_condition_without_ref_cannot_be_saved():
    with pytest.raises(ValueError, match="no ref"):
        FunctionCondition(lambda v: True).to_data()
    with pytest.raises(ValueError, match="no ref"):
        (MaxSteps(1) | FunctionCondition(lambda v: True)).to_data()


def test_check_normalises_from_and_timeout():
    assert check_condition_data({"mention": "X", "from": "critic"}) == {"mention": "X", "from": ["critic"]}
    assert check_condition_data({"mention": "X", "from": None}) == {"mention": "X"}
    assert check_condition_data({"timeout_s": 30}) == {"timeout_s": 30.0}
    assert check_condition_data(MaxSteps(4) | Timeout(1)) == {"any": [{"max_steps": 4}, {"timeout_s": 1.0}]}


@pytest.mark.parametrize(
    ("data", "path", "words"),
    [
        ("FINAL", (), "mapping with one key"),
        ({}, (), "empty condition"),
        ({"max_step": 3}, ("max_step",), "unknown condition"),
        ({"max_steps": 3, "timeout_s": 2}, (), "one condition per mapping"),
        ({"max_steps": 0}, ("max_steps",), "integer >= 1"),
        ({"max_steps": True}, ("max_steps",), "integer >= 1"),
        ({"max_tokens": "100"}, ("max_tokens",), "integer >= 1"),
        ({"max_messages": 2.5}, ("max_messages",), "integer >= 1"),
        ({"timeout_s": -1}, ("timeout_s",), "seconds > 0"),
        ({"timeout_s": float("inf")}, ("timeout_s",), "seconds > 0"),
        ({"mention": ""}, ("mention",), "non-empty string"),
        ({"mention": "x", "from": []}, ("from",), "empty list"),
        ({"mention": "x", "from": ["a", 3]}, ("from", 1), "node id"),
        ({"max_steps": 3, "from": ["a"]}, ("from",), "'from' goes with 'mention'"),
        ({"from": ["a"]}, ("from",), "'from' goes with 'mention'"),
        ({"function": "a b"}, ("function",), "package.module:attr"),
        ({"any": []}, ("any",), "empty list"),
        ({"all": {"max_steps": 1}}, ("all",), "list of conditions"),
        ({"any": [{"max_steps": 1}, {"max_steps": 0}]}, ("any", 1, "max_steps"), "integer >= 1"),
        ({"any": [{"all": [{"timeout_s": 1}, {"bogus": 1}]}]}, ("any", 0, "all", 1, "bogus"), "unknown"),
        ({3: "x"}, (), "keys are strings"),
    ],
)
def test_check_reports_the_path_of_the_first_problem(data, path, words):
    with pytest.raises(FieldProblem) as info:
        check_condition_data(data)
    assert info.value.subpath == path
    assert words in info.value.message
    # condition_from_data reports the same problem as a SpecError with the path written out.
    with pytest.raises(SpecError) as spec_info:
        condition_from_data(data, prefix=("until",))
    assert spec_info.value.message == info.value.message


def test_check_does_not_import():
    # A ref to a module that does not exist passes the shape check.
    assert check_condition_data({"function": "no_such_module_xyz:f"}) == {"function": "no_such_module_xyz:f"}


class _Spec(BaseModel):
    until: object = None

    @field_validator("until")
    @classmethod
    def _check(cls, v: object) -> object:
        return None if v is None else check_condition_data(v)


def test_a_spec_field_reports_the_full_path():
    with pytest.raises(ValidationError) as info:
        _Spec.model_validate({"until": {"any": [{"mention": "X"}, {"max_steps": 0}]}})
    err = spec_error_from_validation(info.value, _Spec)
    assert str(err) == "until.any[1].max_steps: must be an integer >= 1, got int 0"
    assert _Spec.model_validate({"until": {"timeout_s": 3}}).until == {"timeout_s": 3.0}
