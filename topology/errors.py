"""Errors raised while reading, validating and parsing topologies.

Every error here is a :class:`SpecError`, itself a ``ValueError``, and names
the place of the problem as a field path (``nodes[2].llm``, ``layers[1][0].ref[0]``;
the empty string for the document as a whole), so that a bad file or a bad
LLM answer fails with a message a person can act on instead of a traceback.

AgentConductor's orchestrator is rewarded differently for each way its YAML
answer can fail (no YAML at all, a YAML syntax error, a schema violation, a
logically impossible topology), so those four failures are distinct classes
under :class:`TopologyParseError`, each with a stable ``kind`` string that a
reward function can key on.

:func:`spec_error_from_validation` turns a pydantic ``ValidationError`` into
a :class:`SpecError` whose path is written the way a person reads it
(:func:`format_path`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, get_args, get_origin

from pydantic import BaseModel, ValidationError

__all__ = [
    "PARSE_ERROR_KINDS",
    "FieldProblem",
    "LogicInvalid",
    "NoYAMLFound",
    "SchemaInvalid",
    "SpecError",
    "TopologyParseError",
    "YAMLSyntaxError",
    "format_path",
    "spec_error_from_validation",
    "validation_error_text",
]


class SpecError(ValueError):
    """A topology specification is malformed or inconsistent.

    ``path`` is the field path of the problem (``""`` for the whole document)
    and ``message`` says what is wrong; ``str(err)`` reads
    ``"nodes[2].llm: unknown LLM 'big' (known: default)"``.
    """

    def __init__(self, path: str, message: str) -> None:
        # Both go to ValueError.args so that the error pickles (process pools)
        # and re-creates itself with the same arguments.
        super().__init__(path, message)
        self.path = path
        self.message = message

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(path={self.path!r}, message={self.message!r})"


class TopologyParseError(SpecError):
    """An LLM-written layered topology (AgentConductor YAML) could not be used.

    Subclasses distinguish the stage that failed; ``kind`` is a stable
    identifier of that stage for rewards and statistics.
    """

    kind: ClassVar[str] = "parse_error"


class NoYAMLFound(TopologyParseError):
    """The answer holds no YAML block and no ``layers:`` section."""

    kind: ClassVar[str] = "no_yaml"


class YAMLSyntaxError(TopologyParseError):
    """A YAML block was found but does not load (syntax error, plain text, too large or too deep)."""

    kind: ClassVar[str] = "yaml_syntax"


class SchemaInvalid(TopologyParseError):
    """The YAML loads but does not have the layered-topology shape (types, keys)."""

    kind: ClassVar[str] = "schema_invalid"


class LogicInvalid(TopologyParseError):
    """The topology is well-formed but impossible or wasteful (bad refs, unknown roles, dead agents)."""

    kind: ClassVar[str] = "logic_invalid"


PARSE_ERROR_KINDS: tuple[str, ...] = (
    NoYAMLFound.kind,
    YAMLSyntaxError.kind,
    SchemaInvalid.kind,
    LogicInvalid.kind,
)
"""The four parse-failure kinds, from the earliest stage to the latest."""


# ---------------------------------------------------------------------------
# pydantic validation errors as SpecError
# ---------------------------------------------------------------------------


class FieldProblem(ValueError):
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


def validation_error_text(
    err: Mapping[str, Any], root: type[BaseModel] | None
) -> tuple[tuple[str | int, ...], str]:
    """The ``(loc, message)`` of one pydantic error dict, in words a person can act on.

    ``root`` (the validated model class) lets an unknown-field error list the
    fields that are allowed.
    """
    loc = tuple(err.get("loc", ()))
    kind = err.get("type")
    msg = str(err.get("msg", "invalid value"))
    ctx = err.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, FieldProblem):
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
    texts = [validation_error_text(e, model) for e in errors]
    loc, message = texts[0]
    path = format_path(tuple(prefix) + loc)
    rest = texts[1:]
    if rest:
        shown = "; ".join(f"{format_path(tuple(prefix) + loc_) or '<document>'}: {m}" for loc_, m in rest[:4])
        more = f" and {len(rest) - 4} more" if len(rest) > 4 else ""
        plural = "s" if len(rest) > 1 else ""
        message = f"{message} (also {len(rest)} more error{plural}: {shown}{more})"
    return error_cls(path, message)
