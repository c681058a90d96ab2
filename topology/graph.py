"""The validated topology: a :class:`GraphSpec` with a ``networkx.DiGraph`` inside.

:class:`Graph` checks a spec as a whole (duplicate ids, edges to unknown
nodes, unknown roles or LLMs, cycles without rounds, ...) and raises a
:class:`~societas.topology.errors.SpecError` naming the field path of the first
problem. It answers the structural questions the Runtime and the learners
ask: neighbours in declaration order, the final node, cyclic components, a
layering of the nodes (longest path over the condensation, so that the
members of a cycle share a layer), and the size measures AgentConductor's
density reward uses (nodes, edges, depth, density).

Graphs are values: pruning edges (:meth:`Graph.subgraph`, used by learned
routing) returns a new graph and leaves this one untouched.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import networkx as nx
from pydantic import ValidationError

from societas.agents.roles import known_roles as library_roles

from .errors import SpecError
from .spec import END_TARGET, EdgeSpec, GraphSpec, NodeSpec, RouterSpec, spec_error_from_validation

log = logging.getLogger(__name__)

__all__ = ["Graph", "GraphMetrics", "topological_layers_of"]


@dataclass(frozen=True)
class GraphMetrics:
    """Size of a topology.

    ``depth`` is the number of layers of the condensation DAG (the longest
    path counted in nodes, a cycle counting as one layer; 0 for an empty
    graph); ``density`` is ``edges / (n * (n - 1))`` for ``n > 1`` nodes, else 0.
    """

    nodes: int
    edges: int
    depth: int
    density: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _density(n_nodes: int, n_edges: int) -> float:
    return n_edges / (n_nodes * (n_nodes - 1)) if n_nodes > 1 else 0.0


def topological_layers_of(dg: nx.DiGraph, order: Sequence[Any] | None = None) -> list[list[Any]]:
    """Longest-path layering of ``dg``'s condensation.

    A node's layer is one more than the deepest layer among its
    predecessors outside its own strongly connected component; the members of
    a cycle share a layer. Within a layer nodes keep the order of ``order``
    (default: ``dg``'s insertion order); nodes missing from ``order`` follow it.
    """
    if dg.number_of_nodes() == 0:
        return []
    index: dict[Any, int] = {}
    for n in list(order or []) + list(dg.nodes):
        if n in dg and n not in index:
            index[n] = len(index)
    cond = nx.condensation(dg)
    members = {c: cond.nodes[c]["members"] for c in cond.nodes}
    first = {c: min(index[m] for m in ms) for c, ms in members.items()}
    layer: dict[int, int] = {}
    for c in nx.lexicographical_topological_sort(cond, key=lambda c: first[c]):
        layer[c] = max((layer[p] + 1 for p in cond.predecessors(c)), default=0)
    mapping = cond.graph["mapping"]
    out: list[list[Any]] = [[] for _ in range(max(layer.values()) + 1)]
    for n in sorted(index, key=index.__getitem__):
        out[layer[mapping[n]]].append(n)
    return out


def _describe_cycle(dg: nx.DiGraph, start: Any) -> str:
    try:
        cycle = nx.find_cycle(dg, source=start)
    except nx.NetworkXNoCycle:
        cycle = nx.find_cycle(dg)
    names = [str(cycle[0][0])] + [str(e[1]) for e in cycle]
    return " -> ".join(names)


class Graph:
    """A validated topology.

    ``Graph(spec)`` always checks the structure (duplicate ids, edges to
    unknown nodes, duplicate edges), without which no graph can be built; with
    ``validate=True`` (the default) it also runs :meth:`validate` against the
    role library. The spec is copied, so later changes to the caller's spec
    object do not affect the graph.
    """

    def __init__(self, spec: GraphSpec, *, validate: bool = True) -> None:
        if not isinstance(spec, GraphSpec):
            raise TypeError(f"Graph needs a GraphSpec, got {type(spec).__name__}; use Graph.build for lists")
        self.spec: GraphSpec = spec.model_copy(deep=True)
        self._check_structure()
        self._index = {n.id: i for i, n in enumerate(self.spec.nodes)}
        self._by_id = {n.id: n for n in self.spec.nodes}
        g = nx.DiGraph(name=self.spec.name)
        for n in self.spec.nodes:
            g.add_node(n.id, spec=n)
        for e in self.spec.edges:
            g.add_edge(e.source, e.target, spec=e)
        self.nx: nx.DiGraph = g
        self._preds = {n: sorted(g.predecessors(n), key=self._index.__getitem__) for n in g.nodes}
        self._succs = {n: sorted(g.successors(n), key=self._index.__getitem__) for n in g.nodes}
        self._layers: list[list[str]] | None = None
        # The flow graph: static edges plus every edge a router may take.
        self._routers: dict[str, RouterSpec] = {r.source: r for r in self.spec.routers}
        flow = g.copy()
        for r in self.spec.routers:
            for t in r.targets:
                if t != END_TARGET:
                    flow.add_edge(r.source, t, conditional=True, label=r.labels.get(t))
        self.flow: nx.DiGraph = flow
        self._flow_preds = {n: sorted(flow.predecessors(n), key=self._index.__getitem__) for n in flow.nodes}
        if validate:
            self.validate()

    # -- construction --------------------------------------------------------
    @classmethod
    def from_spec(cls, spec: GraphSpec, *, validate: bool = True) -> Graph:
        return cls(spec, validate=validate)

    @classmethod
    def from_yaml_text(cls, text: str, *, validate: bool = True) -> Graph:
        """A graph from YAML text (never read as a file name; see :meth:`GraphSpec.from_yaml_text`)."""
        return cls(GraphSpec.from_yaml_text(text), validate=validate)

    @classmethod
    def from_yaml_file(cls, path: str | os.PathLike[str], *, validate: bool = True) -> Graph:
        """A graph from a YAML file; :class:`FileNotFoundError` naming it if there is none."""
        return cls(GraphSpec.from_yaml_file(path), validate=validate)

    @classmethod
    def from_json_text(cls, text: str, *, validate: bool = True) -> Graph:
        """A graph from JSON text (never read as a file name)."""
        return cls(GraphSpec.from_json_text(text), validate=validate)

    @classmethod
    def from_json_file(cls, path: str | os.PathLike[str], *, validate: bool = True) -> Graph:
        """A graph from a JSON file; :class:`FileNotFoundError` naming it if there is none."""
        return cls(GraphSpec.from_json_file(path), validate=validate)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, validate: bool = True) -> Graph:
        """A graph from a ``.yaml``/``.yml``/``.json`` file."""
        return cls(GraphSpec.from_file(path), validate=validate)

    @classmethod
    def build(
        cls,
        name: str,
        nodes: Iterable[NodeSpec | dict[str, Any]],
        edges: Iterable[Any] = (),
        *,
        validate: bool = True,
        **fields: Any,
    ) -> Graph:
        """Build a graph in code rather than from a YAML/JSON document.

        Args:
            name: the graph's name (``GraphSpec.name``; it names the graph in
                traces, renderings and error messages).
            nodes: the nodes in declaration order (the order that breaks ties
                everywhere: scheduling, inputs, layers), each a
                :class:`NodeSpec` or a dict of its fields, e.g.
                ``{"id": "a", "role": "solver"}`` or
                ``{"id": "f", "kind": "function", "function": "pkg.mod:fn"}``.
            edges: who reads whose output, each ``(source, target)``,
                ``(source, target, label)``, ``"source -> target"``, a dict of
                :class:`EdgeSpec` fields or an :class:`EdgeSpec`.
            validate: also run :meth:`validate` (roles from the role library,
                known LLM names, a ``function`` on every function and tool
                node, a known ``final``,
                ``rounds`` for a cyclic graph). The structural checks below run
                either way.
            **fields: any other :class:`GraphSpec` field: ``rounds``, ``final``,
                ``llms``, ``budget``, ``meta``, ``description``.

        Returns:
            A new :class:`Graph` whose spec holds ``nodes`` and ``edges`` in
            the given order (each node and edge copied).

        Raises:
            SpecError: naming the field path of the first problem: a node or
                edge that is not valid (``nodes[1].kind``, ``edges[0]``), an
                unknown keyword (``bogus: unknown field``), a duplicate node id
                or edge, an edge to an unknown node, and with ``validate`` any
                problem :meth:`validate` finds (unknown role or LLM, a cycle
                without ``rounds``, no nodes at all).
            TypeError: ``nodes`` or ``edges`` is not iterable.

        Example::

            Graph.build(
                "review",
                [{"id": "coder", "role": "coder"}, {"id": "tester", "role": "tester"}],
                ["coder -> tester"],
            )
        """
        node_specs: list[NodeSpec] = []
        for i, n in enumerate(nodes):
            if isinstance(n, NodeSpec):
                node_specs.append(n)
                continue
            try:
                node_specs.append(NodeSpec.model_validate(n))
            except ValidationError as exc:
                raise spec_error_from_validation(exc, NodeSpec, prefix=("nodes", i)) from None
        data = {"name": name, "nodes": node_specs, "edges": GraphSpec.edges_from(edges), **fields}
        try:
            spec = GraphSpec.model_validate(data)
        except ValidationError as exc:
            raise spec_error_from_validation(exc, GraphSpec) from None
        return cls(spec, validate=validate)

    # -- validation ----------------------------------------------------------
    def _check_structure(self) -> None:
        """Duplicate ids, edges to unknown nodes, duplicate edges: problems no graph can be built with."""
        first: dict[str, int] = {}
        for i, n in enumerate(self.spec.nodes):
            if n.id in first:
                raise SpecError(f"nodes[{i}].id", f"duplicate id {n.id!r} (first at nodes[{first[n.id]}])")
            first[n.id] = i
        seen: dict[tuple[str, str], int] = {}
        for i, e in enumerate(self.spec.edges):
            if e.source not in first:
                raise SpecError(f"edges[{i}].source", f"unknown node {e.source!r}")
            if e.target not in first:
                raise SpecError(f"edges[{i}].target", f"unknown node {e.target!r}")
            if e.pair in seen:
                raise SpecError(f"edges[{i}]", f"duplicate edge '{e}' (first at edges[{seen[e.pair]}])")
            seen[e.pair] = i
        by_source: dict[str, int] = {}
        for i, r in enumerate(self.spec.routers):
            if r.source not in first:
                raise SpecError(f"routers[{i}].source", f"unknown node {r.source!r}")
            if r.source in by_source:
                raise SpecError(
                    f"routers[{i}].source",
                    f"node {r.source!r} already has a router (routers[{by_source[r.source]}]); "
                    "one router per node, which may pick several targets (multi: true)",
                )
            by_source[r.source] = i
            for k, t in enumerate(r.targets):
                if t != END_TARGET and t not in first:
                    raise SpecError(
                        f"routers[{i}].targets[{k}]", f"unknown node {t!r} (use {END_TARGET} to end a branch)"
                    )
                if (r.source, t) in seen:
                    raise SpecError(
                        f"routers[{i}].targets[{k}]",
                        f"'{r.source} -> {t}' is also a static edge (edges[{seen[(r.source, t)]}]); "
                        "an edge is either always taken or chosen by the router",
                    )
        for i, name in enumerate(self.spec.entry or []):
            if name not in first:
                raise SpecError(f"entry[{i}]", f"unknown node {name!r}")

    def validate(self, known_roles: Iterable[str] | None = None) -> None:
        """Check the spec as a whole; raise :class:`SpecError` naming the first problem's path.

        ``known_roles`` defaults to the role library (:func:`societas.agents.roles.known_roles`).
        An agent node needs a known role unless it brings its own ``prompt``
        (then its role may be any label).
        """
        spec = self.spec
        if not spec.nodes:
            raise SpecError("nodes", "a graph needs at least one node")
        self._check_structure()
        roles = set(library_roles() if known_roles is None else known_roles)
        llm_names = ", ".join(spec.llms) or "none declared"
        for i, n in enumerate(spec.nodes):
            if n.kind == "agent":
                if n.prompt is None:
                    if n.role is None:
                        raise SpecError(
                            f"nodes[{i}].role",
                            f"an agent node needs a role (known: {', '.join(sorted(roles))}) or its own prompt",
                        )
                    if n.role not in roles:
                        raise SpecError(
                            f"nodes[{i}].role", f"unknown role {n.role!r} (known: {', '.join(sorted(roles))})"
                        )
                if n.llm not in spec.llms:
                    raise SpecError(f"nodes[{i}].llm", f"unknown LLM {n.llm!r} (known: {llm_names})")
            elif n.kind in ("function", "tool") and n.function is None:
                raise SpecError(
                    f"nodes[{i}].function",
                    f"a {n.kind} node needs a function ('module:attr' or a name given to the Runtime)",
                )
            elif n.kind == "graph" and n.graph is None:
                raise SpecError(
                    f"nodes[{i}].graph", "a graph node needs 'graph': an inline spec or a file path"
                )
            if n.tools and n.kind != "agent":
                raise SpecError(
                    f"nodes[{i}].tools", f"only agent nodes call tools; {n.id!r} is a {n.kind} node"
                )
        for i, r in enumerate(spec.routers):
            if r.kind == "llm" and r.llm not in spec.llms:
                raise SpecError(f"routers[{i}].llm", f"unknown LLM {r.llm!r} (known: {llm_names})")
        if spec.final is not None and spec.final not in self._by_id:
            raise SpecError("final", f"unknown node {spec.final!r}")
        if spec.mode == "rounds" and spec.routers:
            raise SpecError(
                "mode", "routers choose where each message goes, which needs mode 'messages' (or 'auto')"
            )
        if self.mode == "messages":
            return
        if spec.rounds is None and spec.until is None and self.is_cyclic:
            start = min((m for comp in self.cyclic_components() for m in comp), key=self._index.__getitem__)
            raise SpecError(
                "rounds",
                f"the graph has a cycle ({_describe_cycle(self.nx, start)}) but declares no rounds",
            )

    # -- run-time decisions -----------------------------------------------------
    @property
    def mode(self) -> str:
        """``"messages"`` or ``"rounds"``: the execution model (``auto`` resolved)."""
        if self.spec.mode != "auto":
            return self.spec.mode
        return "messages" if self.spec.routers else "rounds"

    @property
    def routers(self) -> dict[str, RouterSpec]:
        """Router specs by source node."""
        return dict(self._routers)

    def conditional_edges(self) -> list[tuple[str, str, str | None]]:
        """``(source, target, label)`` of every edge a router may take (``END`` included), in declaration order."""
        return [(r.source, t, r.labels.get(t)) for r in self.spec.routers for t in r.targets]

    def flow_predecessors(self, node_id: str) -> list[str]:
        """Nodes that may send to ``node_id``: static predecessors and routers that target it."""
        self.node(node_id)
        return list(self._flow_preds[node_id])

    @property
    def entry_nodes(self) -> list[str]:
        """The nodes that see the task first: ``spec.entry``, else those no edge or router reaches,
        else (every node is reached: a loop) the first node declared."""
        if self.spec.entry:
            return list(self.spec.entry)
        free = [n for n in self.nodes if not [p for p in self._flow_preds[n] if p != n]]
        return free or self.nodes[:1]

    # -- structure -----------------------------------------------------------
    @property
    def nodes(self) -> list[str]:
        """Node ids in declaration order."""
        return [n.id for n in self.spec.nodes]

    @property
    def edges(self) -> list[tuple[str, str]]:
        """``(source, target)`` pairs in declaration order."""
        return [e.pair for e in self.spec.edges]

    def node(self, node_id: str) -> NodeSpec:
        """The spec of a node; ``KeyError`` naming the known ids if there is none."""
        try:
            return self._by_id[node_id]
        except KeyError:
            raise KeyError(f"unknown node {node_id!r} (nodes: {', '.join(self._by_id)})") from None

    def edge(self, source: str, target: str) -> EdgeSpec:
        """The spec of an edge; ``KeyError`` if there is none."""
        try:
            return self.nx.edges[source, target]["spec"]
        except KeyError:
            raise KeyError(f"no edge {source} -> {target}") from None

    def predecessors(self, node_id: str) -> list[str]:
        """Nodes whose output ``node_id`` reads, in node declaration order."""
        self.node(node_id)
        return list(self._preds[node_id])

    def successors(self, node_id: str) -> list[str]:
        """Nodes that read ``node_id``'s output, in node declaration order."""
        self.node(node_id)
        return list(self._succs[node_id])

    def sinks(self) -> list[str]:
        """Nodes whose output no other node reads (a self-loop does not count)."""
        return [n for n in self.nodes if not [s for s in self._succs[n] if s != n]]

    def sources(self) -> list[str]:
        """Nodes that read no other node (a self-loop does not count)."""
        return [n for n in self.nodes if not [p for p in self._preds[n] if p != n]]

    @property
    def is_cyclic(self) -> bool:
        """True when some directed cycle exists (a self-loop counts)."""
        return not nx.is_directed_acyclic_graph(self.nx)

    def cyclic_components(self) -> list[set[str]]:
        """Strongly connected components with more than one node or a self-loop, by first declared member."""
        comps = [
            set(c)
            for c in nx.strongly_connected_components(self.nx)
            if len(c) > 1 or self.nx.has_edge(next(iter(c)), next(iter(c)))
        ]
        return sorted(comps, key=lambda c: min(self._index[m] for m in c))

    def topological_layers(self) -> list[list[str]]:
        """Longest-path layers of the condensation; members of a cycle share a layer; declaration order within."""
        if self._layers is None:
            self._layers = topological_layers_of(self.nx, self.nodes)
        return [list(layer) for layer in self._layers]

    def topological_order(self) -> list[str]:
        """All nodes, layer by layer (a topological order of the condensation)."""
        return [n for layer in self.topological_layers() for n in layer]

    @property
    def final(self) -> str:
        """The node whose output is the answer: ``spec.final``, else the unique sink, else the last in order."""
        if self.spec.final is not None:
            return self.spec.final
        if not self.spec.nodes:
            raise SpecError("nodes", "a graph needs at least one node")
        sinks = self.sinks()
        if len(sinks) == 1:
            return sinks[0]
        return self.topological_order()[-1]

    def metrics(self) -> GraphMetrics:
        """Nodes, edges, depth (layers of the condensation) and density."""
        n, m = len(self.spec.nodes), len(self.spec.edges)
        return GraphMetrics(nodes=n, edges=m, depth=len(self.topological_layers()), density=_density(n, m))

    # -- derived graphs and serialisation --------------------------------------
    def to_spec(self) -> GraphSpec:
        """A copy of the spec."""
        return self.spec.model_copy(deep=True)

    def to_yaml(self) -> str:
        return self.spec.to_yaml()

    def to_json(self) -> str:
        return self.spec.to_json()

    def copy(self) -> Graph:
        return Graph(self.spec, validate=False)

    def subgraph(self, edges_kept: Iterable[tuple[str, str]]) -> Graph:
        """The same nodes with only ``edges_kept`` (each must be an edge of this graph).

        The final node is pinned to this graph's final node, so pruning never
        changes which node answers. Edges keep their declaration order and labels.
        """
        kept = {tuple(e) for e in edges_kept}
        have = set(self.edges)
        unknown = sorted(kept - have)
        if unknown:
            a, b = unknown[0]
            raise SpecError(
                "edges", f"cannot keep edge {a} -> {b}: it is not an edge of graph {self.spec.name!r}"
            )
        spec = self.spec.model_copy(
            deep=True,
            update={
                "edges": [e.model_copy() for e in self.spec.edges if e.pair in kept],
                "final": self.final,
            },
        )
        log.debug("subgraph of %r keeps %d of %d edges", self.spec.name, len(kept), len(have))
        return Graph(spec, validate=False)

    # -- container protocol ----------------------------------------------------
    def __contains__(self, node_id: object) -> bool:
        return node_id in self._by_id

    def __len__(self) -> int:
        return len(self.spec.nodes)

    def __iter__(self) -> Iterator[str]:
        return iter(self.nodes)

    def __repr__(self) -> str:
        m = self.metrics()
        return f"Graph({self.spec.name!r}, nodes={m.nodes}, edges={m.edges}, depth={m.depth})"
