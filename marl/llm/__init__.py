"""GRPO-style training of LLM agents from graph rollouts.

So far the core that a trainer is built on:

- rollouts (:mod:`marl.llm.rollouts`): which roles of a graph train which
  policy (:class:`RoleMap`), token-level samples from ``topology.Runtime``
  traces with a mask over the tokens the trained policy generated
  (:func:`samples_from_trace`, :class:`TokenRecorder` to keep token ids and
  log-probs in the trace), batching and per-token log-probs under a causal LM;
- group-relative advantages (GRPO, Dr. GRPO, GDPO) over groups built from any
  per-sample key (:mod:`marl.llm.advantages`);
- the clipped policy loss with a k3 KL penalty, token masking and TRL's loss
  aggregations (:mod:`marl.llm.losses`);
- the policy update (:mod:`marl.llm.trainer`): :class:`PolicyTrainer` takes
  token samples and rewards, computes advantages, accumulates gradients over
  micro-batches (equal to one full-batch step), optionally with LoRA through
  peft, and saves atomic, resumable checkpoints.
"""

from marl.llm.advantages import gdpo_advantages, group_ids, grpo_advantages
from marl.llm.losses import LOSS_TYPES, policy_loss
from marl.llm.rollouts import (
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
from marl.llm.trainer import GRPOConfig, PolicyTrainer

__all__ = [
    "GRPOConfig", "PolicyTrainer", "LOGPROBS_KEY", "LOSS_TYPES", "SEGMENTS_KEY", "TOKEN_IDS_KEY", "MissingTokensError",
    "RoleMap", "TokenRecorder", "TokenSample", "collate", "gdpo_advantages", "group_ids",
    "grpo_advantages", "policy_loss", "samples_from_trace", "sequence_logprobs",
]
