"""Traces: every message of a run, in order, saved as JSONL.

One :class:`TraceEvent` per node execution: who sent it, who receives it,
the exact prompt the node saw, what it produced, tokens and latency. A trace
is what rewards (societas.marl.llm), behaviour classifiers (patterns) and renderers
read; it is also the record a researcher inspects afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = ["NodeKind", "Trace", "TraceEvent", "TraceTotals"]

NodeKind = Literal["agent", "function", "tool", "interrupt", "graph", "router", "tool_call"]
"""What an event records: the output of an LLM ``agent``, of Python code run as a ``function`` or
``tool`` node, of an ``interrupt`` (a person's answer, or the question it waits on), of a
``graph`` node (a subgraph, whose own trace is in ``meta["subtrace"]``); a ``router``'s decision;
or one ``tool_call`` an agent made (the tool's result is the output)."""


@dataclass
class TraceEvent:
    step: int  # superstep index, from 0
    round: int  # round of a cyclic block (0 for acyclic nodes)
    sender: str  # node id
    receivers: list[str]  # node ids this output is delivered to
    kind: NodeKind
    role: str | None
    prompt: list[dict[str, str]]  # chat turns as sent (empty for functions)
    output: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0  # wall time of the batched call this event was part of
    batch_size: int = 1  # how many prompts shared that call
    llm: str | None = None
    finish_reason: str | None = None
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        # By hand rather than dataclasses.asdict, whose deep copy dominated checkpointing a step.
        return {
            "step": self.step,
            "round": self.round,
            "sender": self.sender,
            "receivers": list(self.receivers),
            "kind": self.kind,
            "role": self.role,
            "prompt": [dict(m) for m in self.prompt],
            "output": self.output,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "latency_s": self.latency_s,
            "batch_size": self.batch_size,
            "llm": self.llm,
            "finish_reason": self.finish_reason,
            "error": self.error,
            "meta": dict(self.meta),
        }


@dataclass
class TraceTotals:
    calls: int  # node executions that called an LLM
    llm_batches: int  # batched generate() calls
    prompt_tokens: int
    completion_tokens: int
    wall_s: float

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tokens"] = self.tokens
        return d


class Trace:
    """An ordered list of :class:`TraceEvent` plus run-level metadata."""

    def __init__(self, events: Iterable[TraceEvent] = (), meta: dict[str, Any] | None = None) -> None:
        self.events: list[TraceEvent] = list(events)
        self.meta: dict[str, Any] = dict(meta or {})

    def __iter__(self) -> Iterator[TraceEvent]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)

    def __getitem__(self, i: int) -> TraceEvent:
        return self.events[i]

    def append(self, ev: TraceEvent) -> None:
        self.events.append(ev)

    def by_sender(self, node_id: str) -> list[TraceEvent]:
        return [e for e in self.events if e.sender == node_id]

    def totals(self) -> TraceTotals:
        # Model calls: agent turns, and the decisions of LLM routers (the only router events with tokens).
        agent_events = [e for e in self.events if e.kind == "agent" or (e.kind == "router" and e.tokens)]
        return TraceTotals(
            calls=len(agent_events),
            llm_batches=int(self.meta.get("llm_batches", 0)),
            prompt_tokens=sum(e.prompt_tokens for e in agent_events),
            completion_tokens=sum(e.completion_tokens for e in agent_events),
            wall_s=float(self.meta.get("wall_s", 0.0)),
        )

    def edge_tokens(self) -> dict[tuple[str, str], int]:
        """Completion tokens carried along each (sender, receiver) edge (node outputs only:
        a router's own tokens and an agent's tool calls travel along no edge)."""
        out: dict[tuple[str, str], int] = {}
        for e in self.events:
            if e.kind in ("router", "tool_call"):
                continue
            for r in e.receivers:
                out[(e.sender, r)] = out.get((e.sender, r), 0) + e.completion_tokens
        return out

    # -- persistence -------------------------------------------------------
    def save_jsonl(self, path: str | Path) -> Path:
        """Write a header line (``{"meta": ...}``) then one event per line."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            f.write(json.dumps({"meta": self.meta}, default=str) + "\n")
            for e in self.events:
                f.write(json.dumps(e.to_dict(), default=str) + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def load_jsonl(cls, path: str | Path) -> Trace:
        meta: dict[str, Any] = {}
        events: list[TraceEvent] = []
        with Path(path).open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    d = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{lineno}: not JSON: {exc}") from None
                if "meta" in d and len(d) == 1:
                    meta = d["meta"]
                    continue
                try:
                    events.append(TraceEvent(**d))
                except TypeError as exc:
                    raise ValueError(f"{path}:{lineno}: not a trace event: {exc}") from None
        return cls(events, meta)
