"""Everything one run of a :class:`~societas.topology.runtime.Runtime` changes.

A Runtime holds only what it was configured with (the graph, agents,
functions, budgets, seed); each call of ``run_many`` builds a fresh
:class:`RunState` and hands it to the scheduler and the executor, which keep
no progress of their own. Two threads may therefore run the same Runtime at
once: they share configuration that nobody writes, and nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from .trace import Trace, TraceEvent

__all__ = [
    "Budget",
    "GraphInterrupt",
    "Job",
    "NodeError",
    "NodeOutcome",
    "RunState",
    "StopReason",
    "TaskState",
]

StopReason = Literal["token_budget", "call_budget", "max_steps", "condition", "interrupted"]
"""Why a run stopped before every node finished: a budget, the step limit, a
termination condition of a graph without loops, or an interrupt waiting for a
person (resume it with ``Runtime.resume``)."""


class GraphInterrupt(Exception):
    """Raised by :func:`societas.topology.interrupt` to pause the run for a person's answer."""

    def __init__(self, payload: Any) -> None:
        super().__init__(f"interrupted: {payload!r}")
        self.payload = payload


class NodeError(RuntimeError):
    """A node failed while the graph ran (its id and round are in the message)."""


@dataclass(frozen=True)
class Budget:
    """Per-task limits of one run (``None``: unlimited)."""

    max_tokens: int | None = None
    max_calls: int | None = None


@dataclass
class Job:
    """One node instance to execute: node ``node`` at round ``round`` of task number ``run``.

    In a message-driven graph ``round`` counts the node's earlier instances,
    and ``payload`` is what a router's ``Send`` delivered (the instance's only
    input). ``key`` names the instance within its task, so that work spread
    over several supersteps (a tool loop, a subgraph, an interrupt waiting
    for its answer) finds its saved progress.
    """

    run: int
    node: str
    round: int
    inputs: list[tuple[str, str]]  # (sender label, text), in predecessor order
    payload: str | None = None
    serial: int = 0  # distinguishes instances of one node created in the same step (Send fan-out)

    @property
    def key(self) -> str:
        return f"{self.node}#{self.round}.{self.serial}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "round": self.round,
            "inputs": [list(x) for x in self.inputs],
            "payload": self.payload,
            "serial": self.serial,
        }

    @classmethod
    def from_dict(cls, run: int, d: dict[str, Any]) -> Job:
        return cls(
            run,
            d["node"],
            int(d["round"]),
            [(str(a), str(b)) for a, b in d["inputs"]],
            d.get("payload"),
            int(d.get("serial", 0)),
        )


class TaskState:
    """The progress of one task of a run: rounds finished, outputs, trace, budget used."""

    def __init__(
        self,
        task: str,
        nodes: list[str],
        graph_name: str,
        rounds: dict[str, int],
        seed_key: tuple[Any, ...] | None,
    ) -> None:
        self.task = task
        self.done: dict[str, int] = dict.fromkeys(nodes, 0)  # rounds finished (instances run)
        self.outputs: dict[str, list[str]] = {n: [] for n in nodes}
        self.trace = Trace(meta={"task": task, "graph": graph_name})
        self.stopped: StopReason | None = None
        self.state: dict[str, Any] = {}  # scratch space the task's function nodes share
        self.rounds = dict(rounds)
        # Prefix of every sampling seed this task derives (None: the LLM's own randomness).
        self.seed_key = seed_key
        self.t0 = time.perf_counter()
        self.batches = 0
        self.calls_used = 0
        self.tokens_used = 0
        # Nodes whose readiness may have changed: only these are examined, so a
        # step costs O(edges touched) rather than O(nodes x in-degree).
        self.candidates: set[str] = set(nodes)
        # Work that spans supersteps: jobs to run again next step (a tool loop's
        # next model call, an interrupted node), and their saved progress by job key.
        self.carry: list[Job] = []
        self.progress: dict[str, dict[str, Any]] = {}
        # Message-driven graphs: messages waiting for each node, Send payloads,
        # and whether the run has ended (no message left, or a condition held).
        self.inbox: dict[str, list[tuple[str, str]]] = {}
        self.sends: list[tuple[str, str, str]] = []  # (target, sender, payload)
        self.ended = False
        self.ended_by: str | None = None
        self.last_output: str | None = None
        # Termination conditions: where the current loop's events start, per cyclic component.
        self.loop_start: dict[int, tuple[int, int, float]] = {}  # component -> (event index, step, time)
        self.steps = 0  # supersteps this task took part in
        self.message_driven = False  # set by the message-driven scheduler
        self.interrupt: Any = None  # the payload of the interrupt it waits on
        self.resume: dict[str, Any] = {}  # job key -> the person's answer, consumed by that job
        # Checkpointing: trace events already saved, the last step saved, and (step, base, prev) of that save.
        self.events_saved = 0
        self.last_saved_step: int | None = None
        self.progress_saved: tuple[int, int, int | None] | None = None
        # Subgraphs in progress, live (their saved form is in ``progress``): job key -> the child run.
        self.live: dict[str, Any] = {}

    @property
    def in_flight(self) -> set[str]:
        return {j.node for j in self.carry}

    def finished(self) -> bool:
        if self.stopped is not None or self.ended:
            return True
        if self.message_driven:
            return False
        if self.carry:
            return False
        return all(self.done[n] >= r for n, r in self.rounds.items())

    # -- checkpoints -------------------------------------------------------------
    def to_dict(self, events_from: int = 0) -> dict[str, Any]:
        """Everything needed to continue this task later (JSON-compatible when ``state`` is).

        Only the trace events from index ``events_from`` on are included
        (``events_base`` records where they start), so that a checkpoint per
        step stores each event once rather than the whole trace again.
        """
        return {
            "task": self.task,
            "done": dict(self.done),
            "outputs": {k: list(v) for k, v in self.outputs.items()},
            "trace_meta": dict(self.trace.meta),
            "events_base": events_from,
            "events": [e.to_dict() for e in self.trace.events[events_from:]],
            "stopped": self.stopped,
            "state": self.state,
            "rounds": dict(self.rounds),
            "seed_key": list(self.seed_key) if self.seed_key is not None else None,
            "batches": self.batches,
            "calls_used": self.calls_used,
            "tokens_used": self.tokens_used,
            "elapsed_s": time.perf_counter() - self.t0,
            "candidates": sorted(self.candidates),
            "carry": [j.to_dict() for j in self.carry],
            "progress": self.progress,
            "inbox": {k: [list(x) for x in v] for k, v in self.inbox.items()},
            "sends": [list(x) for x in self.sends],
            "ended": self.ended,
            "ended_by": self.ended_by,
            "last_output": self.last_output,
            "loop_start": {str(k): list(v) for k, v in self.loop_start.items()},
            "steps": self.steps,
            "interrupt": self.interrupt,
        }

    @classmethod
    def from_dict(cls, run: int, d: dict[str, Any], nodes: list[str], graph_name: str) -> TaskState:
        seed_key = tuple(d["seed_key"]) if d.get("seed_key") is not None else None
        st = cls(d["task"], nodes, graph_name, {k: int(v) for k, v in d["rounds"].items()}, seed_key)
        st.done.update({k: int(v) for k, v in d["done"].items()})
        st.outputs.update({k: list(v) for k, v in d["outputs"].items()})
        if int(d.get("events_base", 0)) != 0:
            raise ValueError("TaskState.from_dict needs the whole trace (events_base 0)")
        st.trace = Trace([TraceEvent(**e) for e in d["events"]], dict(d["trace_meta"]))
        st.stopped = d["stopped"]
        st.state = d["state"]
        st.batches = int(d["batches"])
        st.calls_used = int(d["calls_used"])
        st.tokens_used = int(d["tokens_used"])
        st.t0 = time.perf_counter() - float(d["elapsed_s"])
        st.candidates = set(d["candidates"])
        st.carry = [Job.from_dict(run, j) for j in d["carry"]]
        st.progress = d["progress"]
        st.inbox = {k: [(str(a), str(b)) for a, b in v] for k, v in d["inbox"].items()}
        st.sends = [(str(a), str(b), str(c)) for a, b, c in d["sends"]]
        st.ended = bool(d["ended"])
        st.ended_by = d["ended_by"]
        st.last_output = d["last_output"]
        st.loop_start = {int(k): (int(v[0]), int(v[1]), float(v[2])) for k, v in d["loop_start"].items()}
        st.steps = int(d["steps"])
        st.interrupt = d["interrupt"]
        return st


@dataclass
class NodeOutcome:
    """What executing a :class:`Job` produced, before it becomes visible to other nodes."""

    job: Job
    text: str
    event: TraceEvent
    tokens: int | None = None  # tokens an agent call spent; None for function and tool nodes


@dataclass
class RunState:
    """One call of ``run_many``: its tasks, budget, event callback and superstep counter.

    ``threads`` holds one checkpoint thread id per task (``None``: not saved).
    """

    tasks: list[TaskState]
    budget: Budget
    on_event: Callable[[TraceEvent], None] | None = None
    step: int = 0
    threads: list[str | None] = field(default_factory=list)
