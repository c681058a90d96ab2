"""Training precision: GRPO's small updates survive only in float32 weights.

A bf16 model trained as it is loses almost every update at GRPO's learning
rate (1e-6 against bf16's 8-bit mantissa); ``GRPOConfig.precision`` keeps
float32 master weights (``fp32``, and ``bf16-mixed`` with bf16 autocast, the
CUDA default), which take the update that float32 training takes. These run
the CUDA code with ``device="cpu"`` (CPU autocast), as the GPU check does.
"""

from __future__ import annotations

import copy

import pytest
import torch

from societas.agents import SamplingParams
from societas.agents.llm import load_llm
from societas.agents.llm.transformers_llm import TransformersLLM
from societas.marl.llm.backend import Backend
from societas.marl.llm.loop import TrainConfig, train
from societas.marl.llm.rollouts import TokenSample
from societas.marl.llm.trainer import GRPOConfig, PolicyTrainer, resolve_precision
from tests.llm.test_loop import CountA

torch.set_num_threads(1)


def _samples(vocab: int) -> tuple[list[TokenSample], torch.Tensor, list[int]]:
    """Eight fixed samples in two groups of four, with rewards that differ within each group."""
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(8):
        prompt = torch.randint(3, vocab, (6,), generator=g).tolist()
        completion = torch.randint(3, vocab, (5,), generator=g).tolist()
        out.append(TokenSample("p", prompt, completion, [1] * 5, None, str(i // 4)))
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.2, 0.0, 1.0, 0.3, 0.9])
    return out, rewards, [i // 4 for i in range(8)]


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().float().flatten() for p in model.parameters()])


def _step(model, tok, precision: str) -> tuple[PolicyTrainer, torch.Tensor]:
    """One GRPO step at lr 1e-6 on a copy of ``model``: the trainer and the update (float32)."""
    model = copy.deepcopy(model)
    tr = PolicyTrainer(model, tok, GRPOConfig(lr=1e-6, precision=precision, seed=0))
    before = _flat(tr.model)
    samples, rewards, groups = _samples(tok.vocab_size)
    tr.step(samples, rewards, groups)
    return tr, _flat(tr.model) - before


@pytest.fixture(scope="module")
def bf16_model(tiny_llm):
    return copy.deepcopy(tiny_llm.model).to(torch.bfloat16)


def test_bf16_weights_lose_the_update_and_float32_master_weights_take_it(bf16_model, tiny_llm):
    tok = tiny_llm.tokenizer
    pure, d_pure = _step(bf16_model, tok, "bf16")
    assert {p.dtype for p in pure.model.parameters()} == {torch.bfloat16}
    assert (d_pure != 0).float().mean() < 0.05  # nearly every update rounded away

    ref, d_ref = _step(bf16_model, tok, "fp32")  # the same starting weights, float32 throughout
    mixed, d_mixed = _step(bf16_model, tok, "bf16-mixed")
    for tr in (ref, mixed):
        assert {p.dtype for p in tr.model.parameters()} == {torch.float32}
        assert tr.model.lm_head.weight is tr.model.model.embed_tokens.weight  # still tied
    assert (d_ref != 0).float().mean() > 0.95
    assert (d_mixed != 0).float().mean() > 0.95
    # AdamW's first step is lr * sign(gradient): bf16 autocast gives the float32 gradient's
    # direction, so the two updates agree (the bf16 weights' update does not).
    cos = torch.nn.functional.cosine_similarity(d_mixed, d_ref, dim=0)
    assert cos > 0.9, cos
    # |update| <= lr, up to float32's spacing at the norms' weights near 1 (1.2e-7)
    assert d_ref.abs().max() <= 1.13e-6 and d_mixed.abs().max() <= 1.13e-6
    assert mixed.compute_dtype is torch.bfloat16 and ref.compute_dtype is None


def test_auto_precision_on_the_cpu_is_float32_and_keeps_float64(bf16_model, tiny_llm):
    tr = PolicyTrainer(copy.deepcopy(bf16_model), tiny_llm.tokenizer, GRPOConfig())
    assert tr.precision == "fp32"
    assert {p.dtype for p in tr.model.parameters()} == {torch.float32}
    wide = PolicyTrainer(copy.deepcopy(tiny_llm.model).double(), tiny_llm.tokenizer, GRPOConfig())
    assert {p.dtype for p in wide.model.parameters()} == {torch.float64}


def test_frozen_parameters_keep_their_dtype(bf16_model, tiny_llm):
    model = copy.deepcopy(bf16_model)
    model.model.layers[0].requires_grad_(False)
    tr = PolicyTrainer(model, tiny_llm.tokenizer, GRPOConfig(precision="bf16-mixed"))
    assert {p.dtype for p in tr.model.model.layers[0].parameters()} == {torch.bfloat16}
    assert {p.dtype for p in tr.params} == {torch.float32}


def test_resolve_precision(monkeypatch):
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert resolve_precision("auto", cpu) == "fp32"
    assert resolve_precision("bf16-mixed", cpu) == "bf16-mixed"
    native = {"yes": True}
    monkeypatch.setattr(
        torch.cuda, "is_bf16_supported", lambda including_emulation=True: native["yes"] or including_emulation
    )
    assert resolve_precision("auto", cuda) == "bf16-mixed"
    native["yes"] = False  # before Ampere: emulated bf16 only
    assert resolve_precision("auto", cuda) == "fp32"
    assert resolve_precision("bf16-mixed", cuda) == "bf16-mixed"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)
    with pytest.raises(ValueError, match="no bfloat16"):
        resolve_precision("bf16-mixed", cuda)
    assert resolve_precision("fp32", cuda) == "fp32"


def test_generation_runs_under_the_autocast_dtype(tiny_llm):
    seen: list[torch.dtype] = []
    for autocast in (None, "bfloat16"):
        llm = TransformersLLM(
            copy.deepcopy(tiny_llm.model), tiny_llm.tokenizer, device="cpu", autocast_dtype=autocast
        )
        hook = llm.model.model.layers[0].self_attn.q_proj.register_forward_hook(
            lambda _m, _i, out: seen.append(out.dtype)
        )
        out = llm.generate(["hello"], SamplingParams(max_new_tokens=3, temperature=0.0, logprobs=True))
        hook.remove()
        assert len(out[0][0].token_ids) == 3
        assert {p.dtype for p in llm.model.parameters()} == {torch.float32}
    assert set(seen[: len(seen) // 2]) == {torch.float32}
    assert set(seen[len(seen) // 2 :]) == {torch.bfloat16}
    with pytest.raises(ValueError, match="autocast_dtype"):
        TransformersLLM(tiny_llm.model, tiny_llm.tokenizer, device="cpu", autocast_dtype="float32")


def test_backend_serves_mixed_precision_policies_in_bf16(tiny_dir):
    cfg = TrainConfig(model=tiny_dir, grpo={"precision": "bf16-mixed"})
    backend = Backend(cfg, CountA())
    trainer = backend.trainers["p"]
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    assert backend.serving["p"].model is trainer.model
    assert backend.serving["p"].autocast_dtype is torch.bfloat16
    assert Backend(TrainConfig(model=tiny_dir), CountA()).serving["p"].autocast_dtype is None


def test_a_named_device_loads_the_runs_own_base_model(tiny_dir):
    shared = load_llm(tiny_dir)
    assert Backend(TrainConfig(model=tiny_dir), CountA()).frozen is shared  # auto: the process's instance
    own = Backend(TrainConfig(model=tiny_dir, device="cpu"), CountA()).frozen
    assert own is not shared and own.device == torch.device("cpu")
    assert torch.equal(_flat(own.model), _flat(shared.model))


def _rewards(result):
    return [(r["kind"], r["step"], r.get("reward")) for r in result.history]


def test_a_bf16_mixed_run_trains_and_resumes(tiny_dir, tmp_path):
    grpo = {"lr": 1e-3, "precision": "bf16-mixed"}
    cfg = {"model": tiny_dir, "eval_every": 1, "checkpoint_every": 1, "grpo": grpo}
    whole = train(CountA(), TrainConfig(steps=2, **cfg), tmp_path / "whole")
    train(CountA(), TrainConfig(steps=1, **cfg), tmp_path / "part")
    resumed = train(CountA(), TrainConfig(steps=2, **cfg), tmp_path / "part", resume=True)
    assert _rewards(resumed) == _rewards(whole)
    assert sum(kind == "train" for kind, _, _ in _rewards(whole)) == 2
