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
from dataclasses import dataclass
from typing import Any, Literal

from .trace import Trace, TraceEvent

__all__ = ["Budget", "Job", "NodeError", "NodeOutcome", "RunState", "StopReason", "TaskState"]

StopReason = Literal["token_budget", "call_budget"]
"""Why a run stopped before every node finished."""


class NodeError(RuntimeError):
    """A node failed while the graph ran (its id and round are in the message)."""


@dataclass(frozen=True)
class Budget:
    """Per-task limits of one run (``None``: unlimited)."""

    max_tokens: int | None = None
    max_calls: int | None = None


@dataclass
class Job:
    """One node instance to execute: node ``node`` at round ``round`` of task number ``run``."""

    run: int
    node: str
    round: int
    inputs: list[tuple[str, str]]  # (sender label, text), in predecessor order


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
        self.done: dict[str, int] = dict.fromkeys(nodes, 0)  # rounds finished
        self.outputs: dict[str, list[str]] = {n: [] for n in nodes}
        self.trace = Trace(meta={"task": task, "graph": graph_name})
        self.stopped: StopReason | None = None
        self.state: dict[str, Any] = {}  # scratch space the task's function nodes share
        self.rounds = rounds
        # Prefix of every sampling seed this task derives (None: the LLM's own randomness).
        self.seed_key = seed_key
        self.t0 = time.perf_counter()
        self.batches = 0
        self.calls_used = 0
        self.tokens_used = 0
        # Nodes whose readiness may have changed: only these are examined, so a
        # step costs O(edges touched) rather than O(nodes x in-degree).
        self.candidates: set[str] = set(nodes)

    def finished(self) -> bool:
        return self.stopped is not None or all(self.done[n] >= r for n, r in self.rounds.items())


@dataclass
class NodeOutcome:
    """What executing a :class:`Job` produced, before it becomes visible to other nodes."""

    job: Job
    text: str
    event: TraceEvent
    tokens: int | None = None  # tokens an agent call spent; None for function and tool nodes


@dataclass
class RunState:
    """One call of ``run_many``: its tasks, budget, event callback and superstep counter."""

    tasks: list[TaskState]
    budget: Budget
    on_event: Callable[[TraceEvent], None] | None = None
    step: int = 0
