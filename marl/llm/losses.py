"""The GRPO policy loss: clipped surrogate plus k3 KL, masked and aggregated as TRL does.

Per token t of sequence i, with ratio rho = exp(logp_new - logp_old) and the
sequence's advantage A_i (Shao et al., DeepSeekMath, arXiv 2402.03300, eq. 3;
PPO clipping of Schulman et al. 2017; DAPO's asymmetric upper bound
``clip_eps_high``, arXiv 2503.14476)::

    l_{i,t} = -min(rho A_i, clip(rho, 1 - eps, 1 + eps_high) A_i) + beta KL_{i,t}
    KL_{i,t} = exp(ref - new) - (ref - new) - 1        (k3 estimator of KL(pi || pi_ref))

Variants of the surrogate, as TRL's ``GRPOTrainer`` names them:

* ``importance_sampling_level="sequence"`` (GSPO, Zheng et al., arXiv 2507.18071):
  one ratio per sequence, ``rho_i = exp(mean_t (logp_new - logp_old))`` over
  its kept tokens, clipped as a whole (GSPO's clip ranges are small, 3e-4/4e-4);
* ``delta`` (two-sided clipping, INTELLECT-2, arXiv 2505.07291): the unclipped
  term's ratio is capped at ``delta`` too, so a negative advantage cannot
  push a token with a large ratio without bound (``delta > 1 + eps_high``);
* ``loss_type="cispo"`` (MiniMax-M1, arXiv 2506.13585; ScaleRL, arXiv
  2510.13786): ``l = -sg(min(rho, eps_max)) A logp_new``, the importance weight
  clipped (at ``clip_eps_high`` = eps_max, not ``1 + clip_eps_high``; ScaleRL
  uses 5.0) and never the token's gradient; aggregated as ``dapo``;
* ``loss_type="sapo"`` (Soft Adaptive Policy Optimization, arXiv
  2511.20347): ``l = -(4 / tau) sigmoid(tau (rho - 1)) A`` with ``tau =
  tau_pos`` for ``A > 0`` and ``tau_neg`` otherwise, a smooth gate in place of
  the hard clip; aggregated as ``grpo``.

Only tokens with ``mask == 1`` count: the tokens the trained policy generated.
Prompt tokens, padding, other agents' messages and tool output are 0, so they
contribute neither loss nor gradient.

Aggregation (``loss_type``, as in TRL's ``GRPOTrainer``)::

    grpo     mean_i [ sum_t m_{i,t} l_{i,t} / max(1, sum_t m_{i,t}) ]   (per-sequence mean, then mean)
    bnpo     sum_{i,t} m l / max(1, sum_{i,t} m)                        (mean over all kept tokens)
    dr_grpo  sum_{i,t} m l / (B * max_completion_length)                (Dr. GRPO, arXiv 2503.20783)
    dapo     sum_{i,t} m l / num_items_in_batch                        (DAPO's token-level loss, TRL's default)
    cispo    as dapo;   sapo    as grpo

``num_items_in_batch`` is the number of kept tokens in the whole batch of the
optimizer step (TRL's ``num_items_in_batch``); it defaults to this call's
kept tokens, where ``dapo`` equals ``bnpo``. Across micro-batches of one
step the two differ: ``bnpo`` normalises each micro-batch by its own tokens,
``dapo`` every micro-batch by the step's total.

A sequence with no kept token adds 0 to the ``grpo`` mean but still counts in
its denominator B (TRL does the same). ``max_completion_length`` defaults to T.

Metrics (masked means over kept tokens, as TRL logs them): ``clip_fraction``
is the share of tokens whose clipped term is active (rho < 1 - eps with A < 0,
or rho > 1 + eps_high with A > 0; these tokens get no gradient; for ``cispo``
the share whose weight was capped, rho > eps_max with A > 0, TRL's
``cispo_clip_ratio``; 0 for ``sapo``, which has no hard clip), ``kl`` the
mean k3 KL (0 without a reference), ``ratio`` the mean rho. With
``importance_sampling_level="sequence"`` every kept token carries its
sequence's ratio, so these means weigh a sequence by its kept tokens (TRL's
weigh sequences equally).
"""

from __future__ import annotations

from typing import Literal

import torch

__all__ = [
    "IMPORTANCE_SAMPLING_LEVELS",
    "LOSS_TYPES",
    "LossType",
    "high_entropy_mask",
    "policy_loss",
    "policy_loss_terms",
]

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo"]


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
    loss_type: LossType = "grpo",
    max_completion_length: int | None = None,
    num_items_in_batch: float | None = None,
    importance_sampling_level: Literal["token", "sequence"] = "token",
    delta: float | None = None,
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
    token_weight: torch.Tensor | None = None,
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
            For ``cispo``: the cap eps_max of the importance weight itself (required).
        kl_beta: KL coefficient beta.
        loss_type: ``"grpo"``, ``"bnpo"``, ``"dr_grpo"``, ``"dapo"``, ``"cispo"`` or ``"sapo"``
            (module docstring).
        max_completion_length: the ``dr_grpo`` constant; defaults to T.
        num_items_in_batch: the ``dapo`` and ``cispo`` normaliser (kept tokens of the whole step);
            defaults to ``mask.sum()``.
        importance_sampling_level: ``"token"`` (a ratio per token) or ``"sequence"`` (GSPO).
        delta: two-sided clipping's cap on the unclipped ratio (the clipped losses only).
        sapo_temperature_pos: ``sapo``'s gate temperature for positive advantages.
        sapo_temperature_neg: ``sapo``'s gate temperature for the others.
        token_weight: [B, T] weights of the policy term per token before the KL is added
            (the high-entropy mask of ``top_entropy_quantile``: TRL's ``entropy_mask``); the
            aggregation's denominators still count every kept token, as TRL's do.

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
        importance_sampling_level=importance_sampling_level,
        delta=delta,
        sapo_temperature_pos=sapo_temperature_pos,
        sapo_temperature_neg=sapo_temperature_neg,
        token_weight=token_weight,
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
    loss_type: LossType = "grpo",
    max_completion_length: int | None = None,
    num_items_in_batch: float | None = None,
    importance_sampling_level: Literal["token", "sequence"] = "token",
    delta: float | None = None,
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
    token_weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """:func:`policy_loss` with its metrics left on the device: 0-dimensional tensors
    (``kl`` included, 0 without a reference), so that a training loop can sum them there
    and read them once.
    """
    if new_logp.dim() != 2:
        raise ValueError(f"new_logp must have shape [B, T], got {tuple(new_logp.shape)}")
    for name, t in (
        ("old_logp", old_logp),
        ("mask", mask),
        ("ref_logp", ref_logp),
        ("token_weight", token_weight),
    ):
        if t is not None and t.shape != new_logp.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(new_logp.shape)}")
    if advantages.shape != new_logp.shape[:1]:
        raise ValueError(f"advantages must have shape [{new_logp.shape[0]}], got {tuple(advantages.shape)}")
    if kl_beta != 0.0 and ref_logp is None:
        raise ValueError("kl_beta != 0 needs ref_logp")
    if importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
        raise ValueError(
            f"importance_sampling_level must be one of {IMPORTANCE_SAMPLING_LEVELS}, got {importance_sampling_level!r}"
        )
    check_variant(loss_type, clip_eps, clip_eps_high, delta)
    eps_low = clip_eps
    eps_high = clip_eps if clip_eps_high is None else clip_eps_high

    m = mask.to(new_logp.dtype)
    A = advantages.to(new_logp.dtype).unsqueeze(1)  # [B, 1]
    log_ratio = new_logp - old_logp.detach()
    if importance_sampling_level == "sequence":  # GSPO: one ratio per sequence, [B, 1]
        log_ratio = (log_ratio * m).sum(dim=1, keepdim=True) / m.sum(dim=1, keepdim=True).clamp(min=1.0)
    ratio = torch.exp(log_ratio)  # rho
    if loss_type == "cispo":  # the weight is clipped and carries no gradient; logp_new does
        per_token = -torch.clamp(ratio, max=eps_high).detach() * A * new_logp
    elif loss_type == "sapo":  # a smooth gate instead of the hard clip
        tau = torch.where(A > 0, sapo_temperature_pos, sapo_temperature_neg)
        per_token = -(torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau) * A
    else:
        clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
        capped = ratio if delta is None else torch.clamp(ratio, max=delta)  # two-sided clipping
        per_token = -torch.min(capped * A, clipped * A)  # -min(rho A, clip(rho) A)

    if token_weight is not None:
        per_token = per_token * token_weight.to(per_token.dtype)

    kl = None
    if ref_logp is not None:
        d = ref_logp.detach() - new_logp
        kl = torch.exp(d) - d - 1.0  # k3
        if kl_beta != 0.0:
            per_token = per_token + kl_beta * kl

    # Masked tokens are zeroed with where (not only multiplied) so a NaN/inf there cannot reach the loss value.
    per_token = torch.where(m > 0, per_token, torch.zeros_like(per_token)) * m
    if loss_type in ("grpo", "sapo"):
        loss = (per_token.sum(dim=1) / m.sum(dim=1).clamp(min=1.0)).mean()
    elif loss_type == "bnpo":
        loss = per_token.sum() / m.sum().clamp(min=1.0)
    elif loss_type in ("dapo", "cispo"):
        items = float(m.sum()) if num_items_in_batch is None else float(num_items_in_batch)
        loss = per_token.sum() / max(1.0, items)
    else:
        L = new_logp.shape[1] if max_completion_length is None else max_completion_length
        loss = per_token.sum() / (new_logp.shape[0] * L)

    with torch.no_grad():
        if loss_type == "cispo":
            is_clipped = (ratio > eps_high) & (A > 0)
        elif loss_type == "sapo":
            is_clipped = torch.zeros_like(ratio, dtype=torch.bool)
        else:
            is_clipped = ((ratio < 1.0 - eps_low) & (A < 0)) | ((ratio > 1.0 + eps_high) & (A > 0))
        metrics = {
            "clip_fraction": _masked_mean(is_clipped.to(m.dtype).expand_as(m), m),
            "kl": _masked_mean(kl, m) if kl is not None else torch.zeros((), dtype=m.dtype, device=m.device),
            "ratio": _masked_mean(ratio.expand_as(m), m),
        }
    return loss, metrics


def check_variant(loss_type: str, clip_eps: float, clip_eps_high: float | None, delta: float | None) -> None:
    """Refuse the combinations whose meaning would surprise: ``cispo`` without its cap
    (TRL would cap the weight at ``clip_eps``, 0.2), ``delta`` on a loss it does not
    enter, or at or below the clip range's upper end."""
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if loss_type == "cispo" and clip_eps_high is None:
        raise ValueError(
            "loss_type='cispo' caps the importance weight itself at clip_eps_high (eps_max, not "
            "1 + eps; ScaleRL uses 5.0): set clip_eps_high"
        )
    if delta is not None:
        if loss_type in ("cispo", "sapo"):
            raise ValueError(
                f"delta (two-sided clipping) applies to the clipped losses, not to {loss_type!r}"
            )
        top = 1.0 + (clip_eps if clip_eps_high is None else clip_eps_high)
        if delta <= top:
            raise ValueError(f"delta must exceed 1 + the upper clip range ({top:g}), got {delta:g}")


def high_entropy_mask(
    entropy: torch.Tensor, mask: torch.Tensor, quantile: float, values: torch.Tensor | None = None
) -> torch.Tensor:
    """[B, T] (``mask``'s dtype): 1 on the kept tokens whose entropy is at least the
    ``1 - quantile`` quantile of ``values`` (default: the kept tokens' entropies), the forking
    tokens of Wang et al., "Beyond the 80/20 rule" (arXiv 2506.01939), TRL's
    ``get_high_entropy_mask`` (linear interpolation, ``>=``)."""
    if not 0.0 < quantile <= 1.0:
        raise ValueError(f"quantile must be in (0, 1], got {quantile}")
    if values is None:
        values = entropy[mask > 0]
    values = values.float()
    out = torch.zeros_like(mask)
    if values.numel() == 0:
        return out
    q = 1.0 - quantile
    if values.numel() <= 2**24:  # torch.quantile's limit
        threshold = torch.quantile(values, q)
    else:  # the same linear interpolation between the two order statistics around q (n - 1)
        ranked = values.sort().values
        pos = q * (values.numel() - 1)
        lo = int(pos)
        hi = min(lo + 1, values.numel() - 1)
        threshold = ranked[lo] + (ranked[hi] - ranked[lo]) * (pos - lo)
    return ((entropy * (mask > 0) >= threshold.to(entropy.device)) & (mask > 0)).to(mask.dtype)
