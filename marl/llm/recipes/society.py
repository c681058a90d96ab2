"""``society``: a society of thought trained on the accuracy of its aggregated answer (arXiv 2601.10825).

One episode is one run of :func:`societas.topology.patterns.society.society_of_thought`
on an arithmetic word problem whose answer is computed
(:func:`societas.marl.llm.recipes.selfplay.heldout_problems`)::

    persona_1 .. persona_n   (fully connected, ``rounds`` rounds: in round r > 0
         |                    each reads every persona's round r-1 message)
         v
    aggregator               (reads the last round, answers 'Final answer: X')

Personas are the first ``n_personas`` of
:data:`~societas.topology.patterns.society.DEFAULT_PERSONAS` (distinct Big Five
profiles and expertise; the Runtime appends each persona's description to the
system prompt). The **aggregated answer** is the pattern's own aggregation:
the ``aggregator`` agent node reads the personas' last-round messages and
writes a one-sentence justification and ``Final answer: X``; the answer is
:func:`societas.agents.parsers.extract_final_answer` of that message (no majority
vote: the vote over the personas' last-round answers is only reported, as
``majority_accuracy``). The reward of an episode is::

    reward = 1 if aggregated answer == computed answer else 0     (societas.agents.parsers.answers_match)

**One shared policy** ``"society"`` plays every node (the graph binds one
model name to all of them): each persona message of every round is a sample
of that policy, and so is the aggregator's message (``train_aggregator=True``,
the default; with False the aggregator still runs on the policy but its
message is not trained). Every sample of an episode gets the episode's
reward; the ``group_size`` episodes of one question (each with its own seed)
form its GRPO group.

**SFT on multi-agent dialogue** (the paper finds that it speeds up the RL
that follows) runs when ``TrainConfig.sft_steps > 0``:
:meth:`SocietyRecipe.sft_samples` writes, for ``sft_batch`` training
questions, a synthetic discussion (:func:`society_dialogue`) built from the
question's computed worked solution
(:func:`societas.marl.llm.recipes.remul.worked_solution`): in round 0 each persona
states the steps and ``Final answer: N``, except that with probability
``sft_slip_rate`` one persona (never the first) slips to a wrong total; in
later rounds the others name the slip and the slipped persona takes the
correction (conflict, then reconciliation); the aggregator weighs the
last round, names any outlier and writes ``Final answer: N``. The
discussion is played through the Runtime with a scripted model, so each
sample's prompt is exactly the one the policy sees in a real run (persona
system prompts, the ``### Message from NAME`` inputs of later rounds, the
aggregator's template); the completion is the scripted message plus the
end-of-sequence token, all of it trained (like ``conductor``'s synthetic
topologies), except the slip itself: the slipped persona's round-0 message
is context for the others to correct, not a message to imitate, and gives
no sample.

**Evaluation** runs ``eval_questions`` fixed questions (disjoint from every
training question; the same set as ``remul``'s,
:func:`societas.marl.llm.recipes.remul.heldout_questions`) with greedy decoding
(``eval_temperature``) and reports ``reward`` (accuracy of the aggregated
answer), ``persona_accuracy`` (mean accuracy of the personas' last-round
answers), ``accuracy/NAME`` per persona, ``majority_accuracy`` (plurality of
the personas' last-round answers; ties count as wrong) and ``answered``
(the aggregator gave a parsable answer).
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field

from societas.agents.llm.function import FunctionLLM
from societas.agents.parsers import answers_match, extract_final_answer, normalize_answer
from societas.marl.llm.loop import Episode, EpisodeResult, Recipe, episode_seed, policy_tokenizer
from societas.marl.llm.recipes.remul import (
    EVAL_QUESTION_SEED,
    heldout_questions,
    train_questions,
    worked_solution,
)
from societas.marl.llm.rollouts import RoleMap, TokenRecorder, TokenSample, samples_from_trace
from societas.marl.llm.settings import RecipeConfig, recipe_settings
from societas.topology.patterns.society import DEFAULT_PERSONAS, Persona, society_of_thought
from societas.topology.runtime import Runtime

__all__ = ["SocietyConfig", "SocietyDialogue", "SocietyRecipe", "majority_answer", "society_dialogue"]


def majority_answer(answers: Sequence[str | None]) -> str | None:
    """The strict plurality of the (normalised) answers; ``None`` on a tie or when none parsed."""
    norm = [normalize_answer(a) for a in answers if a is not None and normalize_answer(a)]
    if not norm:
        return None
    top = Counter(norm).most_common()
    if len(top) > 1 and top[0][1] == top[1][1]:
        return None
    return top[0][0]


@dataclasses.dataclass(frozen=True)
class SocietyDialogue:
    """A scripted discussion of one question: each persona's message in every
    round (``messages[name][r]``) and the aggregator's (see :func:`society_dialogue`)."""

    question: str
    answer: int
    messages: Mapping[str, tuple[str, ...]]
    aggregator: str
    slipped: str | None = None


def society_dialogue(
    question: str,
    answer: int,
    personas: Sequence[str],
    rounds: int,
    rng: random.Random,
    slip_rate: float = 0.5,
) -> SocietyDialogue:
    """A synthetic ``rounds``-round discussion of ``question`` whose every final answer is computed.

    The steps are those of :func:`~societas.marl.llm.recipes.remul.worked_solution`.
    In round 0 each persona writes them and ``Final answer: <answer>``; with
    probability ``slip_rate`` (and at least three personas, so that the
    majority stays right) one persona other than the first writes a wrong
    total instead. In round 1 the others name the slip and ask whether the
    slipped persona agrees, and it accepts the correction; in every later
    round (and from round 1 when nobody slipped) each persona agrees with the
    persona before it. The aggregator's one-sentence justification names who
    reached the answer and the slip, corrected or not.
    """
    personas = list(personas)
    if len(personas) < 2:
        raise ValueError(f"a discussion needs at least two personas, got {personas}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
    if not 0.0 <= slip_rate <= 1.0:
        raise ValueError(f"slip_rate must be in [0, 1], got {slip_rate!r}")
    steps = worked_solution(question, answer).rpartition("\n")[0].splitlines()
    last = steps[-1]
    slipped = rng.choice(personas[1:]) if len(personas) >= 3 and rng.random() < slip_rate else None
    wrong = None
    if slipped is not None:
        wrong = answer + rng.choice([-3, -2, -1, 1, 2, 3])
        if wrong < 0:
            wrong = answer + rng.randint(1, 3)
    right = [p for p in personas if p != slipped]
    messages: dict[str, list[str]] = {p: [] for p in personas}
    for r in range(rounds):
        for i, name in enumerate(personas):
            if r == 0 and name == slipped:
                text = f"{steps[0]}\nI make it {wrong}.\nFinal answer: {wrong}"
            elif r == 0:
                text = "\n".join(steps) + f"\nFinal answer: {answer}"
            elif r == 1 and name == slipped:
                text = f"{right[0]} is right and I slipped: {last}\nI agree with {answer} now.\nFinal answer: {answer}"
            elif r == 1 and slipped is not None:
                text = f"{slipped}, I do not get {wrong}: {last}\nDo you agree?\nFinal answer: {answer}"
            else:
                text = f"I agree with {personas[i - 1]}: {last}\nFinal answer: {answer}"
            messages[name].append(text)
    if slipped is None:
        why = f"Everyone reached {answer}: {last}"
    elif rounds == 1:
        why = f"{', '.join(right)} reached {answer} ({last}); {slipped}'s {wrong} is a slip."
    else:
        why = f"{', '.join(right)} reached {answer} ({last}), and {slipped} corrected {wrong} to {answer}."
    return SocietyDialogue(
        question,
        answer,
        {p: tuple(m) for p, m in messages.items()},
        f"{why}\nFinal answer: {answer}",
        slipped,
    )


class SocietyConfig(RecipeConfig):
    """Options of :class:`SocietyRecipe` (the ``recipe:`` section of ``examples/recipes/society.yaml``)."""

    n_personas: int = Field(
        3,
        ge=2,
        le=len(DEFAULT_PERSONAS),
        description="personas in the debate: the first n of DEFAULT_PERSONAS",
    )
    rounds: int = Field(1, ge=1, description="debate rounds; in round r > 0 each persona reads round r-1")
    questions_per_step: int = Field(2, ge=1, description="training questions drawn per GRPO step")
    group_size: int = Field(2, ge=2, description="debates per question: one GRPO group (GRPO compares them)")
    persona_tokens: int = Field(64, ge=1, description="new tokens of each persona message")
    aggregator_tokens: int = Field(64, ge=1, description="new tokens of the aggregator's answer")
    temperature: float = Field(1.0, ge=0.0, description="sampling temperature in training")
    eval_temperature: float = Field(0.0, ge=0.0, description="sampling temperature at evaluation (0: greedy)")
    eval_questions: int = Field(6, ge=1, description="fixed held-out questions (remul's held-out set)")
    train_aggregator: bool = Field(
        True, description="the aggregator's message is a sample of the shared policy too"
    )
    sft_batch: int = Field(8, ge=1, description="scripted discussions per SFT step")
    sft_slip_rate: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="probability that one persona of a scripted discussion slips (and is corrected)",
    )


class SocietyRecipe(Recipe):
    """Personas debate; one shared policy trained on the aggregated answer's accuracy (see the module docstring).

    Built from a :class:`SocietyConfig` or its fields as keyword arguments;
    bad values raise :class:`~societas.marl.llm.settings.SettingsError` naming the field.
    """

    name = "society"

    def __init__(self, settings: SocietyConfig | Mapping[str, Any] | None = None, /, **options: Any) -> None:
        self.settings = recipe_settings(SocietyConfig, settings, options)
        self.persona_names = tuple(p.name for p in DEFAULT_PERSONAS[: self.settings.n_personas])
        self._eval = heldout_questions(self.settings.eval_questions)
        self._eval_set = frozenset(q for q, _ in self._eval)
        roles = {"persona": "society"} | ({"aggregator": "society"} if self.settings.train_aggregator else {})
        self.role_map = RoleMap(roles)

    @property
    def policies(self) -> tuple[str, ...]:
        return ("society",)

    def config(self) -> dict[str, Any]:
        return self.settings.model_dump(mode="json") | {"personas": list(self.persona_names)}

    def graph(self, *, train: bool = True) -> Any:
        """The society graph; every node uses the model named ``"society"``."""
        t = self.settings.temperature if train else self.settings.eval_temperature
        return society_of_thought(
            self.settings.n_personas,
            self.settings.rounds,
            llm="society",
            params={"temperature": t, "max_new_tokens": self.settings.persona_tokens},
            aggregator_params={"temperature": t, "max_new_tokens": self.settings.aggregator_tokens},
            name="society",
            llms={"society": "embedded"},
        )

    # -- episodes ---------------------------------------------------------------------------------

    def train_episodes(self, step: int, seed: int) -> list[Episode]:
        qs = train_questions(self.settings.questions_per_step, seed, self._eval_set)
        return [
            Episode(
                {"question": q, "answer": a},
                episode_seed(seed, q, g),
                f"q:{q}",
                i * self.settings.group_size + g,
            )
            for i, (q, a) in enumerate(qs)
            for g in range(self.settings.group_size)
        ]

    def eval_episodes(self, seed: int) -> list[Episode]:
        return [
            Episode({"question": q, "answer": a}, episode_seed(EVAL_QUESTION_SEED, "society", j), f"q:{q}", j)
            for j, (q, a) in enumerate(self._eval)
        ]

    # -- SFT on multi-agent dialogue -----------------------------------------------------------------

    def sft_samples(self, step: int, seed: int, tokenizer: Any) -> dict[str, list[TokenSample]]:
        """Samples of ``sft_batch`` scripted discussions (:func:`society_dialogue`), prompts exactly as in a run."""
        rng = random.Random(seed)
        qs = train_questions(self.settings.sft_batch, seed, self._eval_set)
        dialogues = {
            q: society_dialogue(
                q, a, self.persona_names, self.settings.rounds, rng, self.settings.sft_slip_rate
            )
            for q, a in qs
        }
        script = _DialogueScript(dialogues, DEFAULT_PERSONAS[: self.settings.n_personas])
        runs = Runtime(
            self.graph(train=True), llms={"society": FunctionLLM(batch_fn=script, name="sft-script")}
        ).run_many([q for q, _ in qs])
        eos = tokenizer.eos_token_id
        out: list[TokenSample] = []
        for (q, _), run in zip(qs, runs):
            slipped = dialogues[q].slipped
            for smp in samples_from_trace(
                run.trace,
                self.role_map,
                tokenizer,
                group_key=f"q:{q}",
                retokenize=True,
                require_logprobs=False,
            ):
                if smp.meta["sender"] == slipped and smp.meta["round"] == 0:
                    continue  # the slip is context for the others to correct, not a message to imitate
                if eos is not None:
                    smp = dataclasses.replace(
                        smp,
                        completion_ids=[*smp.completion_ids, eos],
                        completion_mask=[*smp.completion_mask, 1],
                    )
                out.append(smp)
        return {"society": out}

    # -- rollouts ---------------------------------------------------------------------------------

    def run_episodes(
        self, llms: Mapping[str, Any], episodes: Sequence[Episode], *, train: bool
    ) -> list[EpisodeResult]:
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
            persona_ans = {
                n: extract_final_answer((run.outputs.get(n) or [""])[-1]) for n in self.persona_names
            }
            persona_ok = {n: float(answers_match(a, ref)) for n, a in persona_ans.items()}
            vote = majority_answer(list(persona_ans.values()))
            samples = []
            if tok is not None:
                samples = samples_from_trace(
                    run.trace, self.role_map, tok, group_key=e.group, trace_id=e.index
                )
            metrics = {
                "reward": reward,
                "answered": float(agg is not None),
                "persona_accuracy": sum(persona_ok.values()) / len(persona_ok),
                "majority_accuracy": float(answers_match(vote, ref)),
            }
            metrics.update({f"accuracy/{n}": v for n, v in persona_ok.items()})
            record = {
                "question": e.task["question"],
                "answer": e.task["answer"],
                "seed": e.seed,
                "aggregated_answer": agg,
                "aggregator_text": agg_text,
                "persona_answers": persona_ans,
                "majority_answer": vote,
                "reward": reward,
            }
            results.append(
                EpisodeResult(samples, [reward] * len(samples), [e.group] * len(samples), metrics, record)
            )
        return results


class _DialogueScript:
    """The scripted model of :meth:`SocietyRecipe.sft_samples`: answers each call with the
    dialogue's message for the caller (persona by its system prompt, else the aggregator), the
    question (found in the user message) and the round (the caller's n-th call on that question)."""

    def __init__(self, dialogues: Mapping[str, SocietyDialogue], personas: Sequence[Persona]) -> None:
        self.dialogues = dialogues
        self.personas = tuple(personas)
        self.calls: Counter[tuple[str, str]] = Counter()

    def _who(self, system: str) -> str:
        # The Runtime appends each persona's description (meta["persona"]) to its system prompt.
        hits = [p.name for p in self.personas if p.describe() in system]
        if len(hits) > 1:
            raise ValueError(f"system prompt names several personas {hits}")
        return hits[0] if hits else "aggregator"

    def __call__(self, batch: list[list[Any]]) -> list[str]:
        out = []
        for messages in batch:
            system = "\n".join(str(m["content"]) for m in messages if m["role"] == "system")
            user = "\n".join(str(m["content"]) for m in messages if m["role"] == "user")
            asked = user.removeprefix("Task: ")  # the aggregator's prompt names the task first
            found = [q for q in self.dialogues if asked.startswith(q)]
            if len(found) != 1:
                raise ValueError(
                    f"scripted dialogue: the prompt matches {len(found)} questions: {user[:120]!r}"
                )
            d, who = self.dialogues[found[0]], self._who(system)
            if who == "aggregator":
                out.append(d.aggregator)
                continue
            r = self.calls[(found[0], who)]
            self.calls[(found[0], who)] += 1
            if r >= len(d.messages[who]):
                raise ValueError(f"scripted dialogue: {who} called for round {r} of {len(d.messages[who])}")
            out.append(d.messages[who][r])
        return out
