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
# Seed: DCFR(1.5, 0, 2) (Brown & Sandholm 2019), the built-in `dcfr`: after adding r_t positive
# regrets times t^1.5/(t^1.5+1), negative ones times 1/2 (dcfr-discount), regret matching,
# quadratic averaging (weight t^2).
class RegretAccumulator:
    """R_t from R_{t-1} (old) and this iteration's instantaneous regrets r_t (new)."""

    def __init__(self, horizon):
        self.horizon = float(horizon)

    def update(self, cum_regret, inst_regret, ctx):
        t = float(ctx.iteration)
        old, new = cum_regret, inst_regret
        regret = old + new
        # block dcfr-discount: DCFR (Brown & Sandholm 2019): R+ times t^a/(t^a+1), R- times t^b/(t^b+1)
        regret = torch.where(
            regret >= 0, regret * (t**1.5 / (t**1.5 + 1.0)), regret * (t**0.0 / (t**0.0 + 1.0))
        )
        # end dcfr-discount
        return regret


class PolicyFromRegret:
    """sigma_{t+1} proportional to the positive part of a target (here R_t); uniform if none is positive."""

    def __init__(self, horizon):
        self.horizon = float(horizon)

    def update(self, cum_regret, prev_policy, ctx):
        t = float(ctx.iteration)  # noqa: F841 (building blocks read t)
        legal = ctx.legal.to(cum_regret.dtype)
        target = cum_regret
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
        weight = t**2.0
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
