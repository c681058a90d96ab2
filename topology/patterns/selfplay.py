"""Proposer/solver self-play: Dr. Zero's question writer and its solvers.

Yue et al., "Dr. Zero: Self-Evolving Search Agents without Training Data"
(arXiv 2601.07055) train a *proposer* that writes question/answer pairs and
a *solver* that answers them, both from one base model. The proposer's reward
comes from the solver: the solver answers a question ``n = 5`` times, ``k``
answers match the proposer's answer exactly, and

    difficulty = (n - k) / (n - 1)  if 0 < k < n  else 0      # (5 - k) / 4 for n = 5
    reward     = difficulty + 0.5 * format_score

so questions that every attempt solves (too easy) or none solves (too hard
or wrong) earn nothing, and the format score rewards well-formed pairs (0 when
the answer leaks into the question). In the reference code the difficulty is
only computed for pairs with a positive format score; :func:`proposer_reward`
keeps that gate.

The graph :func:`proposer_solver` wires one round of this:

    proposer -> question -> solver_1 .. solver_n -> grade

``question`` and ``grade`` are function nodes whose functions are importable
(``societas.topology.patterns.selfplay:question_node`` / ``:grade_node``), so the graph
also runs from YAML. ``question`` parses the proposer's ``Question: ...
Answer: ...`` text, keeps the answer in the run state and passes on ONLY the
question, so no solver ever sees the answer. ``grade`` extracts each solver's
final answer, counts ``k`` and writes the rewards to the run state and, as a
JSON summary, to its output. :meth:`ProposerSolverOutcome.from_result` reads
them back.

This machine has no search engine, so the verifiable domain is arithmetic
word problems (:func:`~societas.topology.patterns.arithmetic.arithmetic_word_problem_task`,
in :mod:`societas.topology.patterns.arithmetic`, whose public names are
re-exported here); :func:`format_score` is the analogue of the paper's format
score for it (see there), and
:func:`~societas.topology.patterns.arithmetic.verify_arithmetic` checks an
answer against an arithmetic expression found in the question.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any, Literal

from societas.agents.parsers import answers_match, extract_final_answer

from ..graph import Graph
from ..spec import NodeSpec
from .arithmetic import (
    OPERATION_HOPS,
    arithmetic_task_hops,
    arithmetic_word_problem_task,
    find_arithmetic_expressions,
    safe_eval_arithmetic,
    verify_arithmetic,
)

log = logging.getLogger(__name__)

__all__ = [
    "STATE_KEY",
    "Proposal",
    "parse_proposal",
    "answer_leaks",
    "format_score",
    "difficulty_reward",
    "proposer_reward",
    "question_node",
    "grade_node",
    "proposer_solver",
    "proposer_solver_functions",
    "ProposerSolverOutcome",
    # Re-exported from .arithmetic, where they live, for existing imports.
    "arithmetic_word_problem_task",
    "arithmetic_task_hops",
    "OPERATION_HOPS",
    "safe_eval_arithmetic",
    "find_arithmetic_expressions",
    "verify_arithmetic",
]

STATE_KEY = "proposer_solver"
"""Key of this pattern's entry in ``RunResult.state``."""

QUESTION_WORDS = (4, 100)
"""Inclusive bounds on a well-formed question's length in words."""

SOLVER_TEMPLATE = (
    "Solve the following question.{inputs}\n\n"
    "Think step by step, then write the last line as 'Final answer: <answer>'."
)
"""Solvers' user prompt: the question only (the proposer's instructions are not shown)."""


# ---------------------------------------------------------------------------
# parsing and scoring a proposal
# ---------------------------------------------------------------------------

_MARK = r"[*_#`>\s]*"
_Q_MARK = re.compile(_MARK + r"question\s*\d*\s*[*_`]*\s*[:：]\s*[*_`]*", re.IGNORECASE)
_A_MARK = re.compile(
    r"(?:^|(?<=\s)|(?<=[*_#`>]))" + r"(?:final\s+)?answer\s*[*_`]*\s*[:：]\s*[*_`]*", re.IGNORECASE
)


_PLACEHOLDER = re.compile(r"<\s*the\b", re.IGNORECASE)  # "<the question ...>", "<the number only>"
_FATAL = ("no 'Question:'", "empty", "template placeholder")  # problems that fail integrity


@dataclass
class Proposal:
    """A parsed proposer output. ``question``/``answer`` are ``None`` when
    absent; ``problems`` lists what is wrong with the format (empty when the
    pair is well formed)."""

    question: str | None
    answer: str | None
    problems: list[str] = field(default_factory=list)
    raw: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems


def _clean_answer(text: str) -> str:
    ans = text.strip()
    prev = None
    while ans != prev:  # peel markdown emphasis and end punctuation, in any order
        prev = ans
        ans = ans.strip().strip("*_`\"'").rstrip(".。!").strip()
    return ans


def parse_proposal(text: str) -> Proposal:
    """Split a proposer's ``Question: ... Answer: ...`` text.

    The answer is the first non-empty line after the LAST ``Answer:`` label
    (markdown emphasis and end punctuation removed); the question is the text
    between the last ``Question:`` label before it and that label. Without a
    ``Question:`` label the text before ``Answer:`` is taken as the question
    (and reported as a problem); without an ``Answer:`` label there is no
    answer.
    """
    raw = text or ""
    problems: list[str] = []
    a_hits = list(_A_MARK.finditer(raw))
    if not a_hits:
        q_hits = list(_Q_MARK.finditer(raw))
        question = raw[q_hits[-1].end() :].strip() if q_hits else None
        if not q_hits:
            problems.append("no 'Question:' label")
        problems.append("no 'Answer:' label")
        return Proposal(question or None, None, problems, raw)
    if len(a_hits) > 1:
        problems.append(f"{len(a_hits)} 'Answer:' labels; used the last")
    a = a_hits[-1]
    after = raw[a.end() :]
    answer_line = next((ln for ln in after.splitlines() if ln.strip()), "")
    answer = _clean_answer(answer_line)
    before = raw[: a.start()]
    q_hits = list(_Q_MARK.finditer(before))
    if q_hits:
        question = before[q_hits[-1].end() :].strip()
    else:
        question = before.strip()
        problems.append("no 'Question:' label")
    question = question.strip().strip("*_`").strip()
    if not question:
        problems.append("empty question")
    if not answer:
        problems.append("empty answer")
    if _PLACEHOLDER.search(question) or _PLACEHOLDER.search(answer):
        problems.append("template placeholder copied from the format")
    return Proposal(question or None, answer or None, problems, raw)


_TOKEN = re.compile(r"\d+(?:[.,]\d+)*|[a-z]+")
_ARTICLES = frozenset({"a", "an", "the"})


def _tokens(text: str) -> list[str]:
    """Lower-case words and canonical numbers (``1,000.50`` -> ``1000.5``), articles dropped."""
    out = []
    for t in _TOKEN.findall((text or "").lower()):
        if t[0].isdigit():
            t = t.replace(",", "")
            try:
                v = Fraction(t)
                t = str(v.numerator) if v.denominator == 1 else repr(float(v))
            except (ValueError, ZeroDivisionError):
                pass
        elif t in _ARTICLES:
            continue
        out.append(t)
    return out


def answer_leaks(question: str, answer: str) -> bool:
    """True when the answer appears in the question: its token sequence
    (:func:`_tokens`: words and canonical numbers) occurs contiguously in the
    question's. Token-level rather than character-level, so the answer ``2``
    does not leak into "12 apples"."""
    a, q = _tokens(answer), _tokens(question)
    if not a or len(a) > len(q):
        return False
    return any(q[i : i + len(a)] == a for i in range(len(q) - len(a) + 1))


def format_score(proposer_text: str) -> float:
    """The proposer's format score in ``[0, 1]``: this machine's analogue of Dr. Zero's.

    Dr. Zero's score gates on question/answer integrity (both present, the
    answer not contained in the question) and then averages four terms:
    integrity, think-tag use, valid search calls for the hop count, and an
    answer that is short and grounded in the retrieved documents. Without a
    search engine, the tool and grounding terms have no counterpart; here

        score = 0                                        if integrity fails
        score = (1 + ends_with_question_mark + concise + length_ok) / 4   otherwise

    where integrity = labelled question and answer, both non-empty, neither
    holding a placeholder copied from the requested format (``<the
    question>``), and :func:`answer_leaks` false; ``concise`` = 1 for an answer of at most 5
    words, 0.5 for at most 10, else 0 (the paper's answer-length rule);
    ``length_ok`` = the question has :data:`QUESTION_WORDS` words.
    """
    p = parse_proposal(proposer_text)
    if p.question is None or p.answer is None:
        return 0.0
    if any(pr.startswith(_FATAL) for pr in p.problems):
        return 0.0
    if answer_leaks(p.question, p.answer):
        return 0.0
    ends_q = 1.0 if p.question.rstrip().endswith("?") else 0.0
    n_ans = len(p.answer.split())
    concise = 1.0 if n_ans <= 5 else 0.5 if n_ans <= 10 else 0.0
    n_q = len(p.question.split())
    length_ok = 1.0 if QUESTION_WORDS[0] <= n_q <= QUESTION_WORDS[1] else 0.0
    return (1.0 + ends_q + concise + length_ok) / 4.0


def _format_problems(p: Proposal) -> list[str]:
    """Every format problem of a proposal, for the record (score: :func:`format_score`)."""
    problems = list(p.problems)
    if p.question and p.answer:
        if answer_leaks(p.question, p.answer):
            problems.append("answer leaks into the question")
        if not p.question.rstrip().endswith("?"):
            problems.append("question does not end with '?'")
        n_q = len(p.question.split())
        if not QUESTION_WORDS[0] <= n_q <= QUESTION_WORDS[1]:
            problems.append(f"question has {n_q} words (want {QUESTION_WORDS[0]}-{QUESTION_WORDS[1]})")
        n_ans = len(p.answer.split())
        if n_ans > 5:
            problems.append(f"answer has {n_ans} words (at most 5 for full credit)")
    return problems


def difficulty_reward(k: int, n: int = 5) -> float:
    """Dr. Zero's difficulty reward: ``(n - k) / (n - 1)`` if ``0 < k < n`` else 0.

    ``k`` of ``n`` solver attempts were correct. For ``n = 5`` this is the
    paper's ``(5 - k) / 4``: 1.0 for one correct answer, 0.25 for four, and 0
    when none or all are correct.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"difficulty needs n >= 2 solver attempts, got n={n!r}")
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= n:
        raise ValueError(f"k must be an integer in [0, {n}], got k={k!r}")
    if k == 0 or k == n:
        return 0.0
    return (n - k) / (n - 1)


def proposer_reward(difficulty: float, fmt: float, *, format_weight: float = 0.5, gate: bool = True) -> float:
    """``difficulty + format_weight * fmt`` (Dr. Zero: weight 0.5).

    With ``gate`` (the reference implementation's behaviour) a pair whose
    format score is 0 earns nothing at all: it is never sent to the solver.
    """
    if not 0.0 <= fmt <= 1.0:
        raise ValueError(f"format score must lie in [0, 1], got {fmt}")
    if gate and fmt == 0.0:
        return 0.0
    return float(difficulty) + format_weight * float(fmt)


# ---------------------------------------------------------------------------
# function nodes
# ---------------------------------------------------------------------------


def _only_input(ctx: Any, node: str) -> str:
    if len(ctx.inputs) != 1:
        raise ValueError(f"{node} node expects exactly one input (the proposer), got {list(ctx.inputs)}")
    return next(iter(ctx.inputs.values()))


def question_node(ctx: Any) -> str:
    """Function node: parse the proposer's text, hide the answer.

    Stores ``proposer_text``, ``question``, ``answer``, ``format_problems``
    and ``format_score`` under ``ctx.state["proposer_solver"]`` and returns
    the question alone. When the text has no ``Answer:`` label there is no
    answer to hide: the question (or the whole text) is passed on and the
    format failure recorded.
    """
    text = _only_input(ctx, "question")
    p = parse_proposal(text)
    fmt = format_score(text)
    problems = _format_problems(p)
    st = ctx.state.setdefault(STATE_KEY, {})
    st.update(
        proposer_text=text,
        question=p.question,
        answer=p.answer,
        format_problems=problems,
        format_score=fmt,
        parsed=p.question is not None and p.answer is not None,
    )
    if problems:
        log.debug("proposal format problems: %s", "; ".join(problems))
    if p.answer is None:
        return p.question or text
    return p.question or ""


def grade_node(ctx: Any) -> str:
    """Function node: count the solvers' exact matches and score the proposer.

    Reads the answer kept by :func:`question_node`, extracts each solver's
    final answer (:func:`societas.agents.parsers.extract_final_answer`), counts
    ``k`` exact matches (:func:`societas.agents.parsers.answers_match`), and writes
    ``k``, ``n``, ``difficulty``, ``format``, ``reward`` (and ``verified``
    when ``ctx.meta["verify"] == "arithmetic"``) to the run state; returns
    them as a JSON object.
    """
    st = ctx.state.get(STATE_KEY)
    if st is None or "format_score" not in st:
        raise ValueError(
            "grade node ran before the question node: wire proposer -> question -> solvers -> grade"
        )
    if not ctx.inputs:
        raise ValueError("grade node has no solver inputs")
    answer = st.get("answer")
    solvers = list(ctx.inputs)
    solver_answers = [extract_final_answer(ctx.inputs[s]) for s in solvers]
    correct = [answers_match(a, answer) if answer else False for a in solver_answers]
    n, k = len(solvers), sum(correct)
    difficulty = difficulty_reward(k, n) if n >= 2 else 0.0
    fmt = float(st["format_score"])
    reward = proposer_reward(difficulty, fmt, format_weight=float(ctx.meta.get("format_weight", 0.5)))
    verified: bool | None = None
    if ctx.meta.get("verify") == "arithmetic" and st.get("question") and answer:
        verified = verify_arithmetic(st["question"], answer)
    summary = {
        "question": st.get("question"),
        "answer": answer,
        "solvers": solvers,
        "solver_answers": solver_answers,
        "correct": correct,
        "k": k,
        "n": n,
        "difficulty": difficulty,
        "format": fmt,
        "reward": reward,
        "format_problems": list(st.get("format_problems", [])),
        "verified": verified,
    }
    st.update(summary)
    return json.dumps(summary)


def proposer_solver_functions() -> dict[str, Callable[[Any], str]]:
    """The graph's function refs mapped to their callables.

    Not needed by the Runtime (the refs are importable), but handy for
    ``Runtime(functions=...)`` when a spec names them differently.
    """
    return {
        "societas.topology.patterns.selfplay:question_node": question_node,
        "societas.topology.patterns.selfplay:grade_node": grade_node,
    }


# ---------------------------------------------------------------------------
# the graph
# ---------------------------------------------------------------------------


def _spec_llms(names: set[str], llms: dict[str, str] | None) -> dict[str, str]:
    """``llms`` completed so every referenced name validates; missing names map
    to the default's URI (bind real models at run time with ``Runtime(llms=...)``)."""
    out = dict(llms) if llms else {"default": "embedded"}
    fallback = out.get("default", "embedded")
    for n in sorted(names):
        out.setdefault(n, fallback)
    return out


def proposer_solver(
    n_solvers: int = 5,
    *,
    llm: str = "default",
    proposer_llm: str | None = None,
    solver_llm: str | None = None,
    proposer_params: dict[str, Any] | None = None,
    solver_params: dict[str, Any] | None = None,
    solver_seed: int | None = 0,
    verify: Literal["arithmetic"] | None = "arithmetic",
    format_weight: float = 0.5,
    name: str = "proposer_solver",
    llms: dict[str, str] | None = None,
) -> Graph:
    """Dr. Zero's proposer/solver round (arXiv 2601.07055) as a graph.

    ``proposer -> question -> solver_1..n -> grade``; the run's output is
    ``grade``'s JSON summary (see :class:`ProposerSolverOutcome`). The task
    is the proposer's instruction (e.g. :func:`arithmetic_word_problem_task`).
    ``llm`` names the model of every agent; ``proposer_llm``/``solver_llm``
    override it per side (names in ``llms``; unknown names map to the
    default's URI so the graph validates — bind models with
    ``Runtime(llms=...)``). Solvers sample with ``solver_params`` (default
    temperature 0.8 — the ``n`` attempts must differ for ``k`` to mean
    anything); with ``solver_seed`` set, solver ``i`` (1-based) samples with
    seed ``solver_seed + i - 1``, so the attempts differ from each other and
    a rerun reproduces them; with ``None`` the Runtime derives per-node seeds
    from its own seed. ``verify="arithmetic"`` adds
    :func:`verify_arithmetic`'s check to the summary.
    """
    if isinstance(n_solvers, bool) or not isinstance(n_solvers, int) or n_solvers < 2:
        raise ValueError(
            f"proposer_solver needs n_solvers >= 2 (difficulty compares attempts), got {n_solvers!r}"
        )
    if verify not in (None, "arithmetic"):
        raise ValueError(f"verify must be None or 'arithmetic', got {verify!r}")
    p_llm = proposer_llm or llm
    s_llm = solver_llm or llm
    p_params = {"temperature": 0.9, "max_new_tokens": 128, **(proposer_params or {})}
    s_params = {"temperature": 0.8, "max_new_tokens": 256, **(solver_params or {})}
    if s_params.get("temperature", 0.7) == 0:
        log.warning(
            "solver temperature 0: the %d attempts will agree, so k is 0 or n and the difficulty 0", n_solvers
        )
    nodes = [
        NodeSpec(id="proposer", kind="agent", role="proposer", llm=p_llm, params=p_params),
        NodeSpec(
            id="question", kind="function", function="societas.topology.patterns.selfplay:question_node"
        ),
    ]
    solvers = [f"solver_{i + 1}" for i in range(n_solvers)]
    for i, sid in enumerate(solvers):
        params = dict(s_params)
        if solver_seed is not None:
            params["seed"] = solver_seed + i
        nodes.append(
            NodeSpec(
                id=sid,
                kind="agent",
                role="solver",
                llm=s_llm,
                params=params,
                template=SOLVER_TEMPLATE,
                meta={"seed_offset": i},
            )
        )
    grade_meta: dict[str, Any] = {"format_weight": format_weight}
    if verify:
        grade_meta["verify"] = verify
    nodes.append(
        NodeSpec(
            id="grade",
            kind="function",
            function="societas.topology.patterns.selfplay:grade_node",
            meta=grade_meta,
        )
    )
    edges = [("proposer", "question")] + [("question", s) for s in solvers] + [(s, "grade") for s in solvers]
    return Graph.build(name, nodes, edges, final="grade", llms=_spec_llms({p_llm, s_llm}, llms))


# ---------------------------------------------------------------------------
# outcome
# ---------------------------------------------------------------------------


@dataclass
class ProposerSolverOutcome:
    """What one proposer/solver run produced, read from a RunResult."""

    question: str | None
    answer: str | None
    solver_answers: list[str | None]
    correct: list[bool]
    k: int
    n: int
    difficulty: float
    format: float
    reward: float
    format_problems: list[str] = field(default_factory=list)
    verified: bool | None = None

    @classmethod
    def from_result(cls, result: Any) -> ProposerSolverOutcome:
        """From ``result.state`` (written by the grade node), else the grade node's JSON output."""
        st = getattr(result, "state", None) or {}
        data: Mapping[str, Any] | None = st.get(STATE_KEY) if isinstance(st, Mapping) else None
        if not data or "k" not in data:
            grades = (getattr(result, "outputs", None) or {}).get("grade") or [None]
            text = grades[-1] or getattr(result, "output", None)
            if not text:
                raise ValueError(
                    "the run has no grade result (did it stop early, or is this not a proposer_solver run?)"
                )
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"the grade output is not JSON: {exc}") from None
        try:
            return cls(
                question=data.get("question"),
                answer=data.get("answer"),
                solver_answers=list(data["solver_answers"]),
                correct=[bool(c) for c in data["correct"]],
                k=int(data["k"]),
                n=int(data["n"]),
                difficulty=float(data["difficulty"]),
                format=float(data["format"]),
                reward=float(data["reward"]),
                format_problems=list(data.get("format_problems", [])),
                verified=data.get("verified"),
            )
        except KeyError as exc:
            raise ValueError(f"the grade result lacks {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
