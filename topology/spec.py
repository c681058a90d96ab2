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

YAML is read with a loader that rejects duplicate keys, and every loaded
document is size-checked so that alias bombs ("billion laughs") and
self-referencing structures fail fast instead of exhausting memory.
"""

from __future__ import annotations

import json
import logging
import re
import string
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
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

from .errors import SpecError

log = logging.getLogger(__name__)

__all__ = [
    "NODE_ID_PATTERN",
    "SAMPLING_OVERRIDES",
    "TEMPLATE_FIELDS",
    "BudgetSpec",
    "EdgeSpec",
    "GraphSpec",
    "NodeSpec",
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

TEMPLATE_FIELDS: tuple[str, ...] = ("task", "inputs")
"""The placeholders a node's user-prompt template may use."""

_FUNCTION_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.]*(:[A-Za-z_][A-Za-z0-9_.]*)?$"

# Limits for reading untrusted documents. A spec file is written by a person or
# a program and may be large; the limits only stop pathological input.
_SPEC_MAX_CHARS = 10_000_000
_SPEC_MAX_ITEMS = 2_000_000
_SPEC_MAX_DEPTH = 100
_BRACKETS = re.compile(r"[^\[\]{}]+")


# ---------------------------------------------------------------------------
# error formatting
# ---------------------------------------------------------------------------


class _FieldProblem(ValueError):
    """Raised inside a validator to report a problem below the validated field.

    pydantic attaches the loc of the field being validated; ``subpath`` lets
    :func:`spec_error_from_validation` extend it (``params`` -> ``params.n``).
    """

    def __init__(self, subpath: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.subpath = subpath
        self.message = message


def format_path(loc: Sequence[str | int]) -> str:
    """Format a pydantic ``loc`` tuple as a field path: ``("nodes", 1, "kind")`` -> ``nodes[1].kind``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and part.replace("_", "a").replace("-", "a").isalnum():
            out += f".{part}" if out else part
        else:
            out += f"[{str(part)!r}]"
    return out


def _unwrap_optional(tp: Any) -> Any:
    args = get_args(tp)
    if args and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return tp


def _model_at(root: type[BaseModel], loc: Sequence[str | int]) -> type[BaseModel] | None:
    """The pydantic model class found by following ``loc`` from ``root`` (None if it leads elsewhere)."""
    current: Any = root
    for part in loc:
        current = _unwrap_optional(current)
        if get_origin(current) in (list, tuple, dict):
            # list[X] and dict[str, X] consume one loc part (the index or key).
            args = get_args(current)
            current = args[-1] if args else Any
            continue
        if isinstance(current, type) and issubclass(current, BaseModel) and isinstance(part, str):
            field = current.model_fields.get(part)
            if field is None:
                return None
            current = field.annotation
            continue
        return None
    current = _unwrap_optional(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _error_text(err: dict[str, Any], root: type[BaseModel] | None) -> tuple[tuple[str | int, ...], str]:
    loc = tuple(err.get("loc", ()))
    kind = err.get("type")
    msg = str(err.get("msg", "invalid value"))
    ctx = err.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, _FieldProblem):
        return loc + cause.subpath, cause.message
    if kind in ("value_error", "assertion_error") and cause is not None:
        return loc, str(cause)
    if loc and loc[-1] == "[key]":
        # pydantic marks a bad dict key (rather than value) with a "[key]" step.
        return loc[:-1], f"invalid key: {msg}"
    if kind == "extra_forbidden":
        model = _model_at(root, loc[:-1]) if root is not None else None
        if model is not None:
            allowed = ", ".join(model.model_fields)
            return loc, f"unknown field (allowed: {allowed})"
        return loc, "unknown field"
    if kind == "missing":
        return loc, "missing required field"
    return loc, msg


def spec_error_from_validation(
    exc: ValidationError,
    model: type[BaseModel] | None = None,
    *,
    prefix: Sequence[str | int] = (),
    error_cls: type[SpecError] = SpecError,
) -> SpecError:
    """Turn a pydantic ``ValidationError`` into a :class:`SpecError` naming the first bad field.

    Further problems (up to four) are appended to the message so that one
    round of fixes can address several of them. ``model`` (the validated
    class) lets unknown-field errors list the allowed fields; ``prefix`` is
    prepended to every path (for models validated inside a larger document).
    """
    errors = exc.errors(include_url=False)
    if not errors:
        return error_cls(format_path(prefix), str(exc))
    texts = [_error_text(e, model) for e in errors]
    loc, message = texts[0]
    path = format_path(tuple(prefix) + loc)
    rest = texts[1:]
    if rest:
        shown = "; ".join(f"{format_path(tuple(prefix) + loc_) or '<document>'}: {m}" for loc_, m in rest[:4])
        more = f" and {len(rest) - 4} more" if len(rest) > 4 else ""
        plural = "s" if len(rest) > 1 else ""
        message = f"{message} (also {len(rest)} more error{plural}: {shown}{more})"
    return error_cls(path, message)


# ---------------------------------------------------------------------------
# bounded YAML loading
# ---------------------------------------------------------------------------


class _UniqueKeySafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects a mapping holding the same key twice.

    PyYAML keeps the last value silently, which hides mistakes such as two
    ``nodes:`` sections. Keys merged in with ``<<`` may still be overridden.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[tuple[str, str], yaml.Node] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            ident = (key_node.tag, key_node.value)
            if ident in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key_node.value!r}",
                    key_node.start_mark,
                )
            seen[ident] = key_node
        return super().construct_mapping(node, deep=deep)


def _check_size(obj: Any, *, max_items: int, max_depth: int) -> None:
    """Walk a loaded document (iteratively) and reject it when too large or too deep.

    Aliases make YAML documents share sub-structures; the walk counts every
    visit, so an alias bomb or a self-referencing list exceeds ``max_items``
    after a bounded amount of work instead of expanding forever downstream.
    Strings weigh one item per 100 characters.
    """
    stack: list[tuple[Any, int]] = [(obj, 0)]
    weight = 0
    while stack:
        item, depth = stack.pop()
        weight += 1
        if depth > max_depth:
            raise SpecError("", f"the document is nested too deeply (more than {max_depth} levels)")
        if isinstance(item, dict):
            for k, v in item.items():
                stack.append((k, depth + 1))
                stack.append((v, depth + 1))
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, (str, bytes)):
            weight += len(item) // 100
        if weight > max_items:
            raise SpecError(
                "", f"the document is too large (more than {max_items} values once aliases are expanded)"
            )


def _check_bracket_depth(text: str, max_depth: int) -> None:
    """Reject text whose flow brackets nest deeper than ``max_depth`` before the recursive parser sees it.

    PyYAML's parser recurses once per nesting level; thousands of ``[`` would
    otherwise end in a slow ``RecursionError``. Brackets inside quoted strings
    are counted too, which can only make the check stricter for absurd input.
    """
    brackets = _BRACKETS.sub("", text)
    depth = 0
    for ch in brackets:
        if ch in "[{":
            depth += 1
            if depth > max_depth:
                raise SpecError("", f"the document is nested too deeply (more than {max_depth} levels)")
        elif depth:
            depth -= 1


def load_yaml_bounded(
    text: str,
    *,
    max_chars: int = _SPEC_MAX_CHARS,
    max_items: int = _SPEC_MAX_ITEMS,
    max_depth: int = _SPEC_MAX_DEPTH,
) -> Any:
    """``yaml.safe_load`` for untrusted text, with limits; every failure is a :class:`SpecError`.

    Rejects duplicate keys, text longer than ``max_chars``, documents nested
    deeper than ``max_depth`` and documents with more than ``max_items``
    values after alias expansion. Syntax errors name the line and column.
    Python-object tags (``!!python/object``) are refused by the safe loader.
    """
    if len(text) > max_chars:
        raise SpecError("", f"the document is too long ({len(text)} characters, at most {max_chars})")
    _check_bracket_depth(text, max_depth)
    try:
        data = yaml.load(text, Loader=_UniqueKeySafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise SpecError("", f"YAML syntax error{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise SpecError("", f"YAML error: {exc}") from None
    except RecursionError:
        raise SpecError("", "the document is nested too deeply to read") from None
    except (ValueError, TypeError, OverflowError) as exc:
        # The safe constructor raises these for scalars it cannot convert:
        # impossible dates (2001-13-45), integers longer than Python's limit.
        raise SpecError("", f"YAML value error: {exc}") from None
    _check_size(data, max_items=max_items, max_depth=max_depth)
    return data


class _SpecDumper(yaml.SafeDumper):
    """Safe dumper that writes multi-line strings (prompts) as literal blocks."""


_UNICODE_BREAKS = ("\x85", "\u2028", "\u2029")


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if any(ch in data for ch in _UNICODE_BREAKS):
        # PyYAML with allow_unicode writes these line breaks raw inside single
        # quotes, where the loader folds them; double quotes escape them.
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style='"')
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_SpecDumper.add_representer(str, _represent_str)


def _dump_yaml(data: Any) -> str:
    try:
        return yaml.dump(data, Dumper=_SpecDumper, sort_keys=False, allow_unicode=True, width=100)
    except yaml.YAMLError as exc:
        raise SpecError("", f"cannot write the spec as YAML: {exc}") from None


def _read_source(text_or_path: str | Path, suffixes: tuple[str, ...]) -> tuple[str, str | None]:
    """Return ``(text, filename)``; a ``Path`` or a one-line string ending in a known suffix is read as a file."""
    if isinstance(text_or_path, Path):
        path: Path | None = text_or_path
    elif isinstance(text_or_path, str):
        path = None
        if "\n" not in text_or_path and len(text_or_path) < 4096:
            candidate = text_or_path.strip()
            if candidate.lower().endswith(suffixes):
                path = Path(candidate)
            else:
                try:
                    if Path(candidate).is_file():
                        path = Path(candidate)
                except (OSError, ValueError):
                    path = None
    else:
        raise SpecError("", f"expected YAML/JSON text or a path, got {type(text_or_path).__name__}")
    if path is None:
        return text_or_path, None  # type: ignore[return-value]
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError("", f"cannot read {str(path)!r}: {exc}") from None


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
    ``{inputs}``; ``meta`` carries anything else (persona traits, difficulty).
    """

    # Infinite floats in meta/params survive a JSON round trip (as Infinity).
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    id: str
    kind: Literal["agent", "function", "tool"] = "agent"
    role: str | None = None
    prompt: str | None = None
    llm: str = "default"
    params: dict[str, Any] = Field(default_factory=dict)
    function: str | None = None
    template: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

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
        for key in v:
            if key not in SAMPLING_OVERRIDES:
                raise _FieldProblem(
                    (key,), f"unknown sampling parameter (allowed: {', '.join(SAMPLING_OVERRIDES)})"
                )
        try:
            sampled = SamplingParams(**v)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            loc = tuple(err.get("loc", ()))
            raise _FieldProblem(loc, _error_text(err, None)[1]) from None
        # Keep only the given keys, normalised (stop becomes a list) so that the
        # spec serialises back to plain YAML/JSON.
        out: dict[str, Any] = {}
        for key in v:
            value = getattr(sampled, key)
            out[key] = list(value) if isinstance(value, tuple) else value
        return out

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
                    f"unknown template placeholder {{{f}}} (use {{task}} and {{inputs}}; "
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
    meta: dict[str, Any] = Field(default_factory=dict)

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
    def from_yaml(cls, text_or_path: str | Path) -> GraphSpec:
        """Read a spec from YAML text, or from a file (a ``Path`` or a one-line ``*.yaml``/``*.yml`` string)."""
        text, source = _read_source(text_or_path, (".yaml", ".yml", ".json"))
        data = load_yaml_bounded(text)
        spec = cls.from_data(data, source=source)
        log.debug("read graph spec %r (%d nodes) from %s", spec.name, len(spec.nodes), source or "text")
        return spec

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> GraphSpec:
        """Read a spec from JSON text, or from a file (a ``Path`` or a one-line ``*.json`` string)."""
        text, source = _read_source(text_or_path, (".json",))
        if len(text) > _SPEC_MAX_CHARS:
            raise SpecError(
                "", f"the document is too long ({len(text)} characters, at most {_SPEC_MAX_CHARS})"
            )
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(
                "", f"JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from None
        except RecursionError:
            raise SpecError("", "the document is nested too deeply to read") from None
        except ValueError as exc:
            raise SpecError("", f"JSON value error: {exc}") from None
        _check_size(data, max_items=_SPEC_MAX_ITEMS, max_depth=_SPEC_MAX_DEPTH)
        return cls.from_data(data, source=source)

    @classmethod
    def from_file(cls, path: str | Path) -> GraphSpec:
        """Read a ``.yaml``/``.yml`` or ``.json`` file (chosen by suffix)."""
        p = Path(path)
        suffix = p.suffix.lower()
        if suffix == ".json":
            return cls.from_json(p)
        if suffix in (".yaml", ".yml"):
            return cls.from_yaml(p)
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
        """YAML text that :meth:`from_yaml` reads back into an equal spec (defaults left out)."""
        data = self.model_dump(mode="python", exclude_defaults=True)
        return _dump_yaml(self._compact(data))

    def to_json(self, *, indent: int | None = 2) -> str:
        """JSON text that :meth:`from_json` reads back into an equal spec."""
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
    def node_ids(self) -> list[str]:
        """Node ids in declaration order."""
        return [n.id for n in self.nodes]

    def edge_pairs(self) -> list[tuple[str, str]]:
        """``(source, target)`` pairs in declaration order."""
        return [e.pair for e in self.edges]

    @staticmethod
    def edges_from(items: Iterable[Any]) -> list[EdgeSpec]:
        """Edges from ``(a, b)``, ``(a, b, label)``, ``"a -> b"``, dicts or EdgeSpec objects."""
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
