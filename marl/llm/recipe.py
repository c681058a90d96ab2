"""The recipe interface of the training loop: episodes, their results, and the recipe that runs them.

A :class:`Recipe` says which policies it trains, which :class:`Episode` s each
step runs and how one is run and rewarded; the loop
(:func:`societas.marl.llm.loop.train`) and the Ray rollout workers
(:mod:`societas.marl.llm.distributed`) both drive recipes through it.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from societas.marl.llm.rollouts import TokenSample

__all__ = ["FROZEN", "Episode", "EpisodeResult", "Recipe", "episode_seed"]

FROZEN = "frozen"
"""Key of the frozen base model in the ``llms`` mapping a recipe receives."""


def episode_seed(seed: int, *parts: Any) -> int:
    """A 63-bit seed derived from ``seed`` and ``parts`` (stable across processes)."""
    h = hashlib.blake2b("\x1f".join(map(str, (seed, *parts))).encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little") >> 1


@dataclass
class Episode:
    """One unit of rollout work: a recipe-specific ``task`` with its own ``seed``.

    ``group`` is the GRPO group key of the samples it yields (usually the
    prompt: the G episodes of one prompt share it).
    """

    task: Any
    seed: int
    group: str
    index: int = 0


@dataclass
class EpisodeResult:
    """What one episode produced: trainable samples with one reward row and group key each."""

    samples: list[TokenSample] = field(default_factory=list)
    rewards: list[Any] = field(default_factory=list)  # float or list[float] per sample
    groups: list[Hashable] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)  # episode scalars, averaged in the logs
    record: dict[str, Any] = field(default_factory=dict)  # JSON-able account of the episode

    def __post_init__(self) -> None:
        if not (len(self.samples) == len(self.rewards) == len(self.groups)):
            raise ValueError(
                f"an episode result needs one reward and one group per sample: {len(self.samples)} "
                f"samples, {len(self.rewards)} rewards, {len(self.groups)} groups"
            )


class Recipe(ABC):
    """A training recipe: which policies it trains, its episodes, and how one is run and rewarded.

    ``run_episodes`` receives ``llms``: one LLM per name in :attr:`policies`
    (recording token ids and log-probs) and :data:`FROZEN`, the frozen base
    model for roles that do not train. It must not depend on how episodes
    are batched beyond what each episode's seed fixes.
    """

    name: ClassVar[str] = "recipe"

    @property
    @abstractmethod
    def policies(self) -> tuple[str, ...]:
        """Names of the trainable policies."""

    @abstractmethod
    def train_episodes(self, step: int, seed: int) -> list[Episode]:
        """The episodes of training step ``step``."""

    @abstractmethod
    def eval_episodes(self, seed: int) -> list[Episode]:
        """The fixed held-out episodes (the same at every evaluation)."""

    @abstractmethod
    def run_episodes(
        self, llms: Mapping[str, Any], episodes: Sequence[Episode], *, train: bool
    ) -> list[EpisodeResult]:
        """Run ``episodes`` (one result each, in order)."""

    def trained_policies(self, step: int) -> tuple[str, ...]:
        """The policies updated at ``step`` (all of them; override to alternate)."""
        return self.policies

    def sft_samples(self, step: int, seed: int, tokenizer: Any) -> dict[str, list[TokenSample]]:
        """Supervised warm-start samples for ``step`` of the SFT stage, by policy (none by default)."""
        return {}

    def config(self) -> dict[str, Any]:
        """The recipe's settings, written into ``config.yaml``."""
        return {}
