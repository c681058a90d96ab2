"""Batched torch Simple Reference (MPE), ``B`` envs stepped as tensors.

The task (Lowe et al. 2017, "Multi-Agent Actor-Critic for Mixed
Cooperative-Competitive Environments", MADDPG, NeurIPS; Mordatch & Abbeel
2018, "Emergence of Grounded Compositional Language in Multi-Agent
Populations") as implemented by mpe2's ``simple_reference_v3`` with discrete
actions. Two agents, both speakers and listeners, and three coloured
landmarks. Each agent ``i`` knows a goal landmark for the *other* agent and
must tell it; each agent wants to get close to the landmark the other one knows.

Agents (in this order): ``agent_0``, ``agent_1``.

Actions (discrete, 50 each): ``a = move + 5 · say`` with ``move`` in
``[no_action, move_left, move_right, down, up]`` and ``say`` in ``0..9`` (the
agent's communication state becomes the one-hot ``e_say``).

Observation of agent ``i`` (21): ``[self_vel (2), landmark_rel_pos (3 x 2,
landmark − self), goal_colour_i (3), comm of the other agent (10)]``, where
``goal_colour_i`` is the colour of the landmark that agent ``i`` must point the
*other* agent to. ``state()`` (42) is ``[obs agent_0, obs agent_1]``.

Dynamics (mpe2 ``World.step``): ``pos += vel * dt``; ``vel = vel * (1 −
damping) + (5 · u / mass) * dt`` with ``dt = 0.1``, ``damping = 0.25``, unit
mass; no collisions (``collide=False`` for every entity), no noise.
Rewards: local ``l_i = −‖pos_{other(i)} − pos_{goal_i}‖``, global
``g = (l_0 + l_1) / 2``, reward ``r_i = g (1 − local_ratio) + l_i local_ratio``
(``local_ratio = 0.5`` by default, as in mpe2). Reset: each goal uniform over
the three landmarks; positions uniform in ``[−1, 1]²``; zero velocities and
communication. Landmark colours (0.75, 0.25, 0.25), (0.25, 0.75, 0.25),
(0.25, 0.25, 0.75). Episodes are truncated after ``max_cycles`` steps
(default 25) and reset automatically (see :mod:`societas.marl.comm.envs.base`).

Observations are column slices of the ``[B, 42]`` tensor ``state()`` of the
step; call ``.contiguous()`` before ``.view``-flattening them.

Reference: mpe2 (Farama Foundation), ``mpe2/simple_reference`` and
``mpe2/_mpe_utils``; parity is tested by ``tests/comm/test_envs.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from societas.marl.comm.envs.base import MPEBatchedEnv, resolve_device

__all__ = ["LANDMARK_COLOURS", "ReferenceEnv"]

LANDMARK_COLOURS = ((0.75, 0.25, 0.25), (0.25, 0.75, 0.25), (0.25, 0.25, 0.75))
NUM_LANDMARKS = 3
DIM_C = 10
NUM_MOVES = 5


class ReferenceEnv(MPEBatchedEnv):
    """``B`` copies of mpe2's ``simple_reference_v3`` (discrete actions) in torch."""

    name = "reference"

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device = "auto",
        seed: int = 0,
        max_cycles: int = 25,
        dtype: torch.dtype = torch.float32,
        local_ratio: float = 0.5,
    ) -> None:
        if not 0.0 <= local_ratio <= 1.0:
            raise ValueError(f"local_ratio must be in [0, 1], got {local_ratio}")
        self.local_ratio = float(local_ratio)
        self.agents = ["agent_0", "agent_1"]
        obs = 2 + 2 * NUM_LANDMARKS + 3 + DIM_C
        self.observation_sizes = dict.fromkeys(self.agents, obs)
        self.action_sizes = dict.fromkeys(self.agents, NUM_MOVES * DIM_C)
        dev = resolve_device(device)
        self.device, self.dtype = dev, dtype
        self._colours = torch.tensor(LANDMARK_COLOURS, dtype=dtype, device=dev)
        # action -> velocity increment [2, 50] (move = action % 5), word [10, 50] (action // 5)
        self._dv_t = self._move_table(comm_dim=DIM_C).T.contiguous()
        self._words_t = (
            torch.eye(DIM_C, dtype=dtype, device=dev).repeat_interleave(NUM_MOVES, 0).T.contiguous()
        )
        self._decay = 1.0 - self.damping
        super().__init__(num_envs=num_envs, device=device, seed=seed, max_cycles=max_cycles, dtype=dtype)

    def _sample_state(self, n: int) -> dict[str, Tensor]:
        # Batch-last layout (see MPEBatchedEnv): every tensor is [..., n].
        goal = self._randint(NUM_LANDMARKS, 2 * n).view(2, n)
        pos = self._uniform(2 + NUM_LANDMARKS, 2, n)  # agents, landmarks
        landmarks = pos[2:]
        cols = torch.arange(n, device=self.device)
        return {
            "goal": goal,  # [2, n]
            "goal_colour": self._colours[goal].permute(0, 2, 1),  # [2, 3, n]
            "goal_pos": landmarks[goal, :, cols].permute(0, 2, 1),  # [2, 2, n]
            "pos": pos[:2],  # [2 agents, 2, n]
            "vel": torch.zeros(2, 2, n, dtype=self.dtype, device=self.device),
            "landmarks": landmarks,  # [3, 2, n]
            "comm": torch.zeros(2, DIM_C, n, dtype=self.dtype, device=self.device),
        }

    def _advance(self, actions: dict[str, Tensor]) -> dict[str, Tensor]:
        s = self._s
        a = torch.cat([actions["agent_0"], actions["agent_1"]])  # [2B]
        n = a.shape[0] // 2
        vel = s["vel"]
        pos = s["pos"] + vel * self.dt
        s["pos"] = pos
        dv = self._dv_t.index_select(1, a).view(2, 2, n).transpose(0, 1)  # [agent, xy, B]
        s["vel"] = vel * self._decay + dv
        s["comm"] = self._words_t.index_select(1, a).view(DIM_C, 2, n).transpose(0, 1)
        d = pos.flip(0) - s["goal_pos"]  # the other agent vs my goal landmark
        local = (d * d).sum(1).sqrt_().neg_()  # [2, B]
        glob = local.sum(0) / 2
        r = glob * (1.0 - self.local_ratio) + local * self.local_ratio
        return {"agent_0": r[0], "agent_1": r[1]}

    def _observe(self) -> tuple[dict[str, Tensor], Tensor]:
        s = self._s
        rel = (s["landmarks"] - s["pos"].unsqueeze(1)).flatten(1, 2)  # [2, 6, B]
        obs_t = torch.cat([s["vel"], rel, s["goal_colour"], s["comm"].flip(0)], dim=1)
        state = obs_t.view(2 * obs_t.shape[1], -1).T.contiguous()  # [B, 42]
        k = obs_t.shape[1]
        return {"agent_0": state[:, :k], "agent_1": state[:, k:]}, state

    def _state_from_mpe(self, world: Any) -> dict[str, Any]:
        agents = world.agents
        goal = [next(i for i, lm in enumerate(world.landmarks) if lm is ag.goal_b) for ag in agents]

        def f64(xs: Any) -> Tensor:
            return torch.as_tensor(xs, dtype=torch.float64)

        return {
            "goal": goal,
            "goal_colour": f64(np.stack([ag.goal_b.color for ag in agents])),
            "goal_pos": f64(np.stack([ag.goal_b.state.p_pos for ag in agents])),
            "pos": f64(np.stack([ag.state.p_pos for ag in agents])),
            "vel": f64(np.stack([ag.state.p_vel for ag in agents])),
            "landmarks": f64(np.stack([lm.state.p_pos for lm in world.landmarks])),
            "comm": f64(np.stack([ag.state.c for ag in agents])),
        }
