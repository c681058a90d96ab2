"""societas.marl.llm.distributed: rollouts split over Ray actors give the same samples as
in this process (per-episode seeds), apply the weights they are sent, surface a
worker's error, and explain a missing ray; one training step end to end."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from societas.marl.llm.backend import Backend, TrainConfig
from societas.marl.llm.recipe import Episode, EpisodeResult, Recipe, episode_seed
from societas.marl.llm.rollouts import RoleMap, samples_from_trace

PARAMS = {"temperature": 1.0, "max_new_tokens": 5, "min_new_tokens": 2}
PROMPTS = ["say hi", "name a fruit", "count to three"]


class CountA(Recipe):
    """One policy answers a prompt; the reward is the number of 'a' in its answer."""

    name = "count-a"

    def __init__(self, prompts=PROMPTS, group_size: int = 2) -> None:
        self.prompts, self.group_size = list(prompts), group_size

    @property
    def policies(self):
        return ("p",)

    def _episodes(self, seed: int, prompts) -> list[Episode]:
        return [
            Episode(task=t, seed=episode_seed(seed, t, g), group=t, index=i * self.group_size + g)
            for i, t in enumerate(prompts)
            for g in range(self.group_size)
        ]

    def train_episodes(self, step: int, seed: int) -> list[Episode]:
        return self._episodes(seed, self.prompts)

    def eval_episodes(self, seed: int) -> list[Episode]:
        return self._episodes(seed + 1, self.prompts[:2])

    def run_episodes(self, llms, episodes, *, train: bool) -> list[EpisodeResult]:
        from societas.topology import Runtime
        from societas.topology.graph import Graph

        if any(e.task == "boom" for e in episodes):
            raise ValueError("boom episode")
        graph = Graph.build(
            "one", [{"id": "a", "role": "answerer", "prompt": "Answer.", "params": PARAMS}], []
        )
        rec = llms["p"]
        runs = Runtime(graph, llm=rec, on_event=rec.on_event).run_many(
            [e.task for e in episodes], seeds=[e.seed for e in episodes]
        )
        out = []
        for e, r in zip(episodes, runs):
            samples = samples_from_trace(r.trace, RoleMap({"answerer": "p"}), rec.tokenizer, trace_id=e.index)
            text = r.output or ""
            reward = float(text.count("a"))
            out.append(
                EpisodeResult(
                    samples,
                    [reward] * len(samples),
                    [e.group] * len(samples),
                    metrics={"reward": reward},
                    record={"task": e.task, "text": text},
                )
            )
        return out


def _view(results):
    """What must match: every sample's completion ids (and prompt ids) and reward, in order."""
    return [[(s.prompt_ids, s.completion_ids, rw) for s, rw in zip(r.samples, r.rewards)] for r in results]


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        # "local": a new instance, not the cluster another test file may have started on
        # this machine with 'ray start' (which a bare ray.init() would try to join).
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture(scope="module")
def pool(ray_session, tiny_dir):
    from societas.marl.llm.distributed import RayRollouts

    with RayRollouts(CountA(), tiny_dir, 2, threads=1) as p:
        yield p


@pytest.mark.slow
def test_ray_matches_local_and_applies_weights(pool, tiny_dir):
    recipe = CountA()
    episodes = recipe.train_episodes(0, episode_seed(0, "train", 0))
    backend = Backend(TrainConfig(model=tiny_dir), recipe)
    local = recipe.run_episodes(backend.llms(), episodes, train=True)
    assert all(len(r.samples) == 1 for r in local)
    assert len({tuple(s.completion_ids) for r in local for s in r.samples}) > 1  # seeds differ per episode

    remote = pool.run(episodes, train=True)
    assert _view(remote) == _view(local)
    assert [r.record for r in remote] == [r.record for r in local]
    for a, b in zip(remote, local):  # behaviour log-probs agree up to round-off
        assert a.samples[0].old_logprobs == pytest.approx(b.samples[0].old_logprobs, abs=1e-4)

    # An uneven split (5 episodes over 2 workers) keeps the order too.
    assert _view(pool.run(episodes[:5], train=False)) == _view(local[:5])
    assert _view(pool.run(episodes[:1], train=False)) == _view(local[:1])  # one worker idle
    assert pool.run([], train=False) == []

    # Perturb the local policy; the workers sample from it only once sent the weights.
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for prm in backend.trainers["p"].model.parameters():
            prm.add_(torch.randn(prm.shape, generator=g) * 0.2)
    local2 = recipe.run_episodes(backend.llms(), episodes, train=True)
    assert _view(local2) != _view(local)
    remote2 = pool.run(episodes, train=True, weights=backend.state_dicts())
    assert _view(remote2) == _view(local2)


@pytest.mark.slow
def test_worker_error_surfaces(pool):
    episodes = [Episode("say hi", 1, "g", 0), Episode("say hi", 2, "g", 1), Episode("boom", 3, "g", 2)]
    with pytest.raises(
        RuntimeError, match=r"(?s)rollout worker 1 of 2 raised on episodes \[2:3\].*boom episode"
    ):
        pool.run(episodes, train=False)
    assert len(pool.run(episodes[:2], train=False)) == 2  # the pool still works


def test_missing_ray_explains(monkeypatch):
    from societas.marl.llm.distributed import RayRollouts

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(
        ImportError,
        match=r"rollout_workers > 0 needs Ray, which is not installed; "
        r"install the 'ray' extra: pip install 'societas\[ray\]'",
    ):
        RayRollouts(CountA(), "embedded", 2)


@pytest.mark.slow
def test_train_with_rollout_workers(pool, ray_session, tiny_dir, tmp_path):
    pool.close()  # free its CPUs for the loop's own workers (Ray was started with 2)
    from societas.marl.llm.loop import train
    from societas.marl.llm.trainer import GRPOConfig

    cfg = TrainConfig(
        model=tiny_dir, steps=1, eval_every=1, rollout_workers=2, threads=1, grpo=GRPOConfig(lr=1e-3)
    )
    res = train(CountA(), cfg, out=tmp_path / "run")
    rows = [json.loads(ln) for ln in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["eval", "train", "eval"]
    assert "reward" in rows[1] and res.last_eval["step"] == 1
    assert ray_session.is_initialized()  # the loop's pool did not shut down a Ray it did not start


@pytest.mark.slow
def test_lora_policies_reach_the_workers_with_their_adapters(ray_session, tiny_dir):
    """With LoRA, the loop's state dicts hold adapter keys; a rollout worker built
    from the same GRPOConfig loads them and samples as the loop's own policy does."""
    pytest.importorskip("peft")
    from societas.marl.llm.distributed import RolloutWorker
    from societas.marl.llm.trainer import GRPOConfig

    grpo = GRPOConfig(
        lora={"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj", "up_proj", "down_proj"]}
    )
    recipe = CountA()
    backend = Backend(TrainConfig(model=tiny_dir, grpo=grpo), recipe)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # lora_B starts at zero: move the adapters so that they matter
        for n, prm in backend.trainers["p"].model.named_parameters():
            if "lora_" in n:
                prm.add_(torch.randn(prm.shape, generator=g) * 2.0)
    backend.sync("p")  # the policy samples from merged weights, recomputed by sync
    weights = backend.state_dicts()
    assert weights["p"] and all("lora_" in k for k in weights["p"])  # the adapters only travel
    episodes = recipe.train_episodes(0, episode_seed(0, "train", 0))
    local = recipe.run_episodes(backend.llms(), episodes, train=True)

    worker = RolloutWorker(recipe, tiny_dir, "auto", 1, grpo)  # what each Ray actor builds
    before = worker.run(episodes, True, None)
    assert _view(before) != _view(local)  # the adapters change what is sampled
    refs = {name: ray_session.put(sd) for name, sd in weights.items()}
    assert _view(worker.run(episodes, True, refs)) == _view(local)
