"""The routing environment as a batched multi-agent env: each agent a (neural) policy.

:class:`RoutingMARLEnv` wraps :class:`societas.marl.routing.env.RoutingEnv` in the
:class:`societas.marl.comm.envs.base.BatchedMultiAgentEnv` contract, so MAPPO/IPPO
(:class:`societas.marl.comm.mappo.MAPPO`) train one policy per agent (or one shared
policy with an agent id) that decides, at the agent's turn, whom to message.
The graph-level learners (GPTSwarm, G-Designer) pick a whole edge set per
task; here every edge is an action of the agent that sends it, chosen from
what that agent knows at that moment.

Semantics (those of :class:`~societas.marl.routing.env.RoutingEpisode`, which this env
drives; nothing is re-implemented): ``B`` tasks are sampled with
:meth:`RoutingEnv.sample_tasks`; agents act once each in node order; at its
turn an agent that knows every fact tries the task (draw ``< skill``), then
messages a *set* of later agents; a message carries all the sender knows
(facts and, if it has one, the answer). Here the agent's recipient set is
built over ``rounds`` consecutive env steps, one recipient per step.

Episode layout
--------------
Agents ``0 .. N-2`` take turns in node order; a turn is ``rounds`` env steps
(slots). The answerer (agent ``N-1``) has nobody after it to message, so it
has no turn: after the last slot of agent ``N-2`` the episode ends. An episode
is therefore ``max_cycles = (N - 1) * rounds`` steps; all ``B`` rows run in
lockstep and end (``terminated``, never ``truncated``) on the same step.

Actions (every agent: ``N + 1`` discrete actions)
-------------------------------------------------
``0`` = message nobody; ``k >= 1`` = message agent ``k - 1``. Only the agent
whose turn it is acts: the actions of the other agents are ignored. An
*invalid* choice -- the agent itself or an earlier agent (the candidate graph
is the DAG ``i -> j``, ``i < j``), or a value out of range -- is treated as
"nobody", at no cost. Messaging an agent already messaged in this turn adds
nothing (the turn's action is a recipient *set*) and costs nothing.

Observation of agent ``i`` (``K + 1 + T + 1 + 4 N + rounds`` floats, in order)
------------------------------------------------------------------------------
* ``K``: which of the task's facts it knows (held or received);
* ``1``: whether it holds the answer (set at its own turn when it solves, or
  when an agent that had it messaged it);
* ``T``: the task type, one-hot;
* ``1``: whether it is this agent's turn;
* ``N``: its own id, one-hot;
* ``N``: whose turn it is, one-hot (all zero once the episode is over);
* ``rounds``: the slot within the turn, one-hot (zero once over);
* ``N``: the agents it has messaged so far in this episode;
* ``N``: the agents that have messaged it (delivered: senders whose turn is over).

``state()`` is the concatenation of all agents' observations in ``agents``
order (the contract's MPE convention).

Reward (shared by all agents, cooperative)
------------------------------------------
Each step pays ``-cost_per_message`` for a new message, and the last step of
the episode adds ``success`` (1 when the answerer holds the correct answer).
The episode's return is thus exactly RoutingEnv's
``success - cost_per_message * messages`` (:meth:`RoutingEpisode.outcome`),
which ``info["outcome"]`` also reports (a :class:`RoutingOutcome` of the
ended episodes) on the step that ends them. Replaying the messages of an edge
set (:meth:`RoutingMARLEnv.schedule`) reproduces :meth:`RoutingEnv.evaluate`
on the same tasks whenever ``rounds`` covers the largest out-degree (tested).

Auto-reset: the step that ends the episodes returns the first observation of
fresh tasks in ``obs``, and ``info["final_observation"]`` /
``info["final_state"]`` hold the last observation/state of the ended ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import Tensor

from societas.marl.comm.envs.base import BatchedMultiAgentEnv
from societas.marl.device import resolve_device

from .env import RoutingEnv, RoutingEnvConfig, RoutingEpisode, RoutingOutcome, TaskBatch

__all__ = ["NOBODY", "RoutingMARLEnv"]

NOBODY = 0
"""The action "message nobody"; action ``k >= 1`` messages agent ``k - 1``."""


class RoutingMARLEnv(BatchedMultiAgentEnv):
    """``B`` routing episodes stepped together; each agent picks one recipient per slot of its turn.

    ``routing``: a :class:`RoutingEnv` or its :class:`RoutingEnvConfig` (default
    config when None). ``rounds``: message slots per turn (how many messages an
    agent may send). ``split``: which task split to sample ("train": even uids,
    "test": odd). See the module docstring for the layout.
    """

    name = "routing"

    def __init__(
        self,
        routing: RoutingEnv | RoutingEnvConfig | None = None,
        *,
        num_envs: int = 64,
        rounds: int = 2,
        split: Literal["train", "test"] = "train",
        device: str | torch.device = "auto",
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {rounds}")
        if not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating point dtype, got {dtype}")
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        self.device = resolve_device(device)
        if isinstance(routing, RoutingEnv):
            if torch.device(routing.device) != self.device:
                routing = RoutingEnv(routing.config, device=self.device)
        else:
            routing = RoutingEnv(routing, device=self.device)
        self.routing = routing
        self.num_envs = int(num_envs)
        self.rounds = int(rounds)
        self.split = split
        self.dtype = dtype
        self.seed = seed
        self.generator = torch.Generator().manual_seed(int(seed))  # sample_tasks draws on the CPU

        n, t, k = routing.n_agents, routing.n_types, routing.config.facts_per_task
        self.agents = list(routing.profile.names)
        self.n_agents = n
        self.max_cycles = (n - 1) * self.rounds
        self.obs_size = k + 1 + t + 1 + 4 * n + self.rounds
        self.observation_sizes = dict.fromkeys(self.agents, self.obs_size)
        self.action_sizes = dict.fromkeys(self.agents, n + 1)
        self.state_size = n * self.obs_size

        self._ids = torch.eye(n, device=self.device, dtype=dtype)
        self._arange = torch.arange(n, device=self.device)
        self._new_episode(self._sample_tasks())

    # -- episodes ------------------------------------------------------------------
    def _sample_tasks(self) -> TaskBatch:
        return self.routing.sample_tasks(self.num_envs, split=self.split, generator=self.generator)

    def _new_episode(self, tasks: TaskBatch) -> None:
        if len(tasks) != self.num_envs:
            raise ValueError(f"got {len(tasks)} tasks for num_envs={self.num_envs}")
        self.tasks = tasks.to(self.device)
        self._ep = RoutingEpisode(self.routing, self.tasks)
        self._turn = 0  # the acting agent (== self._ep.turn until the episode ends)
        self._slot = 0
        # _sent[b, i, j]: agent i has messaged agent j in this episode (j's knowledge is updated
        # by RoutingEpisode.step when i's turn ends; j acts only later, so it sees no difference).
        self._sent = torch.zeros(
            self.num_envs, self.n_agents, self.n_agents, dtype=torch.bool, device=self.device
        )
        self._obs_tensor = self._observe()

    @property
    def done(self) -> bool:
        return self._turn >= self.n_agents - 1

    @property
    def turn(self) -> int:
        """The agent whose turn it is (``N - 1`` once the episode is over)."""
        return self._turn

    @property
    def slot(self) -> int:
        return self._slot

    def adjacency(self) -> Tensor:
        """``[B, N, N]`` bool: the edges sent so far in the current episodes."""
        return self._sent.clone()

    # -- observations --------------------------------------------------------------
    def _observe(self) -> Tensor:
        """``[B, N, obs_size]``: every agent's observation (layout in the module docstring)."""
        b, n, dt = self.num_envs, self.n_agents, self.dtype
        ep = self._ep
        over = self.done
        turn_1h = torch.zeros(n, device=self.device, dtype=dt)
        slot_1h = torch.zeros(self.rounds, device=self.device, dtype=dt)
        if not over:
            turn_1h[self._turn] = 1.0
            slot_1h[self._slot] = 1.0
        type_1h = torch.nn.functional.one_hot(self.tasks.type, self.routing.n_types).to(dt)
        delivered = self._sent & (self._arange < self._turn)[None, :, None]  # senders whose turn is over
        parts = [
            ep.know.to(dt),
            ep.answer.to(dt).unsqueeze(-1),
            type_1h.unsqueeze(1).expand(b, n, -1),
            turn_1h.unsqueeze(-1).expand(b, n, 1),
            self._ids.expand(b, n, n),
            turn_1h.expand(b, n, n),
            slot_1h.expand(b, n, self.rounds),
            self._sent.to(dt),
            delivered.transpose(1, 2).to(dt),
        ]
        return torch.cat(parts, -1)

    def _obs_dict(self, obs: Tensor) -> dict[str, Tensor]:
        return {a: obs[:, i] for i, a in enumerate(self.agents)}

    def observations(self) -> dict[str, Tensor]:
        return self._obs_dict(self._obs_tensor)

    def state(self) -> Tensor:
        return self._obs_tensor.reshape(self.num_envs, self.state_size)

    # -- the contract --------------------------------------------------------------
    def reset(self, seed: int | None = None, *, tasks: TaskBatch | None = None) -> dict[str, Tensor]:
        """Fresh episodes in every row. ``seed`` reseeds the task generator first; ``tasks``
        (``num_envs`` of them) plays those tasks instead of sampling (later resets sample again)."""
        if seed is not None:
            self.seed = seed
            self.generator.manual_seed(int(seed))
        self._new_episode(tasks if tasks is not None else self._sample_tasks())
        return self.observations()

    @torch.no_grad()
    def step(
        self, actions: dict[str, Tensor]
    ) -> tuple[dict[str, Tensor], dict[str, Tensor], Tensor, Tensor, dict[str, Any]]:
        b, n, j = self.num_envs, self.n_agents, self._turn
        act = torch.as_tensor(actions[self.agents[j]], device=self.device).long().reshape(-1)
        if act.shape[0] != b:
            raise ValueError(f"actions[{self.agents[j]!r}] must have shape [{b}], got {tuple(act.shape)}")
        recipient = act - 1
        valid = (recipient > j) & (recipient < n)  # later agents only; anything else is "nobody"
        target = recipient.clamp(0, n - 1)
        rows = torch.arange(b, device=self.device)
        new = valid & ~self._sent[rows, j, target]
        self._sent[rows, j, target] |= valid
        reward = -self.routing.config.cost_per_message * new.to(self.dtype)

        info: dict[str, Any] = {}
        self._slot += 1
        if self._slot == self.rounds:  # the turn is over: deliver its messages
            self._ep.step(self._sent[:, j])
            self._slot = 0
            self._turn += 1
        ended = self.done
        if ended:
            self._ep.step(torch.zeros(b, n, dtype=torch.bool, device=self.device))  # the answerer's turn
            outcome = self._ep.outcome()
            reward = reward + outcome.success.to(self.dtype)
            info["outcome"] = outcome
            info["adjacency"] = self._sent
        obs_t = self._observe()
        info["final_observation"] = self._obs_dict(obs_t)
        info["final_state"] = obs_t.reshape(b, self.state_size)
        if ended:
            self._new_episode(self._sample_tasks())
            obs_t = self._obs_tensor
        self._obs_tensor = obs_t
        flag = torch.full((b,), ended, dtype=torch.bool, device=self.device)
        rewards = dict.fromkeys(self.agents, reward)
        return self._obs_dict(obs_t), rewards, flag, torch.zeros_like(flag), info

    # -- replaying edge sets and running policies -------------------------------------
    def schedule(self, adj: Tensor) -> list[dict[str, Tensor]]:
        """The ``max_cycles`` action dicts that send exactly the edges of ``adj``
        (``[N, N]`` or ``[B, N, N]``): at its turn, agent ``i`` messages its successors in
        increasing order, one per slot, then nobody. Needs ``rounds >=`` every out-degree."""
        a = self.routing.check_adjacency(adj, self.num_envs)
        deg = int(a.sum(-1).max())
        if deg > self.rounds:
            raise ValueError(f"an agent has {deg} recipients but a turn has only rounds={self.rounds} slots")
        n = self.n_agents
        # rank[b, i, j]: position of j among i's successors; slot s sends the successor of rank s.
        rank = a.long().cumsum(-1) - 1
        out = []
        for i in range(n - 1):
            for s in range(self.rounds):
                hit = a[:, i] & (rank[:, i] == s)
                act = torch.where(
                    hit.any(-1), hit.long().argmax(-1) + 1, torch.zeros_like(hit[:, 0], dtype=torch.long)
                )
                acts = {
                    ag: torch.zeros(self.num_envs, dtype=torch.long, device=self.device) for ag in self.agents
                }
                acts[self.agents[i]] = act
                out.append(acts)
        return out

    @torch.no_grad()
    def run_episode(
        self,
        policy: Callable[[dict[str, Tensor]], dict[str, Tensor] | Tensor],
        *,
        tasks: TaskBatch | None = None,
        seed: int | None = None,
    ) -> tuple[RoutingOutcome, Tensor]:
        """Reset, play one episode in every row with ``policy`` (observations ->
        ``{agent: [B]}`` or ``[B, N]`` actions) and return the outcome and the edges sent
        (``[B, N, N]``). Leaves the env on fresh episodes."""
        obs = self.reset(seed=seed, tasks=tasks)
        for _ in range(self.max_cycles):
            acts = policy(obs)
            if isinstance(acts, Tensor):
                acts = {a: acts[:, i] for i, a in enumerate(self.agents)}
            obs, _, term, _, info = self.step(acts)
        assert bool(term.all())
        return info["outcome"], info["adjacency"]

    def random_policy(
        self, generator: torch.Generator | None = None
    ) -> Callable[[dict[str, Tensor]], dict[str, Tensor]]:
        """Uniformly random actions over all ``N + 1`` choices (invalid ones mean nobody)."""
        return lambda obs: self.sample_actions(generator)

    def __repr__(self) -> str:
        return (
            f"RoutingMARLEnv(num_envs={self.num_envs}, n_agents={self.n_agents}, n_types={self.routing.n_types}, "
            f"rounds={self.rounds}, split={self.split!r}, device={self.device})"
        )
