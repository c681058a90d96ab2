"""PettingZoo adapters for batched multi-agent environments, both ways.

- :class:`BatchedParallelEnv` shows one row of a :class:`BatchedMultiAgentEnv`
  as a PettingZoo ``ParallelEnv`` (numpy float32 observations, ``Discrete``
  actions, agents removed when the episode ends), so that PettingZoo tools
  (``parallel_api_test``, wrappers, other libraries' training loops) can use
  the torch envs.
- :class:`PettingZooBatchedEnv` exposes ``B`` copies of any PettingZoo
  ``ParallelEnv`` with discrete actions (for example mpe2's
  ``simple_speaker_listener_v4.parallel_env``) through the
  :class:`BatchedMultiAgentEnv` contract, stepping the copies in a Python loop.
  This is how to train on the real mpe2 envs with code written for the batched
  torch envs (and the baseline the torch envs are benchmarked against).

Reference: PettingZoo parallel API (Terry et al. 2021, "PettingZoo: Gym for
Multi-Agent Reinforcement Learning", NeurIPS), https://pettingzoo.farama.org.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from pettingzoo import ParallelEnv
from torch import Tensor

from societas.marl.comm.envs.base import BatchedMultiAgentEnv, resolve_device
from societas.marl.comm.envs.registry import make_env

__all__ = ["BatchedParallelEnv", "PettingZooBatchedEnv"]


class BatchedParallelEnv(ParallelEnv):
    """One row of a batched env as a PettingZoo ``ParallelEnv``.

    ``env`` is a :class:`BatchedMultiAgentEnv` (or a name for
    :func:`societas.marl.comm.envs.registry.make_env`, built with ``num_envs=1`` and ``kw``).
    The view owns the batched env: :meth:`reset` resets every row, and
    :meth:`step` steps every row, giving the rows other than ``row`` action 0
    (for the MPE tasks: no move / word 0). Observations are numpy float32,
    rewards Python floats. When the episode of ``row`` ends, the view returns
    its final observation and empties ``agents``; call :meth:`reset` to start
    the next one.
    """

    # An instance attribute (as ParallelEnv declares it): __init__ adds the env's name per instance.
    metadata: dict[str, Any] = {"render_modes": [], "is_parallelizable": True}

    def __init__(self, env: BatchedMultiAgentEnv | str, row: int = 0, **kw: Any) -> None:
        if isinstance(env, str):
            kw.setdefault("num_envs", 1)
            kw.setdefault("device", "cpu")
            env = make_env(env, **kw)
        if not 0 <= row < env.num_envs:
            raise IndexError(f"row {row} out of range for num_envs={env.num_envs}")
        self.env = env
        self.row = row
        self.possible_agents = list(env.agents)
        self.agents: list[str] = []
        self.max_cycles = env.max_cycles
        self.metadata = dict(self.metadata, name=env.name)
        self.render_mode = None
        self._spaces_obs = {
            a: spaces.Box(low=-np.inf, high=np.inf, shape=(env.observation_sizes[a],), dtype=np.float32)
            for a in env.agents
        }
        self._spaces_act = {a: spaces.Discrete(env.action_sizes[a]) for a in env.agents}
        self.state_space = spaces.Box(low=-np.inf, high=np.inf, shape=(env.state_size,), dtype=np.float32)
        self._noop = {a: torch.zeros(env.num_envs, dtype=torch.long, device=env.device) for a in env.agents}

    def observation_space(self, agent: str) -> spaces.Space:
        return self._spaces_obs[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self._spaces_act[agent]

    def _row(self, obs: dict[str, Tensor]) -> dict[str, np.ndarray]:
        return {a: obs[a][self.row].detach().cpu().numpy().astype(np.float32) for a in self.possible_agents}

    def reset(
        self, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        obs = self.env.reset(seed=seed)
        self.agents = list(self.possible_agents)
        return self._row(obs), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]):
        if not self.agents:
            raise RuntimeError("step() called after the episode ended; call reset() first")
        batched = {}
        for a in self.possible_agents:
            act = self._noop[a].clone()
            act[self.row] = int(actions[a])
            batched[a] = act
        _, rew, term, trunc, info = self.env.step(batched)
        obs = self._row(info["final_observation"])
        terminated, truncated = bool(term[self.row]), bool(trunc[self.row])
        rewards = {a: float(rew[a][self.row]) for a in self.agents}
        terms = dict.fromkeys(self.agents, terminated)
        truncs = dict.fromkeys(self.agents, truncated)
        infos: dict[str, dict] = {a: {} for a in self.agents}
        obs = {a: obs[a] for a in self.agents}
        if terminated or truncated:
            self.agents = []
        return obs, rewards, terms, truncs, infos

    def state(self) -> np.ndarray:
        return self.env.state()[self.row].detach().cpu().numpy().astype(np.float32)

    def render(self) -> None:
        return None

    def close(self) -> None:
        self.env.close()


class PettingZooBatchedEnv(BatchedMultiAgentEnv):
    """``B`` copies of a discrete-action PettingZoo ``ParallelEnv`` as a batched env.

    ``env_fn`` builds one copy (e.g. ``simple_speaker_listener_v4.parallel_env``).
    Copy ``i`` is seeded with ``seed + i`` on the first reset (and on
    ``reset(seed)`` with ``seed + i``); episodes that end are reset
    automatically without a seed, continuing each copy's own random stream, so
    a run is reproducible. The agent set must be fixed: all agents of a copy
    end their episode together (true for MPE). ``state()`` is the
    concatenation of the agents' observations; ``max_cycles`` is read from the
    env when it has one.
    """

    def __init__(
        self,
        env_fn: Callable[[], ParallelEnv],
        num_envs: int = 1,
        device: str | torch.device = "auto",
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
        name: str | None = None,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.envs = [env_fn() for _ in range(num_envs)]
        first = self.envs[0]
        self.name = name or first.metadata.get("name", type(first).__name__)
        self.agents = list(first.possible_agents)
        self.num_envs = num_envs
        self.device = resolve_device(device)
        self.dtype = dtype
        self.seed = seed
        self.max_cycles = int(getattr(first.unwrapped, "max_cycles", 0) or 0)
        self.observation_sizes, self.action_sizes = {}, {}
        for a in self.agents:
            act = first.action_space(a)
            if not isinstance(act, spaces.Discrete):
                raise ValueError(f"agent {a!r} has action space {act}; only Discrete is supported")
            self.action_sizes[a] = int(act.n)
            self.observation_sizes[a] = int(math.prod(first.observation_space(a).shape))
        self.state_size = sum(self.observation_sizes.values())
        self._obs: dict[str, Tensor] | None = None

    def _to_tensors(self, rows: list[dict[str, np.ndarray]]) -> dict[str, Tensor]:
        return {
            a: torch.as_tensor(
                np.stack([np.asarray(r[a]).reshape(-1) for r in rows]), dtype=self.dtype, device=self.device
            )
            for a in self.agents
        }

    def reset(self, seed: int | None = None) -> dict[str, Tensor]:
        if seed is not None:
            self.seed = seed
        rows = [e.reset(seed=self.seed + i)[0] for i, e in enumerate(self.envs)]
        self._obs = self._to_tensors(rows)
        return self._obs

    def step(
        self, actions: dict[str, Tensor]
    ) -> tuple[dict[str, Tensor], dict[str, Tensor], Tensor, Tensor, dict[str, Any]]:
        if self._obs is None:
            raise RuntimeError("call reset() before step()")
        acts = {a: actions[a].detach().cpu().numpy().astype(np.int64) for a in self.agents}
        obs_rows, final_rows = [], []
        rewards = np.zeros((len(self.agents), self.num_envs))
        terminated = np.zeros(self.num_envs, dtype=bool)
        truncated = np.zeros(self.num_envs, dtype=bool)
        for i, e in enumerate(self.envs):
            o, r, te, _, _ = e.step({a: int(acts[a][i]) for a in self.agents})
            for j, a in enumerate(self.agents):
                rewards[j, i] = r.get(a, 0.0)
            final_rows.append(o)
            if not e.agents:  # episode over for every agent
                terminated[i] = any(te.get(a, False) for a in self.agents)
                truncated[i] = not terminated[i]
                o, _ = e.reset()
            obs_rows.append(o)
        final = self._to_tensors(final_rows)
        obs = self._to_tensors(obs_rows) if (terminated | truncated).any() else final
        self._obs = obs
        rew = torch.as_tensor(rewards, dtype=self.dtype, device=self.device)
        return (
            obs,
            {a: rew[j] for j, a in enumerate(self.agents)},
            torch.as_tensor(terminated, device=self.device),
            torch.as_tensor(truncated, device=self.device),
            {"final_observation": final, "final_state": torch.cat([final[a] for a in self.agents], dim=1)},
        )

    def state(self) -> Tensor:
        if self._obs is None:
            raise RuntimeError("call reset() before state()")
        return torch.cat([self._obs[a] for a in self.agents], dim=1)

    def close(self) -> None:
        for e in self.envs:
            e.close()
