"""Termination conditions: when a loop or a message-driven run stops.

A :class:`Condition` looks at a :class:`ConditionView` (the events of the
loop or run so far, those of the last superstep, how many supersteps ran,
the time spent and the run's scratch space) and says whether to stop.
Conditions combine like AutoGen's: ``a | b`` stops when either holds
(:class:`AnyOf`), ``a & b`` when both hold (:class:`AllOf`)::

    until = TextMention("FINAL ANSWER", sources=["critic"]) | MaxSteps(10)

Conditions are values: they compare equal when built from equal arguments,
and each has a data form (a mapping with one key) for YAML and JSON specs::

    until:
      any:
        - {mention: "FINAL ANSWER", from: [critic]}
        - {max_steps: 10}
        - {max_messages: 20}
        - {max_tokens: 5000}
        - {timeout_s: 30}
        - {function: "pkg.mod:attr"}    # or a name registered with the Runtime
        - {all: [...]}

:func:`check_condition_data` checks that form (shape only, nothing is
imported) for a spec validator; :func:`condition_from_data` builds the
condition, and :meth:`Condition.to_data` writes it back:
``condition_from_data(c.to_data()) == c``.

Conditions hold no state of their own: everything they decide on is in the
view, so one condition object serves any number of runs at once.
"""

from __future__ import annotations

import importlib
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .errors import FieldProblem, SpecError, format_path
from .trace import TraceEvent

__all__ = [
    "CONDITION_KEYS",
    "OUTPUT_KINDS",
    "AllOf",
    "AnyOf",
    "Condition",
    "ConditionError",
    "ConditionView",
    "FunctionCondition",
    "MaxMessages",
    "MaxSteps",
    "MaxTokens",
    "TextMention",
    "Timeout",
    "check_condition_data",
    "condition_from_data",
]

OUTPUT_KINDS: frozenset[str] = frozenset({"agent", "function", "tool", "interrupt", "graph"})
"""Event kinds that are a node's output (a message), as counted by :attr:`ConditionView.messages`."""

CONDITION_KEYS: tuple[str, ...] = (
    "mention",
    "max_steps",
    "max_messages",
    "max_tokens",
    "timeout_s",
    "function",
    "any",
    "all",
)
"""The keys of the data form, one per mapping (``mention`` may come with ``from``)."""

_FUNCTION_REF = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*(:[A-Za-z_][A-Za-z0-9_.]*)?$")


class ConditionError(RuntimeError):
    """A :class:`FunctionCondition` raised, or returned something other than a bool."""


# ---------------------------------------------------------------------------
# what a condition sees
# ---------------------------------------------------------------------------


def _is_message(ev: TraceEvent) -> bool:
    meta = ev.meta or {}
    return ev.kind in OUTPUT_KINDS and meta.get("partial") is not True


@dataclass(frozen=True)
class ConditionView:
    """The state of a loop or run that a condition decides on.

    ``events`` are all events of the loop or run so far, oldest first;
    ``new_events`` those of the last superstep; ``steps`` the number of
    supersteps done; ``elapsed_s`` the wall time since the loop or run
    began; ``state`` the run's scratch space (read it, do not change it).
    """

    events: Sequence[TraceEvent] = ()
    new_events: Sequence[TraceEvent] = ()
    steps: int = 0
    elapsed_s: float = 0.0
    state: Mapping[str, Any] = field(default_factory=dict)

    @cached_property
    def messages(self) -> list[TraceEvent]:
        """The node outputs among :attr:`events`: kinds in :data:`OUTPUT_KINDS`, partial turns left out.

        An intermediate turn of a tool loop carries ``meta["partial"] = True``;
        only the turn that ends it counts as a message.
        """
        return [e for e in self.events if _is_message(e)]

    @cached_property
    def new_messages(self) -> list[TraceEvent]:
        """The node outputs among :attr:`new_events`, partial turns left out."""
        return [e for e in self.new_events if _is_message(e)]

    @cached_property
    def tokens(self) -> int:
        """Prompt plus completion tokens of all :attr:`events`."""
        return sum(e.prompt_tokens + e.completion_tokens for e in self.events)


# ---------------------------------------------------------------------------
# conditions
# ---------------------------------------------------------------------------


class Condition(ABC):
    """Base class of termination conditions: :meth:`check` says whether to stop.

    ``a | b`` is :class:`AnyOf`, ``a & b`` :class:`AllOf`; chains of the same
    operator flatten (``a | b | c`` is one ``AnyOf`` of three). Equality and
    hashing are by value.
    """

    @abstractmethod
    def check(self, view: ConditionView) -> bool:
        """Whether the loop or run should stop now."""

    @abstractmethod
    def to_data(self) -> dict[str, Any]:
        """The data form (JSON-compatible, one key per mapping) that :func:`condition_from_data` reads."""

    @abstractmethod
    def _key(self) -> tuple[Any, ...]:
        """The values that make two conditions of the same class equal."""

    def reason(self, view: ConditionView) -> str | None:
        """``None`` when the condition does not hold, else a short text saying why it holds.

        Checks the condition once (call this instead of :meth:`check`, not as
        well, when a function condition should run once per superstep).
        """
        return repr(self) if self.check(view) else None

    def __or__(self, other: object) -> Condition:
        if not isinstance(other, Condition):
            return NotImplemented
        left = self.conditions if isinstance(self, AnyOf) else (self,)
        right = other.conditions if isinstance(other, AnyOf) else (other,)
        return AnyOf(*left, *right)

    def __and__(self, other: object) -> Condition:
        if not isinstance(other, Condition):
            return NotImplemented
        left = self.conditions if isinstance(self, AllOf) else (self,)
        right = other.conditions if isinstance(other, AllOf) else (other,)
        return AllOf(*left, *right)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Condition):
            return NotImplemented
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))


def _check_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


class TextMention(Condition):
    """Holds when an output of the last superstep contains ``text``.

    ``sources`` (node ids) limits the outputs looked at to those nodes' own;
    partial turns of a tool loop are not looked at.
    """

    def __init__(self, text: str, sources: Sequence[str] | None = None) -> None:
        if not isinstance(text, str) or not text:
            raise ValueError(f"text must be a non-empty string, got {text!r}")
        if sources is not None:
            if isinstance(sources, str) or not isinstance(sources, Sequence):
                raise ValueError(f"sources must be a list of node ids, got {sources!r}")
            if not sources:
                raise ValueError("sources must not be empty (leave it out to accept every node)")
            for s in sources:
                if not isinstance(s, str) or not s:
                    raise ValueError(f"sources must hold non-empty node ids, got {s!r}")
        self.text = text
        self.sources: tuple[str, ...] | None = None if sources is None else tuple(sources)

    def check(self, view: ConditionView) -> bool:
        for e in view.new_messages:
            if self.sources is not None and e.sender not in self.sources:
                continue
            if self.text in (e.output or ""):
                return True
        return False

    def reason(self, view: ConditionView) -> str | None:
        for e in view.new_messages:
            if self.sources is not None and e.sender not in self.sources:
                continue
            if self.text in (e.output or ""):
                return f"{e.sender} mentioned {self.text!r}"
        return None

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"mention": self.text}
        if self.sources is not None:
            data["from"] = list(self.sources)
        return data

    def _key(self) -> tuple[Any, ...]:
        return (self.text, self.sources)

    def __repr__(self) -> str:
        if self.sources is None:
            return f"TextMention({self.text!r})"
        return f"TextMention({self.text!r}, sources={list(self.sources)!r})"


class MaxSteps(Condition):
    """Holds once ``n`` supersteps are done."""

    def __init__(self, n: int) -> None:
        self.n = _check_count("n", n)

    def check(self, view: ConditionView) -> bool:
        return view.steps >= self.n

    def reason(self, view: ConditionView) -> str | None:
        return f"{view.steps} steps done (max_steps {self.n})" if self.check(view) else None

    def to_data(self) -> dict[str, Any]:
        return {"max_steps": self.n}

    def _key(self) -> tuple[Any, ...]:
        return (self.n,)

    def __repr__(self) -> str:
        return f"MaxSteps({self.n})"


class MaxMessages(Condition):
    """Holds once ``n`` messages (:attr:`ConditionView.messages`) were produced."""

    def __init__(self, n: int) -> None:
        self.n = _check_count("n", n)

    def check(self, view: ConditionView) -> bool:
        return len(view.messages) >= self.n

    def reason(self, view: ConditionView) -> str | None:
        count = len(view.messages)
        return f"{count} messages (max_messages {self.n})" if count >= self.n else None

    def to_data(self) -> dict[str, Any]:
        return {"max_messages": self.n}

    def _key(self) -> tuple[Any, ...]:
        return (self.n,)

    def __repr__(self) -> str:
        return f"MaxMessages({self.n})"


class MaxTokens(Condition):
    """Holds once the events used ``n`` tokens or more (prompt plus completion)."""

    def __init__(self, n: int) -> None:
        self.n = _check_count("n", n)

    def check(self, view: ConditionView) -> bool:
        return view.tokens >= self.n

    def reason(self, view: ConditionView) -> str | None:
        return f"{view.tokens} tokens used (max_tokens {self.n})" if self.check(view) else None

    def to_data(self) -> dict[str, Any]:
        return {"max_tokens": self.n}

    def _key(self) -> tuple[Any, ...]:
        return (self.n,)

    def __repr__(self) -> str:
        return f"MaxTokens({self.n})"


class Timeout(Condition):
    """Holds once ``seconds`` of wall time have passed (``elapsed_s >= seconds``)."""

    def __init__(self, seconds: float) -> None:
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or seconds <= 0
        ):
            raise ValueError(f"seconds must be a finite number > 0, got {seconds!r}")
        self.seconds = float(seconds)

    def check(self, view: ConditionView) -> bool:
        return view.elapsed_s >= self.seconds

    def reason(self, view: ConditionView) -> str | None:
        if not self.check(view):
            return None
        return f"{view.elapsed_s:.1f} s elapsed (timeout_s {self.seconds:g})"

    def to_data(self) -> dict[str, Any]:
        return {"timeout_s": self.seconds}

    def _key(self) -> tuple[Any, ...]:
        return (self.seconds,)

    def __repr__(self) -> str:
        return f"Timeout({self.seconds:g})"


class FunctionCondition(Condition):
    """Holds when ``fn(view)`` returns ``True``.

    ``ref`` (``"package.module:attr"`` or a name registered with the Runtime)
    is what :meth:`to_data` writes; without it the condition works but cannot
    be saved. ``fn`` must return a ``bool``; anything else, or an exception,
    is a :class:`ConditionError` naming the function.
    """

    def __init__(self, fn: Callable[[ConditionView], bool], ref: str | None = None) -> None:
        if not callable(fn):
            raise ValueError(f"fn must be callable, got {type(fn).__name__} {fn!r}")
        if ref is not None and (not isinstance(ref, str) or not _FUNCTION_REF.match(ref)):
            raise ValueError(f"ref must be 'package.module:attr' or a registered name, got {ref!r}")
        self.fn = fn
        self.ref = ref

    @property
    def name(self) -> str:
        """The ref, else the function's qualified name."""
        if self.ref is not None:
            return self.ref
        module = getattr(self.fn, "__module__", None)
        qualname = getattr(self.fn, "__qualname__", None) or repr(self.fn)
        return f"{module}:{qualname}" if module else qualname

    def check(self, view: ConditionView) -> bool:
        try:
            result = self.fn(view)
        except Exception as exc:
            raise ConditionError(
                f"termination condition {self.name} raised {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(result, bool):
            text = repr(result)
            if len(text) > 80:
                text = text[:77] + "..."
            raise ConditionError(
                f"termination condition {self.name} returned {type(result).__name__} {text}, not a bool "
                "(return True or False; wrap a numpy boolean in bool())"
            )
        return result

    def reason(self, view: ConditionView) -> str | None:
        return f"{self.name} returned True" if self.check(view) else None

    def to_data(self) -> dict[str, Any]:
        if self.ref is None:
            raise ValueError(
                f"FunctionCondition({self.name}) has no ref and cannot be saved: "
                "give ref='package.module:attr' (or the name it is registered under with the Runtime)"
            )
        return {"function": self.ref}

    def _key(self) -> tuple[Any, ...]:
        return (self.fn, self.ref)

    def __repr__(self) -> str:
        return f"FunctionCondition({self.name})"


class _Combination(Condition):
    _word = ""
    _op = ""

    def __init__(self, *conditions: Condition) -> None:
        if not conditions:
            raise ValueError(f"{type(self).__name__} needs at least one condition")
        for i, c in enumerate(conditions):
            if not isinstance(c, Condition):
                raise ValueError(f"conditions[{i}] must be a Condition, got {type(c).__name__} {c!r}")
        self.conditions: tuple[Condition, ...] = tuple(conditions)

    def to_data(self) -> dict[str, Any]:
        return {self._word: [c.to_data() for c in self.conditions]}

    def _key(self) -> tuple[Any, ...]:
        return self.conditions

    def __repr__(self) -> str:
        if len(self.conditions) == 1:
            return f"{type(self).__name__}({self.conditions[0]!r})"
        parts = [
            f"({c!r})" if isinstance(c, _Combination) and len(c.conditions) > 1 else repr(c)
            for c in self.conditions
        ]
        return f" {self._op} ".join(parts)


class AnyOf(_Combination):
    """Holds when any of its conditions holds (checked in order; the first that holds ends the check)."""

    _word = "any"
    _op = "|"

    def check(self, view: ConditionView) -> bool:
        return any(c.check(view) for c in self.conditions)

    def reason(self, view: ConditionView) -> str | None:
        for c in self.conditions:
            r = c.reason(view)
            if r is not None:
                return r
        return None


class AllOf(_Combination):
    """Holds when all of its conditions hold (checked in order; the first that fails ends the check)."""

    _word = "all"
    _op = "&"

    def check(self, view: ConditionView) -> bool:
        return all(c.check(view) for c in self.conditions)

    def reason(self, view: ConditionView) -> str | None:
        reasons: list[str] = []
        for c in self.conditions:
            r = c.reason(view)
            if r is None:
                return None
            reasons.append(r)
        return " and ".join(reasons)


# ---------------------------------------------------------------------------
# data form
# ---------------------------------------------------------------------------

_Path = tuple[str | int, ...]


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _check(data: Any, path: _Path) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise FieldProblem(
            path,
            f"a condition is a mapping with one key ({', '.join(CONDITION_KEYS)}), got {_describe(data)}",
        )
    for key in data:
        if not isinstance(key, str):
            raise FieldProblem(path, f"condition keys are strings, got {_describe(key)}")
    keys = [k for k in data if k != "from"]
    if not keys:
        if "from" in data:
            raise FieldProblem(path + ("from",), "'from' goes with 'mention' only")
        raise FieldProblem(path, f"empty condition: use one of {', '.join(CONDITION_KEYS)}")
    unknown = [k for k in keys if k not in CONDITION_KEYS]
    if unknown:
        raise FieldProblem(path + (unknown[0],), f"unknown condition (allowed: {', '.join(CONDITION_KEYS)})")
    if len(keys) > 1:
        raise FieldProblem(
            path,
            f"one condition per mapping, found {', '.join(map(repr, keys))}: combine them with any: or all:",
        )
    key = keys[0]
    value = data[key]
    here = path + (key,)
    if "from" in data and key != "mention":
        raise FieldProblem(path + ("from",), "'from' goes with 'mention' only")
    if key == "mention":
        if not isinstance(value, str) or not value:
            raise FieldProblem(here, f"must be a non-empty string, got {_describe(value)}")
        out: dict[str, Any] = {"mention": value}
        sources = data.get("from")
        if sources is None:
            return out
        if isinstance(sources, str):
            sources = [sources]
        if not isinstance(sources, list | tuple):
            raise FieldProblem(path + ("from",), f"must be a list of node ids, got {_describe(sources)}")
        if not sources:
            raise FieldProblem(path + ("from",), "empty list (leave 'from' out to accept every node)")
        for i, s in enumerate(sources):
            if not isinstance(s, str) or not s:
                raise FieldProblem(path + ("from", i), f"must be a node id, got {_describe(s)}")
        out["from"] = list(sources)
        return out
    if key in ("max_steps", "max_messages", "max_tokens"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise FieldProblem(here, f"must be an integer >= 1, got {_describe(value)}")
        return {key: value}
    if key == "timeout_s":
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise FieldProblem(here, f"must be a finite number of seconds > 0, got {_describe(value)}")
        return {key: float(value)}
    if key == "function":
        if not isinstance(value, str) or not _FUNCTION_REF.match(value):
            raise FieldProblem(
                here, f"must be 'package.module:attr' or a registered name, got {_describe(value)}"
            )
        return {key: value}
    # any / all
    if not isinstance(value, list | tuple):
        raise FieldProblem(here, f"must be a list of conditions, got {_describe(value)}")
    if not value:
        raise FieldProblem(here, "empty list: give at least one condition")
    return {key: [_check(item, here + (i,)) for i, item in enumerate(value)]}


def check_condition_data(data: Any) -> Any:
    """Check the shape of a condition's data form and return it normalised.

    Nothing is imported: function refs are only checked to look like
    ``package.module:attr`` or a registered name. The normalised form is what
    :meth:`Condition.to_data` writes (``from: critic`` becomes a list,
    ``timeout_s`` a float). A :class:`Condition` is accepted too and returns
    its data form. The first problem raises :class:`FieldProblem` whose
    ``subpath`` leads to it (``("any", 1, "max_steps")``), for a pydantic
    validator to report as ``until.any[1].max_steps: ...``.
    """
    if isinstance(data, Condition):
        try:
            return data.to_data()
        except ValueError as exc:
            raise FieldProblem((), str(exc)) from None
    return _check(data, ())


def _import_ref(ref: str) -> Any:
    module, colon, attr = ref.rpartition(":")
    if not colon:
        raise ValueError(
            f"{ref!r} is not 'package.module:attr': give the function to the Runtime "
            "(functions={...}) under this name, or write its module path"
        )
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot import {ref!r}: {exc}") from None
    return obj


def _build(
    data: dict[str, Any], path: _Path, resolve: Callable[[str], Callable[..., Any]] | None
) -> Condition:
    key, value = next((k, v) for k, v in data.items() if k != "from")
    if key == "mention":
        return TextMention(value, data.get("from"))
    if key == "max_steps":
        return MaxSteps(value)
    if key == "max_messages":
        return MaxMessages(value)
    if key == "max_tokens":
        return MaxTokens(value)
    if key == "timeout_s":
        return Timeout(value)
    if key == "function":
        where = format_path(path + (key,))
        try:
            fn = _import_ref(value) if resolve is None else resolve(value)
        except Exception as exc:
            message = (
                str(exc) if resolve is None else f"cannot resolve {value!r}: {type(exc).__name__}: {exc}"
            )
            raise SpecError(where, message) from exc
        if not callable(fn):
            raise SpecError(where, f"{value!r} is {_describe(fn)}, not a function")
        return FunctionCondition(fn, ref=value)
    children = [_build(item, path + (key, i), resolve) for i, item in enumerate(value)]
    return AnyOf(*children) if key == "any" else AllOf(*children)


def condition_from_data(
    data: Any,
    *,
    resolve: Callable[[str], Callable[..., Any]] | None = None,
    prefix: Sequence[str | int] = (),
) -> Condition:
    """Build the :class:`Condition` that a data form describes.

    ``resolve`` turns a function ref into the function (the Runtime passes
    one that looks in its ``functions`` first); without it a ref is imported
    as ``package.module:attr`` and a bare name is an error. Problems raise
    :class:`SpecError` whose path (after ``prefix``, e.g. ``("until",)``)
    leads to the bad field. A :class:`Condition` is returned unchanged.
    """
    if isinstance(data, Condition):
        return data
    try:
        norm = _check(data, ())
    except FieldProblem as exc:
        raise SpecError(format_path(tuple(prefix) + exc.subpath), exc.message) from None
    return _build(norm, tuple(prefix), resolve)
