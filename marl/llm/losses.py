"""The GRPO policy loss: clipped surrogate plus k3 KL, masked and aggregated as TRL does.

Per token t of sequence i, with ratio rho = exp(logp_new - logp_old) and the
sequence's advantage A_i (Shao et al., DeepSeekMath, arXiv 2402.03300, eq. 3;
PPO clipping of Schulman et al. 2017; DAPO's asymmetric upper bound
``clip_eps_high``, arXiv 2503.14476)::

    l_{i,t} = -min(rho A_i, clip(rho, 1 - eps, 1 + eps_high) A_i) + beta KL_{i,t}
    KL_{i,t} = exp(ref - new) - (ref - new) - 1        (k3 estimator of KL(pi || pi_ref))

Only tokens with ``mask == 1`` count: the tokens the trained policy generated.
Prompt tokens, padding, other agents' messages and tool output are 0, so they
contribute neither loss nor gradient.

Aggregation (``loss_type``, as in TRL's ``GRPOTrainer``)::

    grpo     mean_i [ sum_t m_{i,t} l_{i,t} / max(1, sum_t m_{i,t}) ]   (per-sequence mean, then mean)
    bnpo     sum_{i,t} m l / max(1, sum_{i,t} m)                        (mean over all kept tokens)
    dr_grpo  sum_{i,t} m l / (B * max_completion_length)                (Dr. GRPO, arXiv 2503.20783)
    dapo     sum_{i,t} m l / num_items_in_batch                        (DAPO's token-level loss, TRL's default)

``num_items_in_batch`` is the number of kept tokens in the whole batch of the
optimizer step (TRL's ``num_items_in_batch``); it defaults to this call's
kept tokens, where ``dapo`` equals ``bnpo``. Across micro-batches of one
step the two differ: ``bnpo`` normalises each micro-batch by its own tokens,
``dapo`` every micro-batch by the step's total.

A sequence with no kept token adds 0 to the ``grpo`` mean but still counts in
its denominator B (TRL does the same). ``max_completion_length`` defaults to T.

Metrics (masked means over kept tokens, as TRL logs them): ``clip_fraction``
is the share of tokens whose clipped term is active (rho < 1 - eps with A < 0,
or rho > 1 + eps_high with A > 0; these tokens get no gradient), ``kl`` the
mean k3 KL (0 without a reference), ``ratio`` the mean rho.
"""

from __future__ import annotations

from typing import Literal

import torch

__all__ = ["LOSS_TYPES", "policy_loss", "policy_loss_terms"]

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def policy_loss(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    ref_logp: torch.Tensor | None = None,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    kl_beta: float = 0.0,
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = "grpo",
    max_completion_length: int | None = None,
    num_items_in_batch: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped GRPO surrogate with optional k3 KL penalty.

    Args:
        new_logp: [B, T] log-probs of the sampled tokens under the policy being trained.
        old_logp: [B, T] log-probs under the policy that sampled them (no gradient flows).
        advantages: [B] one advantage per sequence.
        mask: [B, T] 1 for tokens the trained policy generated, 0 elsewhere.
        ref_logp: [B, T] reference-policy log-probs; required when ``kl_beta != 0``.
        clip_eps: lower clip range eps (ratio >= 1 - eps).
        clip_eps_high: upper clip range (ratio <= 1 + eps_high); defaults to ``clip_eps``.
        kl_beta: KL coefficient beta.
        loss_type: ``"grpo"``, ``"bnpo"``, ``"dr_grpo"`` or ``"dapo"`` aggregation (module docstring).
        max_completion_length: the ``dr_grpo`` constant; defaults to T.
        num_items_in_batch: the ``dapo`` normaliser (kept tokens of the whole step); defaults to
            ``mask.sum()``.

    Returns:
        The scalar loss and a dict with ``clip_fraction``, ``kl`` and ``ratio``.
    """
    loss, terms = policy_loss_terms(
        new_logp,
        old_logp,
        advantages,
        mask,
        ref_logp=ref_logp,
        clip_eps=clip_eps,
        clip_eps_high=clip_eps_high,
        kl_beta=kl_beta,
        loss_type=loss_type,
        max_completion_length=max_completion_length,
        num_items_in_batch=num_items_in_batch,
    )
    return loss, {k: float(v) for k, v in terms.items()}


def policy_loss_terms(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    ref_logp: torch.Tensor | None = None,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    kl_beta: float = 0.0,
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = "grpo",
    max_completion_length: int | None = None,
    num_items_in_batch: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """:func:`policy_loss` with its metrics left on the device: 0-dimensional tensors
    (``kl`` included, 0 without a reference), so that a training loop can sum them there
    and read them once.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if new_logp.dim() != 2:
        raise ValueError(f"new_logp must have shape [B, T], got {tuple(new_logp.shape)}")
    for name, t in (("old_logp", old_logp), ("mask", mask), ("ref_logp", ref_logp)):
        if t is not None and t.shape != new_logp.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(new_logp.shape)}")
    if advantages.shape != new_logp.shape[:1]:
        raise ValueError(f"advantages must have shape [{new_logp.shape[0]}], got {tuple(advantages.shape)}")
    if kl_beta != 0.0 and ref_logp is None:
        raise ValueError("kl_beta != 0 needs ref_logp")
    eps_low = clip_eps
    eps_high = clip_eps if clip_eps_high is None else clip_eps_high

    m = mask.to(new_logp.dtype)
    A = advantages.to(new_logp.dtype).unsqueeze(1)  # [B, 1]
    ratio = torch.exp(new_logp - old_logp.detach())  # rho
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    per_token = -torch.min(ratio * A, clipped * A)  # -min(rho A, clip(rho) A)

    kl = None
    if ref_logp is not None:
        d = ref_logp.detach() - new_logp
        kl = torch.exp(d) - d - 1.0  # k3
        if kl_beta != 0.0:
            per_token = per_token + kl_beta * kl

    # Masked tokens are zeroed with where (not only multiplied) so a NaN/inf there cannot reach the loss value.
    per_token = torch.where(m > 0, per_token, torch.zeros_like(per_token)) * m
    if loss_type == "grpo":
        loss = (per_token.sum(dim=1) / m.sum(dim=1).clamp(min=1.0)).mean()
    elif loss_type == "bnpo":
        loss = per_token.sum() / m.sum().clamp(min=1.0)
    elif loss_type == "dapo":
        items = float(m.sum()) if num_items_in_batch is None else float(num_items_in_batch)
        loss = per_token.sum() / max(1.0, items)
    else:
        L = new_logp.shape[1] if max_completion_length is None else max_completion_length
        loss = per_token.sum() / (new_logp.shape[0] * L)

    with torch.no_grad():
        is_clipped = ((ratio < 1.0 - eps_low) & (A < 0)) | ((ratio > 1.0 + eps_high) & (A > 0))
        metrics = {
            "clip_fraction": _masked_mean(is_clipped.to(m.dtype), m),
            "kl": _masked_mean(kl, m) if kl is not None else torch.zeros((), dtype=m.dtype, device=m.device),
            "ratio": _masked_mean(ratio, m),
        }
    return loss, metrics
