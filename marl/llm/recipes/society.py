"""``society``: a society of thought trained on the accuracy of its aggregated answer (arXiv 2601.10825).

One episode is one run of :func:`topology.patterns.society.society_of_thought`
on an arithmetic word problem whose answer is computed
(:func:`marl.llm.recipes.selfplay.heldout_problems`)::

    persona_1 .. persona_n   (fully connected, ``rounds`` rounds: in round r > 0
         |                    each reads every persona's round r-1 message)
         v
    aggregator               (reads the last round, answers 'Final answer: X')

Personas are the first ``n_personas`` of
:data:`~topology.patterns.society.DEFAULT_PERSONAS` (distinct Big Five
profiles and expertise; the Runtime appends each persona's description to the
system prompt). The **aggregated answer** is the pattern's own aggregation:
the ``aggregator`` agent node reads the personas' last-round messages and
writes a one-sentence justification and ``Final answer: X``; the answer is
:func:`agents.parsers.extract_final_answer` of that message (no majority
vote: the vote over the personas' last-round answers is only reported, as
``majority_accuracy``). The reward of an episode is::

    reward = 1 if aggregated answer == computed answer else 0     (agents.parsers.answers_match)

**One shared policy** ``"society"`` plays every node (the graph binds one
model name to all of them): each persona message of every round is a sample
of that policy, and so is the aggregator's message (``train_aggregator=True``,
the default; with False the aggregator still runs on the policy but its
message is not trained). Every sample of an episode gets the episode's
reward; the ``group_size`` episodes of one question (each with its own seed)
form its GRPO group.

**Evaluation** runs ``eval_questions`` fixed questions (disjoint from every
training question; the same set as ``remul``'s,
:func:`marl.llm.recipes.remul.heldout_questions`) with greedy decoding
(``eval_temperature``) and reports ``reward`` (accuracy of the aggregated
answer), ``persona_accuracy`` (mean accuracy of the personas' last-round
answers), ``accuracy/NAME`` per persona, ``majority_accuracy`` (plurality of
the personas' last-round answers; ties count as wrong) and ``answered``
(the aggregator gave a parsable answer).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from agents.parsers import answers_match, extract_final_answer, normalize_answer
from marl.llm.loop import Episode, EpisodeResult, Recipe, episode_seed, policy_tokenizer
from marl.llm.recipes.remul import (
    EVAL_QUESTION_SEED,
    heldout_questions,
    train_questions,
)
from marl.llm.rollouts import RoleMap, TokenRecorder, samples_from_trace
from topology.patterns.society import DEFAULT_PERSONAS, society_of_thought
from topology.runtime import Runtime

__all__ = ["SocietyRecipe", "majority_answer"]


def majority_answer(answers: Sequence[str | None]) -> str | None:
    """The strict plurality of the (normalised) answers; ``None`` on a tie or when none parsed."""
    norm = [normalize_answer(a) for a in answers if a is not None and normalize_answer(a)]
    if not norm:
        return None
    top = Counter(norm).most_common()
    if len(top) > 1 and top[0][1] == top[1][1]:
        return None
    return top[0][0]


class SocietyRecipe(Recipe):
    """Personas debate; one shared policy trained on the aggregated answer's accuracy (see the module docstring)."""

    name = "society"

    def __init__(self, *, n_personas: int = 3, rounds: int = 1, questions_per_step: int = 2, group_size: int = 2,
                 persona_tokens: int = 64, aggregator_tokens: int = 64, temperature: float = 1.0,
                 eval_temperature: float = 0.0, eval_questions: int = 6, train_aggregator: bool = True) -> None:
        for key, val, lo in (("n_personas", n_personas, 2), ("rounds", rounds, 1),
                             ("questions_per_step", questions_per_step, 1), ("group_size", group_size, 2),
                             ("persona_tokens", persona_tokens, 1), ("aggregator_tokens", aggregator_tokens, 1),
                             ("eval_questions", eval_questions, 1)):
            if isinstance(val, bool) or not isinstance(val, int) or val < lo:
                extra = " (GRPO compares the episodes of one question)" if key == "group_size" else ""
                raise ValueError(f"{key} must be an integer >= {lo}, got {val!r}{extra}")
        if n_personas > len(DEFAULT_PERSONAS):
            raise ValueError(f"n_personas must be at most {len(DEFAULT_PERSONAS)} (the default personas)")
        for key, val in (("temperature", temperature), ("eval_temperature", eval_temperature)):
            if isinstance(val, bool) or not isinstance(val, (int, float)) or val < 0:
                raise ValueError(f"{key} must be a number >= 0, got {val!r}")
        if not isinstance(train_aggregator, bool):
            raise ValueError("train_aggregator must be a boolean")  # noqa: TRY004
        self.n_personas = n_personas
        self.rounds = rounds
        self.questions_per_step = questions_per_step
        self.group_size = group_size
        self.persona_tokens = persona_tokens
        self.aggregator_tokens = aggregator_tokens
        self.temperature = float(temperature)
        self.eval_temperature = float(eval_temperature)
        self.eval_questions = eval_questions
        self.train_aggregator = train_aggregator
        self.persona_names = tuple(p.name for p in DEFAULT_PERSONAS[:n_personas])
        self._eval = heldout_questions(eval_questions)
        self._eval_set = frozenset(q for q, _ in self._eval)
        roles = {"persona": "society"} | ({"aggregator": "society"} if train_aggregator else {})
        self.role_map = RoleMap(roles)

    @property
    def policies(self) -> tuple[str, ...]:
        return ("society",)

    def config(self) -> dict[str, Any]:
        keys = ("n_personas", "rounds", "questions_per_step", "group_size", "persona_tokens", "aggregator_tokens",
                "temperature", "eval_temperature", "eval_questions", "train_aggregator")
        return {k: getattr(self, k) for k in keys} | {"personas": list(self.persona_names)}

    def graph(self, *, train: bool = True) -> Any:
        """The society graph; every node uses the model named ``"society"``."""
        t = self.temperature if train else self.eval_temperature
        return society_of_thought(
            self.n_personas, self.rounds, llm="society",
            params={"temperature": t, "max_new_tokens": self.persona_tokens},
            aggregator_params={"temperature": t, "max_new_tokens": self.aggregator_tokens},
            name="society", llms={"society": "embedded"},
        )

    # -- episodes ---------------------------------------------------------------------------------

    def train_episodes(self, step: int, seed: int) -> list[Episode]:
        qs = train_questions(self.questions_per_step, seed, self._eval_set)
        return [Episode({"question": q, "answer": a}, episode_seed(seed, q, g), f"q:{q}", i * self.group_size + g)
                for i, (q, a) in enumerate(qs) for g in range(self.group_size)]

    def eval_episodes(self, seed: int) -> list[Episode]:
        return [Episode({"question": q, "answer": a}, episode_seed(EVAL_QUESTION_SEED, "society", j), f"q:{q}", j)
                for j, (q, a) in enumerate(self._eval)]

    # -- rollouts ---------------------------------------------------------------------------------

    def run_episodes(self, llms: Mapping[str, Any], episodes: Sequence[Episode], *, train: bool) -> list[EpisodeResult]:
        pol = llms["society"]
        on_event = pol.on_event if isinstance(pol, TokenRecorder) else None
        rt = Runtime(self.graph(train=train), llms={"society": pol}, on_event=on_event)
        runs = rt.run_many([e.task["question"] for e in episodes], seeds=[e.seed for e in episodes])
        tok = policy_tokenizer(pol, self.name) if train else None
        results = []
        for e, run in zip(episodes, runs):
            ref = str(e.task["answer"])
            agg_text = (run.outputs.get("aggregator") or [""])[-1]
            agg = extract_final_answer(agg_text)
            reward = 1.0 if answers_match(agg, ref) else 0.0
            persona_ans = {n: extract_final_answer((run.outputs.get(n) or [""])[-1]) for n in self.persona_names}
            persona_ok = {n: float(answers_match(a, ref)) for n, a in persona_ans.items()}
            vote = majority_answer(list(persona_ans.values()))
            samples = []
            if tok is not None:
                samples = samples_from_trace(run.trace, self.role_map, tok, group_key=e.group, trace_id=e.index)
            metrics = {"reward": reward, "answered": float(agg is not None),
                       "persona_accuracy": sum(persona_ok.values()) / len(persona_ok),
                       "majority_accuracy": float(answers_match(vote, ref))}
            metrics.update({f"accuracy/{n}": v for n, v in persona_ok.items()})
            record = {"question": e.task["question"], "answer": e.task["answer"], "seed": e.seed,
                      "aggregated_answer": agg, "aggregator_text": agg_text, "persona_answers": persona_ans,
                      "majority_answer": vote, "reward": reward}
            results.append(EpisodeResult(samples, [reward] * len(samples), [e.group] * len(samples), metrics, record))
        return results
