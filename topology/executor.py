"""The Runtime's executor: run one superstep's node instances and record them.

All agent prompts of a step that share an LLM object go to it in ONE batched
``generate`` call (per-node sampling parameters travel with each prompt);
function and tool nodes call Python, ``fn(ctx: NodeContext) -> str``. Every
instance becomes a :class:`~societas.topology.trace.TraceEvent` holding the
exact prompt, the output, tokens and latency.

An :class:`Executor` holds only the agents and functions it was built with;
what a step produces is returned to the caller, and a task's trace and scratch
state live in the :class:`~societas.topology.run_state.RunState` of its run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from societas.agents.agent import Agent
from societas.agents.llm.base import SamplingParams

from .graph import Graph
from .run_state import Job, NodeError, NodeOutcome, RunState, TaskState
from .scheduler import Scheduler, seed_for
from .trace import Trace, TraceEvent

__all__ = ["Executor", "NodeContext"]


@dataclass
class NodeContext:
    """What a function or tool node receives."""

    node: str
    task: str
    inputs: dict[str, str]  # sender id -> text, in predecessor order
    round: int
    meta: dict[str, Any]
    trace: Trace
    state: dict[str, Any]  # per-run scratch space shared by the run's functions


def _inputs_from(job: Job) -> list[str]:
    return [s.split(" (")[0] for s, _ in job.inputs]


class Executor:
    """Runs the jobs of a superstep for one graph.

    ``agents`` maps agent node ids to their :class:`Agent`, ``functions``
    maps function and tool node ids to their callables; ``scheduler`` says
    who receives each output and in which order outputs are committed.
    """

    def __init__(
        self,
        graph: Graph,
        agents: Mapping[str, Agent],
        functions: Mapping[str, Callable[[NodeContext], Any]],
        scheduler: Scheduler,
    ) -> None:
        self.graph = graph
        self.agents = dict(agents)
        self.functions = dict(functions)
        self.scheduler = scheduler

    def params_for(self, st: TaskState, job: Job, agent: Agent, cap: int | None) -> SamplingParams:
        """The agent's sampling parameters for one job: seeded, capped to ``cap`` tokens, one sample."""
        p = agent.params
        upd: dict[str, Any] = {}
        if p.seed is None:
            seed = seed_for(st, job.node, job.round)
            if seed is not None:
                upd["seed"] = seed
        if cap is not None and p.max_new_tokens > cap:
            upd["max_new_tokens"] = max(1, cap)
        if p.n != 1:
            upd["n"] = 1
        return p.model_copy(update=upd) if upd else p

    def superstep(
        self, run: RunState, jobs: Sequence[Job], caps: Mapping[int, int | None]
    ) -> list[NodeOutcome]:
        """Execute ``jobs`` (one batched call per LLM, then the functions); outcomes in commit order.

        ``caps`` maps a task index to the most tokens each of its
        generations may produce in this step. Nothing is committed: the
        outcomes become visible when the caller hands them to the scheduler.
        """
        agent_jobs = [j for j in jobs if j.node in self.agents]
        fn_jobs = [j for j in jobs if j.node not in self.agents]
        outcomes = self._run_agents(run, agent_jobs, caps)
        outcomes.extend(self._run_function(run, j) for j in fn_jobs)
        return self.scheduler.commit_order(outcomes)

    def _run_agents(
        self, run: RunState, jobs: list[Job], caps: Mapping[int, int | None]
    ) -> list[NodeOutcome]:
        groups: dict[int, list[Job]] = {}
        for j in jobs:
            groups.setdefault(id(self.agents[j.node].llm), []).append(j)
        outcomes: list[NodeOutcome] = []
        for group in groups.values():
            llm = self.agents[group[0].node].llm
            prompts = [self.agents[j.node].build_prompt(run.tasks[j.run].task, j.inputs) for j in group]
            params = [
                self.params_for(run.tasks[j.run], j, self.agents[j.node], caps.get(j.run)) for j in group
            ]
            t0 = time.perf_counter()
            outs = llm.generate(prompts, params)
            dt = time.perf_counter() - t0
            for k in {j.run for j in group}:
                run.tasks[k].batches += 1
            for j, prompt, comps in zip(group, prompts, outs):
                c = comps[0]
                ns = self.graph.node(j.node)
                ev = TraceEvent(
                    step=run.step,
                    round=j.round,
                    sender=j.node,
                    receivers=self.scheduler.receivers(j.node, j.round),
                    kind="agent",
                    role=ns.role,
                    prompt=prompt,
                    output=c.text,
                    prompt_tokens=c.usage.prompt_tokens,
                    completion_tokens=c.usage.completion_tokens,
                    latency_s=dt,
                    batch_size=len(group),
                    llm=getattr(llm, "name", type(llm).__name__),
                    finish_reason=c.finish_reason,
                    meta={"inputs_from": _inputs_from(j)},
                )
                outcomes.append(NodeOutcome(j, c.text, ev, tokens=c.usage.total_tokens))
        return outcomes

    def _run_function(self, run: RunState, j: Job) -> NodeOutcome:
        st = run.tasks[j.run]
        ns = self.graph.node(j.node)
        ctx = NodeContext(
            node=j.node,
            task=st.task,
            inputs=dict(j.inputs),
            round=j.round,
            meta=dict(ns.meta),
            trace=st.trace,
            state=st.state,
        )
        t0 = time.perf_counter()
        try:
            value = self.functions[j.node](ctx)
        except Exception as exc:
            raise NodeError(
                f"{ns.kind} node {j.node!r} (round {j.round}) failed: {type(exc).__name__}: {exc}"
            ) from exc
        text = value if isinstance(value, str) else str(value)
        ev = TraceEvent(
            step=run.step,
            round=j.round,
            sender=j.node,
            receivers=self.scheduler.receivers(j.node, j.round),
            kind=ns.kind,
            role=ns.role,
            prompt=[],
            output=text,
            latency_s=time.perf_counter() - t0,
            meta={"inputs_from": _inputs_from(j)},
        )
        return NodeOutcome(j, text, ev)

    def record(self, run: RunState, outcome: NodeOutcome) -> None:
        """Append an outcome's event to its task's trace and pass it to the run's ``on_event``."""
        run.tasks[outcome.job.run].trace.append(outcome.event)
        if run.on_event is not None:
            run.on_event(outcome.event)
