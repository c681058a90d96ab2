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
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from societas.agents.agent import Agent
from societas.agents.llm import LLM, load_llm
from societas.agents.llm.base import SamplingParams

from .graph import Graph
from .spec import GraphSpec
from .trace import Trace, TraceEvent

log = logging.getLogger(__name__)


class NodeError(RuntimeError):
    """A node failed while the graph ran (its id and round are in the message)."""


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


@dataclass
class RunResult:
    task: str
    output: str | None  # the final node's last output (None if the run stopped before it)
    outputs: dict[str, list[str]]  # node id -> output of each round
    trace: Trace
    stopped: str | None = None  # None, "token_budget" or "call_budget"
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


@dataclass
class _Job:
    run: int
    node: str
    round: int
    inputs: list[tuple[str, str]]


class _RunState:
    def __init__(self, task: str, graph: Graph, rounds: dict[str, int]) -> None:
        self.task = task
        self.done: dict[str, int] = {n: 0 for n in graph.nodes}  # rounds finished
        self.outputs: dict[str, list[str]] = {n: [] for n in graph.nodes}
        self.trace = Trace(meta={"task": task, "graph": graph.spec.name})
        self.stopped: str | None = None
        self.state: dict[str, Any] = {}
        self.rounds = rounds
        self.t0 = time.perf_counter()
        self.batches = 0
        # Nodes whose readiness may have changed: only these are examined, so a
        # step costs O(edges touched) rather than O(nodes x in-degree).
        self.candidates: set[str] = set(graph.nodes)

    def finished(self) -> bool:
        return self.stopped is not None or all(self.done[n] >= r for n, r in self.rounds.items())


def _stable_seed(*parts: Any) -> int:
    h = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little") >> 1


class Runtime:
    """Runs a :class:`Graph`.

    ``llms`` maps the spec's LLM names to backend objects (overriding the
    URIs in ``spec.llms``); ``llm`` replaces every model of the graph (the
    CLI's ``--llm``). ``functions`` maps names used by function/tool nodes to
    callables (otherwise ``module:attr`` is imported). With ``seed`` set,
    each agent call samples with a seed derived from (seed, task index,
    node, round), so a rerun with the same LLM reproduces the run.
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
        self._run_seeds: list[int] | None = None
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
        comp_of: dict[str, int] = {}
        self._cyclic: set[str] = set()
        for k, comp in enumerate(self.graph.cyclic_components()):
            for n in comp:
                comp_of[n] = k
                self._cyclic.add(n)
        self._comp_of = comp_of
        R = spec.rounds or 1
        self._rounds = {n: (R if n in self._cyclic else 1) for n in self.graph.nodes}
        self._preds = {n: list(self.graph.predecessors(n)) for n in self.graph.nodes}
        self._succs = {n: list(self.graph.successors(n)) for n in self.graph.nodes}
        self._order = {n: i for i, n in enumerate(self.graph.nodes)}

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
            out[name] = load_llm(src) if isinstance(src, str) else src
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

    # -- scheduling ------------------------------------------------------------
    def _ready(self, st: _RunState) -> list[tuple[str, int]]:
        ready = []
        for n in sorted(st.candidates, key=self._order.__getitem__):
            r = st.done[n]
            if r >= self._rounds[n]:
                st.candidates.discard(n)
                continue
            ok = True
            for p in self._preds[n]:
                if self._same_component(n, p):
                    if p != n and st.done[p] < r:  # same component: previous round must be done
                        ok = False
                        break
                elif st.done[p] < self._rounds[p]:
                    ok = False
                    break
            st.candidates.discard(n)  # re-added when a predecessor or its own round finishes
            if ok:
                ready.append((n, r))
        return ready

    def _same_component(self, a: str, b: str) -> bool:
        return a in self._cyclic and b in self._cyclic and self._comp_of[a] == self._comp_of[b]

    def _receivers(self, n: str, r: int) -> list[str]:
        """Who reads the output of ``n`` at round ``r``: its component's members
        in the next round, or — after its last round — the nodes downstream."""
        last = r == self._rounds[n] - 1
        return [s for s in self._succs[n] if (not last if self._same_component(n, s) else last)]

    def _inputs(self, st: _RunState, n: str, r: int) -> list[tuple[str, str]]:
        out = []
        for p in self._preds[n]:
            if self._same_component(n, p):
                if r >= 1:
                    label = f"{p} (your previous answer)" if p == n else f"{p} (previous round)"
                    out.append((label, st.outputs[p][r - 1]))
            elif st.outputs[p]:
                out.append((p, st.outputs[p][-1]))
        return out

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
        self._run_seeds = seeds
        states = [_RunState(t, self.graph, self._rounds) for t in tasks]
        calls_used = [0] * len(states)
        tokens_used = [0] * len(states)
        step = 0
        while True:
            jobs: list[_Job] = []
            for k, st in enumerate(states):
                if st.finished():
                    continue
                ready = self._ready(st)
                if not ready:
                    raise NodeError(f"graph {self.graph.spec.name!r} is stuck: no node is ready (task {k})")
                if self.max_tokens is not None and tokens_used[k] >= self.max_tokens:
                    st.stopped = "token_budget"
                    continue
                if self.max_calls is not None:
                    left = self.max_calls - calls_used[k]
                    n_agent = sum(1 for n, _ in ready if n in self._agents)
                    if n_agent > left:
                        kept, seen = [], 0
                        for n, r in ready:
                            if n in self._agents:
                                if seen >= left:
                                    continue
                                seen += 1
                            kept.append((n, r))
                        ready = kept
                        st.stopped = "call_budget"
                        if not ready:
                            continue
                jobs.extend(_Job(k, n, r, self._inputs(st, n, r)) for n, r in ready)
            if not jobs:
                break
            self._superstep(step, jobs, states, calls_used, tokens_used)
            step += 1
        results = []
        for st in states:
            wall = time.perf_counter() - st.t0
            st.trace.meta.update(wall_s=wall, llm_batches=st.batches, stopped=st.stopped, steps=step)
            final = self.graph.final
            out = st.outputs[final][-1] if st.outputs[final] else None
            results.append(
                RunResult(
                    task=st.task,
                    output=out,
                    outputs=st.outputs,
                    trace=st.trace,
                    stopped=st.stopped,
                    metrics=self.graph.metrics().to_dict(),
                    state=st.state,
                )
            )
        return results

    def _params_for(self, job: _Job, agent: Agent, cap: int | None) -> SamplingParams:
        p = agent.params
        upd: dict[str, Any] = {}
        run_seeds = self._run_seeds
        if run_seeds is not None and p.seed is None:
            upd["seed"] = _stable_seed(run_seeds[job.run], "run", job.node, job.round)
        elif self.seed is not None and p.seed is None:
            upd["seed"] = _stable_seed(self.seed, job.run, job.node, job.round)
        if cap is not None and p.max_new_tokens > cap:
            upd["max_new_tokens"] = max(1, cap)
        if p.n != 1:
            upd["n"] = 1
        return p.model_copy(update=upd) if upd else p

    def _superstep(
        self,
        step: int,
        jobs: list[_Job],
        states: list[_RunState],
        calls_used: list[int],
        tokens_used: list[int],
    ) -> None:
        agent_jobs = [j for j in jobs if j.node in self._agents]
        fn_jobs = [j for j in jobs if j.node not in self._agents]
        pending: list[tuple[_Job, str, TraceEvent]] = []

        # Token caps: a step's generations share what the budget has left.
        caps: dict[int, int | None] = {}
        if self.max_tokens is not None:
            per_run: dict[int, int] = {}
            for j in agent_jobs:
                per_run[j.run] = per_run.get(j.run, 0) + 1
            for k, cnt in per_run.items():
                caps[k] = max(1, (self.max_tokens - tokens_used[k]) // cnt)

        groups: dict[int, list[_Job]] = {}
        for j in agent_jobs:
            groups.setdefault(id(self._agents[j.node].llm), []).append(j)
        for group in groups.values():
            llm = self._agents[group[0].node].llm
            prompts = [self._agents[j.node].build_prompt(states[j.run].task, j.inputs) for j in group]
            params = [self._params_for(j, self._agents[j.node], caps.get(j.run)) for j in group]
            t0 = time.perf_counter()
            outs = llm.generate(prompts, params)
            dt = time.perf_counter() - t0
            for k in {j.run for j in group}:
                states[k].batches += 1
            for j, prompt, comps in zip(group, prompts, outs):
                c = comps[0]
                ns = self.graph.node(j.node)
                ev = TraceEvent(
                    step=step,
                    round=j.round,
                    sender=j.node,
                    receivers=self._receivers(j.node, j.round),
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
                    meta={"inputs_from": [s.split(" (")[0] for s, _ in j.inputs]},
                )
                calls_used[j.run] += 1
                tokens_used[j.run] += c.usage.total_tokens
                pending.append((j, c.text, ev))

        for j in fn_jobs:
            st = states[j.run]
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
                value = self._fns[j.node](ctx)
            except Exception as exc:
                raise NodeError(
                    f"{ns.kind} node {j.node!r} (round {j.round}) failed: {type(exc).__name__}: {exc}"
                ) from exc
            text = value if isinstance(value, str) else str(value)
            ev = TraceEvent(
                step=step,
                round=j.round,
                sender=j.node,
                receivers=self._receivers(j.node, j.round),
                kind=ns.kind,
                role=ns.role,
                prompt=[],
                output=text,
                latency_s=time.perf_counter() - t0,
                meta={"inputs_from": [s.split(" (")[0] for s, _ in j.inputs]},
            )
            pending.append((j, text, ev))

        # Writes become visible only now, after the whole step (Pregel semantics).
        pending.sort(key=lambda x: (x[0].run, self._order[x[0].node]))
        for j, text, ev in pending:
            st = states[j.run]
            st.outputs[j.node].append(text)
            st.done[j.node] += 1
            st.candidates.add(j.node)
            st.candidates.update(self._succs[j.node])
            st.trace.append(ev)
            if self.on_event is not None:
                self.on_event(ev)
