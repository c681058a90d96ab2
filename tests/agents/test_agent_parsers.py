"""Agent prompt assembly, batching across agents, the role library and parsers."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from societas.agents import (
    Agent,
    FunctionLLM,
    SamplingParams,
    act_batch,
    answers_match,
    extract_code,
    extract_code_blocks,
    extract_final_answer,
    extract_yaml_block,
    known_roles,
    normalize_answer,
    numeric_answer,
    role_prompt,
)
from societas.agents.llm.base import broadcast_params, normalize_prompt, truncate_at_stop

ROLES = [
    "orchestrator",
    "planner",
    "coder",
    "tester",
    "debugger",
    "proposer",
    "solver",
    "speaker",
    "listener",
    "persona",
    "aggregator",
]


def test_role_library_has_every_paper_role():
    for r in ROLES:
        assert len(role_prompt(r)) > 40
    assert role_prompt("coding") == role_prompt("coder")  # AgentConductor alias
    with pytest.raises(KeyError, match="unknown role 'wizard'"):
        role_prompt("wizard")
    assert set(ROLES) <= set(known_roles())


def test_agent_prompt_is_explicit_and_parsed():
    seen = []
    llm = FunctionLLM(lambda m: (seen.append(m), "Thinking...\nFinal answer: **42**.")[1])
    a = Agent("solver_1", llm, role="solver", parser="final_answer", persona="You are bold.")
    reply = a.act("What is 6*7?", {"planner": "multiply", "checker": "use ints"})
    assert reply.parsed == "42"
    sys, user = seen[0]
    assert (
        sys["role"] == "system"
        and sys["content"].startswith(role_prompt("solver"))
        and "You are bold." in sys["content"]
    )
    assert (
        user["content"]
        == "What is 6*7?\n\n### Message from planner\nmultiply\n\n### Message from checker\nuse ints"
    )


def test_agent_needs_role_or_prompt_and_valid_template():
    llm = FunctionLLM(lambda m: "x")
    with pytest.raises(ValueError, match="needs a role or a system_prompt"):
        Agent("a", llm)
    a = Agent("a", llm, system_prompt="s", template="{task} {nope}")
    with pytest.raises(ValueError, match="template"):
        a.build_prompt("t")


def test_act_batch_one_call_per_llm():
    l1 = FunctionLLM(lambda m: "one")
    l2 = FunctionLLM(lambda m: "two")
    agents = [Agent(f"a{i}", l1 if i % 2 else l2, role="solver") for i in range(6)]
    replies = act_batch([(a, "t", None) for a in agents])
    assert [r.text for r in replies] == ["two", "one"] * 3
    assert l1.calls == 1 and l1.batch_sizes == [3]
    assert l2.calls == 1 and l2.batch_sizes == [3]


def test_function_llm_params_n_stop_and_budget():
    llm = FunctionLLM(lambda m, p, s: f"sample {s} a b c STOP tail")
    out = llm.generate(["x", "y"], [SamplingParams(n=2, stop=["STOP"]), SamplingParams(max_new_tokens=3)])
    assert [c.text for c in out[0]] == ["sample 0 a b c ", "sample 1 a b c "]
    assert out[1][0].text == "sample 0 a" and out[1][0].finish_reason == "length"
    with pytest.raises(ValueError, match="exactly one"):
        FunctionLLM()
    with pytest.raises(TypeError, match="returned int"):
        FunctionLLM(lambda m: 3).generate(["x"])


def test_prompt_and_params_validation():
    assert normalize_prompt("hi") == [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError, match="unknown role"):
        normalize_prompt([{"role": "wizard", "content": "x"}])
    with pytest.raises(ValueError, match="at least one"):
        normalize_prompt([])
    with pytest.raises(ValueError, match="2 SamplingParams for 3 prompts"):
        broadcast_params([SamplingParams(), SamplingParams()], 3)
    with pytest.raises(ValidationError, match=r"temperature\n  Input should be greater than or equal to 0"):
        SamplingParams(temperature=-1)
    assert truncate_at_stop("abc<END>def<X>", ["<X>", "<END>"]) == ("abc", True)


def test_code_parsers():
    text = "Here:\n```python\ndef f():\n    return 1\n```\nand\n```py\ndef g(): pass\n```\n"
    assert extract_code_blocks(text, "python") == ["def f():\n    return 1", "def g(): pass"]
    assert extract_code(text) == "def g(): pass"
    assert extract_code("```\nx = 1\n```") == "x = 1"
    assert extract_code("Sure! def add(a, b):\n    return a+b") is None  # def not at a line start
    assert extract_code("I think:\ndef add(a, b):\n    return a+b") == "def add(a, b):\n    return a+b"
    assert extract_code("```python\ndef cut(x):\n    return") == "def cut(x):\n    return"  # unterminated
    assert extract_code("no code here") is None


def test_yaml_and_final_answer_parsers():
    t = "```yaml\na: 1\n```\ntext\n```yml\nlayers: []\n```"
    assert extract_yaml_block(t) == "layers: []"
    assert extract_yaml_block("none") is None
    assert extract_final_answer("so... Final answer: 12 apples.") == "12 apples"
    assert extract_final_answer("x \\boxed{\\frac{1}{2}} y") == "\\frac{1}{2}"
    assert extract_final_answer("work\n#### 1,000") == "1,000"
    assert extract_final_answer("Answer: Paris\nmore") == "Paris"
    assert extract_final_answer("Final answer: 3\nFinal answer: 5") == "5"
    assert extract_final_answer("no answer") is None
    assert normalize_answer("1,000.50") == "1000.5" and normalize_answer("$5") == "5"
    assert normalize_answer("The Eiffel Tower!") == "eiffel tower"
    assert answers_match("5.0", "5") and not answers_match("", "") and not answers_match("5", "6")


def test_numeric_answers_match_with_units_and_equations():
    assert answers_match("18 shells", "18") and answers_match("15 + 1 = 16", "16")
    assert answers_match("$1,200", "1200 dollars") and answers_match("12 apples left", "12.0")
    assert not answers_match("18 shells", "19") and not answers_match("3 bags of 4", "12")
    assert not answers_match("between 3 and 4", "4") and not answers_match("15 + 1", "16")
    assert (
        numeric_answer("Paris") is None and numeric_answer("40%") == 40.0 and numeric_answer("-2.5 m") == -2.5
    )
    assert answers_match("Paris", "paris!")  # non-numeric answers keep exact match
