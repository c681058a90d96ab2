"""The Runtime's executor: run one superstep and record its trace events.

All agent prompts of a step that share an LLM object go to it in ONE batched
``generate`` call (per-node sampling parameters travel with each prompt) —
whether the agent starts its turn or continues a tool loop. Function and tool
nodes call Python, ``fn(ctx: NodeContext) -> str``. Every instance becomes a
:class:`~societas.topology.trace.TraceEvent` holding the exact prompt, the
output, tokens and latency.

Work that spans supersteps keeps its progress in the task's
:class:`~societas.topology.run_state.TaskState` (``progress``, keyed by the
job), never in the executor, so that a checkpoint holds all of it:

* a tool-calling agent (ReAct): each step makes one model call; the calls it
  asks for run between steps (several at once when the model asks for them
  in parallel), their results join the conversation and the agent continues
  in the next step, until it answers without a call or reaches
  ``max_tool_steps``. Local models speak the documented text protocol
  (``<tool_call>{json}</tool_call>``); backends with native tool calls
  (``supports_native_tools``) use the API's ``tools``. A call the model got
  wrong (bad JSON, unknown tool, bad arguments) goes back to it as an error
  message and is counted in the trace;
* an interrupt (an ``interrupt`` node, :func:`interrupt` inside a function,
  or a tool that ``requires_approval``): the instance waits, the run saves
  and returns, and ``Runtime.resume`` hands the person's answer back.

An :class:`Executor` holds only the agents and functions it was built with.
"""

from __future__ import annotations

import contextvars
import json
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from societas.agents.agent import Agent
from societas.agents.llm.base import Completion, SamplingParams
from societas.agents.tools import (
    Tool,
    ToolCall,
    ToolResult,
    parse_tool_calls,
    tool_results_message,
    tools_system_prompt,
)

from .graph import Graph
from .run_state import GraphInterrupt, Job, NodeError, NodeOutcome, RunState, TaskState
from .scheduler import Scheduler, seed_for, stable_seed
from .trace import Trace, TraceEvent

__all__ = [
    "APPROVALS",
    "Executor",
    "ModelRequest",
    "NodeContext",
    "Plan",
    "StepResult",
    "SubgraphDriver",
    "dispatch",
    "interrupt",
]

APPROVALS = frozenset({"yes", "y", "approve", "approved", "ok", "true"})
"""Answers (case-insensitive) that approve a tool call waiting for a person; anything else refuses it."""


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
    payload: str | None = None  # what a router's Send delivered to this instance
    messages: list[tuple[str, str]] = field(default_factory=list)  # every (sender, text), repeats kept

    # ``inputs`` keeps one text per sender (the last); a reducer after a Send fan-out reads ``messages``.


@dataclass
class _ResumeSlot:
    values: list[Any]
    used: int = 0


_RESUME: contextvars.ContextVar[_ResumeSlot | None] = contextvars.ContextVar("societas_resume", default=None)


def interrupt(payload: Any) -> Any:
    """Pause the run for a person's answer; return that answer once the run is resumed.

    Call it inside a function node. The first time, it raises (the run saves
    its state and returns an ``interrupted`` result carrying ``payload``,
    which must be JSON-compatible); when ``Runtime.resume(thread, value)``
    runs the node again, the same call returns ``value``. A node may call it
    several times: the answers are handed back in order.
    """
    slot = _RESUME.get()
    if slot is None:
        raise RuntimeError("interrupt() is called outside a function node of a running graph")
    if slot.used < len(slot.values):
        value = slot.values[slot.used]
        slot.used += 1
        return value
    try:
        json.dumps(payload)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"interrupt payload must be JSON-compatible: {exc}") from None
    raise GraphInterrupt(payload)


@dataclass
class StepResult:
    """What a superstep produced, before anything becomes visible to other nodes."""

    outcomes: list[NodeOutcome] = field(default_factory=list)  # finished instances, in commit order
    events: list[tuple[int, TraceEvent]] = field(default_factory=list)  # tool-loop turns and tool calls
    carry: list[Job] = field(default_factory=list)  # instances that continue next step
    interrupts: list[tuple[Job, Any]] = field(default_factory=list)  # instances waiting for a person
    spent: list[tuple[int, int]] = field(default_factory=list)  # (task, tokens) of unfinished model calls


@dataclass
class ModelRequest:
    """One model call of a step, with where its completion goes (its executor, run and step result)."""

    job: Job
    llm: Any
    prompt: list[dict[str, Any]]
    params: SamplingParams
    tools: tuple[Tool, ...] = ()
    native: bool = False
    owner: Any = None
    run: Any = None
    res: Any = None


@dataclass
class Plan:
    """A superstep between its two halves: the model calls it needs, and what finishes it.

    ``children`` holds, per graph-node job, the handle of the subgraph's own
    step, whose model calls are among ``requests``: the calls of a parent and
    of every subgraph it runs share one batched call per model.
    """

    run: RunState
    jobs: list[Job]
    requests: list[ModelRequest]
    result: StepResult
    children: dict[str, Any] = field(default_factory=dict)


class SubgraphDriver(Protocol):
    """Runs a graph node's subgraph one superstep at a time inside the parent's steps."""

    def begin(self, run: RunState, job: Job) -> tuple[list[ModelRequest], Any]: ...

    def end(self, run: RunState, job: Job, handle: Any, res: StepResult) -> None: ...


def dispatch(requests: Sequence[ModelRequest]) -> None:
    """Send ``requests`` to their models: ONE ``generate`` call per model (and native tool set)."""
    groups: dict[tuple[int, tuple[str, ...] | None], list[ModelRequest]] = {}
    for r in requests:
        # Native tool calls travel with the request, so prompts with other tool sets go separately.
        key = (id(r.llm), tuple(t.name for t in r.tools) if r.native else None)
        groups.setdefault(key, []).append(r)
    for group in groups.values():
        llm = group[0].llm
        t0 = time.perf_counter()
        if group[0].native:
            outs = llm.generate([r.prompt for r in group], [r.params for r in group], tools=group[0].tools)
        else:
            outs = llm.generate([r.prompt for r in group], [r.params for r in group])
        dt = time.perf_counter() - t0
        if len(outs) != len(group):
            raise NodeError(
                f"LLM {getattr(llm, 'name', type(llm).__name__)!r} returned {len(outs)} results "
                f"for {len(group)} prompts"
            )
        counted: set[tuple[int, int]] = set()
        for r in group:
            if (id(r.run), r.job.run) not in counted:
                counted.add((id(r.run), r.job.run))
                r.run.tasks[r.job.run].batches += 1
        for r, comps in zip(group, outs):
            r.owner.agent_done(r.run, r, comps[0], dt, len(group), r.res)


def _inputs_from(job: Job) -> list[str]:
    return [s.split(" (")[0] for s, _ in job.inputs]


def _call_dict(c: ToolCall) -> dict[str, Any]:
    return {"id": c.id, "name": c.name, "arguments": c.arguments}


def _call_from(d: Mapping[str, Any]) -> ToolCall:
    return ToolCall(id=str(d["id"]), name=str(d["name"]), arguments=dict(d["arguments"]))


class Executor:
    """Runs the jobs of a superstep for one graph.

    ``agents`` maps agent node ids to their :class:`Agent`, ``functions``
    maps function and tool node ids to their callables, ``tools`` maps agent
    node ids to the tools they may call; ``scheduler`` says who receives each
    output and in which order outputs are committed.
    """

    def __init__(
        self,
        graph: Graph,
        agents: Mapping[str, Agent],
        functions: Mapping[str, Callable[[NodeContext], Any]],
        scheduler: Scheduler,
        tools: Mapping[str, Sequence[Tool]] | None = None,
        subgraphs: Mapping[str, SubgraphDriver] | None = None,
    ) -> None:
        self.graph = graph
        self.subgraphs = dict(subgraphs or {})
        self.agents = dict(agents)
        self.functions = dict(functions)
        self.scheduler = scheduler
        self.tools: dict[str, tuple[Tool, ...]] = {k: tuple(v) for k, v in (tools or {}).items() if v}

    def params_for(
        self, st: TaskState, job: Job, agent: Agent, cap: int | None, turn: int = 0
    ) -> SamplingParams:
        """The agent's sampling parameters for one job: seeded, capped to ``cap`` tokens, one sample."""
        p = agent.params
        upd: dict[str, Any] = {}
        if p.seed is None:
            seed = seed_for(st, job.node, job.round)
            if seed is not None:
                if turn or job.serial:
                    seed = stable_seed(seed, job.serial, turn)
                upd["seed"] = seed
        if cap is not None and p.max_new_tokens > cap:
            upd["max_new_tokens"] = max(1, cap)
        if p.n != 1:
            upd["n"] = 1
        return p.model_copy(update=upd) if upd else p

    # -- a superstep ----------------------------------------------------------------
    def superstep(self, run: RunState, jobs: Sequence[Job], caps: Mapping[int, int | None]) -> StepResult:
        """Execute ``jobs`` (one batched call per LLM, then tools and functions).

        ``caps`` maps a task index to the most tokens each of its
        generations may produce in this step. Nothing is committed: the
        outcomes become visible when the caller hands them to the scheduler.
        """
        plan = self.plan(run, jobs, caps)
        dispatch(plan.requests)
        return self.finish(plan)

    def plan(self, run: RunState, jobs: Sequence[Job], caps: Mapping[int, int | None]) -> Plan:
        """The first half of a step: the model calls its agents (and subgraphs) need."""
        res = StepResult()
        requests: list[ModelRequest] = []
        plan = Plan(run, list(jobs), requests, res)
        for j in jobs:
            if j.node in self.agents:
                self._plan_agent(run, j, caps.get(j.run), requests, res)
            elif j.node in self.subgraphs:
                child_requests, handle = self.subgraphs[j.node].begin(run, j)
                requests.extend(child_requests)
                plan.children[j.key] = handle
        return plan

    def finish(self, plan: Plan) -> StepResult:
        """The second half, once the model calls are answered: Python nodes, interrupts, subgraph steps."""
        run, res = plan.run, plan.result
        for j in plan.jobs:
            if j.node in self.agents:
                continue
            if j.node in self.subgraphs:
                self.subgraphs[j.node].end(run, j, plan.children.get(j.key), res)
                continue
            kind = self.graph.node(j.node).kind
            if kind == "interrupt":
                self._run_interrupt_node(run, j, res)
            else:
                self._run_function(run, j, res)
        res.outcomes = self.scheduler.commit_order(res.outcomes)
        return res

    # -- agents ------------------------------------------------------------------------
    def _plan_agent(
        self, run: RunState, j: Job, cap: int | None, requests: list[ModelRequest], res: StepResult
    ) -> None:
        st = run.tasks[j.run]
        agent = self.agents[j.node]
        tools = self.tools.get(j.node, ())
        native = bool(tools) and bool(getattr(agent.llm, "supports_native_tools", False))
        prog = st.progress.get(j.key)
        if prog is not None and prog.get("pending"):
            # Tool calls waiting for a person's approval: no model call this step.
            self._finish_tool_turn(run, j, prog, res)
            return
        if prog is None:
            prompt: list[dict[str, Any]] = [dict(m) for m in agent.build_prompt(st.task, j.inputs)]
            if tools and not native:
                text = tools_system_prompt(tools)
                if prompt and prompt[0]["role"] == "system":
                    prompt[0]["content"] = f"{prompt[0]['content']}\n\n{text}".strip()
                else:
                    prompt.insert(0, {"role": "system", "content": text})
            turn = 0
        else:
            prompt = [dict(m) for m in prog["messages"]]
            turn = int(prog["turns"])
        params = self.params_for(st, j, agent, cap, turn)
        requests.append(ModelRequest(j, agent.llm, prompt, params, tools, native, self, run, res))

    def _agent_event(
        self, run: RunState, r: ModelRequest, c: Completion, dt: float, batch: int, **meta: Any
    ) -> TraceEvent:
        ns = self.graph.node(r.job.node)
        return TraceEvent(
            step=run.step,
            round=r.job.round,
            sender=r.job.node,
            receivers=self.scheduler.receivers(r.job.node, r.job.round),
            kind="agent",
            role=ns.role,
            prompt=r.prompt,
            output=c.text,
            prompt_tokens=c.usage.prompt_tokens,
            completion_tokens=c.usage.completion_tokens,
            latency_s=dt,
            batch_size=batch,
            llm=getattr(r.llm, "name", type(r.llm).__name__),
            finish_reason=c.finish_reason,
            meta={"inputs_from": _inputs_from(r.job), **meta},
        )

    def agent_done(
        self, run: RunState, r: ModelRequest, c: Completion, dt: float, batch: int, res: StepResult
    ) -> None:
        j = r.job
        st = run.tasks[j.run]
        if not r.tools:
            ev = self._agent_event(run, r, c, dt, batch)
            res.outcomes.append(NodeOutcome(j, c.text, ev, tokens=c.usage.total_tokens))
            return
        prog = st.progress.get(j.key) or {"turns": 0, "tool_errors": 0}
        turn = int(prog["turns"])
        if r.native:
            calls = list(getattr(c, "tool_calls", None) or [])
            errors = list(getattr(c, "tool_call_errors", None) or [])
            content = c.text
        else:
            parsed = parse_tool_calls(c.text, {t.name: t for t in r.tools})
            calls, errors, content = parsed.calls, parsed.errors, parsed.content
        limit = self.graph.node(j.node).max_tool_steps
        if (not calls and not errors) or turn + 1 >= limit:
            meta: dict[str, Any] = {"turn": turn}
            if turn:
                meta["tool_errors"] = int(prog["tool_errors"])
            if calls or errors:
                meta["tool_steps_exhausted"] = True
            ev = self._agent_event(run, r, c, dt, batch, **meta)
            st.progress.pop(j.key, None)
            text = content if (calls or errors) else c.text
            res.outcomes.append(NodeOutcome(j, text, ev, tokens=c.usage.total_tokens))
            return
        ev = self._agent_event(
            run,
            r,
            c,
            dt,
            batch,
            partial=True,
            turn=turn,
            tool_calls=[_call_dict(x) for x in calls],
            tool_call_errors=errors,
        )
        ev.receivers = []
        res.events.append((j.run, ev))
        res.spent.append((j.run, c.usage.total_tokens))
        assistant: dict[str, Any] = {"role": "assistant", "content": c.text}
        if r.native:
            assistant["tool_calls"] = [_call_dict(x) for x in calls]
        prog = {
            "messages": [*r.prompt, assistant],
            "turns": turn + 1,
            "tool_errors": int(prog["tool_errors"]) + len(errors),
            "pending": [_call_dict(x) for x in calls],
            "errors": errors,
            "native": r.native,
            "approved": {},
        }
        st.progress[j.key] = prog
        self._finish_tool_turn(run, j, prog, res)

    def _finish_tool_turn(self, run: RunState, j: Job, prog: dict[str, Any], res: StepResult) -> None:
        """Run the calls of the model's last turn (asking a person first where a tool requires it)."""
        st = run.tasks[j.run]
        by_name = {t.name: t for t in self.tools.get(j.node, ())}
        calls = [_call_from(d) for d in prog["pending"]]
        approved: dict[str, Any] = prog.setdefault("approved", {})
        answers = st.resume.pop(j.key, None)
        waiting = [c for c in calls if by_name.get(c.name) and by_name[c.name].requires_approval]
        waiting = [c for c in waiting if c.id not in approved]
        if waiting and answers:
            for c, value in zip(waiting, answers):
                approved[c.id] = value
            waiting = [c for c in waiting if c.id not in approved]
        if waiting:
            c = waiting[0]
            payload = {"node": j.node, "tool": c.name, "arguments": c.arguments, "call_id": c.id}
            res.interrupts.append((j, payload))
            return
        results = self._run_tools(j, calls, by_name, approved)
        for c, result in zip(calls, results):
            res.events.append(
                (
                    j.run,
                    TraceEvent(
                        step=run.step,
                        round=j.round,
                        sender=j.node,
                        receivers=[j.node],
                        kind="tool_call",
                        role=None,
                        prompt=[],
                        output=result.content,
                        latency_s=0.0,
                        meta={
                            "tool": c.name,
                            "arguments": c.arguments,
                            "call_id": c.id,
                            "tool_error": result.error,
                            "approval": approved.get(c.id),
                        },
                    ),
                )
            )
        prog["tool_errors"] = int(prog["tool_errors"]) + sum(1 for x in results if x.error)
        messages = list(prog["messages"])
        if prog.get("native"):
            messages.extend(
                {"role": "tool", "tool_call_id": x.call_id, "name": x.name, "content": x.content}
                for x in results
            )
            if prog["errors"]:
                messages.append({"role": "user", "content": "\n".join(prog["errors"])})
        else:
            messages.append(dict(tool_results_message(results, prog["errors"])))
        st.progress[j.key] = {
            "messages": messages,
            "turns": prog["turns"],
            "tool_errors": prog["tool_errors"],
        }
        res.carry.append(j)

    def _run_tools(
        self, j: Job, calls: list[ToolCall], by_name: Mapping[str, Tool], approved: Mapping[str, Any]
    ) -> list[ToolResult]:
        def one(c: ToolCall) -> ToolResult:
            t = by_name.get(c.name)
            if t is None:
                known = ", ".join(sorted(by_name)) or "none"
                return ToolResult(c.id, c.name, f"Error: unknown tool {c.name!r} (tools: {known})", True)
            if t.requires_approval:
                answer = approved.get(c.id)
                if str(answer).strip().lower() not in APPROVALS:
                    return ToolResult(
                        c.id,
                        c.name,
                        f"Error: the person did not approve this call (answer: {answer!r})",
                        True,
                    )
            return t.run(c)

        if len(calls) <= 1:
            return [one(c) for c in calls]
        with ThreadPoolExecutor(max_workers=min(8, len(calls))) as pool:
            return list(pool.map(one, calls))

    # -- Python nodes ----------------------------------------------------------------------
    def _run_function(self, run: RunState, j: Job, res: StepResult) -> None:
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
            payload=j.payload,
            messages=list(j.inputs),
        )
        slot = _ResumeSlot(list(st.resume.get(j.key, [])))
        token = _RESUME.set(slot)
        t0 = time.perf_counter()
        try:
            value = self.functions[j.node](ctx)
        except GraphInterrupt as gi:
            res.interrupts.append((j, gi.payload))
            return
        except Exception as exc:
            raise NodeError(
                f"{ns.kind} node {j.node!r} (round {j.round}) failed: {type(exc).__name__}: {exc}"
            ) from exc
        finally:
            _RESUME.reset(token)
        st.resume.pop(j.key, None)
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
            meta={
                "inputs_from": _inputs_from(j),
                **({"resumed": slot.values} if slot.values else {}),
            },
        )
        res.outcomes.append(NodeOutcome(j, text, ev))

    def _run_interrupt_node(self, run: RunState, j: Job, res: StepResult) -> None:
        st = run.tasks[j.run]
        ns = self.graph.node(j.node)
        answers = st.resume.pop(j.key, None)
        if not answers:
            payload = {
                "node": j.node,
                "question": ns.prompt or f"{j.node}: your answer?",
                "inputs": dict(j.inputs) if j.payload is None else {"payload": j.payload},
            }
            res.interrupts.append((j, payload))
            return
        value = answers[0]
        text = value if isinstance(value, str) else json.dumps(value)
        ev = TraceEvent(
            step=run.step,
            round=j.round,
            sender=j.node,
            receivers=self.scheduler.receivers(j.node, j.round),
            kind="interrupt",
            role=ns.role,
            prompt=[],
            output=text,
            meta={"inputs_from": _inputs_from(j), "question": ns.prompt},
        )
        res.outcomes.append(NodeOutcome(j, text, ev))

    def record(self, run: RunState, k: int, event: TraceEvent) -> None:
        """Append an event to task ``k``'s trace and pass it to the run's ``on_event``."""
        run.tasks[k].trace.append(event)
        if run.on_event is not None:
            run.on_event(event)
