"""The batched multi-agent environment contract used by ``societas.marl.comm``.

A :class:`BatchedMultiAgentEnv` holds ``B`` independent copies of one
cooperative (or general-sum) multi-agent environment and steps them together
as tensors of shape ``[B, ...]``: one call to :meth:`~BatchedMultiAgentEnv.step`
advances every copy by one environment step. Agents act simultaneously with
discrete actions (PettingZoo's parallel API, batched).

Conventions shared by every implementation:

- ``agents`` has a fixed order; every dict of observations, rewards or actions
  is keyed by these names.
- Observations are ``[B, observation_sizes[agent]]`` tensors of ``dtype`` on
  ``device``; rewards are ``[B]`` tensors of ``dtype``; actions are integer
  tensors ``[B]`` (any integer dtype, any device they can be moved from).
- ``terminated`` and ``truncated`` are ``[B]`` bool tensors. An episode is
  truncated after ``max_cycles`` steps (MPE tasks never terminate).
- Auto-reset: an env row whose episode ended in this step returns the first
  observation of a fresh episode in ``obs``, while
  ``info["final_observation"]`` holds the last observation of the ended
  episode (a dict of ``[B, obs]`` tensors whose rows for envs that did not end
  equal ``obs``). Bootstrapping code should use the final observation for rows
  where ``truncated`` is true.
- ``state()`` is the global state for centralised critics (MAPPO): here the
  concatenation of all agents' observations in ``agents`` order, exactly as
  PettingZoo MPE's ``state()``.

Implementations: :mod:`societas.marl.comm.envs.speaker_listener`,
:mod:`societas.marl.comm.envs.reference` (torch, vectorised) and
:class:`societas.marl.comm.envs.pettingzoo.PettingZooBatchedEnv` (any PettingZoo
ParallelEnv, ``B`` copies in a Python loop).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
from torch import Tensor

from societas.marl.device import resolve_device

__all__ = ["BatchedMultiAgentEnv", "resolve_device"]


class BatchedMultiAgentEnv(ABC):
    """B independent copies of a cooperative/general multi-agent env stepped together as tensors."""

    name: str
    agents: list[str]  # fixed order, e.g. ["speaker_0", "listener_0"]
    num_envs: int  # B
    device: torch.device
    dtype: torch.dtype  # float32 default; float64 for parity tests
    max_cycles: int  # episode length (MPE default 25)
    observation_sizes: dict[str, int]
    action_sizes: dict[str, int]  # discrete action counts
    state_size: int  # size of state()

    @abstractmethod
    def reset(self, seed: int | None = None) -> dict[str, Tensor]:
        """Start a fresh episode in every row; returns ``{agent: obs [B, obs_size]}``.

        ``seed`` reseeds the env's generator first (same seed -> same episodes).
        """

    @abstractmethod
    def step(
        self, actions: dict[str, Tensor]
    ) -> tuple[dict[str, Tensor], dict[str, Tensor], Tensor, Tensor, dict[str, Any]]:
        """Advance every row by one step.

        ``actions``: ``{agent: LongTensor [B]}``. Returns ``(obs, rewards,
        terminated, truncated, info)`` with ``obs[agent]`` ``[B, obs_size]``,
        ``rewards[agent]`` ``[B]``, ``terminated``/``truncated`` ``[B]`` bool and
        ``info["final_observation"]`` as described in the module docstring.
        Ended rows are reset automatically. An env may also give
        ``info["any_terminated"]`` and ``info["any_truncated"]``, Python bools
        it knows on the host: a trainer on a GPU then need not read
        ``terminated`` and ``truncated`` back at every step to learn whether
        an episode ended.
        """

    @abstractmethod
    def state(self) -> Tensor:
        """Global state ``[B, state_size]`` for centralised critics."""

    def close(self) -> None:  # noqa: B027 - optional to override: tensor envs hold nothing to release
        """Release resources (no-op for tensor envs)."""

    # Convenience shared by all implementations.
    @property
    def num_agents(self) -> int:
        return len(self.agents)

    def sample_actions(self, generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """Uniformly random actions ``{agent: LongTensor [B]}`` on ``device``."""
        return {
            a: torch.randint(
                self.action_sizes[a],
                (self.num_envs,),
                generator=generator,
                device=self.device if generator is None else generator.device,
            ).to(self.device)
            for a in self.agents
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, num_envs={self.num_envs}, "
            f"agents={self.agents}, device={self.device}, dtype={self.dtype})"
        )


# --------------------------------------------------------------------------
# Shared machinery of the batched MPE tasks (speaker_listener, reference).
# --------------------------------------------------------------------------

#: Discrete MPE movement actions [no_action, left, right, down, up] as unit
#: directions (mpe2 ``SimpleEnv._set_action``).
MPE_MOVES = ((0.0, 0.0), (-1.0, 0.0), (1.0, 0.0), (0.0, -1.0), (0.0, 1.0))


class MPEBatchedEnv(BatchedMultiAgentEnv):
    """Common body of the torch MPE tasks: seeding, step counting, auto-reset.

    A subclass keeps its whole world state in ``self._s``, a dict of tensors
    whose *last* dimension is the batch ``B`` (feature-major, "structure of
    arrays": ``pos`` is ``[2, B]``, not ``[B, 2]``). Why: on a CPU, elementwise
    ops over rows of ``B`` contiguous numbers vectorise, while ``[B, 2]``
    layouts with tiny inner dimensions run several times slower. It implements

    - ``_sample_state(n)``: a fresh initial state for ``n`` rows,
    - ``_advance(actions)``: one step of the dynamics, updating ``self._s``
      (functionally: tensors are replaced, never written in place, so tensors
      handed out earlier keep their values) and returning the rewards,
    - ``_observe()``: ``(obs dict, state tensor)`` of the current ``self._s``.

    MPE world constants (``mpe2._mpe_utils.core.World``): ``dt = 0.1``,
    ``damping = 0.25``, unit masses and accelerations ``5.0`` (the default
    sensitivity of ``SimpleEnv._set_action``).
    """

    dt: float = 0.1
    damping: float = 0.25
    sensitivity: float = 5.0
    mass: float = 1.0

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device = "auto",
        seed: int = 0,
        max_cycles: int = 25,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if max_cycles < 1:
            raise ValueError(f"max_cycles must be >= 1, got {max_cycles}")
        if not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating point dtype, got {dtype}")
        self.num_envs = int(num_envs)
        self.device = resolve_device(device)
        self.dtype = dtype
        self.max_cycles = int(max_cycles)
        self.seed = seed
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        self.state_size = sum(self.observation_sizes.values())
        self._steps = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        # Upper bound on max(self._steps) kept in Python so that the common step
        # needs no device->host sync to know that no row can end yet.
        self._max_steps_bound = 0
        self._no_termination = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        self._s: dict[str, Tensor] = self._sample_state(self.num_envs)
        self._obs, self._state = self._observe()

    # -- to implement -------------------------------------------------------
    @abstractmethod
    def _sample_state(self, n: int) -> dict[str, Tensor]:
        """Initial states of ``n`` new episodes (batch last)."""

    @abstractmethod
    def _advance(self, actions: dict[str, Tensor]) -> dict[str, Tensor]:
        """Apply ``actions`` to the state and return the per-agent rewards."""

    @abstractmethod
    def _observe(self) -> tuple[dict[str, Tensor], Tensor]:
        """Observations ``{agent: [B, obs]}`` and the global state ``[B, state_size]``."""

    # -- helpers for subclasses --------------------------------------------
    def _uniform(self, *shape: int) -> Tensor:
        """U(-1, 1) samples (mpe2 draws initial positions from ``uniform(-1, 1)``)."""
        u = torch.rand(*shape, generator=self.generator, device=self.device, dtype=self.dtype)
        return u.mul_(2.0).sub_(1.0)

    def _randint(self, high: int, n: int) -> Tensor:
        return torch.randint(high, (n,), generator=self.generator, device=self.device)

    def _move_table(self, comm_dim: int = 0) -> Tensor:
        """Velocity increment ``(force / mass) * dt`` of each discrete action.

        With ``comm_dim > 0`` the table covers the combined action
        ``move + 5 * say`` of an agent that both moves and speaks.
        """
        moves = torch.tensor(MPE_MOVES, dtype=torch.float64) * self.sensitivity
        dv = (moves / self.mass) * self.dt
        if comm_dim:
            dv = dv.repeat(comm_dim, 1)
        return dv.to(device=self.device, dtype=self.dtype)

    # -- the contract -------------------------------------------------------
    def reset(self, seed: int | None = None) -> dict[str, Tensor]:
        if seed is not None:
            self.seed = seed
            self.generator.manual_seed(seed)
        self._s = self._sample_state(self.num_envs)
        self._steps = torch.zeros_like(self._steps)
        self._max_steps_bound = 0
        self._obs, self._state = self._observe()
        return self._obs

    def step(
        self, actions: dict[str, Tensor]
    ) -> tuple[dict[str, Tensor], dict[str, Tensor], Tensor, Tensor, dict[str, Any]]:
        with torch.no_grad():
            acts = {a: actions[a].to(self.device) for a in self.agents}
            rewards = self._advance(acts)
            self._steps = self._steps + 1
            self._max_steps_bound += 1
            truncated = self._steps >= self.max_cycles
            obs, state = self._observe()
            # No row terminates, and none is truncated before the host-side bound on the rows' step
            # counts reaches max_cycles: only then is ``truncated`` read back from the device.
            any_truncated = self._max_steps_bound >= self.max_cycles and bool(truncated.any())
            info: dict[str, Any] = {
                "final_observation": obs,
                "final_state": state,
                "any_terminated": False,
                "any_truncated": any_truncated,
            }
            if any_truncated:
                self._reset_rows(truncated)
                obs, state = self._observe()
            self._obs, self._state = obs, state
            return obs, rewards, self._no_termination.clone(), truncated, info

    def _reset_rows(self, done: Tensor) -> None:
        fresh = self._sample_state(self.num_envs)
        if bool(done.all()):
            self._s = fresh
            self._steps = torch.zeros_like(self._steps)
            self._max_steps_bound = 0
            return
        for k, old in self._s.items():
            self._s[k] = torch.where(done, fresh[k], old)  # broadcasts over the last dim
        self._steps = torch.where(done, torch.zeros_like(self._steps), self._steps)
        self._max_steps_bound = int(self._steps.max())

    def state(self) -> Tensor:
        return self._state

    def observations(self) -> dict[str, Tensor]:
        """The current observations (those returned by the last reset/step)."""
        return self._obs

    @property
    def steps(self) -> Tensor:
        """Steps taken in the current episode of each row, ``[B]`` long."""
        return self._steps

    # -- loading a state from mpe2 (parity tests, debugging) --------------------
    def load_mpe_state(self, row: int, mpe_env: Any) -> None:
        """Copy the world of an mpe2 env into row ``row`` of this batch.

        ``mpe_env`` is any mpe2 env of the same task (AEC, parallel or raw;
        ``.unwrapped`` is used). Positions, velocities, communication states,
        goal assignment and goal colours, and the episode step counter are
        copied, so that stepping both with the same actions gives the same
        observations and rewards. The observations held for that row are
        recomputed.
        """
        if not 0 <= row < self.num_envs:
            raise IndexError(f"row {row} out of range for num_envs={self.num_envs}")
        raw = mpe_env.unwrapped
        values = self._state_from_mpe(raw.world)
        for k, v in values.items():
            t = torch.as_tensor(v, device=self.device)
            t = t.to(self._s[k].dtype)
            new = self._s[k].clone()
            new[..., row] = t
            self._s[k] = new
        steps = self._steps.clone()
        steps[row] = int(raw.steps)
        self._steps = steps
        self._max_steps_bound = max(self._max_steps_bound, int(raw.steps))
        self._obs, self._state = self._observe()

    @abstractmethod
    def _state_from_mpe(self, world: Any) -> dict[str, Any]:
        """The state of one env copied from an mpe2 ``world`` (see :meth:`load_mpe_state`)."""
