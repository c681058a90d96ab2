"""Rollouts split over Ray actors (``TrainConfig.rollout_workers > 0``).

:class:`RayRollouts` starts ``n_workers`` Ray actors; each builds its own
models exactly as the training loop does in its own process (the frozen base
from ``load_llm(model)`` and one trainable copy per recipe policy, see
:class:`societas.marl.llm.backend.Backend`). A call of :meth:`RayRollouts.run`::

    refs     = ray.put(state dict) for each policy            (once, shared by every actor)
    shards   = episodes cut into n_workers contiguous slices  (as even as possible, order kept)
    each actor: load the policy weights, recipe.run_episodes(its llms, its shard)
    results  = the shards' results concatenated               (the order of ``episodes``)

Reproducibility: each episode carries its own seed, which fixes how it
samples whichever batch it runs in, so the same seeds give the same samples
whether the episodes run in this process or over N actors — up to the float
round-off of batched padding, which does not change the sampled tokens of the
tiny model in ``tests/llm/test_distributed.py``.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, Self

import torch

from societas.marl.cluster import ACTORS_ON_A_CLUSTER_HINT, connect_ray, joins_a_cluster
from societas.marl.llm.backend import Backend, TrainConfig
from societas.marl.llm.parallel import shards as split_evenly
from societas.marl.llm.recipe import Episode, EpisodeResult, Recipe
from societas.marl.llm.trainer import GRPOConfig

log = logging.getLogger(__name__)

__all__ = ["RayRollouts"]


class RolloutWorker:
    """One rollout actor: its own models (as in the loop's process) and the recipe."""

    def __init__(
        self, recipe: Recipe, model: str, device: str, threads: int | None, grpo: GRPOConfig | None = None
    ) -> None:
        if threads:
            torch.set_num_threads(threads)
        self.recipe = recipe
        # The same GRPOConfig as the loop's trainers, so that the policies have the same
        # structure (LoRA adapters or not) and the state dicts they are sent load as they are.
        cfg = TrainConfig(model=model, device=device, threads=threads, grpo=grpo or GRPOConfig())
        self.backend = Backend(cfg, recipe)

    def run(
        self, episodes: Sequence[Episode], train: bool, weights: Mapping[str, Any] | None
    ) -> list[EpisodeResult]:
        if weights:
            import ray

            names = list(weights)
            for name, sd in zip(names, ray.get([weights[n] for n in names])):
                self.backend.load_state_dict(name, sd)
        return self.recipe.run_episodes(self.backend.llms(), episodes, train=train)


class RayRollouts:
    """Run a recipe's episodes on ``n_workers`` Ray actors, each with its own copy of the models.

    ``grpo`` is the loop's :class:`~societas.marl.llm.trainer.GRPOConfig`: with
    ``lora`` set, the actors' policies carry the same adapters, so the
    weights :meth:`run` is sent load into them.
    ``num_cpus`` / ``num_gpus`` are each actor's Ray resources. Ray is joined
    at ``address`` (or ``RAY_ADDRESS``: a cluster's head, whose nodes have this
    package and the model) or started here, only if it is not running already
    (:func:`societas.marl.cluster.connect_ray`), and :meth:`close` shuts it
    down (or disconnects) only if this object started it.
    """

    def __init__(
        self,
        recipe: Recipe,
        model: str,
        n_workers: int,
        *,
        device: str = "auto",
        threads: int | None = None,
        grpo: GRPOConfig | None = None,
        address: str | None = None,
        num_cpus: float = 1,
        num_gpus: float = 0,
    ) -> None:
        if n_workers < 1:
            raise ValueError(f"n_workers must be at least 1, got {n_workers}")
        self._actors: list[Any] = []
        joining = joins_a_cluster(address)
        # A local instance gets enough logical CPUs that every actor can be placed.
        ray, self._started_ray = connect_ray(
            "rollout_workers > 0",
            address=address,
            local_cpus=max(os.cpu_count() or 1, math.ceil(n_workers * num_cpus)),
        )
        self._ray = ray
        free = ray.available_resources().get("CPU", 0.0)
        if free < n_workers * num_cpus:
            log.warning(
                "Ray has %.1f free CPUs for %d rollout workers of %s CPUs each: they wait until it has "
                "more (pass num_cpus= lower, or stop other actors)",
                free,
                n_workers,
                num_cpus,
            )
        actor = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus)(RolloutWorker)
        self._actors = [actor.remote(recipe, model, device, threads, grpo) for _ in range(n_workers)]
        # Surface model-loading errors here rather than at the first run.
        try:
            self._get([a.__ray_ready__.remote() for a in self._actors], ["failed to start"] * n_workers)
        except RuntimeError as e:
            joined = joining and self._started_ray
            self.close()
            if joined:
                raise RuntimeError(
                    f"{e}\nOn the Ray cluster this process joined: {ACTORS_ON_A_CLUSTER_HINT}"
                ) from e
            raise
        except BaseException:
            self.close()
            raise

    @property
    def n_workers(self) -> int:
        return len(self._actors)

    def _get(self, refs: Sequence[Any], what: Sequence[str]) -> list[Any]:
        out = []
        for i, (ref, w) in enumerate(zip(refs, what)):
            try:
                out.append(self._ray.get(ref))
            except self._ray.exceptions.RayError as e:
                raise RuntimeError(f"rollout worker {i} of {len(refs)} {w}: {e}") from e
        return out

    def run(
        self,
        episodes: Sequence[Episode],
        *,
        train: bool,
        weights: Mapping[str, Mapping[str, torch.Tensor]] | None = None,
    ) -> list[EpisodeResult]:
        """Run ``episodes`` over the actors (after loading ``weights``: ``{policy: state_dict}``)."""
        if not self._actors:
            raise RuntimeError("RayRollouts is closed")
        episodes = list(episodes)
        refs = {name: self._ray.put(sd) for name, sd in weights.items()} if weights else None
        shards = split_evenly(
            len(episodes), len(self._actors)
        )  # an empty shard (fewer episodes than actors) runs nothing
        calls = [
            a.run.remote(episodes[s], train, refs) if s.stop > s.start else self._ray.put([])
            for a, s in zip(self._actors, shards)
        ]
        what = [f"raised on episodes [{s.start}:{s.stop}]" for s in shards]
        results = [r for rs in self._get(calls, what) for r in rs]
        if len(results) != len(episodes):
            raise RuntimeError(f"the workers returned {len(results)} results for {len(episodes)} episodes")
        return results

    def close(self) -> None:
        """Kill the actors; shut Ray down if this object started it (safe to call twice)."""
        for a in self._actors:
            try:
                self._ray.kill(a)
            except Exception as e:
                log.debug("could not kill rollout actor: %s", e)
        self._actors = []
        if self._started_ray and self._ray.is_initialized():
            self._ray.shutdown()
        self._started_ray = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
