"""Group-relative advantages for GRPO-style training: GRPO, Dr. GRPO and GDPO.

A *group* is a set of samples that share a baseline: the G completions of one
prompt in GRPO, the samples of one hop count in Dr. Zero's HRPO, or any other
key (:func:`group_ids` turns per-sample keys into integer group ids). Groups
need not be contiguous in the batch and may have different sizes.

GRPO (Shao et al., DeepSeekMath, arXiv 2402.03300, outcome supervision)::

    r_i   = sum_k w_k r_{i,k}                               (weighted reward sum)
    A_i   = (r_i - mean_{j in g(i)} r_j) / (std_{j in g(i)} r_j + eps)

Dr. GRPO (Liu et al., arXiv 2503.20783) drops the division (``scale=False``)::

    A_i   = r_i - mean_{j in g(i)} r_j

Group mean with the *batch's* std (``scale="batch"``; TRL's
``scale_rewards="batch"``, the "Lite PPO" recommendation of Liu et al.,
"Tricks or Traps?", arXiv 2508.08221)::

    A_i   = (r_i - mean_{j in g(i)} r_j) / (std_batch r + eps)

GDPO (arXiv 2601.05242) normalises each reward separately inside the group,
so that reward *combinations* stay apart (GRPO maps group totals (0, 1) and
(0, 2) to the same advantages), then sums and normalises over the batch::

    A_{i,k} = (r_{i,k} - mean_{j in g(i)} r_{j,k}) / (std_{j in g(i)} r_{j,k} + eps)
    s_i     = sum_k w_k A_{i,k}
    A_i     = (s_i - mean_batch s) / (std_batch s + eps)

``std`` is the *unbiased* (Bessel-corrected, n - 1) standard deviation, as
``torch.std`` and TRL's ``GRPOTrainer`` (``trl.trainer.utils.nanstd``) use;
``eps = 1e-4`` is TRL's constant. These match TRL's
``multi_objective_aggregation="sum_then_normalize"`` (GRPO, with
``scale_rewards="group"`` or ``"none"``) and ``"normalize_then_sum"`` (GDPO)
when its groups are contiguous blocks of ``num_generations``.

Degenerate groups, decided exactly rather than through floating-point noise:

- a singleton group (one sample) has no baseline to compare against: its
  advantage is 0 (TRL's ``num_generations == 1`` case), except in a group
  keyed by :class:`HopGroup` (Dr. Zero's HRPO), where a lone sample keeps its
  raw (weighted) reward as its advantage, as the reference code does;
- a group whose rewards are all equal carries no learning signal: its
  advantage is 0 (TRL gives 0 up to rounding of the mean; here it is exactly 0).

In GDPO these rules apply per reward column, and again to the batch step
(a batch of one sample, or with all ``s_i`` equal, gets advantages 0).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

__all__ = ["HopGroup", "gdpo_advantages", "group_ids", "grpo_advantages", "raw_singletons"]

TRL_EPS = 1e-4


@dataclass(frozen=True)
class HopGroup:
    """The group key of HRPO (Dr. Zero, arXiv 2601.07055): the proposer samples of one hop count.

    Advantages are standardised within the hop group like GRPO's, except that a
    hop group with a single sample keeps its raw reward as its advantage (the
    reference implementation's rule) instead of 0.
    """

    hops: Hashable


def raw_singletons(keys: Sequence[Hashable]) -> torch.Tensor:
    """``[B]`` bool: which samples' groups keep a lone sample's raw reward (:class:`HopGroup` keys)."""
    return torch.tensor([isinstance(k, HopGroup) for k in keys], dtype=torch.bool)


def group_ids(keys: Sequence[Hashable]) -> torch.Tensor:
    """Integer group ids from one hashable key per sample, numbered by first appearance.

    ``group_ids(["q1", "q2", "q1"])`` is ``tensor([0, 1, 0])``; grouping by hop
    count (HRPO of Dr. Zero, arXiv 2601.07055) is ``group_ids(hops)``.
    """
    index: dict[Hashable, int] = {}
    ids = [index.setdefault(k, len(index)) for k in keys]
    return torch.tensor(ids, dtype=torch.long)


def _as_matrix(rewards: torch.Tensor) -> torch.Tensor:
    """Rewards as a float [B, R] matrix ([B] becomes [B, 1])."""
    rewards = torch.as_tensor(rewards)
    if not rewards.is_floating_point():
        rewards = rewards.float()
    if rewards.dim() == 1:
        rewards = rewards.unsqueeze(1)
    if rewards.dim() != 2:
        raise ValueError(f"rewards must have shape [B] or [B, R], got {tuple(rewards.shape)}")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards must be finite (no NaN or inf)")
    return rewards


def _weights(weights, num_rewards: int, like: torch.Tensor) -> torch.Tensor:
    if weights is None:
        return torch.ones(num_rewards, dtype=like.dtype, device=like.device)
    w = torch.as_tensor(weights, dtype=like.dtype, device=like.device).flatten()
    if w.numel() != num_rewards:
        raise ValueError(f"weights has {w.numel()} entries but rewards has {num_rewards} columns")
    return w


def _compact_groups(groups, batch: int, device) -> tuple[torch.Tensor, int]:
    """Groups renumbered 0..G-1 (any integer labels allowed) and G."""
    groups = torch.as_tensor(groups, device=device)
    if groups.dim() != 1 or groups.numel() != batch:
        raise ValueError(f"groups must have shape [{batch}], got {tuple(groups.shape)}")
    if groups.is_floating_point() or groups.dtype == torch.bool:
        raise ValueError("groups must be an integer tensor (use group_ids(keys) for other keys)")
    uniq, inverse = torch.unique(groups, return_inverse=True)
    return inverse, int(uniq.numel())


def _normalise_in_groups(
    x: torch.Tensor, groups: torch.Tensor, num_groups: int, scale: bool, eps: float
) -> torch.Tensor:
    """(x - mean_g) / (std_g + eps) column-wise for x [B, R]; 0 for singleton and constant groups."""
    B, R = x.shape
    idx = groups.unsqueeze(1).expand(B, R)
    count = torch.bincount(groups, minlength=num_groups).to(x.dtype).unsqueeze(1)  # [G, 1]
    total = torch.zeros(num_groups, R, dtype=x.dtype, device=x.device).scatter_add_(0, idx, x)
    mean = total / count
    centred = x - mean[groups]
    # Constant groups are detected exactly (max == min), not by a rounding-prone std == 0.
    hi = torch.full((num_groups, R), -torch.inf, dtype=x.dtype, device=x.device).scatter_reduce(
        0, idx, x, "amax"
    )
    lo = torch.full((num_groups, R), torch.inf, dtype=x.dtype, device=x.device).scatter_reduce(
        0, idx, x, "amin"
    )
    degenerate = ((count <= 1) | (hi == lo))[groups]  # [B, R]
    if scale:
        sq = torch.zeros(num_groups, R, dtype=x.dtype, device=x.device).scatter_add_(0, idx, centred**2)
        std = torch.sqrt(sq / (count - 1).clamp(min=1))  # unbiased (n - 1)
        centred = centred / (std[groups] + eps)
    return torch.where(degenerate, torch.zeros_like(centred), centred)


def grpo_advantages(
    rewards: torch.Tensor,
    groups: torch.Tensor,
    weights=None,
    scale: bool | str = True,
    eps: float = TRL_EPS,
    keep_raw: torch.Tensor | None = None,
) -> torch.Tensor:
    """GRPO advantages [B]: weighted reward sum, normalised within each group.

    Args:
        rewards: [B] or [B, R] rewards (R reward functions).
        groups: [B] integer group id per sample (any labels; see :func:`group_ids`).
        weights: [R] reward weights (default all 1).
        scale: divide by the group's unbiased std + eps (GRPO); ``False`` only
            centres on the group mean (Dr. GRPO); ``"batch"`` divides by the unbiased
            std of the whole batch's (weighted) rewards + eps.
        eps: added to the std (TRL uses 1e-4).
        keep_raw: [B] bool; a sample marked here that is alone in its group keeps
            its weighted reward as advantage (HRPO's rule, see :class:`HopGroup`
            and :func:`raw_singletons`); unmarked singletons get 0.
    """
    r = _as_matrix(rewards)
    w = _weights(weights, r.shape[1], r)
    g, G = _compact_groups(groups, r.shape[0], r.device)
    if scale not in (True, False, "batch"):
        raise ValueError(f"scale must be True, False or 'batch', got {scale!r}")
    total = (r * w).sum(dim=1, keepdim=True)  # r_i = sum_k w_k r_ik
    adv = _normalise_in_groups(total, g, G, scale is True, eps).squeeze(1)
    if scale == "batch" and total.shape[0] > 1:
        adv = adv / (total.squeeze(1).std() + eps)
    if keep_raw is not None:
        keep_raw = torch.as_tensor(keep_raw, dtype=torch.bool, device=adv.device)
        if keep_raw.shape != adv.shape:
            raise ValueError(f"keep_raw must have shape [{adv.shape[0]}], got {tuple(keep_raw.shape)}")
        alone = torch.bincount(g, minlength=G)[g] == 1
        adv = torch.where(keep_raw & alone, total.squeeze(1), adv)
    return adv


def gdpo_advantages(
    rewards: torch.Tensor, groups: torch.Tensor, weights=None, eps: float = TRL_EPS
) -> torch.Tensor:
    """GDPO advantages [B]: each reward normalised within its group, weighted sum, batch-normalised.

    Args:
        rewards: [B, R] rewards ([B] is one reward, and then GDPO is GRPO followed
            by a batch normalisation).
        groups: [B] integer group id per sample.
        weights: [R] reward weights (default all 1).
        eps: added to every std (TRL uses 1e-4).
    """
    r = _as_matrix(rewards)
    w = _weights(weights, r.shape[1], r)
    g, G = _compact_groups(groups, r.shape[0], r.device)
    per_reward = _normalise_in_groups(r, g, G, True, eps)  # A_ik
    s = (per_reward * w).sum(dim=1, keepdim=True)  # s_i = sum_k w_k A_ik
    whole_batch = torch.zeros(r.shape[0], dtype=torch.long, device=r.device)
    return _normalise_in_groups(s, whole_batch, 1, True, eps).squeeze(1)
