"""Built-in CFR variants, each a set of three hooks for :class:`~societas.marl.games.cfr.CFRSolver`.

* ``cfr`` — vanilla CFR (Zinkevich et al., NeurIPS 2007): ``R += r``, regret
  matching, uniform averaging by own reach. Same as OpenSpiel's ``CFRSolver``.
* ``cfr+`` — CFR+ (Tammelin, 2014): regrets floored at 0 after each update,
  linear averaging (weight ``t``). Same as OpenSpiel's ``CFRPlusSolver``.
* ``dcfr`` — Discounted CFR (Brown & Sandholm, AAAI 2019, arXiv 1809.04040),
  ``alpha=1.5, beta=0, gamma=2``: after adding ``r_t``, positive regrets are
  multiplied by ``t^a/(t^a+1)`` and negative ones by ``t^b/(t^b+1)``; the
  average weights iteration ``t`` by ``t^gamma``. Same as OpenSpiel's python
  ``DCFRSolver``.
* ``lcfr`` — Linear CFR = DCFR(1, 1, 1). Same as OpenSpiel's ``LCFRSolver``.
* ``pcfr+`` — Predictive CFR+ (Farina, Kroer & Sandholm, AAAI 2021): RM+
  regrets, ``sigma_{t+1} ∝ [R_t + r_t]^+`` (prediction = last instantaneous
  regret), quadratic averaging (weight ``t^2``).
* ``dpcfr+`` — Discounted Predictive CFR+ / PDCFR+ (Xu et al., IJCAI 2024),
  ``alpha=2.3, gamma=5`` as the authors' code.
* ``hs-pcfr+`` — HS-PCFR+(30) (Zhang, McAleer & Sandholm, arXiv 2404.09097):
  PCFR+ with the averaging exponent scheduled ``gamma = 30 - 5 s / T``;
  ``HSPCFRPlus(total_iterations=T)``, default ``T = 1000``.
* ``vad-cfr`` — VAD-CFR (Li, Schultz, Hennes & Lanctot, arXiv 2602.16928,
  Listing 5), vectorised; see :func:`VADCFR` for the one documented
  deviation (how the volatility EWMA is fed).

Every numeric parameter accepts a scalar or one value per batch variant, so
``DCFR(alpha=[1, 1.5, 2])`` runs three variants in one pass with
``CFRSolver(..., batch=3)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .hooks import Algorithm, HookContext, batch_param, regret_matching

# ------------------------------------------------------------ shared hooks --


class SumRegret:
    """``R_t = R_{t-1} + r_t``."""

    def update(self, cum_regret, inst_regret, ctx: HookContext):
        return cum_regret + inst_regret


class PlusRegret:
    """``R_t = max(R_{t-1} + r_t, 0)`` (regret matching+)."""

    def update(self, cum_regret, inst_regret, ctx: HookContext):
        return (cum_regret + inst_regret).clamp(min=0)


class DiscountedRegret:
    """DCFR's regret discounting: after adding ``r_t``, positive regrets times
    ``t^alpha/(t^alpha+1)``, negative ones times ``t^beta/(t^beta+1)``."""

    def __init__(self, alpha: Any = 1.5, beta: Any = 0.0):
        self.alpha, self.beta = alpha, beta

    def update(self, cum_regret, inst_regret, ctx: HookContext):
        r = cum_regret + inst_regret
        t = _t(ctx, r)
        ta = t ** batch_param(self.alpha, r)
        tb = t ** batch_param(self.beta, r)
        return torch.where(r >= 0, r * (ta / (ta + 1)), r * (tb / (tb + 1)))


class RegretMatching:
    """The current policy is proportional to the positive cumulative regrets."""

    def update(self, cum_regret, prev_policy, ctx: HookContext):
        return regret_matching(cum_regret, ctx.legal)


class WeightedAverage:
    """``S_t = S_{t-1} + t^gamma * x_t(I) * sigma_t`` (``gamma=0``: uniform
    averaging; 1: linear; 2: DCFR's quadratic)."""

    def __init__(self, gamma: Any = 0.0):
        self.gamma = gamma

    def update(self, cum_policy, policy, reach, cf_reach, ctx: HookContext):
        w = reach.unsqueeze(-1) * policy
        g = self.gamma
        if isinstance(g, (int, float)) and g == 0:
            return cum_policy + w
        return cum_policy + (_t(ctx, w) ** batch_param(g, w)) * w


# --------------------------------------------------------------- variants --


def CFR() -> Algorithm:
    return Algorithm("cfr", SumRegret, RegretMatching, lambda: WeightedAverage(0.0), per_infoset=True)


def CFRPlus() -> Algorithm:
    return Algorithm("cfr+", PlusRegret, RegretMatching, lambda: WeightedAverage(1.0), per_infoset=True)


def DCFR(alpha: Any = 1.5, beta: Any = 0.0, gamma: Any = 2.0, name: str = "dcfr") -> Algorithm:
    return Algorithm(
        name,
        lambda: DiscountedRegret(alpha, beta),
        RegretMatching,
        lambda: WeightedAverage(gamma),
        per_infoset=True,
    )


def LCFR() -> Algorithm:
    return DCFR(1.0, 1.0, 1.0, name="lcfr")


ALGORITHMS: dict[str, Callable[[], Algorithm]] = {
    "cfr": CFR,
    "cfr+": CFRPlus,
    "lcfr": LCFR,
    "dcfr": DCFR,
}


def register(name: str, factory: Callable[[], Algorithm]) -> None:
    ALGORITHMS[name.lower()] = factory


def get_algorithm(name: str) -> Algorithm:
    key = name.lower().replace("_", "-")
    aliases = {"cfrplus": "cfr+", "cfr-plus": "cfr+"}
    key = aliases.get(key, key)
    if key not in ALGORITHMS:
        raise ValueError(f"unknown CFR algorithm {name!r}; known: {', '.join(sorted(ALGORITHMS))}")
    return ALGORITHMS[key]()


def algorithm_names() -> list[str]:
    return list(ALGORITHMS)


# ============================================================================
# Predictive and discounted-predictive variants, hyperparameter schedules and
# VAD-CFR. Appended below the classic variants; registered at the bottom.
# ============================================================================


def _t(ctx: HookContext, ref: torch.Tensor) -> torch.Tensor:
    """``ctx.iteration`` (1-indexed ``t``) as a scalar tensor like ``ref``."""
    return batch_param(float(ctx.iteration), ref)


class PredictiveRegretMatching:
    """Predictive regret matching(+) with the last instantaneous regret as the
    prediction: ``sigma_{t+1} = RM([R_t + m_{t+1}]^+)`` with ``m_{t+1} = r_t``
    (Farina, Kroer & Sandholm, AAAI 2021, Alg. 1 with ``m^{t+1} = r^t``)."""

    def update(self, cum_regret, prev_policy, ctx: HookContext):
        return regret_matching(cum_regret + ctx.inst_regret, ctx.legal)


class DiscountedAverage:
    """The discounted form of polynomial averaging used by DCFR/PDCFR+ code
    (Brown & Sandholm 2019; Xu et al. 2024):
    ``S_t = S_{t-1} * ((t-1)/t)^gamma + x_t(I) * sigma_t``.

    With a constant ``gamma`` the normalised average equals weighting
    iteration ``t`` by ``t^gamma`` (``S_T * T^gamma = sum_t t^gamma x_t sigma_t``),
    but it never overflows, even for ``gamma = 30``. ``gamma`` is a scalar, one
    value per variant, or a callable ``gamma(s)`` of the 0-indexed iteration
    ``s = t - 1`` returning either (a hyperparameter schedule): iteration ``t``
    then discounts by ``((t-1)/t)^{gamma(t-1)}``, i.e. the discount
    ``(s/(s+1))^{gamma_s}`` that DCFR applies "on iteration ``s``" to the
    contributions made so far.
    """

    def __init__(self, gamma: Any = 2.0):
        self.gamma = gamma

    def update(self, cum_policy, policy, reach, cf_reach, ctx: HookContext):
        w = reach.unsqueeze(-1) * policy
        if ctx.iteration <= 1:  # S_1 = x_1 sigma_1 (as Xu et al.'s code)
            return w
        g = self.gamma(ctx.iteration - 1) if callable(self.gamma) else self.gamma
        t = _t(ctx, w)
        return cum_policy * ((t - 1) / t) ** batch_param(g, w) + w


def _discount(t: torch.Tensor, expo: torch.Tensor) -> torch.Tensor:
    """``t^e / (t^e + 1)`` (0 at ``t = 0`` for ``e > 0``)."""
    te = t**expo
    return te / (te + 1)


class DiscountedPlusRegret:
    """PDCFR+ regrets (Xu et al., IJCAI 2024, reference code ``pdcfr_plus.py``):
    ``R_t = max(R_{t-1} * d(t) + r_t, 0)`` with ``d(t) = (t-1)^a / ((t-1)^a + 1)``."""

    def __init__(self, alpha: Any = 2.3):
        self.alpha = alpha

    def update(self, cum_regret, inst_regret, ctx: HookContext):
        t = _t(ctx, cum_regret)
        d = _discount(t - 1, batch_param(self.alpha, cum_regret))
        return (cum_regret * d + inst_regret).clamp(min=0)


class DiscountedPredictiveRegretMatching:
    """PDCFR+ current policy: ``sigma_{t+1} = RM([R_t * d(t+1) + r_t]^+)`` with
    ``d(t+1) = t^a / (t^a + 1)`` (the next iteration's discount applied to the
    predicted regrets, prediction ``m_{t+1} = r_t``)."""

    def __init__(self, alpha: Any = 2.3):
        self.alpha = alpha

    def update(self, cum_regret, prev_policy, ctx: HookContext):
        t = _t(ctx, cum_regret)
        d = _discount(t, batch_param(self.alpha, cum_regret))
        return regret_matching(cum_regret * d + ctx.inst_regret, ctx.legal)


def PCFRPlus(gamma: Any = 2.0, name: str = "pcfr+") -> Algorithm:
    """Predictive CFR+ (Farina, Kroer & Sandholm, "Faster Game Solving via
    Predictive Blackwell Approachability: Connecting Regret Matching and
    Mirror Descent", AAAI 2021):

    * ``R_t = max(R_{t-1} + r_t, 0)`` (RM+ floor);
    * ``sigma_{t+1}(I) ∝ [R_t(I) + m_{t+1}(I)]^+`` with the prediction
      ``m_{t+1} = r_t`` (the last instantaneous regret), uniform if all are 0;
    * quadratic averaging, iteration ``t`` weighted by ``t^gamma * x_t(I)``,
      ``gamma = 2`` (as in the paper's experiments and in Xu et al.'s
      ``pcfr_plus.py``; implemented in the equivalent discounted form
      ``S_t = S_{t-1} ((t-1)/t)^gamma + x_t sigma_t``).
    """
    return Algorithm(name, PlusRegret, PredictiveRegretMatching, lambda: DiscountedAverage(gamma))


def DPCFRPlus(alpha: Any = 2.3, gamma: Any = 5.0, name: str = "dpcfr+") -> Algorithm:
    """Discounted Predictive CFR+ (PDCFR+; Xu, Li, Wang, Fu & Huang, "Minimizing
    Weighted Counterfactual Regret with Optimistic Online Mirror Descent",
    IJCAI 2024), defaults ``alpha = 2.3, gamma = 5`` of the authors' code
    (github.com/rpSebastian/PDCFRPlus, ``pdcfr_plus.py``):

    * ``R_t = max(R_{t-1} d(t) + r_t, 0)``, ``d(t) = (t-1)^alpha / ((t-1)^alpha + 1)``;
    * ``sigma_{t+1} ∝ [R_t d(t+1) + r_t]^+`` (prediction ``m_{t+1} = r_t``);
    * ``S_t = S_{t-1} ((t-1)/t)^gamma + x_t(I) sigma_t`` (weights ∝ ``t^gamma``).
    """
    return Algorithm(
        name,
        lambda: DiscountedPlusRegret(alpha),
        lambda: DiscountedPredictiveRegretMatching(alpha),
        lambda: DiscountedAverage(gamma),
    )


def HSPCFRPlus(
    total_iterations: Any = 1000, gamma_start: Any = 30.0, gamma_drop: Any = 5.0, name: str = "hs-pcfr+"
) -> Algorithm:
    """HS-PCFR+(30) (Zhang, McAleer & Sandholm, "Faster Game Solving via
    Hyperparameter Schedules", arXiv 2404.09097): PCFR+ regrets and policy
    (see :func:`PCFRPlus`) with the averaging exponent on a schedule,

    ``gamma_s = gamma_start - gamma_drop * s / T`` (30 → 25 over the run),
    ``S_t = S_{t-1} ((t-1)/t)^{gamma_{t-1}} + x_t(I) sigma_t``,

    i.e. the DCFR discount ``(s/(s+1))^{gamma_s}`` applied after iteration
    ``s``. ``total_iterations`` is ``T``, the *planned* number of iterations
    (the schedule needs the horizon in advance; the paper's CFR protocol runs
    1000, the default). Running past ``T`` simply continues the line below 25.
    Only ``gamma`` is scheduled: "gamma is the only adjustable hyperparameter
    in PCFR+" (op. cit., §3.2).
    """

    def schedule(s: int):
        if all(isinstance(x, (int, float)) for x in (gamma_start, gamma_drop, total_iterations)):
            # a number, the same double arithmetic as below: no tensor for the hooks to copy to the GPU
            return float(gamma_start) - float(gamma_drop) * float(s) / float(total_iterations)
        g0 = torch.as_tensor(gamma_start, dtype=torch.float64)
        dg = torch.as_tensor(gamma_drop, dtype=torch.float64)
        T = torch.as_tensor(total_iterations, dtype=torch.float64)
        return g0 - dg * float(s) / T

    return Algorithm(name, PlusRegret, PredictiveRegretMatching, lambda: DiscountedAverage(schedule))


# ---------------------------------------------------------------- VAD-CFR --


def _linf(inst_regret: torch.Tensor) -> torch.Tensor:
    """``[B, 1, 1]``: ``max |r|`` over all information sets and actions of the
    player (padding slots hold 0, which is also the listing's ``default=0.0``)."""
    B = inst_regret.shape[0]
    if inst_regret.numel() == 0:
        return inst_regret.new_zeros(B, 1, 1)
    return inst_regret.abs().reshape(B, -1).amax(1).view(B, 1, 1)


class _VADVolatility:
    """The listing's ``_calculate_adaptive_params``, vectorised per player.

    Keeps the EWMA of the instantaneous-regret magnitude, ``[B, 1, 1]``:
    ``e_1 = M_1``, ``e_t = lam * M_t + (1 - lam) * e_{t-1}`` with
    ``M_t = max_{I, a} |r_t(I, a)|`` over the player's information sets, then
    ``v = min(1, e / M_max)``, ``alpha = max(0.1, alpha_0 - s v)``,
    ``beta = min(alpha, beta_0 - s v)`` and the discounts
    ``d± = t^{alpha|beta} / (t^{alpha|beta} + 1)`` (the listing's
    ``t_plus_one = iteration_number + 1`` is our ``t``).
    """

    def __init__(self, p: dict):
        self.p = p
        self.ewma: torch.Tensor | None = None

    def step(self, inst_regret: torch.Tensor, ctx: HookContext):
        p, ref = self.p, inst_regret
        m = _linf(inst_regret)
        lam = batch_param(p["ewma_decay_factor"], ref)
        if ctx.iteration <= 1 or self.ewma is None:  # iteration_number == 0
            e = m
        else:
            e = lam * m + (1 - lam) * self.ewma
        self.ewma = e
        mx = batch_param(p["max_expected_instantaneous_regret"], ref)
        safe = torch.where(mx > 0, mx, torch.ones_like(mx))
        v = torch.where(mx > 0, (e / safe).clamp(max=1.0), torch.zeros_like(e))
        sens = batch_param(p["volatility_sensitivity"], ref)
        alpha = (batch_param(p["base_alpha"], ref) - sens * v).clamp(min=0.1)
        beta = torch.minimum(alpha, batch_param(p["base_beta"], ref) - sens * v)
        t = _t(ctx, ref)
        return e, v, _discount(t, alpha), _discount(t, beta)


def _vad_project(cum_regret, inst_regret, d_pos, d_neg, boost, scale=1.0):
    """``d(sign R) * R + scale * boost(r)`` with ``boost(r) = b r`` for ``r > 0``."""
    r = torch.where(inst_regret > 0, inst_regret * boost, inst_regret)
    disc = torch.where(cum_regret >= 0, d_pos * cum_regret, d_neg * cum_regret)
    return disc + scale * r


class VADRegret:
    """VAD-CFR regret accumulation (listing's ``RegretAccumulator``):
    ``R_t = max(floor, d(sign R_{t-1}) R_{t-1} + boost(r_t))``, signed
    (no floor at 0), ``d+``/``d-`` from :class:`_VADVolatility`, ``boost(r) =
    1.1 r`` for ``r > 0``, ``floor = -20``."""

    def __init__(self, p: dict):
        self.p = p
        self.vol = _VADVolatility(p)

    def update(self, cum_regret, inst_regret, ctx: HookContext):
        _, _, d_pos, d_neg = self.vol.step(inst_regret, ctx)
        boost = batch_param(self.p["instantaneous_regret_boost_factor"], cum_regret)
        new = _vad_project(cum_regret, inst_regret, d_pos, d_neg, boost)
        cap = batch_param(self.p["negative_regret_cap"], cum_regret)
        return torch.maximum(new, cap * torch.ones_like(new)) * ctx.legal


class VADPolicy:
    """VAD-CFR current policy (listing's ``PolicyFromRegretAccumulator``):
    an optimistic projection of the *already updated* ``R_t``,

    ``P = d(sign R_t) R_t + omega_t boost(r_t)``,
    ``omega_t = o_0 / (1 + (t-1)/100) * max(0, 1 - s v)``,
    ``sigma_{t+1} ∝ [P]^+ ^ 1.5`` (uniform if no ``P > 0``),

    with its own copy of the EWMA/discounts (as the listing; the copies agree
    because both see the same regrets in the same order).
    """

    def __init__(self, p: dict):
        self.p = p
        self.vol = _VADVolatility(p)

    def update(self, cum_regret, prev_policy, ctx: HookContext):
        p, ref = self.p, cum_regret
        _, v, d_pos, d_neg = self.vol.step(ctx.inst_regret, ctx)
        n = batch_param(float(ctx.iteration - 1), ref)
        base = batch_param(p["initial_optimism_factor"], ref) / (
            1.0 + n / batch_param(p["optimism_decay_factor"], ref)
        )
        damp = (1.0 - batch_param(p["volatility_sensitivity"], ref) * v).clamp(min=0.0)
        boost = batch_param(p["instantaneous_regret_boost_factor"], ref)
        proj = _vad_project(cum_regret, ctx.inst_regret, d_pos, d_neg, boost, base * damp)
        w = proj.clamp(min=0) ** batch_param(p["positive_policy_exponent"], ref) * ctx.legal
        s = w.sum(-1, keepdim=True)
        uni = ctx.legal.to(ref.dtype) / ctx.legal.sum(-1, keepdim=True).to(ref.dtype)
        return torch.where(s > 0, w / torch.where(s > 0, s, torch.ones_like(s)), uni)


class VADAverage:
    """VAD-CFR average policy (listing's ``PolicyAccumulator``). Iterations with
    ``t - 1 < warmup`` (the listing's 0-indexed ``iteration_number < 500``) are
    skipped; afterwards, per information set, with ``m(I) = max_a |r_t(I, a)|``
    (raw, not the EWMA) and ``v(I) = min(1, m / 2)``:

    ``gamma = min(4, 2 + 1.5 v)``, ``w = t^gamma * 1 / (1 + m^1.5) *
    max(0.1, (1 + m / 2)^0.5)``, ``S_t = S_{t-1} + w x_t(I) sigma_t``.
    """

    def __init__(self, p: dict):
        self.p = p

    def update(self, cum_policy, policy, reach, cf_reach, ctx: HookContext):
        p, ref = self.p, cum_policy
        warm = p["warmup_iterations"]
        if isinstance(warm, (int, float)):  # decided on the host, without reading the device
            active: Any = (ctx.iteration - 1) >= warm
            if not active:
                return cum_policy
        else:  # per variant
            active = (ctx.iteration - 1) >= batch_param(warm, ref)
            if not bool(active.any()):
                return cum_policy
        m = ctx.inst_regret.abs().amax(-1, keepdim=True)  # [B, I_p, 1]
        mx = batch_param(p["max_expected_instantaneous_regret"], ref)
        safe = torch.where(mx > 0, mx, torch.ones_like(mx))
        v = torch.where(mx > 0, (m / safe).clamp(max=1.0), torch.zeros_like(m))
        gamma = torch.minimum(
            batch_param(p["gamma_max"], ref) * torch.ones_like(v),
            batch_param(p["base_gamma"], ref) + batch_param(p["gamma_volatility_sensitivity"], ref) * v,
        )
        w_time = _t(ctx, ref) ** gamma
        w_stab = 1.0 / (1.0 + m ** batch_param(p["stability_exponent"], ref))
        w_mag = ((1.0 + m / mx) ** batch_param(p["regret_magnitude_weighting_exponent"], ref)).clamp(min=0.1)
        w = w_time * w_stab * w_mag
        updated = cum_policy + w * reach.unsqueeze(-1) * policy
        return updated if active is True else torch.where(active, updated, cum_policy)


def VADCFR(
    base_alpha: Any = 1.5,
    base_beta: Any = -0.1,
    volatility_sensitivity: Any = 0.5,
    max_expected_instantaneous_regret: Any = 2.0,
    instantaneous_regret_boost_factor: Any = 1.1,
    ewma_decay_factor: Any = 0.1,
    negative_regret_cap: Any = -20.0,
    initial_optimism_factor: Any = 1.0,
    optimism_decay_factor: Any = 100.0,
    positive_policy_exponent: Any = 1.5,
    base_gamma: Any = 2.0,
    gamma_max: Any = 4.0,
    gamma_volatility_sensitivity: Any = 1.5,
    warmup_iterations: Any = 500,
    stability_exponent: Any = 1.5,
    regret_magnitude_weighting_exponent: Any = 0.5,
    name: str = "vad-cfr",
) -> Algorithm:
    """VAD-CFR, Volatility-Adaptive Discounted CFR (Li, Schultz, Hennes &
    Lanctot, "Discovering Multiagent Learning Algorithms with Large Language
    Models", arXiv 2602.16928v1, Listing 5), every constant as published.
    ``t`` is our 1-indexed iteration = the listing's ``iteration_number + 1``.

    Volatility (per player ``i``, per variant)::

        M_t   = max_{I in I_i, a} |r_t(I, a)|
        e_1   = M_1;   e_t = 0.1 M_t + 0.9 e_{t-1}
        v_t   = min(1, e_t / 2)
        alpha = max(0.1, 1.5 - 0.5 v_t);   beta = min(alpha, -0.1 - 0.5 v_t)
        d+    = t^alpha / (t^alpha + 1);   d- = t^beta / (t^beta + 1)

    Regrets (signed): ``R_t = max(-20, d(sign R_{t-1}) R_{t-1} + b(r_t))``,
    ``b(r) = 1.1 r if r > 0 else r``, ``d = d+`` where ``R_{t-1} >= 0``, else ``d-``.

    Policy: ``P = d(sign R_t) R_t + omega_t b(r_t)``,
    ``omega_t = 1/(1 + (t-1)/100) * max(0, 1 - 0.5 v_t)``,
    ``sigma_{t+1}(a) ∝ max(0, P(a))^1.5`` (uniform if every ``P <= 0``).

    Average: nothing for ``t <= 500`` (``iteration_number < 500``); then, per
    information set, ``m = max_a |r_t(I, a)|``, ``gamma = min(4, 2 + 1.5 min(1, m/2))``,
    ``S_t = S_{t-1} + t^gamma / (1 + m^1.5) * max(0.1, (1 + m/2)^0.5) * x_t(I) sigma_t``.

    **Where this differs from the per-node listing, and why.** The listing is
    called once per information set and keeps *one scalar* EWMA per hook object
    (``RegretAccumulator`` and ``PolicyFromRegretAccumulator`` each their own),
    updated at every call in traversal order and shared by all players; at
    ``iteration_number == 0`` each call resets it to that information set's
    ``max_a |r|``. Our hooks update all information sets of a player in one call,
    and the listing does not fix a traversal order (nor whether the regret hook
    sees per-history or per-information-set regrets), so we keep the listing's
    *per-call* semantics at our call granularity: one EWMA per player and per
    batch variant (in each of the regret and policy hooks, as the listing's two
    copies), updated once per player update from ``M_t``, the L∞ norm of the
    regrets that call processes (the listing's ``max(abs(r) ...)`` over the
    call's regrets; here the call's regrets are the player's whole
    ``[I_p, A]`` block). Consequences: (1) the EWMA is a temporal average over
    iterations (memory ~10 iterations) rather than a sweep over neighbouring
    information sets; (2) within one player update the volatility ``v_t``, hence
    ``alpha, beta, d±`` and ``omega_t``, is the same at every information set of
    the player, whereas the listing's varies from one information set to the
    next; (3) ``M_t`` is a max over information sets, so ``v_t`` is at least
    what any single information set would give at ``t = 1``; (4) players do not
    share the EWMA. The averaging weights use no EWMA and are exactly the
    listing's, per information set, with information-set-level regrets and
    own reach ``x_t(I) = sum_{h in I} pi_i(h)`` (the listing's per-history
    ``reach_prob`` summed; identical when the weight is per information set).
    ``beta = min(alpha, .)`` never binds and ``gamma_max = 4`` never binds with
    the defaults; both are kept. Numeric parameters take a scalar or one value
    per batch variant. ``warmup_iterations`` (0-indexed, as the listing) lets
    tests and short runs average earlier; with the default 500 a run of at
    most 500 iterations has an empty average, which normalises to uniform.
    """
    p = {
        "base_alpha": base_alpha,
        "base_beta": base_beta,
        "volatility_sensitivity": volatility_sensitivity,
        "max_expected_instantaneous_regret": max_expected_instantaneous_regret,
        "instantaneous_regret_boost_factor": instantaneous_regret_boost_factor,
        "ewma_decay_factor": ewma_decay_factor,
        "negative_regret_cap": negative_regret_cap,
        "initial_optimism_factor": initial_optimism_factor,
        "optimism_decay_factor": optimism_decay_factor,
        "positive_policy_exponent": positive_policy_exponent,
        "base_gamma": base_gamma,
        "gamma_max": gamma_max,
        "gamma_volatility_sensitivity": gamma_volatility_sensitivity,
        "warmup_iterations": warmup_iterations,
        "stability_exponent": stability_exponent,
        "regret_magnitude_weighting_exponent": regret_magnitude_weighting_exponent,
    }
    return Algorithm(name, lambda: VADRegret(p), lambda: VADPolicy(p), lambda: VADAverage(p))


ALGORITHMS.update(
    {
        "pcfr+": PCFRPlus,
        "dpcfr+": DPCFRPlus,
        "hs-pcfr+": HSPCFRPlus,
        "vad-cfr": VADCFR,
    }
)
