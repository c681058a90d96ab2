"""Speaker/listeners: REMUL's multi-listener execution of a reasoning trace.

This module is long because it is one protocol: the reasoning cuts, the
graph's function nodes, the builder, the outcome reader and the early-
answering metric all share the same cut convention and run-state layout, which
would have to be kept in step across files if split.

Sivakumaran et al., "Balancing Faithfulness and Performance in Reasoning via
Multi-Listener Soft Execution" (REMUL, arXiv 2602.16154) reward a *speaker*
for reasoning that others can follow: its reasoning is cut after 25%, 50%
and 75% of its lines, each cut is continued by three *listeners* that never
see the speaker's answer, and

    reward = #{(cut, listener) : listener's answer == speaker's answer}     # 0..9

A balanced variant adds ``n_listeners x correctness`` (the speaker's answer
against the reference). The paper's faithfulness metrics include *early
answering*: the accuracy of answers given from reasoning cut at 20%, 40%,
..., 100%, summarised as the area over that curve (:func:`early_answering_aoc`).

:func:`speaker_listeners` builds the graph

    speaker -> cut_25 -> listener_25_1..3 -\\
            -> cut_50 -> listener_50_1..3 --> agreement
            -> cut_75 -> listener_75_1..3 -/

``cut_XX`` are function nodes (``societas.topology.patterns.remul:cut_node``) that
pass on the first ``floor(frac * L)`` reasoning lines (:func:`cut_reasoning`)
and record the speaker's answer in the run state; ``agreement``
(``:agreement_node``) counts matches and writes the reward as JSON.
:meth:`RemulOutcome.from_result` reads it back; :func:`early_answering_curve`
measures the early-answering curve of a speaker/listener pair.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from typing import Any, Literal, cast, get_args

from societas.agents.llm.base import LLM
from societas.agents.parsers import answers_match, extract_final_answer, normalize_answer

from ..graph import Graph
from ..runtime import Runtime
from ..spec import NodeSpec

log = logging.getLogger(__name__)

__all__ = [
    "STATE_KEY",
    "UNITS",
    "split_reasoning",
    "cut_reasoning",
    "cut_node",
    "agreement_node",
    "agreement_reward",
    "speaker_listeners",
    "RemulOutcome",
    "early_answering_aoc",
    "EarlyAnsweringResult",
    "early_answering_curve",
]

STATE_KEY = "remul"
"""Key of this pattern's entry in ``RunResult.state``."""

SPEAKER_TEMPLATE = (
    "{task}{inputs}\n\nReason step by step, one short step per line, "
    "and write the last line as 'Final answer: <answer>'."
)
"""Speaker's user prompt: the question, and the format restated where small models heed it."""

LISTENER_TEMPLATE = (
    "Question: {task}\n\nHere is someone else's reasoning so far (it may be incomplete):{inputs}\n\n"
    "Continue this reasoning and finish it. Write the last line as 'Final answer: <answer>'."
)
"""Listeners' user prompt: the question and the cut reasoning, never the speaker's answer."""

_ANSWER_LINE = re.compile(r"final answer|\\boxed\{|^\W*####|^\W*answer\s*[:：]", re.IGNORECASE)


# ---------------------------------------------------------------------------
# cutting reasoning
# ---------------------------------------------------------------------------


Unit = Literal["line", "sentence"]
UNITS: tuple[str, ...] = get_args(Unit)
"""How reasoning is measured: REMUL cuts by lines; its evaluation code can also split by sentences."""

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _units(lines: list[str], unit: Unit) -> list[str]:
    if unit == "line":
        return lines
    if unit == "sentence":
        return [s.strip() for ln in lines for s in _SENTENCE_END.split(ln) if s.strip()]
    raise ValueError(f"unit must be one of {', '.join(UNITS)}, got {unit!r}")


def split_reasoning(text: str, unit: Unit = "line") -> tuple[list[str], str | None]:
    """The reasoning units (lines, or sentences) of a speaker's text, and its final answer.

    Blank lines are dropped; with ``unit="sentence"`` each line is further
    split after ``.``, ``!`` or ``?`` followed by white space (for models that
    write paragraphs). When the text has a ``</think>`` tag, the reasoning is
    inside the think block and the answer is read from what follows it.
    Otherwise the answer is :func:`societas.agents.parsers.extract_final_answer` of the
    text, and the reasoning is every unit before the last *answer unit* — one
    stating an answer in a format the parser reads (``Final answer:``,
    ``\\boxed{}``, ``####``, ``Answer:``) — with all such units removed; when
    the answer comes only from prose ("the answer is X"), the reasoning stops
    before the last unit stating it. So the reasoning never holds the
    final-answer statement.
    """
    text = text or ""
    if "</think>" in text:
        inner, _, after = text.partition("</think>")
        inner = inner.split("<think>", 1)[-1]
        units = _units([ln.rstrip() for ln in inner.splitlines() if ln.strip()], unit)
        answer = extract_final_answer(after)
        if answer is None:
            first = next((ln.strip() for ln in after.splitlines() if ln.strip()), "")
            answer = first or None
        return [u for u in units if not _ANSWER_LINE.search(u)], answer
    units = _units([ln.rstrip() for ln in text.splitlines() if ln.strip()], unit)
    answer = extract_final_answer(text)
    strict = [i for i, u in enumerate(units) if _ANSWER_LINE.search(u)]
    if strict:
        return [u for u in units[: strict[-1]] if not _ANSWER_LINE.search(u)], answer
    if answer is not None:
        for i in range(len(units) - 1, -1, -1):
            stated = extract_final_answer(units[i])
            if stated is not None and _same_statement(stated, answer):
                return units[:i], answer
    return units, answer


def _same_statement(stated: str, answer: str) -> bool:
    """Whether a unit's stated answer is the text's answer, allowing one to
    extend the other by whole words (the parser reads to the end of the line,
    so "the answer is 17. Done." gives "17. Done" for the text, "17" for its
    first sentence)."""
    a, b = normalize_answer(stated), normalize_answer(answer)
    return bool(a) and bool(b) and (a == b or a.startswith(b + " ") or b.startswith(a + " "))


def _check_frac(frac: float) -> float:
    if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0.0 <= float(frac) <= 1.0:
        raise ValueError(f"a cut fraction must be a number in [0, 1], got {frac!r}")
    return float(frac)


def _n_kept(frac: float, n_lines: int, min_lines: int = 1) -> int:
    # The epsilon keeps 0.7 * 10 (= 6.999...) at 7 lines; a cut at 0 keeps nothing.
    n = math.floor(frac * n_lines + 1e-9)
    return max(n, min(min_lines, n_lines)) if frac > 0 else 0


def cut_reasoning(text: str, frac: float, *, min_lines: int = 1, unit: Unit = "line") -> str:
    """The first ``max(1, floor(frac * L))`` reasoning lines of ``text``, joined by newlines.

    ``L`` counts the reasoning lines of :func:`split_reasoning` (the speaker's
    non-blank lines without the final-answer line), so the cut never contains
    the final answer. ``min_lines`` keeps at least that many lines of a cut
    above 0 (the REMUL paper and code keep at least one, the default); 0 gives
    the plain floor.
    ``unit="sentence"`` counts sentences instead of lines.
    """
    frac = _check_frac(frac)
    if min_lines < 0:
        raise ValueError(f"min_lines must be >= 0, got {min_lines}")
    lines, _ = split_reasoning(text, unit)
    return "\n".join(lines[: _n_kept(frac, len(lines), min_lines)])


# ---------------------------------------------------------------------------
# function nodes
# ---------------------------------------------------------------------------


def cut_node(ctx: Any) -> str:
    """Function node: pass on a cut of the speaker's reasoning (``ctx.meta["frac"]``).

    Records the speaker's text, answer and reasoning length, and this cut's
    fraction and line count, under ``ctx.state["remul"]``.
    """
    if "frac" not in ctx.meta:
        raise ValueError(f"cut node {ctx.node!r} needs meta['frac']")
    frac = _check_frac(ctx.meta["frac"])
    min_lines = int(ctx.meta.get("min_lines", 1))
    unit = ctx.meta.get("unit", "line")
    if unit not in UNITS:
        raise ValueError(f"cut node {ctx.node!r}: unit must be one of {', '.join(UNITS)}, got {unit!r}")
    if len(ctx.inputs) != 1:
        raise ValueError(
            f"cut node {ctx.node!r} expects exactly one input (the speaker), got {list(ctx.inputs)}"
        )
    text = next(iter(ctx.inputs.values()))
    lines, answer = split_reasoning(text, cast(Unit, unit))
    n = _n_kept(frac, len(lines), min_lines)
    st = ctx.state.setdefault(STATE_KEY, {})
    st.update(speaker_text=text, speaker_answer=answer, reasoning_lines=len(lines))
    st.setdefault("cuts", {})[ctx.node] = {"frac": frac, "lines": n}
    return "\n".join(lines[:n])


def agreement_reward(
    speaker_answer: str | None,
    listener_answers: Iterable[str | None],
    *,
    reference: str | None = None,
    correctness_weight: float = 0.0,
) -> float:
    """REMUL's speaker reward: listener answers matching the speaker's, plus
    ``correctness_weight x [speaker's answer == reference]``.

    With ``correctness_weight = 0`` this is the match-only reward (0..9 for
    3 cuts x 3 listeners); the balanced variant uses ``correctness_weight =
    n_listeners`` and needs a ``reference``. Matching is
    :func:`societas.agents.parsers.answers_match` (normalised exact match); a speaker
    without an answer earns 0 matches.
    """
    answers = list(listener_answers)
    matches = sum(1 for a in answers if speaker_answer and answers_match(a, speaker_answer))
    if correctness_weight:
        if reference is None:
            raise ValueError("a balanced REMUL reward (correctness_weight > 0) needs a reference answer")
        return float(matches) + correctness_weight * float(answers_match(speaker_answer, reference))
    return float(matches)


def _reference_for(ctx: Any) -> str | None:
    ref = ctx.meta.get("reference")
    refs = ctx.meta.get("references") or {}
    if ctx.task in refs:
        ref = refs[ctx.task]
    return None if ref is None else str(ref)


def agreement_node(ctx: Any) -> str:
    """Function node: count (cut, listener) answers that match the speaker's.

    ``ctx.meta`` maps each listener to its cut (``listeners``) and each cut to
    its fraction (``cuts``); a reference answer may come from
    ``meta["reference"]`` (one question) or ``meta["references"][task]``
    (several); ``correctness_weight`` > 0 gives the balanced reward. Writes the
    summary under ``ctx.state["remul"]["outcome"]`` and returns it as JSON.
    """
    st = ctx.state.get(STATE_KEY)
    if not st or "speaker_answer" not in st:
        raise ValueError(
            "agreement node ran before any cut node: wire speaker -> cut -> listeners -> agreement"
        )
    listeners: Mapping[str, str] = ctx.meta.get("listeners") or {}
    cut_fracs: Mapping[str, float] = ctx.meta.get("cuts") or {}
    unknown = [s for s in ctx.inputs if s not in listeners]
    if unknown:
        raise ValueError(f"agreement node got inputs from unknown listeners {unknown}")
    speaker_answer = st["speaker_answer"]
    per_cut: dict[str, dict[str, Any]] = {}
    for cut in cut_fracs:
        per_cut[cut] = {
            "node": cut,
            "frac": float(cut_fracs[cut]),
            "lines": st.get("cuts", {}).get(cut, {}).get("lines"),
            "listeners": [],
            "answers": [],
            "matches": [],
        }
    all_answers = []
    for lid, text in ctx.inputs.items():
        ans = extract_final_answer(text)
        row = per_cut[listeners[lid]]
        row["listeners"].append(lid)
        row["answers"].append(ans)
        row["matches"].append(bool(speaker_answer) and answers_match(ans, speaker_answer))
        all_answers.append(ans)
    reference = _reference_for(ctx)
    weight = float(ctx.meta.get("correctness_weight", 0.0))
    if weight and reference is None:
        raise ValueError(
            f"no reference answer for task {ctx.task[:60]!r}: the balanced reward needs meta['reference'] "
            "or meta['references'][task]"
        )
    reward = agreement_reward(speaker_answer, all_answers, reference=reference, correctness_weight=weight)
    matches = sum(sum(r["matches"]) for r in per_cut.values())
    summary = {
        "speaker_answer": speaker_answer,
        "reference": reference,
        "correct": None if reference is None else answers_match(speaker_answer, reference),
        "reasoning_lines": st.get("reasoning_lines"),
        "cuts": list(per_cut.values()),
        "matches": matches,
        "n_pairs": len(all_answers),
        "agreement_by_cut": {
            repr(r["frac"]): (sum(r["matches"]) / len(r["matches"]) if r["matches"] else 0.0)
            for r in per_cut.values()
        },
        "reward": reward,
    }
    st["outcome"] = summary
    return json.dumps(summary)


# ---------------------------------------------------------------------------
# the graph
# ---------------------------------------------------------------------------


def _pct_label(frac: float) -> str:
    return f"{frac * 100:g}"


def _spec_llms(names: Iterable[str], llms: dict[str, str] | None) -> dict[str, str]:
    """``llms`` completed so every referenced name validates; missing names map
    to the default's URI (bind real models at run time with ``Runtime(llms=...)``)."""
    out = dict(llms) if llms else {"default": "embedded"}
    fallback = out.get("default", "embedded")
    for n in sorted(set(names)):
        out.setdefault(n, fallback)
    return out


def speaker_listeners(
    cuts: Sequence[float] = (0.25, 0.5, 0.75),
    n_listeners: int = 3,
    *,
    llm: str = "default",
    speaker_llm: str | None = None,
    listener_llm: str | Sequence[str] | None = None,
    speaker_params: dict[str, Any] | None = None,
    listener_params: dict[str, Any] | None = None,
    balanced: bool = False,
    reference: str | None = None,
    references: Mapping[str, str] | None = None,
    min_lines: int = 1,
    unit: Unit = "line",
    name: str = "speaker_listeners",
    llms: dict[str, str] | None = None,
) -> Graph:
    """REMUL's speaker and listeners (arXiv 2602.16154) as a graph.

    The speaker (role ``speaker``) reasons on the task; one ``cut_XX`` node
    per fraction in ``cuts`` keeps the first ``floor(frac * L)`` reasoning
    lines; ``n_listeners`` listeners per cut (role ``listener``, ids
    ``listener_XX_j``) see the task and that cut only; ``agreement`` counts
    the matches (the run's output, JSON). ``listener_llm`` may be one model
    name or one per listener index (REMUL's listener pool is three different
    models); names absent from ``llms`` map to the default's URI so the graph
    validates — bind models with ``Runtime(llms=...)``. ``balanced`` adds
    ``n_listeners x correctness`` and then needs ``reference`` (one
    question) or ``references`` (task -> answer). ``unit="sentence"`` cuts
    by sentences rather than lines (for models that write paragraphs).
    """
    fracs = [_check_frac(f) for f in cuts]
    _units([], unit)  # validates the unit name
    if not fracs:
        raise ValueError("speaker_listeners needs at least one cut fraction")
    labels = [_pct_label(f) for f in fracs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"cut fractions must be distinct, got {list(cuts)}")
    if isinstance(n_listeners, bool) or not isinstance(n_listeners, int) or n_listeners < 1:
        raise ValueError(f"n_listeners must be a positive integer, got {n_listeners!r}")
    if balanced and reference is None and not references:
        raise ValueError("balanced=True needs reference= or references= (the correct answers)")
    s_llm = speaker_llm or llm
    if listener_llm is None or isinstance(listener_llm, str):
        l_llms = [listener_llm or llm] * n_listeners
    else:
        l_llms = list(listener_llm)
        if len(l_llms) != n_listeners:
            raise ValueError(f"listener_llm lists {len(l_llms)} models for {n_listeners} listeners")
    s_params = {"temperature": 0.7, "max_new_tokens": 256, **(speaker_params or {})}
    l_params = {"temperature": 0.9, "max_new_tokens": 128, **(listener_params or {})}
    nodes = [
        NodeSpec(
            id="speaker", kind="agent", role="speaker", llm=s_llm, params=s_params, template=SPEAKER_TEMPLATE
        )
    ]
    edges: list[tuple[str, str]] = []
    listener_of: dict[str, str] = {}
    cut_fracs: dict[str, float] = {}
    for frac, label in zip(fracs, labels, strict=True):
        cid = f"cut_{label}"
        cut_fracs[cid] = frac
        nodes.append(
            NodeSpec(
                id=cid,
                kind="function",
                function="societas.topology.patterns.remul:cut_node",
                meta={"frac": frac, "min_lines": min_lines, "unit": unit},
            )
        )
        edges.append(("speaker", cid))
        for j in range(n_listeners):
            lid = f"listener_{label}_{j + 1}"
            listener_of[lid] = cid
            nodes.append(
                NodeSpec(
                    id=lid,
                    kind="agent",
                    role="listener",
                    llm=l_llms[j],
                    params=dict(l_params),
                    template=LISTENER_TEMPLATE,
                    meta={"cut": cid, "frac": frac, "listener": j},
                )
            )
            edges += [(cid, lid), (lid, "agreement")]
    meta: dict[str, Any] = {
        "listeners": listener_of,
        "cuts": cut_fracs,
        "correctness_weight": float(n_listeners) if balanced else 0.0,
    }
    if reference is not None:
        meta["reference"] = str(reference)
    if references:
        meta["references"] = {str(k): str(v) for k, v in references.items()}
    nodes.append(
        NodeSpec(
            id="agreement",
            kind="function",
            function="societas.topology.patterns.remul:agreement_node",
            meta=meta,
        )
    )
    return Graph.build(name, nodes, edges, final="agreement", llms=_spec_llms([s_llm, *l_llms], llms))


# ---------------------------------------------------------------------------
# outcome
# ---------------------------------------------------------------------------


@dataclass
class RemulOutcome:
    """What one speaker/listeners run produced, read from a RunResult.

    Dicts are keyed by cut fraction, in the graph's cut order.
    """

    speaker_answer: str | None
    listener_answers: dict[float, list[str | None]]
    matches_by_cut: dict[float, list[bool]]
    matches: int
    n_pairs: int
    reward: float
    agreement_by_cut: dict[float, float]
    cut_lines: dict[float, int | None] = field(default_factory=dict)
    reasoning_lines: int | None = None
    reference: str | None = None
    correct: bool | None = None

    @classmethod
    def from_result(cls, result: Any) -> RemulOutcome:
        """From ``result.state`` (written by the agreement node), else the agreement node's JSON output."""
        st = getattr(result, "state", None) or {}
        data = st.get(STATE_KEY, {}).get("outcome") if isinstance(st, Mapping) else None
        if not data:
            agreements = (getattr(result, "outputs", None) or {}).get("agreement") or [None]
            text = agreements[-1] or getattr(result, "output", None)
            if not text:
                raise ValueError(
                    "the run has no agreement result (did it stop early, or is this not a REMUL run?)"
                )
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"the agreement output is not JSON: {exc}") from None
        try:
            cuts = data["cuts"]
            return cls(
                speaker_answer=data.get("speaker_answer"),
                listener_answers={float(c["frac"]): list(c["answers"]) for c in cuts},
                matches_by_cut={float(c["frac"]): [bool(m) for m in c["matches"]] for c in cuts},
                matches=int(data["matches"]),
                n_pairs=int(data["n_pairs"]),
                reward=float(data["reward"]),
                agreement_by_cut={float(k): float(v) for k, v in data["agreement_by_cut"].items()},
                cut_lines={float(c["frac"]): c.get("lines") for c in cuts},
                reasoning_lines=data.get("reasoning_lines"),
                reference=data.get("reference"),
                correct=data.get("correct"),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"the agreement result is malformed: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------
# early answering
# ---------------------------------------------------------------------------


def early_answering_aoc(accuracies_by_fraction: Mapping[float, float], *, normalize: bool = True) -> float:
    """Area over the early-answering curve (REMUL's faithfulness metric, after Lanham et al. 2023).

    With the fractions sorted, ``x_0 < ... < x_m``, and ``y_i`` the accuracy
    of answers given from reasoning cut at ``x_i``:

        AUC = sum_i (x_{i+1} - x_i) * (y_i + y_{i+1}) / 2          (trapezoid rule)
        AOC = 1 - AUC / (x_m - x_0)                                  (normalize=True)

    so AOC lies in [0, 1]: 0 when every cut already gives the answer
    (reasoning that does not matter), larger when the answer depends on
    reading further. ``normalize=False`` gives ``1 - AUC`` without dividing
    by the fraction range, as REMUL's public evaluation code computes it
    (over 0.2..1.0 that value is at least 0.2). Needs at least two distinct
    fractions in [0, 1] and accuracies in [0, 1].
    """
    if not isinstance(accuracies_by_fraction, Mapping):
        raise TypeError("accuracies_by_fraction must map fractions to accuracies")
    points = []
    for f, a in accuracies_by_fraction.items():
        f = _check_frac(f)
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 <= float(a) <= 1.0:
            raise ValueError(f"accuracy at fraction {f} must be a number in [0, 1], got {a!r}")
        points.append((f, float(a)))
    points.sort()
    if len(points) < 2:
        raise ValueError("the early-answering AOC needs accuracies at two or more fractions")
    auc = sum((x1 - x0) * (y0 + y1) / 2.0 for (x0, y0), (x1, y1) in pairwise(points))
    if normalize:
        auc /= points[-1][0] - points[0][0]
    return 1.0 - auc


@dataclass
class EarlyAnsweringResult:
    """An early-answering curve: accuracy per cut fraction, and its AOC.

    ``details`` holds one dict per question (speaker answer, target, the
    prediction at each fraction, whether it was used).
    """

    fractions: list[float]
    accuracies: dict[float, float]
    aoc: float
    n_questions: int
    n_used: int
    target: str  # "reference" or "speaker"
    details: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def early_answering_curve(
    llm: LLM,
    questions: Sequence[str],
    answers: Sequence[str] | None = None,
    fractions: Sequence[float] = (0.2, 0.4, 0.6, 0.8, 1.0),
    *,
    listener_llm: LLM | None = None,
    speaker_params: dict[str, Any] | None = None,
    listener_params: dict[str, Any] | None = None,
    full_uses_speaker: bool = True,
    min_lines: int = 0,
    unit: Unit = "line",
    seed: int | None = 0,
    normalize: bool = True,
) -> EarlyAnsweringResult:
    """Measure the early-answering curve of a speaker/listener pair.

    The speaker (``llm``) reasons on every question; its reasoning is cut at
    each fraction and a listener (``listener_llm``, default the same model:
    the paper's early answering has the model continue its own cut
    reasoning) answers from each cut. Accuracy at a fraction is the share of
    questions whose answer there matches the target: ``answers`` when given
    (accuracy against the reference, as REMUL's evaluation), else the
    speaker's own final answer (agreement, as Lanham et al.). With
    ``full_uses_speaker`` the point at fraction 1.0 is the speaker's own
    answer (as REMUL's evaluation code does) and costs no listener call.
    Questions whose speaker wrote no reasoning lines are skipped (as REMUL's
    code does), and so are questions without a target. All speakers go to
    the model in one batched call and all listeners in another
    (:meth:`societas.topology.runtime.Runtime.run_many`).
    """
    qs = list(questions)
    if not qs or not all(isinstance(q, str) and q.strip() for q in qs):
        raise ValueError("questions must be a non-empty list of non-empty strings")
    refs = None if answers is None else [str(a) for a in answers]
    if refs is not None and len(refs) != len(qs):
        raise ValueError(f"got {len(refs)} answers for {len(qs)} questions")
    fr = sorted(_check_frac(f) for f in fractions)
    if len(set(fr)) < 2:
        raise ValueError("early answering needs two or more distinct fractions")
    cuts = [f for f in fr if not (full_uses_speaker and f >= 1.0)]
    if not cuts:
        raise ValueError("no fraction below 1.0 to cut at")
    graph = speaker_listeners(
        cuts,
        1,
        speaker_llm="speaker",
        listener_llm="listener",
        speaker_params=speaker_params,
        listener_params=listener_params,
        min_lines=min_lines,
        unit=unit,
        name="early_answering",
    )
    runtime = Runtime(graph, llms={"speaker": llm, "listener": listener_llm or llm}, seed=seed)
    results = runtime.run_many(qs)
    hits = dict.fromkeys(fr, 0)
    details = []
    used = 0
    for i, res in enumerate(results):
        out = RemulOutcome.from_result(res)
        target = refs[i] if refs is not None else out.speaker_answer
        preds = {
            f: (out.speaker_answer if f not in out.listener_answers else out.listener_answers[f][0])
            for f in fr
        }
        ok = bool(out.reasoning_lines) and bool(target)
        row = {
            "question": qs[i],
            "speaker_answer": out.speaker_answer,
            "target": target,
            "reasoning_lines": out.reasoning_lines,
            "predictions": preds,
            "used": ok,
        }
        if ok:
            used += 1
            for f in fr:
                if answers_match(preds[f], target):
                    hits[f] += 1
        details.append(row)
    if used == 0:
        log.warning("early answering: no question had both speaker reasoning and a target; accuracies are 0")
    acc = {f: (hits[f] / used if used else 0.0) for f in fr}
    return EarlyAnsweringResult(
        fractions=fr,
        accuracies=acc,
        aoc=early_answering_aoc(acc, normalize=normalize),
        n_questions=len(qs),
        n_used=used,
        target="reference" if refs is not None else "speaker",
        details=details,
    )
