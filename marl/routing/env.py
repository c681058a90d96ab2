"""The routing environment: whom should each agent of a team message?

This module is long because the routing environment is one simulator: task
generation, skill profiles, episode stepping and the bridge to the graph
Runtime all read the same fact, holder and skill arrays and must agree on them
exactly.

A team of ``N`` agents solves tasks of ``T`` types. A task of type ``t`` needs
``K`` facts (small integers named ``A``, ``B``, ...); its answer is an
operation of the type over those facts (sum, max, min, range, product mod
1000). The facts are spread over the team: fact ``k`` of a type-``t`` task is
held by agent ``holder[t, k]``. Agents have *skill profiles*: ``skill[i, t]`` is
the probability that agent ``i`` computes a type-``t`` answer once it knows all
the facts. One designated agent, the *answerer* (the sink, last in the node
order), must end up holding the correct answer.

Agents act once each, in node order (agents ``0 .. N-1``): at its turn an agent
that knows every fact tries to solve the task (it succeeds when its draw
``u[task, i] < skill[i, t]``), then chooses whom to message among the agents
after it, or nobody. A message carries everything the sender knows: its facts
and, if it has one, the answer. The candidate graph is therefore the DAG of
all edges ``i -> j`` with ``i < j`` (acyclic by construction, as in GPTSwarm),
and one pass over it is one run of a :class:`societas.topology.Runtime`, whose
supersteps play the role of communication rounds. The reward is

    r = success - cost_per_message * messages,

``success`` being 1 when the answerer holds the correct answer. Which agents
must talk depends on the task type: the holders of its facts must reach an
agent skilled at the type, which must reach the answerer. The fully connected
DAG succeeds whenever anyone can, at ``N (N - 1) / 2`` messages per task; the
best graph of a type needs ``K + 1``.

Two paths compute the same episode:

* the *fast path*: :meth:`RoutingEnv.evaluate` (and the turn-by-turn
  :class:`RoutingEpisode`, where each agent's action is its set of
  recipients), vectorised in torch over a batch of tasks and adjacencies;
* the *agent-graph path*: :meth:`RoutingEnv.graph` turns an edge set into a
  :class:`societas.topology.Graph` (through a :class:`societas.topology.GraphSpec`), and
  :func:`run_runtime` runs it with :class:`societas.topology.Runtime` on each task,
  with :func:`skill_agents_llm` (a :class:`societas.agents.FunctionLLM` that follows the
  skill profiles) or any LLM URI of :func:`societas.agents.load_llm`. Private facts go
  into each holder's system prompt; success is read from the answerer's
  output and messages are counted from the :class:`societas.topology.Trace` (every
  event's receivers).

Both paths use the same per-task draws, derived by hashing the task's ``uid``
and the agent index, so they agree exactly on success and message counts
(tested). Tasks with even ``uid`` form the training split, odd ``uid`` the
held-out split.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from societas.agents import FunctionLLM, load_llm
from societas.agents.llm.base import LLM, ChatMessage
from societas.marl.device import resolve_device
from societas.topology import Graph, NodeSpec, Runtime

log = logging.getLogger(__name__)

__all__ = [
    "OPS",
    "RoutingEnv",
    "RoutingEnvConfig",
    "RoutingEpisode",
    "RoutingOutcome",
    "RuntimeEvaluation",
    "SkillProfile",
    "Task",
    "TaskBatch",
    "parse_answer",
    "resolve_device",
    "run_runtime",
    "skill_agents_llm",
    "unit_draw",
]

OPS: tuple[str, ...] = ("sum", "max", "min", "range", "product")
"""The operation of each task type (type ``t`` uses ``OPS[t % 5]``)."""

_FORMULA = {
    "sum": lambda names: " + ".join(names),
    "max": lambda names: f"max({', '.join(names)})",
    "min": lambda names: f"min({', '.join(names)})",
    "range": lambda names: f"max({', '.join(names)}) - min({', '.join(names)})",
    "product": lambda names: f"({' * '.join(names)}) mod 1000",
}
FACT_NAMES = "ABCDEFGH"

_AGENT_RE = re.compile(r"You are agent ([A-Za-z_][A-Za-z0-9_.\-]*)")
_TASK_RE = re.compile(r"Task (\d+) \(type: ([^)]+)\)")
_NEEDS_RE = re.compile(r"needs the facts ([A-Z](?:, [A-Z])*)")
_FACT_RE = re.compile(r"FACT ([A-Z]) = (-?\d+)")
_ANSWER_RE = re.compile(r"ANSWER:\s*(-?\d+)")


def unit_draw(uid: int, agent: int) -> float:
    """The task's luck for one agent: a uniform number in [0, 1) from a hash of ``(uid, agent)``.

    Both paths (torch and Runtime) use it, so they agree without sharing state.
    """
    h = hashlib.blake2b(f"{int(uid)}|{int(agent)}".encode(), digest_size=8).digest()
    return (int.from_bytes(h, "little") >> 11) / float(1 << 53)


def _apply_op(op: str, values: Sequence[int]) -> int:
    if op == "sum":
        return int(sum(values))
    if op == "max":
        return int(max(values))
    if op == "min":
        return int(min(values))
    if op == "range":
        return int(max(values) - min(values))
    if op == "product":
        out = 1
        for v in values:
            out = (out * int(v)) % 1000
        return out
    raise ValueError(f"unknown operation {op!r}")


def parse_answer(text: str | None) -> int | None:
    """The last ``ANSWER: n`` in ``text`` (None when there is none)."""
    if not text:
        return None
    found = _ANSWER_RE.findall(text)
    return int(found[-1]) if found else None


# ---------------------------------------------------------------------------
# configuration and skill profiles
# ---------------------------------------------------------------------------


class RoutingEnvConfig(BaseModel):
    """The routing environment's parameters.

    The team is ``n_holders`` fact keepers (first in the node order), then
    ``n_agents - n_holders - 1`` experts, then the answerer. Each task type has
    one expert whose skill is ``expert_skill``; the other experts solve it with
    a skill drawn around ``novice_skill``; keepers and the answerer rarely can
    (``novice_skill / 4``). ``profile_seed`` fixes who holds which fact and who
    is expert at what.
    """

    model_config = ConfigDict(extra="forbid")

    n_agents: int = Field(8, ge=3, le=64)
    n_types: int = Field(4, ge=1, le=64)
    facts_per_task: int = Field(2, ge=1, le=len(FACT_NAMES))
    n_holders: int | None = Field(None, ge=1, description="fact keepers; default ceil((n_agents - 1) / 2)")
    expert_skill: float = Field(1.0, ge=0.0, le=1.0)
    novice_skill: float = Field(0.25, ge=0.0, le=1.0)
    cost_per_message: float = Field(0.02, ge=0.0)
    max_fact: int = Field(50, ge=1, description="fact values are drawn from 1..max_fact")
    profile_seed: int = 0

    @model_validator(mode="after")
    def _check_team(self) -> RoutingEnvConfig:
        holders = self.holders
        if holders > self.n_agents - 2:
            raise ValueError(
                f"n_holders={holders} leaves no expert: need n_holders <= n_agents - 2 = {self.n_agents - 2}"
            )
        if self.facts_per_task > holders:
            raise ValueError(
                f"facts_per_task={self.facts_per_task} exceeds the {holders} fact keepers (each fact has its own keeper)"
            )
        return self

    @property
    def holders(self) -> int:
        return self.n_holders if self.n_holders is not None else (self.n_agents) // 2


@dataclass(frozen=True)
class SkillProfile:
    """Who the agents are: names, roles, descriptions, fact holdings and skills."""

    names: tuple[str, ...]
    roles: tuple[str, ...]  # "keeper" | "expert" | "answerer"
    type_names: tuple[str, ...]
    ops: tuple[str, ...]
    holder: torch.Tensor  # [T, K] long: agent holding fact k of a type-t task
    skill: torch.Tensor  # [N, T] float: P(correct | all facts known)
    expert: torch.Tensor  # [T] long: the most skilled agent per type

    @property
    def n_agents(self) -> int:
        return len(self.names)

    @property
    def sink(self) -> int:
        return len(self.names) - 1

    def holds(self) -> torch.Tensor:
        """``[N, T]``: how many facts of a type-``t`` task agent ``i`` holds."""
        out = torch.zeros(self.n_agents, len(self.type_names))
        for t in range(len(self.type_names)):
            for i in self.holder[t].tolist():
                out[i, t] += 1
        return out

    def description(self, i: int) -> str:
        """A one-paragraph profile of agent ``i`` (goes into its system prompt and the Mermaid/YAML)."""
        facts = [
            f"fact {FACT_NAMES[k]} of {self.type_names[t]} tasks"
            for t in range(len(self.type_names))
            for k in range(self.holder.shape[1])
            if int(self.holder[t, k]) == i
        ]
        skills = ", ".join(
            f"{self.type_names[t]} {float(self.skill[i, t]):.2f}" for t in range(len(self.type_names))
        )
        held = f"You keep records of: {'; '.join(facts)}." if facts else "You hold no facts of your own."
        return f"{held} Your reliability at solving each task type: {skills}."

    @classmethod
    def generate(cls, config: RoutingEnvConfig) -> SkillProfile:
        g = torch.Generator().manual_seed(int(config.profile_seed))
        n, n_types, k = config.n_agents, config.n_types, config.facts_per_task
        n_hold = config.holders
        n_exp = n - n_hold - 1
        names = (
            [f"keeper_{i + 1}" for i in range(n_hold)]
            + [f"expert_{i + 1}" for i in range(n_exp)]
            + ["answerer"]
        )
        roles = ["keeper"] * n_hold + ["expert"] * n_exp + ["answerer"]
        type_names = []
        for t in range(n_types):
            op = OPS[t % len(OPS)]
            type_names.append(op if t < len(OPS) else f"{op}{t // len(OPS) + 1}")
        ops = tuple(OPS[t % len(OPS)] for t in range(n_types))
        holder = torch.stack([torch.randperm(n_hold, generator=g)[:k] for _ in range(n_types)])
        # Experts cover the types round-robin over a random order of the experts.
        order = torch.randperm(n_exp, generator=g)
        expert = torch.tensor([n_hold + int(order[t % n_exp]) for t in range(n_types)])
        spread = torch.rand(n, n_types, generator=g) - 0.5  # in [-0.5, 0.5)
        skill = torch.empty(n, n_types)
        nov = config.novice_skill
        skill[:n_hold] = (nov / 4) * (1 + spread[:n_hold])
        skill[n_hold:-1] = (nov * (1 + spread[n_hold:-1])).clamp(0.0, 1.0)
        skill[-1] = (nov / 4) * (1 + spread[-1])
        skill[expert, torch.arange(n_types)] = config.expert_skill
        skill = skill.clamp(0.0, 1.0)
        return cls(tuple(names), tuple(roles), tuple(type_names), ops, holder, skill, expert)


# ---------------------------------------------------------------------------
# tasks
# ---------------------------------------------------------------------------


@dataclass
class Task:
    """One task, as the agent-graph path sees it."""

    uid: int
    type: int
    type_name: str
    op: str
    values: list[int]
    answer: int
    holders: list[int]
    text: str


@dataclass
class TaskBatch:
    """A batch of tasks as tensors (the fast path), all on one device."""

    uid: torch.Tensor  # [B] long
    type: torch.Tensor  # [B] long
    values: torch.Tensor  # [B, K] long
    answer: torch.Tensor  # [B] long
    holder: torch.Tensor  # [B, K] long
    draws: torch.Tensor  # [B, N] float: unit_draw(uid, agent)

    def __len__(self) -> int:
        return int(self.uid.shape[0])

    @property
    def device(self) -> torch.device:
        return self.uid.device

    def to(self, device: torch.device | str) -> TaskBatch:
        return TaskBatch(
            *(getattr(self, f).to(device) for f in ("uid", "type", "values", "answer", "holder", "draws"))
        )

    def select(self, index: torch.Tensor | slice | Sequence[int]) -> TaskBatch:
        """A sub-batch (rows picked by ``index``)."""
        if not isinstance(index, (slice, torch.Tensor)):
            index = torch.as_tensor(list(index), dtype=torch.long, device=self.device)
        return TaskBatch(
            *(getattr(self, f)[index] for f in ("uid", "type", "values", "answer", "holder", "draws"))
        )


@dataclass
class RoutingOutcome:
    """Per-task results of the fast path."""

    success: torch.Tensor  # [B] float 0/1
    messages: torch.Tensor  # [B] float
    reward: torch.Tensor  # [B] float

    def summary(self) -> dict[str, float]:
        return {
            "success": float(self.success.mean()),
            "messages": float(self.messages.mean()),
            "reward": float(self.reward.mean()),
        }


# ---------------------------------------------------------------------------
# the environment
# ---------------------------------------------------------------------------


class RoutingEpisode:
    """One batched episode, turn by turn: agent ``turn`` observes, then picks its recipients.

    ``observe()`` gives the acting agent's view: the facts it knows (``K``),
    whether it holds the answer (1) and the task type (one-hot, ``T``).
    ``step(recipients)`` takes a ``[B, N]`` boolean mask of recipients; only
    agents after the sender may be messaged (the DAG order).
    """

    def __init__(self, env: RoutingEnv, tasks: TaskBatch) -> None:
        self.env = env
        self.tasks = tasks
        b, n, k = len(tasks), env.n_agents, env.config.facts_per_task
        dev = tasks.device
        self.know = torch.zeros(b, n, k, dtype=torch.bool, device=dev)
        rows = torch.arange(b, device=dev)[:, None].expand(b, k)
        self.know[rows, tasks.holder, torch.arange(k, device=dev)[None, :].expand(b, k)] = True
        self.answer = torch.zeros(b, n, dtype=torch.bool, device=dev)
        self.messages = torch.zeros(b, device=dev)
        self.turn = 0
        self._skill = env.skill.to(dev)[:, tasks.type].T  # [B, N]
        self._later = torch.arange(n, device=dev)
        self._solve()

    @property
    def done(self) -> bool:
        return self.turn >= self.env.n_agents

    def _solve(self) -> None:
        # The acting agent tries the task once it knows every fact.
        j = self.turn
        if j < self.env.n_agents:
            can = self.know[:, j].all(-1) & (self.tasks.draws[:, j] < self._skill[:, j])
            self.answer[:, j] |= can

    def observe(self) -> torch.Tensor:
        j = self.turn
        onehot = torch.nn.functional.one_hot(self.tasks.type, self.env.n_types).float()
        return torch.cat([self.know[:, j].float(), self.answer[:, j, None].float(), onehot], dim=-1)

    def step(self, recipients: torch.Tensor) -> None:
        if self.done:
            raise RuntimeError("the episode is over: every agent has acted")
        j = self.turn
        send = recipients.to(device=self.know.device, dtype=torch.bool)
        if send.shape != self.answer.shape:
            raise ValueError(
                f"recipients must have shape {tuple(self.answer.shape)}, got {tuple(send.shape)}"
            )
        if bool((send & (self._later <= j)).any()):
            raise ValueError(f"agent {j} may only message agents after it in the node order (indices > {j})")
        self.know |= send[..., None] & self.know[:, j, None, :]
        self.answer |= send & self.answer[:, j, None]
        self.messages += send.sum(-1)
        self.turn += 1
        self._solve()

    def outcome(self) -> RoutingOutcome:
        if not self.done:
            raise RuntimeError(f"the episode is not over (agent {self.turn} has not acted)")
        success = self.answer[:, self.env.sink].float()
        reward = success - self.env.config.cost_per_message * self.messages
        return RoutingOutcome(success, self.messages.clone(), reward)


class RoutingEnv:
    """The routing environment (see the module docstring). ``device="auto"`` picks CUDA when present."""

    def __init__(
        self, config: RoutingEnvConfig | None = None, *, device: str | torch.device = "auto"
    ) -> None:
        self.config = config if config is not None else RoutingEnvConfig()
        self.device = resolve_device(device)
        self.profile = SkillProfile.generate(self.config)
        self.skill = self.profile.skill.to(self.device)
        self.holder = self.profile.holder.to(self.device)
        n = self.n_agents
        self.candidates = torch.triu(torch.ones(n, n, dtype=torch.bool, device=self.device), diagonal=1)

    # -- sizes -----------------------------------------------------------------
    @property
    def n_agents(self) -> int:
        return self.config.n_agents

    @property
    def n_types(self) -> int:
        return self.config.n_types

    @property
    def sink(self) -> int:
        return self.n_agents - 1

    @property
    def n_candidates(self) -> int:
        return self.n_agents * (self.n_agents - 1) // 2

    # -- tasks -------------------------------------------------------------------
    def sample_tasks(
        self,
        n: int,
        *,
        split: Literal["train", "test"] = "train",
        generator: torch.Generator | int | None = None,
        types: Sequence[int] | torch.Tensor | None = None,
    ) -> TaskBatch:
        """``n`` tasks of uniformly random types (or of the given ``types``, one per task);
        training tasks have even uids, held-out tasks odd. ``generator``: a torch generator or a seed."""
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        g = (
            generator
            if isinstance(generator, torch.Generator)
            else torch.Generator().manual_seed(int(generator or 0))
        )
        types_given = None
        if types is not None:
            types_given = torch.as_tensor(
                list(types) if not isinstance(types, torch.Tensor) else types, dtype=torch.long
            ).cpu()
            if types_given.shape != (n,):
                raise ValueError(
                    f"types must give one type per task ({n}), got shape {tuple(types_given.shape)}"
                )
            if bool(((types_given < 0) | (types_given >= self.n_types)).any()):
                raise ValueError(f"task types must lie in 0..{self.n_types - 1}")
        k = self.config.facts_per_task
        uid = torch.randint(0, 2**52, (n,), generator=g) * 2 + (1 if split == "test" else 0)
        types = torch.randint(0, self.n_types, (n,), generator=g)
        if types_given is not None:
            types = types_given
        values = torch.randint(1, self.config.max_fact + 1, (n, k), generator=g)
        answers = torch.tensor(
            [_apply_op(self.profile.ops[int(t)], v) for t, v in zip(types.tolist(), values.tolist())],
            dtype=torch.long,
        )
        draws = torch.tensor(
            [[unit_draw(u, i) for i in range(self.n_agents)] for u in uid.tolist()], dtype=torch.float32
        )
        holder = self.profile.holder[types]
        return TaskBatch(uid, types, values, answers, holder, draws).to(self.device)

    def task(self, tasks: TaskBatch, i: int) -> Task:
        """Task ``i`` of a batch, with its text (what every agent of the graph reads)."""
        t = int(tasks.type[i])
        op = self.profile.ops[t]
        k = self.config.facts_per_task
        names = list(FACT_NAMES[:k])
        uid = int(tasks.uid[i])
        tname = self.profile.type_names[t]
        text = (
            f"Task {uid} (type: {tname}). This task needs the facts {', '.join(names)}; "
            f"its answer is {_FORMULA[op](names)}. The facts are held by different members of the team and "
            f"only the agent '{self.profile.names[self.sink]}' reports the team's answer."
        )
        return Task(
            uid=uid,
            type=t,
            type_name=tname,
            op=op,
            values=[int(v) for v in tasks.values[i].tolist()],
            answer=int(tasks.answer[i]),
            holders=[int(h) for h in tasks.holder[i].tolist()],
            text=text,
        )

    def task_features(self, tasks: TaskBatch) -> torch.Tensor:
        """``[B, T]``: the task embedding the routers see (the task type, one-hot)."""
        return torch.nn.functional.one_hot(tasks.type, self.n_types).float()

    def agent_features(self) -> torch.Tensor:
        """``[N, 2T + 3]``: each agent's profile: facts held per type, skill per type, role one-hot."""
        roles = ("keeper", "expert", "answerer")
        role = torch.tensor([[float(r == x) for x in roles] for r in self.profile.roles])
        return torch.cat([self.profile.holds(), self.profile.skill, role], dim=-1).to(self.device)

    # -- adjacencies ---------------------------------------------------------------
    def check_adjacency(self, adj: torch.Tensor, batch: int | None = None) -> torch.Tensor:
        """``adj`` as a boolean ``[B, N, N]`` tensor on the env's device; errors name what is wrong."""
        if not isinstance(adj, torch.Tensor):
            adj = torch.as_tensor(adj)
        n = self.n_agents
        if adj.dim() == 2:
            adj = adj.unsqueeze(0)
        if adj.dim() != 3 or adj.shape[-2:] != (n, n):
            raise ValueError(
                f"an adjacency must have shape [N, N] or [B, N, N] with N={n}, got {tuple(adj.shape)}"
            )
        adj = adj.to(self.device).bool()
        if bool((adj & ~self.candidates).any()):
            bad = (adj & ~self.candidates).nonzero()[0].tolist()
            raise ValueError(
                f"edge {bad[-2]} -> {bad[-1]} is not a candidate: agents may only message agents after them (i < j)"
            )
        if batch is not None and adj.shape[0] not in (1, batch):
            raise ValueError(f"{adj.shape[0]} adjacencies for {batch} tasks: give one or one per task")
        if batch is not None and adj.shape[0] == 1:
            adj = adj.expand(batch, n, n)
        return adj

    def full_adjacency(self) -> torch.Tensor:
        """The fully connected DAG (every candidate edge)."""
        return self.candidates.clone()

    def empty_adjacency(self) -> torch.Tensor:
        return torch.zeros_like(self.candidates)

    def random_adjacency(self, n_edges: torch.Tensor | int, generator: torch.Generator) -> torch.Tensor:
        """Uniformly random DAGs over the candidates with ``n_edges`` edges each (``[B]`` or one int)."""
        counts = torch.as_tensor(n_edges, dtype=torch.long).reshape(-1).cpu()
        iu = self.candidates.nonzero().cpu()
        out = torch.zeros(len(counts), self.n_agents, self.n_agents, dtype=torch.bool)
        for b, c in enumerate(counts.tolist()):
            if not 0 <= c <= len(iu):
                raise ValueError(f"cannot draw {c} edges out of {len(iu)} candidates")
            pick = iu[torch.randperm(len(iu), generator=generator)[:c]]
            out[b, pick[:, 0], pick[:, 1]] = True
        return out.to(self.device)

    def role_adjacency(self) -> torch.Tensor:
        """The role prior: keepers -> experts -> answerer (G-Designer's anchor topology)."""
        roles = self.profile.roles
        a = torch.zeros(self.n_agents, self.n_agents, dtype=torch.bool)
        for i, ri in enumerate(roles):
            for j, rj in enumerate(roles):
                if i < j and (ri, rj) in (("keeper", "expert"), ("expert", "answerer")):
                    a[i, j] = True
        return a.to(self.device)

    def prune_dead_ends(self, adj: torch.Tensor) -> torch.Tensor:
        """Drop edges that cannot matter: those whose target cannot reach the answerer, or whose source no fact
        keeper can reach. Success is unchanged (they carry nothing to the answerer); messages only fall."""
        a = self.check_adjacency(adj)
        n = self.n_agents
        holds_any = self.profile.holds().sum(-1).to(self.device) > 0
        reach_sink = torch.zeros(a.shape[0], n, dtype=torch.bool, device=self.device)
        reach_sink[:, self.sink] = True
        for j in range(n - 2, -1, -1):  # reverse node order: successors are already done
            reach_sink[:, j] = (a[:, j] & reach_sink).any(-1)
        informed = holds_any.expand(a.shape[0], n).clone()
        for j in range(n):
            informed[:, j] |= (a[:, :, j] & informed).any(-1)
        keep = a & informed[:, :, None] & reach_sink[:, None, :]
        return keep if adj.dim() == 3 else keep[0]

    # -- the fast path ---------------------------------------------------------------
    def episode(self, tasks: TaskBatch) -> RoutingEpisode:
        return RoutingEpisode(self, tasks)

    @torch.no_grad()
    def evaluate(self, adj: torch.Tensor, tasks: TaskBatch) -> RoutingOutcome:
        """Run the episode with every agent messaging its successors in ``adj`` (one or one per task)."""
        a = self.check_adjacency(adj, len(tasks))
        ep = RoutingEpisode(self, tasks)
        for j in range(self.n_agents):
            ep.step(a[:, j])
        return ep.outcome()

    # -- the agent-graph path ------------------------------------------------------------
    def system_prompt(self, i: int, notes: Sequence[tuple[str, int]] = ()) -> str:
        p = self.profile
        lines = [
            f"You are agent {p.names[i]}, the team's {p.roles[i]}. {p.description(i)}",
            (
                "Rules: if you know every fact the task needs, compute the answer and end with the line "
                "'ANSWER: <number>'. Otherwise list every fact you know, one per line, as 'FACT <name> = <value>', "
                "and repeat any ANSWER line you were sent. Write nothing else."
            ),
        ]
        if notes:
            lines.append("Your private notes for this task:")
            lines += [f"FACT {name} = {value}" for name, value in notes]
        return "\n".join(lines)

    def graph(
        self,
        adj: torch.Tensor,
        *,
        name: str = "routing",
        task: Task | None = None,
        drop_isolated: bool = True,
        llm: str = "embedded",
        max_new_tokens: int = 64,
    ) -> Graph:
        """The :class:`societas.topology.Graph` of an edge set ``adj`` (``[N, N]``), built through a GraphSpec.

        Agents without any edge are left out (they would only cost a call)
        unless ``drop_isolated=False``; the answerer is always kept and is the
        final node. With ``task``, each holder's prompt carries its private facts.
        The spec's default LLM is ``llm`` (the Runtime may replace it).
        """
        a = self.check_adjacency(adj)
        if a.shape[0] != 1:
            raise ValueError("graph() takes one adjacency [N, N]; build one graph per task for a batch")
        a = a[0].cpu()
        touched = a.any(0) | a.any(1)
        touched[self.sink] = True
        keep = [i for i in range(self.n_agents) if touched[i] or not drop_isolated]
        names = self.profile.names
        nodes = []
        for i in keep:
            notes: list[tuple[str, int]] = []
            if task is not None:
                notes = [(FACT_NAMES[k], task.values[k]) for k, h in enumerate(task.holders) if h == i]
            nodes.append(
                NodeSpec(
                    id=names[i],
                    role=self.profile.roles[i],
                    prompt=self.system_prompt(i, notes),
                    params={"temperature": 0.0, "max_new_tokens": max_new_tokens},
                    meta={"agent_index": i},
                )
            )
        edges = [(names[i], names[j]) for i, j in a.nonzero().tolist()]
        meta = {"env": "societas.marl.routing", "n_agents": self.n_agents}
        if task is not None:
            meta["task_uid"] = task.uid
        return Graph.build(name, nodes, edges, final=names[self.sink], llms={"default": llm}, meta=meta)

    def adjacency_of(self, graph: Graph) -> torch.Tensor:
        """The ``[N, N]`` adjacency of a graph whose nodes are this team's agents."""
        index = {n: i for i, n in enumerate(self.profile.names)}
        a = torch.zeros(self.n_agents, self.n_agents, dtype=torch.bool)
        for s, t in graph.edges:
            if s not in index or t not in index:
                raise ValueError(f"edge {s} -> {t} names an agent that is not in this team")
            a[index[s], index[t]] = True
        return self.check_adjacency(a)[0]


# ---------------------------------------------------------------------------
# skill-profile agents and the Runtime path
# ---------------------------------------------------------------------------


def skill_agents_llm(env: RoutingEnv, *, name: str = "skill-agents") -> FunctionLLM:
    """A :class:`FunctionLLM` playing every agent of the team according to the skill profiles.

    It reads who it is (``You are agent X``), the task (uid, type, needed
    facts), its private notes and the messages it received from the prompt;
    if it was sent an answer it repeats it; if it knows every fact it solves
    the task when ``unit_draw(uid, agent) < skill[agent, type]``; and it
    reports every fact it knows. Deterministic: the same prompt gives the same reply.
    """
    profile = env.profile
    index = {n: i for i, n in enumerate(profile.names)}
    type_index = {n: t for t, n in enumerate(profile.type_names)}
    skill = profile.skill.tolist()

    def reply(messages: list[ChatMessage]) -> str:
        system = "\n".join(m["content"] for m in messages if m["role"] == "system")
        user = "\n".join(m["content"] for m in messages if m["role"] == "user")
        who = _AGENT_RE.search(system)
        task = _TASK_RE.search(user)
        needs = _NEEDS_RE.search(user)
        if who is None or task is None or needs is None or who.group(1) not in index:
            return "I cannot tell who I am or what the task is."
        agent = index[who.group(1)]
        uid, t = int(task.group(1)), type_index.get(task.group(2).strip())
        if t is None:
            return "I do not know this task type."
        needed = needs.group(1).split(", ")
        facts: dict[str, int] = {}
        for text in (system, user):
            for fname, value in _FACT_RE.findall(text):
                facts.setdefault(fname, int(value))
        answers = _ANSWER_RE.findall(user)
        answer: int | None = int(answers[0]) if answers else None
        if answer is None and all(f in facts for f in needed) and unit_draw(uid, agent) < skill[agent][t]:
            answer = _apply_op(profile.ops[t], [facts[f] for f in needed])
        lines = [f"FACT {f} = {facts[f]}" for f in sorted(facts)]
        if answer is not None:
            lines.append(f"ANSWER: {answer}")
        return "\n".join(lines) if lines else "NOTHING TO REPORT"

    return FunctionLLM(reply, name=name)


@dataclass
class RuntimeEvaluation:
    """Results of running edge sets through :class:`societas.topology.Runtime`, one task per run."""

    success: list[float]
    messages: list[int]
    calls: list[int]
    answers: list[int | None]
    results: list[Any] = field(default_factory=list, repr=False)  # RunResult per task (when kept)

    def summary(self) -> dict[str, float]:
        n = max(len(self.success), 1)
        return {
            "success": sum(self.success) / n,
            "messages": sum(self.messages) / n,
            "calls": sum(self.calls) / n,
        }


def run_runtime(
    env: RoutingEnv,
    adj: torch.Tensor,
    tasks: TaskBatch,
    *,
    llm: LLM | str | None = None,
    seed: int = 0,
    keep_results: bool = False,
    drop_isolated: bool = True,
) -> RuntimeEvaluation:
    """Run each task through :class:`societas.topology.Runtime` on the graph of its edge set.

    ``adj`` is one ``[N, N]`` edge set for every task or ``[B, N, N]``, one per
    task. ``llm`` is an LLM object or a :func:`societas.agents.load_llm` URI (a real
    model, for evaluation); by default :func:`skill_agents_llm`. A message is
    one delivery of a node's output to one receiver (summed over the trace's
    events); success means the answerer's last ``ANSWER: n`` is correct.
    """
    a = env.check_adjacency(adj, len(tasks)).cpu()
    model: LLM = skill_agents_llm(env) if llm is None else (load_llm(llm) if isinstance(llm, str) else llm)
    out = RuntimeEvaluation([], [], [], [])
    for i in range(len(tasks)):
        task = env.task(tasks, i)
        graph = env.graph(a[i], name=f"routing_task_{task.uid}", task=task, drop_isolated=drop_isolated)
        res = Runtime(graph, llm=model, seed=seed).run(task.text)
        answer = parse_answer(res.output)
        out.success.append(float(answer is not None and answer == task.answer))
        out.messages.append(sum(len(ev.receivers) for ev in res.trace))
        out.calls.append(res.trace.totals().calls)
        out.answers.append(answer)
        if keep_results:
            out.results.append(res)
    log.debug("runtime path: %d tasks, %s", len(tasks), out.summary())
    return out
