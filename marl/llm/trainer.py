"""The GRPO policy update: advantages -> clipped loss -> accumulated gradients -> optimizer step.

:class:`PolicyTrainer` wraps ONE trainable Hugging Face causal LM (full
fine-tuning, or LoRA through ``peft`` when ``GRPOConfig.lora`` is set) and
turns a batch of :class:`~societas.marl.llm.rollouts.TokenSample` with their rewards
into ``epochs`` optimizer steps::

    A      = grpo / dr_grpo / gdpo advantages of the rewards over the groups
    batch  = collate(samples)                       (padded once, sliced into micro-batches)
    for each epoch (mu):
        for each of grad_accum_steps micro-batches:
            new = sequence_logprobs(model, micro)   (with gradient)
            ref = sequence_logprobs(ref_model, micro) without gradient, if kl_beta > 0
            (w_micro * policy_loss(new, old, A, mask, ref)).backward()
        clip_grad_norm_(max_grad_norm); optimizer.step()

``old`` is the behaviour policy's log-probs recorded at generation (the
samples' ``old_logprobs``) and stays fixed across all ``epochs``, as in
PPO/GRPO (pi_old is the policy that sampled; the clip bounds how far the
mu updates move from it). Samples without recorded log-probs get them
recomputed from the current model before the first update.

Gradient accumulation is exact: each micro-batch loss is weighted so that the
sum of the micro-batch gradients equals the gradient of the full-batch loss
for every ``loss_type`` (``grpo`` and ``sapo``: by its share of sequences;
``bnpo``: by its share of kept tokens; ``dr_grpo``: by its share of sequences
with the full batch's completion width as the constant; ``dapo`` and
``cispo``: normalised by the whole step's kept tokens already). GSPO's
sequence-level ratio is a row's own, so it splits the same way.

Under ``torchrun`` (several processes, see :mod:`societas.marl.llm.parallel`)
every rank is given the whole batch, computes the advantages on all of it,
and trains on its own contiguous share of the rows with the same weights, so
the ranks' gradients sum to the one-process gradient; ``GRPOConfig.sharding``
chooses DDP or FSDP (torch's ``fully_shard``) to sum them.

``GRPOConfig.precision`` keeps the trained weights and AdamW's moments in
float32 (master weights) however the model was loaded: at GRPO's learning
rates (1e-6) an update is far below bfloat16's resolution (8 bits of
mantissa), so bf16 weights would round almost every update away. On CUDA
(``auto``) the forward passes run under bf16 autocast (``bf16-mixed``, as in
verl and TRL's ``bf16=True``); ``bf16`` trains bf16 weights as they are, for
memory, knowing that.

Checkpoints (:meth:`PolicyTrainer.save_checkpoint`) are directories holding
``ckpt-<step>-<id>/`` sub-directories and a ``LATEST`` file naming the
complete one; each version is written to a temporary directory, renamed into
place, and only then published by atomically replacing ``LATEST``, so a kill
at any moment leaves the previous checkpoint loadable.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import os
import random
import shutil
import uuid
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from societas.marl.llm.advantages import HopGroup, gdpo_advantages, group_ids, grpo_advantages, raw_singletons
from societas.marl.llm.losses import LOSS_TYPES, LossType, check_variant, high_entropy_mask, policy_loss_terms
from societas.marl.llm.parallel import (
    all_gather_list,
    all_reduce_max,
    all_reduce_sum,
    broadcast_object,
    dist_env,
    own_slice,
    shards,
)
from societas.marl.llm.rollouts import TokenSample, collate, sequence_logprobs
from societas.marl.llm.serving import MergedLoRA, merged_lora_copy

__all__ = ["GRPOConfig", "PolicyTrainer", "resolve_precision"]

_LATEST = "LATEST"


class GRPOConfig(BaseModel):
    """Hyper-parameters of :class:`PolicyTrainer`."""

    model_config = ConfigDict(extra="forbid")

    lr: float = Field(1e-6, gt=0.0)
    weight_decay: float = Field(0.0, ge=0.0)
    clip_eps: float = Field(0.2, gt=0.0)
    clip_eps_high: float | None = Field(None, gt=0.0, description="DAPO's upper clip; None = clip_eps")
    kl_beta: float = Field(0.0, ge=0.0)
    loss_type: LossType = Field(
        "grpo",
        description="loss aggregation; 'dr_grpo' alone also sets advantage='dr_grpo' (Dr. GRPO's two changes "
        "go together unless both are given); 'dapo': DAPO's token-level mean over the step's batch; "
        "'cispo': MiniMax-M1's clipped importance weight (needs clip_eps_high, its eps_max); 'sapo': "
        "a smooth gate instead of the clip (see societas.marl.llm.losses)",
    )
    importance_sampling_level: Literal["token", "sequence"] = Field(
        "token", description="'sequence': GSPO's one ratio per sequence (the mean log-ratio of its tokens)"
    )
    delta: float | None = Field(
        None,
        description="two-sided clipping (INTELLECT-2): cap on the unclipped ratio, above 1 + clip_eps_high",
    )
    sapo_temperature_pos: float = Field(1.0, gt=0.0, description="sapo's gate temperature for A > 0")
    sapo_temperature_neg: float = Field(1.05, gt=0.0, description="sapo's gate temperature for A <= 0")
    top_entropy_quantile: float = Field(
        1.0,
        gt=0.0,
        le=1.0,
        description="train the policy term on this share of the kept tokens with the highest entropy "
        "(Wang et al., 'Beyond the 80/20 rule': 0.2); the threshold is the quantile over the step's "
        "whole batch under the policy before the update; 1: every token",
    )
    mask_truncated_completions: bool = Field(
        False,
        description="DAPO's overlong filtering: samples cut by max_new_tokens (finish_reason 'length'; "
        "where none was recorded, a last token that is neither end-of-sequence nor padding) count in "
        "their group's advantages but are left out of the loss",
    )
    max_completion_length: int | None = Field(None, ge=1, description="dr_grpo constant; None = batch width")
    advantage: Literal["grpo", "gdpo", "dr_grpo"] = Field(
        "grpo", description="'dr_grpo' alone also sets loss_type='dr_grpo' (see loss_type)"
    )
    scale_rewards: Literal["group", "batch", "none"] | None = Field(
        None,
        description="what divides a grpo advantage: the group's std ('group', GRPO), the whole batch's "
        "('batch', Lite PPO) or nothing ('none', Dr. GRPO); None: as advantage says",
    )
    reward_weights: list[float] | None = None
    grad_accum_steps: int = Field(1, ge=1, description="micro-batches per optimizer step (at least)")
    micro_batch_tokens: int | None = Field(
        2048,
        ge=1,
        description="split further so that a micro-batch holds at most this many padded tokens "
        "(bounds activation memory; None: grad_accum_steps alone decides)",
    )
    max_grad_norm: float | None = Field(1.0, gt=0.0, description="None: no clipping (norm still reported)")
    epochs: int = Field(1, ge=1, description="optimizer steps per batch (mu)")
    seed: int = 0
    lora: dict[str, Any] | None = Field(None, description="peft.LoraConfig kwargs; None = full fine-tuning")
    sharding: Literal["ddp", "fsdp"] = Field(
        "ddp",
        description="with several processes (torchrun): 'ddp' keeps the whole model on every rank and "
        "sums the gradients; 'fsdp' splits parameters, gradients and optimizer state over the ranks "
        "(torch's fully_shard) for models whose training state does not fit one device",
    )
    precision: Literal["auto", "fp32", "bf16-mixed", "bf16"] = Field(
        "auto",
        description="'fp32': trained weights and optimizer state in float32 (bf16/fp16 ones cast up, "
        "float64 kept); 'bf16-mixed': those float32 weights, forward passes under bf16 autocast; "
        "'bf16': bf16 weights as they are (small updates round away); "
        "'auto': 'bf16-mixed' on a CUDA device with bf16, else 'fp32'",
    )

    @model_validator(mode="after")
    def _variant(self) -> GRPOConfig:
        check_variant(self.loss_type, self.clip_eps, self.clip_eps_high, self.delta)
        if self.scale_rewards is not None and self.advantage == "gdpo":
            raise ValueError(
                "scale_rewards applies to grpo advantages; gdpo normalises each reward and the batch"
            )
        return self

    @model_validator(mode="after")
    def _dr_grpo_by_name(self) -> GRPOConfig:
        # Dr. GRPO (Liu et al., arXiv 2503.20783) is two changes: no std scaling of the advantages AND a
        # constant length normaliser. Naming it in one field gives both, unless the other is given too.
        given = self.model_fields_set
        if self.loss_type == "dr_grpo" and "advantage" not in given:
            self.advantage = "dr_grpo"
        if self.advantage == "dr_grpo" and "loss_type" not in given:
            self.loss_type = "dr_grpo"
        return self


def _set_seed(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        np.random.seed(seed % (2**32))
    except ImportError:  # pragma: no cover
        pass


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        state["numpy"] = np.random.get_state()
    except ImportError:  # pragma: no cover
        pass
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class PolicyTrainer:
    """GRPO/GDPO updates of one causal LM.

    Args:
        model: a Hugging Face causal LM (trained in place; with ``config.lora``
            it is wrapped by ``peft.get_peft_model``, which injects the adapter
            into this same module tree).
        tokenizer: its tokenizer (the pad id for :func:`collate`).
        config: a :class:`GRPOConfig` (or a dict of its fields).
        ref_model: the KL reference (put in eval mode; its forward passes run without
            gradient, so its requires_grad flags are left as they are); when
            ``kl_beta > 0`` and none is given, a frozen deep copy of ``model`` as it is now.
        policy: if set, :meth:`step` trains only samples whose ``policy`` is
            this name and drops the others (with their rewards and groups).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        config: GRPOConfig | dict | None = None,
        ref_model: Any | None = None,
        *,
        policy: str | None = None,
    ) -> None:
        self.config = config if isinstance(config, GRPOConfig) else GRPOConfig(**(config or {}))
        if self.config.loss_type not in LOSS_TYPES:  # pragma: no cover - pydantic guards it
            raise ValueError(f"loss_type must be one of {LOSS_TYPES}")
        _set_seed(self.config.seed)
        self.tokenizer = tokenizer
        self.policy = policy
        self.base_model = model
        if self.config.kl_beta > 0 and ref_model is None:
            ref_model = copy.deepcopy(model).requires_grad_(False)
        if ref_model is not None:
            # A given reference keeps its requires_grad flags (it may be a model its owner trains,
            # such as the process's shared instance of load_llm): its passes run without gradient.
            ref_model.eval()
        self.ref_model = ref_model
        if self.config.lora is not None:
            try:
                import peft
            except ImportError as e:
                raise ImportError(
                    "GRPOConfig.lora needs the 'peft' package, which is not installed (pip install peft); "
                    "set lora=None for full fine-tuning"
                ) from e
            model = peft.get_peft_model(model, peft.LoraConfig(**self.config.lora))
        self.model = model
        self.precision = resolve_precision(self.config.precision, next(model.parameters()).device)
        _cast_trainable(model, torch.bfloat16 if self.precision == "bf16" else None)
        # Several processes: DDP wraps the module for the training forward passes (generation
        # and the no-gradient passes use the module itself); FSDP shards it in place.
        self.dist = dist_env()
        self.fsdp = self.dist.distributed and self.config.sharding == "fsdp"
        self._ddp: DistributedDataParallel | None = None
        if self.fsdp:
            if self.config.lora is not None:
                raise ValueError(
                    "GRPOConfig.sharding='fsdp' with lora is not supported: a LoRA adapter's training "
                    "state is small, use sharding='ddp'"
                )
            _fully_shard(model)
        elif self.dist.distributed:
            dev = next(model.parameters()).device
            self._ddp = DistributedDataParallel(
                model, device_ids=[dev.index] if dev.type == "cuda" else None, forward_sync_buffers=False
            )
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("the model has no trainable parameters")
        self.optimizer = torch.optim.AdamW(
            self.params, lr=self.config.lr, weight_decay=self.config.weight_decay
        )
        self.step_count = 0
        self._merged_copies: list[MergedLoRA] = []

    @property
    def compute_dtype(self) -> torch.dtype | None:
        """The autocast dtype of the forward passes (``bf16-mixed``), else ``None``; a
        :class:`~societas.agents.llm.transformers_llm.TransformersLLM` serving this policy
        generates with the same (``autocast_dtype=``)."""
        return torch.bfloat16 if self.precision == "bf16-mixed" else None

    def _autocast(self) -> Any:
        dt = self.compute_dtype
        if dt is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=dt)

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # -- advantages -----------------------------------------------------------------------------

    def advantages(
        self, rewards: torch.Tensor, groups: torch.Tensor, keep_raw: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Per-sample advantages [B] of ``rewards`` ([B] or [B, R]) by ``config.advantage``.

        ``keep_raw`` marks samples whose group keeps a lone sample's raw reward
        (HRPO's hop groups, :func:`~societas.marl.llm.advantages.raw_singletons`).
        """
        w = self.config.reward_weights
        if self.config.advantage == "gdpo":
            return gdpo_advantages(rewards, groups, weights=w)
        how = self.config.scale_rewards or ("group" if self.config.advantage == "grpo" else "none")
        scales: dict[str, bool | str] = {"group": True, "batch": "batch", "none": False}
        scale = scales[how]
        return grpo_advantages(rewards, groups, weights=w, scale=scale, keep_raw=keep_raw)

    # -- the update -----------------------------------------------------------------------------

    def step(self, samples: Sequence[TokenSample], rewards, groups=None) -> dict[str, float]:
        """Compute advantages and take ``config.epochs`` optimizer steps on ``samples``.

        Args:
            samples: token samples (:func:`~societas.marl.llm.rollouts.samples_from_trace`).
            rewards: [B] or [B, R] rewards, one row per sample.
            groups: [B] integer group ids, or B hashable keys (see
                :func:`~societas.marl.llm.advantages.group_ids`); default: each sample's ``group_key``.

        Returns metrics averaged over the epochs: ``loss``, ``kl``,
        ``clip_fraction``, ``ratio``, ``grad_norm`` (before clipping),
        ``reward_mean`` (weighted reward sum; plus ``reward_<k>_mean`` per
        column when R > 1), ``advantage_mean``, ``advantage_std``,
        ``samples``, ``tokens`` (trained tokens) and ``step`` (optimizer steps so far); with
        ``mask_truncated_completions``, ``truncated`` (samples left out of the loss).
        """
        samples = list(samples)
        rewards = torch.as_tensor(rewards, dtype=torch.float32)
        if rewards.dim() not in (1, 2) or rewards.shape[0] != len(samples):
            raise ValueError(
                f"rewards must have shape [{len(samples)}] or [{len(samples)}, R], got {tuple(rewards.shape)}"
            )
        if groups is None:
            groups = [s.group_key for s in samples]
        keep_raw = None
        if not isinstance(groups, torch.Tensor):
            groups = list(groups)
            keep_raw = raw_singletons(groups) if any(isinstance(g, HopGroup) for g in groups) else None
            if len(groups) != len(samples):
                raise ValueError(f"groups has {len(groups)} entries for {len(samples)} samples")
            if not all(isinstance(g, int) and not isinstance(g, bool) for g in groups):
                groups = group_ids([g if isinstance(g, Hashable) else repr(g) for g in groups])
            groups = torch.as_tensor(groups, dtype=torch.long)
        if groups.shape != (len(samples),):
            raise ValueError(f"groups must have shape [{len(samples)}], got {tuple(groups.shape)}")
        if self.policy is not None:
            keep = [i for i, s in enumerate(samples) if s.policy == self.policy]
            samples = [samples[i] for i in keep]
            idx = torch.tensor(keep, dtype=torch.long)
            rewards, groups = rewards[idx], groups[idx]
            keep_raw = keep_raw[idx] if keep_raw is not None else None
        if not samples:
            raise ValueError(
                "no samples to train on" + (f" for policy {self.policy!r}" if self.policy else "")
            )

        cfg = self.config
        adv = self.advantages(rewards, groups, keep_raw)
        dev = self.device
        has_old = all(s.old_logprobs is not None for s in samples)
        plain = [
            s
            if has_old
            else TokenSample(
                s.policy, s.prompt_ids, s.completion_ids, s.completion_mask, None, s.group_key, s.meta
            )
            for s in samples
        ]
        # Collated on the host, which keeps the mask to count tokens without reading the device.
        host = collate(plain, self.pad_id)
        truncated = self._truncated(samples) if cfg.mask_truncated_completions else []
        if truncated:  # in the advantages above, out of the loss below
            host["completion_mask"][torch.tensor(truncated, dtype=torch.long)] = 0.0
        batch = {k: v.to(dev) for k, v in host.items()}
        B, C = host["completion_mask"].shape
        adv_host, adv = adv, adv.to(dev)
        mask = batch["completion_mask"]
        total_tokens = float(host["completion_mask"].sum())
        L = cfg.max_completion_length or C
        micro = self._rank_micro_batches(B, batch["input_ids"].shape[1])
        was_training = self.model.training

        with_entropy = cfg.top_entropy_quantile < 1.0
        if not has_old or with_entropy:
            # Before any update: the behaviour log-probs (on-policy samples without recorded
            # ones), and the policy's entropy at each token (top_entropy_quantile).
            with torch.no_grad():
                self.model.eval()
                # float32 at least (bf16 models), the model's own precision above that
                dtype = torch.promote_types(next(self.model.parameters()).dtype, torch.float32)
                old = torch.zeros(mask.shape, dtype=dtype, device=dev)
                entropy = torch.zeros(mask.shape, dtype=torch.float32, device=dev) if with_entropy else None
                for ix, _ in micro:
                    with self._autocast():
                        if entropy is not None:
                            lp, ent = sequence_logprobs(self.model, self._slice(batch, ix), with_entropy=True)
                            entropy[ix] = ent.float()
                        else:
                            lp = sequence_logprobs(self.model, self._slice(batch, ix))
                    old[ix] = lp.to(dtype)
                if not has_old:
                    batch["old_logprobs"] = old * mask
                if entropy is not None:
                    batch["entropy_mask"] = self._high_entropy_mask(entropy, mask, B)
        train_model = self._ddp if self._ddp is not None else self.model
        scale = float(self.dist.world_size)  # DDP and FSDP average over ranks; the rows' weights sum

        keys = ("loss", "kl", "clip_fraction", "ratio")
        sums = {"loss": 0.0, "kl": 0.0, "clip_fraction": 0.0, "ratio": 0.0, "grad_norm": 0.0}
        try:
            self.model.train()
            for _ in range(cfg.epochs):
                self.optimizer.zero_grad(set_to_none=True)
                # The epoch's loss and metric means, summed on the device in float64 (the sums
                # Python made of the same numbers) and read once with the gradient norm.
                ep_sums = torch.zeros(len(keys), dtype=torch.float64, device=dev)
                for j, (ix, live) in enumerate(micro):
                    mb = self._slice(batch, ix)
                    m = mb["completion_mask"]
                    sync = self._grad_sync(j == len(micro) - 1)
                    with sync:
                        with self._autocast():
                            new = sequence_logprobs(train_model, mb)
                        ref = None
                        if cfg.kl_beta > 0:
                            with torch.no_grad(), self._autocast():
                                ref = sequence_logprobs(self.ref_model, mb).to(new.device)
                        loss, met = policy_loss_terms(
                            new,
                            mb["old_logprobs"].to(new.device),
                            adv[ix],
                            m,
                            ref_logp=ref,
                            clip_eps=cfg.clip_eps,
                            clip_eps_high=cfg.clip_eps_high,
                            kl_beta=cfg.kl_beta,
                            loss_type=cfg.loss_type,
                            max_completion_length=L,
                            num_items_in_batch=total_tokens,
                            importance_sampling_level=cfg.importance_sampling_level,
                            delta=cfg.delta,
                            sapo_temperature_pos=cfg.sapo_temperature_pos,
                            sapo_temperature_neg=cfg.sapo_temperature_neg,
                            token_weight=mb.get("entropy_mask"),
                        )
                        tokens = float(host["completion_mask"][ix].sum())
                        if not live:  # a rank with no rows left still joins the gradient sum
                            w = 0.0
                        elif cfg.loss_type == "bnpo":
                            w = max(1.0, tokens) / max(1.0, total_tokens)
                        elif cfg.loss_type in ("dapo", "cispo"):  # already normalised by the step's tokens
                            w = 1.0
                        else:  # grpo, sapo, dr_grpo: mean over sequences
                            w = (ix.stop - ix.start) / B
                        (loss * (w * scale)).backward()
                    if live:
                        tw = tokens / max(1.0, total_tokens)  # token-weighted metric means
                        terms = [loss.detach().double() * w]
                        terms += [met[k].double() * tw for k in keys[1:]]
                        ep_sums += torch.stack(terms)
                max_norm = cfg.max_grad_norm if cfg.max_grad_norm is not None else float("inf")
                gn = _full(torch.nn.utils.clip_grad_norm_(self.params, max_norm))
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                self.step_count += 1
                *values, grad_norm = torch.cat([ep_sums, gn.detach().double().reshape(1).to(dev)]).tolist()
                ep = dict(zip(keys, values), grad_norm=grad_norm)
                if self.dist.distributed:  # the ranks' shares of the batch's means
                    ep.update(zip(keys, all_reduce_sum([ep[k] for k in keys])))
                for k in sums:
                    sums[k] += ep[k] / cfg.epochs
        finally:
            self.model.train(was_training)

        r = rewards if rewards.dim() == 2 else rewards.unsqueeze(1)
        reward_w = torch.ones(r.shape[1]) if cfg.reward_weights is None else torch.tensor(cfg.reward_weights)
        metrics = dict(sums)
        metrics["reward_mean"] = float((r * reward_w).sum(1).mean())
        if r.shape[1] > 1:
            for j in range(r.shape[1]):
                metrics[f"reward_{j}_mean"] = float(r[:, j].mean())
        metrics["advantage_mean"] = float(adv_host.mean())
        metrics["advantage_std"] = float(adv_host.std()) if B > 1 else 0.0
        metrics["samples"] = float(B)
        metrics["tokens"] = total_tokens
        metrics["step"] = float(self.step_count)
        if cfg.mask_truncated_completions:
            metrics["truncated"] = float(len(truncated))
        return metrics

    def sft_step(self, samples: Sequence[TokenSample]) -> dict[str, float]:
        """One supervised step: mean negative log-likelihood of the masked completion tokens.

        The loss is the token mean over every kept token of the batch
        (micro-batches weighted by their share of tokens, so accumulation is
        exact), for warm starts on demonstrations (AgentConductor's SFT on
        synthetic topologies) and REMUL's masked SFT on answer tokens.
        Returns ``sft_loss``, ``grad_norm``, ``tokens`` and ``step``.
        """
        samples = list(samples)
        if self.policy is not None:
            samples = [s for s in samples if s.policy == self.policy]
        if not samples:
            raise ValueError(
                "no samples to train on" + (f" for policy {self.policy!r}" if self.policy else "")
            )
        plain = [
            TokenSample(
                s.policy, s.prompt_ids, s.completion_ids, s.completion_mask, None, s.group_key, s.meta
            )
            for s in samples
        ]
        host = collate(plain, self.pad_id)
        dev = self.device
        batch = {k: v.to(dev) for k, v in host.items()}
        total = float(host["completion_mask"].sum())
        if total == 0:
            raise ValueError("the samples' completion masks keep no token")
        B = host["completion_mask"].shape[0]
        micro = self._rank_micro_batches(B, batch["input_ids"].shape[1])
        train_model = self._ddp if self._ddp is not None else self.model
        scale = float(self.dist.world_size)
        was_training = self.model.training
        loss_sum_t = torch.zeros((), dtype=torch.float64, device=dev)  # read once, at the end
        try:
            self.model.train()
            self.optimizer.zero_grad(set_to_none=True)
            for j, (ix, live) in enumerate(micro):
                mb = self._slice(batch, ix)
                m = mb["completion_mask"]
                with self._grad_sync(j == len(micro) - 1):
                    with self._autocast():
                        lp = sequence_logprobs(train_model, mb)
                    loss = -(lp * m).sum() / total * (1.0 if live else 0.0)
                    (loss * scale).backward()
                loss_sum_t += loss.detach().double()
            max_norm = self.config.max_grad_norm if self.config.max_grad_norm is not None else float("inf")
            gn = _full(torch.nn.utils.clip_grad_norm_(self.params, max_norm))
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.step_count += 1
            loss_sum, grad_norm = torch.stack([loss_sum_t, gn.detach().double().to(dev)]).tolist()
            if self.dist.distributed:
                loss_sum = all_reduce_sum([loss_sum])[0]
        finally:
            self.model.train(was_training)
        return {"sft_loss": loss_sum, "grad_norm": grad_norm, "tokens": total, "step": float(self.step_count)}

    def _micro_batches(self, rows: int, width: int) -> list[slice]:
        """The rows of each micro-batch, contiguous: ``grad_accum_steps`` of them, or more when
        ``micro_batch_tokens`` caps the padded tokens per micro-batch. Slices select views of
        the batch, with no index to copy to the device."""
        n = self.config.grad_accum_steps
        if self.config.micro_batch_tokens is not None:
            per = max(1, self.config.micro_batch_tokens // max(1, width))
            n = max(n, -(-rows // per))
        return [part for part in shards(rows, min(n, rows)) if part.stop > part.start]

    def _rank_micro_batches(self, rows: int, width: int) -> list[tuple[slice, bool]]:
        """This rank's micro-batches of a ``rows``-row batch, each with whether it is real.

        One process: :meth:`_micro_batches`. Several: the rank's contiguous share
        of the rows, split the same way; every rank then runs as many
        micro-batches as the busiest one (FSDP's forward passes and DDP's
        gradient sum are collective), the extra ones on row 0 with weight 0.
        """
        if not self.dist.distributed:
            return [(ix, True) for ix in self._micro_batches(rows, width)]
        own = own_slice(rows, self.dist)
        n_own = own.stop - own.start
        micro = (
            [
                (slice(own.start + ix.start, own.start + ix.stop), True)
                for ix in self._micro_batches(n_own, width)
            ]
            if n_own
            else []
        )
        count = all_reduce_max(len(micro))
        return micro + [(slice(0, 1), False)] * (count - len(micro))

    def _grad_sync(self, last: bool) -> Any:
        """Sum the gradients across ranks only with the last micro-batch of an optimizer step."""
        if self._ddp is not None and not last:
            return self._ddp.no_sync()
        if self.fsdp:
            self.model.set_requires_gradient_sync(last)
        return contextlib.nullcontext()

    @staticmethod
    def _slice(batch: dict[str, torch.Tensor], ix: slice) -> dict[str, torch.Tensor]:
        return {k: (v if v.dim() == 0 else v[ix]) for k, v in batch.items()}

    def _high_entropy_mask(self, entropy: torch.Tensor, mask: torch.Tensor, rows: int) -> torch.Tensor:
        """:func:`~societas.marl.llm.losses.high_entropy_mask` over every kept token of the
        step on every rank, so that neither micro-batches nor ranks change it."""
        own = own_slice(rows, self.dist) if self.dist.distributed else slice(0, rows)
        values = torch.cat(all_gather_list([entropy[own][mask[own] > 0].float().cpu()]))
        return high_entropy_mask(entropy, mask, self.config.top_entropy_quantile, values=values)

    def _truncated(self, samples: Sequence[TokenSample]) -> list[int]:
        """Indices of the samples that ``max_new_tokens`` cut: ``finish_reason`` ``"length"``, or,
        for a sample without one, a last token that is neither end-of-sequence nor padding (TRL's rule)."""
        ends = {self.tokenizer.eos_token_id, self.pad_id}
        out = []
        for i, s in enumerate(samples):
            reason = s.meta.get("finish_reason")
            if reason is not None:
                cut = reason == "length"
            else:
                cut = bool(s.completion_ids) and s.completion_ids[-1] not in ends
            if cut:
                out.append(i)
        return out

    # -- checkpoints ----------------------------------------------------------------------------

    def checkpoint_nbytes(self) -> int:
        """About how many bytes :meth:`save_checkpoint` writes: the weights (the adapter
        only, with ``lora``) and the optimizer state. Before the first update AdamW holds
        no moments yet; they are counted as they will be after it (two per trainable
        parameter), so a run can check at its start that its checkpoints will fit."""
        # Counted from the parameters' global shapes: under FSDP each rank holds a shard,
        # and the checkpoint holds them whole (the moments: two per trainable parameter).
        moments = 2 * sum(p.numel() * p.element_size() for p in self.params)
        if self.fsdp:
            weights = sum(v.numel() * v.element_size() for v in self.model.state_dict().values())
            return weights + moments
        optimizer = tensor_nbytes(self.optimizer.state_dict()["state"]) if self.optimizer.state else moments
        return tensor_nbytes(self._weights_state()) + optimizer

    def _weights_state(self) -> dict[str, torch.Tensor]:
        if self.config.lora is not None:
            import peft

            return peft.get_peft_model_state_dict(self.model)
        if self.fsdp:  # gathered whole on rank 0 (a collective: every rank calls it)
            full = get_model_state_dict(
                self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
            )
            return {k: v for k, v in full.items() if isinstance(v, torch.Tensor)}
        return self.model.state_dict()

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model's weights on this rank (under FSDP gathered from every rank,
        a collective that every rank calls)."""
        if self.fsdp:
            full = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True))
            return {k: v for k, v in full.items() if isinstance(v, torch.Tensor)}
        return self.model.state_dict()

    def _optimizer_state(self) -> tuple[str, dict[str, Any]]:
        """The optimizer state as saved: keyed by parameter name (``"fqn"``), whole, so that a
        run resumes with any number of processes and either sharding; before the first
        update (no moments yet) torch's own form, which holds only the hyper-parameters."""
        if not self.optimizer.state:
            return "torch", self.optimizer.state_dict()
        return "fqn", get_optimizer_state_dict(
            self.model, self.optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )

    def save_checkpoint(self, path: str | Path) -> Path:
        """Save weights (the LoRA adapter only, with ``lora``), optimizer, step count and RNG state.

        ``path`` is a directory; the checkpoint goes into a fresh
        ``ckpt-<step>-<id>`` sub-directory written under a temporary name and
        renamed when complete, then ``path/LATEST`` is atomically replaced to
        name it, and older versions are removed. Returns the version's path.
        """
        state = self.checkpoint_state()
        if not self.dist.distributed:
            return self.write_checkpoint(path, state)
        # Rank 0 writes; the others learn where, or its error (they would wait forever otherwise).
        final: Path | None = None
        error = None
        if self.dist.main:
            try:
                final = self.write_checkpoint(path, state)
            except Exception as exc:
                error = exc
        shared = broadcast_object((str(final) if final else None, f"{type(error).__name__}: {error}"))
        if error is not None:
            raise error
        if shared[0] is None:
            raise CheckpointError(f"rank 0 could not write the checkpoint under {path}: {shared[1]}")
        return Path(shared[0])

    def checkpoint_state(self) -> dict[str, Any]:
        """What :meth:`save_checkpoint` writes (under FSDP a collective: every rank calls it,
        and only rank 0's has the weights and optimizer state)."""
        # No copies: torch.save writes synchronously, and tensors that share storage
        # (tied input and output embeddings) are then written once.
        fmt, optimizer = self._optimizer_state()
        return {
            "weights": _cpu_tensors(self._weights_state()),
            "optimizer": optimizer,
            "optimizer_format": fmt,
            "step_count": self.step_count,
            "rng": _rng_state(),
            "config": self.config.model_dump(),
            "policy": self.policy,
        }

    def write_checkpoint(self, path: str | Path, state: dict[str, Any]) -> Path:
        """Write ``state`` (:meth:`checkpoint_state`) as the new version under ``path``."""
        root = Path(path)
        root.mkdir(parents=True, exist_ok=True)
        name = f"ckpt-{self.step_count:08d}-{uuid.uuid4().hex[:8]}"
        tmp = root / f".tmp-{name}"
        owner = f" of policy {self.policy!r}" if self.policy is not None else ""
        what = f"the checkpoint{owner} at step {self.step_count}"
        check_free_space(root, tensor_nbytes(state), what)
        tmp.mkdir()
        try:
            with open(tmp / "trainer.pt", "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            final = root / name
            os.replace(tmp, final)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, (OSError, RuntimeError)) and not isinstance(exc, CheckpointError):
                raise CheckpointError(
                    f"writing {what} under {root} failed ({_root_cause(exc)}); "
                    f"{_size(shutil.disk_usage(root).free)} free there now; nothing of it "
                    "was kept and the previous checkpoint is untouched"
                ) from exc
            raise
        latest_tmp = root / f".{_LATEST}.{uuid.uuid4().hex[:8]}"
        with open(latest_tmp, "w") as f:
            f.write(name + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(latest_tmp, root / _LATEST)
        for old in root.iterdir():
            if (
                old.name != name
                and old.is_dir()
                and (old.name.startswith("ckpt-") or old.name.startswith(".tmp-"))
            ):
                shutil.rmtree(old, ignore_errors=True)
        return final

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore what :meth:`save_checkpoint` wrote (the version named by ``path/LATEST``)."""
        root = Path(path)
        latest = root / _LATEST
        if not latest.exists():
            raise FileNotFoundError(f"no checkpoint at {root} (missing {_LATEST})")
        version = root / latest.read_text().strip()
        state = torch.load(version / "trainer.pt", map_location="cpu", weights_only=False)
        if self.config.lora is not None:
            import peft

            peft.set_peft_model_state_dict(self.model, state["weights"])
        elif self.fsdp:  # every rank reads the whole file and keeps its shard
            set_model_state_dict(self.model, state["weights"], options=StateDictOptions(full_state_dict=True))
        else:
            self.model.load_state_dict(state["weights"])
        if state.get("optimizer_format") == "fqn":
            set_optimizer_state_dict(
                self.model, self.optimizer, state["optimizer"], options=StateDictOptions(full_state_dict=True)
            )
        else:  # torch's own form (saved before the first update, or by an earlier version)
            self.optimizer.load_state_dict(state["optimizer"])
        self.step_count = int(state["step_count"])
        _set_rng_state(state["rng"])

    # -- serving the updated weights --------------------------------------------------------------

    def merged_serving_model(self) -> torch.nn.Module | None:
        """With ``lora``: a copy of the model without peft's wrappers, its adapted linears
        holding ``W + scaling * B @ A`` (:class:`~societas.marl.llm.serving.MergedLoRA`;
        every other parameter is this model's own), which generates faster than the
        wrapped model. :meth:`sync_to` on a ``TransformersLLM`` around it recomputes the
        merged weights from the adapters. ``None`` without ``lora``, or where the adapted
        model has trainable parts a plain merge does not cover (DoRA, ``modules_to_save``,
        ...): serve :attr:`model` itself then."""
        if self.config.lora is None:
            return None
        if self.fsdp:  # pragma: no cover - refused in __init__
            raise ValueError("sharding='fsdp' with lora is not supported")
        merged = merged_lora_copy(self.model)
        if merged is None:
            return None
        self._merged_copies.append(merged)
        return merged.module

    def policy_state_dict(self) -> dict[str, torch.Tensor]:
        """What another copy of this policy (built from the same model and
        :class:`GRPOConfig`) needs to sample as this one does: the adapter weights with
        ``lora``, else the whole model's (gathered under FSDP, a collective); on the CPU,
        detached. Load it with :meth:`load_policy_state_dict`, then :meth:`sync_to`."""
        weights = self._weights_state() if self.config.lora is not None else self.full_state_dict()
        return {k: v.detach().cpu() for k, v in weights.items()}

    def load_policy_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Load what :meth:`policy_state_dict` gave (every key must match)."""
        if self.config.lora is not None:
            import peft

            result = peft.set_peft_model_state_dict(self.model, state)
            missing = [k for k in getattr(result, "missing_keys", ()) if "lora_" in k]
            unexpected = list(getattr(result, "unexpected_keys", ()))
            if missing or unexpected:
                raise ValueError(
                    f"adapter weights do not match this policy's adapters: missing {missing[:3]}, "
                    f"unexpected {unexpected[:3]}"
                )
        else:
            self.model.load_state_dict(state)

    def sync_to(self, llm: Any) -> bool:
        """Make ``llm`` generate with the trained weights.

        A :class:`~societas.agents.llm.vllm_llm.VLLMLLM` gets the full state dict
        through its ``load_weights``, which swaps the engine's weights in place and
        clears its prefix cache; it returns ``True``. With LoRA the adapters are merged
        first, in a :class:`~societas.marl.llm.serving.MergedLoRA` copy kept from one
        call to the next.
        For a :class:`~societas.agents.llm.transformers_llm.TransformersLLM`:

        If ``llm.model`` is the module this trainer updates (build the trainer
        with ``PolicyTrainer(llm.model, llm.tokenizer, ...)``) — including the
        LoRA case, where peft injects the adapter into that same module tree —
        nothing needs copying: it only makes sure the model is in eval mode and
        returns ``False``. If ``llm.model`` is a copy made by
        :meth:`merged_serving_model`, its merged weights are recomputed from the
        adapters. Otherwise the weights are copied into ``llm.model`` (LoRA
        adapters merged into a copy first). Both return ``True``.
        """
        if callable(getattr(llm, "load_weights", None)):  # VLLMLLM: push the weights into the engine
            if self.config.lora is None:
                weights = self.full_state_dict()
            else:
                # The merged copy kept for pushing (made once, refreshed each time); a model
                # a plain merge does not cover is merged into a fresh copy each time.
                if not self._merged_copies and (merged := merged_lora_copy(self.model)) is not None:
                    self._merged_copies.append(merged)
                if self._merged_copies:
                    self._merged_copies[0].refresh()
                    weights = self._merged_copies[0].module.state_dict()
                else:
                    weights = copy.deepcopy(self.model).merge_and_unload().state_dict()
            llm.load_weights({k: v.detach() for k, v in weights.items()})
            return True
        target = llm.model
        for merged in self._merged_copies:
            if target is merged.module:
                merged.refresh()
                return True
        shared = target is self.model or target is self.base_model
        if shared and self.fsdp:
            raise ValueError(
                "under FSDP the trained module is sharded over the ranks and cannot generate on its own: "
                "serve the policy from a separate full copy of the model (Backend does this)"
            )
        if not shared:
            if self.config.lora is not None:
                merged = copy.deepcopy(self.model).merge_and_unload()
                target.load_state_dict(merged.state_dict())
            else:
                target.load_state_dict(self.full_state_dict())
        target.eval()
        return not shared


# -- precision ----------------------------------------------------------------------------------


def resolve_precision(choice: str, device: torch.device) -> str:
    """What ``GRPOConfig.precision`` means for a model on ``device``: ``auto`` is
    ``bf16-mixed`` on a CUDA device with bfloat16 and ``fp32`` elsewhere (the CPU's
    bf16 matmuls are slower than its float32 ones but on the newest chips); a CUDA
    device without native bfloat16 (before Ampere) gets ``fp32`` from ``auto``, and a
    bf16 choice there is an error only where torch cannot emulate bf16 either."""
    cuda = device.type == "cuda"
    if choice == "auto":
        return "bf16-mixed" if cuda and torch.cuda.is_bf16_supported(including_emulation=False) else "fp32"
    if choice in ("bf16-mixed", "bf16") and cuda and not torch.cuda.is_bf16_supported():
        raise ValueError(
            f"GRPOConfig.precision={choice!r}, but the CUDA device {device} has no bfloat16 "
            "(torch.cuda.is_bf16_supported() is false): use 'fp32' or 'auto'"
        )
    return choice


def _cast_trainable(model: torch.nn.Module, dtype: torch.dtype | None) -> None:
    """Cast the trainable parameters in place: to ``dtype``, or (``None``) every half-precision one
    to float32. Each ``Parameter`` stays the same object (its contents swapped, as
    ``Module.to`` does for tensor subclasses), so tied weights stay tied and what holds the
    parameters (an optimizer made later, peft's adapters) sees the new ones."""
    for p in model.parameters():  # each shared parameter once
        if not p.requires_grad or not p.is_floating_point():
            continue
        target = dtype if dtype is not None else torch.float32
        if p.dtype == target or (dtype is None and p.dtype not in (torch.bfloat16, torch.float16)):
            continue
        with torch.no_grad():
            cast = torch.nn.Parameter(p.detach().to(target), requires_grad=True)
        torch.utils.swap_tensors(p, cast)


# -- several processes ----------------------------------------------------------------------------


def _fully_shard(model: torch.nn.Module) -> None:
    """FSDP2 in place: each transformer block is its own unit (gathered for its forward and
    freed after), the rest (embeddings, tied head, final norm) the root's; a model that does
    not name its blocks (Hugging Face's ``_no_split_modules``) is sharded as one unit."""
    block_names = set(getattr(model, "_no_split_modules", None) or ())
    for module in model.modules():
        if module is not model and type(module).__name__ in block_names:
            fully_shard(module)
    fully_shard(model)


def _full(t: torch.Tensor) -> torch.Tensor:
    """A DTensor (FSDP's parameters, gradient norms) as one ordinary tensor on every rank."""
    return t.full_tensor() if isinstance(t, DTensor) else t


# -- checkpoint space ---------------------------------------------------------------------------

_SPACE_MARGIN = 64 << 20  # room for the small files and the file system's own overhead


class CheckpointError(OSError):
    """A checkpoint could not be written (not enough disk space, an I/O error).

    Nothing of the failed checkpoint is left behind and the previous one, if
    any, is untouched: a run can be resumed from it once there is room.
    """


def tensor_nbytes(obj: Any) -> int:
    """Bytes of the distinct tensor storages in a nested dict/list/tuple: what
    ``torch.save`` writes for them (a storage shared by several tensors once)."""
    seen: set[tuple[str, int | None, int]] = set()

    def walk(o: Any) -> int:
        if isinstance(o, torch.Tensor):
            storage = o.untyped_storage()
            key = (o.device.type, o.device.index, storage.data_ptr())
            if key in seen:
                return 0
            seen.add(key)
            return storage.nbytes()
        if isinstance(o, dict):
            return sum(walk(v) for v in o.values())
        if isinstance(o, (list, tuple)):
            return sum(walk(v) for v in o)
        return 0

    return walk(obj)


def check_free_space(directory: str | Path, nbytes: int, what: str) -> None:
    """Raise :class:`CheckpointError` before writing ``nbytes`` into ``directory``
    when its file system has less free space than that (plus a small margin)."""
    free = shutil.disk_usage(directory).free
    if free < nbytes + _SPACE_MARGIN:
        raise CheckpointError(
            errno.ENOSPC,
            f"{what} needs about {_size(nbytes)} but {directory} has {_size(free)} free; nothing was written "
            "and the previous checkpoint, if any, is untouched: free some space or choose another run directory",
        )


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"


def _cpu_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Detached CPU views of ``state``; tensors sharing a storage on an accelerator
    share one CPU copy (on the CPU they already share theirs)."""
    copies: dict[tuple[Any, ...], torch.Tensor] = {}
    out = {}
    for k, v in state.items():
        key = (
            v.device,
            v.untyped_storage().data_ptr(),
            v.storage_offset(),
            tuple(v.shape),
            v.stride(),
            v.dtype,
        )
        if key not in copies:
            copies[key] = v.detach().cpu()
        out[k] = copies[key]
    return out


def _root_cause(exc: BaseException) -> str:
    """The first OS error in ``exc``'s chain (torch.save reports a full disk as a
    RuntimeError about file positions, raised while handling the OSError)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError):
            return " ".join(str(seen).split())
        seen = seen.__cause__ or seen.__context__
    return " ".join(f"{type(exc).__name__}: {exc}".split())
