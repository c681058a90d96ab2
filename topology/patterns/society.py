"""Societies of thought: a discussion among diverse personas, and the counting
of its conversational behaviours.

Kim, Lai, Scherrer, Agüera y Arcas and Evans, "Reasoning Models Generate
Societies of Thought" (arXiv 2601.10825) find that reasoning models simulate
an internal discussion among perspectives that differ in personality (Big
Five traits) and expertise, and that four conversational behaviours of those
traces — **question-answering**, **perspective shifts**, **conflict** and
**reconciliation** — account for much of their accuracy advantage. This
module makes the society explicit:

* :class:`Persona` — a name, Big Five trait levels, an expertise and a
  speaking style; :meth:`Persona.describe` is the text the Runtime appends
  to the agent's system prompt (``meta["persona"]``).
  :data:`DEFAULT_PERSONAS` holds eight personas with distinct trait profiles.
* :func:`society_of_thought` — personas fully connected (each reads every
  persona's previous-round message, its own included) for ``rounds`` rounds,
  then an aggregator that reads the last round and answers.
* Behaviour counting over a run's :class:`~societas.topology.trace.Trace`
  lives in :mod:`societas.topology.patterns.society_behaviours`; its public
  names are re-exported here.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..graph import Graph
from ..spec import NODE_ID_PATTERN, NodeSpec
from .society_behaviours import (
    AGREEMENT_CUES,
    BEHAVIOURS,
    CONFLICT_CUES,
    PERSPECTIVE_CUES,
    REVISION_CUES,
    BehaviourClassifier,
    BehaviourCounts,
    EventBehaviours,
    LexicalBehaviourClassifier,
    LLMBehaviourClassifier,
    QAPair,
    count_behaviours,
    parse_behaviour_labels,
    split_sentences,
)

log = logging.getLogger(__name__)

__all__ = [
    "BIG_FIVE",
    "TRAIT_LEVELS",
    "Persona",
    "DEFAULT_PERSONAS",
    "society_of_thought",
    # Re-exported from .society_behaviours, where they live, for existing imports.
    "BEHAVIOURS",
    "EventBehaviours",
    "QAPair",
    "BehaviourCounts",
    "BehaviourClassifier",
    "LexicalBehaviourClassifier",
    "LLMBehaviourClassifier",
    "count_behaviours",
    "PERSPECTIVE_CUES",
    "CONFLICT_CUES",
    "AGREEMENT_CUES",
    "REVISION_CUES",
    "split_sentences",
    "parse_behaviour_labels",
]

BIG_FIVE: tuple[str, ...] = ("openness", "conscientiousness", "extraversion", "agreeableness", "neuroticism")
"""The Big Five personality dimensions, in their conventional order."""

TRAIT_LEVELS: tuple[str, ...] = ("low", "medium", "high")
"""The levels a persona's trait may take."""


# ---------------------------------------------------------------------------
# personas
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Persona:
    """One member of a society of thought.

    ``name`` is also the node id (letters, digits, ``_``, ``-``), so the other
    personas see it in the ``### Message from NAME`` headers and can address
    it. ``traits`` maps Big Five dimensions to ``"low" | "medium" | "high"``
    (a subset is allowed); ``title`` is a short description ("a sceptical
    statistician"). Kim et al. find that the perspectives in reasoning traces
    vary in exactly these two respects, personality and expertise.
    """

    name: str
    traits: Mapping[str, str]
    expertise: str
    style: str
    title: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not re.match(NODE_ID_PATTERN, self.name):
            raise ValueError(
                f"persona name {self.name!r} must be a valid node id: a letter or '_' first, "
                "then letters, digits, '_', '.' or '-'"
            )
        if not isinstance(self.traits, Mapping):
            raise TypeError(
                f"persona {self.name!r}: traits must be a mapping, got {type(self.traits).__name__}"
            )
        for trait, level in self.traits.items():
            if trait not in BIG_FIVE:
                raise ValueError(
                    f"persona {self.name!r}: unknown trait {trait!r} (known: {', '.join(BIG_FIVE)})"
                )
            if level not in TRAIT_LEVELS:
                raise ValueError(
                    f"persona {self.name!r}: trait {trait!r} has level {level!r} (allowed: {', '.join(TRAIT_LEVELS)})"
                )
        if not str(self.expertise).strip():
            raise ValueError(f"persona {self.name!r}: expertise must not be empty")
        # A plain dict in canonical trait order, so that equal personas compare and print alike.
        object.__setattr__(self, "traits", {t: self.traits[t] for t in BIG_FIVE if t in self.traits})

    def __hash__(self) -> int:
        return hash((self.name, tuple(self.traits.items()), self.expertise, self.style, self.title))

    def trait_profile(self) -> tuple[str | None, ...]:
        """The trait levels in :data:`BIG_FIVE` order (``None`` where unset)."""
        return tuple(self.traits.get(t) for t in BIG_FIVE)

    def describe(self) -> str:
        """The persona text appended to the agent's system prompt."""
        who = f"Your name is {self.name}" + (f"; you are {self.title}" if self.title else "") + "."
        parts = [who]
        if self.traits:
            traits = ", ".join(f"{level} {trait}" for trait, level in self.traits.items())
            parts.append(f"Personality: {traits}.")
        parts.append(f"Expertise: {self.expertise.strip().rstrip('.')}.")
        if self.style.strip():
            parts.append(f"Style: {self.style.strip().rstrip('.')}.")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "traits": dict(self.traits),
            "expertise": self.expertise,
            "style": self.style,
        }


def _traits(o: str, c: str, e: str, a: str, n: str) -> dict[str, str]:
    return dict(zip(BIG_FIVE, (o, c, e, a, n), strict=True))


DEFAULT_PERSONAS: tuple[Persona, ...] = (
    Persona(
        "statistician",
        _traits("medium", "high", "low", "low", "medium"),
        "statistics, probability and checking numbers",
        "asks for evidence, recomputes every number and says plainly when a claim is wrong",
        "a sceptical statistician",
    ),
    Persona(
        "physicist",
        _traits("high", "low", "high", "medium", "low"),
        "physics, estimation and orders of magnitude",
        "gives a quick first answer and reasons by analogy",
        "an intuitive physicist",
    ),
    Persona(
        "accountant",
        _traits("low", "high", "low", "medium", "medium"),
        "bookkeeping and exact arithmetic",
        "works line by line, writes every intermediate total and trusts only what adds up",
        "a careful accountant",
    ),
    Persona(
        "philosopher",
        _traits("high", "medium", "high", "low", "medium"),
        "logic, definitions and hidden assumptions",
        "argues the opposite of the group to test it and asks what the question really means",
        "a contrarian philosopher",
    ),
    Persona(
        "teacher",
        _traits("medium", "medium", "high", "high", "low"),
        "explaining ideas simply",
        "restates the problem in small steps, answers the others' questions and seeks agreement",
        "an agreeable teacher",
    ),
    Persona(
        "engineer",
        _traits("medium", "high", "medium", "medium", "low"),
        "practical problem solving and sanity checks",
        "proposes the simplest method that works and tests it on an example",
        "a pragmatic engineer",
    ),
    Persona(
        "checker",
        _traits("low", "high", "low", "high", "high"),
        "finding mistakes and edge cases",
        "worries about errors, double-checks each step and asks the others to confirm",
        "an anxious checker",
    ),
    Persona(
        "writer",
        _traits("high", "low", "medium", "high", "medium"),
        "stories, analogies and creative reframing",
        "retells the problem as a story and looks at it from an unusual angle",
        "a creative writer",
    ),
)
"""Eight personas with pairwise distinct Big Five profiles and expertise."""

_DEFAULT_BY_NAME = {p.name: p for p in DEFAULT_PERSONAS}

PERSONA_TEMPLATE = (
    "{task}{inputs}\n\nIn a few sentences, give your view in your own voice: reply to the others by name, "
    "ask or answer questions, and say whether you agree. End with 'Final answer: <answer>'."
)
"""Personas' user prompt: the task, the discussion so far, and the behaviours invited."""

AGGREGATOR_TEMPLATE = (
    "Task: {task}\n\nWhat the members of the group said in the last round:\n{answers}\n\n"
    "Weigh these views and decide the answer to the task. Write one sentence of justification, "
    "then 'Final answer: <answer>'."
)
"""Aggregator's user prompt: the task and the last round as a numbered list of quotes (a small model
echoed the ``### Message from`` headers of ``{inputs}`` instead of answering), the format restated."""


def _resolve_personas(n_personas: int | None, personas: Sequence[Persona | str] | None) -> list[Persona]:
    if personas is None:
        n = 4 if n_personas is None else n_personas
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ValueError(f"a society needs at least two personas, got n_personas={n_personas!r}")
        if n > len(DEFAULT_PERSONAS):
            raise ValueError(
                f"n_personas={n} but only {len(DEFAULT_PERSONAS)} default personas exist; pass personas=[...]"
            )
        return list(DEFAULT_PERSONAS[:n])
    out: list[Persona] = []
    for i, p in enumerate(personas):
        if isinstance(p, str):
            if p not in _DEFAULT_BY_NAME:
                raise ValueError(
                    f"personas[{i}]: unknown persona {p!r} (defaults: {', '.join(_DEFAULT_BY_NAME)})"
                )
            p = _DEFAULT_BY_NAME[p]
        elif not isinstance(p, Persona):
            raise TypeError(
                f"personas[{i}] must be a Persona or a default persona's name, got {type(p).__name__}"
            )
        out.append(p)
    if len(out) < 2:
        raise ValueError("a society needs at least two personas")
    if n_personas is not None and n_personas != len(out):
        raise ValueError(f"n_personas={n_personas} but {len(out)} personas were given; pass one or the other")
    names = [p.name for p in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"persona names must be distinct; repeated: {', '.join(dupes)}")
    return out


def society_of_thought(
    n_personas: int | None = None,
    rounds: int = 2,
    personas: Sequence[Persona | str] | None = None,
    *,
    llm: str = "default",
    params: dict[str, Any] | None = None,
    aggregator_params: dict[str, Any] | None = None,
    name: str = "society",
    llms: dict[str, str] | None = None,
) -> Graph:
    """A society of thought (Kim et al., arXiv 2601.10825) as a graph.

    ``n_personas`` (default 4) of :data:`DEFAULT_PERSONAS`, or the given
    ``personas`` (``Persona`` objects or default names), discuss the task for
    ``rounds`` rounds. The personas are fully connected, self-loops included:
    in round ``r > 0`` each reads every persona's round ``r-1`` message, its
    own among them. An ``aggregator`` node reads the last round and gives the
    answer. Persona nodes have role ``persona`` and meta ``{"persona":
    describe(), "persona_name": name, "persona_traits": traits}``; the Runtime
    appends ``meta["persona"]`` to the role's system prompt. ``params``
    applies to the personas; ``aggregator_params`` (default ``params``) to
    the aggregator.
    """
    members = _resolve_personas(n_personas, personas)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"a society needs at least one round, got rounds={rounds!r}")
    if "aggregator" in {p.name for p in members}:
        raise ValueError("'aggregator' is the aggregator node's id; rename that persona")
    nodes = [
        NodeSpec(
            id=p.name,
            kind="agent",
            role="persona",
            llm=llm,
            params=dict(params or {}),
            template=PERSONA_TEMPLATE,
            meta={"persona": p.describe(), "persona_name": p.name, "persona_traits": dict(p.traits)},
        )
        for p in members
    ]
    ids = [p.name for p in members]
    nodes.append(
        NodeSpec(
            id="aggregator",
            kind="agent",
            role="aggregator",
            llm=llm,
            params=dict(params or {} if aggregator_params is None else aggregator_params),
            template=AGGREGATOR_TEMPLATE,
        )
    )
    edges = [(a, b) for a in ids for b in ids] + [(a, "aggregator") for a in ids]
    kw: dict[str, Any] = {"rounds": rounds, "final": "aggregator"}
    if llms:
        kw["llms"] = llms
    return Graph.build(name, nodes, edges, **kw)
