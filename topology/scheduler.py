"""The Runtime's scheduler: which node instances run in the next superstep.

A node *instance* is a node at a round. Nodes outside cycles run once; nodes
of a cyclic component (debate, society) run ``spec.rounds`` times. An
instance is ready when every predecessor outside its component has finished
all its rounds, and every predecessor inside its component has finished the
previous round.

The scheduler also enforces the budgets: before each superstep a task that
has spent its tokens stops, and a task whose ready agents exceed the calls
left runs only those that fit and then stops; the generation lengths of a
step are capped to the tokens the task has left.

A :class:`Scheduler` holds only the graph's fixed structure; the progress of
a run lives in the :class:`~societas.topology.run_state.RunState` it is given.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Sequence
from typing import Any

from .graph import Graph
from .run_state import Budget, Job, NodeError, NodeOutcome, RunState, TaskState
from .trace import TraceEvent

__all__ = ["DEFAULT_MAX_STEPS", "TASK_SENDER", "MessageScheduler", "Scheduler", "seed_for", "stable_seed"]

DEFAULT_MAX_STEPS = 100
"""The step limit of a message-driven graph (and the loop limit under ``until``) when the spec sets none."""

TASK_SENDER = "__task__"
"""The sender of the trigger an entry node of a message-driven graph receives: the task alone."""


def stable_seed(*parts: Any) -> int:
    """A 63-bit seed that depends only on ``parts`` (not on Python's hash randomisation)."""
    h = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little") >> 1


class Scheduler:
    """Readiness, rounds, visibility and budgets for one graph.

    ``agent_nodes`` are the nodes that call an LLM (they count against the
    call budget); every other node is a function or tool node.
    """

    def __init__(self, graph: Graph, agent_nodes: Collection[str]) -> None:
        self.graph = graph
        self.agent_nodes = frozenset(agent_nodes)
        self._comp_of: dict[str, int] = {}
        self._cyclic: set[str] = set()
        for k, comp in enumerate(graph.cyclic_components()):
            for n in comp:
                self._comp_of[n] = k
                self._cyclic.add(n)
        spec = graph.spec
        # With a termination condition, ``rounds`` is the most a loop may run (default: max_steps).
        rounds = spec.rounds or (spec.max_steps or DEFAULT_MAX_STEPS if spec.until is not None else 1)
        self.rounds: dict[str, int] = {n: (rounds if n in self._cyclic else 1) for n in graph.nodes}
        self.max_steps: int | None = spec.max_steps
        self.components: list[set[str]] = graph.cyclic_components()
        self._preds = {n: list(graph.predecessors(n)) for n in graph.nodes}
        self._succs = {n: list(graph.successors(n)) for n in graph.nodes}
        self.order: dict[str, int] = {n: i for i, n in enumerate(graph.nodes)}

    # -- a run's life ------------------------------------------------------------
    def start(
        self,
        tasks: Sequence[str],
        *,
        budget: Budget,
        seed: int | None = None,
        seeds: Sequence[int] | None = None,
        on_event: Callable[[TraceEvent], None] | None = None,
    ) -> RunState:
        """A fresh :class:`RunState` for ``tasks``.

        Task ``k`` samples with seeds derived from ``seeds[k]`` when ``seeds``
        is given, else from ``(seed, k)`` when ``seed`` is given, else leaves
        sampling to the LLM.
        """
        spec = self.graph.spec
        states = []
        for k, task in enumerate(tasks):
            key: tuple[Any, ...] | None
            if seeds is not None:
                key = (seeds[k], "run")
            elif seed is not None:
                key = (seed, k)
            else:
                key = None
            states.append(TaskState(task, self.graph.nodes, spec.name, self.rounds, key))
        return RunState(tasks=states, budget=budget, on_event=on_event)

    def next_jobs(self, run: RunState) -> list[Job]:
        """The instances of the next superstep over all tasks (empty when the run is over).

        Marks a task ``stopped`` when a budget ends it; raises
        :class:`NodeError` when an unfinished task has nothing ready.
        """
        budget = run.budget
        jobs: list[Job] = []
        for k, st in enumerate(run.tasks):
            if st.finished():
                continue
            fresh = self.new_jobs(k, st)
            ready = [*st.carry, *fresh]
            if not ready:
                if self.ends_when_idle(st):
                    continue
                raise NodeError(f"graph {self.graph.spec.name!r} is stuck: no node is ready (task {k})")
            max_steps = self.max_steps
            if max_steps is not None and st.steps >= max_steps:
                st.stopped = "max_steps"
                continue
            if budget.max_tokens is not None and st.tokens_used >= budget.max_tokens:
                st.stopped = "token_budget"
                continue
            if budget.max_calls is not None:
                left = budget.max_calls - st.calls_used
                n_agent = sum(1 for j in ready if j.node in self.agent_nodes)
                if n_agent > left:
                    kept, seen = [], 0
                    for j in ready:
                        if j.node in self.agent_nodes:
                            if seen >= left:
                                continue
                            seen += 1
                        kept.append(j)
                    ready = kept
                    st.stopped = "call_budget"
            st.carry = []
            jobs.extend(ready)
        return jobs

    def new_jobs(self, k: int, st: TaskState) -> list[Job]:
        """Instances of task ``k`` that become ready now (not those carried over from the last step)."""
        return [Job(k, n, r, self.inputs(st, n, r)) for n, r in self.ready(st)]

    def ends_when_idle(self, st: TaskState) -> bool:
        """Whether a task with nothing to run has ended (message-driven graphs) rather than being stuck."""
        return False

    def idle(self, st: TaskState) -> bool:
        """Whether a message-driven task has nothing left to deliver (so it has ended)."""
        return False

    def token_caps(self, run: RunState, jobs: Sequence[Job]) -> dict[int, int | None]:
        """Per task, the most tokens each of its generations in this step may produce.

        The tokens a task has left are shared evenly by its agent jobs of the
        step; no entry means no cap.
        """
        caps: dict[int, int | None] = {}
        max_tokens = run.budget.max_tokens
        if max_tokens is None:
            return caps
        per_run: dict[int, int] = {}
        for j in jobs:
            if j.node in self.agent_nodes:
                per_run[j.run] = per_run.get(j.run, 0) + 1
        for k, cnt in per_run.items():
            caps[k] = max(1, (max_tokens - run.tasks[k].tokens_used) // cnt)
        return caps

    def complete(self, run: RunState, outcome: NodeOutcome, routed: Sequence[Any] = ()) -> None:
        """Make an instance's output visible and count what it spent.

        ``routed`` (message-driven graphs) holds the router's choices for this
        output: target ids and ``Send`` objects.
        """
        j = outcome.job
        st = run.tasks[j.run]
        if outcome.tokens is not None:
            st.calls_used += 1
            st.tokens_used += outcome.tokens
        st.outputs[j.node].append(outcome.text)
        st.last_output = outcome.text
        st.done[j.node] += 1
        st.candidates.add(j.node)
        st.candidates.update(self._succs[j.node])

    def commit_order(self, outcomes: list[NodeOutcome]) -> list[NodeOutcome]:
        """Outcomes of a step in the order they are made visible: by task, then node declaration."""
        return sorted(outcomes, key=lambda o: (o.job.run, self.order[o.job.node]))

    # -- structure ---------------------------------------------------------------
    def ready(self, st: TaskState) -> list[tuple[str, int]]:
        """``(node, round)`` instances of one task that may run now, in declaration order."""
        ready = []
        busy = st.in_flight
        for n in sorted(st.candidates, key=self.order.__getitem__):
            if n in busy:
                continue
            r = st.done[n]
            if r >= st.rounds[n]:
                st.candidates.discard(n)
                continue
            ok = True
            for p in self._preds[n]:
                if self.same_component(n, p):
                    if p != n and st.done[p] < r:  # same component: previous round must be done
                        ok = False
                        break
                elif st.done[p] < st.rounds[p]:
                    ok = False
                    break
            st.candidates.discard(n)  # re-added when a predecessor or its own round finishes
            if ok:
                ready.append((n, r))
        return ready

    def same_component(self, a: str, b: str) -> bool:
        return a in self._cyclic and b in self._cyclic and self._comp_of[a] == self._comp_of[b]

    def receivers(self, n: str, r: int) -> list[str]:
        """Who reads the output of ``n`` at round ``r``: its component's members
        in the next round, or — after its last round — the nodes downstream."""
        last = r == self.rounds[n] - 1
        return [s for s in self._succs[n] if (not last if self.same_component(n, s) else last)]

    def inputs(self, st: TaskState, n: str, r: int) -> list[tuple[str, str]]:
        """What instance ``(n, r)`` reads: ``(sender label, text)`` in predecessor order."""
        out = []
        for p in self._preds[n]:
            if self.same_component(n, p):
                if r >= 1:
                    label = f"{p} (your previous answer)" if p == n else f"{p} (previous round)"
                    out.append((label, st.outputs[p][r - 1]))
            elif st.outputs[p]:
                out.append((p, st.outputs[p][-1]))
        return out


def seed_for(st: TaskState, node: str, round_: int) -> int | None:
    """The sampling seed of one instance of a task (``None`` when the run is unseeded)."""
    if st.seed_key is None:
        return None
    return stable_seed(*st.seed_key, node, round_)


class MessageScheduler(Scheduler):
    """Scheduling of message-driven graphs (``mode: messages``).

    After Pregel and LangGraph: the entry nodes run first, with the task
    alone. An output is delivered to the node's static successors and to
    the targets its router picks; a node runs in the superstep after
    messages reach it, once, reading all of them (in sender declaration
    order), or — with ``join: all`` — once every static predecessor has sent
    since it last ran. Each ``Send`` of a router becomes an instance of its
    own. A task ends when no message is left to deliver.
    """

    def __init__(self, graph: Graph, agent_nodes: Collection[str]) -> None:
        super().__init__(graph, agent_nodes)
        self.rounds = dict.fromkeys(graph.nodes, 0)  # no fixed rounds: a task ends when idle
        self.max_steps = graph.spec.max_steps or DEFAULT_MAX_STEPS
        self._static_preds = {n: [p for p in graph.predecessors(n) if p != n] for n in graph.nodes}

    def start(
        self,
        tasks: Sequence[str],
        *,
        budget: Budget,
        seed: int | None = None,
        seeds: Sequence[int] | None = None,
        on_event: Callable[[TraceEvent], None] | None = None,
    ) -> RunState:
        run = super().start(tasks, budget=budget, seed=seed, seeds=seeds, on_event=on_event)
        for st in run.tasks:
            st.message_driven = True
            for n in self.graph.entry_nodes:
                st.inbox[n] = [(TASK_SENDER, st.task)]
        return run

    def new_jobs(self, k: int, st: TaskState) -> list[Job]:
        jobs: list[Job] = []
        busy = st.in_flight
        for n in sorted(st.inbox, key=self.order.__getitem__):
            if n in busy:
                continue
            msgs = st.inbox[n]
            if self.graph.node(n).join == "all":
                have = {s for s, _ in msgs}
                if TASK_SENDER not in have and not set(self._static_preds[n]) <= have:
                    continue
            del st.inbox[n]
            inputs = [(s, t) for s, t in msgs if s != TASK_SENDER]
            jobs.append(Job(k, n, st.done[n], inputs))
        serial: dict[str, int] = {}
        for target, sender, payload in st.sends:
            serial[target] = serial.get(target, 0) + 1
            jobs.append(
                Job(k, target, st.done[target], [(sender, payload)], payload=payload, serial=serial[target])
            )
        st.sends = []
        return jobs

    def idle(self, st: TaskState) -> bool:
        return not st.inbox and not st.sends and not st.carry

    def ends_when_idle(self, st: TaskState) -> bool:
        if st.inbox:
            waiting = ", ".join(
                f"{n} (join: all; has {sorted({s for s, _ in m})}, waits for "
                f"{sorted(set(self._static_preds[n]) - {s for s, _ in m})})"
                for n, m in st.inbox.items()
            )
            raise NodeError(f"graph {self.graph.spec.name!r} is stuck: nothing can run; waiting: {waiting}")
        st.ended = True
        st.ended_by = st.ended_by or "no messages left"
        return True

    def complete(self, run: RunState, outcome: NodeOutcome, routed: Sequence[Any] = ()) -> None:
        j = outcome.job
        st = run.tasks[j.run]
        if outcome.tokens is not None:
            st.calls_used += 1
            st.tokens_used += outcome.tokens
        st.outputs[j.node].append(outcome.text)
        st.last_output = outcome.text
        st.done[j.node] += 1
        for s in self._succs[j.node]:
            st.inbox.setdefault(s, []).append((j.node, outcome.text))
        for choice in routed:
            if isinstance(choice, str):
                if choice != "END":
                    st.inbox.setdefault(choice, []).append((j.node, outcome.text))
            else:
                st.sends.append((choice.node, j.node, choice.payload))

    def receivers(self, n: str, r: int) -> list[str]:
        """The static successors (a router's choices are added when it has decided)."""
        return list(self._succs[n])
