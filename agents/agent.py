"""An agent: a name, a role prompt, an LLM, sampling parameters and a parser.

:meth:`Agent.build_prompt` is the one place where an agent's chat prompt is
assembled from the task and the messages it received, so that a run's prompts
are explicit and reproducible (the trace stores them verbatim).
:func:`act_batch` sends many agents' turns to their models with ONE
``generate`` call per distinct model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .llm.base import LLM, ChatMessage, Completion, SamplingParams
from .parsers import get_parser
from .roles import role_prompt

DEFAULT_TEMPLATE = "{task}{inputs}"


def format_answers(inputs: Mapping[str, str] | Sequence[tuple[str, str]] | None) -> str:
    """Messages received as a numbered list of one-line quotes (``1. sceptic said: "..."``):
    what a small model reads as material to weigh, where ``### Message from`` headers get echoed."""
    if not inputs:
        return "(no messages)"
    items = inputs.items() if isinstance(inputs, Mapping) else inputs
    return "\n".join(
        f'{i}. {sender} said: "{" ".join(text.split())}"' for i, (sender, text) in enumerate(items, 1)
    )


def format_inputs(inputs: Mapping[str, str] | Sequence[tuple[str, str]] | None) -> str:
    """Messages received, one section per sender, in the given order."""
    if not inputs:
        return ""
    items = inputs.items() if isinstance(inputs, Mapping) else inputs
    parts = [f"### Message from {sender}\n{text.strip()}" for sender, text in items]
    return "\n\n" + "\n\n".join(parts)


@dataclass
class AgentReply:
    agent: str
    text: str
    parsed: Any
    completion: Completion
    prompt: list[ChatMessage]


@dataclass
class Agent:
    name: str
    llm: LLM
    role: str | None = None
    system_prompt: str | None = None  # defaults to the role's library prompt
    params: SamplingParams = field(default_factory=SamplingParams)
    parser: str | Callable[[str], Any] | None = None
    template: str | None = None  # user turn; placeholders {task}, {inputs} and {answers}
    persona: str | None = None  # appended to the system prompt (traits, expertise)

    def __post_init__(self) -> None:
        if self.system_prompt is None:
            if self.role is None:
                raise ValueError(f"agent {self.name!r} needs a role or a system_prompt")
            self.system_prompt = role_prompt(self.role)
        self._parse = get_parser(self.parser)

    def system(self) -> str:
        s = self.system_prompt or ""
        if self.persona:
            s = f"{s}\n\n{self.persona}".strip()
        return s

    def build_prompt(
        self, task: str, inputs: Mapping[str, str] | Sequence[tuple[str, str]] | None = None
    ) -> list[ChatMessage]:
        tmpl = self.template or DEFAULT_TEMPLATE
        try:
            user = tmpl.format(task=task, inputs=format_inputs(inputs), answers=format_answers(inputs))
        except (KeyError, IndexError) as exc:
            raise ValueError(
                f"agent {self.name!r}: template may only use {{task}}, {{inputs}} and {{answers}}, "
                f"failed on {exc}"
            ) from None
        msgs: list[ChatMessage] = []
        if self.system():
            msgs.append({"role": "system", "content": self.system()})
        msgs.append({"role": "user", "content": user})
        return msgs

    def parse(self, text: str) -> Any:
        return self._parse(text) if self._parse else text

    def act(self, task: str, inputs: Mapping[str, str] | None = None) -> AgentReply:
        return act_batch([(self, task, inputs)])[0]


def act_batch(
    turns: Sequence[tuple[Agent, str, Mapping[str, str] | None]],
) -> list[AgentReply]:
    """Run many agents' turns; one ``generate`` call per distinct LLM object."""
    groups: dict[int, list[int]] = {}
    for i, (agent, _, _) in enumerate(turns):
        groups.setdefault(id(agent.llm), []).append(i)
    replies: list[AgentReply | None] = [None] * len(turns)
    for idxs in groups.values():
        llm = turns[idxs[0]][0].llm
        prompts = [turns[i][0].build_prompt(turns[i][1], turns[i][2]) for i in idxs]
        outs = llm.generate(prompts, [turns[i][0].params for i in idxs])
        for i, prompt, comps in zip(idxs, prompts, outs):
            agent = turns[i][0]
            c = comps[0]
            replies[i] = AgentReply(agent.name, c.text, agent.parse(c.text), c, prompt)
    return [r for r in replies if r is not None]
