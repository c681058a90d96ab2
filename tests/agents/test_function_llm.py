"""FunctionLLM: a callable as a model; replies cut at max_new_tokens keep their whitespace."""

from __future__ import annotations

from societas.agents.llm import FunctionLLM, SamplingParams

CODE = "def f(x):\n    if x:\n\treturn 1\n    return 2\n"


def _reply(text: str, max_new_tokens: int, **kwargs):
    llm = FunctionLLM(lambda messages: text)
    return llm.generate(
        [[{"role": "user", "content": "go"}]], SamplingParams(max_new_tokens=max_new_tokens, **kwargs)
    )[0][0]


def test_truncation_keeps_newlines_and_indentation():
    out = _reply(CODE, 5)  # words: def, f(x):, if, x:, return | 1 ...
    assert out.text == "def f(x):\n    if x:\n\treturn"
    assert out.finish_reason == "length"
    assert out.usage.completion_tokens == 5


def test_truncation_keeps_leading_whitespace_and_drops_only_the_tail():
    out = _reply("\n\n  alpha  beta\n\ngamma delta", 3)
    assert out.text == "\n\n  alpha  beta\n\ngamma"
    assert out.finish_reason == "length"


def test_reply_within_the_budget_is_returned_verbatim():
    out = _reply(CODE, 8)  # exactly 8 words: nothing is cut, trailing newline kept
    assert out.text == CODE
    assert out.finish_reason == "stop"
    assert out.usage.completion_tokens == 8


def test_stop_string_applies_before_the_word_budget():
    out = _reply("one two\nSTOP three four five", 4, stop=["STOP"])
    assert out.text == "one two\n"
    assert out.finish_reason == "stop"
