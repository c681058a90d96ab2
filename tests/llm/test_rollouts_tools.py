"""Training samples from a tool-calling run: one sample per model turn; what a tool
returned sits in the next turn's prompt (never in a completion), so the loss never
trains on tool output; tool-call and router events give no sample."""

from __future__ import annotations

from societas.agents.llm import FunctionLLM
from societas.agents.tools import tool
from societas.marl.llm.rollouts import RoleMap, samples_from_trace
from societas.topology import GraphSpec, Runtime


@tool
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: what to look up
    """
    return "ZEBRA-SECRET-4471"


def test_tool_output_is_prompt_context_not_completion(tiny_llm):
    def fn(messages):
        if not any(m["role"] == "assistant" for m in messages):
            return '<tool_call>{"name": "lookup", "arguments": {"key": "k"}}</tool_call>'
        return "The value is known."

    spec = GraphSpec.from_data(
        {"name": "t", "nodes": [{"id": "solver", "role": "solver", "prompt": "Solve.", "tools": ["lookup"]}]}
    )
    res = Runtime(spec, llm=FunctionLLM(fn), tools=[lookup]).run("find k")
    assert [e.kind for e in res.trace] == ["agent", "tool_call", "agent"]
    rm = RoleMap.from_policies({"p": ["solver"]})
    samples = samples_from_trace(res.trace, rm, tiny_llm.tokenizer, retokenize=True, require_logprobs=False)
    assert len(samples) == 2  # the two model turns; the tool call itself is no sample
    tok = tiny_llm.tokenizer
    first, second = samples
    assert "ZEBRA" not in tok.decode(first.prompt_ids) + tok.decode(first.completion_ids)
    assert "ZEBRA-SECRET-4471" in tok.decode(second.prompt_ids)  # the tool's output is context...
    assert "ZEBRA" not in tok.decode(second.completion_ids)  # ...and never trained on
    assert tok.decode(second.completion_ids).strip() == "The value is known."
    assert tok.decode(first.completion_ids).startswith("<tool_call>")
    assert all(s.completion_mask == [1] * len(s.completion_ids) for s in samples)
