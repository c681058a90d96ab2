"""Tools an agent may call: definitions, the text protocol for local models, and built-in tools.

A :class:`Tool` wraps a plain Python function. :meth:`Tool.from_function`
(or the :func:`tool` decorator) reads the JSON schema of its arguments from
the signature, through pydantic, and the descriptions from the docstring;
:meth:`Tool.call` validates the model's arguments with the same pydantic
model (lax mode: ``"3"`` is accepted for an ``int``) and runs the function.

Two ways for a model to call tools:

Native (servers that support it)
    An :class:`~societas.agents.llm.openai_compat.OpenAICompatibleLLM` sends
    each tool's :meth:`Tool.openai_schema` and returns the calls in
    ``Completion.tool_calls`` (backends that can do this have
    ``supports_native_tools = True``). The conversation continues with an
    assistant turn carrying ``tool_calls`` (:func:`assistant_tool_calls_message`)
    and one ``tool`` turn per call (:func:`tool_message`).

Text protocol (every other backend; Hermes / Qwen style)
    :func:`tools_system_prompt` lists the tools inside ``<tools></tools>`` and
    tells the model to write ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
    (several blocks are parallel calls). :func:`parse_tool_calls` reads the
    blocks of a reply, and :func:`tool_results_message` carries the results
    back in a user turn, one ``<tool_response>`` block per result.

Errors are meant for the model to read and fix: bad arguments, an exception
inside a tool and unreadable calls all become text naming what was wrong
(:meth:`Tool.run` never raises for them), while a bad *definition* raises
:class:`ToolError` when the tool is made.

Built-in tools: :func:`calculator` (a safe arithmetic evaluator over Python's
``ast``) and :func:`python_tool` (runs code in :mod:`societas.agents.sandbox`,
which fails closed when bubblewrap cannot run).
"""

from __future__ import annotations

import ast
import inspect
import json
import math
import operator
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PydanticUserError,
    TypeAdapter,
    ValidationError,
    create_model,
)

from .llm.base import ToolCall
from .sandbox import Sandbox, SandboxError, SandboxResult

__all__ = [
    "ParsedReply",
    "Tool",
    "ToolArgumentError",
    "ToolCall",
    "ToolError",
    "ToolExecutionError",
    "ToolResult",
    "assistant_tool_calls_message",
    "calculator",
    "parse_tool_calls",
    "python_tool",
    "run_tool_call",
    "tool",
    "tool_message",
    "tool_results_message",
    "tools_by_name",
    "tools_system_prompt",
]

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_GOT_CHARS = 60  # how much of a bad value an argument error quotes


# ---------------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ToolResult:
    """What a tool call gave: ``content`` is the text the model sees (``"Error: ..."`` when ``error``)."""

    call_id: str
    name: str
    content: str
    error: bool = False


class ToolError(ValueError):
    """A function that cannot be made into a tool (raised when the tool is defined)."""


class ToolArgumentError(ValueError):
    """The arguments of a call do not fit the tool; the message is written for the model.

    ``tool`` is the tool's name and ``problems`` lists one line per bad field.
    """

    def __init__(self, message: str, *, tool: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.tool = tool
        self.problems = list(problems)


class ToolExecutionError(RuntimeError):
    """The tool itself failed; the message is ``"Type: message"`` of what it raised (or a tool's own text).

    ``tool`` is the tool's name.
    """

    def __init__(self, message: str, *, tool: str = "") -> None:
        super().__init__(message)
        self.tool = tool


# --------------------------------------------------------------------------------------------- docstrings

_GOOGLE_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters)\s*:\s*$"
)
_ANY_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters|Returns?|Yields?"
    r"|Raises|Examples?|Notes?|Warnings?|See Also|Attributes|Todo|References)\s*:\s*$"
)
_GOOGLE_ENTRY = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM = re.compile(
    r"^:(?:param|parameter|arg|argument|key|keyword)\s+(?:[^:]*\s)?(\*{0,2}\w+)\s*:\s*(.*)$"
)
_SPHINX_FIELD = re.compile(r"^:\w+")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The first paragraph (joined into one line) and the per-parameter descriptions.

    Google style (an ``Args:`` section, entries ``name (type): text`` with
    indented continuation lines) and Sphinx style (``:param [type] name: text``)
    are understood.
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    for line in lines:
        stripped = line.strip()
        if not stripped or _ANY_SECTION.match(stripped) or _SPHINX_FIELD.match(stripped):
            break
        summary.append(stripped)
    params: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        sphinx = _SPHINX_PARAM.match(stripped)
        if sphinx:
            name, text = sphinx.group(1), [sphinx.group(2).strip()]
            base = _indent(line)
            i += 1
            while i < len(lines):
                nxt = lines[i]
                if not nxt.strip() or _indent(nxt) <= base or _SPHINX_FIELD.match(nxt.strip()):
                    break
                text.append(nxt.strip())
                i += 1
            params[name] = " ".join(t for t in text if t)
            continue
        if _GOOGLE_SECTION.match(stripped):
            base = _indent(line)
            i += 1
            current: str | None = None
            entry_indent: int | None = None
            while i < len(lines):
                nxt = lines[i]
                if not nxt.strip():
                    i += 1
                    continue
                ind = _indent(nxt)
                if ind <= base:
                    break
                if entry_indent is None:
                    entry_indent = ind
                entry = _GOOGLE_ENTRY.match(nxt.strip()) if ind <= entry_indent else None
                if entry:
                    current = entry.group(1)
                    params[current] = entry.group(2).strip()
                elif current is not None:
                    params[current] = (params[current] + " " + nxt.strip()).strip()
                i += 1
            continue
        i += 1
    return " ".join(summary), params


# ------------------------------------------------------------------------------------------------ schema


def _strip_titles(schema: Any) -> Any:
    """A copy of a JSON schema without pydantic's ``title`` keys (property *names* called title stay)."""
    if isinstance(schema, list):
        return [_strip_titles(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key in ("properties", "$defs", "patternProperties"):
            out[key] = {name: _strip_titles(sub) for name, sub in value.items()}
        elif key in ("default", "const", "enum", "examples", "required"):
            out[key] = value
        else:
            out[key] = _strip_titles(value)
    return out


def _inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """Replace ``$ref``s to ``$defs`` by the definitions (small models read inline schemas best).

    A recursive definition cannot be inlined: its references and ``$defs`` stay.
    """
    defs: dict[str, Any] = schema.get("$defs", {})
    kept: set[str] = set()

    def walk(node: Any, stack: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [walk(n, stack) for n in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            name = ref[len("#/$defs/") :]
            if name in stack or name not in defs:
                kept.add(name)
                return {k: walk(v, stack) for k, v in node.items()}
            inlined = walk(defs[name], (*stack, name))
            siblings = {k: walk(v, stack) for k, v in node.items() if k != "$ref"}
            return {**inlined, **siblings}
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "$defs":
                continue
            if key in ("properties", "patternProperties"):
                out[key] = {name: walk(sub, stack) for name, sub in value.items()}
            elif key in ("default", "const", "enum", "examples", "required"):
                out[key] = value
            else:
                out[key] = walk(value, stack)
        return out

    result = walk(schema, ())
    if kept:
        # Definitions reachable from a kept reference are kept whole (they refer to each other).
        result["$defs"] = {name: walk(defs[name], (name,)) for name in sorted(defs)}
    return result


def _describe_type(schema: Mapping[str, Any]) -> str:
    """A short name of what a property schema expects, for messages to the model."""
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    if "anyOf" in schema:
        return " or ".join(_describe_type(s) for s in schema["anyOf"])
    kind = schema.get("type")
    if kind == "array" and isinstance(schema.get("items"), Mapping):
        return f"array of {_describe_type(schema['items'])}"
    if isinstance(kind, str):
        return kind
    if "properties" in schema:
        return "object"
    return "any JSON value"


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return kinds.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _GOT_CHARS else text[: _GOT_CHARS - 3] + "..."


def _snippet(text: str, pos: int, width: int = 30) -> str:
    """The text around ``pos`` on one line, for messages about invalid JSON."""
    start, end = max(0, pos - width), min(len(text), pos + width)
    piece = text[start:end].replace("\n", " ")
    return ("..." if start else "") + piece + ("..." if end < len(text) else "")


def _to_text(value: Any) -> str:
    """A tool's return value as the text the model sees."""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


# -------------------------------------------------------------------------------------------------- Tool


class Tool:
    """A function a model may call, with the JSON schema of its arguments.

    Make one with :meth:`from_function` or the :func:`tool` decorator.
    Attributes: ``name``, ``description``, ``parameters`` (a JSON schema:
    ``{"type": "object", "properties", "required", "additionalProperties":
    false}``), ``fn``, ``requires_approval`` (a hint for the caller: ask a
    person before running it) and ``runs_code`` (it executes arbitrary code).
    Calling the tool like a function calls ``fn`` directly.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str,
        description: str,
        parameters: dict[str, Any],
        arguments_model: type[BaseModel],
        positional: Sequence[str] = (),
        requires_approval: bool = False,
        runs_code: bool = False,
        propagate: tuple[type[BaseException], ...] = (),
    ) -> None:
        """Prefer :meth:`from_function`. ``arguments_model`` validates the arguments (its fields are
        aliased to the parameter names), ``positional`` names the positional-only parameters, and
        ``propagate`` lists exception types that pass through :meth:`call` and :meth:`run` untouched
        (failures of the machinery that the model cannot fix)."""
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ToolError(f"tool name {name!r} must be 1 to 64 letters, digits, '_' or '-'")
        self.fn = fn
        self.name = name
        self.description = description
        self.parameters = parameters
        self.requires_approval = requires_approval
        self.runs_code = runs_code
        self._model = arguments_model
        self._positional = tuple(positional)
        # parameter name -> the model's field name (fields are aliased to the parameter names)
        self._fields = {(f.alias or fname): fname for fname, f in arguments_model.model_fields.items()}
        self._propagate = propagate
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    # ------------------------------------------------------------------ making
    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        requires_approval: bool = False,
        runs_code: bool = False,
    ) -> Tool:
        """A tool from a function's signature (type hints, defaults) and docstring.

        The first paragraph of the docstring is the description (unless
        ``description`` is given); Google ``Args:`` entries and Sphinx
        ``:param x:`` lines describe the parameters. Every parameter needs a
        type annotation that pydantic can turn into a JSON schema (int, float,
        bool, str, list[...], dict[...], Literal, Optional, pydantic models,
        ...); ``*args``, ``**kwargs``, coroutine functions and unresolvable
        annotations raise :class:`ToolError` naming the function and the parameter.
        """
        label = getattr(fn, "__qualname__", None) or repr(fn)
        if not callable(fn):
            raise ToolError(f"a tool needs a function, got {type(fn).__name__}")
        if inspect.iscoroutinefunction(fn):
            raise ToolError(f"tool function {label}: coroutine functions are not supported; use a plain def")
        tool_name = name if name is not None else getattr(fn, "__name__", "")
        if not isinstance(tool_name, str) or not _NAME_RE.match(tool_name):
            raise ToolError(
                f"tool function {label}: the name {tool_name!r} is not a valid tool name (1 to 64 letters, "
                "digits, '_' or '-'); pass name=..."
            )
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError) as e:
            raise ToolError(f"tool function {label}: its signature cannot be read ({e})") from None
        # A callable object's annotations are those of its __call__.
        hints_of: Any = fn
        if not (inspect.isfunction(fn) or inspect.ismethod(fn) or isinstance(fn, type)):
            hints_of = type(fn).__call__
        try:
            hints = typing.get_type_hints(hints_of, include_extras=True)
        except Exception as e:  # a NameError for an undefined name in a string annotation, mostly
            raise ToolError(
                f"tool function {label}: its type annotations cannot be resolved ({type(e).__name__}: {e})"
            ) from None
        summary, param_docs = _parse_docstring(inspect.getdoc(fn) or inspect.getdoc(hints_of))
        unknown = sorted(set(param_docs) - set(signature.parameters))
        if unknown:
            raise ToolError(
                f"tool function {label}: the docstring describes parameter(s) {', '.join(unknown)} that the "
                f"function does not have (its parameters: {', '.join(signature.parameters) or 'none'})"
            )

        fields: dict[str, Any] = {}
        positional: list[str] = []
        for k, (pname, param) in enumerate(signature.parameters.items()):
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                star = "*" if param.kind == param.VAR_POSITIONAL else "**"
                raise ToolError(
                    f"tool function {label}: parameter {star}{pname} is not supported; a tool takes named "
                    "parameters only"
                )
            if pname not in hints:
                raise ToolError(
                    f"tool function {label}: parameter {pname!r} has no type annotation; annotate it "
                    "(e.g. 'x: int') so that the model knows what to pass"
                )
            annotation = hints[pname]
            try:
                TypeAdapter(annotation).json_schema()
            except (PydanticUserError, TypeError, ValueError) as e:
                first = str(e).splitlines()[0] if str(e) else type(e).__name__
                raise ToolError(
                    f"tool function {label}: parameter {pname!r} has type {annotation!r}, which has no JSON "
                    f"schema ({first})"
                ) from None
            if param.kind == param.POSITIONAL_ONLY:
                positional.append(pname)
            info: dict[str, Any] = {"alias": pname}
            if pname in param_docs and param_docs[pname]:
                info["description"] = param_docs[pname]
            default = ... if param.default is param.empty else param.default
            # Fields get neutral names (aliased to the parameter names), so that a parameter may be
            # called like a BaseModel attribute ("json", "copy", "model_x") without clashing.
            fields[f"p{k}"] = (annotation, Field(default, **info))
        try:
            model = create_model(
                f"{tool_name}_arguments",
                __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=False),
                **fields,
            )
            raw_schema = model.model_json_schema()
        except (PydanticUserError, TypeError, ValueError) as e:
            raise ToolError(f"tool function {label}: no JSON schema for its parameters ({e})") from None

        schema = _inline_refs(_strip_titles(raw_schema))
        parameters: dict[str, Any] = {
            "type": "object",
            "properties": schema.get("properties", {}),
            "required": list(schema.get("required", [])),
            "additionalProperties": False,
        }
        if "$defs" in schema:
            parameters["$defs"] = schema["$defs"]
        return cls(
            fn,
            name=tool_name,
            description=description if description is not None else summary,
            parameters=parameters,
            arguments_model=model,
            positional=positional,
            requires_approval=requires_approval,
            runs_code=runs_code,
        )

    # ------------------------------------------------------------------- using
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        flags = "".join(
            f", {flag}=True" for flag in ("requires_approval", "runs_code") if getattr(self, flag)
        )
        return f"Tool(name={self.name!r}{flags})"

    def openai_schema(self) -> dict[str, Any]:
        """``{"type": "function", "function": {"name", "description", "parameters"}}``."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def parameter_summary(self) -> str:
        """One line listing the valid parameters, e.g. ``x (integer, required), unit (string, optional)``."""
        props: Mapping[str, Any] = self.parameters.get("properties", {})
        required = set(self.parameters.get("required", []))
        if not props:
            return "none (call it with an empty arguments object {})"
        parts = []
        for pname, sub in props.items():
            need = "required" if pname in required else f"optional, default {_short(sub.get('default'))}"
            parts.append(f"{pname} ({_describe_type(sub)}, {need})")
        return ", ".join(parts)

    def validate(self, arguments: Mapping[str, Any] | str) -> dict[str, Any]:
        """The validated arguments (parameter name -> value, only those given), or :class:`ToolArgumentError`."""
        model = self._validated(arguments)
        return {p: getattr(model, f) for p, f in self._fields.items() if f in model.model_fields_set}

    def _validated(self, arguments: Mapping[str, Any] | str) -> BaseModel:
        if isinstance(arguments, str):
            try:
                decoded = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as e:
                raise ToolArgumentError(
                    f"Invalid arguments for tool {self.name!r}: not valid JSON ({e.msg} at line {e.lineno} "
                    f"column {e.colno}: {_snippet(arguments, e.pos)!r}). Pass a JSON object; valid "
                    f"parameters: {self.parameter_summary()}.",
                    tool=self.name,
                ) from None
            arguments = decoded
        if not isinstance(arguments, Mapping):
            raise ToolArgumentError(
                f"Invalid arguments for tool {self.name!r}: expected a JSON object, got a JSON "
                f"{_json_kind(arguments)}. Valid parameters: {self.parameter_summary()}.",
                tool=self.name,
            )
        try:
            return self._model.model_validate(dict(arguments))
        except ValidationError as e:
            problems = [self._problem(err) for err in e.errors()]
            raise ToolArgumentError(
                f"Invalid arguments for tool {self.name!r}: "
                + "; ".join(problems)
                + f". Valid parameters: {self.parameter_summary()}.",
                tool=self.name,
                problems=problems,
            ) from None

    def _problem(self, err: Mapping[str, Any]) -> str:
        loc = err.get("loc", ())
        where = ""
        for part in loc:
            where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
        kind = err.get("type")
        if kind == "missing":
            if len(loc) == 1:
                return f"missing required parameter {where!r}"
            return f"{where!r}: missing required field"
        if kind == "extra_forbidden":
            if len(loc) == 1:
                return f"unknown parameter {where!r}"
            return f"{where!r}: unknown field"
        msg = str(err.get("msg", "invalid value"))
        return f"{where or 'arguments'!r}: {msg} (got {_short(err.get('input'))})"

    def call(self, arguments: Mapping[str, Any] | str) -> str:
        """Validate ``arguments`` (a dict or a JSON string) and run the tool; its result as text.

        Bad arguments raise :class:`ToolArgumentError` (the message names the
        tool, the field and what was expected, and lists the valid
        parameters); an exception inside the tool raises
        :class:`ToolExecutionError` (``"Type: message"``). A str result is
        returned as is, a pydantic model as its JSON, anything else
        ``json.dumps``'d when possible, else ``str()``'d.
        """
        model = self._validated(arguments)
        # Positional-only parameters are passed in order (their defaults filled in); the rest by
        # name, and only those given, so that the function's own defaults apply.
        args = [getattr(model, self._fields[p]) for p in self._positional]
        kwargs = {
            p: getattr(model, f)
            for p, f in self._fields.items()
            if f in model.model_fields_set and p not in self._positional
        }
        try:
            result = self.fn(*args, **kwargs)
        except ToolExecutionError as e:
            if not e.tool:
                e.tool = self.name
            raise
        except self._propagate:
            raise
        except Exception as e:
            raise ToolExecutionError(f"{type(e).__name__}: {e}", tool=self.name) from e
        return _to_text(result)

    def run(self, call: ToolCall) -> ToolResult:
        """Run one call; argument and execution errors become ``ToolResult(error=True, content="Error: ...")``.

        A call that already carries an ``error`` (it could not be read) is
        answered with that error, without running the tool. A call naming
        another tool is a ``ValueError`` (use :func:`run_tool_call` to
        dispatch by name).
        """
        if call.name != self.name:
            raise ValueError(f"tool {self.name!r} was given a call of {call.name!r}")
        if call.error is not None:
            return ToolResult(call.id, call.name, f"Error: {call.error}", error=True)
        try:
            content = self.call(call.arguments)
        except (ToolArgumentError, ToolExecutionError) as e:
            return ToolResult(call.id, call.name, f"Error: {e}", error=True)
        return ToolResult(call.id, call.name, content)


@typing.overload
def tool(fn: Callable[..., Any]) -> Tool: ...


@typing.overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    runs_code: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    runs_code: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator making a :class:`Tool` of a function; use it bare (``@tool``) or with options (``@tool(...)``)."""

    def make(f: Callable[..., Any]) -> Tool:
        return Tool.from_function(
            f, name=name, description=description, requires_approval=requires_approval, runs_code=runs_code
        )

    if fn is None:
        return make
    return make(fn)


def tools_by_name(tools: Sequence[Tool]) -> dict[str, Tool]:
    """``{tool.name: tool}``; two tools with one name are a ``ValueError``."""
    out: dict[str, Tool] = {}
    for i, t in enumerate(tools):
        if not isinstance(t, Tool):
            raise TypeError(f"tools[{i}] must be a Tool, got {type(t).__name__}")
        if t.name in out:
            raise ValueError(f"two tools are named {t.name!r}; tool names must be distinct")
        out[t.name] = t
    return out


def run_tool_call(call: ToolCall, tools: Mapping[str, Tool]) -> ToolResult:
    """Run ``call`` with the tool of its name; an unknown name is an error result listing the known tools."""
    t = tools.get(call.name)
    if t is None:
        if call.error is not None:
            return ToolResult(call.id, call.name, f"Error: {call.error}", error=True)
        known = ", ".join(tools) or "none"
        return ToolResult(
            call.id, call.name, f"Error: unknown tool {call.name!r}; known tools: {known}", True
        )
    return t.run(call)


# -------------------------------------------------------------------------------------- text protocol

_TOOL_CALL_OPEN = "<tool_call>"
_TOOL_CALL_CLOSE = "</tool_call>"
_FENCE = re.compile(r"^```[A-Za-z0-9_-]*[ \t]*\n?(.*?)\n?[ \t]*(?:```)?$", re.DOTALL)


def tools_system_prompt(tools: Sequence[Tool]) -> str:
    """The system-prompt text that teaches a model the text protocol (Hermes / Qwen style).

    The tools are listed as JSON schemas (one :meth:`Tool.openai_schema` per
    line) inside ``<tools></tools>``; the model is told to call a tool with
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (one block per
    call, several blocks for parallel calls), that results come back inside
    ``<tool_response></tool_response>``, and to answer without a tool call when done.
    """
    by_name = tools_by_name(tools)
    if not by_name:
        raise ValueError("tools_system_prompt needs at least one tool")
    listing = "\n".join(json.dumps(t.openai_schema(), ensure_ascii=False) for t in by_name.values())
    return (
        "# Tools\n\n"
        "You may call one or more functions to help with the task. "
        "The function signatures are given as JSON schemas within <tools></tools> XML tags:\n"
        f"<tools>\n{listing}\n</tools>\n\n"
        "To call a function, write a JSON object with the function name and its arguments within "
        "<tool_call></tool_call> XML tags:\n"
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>\n\n'
        "Write one <tool_call> block per call; several blocks in one reply are run as parallel calls. "
        "Then stop and wait: the results come back in the next message, each inside "
        "<tool_response></tool_response> XML tags. When you have what you need, give your answer "
        "without any <tool_call> block."
    )


@dataclass
class ParsedReply:
    """A reply under the text protocol: the text outside the ``<tool_call>`` blocks, the calls, the problems."""

    content: str
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _strip_fence(body: str) -> str:
    match = _FENCE.match(body) if body.startswith("```") else None
    return match.group(1).strip() if match else body


def _read_call(index: int, body: str, tools: Mapping[str, Tool]) -> ToolCall | str:
    """One ``<tool_call>`` block's body as a call, or the line saying what is wrong with it."""
    label = f"<tool_call> block {index + 1}"
    body = _strip_fence(body.strip())
    if not body:
        return f'{label} is empty; write {{"name": ..., "arguments": {{...}}}} inside it'
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        return (
            f"{label} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno} "
            f"(near {_snippet(body, e.pos)!r})"
        )
    if not isinstance(data, dict):
        return f'{label} holds a JSON {_json_kind(data)}; expected an object {{"name": ..., "arguments": {{...}}}}'
    name = data.get("name")
    if name is None:
        return f"{label} has no 'name'; say which tool to call"
    if not isinstance(name, str):
        return f"{label} has a 'name' that is a JSON {_json_kind(name)}, expected the tool name as a string"
    if name not in tools:
        known = ", ".join(tools) or "none"
        return f"{label} calls unknown tool {name!r}; known tools: {known}"
    arguments = data["arguments"] if "arguments" in data else data.get("parameters", {})
    if arguments is None:
        arguments = {}
    if isinstance(arguments, str):  # as OpenAI sends them: a JSON string holding the object
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as e:
            return (
                f"{label} ({name}): 'arguments' is a string that is not valid JSON: {e.msg} at column "
                f"{e.colno} (near {_snippet(data['arguments'], e.pos)!r}); give a JSON object"
            )
    if not isinstance(arguments, dict):
        return f"{label} ({name}): 'arguments' is a JSON {_json_kind(arguments)}, expected an object"
    return ToolCall(f"call_{index}", name, arguments)


def parse_tool_calls(text: str, tools: Mapping[str, Tool]) -> ParsedReply:
    """Every ``<tool_call>...</tool_call>`` block of a reply.

    An unclosed block at the end of the text counts (models stop mid-tag),
    and a ```` ```json ```` fence inside a block is removed. The n-th block
    (from 0) gets the id ``call_<n>`` whether or not it could be read, so
    ids are unique within one reply. ``arguments`` may also be a JSON string
    holding an object (as OpenAI sends them), or be given as ``parameters``;
    missing or null arguments are ``{}``. Arguments are not validated here
    (:meth:`Tool.run` does that). Each block that cannot be used adds one
    line to ``errors``.
    """
    calls: list[ToolCall] = []
    errors: list[str] = []
    outside: list[str] = []
    pos = 0
    index = 0
    while True:
        start = text.find(_TOOL_CALL_OPEN, pos)
        if start < 0:
            outside.append(text[pos:])
            break
        outside.append(text[pos:start])
        body_start = start + len(_TOOL_CALL_OPEN)
        end = text.find(_TOOL_CALL_CLOSE, body_start)
        body = text[body_start:] if end < 0 else text[body_start:end]
        nested = body.find(_TOOL_CALL_OPEN)
        if nested >= 0:  # an unclosed block followed by another one: the first ends where the next begins
            body, end = body[:nested], body_start + nested - len(_TOOL_CALL_CLOSE)
        got = _read_call(index, body, tools)
        if isinstance(got, ToolCall):
            calls.append(got)
        else:
            errors.append(got)
        index += 1
        if end < 0:
            break
        pos = end + len(_TOOL_CALL_CLOSE)
    return ParsedReply(content="".join(outside).strip(), calls=calls, errors=errors)


def tool_results_message(results: Sequence[ToolResult], parse_errors: Sequence[str] = ()) -> dict[str, str]:
    """The user turn carrying results back under the text protocol.

    One ``<tool_response>{"name": ..., "content": ...}</tool_response>`` block
    per result (``"error": true`` is added to a failed call's object, whose
    content starts with ``Error:``), then the parse errors as plain lines
    asking the model to fix its call.
    """
    if not results and not parse_errors:
        raise ValueError("tool_results_message needs at least one result or parse error")
    parts: list[str] = []
    for r in results:
        obj: dict[str, Any] = {"name": r.name, "content": r.content}
        if r.error:
            obj["error"] = True
        parts.append(f"<tool_response>\n{json.dumps(obj, ensure_ascii=False)}\n</tool_response>")
    if parse_errors:
        lines = [f"- {e}" for e in parse_errors]
        parts.append(
            "These tool calls could not be read and were not run:\n"
            + "\n".join(lines)
            + '\nFix them and call again: <tool_call>{"name": ..., "arguments": {...}}</tool_call>'
        )
    return {"role": "user", "content": "\n".join(parts)}


def assistant_tool_calls_message(content: str, calls: Sequence[ToolCall]) -> dict[str, Any]:
    """The assistant turn that made native tool calls, for the next request's history."""
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


def tool_message(result: ToolResult) -> dict[str, str]:
    """The ``tool`` turn answering one native tool call."""
    return {"role": "tool", "tool_call_id": result.call_id, "content": result.content}


# ---------------------------------------------------------------------------------------- calculator

MAX_EXPRESSION_CHARS = 1000
"""The longest expression :func:`calculator` evaluates."""
MAX_INT_BITS = 10_000
"""The largest integer (in bits, about 3000 digits) :func:`calculator` computes."""
MAX_ROUND_DIGITS = 100
MAX_NESTING = 100
"""The deepest nesting of operations :func:`calculator` evaluates."""

_BINARY: dict[type[ast.operator], tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Add: ("+", operator.add),
    ast.Sub: ("-", operator.sub),
    ast.Mult: ("*", operator.mul),
    ast.Div: ("/", operator.truediv),
    ast.FloorDiv: ("//", operator.floordiv),
    ast.Mod: ("%", operator.mod),
    ast.Pow: ("**", operator.pow),
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "log": math.log,
    "exp": math.exp,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}
_CONSTRUCTS = {
    ast.Attribute: "attribute access",
    ast.Subscript: "subscripts",
    ast.Lambda: "lambda",
    ast.Compare: "comparisons",
    ast.BoolOp: "'and' / 'or'",
    ast.IfExp: "conditional expressions",
    ast.List: "lists",
    ast.Tuple: "tuples",
    ast.Dict: "dicts",
    ast.Set: "sets",
    ast.ListComp: "comprehensions",
    ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions",
    ast.GeneratorExp: "comprehensions",
    ast.JoinedStr: "f-strings",
    ast.NamedExpr: "assignment expressions",
    ast.Starred: "starred arguments",
    ast.Await: "await",
}


class _Disallowed(ValueError):
    """An expression the calculator refuses (names the construct); shown to the model as is."""


def _check_int(value: Any) -> Any:
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise _Disallowed(f"the result is too large (more than {MAX_INT_BITS} bits)")
    return value


def _binary(op: ast.operator, left: Any, right: Any) -> Any:
    symbol, fn = _BINARY[type(op)]
    if isinstance(left, int) and isinstance(right, int):
        if symbol == "**" and right > 0 and left not in (-1, 0, 1):
            if (left.bit_length() - 1) * right > MAX_INT_BITS or right > MAX_INT_BITS:
                raise _Disallowed(f"the power {left}**{right} is too large (more than {MAX_INT_BITS} bits)")
        if symbol == "*" and left.bit_length() + right.bit_length() > MAX_INT_BITS + 1:
            raise _Disallowed(f"the product is too large (more than {MAX_INT_BITS} bits)")
    result = fn(left, right)
    if isinstance(result, complex):
        raise _Disallowed(f"{symbol} gives a complex number here; only real results are supported")
    return _check_int(result)


def _evaluate(node: ast.AST, depth: int = 0) -> Any:
    if depth > MAX_NESTING:
        raise _Disallowed(f"the expression is nested too deeply (more than {MAX_NESTING} levels)")
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, depth + 1)
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            kind = "string" if isinstance(value, str) else type(value).__name__
            raise _Disallowed(f"{kind} literals are not allowed ({value!r}); use numbers")
        return value
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINARY:
            raise _Disallowed(f"the operator {type(node.op).__name__} is not allowed; use + - * / // % **")
        return _binary(node.op, _evaluate(node.left, depth + 1), _evaluate(node.right, depth + 1))
    if isinstance(node, ast.UnaryOp):
        if type(node.op) not in _UNARY:
            raise _Disallowed(f"the unary operator {type(node.op).__name__} is not allowed; use + or -")
        return _UNARY[type(node.op)](_evaluate(node.operand, depth + 1))
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        hint = " (call it with parentheses)" if node.id in _FUNCTIONS else ""
        raise _Disallowed(
            f"the name {node.id!r} is not allowed{hint}; known constants: {', '.join(_CONSTANTS)}; "
            f"known functions: {', '.join(_FUNCTIONS)}"
        )
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            what = repr(node.func.id) if isinstance(node.func, ast.Name) else "this expression"
            raise _Disallowed(f"calling {what} is not allowed; known functions: {', '.join(_FUNCTIONS)}")
        if node.keywords:
            raise _Disallowed(f"keyword arguments are not allowed in {node.func.id}()")
        args = [_evaluate(a, depth + 1) for a in node.args]
        if node.func.id == "round" and len(args) == 2 and abs(args[1]) > MAX_ROUND_DIGITS:
            raise _Disallowed(f"round() takes at most {MAX_ROUND_DIGITS} digits")
        return _check_int(_FUNCTIONS[node.func.id](*args))
    what = _CONSTRUCTS.get(type(node), type(node).__name__)
    raise _Disallowed(
        f"{what}: not allowed in the calculator; use numbers, + - * / // % **, pi, e and the functions "
        f"{', '.join(_FUNCTIONS)}"
    )


def _calculate(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Numbers, + - * / // % ** (with parentheses), unary minus, the constants pi and e,
    and the functions sqrt, log, exp, sin, cos, tan, abs, round, min, max.

    Args:
        expression: The expression, in Python syntax, e.g. "2*(3+4)" or "sqrt(16)".
    """
    try:
        if len(expression) > MAX_EXPRESSION_CHARS:
            raise _Disallowed(
                f"the expression is {len(expression)} characters long; the limit is {MAX_EXPRESSION_CHARS}"
            )
        try:
            tree = ast.parse(expression.strip(), mode="eval")
        except SyntaxError as e:
            raise _Disallowed(f"the expression is not valid syntax ({e.msg})") from None
        except (MemoryError, RecursionError):  # the parser's own limits
            raise _Disallowed(
                f"the expression is nested too deeply (more than {MAX_NESTING} levels)"
            ) from None
        value = _evaluate(tree)
    except _Disallowed as e:
        raise ToolExecutionError(str(e), tool="calculator") from None
    return str(value)


def calculator() -> Tool:
    """The ``calculator`` tool: evaluates an arithmetic ``expression`` safely, without ``eval``.

    Only numbers, ``+ - * / // % **``, unary signs, parentheses, ``pi``, ``e``
    and ``sqrt log exp sin cos tan abs round min max`` are allowed; anything
    else (names, attribute access, strings, calls of other functions) is an
    error naming the construct. Integers are capped at :data:`MAX_INT_BITS`
    bits (so ``9**9**9`` is refused at once), expressions at
    :data:`MAX_EXPRESSION_CHARS` characters and their nesting at
    :data:`MAX_NESTING` levels. The result is Python's ``str`` of the number
    (``"14"``, ``"4.0"``).
    """
    return Tool.from_function(
        _calculate,
        name="calculator",
        description=(
            "Evaluate an arithmetic expression exactly as written: numbers, + - * / // % ** and "
            "parentheses, the constants pi and e, and the functions "
            f"{', '.join(_FUNCTIONS)}."
        ),
    )


# ---------------------------------------------------------------------------------------------- python


def _format_run(result: SandboxResult) -> str:
    """A sandboxed run's output as the model sees it: stdout alone when that is all there is."""
    if result.ok and not result.stderr:
        return result.stdout.rstrip("\n") if result.stdout.strip() else "(no output)"
    parts = []
    if result.stdout:
        parts.append("stdout:\n" + result.stdout.rstrip("\n"))
    if result.stderr:
        parts.append("stderr:\n" + result.stderr.rstrip("\n"))
    if result.truncated:
        parts.append(f"({result.describe()})")
    return "\n".join(parts) if parts else "(no output)"


def python_tool(
    *,
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    backend: Literal["auto", "bwrap", "rlimit"] | None = None,
) -> Tool:
    """The ``python`` tool: runs the model's ``code`` in :mod:`societas.agents.sandbox`.

    ``backend=None`` is the sandbox's default (``auto``: bubblewrap, which
    fails closed where it cannot run); the unconfined ``rlimit`` backend runs
    only when asked for by name (``backend="rlimit"``, or the sandbox's own
    ``SOCIETAS_SANDBOX=rlimit``). The result is the program's stdout, with
    stderr under its own heading when there is any; a program that fails,
    times out or is killed gives an error result holding the sandbox's
    description (``"timeout after 10 s"``) and the output so far. A sandbox
    that cannot run at all (:class:`~societas.agents.sandbox.SandboxError`,
    e.g. :class:`~societas.agents.sandbox.SandboxUnavailableError`) is raised
    to the caller, not shown to the model. ``runs_code`` is True.
    """
    sandbox = Sandbox(timeout_s=timeout_s, memory_mb=memory_mb, backend=backend or "auto")

    def python(code: str) -> str:
        """Run a Python program in an isolated sandbox and return what it printed.

        Args:
            code: The complete Python source to run.
        """
        result = sandbox.run(code)
        text = _format_run(result)
        if not result.ok:
            raise ToolExecutionError(f"the program failed ({result.describe()})\n{text}".rstrip())
        return text

    t = Tool.from_function(
        python,
        description=(
            f"Run a Python program in an isolated sandbox (no network, {timeout_s:g} s time limit, "
            f"{memory_mb} MB memory) and return what it printed to stdout and stderr."
        ),
        runs_code=True,
    )
    t._propagate = (SandboxError,)  # the machinery failed: the caller must hear of it, not the model
    return t
