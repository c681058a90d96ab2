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

__all__ = ["Scheduler", "seed_for", "stable_seed"]


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
        rounds = graph.spec.rounds or 1
        self.rounds: dict[str, int] = {n: (rounds if n in self._cyclic else 1) for n in graph.nodes}
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
            ready = self.ready(st)
            if not ready:
                raise NodeError(f"graph {self.graph.spec.name!r} is stuck: no node is ready (task {k})")
            if budget.max_tokens is not None and st.tokens_used >= budget.max_tokens:
                st.stopped = "token_budget"
                continue
            if budget.max_calls is not None:
                left = budget.max_calls - st.calls_used
                n_agent = sum(1 for n, _ in ready if n in self.agent_nodes)
                if n_agent > left:
                    kept, seen = [], 0
                    for n, r in ready:
                        if n in self.agent_nodes:
                            if seen >= left:
                                continue
                            seen += 1
                        kept.append((n, r))
                    ready = kept
                    st.stopped = "call_budget"
                    if not ready:
                        continue
            jobs.extend(Job(k, n, r, self.inputs(st, n, r)) for n, r in ready)
        return jobs

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

    def complete(self, run: RunState, outcome: NodeOutcome) -> None:
        """Make an instance's output visible and count what it spent."""
        j = outcome.job
        st = run.tasks[j.run]
        if outcome.tokens is not None:
            st.calls_used += 1
            st.tokens_used += outcome.tokens
        st.outputs[j.node].append(outcome.text)
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
        for n in sorted(st.candidates, key=self.order.__getitem__):
            r = st.done[n]
            if r >= self.rounds[n]:
                st.candidates.discard(n)
                continue
            ok = True
            for p in self._preds[n]:
                if self.same_component(n, p):
                    if p != n and st.done[p] < r:  # same component: previous round must be done
                        ok = False
                        break
                elif st.done[p] < self.rounds[p]:
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
