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
# Seed: VAD-CFR (Li, Schultz, Hennes & Lanctot 2026, Listing 5), the built-in `vad-cfr` with
# warm-up T/2: signed regrets floored at -20 and discounted by a volatility EWMA, boosted positive
# r_t, optimistic policy from [.]^1.5, averaging with weights t^gamma(m) per information set
# after the first half of the run.
class RegretAccumulator:
    """R_t from R_{t-1} (old) and this iteration's instantaneous regrets r_t (new)."""

    def __init__(self, horizon):
        self.horizon = float(horizon)

    def update(self, cum_regret, inst_regret, ctx):
        t = float(ctx.iteration)
        old, new = cum_regret, inst_regret
        # block volatility-discount: VAD-CFR: discounts fall as the EWMA of |r| (volatility) rises
        magnitude = new.abs().amax(dim=(-2, -1), keepdim=True)
        self.ewma = magnitude if t <= 1.0 else 0.1 * magnitude + 0.9 * self.ewma
        volatility = (self.ewma / 2.0).clamp(max=1.0)
        alpha = (1.5 - 0.5 * volatility).clamp(min=0.1)
        beta = torch.minimum(alpha, -0.1 - 0.5 * volatility)
        old = torch.where(old >= 0, old * (t**alpha / (t**alpha + 1.0)), old * (t**beta / (t**beta + 1.0)))
        # end volatility-discount
        # block positive-boost: asymmetric boosting (VAD-CFR): positive instantaneous regrets count 1.1 times
        new = torch.where(new > 0, new * 1.1, new)
        # end positive-boost
        regret = old + new
        # block regret-floor: signed regrets with a floor (VAD-CFR keeps them above -20)
        regret = regret.clamp(min=-20.0)
        # end regret-floor
        regret = regret * ctx.legal
        return regret


class PolicyFromRegret:
    """sigma_{t+1} proportional to the positive part of a target (here R_t); uniform if none is positive."""

    def __init__(self, horizon):
        self.horizon = float(horizon)

    def update(self, cum_regret, prev_policy, ctx):
        t = float(ctx.iteration)
        legal = ctx.legal.to(cum_regret.dtype)
        target = cum_regret
        # block volatility-prediction: VAD-CFR: discounted R_t plus boosted r_t times (1-0.5v)^+/(1+(t-1)/100)
        magnitude = ctx.inst_regret.abs().amax(dim=(-2, -1), keepdim=True)
        self.ewma = magnitude if t <= 1.0 else 0.1 * magnitude + 0.9 * self.ewma
        volatility = (self.ewma / 2.0).clamp(max=1.0)
        alpha = (1.5 - 0.5 * volatility).clamp(min=0.1)
        beta = torch.minimum(alpha, -0.1 - 0.5 * volatility)
        target = target * torch.where(target >= 0, t**alpha / (t**alpha + 1.0), t**beta / (t**beta + 1.0))
        boosted = torch.where(ctx.inst_regret > 0, ctx.inst_regret * 1.1, ctx.inst_regret)
        optimism = 1.0 / (1.0 + (t - 1.0) / 100.0) * (1.0 - 0.5 * volatility).clamp(min=0.0)
        target = target + optimism * boosted
        # end volatility-prediction
        positive = target.clamp(min=0.0) * legal
        # block policy-power: regret matching on [target]^+ raised to a power (VAD-CFR uses 1.5)
        positive = positive**1.5
        # end policy-power
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
        # block volatility-gamma: VAD-CFR: weight t^min(4, 2 + 1.5 min(1, m/2)), m = max |r| of the infoset
        spread = ctx.inst_regret.abs().amax(-1, keepdim=True)
        weight = t ** (2.0 + 1.5 * (spread / 2.0).clamp(max=1.0)).clamp(max=4.0)
        # end volatility-gamma
        contribution = reach.unsqueeze(-1) * policy
        # block hard-warm-start: VAD-CFR: nothing is averaged during the first half of the run
        if t <= 0.5 * self.horizon:
            return cum_policy
        # end hard-warm-start
        # block magnitude-weighting: VAD-CFR: infosets with large regrets count less in the average
        spread = ctx.inst_regret.abs().amax(-1, keepdim=True)
        contribution = contribution / (1.0 + spread**1.5) * ((1.0 + spread / 2.0) ** 0.5).clamp(min=0.1)
        # end magnitude-weighting
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
