"""``remul``: REMUL's speaker, rewarded when frozen listeners can follow its reasoning (arXiv 2602.16154).

One episode is one run of :func:`societas.topology.patterns.remul.speaker_listeners` on
an arithmetic word problem whose answer is computed
(:func:`societas.marl.llm.recipes.selfplay.heldout_problems`)::

    speaker -> cut_25 -> listener_25_1..3 -\\
            -> cut_50 -> listener_50_1..3 --> agreement
            -> cut_75 -> listener_75_1..3 -/

The trained **speaker** (policy ``"speaker"``) reasons one step per line and
ends with ``Final answer: ...``; its reasoning (without the answer line) is
cut after 25%, 50% and 75% of its lines, and ``n_listeners`` listeners per
cut (at least ``min_lines`` lines, REMUL's 1 by default; 0: the plain floor) —
the **frozen** base model, or one model per listener (``listener_models``:
``load_llm`` URIs, the paper's three different models), none of which sees the
speaker's answer — continue each cut to their own answer. The speaker's reward is the pattern's
:func:`~societas.topology.patterns.remul.agreement_reward`::

    reward = #{(cut, listener) : listener's answer == speaker's answer}          # 0..9
           + n_listeners x [speaker's answer == computed answer]   (correctness=True: 0..12)

The ``group_size`` episodes of one question (each with its own seed) form
its GRPO group; the speaker's one message per episode is the only sample.

**Masked SFT on answer tokens** (the paper's correctness stage) runs when
``TrainConfig.sft_steps > 0``: :meth:`RemulRecipe.sft_samples` builds, for
``sft_batch`` training questions, the speaker's exact prompt and a short
worked solution computed from the question's numbers
(:func:`worked_solution`), ending in ``Final answer: N``. The whole
solution is the completion, but ``completion_mask`` is 1 ONLY on the tokens
of the final-answer line (``Final answer: N``; not the reasoning lines, not
the end-of-sequence token): the NLL teaches the answer given the reasoning
without imitating the reasoning itself, which GRPO shapes for legibility.
(Demonstrations rather than the speaker's own sampled answers, because the
loop's SFT stage receives only a tokenizer; the reasoning lines are context.)

**Evaluation** runs ``eval_questions`` fixed questions (disjoint from every
training question: training draws skip them) with the speaker decoding
greedily and reports ``reward`` (the agreement reward above), ``accuracy``
(the speaker's answer against the computed one), ``agreement`` (matched
pairs / pairs), ``agreement@FRAC`` per cut and ``answered``; and one extra
*early-answering* episode, :func:`~societas.topology.patterns.remul.early_answering_curve`
over the same questions (greedy speaker; the frozen base model answers from
the speaker's reasoning cut at ``ea_fractions``, the point at 1.0 being the
speaker's own answer; accuracy against the computed answers), which reports
``early_answering_aoc`` (the paper's faithfulness metric: larger when the
answer depends on reading more of the reasoning) and ``early_answering@FRAC``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from societas.agents.agent import Agent
from societas.agents.llm.base import encode_with_tokenizer
from societas.agents.llm.function import FunctionLLM
from societas.agents.llm.loading import load_llm
from societas.marl.llm.loop import FROZEN, Episode, EpisodeResult, Recipe, episode_seed, policy_tokenizer
from societas.marl.llm.recipes.selfplay import heldout_problems
from societas.marl.llm.rollouts import RoleMap, TokenRecorder, TokenSample, samples_from_trace
from societas.marl.llm.settings import RecipeConfig, recipe_settings
from societas.topology.errors import FieldProblem
from societas.topology.patterns.remul import (
    RemulOutcome,
    early_answering_curve,
    speaker_listeners,
)
from societas.topology.runtime import Runtime

__all__ = [
    "EVAL_QUESTION_SEED",
    "RemulConfig",
    "RemulRecipe",
    "heldout_questions",
    "train_questions",
    "worked_solution",
]

EVAL_QUESTION_SEED = 20_261
"""Seed of the fixed held-out questions (:func:`heldout_questions`)."""


def heldout_questions(n: int) -> list[tuple[str, int]]:
    """The ``n`` fixed held-out (question, answer) pairs, distinct questions."""
    out: list[tuple[str, int]] = []
    seen: set[str] = set()
    k = 0
    while len(out) < n:
        for q, a in heldout_problems(4 * n + 8, seed=EVAL_QUESTION_SEED + k):
            if q not in seen and len(out) < n:
                seen.add(q)
                out.append((q, a))
        k += 1
    return out


def train_questions(n: int, seed: int, exclude: set[str] | frozenset[str]) -> list[tuple[str, int]]:
    """``n`` distinct (question, answer) pairs drawn with ``seed``, none of them in ``exclude``."""
    rng = random.Random(seed)
    out: list[tuple[str, int]] = []
    seen: set[str] = set()
    for _ in range(1000):
        for q, a in heldout_problems(4 * n + 8, seed=rng.randrange(2**31)):
            if q not in exclude and q not in seen and len(out) < n:
                seen.add(q)
                out.append((q, a))
        if len(out) == n:
            return out
    raise RuntimeError(f"could not draw {n} training questions outside the held-out set")


_NUM = re.compile(r"\d+")


def worked_solution(question: str, answer: int) -> str:
    """A short worked solution of a :func:`heldout_problems` question, ending in ``Final answer: N``.

    The arithmetic is rebuilt from the question's numbers and its kind (buy
    more, boxes of, bags minus given away, shared equally); it is checked
    against ``answer`` and falls back to a generic line when it does not match.
    """
    n = [int(x) for x in _NUM.findall(question)]
    lines: list[str] = []
    if "buys" in question and len(n) == 2 and n[0] + n[1] == answer:
        lines = [f"Start with {n[0]}.", f"Add the {n[1]} bought: {n[0]} + {n[1]} = {answer}."]
    elif "boxes" in question and len(n) == 2 and n[0] * n[1] == answer:
        lines = [f"There are {n[0]} boxes of {n[1]}.", f"Multiply: {n[0]} x {n[1]} = {answer}."]
    elif "gives away" in question and len(n) == 3 and n[0] * n[1] - n[2] == answer:
        lines = [
            f"Total: {n[0]} x {n[1]} = {n[0] * n[1]}.",
            f"Subtract the {n[2]} given away: {n[0] * n[1]} - {n[2]} = {answer}.",
        ]
    elif "equally" in question and len(n) == 2 and n[1] and n[0] // n[1] == answer:
        lines = [f"Share {n[0]} among {n[1]}.", f"Divide: {n[0]} / {n[1]} = {answer}."]
    if not lines:
        lines = ["Work through the numbers in the question step by step.", f"The result is {answer}."]
    return "\n".join(lines) + f"\nFinal answer: {answer}"


_Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
"""A fraction of the speaker's reasoning lines."""


def _distinct(name: str, fracs: tuple[float, ...]) -> tuple[float, ...]:
    if len(set(fracs)) != len(fracs):
        raise ValueError(f"{name} must be distinct, got {list(fracs)}")
    return fracs


def _render_only(messages: Any) -> str:
    raise RuntimeError("the agent built by RemulRecipe.speaker_prompt only renders prompts")


def _base(llm: Any) -> Any:
    """The LLM behind a TokenRecorder (evaluation-only calls need no token bookkeeping)."""
    return llm.llm if isinstance(llm, TokenRecorder) else llm


class RemulConfig(RecipeConfig):
    """Options of :class:`RemulRecipe` (the ``recipe:`` section of ``examples/recipes/remul.yaml``)."""

    questions_per_step: int = Field(2, ge=1, description="training questions drawn per GRPO step")
    group_size: int = Field(
        4, ge=2, description="speaker episodes per question: one GRPO group (GRPO compares them)"
    )
    n_listeners: int = Field(3, ge=1, description="frozen listeners per cut (the paper's 3)")
    cuts: tuple[Annotated[float, Field(gt=0.0, lt=1.0)], ...] = Field(
        (0.25, 0.5, 0.75),
        strict=False,
        description="distinct fractions in (0, 1): where the speaker's reasoning is cut for the listeners",
    )
    correctness: bool = Field(
        False, description="add n_listeners x [speaker's answer is right] to the reward (balanced variant)"
    )
    speaker_tokens: int = Field(96, ge=1, description="new tokens of the speaker's reasoning and answer")
    listener_tokens: int = Field(48, ge=1, description="new tokens of each listener's continuation")
    temperature: float = Field(1.0, ge=0.0, description="speaker sampling temperature in training")
    listener_temperature: float = Field(0.9, ge=0.0, description="listener sampling temperature")
    eval_questions: int = Field(6, ge=1, description="fixed held-out questions (greedy speaker)")
    early_answering: bool = Field(
        True, description="evaluate the early-answering curve (faithfulness AOC) over the held-out questions"
    )
    ea_fractions: tuple[_Fraction, ...] = Field(
        (0.2, 0.4, 0.6, 0.8, 1.0),
        strict=False,
        description="distinct fractions in [0, 1] of the early-answering curve (kept sorted)",
    )
    sft_batch: int = Field(8, ge=1, description="worked solutions per masked-SFT step")
    listener_models: list[str] | None = Field(
        None,
        description="one load_llm URI per listener (the paper's three different models), the same "
        "listeners at every cut; default: the frozen base model for all of them (runs offline)",
    )
    min_lines: int = Field(
        1,
        ge=0,
        description="keep at least this many reasoning lines in every cut (the paper's 1; 0: plain floor)",
    )

    @field_validator("cuts")
    @classmethod
    def _distinct_cuts(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if not v:
            raise ValueError("cuts must list at least one fraction in (0, 1)")
        return _distinct("cuts", v)

    @field_validator("ea_fractions")
    @classmethod
    def _sorted_fractions(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(sorted(_distinct("ea_fractions", v)))

    @model_validator(mode="after")
    def _one_model_per_listener(self) -> RemulConfig:
        if self.listener_models is not None and len(self.listener_models) != self.n_listeners:
            raise FieldProblem(
                ("listener_models",),
                f"lists {len(self.listener_models)} models for n_listeners={self.n_listeners}; give one per listener",
            )
        return self

    @model_validator(mode="after")
    def _curve_has_points(self) -> RemulConfig:
        if self.early_answering and (len(self.ea_fractions) < 2 or min(self.ea_fractions) >= 1.0):
            raise FieldProblem(
                ("ea_fractions",), "needs two or more distinct fractions, one of them below 1.0"
            )
        return self


class RemulRecipe(Recipe):
    """REMUL's speaker trained against frozen listeners (see the module docstring).

    Built from a :class:`RemulConfig` or its fields as keyword arguments;
    bad values raise :class:`~societas.marl.llm.settings.SettingsError` naming the field.
    """

    name = "remul"

    def __init__(self, settings: RemulConfig | Mapping[str, Any] | None = None, /, **options: Any) -> None:
        self.settings = recipe_settings(RemulConfig, settings, options)
        self._eval = heldout_questions(self.settings.eval_questions)
        self._eval_set = frozenset(q for q, _ in self._eval)
        self.role_map = RoleMap({"speaker": "speaker"})
        self._listener_llms: list[Any] | None = None

    @property
    def policies(self) -> tuple[str, ...]:
        return ("speaker",)

    def config(self) -> dict[str, Any]:
        return self.settings.model_dump(mode="json")

    # -- the graph ----------------------------------------------------------------------------------

    def graph(self, references: Mapping[str, Any] | None = None, *, train: bool = True) -> Any:
        """The speaker/listeners graph (speaker model ``"speaker"``; listeners ``"listener"``, or
        ``"listener_1"``, ``"listener_2"``, ... with ``listener_models``)."""
        refs = {str(k): str(v) for k, v in (references or {}).items()}
        return speaker_listeners(
            self.settings.cuts,
            self.settings.n_listeners,
            speaker_llm="speaker",
            listener_llm=self._listener_names(),
            speaker_params={
                "temperature": self.settings.temperature if train else 0.0,
                "max_new_tokens": self.settings.speaker_tokens,
            },
            listener_params={
                "temperature": self.settings.listener_temperature,
                "max_new_tokens": self.settings.listener_tokens,
            },
            balanced=self.settings.correctness and bool(refs),
            references=refs or None,
            min_lines=self.settings.min_lines,
            name="remul",
        )

    def _listener_names(self) -> str | list[str]:
        models = self.settings.listener_models
        return "listener" if models is None else [f"listener_{i + 1}" for i in range(len(models))]

    def _listeners(self, llms: Mapping[str, Any]) -> dict[str, Any]:
        """The listeners' LLMs by graph name: the frozen base model, or one loaded model per listener."""
        models = self.settings.listener_models
        if models is None:
            return {"listener": llms[FROZEN]}
        if self._listener_llms is None:
            self._listener_llms = [load_llm(uri) for uri in models]
        return {f"listener_{i + 1}": llm for i, llm in enumerate(self._listener_llms)}

    def speaker_prompt(self, question: str) -> list[dict[str, str]]:
        """The speaker's chat prompt for ``question``, exactly as the Runtime renders it."""
        ns = self.graph(train=True).node("speaker")
        return Agent(
            name="speaker",
            llm=FunctionLLM(_render_only, name="render-only"),  # build_prompt never calls the LLM
            role=ns.role,
            system_prompt=ns.prompt,
            template=ns.template,
        ).build_prompt(question, [])

    # -- episodes ---------------------------------------------------------------------------------

    def train_episodes(self, step: int, seed: int) -> list[Episode]:
        qs = train_questions(self.settings.questions_per_step, seed, self._eval_set)
        return [
            Episode(
                {"kind": "question", "question": q, "answer": a},
                episode_seed(seed, q, g),
                f"q:{q}",
                i * self.settings.group_size + g,
            )
            for i, (q, a) in enumerate(qs)
            for g in range(self.settings.group_size)
        ]

    def eval_episodes(self, seed: int) -> list[Episode]:
        # Fixed across seeds and evaluations: one held-out set.
        eps = [
            Episode(
                {"kind": "question", "question": q, "answer": a},
                episode_seed(EVAL_QUESTION_SEED, "q", j),
                f"q:{q}",
                j,
            )
            for j, (q, a) in enumerate(self._eval)
        ]
        if self.settings.early_answering:
            eps.append(
                Episode(
                    {
                        "kind": "early_answering",
                        "questions": [q for q, _ in self._eval],
                        "answers": [a for _, a in self._eval],
                    },
                    episode_seed(EVAL_QUESTION_SEED, "early_answering"),
                    "early_answering",
                    len(eps),
                )
            )
        return eps

    def sft_samples(self, step: int, seed: int, tokenizer: Any) -> dict[str, list[TokenSample]]:
        """Masked SFT on answer tokens: worked solutions, loss only on the ``Final answer: N`` line."""
        eos = tokenizer.eos_token_id
        out = []
        for q, a in train_questions(self.settings.sft_batch, seed, self._eval_set):
            text = worked_solution(q, a)
            reasoning, _, answer_line = text.rpartition("\n")
            pre = list(tokenizer.encode(reasoning + "\n", add_special_tokens=False))
            ans = list(tokenizer.encode(answer_line, add_special_tokens=False))
            post = [eos] if eos is not None else []
            ids = pre + ans + post
            mask = [0] * len(pre) + [1] * len(ans) + [0] * len(post)
            prompt = encode_with_tokenizer(tokenizer, [self.speaker_prompt(q)])[0]
            out.append(
                TokenSample(
                    "speaker", prompt, ids, mask, None, f"q:{q}", {"answer_line": answer_line, "question": q}
                )
            )
        return {"speaker": out}

    # -- rollouts ---------------------------------------------------------------------------------

    def run_episodes(
        self, llms: Mapping[str, Any], episodes: Sequence[Episode], *, train: bool
    ) -> list[EpisodeResult]:
        out: list[EpisodeResult | None] = [None] * len(episodes)
        qs = [(i, e) for i, e in enumerate(episodes) if e.task["kind"] == "question"]
        if qs:
            for (i, _), res in zip(qs, self._questions(llms, [e for _, e in qs], train)):
                out[i] = res
        for i, e in enumerate(episodes):
            if e.task["kind"] == "early_answering":
                out[i] = self._early_answering(llms, e)
        missing = [episodes[i].task.get("kind") for i, r in enumerate(out) if r is None]
        if missing:
            raise ValueError(f"unknown episode kinds {missing}")
        return [r for r in out if r is not None]

    def _questions(
        self, llms: Mapping[str, Any], episodes: Sequence[Episode], train: bool
    ) -> list[EpisodeResult]:
        spk = llms["speaker"]
        refs = {e.task["question"]: e.task["answer"] for e in episodes}
        graph = self.graph(refs, train=train)
        on_event = spk.on_event if isinstance(spk, TokenRecorder) else None
        rt = Runtime(graph, llms={"speaker": spk, **self._listeners(llms)}, on_event=on_event)
        runs = rt.run_many([e.task["question"] for e in episodes], seeds=[e.seed for e in episodes])
        tok = policy_tokenizer(spk, self.name) if train else None
        results = []
        for e, run in zip(episodes, runs):
            o = RemulOutcome.from_result(run)
            samples = []
            if tok is not None:
                samples = samples_from_trace(
                    run.trace, self.role_map, tok, group_key=e.group, trace_id=e.index
                )
            metrics = {
                "reward": o.reward,
                "accuracy": float(bool(o.correct)),
                "agreement": o.matches / o.n_pairs if o.n_pairs else 0.0,
                "answered": float(o.speaker_answer is not None),
                "reasoning_lines": float(o.reasoning_lines or 0),
            }
            metrics.update({f"agreement@{f:g}": v for f, v in o.agreement_by_cut.items()})
            record = {
                "question": e.task["question"],
                "answer": e.task["answer"],
                "seed": e.seed,
                "speaker_text": run.outputs.get("speaker", [""])[-1],
                "speaker_answer": o.speaker_answer,
                "listener_answers": {f"{f:g}": a for f, a in o.listener_answers.items()},
                "matches": o.matches,
                "correct": o.correct,
                "reward": o.reward,
            }
            results.append(
                EpisodeResult(samples, [o.reward] * len(samples), [e.group] * len(samples), metrics, record)
            )
        return results

    def _early_answering(self, llms: Mapping[str, Any], e: Episode) -> EpisodeResult:
        curve = early_answering_curve(
            _base(llms["speaker"]),
            e.task["questions"],
            [str(a) for a in e.task["answers"]],
            self.settings.ea_fractions,
            listener_llm=llms[FROZEN],
            speaker_params={"temperature": 0.0, "max_new_tokens": self.settings.speaker_tokens},
            listener_params={"temperature": 0.0, "max_new_tokens": self.settings.listener_tokens},
            min_lines=self.settings.min_lines,
            seed=e.seed % (2**31),
        )
        metrics = {"early_answering_aoc": curve.aoc, "early_answering_used": float(curve.n_used)}
        metrics.update({f"early_answering@{f:g}": a for f, a in curve.accuracies.items()})
        record = {
            "early_answering": {
                "accuracies": {f"{f:g}": a for f, a in curve.accuracies.items()},
                "aoc": curve.aoc,
                "n_used": curve.n_used,
                "n_questions": curve.n_questions,
            }
        }
        return EpisodeResult(metrics=metrics, record=record)
