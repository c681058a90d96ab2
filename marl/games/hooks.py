"""The hook interface of the CFR solver, shared by the solver and the built-in variants.

A CFR variant is three hooks (regret accumulation, current policy, policy
averaging) that :class:`~societas.marl.games.cfr.CFRSolver` calls once per
iteration and player; the helpers here are the building blocks the built-in
variants in :mod:`societas.marl.games.algorithms` share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch


@dataclass
class HookContext:
    """What a hook may read about the player it updates."""

    player: int
    iteration: int
    legal: torch.Tensor  # [I_p, A] bool
    num_actions: torch.Tensor  # [I_p]
    inst_regret: torch.Tensor  # [B, I_p, A] this iteration's instantaneous regrets
    batch: int
    shared: dict = field(default_factory=dict)


class RegretHook(Protocol):
    def update(
        self, cum_regret: torch.Tensor, inst_regret: torch.Tensor, ctx: HookContext
    ) -> torch.Tensor: ...


class PolicyHook(Protocol):
    def update(
        self, cum_regret: torch.Tensor, prev_policy: torch.Tensor, ctx: HookContext
    ) -> torch.Tensor: ...


class AverageHook(Protocol):
    def update(
        self,
        cum_policy: torch.Tensor,
        policy: torch.Tensor,
        reach: torch.Tensor,
        cf_reach: torch.Tensor,
        ctx: HookContext,
    ) -> torch.Tensor: ...


@dataclass
class Algorithm:
    """A CFR variant: three hook factories and an update schedule.

    Each factory is called once per player with no argument and returns the
    hook object for that player.
    """

    name: str
    regret: Callable[[], RegretHook]
    policy: Callable[[], PolicyHook]
    average: Callable[[], AverageHook]
    alternating: bool = True

    def with_schedule(self, alternating: bool) -> Algorithm:
        return Algorithm(self.name, self.regret, self.policy, self.average, alternating)


def batch_param(x: Any, ref: torch.Tensor) -> torch.Tensor:
    """A scalar or a ``[B]`` sequence of per-variant parameters as ``[B, 1, 1]``
    (or a broadcastable scalar tensor) on ``ref``'s device and dtype."""
    t = torch.as_tensor(x, dtype=ref.dtype, device=ref.device)
    if t.dim() == 0:
        return t
    if t.dim() != 1 or t.shape[0] != ref.shape[0]:
        raise ValueError(
            f"a per-variant parameter needs one value per variant "
            f"(B={ref.shape[0]}), got shape {tuple(t.shape)}"
        )
    return t.view(-1, *([1] * (ref.dim() - 1)))


_UNIFORM: dict = {}


def uniform_over(legal: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The uniform policy over the legal slots of ``legal`` (cached per mask)."""
    key = (id(legal), dtype)
    hit = _UNIFORM.get(key)
    if hit is None or hit[0] is not legal:
        if len(_UNIFORM) > 256:
            _UNIFORM.clear()
        hit = (legal, legal.to(dtype) / legal.sum(-1, keepdim=True).to(dtype))
        _UNIFORM[key] = hit
    return hit[1]


def regret_matching(cum_regret: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """Regret matching: positive regrets normalised; uniform where none is positive."""
    pos = cum_regret.clamp(min=0).mul_(legal)
    s = pos.sum(-1, keepdim=True)
    # where s == 0 the quotient is NaN, and the uniform branch is taken instead
    return torch.where(s > 0, pos / s, uniform_over(legal, cum_regret.dtype))
