"""MAPPO and IPPO with a pluggable communication module, over a batched multi-agent env.

This module is long because MAPPO/IPPO is one algorithm: the config, the GAE
and PPO losses, the actor and critic networks, the rollout buffer and the
update loop are kept together so that they can be checked line by line against
the reference implementation.

References
----------
* MAPPO: Yu, Velu, Vinitsky, Gao, Wang, Bayen & Wu, "The Surprising Effectiveness
  of PPO in Cooperative Multi-Agent Games", NeurIPS 2022 Datasets & Benchmarks,
  arXiv 2103.01955 (code: github.com/marlbenchmark/on-policy).
* IPPO: de Witt, Gupta, Makoviichuk, Makoviychuk, Torr, Sun & Whiteson, "Is
  Independent Learning All You Need in the StarCraft Multi-Agent Challenge?",
  arXiv 2011.09533.
* PPO: Schulman et al. 2017 (arXiv 1707.06347); GAE: Schulman et al. 2016
  (arXiv 1506.02438).

The algorithm (one update; ``B`` envs, ``T = rollout_steps``, ``N`` agents)
-------------------------------------------------------------------------
1. Roll out ``T`` steps of all ``B`` envs. Each step the actor encodes every
   agent's local observation (zero-padded to the largest size, plus an agent
   one-hot when parameters are shared), optionally through a GRU whose hidden
   state is reset at episode starts, then the **communication module** mixes
   the agents' hidden states of *this* time step (``h [B, N, H] -> h' [B, N, H]``,
   :mod:`societas.marl.comm.modules`), and per-agent heads give action logits (actions
   an agent does not have are masked). The random draws of the comm module
   (DIAL noise, IC3Net gates, Gumbel noise) are stored and replayed in the
   update, so the ratio below compares the same stochastic policy.
2. Critic: MAPPO's centralised ``V(s, i)`` on ``env.state()`` plus agent id;
   IPPO's ``V(o_i, i)`` on the agent's own observation. Values are learned in
   normalised units (MAPPO's *ValueNorm*: running mean/variance of the returns,
   beta = 0.99999 with debiasing) and de-normalised for GAE.
3. Generalised advantage estimation, per agent, with ``e_t`` = "the episode
   ended at step t"::

       delta_t = r_t + gamma * V_next_t - V(s_t)
       A_t     = delta_t + gamma * lambda * (1 - e_t) * A_{t+1}
       R_t     = A_t + V(s_t)

   where ``V_next_t = V(s_{t+1})`` inside an episode, ``0`` after termination
   and, after *truncation* (MPE's time limit), the value of the final
   observation ``info["final_observation"]`` (the state of MAPPO's critic is
   the concatenation of the final observations, which is what ``env.state()``
   is by the env contract; ``info["final_state"]`` is used when an env gives
   it). ``bootstrap_truncation=False`` treats truncation as termination, as
   the MAPPO code does for MPE by default.
4. PPO, ``update_epochs`` epochs of ``num_minibatches`` minibatches (over
   ``T * B`` samples, or over envs with whole sequences when recurrent)::

       ratio_t = exp(log pi(a_t|o_t) - log pi_old(a_t|o_t))     (per agent; IC3Net's gate
                                                                  action adds its log-prob)
       L_pi    = -E[ min(ratio_t A_t, clip(ratio_t, 1-eps, 1+eps) A_t) ] - c_ent * E[H(pi)]
       L_V     = 1/2 E[ max( (V - R)^2, (V_old + clip(V - V_old, -eps_v, eps_v) - R)^2 ) ]

   with advantages normalised over the batch. The value loss is the clipped
   *squared* error in normalised units (MAPPO's code defaults to a Huber loss
   with delta 10; for normalised targets that is the squared error almost
   always). Actor and critic have their own Adam optimisers and gradients
   are clipped to ``max_grad_norm`` per network, as in MAPPO.

Determinism: parameters are initialised under ``seed`` and every random draw
(actions, comm noise, minibatch order) comes from one ``torch.Generator``
seeded with ``seed``; the same seed gives the same run on the CPU.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from torch import Tensor, nn

from .envs import make_env
from .envs.base import resolve_device
from .modules import COMM_MODULES, CommModule, CommOutput, check_comm_kwargs, make_comm

logger = logging.getLogger(__name__)

__all__ = [
    "MAPPO",
    "Actor",
    "Critic",
    "MAPPOConfig",
    "ValueNorm",
    "compute_gae",
    "ppo_policy_loss",
    "ppo_value_loss",
]

ALGOS = ("mappo", "ippo")
NEG_INF = -1e9  # logit of an action the agent does not have (finite: no NaN in entropies)


# ------------------------------------------------------------------- config --


class MAPPOConfig(BaseModel):
    """Hyper-parameters of one MAPPO/IPPO run.

    The defaults learn speaker-listener. Learning rates (7e-4), clip 0.2,
    entropy 0.01, gamma 0.99, lambda 0.95, gradient clip 10, hidden size 64,
    value clipping and ValueNorm follow the MAPPO paper's MPE settings; the
    update is 5 epochs of minibatches of about 800 samples (128 envs x 25
    steps / 4) rather than MAPPO's 10-15 epochs of one full batch, which
    learns faster per CPU second here.
    """

    model_config = ConfigDict(extra="forbid")

    env: str = "speaker_listener"
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    max_cycles: int = Field(25, ge=1)
    algo: Literal["mappo", "ippo"] = "mappo"
    comm: str = "none"
    comm_kwargs: dict[str, Any] = Field(default_factory=dict)
    adjacency: list[list[float]] | None = None  # receiver-row graph given to the comm module

    total_steps: int = Field(1_000_000, ge=1)  # env steps: each step of B envs counts B
    num_envs: int = Field(128, ge=1)
    rollout_steps: int = Field(25, ge=1)
    hidden_size: int = Field(64, ge=2)
    critic_hidden_size: int = Field(64, ge=2)
    share_actor: bool = True  # one actor (and critic) for all agents, with agent id
    recurrent: bool = False  # GRU in the actor, reset at episode starts

    lr: float = Field(7e-4, gt=0)
    critic_lr: float = Field(7e-4, gt=0)
    anneal_lr: bool = False
    adam_eps: float = 1e-5
    gamma: float = Field(0.99, ge=0, le=1)
    gae_lambda: float = Field(0.95, ge=0, le=1)
    clip_coef: float = Field(0.2, gt=0)
    value_clip: float | None = 0.2  # None: unclipped value loss
    value_norm: bool = True
    norm_advantages: bool = True
    ent_coef: float = Field(0.01, ge=0)
    vf_coef: float = Field(1.0, ge=0)
    max_grad_norm: float = Field(10.0, gt=0)
    update_epochs: int = Field(5, ge=1)
    num_minibatches: int = Field(4, ge=1)  # 128 envs x 25 steps / 4 = 800 samples each
    bootstrap_truncation: bool = True

    device: str = "auto"
    seed: int = 0

    @field_validator("comm")
    @classmethod
    def _known_comm(cls, v: str) -> str:
        if v not in COMM_MODULES:
            raise ValueError(f"unknown comm module {v!r}; known: {', '.join(COMM_MODULES)}")
        return v

    @model_validator(mode="after")
    def _known_comm_kwargs(self) -> MAPPOConfig:
        check_comm_kwargs(self.comm, self.comm_kwargs)
        return self

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.rollout_steps

    @property
    def num_updates(self) -> int:
        return max(1, math.ceil(self.total_steps / self.steps_per_update))


# ------------------------------------------------------- GAE and PPO losses --


def compute_gae(
    rewards: Tensor, values: Tensor, next_values: Tensor, ended: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over time (dim 0).

    ``rewards``, ``values``, ``next_values``: ``[T, ...]``; ``next_values[t]`` is
    the value to bootstrap from after step t (``V(s_{t+1})``, the final
    observation's value after truncation, or 0 after termination); ``ended``
    ``[T, ...]`` (broadcastable) marks steps after which the episode ended.
    Returns ``(advantages, returns = advantages + values)``.
    """
    T = rewards.shape[0]
    ended = ended.to(rewards.dtype)
    while ended.dim() < rewards.dim():
        ended = ended.unsqueeze(-1)
    adv = torch.zeros_like(rewards)
    last = torch.zeros_like(rewards[0])
    for t in reversed(range(T)):
        delta = rewards[t] + gamma * next_values[t] - values[t]
        last = delta + gamma * lam * (1.0 - ended[t]) * last
        adv[t] = last
    return adv, adv + values


def ppo_policy_loss(
    new_logp: Tensor, old_logp: Tensor, adv: Tensor, clip_coef: float
) -> tuple[Tensor, dict[str, float]]:
    """PPO's clipped surrogate ``-E[min(r A, clip(r, 1-eps, 1+eps) A)]`` and diagnostics."""
    loss, approx_kl, clipfrac = _policy_loss_terms(new_logp, old_logp, adv, clip_coef)
    return loss, {"approx_kl": float(approx_kl), "clipfrac": float(clipfrac)}


def _policy_loss_terms(
    new_logp: Tensor, old_logp: Tensor, adv: Tensor, clip_coef: float
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`ppo_policy_loss` with its diagnostics left on the device (reading them back would
    make the host wait for the GPU at every minibatch)."""
    log_ratio = new_logp - old_logp
    ratio = log_ratio.exp()
    surr1 = ratio * adv
    surr2 = ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef) * adv
    loss = -torch.min(surr1, surr2).mean()
    with torch.no_grad():
        approx_kl = ((ratio - 1.0) - log_ratio).mean()
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean()
    return loss, approx_kl, clipfrac


def ppo_value_loss(new_v: Tensor, old_v: Tensor, target: Tensor, clip: float | None) -> Tensor:
    """``1/2 E[max((V - R)^2, (V_old + clip(V - V_old) - R)^2)]`` (unclipped if ``clip`` is None)."""
    unclipped = (new_v - target) ** 2
    if clip is None:
        return 0.5 * unclipped.mean()
    clipped = (old_v + (new_v - old_v).clamp(-clip, clip) - target) ** 2
    return 0.5 * torch.max(unclipped, clipped).mean()


class ValueNorm(nn.Module):
    """MAPPO's ValueNorm: running mean and variance of the value targets (EMA with
    ``beta``, debiased as in Adam); the critic predicts ``(R - mu) / sigma``."""

    mean: Tensor
    mean_sq: Tensor
    debias: Tensor

    def __init__(self, beta: float = 0.99999, epsilon: float = 1e-5):
        super().__init__()
        self.beta, self.epsilon = beta, epsilon
        self.register_buffer("mean", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean_sq", torch.zeros((), dtype=torch.float64))
        self.register_buffer("debias", torch.zeros((), dtype=torch.float64))

    def mean_var(self) -> tuple[Tensor, Tensor]:
        d = self.debias.clamp_min(self.epsilon)
        mean = self.mean / d
        var = (self.mean_sq / d - mean**2).clamp_min(1e-2)
        return mean, var

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        x = x.detach().to(torch.float64)
        w = self.beta
        self.mean.mul_(w).add_(x.mean() * (1 - w))
        self.mean_sq.mul_(w).add_((x**2).mean() * (1 - w))
        self.debias.mul_(w).add_(1 - w)

    def normalize(self, x: Tensor) -> Tensor:
        mean, var = self.mean_var()
        return (x - mean.to(x.dtype)) / var.sqrt().to(x.dtype)

    def denormalize(self, x: Tensor) -> Tensor:
        mean, var = self.mean_var()
        return x * var.sqrt().to(x.dtype) + mean.to(x.dtype)


# ----------------------------------------------------------------- networks --


def layer_init(layer: nn.Linear, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


def mlp(inp: int, hidden: int, out: int | None = None, out_std: float = 1.0) -> nn.Sequential:
    layers: list[nn.Module] = [
        layer_init(nn.Linear(inp, hidden)),
        nn.Tanh(),
        layer_init(nn.Linear(hidden, hidden)),
        nn.Tanh(),
    ]
    if out is not None:
        layers.append(layer_init(nn.Linear(hidden, out), out_std))
    return nn.Sequential(*layers)


class Actor(nn.Module):
    """Per-agent encoder -> (GRU) -> communication module -> per-agent action head.

    ``forward(obs [B, N, D], rnn [B, N, H] | None, first [B] | None, samples)``
    returns masked logits ``[B, N, A_max]``, the new GRU state (or None) and the
    comm module's :class:`CommOutput`. ``obs`` is zero-padded to ``D`` = the
    largest observation size. With ``share=True`` one encoder/head serves every
    agent and an agent one-hot is appended to the observation; otherwise each
    agent has its own encoder, GRU and head (the comm module is always one).
    """

    action_mask: Tensor
    agent_ids: Tensor
    adjacency: Tensor
    grus: nn.ModuleList | None

    def __init__(
        self,
        obs_sizes: list[int],
        action_sizes: list[int],
        hidden: int,
        comm: CommModule,
        share: bool = True,
        recurrent: bool = False,
        adjacency: Tensor | None = None,
    ):
        super().__init__()
        self.obs_sizes, self.action_sizes = list(obs_sizes), list(action_sizes)
        self.n, self.hidden, self.share, self.recurrent = len(obs_sizes), hidden, share, recurrent
        self.obs_dim, self.act_dim = max(obs_sizes), max(action_sizes)
        copies = 1 if share else self.n
        if share:
            self.encoders = nn.ModuleList([mlp(self.obs_dim + self.n, hidden)])
            self.heads = nn.ModuleList([layer_init(nn.Linear(hidden, self.act_dim), 0.01)])
        else:
            self.encoders = nn.ModuleList(mlp(d, hidden) for d in obs_sizes)
            self.heads = nn.ModuleList(layer_init(nn.Linear(hidden, a), 0.01) for a in action_sizes)
        self.grus = nn.ModuleList(nn.GRUCell(hidden, hidden) for _ in range(copies)) if recurrent else None
        self.comm = comm
        mask = torch.zeros(self.n, self.act_dim, dtype=torch.bool)
        for i, a in enumerate(action_sizes):
            mask[i, :a] = True
        self.register_buffer("action_mask", mask)
        self.register_buffer("agent_ids", torch.eye(self.n))
        self.register_buffer("adjacency", adjacency if adjacency is not None else torch.empty(0))

    def initial_state(self, batch: int, device=None, dtype=torch.float32) -> Tensor | None:
        if not self.recurrent:
            return None
        return torch.zeros(batch, self.n, self.hidden, device=device, dtype=dtype)

    def encode(self, obs: Tensor, rnn: Tensor | None, first: Tensor | None) -> tuple[Tensor, Tensor | None]:
        b = obs.shape[0]
        if self.share:
            x = self.encoders[0](torch.cat([obs, self.agent_ids.expand(b, -1, -1).to(obs.dtype)], -1))
        else:
            x = torch.stack([enc(obs[:, i, : self.obs_sizes[i]]) for i, enc in enumerate(self.encoders)], 1)
        if self.grus is None:  # not recurrent
            return x, None
        if rnn is None:
            raise ValueError("a recurrent actor needs the GRU state rnn (start from initial_state())")
        if first is not None:  # reset the GRU at episode starts
            rnn = rnn * (~first).to(rnn.dtype).view(b, 1, 1)
        if self.share:
            h = self.grus[0](x.reshape(b * self.n, -1), rnn.reshape(b * self.n, -1)).view(b, self.n, -1)
        else:
            h = torch.stack([gru(x[:, i], rnn[:, i]) for i, gru in enumerate(self.grus)], 1)
        return h, h

    def forward(
        self,
        obs: Tensor,
        rnn: Tensor | None = None,
        first: Tensor | None = None,
        samples: dict[str, Tensor] | None = None,
    ) -> tuple[Tensor, Tensor | None, CommOutput]:
        h, rnn_new = self.encode(obs, rnn, first)
        adj = self.adjacency if self.adjacency.numel() else None
        co = self.comm(h, adj, samples)
        if self.share:
            logits = self.heads[0](co.h)
        else:
            logits = torch.stack(
                [
                    F.pad(head(co.h[:, i]), (0, self.act_dim - self.action_sizes[i]))
                    for i, head in enumerate(self.heads)
                ],
                1,
            )
        logits = logits.masked_fill(~self.action_mask, NEG_INF)
        return logits, rnn_new, co


class Critic(nn.Module):
    """``V(x_i, i)`` for every agent: ``x_i`` is the global state (MAPPO) or the
    agent's padded local observation (IPPO). Shared parameters with an agent
    one-hot, or one network per agent (``share=False``). Outputs ``[B, N]``
    in ValueNorm units."""

    agent_ids: Tensor

    def __init__(self, input_size: int, num_agents: int, hidden: int, share: bool = True):
        super().__init__()
        self.n, self.share = num_agents, share
        if share:
            self.nets = nn.ModuleList([mlp(input_size + num_agents, hidden, 1)])
        else:
            self.nets = nn.ModuleList(mlp(input_size, hidden, 1) for _ in range(num_agents))
        self.register_buffer("agent_ids", torch.eye(num_agents))

    def forward(self, x: Tensor) -> Tensor:
        """``x``: ``[B, N, input_size]`` (the state repeated per agent for MAPPO)."""
        b = x.shape[0]
        if self.share:
            return self.nets[0](torch.cat([x, self.agent_ids.expand(b, -1, -1).to(x.dtype)], -1)).squeeze(-1)
        return torch.stack([net(x[:, i]).squeeze(-1) for i, net in enumerate(self.nets)], 1)


# ------------------------------------------------------------------ rollout --


@dataclass
class Rollout:
    """One batch of experience: ``[T, B, ...]`` tensors."""

    obs: Tensor  # [T, B, N, D] padded local observations
    critic_in: Tensor  # [T, B, N, C] critic inputs
    first: Tensor  # [T, B] bool: obs[t] starts an episode (GRU reset)
    actions: Tensor  # [T, B, N]
    logp: Tensor  # [T, B, N] (incl. comm-action log-probs)
    values: Tensor  # [T, B, N] normalised critic outputs
    rewards: Tensor  # [T, B, N]
    ended: Tensor  # [T, B] bool
    next_values: Tensor  # [T, B, N] de-normalised bootstrap values
    samples: dict[str, Tensor]  # comm draws, [T, B, ...]
    rnn0: Tensor | None  # [B, N, H] GRU state before step 0


def sample_actions(logits: Tensor, generator: torch.Generator | None) -> Tensor:
    """Categorical sample by the Gumbel-max trick, drawing from ``generator``."""
    u = torch.rand(
        logits.shape,
        generator=generator,
        device=logits.device if generator is None else generator.device,
        dtype=logits.dtype,
    ).to(logits.device)
    return (logits - torch.log(-torch.log(u.clamp(1e-10, 1.0 - 1e-7)))).argmax(-1)


def entropy_of(logits: Tensor) -> Tensor:
    logp = torch.log_softmax(logits, -1)
    return -(logp.exp() * logp).sum(-1)


class MAPPO:
    """MAPPO / IPPO trainer over a :class:`~societas.marl.comm.envs.base.BatchedMultiAgentEnv`.

    ``MAPPO(config, env=None)`` builds the env with ``make_env`` when none is
    given. :meth:`train_iter` yields one metrics dict per update; :meth:`act`
    runs the policy (``deterministic=True``: greedy, comm module in eval mode).
    """

    def __init__(self, config: MAPPOConfig, env=None):
        self.config = cfg = config
        self.device = resolve_device(cfg.device)
        if env is None:
            env = make_env(
                cfg.env,
                num_envs=cfg.num_envs,
                device=self.device,
                seed=cfg.seed,
                max_cycles=cfg.max_cycles,
                **cfg.env_kwargs,
            )
        self.env = env
        self.device = torch.device(env.device)
        self.agents = list(env.agents)
        self.n = len(self.agents)
        self.B = env.num_envs
        self.dtype = getattr(env, "dtype", torch.float32)
        obs_sizes = [env.observation_sizes[a] for a in self.agents]
        act_sizes = [env.action_sizes[a] for a in self.agents]
        self.obs_dim = max(obs_sizes)
        self.centralised = cfg.algo == "mappo"
        self.critic_dim = env.state_size if self.centralised else self.obs_dim
        adjacency = None
        if cfg.adjacency is not None:
            adjacency = torch.tensor(cfg.adjacency, dtype=torch.float32)
            if adjacency.shape != (self.n, self.n):
                raise ValueError(f"adjacency must be {self.n}x{self.n}, got {tuple(adjacency.shape)}")

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            comm = make_comm(cfg.comm, cfg.hidden_size, self.n, **cfg.comm_kwargs)
            self.actor = Actor(
                obs_sizes,
                act_sizes,
                cfg.hidden_size,
                comm,
                share=cfg.share_actor,
                recurrent=cfg.recurrent,
                adjacency=adjacency,
            )
            self.critic = Critic(self.critic_dim, self.n, cfg.critic_hidden_size, share=cfg.share_actor)
        self.actor.to(device=self.device, dtype=self.dtype)
        self.critic.to(device=self.device, dtype=self.dtype)
        self.value_norm = ValueNorm().to(self.device)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.lr, eps=cfg.adam_eps)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr, eps=cfg.adam_eps)
        self.gen = torch.Generator(device=self.device)
        self.gen.manual_seed(cfg.seed)
        self.actor.comm.generator = self.gen

        self.updates = 0
        self.env_steps = 0
        self._warned_final_state = False
        obs = env.reset(seed=cfg.seed)
        self._obs = self._pad(obs)
        self._state = env.state()
        self._first = torch.ones(self.B, dtype=torch.bool, device=self.device)
        self._rnn = self.actor.initial_state(self.B, self.device, self.dtype)
        self._ep_ret = torch.zeros(self.B, self.n, device=self.device, dtype=self.dtype)
        self._ep_len = torch.zeros(self.B, dtype=torch.long, device=self.device)

    # -------------------------------------------------------------- helpers --
    def _pad(self, obs: dict[str, Tensor]) -> Tensor:
        """``{agent: [B, d_i]}`` -> zero-padded ``[B, N, D]``."""
        return torch.stack(
            [F.pad(obs[a].to(self.dtype), (0, self.obs_dim - obs[a].shape[-1])) for a in self.agents], 1
        )

    def _critic_input(self, obs_pad: Tensor, state: Tensor | None) -> Tensor:
        if self.centralised:
            if state is None:
                raise ValueError("the centralised (MAPPO) critic needs the env state")
            return state.to(self.dtype).unsqueeze(1).expand(-1, self.n, -1)
        return obs_pad

    def _final_state(self, info: dict) -> Tensor | None:
        if "final_state" in info:
            return info["final_state"]
        fo = info.get("final_observation")
        if fo is not None and sum(fo[a].shape[-1] for a in self.agents) == self.env.state_size:
            return torch.cat([fo[a].to(self.dtype) for a in self.agents], -1)
        if not self._warned_final_state:
            logger.warning("env gives no final state; truncation is treated as termination")
            self._warned_final_state = True
        return None

    def _denorm(self, v: Tensor) -> Tensor:
        return self.value_norm.denormalize(v) if self.config.value_norm else v

    # ------------------------------------------------------------- rollout --
    @torch.no_grad()
    def collect(self) -> tuple[Rollout, dict[str, float | None]]:
        cfg, T, B, N = self.config, self.config.rollout_steps, self.B, self.n
        dev, dt = self.device, self.dtype
        self.actor.train()
        obs_buf = torch.zeros(T, B, N, self.obs_dim, device=dev, dtype=dt)
        cin_buf = torch.zeros(T, B, N, self.critic_dim, device=dev, dtype=dt)
        first_buf = torch.zeros(T, B, dtype=torch.bool, device=dev)
        act_buf = torch.zeros(T, B, N, dtype=torch.long, device=dev)
        logp_buf = torch.zeros(T, B, N, device=dev, dtype=dt)
        val_buf = torch.zeros(T, B, N, device=dev, dtype=dt)
        rew_buf = torch.zeros(T, B, N, device=dev, dtype=dt)
        end_buf = torch.zeros(T, B, dtype=torch.bool, device=dev)
        final_v = torch.zeros(T, B, N, device=dev, dtype=dt)  # bootstrap value after truncation
        samples: dict[str, list[Tensor]] = {}
        rnn0 = None if self._rnn is None else self._rnn.clone()
        returns, lengths = [], []
        # summed on the device, in float64 as a Python float would be: reading each step's value
        # back would make the host wait for the GPU at every step
        messages = torch.zeros((), dtype=torch.float64, device=dev)

        for t in range(T):
            obs, first = self._obs, self._first
            cin = self._critic_input(obs, self._state)
            logits, rnn, co = self.actor(obs, self._rnn, first)
            actions = sample_actions(logits, self.gen)
            logp = torch.log_softmax(logits, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
            if co.log_prob is not None:
                logp = logp + co.log_prob
            value = self.critic(cin)
            for k, v in co.samples.items():
                samples.setdefault(k, []).append(v)
            messages += co.messages.float().mean().to(torch.float64)

            next_obs, rewards, terminated, truncated, info = self.env.step(
                {a: actions[:, i] for i, a in enumerate(self.agents)}
            )
            r = torch.stack([rewards[a].to(dt) for a in self.agents], -1)
            ended = terminated | truncated
            # whether any episode ended, from the env's host-side flags when it gives them (see
            # BatchedMultiAgentEnv.step), else read back from the device
            known = "any_truncated" in info and "any_terminated" in info
            any_truncated = bool(info["any_truncated"]) if known else bool(truncated.any())
            any_ended = (any_truncated or bool(info["any_terminated"])) if known else bool(ended.any())
            if cfg.bootstrap_truncation and any_truncated:
                fobs = self._pad(info["final_observation"])
                fstate = self._final_state(info) if self.centralised else None
                if not self.centralised or fstate is not None:
                    fv = self._denorm(self.critic(self._critic_input(fobs, fstate)))
                    final_v[t] = fv * (truncated & ~terminated).to(dt).unsqueeze(-1)

            obs_buf[t], cin_buf[t], first_buf[t] = obs, cin, first
            act_buf[t], logp_buf[t], val_buf[t], rew_buf[t], end_buf[t] = actions, logp, value, r, ended

            self._ep_ret += r
            self._ep_len += 1
            if any_ended:
                returns.append(self._ep_ret[ended].mean(-1))
                lengths.append(self._ep_len[ended])
                self._ep_ret[ended] = 0.0
                self._ep_len[ended] = 0
            self._obs, self._state, self._first, self._rnn = self._pad(next_obs), self.env.state(), ended, rnn

        last_v = self._denorm(self.critic(self._critic_input(self._obs, self._state)))
        vals = self._denorm(val_buf)
        following = torch.cat([vals[1:], last_v.unsqueeze(0)], 0)
        next_values = torch.where(end_buf.unsqueeze(-1), final_v, following)
        self.env_steps += T * B
        roll = Rollout(
            obs_buf,
            cin_buf,
            first_buf,
            act_buf,
            logp_buf,
            val_buf,
            rew_buf,
            end_buf,
            next_values,
            {k: torch.stack(v) for k, v in samples.items()},
            rnn0,
        )
        ep = torch.cat(returns) if returns else None
        stats = {
            "episodes": 0 if ep is None else int(ep.numel()),
            "mean_episode_return": None if ep is None else float(ep.mean()),
            "std_episode_return": None if ep is None else float(ep.std(unbiased=False)),
            "mean_episode_length": None if not lengths else float(torch.cat(lengths).float().mean()),
            "messages_per_step": float(messages) / T,
        }
        return roll, stats

    # --------------------------------------------------------------- update --
    def _evaluate_actions(self, roll: Rollout, idx: Tensor, recurrent: bool) -> tuple[Tensor, Tensor, Tensor]:
        """New log-probs, entropies and values for a minibatch (``idx`` into
        envs when recurrent, into flattened ``T * B`` otherwise)."""
        if recurrent:
            T = roll.obs.shape[0]
            if roll.rnn0 is None:
                raise ValueError("a recurrent update needs the rollout's initial GRU state (rnn0)")
            rnn = roll.rnn0[idx]
            logps, ents = [], []
            for t in range(T):
                s_t = {k: v[t, idx] for k, v in roll.samples.items()}
                logits, rnn, co = self.actor(roll.obs[t, idx], rnn, roll.first[t, idx], s_t)
                a = roll.actions[t, idx]
                lp = torch.log_softmax(logits, -1).gather(-1, a.unsqueeze(-1)).squeeze(-1)
                ent = entropy_of(logits)
                if co.log_prob is not None:
                    lp, ent = lp + co.log_prob, ent + co.entropy
                logps.append(lp)
                ents.append(ent)
            values = self.critic(roll.critic_in[:, idx].flatten(0, 1)).view(T, len(idx), self.n)
            return torch.stack(logps), torch.stack(ents), values

        def flat(x: Tensor) -> Tensor:
            return x.flatten(0, 1)[idx]

        s = {k: flat(v) for k, v in roll.samples.items()}
        logits, _, co = self.actor(flat(roll.obs), None, None, s)
        a = flat(roll.actions)
        lp = torch.log_softmax(logits, -1).gather(-1, a.unsqueeze(-1)).squeeze(-1)
        ent = entropy_of(logits)
        if co.log_prob is not None:
            lp, ent = lp + co.log_prob, ent + co.entropy
        return lp, ent, self.critic(flat(roll.critic_in))

    def update(self, roll: Rollout) -> dict[str, float]:
        cfg = self.config
        T, B = roll.rewards.shape[:2]
        vn = self.value_norm
        values = self._denorm(roll.values)
        adv, returns = compute_gae(
            roll.rewards, values, roll.next_values, roll.ended, cfg.gamma, cfg.gae_lambda
        )
        if cfg.value_norm:
            vn.update(returns)
            targets = vn.normalize(returns)
        else:
            targets = returns
        if cfg.norm_advantages:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        if cfg.anneal_lr:
            frac = 1.0 - self.updates / max(cfg.num_updates, 1)
            for opt, lr in ((self.actor_opt, cfg.lr), (self.critic_opt, cfg.critic_lr)):
                for g in opt.param_groups:
                    g["lr"] = frac * lr

        recurrent = self.actor.recurrent
        n_items = B if recurrent else T * B
        mb_size = max(1, n_items // cfg.num_minibatches)
        pick = (lambda x, i: x[:, i]) if recurrent else (lambda x, i: x.flatten(0, 1)[i])
        self.actor.train()
        # the minibatches' statistics, summed on the device in float64 (the sums a Python float
        # would make, term for term): reading them back at every minibatch would make the host
        # wait for the GPU
        names = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "grad_norm")
        acc = torch.zeros(len(names), dtype=torch.float64, device=self.device)
        count = 0
        for _ in range(cfg.update_epochs):
            perm = torch.randperm(n_items, generator=self.gen, device=self.gen.device).to(self.device)
            for start in range(0, n_items, mb_size):
                idx = perm[start : start + mb_size]
                logp, ent, v = self._evaluate_actions(roll, idx, recurrent)
                pl, kl, cf = _policy_loss_terms(logp, pick(roll.logp, idx), pick(adv, idx), cfg.clip_coef)
                vl = ppo_value_loss(v, pick(roll.values, idx), pick(targets, idx), cfg.value_clip)
                entropy = ent.mean()
                loss = pl - cfg.ent_coef * entropy + cfg.vf_coef * vl
                self.actor_opt.zero_grad(set_to_none=True)
                self.critic_opt.zero_grad(set_to_none=True)
                loss.backward()
                gn = nn.utils.clip_grad_norm_(self.actor.parameters(), cfg.max_grad_norm)
                nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.max_grad_norm)
                self.actor_opt.step()
                self.critic_opt.step()
                terms = (pl.detach(), vl.detach(), entropy.detach(), kl, cf, gn)
                acc += torch.stack([x.to(torch.float64) for x in terms])
                count += 1
        var_y = returns.var()
        explained = torch.where(var_y == 0, float("nan"), 1 - (returns - values).var() / var_y)
        *sums, ev = torch.cat([acc, explained.to(torch.float64).view(1)]).tolist()  # one read
        out = {k: v / max(count, 1) for k, v in zip(names, sums)}
        out["explained_variance"] = ev
        self.updates += 1
        return out

    # ---------------------------------------------------------------- loop --
    def train_iter(self, num_updates: int | None = None):
        """Yield one metrics dict per update (rollout + PPO update)."""
        n = self.config.num_updates if num_updates is None else num_updates
        for _ in range(n):
            t0 = time.perf_counter()
            roll, stats = self.collect()
            t1 = time.perf_counter()
            losses = self.update(roll)
            t2 = time.perf_counter()
            yield {
                "update": self.updates,
                "env_steps": self.env_steps,
                **stats,
                **losses,
                "sps": roll.rewards.shape[0] * roll.rewards.shape[1] / max(t2 - t0, 1e-9),
                "rollout_s": t1 - t0,
                "update_s": t2 - t1,
            }

    def learn(
        self, num_updates: int | None = None, callback: Callable[[dict], None] | None = None
    ) -> list[dict]:
        history = []
        for m in self.train_iter(num_updates):
            history.append(m)
            if callback is not None:
                callback(m)
        return history

    # ---------------------------------------------------------------- acting --
    @torch.no_grad()
    def act(
        self,
        obs: dict[str, Tensor] | Tensor,
        rnn: Tensor | None = None,
        first: Tensor | None = None,
        deterministic: bool = True,
    ) -> tuple[Tensor, Tensor | None, CommOutput]:
        """Actions ``[B, N]`` for observations (dict or padded ``[B, N, D]``).
        ``deterministic``: greedy actions and the comm module in eval mode
        (DIAL discretised, gates and graphs without noise)."""
        o = self._pad(obs) if isinstance(obs, dict) else obs
        was = self.actor.training
        self.actor.train(not deterministic)
        try:
            logits, rnn, co = self.actor(o, rnn, first)
        finally:
            self.actor.train(was)
        a = logits.argmax(-1) if deterministic else sample_actions(logits, self.gen)
        return a, rnn, co

    def state_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.model_dump(mode="json"),
            "updates": self.updates,
            "env_steps": self.env_steps,
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "value_norm": self.value_norm.state_dict(),
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "agents": self.agents,
        }

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.actor.load_state_dict(sd["actor"])
        self.critic.load_state_dict(sd["critic"])
        self.value_norm.load_state_dict(sd["value_norm"])
        if "actor_opt" in sd:
            self.actor_opt.load_state_dict(sd["actor_opt"])
            self.critic_opt.load_state_dict(sd["critic_opt"])
        self.updates = int(sd.get("updates", 0))
        self.env_steps = int(sd.get("env_steps", 0))
