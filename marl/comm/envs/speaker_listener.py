"""Batched torch Simple Speaker Listener (MPE), ``B`` envs stepped as tensors.

The task (Lowe et al. 2017, "Multi-Agent Actor-Critic for Mixed
Cooperative-Competitive Environments", MADDPG, NeurIPS; the "cooperative
communication" task) as implemented by mpe2's ``simple_speaker_listener_v4``
with discrete actions. Two agents and three coloured landmarks. The *speaker*
cannot move but sees the colour of the goal landmark; it says one of three
words. The *listener* cannot speak; it hears the word and must move to the
goal landmark. Both receive the same reward, minus the squared distance from
listener to goal landmark.

Agents (in this order): ``speaker_0``, ``listener_0``.

Actions (discrete):

- ``speaker_0``: 3 — say word ``i`` (the speaker's communication state
  becomes the one-hot ``e_i``, heard by the listener in the next observation);
- ``listener_0``: 5 — ``[no_action, move_left, move_right, move_down, move_up]``.

Observations:

- ``speaker_0`` (3): ``goal_landmark_colour``;
- ``listener_0`` (11): ``[self_vel (2), landmark_rel_pos (3 x 2, landmark −
  listener), speaker_comm (3)]``.

``state()`` (14) is ``[speaker obs, listener obs]``, like PettingZoo's
``state()``.

Dynamics (mpe2 ``World.step``): ``pos += vel * dt``; ``vel = vel * (1 −
damping) + (5 · u / mass) * dt`` with ``dt = 0.1``, ``damping = 0.25``, unit
mass, ``u`` the unit direction of the move; no collisions (every entity has
``collide=False`` in this scenario), no noise, no speed limit. Reward of both
agents: ``−‖pos_listener − pos_goal‖²``. Reset: goal landmark uniform over the
three; listener and landmark positions uniform in ``[−1, 1]²``; zero
velocities and communication. Landmark colours (0.65, 0.15, 0.15),
(0.15, 0.65, 0.15), (0.15, 0.15, 0.65). Episodes are truncated after
``max_cycles`` steps (default 25) and reset automatically (see
:mod:`societas.marl.comm.envs.base`).

Observations are column slices of the ``[B, 14]`` tensor ``state()`` of the
step; call ``.contiguous()`` before ``.view``-flattening them.

Reference: mpe2 (Farama Foundation), ``mpe2/simple_speaker_listener`` and
``mpe2/_mpe_utils``; parity is tested by ``tests/comm/test_envs.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from societas.marl.comm.envs.base import MPEBatchedEnv, resolve_device

__all__ = ["LANDMARK_COLOURS", "SpeakerListenerEnv"]

LANDMARK_COLOURS = ((0.65, 0.15, 0.15), (0.15, 0.65, 0.15), (0.15, 0.15, 0.65))
NUM_LANDMARKS = 3
DIM_C = 3


class SpeakerListenerEnv(MPEBatchedEnv):
    """``B`` copies of mpe2's ``simple_speaker_listener_v4`` (discrete actions) in torch."""

    name = "speaker_listener"

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device = "auto",
        seed: int = 0,
        max_cycles: int = 25,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.agents = ["speaker_0", "listener_0"]
        self.observation_sizes = {"speaker_0": 3, "listener_0": 2 + 2 * NUM_LANDMARKS + DIM_C}
        self.action_sizes = {"speaker_0": DIM_C, "listener_0": 5}
        dev = resolve_device(device)
        self.device, self.dtype = dev, dtype
        self._colours_t = torch.tensor(LANDMARK_COLOURS, dtype=dtype, device=dev).T.contiguous()
        self._words = torch.eye(DIM_C, dtype=dtype, device=dev)  # speaker action -> comm (column)
        self._dv_t = self._move_table().T.contiguous()  # listener action -> velocity increment
        self._decay = 1.0 - self.damping
        super().__init__(num_envs=num_envs, device=device, seed=seed, max_cycles=max_cycles, dtype=dtype)

    def _sample_state(self, n: int) -> dict[str, Tensor]:
        # Batch-last layout (see MPEBatchedEnv): every tensor is [..., n].
        goal = self._randint(NUM_LANDMARKS, n)
        pos = self._uniform(1 + NUM_LANDMARKS, 2, n)  # listener, landmarks
        landmarks = pos[1:]
        return {
            "goal": goal,
            "goal_colour": self._colours_t[:, goal],  # [3, n]
            "goal_pos": landmarks[goal, :, torch.arange(n, device=self.device)].T,  # [2, n]
            "pos": pos[0],
            "vel": torch.zeros(2, n, dtype=self.dtype, device=self.device),
            "landmarks": landmarks,  # [3, 2, n]
            "comm": torch.zeros(DIM_C, n, dtype=self.dtype, device=self.device),
        }

    def _advance(self, actions: dict[str, Tensor]) -> dict[str, Tensor]:
        s = self._s
        vel = s["vel"]
        pos = s["pos"] + vel * self.dt
        s["pos"] = pos
        # index_select is ~3x faster than advanced indexing on CPU
        s["vel"] = vel * self._decay + self._dv_t.index_select(1, actions["listener_0"])
        s["comm"] = self._words.index_select(1, actions["speaker_0"])
        d = pos - s["goal_pos"]
        r = (d * d).sum(0).neg_()
        return {"speaker_0": r, "listener_0": r.clone()}

    def _observe(self) -> tuple[dict[str, Tensor], Tensor]:
        s = self._s
        rel = s["landmarks"] - s["pos"]  # [3, 2, B]
        state_t = torch.cat([s["goal_colour"], s["vel"], rel.view(6, -1), s["comm"]])
        state = state_t.T.contiguous()
        return {"speaker_0": state[:, :3], "listener_0": state[:, 3:]}, state

    def _state_from_mpe(self, world: Any) -> dict[str, Any]:
        speaker, listener = world.agents
        goal = next(i for i, lm in enumerate(world.landmarks) if lm is speaker.goal_b)
        return {
            "goal": goal,
            "goal_colour": torch.as_tensor(speaker.goal_b.color, dtype=torch.float64),
            "goal_pos": torch.as_tensor(speaker.goal_b.state.p_pos, dtype=torch.float64),
            "pos": torch.as_tensor(listener.state.p_pos, dtype=torch.float64),
            "vel": torch.as_tensor(listener.state.p_vel, dtype=torch.float64),
            "landmarks": torch.as_tensor(
                np.stack([lm.state.p_pos for lm in world.landmarks]), dtype=torch.float64
            ),  # [3, 2]
            "comm": torch.as_tensor(speaker.state.c, dtype=torch.float64),
        }
