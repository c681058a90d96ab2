"""The merged serving copy of a LoRA policy: peft's merge to the bit, storage shared
with the trained model but for the adapted weights, refreshed by sync_to, and used
by the training loop's Backend."""

from __future__ import annotations

import copy
import json
import re

import pytest
import torch

from societas.marl.llm import trainer as trainer_mod
from societas.marl.llm.backend import Backend, TrainConfig
from societas.marl.llm.serving import MergedLoRA, merged_lora_copy, unsupported_for_merging
from societas.marl.llm.trainer import GRPOConfig, PolicyTrainer

from .test_loop import CountA

peft = pytest.importorskip("peft")


def _tiny(bias: bool, tied: bool = False) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        attention_bias=bias,
        mlp_bias=bias,
        tie_word_embeddings=tied,
    )
    return LlamaForCausalLM(cfg).eval()


def _move_adapters(model: torch.nn.Module, seed: int, scale: float = 0.5) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_" in n:  # lora_B starts at zero: make the adapters matter
                p.add_(torch.randn(p.shape, generator=g) * scale)


def _peft_merged_state(model) -> dict[str, torch.Tensor]:
    return copy.deepcopy(model).merge_and_unload().state_dict()


LORA_CONFIGS = {
    "all-linear": ({"r": 4, "lora_alpha": 8, "target_modules": "all-linear", "lora_dropout": 0.1}, False),
    "rslora+bias": (
        {
            "r": 2,
            "lora_alpha": 3,
            "target_modules": ["q_proj", "down_proj"],
            "use_rslora": True,
            "lora_bias": True,
        },
        True,
    ),
}


@pytest.mark.parametrize("name", list(LORA_CONFIGS))
def test_the_copy_holds_peft_merge_to_the_bit_and_shares_every_other_weight(name):
    lora, bias = LORA_CONFIGS[name]
    pm = peft.get_peft_model(_tiny(bias), peft.LoraConfig(**lora))
    _move_adapters(pm, 0)
    merged = MergedLoRA(pm)
    state, reference = merged.module.state_dict(), _peft_merged_state(pm)
    assert state.keys() == reference.keys()
    assert all(torch.equal(state[k], reference[k]) for k in reference)
    assert not any(isinstance(m, peft.tuners.tuners_utils.BaseTunerLayer) for m in merged.module.modules())
    # The adapted weights (and, with lora_bias, biases) are the copy's own; every other
    # parameter is the trained model's very object.
    attrs = ("weight", "bias") if bias else ("weight",)
    own = [getattr(target, a) for target in merged.targets.values() for a in attrs]
    trained = {id(p) for p in pm.parameters()}
    for p in merged.module.parameters():
        assert (id(p) in {id(q) for q in own}) != (id(p) in trained)
    assert merged.nbytes() == sum(p.numel() * p.element_size() for p in own)
    # The same function as the wrapped model (which drops nothing in eval mode).
    pm.eval()
    ids = torch.randint(0, 97, (3, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(merged.module(ids).logits, pm(ids).logits, atol=1e-5)
    with torch.no_grad(), pm.disable_adapter():
        plain = pm(ids).logits
    assert not torch.allclose(merged.module(ids).logits, plain, atol=1e-3)  # the adapters do count


def test_refresh_follows_the_adapters_and_never_touches_the_base():
    pm = peft.get_peft_model(
        _tiny(False), peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    )
    base_before = {k: v.clone() for k, v in pm.get_base_model().state_dict().items() if "lora_" not in k}
    merged = MergedLoRA(pm)
    first = {k: v.clone() for k, v in merged.module.state_dict().items()}
    _move_adapters(pm, 1)
    stale = merged.module.state_dict()
    assert all(torch.equal(stale[k], first[k]) for k in first)  # nothing moves until refresh
    for _ in range(3):  # refreshing again and again gives the same bits: no drift
        merged.refresh()
        reference = _peft_merged_state(pm)
        state = merged.module.state_dict()
        assert all(torch.equal(state[k], reference[k]) for k in reference)
    assert any(not torch.equal(state[k], first[k]) for k in first)
    base_after = pm.get_base_model().state_dict()
    assert all(torch.equal(base_after[k], v) for k, v in base_before.items())
    with pm.disable_adapter():  # peft's switch is followed too
        merged.refresh()
        assert torch.equal(
            merged.targets["model.layers.0.self_attn.q_proj"].weight,
            pm.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight,
        )


@pytest.mark.parametrize(
    "lora, why",
    [
        ({"r": 2, "target_modules": ["q_proj"], "use_dora": True}, "is a LoRA variant"),
        (
            {"r": 2, "target_modules": ["q_proj"], "modules_to_save": ["lm_head"]},
            "is trained but is not part of",
        ),
        (
            {"r": 2, "target_modules": ["q_proj", "embed_tokens"]},
            r"is a peft\.tuners\.lora\.layer\.Embedding, not a LoRA linear layer",
        ),
        (
            {"r": 2, "target_modules": ["lm_head"], "tied": True},
            "lm_head's weight is tied to another parameter",
        ),
    ],
    ids=["dora", "modules_to_save", "embedding", "tied"],
)
def test_what_a_plain_merge_does_not_cover_is_refused_with_the_reason(lora, why):
    lora = dict(lora)
    pm = peft.get_peft_model(_tiny(False, tied=lora.pop("tied", False)), peft.LoraConfig(**lora))
    assert re.search(why, unsupported_for_merging(pm))
    assert merged_lora_copy(pm) is None
    with pytest.raises(ValueError, match="cannot serve this peft model from merged weights: .*" + why):
        MergedLoRA(pm)


def test_the_trainer_serves_its_merged_copy_and_sync_to_refreshes_it(tiny_llm, monkeypatch):
    tr = PolicyTrainer(
        copy.deepcopy(tiny_llm.model),
        tiny_llm.tokenizer,
        GRPOConfig(lora={"r": 4, "target_modules": "all-linear"}),
    )
    module = tr.merged_serving_model()
    assert module is not None and module is not tr.model
    _move_adapters(tr.model, 2)

    class Served:  # what sync_to reads of a TransformersLLM
        model = module

    def no_copies(*args, **kwargs):
        raise AssertionError("sync_to copied the model instead of refreshing its merged copy")

    monkeypatch.setattr(trainer_mod.copy, "deepcopy", no_copies)
    assert tr.sync_to(Served()) is True
    monkeypatch.undo()
    reference = _peft_merged_state(tr.model)
    assert all(torch.equal(module.state_dict()[k], v) for k, v in reference.items())
    assert (
        PolicyTrainer(copy.deepcopy(tiny_llm.model), tiny_llm.tokenizer, GRPOConfig()).merged_serving_model()
        is None
    )


def test_a_lora_backend_samples_from_the_merged_copy_over_the_base_storage(tiny_dir):
    from societas.agents.llm import load_llm

    shared = load_llm(tiny_dir)
    flags = [p.requires_grad for p in shared.model.parameters()]
    backend = Backend(
        TrainConfig(model=tiny_dir, grpo={"lora": {"r": 2, "target_modules": "all-linear"}}), CountA()
    )
    trainer, served = backend.trainers["p"], backend.serving["p"].model
    assert served is not trainer.model
    assert not any(isinstance(m, peft.tuners.tuners_utils.BaseTunerLayer) for m in served.modules())
    # The trained copy's frozen base weights are the shared model's storage (no second copy),
    # in parameter objects of its own: the shared model's flags are as they were.
    base_ptrs = {p.data_ptr() for p in shared.model.parameters()}
    frozen = [p for n, p in trainer.model.named_parameters() if "lora_" not in n]
    assert frozen and all(p.data_ptr() in base_ptrs and not p.requires_grad for p in frozen)
    assert [p.requires_grad for p in shared.model.parameters()] == flags
    # An update reaches the samples through sync, as the loop calls it.
    _move_adapters(trainer.model, 3)
    backend.sync("p")
    reference = _peft_merged_state(trainer.model)
    assert all(torch.equal(served.state_dict()[k], v) for k, v in reference.items())
    # Without LoRA the policy samples from the trained module itself.
    plain = Backend(TrainConfig(model=tiny_dir), CountA())
    assert plain.serving["p"].model is plain.trainers["p"].model


def test_the_lora_generation_benchmark_runs_and_reports_what_it_measured(capsys):
    """benchmarks/lora_generation.py at its smallest: the three servers, the JSON line."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "lora_generation.py"
    spec = importlib.util.spec_from_file_location("lora_generation_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.main(
        ["--rounds", "1", "--group", "1", "--max-new-tokens", "2", "--targets", "q_proj,v_proj"]
    )
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed == result
    assert result["adapted_linears"] == 2 * 30  # q and v of the embedded model's 30 layers
    assert all(result[f"{k}_tokens_per_s"] > 0 for k in ("peft", "merged", "base"))
    assert 0 < result["merged_own_mib"] < result["model_mib"] / 4  # q and v only: a small share
    assert result["max_logit_diff"] < 1e-3


def test_a_vllm_engine_is_pushed_peft_merge_from_one_kept_copy(tiny_llm, monkeypatch):
    """sync_to an engine (anything with load_weights, as VLLMLLM): the whole merged state dict,
    from a merged copy made at the first push and refreshed at the next ones."""
    tr = PolicyTrainer(
        copy.deepcopy(tiny_llm.model),
        tiny_llm.tokenizer,
        GRPOConfig(lora={"r": 4, "target_modules": "all-linear"}),
    )

    class Engine:
        pushed: list[dict[str, torch.Tensor]] = []

        def load_weights(self, weights):
            self.pushed.append({k: v.clone() for k, v in weights.items()})

    engine = Engine()
    for seed in (4, 5):
        _move_adapters(tr.model, seed)
        reference = _peft_merged_state(tr.model)
        if seed == 5:  # the second push makes no copy of the model
            monkeypatch.setattr(trainer_mod.copy, "deepcopy", lambda *a, **k: pytest.fail("copied the model"))
        assert tr.sync_to(engine) is True
        monkeypatch.undo()
        got = engine.pushed[-1]
        assert got.keys() == reference.keys() and all(torch.equal(got[k], v) for k, v in reference.items())
    # A model a plain merge does not cover is merged in a fresh copy each time, as before.
    dora = PolicyTrainer(
        copy.deepcopy(tiny_llm.model),
        tiny_llm.tokenizer,
        GRPOConfig(lora={"r": 2, "target_modules": ["q_proj"], "use_dora": True}),
    )
    _move_adapters(dora.model, 6)
    assert dora.sync_to(engine) is True
    reference = _peft_merged_state(dora.model)
    assert all(torch.equal(engine.pushed[-1][k], v) for k, v in reference.items())
