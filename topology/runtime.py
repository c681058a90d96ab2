"""The Runtime: run a Graph of agents in supersteps, batching LLM calls.

Execution model (after Pregel and LangGraph's loop, plus batching). Two
models, chosen by the spec's ``mode`` (``auto``: ``messages`` when the graph
has routers, else ``rounds``):

* ``rounds``. A node *instance* is a node at a round. Nodes outside cycles
  run once; nodes of a cyclic component (debate, society) run
  ``spec.rounds`` times, or until the spec's ``until`` condition holds after
  a round. An instance is ready when every predecessor outside its
  component has finished all its rounds, and every predecessor inside its
  component has finished the previous round. Entry nodes see the task alone.
* ``messages``. The entry nodes run first; an output goes to the node's
  static successors and to the targets its router picks (a function, an
  LLM, or a learned policy: :mod:`societas.topology.routing`); a node runs in
  the superstep after messages reach it, and a router's ``Send`` makes an
  instance of its own. The run ends when no message is left, when ``until``
  holds, or at ``max_steps``.

Either way:

* A superstep runs every ready instance. Outputs become visible only after
  the step, so instances of one step never see each other.
* All agent prompts of a step that share an LLM object go to it in ONE
  batched ``generate`` call (per-node sampling parameters travel with each
  prompt) — first turns and tool-loop continuations alike.
  :meth:`Runtime.run_many` goes further: it advances several tasks in
  lockstep, so a step of every task shares the same calls.
* Budgets (total tokens, agent calls) are checked before each step; a step
  that would pass the call budget runs only the instances that fit, and its
  generation lengths are capped to the tokens left; then the run stops with
  ``stopped`` naming the budget.
* Every instance becomes a :class:`~societas.topology.trace.TraceEvent`
  holding the exact prompt, the output, tokens and latency; router
  decisions, tool calls and interrupts are events too.
* With a checkpointer and a thread id, the state of the run is saved after
  every step: a killed run resumes from its last completed step
  (:meth:`Runtime.resume`), an interrupt waits there for a person's answer,
  and :meth:`Runtime.fork` starts a new thread from any saved step.
* :meth:`Runtime.stream` yields the run's events as the steps complete.

Function and tool nodes call Python: ``fn(ctx: NodeContext) -> str``.

The work is split: :mod:`~societas.topology.scheduler` decides what runs in
each superstep and when a run stops, :mod:`~societas.topology.executor` runs a
superstep, and the state of a run lives in a
:class:`~societas.topology.run_state.RunState` made per call, so one Runtime
may serve several threads at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import json
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from societas.agents import llm as llm_backends
from societas.agents.agent import Agent
from societas.agents.llm import LLM
from societas.agents.llm.base import SamplingParams
from societas.agents.tools import Tool, calculator, python_tool

from .checkpoint import Checkpoint, Checkpointer, CheckpointError, ThreadNotFound
from .conditions import Condition, ConditionView, condition_from_data
from .executor import Executor, ModelRequest, NodeContext, Plan, StepResult, dispatch
from .graph import Graph
from .llm_router import parse_route_answer, retry_prompt, route_prompt
from .routing import END, OutputHistory, RouteContext, RoutingError, normalize_decision
from .run_state import Budget, NodeError, NodeOutcome, RunState, StopReason, TaskState
from .scheduler import MessageScheduler, Scheduler, stable_seed
from .spec import GraphSpec, RouterSpec
from .trace import Trace, TraceEvent

log = logging.getLogger(__name__)

__all__ = ["NodeContext", "NodeError", "RunEvent", "RunResult", "Runtime"]

RunEventType = Literal[
    "step_start", "node_start", "node_output", "router", "tool_call", "tool_result", "interrupt", "run_end"
]


@dataclass(frozen=True)
class RunEvent:
    """One thing that happened in a streamed run (:meth:`Runtime.stream`).

    ``type`` says what: a superstep starts (``data["nodes"]`` lists its
    instances), a node starts or produces its output (``event`` holds its
    trace event), a router decides, an agent asks for tool calls
    (``tool_call``, the model's turn) and gets their results
    (``tool_result``, one per call), the run pauses for a person
    (``interrupt``, ``data["payload"]``) or ends (``run_end``,
    ``data["result"]`` holds the :class:`RunResult`).
    """

    type: RunEventType
    task: int
    step: int
    node: str | None = None
    event: TraceEvent | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Step:
    """A superstep between its halves (see :meth:`Runtime._begin_step`)."""

    plan: Plan
    tasks: list[int]
    events: list[RunEvent]
    t0: float


@dataclass
class RunResult:
    task: str
    output: str | None  # the final node's last output (None if the run stopped before it)
    outputs: dict[str, list[str]]  # node id -> output of each round
    trace: Trace
    stopped: StopReason | None = None  # None, a budget, "max_steps", "condition" or "interrupted"
    metrics: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    interrupt: Any = None  # what the run waits for a person to answer (stopped == "interrupted")
    thread: str | None = None  # the checkpoint thread, when the run is saved
    ended_by: str | None = None  # what ended a message-driven run or a loop ("no messages left", a condition)

    @property
    def totals(self) -> dict[str, Any]:
        return self.trace.totals().to_dict()

    @property
    def interrupted(self) -> bool:
        return self.stopped == "interrupted"

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "output": self.output,
            "stopped": self.stopped,
            "interrupt": self.interrupt,
            "thread": self.thread,
            "ended_by": self.ended_by,
            "metrics": self.metrics,
            "totals": self.totals,
        }


BUILTIN_TOOLS: dict[str, Callable[[], Tool]] = {"calculator": calculator, "python": python_tool}
"""Tools an agent node may name without giving them to the Runtime."""


def graph_fingerprint(spec: GraphSpec) -> str:
    """A short hash of a spec: a checkpoint saved by one graph is refused by another."""
    text = json.dumps(spec.to_dict(), sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


class Runtime:
    """Runs a :class:`Graph`.

    ``llms`` maps the spec's LLM names to backend objects (overriding the
    URIs in ``spec.llms``); ``llm`` replaces every model of the graph (the
    CLI's ``--llm``). ``functions`` maps names used by function/tool nodes,
    function routers and function conditions to callables (otherwise
    ``module:attr`` is imported). ``tools`` maps the tool names agent nodes
    list to :class:`~societas.agents.tools.Tool` objects or plain typed
    functions (``calculator`` and ``python`` are built in). ``routers`` maps
    the names routers of kind ``router`` use to objects with ``route(ctx)``.
    ``checkpointer`` saves the run after every step for runs given a
    ``thread``. With ``seed`` set, each agent call samples with a seed
    derived from (seed, task index, node, round), so a rerun with the same
    LLM reproduces the run.

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
        functions: Mapping[str, Callable[..., Any]] | None = None,
        tools: Mapping[str, Tool | Callable[..., Any]] | Sequence[Tool] | None = None,
        routers: Mapping[str, Any] | None = None,
        checkpointer: Checkpointer | None = None,
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
        self.checkpointer = checkpointer
        self.fingerprint = graph_fingerprint(spec)
        self._spec_data = spec.to_dict(
            compact=True
        )  # saved with checkpoints, so a thread resumes from the file alone
        self._functions = dict(functions or {})
        self._llm_override = llm
        self._llm_map = dict(llms or {})
        self._llm_objs = self._resolve_llms(self._llm_map, llm)
        self._tool_registry = self._tool_map(tools)
        self._router_objs = dict(routers or {})
        self._agents: dict[str, Agent] = {}
        self._fns: dict[str, Callable[[NodeContext], Any]] = {}
        self._agent_tools: dict[str, list[Tool]] = {}
        self._subgraphs: dict[str, _SubgraphDriver] = {}
        for nid in self.graph.nodes:
            ns = self.graph.node(nid)
            if ns.kind == "agent":
                self._agents[nid] = self._make_agent(nid)
                self._agent_tools[nid] = [self._resolve_tool(nid, i, t) for i, t in enumerate(ns.tools)]
            elif ns.kind == "graph":
                self._subgraphs[nid] = _SubgraphDriver(nid, self._make_child(nid))
            elif ns.kind in ("function", "tool"):
                self._fns[nid] = self._resolve_function(nid, ns.function)
        self._routes: dict[str, Any] = {}  # source -> a router function or a router object
        self._route_descriptions: dict[str, dict[str, str]] = {}  # what each router's targets are for
        for r in spec.routers:
            desc: dict[str, str] = {}
            for t in r.targets:
                if t in r.labels:
                    desc[t] = r.labels[t]
                elif t != END:
                    ns = self.graph.node(t)
                    desc[t] = ns.meta.get("description") or ns.role or ns.kind
            self._route_descriptions[r.source] = desc
        for r in spec.routers:
            if r.kind == "function":
                self._routes[r.source] = self._resolve_function(f"router on {r.source}", r.function)
            elif r.kind == "router":
                self._routes[r.source] = self._resolve_router(r)
        self._until: Condition | None = None
        if spec.until is not None:
            self._until = condition_from_data(spec.until, resolve=self._resolve_ref)
        # Built once and never written afterwards: what a run changes lives in its RunState.
        sched_cls = MessageScheduler if self.graph.mode == "messages" else Scheduler
        self._scheduler = sched_cls(self.graph, self._agents)
        for driver in self._subgraphs.values():
            driver.parent_scheduler = self._scheduler
        self._executor = Executor(
            self.graph, self._agents, self._fns, self._scheduler, self._agent_tools, self._subgraphs
        )

    # -- set-up --------------------------------------------------------------
    def _resolve_llms(self, llms: Mapping[str, LLM | str], override: LLM | str | None) -> dict[str, LLM]:
        spec = self.graph.spec
        needed = {self.graph.node(n).llm for n in self.graph.nodes if self.graph.node(n).kind == "agent"}
        needed |= {r.llm for r in spec.routers if r.kind == "llm"}
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

    def _resolve_ref(self, ref: str) -> Callable[..., Any]:
        """A name given to the Runtime, else ``module:attr`` imported."""
        if ref in self._functions:
            return self._functions[ref]
        mod, colon, attr = ref.rpartition(":")
        if not colon:
            raise ValueError(f"{ref!r} is not given to the Runtime (functions=...) and is not MODULE:ATTR")
        try:
            obj = getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"cannot import {ref!r}: {exc}") from None
        return obj

    def _resolve_function(self, nid: str, ref: str | None) -> Callable[..., Any]:
        if ref is None:
            raise ValueError(f"node {nid!r}: function/tool node needs 'function'")
        try:
            fn = self._resolve_ref(ref)
        except ValueError as exc:
            raise ValueError(f"node {nid!r}: function {exc}") from None
        if not callable(fn):
            raise ValueError(f"node {nid!r}: {ref!r} is not callable")
        return fn

    def _resolve_router(self, r: RouterSpec) -> Any:
        assert r.router is not None
        obj = self._router_objs.get(r.router)
        if obj is None:
            try:
                obj = self._resolve_ref(r.router) if ":" in r.router else None
            except ValueError as exc:
                raise ValueError(f"router on {r.source!r}: {exc}") from None
        if obj is None:
            known = ", ".join(sorted(self._router_objs)) or "none"
            raise ValueError(
                f"router on {r.source!r}: no router named {r.router!r} was given to the Runtime "
                f"(routers=...; given: {known})"
            )
        if not (hasattr(obj, "route") or hasattr(obj, "route_batch")):
            raise ValueError(
                f"router on {r.source!r}: {r.router!r} is a {type(obj).__name__} without route(ctx) or route_batch(ctxs)"
            )
        return obj

    @staticmethod
    def _tool_map(tools: Mapping[str, Tool | Callable[..., Any]] | Sequence[Tool] | None) -> dict[str, Tool]:
        out: dict[str, Tool] = {}
        if tools is None:
            return out
        items = tools.items() if isinstance(tools, Mapping) else [(t.name, t) for t in tools]
        for name, t in items:
            if not isinstance(t, Tool):
                if not callable(t):
                    raise TypeError(f"tool {name!r} is a {type(t).__name__}, not a Tool or a function")
                t = Tool.from_function(t, name=name)
            out[name] = t
        return out

    def _resolve_tool(self, nid: str, i: int, ref: str) -> Tool:
        if ref in self._tool_registry:
            return self._tool_registry[ref]
        if ref in BUILTIN_TOOLS:
            return BUILTIN_TOOLS[ref]()
        if ":" not in ref:
            known = ", ".join(sorted({*self._tool_registry, *BUILTIN_TOOLS}))
            raise ValueError(
                f"node {nid!r} tools[{i}]: unknown tool {ref!r} (known: {known}; or MODULE:ATTR)"
            )
        obj = self._resolve_ref(ref)
        if isinstance(obj, Tool):
            return obj
        if callable(obj):
            return Tool.from_function(obj)
        raise ValueError(f"node {nid!r} tools[{i}]: {ref!r} is not a Tool or a function")

    def _make_child(self, nid: str) -> Runtime:
        ns = self.graph.node(nid)
        src = ns.graph
        if isinstance(src, dict):
            child_spec = GraphSpec.from_data(src, source=f"nodes[{nid}].graph")
        else:
            assert isinstance(src, str)
            child_spec = GraphSpec.from_file(src)
        return Runtime(
            child_spec,
            llms=self._llm_map,
            llm=self._llm_override,
            functions=self._functions,
            tools=self._tool_registry,
            routers=self._router_objs,
            seed=self.seed,
        )

    @property
    def agents(self) -> dict[str, Agent]:
        return dict(self._agents)

    # -- running -----------------------------------------------------------------
    def run(self, task: str, *, trace_path: str | Path | None = None, thread: str | None = None) -> RunResult:
        """Run the graph on one task; with ``thread`` (and a checkpointer) every step is saved."""
        res = self.run_many([task], threads=None if thread is None else [thread])[0]
        if trace_path is not None:
            res.trace.save_jsonl(trace_path)
        return res

    def run_many(
        self,
        tasks: Sequence[str],
        *,
        seeds: Sequence[int] | None = None,
        threads: Sequence[str] | None = None,
    ) -> list[RunResult]:
        """Run the graph on several tasks in lockstep, batching across them.

        ``seeds`` (one int per task) gives each run its own sampling seed in
        place of the Runtime's ``seed`` and the run's position in ``tasks``:
        a run then samples the same way whichever batch it is part of (what
        rollouts split over several workers need). ``threads`` (one id per
        task) saves each task's run under that thread id.
        """
        run = self._start(tasks, seeds, threads)
        for ev in self._drive(run):
            del ev
        return [self._result(run, k) for k in range(len(run.tasks))]

    def stream(self, task: str, *, thread: str | None = None) -> Iterator[RunEvent]:
        """Run the graph on one task, yielding :class:`RunEvent` objects as the steps complete.

        The last event is ``run_end``, whose ``data["result"]`` is the :class:`RunResult`.
        """
        run = self._start([task], None, None if thread is None else [thread])
        yield from self._drive(run)
        yield RunEvent("run_end", 0, run.step, data={"result": self._result(run, 0)})

    async def arun(self, task: str, *, thread: str | None = None) -> RunResult:
        """:meth:`run` for asyncio code: the run goes on in a worker thread.

        The requests of a step go to an OpenAI-compatible server together (the
        backend keeps up to its ``max_concurrency`` in flight), so the
        server batches them itself.
        """
        return await asyncio.to_thread(self.run, task, thread=thread)

    async def astream(self, task: str, *, thread: str | None = None) -> AsyncIterator[RunEvent]:
        """:meth:`stream` for asyncio code: events arrive as the worker thread produces them."""
        q: queue.Queue[tuple[str, Any]] = queue.Queue()

        def work() -> None:
            try:
                for ev in self.stream(task, thread=thread):
                    q.put(("event", ev))
            except BaseException as exc:  # handed to the consumer, which re-raises it
                q.put(("error", exc))
            q.put(("done", None))

        worker = threading.Thread(target=work, name="societas-astream", daemon=True)
        worker.start()
        while True:
            kind, item = await asyncio.to_thread(q.get)
            if kind == "done":
                break
            if kind == "error":
                raise item
            yield item

    # -- durable runs --------------------------------------------------------------
    def _need_checkpointer(self) -> Checkpointer:
        if self.checkpointer is None:
            raise ValueError("this Runtime has no checkpointer: pass checkpointer=SqliteCheckpointer(path)")
        return self.checkpointer

    def checkpoints(self, thread: str) -> list[Checkpoint]:
        """The saved steps of ``thread``, oldest first."""
        return self._need_checkpointer().list(thread)

    def resume(self, thread: str, value: Any = None, *, stream: bool = False) -> RunResult:
        """Continue ``thread`` from its last saved step.

        A run killed mid-way goes on from the last completed step (no
        completed node runs again). A run waiting on an interrupt needs
        ``value``, the person's answer: the interrupted node runs again and
        gets it. A finished run returns its result unchanged.
        """
        run = self._load(thread, value)
        for ev in self._drive(run):
            del ev
        return self._result(run, 0)

    def stream_resume(self, thread: str, value: Any = None) -> Iterator[RunEvent]:
        """:meth:`resume`, yielding events as :meth:`stream` does."""
        run = self._load(thread, value)
        yield from self._drive(run)
        yield RunEvent("run_end", 0, run.step, data={"result": self._result(run, 0)})

    def fork(
        self,
        thread: str,
        step: int,
        new_thread: str,
        *,
        state: Mapping[str, Any] | None = None,
        outputs: Mapping[str, str] | None = None,
    ) -> Checkpoint:
        """Start ``new_thread`` from ``thread``'s checkpoint at ``step``, edited ("time travel").

        ``state`` updates the run's scratch state; ``outputs`` replaces the
        last output of the named nodes (and the messages they sent that are
        still waiting). Resume the new thread with :meth:`resume`.
        """
        cp = self._need_checkpointer()
        ck = cp.get(thread, step, expect_graph=self.fingerprint, expect_name=self.graph.spec.name)
        data = self._whole_state(cp, thread, ck)
        task = data["task"]
        if state:
            task["state"].update(state)
        for node, text in (outputs or {}).items():
            if node not in self.graph:
                raise KeyError(f"fork: unknown node {node!r} (nodes: {', '.join(self.graph.nodes)})")
            if not task["outputs"].get(node):
                raise ValueError(f"fork: node {node!r} has no output at step {step} of thread {thread!r}")
            old = task["outputs"][node][-1]
            task["outputs"][node][-1] = text
            for msgs in task["inbox"].values():
                for m in msgs:
                    if m[0] == node and m[1] == old:
                        m[1] = text
        meta = {**ck.meta, "spec": self._spec_data, "forked_from": [thread, step]}
        return cp.put(new_thread, step, self.fingerprint, data, meta)

    def _load(self, thread: str, value: Any) -> RunState:
        cp = self._need_checkpointer()
        ck = cp.latest(thread, expect_graph=self.fingerprint, expect_name=self.graph.spec.name)
        data = self._whole_state(cp, thread, ck)
        st = TaskState.from_dict(0, data["task"], self.graph.nodes, self.graph.spec.name)
        st.events_saved = len(st.trace.events)
        st.last_saved_step = int(data["step"])
        st.progress_saved = (ck.step, int(ck.state["task"].get("events_base", 0)), ck.state.get("prev_step"))
        st.message_driven = isinstance(self._scheduler, MessageScheduler)
        if st.stopped == "interrupted":
            if value is None:
                raise ValueError(
                    f"thread {thread!r} waits for an answer to {json.dumps(st.interrupt['payload'])}: "
                    "resume it with a value"
                )
            key = st.interrupt["job"]
            st.resume.setdefault(key, []).append(value)
            st.stopped = None
            st.interrupt = None
        elif value is not None:
            raise ValueError(f"thread {thread!r} is not waiting on an interrupt; resume it without a value")
        run = RunState(
            tasks=[st],
            budget=Budget(max_tokens=self.max_tokens, max_calls=self.max_calls),
            on_event=self.on_event,
            step=int(data["step"]) + 1,
            threads=[thread],
        )
        log.info("resuming thread %r after step %d", thread, data["step"])
        return run

    def _whole_state(self, cp: Checkpointer, thread: str, ck: Checkpoint) -> dict[str, Any]:
        """``ck``'s state with the whole trace: the events of the earlier checkpoints it points back to."""
        data = json.loads(json.dumps(ck.state))
        segments = [data["task"]["events"]]
        base = int(data["task"].get("events_base", 0))
        prev = data.get("prev_step")
        while base > 0:
            if prev is None:
                raise CheckpointError(
                    f"thread {thread!r}: step {ck.step} lacks the checkpoint its trace continues"
                )
            earlier = cp.get(thread, int(prev)).state
            seg_base = int(earlier["task"].get("events_base", 0))
            seg = earlier["task"]["events"][: base - seg_base]
            if seg_base + len(seg) != base:
                raise CheckpointError(
                    f"thread {thread!r}: the trace saved at step {prev} ends at event {seg_base + len(seg)}, "
                    f"not {base} where step {ck.step} continues it"
                )
            segments.append(seg)
            base, prev = seg_base, earlier.get("prev_step")
        data["task"]["events"] = [e for seg in reversed(segments) for e in seg]
        data["task"]["events_base"] = 0
        data["prev_step"] = None
        return data

    def _save(self, run: RunState, k: int, step: int | None = None) -> None:
        thread = run.threads[k] if run.threads else None
        if thread is None:
            return
        st = run.tasks[k]
        cp = self._need_checkpointer()
        step = run.step if step is None else step
        # Each checkpoint holds the trace events since the previous one and points back to it;
        # saving a step again (the end of a run) keeps the base and the pointer it had.
        saved = st.progress_saved if st.progress_saved and st.progress_saved[0] == step else None
        base, prev = (saved[1], saved[2]) if saved else (st.events_saved, st.last_saved_step)
        state = {"task": st.to_dict(events_from=base), "step": step, "prev_step": prev}
        meta = {
            "graph_name": self.graph.spec.name,
            "finished": st.finished(),
            "stopped": st.stopped,
            "interrupted": st.stopped == "interrupted",
        }
        if prev is None:
            meta["spec"] = self._spec_data  # once per thread, so that it resumes from the file alone
        cp.put(thread, step, self.fingerprint, state, meta)
        st.progress_saved = (step, base, prev)
        st.events_saved = len(st.trace.events)
        st.last_saved_step = step

    # -- the loop --------------------------------------------------------------------
    def _start(
        self, tasks: Sequence[str], seeds: Sequence[int] | None, threads: Sequence[str] | None
    ) -> RunState:
        if isinstance(tasks, str):
            raise TypeError("run_many takes a list of tasks; use run() for one")
        if seeds is not None:
            seeds = list(seeds)
            if len(seeds) != len(tasks):
                raise ValueError(f"seeds has {len(seeds)} entries for {len(tasks)} tasks")
            if not all(isinstance(x, int) and not isinstance(x, bool) for x in seeds):
                raise TypeError("seeds must be integers")
        thread_list: list[str | None] = [None] * len(tasks)
        if threads is not None:
            threads = list(threads)
            if len(threads) != len(tasks):
                raise ValueError(f"threads has {len(threads)} entries for {len(tasks)} tasks")
            if not all(isinstance(t, str) and t for t in threads):
                raise TypeError("thread ids must be non-empty strings")
            if len(set(threads)) != len(threads):
                raise ValueError("thread ids must differ between the tasks of one run")
            cp = self._need_checkpointer()
            for t in threads:
                try:
                    cp.latest(t)
                except ThreadNotFound:
                    continue
                raise ValueError(
                    f"thread {t!r} already holds a run: continue it with resume({t!r}), branch it with "
                    f"fork(), or delete it first (checkpointer.delete({t!r}))"
                )
            thread_list = list(threads)
        run = self._scheduler.start(
            tasks,
            budget=Budget(max_tokens=self.max_tokens, max_calls=self.max_calls),
            seed=self.seed,
            seeds=seeds,
            on_event=self.on_event,
        )
        run.threads = thread_list
        return run

    def _drive(self, run: RunState) -> Iterator[RunEvent]:
        """Run supersteps until every task has finished, stopped or paused; yield what happens."""
        ran: set[int] = set()
        while True:
            step = self._begin_step(run)
            if step is None:
                break
            yield from step.events
            dispatch(step.plan.requests)
            yield from self._end_step(run, step)
            ran.update(step.tasks)
        # A message-driven task found idle has ended after its last saved step: mark that step finished.
        for k, st in enumerate(run.tasks):
            if k in ran and st.ended and run.threads and run.threads[k] is not None:
                self._save(run, k, run.step - 1)

    def _begin_step(self, run: RunState) -> _Step | None:
        """The first half of a superstep: what runs, and the model calls it needs (None: nothing runs)."""
        jobs = self._scheduler.next_jobs(run)
        if not jobs:
            return None
        in_step = sorted({j.run for j in jobs})
        events = [
            RunEvent("step_start", k, run.step, data={"nodes": [j.key for j in jobs if j.run == k]})
            for k in in_step
        ]
        events += [
            RunEvent("node_start", j.run, run.step, node=j.node, data={"instance": j.key}) for j in jobs
        ]
        t_step = time.perf_counter()
        plan = self._executor.plan(run, jobs, self._scheduler.token_caps(run, jobs))
        return _Step(plan, in_step, events, t_step)

    def _end_step(self, run: RunState, step: _Step) -> Iterator[RunEvent]:
        """The second half, once its model calls are answered: commit, route, check conditions, save."""
        result = self._executor.finish(step.plan)
        yield from self._commit(run, result)
        for k in step.tasks:
            st = run.tasks[k]
            st.steps += 1
            self._check_until(run, k, step.t0)
            self._save(run, k)
        run.step += 1

    def _commit(self, run: RunState, result: StepResult) -> Iterator[RunEvent]:
        for k, ev in result.events:
            self._executor.record(run, k, ev)
            kind: RunEventType = "tool_result" if ev.kind == "tool_call" else "tool_call"
            yield RunEvent(kind, k, run.step, node=ev.sender, event=ev)
        for k, tokens in result.spent:
            run.tasks[k].calls_used += 1
            run.tasks[k].tokens_used += tokens
        routed = self._route(run, result.outcomes)
        # Writes become visible only now, after the whole step (Pregel semantics).
        for outcome in result.outcomes:
            choices, router_ev = routed.get(id(outcome), ([], None))
            if router_ev is not None:
                outcome.event.receivers = list(
                    dict.fromkeys([*outcome.event.receivers, *router_ev.receivers])
                )
            self._scheduler.complete(run, outcome, choices)
            self._executor.record(run, outcome.job.run, outcome.event)
            yield RunEvent(
                "node_output", outcome.job.run, run.step, node=outcome.job.node, event=outcome.event
            )
            if router_ev is not None:
                self._executor.record(run, outcome.job.run, router_ev)
                yield RunEvent("router", outcome.job.run, run.step, node=outcome.job.node, event=router_ev)
        run_carry: dict[int, list[Any]] = {}
        for j in result.carry:
            run_carry.setdefault(j.run, []).append(j)
        for k, js in run_carry.items():
            run.tasks[k].carry.extend(js)
        for j, payload in result.interrupts:
            st = run.tasks[j.run]
            st.carry.append(j)
            if st.stopped != "interrupted":
                st.stopped = "interrupted"
                st.interrupt = {"payload": payload, "job": j.key, "node": j.node}
            ev = TraceEvent(
                step=run.step,
                round=j.round,
                sender=j.node,
                receivers=[],
                kind="interrupt",
                role=None,
                prompt=[],
                output=json.dumps(payload, default=str),
                meta={"interrupt": True, "instance": j.key, "waiting": True},
            )
            self._executor.record(run, j.run, ev)
            yield RunEvent("interrupt", j.run, run.step, node=j.node, event=ev, data={"payload": payload})

    # -- routing ---------------------------------------------------------------------
    def _route_context(self, run: RunState, o: NodeOutcome, r: RouterSpec) -> RouteContext:
        st = run.tasks[o.job.run]
        desc = self._route_descriptions[r.source]
        history = OutputHistory(st.trace.events)
        return RouteContext(
            source=o.job.node,
            output=o.text,
            task=st.task,
            targets=tuple(r.targets),
            step=run.step,
            instance=o.job.round,
            inputs=tuple(o.job.inputs),
            descriptions=desc,
            state=st.state,
            history=history,
            task_index=o.job.run,
        )

    def _route(
        self, run: RunState, outcomes: Sequence[NodeOutcome]
    ) -> dict[int, tuple[list[Any], TraceEvent]]:
        """Router decisions for the outputs of a step: id(outcome) -> (choices, trace event)."""
        routers = self.graph.routers
        pending = [(o, routers[o.job.node]) for o in outcomes if o.job.node in routers]
        if not pending:
            return {}
        out: dict[int, tuple[list[Any], TraceEvent]] = {}
        llm_jobs: list[tuple[NodeOutcome, RouterSpec, RouteContext]] = []
        batched: dict[int, list[tuple[NodeOutcome, RouterSpec, RouteContext]]] = {}
        for o, r in pending:
            ctx = self._route_context(run, o, r)
            if r.kind == "llm":
                llm_jobs.append((o, r, ctx))
            elif r.kind == "router" and hasattr(self._routes[r.source], "route_batch"):
                batched.setdefault(id(self._routes[r.source]), []).append((o, r, ctx))
            else:
                fn = self._routes[r.source]
                call = fn if r.kind == "function" else fn.route
                t0 = time.perf_counter()
                try:
                    decision = call(ctx)
                except Exception as exc:
                    raise NodeError(f"router on {r.source!r} failed: {type(exc).__name__}: {exc}") from exc
                out[id(o)] = self._decided(run, o, r, ctx, decision, time.perf_counter() - t0, {})
        for group in batched.values():
            obj = self._routes[group[0][1].source]
            t0 = time.perf_counter()
            try:
                decisions = obj.route_batch([c for _, _, c in group])
            except Exception as exc:
                raise NodeError(
                    f"router on {group[0][1].source!r} failed: {type(exc).__name__}: {exc}"
                ) from exc
            if len(decisions) != len(group):
                raise NodeError(
                    f"router {type(obj).__name__} returned {len(decisions)} decisions for {len(group)} outputs"
                )
            dt = time.perf_counter() - t0
            for (o, r, ctx), d in zip(group, decisions):
                extra = {}
                explain = getattr(obj, "explain", None)
                if callable(explain):
                    try:
                        extra["probabilities"] = explain(ctx)
                    except Exception:  # an explanation is optional; the decision stands without it
                        log.debug(
                            "router %s could not explain its decision", type(obj).__name__, exc_info=True
                        )
                out[id(o)] = self._decided(run, o, r, ctx, d, dt, extra)
        if llm_jobs:
            out.update(self._route_llm(run, llm_jobs))
        return out

    def _decided(
        self,
        run: RunState,
        o: NodeOutcome,
        r: RouterSpec,
        ctx: RouteContext,
        decision: Any,
        dt: float,
        extra: dict[str, Any],
        prompt: list[dict[str, Any]] | None = None,
        tokens: tuple[int, int] = (0, 0),
    ) -> tuple[list[Any], TraceEvent]:
        try:
            choices = normalize_decision(
                decision, ctx, multi=r.multi, router_name=r.router or r.function or r.kind
            )
        except RoutingError as exc:
            raise NodeError(str(exc)) from None
        targets = [c if isinstance(c, str) else c.node for c in choices]
        ev = TraceEvent(
            step=run.step,
            round=o.job.round,
            sender=o.job.node,
            receivers=[t for t in dict.fromkeys(targets) if t != END],
            kind="router",
            role=None,
            prompt=prompt or [],
            output=json.dumps(
                [c if isinstance(c, str) else {"send": c.node, "payload": c.payload} for c in choices]
            ),
            prompt_tokens=tokens[0],
            completion_tokens=tokens[1],
            latency_s=dt,
            meta={"router": r.kind, "choices": targets, "allowed": list(r.targets), **extra},
        )
        return choices, ev

    def _route_llm(
        self, run: RunState, jobs: list[tuple[NodeOutcome, RouterSpec, RouteContext]]
    ) -> dict[int, tuple[list[Any], TraceEvent]]:
        out: dict[int, tuple[list[Any], TraceEvent]] = {}
        prompts = [route_prompt(ctx, r.prompt, multi=r.multi) for _, r, ctx in jobs]
        answers = self._generate_routes(run, jobs, prompts)
        retry = [
            i
            for i, (a, _) in enumerate(answers)
            if not parse_route_answer(a, jobs[i][2].targets, multi=jobs[i][1].multi)
        ]
        retried: dict[int, tuple[list[dict[str, Any]], str, tuple[int, int]]] = {}
        if retry:
            r_prompts = [
                retry_prompt(prompts[i], answers[i][0], jobs[i][2], multi=jobs[i][1].multi) for i in retry
            ]
            r_answers = self._generate_routes(run, [jobs[i] for i in retry], r_prompts)
            for i, p, a in zip(retry, r_prompts, r_answers):
                retried[i] = (p, a[0], a[1])
        for i, (o, r, ctx) in enumerate(jobs):
            answer, tokens = answers[i]
            prompt = prompts[i]
            meta: dict[str, Any] = {"answer": answer}
            if i in retried:
                prompt, answer, t2 = retried[i]
                tokens = (tokens[0] + t2[0], tokens[1] + t2[1])
                meta.update(retried=True, first_answer=answers[i][0], answer=answer)
            picked = parse_route_answer(answer, ctx.targets, multi=r.multi)
            if not picked:
                if r.fallback is None:
                    raise NodeError(
                        f"LLM router on {r.source!r} named none of {', '.join(ctx.targets)} twice "
                        f"(answers: {answers[i][0]!r}, {answer!r}) and has no fallback"
                    )
                picked = [r.fallback]
                meta["fallback"] = True
            out[id(o)] = self._decided(run, o, r, ctx, picked, 0.0, meta, prompt, tokens)
        return out

    def _generate_routes(
        self,
        run: RunState,
        jobs: Sequence[tuple[NodeOutcome, RouterSpec, RouteContext]],
        prompts: Sequence[list[dict[str, Any]]],
    ) -> list[tuple[str, tuple[int, int]]]:
        groups: dict[int, list[int]] = {}
        for i, (_, r, _) in enumerate(jobs):
            groups.setdefault(id(self._llm_objs[r.llm]), []).append(i)
        out: list[tuple[str, tuple[int, int]]] = [("", (0, 0))] * len(jobs)
        for idxs in groups.values():
            llm = self._llm_objs[jobs[idxs[0]][1].llm]
            params = []
            for i in idxs:
                o, r, _ = jobs[i]
                base = {"temperature": 0.0, "max_new_tokens": 32}
                base.update(r.params)
                p = SamplingParams(**base)
                params.append(p)
            comps = llm.generate([prompts[i] for i in idxs], params)
            for i, cs in zip(idxs, comps):
                c = cs[0]
                st = run.tasks[jobs[i][0].job.run]
                st.calls_used += 1
                st.tokens_used += c.usage.total_tokens
                out[i] = (c.text, (c.usage.prompt_tokens, c.usage.completion_tokens))
            for k in {jobs[i][0].job.run for i in idxs}:
                run.tasks[k].batches += 1
        return out

    # -- termination conditions -----------------------------------------------------
    def _check_until(self, run: RunState, k: int, t_step: float) -> None:
        cond = self._until
        st = run.tasks[k]
        if cond is None or st.finished():
            return
        events = st.trace.events
        now = time.perf_counter()
        if st.message_driven:
            view = ConditionView(
                events=events,
                new_events=[e for e in events if e.step == run.step],
                steps=st.steps,
                elapsed_s=now - st.t0,
                state=st.state,
            )
            reason = self._holds(cond, view)
            if reason is not None:
                st.ended = True
                st.ended_by = f"condition: {reason}"
            return
        comps = self._scheduler.components
        running = False
        for c, comp in enumerate(comps):
            started = any(st.done[n] > 0 for n in comp)
            if not started or all(st.done[n] >= st.rounds[n] for n in comp):
                continue
            running = True
            if c not in st.loop_start:
                first = next(i for i, e in enumerate(events) if e.sender in comp)
                st.loop_start[c] = (first, run.step, t_step - st.t0)
            first, step0, offset = st.loop_start[c]
            loop_events = [e for e in events[first:] if e.sender in comp]
            if len({st.done[n] for n in comp}) != 1:
                continue  # the loop is between rounds
            view = ConditionView(
                events=loop_events,
                new_events=[e for e in loop_events if e.step == run.step],
                steps=run.step - step0 + 1,
                elapsed_s=(now - st.t0) - offset,
                state=st.state,
            )
            reason = self._holds(cond, view)
            if reason is not None:
                for n in comp:
                    st.rounds[n] = st.done[n]
                st.candidates.update(self.graph.nodes)
                st.ended_by = f"condition: {reason} (after round {st.done[next(iter(comp))]})"
        if not running and comps == []:
            view = ConditionView(
                events=events,
                new_events=[e for e in events if e.step == run.step],
                steps=st.steps,
                elapsed_s=now - st.t0,
                state=st.state,
            )
            if self._holds(cond, view) is not None and not st.finished():
                st.stopped = "condition"

    @staticmethod
    def _holds(cond: Condition, view: ConditionView) -> str | None:
        """Why ``cond`` holds (``None`` when it does not)."""
        try:
            return cond.reason(view)
        except Exception as exc:
            raise NodeError(f"termination condition {cond!r} failed: {type(exc).__name__}: {exc}") from exc

    def _result(self, run: RunState, k: int) -> RunResult:
        st = run.tasks[k]
        wall = time.perf_counter() - st.t0
        st.trace.meta.update(
            wall_s=wall, llm_batches=st.batches, stopped=st.stopped, steps=run.step, ended_by=st.ended_by
        )
        final = self.graph.final
        if st.message_driven and self.graph.spec.final is None:
            output = st.last_output
        else:
            output = st.outputs[final][-1] if st.outputs[final] else None
        if st.stopped == "interrupted":
            output = None
        return RunResult(
            task=st.task,
            output=output,
            outputs=st.outputs,
            trace=st.trace,
            stopped=st.stopped,
            metrics=self.graph.metrics().to_dict(),
            state=st.state,
            interrupt=st.interrupt["payload"] if st.interrupt else None,
            thread=run.threads[k] if run.threads else None,
            ended_by=st.ended_by,
        )


class _SubgraphDriver:
    """A graph node: its subgraph advances one superstep per step of the parent.

    The subgraph's model calls join the parent step's batched calls; its run
    lives in the task's ``live`` map while it goes on, and its saved form in
    ``progress`` (so a checkpoint holds it and a resumed run continues it).
    An interrupt inside it pauses the parent; the answer goes back to it.
    When it ends, the node's output is the subgraph's answer, and its trace
    is kept in the event's ``meta["subtrace"]``.
    """

    def __init__(self, node: str, child: Runtime) -> None:
        self.node = node
        self.child = child
        self.parent_scheduler: Scheduler | None = None  # set by the parent Runtime

    def _child_run(self, run: RunState, j: Any) -> RunState:
        st = run.tasks[j.run]
        live = st.live.get(j.key)
        if live is not None:
            return live
        saved = st.progress.get(j.key)
        child = self.child
        if saved is not None:
            cst = TaskState.from_dict(0, saved["task"], child.graph.nodes, child.graph.spec.name)
            cst.message_driven = isinstance(child._scheduler, MessageScheduler)
            live = RunState(
                tasks=[cst],
                budget=Budget(max_tokens=child.max_tokens, max_calls=child.max_calls),
                step=int(saved["step"]),
            )
        else:
            if j.payload is not None:
                text = j.payload
            else:
                text = "\n\n".join(t for _, t in j.inputs) or st.task
            seeds = None
            if st.seed_key is not None:
                seeds = [stable_seed(*st.seed_key, self.node, j.round, j.serial)]
            live = child._start([text], seeds, None)
        st.live[j.key] = live
        return live

    def begin(self, run: RunState, j: Any) -> tuple[list[ModelRequest], Any]:
        st = run.tasks[j.run]
        live = self._child_run(run, j)
        cst = live.tasks[0]
        answers = st.resume.pop(j.key, None)
        if answers and cst.stopped == "interrupted":
            cst.resume.setdefault(cst.interrupt["job"], []).extend(answers)
            cst.stopped = None
            cst.interrupt = None
        step = self.child._begin_step(live)
        return (list(step.plan.requests) if step is not None else []), step

    def end(self, run: RunState, j: Any, handle: Any, res: StepResult) -> None:
        st = run.tasks[j.run]
        live = st.live[j.key]
        child = self.child
        if handle is not None:
            for _ in child._end_step(live, handle):
                pass
        cst = live.tasks[0]
        if not cst.finished() and child._scheduler.idle(cst):
            cst.ended = True
            cst.ended_by = cst.ended_by or "no messages left"
        if cst.stopped == "interrupted":
            st.progress[j.key] = {"task": cst.to_dict(), "step": live.step}
            res.interrupts.append((j, {"subgraph": self.node, "payload": cst.interrupt["payload"]}))
            return
        if not cst.finished():
            st.progress[j.key] = {"task": cst.to_dict(), "step": live.step}
            res.carry.append(j)
            return
        del st.live[j.key]
        st.progress.pop(j.key, None)
        if cst.stopped is not None:
            raise NodeError(f"subgraph node {self.node!r} ({child.graph.spec.name!r}) stopped: {cst.stopped}")
        result = child._result(live, 0)
        ns = child.graph
        ev = TraceEvent(
            step=run.step,
            round=j.round,
            sender=j.node,
            receivers=self.child_receivers(run, j),
            kind="graph",
            role=None,
            prompt=[],
            output=result.output or "",
            meta={
                "inputs_from": [s.split(" (")[0] for s, _ in j.inputs],
                "subgraph": ns.spec.name,
                "subtrace": {"meta": result.trace.meta, "events": [e.to_dict() for e in result.trace.events]},
                "subgraph_totals": result.trace.totals().to_dict(),
            },
            prompt_tokens=result.trace.totals().prompt_tokens,
            completion_tokens=result.trace.totals().completion_tokens,
        )
        tokens = result.trace.totals().tokens
        res.outcomes.append(NodeOutcome(j, result.output or "", ev, tokens=None))
        st.tokens_used += tokens
        st.calls_used += result.trace.totals().calls

    def child_receivers(self, run: RunState, j: Any) -> list[str]:
        assert self.parent_scheduler is not None
        return self.parent_scheduler.receivers(j.node, j.round)
