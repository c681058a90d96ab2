"""Seed for the CFR discovery task (Li, Schultz, Hennes & Lanctot, arXiv 2602.16928).

The evolvable part is the three hooks that ``societas.marl.games.CFRSolver`` calls,
once per iteration and player, on tensors ``[B, I_p, A]`` (all information sets
of one player at once): regret accumulation, the current policy from the
regrets, and policy accumulation. Each hook object is made for one player and
one run, so it may keep state between iterations (``self``); ``self.horizon``
is the planned number of iterations ``T`` (for schedules).

The seed is exactly CFR+ (Tammelin 2014), in floating point too:
``R_t = max(R_{t-1} + r_t, 0)``, regret matching, linear averaging.

The hooks are written as short pipelines of named steps so that building
blocks (``building_blocks.yaml``: DCFR's discounting, PCFR+'s optimism,
VAD-CFR's volatility-adaptive discounting, ...) can be inserted, replaced and
removed as code. A block sits between ``# block NAME`` and ``# end NAME``
comments; the seed holds one, regret matching+'s floor at 0.
"""

import torch

from societas.marl.games.cfr import Algorithm


# EVOLVE-BLOCK-START
# Seed: PDCFR+ (Xu et al. 2024), the built-in `dpcfr+` (alpha 2.3, gamma 5): RM+ regrets with
# R_{t-1} discounted by (t-1)^a/((t-1)^a+1), sigma_{t+1} from [R_t t^a/(t^a+1) + r_t]^+,
# averaging weights t^5 in discounted form.
class RegretAccumulator:
    """R_t from R_{t-1} (old) and this iteration's instantaneous regrets r_t (new)."""

    def __init__(self, horizon):
        self.horizon = float(horizon)

    def update(self, cum_regret, inst_regret, ctx):
        t = float(ctx.iteration)
        old, new = cum_regret, inst_regret
        # block pdcfr-discount: PDCFR+ (Xu et al. 2024): R_{t-1} times (t-1)^a/((t-1)^a+1) before r_t is added
        old = old * ((t - 1.0) ** 2.3 / ((t - 1.0) ** 2.3 + 1.0))
        # end pdcfr-discount
        regret = old + new
        # block rm-plus: regret matching+ (Tammelin 2014): cumulative regrets are floored at 0
        regret = regret.clamp(min=0.0)
        # end rm-plus
        return regret


class PolicyFromRegret:
    """sigma_{t+1} proportional to the positive part of a target (here R_t); uniform if none is positive."""

    def __init__(self, horizon):
        self.horizon = float(horizon)

    def update(self, cum_regret, prev_policy, ctx):
        t = float(ctx.iteration)
        legal = ctx.legal.to(cum_regret.dtype)
        target = cum_regret
        # block discounted-prediction: PDCFR+ (Xu et al. 2024): R_t times t^a/(t^a+1), plus the prediction r_t
        target = target * (t**2.3 / (t**2.3 + 1.0)) + ctx.inst_regret
        # end discounted-prediction
        positive = target.clamp(min=0.0) * legal
        total = positive.sum(-1, keepdim=True)
        uniform = legal / legal.sum(-1, keepdim=True)
        return torch.where(total > 0, positive / total, uniform)


class PolicyAccumulator:
    """S_t = S_{t-1} + weight_t * x_t(I) * sigma_t, here weight_t = t (linear averaging)."""

    def __init__(self, horizon):
        self.horizon = float(horizon)

    def update(self, cum_policy, policy, reach, cf_reach, ctx):
        t = float(ctx.iteration)
        weight = t**1.0
        # block discounted-average: weights t^g in discounted form (DCFR, PCFR+): S_{t-1} times ((t-1)/t)^g
        cum_policy = cum_policy * ((t - 1.0) / t) ** 5.0
        weight = 1.0
        # end discounted-average
        contribution = reach.unsqueeze(-1) * policy
        return cum_policy + weight * contribution


# EVOLVE-BLOCK-END


def build_algorithm(iterations):
    """The evaluator calls this with the planned number of iterations: an Algorithm of the three hooks."""
    return Algorithm(
        "evolved",
        lambda: RegretAccumulator(iterations),
        lambda: PolicyFromRegret(iterations),
        lambda: PolicyAccumulator(iterations),
    )
