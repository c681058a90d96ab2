"""``selfplay``: Dr. Zero's proposer and solver, trained against each other (arXiv 2601.07055).

One episode is one round of :func:`societas.topology.patterns.selfplay.proposer_solver`
on a proposer instruction (:func:`arithmetic_word_problem_task`: write an
arithmetic word problem with a whole-number answer)::

    proposer -> question (answer hidden) -> solver_1 .. solver_5 -> grade

* the **proposer** earns ``(5 - k)/4 if 0 < k < 5 else 0`` plus ``0.5 x`` its
  format score (:func:`proposer_reward`, gated on format as in the reference
  code), where ``k`` of the ``n = 5`` solver answers match its answer. It
  trains with **HRPO**: one sample per instruction, advantages standardised
  within the group of proposals with the same hop count (the number of
  arithmetic operations the instruction asks for, :data:`OPERATION_HOPS`);
* the **solver** trains with **GRPO** on the generated data: the 5 answers to
  one question form a group, each rewarded 1 when it matches the proposer's
  answer (the label of the generated pair, as in Dr. Zero), only for
  well-formed pairs; when :func:`verify_arithmetic` can check the pair and
  finds the proposer's answer wrong, the pair is dropped.

The two alternate: ``proposer_steps`` GRPO steps of the proposer, then
``solver_steps`` of the solver, and so on (both are separate copies of one
base model unless ``shared=True``). Held-out evaluation runs fixed
instructions with fixed seeds and reports the proposer reward (``reward``),
its parts, the solvers' agreement with the proposer, and the solver's
accuracy on fixed arithmetic word problems whose answers are computed
(:func:`heldout_problems`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field, model_validator

from societas.agents.llm.base import SamplingParams
from societas.agents.parsers import answers_match, extract_final_answer
from societas.marl.llm.advantages import HopGroup
from societas.marl.llm.loop import Episode, EpisodeResult, Recipe, episode_seed, policy_tokenizer
from societas.marl.llm.rollouts import RoleMap, samples_from_trace
from societas.marl.llm.settings import RecipeConfig, recipe_settings
from societas.topology.errors import FieldProblem
from societas.topology.patterns.arithmetic import arithmetic_task_hops, arithmetic_word_problem_task
from societas.topology.patterns.selfplay import SOLVER_TEMPLATE, ProposerSolverOutcome, proposer_solver
from societas.topology.runtime import Runtime

__all__ = ["SelfPlayConfig", "SelfPlayRecipe", "heldout_problems"]

_NAMES = ("Ava", "Ben", "Chloe", "Dev", "Emma", "Finn", "Grace", "Hugo")
_ITEMS = ("apples", "books", "marbles", "pencils", "stickers", "cookies", "coins", "shells")


def heldout_problems(n: int, seed: int = 12345) -> list[tuple[str, int]]:
    """``n`` arithmetic word problems with their computed answers (one or two operations)."""
    rng = random.Random(seed)
    out: list[tuple[str, int]] = []
    for _ in range(n):
        name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
        kind = rng.randrange(4)
        a, b, c = rng.randint(2, 9), rng.randint(2, 9), rng.randint(1, 9)
        if kind == 0:
            q, ans = (
                f"{name} has {a * 3} {item} and buys {b} more. How many {item} does {name} have now?",
                a * 3 + b,
            )
        elif kind == 1:
            q, ans = (
                f"{name} has {a} boxes with {b} {item} in each box. How many {item} are there in total?",
                a * b,
            )
        elif kind == 2:
            q = f"{name} has {a} bags with {b} {item} each and gives away {c}. How many {item} are left?"
            ans = a * b - c
        else:
            q = f"{name} shares {a * b} {item} equally among {a} friends. How many {item} does each friend get?"
            ans = b
        out.append((q, ans))
    return out


class SelfPlayConfig(RecipeConfig):
    """Options of :class:`SelfPlayRecipe` (the ``recipe:`` section of ``examples/recipes/selfplay.yaml``)."""

    proposals_per_step: int = Field(
        8,
        ge=2,
        description="proposer instructions per step, one sample each (HRPO standardises within hop groups)",
    )
    n_solvers: int = Field(5, ge=1, description="solver answers per question (the paper's n = 5)")
    proposer_tokens: int = Field(64, ge=1, description="new tokens of the proposer's question and answer")
    solver_tokens: int = Field(96, ge=1, description="new tokens of each solver answer")
    temperature: float = Field(1.0, ge=0.0, description="sampling temperature of proposer and solvers")
    proposer_steps: int = Field(1, ge=0, description="consecutive proposer steps in each alternation period")
    solver_steps: int = Field(1, ge=0, description="consecutive solver steps in each alternation period")
    eval_proposals: int = Field(12, ge=1, description="fixed held-out proposer instructions")
    eval_problems: int = Field(
        16, ge=0, description="fixed held-out word problems with computed answers (solver accuracy)"
    )
    shared: bool = Field(False, description="one policy plays proposer and solver instead of two copies")

    @model_validator(mode="after")
    def _someone_trains(self) -> SelfPlayConfig:
        if self.proposer_steps + self.solver_steps == 0:
            raise FieldProblem(
                ("solver_steps",), "proposer_steps and solver_steps are both 0: nothing trains"
            )
        return self


class SelfPlayRecipe(Recipe):
    """Proposer/solver self-play on arithmetic word problems (see the module docstring).

    Built from a :class:`SelfPlayConfig` or its fields as keyword arguments;
    bad values raise :class:`~societas.marl.llm.settings.SettingsError` naming the field.
    """

    name = "selfplay"

    def __init__(self, settings: SelfPlayConfig | Mapping[str, Any] | None = None, /, **options: Any) -> None:
        self.settings = recipe_settings(SelfPlayConfig, settings, options)
        cfg = self.settings
        self.role_map = RoleMap({"proposer": self._pol("proposer"), "solver": self._pol("solver")})
        self.graph = proposer_solver(
            cfg.n_solvers,
            proposer_llm="proposer",
            solver_llm="solver",
            solver_seed=None,
            proposer_params={"temperature": cfg.temperature, "max_new_tokens": cfg.proposer_tokens},
            solver_params={"temperature": cfg.temperature, "max_new_tokens": cfg.solver_tokens},
        )

    def _pol(self, role: str) -> str:
        return "policy" if self.settings.shared else role

    @property
    def policies(self) -> tuple[str, ...]:
        return ("policy",) if self.settings.shared else ("proposer", "solver")

    def config(self) -> dict[str, Any]:
        return self.settings.model_dump(mode="json")

    def trained_policies(self, step: int) -> tuple[str, ...]:
        if self.settings.shared:
            return ("policy",)
        period = self.settings.proposer_steps + self.settings.solver_steps
        return ("proposer",) if step % period < self.settings.proposer_steps else ("solver",)

    # -- episodes ---------------------------------------------------------------------------------

    def _episodes(self, n: int, seed: int, kind: str) -> list[Episode]:
        rng = random.Random(seed)
        eps = []
        for i in range(n):
            task = arithmetic_word_problem_task(rng)
            eps.append(
                Episode(
                    {"kind": kind, "instruction": task},
                    episode_seed(seed, kind, i),
                    f"hops={arithmetic_task_hops(task)}",
                    i,
                )
            )
        return eps

    def train_episodes(self, step: int, seed: int) -> list[Episode]:
        return self._episodes(self.settings.proposals_per_step, seed, "selfplay")

    def eval_episodes(self, seed: int) -> list[Episode]:
        # Fixed across seeds: one held-out set.
        eps = self._episodes(self.settings.eval_proposals, 10_007, "selfplay")
        for j, (q, ans) in enumerate(heldout_problems(self.settings.eval_problems)):
            eps.append(
                Episode(
                    {"kind": "problem", "question": q, "answer": ans},
                    episode_seed(10_007, "problem", j),
                    f"problem={j}",
                    len(eps),
                )
            )
        return eps

    # -- rollouts ---------------------------------------------------------------------------------

    def run_episodes(
        self, llms: Mapping[str, Any], episodes: Sequence[Episode], *, train: bool
    ) -> list[EpisodeResult]:
        unknown = sorted({str(e.task.get("kind")) for e in episodes} - {"selfplay", "problem"})
        if unknown:
            raise ValueError(f"selfplay episodes are of kind 'selfplay' or 'problem', got {unknown}")
        out: list[EpisodeResult | None] = [None] * len(episodes)
        play = [(i, e) for i, e in enumerate(episodes) if e.task["kind"] == "selfplay"]
        probs = [(i, e) for i, e in enumerate(episodes) if e.task["kind"] == "problem"]
        if play:
            for (i, _), res in zip(play, self._play(llms, [e for _, e in play], train)):
                out[i] = res
        if probs:
            for (i, _), res in zip(probs, self._solve(llms, [e for _, e in probs])):
                out[i] = res
        return [r for r in out if r is not None]

    def _play(self, llms: Mapping[str, Any], episodes: Sequence[Episode], train: bool) -> list[EpisodeResult]:
        prop, solv = llms[self._pol("proposer")], llms[self._pol("solver")]
        recorders = [prop] if prop is solv else [prop, solv]

        def on_event(ev: Any) -> None:
            for r in recorders:
                r.on_event(ev)

        rt = Runtime(self.graph, llms={"proposer": prop, "solver": solv}, on_event=on_event)
        tok = policy_tokenizer(prop, self.name) if train else None  # evaluation needs no samples
        runs = rt.run_many([e.task["instruction"] for e in episodes], seeds=[e.seed for e in episodes])
        results = []
        for e, run in zip(episodes, runs):
            o = ProposerSolverOutcome.from_result(run)
            samples = (
                samples_from_trace(run.trace, self.role_map, tok, trace_id=e.index) if tok is not None else []
            )
            usable = o.format > 0 and o.verified is not False
            rewards: list[Any] = []
            groups: list[Any] = []
            kept = []
            for s in samples:
                if s.meta["role"] == "proposer":
                    kept.append(s)
                    rewards.append(o.reward)
                    groups.append(HopGroup(e.group))  # HRPO: standardise within the hop group
                elif usable:
                    idx = int(s.meta["sender"].rsplit("_", 1)[1]) - 1
                    kept.append(s)
                    rewards.append(1.0 if o.correct[idx] else 0.0)
                    groups.append(f"q{e.index}:{e.seed}")  # GRPO over the n answers to one question
            metrics = {
                "reward": o.reward,
                "format": o.format,
                "difficulty": o.difficulty,
                "solver_agreement": o.k / o.n,
                "well_formed": float(o.format > 0),
            }
            results.append(
                EpisodeResult(
                    kept,
                    rewards,
                    groups,
                    metrics,
                    {
                        "instruction_hops": e.group,
                        "question": o.question,
                        "answer": o.answer,
                        "k": o.k,
                        "reward": o.reward,
                        "format": o.format,
                        "verified": o.verified,
                        "proposer_text": run.outputs.get("proposer", [""])[-1],
                    },
                )
            )
        return results

    def _solve(self, llms: Mapping[str, Any], episodes: Sequence[Episode]) -> list[EpisodeResult]:
        solver = llms[self._pol("solver")]
        prompts = [
            [{"role": "user", "content": SOLVER_TEMPLATE.format(inputs="\n\n" + e.task["question"])}]
            for e in episodes
        ]
        params = [
            SamplingParams(temperature=0.0, max_new_tokens=self.settings.solver_tokens) for _ in episodes
        ]
        outs = solver.generate(prompts, params)
        results = []
        for e, comps in zip(episodes, outs):
            ans = extract_final_answer(comps[0].text)
            ok = ans is not None and answers_match(ans, str(e.task["answer"]))
            results.append(
                EpisodeResult(
                    metrics={"heldout_solver_accuracy": float(ok)},
                    record={"question": e.task["question"], "answer": e.task["answer"], "solver_answer": ans},
                )
            )
        return results
