"""The GRPO policy loss against numbers worked out by hand, and against TRL's ``_compute_loss``."""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from societas.marl.llm import policy_loss
from societas.marl.llm.losses import high_entropy_mask

torch.set_num_threads(1)

LN = math.log


def _one_token(ratios, advantages, **kw):
    """B sequences of one kept token each, with old logp 0 and new logp log(ratio)."""
    new = torch.tensor([[LN(r)] for r in ratios], requires_grad=True)
    old = torch.zeros_like(new)
    loss, metrics = policy_loss(new, old, torch.tensor(advantages), torch.ones_like(old), **kw)
    return new, loss, metrics


@pytest.mark.parametrize(
    "ratio, adv, expected, clipped",
    [
        (1.1, 1.0, -1.1, False),  # inside the range: -rho A
        (1.5, 1.0, -1.2, True),  # above 1+eps with A>0: -(1.2) A, no gradient
        (0.5, 1.0, -0.5, False),  # below 1-eps with A>0: min picks rho A = 0.5
        (0.5, -1.0, 0.8, True),  # below 1-eps with A<0: min(-0.5, -0.8) = -0.8 -> loss 0.8, clipped
        (1.5, -1.0, 1.5, False),  # above 1+eps with A<0: min(-1.5, -1.2) = -1.5 -> loss 1.5
        (0.9, -2.0, 1.8, False),  # inside, negative advantage: -(0.9 * -2)
    ],
)
def test_clipped_surrogate_by_hand(ratio, adv, expected, clipped):
    new, loss, metrics = _one_token([ratio], [adv])
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    loss.backward()
    # d/dnew of -rho A is -rho A (rho = exp(new - old)); clipped tokens get none
    expected_grad = 0.0 if clipped else -ratio * adv
    assert new.grad.item() == pytest.approx(expected_grad, abs=1e-6)
    assert metrics["clip_fraction"] == (1.0 if clipped else 0.0)
    assert metrics["ratio"] == pytest.approx(ratio)


def test_clipped_batch_metrics_and_asymmetric_clip():
    new, loss, metrics = _one_token([1.1, 1.5, 0.5, 0.5, 1.5], [1.0, 1.0, 1.0, -1.0, -1.0])
    # per sequence: -1.1, -1.2, -0.5, 0.8, 1.5 -> mean -0.5 / 5 = -0.1
    assert loss.item() == pytest.approx(-0.1, abs=1e-6)
    assert metrics["clip_fraction"] == pytest.approx(2 / 5)
    assert metrics["ratio"] == pytest.approx((1.1 + 1.5 + 0.5 + 0.5 + 1.5) / 5)
    assert metrics["kl"] == 0.0
    loss.backward()
    torch.testing.assert_close(new.grad.squeeze(1), torch.tensor([-1.1, 0.0, -0.5, 0.0, 1.5]) / 5)
    # DAPO clip-higher: upper bound 1 + 0.28
    _, loss, _ = _one_token([1.5], [1.0], clip_eps_high=0.28)
    assert loss.item() == pytest.approx(-1.28, abs=1e-6)
    _, loss, _ = _one_token([0.7], [-1.0], clip_eps=0.1, clip_eps_high=0.5)
    assert loss.item() == pytest.approx(0.9, abs=1e-6)  # min(-0.7, -0.9) = -0.9


def test_k3_kl_value_and_zero_at_reference():
    new = torch.zeros(1, 2, requires_grad=True)
    ref = torch.tensor([[LN(2.0), -LN(2.0)]])
    # k3 = exp(ref-new) - (ref-new) - 1: 2 - ln2 - 1 = 0.3068528, 0.5 + ln2 - 1 = 0.1931472
    loss, metrics = policy_loss(
        new, new.detach(), torch.zeros(1), torch.ones(1, 2), ref_logp=ref, kl_beta=0.1
    )
    assert metrics["kl"] == pytest.approx((0.3068528 + 0.1931472) / 2, abs=1e-6)
    assert loss.item() == pytest.approx(0.1 * 0.25, abs=1e-6)  # A = 0: only beta * mean KL
    # gradient of k3 w.r.t. new: -exp(ref-new) + 1 -> (-1, 0.5), times beta / 2 tokens
    loss.backward()
    torch.testing.assert_close(new.grad, torch.tensor([[-0.05, 0.025]]))

    new = torch.tensor([[0.3, -1.2, -0.4]], requires_grad=True)
    loss, metrics = policy_loss(
        new, new.detach(), torch.zeros(1), torch.ones(1, 3), ref_logp=new.detach().clone(), kl_beta=1.0
    )
    assert metrics["kl"] == 0.0 and loss.item() == 0.0
    loss.backward()
    assert new.grad.abs().max().item() == 0.0
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(new, new.detach(), torch.zeros(1), torch.ones(1, 3), kl_beta=0.1)


def test_masked_tokens_change_neither_loss_nor_gradient():
    torch.manual_seed(0)
    old = -torch.rand(3, 5)
    ref = -torch.rand(3, 5)
    mask = torch.tensor([[1, 1, 0, 1, 0], [0, 1, 1, 0, 0], [1, 0, 0, 0, 1]])
    adv = torch.tensor([1.0, -0.5, 2.0])
    base = old + 0.1 * torch.randn(3, 5)
    results = []
    for shift in (0.0, 5.0):
        perturbed = base.clone()
        perturbed[mask == 0] -= shift  # e.g. another agent's token or tool output
        new = perturbed.requires_grad_(True)
        old2 = old.clone()
        old2[mask == 0] += shift
        for lt in ("grpo", "bnpo", "dr_grpo"):
            loss, metrics = policy_loss(new, old2, adv, mask, ref_logp=ref, kl_beta=0.05, loss_type=lt)
            (grad,) = torch.autograd.grad(loss, new)
            results.append((lt, loss.detach(), grad, metrics))
    for (_, l0, g0, m0), (_, l1, g1, m1) in zip(results[:3], results[3:]):
        torch.testing.assert_close(l0, l1)
        torch.testing.assert_close(g0, g1)
        assert g0[mask == 0].eq(0).all()
        assert m0 == pytest.approx(m1)


def test_loss_type_aggregation_by_hand():
    # ratio 1 everywhere (new == old), no clipping: per-token loss is -A
    new = torch.zeros(2, 3)
    adv = torch.tensor([1.0, -4.0])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    # kept per-token losses: seq 0: -1, -1 ; seq 1: +4
    out = {lt: policy_loss(new, new, adv, mask, loss_type=lt)[0].item() for lt in ("grpo", "bnpo", "dr_grpo")}
    assert out["grpo"] == pytest.approx((-1.0 + 4.0) / 2)  # seq means -1 and 4, mean 1.5
    assert out["bnpo"] == pytest.approx((-2.0 + 4.0) / 3)  # 2 / 3 tokens
    assert out["dr_grpo"] == pytest.approx((-2.0 + 4.0) / (2 * 3))
    dr = policy_loss(new, new, adv, mask, loss_type="dr_grpo", max_completion_length=4)[0].item()
    assert dr == pytest.approx(2.0 / (2 * 4))
    # a sequence with no kept token adds 0 but counts in grpo's mean
    mask0 = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert policy_loss(new, new, adv, mask0)[0].item() == pytest.approx(-1.0 / 2)
    with pytest.raises(ValueError, match="loss_type"):
        policy_loss(new, new, adv, mask, loss_type="token")
    # DAPO: the kept tokens of the whole step normalise (here 3 kept tokens of a 7-token step)
    dapo = policy_loss(new, new, adv, mask, loss_type="dapo", num_items_in_batch=7)[0].item()
    assert dapo == pytest.approx(
        policy_loss(new, new, adv, mask, loss_type="bnpo")[0].item() * mask.sum() / 7
    )
    assert policy_loss(new, new, adv, mask, loss_type="dapo")[0].item() == pytest.approx(
        policy_loss(new, new, adv, mask, loss_type="bnpo")[0].item()
    )


def _trl_loss(
    new,
    old,
    ref,
    adv,
    mask,
    *,
    loss_type,
    beta,
    eps_high,
    level="token",
    delta=None,
    taus=(1.0, 1.05),
    entropies=None,
    top_entropy_quantile=1.0,
):
    """TRL's own ``GRPOTrainer._compute_loss`` on a stand-in trainer whose model returns ``new``
    (and ``entropies``)."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    B, T = new.shape
    entropies = torch.zeros(B, T) if entropies is None else entropies
    fake = SimpleNamespace(
        top_entropy_quantile=top_entropy_quantile,
        off_policy_mask_threshold=None,
        importance_sampling_level=level,
        beta=beta,
        loss_type=loss_type,
        epsilon_low=0.2,
        epsilon_high=eps_high,
        use_vllm=False,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        max_completion_length=T + 2,
        _entropy_bonus_enabled=False,
        aux_loss_enabled=False,
        args=SimpleNamespace(
            use_bias_correction_kl=False,
            delta=delta,
            steps_per_generation=1,
            sapo_temperature_pos=taus[0],
            sapo_temperature_neg=taus[1],
        ),
        accelerator=SimpleNamespace(
            reduce=lambda x, reduction="sum": x,
            gather=lambda x: x,
            pad_across_processes=lambda x, dim=0, pad_index=0: x,
            num_processes=1,
        ),
        _metrics=defaultdict(lambda: defaultdict(list)),
        _get_per_token_logps_and_entropies=lambda *a, **k: (new, entropies, None),
    )
    fake.get_high_entropy_mask = lambda e, m, t: GRPOTrainer.get_high_entropy_mask(fake, e, m, t)
    inputs = {
        "prompt_ids": torch.zeros(B, 2, dtype=torch.long),
        "prompt_mask": torch.ones(B, 2),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": mask.sum().float() * 1.5,
    }
    return GRPOTrainer._compute_loss(fake, None, inputs), fake._metrics["train"]


VARIANTS = [
    # (loss_type, importance_sampling_level, clip_eps_high, delta)
    ("grpo", "token", 0.2, None),
    ("bnpo", "token", 0.28, None),
    ("dr_grpo", "token", 0.2, None),
    ("dapo", "token", 0.28, None),
    ("grpo", "sequence", 0.28, None),
    ("dapo", "sequence", 0.2, None),
    ("bnpo", "token", 0.2, 1.5),
    ("grpo", "sequence", 0.2, 1.3),
    ("cispo", "token", 5.0, None),
    ("cispo", "token", 1.1, None),
    ("cispo", "sequence", 1.05, None),
    ("sapo", "token", None, None),
    ("sapo", "sequence", None, None),
]


@pytest.mark.parametrize("loss_type, level, eps_high, delta", VARIANTS)
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_every_loss_matches_trl_compute_loss_in_value_gradient_and_metrics(
    loss_type, level, eps_high, delta, beta
):
    pytest.importorskip("trl")
    torch.manual_seed(2)
    B, T = 5, 7
    old = -torch.rand(B, T) * 3
    ref = old + 0.2 * torch.randn(B, T)
    adv = torch.tensor([1.3, -0.7, 0.2, -2.0, 0.9])
    mask = (torch.rand(B, T) > 0.3).long()
    mask[:, 0] = 1
    mask[-1] = 0  # a sequence with no kept token
    base = old + 0.5 * torch.randn(B, T)
    new_trl = base.clone().requires_grad_(True)
    new_ours = base.clone().requires_grad_(True)
    trl_loss, trl_metrics = _trl_loss(
        new_trl,
        old,
        ref,
        adv,
        mask,
        loss_type=loss_type,
        beta=beta,
        eps_high=eps_high or 0.2,
        level=level,
        delta=delta,
    )
    ours, metrics = policy_loss(
        new_ours,
        old,
        adv,
        mask,
        ref_logp=ref,
        clip_eps=0.2,
        clip_eps_high=eps_high,
        kl_beta=beta,
        loss_type=loss_type,
        max_completion_length=T + 2,
        num_items_in_batch=float(mask.sum()) * 1.5,
        importance_sampling_level=level,
        delta=delta,
    )
    torch.testing.assert_close(ours, trl_loss, atol=1e-6, rtol=1e-6)
    (g_trl,) = torch.autograd.grad(trl_loss, new_trl)
    (g_ours,) = torch.autograd.grad(ours, new_ours)
    torch.testing.assert_close(g_ours, g_trl, atol=1e-6, rtol=1e-6)
    assert g_ours.abs().sum() > 0
    if level == "token" and loss_type == "cispo":
        assert metrics["clip_fraction"] == pytest.approx(trl_metrics["cispo_clip_ratio"][-1], abs=1e-6)
    elif level == "token" and loss_type != "sapo":
        assert metrics["clip_fraction"] == pytest.approx(trl_metrics["clip_ratio/region_mean"][-1], abs=1e-6)
        assert metrics["clip_fraction"] > 0
    if beta:
        assert metrics["kl"] == pytest.approx(trl_metrics["kl"][-1], abs=1e-6)


def test_gspo_clips_the_sequence_ratio_as_a_whole():
    """Two kept tokens with log-ratios 0.1 and 0.3: token-level, only the second is clipped;
    GSPO's one ratio exp(0.2) = 1.2214 > 1.2 clips both (grpo's per-sequence mean, A = 1)."""
    old = torch.zeros(1, 3)
    new = torch.tensor([[0.1, 0.3, 5.0]])  # the third token is not kept
    mask = torch.tensor([[1, 1, 0]])
    adv = torch.tensor([1.0])
    token, _ = policy_loss(new, old, adv, mask)
    assert token.item() == pytest.approx(-(math.exp(0.1) + 1.2) / 2)
    seq, m = policy_loss(new, old, adv, mask, importance_sampling_level="sequence")
    assert seq.item() == pytest.approx(-1.2)
    assert m["ratio"] == pytest.approx(math.exp(0.2)) and m["clip_fraction"] == 1.0


def test_variants_refuse_what_would_surprise():
    new = torch.zeros(1, 2)
    args = (new, new, torch.ones(1), torch.ones(1, 2))
    with pytest.raises(ValueError, match="caps the importance weight itself at clip_eps_high"):
        policy_loss(*args, loss_type="cispo")
    with pytest.raises(ValueError, match=r"delta must exceed 1 \+ the upper clip range \(1.28\), got 1.2"):
        policy_loss(*args, clip_eps_high=0.28, delta=1.2)
    with pytest.raises(ValueError, match="applies to the clipped losses, not to 'sapo'"):
        policy_loss(*args, loss_type="sapo", delta=2.0)
    with pytest.raises(ValueError, match="importance_sampling_level must be one of"):
        policy_loss(*args, importance_sampling_level="seq")
    from societas.marl.llm import GRPOConfig

    with pytest.raises(ValueError, match="caps the importance weight itself"):
        GRPOConfig(loss_type="cispo")
    assert GRPOConfig(loss_type="cispo", clip_eps_high=5.0).clip_eps_high == 5.0


@pytest.mark.parametrize("quantile", [0.2, 0.5, 1.0])
@pytest.mark.parametrize("loss_type, beta", [("grpo", 0.04), ("dapo", 0.0), ("cispo", 0.0)])
def test_the_high_entropy_tokens_alone_carry_the_policy_term_as_in_trl(quantile, loss_type, beta):
    """top_entropy_quantile: TRL's mask from the same entropies, the same loss and gradient; the KL
    term and the normalisers keep every kept token."""
    pytest.importorskip("trl")
    torch.manual_seed(3)
    B, T = 4, 9
    old = -torch.rand(B, T) * 3
    ref = old + 0.2 * torch.randn(B, T)
    adv = torch.tensor([1.3, -0.7, 0.2, -2.0])
    mask = (torch.rand(B, T) > 0.25).long()
    mask[:, 0] = 1
    entropies = torch.rand(B, T) * 4
    base = old + 0.5 * torch.randn(B, T)
    new_trl, new_ours = base.clone().requires_grad_(True), base.clone().requires_grad_(True)
    eps_high = 5.0 if loss_type == "cispo" else 0.2
    trl_loss, _ = _trl_loss(
        new_trl,
        old,
        ref,
        adv,
        mask,
        loss_type=loss_type,
        beta=beta,
        eps_high=eps_high,
        entropies=entropies,
        top_entropy_quantile=quantile,
    )
    weight = high_entropy_mask(entropies, mask, quantile)
    kept = int(mask.sum())
    assert int(weight.sum()) == (kept if quantile == 1.0 else pytest.approx(quantile * kept, abs=1))
    ours, _ = policy_loss(
        new_ours,
        old,
        adv,
        mask,
        ref_logp=ref,
        clip_eps_high=eps_high,
        kl_beta=beta,
        loss_type=loss_type,
        max_completion_length=T + 2,
        num_items_in_batch=float(mask.sum()) * 1.5,
        token_weight=weight,
    )
    torch.testing.assert_close(ours, trl_loss, atol=1e-6, rtol=1e-6)
    (g_trl,) = torch.autograd.grad(trl_loss, new_trl)
    (g_ours,) = torch.autograd.grad(ours, new_ours)
    torch.testing.assert_close(g_ours, g_trl, atol=1e-6, rtol=1e-6)
    if beta == 0.0 and quantile < 1.0:  # without KL, the low-entropy tokens get no gradient at all
        assert g_ours[(weight == 0) & (mask > 0)].abs().max() == 0


def test_the_high_entropy_threshold_past_torch_quantiles_limit_interpolates_the_same_way(monkeypatch):
    """Past 2**24 values the threshold comes from a sort: the same linear interpolation."""
    values = torch.rand(1001, generator=torch.Generator().manual_seed(0)) * 3
    entropy, mask = values.reshape(1, -1), torch.ones(1, 1001)
    by_quantile = high_entropy_mask(entropy, mask, 0.2)
    # q = 0.8 of the 1000 gaps lands on the 801st smallest value: it and the 200 above it
    assert int(by_quantile.sum()) == 201
    monkeypatch.setattr(torch, "quantile", lambda *a, **k: pytest.fail("torch.quantile was called"))
    big = torch.rand(2**24 + 1, generator=torch.Generator().manual_seed(1)) * 3
    by_sort = high_entropy_mask(entropy, mask, 0.2, values=big)
    ranked = big.sort().values
    pos = 0.8 * 2**24
    lo = int(pos)
    threshold = ranked[lo] + (ranked[lo + 1] - ranked[lo]) * (pos - lo)
    assert torch.equal(by_sort, (entropy >= threshold).float())
    assert 150 < int(by_sort.sum()) < 260  # about the top fifth of the entropies
