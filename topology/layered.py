"""AgentConductor's layered YAML topologies, read from an LLM's answer.

In AgentConductor (arXiv 2602.17100) an orchestrator LLM writes, for each
query, a layered DAG in YAML::

    difficulty: medium          # optional: easy | medium | hard
    layers:
      - - {name: planner_1, role: planning, ref: []}
      - - {name: coder_1, role: coding, ref: [planner_1]}
        - {name: coder_2, role: coding, ref: [planner_1]}
      - - {name: tester_1, role: testing, ref: [coder_1, coder_2]}

Each layer is a list of agents that run in parallel (a layer may also be
written ``{agents: [...]}``, and the document may be the bare list of
layers). Each agent has a ``name`` (alias ``id``), a ``role`` and ``ref``
(alias ``refs``): the agents of *earlier* layers whose outputs it reads, as a
list, one name, or a comma-separated string. The last layer holds exactly
one agent, the final (testing) agent.

The orchestrator's reward grades how an answer fails, so
:func:`parse_layered_yaml` runs four stages and raises a distinct error for
each: :class:`~societas.topology.errors.NoYAMLFound` (extraction),
:class:`~societas.topology.errors.YAMLSyntaxError` (loading),
:class:`~societas.topology.errors.SchemaInvalid` (shape and types) and
:class:`~societas.topology.errors.LogicInvalid` (duplicate names, refs to unknown,
same-layer, later or self agents, unknown roles, a last layer that is not one
agent, agents whose output never reaches the final agent, too many agents).
Nothing else escapes for any input string: the text is length-capped,
loading is bounded in size and depth (alias bombs, self-referencing
structures, deep nesting), and Python-object tags are refused.

This module is long because it is one job, the four-stage parser and the
topology it yields: every stage's checks name the path of the offending item
(``layers[i][j].ref[k]``), and the conversion to a Graph reports its errors at
those same paths, so the two are kept side by side."""

from __future__ import annotations

import logging
import re
import textwrap
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from societas.agents.roles import CONDUCTOR_ROLES, canonical_role

from .errors import LogicInvalid, NoYAMLFound, SchemaInvalid, SpecError, TopologyParseError, YAMLSyntaxError
from .graph import Graph, GraphMetrics
from .spec import (
    NODE_ID_PATTERN,
    EdgeSpec,
    GraphSpec,
    NodeSpec,
    format_path,
    load_yaml_bounded,
    spec_error_from_validation,
)

log = logging.getLogger(__name__)

__all__ = [
    "DIFFICULTY_LEVELS",
    "DIFFICULTY_NODE_CAPS",
    "LayeredAgent",
    "LayeredTopology",
    "extract_yaml",
    "parse_layered_yaml",
    "try_parse_layered_yaml",
]

DIFFICULTY_LEVELS: tuple[str, ...] = ("easy", "medium", "hard")

DIFFICULTY_NODE_CAPS: dict[str, int] = {"easy": 4, "medium": 7, "hard": 10}
"""AgentConductor's caps on the number of agents per difficulty level."""

# An orchestrator answer is short; these limits only stop pathological input.
_MAX_YAML_CHARS = 100_000
_MAX_ITEMS = 50_000
_MAX_DEPTH = 32

_AGENT_KEYS = ("name", "id", "role", "ref", "refs")
_NAME_RE = re.compile(NODE_ID_PATTERN)
_FENCE_OPEN = re.compile(r"^[ \t]*(`{3,})[ \t]*([A-Za-z0-9_+.\-]*)")
_LAYERS_LINE = re.compile(r"^[ \t]*layers[ \t]*:", re.MULTILINE)
_PREFIX_LINE = re.compile(r"^[ \t]*difficulty[ \t]*:")
# A path of the spec a topology converts to: "nodes[3].id", "edges[0].source".
_SPEC_PATH = re.compile(r"\b(nodes|edges)\[(\d+)\](?:\.(\w+))?")


# ---------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------


class LayeredAgent(BaseModel):
    """One agent of a layered topology: its unique ``name``, its ``role`` and the agents it reads (``ref``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    role: str
    ref: list[str] = Field(default_factory=list)


class LayeredTopology(BaseModel):
    """A parsed layered topology; ``layers[i]`` runs in parallel after every earlier layer.

    ``llm`` is the name (a key of :attr:`GraphSpec.llms`) the agents' nodes
    will use when converted to a graph.
    """

    model_config = ConfigDict(extra="forbid")

    layers: list[list[LayeredAgent]]
    difficulty: Literal["easy", "medium", "hard"] | None = None
    llm: str = "default"

    @property
    def agents(self) -> list[LayeredAgent]:
        """All agents, layer by layer."""
        return [a for layer in self.layers for a in layer]

    @property
    def final(self) -> str:
        """The name of the final agent (the one agent of the last layer)."""
        if not self.layers or not self.layers[-1]:
            raise LogicInvalid("layers", "the topology has no final agent")
        return self.layers[-1][-1].name

    def layer_of(self, name: str) -> int:
        """The index of the layer holding agent ``name``."""
        for i, layer in enumerate(self.layers):
            if any(a.name == name for a in layer):
                return i
        raise KeyError(f"unknown agent {name!r}")

    def edge_pairs(self) -> list[tuple[str, str]]:
        """``(ref, agent)`` pairs, layer by layer, each once."""
        return [pair for pair, _ in self._edge_origins()]

    def _edge_origins(self) -> list[tuple[tuple[str, str], str]]:
        """Each edge of :meth:`edge_pairs` with the path of the ref it comes from (``layers[i][j].ref[k]``)."""
        out: list[tuple[tuple[str, str], str]] = []
        seen: set[tuple[str, str]] = set()
        for i, layer in enumerate(self.layers):
            for j, a in enumerate(layer):
                for k, r in enumerate(a.ref):
                    if (r, a.name) not in seen:
                        seen.add((r, a.name))
                        out.append(((r, a.name), f"layers[{i}][{j}].ref[{k}]"))
        return out

    def _cycle_ref(self) -> str | None:
        """The path of the first ref that closes a cycle (a ref back to an agent that reads this one), if any."""
        readers: dict[str, set[str]] = {}
        for r, name in self.edge_pairs():
            readers.setdefault(r, set()).add(name)
        for i, layer in enumerate(self.layers):
            for j, a in enumerate(layer):
                for k, r in enumerate(a.ref):
                    reached, stack = {a.name}, [a.name]
                    while stack:
                        for nxt in readers.get(stack.pop(), ()):
                            if nxt not in reached:
                                reached.add(nxt)
                                stack.append(nxt)
                    if r in reached:
                        return f"layers[{i}][{j}].ref[{k}]"
        return None

    def _in_layers(self, err: SpecError) -> SpecError:
        """``err`` about the generated spec, with its paths rewritten as paths of this topology.

        The spec's ``nodes[k]`` is the k-th agent, layer by layer
        (``layers[i][j]``, its ``id`` the agent's ``name``; its ``template``
        and ``llm`` are the ``task_template`` and ``llm`` given for all
        agents), and ``edges[k]`` comes from one ref of an agent.
        """
        positions = [f"layers[{i}][{j}]" for i, layer in enumerate(self.layers) for j in range(len(layer))]
        origins = self._edge_origins()

        def rewrite(m: re.Match[str]) -> str:
            kind, k, field = m.group(1), int(m.group(2)), m.group(3)
            if kind == "nodes" and k < len(positions):
                if field in ("template", "llm"):
                    return "task_template" if field == "template" else "llm"
                if field is None:
                    return positions[k]
                return f"{positions[k]}.{'name' if field == 'id' else field}"
            if kind == "edges" and k < len(origins):
                ref_path = origins[k][1]
                if field == "target":
                    return f"{ref_path.rsplit('.ref[', 1)[0]}.name"
                return ref_path
            return m.group(0)

        path = _SPEC_PATH.sub(rewrite, err.path)
        if path == "rounds" and "cycle" in err.message:
            # A layered topology declares no rounds: the fault is the ref that closes the cycle.
            path = self._cycle_ref() or path
        return type(err)(path, _SPEC_PATH.sub(rewrite, err.message))

    def check(
        self, allowed_roles: Iterable[str] = CONDUCTOR_ROLES, max_agents: int | None = None
    ) -> LayeredTopology:
        """Run the logic checks of :func:`parse_layered_yaml` on a topology built in code.

        Returns the topology with roles spelled as in ``allowed_roles``;
        raises :class:`LogicInvalid`.
        """
        return _check_logic(self, allowed_roles, max_agents, None)

    def metrics(self) -> GraphMetrics:
        """Nodes (agents), edges (distinct refs), depth (number of layers) and density."""
        n = len(self.agents)
        m = len(self.edge_pairs())
        return GraphMetrics(
            nodes=n, edges=m, depth=len(self.layers), density=m / (n * (n - 1)) if n > 1 else 0.0
        )

    def to_graph_spec(
        self,
        task_template: str | None = None,
        *,
        llms: Mapping[str, str] | None = None,
        name: str = "agentconductor",
    ) -> GraphSpec:
        """The topology as a :class:`GraphSpec`.

        Agents become agent nodes with the library role of their conductor
        role (``coding`` -> ``coder``, via :func:`societas.agents.roles.canonical_role`;
        the original is kept in ``meta["conductor_role"]`` with the layer index
        in ``meta["layer"]``); each ref becomes an edge ref -> agent; the final
        agent is the graph's ``final``. ``task_template`` becomes every node's
        ``template``; ``llms`` defaults to ``{llm: "embedded"}``.
        """
        nodes: list[NodeSpec] = []
        for i, layer in enumerate(self.layers):
            for a in layer:
                try:
                    node = NodeSpec(
                        id=a.name,
                        role=canonical_role(a.role),
                        llm=self.llm,
                        template=task_template,
                        meta={"layer": i, "conductor_role": a.role},
                    )
                except ValidationError as exc:
                    prefix = ("nodes", len(nodes))
                    raise self._in_layers(spec_error_from_validation(exc, NodeSpec, prefix=prefix)) from None
                nodes.append(node)
        meta: dict[str, Any] = {"source": "agentconductor"}
        if self.difficulty is not None:
            meta["difficulty"] = self.difficulty
        try:
            return GraphSpec(
                name=name,
                llms=dict(llms) if llms is not None else {self.llm: "embedded"},
                nodes=nodes,
                edges=[EdgeSpec(source=s, target=t) for s, t in self.edge_pairs()],
                final=self.final,
                meta=meta,
            )
        except ValidationError as exc:
            raise self._in_layers(spec_error_from_validation(exc, GraphSpec)) from None

    def to_graph(
        self,
        task_template: str | None = None,
        *,
        llms: Mapping[str, str] | None = None,
        name: str = "agentconductor",
    ) -> Graph:
        """The topology as a validated :class:`~societas.topology.graph.Graph` (see :meth:`to_graph_spec`).

        Raises :class:`SpecError` naming the place of the problem in this
        topology (``layers[1][0].ref[2]``), not in the generated spec.
        """
        spec = self.to_graph_spec(task_template, llms=llms, name=name)
        try:
            return Graph(spec)
        except SpecError as exc:
            raise self._in_layers(exc) from None

    def to_yaml(self) -> str:
        """The topology in the orchestrator's own format (one flow mapping per agent)."""
        lines: list[str] = []
        if self.difficulty is not None:
            lines.append(f"difficulty: {self.difficulty}")
        lines.append("layers:")
        for layer in self.layers:
            for j, a in enumerate(layer):
                flow = yaml.safe_dump(
                    {"name": a.name, "role": a.role, "ref": list(a.ref)},
                    default_flow_style=True,
                    sort_keys=False,
                    width=float("inf"),
                ).strip()
                lines.append(("  - - " if j == 0 else "    - ") + flow)
        return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# stage 1: extraction
# ---------------------------------------------------------------------------


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """``(language, body)`` of each ``` fenced block, in order; an unclosed last block runs to the end."""
    blocks: list[tuple[str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if m is None:
            i += 1
            continue
        ticks, lang = m.group(1), m.group(2).lower()
        close = re.compile(r"^[ \t]*`{" + str(len(ticks)) + r",}[ \t]*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        blocks.append((lang, textwrap.dedent("\n".join(lines[i + 1 : j]))))
        i = j + 1
    return blocks


def _has_layers_mapping(body: str) -> bool:
    try:
        data = load_yaml_bounded(body, max_chars=_MAX_YAML_CHARS, max_items=_MAX_ITEMS, max_depth=_MAX_DEPTH)
    except SpecError:
        return False
    return isinstance(data, dict) and "layers" in data


def extract_yaml(text: str) -> str:
    """The YAML part of an LLM answer.

    In order of preference: the last non-empty ```yaml (or ```yml) fenced
    block; else the last ``` fenced block of any language that loads as a
    mapping with ``layers``; else the text from a line starting with ``{``
    to the end if it loads as such a mapping (``{layers: [...]}`` in flow
    style); else the text from the last line starting with ``layers:`` to
    the end (with a ``difficulty:`` line right above it). Raises :class:`NoYAMLFound` when there is none of these.
    """
    if not isinstance(text, str):
        raise NoYAMLFound("", f"expected the answer as text, got {type(text).__name__}")
    blocks = _fenced_blocks(text)
    yaml_blocks = [body for lang, body in blocks if lang in ("yaml", "yml") and body.strip()]
    if yaml_blocks:
        return yaml_blocks[-1]
    for _, body in reversed(blocks):
        if body.strip() and "layers" in body and _has_layers_mapping(body):
            return body
    # A flow-style mapping, "{layers: [...]}", outside any fence.
    lines = text.splitlines(keepends=True)
    tried = 0
    for i, line in enumerate(lines):
        if line.lstrip().startswith("{") and tried < 5:
            rest = "".join(lines[i:])
            if "layers" in rest:
                tried += 1
                if _has_layers_mapping(rest):
                    return rest
    starts = [m.start() for m in _LAYERS_LINE.finditer(text)]
    if starts:
        start = starts[-1]
        head = text[:start].splitlines()
        # Keep a "difficulty:" line written just above "layers:".
        while head and _PREFIX_LINE.match(head[-1]):
            start -= len(head[-1]) + 1
            head.pop()
        return textwrap.dedent(text[max(start, 0) :])
    raise NoYAMLFound("", "the answer holds no ```yaml block and no 'layers:' section")


# ---------------------------------------------------------------------------
# stage 2 + 3: loading and schema
# ---------------------------------------------------------------------------


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _key_path(prefix: str, key: Any) -> str:
    """``prefix.key`` (``prefix['odd key']`` for keys that are not plain names; just ``prefix`` for non-strings)."""
    if not isinstance(key, str):
        return prefix
    sub = format_path((key,))
    return sub if not prefix else (prefix + sub if sub.startswith("[") else f"{prefix}.{sub}")


def _read_ref(value: Any, path: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, list):
        raise SchemaInvalid(path, f"must be a list of agent names, got {_type_name(value)}")
    out: list[str] = []
    for k, item in enumerate(value):
        if not isinstance(item, str):
            raise SchemaInvalid(f"{path}[{k}]", f"must be an agent name (a string), got {_type_name(item)}")
        out.append(item.strip())
    return out


def _read_agent(data: Any, path: str) -> tuple[LayeredAgent, str]:
    """One agent and the document key its refs were given under (for error paths)."""
    if not isinstance(data, dict):
        raise SchemaInvalid(
            path, f"an agent must be a mapping with name, role and ref, got {_type_name(data)}"
        )
    for key in data:
        if not isinstance(key, str) or key not in _AGENT_KEYS:
            raise SchemaInvalid(
                _key_path(path, key),
                f"unknown key {key!r} (allowed: name, role, ref; 'id' and 'refs' are accepted aliases)",
            )
    if "name" in data and "id" in data:
        raise SchemaInvalid(f"{path}.id", "give the agent's name once, as 'name' or as 'id'")
    if "ref" in data and "refs" in data:
        raise SchemaInvalid(f"{path}.refs", "give the agent's refs once, as 'ref' or as 'refs'")
    name_key = "id" if "id" in data else "name"
    if name_key not in data:
        raise SchemaInvalid(f"{path}.name", "missing required key")
    name = data[name_key]
    if not isinstance(name, str):
        raise SchemaInvalid(f"{path}.{name_key}", f"must be a string, got {_type_name(name)}")
    name = name.strip()
    if not _NAME_RE.match(name):
        raise SchemaInvalid(
            f"{path}.{name_key}",
            f"invalid agent name {name!r}: start with a letter or '_', then use only letters, digits, '_', '.', '-'",
        )
    if "role" not in data:
        raise SchemaInvalid(f"{path}.role", "missing required key")
    role = data["role"]
    if not isinstance(role, str):
        raise SchemaInvalid(f"{path}.role", f"must be a string, got {_type_name(role)}")
    ref_key = "refs" if "refs" in data else "ref"
    ref = _read_ref(data.get(ref_key), f"{path}.{ref_key}")
    return LayeredAgent(name=name, role=role.strip(), ref=ref), f"{path}.{ref_key}"


def _read_schema(data: Any, llm: str) -> tuple[LayeredTopology, dict[tuple[int, int], tuple[str, str]]]:
    """Check the shape; return the topology and, per agent position, its document path and its refs' path."""
    difficulty: str | None = None
    if isinstance(data, dict):
        for key in data:
            if key not in ("layers", "difficulty"):
                raise SchemaInvalid(
                    _key_path("", key), f"unknown top-level key {key!r} (allowed: layers, difficulty)"
                )
        if "layers" not in data:
            raise SchemaInvalid("layers", "missing required key")
        raw_diff = data.get("difficulty")
        if raw_diff is not None:
            if not isinstance(raw_diff, str) or raw_diff.strip().lower() not in DIFFICULTY_LEVELS:
                raise SchemaInvalid("difficulty", f"must be one of easy, medium, hard, got {raw_diff!r}")
            difficulty = raw_diff.strip().lower()
        layers_data = data["layers"]
    else:
        layers_data = data
    if not isinstance(layers_data, list):
        raise SchemaInvalid("layers", f"must be a list of layers, got {_type_name(layers_data)}")
    if not layers_data:
        raise SchemaInvalid("layers", "needs at least one layer")
    layers: list[list[LayeredAgent]] = []
    paths: dict[tuple[int, int], tuple[str, str]] = {}
    for i, layer in enumerate(layers_data):
        lpath = f"layers[{i}]"
        if isinstance(layer, dict):
            for key in layer:
                if key != "agents":
                    raise SchemaInvalid(
                        _key_path(lpath, key), f"unknown key {key!r} (a layer mapping holds only 'agents')"
                    )
            if "agents" not in layer:
                raise SchemaInvalid(f"{lpath}.agents", "missing required key")
            agents_data, apath = layer["agents"], f"{lpath}.agents"
        else:
            agents_data, apath = layer, lpath
        if not isinstance(agents_data, list):
            raise SchemaInvalid(apath, f"a layer must be a list of agents, got {_type_name(agents_data)}")
        if not agents_data:
            raise SchemaInvalid(apath, "a layer needs at least one agent")
        agents: list[LayeredAgent] = []
        for j, item in enumerate(agents_data):
            agent, ref_path = _read_agent(item, f"{apath}[{j}]")
            agents.append(agent)
            paths[(i, j)] = (f"{apath}[{j}]", ref_path)
        layers.append(agents)
    return LayeredTopology(layers=layers, difficulty=difficulty, llm=llm), paths


# ---------------------------------------------------------------------------
# stage 4: logic
# ---------------------------------------------------------------------------


def _check_logic(
    topo: LayeredTopology,
    allowed_roles: Iterable[str],
    max_agents: int | None,
    paths: dict[tuple[int, int], tuple[str, str]] | None,
) -> LayeredTopology:
    if isinstance(allowed_roles, str):
        allowed_roles = (allowed_roles,)
    allowed = {r.strip().lower(): r for r in allowed_roles}
    allowed_text = ", ".join(allowed.values()) or "none"
    if not topo.layers:
        raise LogicInvalid("layers", "needs at least one layer")

    def where(i: int, j: int) -> tuple[str, str]:
        if paths is not None and (i, j) in paths:
            return paths[(i, j)]
        return f"layers[{i}][{j}]", f"layers[{i}][{j}].ref"

    layer_of: dict[str, int] = {}
    first_at: dict[str, str] = {}
    fixed_layers: list[list[LayeredAgent]] = []
    for i, layer in enumerate(topo.layers):
        fixed: list[LayeredAgent] = []
        for j, a in enumerate(layer):
            apath = where(i, j)[0]
            if a.name in layer_of:
                raise LogicInvalid(
                    f"{apath}.name", f"duplicate agent {a.name!r} (first at {first_at[a.name]})"
                )
            layer_of[a.name] = i
            first_at[a.name] = apath
            role = allowed.get(a.role.strip().lower())
            if role is None:
                raise LogicInvalid(f"{apath}.role", f"unknown role {a.role!r} (allowed: {allowed_text})")
            fixed.append(a if role == a.role else a.model_copy(update={"role": role}))
        fixed_layers.append(fixed)

    for i, layer in enumerate(topo.layers):
        for j, a in enumerate(layer):
            ref_path = where(i, j)[1]
            for k, r in enumerate(a.ref):
                if r == a.name:
                    raise LogicInvalid(f"{ref_path}[{k}]", f"agent {a.name!r} cannot read its own output")
                if r not in layer_of:
                    raise LogicInvalid(f"{ref_path}[{k}]", f"unknown agent {r!r}")
                if layer_of[r] >= i:
                    when = "the same layer" if layer_of[r] == i else "a later layer"
                    raise LogicInvalid(
                        f"{ref_path}[{k}]",
                        f"agent {r!r} is in {when} (layers[{layer_of[r]}]); refs must name agents of earlier layers",
                    )

    last = len(topo.layers) - 1
    if len(topo.layers[last]) != 1:
        raise LogicInvalid(
            f"layers[{last}]",
            f"the last layer must hold exactly one agent (the final agent), found {len(topo.layers[last])}",
        )

    final = topo.layers[last][0]
    by_name = {a.name: a for a in topo.agents}
    reaches_final = {final.name}
    stack = [final.name]
    while stack:
        for r in by_name[stack.pop()].ref:
            if r not in reaches_final:
                reaches_final.add(r)
                stack.append(r)
    for i, layer in enumerate(topo.layers):
        for j, a in enumerate(layer):
            if a.name not in reaches_final:
                raise LogicInvalid(
                    where(i, j)[0],
                    f"the output of agent {a.name!r} never reaches the final agent {final.name!r}",
                )

    n_agents = len(layer_of)
    if max_agents is not None and n_agents > max_agents:
        raise LogicInvalid("layers", f"the topology has {n_agents} agents, more than the cap of {max_agents}")
    return topo.model_copy(update={"layers": fixed_layers})


# ---------------------------------------------------------------------------
# the pipeline
# ---------------------------------------------------------------------------


def parse_layered_yaml(
    text: str,
    *,
    allowed_roles: Iterable[str] = CONDUCTOR_ROLES,
    max_agents: int | None = None,
    llm: str = "default",
) -> LayeredTopology:
    """Parse an orchestrator's answer into a :class:`LayeredTopology`.

    Stages: :func:`extract_yaml` (:class:`NoYAMLFound`) -> bounded safe YAML
    load (:class:`YAMLSyntaxError`, also when the block is plain text rather
    than a mapping or list) -> shape (:class:`SchemaInvalid`) -> logic
    (:class:`LogicInvalid`). Roles are matched case-insensitively against
    ``allowed_roles`` and returned in its spelling. ``max_agents`` caps the
    number of agents (see :data:`DIFFICULTY_NODE_CAPS`); ``llm`` is the LLM
    name the graph nodes will use.
    """
    if max_agents is not None and max_agents < 1:
        raise ValueError(f"max_agents must be at least 1, got {max_agents}")
    try:
        block = extract_yaml(text)
        try:
            data = load_yaml_bounded(
                block, max_chars=_MAX_YAML_CHARS, max_items=_MAX_ITEMS, max_depth=_MAX_DEPTH
            )
        except SpecError as exc:
            raise YAMLSyntaxError(exc.path, exc.message) from None
        if not isinstance(data, (dict, list)):
            what = (
                "is empty"
                if data is None
                else f"holds a single {_type_name(data)} value, not a mapping or list"
            )
            raise YAMLSyntaxError("", f"the YAML block {what}")
        topo, paths = _read_schema(data, llm)
        return _check_logic(topo, allowed_roles, max_agents, paths)
    except TopologyParseError as exc:
        log.debug("layered topology rejected (%s): %s", exc.kind, exc)
        raise


def try_parse_layered_yaml(
    text: str,
    *,
    allowed_roles: Iterable[str] = CONDUCTOR_ROLES,
    max_agents: int | None = None,
    llm: str = "default",
) -> tuple[LayeredTopology | None, TopologyParseError | None]:
    """:func:`parse_layered_yaml` that returns ``(topology, None)`` or ``(None, error)`` (for rewards)."""
    try:
        return parse_layered_yaml(text, allowed_roles=allowed_roles, max_agents=max_agents, llm=llm), None
    except TopologyParseError as exc:
        return None, exc
