"""AgentConductor (arXiv 2602.17100): an orchestrator designs the topology per task.

For each coding problem the orchestrator LLM writes a layered DAG in YAML
(layers of agents, each with a role and ``ref``s to agents of earlier
layers; the last layer holds the testing agent). The Runtime executes that
topology with the worker LLM, a tool node runs the problem's unit tests in
the sandbox, and on failure the test feedback — or the parse error, when the
YAML was unusable — returns to the orchestrator, which writes a revised
topology, for at most ``max_turns`` turns (the paper uses 2). The loop stops
early on success.

Every turn records what a reward needs: the orchestrator's text, which of the
four parse failures occurred (no YAML, YAML syntax, schema, logic), the
topology's size (nodes, edges, depth) against the difficulty's node cap, and
the graded test outcome.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from societas.agents import llm as llm_backends
from societas.agents.llm import LLM, SamplingParams
from societas.agents.llm.base import ChatMessage
from societas.agents.roles import CONDUCTOR_ROLES, role_prompt
from societas.agents.sandbox import Sandbox

from ..coding import CodeTask, TestResult, unit_test_tool
from ..graph import Graph
from ..layered import DIFFICULTY_NODE_CAPS, LayeredTopology, try_parse_layered_yaml
from ..runtime import RunResult, Runtime
from ..spec import NodeSpec

log = logging.getLogger(__name__)


@dataclass
class ConductorTurn:
    turn: int
    prompt: list[ChatMessage]
    orchestrator_output: str
    orchestrator_tokens: int
    parse_error: str | None = None  # "no_yaml" | "yaml_syntax" | "schema_invalid" | "logic_invalid"
    parse_message: str | None = None
    topology: LayeredTopology | None = None
    metrics: dict[str, Any] | None = None
    run: RunResult | None = None
    test: TestResult | None = None

    @property
    def outcome(self) -> str:
        """The parse failure kind, or the graded test outcome."""
        if self.parse_error:
            return self.parse_error
        return self.test.outcome if self.test else "not_run"

    def summary(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "outcome": self.outcome,
            "parse_message": self.parse_message,
            "metrics": self.metrics,
            "worker_tokens": self.run.trace.totals().tokens if self.run else 0,
            "orchestrator_tokens": self.orchestrator_tokens,
        }


@dataclass
class ConductorResult:
    task_id: str
    difficulty: str
    turns: list[ConductorTurn] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def passed(self) -> bool:
        return bool(self.turns) and self.turns[-1].outcome == "passed"

    @property
    def final(self) -> ConductorTurn | None:
        return self.turns[-1] if self.turns else None

    @property
    def tokens(self) -> int:
        return sum(t.orchestrator_tokens + (t.run.trace.totals().tokens if t.run else 0) for t in self.turns)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "difficulty": self.difficulty,
            "passed": self.passed,
            "turns": [t.summary() for t in self.turns],
            "tokens": self.tokens,
            "wall_s": self.wall_s,
        }


def _feedback(turn: ConductorTurn) -> str:
    if turn.parse_error:
        return (
            f"Your previous answer could not be used ({turn.parse_error}): {turn.parse_message}\n"
            "Write the topology again as one ```yaml block with a 'layers' list."
        )
    assert turn.test is not None
    return (
        f"The team built from your previous topology produced code with outcome '{turn.test.outcome}'.\n"
        f"Test feedback:\n{turn.test.feedback}\n"
        "Design a revised topology (for example add a debugging agent, or a planning step) as one ```yaml block."
    )


class Conductor:
    """The AgentConductor loop for one orchestrator and a pool of worker agents.

    ``orchestrator`` and ``workers`` are LLM objects or URIs (the same model
    may serve both). ``allowed_roles`` are the roles the orchestrator may use;
    ``enforce_caps`` rejects topologies larger than the difficulty's node cap
    (4 / 7 / 10) as logic-invalid.
    """

    def __init__(
        self,
        orchestrator: LLM | str = "embedded",
        workers: LLM | str | None = None,
        *,
        max_turns: int = 2,
        orchestrator_params: SamplingParams | None = None,
        worker_params: dict[str, Any] | None = None,
        sandbox: Sandbox | None = None,
        allowed_roles: Sequence[str] = CONDUCTOR_ROLES,
        enforce_caps: bool = False,
        seed: int | None = None,
    ) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.orchestrator = (
            llm_backends.load_llm(orchestrator) if isinstance(orchestrator, str) else orchestrator
        )
        w = workers if workers is not None else self.orchestrator
        self.workers = llm_backends.load_llm(w) if isinstance(w, str) else w
        self.max_turns = max_turns
        self.orchestrator_params = orchestrator_params or SamplingParams(temperature=0.7, max_new_tokens=256)
        self.worker_params = dict(worker_params or {"temperature": 0.2, "max_new_tokens": 256})
        self.sandbox = sandbox or Sandbox(timeout_s=10.0, memory_mb=512)
        self.allowed_roles = tuple(allowed_roles)
        self.enforce_caps = enforce_caps
        self.seed = seed

    # -- prompts ----------------------------------------------------------------
    def orchestrator_prompt(self, task: CodeTask, history: Sequence[ConductorTurn] = ()) -> list[ChatMessage]:
        cap = DIFFICULTY_NODE_CAPS.get(task.difficulty, 7)
        msgs: list[ChatMessage] = [
            {"role": "system", "content": role_prompt("orchestrator")},
            {
                "role": "user",
                "content": f"Difficulty: {task.difficulty} (use at most {cap} agents).\n\nTask:\n{task.instruction()}",
            },
        ]
        for t in history:
            msgs.append({"role": "assistant", "content": t.orchestrator_output})
            msgs.append({"role": "user", "content": _feedback(t)})
        return msgs

    def build_graph(self, topo: LayeredTopology, task: CodeTask) -> Graph:
        """The topology's agents plus a ``unit_tests`` tool node after the final agent."""
        spec = topo.to_graph_spec(name=f"conductor-{task.task_id}")
        nodes = []
        for n in spec.nodes:
            params = {**self.worker_params, **n.params}
            nodes.append(n.model_copy(update={"params": params}))
        nodes.append(NodeSpec(id="unit_tests", kind="tool", function="unit_tests"))
        edges = [(e.source, e.target) for e in spec.edges] + [(topo.final, "unit_tests")]
        return Graph.build(spec.name, nodes, edges, llms=dict(spec.llms), final="unit_tests")

    # -- the loop ------------------------------------------------------------------
    def run(self, task: CodeTask) -> ConductorResult:
        return self.run_many([task])[0]

    def run_many(self, tasks: Sequence[CodeTask]) -> list[ConductorResult]:
        """Several problems in lockstep: each turn's orchestrator prompts go in one batch."""
        results = [ConductorResult(t.task_id, t.difficulty) for t in tasks]
        t0 = time.perf_counter()
        active = list(range(len(tasks)))
        for turn in range(self.max_turns):
            if not active:
                break
            prompts = [self.orchestrator_prompt(tasks[i], results[i].turns) for i in active]
            params = [
                self.orchestrator_params.model_copy(update={"seed": self.seed * 7919 + i * 31 + turn})
                if self.seed is not None and self.orchestrator_params.seed is None
                else self.orchestrator_params
                for i in active
            ]
            outs = self.orchestrator.generate(prompts, params)
            still = []
            for i, prompt, comps in zip(active, prompts, outs):
                c = comps[0]
                ct = ConductorTurn(turn, prompt, c.text, c.usage.total_tokens)
                task = tasks[i]
                cap = DIFFICULTY_NODE_CAPS.get(task.difficulty) if self.enforce_caps else None
                topo, err = try_parse_layered_yaml(c.text, allowed_roles=self.allowed_roles, max_agents=cap)
                if err is not None:
                    ct.parse_error, ct.parse_message = err.kind, str(err)
                else:
                    assert topo is not None
                    ct.topology = topo
                    ct.metrics = topo.metrics().to_dict()
                    graph = self.build_graph(topo, task)
                    rt = Runtime(
                        graph,
                        llm=self.workers,
                        functions={"unit_tests": unit_test_tool(task, sandbox=self.sandbox)},
                        seed=None if self.seed is None else self.seed + turn,
                    )
                    ct.run = rt.run(task.instruction())
                    ct.test = ct.run.state.get("test_result")
                results[i].turns.append(ct)
                log.info("%s turn %d: %s", task.task_id, turn, ct.outcome)
                if ct.outcome != "passed":
                    still.append(i)
            active = still
        for r in results:
            r.wall_s = time.perf_counter() - t0
        return results
