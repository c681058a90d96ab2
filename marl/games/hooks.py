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

    player: int  # -1: all players at once (a per_infoset algorithm under simultaneous updates)
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
    # The hooks treat every information set on its own (no reduction across information sets, nothing
    # that depends on ctx.player): with simultaneous updates the solver may then run one set of hooks
    # over all players' information sets at once (ctx.player is -1), bitwise the same numbers.
    per_infoset: bool = False

    def with_schedule(self, alternating: bool) -> Algorithm:
        return Algorithm(self.name, self.regret, self.policy, self.average, alternating, self.per_infoset)


def batch_param(x: Any, ref: torch.Tensor) -> torch.Tensor:
    """A scalar or a ``[B]`` sequence of per-variant parameters as ``[B, 1, 1]``
    (or a broadcastable scalar tensor) on ``ref``'s device and dtype.

    A plain number is filled in on the device: copying it from the host would make
    the host wait for the GPU at every call (hooks call this every iteration)."""
    if isinstance(x, (int, float)):
        return torch.full((), x, dtype=ref.dtype, device=ref.device)
    t = torch.as_tensor(x, dtype=ref.dtype, device=ref.device)
    if t.dim() == 0:
        return t
    if t.dim() != 1 or t.shape[0] != ref.shape[0]:
        raise ValueError(
            f"a per-variant parameter needs one value per variant "
            f"(B={ref.shape[0]}), got shape {tuple(t.shape)}"
        )
    return t.view(-1, *([1] * (ref.dim() - 1)))


_MASKS: dict = {}
# Rows of at most this many actions are summed by slices in regret matching.
_SHORT_ROW = 4


def _mask_constants(legal: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mask, uniform)`` of a legal mask in ``dtype``: the mask as numbers and the uniform policy over its
    legal slots (cached per mask)."""
    key = (id(legal), dtype)
    hit = _MASKS.get(key)
    if hit is None or hit[0] is not legal:
        if len(_MASKS) > 256:
            _MASKS.clear()
        mask = legal.to(dtype)
        uniform = mask / legal.sum(-1, keepdim=True).to(dtype)
        hit = (legal, (mask, uniform))
        _MASKS[key] = hit
    return hit[1]


def uniform_over(legal: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The uniform policy over the legal slots of ``legal`` (cached per mask)."""
    return _mask_constants(legal, dtype)[1]


def legal_weights(legal: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``legal`` as 0/1 numbers of ``dtype`` (cached per mask): multiplying by it skips a conversion."""
    return _mask_constants(legal, dtype)[0]


def regret_matching(cum_regret: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """Regret matching: positive regrets normalised; uniform where none is positive."""
    mask, uniform = _mask_constants(legal, cum_regret.dtype)
    pos = cum_regret.clamp(min=0).mul_(mask)
    actions = pos.shape[-1]
    if 2 <= actions <= _SHORT_ROW:
        # A reduction over a short last axis costs several times more than these adds, which sum in
        # the same order (bitwise the same totals).
        s = pos[..., 0:1] + pos[..., 1:2]
        for a in range(2, actions):
            s += pos[..., a : a + 1]
    else:
        s = pos.sum(-1, keepdim=True)
    # where s == 0 the quotient is NaN, and the uniform branch is taken instead
    return torch.where(s > 0, pos / s, uniform)
