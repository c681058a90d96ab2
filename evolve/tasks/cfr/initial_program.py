"""Seed for the CFR discovery task (Li, Schultz, Hennes & Lanctot, arXiv 2602.16928).

The evolvable part is the three hooks that ``societas.marl.games.CFRSolver`` calls on
tensors ``[B, I_p, A]`` (all information sets of one player at once): regret
accumulation, the current policy from regrets, and policy accumulation. The
seed is exactly CFR+ (Tammelin 2014), the same hooks as ``societas.marl.games.algorithms``:
``R_t = max(R_{t-1} + r_t, 0)``, regret matching, linear averaging.

Its knobs are written as float literals so that the LLM-free constant
perturbation can move them; at the values below each one is the identity of
CFR+ (in floating point too, so the seed scores exactly like CFR+):

* ``REGRET_DISCOUNT`` 0.0 — ``R_{t-1}`` is multiplied by ``((t-1)/t)^d`` before
  ``r_t`` is added (``d > 0`` forgets old regrets, as DCFR's discounting);
* ``REGRET_FLOOR`` 0.0 — the floor of the cumulative regrets (RM+ uses 0);
* ``OPTIMISM`` 0.0 — weight of the last instantaneous regret added as a
  prediction before regret matching (1.0 is predictive CFR+);
* ``POLICY_EXPONENT`` 1.0 — regret matching on ``[R]^+`` raised to this power;
* ``AVERAGING_EXPONENT`` 1.0 — iteration ``t`` is weighted by ``t^g`` in the
  average policy (0 uniform as CFR, 1 linear as CFR+, 2 quadratic as DCFR).
"""

import torch

from societas.marl.games.cfr import Algorithm


# EVOLVE-BLOCK-START
class RegretAccumulator:
    """R_t = max(((t-1)/t)^0.0 * R_{t-1} + r_t, 0.0): regret matching+ (no discount, floor 0)."""

    def update(self, cum_regret, inst_regret, ctx):
        t = float(ctx.iteration)
        discount = ((t - 1) / t) ** 0.0
        return (cum_regret * discount + inst_regret).clamp(min=0.0)


class PolicyFromRegret:
    """sigma_{t+1} proportional to [R_t + 0.0 * r_t]^+ ^ 1.0 (regret matching); uniform if none is positive."""

    def update(self, cum_regret, prev_policy, ctx):
        legal = ctx.legal.to(cum_regret.dtype)
        positive = (cum_regret + 0.0 * ctx.inst_regret).clamp(min=0.0) ** 1.0 * legal
        total = positive.sum(-1, keepdim=True)
        uniform = legal / legal.sum(-1, keepdim=True)
        return torch.where(total > 0, positive / total, uniform)


class PolicyAccumulator:
    """S_t = S_{t-1} + t^1.0 * x_t(I) * sigma_t (linear averaging)."""

    def update(self, cum_policy, policy, reach, cf_reach, ctx):
        t = float(ctx.iteration)
        return cum_policy + (t**1.0) * (reach.unsqueeze(-1) * policy)


# EVOLVE-BLOCK-END


def build_algorithm():
    """The evaluator calls this: an Algorithm made from the three evolved hook classes."""
    return Algorithm("evolved", RegretAccumulator, PolicyFromRegret, PolicyAccumulator)
