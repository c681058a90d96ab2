"""Seed for the CFR discovery task (Li, Schultz, Hennes & Lanctot, arXiv 2602.16928).

The evolvable part is the three hooks that ``marl.games.CFRSolver`` calls on
tensors ``[B, I_p, A]`` (all information sets of one player at once): regret
accumulation, the current policy from regrets, and policy accumulation. The
seed is CFR+ (Tammelin 2014), the same hooks as ``marl.games.algorithms``:
``R_t = max(R_{t-1} + r_t, 0)``, regret matching, linear averaging.
"""



from marl.games.cfr import Algorithm, regret_matching


# EVOLVE-BLOCK-START
class RegretAccumulator:
    """R_t = max(R_{t-1} + r_t, 0) (regret matching+)."""

    def update(self, cum_regret, inst_regret, ctx):
        return (cum_regret + inst_regret).clamp(min=0.0)


class PolicyFromRegret:
    """sigma_{t+1} proportional to the positive cumulative regrets (uniform if none)."""

    def update(self, cum_regret, prev_policy, ctx):
        return regret_matching(cum_regret, ctx.legal)


class PolicyAccumulator:
    """S_t = S_{t-1} + t^1 * x_t(I) * sigma_t (linear averaging)."""

    def update(self, cum_policy, policy, reach, cf_reach, ctx):
        t = float(ctx.iteration)
        return cum_policy + (t ** 1.0) * reach.unsqueeze(-1) * policy
# EVOLVE-BLOCK-END


def build_algorithm():
    """The evaluator calls this: an Algorithm made from the three evolved hook classes."""
    return Algorithm("evolved", RegretAccumulator, PolicyFromRegret, PolicyAccumulator)
