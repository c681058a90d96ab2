"""The LLM router: a model names where a message goes next.

The model sees the task, the message to route and the allowed targets with
what each is for, and answers with a target's name. The answer is parsed
against the allowed targets (whole words, case-insensitive; the longest name
wins where one contains another, the earliest mention wins otherwise). An
answer that names no allowed target is asked again once, with the list; if
the second answer names none either, the router's ``fallback`` takes the
message, and without a fallback the run fails with a
:class:`~societas.topology.run_state.NodeError` that quotes both answers.

Prompts of every LLM router of a superstep go to their model in one
batched call (and the retries of that step in one more).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .routing import END, RouteContext

__all__ = ["parse_route_answer", "retry_prompt", "route_prompt"]

_SYSTEM = (
    "You route messages between the members of a team of agents. "
    "Read the message and decide who acts on it next."
)


def _describe(ctx: RouteContext) -> str:
    lines = []
    for t in ctx.targets:
        what = ctx.descriptions.get(t) or ("finish: no one else needs to act" if t == END else "")
        lines.append(f"- {t}: {what}" if what else f"- {t}")
    return "\n".join(lines)


def route_prompt(ctx: RouteContext, instructions: str | None, *, multi: bool) -> list[dict[str, str]]:
    """The chat prompt asking the model where ``ctx.output`` goes."""
    system = _SYSTEM if not instructions else f"{_SYSTEM}\n\n{instructions.strip()}"
    ask = (
        "Answer with the names of every member who should act next, separated by commas"
        if multi
        else "Answer with the name of the one member who should act next"
    )
    user = (
        f"Task:\n{ctx.task.strip()}\n\n"
        f"Message from {ctx.source}:\n{ctx.output.strip()}\n\n"
        f"Members you may choose from:\n{_describe(ctx)}\n\n"
        f"{ask}, and nothing else."
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def retry_prompt(
    prompt: Sequence[dict[str, Any]], answer: str, ctx: RouteContext, *, multi: bool
) -> list[dict[str, Any]]:
    """``prompt`` followed by the invalid answer and a request naming the allowed targets."""
    shown = answer.strip()
    shown = shown if len(shown) <= 200 else shown[:197] + "..."
    what = "one or more of" if multi else "exactly one of"
    return [
        *prompt,
        {"role": "assistant", "content": answer},
        {
            "role": "user",
            "content": f"Your answer {shown!r} names none of the members. "
            f"Answer with {what}: {', '.join(ctx.targets)}.",
        },
    ]


def parse_route_answer(answer: str, targets: Sequence[str], *, multi: bool) -> list[str]:
    """The targets an answer names (empty when it names none), in order of first mention."""
    found: list[tuple[int, str]] = []
    taken: list[tuple[int, int]] = []
    for t in sorted(targets, key=len, reverse=True):
        for m in re.finditer(rf"(?<![\w.\-]){re.escape(t)}(?![\w\-]|\.\w)", answer, flags=re.IGNORECASE):
            if any(a < m.end() and m.start() < b for a, b in taken):
                continue  # inside a longer name already matched
            taken.append((m.start(), m.end()))
            found.append((m.start(), t))
    found.sort()
    out: list[str] = []
    for _, t in found:
        if t not in out:
            out.append(t)
    return out if multi else out[:1]
