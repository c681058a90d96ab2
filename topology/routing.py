"""Routers: edges whose targets are chosen at run time, per message.

A router sits on a *source* node. Each time the source produces an output,
the router picks where that output goes among the targets it declares
(``END`` ends the branch). It may pick one target, several, or send several
payloads to one node (:class:`Send`, LangGraph's dynamic fan-out): each
``Send`` becomes its own instance of the target in the next superstep, and
all those instances share that step's batched model call.

Three kinds, all behind the same :class:`Router` protocol:

* a Python function of a :class:`RouteContext` (``kind: function``);
* an LLM asked to name the next node, its answer parsed against the allowed
  targets (``kind: llm``; see :mod:`societas.topology.llm_router`);
* any object with ``route(ctx)`` (``kind: router``): a learned policy, such
  as a trained ``marl.routing`` model loaded from a checkpoint, routes live
  without this layer importing ``marl``. An object that also has
  ``route_batch(ctxs)`` gets every decision of a superstep in one call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, overload, runtime_checkable

__all__ = [
    "END",
    "BatchRouter",
    "OutputHistory",
    "RouteContext",
    "RouteDecision",
    "Router",
    "RoutingError",
    "Send",
    "normalize_decision",
]

END = "END"
"""The target that ends a branch: a message routed to it goes nowhere."""


class RoutingError(ValueError):
    """A router returned something that is not a decision over its declared targets."""


@dataclass(frozen=True)
class Send:
    """Deliver ``payload`` (instead of the source's output) to ``node``, as an instance of its own."""

    node: str
    payload: str


class OutputHistory(Sequence[tuple[str, str]]):
    """The ``(node, text)`` outputs of a run so far, read from its trace only when a router asks.

    Building the list for every decision cost a loop a time that grew with
    its length; most routers never look at it.
    """

    def __init__(self, events: Sequence[Any], upto: int | None = None) -> None:
        self._events = events
        self._upto = len(events) if upto is None else upto
        self._items: list[tuple[str, str]] | None = None

    def _all(self) -> list[tuple[str, str]]:
        if self._items is None:
            self._items = [
                (e.sender, e.output)
                for e in self._events[: self._upto]
                if e.kind not in ("router", "tool_call") and not e.meta.get("partial")
            ]
        return self._items

    @overload
    def __getitem__(self, i: int) -> tuple[str, str]: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[tuple[str, str]]: ...

    def __getitem__(self, i: int | slice) -> tuple[str, str] | Sequence[tuple[str, str]]:
        return self._all()[i]

    def __len__(self) -> int:
        return len(self._all())

    def __repr__(self) -> str:
        return f"OutputHistory({self._all()!r})"


@dataclass(frozen=True)
class RouteContext:
    """What a router sees when it routes one output.

    ``targets`` are the allowed targets in declaration order (``END``
    included when declared); ``descriptions`` maps a target to what it is
    for (the router's labels, else the node's role). ``state`` is the run's
    scratch space (the same dict function nodes see); ``history`` holds the
    outputs of every node so far, oldest first, as ``(node, text)``.
    """

    source: str
    output: str
    task: str
    targets: tuple[str, ...]
    step: int
    instance: int  # how many times the source ran before this output (0 for its first)
    inputs: tuple[tuple[str, str], ...] = ()
    descriptions: dict[str, str] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    history: Sequence[tuple[str, str]] = ()
    task_index: int = 0


RouteDecision = str | Send | Sequence[str | Send]
"""A target id, a :class:`Send`, or a list of them (an empty list routes nowhere)."""


@runtime_checkable
class Router(Protocol):
    """Chooses where one output goes."""

    def route(self, ctx: RouteContext) -> RouteDecision: ...


@runtime_checkable
class BatchRouter(Protocol):
    """A router that decides a whole superstep's outputs at once (one forward pass for a learned policy)."""

    def route_batch(self, ctxs: Sequence[RouteContext]) -> list[RouteDecision]: ...


def normalize_decision(
    decision: Any, ctx: RouteContext, *, multi: bool, router_name: str
) -> list[str | Send]:
    """A decision as a list of targets and sends, checked against ``ctx.targets``.

    Raises :class:`RoutingError` naming the router, the source and what was
    wrong: an unknown target, a non-string, or several targets from a router
    not declared ``multi``.
    """
    items: list[Any]
    if isinstance(decision, (str, Send)):
        items = [decision]
    elif isinstance(decision, Sequence) and not isinstance(decision, (bytes, bytearray)):
        items = list(decision)
    else:
        raise RoutingError(
            f"router {router_name!r} on {ctx.source!r} returned {type(decision).__name__} "
            f"{decision!r}; expected a target id, a Send or a list of them"
        )
    out: list[str | Send] = []
    allowed = set(ctx.targets)
    for item in items:
        if isinstance(item, Send):
            if item.node not in allowed or item.node == END:
                raise RoutingError(
                    f"router {router_name!r} on {ctx.source!r} sent to unknown target {item.node!r} "
                    f"(allowed: {', '.join(ctx.targets)})"
                )
            if not isinstance(item.payload, str):
                raise RoutingError(
                    f"router {router_name!r} on {ctx.source!r}: Send to {item.node!r} has a "
                    f"{type(item.payload).__name__} payload; payloads are text"
                )
        elif isinstance(item, str):
            if item not in allowed:
                raise RoutingError(
                    f"router {router_name!r} on {ctx.source!r} chose unknown target {item!r} "
                    f"(allowed: {', '.join(ctx.targets)})"
                )
        else:
            raise RoutingError(
                f"router {router_name!r} on {ctx.source!r} returned a {type(item).__name__} "
                f"({item!r}) in its decision; expected target ids or Send objects"
            )
        out.append(item)
    plain = [x for x in out if isinstance(x, str)]
    if not multi and (len(plain) > 1 or (plain and len(out) > len(plain))):
        raise RoutingError(
            f"router {router_name!r} on {ctx.source!r} chose {len(out)} targets "
            f"({', '.join(x if isinstance(x, str) else x.node for x in out)}) but is not declared multi"
        )
    return out
