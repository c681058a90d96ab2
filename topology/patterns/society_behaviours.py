"""Counting the conversational behaviours of a society of thought.

This module is long because it is one job, coding the four behaviours of a
trace: the result types, the lexical classifier with its documented cue lists
and the LLM classifier with its strict answer format share the same message
selection and counting rules, and are compared against each other.

Kim, Lai, Scherrer, Agüera y Arcas and Evans, "Reasoning Models Generate
Societies of Thought" (arXiv 2601.10825) find that four conversational
behaviours of reasoning traces — **question-answering**, **perspective
shifts**, **conflict** and **reconciliation** — account for much of the
accuracy advantage of reasoning models. This module counts them over a run's
:class:`~societas.topology.trace.Trace` (for instance one of
:func:`societas.topology.patterns.society.society_of_thought`):

* the :class:`BehaviourClassifier` protocol (``classify(trace) ->
  BehaviourCounts``) and :func:`count_behaviours`;
* a transparent :class:`LexicalBehaviourClassifier` (documented cue lists,
  sentence level);
* an :class:`LLMBehaviourClassifier` that asks a model for the four labels of
  each message in a strict format and reports every unparsable answer as an
  error.

The paper codes behaviours with an LLM judge; the lexical classifier is a
cheap, inspectable baseline that later work can replace.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from societas.agents.llm.base import LLM, ChatMessage, SamplingParams

from ..trace import Trace, TraceEvent

log = logging.getLogger(__name__)

__all__ = [
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

BEHAVIOURS: tuple[str, ...] = ("question_answering", "perspective_shift", "conflict", "reconciliation")
"""The four conversational behaviours coded by Kim et al. (arXiv 2601.10825)."""


# ---------------------------------------------------------------------------
# behaviour counts
# ---------------------------------------------------------------------------


@dataclass
class EventBehaviours:
    """The behaviours found in one message (one trace event).

    ``index`` is the event's position in ``trace.events``; ``evidence`` lists
    ``(behaviour, text)`` pairs that justify the counts (the matched sentence,
    or ``question -> answer`` for question-answering); ``error`` is set when a
    classifier could not label this message (its counts are then all zero
    and it contributes nothing to the totals).
    """

    index: int
    sender: str
    round: int
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BEHAVIOURS, 0))
    evidence: list[tuple[str, str]] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["evidence"] = [list(e) for e in self.evidence]
        return d


@dataclass
class QAPair:
    """A question asked by one persona and answered by another in the next round."""

    question_index: int  # trace event index of the asking message
    answer_index: int  # trace event index of the answering message
    asker: str
    replier: str
    question: str
    answer: str
    via: str  # "name" (the reply names the asker) or "overlap" (content-word overlap)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BehaviourCounts:
    """The four behaviour counts of a trace, with per-message labels.

    ``errors`` lists the messages a classifier could not label (never
    silently counted as zero: a caller can see how many labels are missing).
    """

    question_answering: int = 0
    perspective_shift: int = 0
    conflict: int = 0
    reconciliation: int = 0
    events: list[EventBehaviours] = field(default_factory=list)
    qa_pairs: list[QAPair] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    classifier: str = ""

    @property
    def counts(self) -> dict[str, int]:
        """``{behaviour: count}`` in :data:`BEHAVIOURS` order."""
        return {b: int(getattr(self, b)) for b in BEHAVIOURS}

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def n_messages(self) -> int:
        return len(self.events)

    @property
    def n_errors(self) -> int:
        return len(self.errors)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.counts,
            "total": self.total,
            "n_messages": self.n_messages,
            "n_errors": self.n_errors,
            "errors": list(self.errors),
            "classifier": self.classifier,
            "events": [e.to_dict() for e in self.events],
            "qa_pairs": [q.to_dict() for q in self.qa_pairs],
        }

    @classmethod
    def from_events(
        cls,
        events: list[EventBehaviours],
        *,
        qa_pairs: list[QAPair] | None = None,
        errors: list[str] | None = None,
        classifier: str = "",
    ) -> BehaviourCounts:
        """Totals summed over ``events`` (messages with an error contribute nothing)."""
        totals = {b: sum(e.counts.get(b, 0) for e in events if e.error is None) for b in BEHAVIOURS}
        return cls(
            **totals,
            events=events,
            qa_pairs=list(qa_pairs or []),
            errors=list(errors or []),
            classifier=classifier,
        )


@runtime_checkable
class BehaviourClassifier(Protocol):
    """Anything that counts the four conversational behaviours of a trace."""

    def classify(self, trace: Trace) -> BehaviourCounts: ...


def _select_messages(trace: Trace, roles: Sequence[str] | None) -> list[tuple[int, TraceEvent]]:
    """Agent events to label (with their trace index), ordered by round then trace position."""
    if not isinstance(trace, Trace):
        raise TypeError(f"expected a Trace, got {type(trace).__name__}")
    picked = [
        (i, e) for i, e in enumerate(trace.events) if e.kind == "agent" and (roles is None or e.role in roles)
    ]
    return sorted(picked, key=lambda x: (x[1].round, x[0]))


# ---------------------------------------------------------------------------
# lexical classifier
# ---------------------------------------------------------------------------

_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")
_BULLET = re.compile(r"^\s*(?:[-*•>]+|\d+[.)])\s+")
_FINAL_LINE = re.compile(r"^\W*final answer\b", re.IGNORECASE)


def split_sentences(text: str) -> list[str]:
    """Sentences of a message: lines (list markers such as ``-`` or ``1.``
    stripped), each split after ``.``, ``!`` or ``?`` followed by white
    space; blanks dropped."""
    out = []
    for line in (text or "").splitlines():
        for part in _SENTENCE_BREAK.split(_BULLET.sub("", line)):
            s = part.strip()
            if s:
                out.append(s)
    return out


def _is_question(sentence: str) -> bool:
    return sentence.rstrip(" \t*_\"'”’)").endswith("?")


_STOPWORDS = frozenset(
    """a about above after again against all also am an and any are aren't as at be because been before being
    below between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during
    each few for from further had hadn't has hasn't have haven't having he her here hers herself him himself his how
    i if in into is isn't it it's its itself just let let's me more most my myself no nor not now of off on once
    only or other our ours ourselves out over own same she should shouldn't so some such than that that's the their
    theirs them themselves then there there's these they this those through to too under until up very was wasn't
    we were weren't what what's when where which while who whom why will with won't would wouldn't you you're your
    yours yourself yourselves think know get got make made use used one two really well yes okay ok sure maybe
    answer final question right actually""".split()
)
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def _content_words(text: str) -> set[str]:
    """Lower-case word tokens that carry content: not stop words, and either
    numbers or at least three characters long."""
    return {w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS and (w.isdigit() or len(w) >= 3)}


# Cue lists. Each entry is a regular expression matched case-insensitively
# against one sentence; a sentence counts at most once per behaviour.
PERSPECTIVE_CUES: tuple[str, ...] = (
    r"\b(?:another|a different|an alternative|a new|a fresh|a second)\s+"
    r"(?:way|approach|angle|perspective|viewpoint|view|method|interpretation|reading|idea)\b",
    r"\balternatively\b",
    r"\bon the other hand\b",
    r"\bfrom (?:a|an|the|my|another|this|that|your|our)\s+(?:[\w'-]+\s+){0,2}?"
    r"(?:perspective|point of view|standpoint|angle|viewpoint)\b",
    r"\bwhat if (?:we|you|i)\b",
    r"\b(?:look at|think about|approach|see|frame|view) (?:it|this|that|the problem|the question) "
    r"(?:differently|another way|from another angle|in another way)\b",
    r"\binstead,? (?:let's|let us|we (?:could|should|can)|i (?:would|'d|suggest|propose))\b",
    r"\b(?:think|picture) of (?:it|this|that) as\b",
    r"\blet(?:'s| us) (?:try|use|take) (?:a different|another)\b",
)
"""Cues of a perspective shift: introducing a new viewpoint, approach or framing."""

CONFLICT_CUES: tuple[str, ...] = (
    r"\bdisagree(?:s|d|ment)?\b",
    r"(?<!\bnot )(?<!n't )\b(?:wrong|incorrect|mistaken|flawed|erroneous)\b",
    r"(?:\bnot|n't) (?:right|correct|true|accurate|valid|convinced|convincing)\b",
    r"\b(?:can't|cannot|couldn't) be (?:right|correct|true)\b",
    r"\bi (?:doubt|question) (?:that|this|it|your|the)\b",
    r"\b(?:doubtful|unconvinced|skeptical|sceptical) (?:of|about|that)\b",
    r"\bon the contrary\b",
    r"\bi (?:don't|do not) (?:agree|buy|accept)\b",
    r"\bi (?:don't|do not) think (?:so|that's|that is|this is|you're|you are|it's|it is)\b",
    r"\bcontradict(?:s|ed|ion)?\b",
    r"\bi object\b|\bobjection\b",
    r"\b(?:a |an )?(?:mistake|error) in (?:your|the|their|his|her)\b",
    r"^no[,.!]",
)
"""Cues of conflict: disagreement, challenge or correction of a claim."""

AGREEMENT_CUES: tuple[str, ...] = (
    r"(?<!\bnot )(?<!n't )\bagree(?:s|d)?\b(?! to disagree)",
    r"\b(?:you're|you are|(?:he|she|they|it|that|this) (?:is|are|was)) (?:right|correct)\b",
    r"\b(?:good|fair|valid|great|excellent) point\b",
    r"\bthat makes sense\b",
    r"\bconsensus\b",
    r"\bcommon ground\b",
)
"""Cues of agreement; they count as reconciliation only after a disagreement."""

REVISION_CUES: tuple[str, ...] = (
    r"\bi (?:was|were) wrong\b",
    r"\bi stand corrected\b",
    r"\b(?:changed?|changing) my (?:mind|answer|view|estimate|position)\b",
    r"\bon (?:second thought|reflection)\b",
    r"\b(?:revise|revised|revising|update|updated|updating|correct|corrected) my "
    r"(?:answer|estimate|view|calculation|position)\b",
    r"\b(?:combin|integrat|reconcil|merg)\w* (?:both|our|the two|these|their|your|the)\b",
    r"\bboth (?:of you|of us|views|approaches|perspectives|answers) (?:are|were|have|make)\b",
)
"""Cues of revision or integration (changing one's mind, combining views):
reconciliation in themselves, since they presuppose a view that was given up."""


def _compile(cues: Iterable[str]) -> list[re.Pattern[str]]:
    return [re.compile(c, re.IGNORECASE) for c in cues]


def _first_match(patterns: Sequence[re.Pattern[str]], text: str) -> re.Match[str] | None:
    for p in patterns:
        m = p.search(text)
        if m:
            return m
    return None


def _mask(patterns: Sequence[re.Pattern[str]], text: str) -> str:
    """``text`` with every match of ``patterns`` blanked out (same length)."""
    for p in patterns:
        text = p.sub(lambda m: " " * len(m.group(0)), text)
    return text


@dataclass
class _Message:
    index: int
    event: TraceEvent
    sentences: list[str]
    labels: EventBehaviours


class LexicalBehaviourClassifier:
    """Counts the four behaviours with documented cue lists, sentence by sentence.

    Messages are the trace's agent events whose role is in ``roles`` (default
    ``("persona",)``; ``None`` takes every agent event), in round order. Each
    message is split into sentences (:func:`split_sentences`); a line starting
    with "Final answer" is a format line and is skipped. Per sentence, each
    behaviour counts at most once:

    * **perspective shift** — a sentence matching a :data:`PERSPECTIVE_CUES`
      pattern ("another approach", "alternatively", "from a physics
      perspective", "what if we", ...).
    * **reconciliation** — a sentence matching a :data:`REVISION_CUES`
      pattern (changing one's mind, combining views), or a non-question
      sentence matching an :data:`AGREEMENT_CUES` pattern *after* a
      disagreement: when a conflict was found in an earlier round (any
      persona) or in an earlier sentence of the same message.
    * **conflict** — a sentence matching a :data:`CONFLICT_CUES` pattern once
      the reconciliation matches are blanked out (so "I was wrong" is a
      revision, not a conflict; "that is not wrong" is no conflict either).
    * **question-answering** — a question (a sentence ending in ``?``) asked
      by persona A in round ``r`` is answered when a message of a different
      persona B in round ``r + 1`` (the first round in which B can read it)
      contains a non-question sentence that either names A (its node id or an
      alias, as a whole word) and shares at least one content word with the
      question, or shares at least ``max(min_overlap, ceil(overlap_ratio *
      |C(q)|))`` content words with it, where ``C(q)`` is the question's set
      of content words (lower-case tokens that are numbers or three or more
      characters long and not stop words). Each question is counted at most
      once, credited to the first answering message in trace order; the
      count is attributed to the answering message.

    The cue lists can be replaced (``cues={"perspective_shift": [...],
    "conflict": [...], "agreement": [...], "revision": [...]}``) to improve
    the classifier without changing its callers.
    """

    name = "lexical"

    def __init__(
        self,
        *,
        roles: Sequence[str] | None = ("persona",),
        aliases: Mapping[str, Sequence[str]] | None = None,
        min_overlap: int = 2,
        overlap_ratio: float = 0.5,
        cues: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        if min_overlap < 1:
            raise ValueError(f"min_overlap must be at least 1, got {min_overlap}")
        if not 0.0 <= overlap_ratio <= 1.0:
            raise ValueError(f"overlap_ratio must lie in [0, 1], got {overlap_ratio}")
        known = {"perspective_shift", "conflict", "agreement", "revision"}
        cues = dict(cues or {})
        unknown = set(cues) - known
        if unknown:
            raise ValueError(f"unknown cue list(s) {sorted(unknown)}; known: {sorted(known)}")
        self.roles = tuple(roles) if roles is not None else None
        self.aliases = {k: tuple(v) for k, v in (aliases or {}).items()}
        self.min_overlap = min_overlap
        self.overlap_ratio = overlap_ratio
        self._perspective = _compile(cues.get("perspective_shift", PERSPECTIVE_CUES))
        self._conflict = _compile(cues.get("conflict", CONFLICT_CUES))
        self._agreement = _compile(cues.get("agreement", AGREEMENT_CUES))
        self._revision = _compile(cues.get("revision", REVISION_CUES))

    # -- helpers -------------------------------------------------------------
    def _names_of(self, sender: str) -> list[re.Pattern[str]]:
        names = {sender, sender.replace("_", " "), sender.replace("-", " ")} | set(
            self.aliases.get(sender, ())
        )
        return [
            re.compile(r"(?<![A-Za-z0-9_])" + re.escape(n) + r"(?![A-Za-z0-9_])", re.IGNORECASE)
            for n in names
            if n
        ]

    def _needed_overlap(self, question_words: set[str]) -> int:
        return max(self.min_overlap, math.ceil(self.overlap_ratio * len(question_words)))

    def _answer_in(self, asker: str, question: str, reply: _Message) -> tuple[str, str] | None:
        """The sentence of ``reply`` that answers ``question``, and how it was matched."""
        q_words = _content_words(question)
        if not q_words:
            return None
        names = self._names_of(asker)
        need = self._needed_overlap(q_words)
        for s in reply.sentences:
            if _is_question(s):
                continue
            shared = len(q_words & _content_words(s))
            if shared >= 1 and any(p.search(s) for p in names):
                return s, "name"
            if shared >= need:
                return s, "overlap"
        return None

    # -- classification ------------------------------------------------------
    def classify(self, trace: Trace) -> BehaviourCounts:
        msgs = [
            _Message(
                index=i,
                event=e,
                sentences=[s for s in split_sentences(e.output) if not _FINAL_LINE.match(s)],
                labels=EventBehaviours(index=i, sender=e.sender, round=e.round),
            )
            for i, e in _select_messages(trace, self.roles)
        ]
        rounds = sorted({m.event.round for m in msgs})
        conflict_before_round = False
        for r in rounds:
            in_round = [m for m in msgs if m.event.round == r]
            conflict_this_round = False
            for m in in_round:
                local_conflict = False
                for s in m.sentences:
                    lab = m.labels
                    if _first_match(self._perspective, s):
                        lab.counts["perspective_shift"] += 1
                        lab.evidence.append(("perspective_shift", s))
                    reconciled = False
                    if _first_match(self._revision, s) or (
                        not _is_question(s)
                        and _first_match(self._agreement, s)
                        and (conflict_before_round or local_conflict)
                    ):
                        reconciled = True
                    if reconciled:
                        lab.counts["reconciliation"] += 1
                        lab.evidence.append(("reconciliation", s))
                    rest = _mask(self._revision + self._agreement, s)
                    if _first_match(self._conflict, rest):
                        lab.counts["conflict"] += 1
                        lab.evidence.append(("conflict", s))
                        local_conflict = True
                conflict_this_round = conflict_this_round or local_conflict
            conflict_before_round = conflict_before_round or conflict_this_round

        pairs: list[QAPair] = []
        by_round: dict[int, list[_Message]] = {}
        for m in msgs:
            by_round.setdefault(m.event.round, []).append(m)
        for m in msgs:
            replies = [x for x in by_round.get(m.event.round + 1, []) if x.event.sender != m.event.sender]
            for q in (s for s in m.sentences if _is_question(s)):
                for reply in sorted(replies, key=lambda x: x.index):
                    found = self._answer_in(m.event.sender, q, reply)
                    if found is None:
                        continue
                    answer, via = found
                    pairs.append(
                        QAPair(m.index, reply.index, m.event.sender, reply.event.sender, q, answer, via)
                    )
                    reply.labels.counts["question_answering"] += 1
                    reply.labels.evidence.append(("question_answering", f"{q} -> {answer}"))
                    break
        events = sorted((m.labels for m in msgs), key=lambda e: e.index)
        result = BehaviourCounts.from_events(events, qa_pairs=pairs, classifier=self.name)
        log.debug("lexical behaviours over %d messages: %s", len(events), result.counts)
        return result


# ---------------------------------------------------------------------------
# LLM classifier
# ---------------------------------------------------------------------------

LLM_CLASSIFIER_SYSTEM = (
    "You label one message from a group discussion with four conversational behaviours.\n"
    "question_answering: the message answers a question that another participant asked earlier.\n"
    "perspective_shift: the message brings in a new viewpoint or a different approach.\n"
    "conflict: the message disagrees with, challenges or corrects a claim.\n"
    "reconciliation: the message agrees after a disagreement, combines views, or changes its mind.\n"
    "For each behaviour give how many times the message shows it (0 if never). "
    "Reply with exactly these four lines and nothing else:\n"
    "question_answering: <number>\nperspective_shift: <number>\nconflict: <number>\nreconciliation: <number>"
)
"""System prompt of :class:`LLMBehaviourClassifier` (the behaviour definitions of arXiv 2601.10825)."""

_LABEL_LINE = re.compile(
    r"^[\s>*\-•#]*(?:\d+[.)]\s*)?[*_`]*\s*"
    r"(question[\s_\-]*(?:and[\s_\-]*)?answer(?:ing|s)?|perspective[\s_\-]*shifts?|conflicts?|reconciliations?)"
    r"\s*[*_`]*\s*[:=\-–]\s*[*_`]*\s*(\d+|yes|no|true|false)\b",
    re.IGNORECASE | re.MULTILINE,
)


def _behaviour_key(label: str) -> str:
    low = label.lower()
    if low.startswith("question"):
        return "question_answering"
    if low.startswith("perspective"):
        return "perspective_shift"
    if low.startswith("conflict"):
        return "conflict"
    return "reconciliation"


def parse_behaviour_labels(text: str) -> tuple[dict[str, int] | None, str | None]:
    """Read the four ``behaviour: N`` lines of a labelling answer.

    Accepts spaces, hyphens or underscores in the names, ``:``/``=``/``-`` as
    separator, markdown emphasis and list markers, and ``yes``/``true`` (1) or
    ``no``/``false`` (0) for a number. Returns ``(counts, None)``, or
    ``(None, reason)`` when a behaviour is missing or given two different
    values — never a guess.
    """
    found: dict[str, int] = {}
    for m in _LABEL_LINE.finditer(text or ""):
        key = _behaviour_key(m.group(1))
        raw = m.group(2).lower()
        value = 1 if raw in ("yes", "true") else 0 if raw in ("no", "false") else int(raw)
        if key in found and found[key] != value:
            return None, f"{key} given twice ({found[key]} and {value})"
        found[key] = value
    missing = [b for b in BEHAVIOURS if b not in found]
    if missing:
        return None, f"missing {', '.join(missing)}"
    return {b: found[b] for b in BEHAVIOURS}, None


def _clip(text: str, limit: int) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


class LLMBehaviourClassifier:
    """Asks a model to label each message with the four behaviours.

    The paper codes its traces with an LLM judge; this classifier does the
    same per message. Each prompt holds :data:`LLM_CLASSIFIER_SYSTEM`, the
    previous-round messages of the other participants (the context the
    message replies to, each clipped to ``context_chars``) and the message
    itself. All prompts of one call to :meth:`classify_many` go to the model
    in ONE batched ``generate`` call. Answers are read by
    :func:`parse_behaviour_labels`; an answer that cannot be read is recorded
    in ``BehaviourCounts.errors`` (and the message's ``error``) and adds
    nothing to the totals — it is never silently read as zeros.
    """

    name = "llm"

    def __init__(
        self,
        llm: LLM,
        *,
        params: SamplingParams | None = None,
        roles: Sequence[str] | None = ("persona",),
        context_chars: int = 600,
        message_chars: int = 2000,
    ) -> None:
        if not hasattr(llm, "generate"):
            raise TypeError(f"LLMBehaviourClassifier needs an LLM with generate(), got {type(llm).__name__}")
        self.llm = llm
        self.params = params or SamplingParams(temperature=0.0, max_new_tokens=48)
        self.roles = tuple(roles) if roles is not None else None
        self.context_chars = context_chars
        self.message_chars = message_chars

    def prompt_for(self, messages: Sequence[tuple[int, TraceEvent]], i: int) -> list[ChatMessage]:
        """The labelling prompt for ``messages[i]`` (context: the others' previous round)."""
        _, ev = messages[i]
        context = [e for _, e in messages if e.round == ev.round - 1 and e.sender != ev.sender]
        parts = []
        if context:
            parts.append("Earlier messages from the others:")
            parts += [f"[{e.sender}] {_clip(e.output, self.context_chars)}" for e in context]
            parts.append("")
        parts.append(f"Message to label (from {ev.sender}):")
        parts.append(_clip(ev.output, self.message_chars))
        return [
            {"role": "system", "content": LLM_CLASSIFIER_SYSTEM},
            {"role": "user", "content": "\n".join(parts)},
        ]

    def classify(self, trace: Trace) -> BehaviourCounts:
        return self.classify_many([trace])[0]

    def classify_many(self, traces: Sequence[Trace]) -> list[BehaviourCounts]:
        """Label several traces with one batched model call."""
        selected = [_select_messages(t, self.roles) for t in traces]
        prompts: list[list[ChatMessage]] = []
        where: list[tuple[int, int]] = []
        for t, msgs in enumerate(selected):
            for i in range(len(msgs)):
                prompts.append(self.prompt_for(msgs, i))
                where.append((t, i))
        replies: list[str] = []
        if prompts:
            outs = self.llm.generate(prompts, self.params)
            replies = [o[0].text if o else "" for o in outs]
        labels: list[list[EventBehaviours]] = [[] for _ in traces]
        errors: list[list[str]] = [[] for _ in traces]
        for (t, i), reply in zip(where, replies, strict=True):
            idx, ev = selected[t][i]
            lab = EventBehaviours(index=idx, sender=ev.sender, round=ev.round)
            counts, problem = parse_behaviour_labels(reply)
            if counts is None:
                lab.error = f"unparsable labels ({problem}): {_clip(reply, 200)!r}"
                errors[t].append(f"event {idx} ({ev.sender}, round {ev.round}): {lab.error}")
            else:
                lab.counts = counts
                lab.evidence = [(b, "llm") for b in BEHAVIOURS if counts[b]]
            labels[t].append(lab)
        results = []
        for t in range(len(traces)):
            res = BehaviourCounts.from_events(
                sorted(labels[t], key=lambda e: e.index), errors=errors[t], classifier=self.name
            )
            if res.errors:
                log.warning(
                    "LLM behaviour classifier could not label %d of %d messages", res.n_errors, res.n_messages
                )
            results.append(res)
        return results


def count_behaviours(trace: Trace, classifier: BehaviourClassifier | None = None) -> BehaviourCounts:
    """Count the four behaviours of ``trace`` (default: :class:`LexicalBehaviourClassifier`)."""
    clf = classifier if classifier is not None else LexicalBehaviourClassifier()
    if not isinstance(clf, BehaviourClassifier):
        raise TypeError(f"classifier must have classify(trace), got {type(clf).__name__}")
    return clf.classify(trace)
