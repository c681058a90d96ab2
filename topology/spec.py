"""Graph specifications: the typed, serialisable description of a topology.

A :class:`GraphSpec` lists LLMs by name, nodes (agents, Python functions,
tools), directed edges (who reads whose output), the number of rounds for
cyclic graphs, the node whose output is the answer, and budgets. It is a
pydantic model with ``extra="forbid"``, so a typo in a YAML file is an error
rather than a silently ignored key, and every error names its field path
(``nodes[1].kind: Input should be 'agent', 'function' or 'tool'``).

Checks that need the whole graph (unknown edge endpoints, duplicate ids,
cycles without rounds, unknown roles and LLMs) live in
:meth:`societas.topology.graph.Graph.validate`; this module checks the shape of each
field.

Reading and writing the documents (bounded YAML/JSON loading) lives in
:mod:`societas.topology.yaml_io`; turning pydantic errors into
:class:`~societas.topology.errors.SpecError` lives in
:mod:`societas.topology.errors`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import string
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from societas.agents.llm.base import SamplingParams

from .conditions import check_condition_data
from .errors import (
    FieldProblem,
    SpecError,
    format_path,
    spec_error_from_validation,
    validation_error_text,
)
from .yaml_io import dump_yaml, load_json_bounded, load_yaml_bounded, read_text_file

log = logging.getLogger(__name__)

__all__ = [
    "NODE_ID_PATTERN",
    "SAMPLING_OVERRIDES",
    "TEMPLATE_FIELDS",
    "NODE_KINDS",
    "BudgetSpec",
    "EdgeSpec",
    "GraphSpec",
    "NodeSpec",
    "RouterSpec",
    # Re-exported from .errors and .yaml_io, where they live, for existing imports.
    "format_path",
    "load_yaml_bounded",
    "spec_error_from_validation",
]

NODE_ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.\-]*$"
"""Node ids: a letter or ``_`` first, then letters, digits, ``_``, ``.`` or ``-``."""

SAMPLING_OVERRIDES: tuple[str, ...] = (
    "temperature",
    "top_p",
    "max_new_tokens",
    "min_new_tokens",
    "stop",
    "seed",
)
"""The SamplingParams fields a node may override (``n`` and ``logprobs`` belong to the caller)."""

TEMPLATE_FIELDS: tuple[str, ...] = ("task", "inputs", "answers")
"""The placeholders a node's user-prompt template may use."""

_SPEC_SUFFIXES = (".yaml", ".yml", ".json")

NODE_KINDS: tuple[str, ...] = ("agent", "function", "tool", "interrupt", "graph")
"""What a node is: an LLM ``agent``; Python code run as a ``function`` or ``tool`` node; an
``interrupt`` that stops the run for a person's answer; or a nested ``graph`` (a subgraph)."""

END_TARGET = "END"
"""The router target that ends a branch (the same string as :data:`societas.topology.routing.END`)."""


def _file_path(path: Any, method: str) -> Path:
    """``path`` as a :class:`Path`; anything that is not a file name is a ``TypeError`` naming ``method``."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{method} takes a file name (str or os.PathLike), got {type(path).__name__}")
    return Path(path)


def _short(value: Any, width: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


_FUNCTION_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.]*(:[A-Za-z_][A-Za-z0-9_.]*)?$"


def _check_sampling_overrides(v: dict[str, Any]) -> dict[str, Any]:
    """Sampling overrides of a node or router, checked and normalised."""
    for key in v:
        if key not in SAMPLING_OVERRIDES:
            raise FieldProblem(
                (key,), f"unknown sampling parameter (allowed: {', '.join(SAMPLING_OVERRIDES)})"
            )
    try:
        sampled = SamplingParams(**v)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = tuple(err.get("loc", ()))
        raise FieldProblem(loc, validation_error_text(err, None)[1]) from None
    # Keep only the given keys, normalised (stop becomes a list) so that the
    # spec serialises back to plain YAML/JSON.
    out: dict[str, Any] = {}
    for key in v:
        value = getattr(sampled, key)
        out[key] = list(value) if isinstance(value, tuple) else value
    return out


# ---------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------


class NodeSpec(BaseModel):
    """One node: an LLM agent, a Python function, or a tool.

    An agent node needs a ``role`` from the role library or its own
    ``prompt`` (then ``role`` may be any label); function and tool nodes need
    ``function``, either a ``"module:attr"`` import path or a name the Runtime
    is given at run time. ``params`` overrides the sampling parameters of the
    node's calls; ``template`` shapes its user prompt from ``{task}`` and
    ``{inputs}`` (or ``{answers}``: the same messages as a numbered list of one-line quotes);
    ``meta`` carries anything else (persona traits, difficulty).

    An agent with ``tools`` (names given to the Runtime, ``module:attr``, or
    the built-ins ``calculator`` and ``python``) runs a ReAct loop of at most
    ``max_tool_steps`` model calls, one per superstep. An ``interrupt`` node
    stops the run and asks a person (its ``prompt`` is the question); a
    ``graph`` node runs another graph (``graph``: an inline spec or a file
    path) as one node. ``join`` matters to message-driven graphs only: ``all``
    waits for a message from every predecessor before running.
    """

    # Infinite floats in meta/params survive a JSON round trip (as Infinity).
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    id: str
    kind: Literal["agent", "function", "tool", "interrupt", "graph"] = "agent"
    role: str | None = None
    prompt: str | None = None
    llm: str = "default"
    params: dict[str, Any] = Field(default_factory=dict)
    function: str | None = None
    template: str | None = None
    tools: list[str] = Field(default_factory=list)
    max_tool_steps: StrictInt = Field(8, ge=1, le=1000)
    join: Literal["any", "all"] = "any"
    graph: dict[str, Any] | str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("tools")
    @classmethod
    def _check_tools(cls, v: list[str]) -> list[str]:
        seen: set[str] = set()
        for i, name in enumerate(v):
            if not re.match(_FUNCTION_PATTERN, name):
                raise FieldProblem(
                    (i,), f"invalid tool reference {name!r}: use a name given to the Runtime or 'module:attr'"
                )
            if name in seen:
                raise FieldProblem((i,), f"tool {name!r} is listed twice")
            seen.add(name)
        return v

    @field_validator("id")
    @classmethod
    def _check_id(cls, v: str) -> str:
        if not re.match(NODE_ID_PATTERN, v):
            raise ValueError(
                f"invalid node id {v!r}: start with a letter or '_', then use only letters, digits, '_', '.', '-'"
            )
        return v

    @field_validator("params")
    @classmethod
    def _check_params(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _check_sampling_overrides(v)

    @field_validator("function")
    @classmethod
    def _check_function(cls, v: str | None) -> str | None:
        if v is not None and not re.match(_FUNCTION_PATTERN, v):
            raise ValueError(
                f"invalid function reference {v!r}: use 'package.module:attr' or a registered name"
            )
        return v

    @field_validator("template")
    @classmethod
    def _check_template(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(v) if f is not None]
        except ValueError as exc:
            raise ValueError(f"invalid template: {exc} (write literal braces as '{{{{' and '}}}}')") from None
        for f in fields:
            if f not in TEMPLATE_FIELDS:
                raise ValueError(
                    f"unknown template placeholder {{{f}}} (use {{task}}, {{inputs}} or {{answers}}; "
                    "write literal braces as '{{' and '}}')"
                )
        return v

    def sampling(self, base: SamplingParams | None = None) -> SamplingParams:
        """``base`` (default ``SamplingParams()``) with this node's ``params`` applied."""
        base = base if base is not None else SamplingParams()
        if not self.params:
            return base
        return SamplingParams(**{**base.model_dump(), **self.params})

    def render_template(self, task: str, inputs: str) -> str | None:
        """The user prompt from ``template`` (``None`` when the node has no template)."""
        if self.template is None:
            return None
        return self.template.format(task=task, inputs=inputs)


class EdgeSpec(BaseModel):
    """A directed edge: ``target`` reads the output of ``source``.

    In YAML an edge may also be written ``"a -> b"`` or ``[a, b]``.
    """

    model_config = ConfigDict(extra="forbid")

    source: str
    target: str
    label: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _short_forms(cls, data: Any) -> Any:
        if isinstance(data, str):
            parts = data.split("->")
            if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
                raise ValueError(f"an edge written as text must look like 'a -> b', got {data!r}")
            return {"source": parts[0].strip(), "target": parts[1].strip()}
        if isinstance(data, (list, tuple)):
            if len(data) != 2:
                raise ValueError(
                    f"an edge written as a list must have 2 items [source, target], got {len(data)}"
                )
            return {"source": data[0], "target": data[1]}
        return data

    @property
    def pair(self) -> tuple[str, str]:
        return (self.source, self.target)

    def __str__(self) -> str:
        return f"{self.source} -> {self.target}"


class RouterSpec(BaseModel):
    """A router: the targets of ``source``'s output are chosen at run time, per message.

    ``kind`` says who chooses: a Python ``function`` of the route context
    (``function``: a name given to the Runtime or ``module:attr``), an
    ``llm`` (``llm`` names the model, ``prompt`` adds instructions, and
    ``labels`` describe the targets), or a ``router`` object given to the
    Runtime by name (``router``) — a learned policy, for instance.
    ``targets`` may include ``END``. ``multi`` lets it pick several targets;
    ``fallback`` is where an LLM's output goes when it names no valid target
    twice (without one, that is a :class:`~societas.topology.run_state.NodeError`).
    """

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    source: str
    targets: list[str] = Field(min_length=1)
    kind: Literal["function", "llm", "router"] = "function"
    function: str | None = None
    router: str | None = None
    llm: str = "default"
    prompt: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    multi: bool = False
    fallback: str | None = None

    @field_validator("targets")
    @classmethod
    def _check_targets(cls, v: list[str]) -> list[str]:
        seen: set[str] = set()
        for i, t in enumerate(v):
            if t in seen:
                raise FieldProblem((i,), f"target {t!r} is listed twice")
            seen.add(t)
        return v

    @field_validator("function", "router")
    @classmethod
    def _check_ref(cls, v: str | None) -> str | None:
        if v is not None and not re.match(_FUNCTION_PATTERN, v):
            raise ValueError(f"invalid reference {v!r}: use 'package.module:attr' or a registered name")
        return v

    @field_validator("params")
    @classmethod
    def _check_params(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _check_sampling_overrides(v)

    @model_validator(mode="after")
    def _kind_fields(self) -> RouterSpec:
        if self.kind == "function" and self.function is None:
            raise FieldProblem(("function",), "a function router needs 'function'")
        if self.kind == "router" and self.router is None:
            raise FieldProblem(
                ("router",), "a router of kind 'router' needs 'router' (a name given to the Runtime)"
            )
        if self.fallback is not None and self.fallback not in self.targets:
            raise FieldProblem(("fallback",), f"{self.fallback!r} is not one of the targets {self.targets}")
        for t in self.labels:
            if t not in self.targets:
                raise FieldProblem(("labels", t), f"labels a target that is not declared ({self.targets})")
        return self


class BudgetSpec(BaseModel):
    """Limits that stop a run cleanly: total tokens and/or LLM calls (``None``: unlimited)."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: StrictInt | None = Field(None, gt=0)
    max_calls: StrictInt | None = Field(None, gt=0)


def _default_llms() -> dict[str, str]:
    return {"default": "embedded"}


class GraphSpec(BaseModel):
    """A whole topology, as read from or written to YAML/JSON.

    ``llms`` maps the names nodes refer to onto LLM URIs (``"embedded"``,
    ``"hf:PATH"``, ``"openai:URL#MODEL"``, ...). ``rounds`` is required when
    the graph has a cycle. ``final`` names the node whose output is the run's
    answer; by default the unique sink, else the last node in topological
    order (see :attr:`societas.topology.graph.Graph.final`).
    """

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    name: str = "graph"
    description: str = ""
    llms: dict[str, str] = Field(default_factory=_default_llms)
    nodes: list[NodeSpec]
    edges: list[EdgeSpec] = Field(default_factory=list)
    rounds: StrictInt | None = Field(None, ge=1)
    final: str | None = None
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    routers: list[RouterSpec] = Field(default_factory=list)
    until: Any = None
    entry: list[str] | None = None
    mode: Literal["auto", "rounds", "messages"] = "auto"
    max_steps: StrictInt | None = Field(None, ge=1)
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("until")
    @classmethod
    def _check_until(cls, v: Any) -> Any:
        return None if v is None else check_condition_data(v)

    # -- construction --------------------------------------------------------
    @classmethod
    def from_data(cls, data: Any, *, source: str | None = None) -> GraphSpec:
        """Validate a loaded document (a mapping); errors become :class:`SpecError` with the field path."""
        if not isinstance(data, dict):
            what = "nothing (the document is empty)" if data is None else type(data).__name__
            where = f" in {source}" if source else ""
            raise SpecError("", f"a graph spec must be a mapping with at least 'nodes', got {what}{where}")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise spec_error_from_validation(exc, cls) from None

    @classmethod
    def from_yaml_text(cls, text: str) -> GraphSpec:
        """Read a spec from YAML text.

        The text is never taken for a file name: a string such as
        ``"graph.yaml"`` is a YAML document holding one string, and is
        rejected as such (read files with :meth:`from_yaml_file`).
        """
        return cls._from_text(text, load_yaml_bounded, "YAML", "from_yaml_file")

    @classmethod
    def from_yaml_file(cls, path: str | os.PathLike[str]) -> GraphSpec:
        """Read a spec from a YAML file; :class:`FileNotFoundError` naming it if there is none."""
        p = _file_path(path, "from_yaml_file")
        return cls._from_text(read_text_file(p), load_yaml_bounded, "YAML", "from_yaml_file", source=str(p))

    @classmethod
    def from_json_text(cls, text: str) -> GraphSpec:
        """Read a spec from JSON text (never taken for a file name; see :meth:`from_json_file`)."""
        return cls._from_text(text, load_json_bounded, "JSON", "from_json_file")

    @classmethod
    def from_json_file(cls, path: str | os.PathLike[str]) -> GraphSpec:
        """Read a spec from a JSON file; :class:`FileNotFoundError` naming it if there is none."""
        p = _file_path(path, "from_json_file")
        return cls._from_text(read_text_file(p), load_json_bounded, "JSON", "from_json_file", source=str(p))

    @classmethod
    def _from_text(
        cls,
        text: str,
        load: Callable[[str], Any],
        fmt: str,
        file_method: str,
        *,
        source: str | None = None,
    ) -> GraphSpec:
        if not isinstance(text, str):
            raise TypeError(
                f"expected {fmt} text (str), got {type(text).__name__}; read a file with {file_method}"
            )
        data = load(text)
        if source is None and isinstance(data, str) and data.strip().lower().endswith(_SPEC_SUFFIXES):
            raise SpecError(
                "",
                f"expected {fmt} text, got the string {data!r}, which looks like a file name; "
                f"read files with {file_method}",
            )
        spec = cls.from_data(data, source=source)
        log.debug("read graph spec %r (%d nodes) from %s", spec.name, len(spec.nodes), source or "text")
        return spec

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> GraphSpec:
        """Read a ``.yaml``/``.yml`` or ``.json`` file (chosen by suffix)."""
        p = _file_path(path, "from_file")
        suffix = p.suffix.lower()
        if suffix == ".json":
            return cls.from_json_file(p)
        if suffix in (".yaml", ".yml"):
            return cls.from_yaml_file(p)
        raise SpecError("", f"cannot tell the format of {str(p)!r}: use a .yaml, .yml or .json file")

    # -- serialisation -------------------------------------------------------
    def to_dict(self, *, compact: bool = False) -> dict[str, Any]:
        """A JSON-compatible dict; ``compact`` leaves out fields at their defaults (but keeps name and nodes)."""
        data = self.model_dump(mode="json", exclude_defaults=compact)
        if compact:
            data = self._compact(data)
        return data

    def _compact(self, data: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        out.update({k: v for k, v in data.items() if k != "name"})
        out["nodes"] = data.get("nodes", [])
        # Edges without a label are written in their short form, "a -> b".
        if "edges" in out:
            out["edges"] = [
                f"{e['source']} -> {e['target']}" if e.get("label") is None else e for e in out["edges"]
            ]
        order = list(type(self).model_fields)
        return {k: out[k] for k in order if k in out}

    def to_yaml(self) -> str:
        """YAML text that :meth:`from_yaml_text` reads back into an equal spec (defaults left out)."""
        data = self.model_dump(mode="python", exclude_defaults=True)
        return dump_yaml(self._compact(data))

    def to_json(self, *, indent: int | None = 2) -> str:
        """JSON text that :meth:`from_json_text` reads back into an equal spec."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def save(self, path: str | Path) -> Path:
        """Write the spec to ``path`` as YAML or JSON (by suffix)."""
        p = Path(path)
        suffix = p.suffix.lower()
        if suffix == ".json":
            text = self.to_json()
        elif suffix in (".yaml", ".yml"):
            text = self.to_yaml()
        else:
            raise SpecError("", f"cannot tell the format of {str(p)!r}: use a .yaml, .yml or .json file")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
        return p

    # -- small helpers -------------------------------------------------------
    def edge_pairs(self) -> list[tuple[str, str]]:
        """``(source, target)`` pairs in declaration order."""
        return [e.pair for e in self.edges]

    @staticmethod
    def edges_from(items: Iterable[Any]) -> list[EdgeSpec]:
        """Edges from ``(a, b)``, ``(a, b, label)``, ``"a -> b"``, dicts or EdgeSpec objects.

        ``items`` is a list (any iterable) of them; a single string or mapping,
        or something not iterable, is a ``TypeError`` rather than being taken
        apart character by character or key by key.
        """
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
            raise TypeError(
                f"edges must be a list of edges such as ['a -> b'], got {type(items).__name__} {_short(items)}"
            )
        out: list[EdgeSpec] = []
        for i, item in enumerate(items):
            if isinstance(item, EdgeSpec):
                out.append(item)
                continue
            if isinstance(item, tuple) and len(item) == 3:
                item = {"source": item[0], "target": item[1], "label": item[2]}
            try:
                out.append(EdgeSpec.model_validate(item))
            except ValidationError as exc:
                raise spec_error_from_validation(exc, EdgeSpec, prefix=("edges", i)) from None
        return out
