"""GPTSwarm edge optimisation: one learned probability per potential edge, trained with REINFORCE.

Reference: Zhuge et al., "GPTSwarm: Language Agents as Optimizable Graphs",
ICML 2024 (arXiv 2402.16823), section 3 ("edge optimization").

Every potential edge ``e = (i, j)`` of the candidate graph (here every pair
``i < j`` of the node order, which keeps each sampled graph a DAG without the
cycle check the paper needs for arbitrary orders) has a logit ``theta_e``; a
graph is sampled edge by edge,

    a_e ~ Bernoulli(p_e),   p_e = sigmoid(theta_e),
    log p(G) = sum_e [a_e log p_e + (1 - a_e) log(1 - p_e)],

and the expected utility ``E_G[u(G)]`` is maximised with REINFORCE:

    grad J = E_G[(u(G) - b) grad log p(G)],

estimated over a batch of sampled graphs, each run on one task. The utility
is the routing reward ``u = success - cost * messages`` and ``b`` is a
moving-average baseline, ``b <- m b + (1 - m) mean(u)``. The optimiser is Adam
with learning rate 0.1, as in the paper, and the logits start at ``p = 0.5``.
After training, the pruned graph keeps the edges with ``p_e > 0.5``
(:meth:`GPTSwarmRouter.adjacency`) and :meth:`GPTSwarmRouter.graph` returns it
as a :class:`societas.topology.Graph`. One graph serves every task: GPTSwarm's edges do
not depend on the task (compare :mod:`societas.marl.routing.gdesigner`).

:func:`reinforce_update` is the shared learning step (G-Designer uses it too,
adding its regularisers through ``RouterSample.aux_loss``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from societas.topology import Graph

from .env import RoutingEnv, TaskBatch

__all__ = [
    "GPTSwarmConfig",
    "GPTSwarmRouter",
    "MovingAverageBaseline",
    "Router",
    "RouterSample",
    "reinforce_update",
    "sample_edges",
]


class GPTSwarmConfig(BaseModel):
    """GPTSwarm's hyper-parameters (defaults from the paper where it gives them)."""

    model_config = ConfigDict(extra="forbid")

    lr: float = Field(0.1, gt=0.0, description="Adam learning rate (the paper's 0.1)")
    init_prob: float = Field(0.5, gt=0.0, lt=1.0, description="initial edge probability")
    baseline_momentum: float = Field(0.9, ge=0.0, lt=1.0, description="m in b <- m b + (1 - m) mean(u)")
    threshold: float = Field(0.5, gt=0.0, lt=1.0, description="edges with p > threshold are kept")


@dataclass
class RouterSample:
    """Sampled graphs for a batch of tasks, with what REINFORCE needs."""

    adj: torch.Tensor  # [B, N, N] bool
    log_prob: torch.Tensor  # [B], differentiable
    aux_loss: torch.Tensor  # scalar added to the loss (regularisers), differentiable
    probs: torch.Tensor  # [B, N, N] edge probabilities (0 off the candidates)


class Router(Protocol):
    """What :func:`reinforce_update` and :mod:`societas.marl.routing.train` need from a routing policy."""

    def sample(self, tasks: TaskBatch, generator: torch.Generator) -> RouterSample: ...

    def adjacency(self, tasks: TaskBatch) -> torch.Tensor: ...


class MovingAverageBaseline:
    """``b <- m b + (1 - m) mean(u)``; starts at the first batch's mean."""

    def __init__(self, momentum: float = 0.9) -> None:
        self.momentum = momentum
        self.value: float | None = None

    def __call__(self, rewards: torch.Tensor) -> float:
        """The baseline for this batch (before it is updated with the batch)."""
        mean = float(rewards.mean())
        b = mean if self.value is None else self.value
        self.value = mean if self.value is None else self.momentum * self.value + (1 - self.momentum) * mean
        return b

    def state_dict(self) -> dict[str, float | None]:
        return {"momentum": self.momentum, "value": self.value}


def sample_edges(
    probs: torch.Tensor, mask: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bernoulli edges on the candidates ``mask``: returns ``(adj [B, N, N] bool, log p(adj) [B])``."""
    draws = torch.rand(probs.shape, generator=generator, device=probs.device)
    adj = (draws < probs.detach()) & mask
    eps = 1e-6
    p = probs.clamp(eps, 1 - eps)
    ll = torch.where(adj, p.log(), (1 - p).log())
    log_prob = (ll * mask).sum(dim=(-2, -1))
    return adj, log_prob


def reinforce_update(
    router: Router,
    env: RoutingEnv,
    tasks: TaskBatch,
    optimizer: torch.optim.Optimizer,
    baseline: MovingAverageBaseline,
    generator: torch.Generator,
) -> dict[str, float]:
    """One REINFORCE step: sample a graph per task, run the episodes, step on
    ``-(u - b) log p(G) + aux``. Returns the batch's statistics."""
    smp = router.sample(tasks, generator)
    out = env.evaluate(smp.adj, tasks)
    b = baseline(out.reward)
    advantage = (out.reward - b).detach()
    pg_loss = -(advantage * smp.log_prob).mean()
    loss = pg_loss + smp.aux_loss
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    mask = env.candidates
    mean_p = float((smp.probs.detach() * mask).sum(dim=(-2, -1)).mean()) / max(int(mask.sum()), 1)
    return {
        "success": float(out.success.mean()),
        "messages": float(out.messages.mean()),
        "reward": float(out.reward.mean()),
        "baseline": b,
        "loss": float(loss.detach()),
        "aux_loss": float(smp.aux_loss.detach()),
        "mean_edge_prob": mean_p,
    }


class GPTSwarmRouter(nn.Module):
    """One logit per candidate edge; ``sample`` draws one graph per task (the task is not looked at)."""

    mask: torch.Tensor
    index: torch.Tensor

    def __init__(self, env: RoutingEnv, config: GPTSwarmConfig | None = None) -> None:
        super().__init__()
        self.config = config if config is not None else GPTSwarmConfig()
        self.n_agents = env.n_agents
        self.register_buffer("mask", env.candidates.clone())
        self.register_buffer("index", env.candidates.nonzero())  # [E, 2]
        p0 = self.config.init_prob
        self.logits = nn.Parameter(torch.full((len(self.index),), math.log(p0 / (1 - p0)), device=env.device))

    def edge_probs(self) -> torch.Tensor:
        """``[N, N]`` edge probabilities (0 off the candidate edges)."""
        p = torch.zeros(self.n_agents, self.n_agents, device=self.logits.device)
        return p.index_put((self.index[:, 0], self.index[:, 1]), torch.sigmoid(self.logits))

    def sample(self, tasks: TaskBatch, generator: torch.Generator) -> RouterSample:
        probs = self.edge_probs().expand(len(tasks), self.n_agents, self.n_agents)
        adj, log_prob = sample_edges(probs, self.mask, generator)
        return RouterSample(adj, log_prob, torch.zeros((), device=probs.device), probs)

    @torch.no_grad()
    def adjacency(self, tasks: TaskBatch | None = None) -> torch.Tensor:
        """The pruned graph: edges with ``p > threshold`` (``[N, N]``, or ``[B, N, N]`` when tasks are given)."""
        adj = (self.edge_probs() > self.config.threshold) & self.mask
        return adj if tasks is None else adj.expand(len(tasks), *adj.shape)

    def make_optimizer(self, lr: float | None = None) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=lr if lr is not None else self.config.lr)

    def graph(self, env: RoutingEnv, *, prune: bool = True, name: str = "gptswarm") -> Graph:
        """The learned topology as a :class:`societas.topology.Graph` (dead-end edges dropped when ``prune``)."""
        adj = self.adjacency()
        if prune:
            adj = env.prune_dead_ends(adj)
        return env.graph(adj, name=name)
