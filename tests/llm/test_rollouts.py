"""societas.marl.llm.rollouts: traces of a real Runtime run on a tiny random Llama become
token samples whose recomputed log-probs equal those reported at generation."""

from __future__ import annotations

import pytest
import torch

from societas.agents.llm import FunctionLLM
from societas.marl.llm.rollouts import (
    LOGPROBS_KEY,
    SEGMENTS_KEY,
    TOKEN_IDS_KEY,
    MissingTokensError,
    RoleMap,
    TokenRecorder,
    TokenSample,
    collate,
    samples_from_trace,
    sequence_logprobs,
)
from societas.topology import Runtime
from societas.topology.graph import Graph
from societas.topology.trace import Trace, TraceEvent

torch.set_num_threads(1)

PARAMS = {"temperature": 1.0, "max_new_tokens": 7, "min_new_tokens": 2}


def _graph() -> Graph:
    nodes = [
        {"id": "prop", "role": "proposer", "prompt": "Propose a problem.", "params": PARAMS},
        {"id": "solve", "role": "solver", "prompt": "Solve the problem.", "params": PARAMS},
        {"id": "judge", "role": "judge", "prompt": "Judge the answer.", "params": PARAMS},
    ]
    return Graph.build("pjs", nodes, [("prop", "solve"), ("solve", "judge"), ("prop", "judge")])


class _Spy:
    """Keeps every completion the backend returned, in call order."""

    def __init__(self, llm):
        self.llm, self.name, self.seen = llm, llm.name, []

    def generate(self, prompts, params=None):
        outs = self.llm.generate(prompts, params)
        self.seen += [(p, c[0]) for p, c in zip(prompts, outs)]
        return outs


@pytest.fixture(scope="module")
def run(tiny_llm):
    spy = _Spy(tiny_llm)
    rec = TokenRecorder(spy)
    g = _graph()
    res = Runtime(g, llm=rec, seed=5, on_event=rec.on_event).run_many(["add two numbers", "sort a list"])
    return g, spy, [r.trace for r in res]


def test_role_masking_shared_policy_and_frozen_role(run, tiny_llm):
    g, _, traces = run
    rm = RoleMap.from_policies({"shared": ["proposer", "solver"]}).validate(g)
    samples = samples_from_trace(traces[0], rm, tiny_llm.tokenizer)
    assert [s.meta["sender"] for s in samples] == ["prop", "solve"]  # judge is frozen
    assert {s.policy for s in samples} == {"shared"}
    assert all(s.completion_mask == [1] * len(s.completion_ids) for s in samples)
    assert all(s.group_key == "add two numbers" for s in samples)
    # separate policies, one mapped by node id
    rm2 = RoleMap({"prop": "a", "judge": "b"}).validate(g)
    s2 = samples_from_trace(traces[0], rm2, tiny_llm.tokenizer)
    assert [(s.meta["sender"], s.policy) for s in s2] == [("prop", "a"), ("judge", "b")]
    assert collate(s2, 0, policies=rm2)["policy_index"].tolist() == [0, 1]


def test_completion_ids_are_what_the_backend_generated(run, tiny_llm):
    _, spy, traces = run
    rm = RoleMap({"proposer": "p", "solver": "p", "judge": "p"})
    for tr in traces:
        for s in samples_from_trace(tr, rm, tiny_llm.tokenizer):
            ev = tr[s.meta["event_index"]]
            (comp,) = [c for p, c in spy.seen if p == ev.prompt and c.text == ev.output]
            assert s.completion_ids == comp.token_ids and len(s.completion_ids) >= 2
            assert s.old_logprobs == comp.logprobs
            assert s.prompt_ids == tiny_llm.encode_prompts([ev.prompt])[0]


def test_sequence_logprobs_match_generation_and_padding_is_neutral(run, tiny_llm):
    _, _, traces = run
    rm = RoleMap({"proposer": "p", "solver": "p", "judge": "q"})
    samples = [s for tr in traces for s in samples_from_trace(tr, rm, tiny_llm.tokenizer)]
    assert len(samples) == 6
    assert len({len(s.prompt_ids) for s in samples}) > 1  # padding really happens
    pad = tiny_llm.tokenizer.pad_token_id
    batch = collate(samples, pad, policies=rm)
    with torch.no_grad():
        lp = sequence_logprobs(tiny_llm.model, batch)
    m = batch["completion_mask"]
    assert lp.shape == m.shape == batch["old_logprobs"].shape
    assert torch.allclose(lp * m, batch["old_logprobs"], atol=1e-4)
    # each sample alone (no padding at all) gives the same per-token log-probs
    for b, s in enumerate(samples):
        one = collate([s], pad)
        with torch.no_grad():
            lp1 = sequence_logprobs(tiny_llm.model, one)[0]
        n = len(s.completion_ids)
        assert lp1.shape[0] == n
        assert torch.allclose(lp1, lp[b, :n], atol=1e-5)
        assert torch.allclose(lp1, torch.tensor(s.old_logprobs), atol=1e-4)


def test_collate_layout(tiny_llm):
    a = TokenSample("p", [5, 6, 7], [8, 9], [1, 1], [-1.0, -2.0], "g")
    b = TokenSample("q", [4], [1, 2, 3], [1, 0, 1], [-0.5, 0.0, -0.25], "g")
    batch = collate([a, b], pad_id=0)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9, 0], [0, 0, 4, 1, 2, 3]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]]
    assert batch["position_ids"][1].tolist() == [0, 0, 0, 1, 2, 3]
    assert int(batch["completion_start"]) == 3
    assert batch["completion_ids"].tolist() == [[8, 9, 0], [1, 2, 3]]
    assert batch["completion_mask"].tolist() == [[1, 1, 0], [1, 0, 1]]
    assert batch["old_logprobs"].tolist() == [[-1.0, -2.0, 0.0], [-0.5, 0.0, -0.25]]
    assert batch["policy_index"].tolist() == [0, 1]
    c = TokenSample("p", [1], [2], [1], None, "g")
    assert "old_logprobs" not in collate([c], 0)
    with pytest.raises(ValueError, match="some samples have old_logprobs"):
        collate([a, c], 0)
    with pytest.raises(ValueError, match="not among"):
        collate([a], 0, policies=["q"])


def _event(sender="prop", role="proposer", **meta) -> TraceEvent:
    return TraceEvent(
        step=0,
        round=0,
        sender=sender,
        receivers=[],
        kind="agent",
        role=role,
        prompt=[{"role": "user", "content": "hi"}],
        output="x",
        meta=dict(meta),
    )


def test_foreign_segments_are_masked(tiny_llm):
    segs = [
        {"token_ids": [11, 12], "logprobs": [-1.0, -2.0], "generated": True},
        {"token_ids": [13, 14, 15], "generated": False},  # tool output spliced in
        {"token_ids": [16], "logprobs": [-3.0], "generated": True},
    ]
    tr = Trace([_event(**{SEGMENTS_KEY: segs})], {"task": "t"})
    (s,) = samples_from_trace(tr, RoleMap({"proposer": "p"}), tiny_llm.tokenizer)
    assert s.completion_ids == [11, 12, 13, 14, 15, 16]
    assert s.completion_mask == [1, 1, 0, 0, 0, 1]
    assert s.old_logprobs == [-1.0, -2.0, 0.0, 0.0, 0.0, -3.0]
    assert s.meta["token_source"] == "segments"


def test_missing_tokens_are_clear_errors(tiny_llm):
    g = _graph()
    res = Runtime(g, llm=FunctionLLM(lambda m: "fine"), seed=0).run("t")
    rm = RoleMap({"solver": "p"})
    with pytest.raises(MissingTokensError, match=r"sender 'solve'.*no token ids"):
        samples_from_trace(res.trace, rm, tiny_llm.tokenizer)
    # frozen-only map needs nothing
    assert samples_from_trace(res.trace, RoleMap({}), tiny_llm.tokenizer) == []
    # re-tokenising the text works without logprobs, and says so
    (s,) = samples_from_trace(res.trace, rm, tiny_llm.tokenizer, retokenize=True, require_logprobs=False)
    assert s.completion_ids == tiny_llm.tokenizer.encode("fine", add_special_tokens=False)
    assert s.old_logprobs is None and s.meta["token_source"] == "retokenized"
    with pytest.raises(MissingTokensError, match="no generation logprobs"):
        samples_from_trace(res.trace, rm, tiny_llm.tokenizer, retokenize=True)
    tr = Trace([_event(**{TOKEN_IDS_KEY: [1, 2], LOGPROBS_KEY: None})])
    with pytest.raises(MissingTokensError, match=r"no logprobs \(meta\['logprobs'\]\)"):
        samples_from_trace(tr, RoleMap({"prop": "p"}), tiny_llm.tokenizer)
    tr = Trace([_event(**{TOKEN_IDS_KEY: [1, 2], LOGPROBS_KEY: [-1.0]})])
    with pytest.raises(MissingTokensError, match="1 logprobs for 2 token ids"):
        samples_from_trace(tr, RoleMap({"prop": "p"}), tiny_llm.tokenizer)


def test_role_map_validation():
    g = _graph()
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        RoleMap({"solver": "nope"}, policies=["shared"])
    with pytest.raises(ValueError, match="role 'solver' is mapped twice"):
        RoleMap.from_policies({"a": ["solver"], "b": ["proposer", "solver"]})
    with pytest.raises(ValueError, match="'critic' is neither an agent node nor a role"):
        RoleMap({"critic": "a"}).validate(g)
    with pytest.raises(ValueError, match="node 'solve' is mapped twice"):
        RoleMap({"solve": "a", "solver": "b"}).validate(g)
    with pytest.raises(ValueError, match="unknown policy 'x'"):
        RoleMap({"solver": "a"}).index("x")
    rm = RoleMap({"solve": "a", "solver": "a"}).validate(g)
    assert rm.policies == ["a"] and rm.policy_for("judge", "judge") is None


def test_sequence_logprobs_carries_gradients(tiny_llm):
    s = TokenSample("p", [1, 2, 3], [4, 5], [1, 1], None, "g")
    lp = sequence_logprobs(tiny_llm.model, collate([s], 0))
    assert lp.shape == (1, 2) and lp.requires_grad
    lp.sum().backward()
    grads = [p.grad for p in tiny_llm.model.parameters() if p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)
    tiny_llm.model.zero_grad(set_to_none=True)
