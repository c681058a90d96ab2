"""The models of a training run, built the same way by the loop and by each rollout worker.

:class:`Backend` loads the frozen base model of a :class:`TrainConfig` and one
trainable copy per policy of a recipe, with the LLMs that serve them; the loop
(:mod:`societas.marl.llm.loop`) and every Ray actor of
:mod:`societas.marl.llm.distributed` build one each, so both sample from
identically structured policies.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from societas.agents.llm import load_llm
from societas.agents.llm.transformers_llm import TransformersLLM
from societas.marl.llm.parallel import dist_env, rank_device
from societas.marl.llm.recipe import FROZEN, Recipe, episode_seed
from societas.marl.llm.rollouts import TokenRecorder
from societas.marl.llm.trainer import GRPOConfig, PolicyTrainer

__all__ = ["Backend", "TrainConfig"]


class TrainConfig(BaseModel):
    """The loop's settings (a recipe has its own)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        "embedded", description="base model URI for every policy and the frozen roles (a local model)"
    )
    steps: int = Field(10, ge=0, description="GRPO steps")
    sft_steps: int = Field(
        0, ge=0, description="supervised warm-start steps before GRPO (recipes that have data)"
    )
    sft_lr: float = Field(5e-5, gt=0.0, description="learning rate of the SFT warm start")
    eval_every: int = Field(2, ge=1, description="held-out evaluation every N GRPO steps (and at the end)")
    checkpoint_every: int = Field(0, ge=0, description="0: only at the end")
    seed: int = Field(0, description="seed of the episodes, the policies' updates and every random draw")
    threads: int | None = Field(None, ge=1, description="torch CPU threads (None: torch's default)")
    device: str = Field(
        "auto",
        pattern=r"^(auto|cpu|mps|cuda(:\d+)?)$",
        description="auto, cpu, mps, cuda or cuda:N (auto: where the model loads)",
    )
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    serve: str | None = Field(
        None,
        pattern=r"^vllm:.+",
        description="'vllm:MODEL' to generate the policies' rollouts with vLLM "
        "(the same weights as 'model'; updated weights are pushed after every step)",
    )
    serve_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="VLLMLLM arguments (max_model_len, ...)"
    )
    tensorboard: bool = Field(True, description="write TensorBoard event files into RUN_DIR/tensorboard")
    rollout_workers: int = Field(0, ge=0, description="Ray actors for rollouts (0: in this process)")
    ray_address: str | None = Field(
        None,
        min_length=1,
        description="the Ray cluster the rollout actors join (HOST:PORT of its head, or 'auto'); "
        "None: RAY_ADDRESS, else a local instance",
    )


class Backend:
    """The models of a run: trainable policies, their serving LLMs and the frozen base."""

    def __init__(self, cfg: TrainConfig, recipe: Recipe) -> None:
        uri = cfg.model.strip()
        if not (uri == "embedded" or uri.startswith(("hf:", "gguf:"))):
            raise ValueError(
                f"model {cfg.model!r} is not a local Hugging Face model; training needs one "
                "(use 'embedded', 'hf:PATH' or 'gguf:FILE')"
            )
        env = dist_env()
        device = rank_device(cfg.device, env)  # under torchrun with GPUs: cuda:LOCAL_RANK
        # 'auto' shares the process's instance of the model; a named device loads the run's
        # own copy straight onto it: the shared one stays where its other users put it, and
        # torchrun's ranks never stage their copies on one GPU first.
        base = load_llm(uri) if device == "auto" else load_llm(uri, shared=False, device=device)
        if not isinstance(base, TransformersLLM):  # pragma: no cover - the schemes above are local
            raise ValueError(f"model {cfg.model!r} did not load as a local Hugging Face model")
        # The base model is only read (the frozen role's generation, the KL reference), under
        # inference mode or no_grad: its requires_grad flags stay as they are, since with 'auto'
        # it is the process's shared instance, which its user may train next (PolicyTrainer on
        # load_llm(...).model).
        base.model.eval()
        self.frozen = base
        self.tokenizer = base.tokenizer
        self.trainers: dict[str, PolicyTrainer] = {}
        self.serving: dict[str, Any] = {}
        for name in recipe.policies:
            # With LoRA the base weights stay frozen: the trained copy holds them as the base
            # model's own storage (parameter objects of its own, whose flags peft sets).
            model = (
                _copy_over_shared_storage(base.model)
                if cfg.grpo.lora is not None
                else copy.deepcopy(base.model)
            )
            model.requires_grad_(True)
            gcfg = cfg.grpo.model_copy(update={"seed": episode_seed(cfg.seed, "policy", name) % (2**31)})
            ref = base.model if gcfg.kl_beta > 0 else None
            # FSDP shards the trained module over the ranks, and each rank generates its own
            # episodes: it does so from a full copy, refreshed after every update (sync).
            serve_model = None
            if env.distributed and gcfg.sharding == "fsdp":
                serve_model = copy.deepcopy(base.model)
            trainer = PolicyTrainer(model, self.tokenizer, gcfg, ref_model=ref, policy=name)
            self.trainers[name] = trainer
            if serve_model is None and cfg.serve is None:
                # LoRA: sample from a copy with the adapters merged, refreshed by sync (None
                # without LoRA, or for adapters a plain merge does not cover).
                serve_model = trainer.merged_serving_model()
            self.serving[name] = TransformersLLM(
                trainer.model if serve_model is None else serve_model,
                self.tokenizer,
                device=base.device,
                name=f"{base.name}:{name}",
                autocast_dtype=trainer.compute_dtype,  # float32 master weights generate at bf16 speed
            )
        self.vllm: dict[str, Any] = {}
        if cfg.serve is not None:
            if not cfg.serve.startswith("vllm:"):
                raise ValueError(f"serve must be 'vllm:MODEL_DIR', got {cfg.serve!r}")
            for name in recipe.policies:
                self.vllm[name] = load_llm(cfg.serve, **cfg.serve_kwargs)
                self.sync(name)  # the engine serves exactly the policy's weights from the start

    def llms(self) -> dict[str, Any]:
        out: dict[str, Any] = {FROZEN: self.frozen}
        for name in self.trainers:
            out[name] = TokenRecorder(self.vllm.get(name, self.serving[name]))
        return out

    def sync(self, name: str) -> None:
        tr = self.trainers[name]
        tr.sync_to(self.serving[name])
        if name in self.vllm:
            tr.sync_to(self.vllm[name])

    def state_dicts(self) -> dict[str, dict[str, torch.Tensor]]:
        """Each policy's weights as another Backend of the same config loads them
        (:meth:`load_state_dict`): the adapters only, with LoRA."""
        return {n: t.policy_state_dict() for n, t in self.trainers.items()}

    def load_state_dict(self, name: str, state: dict[str, torch.Tensor]) -> None:
        """Load policy ``name``'s weights from :meth:`state_dicts` and serve them."""
        self.trainers[name].load_policy_state_dict(state)
        self.sync(name)


def _copy_over_shared_storage(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of ``model`` whose parameters are new ``Parameter`` objects over the
    same storage (tied ones stay tied): their flags are the copy's own, their values
    the original's, so the copy costs no memory for weights nobody writes."""
    memo: dict[int, Any] = {
        id(p): torch.nn.Parameter(p.detach(), requires_grad=p.requires_grad) for p in model.parameters()
    }
    return copy.deepcopy(model, memo)
