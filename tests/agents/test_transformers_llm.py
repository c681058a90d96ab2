"""TransformersLLM: the batched decode loop against independent references —
a full forward pass for log-probabilities and HF ``generate`` for greedy text."""

from __future__ import annotations

import re

import pytest
import torch
from pydantic import ValidationError

from societas.agents.llm import SamplingParams, load_llm

PROMPTS = [
    "What is 2+2?",
    "Name a colour.",
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}],
    "Write one sentence about the sea, please, in a calm tone.",
]


def _full_forward_logprobs(llm, prompt, tokens):
    ids = llm.encode_prompts([prompt])[0]
    x = torch.tensor([ids + tokens])
    with torch.no_grad():
        logits = llm.model(x).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    return [float(lp[len(ids) - 1 + i, t]) for i, t in enumerate(tokens)]


def test_logprobs_match_full_forward_pass(tiny_llm):
    outs = tiny_llm.generate(
        PROMPTS, SamplingParams(temperature=1.0, seed=1, max_new_tokens=12, logprobs=True)
    )
    for prompt, comps in zip(PROMPTS, outs):
        c = comps[0]
        assert len(c.logprobs) == len(c.token_ids) == c.usage.completion_tokens
        ref = _full_forward_logprobs(tiny_llm, prompt, c.token_ids)
        assert c.logprobs == pytest.approx(ref, abs=2e-4)


def test_greedy_batched_equals_hf_generate_one_by_one(tiny_llm):
    outs = tiny_llm.generate(PROMPTS, SamplingParams(temperature=0, max_new_tokens=10))
    for prompt, comps in zip(PROMPTS, outs):
        ids = torch.tensor([tiny_llm.encode_prompts([prompt])[0]])
        ref = tiny_llm.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=10,
            do_sample=False,
            eos_token_id=sorted(tiny_llm.eos_ids),
            pad_token_id=tiny_llm.tokenizer.pad_token_id,
        )[0, ids.shape[1] :].tolist()
        assert comps[0].token_ids == ref[: len(comps[0].token_ids)]
        assert len(comps[0].token_ids) == len(ref)


def test_per_row_params_in_one_call(tiny_llm):
    params = [
        SamplingParams(temperature=0, max_new_tokens=3),
        SamplingParams(temperature=0, max_new_tokens=7),
        SamplingParams(temperature=1.0, top_p=0.5, max_new_tokens=5, seed=3),
        SamplingParams(temperature=0.7, max_new_tokens=1, n=3, seed=4),
    ]
    calls = tiny_llm.calls
    outs = tiny_llm.generate(PROMPTS, params)
    assert tiny_llm.calls == calls + 1
    assert [len(o) for o in outs] == [1, 1, 1, 3]
    assert [s.sample_index for s in outs[3]] == [0, 1, 2]
    for comps, p in zip(outs, params):
        for c in comps:
            assert len(c.token_ids) <= p.max_new_tokens
            if c.finish_reason == "length":
                assert len(c.token_ids) == p.max_new_tokens


def test_seed_reproducible_and_samples_differ(tiny_llm):
    p = SamplingParams(temperature=1.0, max_new_tokens=8, seed=11, n=4)
    a = tiny_llm.generate(["hello"], p)[0]
    b = tiny_llm.generate(["hello"], p)[0]
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert len({tuple(c.token_ids) for c in a}) > 1  # n samples are not copies


def test_top_p_tiny_keeps_only_the_argmax(tiny_llm):
    greedy = tiny_llm.generate(["Tell me"], SamplingParams(temperature=0, max_new_tokens=6))[0][0]
    nucleus = tiny_llm.generate(
        ["Tell me"], SamplingParams(temperature=1.5, top_p=1e-6, max_new_tokens=6, seed=5)
    )[0][0]
    assert nucleus.token_ids == greedy.token_ids


@pytest.mark.slow
def test_embedded_model_answers_offline_and_stops(embedded_llm):
    out = embedded_llm.generate(
        ["Count from 1 to 10 separated by commas.", "What is the capital of France?"],
        [
            SamplingParams(temperature=0, max_new_tokens=40, stop=["5"]),
            SamplingParams(temperature=0, max_new_tokens=30),
        ],
    )
    counted = out[0][0]
    assert "5" not in counted.text and "4" in counted.text
    assert counted.finish_reason == "stop"
    assert "paris" in out[1][0].text.lower()
    assert out[1][0].usage.prompt_tokens > 5


@pytest.mark.slow
def test_embedded_reload_from_the_cache_ties_the_head(embedded_dir):
    from societas.agents.llm.transformers_llm import TransformersLLM

    llm = TransformersLLM(embedded_dir)
    assert llm.model.config.tie_word_embeddings
    # the tied head is the embedding matrix, not a separate (missing) tensor
    assert torch.equal(llm.model.lm_head.weight, llm.model.model.embed_tokens.weight)


def test_load_llm_shares_instances_and_rejects_bad_uris(tmp_path, monkeypatch):
    from societas.agents.llm import FunctionLLM, UnknownLLM, clear_cache
    from societas.agents.llm import loading as llm_loading

    # a private cache, so that clearing it leaves the models other tests share alone
    monkeypatch.setattr(llm_loading, "_CACHE", {})
    a = load_llm("function:tests.agents.test_transformers_llm:_echo")
    assert a is load_llm("function:tests.agents.test_transformers_llm:_echo")
    assert isinstance(a, FunctionLLM)
    assert a.generate(["ping"])[0][0].text == "echo ping"
    assert load_llm("function:tests.agents.test_transformers_llm:_echo", shared=False) is not a
    # once the cache is cleared, the same URI builds a new shared instance
    clear_cache()
    b = load_llm("function:tests.agents.test_transformers_llm:_echo")
    assert b is not a and b is load_llm("function:tests.agents.test_transformers_llm:_echo")
    assert b.generate(["pong"])[0][0].text == "echo pong"
    for bad, message in [
        ("", "an LLM URI must be a non-empty string, got ''"),
        ("nope", "unknown LLM 'nope'; expected 'embedded' or one of hf:"),
        ("openai:http://x", "openai URI must be openai:URL#MODEL, got 'openai:http://x'"),
        ("function:nomodule", "function URI must be function:MODULE:ATTR, got 'function:nomodule'"),
        ("weird:thing", "unknown LLM scheme 'weird' in 'weird:thing'"),
    ]:
        with pytest.raises(UnknownLLM, match="^" + re.escape(message)):
            load_llm(bad)
    with pytest.raises(FileNotFoundError, match=f"^no model at {re.escape(str(tmp_path / 'missing'))} "):
        load_llm(f"hf:{tmp_path / 'missing'}")
    with pytest.raises(
        FileNotFoundError, match=f"^gguf: no such file {re.escape(str(tmp_path / 'missing.gguf'))}$"
    ):
        load_llm(f"gguf:{tmp_path / 'missing.gguf'}")


def _echo(messages):
    return "echo " + messages[-1]["content"]


def test_min_new_tokens_suppresses_end_of_sequence(tiny_llm):
    # Make EOS the model's favourite token: without min_new_tokens every answer is EOS at once.
    eos = sorted(tiny_llm.eos_ids)[0]
    head = tiny_llm.model.lm_head
    saved = head.weight.data.clone()
    try:
        head.weight.data[eos] = head.weight.data.abs().max() * 50 * torch.sign(head.weight.data[eos] + 1e-9)
        short = tiny_llm.generate(["hi"], SamplingParams(temperature=0, max_new_tokens=10))[0][0]
        assert short.token_ids == [eos] and short.finish_reason == "stop"
        long = tiny_llm.generate(["hi"], SamplingParams(temperature=0, max_new_tokens=10, min_new_tokens=6))[
            0
        ][0]
        assert len(long.token_ids) == 7 and long.token_ids[-1] == eos and eos not in long.token_ids[:6]
    finally:
        head.weight.data.copy_(saved)
    with pytest.raises(ValidationError, match=r"min_new_tokens \(5\) exceeds max_new_tokens \(3\)"):
        SamplingParams(max_new_tokens=3, min_new_tokens=5)


def test_grouped_query_sdpa_matches_eager_attention_with_padding(embedded_dir):
    """The KV-repeat-free attention gives the reference (eager) logits on a
    left-padded batch, prefill and cached decoding alike."""
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    from societas.agents.llm.gqa_attention import use_gqa_sdpa

    torch.manual_seed(1)
    cfg = LlamaConfig(
        vocab_size=300,
        hidden_size=96,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    fast = LlamaForCausalLM(cfg).eval()
    ref = LlamaForCausalLM(cfg).eval()
    ref.load_state_dict(fast.state_dict())
    ref.set_attn_implementation("eager")
    fast.set_attn_implementation("sdpa")
    assert use_gqa_sdpa(fast) and fast.config._attn_implementation == "societas_gqa_sdpa"
    ids = torch.randint(3, 300, (3, 12))
    attn = torch.ones(3, 12, dtype=torch.long)
    attn[0, :5] = 0
    attn[2, :2] = 0
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        outs = []
        for m in (fast, ref):
            o = m(
                input_ids=ids,
                attention_mask=attn,
                position_ids=pos,
                past_key_values=DynamicCache(),
                use_cache=True,
            )
            step = m(
                input_ids=ids[:, -1:],
                attention_mask=torch.cat([attn, torch.ones(3, 1, dtype=torch.long)], 1),
                position_ids=pos[:, -1:] + 1,
                past_key_values=o.past_key_values,
                use_cache=True,
            )
            outs.append((o.logits, step.logits))
    keep = attn.bool()
    assert torch.allclose(outs[0][0][keep], outs[1][0][keep], atol=1e-5)
    assert torch.allclose(outs[0][1], outs[1][1], atol=1e-5)


def test_identical_prompts_share_one_prefill_and_match_separate_calls(tiny_llm):
    prompts = [PROMPTS[0], PROMPTS[1], PROMPTS[0], PROMPTS[0]]
    p = SamplingParams(temperature=1.0, max_new_tokens=9, seed=21, logprobs=True)
    before = tiny_llm.prefill_rows
    together = tiny_llm.generate(prompts, p)
    assert tiny_llm.prefill_rows - before == 2  # two distinct prompts encoded
    # each row equals the same prompt generated on its own (no sharing there)
    for i, prompt in enumerate(prompts):
        alone = tiny_llm.generate([prompt], p)[0][0]
        assert together[i][0].token_ids == alone.token_ids
        assert together[i][0].logprobs == pytest.approx(alone.logprobs, abs=1e-4)
    # n samples of one prompt: one prefill, distinct samples, exact log-probs
    before = tiny_llm.prefill_rows
    outs = tiny_llm.generate(
        [PROMPTS[3]], SamplingParams(temperature=1.0, max_new_tokens=8, seed=5, n=4, logprobs=True)
    )[0]
    assert tiny_llm.prefill_rows - before == 1
    assert len({tuple(c.token_ids) for c in outs}) > 1
    for c in outs:
        assert c.logprobs == pytest.approx(
            _full_forward_logprobs(tiny_llm, PROMPTS[3], c.token_ids), abs=2e-4
        )


def test_distinct_prompts_with_a_common_prefix_encode_it_once_and_match_separate_calls(tiny_llm):
    system = "You solve problems with tools. " * 16  # the system prompt and tool schemas agents share
    prompts = [
        [{"role": "system", "content": system}, {"role": "user", "content": q}]
        for q in ("What is 2+2?", "Name a colour, any colour at all.", "Sort [3, 1, 2].", "What is 2+2?")
    ]
    p = SamplingParams(temperature=1.0, max_new_tokens=9, seed=3, logprobs=True)
    ids = tiny_llm.encode_prompts(prompts[:3])
    common = next(i for i in range(min(map(len, ids))) if len({x[i] for x in ids}) > 1)
    assert common >= tiny_llm.min_shared_prefix
    before = tiny_llm.prefix_tokens_saved
    together = tiny_llm.generate(prompts, p)
    assert tiny_llm.prefix_tokens_saved - before == common * 2  # three distinct prompts, the prefix once
    for i, prompt in enumerate(prompts):
        alone = tiny_llm.generate([prompt], p)[0][0]
        assert together[i][0].token_ids == alone.token_ids
        assert together[i][0].logprobs == pytest.approx(alone.logprobs, abs=1e-4)
    # with sharing switched off the batch gives the same samples
    old, tiny_llm.min_shared_prefix = tiny_llm.min_shared_prefix, 10**9
    try:
        plain = tiny_llm.generate(prompts, p)
    finally:
        tiny_llm.min_shared_prefix = old
    assert [c[0].token_ids for c in plain] == [c[0].token_ids for c in together]
