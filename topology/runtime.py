"""The Runtime: run a Graph of agents in supersteps, batching LLM calls.

Execution model (after Pregel and LangGraph's loop, plus batching):

* A node *instance* is a node at a round. Nodes outside cycles run once;
  nodes of a cyclic component (debate, society) run ``spec.rounds`` times.
* An instance is ready when every predecessor outside its component has
  finished all its rounds, and every predecessor inside its component has
  finished the previous round. Entry nodes see the task alone.
* A superstep runs every ready instance. Outputs become visible only after
  the step, so instances of one step never see each other.
* All agent prompts of a step that share an LLM object go to it in ONE
  batched ``generate`` call (per-node sampling parameters travel with each
  prompt). :meth:`Runtime.run_many` goes further: it advances several tasks
  in lockstep, so a step of every task shares the same calls.
* Budgets (total tokens, agent calls) are checked before each step; a step
  that would pass the call budget runs only the instances that fit, and its
  generation lengths are capped to the tokens left; then the run stops with
  ``stopped`` naming the budget.
* Every instance becomes a :class:`~societas.topology.trace.TraceEvent` holding the
  exact prompt, the output, tokens and latency.

Function and tool nodes call Python: ``fn(ctx: NodeContext) -> str``.

The work is split three ways: :mod:`~societas.topology.scheduler` decides what
runs in each superstep and when a run stops, :mod:`~societas.topology.executor`
runs a superstep and records its trace events, and the state of a run lives in
a :class:`~societas.topology.run_state.RunState` made per call, so one Runtime
may serve several threads at once.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from societas.agents import llm as llm_backends
from societas.agents.agent import Agent
from societas.agents.llm import LLM
from societas.agents.llm.base import SamplingParams

from .executor import Executor, NodeContext
from .graph import Graph
from .run_state import Budget, NodeError, RunState, StopReason, TaskState
from .scheduler import Scheduler
from .spec import GraphSpec
from .trace import Trace, TraceEvent

log = logging.getLogger(__name__)

__all__ = ["NodeContext", "NodeError", "RunResult", "Runtime"]


@dataclass
class RunResult:
    task: str
    output: str | None  # the final node's last output (None if the run stopped before it)
    outputs: dict[str, list[str]]  # node id -> output of each round
    trace: Trace
    stopped: StopReason | None = None  # None, "token_budget" or "call_budget"
    metrics: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def totals(self) -> dict[str, Any]:
        return self.trace.totals().to_dict()

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "output": self.output,
            "stopped": self.stopped,
            "metrics": self.metrics,
            "totals": self.totals,
        }


class Runtime:
    """Runs a :class:`Graph`.

    ``llms`` maps the spec's LLM names to backend objects (overriding the
    URIs in ``spec.llms``); ``llm`` replaces every model of the graph (the
    CLI's ``--llm``). ``functions`` maps names used by function/tool nodes to
    callables (otherwise ``module:attr`` is imported). With ``seed`` set,
    each agent call samples with a seed derived from (seed, task index,
    node, round), so a rerun with the same LLM reproduces the run.

    A Runtime keeps no state of its own between or during runs: several
    threads may call :meth:`run` and :meth:`run_many` on one Runtime at once,
    and each gets the result a run alone would give. The threads then share
    the LLM objects, whose ``generate`` must allow concurrent calls.
    """

    def __init__(
        self,
        graph: Graph | GraphSpec,
        *,
        llms: Mapping[str, LLM | str] | None = None,
        llm: LLM | str | None = None,
        functions: Mapping[str, Callable[[NodeContext], Any]] | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
        max_calls: int | None = None,
        on_event: Callable[[TraceEvent], None] | None = None,
    ) -> None:
        self.graph = graph if isinstance(graph, Graph) else Graph(graph)
        spec = self.graph.spec
        self.seed = seed
        self.max_tokens = max_tokens if max_tokens is not None else spec.budget.max_tokens
        self.max_calls = max_calls if max_calls is not None else spec.budget.max_calls
        self.on_event = on_event
        self._functions = dict(functions or {})
        self._llm_objs = self._resolve_llms(llms or {}, llm)
        self._agents: dict[str, Agent] = {}
        self._fns: dict[str, Callable[[NodeContext], Any]] = {}
        for nid in self.graph.nodes:
            ns = self.graph.node(nid)
            if ns.kind == "agent":
                self._agents[nid] = self._make_agent(nid)
            else:
                self._fns[nid] = self._resolve_function(nid, ns.function)
        # Built once and never written afterwards: what a run changes lives in its RunState.
        self._scheduler = Scheduler(self.graph, self._agents)
        self._executor = Executor(self.graph, self._agents, self._fns, self._scheduler)

    # -- set-up --------------------------------------------------------------
    def _resolve_llms(self, llms: Mapping[str, LLM | str], override: LLM | str | None) -> dict[str, LLM]:
        spec = self.graph.spec
        needed = {self.graph.node(n).llm for n in self.graph.nodes if self.graph.node(n).kind == "agent"}
        out: dict[str, LLM] = {}
        for name in sorted(needed):
            src: LLM | str | None
            if override is not None:
                src = override
            elif name in llms:
                src = llms[name]
            else:
                src = spec.llms.get(name)
            if src is None:
                raise ValueError(
                    f"no LLM named {name!r}: add it to the spec's llms or pass llms={{{name!r}: ...}}"
                )
            out[name] = llm_backends.load_llm(src) if isinstance(src, str) else src
        return out

    def _make_agent(self, nid: str) -> Agent:
        ns = self.graph.node(nid)
        params = SamplingParams(**ns.params) if ns.params else SamplingParams()
        persona = ns.meta.get("persona") if isinstance(ns.meta, dict) else None
        return Agent(
            name=nid,
            llm=self._llm_objs[ns.llm],
            role=ns.role,
            system_prompt=ns.prompt,
            params=params,
            template=ns.template,
            persona=persona,
        )

    def _resolve_function(self, nid: str, ref: str | None) -> Callable[[NodeContext], Any]:
        if ref is None:
            raise ValueError(f"node {nid!r}: function/tool node needs 'function'")
        if ref in self._functions:
            return self._functions[ref]
        mod, colon, attr = ref.rpartition(":")
        if not colon:
            raise ValueError(
                f"node {nid!r}: function {ref!r} is not given to the Runtime (functions=...) and is not MODULE:ATTR"
            )
        try:
            fn = getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"node {nid!r}: cannot import function {ref!r}: {exc}") from None
        if not callable(fn):
            raise ValueError(f"node {nid!r}: {ref!r} is not callable")
        return fn

    @property
    def agents(self) -> dict[str, Agent]:
        return dict(self._agents)

    # -- running -----------------------------------------------------------------
    def run(self, task: str, *, trace_path: str | Path | None = None) -> RunResult:
        res = self.run_many([task])[0]
        if trace_path is not None:
            res.trace.save_jsonl(trace_path)
        return res

    def run_many(self, tasks: Sequence[str], *, seeds: Sequence[int] | None = None) -> list[RunResult]:
        """Run the graph on several tasks in lockstep, batching across them.

        ``seeds`` (one int per task) gives each run its own sampling seed in
        place of the Runtime's ``seed`` and the run's position in ``tasks``:
        a run then samples the same way whichever batch it is part of (what
        rollouts split over several workers need).
        """
        if isinstance(tasks, str):
            raise TypeError("run_many takes a list of tasks; use run() for one")
        if seeds is not None:
            seeds = list(seeds)
            if len(seeds) != len(tasks):
                raise ValueError(f"seeds has {len(seeds)} entries for {len(tasks)} tasks")
            if not all(isinstance(x, int) and not isinstance(x, bool) for x in seeds):
                raise TypeError("seeds must be integers")
        run = self._scheduler.start(
            tasks,
            budget=Budget(max_tokens=self.max_tokens, max_calls=self.max_calls),
            seed=self.seed,
            seeds=seeds,
            on_event=self.on_event,
        )
        while True:
            jobs = self._scheduler.next_jobs(run)
            if not jobs:
                break
            outcomes = self._executor.superstep(run, jobs, self._scheduler.token_caps(run, jobs))
            # Writes become visible only now, after the whole step (Pregel semantics).
            for outcome in outcomes:
                self._scheduler.complete(run, outcome)
                self._executor.record(run, outcome)
            run.step += 1
        return [self._result(run, st) for st in run.tasks]

    def _result(self, run: RunState, st: TaskState) -> RunResult:
        wall = time.perf_counter() - st.t0
        st.trace.meta.update(wall_s=wall, llm_batches=st.batches, stopped=st.stopped, steps=run.step)
        final = self.graph.final
        return RunResult(
            task=st.task,
            output=st.outputs[final][-1] if st.outputs[final] else None,
            outputs=st.outputs,
            trace=st.trace,
            stopped=st.stopped,
            metrics=self.graph.metrics().to_dict(),
            state=st.state,
        )
