"""LLM policies on the device: a GRPO step (full fine-tuning, LoRA, a KL
penalty, two epochs) moves the weights as on the CPU, to rounding (each tensor's update within 0.2%;
torch runs attention by another kernel there); the recipe loop trains there,
a run resumed from its device checkpoint ends where the uninterrupted one ends,
and that checkpoint resumes on the CPU."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from societas.agents.llm.loading import load_llm
from societas.agents.llm.transformers_llm import TransformersLLM
from societas.marl.llm.loop import TrainConfig, train
from societas.marl.llm.rollouts import RoleMap, TokenRecorder, samples_from_trace
from societas.marl.llm.trainer import GRPOConfig, PolicyTrainer
from societas.topology import Runtime
from societas.topology.graph import Graph
from tests.cuda_emulation import emulated_cuda
from tests.llm.test_loop import CountA

LORA = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}


@pytest.fixture(scope="module")
def samples(tiny_llm):
    """Four sampled completions of the tiny model (with their sampling log-probabilities)."""
    llm = TransformersLLM(copy.deepcopy(tiny_llm.model), tiny_llm.tokenizer, device="cpu", name="sampler")
    graph = Graph.build(
        "one",
        [
            {
                "id": "a",
                "role": "answerer",
                "prompt": "Answer.",
                "params": {"max_new_tokens": 5, "min_new_tokens": 3},
            }
        ],
        [],
    )
    rec = TokenRecorder(llm)
    runs = Runtime(graph, llm=rec, seed=1, on_event=rec.on_event).run_many(
        ["say hi", "say hi", "count", "count"]
    )
    rm = RoleMap({"answerer": "p"})
    return [s for k, r in enumerate(runs) for s in samples_from_trace(r.trace, rm, llm.tokenizer, trace_id=k)]


@pytest.mark.parametrize(
    "config,recorded",
    [
        ({"lr": 1e-3}, True),
        ({"lr": 1e-3, "lora": LORA}, True),
        ({"lr": 1e-3, "kl_beta": 0.1, "epochs": 2}, True),
        ({"lr": 1e-3}, False),  # no sampling log-probabilities: the trainer computes them first
    ],
    ids=["full", "lora", "kl+epochs", "unrecorded"],
)
def test_a_grpo_step_on_the_device_moves_the_weights_as_on_the_cpu(tiny_llm, samples, config, recorded):
    if not recorded:
        samples = [dataclasses.replace(s, old_logprobs=None) for s in samples]

    def step() -> tuple[dict, dict]:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model = copy.deepcopy(tiny_llm.model).to(device)
        trainer = PolicyTrainer(model, tiny_llm.tokenizer, GRPOConfig(**config))
        metrics = trainer.step(samples, torch.tensor([1.0, 0.0, 0.5, 0.0]), groups=[0, 0, 1, 1])
        assert next(trainer.model.parameters()).device.type == device.replace("cuda", "emucuda")
        return metrics, {n: p.detach().cpu() for n, p in trainer.model.named_parameters()}

    ref_metrics, ref_weights = step()
    with emulated_cuda():
        metrics, weights = step()
    for key in ("loss", "grad_norm", "kl", "advantage_mean"):
        assert metrics[key] == pytest.approx(ref_metrics[key], rel=1e-5, abs=1e-7), key
    assert weights.keys() == ref_weights.keys()
    start = tiny_llm.model.state_dict()
    for n in weights:
        # AdamW's first step is about lr * sign(gradient): a gradient near zero, summed in another
        # order, moves its weight by a visibly different fraction of lr; compare whole updates
        update = ref_weights[n] - start[n] if n in start else ref_weights[n]
        assert update.norm() > 0, n
        assert (weights[n] - ref_weights[n]).norm() <= 2e-3 * update.norm(), n


def _rewards(result):
    return [(r["kind"], r["step"], r.get("reward")) for r in result.history]


@pytest.mark.parametrize(
    "extra",
    [{}, {"grpo": {"lr": 1e-3, "lora": LORA}}, {"grpo": {"lr": 1e-3, "kl_beta": 0.1}, "sft_steps": 1}],
    ids=["full", "lora", "kl+sft"],
)
def test_the_loop_resumes_on_the_device_and_its_checkpoint_resumes_on_the_cpu(tiny_dir, tmp_path, extra):
    cfg = {
        "model": tiny_dir,
        "eval_every": 1,
        "checkpoint_every": 1,
        "grpo": {"lr": 1e-3},
        "sft_lr": 1e-2,
        **extra,
    }
    shared = load_llm(tiny_dir)  # the process's instance, on the CPU
    with emulated_cuda():
        whole = train(CountA(), TrainConfig(steps=2, device="cuda", **cfg), tmp_path / "whole")
        train(CountA(), TrainConfig(steps=1, device="cuda", **cfg), tmp_path / "part")
        resumed = train(CountA(), TrainConfig(steps=2, device="cuda", **cfg), tmp_path / "part", resume=True)
    # the runs loaded their own base model onto the device: the shared one stayed where it was
    assert load_llm(tiny_dir) is shared and shared.device == torch.device("cpu")
    assert {p.device.type for p in shared.model.parameters()} == {"cpu"}
    assert _rewards(resumed) == _rewards(whole)
    assert any(kind == "train" for kind, _, _ in _rewards(whole))
    on_cpu = train(CountA(), TrainConfig(steps=3, device="cpu", **cfg), tmp_path / "part", resume=True)
    assert _rewards(on_cpu)[: len(_rewards(whole))] == _rewards(whole)
    assert on_cpu.history[-1]["step"] == 3 + cfg.get("sft_steps", 0)
