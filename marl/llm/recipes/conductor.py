"""``conductor``: AgentConductor's orchestrator trained with multi-turn GRPO (arXiv 2602.17100).

For a HumanEval problem the trained *orchestrator* writes a layered YAML
topology (:mod:`societas.topology.layered`); the frozen base model plays every worker
agent of it, a tool node runs the problem's unit tests in the sandbox, and
on failure the test feedback (or the parse error) goes back to the
orchestrator for a revised topology, for at most ``max_turns`` turns (the
paper: 2), stopping early on success. Each orchestrator turn is one sample,
rewarded for its own topology::

    reward = execution(outcome) + density_weight * density(topology, difficulty)

* ``execution`` grades how the turn ended (:data:`EXECUTION_REWARDS`):
  penalties for no YAML, YAML syntax error, invalid schema and invalid
  logic (which includes more agents than the difficulty's cap of 4 / 7 / 10),
  then the graded test outcome: passed, wrong answer, timeout or memory
  limit, runtime error, compile error or no code;
* ``density`` (only for a topology that parsed) is
  ``exp(-(n / N + e / E + d / N) / 3)`` for ``n`` agents, ``e`` edges and
  depth ``d`` against the difficulty's node cap ``N`` and ``E = N (N - 1) / 2``:
  1 for an empty graph, falling as the graph grows towards the cap (the
  paper normalises nodes, edges and depth by difficulty through an
  exponential).

The G episodes of one problem form its GRPO group. Training problems and
held-out problems come from :func:`societas.topology.coding.humaneval_split`. The paper
starts from an SFT stage on synthetic topologies; :meth:`sft_samples` builds
those demonstrations (random valid layered topologies within the cap, the
last layer a testing agent) for ``TrainConfig.sft_steps``.

All the valid topologies of one turn run as ONE Runtime graph (their
disjoint union, node ids prefixed per episode), so every superstep's worker
prompts go to the model in one batched call. Workers decode greedily by
default, so an episode's outcome depends on its own seed only.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field, model_validator

from societas.agents.llm.base import SamplingParams, encode_with_tokenizer
from societas.agents.llm.function import FunctionLLM
from societas.agents.roles import CONDUCTOR_ROLES
from societas.agents.sandbox import Sandbox
from societas.marl.llm.loop import (
    FROZEN,
    Episode,
    EpisodeResult,
    Recipe,
    episode_seed,
    sample_from_completion,
)
from societas.marl.llm.rollouts import TokenSample
from societas.marl.llm.settings import RecipeConfig, SettingsError, recipe_settings
from societas.topology.coding import CodeTask, humaneval_split, unit_test_tool
from societas.topology.errors import FieldProblem
from societas.topology.graph import Graph
from societas.topology.layered import (
    DIFFICULTY_NODE_CAPS,
    LayeredTopology,
    try_parse_layered_yaml,
)
from societas.topology.patterns.conductor import Conductor, ConductorTurn
from societas.topology.runtime import Runtime
from societas.topology.spec import NodeSpec

__all__ = ["EXECUTION_REWARDS", "ConductorConfig", "ConductorRecipe", "density_reward", "synthetic_topology"]

EXECUTION_REWARDS: dict[str, float] = {
    "no_yaml": -1.0,
    "yaml_syntax": -0.8,
    "schema_invalid": -0.6,
    "logic_invalid": -0.4,
    "no_code": -0.3,
    "compile_error": -0.3,
    "runtime_error": -0.2,
    "timeout": -0.2,
    "memory_limit": -0.2,
    "wrong_answer": -0.1,
    "passed": 1.0,
}
"""Execution reward of each outcome: the four parse failures, then the graded test outcomes."""


def density_reward(nodes: int, edges: int, depth: int, difficulty: str) -> float:
    """``exp(-(n / N + e / E + d / N) / 3)`` with ``N`` the difficulty's node cap and ``E = N (N - 1) / 2``."""
    cap = DIFFICULTY_NODE_CAPS.get(difficulty)
    if cap is None:
        raise ValueError(f"unknown difficulty {difficulty!r}; expected one of {sorted(DIFFICULTY_NODE_CAPS)}")
    e_cap = cap * (cap - 1) / 2
    return math.exp(-(nodes / cap + edges / e_cap + depth / cap) / 3.0)


_FIRST_ROLES = ("planning", "algorithmic", "retrieval")
_MIDDLE_ROLES = ("coding", "coding", "algorithmic", "debugging")


def synthetic_topology(difficulty: str, rng: random.Random) -> str:
    """A random valid layered topology within the difficulty's cap, as the orchestrator should write it.

    Between 2 and ``min(cap, 5)`` agents: a first layer of planners, then
    coders/debuggers reading earlier agents, and one testing agent last
    reading the previous layer.
    """
    cap = DIFFICULTY_NODE_CAPS[difficulty]
    n = rng.randint(2, min(cap, 5))
    layers: list[list[tuple[str, str, list[str]]]] = []
    counts: dict[str, int] = {}

    def new(role: str, refs: list[str]) -> tuple[str, str, list[str]]:
        counts[role] = counts.get(role, 0) + 1
        short = {
            "planning": "planner",
            "coding": "coder",
            "debugging": "debugger",
            "testing": "tester",
            "algorithmic": "algorithmist",
            "retrieval": "retriever",
        }[role]
        return (f"{short}_{counts[role]}", role, refs)

    left = n - 1  # the tester comes last
    while left > 0:
        width = 1 if left == 1 or rng.random() < 0.6 else min(2, left)
        prev = [a[0] for a in layers[-1]] if layers else []
        pool = _FIRST_ROLES if not layers else _MIDDLE_ROLES
        layers.append([new(rng.choice(pool), list(prev)) for _ in range(width)])
        left -= width
    layers.append([new("testing", [a[0] for a in layers[-1]])])
    rows = ["layers:"]
    for layer in layers:
        for j, (name, role, refs) in enumerate(layer):
            lead = "  - - " if j == 0 else "    - "
            rows.append(f"{lead}{{name: {name}, role: {role}, ref: [{', '.join(refs)}]}}")
    return "```yaml\n" + "\n".join(rows) + "\n```"


class ConductorConfig(RecipeConfig):
    """Options of :class:`ConductorRecipe` (the ``recipe:`` section of ``examples/recipes/conductor.yaml``)."""

    problems_per_step: int = Field(2, ge=1, description="training problems drawn per GRPO step")
    group_size: int = Field(
        4, ge=2, description="orchestrator episodes per problem: one GRPO group (GRPO compares them)"
    )
    max_turns: int = Field(
        2, ge=1, description="orchestrator turns per episode, revising on test feedback (the paper's 2)"
    )
    orchestrator_tokens: int = Field(128, ge=1, description="new tokens per orchestrator turn")
    worker_tokens: int = Field(96, ge=1, description="new tokens per worker agent of a topology")
    temperature: float = Field(1.0, ge=0.0, description="orchestrator sampling temperature in training")
    worker_temperature: float = Field(
        0.0,
        ge=0.0,
        description="worker sampling temperature (0: greedy, the outcome depends on the seed only)",
    )
    density_weight: float = Field(
        0.2, ge=0.0, description="weight of the density reward next to the execution reward"
    )
    n_train: int = Field(
        120, ge=1, description="HumanEval problems in the training split; the rest are held out"
    )
    split_seed: int = Field(0, description="seed of the training / held-out split")
    eval_problems: int = Field(8, ge=1, description="held-out problems evaluated (the first of the split)")
    eval_samples: int = Field(1, ge=1, description="episodes per held-out problem")
    sft_batch: int = Field(8, ge=1, description="synthetic topologies per SFT warm-start step")
    test_timeout_s: float = Field(
        10.0, gt=0.0, description="wall-clock limit of one unit-test run in the sandbox"
    )

    @model_validator(mode="after")
    def _draws_fit_the_training_split(self) -> ConductorConfig:
        for key in ("problems_per_step", "sft_batch"):
            if getattr(self, key) > self.n_train:
                raise FieldProblem(
                    (key,), f"draws {getattr(self, key)} problems per step from n_train={self.n_train}"
                )
        return self


class ConductorRecipe(Recipe):
    """The AgentConductor orchestrator on HumanEval (see the module docstring).

    Built from a :class:`ConductorConfig` or its fields as keyword arguments
    (``ConductorRecipe(group_size=4)``); bad values raise
    :class:`~societas.marl.llm.settings.SettingsError` naming the field.
    """

    name = "conductor"

    def __init__(
        self, settings: ConductorConfig | Mapping[str, Any] | None = None, /, **options: Any
    ) -> None:
        self.settings = recipe_settings(ConductorConfig, settings, options)
        train, held = humaneval_split(self.settings.n_train, seed=self.settings.split_seed)
        if self.settings.eval_problems > len(held):
            raise SettingsError(
                "recipe.eval_problems",
                f"{self.settings.eval_problems} held-out problems asked, the split holds {len(held)}",
            )
        self.train_tasks, self.heldout_tasks = train, held
        self._tasks = {t.task_id: t for t in train + held}
        self._sandbox: Sandbox | None = None

    @property
    def policies(self) -> tuple[str, ...]:
        return ("orchestrator",)

    def config(self) -> dict[str, Any]:
        return self.settings.model_dump(mode="json") | {"execution_rewards": EXECUTION_REWARDS}

    def __getstate__(self) -> dict[str, Any]:  # the sandbox is rebuilt where the recipe runs
        return {k: v for k, v in self.__dict__.items() if k != "_sandbox"} | {"_sandbox": None}

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = Sandbox(timeout_s=self.settings.test_timeout_s, memory_mb=512)
        return self._sandbox

    def _conductor(self) -> Conductor:
        # Only its prompts, parsing, graph building and grading are used; generation goes through
        # the run's LLMs, so the Conductor's own LLM refuses to generate rather than answer quietly.
        def _refuse(prompt):
            raise RuntimeError(
                "ConductorRecipe generates through the training run's LLMs, "
                "not through the Conductor it uses for prompts and grading"
            )

        no_llm = FunctionLLM(_refuse, name="run-llms-only")
        return Conductor(
            no_llm, no_llm, max_turns=self.settings.max_turns, sandbox=self.sandbox, enforce_caps=True
        )

    # -- episodes ---------------------------------------------------------------------------------

    def train_episodes(self, step: int, seed: int) -> list[Episode]:
        rng = random.Random(seed)
        tasks = rng.sample(self.train_tasks, self.settings.problems_per_step)
        return [
            Episode(t.task_id, episode_seed(seed, t.task_id, g), t.task_id, i * self.settings.group_size + g)
            for i, t in enumerate(tasks)
            for g in range(self.settings.group_size)
        ]

    def eval_episodes(self, seed: int) -> list[Episode]:
        tasks = self.heldout_tasks[: self.settings.eval_problems]
        return [
            Episode(
                t.task_id, episode_seed(20_011, t.task_id, g), t.task_id, i * self.settings.eval_samples + g
            )
            for i, t in enumerate(tasks)
            for g in range(self.settings.eval_samples)
        ]

    def sft_samples(self, step: int, seed: int, tokenizer: Any) -> dict[str, list[TokenSample]]:
        rng = random.Random(seed)
        cond = self._conductor()
        eos = tokenizer.eos_token_id
        out = []
        for t in rng.sample(self.train_tasks, self.settings.sft_batch):
            text = synthetic_topology(t.difficulty, rng)
            ids = list(tokenizer.encode(text, add_special_tokens=False)) + ([eos] if eos is not None else [])
            prompt = encode_with_tokenizer(tokenizer, [cond.orchestrator_prompt(t)])[0]
            out.append(TokenSample("orchestrator", prompt, ids, [1] * len(ids), None, t.task_id))
        return {"orchestrator": out}

    # -- rollouts ---------------------------------------------------------------------------------

    def turn_reward(self, turn: ConductorTurn, difficulty: str) -> tuple[float, float, float]:
        """(total, execution, density) reward of one orchestrator turn."""
        outcome = turn.outcome
        if outcome not in EXECUTION_REWARDS:  # e.g. "not_run": the topology parsed but its tests never ran
            raise ValueError(
                f"no execution reward for turn outcome {outcome!r}; "
                f"expected one of {sorted(EXECUTION_REWARDS)}"
            )
        execution = EXECUTION_REWARDS[outcome]
        density = 0.0
        if turn.topology is not None and turn.metrics is not None:
            m = turn.metrics
            density = density_reward(m["nodes"], m["edges"], m["depth"], difficulty)
        return execution + self.settings.density_weight * density, execution, density

    def _run_topologies(
        self, workers: Any, jobs: Sequence[tuple[str, LayeredTopology, CodeTask, int]]
    ) -> dict:
        """Run every (prefix, topology, task, seed) as one union graph; returns prefix -> (RunResult-like, TestResult)."""
        nodes: list[NodeSpec] = []
        edges: list[tuple[str, str]] = []
        functions: dict[str, Any] = {}
        results: dict[str, Any] = {}
        for prefix, topo, task, seed in jobs:
            template = task.instruction().replace("{", "{{").replace("}", "}}") + "{inputs}"
            spec = topo.to_graph_spec(task_template=template, name="t")
            ids = {n.id: f"{prefix}.{n.id}" for n in spec.nodes}
            for n in spec.nodes:
                params = {
                    "temperature": self.settings.worker_temperature,
                    "max_new_tokens": self.settings.worker_tokens,
                }
                if self.settings.worker_temperature > 0:
                    params["seed"] = episode_seed(seed, n.id)
                nodes.append(n.model_copy(update={"id": ids[n.id], "params": params}))
            edges += [(ids[e.source], ids[e.target]) for e in spec.edges]
            tool = f"{prefix}.unit_tests"
            grade = unit_test_tool(task, sandbox=self.sandbox)

            def run_tests(ctx: Any, _grade=grade, _prefix=prefix) -> str:
                out = _grade(ctx)
                results[_prefix] = ctx.state.pop("test_result")
                return out

            functions[tool] = run_tests
            nodes.append(NodeSpec(id=tool, kind="tool", function=tool))
            edges.append((ids[topo.final], tool))
        if not jobs:
            return {}
        nodes.append(NodeSpec(id="collect", kind="function", function="collect"))
        edges += [(f"{p}.unit_tests", "collect") for p, *_ in jobs]
        functions["collect"] = lambda ctx: ""
        graph = Graph.build("conductor-batch", nodes, edges, final="collect", llms={"default": "embedded"})
        run = Runtime(graph, llm=workers, functions=functions, seed=0).run("")
        return {p: (run, results.get(p)) for p, *_ in jobs}

    def run_episodes(
        self, llms: Mapping[str, Any], episodes: Sequence[Episode], *, train: bool
    ) -> list[EpisodeResult]:
        orch, workers = llms["orchestrator"], llms[FROZEN]
        tok = orch.tokenizer
        cond = self._conductor()
        turns: list[list[ConductorTurn]] = [[] for _ in episodes]
        samples: list[list[TokenSample]] = [[] for _ in episodes]
        rewards: list[list[float]] = [[] for _ in episodes]
        parts: list[list[tuple[float, float]]] = [[] for _ in episodes]
        active = list(range(len(episodes)))
        for turn in range(self.settings.max_turns):
            if not active:
                break
            tasks = [self._tasks[episodes[i].task] for i in active]
            prompts = [cond.orchestrator_prompt(t, turns[i]) for i, t in zip(active, tasks)]
            params = [
                SamplingParams(
                    temperature=self.settings.temperature,
                    max_new_tokens=self.settings.orchestrator_tokens,
                    seed=episode_seed(episodes[i].seed, "turn", turn) % (2**62),
                )
                for i in active
            ]
            outs = orch.generate(prompts, params)
            jobs = []
            for i, task, prompt, comps in zip(active, tasks, prompts, outs):
                c = comps[0]
                ct = ConductorTurn(turn, prompt, c.text, c.usage.total_tokens)
                cap = DIFFICULTY_NODE_CAPS.get(task.difficulty)
                topo, err = try_parse_layered_yaml(c.text, allowed_roles=CONDUCTOR_ROLES, max_agents=cap)
                if topo is not None:
                    ct.topology, ct.metrics = topo, topo.metrics().to_dict()
                    jobs.append((f"e{episodes[i].index}t{turn}", topo, task, episodes[i].seed))
                elif err is not None:
                    ct.parse_error, ct.parse_message = err.kind, str(err)
                turns[i].append(ct)
                samples[i].append(
                    sample_from_completion("orchestrator", prompt, c, tok, episodes[i].group, {"turn": turn})
                )
            ran = self._run_topologies(workers, jobs)
            still = []
            for i, task in zip(active, tasks):
                ct = turns[i][-1]
                key = f"e{episodes[i].index}t{turn}"
                if key in ran:
                    ct.run, ct.test = ran[key]
                r, ex, de = self.turn_reward(ct, task.difficulty)
                rewards[i].append(r)
                parts[i].append((ex, de))
                if ct.outcome != "passed" and turn + 1 < self.settings.max_turns:
                    still.append(i)
            active = still
        results = []
        for i, e in enumerate(episodes):
            final = turns[i][-1]
            m = final.metrics or {}
            metrics = {
                "reward": rewards[i][-1],
                "first_turn_reward": rewards[i][0],
                "execution": parts[i][-1][0],
                "density": parts[i][-1][1],
                "valid_yaml": float(final.topology is not None),
                "first_turn_valid_yaml": float(turns[i][0].topology is not None),
                "passed": float(final.outcome == "passed"),
                "turns": float(len(turns[i])),
            }
            if m:
                metrics["agents"] = float(m["nodes"])
            record = {
                "task_id": e.task,
                "seed": e.seed,
                "rewards": rewards[i],
                "turns": [
                    {"outcome": t.outcome, "metrics": t.metrics, "text": t.orchestrator_output}
                    for t in turns[i]
                ],
            }
            results.append(
                EpisodeResult(samples[i], list(rewards[i]), [e.group] * len(samples[i]), metrics, record)
            )
        return results
