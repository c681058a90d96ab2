"""The classic topologies: chain, star, layered DAG and debate.

These are the fixed structures that learned-topology work (GPTSwarm,
G-Designer, AgentConductor) compares against. Each builder returns a
validated :class:`~societas.topology.graph.Graph`; every agent node uses the LLM named
``llm`` in the spec (``"default"`` → the embedded model unless the Runtime is
given another).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..graph import Graph
from ..spec import NodeSpec


def _agent(node_id: str, role: str, llm: str, params: dict[str, Any] | None = None, **kw: Any) -> NodeSpec:
    return NodeSpec(id=node_id, kind="agent", role=role, llm=llm, params=dict(params or {}), **kw)


def chain(
    roles: Sequence[str] = ("planner", "coder", "tester"),
    *,
    name: str = "chain",
    llm: str = "default",
    params: dict[str, Any] | None = None,
    llms: dict[str, str] | None = None,
) -> Graph:
    """``roles[0] → roles[1] → …``; each agent reads only its predecessor."""
    if not roles:
        raise ValueError("chain needs at least one role")
    ids = [f"{r}_{i + 1}" for i, r in enumerate(roles)]
    nodes = [_agent(i, r, llm, params) for i, r in zip(ids, roles)]
    edges = list(zip(ids, ids[1:]))
    kw: dict[str, Any] = {"llms": llms} if llms else {}
    return Graph.build(name, nodes, edges, **kw)


def star(
    n_workers: int = 4,
    *,
    center_role: str = "orchestrator",
    worker_role: str = "solver",
    aggregate: bool = True,
    name: str = "star",
    llm: str = "default",
    params: dict[str, Any] | None = None,
    center_prompt: str | None = None,
    llms: dict[str, str] | None = None,
) -> Graph:
    """A hub that briefs ``n_workers`` workers in parallel; with ``aggregate`` an
    aggregator (the hub's second turn) reads every worker and answers."""
    if n_workers < 1:
        raise ValueError("star needs at least one worker")
    hub_prompt = center_prompt or (
        "You coordinate a team of workers. Restate the task for them and say what each should focus on, briefly."
    )
    nodes = [NodeSpec(id="hub", role=center_role, prompt=hub_prompt, llm=llm, params=dict(params or {}))]
    workers = [f"worker_{i + 1}" for i in range(n_workers)]
    nodes += [_agent(w, worker_role, llm, params) for w in workers]
    edges: list[tuple[str, str]] = [("hub", w) for w in workers]
    if aggregate:
        nodes.append(_agent("aggregator", "aggregator", llm, params))
        edges += [(w, "aggregator") for w in workers]
    kw: dict[str, Any] = {"llms": llms} if llms else {}
    if not aggregate:
        kw["final"] = workers[-1]
    return Graph.build(name, nodes, edges, **kw)


def layered(
    layers: Sequence[Sequence[str]],
    *,
    name: str = "layered",
    llm: str = "default",
    params: dict[str, Any] | None = None,
    dense: bool = True,
    llms: dict[str, str] | None = None,
) -> Graph:
    """A layered DAG: ``layers`` lists each layer's roles; with ``dense`` every
    agent reads every agent of the previous layer (else agent ``j`` reads agent
    ``j mod width`` of the previous layer). The last layer must hold one agent
    unless a ``final`` is chosen later."""
    if not layers or any(len(layer) == 0 for layer in layers):
        raise ValueError("layered needs non-empty layers")
    nodes: list[NodeSpec] = []
    ids: list[list[str]] = []
    for li, layer in enumerate(layers):
        row = []
        for j, role in enumerate(layer):
            nid = f"L{li}_{j}_{role}"
            nodes.append(_agent(nid, role, llm, params))
            row.append(nid)
        ids.append(row)
    edges: list[tuple[str, str]] = []
    for prev, cur in zip(ids, ids[1:]):
        for j, b in enumerate(cur):
            srcs = prev if dense else [prev[j % len(prev)]]
            edges += [(a, b) for a in srcs]
    kw: dict[str, Any] = {"llms": llms} if llms else {}
    if len(ids[-1]) > 1:
        kw["final"] = ids[-1][-1]
    return Graph.build(name, nodes, edges, **kw)


def debate(
    n_agents: int = 3,
    rounds: int = 2,
    *,
    role: str = "solver",
    judge: bool = True,
    memory: bool = True,
    name: str = "debate",
    llm: str = "default",
    params: dict[str, Any] | None = None,
    llms: dict[str, str] | None = None,
) -> Graph:
    """Multi-agent debate (Du et al., 2023): every debater reads every other
    debater's previous-round answer, for ``rounds`` rounds; with ``memory``
    each also reads its own previous answer (a self-loop); with ``judge`` an
    aggregator reads the last round and answers."""
    if n_agents < 2:
        raise ValueError("a debate needs at least two agents")
    if rounds < 1:
        raise ValueError("a debate needs at least one round")
    ids = [f"debater_{i + 1}" for i in range(n_agents)]
    nodes = [_agent(d, role, llm, params) for d in ids]
    edges = [(a, b) for a in ids for b in ids if a != b or memory]
    kw: dict[str, Any] = {"rounds": rounds}
    if llms:
        kw["llms"] = llms
    if judge:
        nodes.append(_agent("judge", "aggregator", llm, params))
        edges += [(d, "judge") for d in ids]
    else:
        kw["final"] = ids[-1]
    return Graph.build(name, nodes, edges, **kw)
