"""societas.marl.llm.loop: the recipe training loop on a tiny random Llama — run directory,
held-out evaluation, skipped degenerate updates, resume after a kill, SFT warm
start; plus Runtime per-task seeds (what split rollouts rely on)."""

from __future__ import annotations

import json
import math

import pytest
import torch
import yaml

from societas.agents import load_llm
from societas.marl.llm import loop
from societas.marl.llm.loop import (
    FROZEN,
    Episode,
    EpisodeResult,
    Recipe,
    TrainConfig,
    episode_seed,
    mean_curves,
    sample_from_completion,
    train,
)
from societas.marl.llm.rollouts import RoleMap, TokenSample, samples_from_trace
from societas.marl.llm.settings import SettingsError
from societas.marl.llm.trainer import GRPOConfig, PolicyTrainer
from societas.topology import Runtime
from societas.topology.graph import Graph

torch.set_num_threads(1)


class CountA(Recipe):
    """Reward = number of 'a' in a one-node answer; module-level so it pickles."""

    name = "count_a"

    def __init__(self, constant: bool = False, n_prompts: int = 2, group: int = 3) -> None:
        self.constant = constant
        self.n_prompts = n_prompts
        self.group = group
        self.graph = Graph.build(
            "one",
            [
                {
                    "id": "a",
                    "role": "answerer",
                    "prompt": "Answer.",
                    "params": {"temperature": 1.0, "max_new_tokens": 6, "min_new_tokens": 2},
                }
            ],
            [],
        )

    @property
    def policies(self):
        return ("p",)

    def _eps(self, seed, kind):
        return [
            Episode(f"{kind} prompt {i}", episode_seed(seed, kind, i, g), f"{kind}{i}", i * self.group + g)
            for i in range(self.n_prompts)
            for g in range(self.group)
        ]

    def train_episodes(self, step, seed):
        return self._eps(seed, "train")

    def eval_episodes(self, seed):
        return self._eps(7, "eval")

    def run_episodes(self, llms, episodes, *, train):
        rec = llms["p"]
        runs = Runtime(self.graph, llm=rec, on_event=rec.on_event).run_many(
            [e.task for e in episodes], seeds=[e.seed for e in episodes]
        )
        out = []
        for e, r in zip(episodes, runs):
            s = samples_from_trace(r.trace, RoleMap({"answerer": "p"}), rec.tokenizer, trace_id=e.index)
            rew = 1.0 if self.constant else float(r.output.count("a"))
            out.append(
                EpisodeResult(s, [rew] * len(s), [e.group] * len(s), {"reward": rew}, {"text": r.output})
            )
        return out

    def sft_samples(self, step, seed, tokenizer):
        from societas.agents.llm.base import encode_with_tokenizer

        ids = tokenizer.encode("aaaa", add_special_tokens=False)
        p = encode_with_tokenizer(tokenizer, ["train prompt 0"])[0]
        return {"p": [TokenSample("p", p, ids, [1] * len(ids), None, "g")]}


def _rows(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_train_writes_the_run_directory(tiny_dir, tmp_path):
    cfg = TrainConfig(model=tiny_dir, steps=2, eval_every=1, grpo={"lr": 1e-3})
    res = train(CountA(), cfg, tmp_path / "run")
    out = tmp_path / "run"
    for f in (
        "config.yaml",
        "metrics.jsonl",
        "rollouts.jsonl",
        "reward.png",
        "summary.md",
        "checkpoint/LATEST",
    ):
        assert (out / f).exists(), f
    rows = _rows(out / "metrics.jsonl")
    assert [(r["kind"], r["step"]) for r in rows] == [
        ("eval", 0),
        ("train", 1),
        ("eval", 1),
        ("train", 2),
        ("eval", 2),
    ]
    tr = [r for r in rows if r["kind"] == "train"]
    assert all(r["p/step"] == i + 1 for i, r in enumerate(tr))  # one optimizer step per GRPO step
    assert res.first_eval["reward"] == rows[0]["reward"] and res.last_eval["step"] == 2
    # The rollouts log holds one record per episode, train and eval.
    recs = _rows(out / "rollouts.jsonl")
    assert (
        sum(r["kind"] == "train" for r in recs) == 2 * 6 and sum(r["kind"] == "eval" for r in recs) == 3 * 6
    )
    with pytest.raises(FileExistsError, match="not empty"):
        train(CountA(), cfg, out)


@pytest.mark.parametrize("grpo", [{"kl_beta": 0.1}, {"lora": {"r": 2, "target_modules": "all-linear"}}])
def test_training_leaves_the_shared_model_as_its_other_users_had_it(tiny_dir, tmp_path, grpo):
    """The frozen role and the KL reference read the process's shared instance (device 'auto'):
    after a run it still trains, as the README's PolicyTrainer on load_llm(...).model does."""
    shared = load_llm(tiny_dir)
    weights = {k: v.clone() for k, v in shared.model.state_dict().items()}
    assert all(p.requires_grad for p in shared.model.parameters())
    train(CountA(), TrainConfig(model=tiny_dir, steps=1, grpo={"lr": 1e-3, **grpo}), tmp_path / "run")
    assert load_llm(tiny_dir) is shared
    assert all(p.requires_grad for p in shared.model.parameters())  # frozen, it could not be trained
    state = shared.model.state_dict()
    assert state.keys() == weights.keys() and all(torch.equal(state[k], v) for k, v in weights.items())
    trainer = PolicyTrainer(shared.model, shared.tokenizer, GRPOConfig(kl_beta=0.04))
    assert trainer.params and all(p.requires_grad for p in shared.model.parameters())
    assert not any(p.requires_grad for p in trainer.ref_model.parameters())  # its own frozen copy


def test_the_reward_plot_is_drawn_at_evaluations_and_holds_every_step(tiny_dir, tmp_path, monkeypatch):
    drawn = []
    real = loop.plot_rewards

    def counting(history, path, title):
        drawn.append([(h["kind"], h["step"]) for h in history])
        real(history, path, title)

    monkeypatch.setattr(loop, "plot_rewards", counting)
    out = tmp_path / "run"
    train(CountA(), TrainConfig(model=tiny_dir, steps=6, eval_every=3, grpo={"lr": 1e-3}), out)
    # Evaluations at steps 0, 3 and 6, one drawing each; the end of the run adds nothing new to draw.
    assert len(drawn) == 3
    assert [rows[-1] for rows in drawn] == [("eval", 0), ("eval", 3), ("eval", 6)]
    assert [st for kind, st in drawn[-1] if kind == "train"] == [1, 2, 3, 4, 5, 6]
    rows = _rows(out / "metrics.jsonl")
    assert [r["step"] for r in rows if r["kind"] == "train"] == [1, 2, 3, 4, 5, 6]  # every step logged
    assert (out / "reward.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.glob(".reward.png.*"))  # written through a temporary file, then renamed


class StopsAtStep(CountA):
    """Interrupted (as by Ctrl-C) when asked for the episodes of GRPO step ``stop``."""

    def __init__(self, stop: int) -> None:
        super().__init__()
        self.stop = stop

    def train_episodes(self, step, seed):
        if step == self.stop:
            raise KeyboardInterrupt(f"stopped at step {step}")
        return super().train_episodes(step, seed)


def test_a_stopped_run_still_draws_every_step_it_logged(tiny_dir, tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(loop, "plot_rewards", lambda history, path, title: drawn.append(list(history)))
    with pytest.raises(KeyboardInterrupt, match="^stopped at step 2$"):
        train(StopsAtStep(2), TrainConfig(model=tiny_dir, steps=5, eval_every=4), tmp_path / "run")
    # The evaluation at step 0, then the drawing on the way out with the two steps done since.
    assert [[(h["kind"], h["step"]) for h in rows] for rows in drawn] == [
        [("eval", 0)],
        [("eval", 0), ("train", 1), ("train", 2)],
    ]


def test_bad_loop_settings_name_the_field(tmp_path):
    with pytest.raises(
        SettingsError, match=r"^train\.eval_every: Input should be greater than or equal to 1$"
    ):
        train(CountA(), {"eval_every": 0}, tmp_path / "a")
    with pytest.raises(
        SettingsError, match=r"^train\.grpo\.advantage: Input should be 'grpo', 'gdpo' or 'dr_grpo'"
    ):
        train(CountA(), {"grpo": {"advantage": "ppo"}}, tmp_path / "b")
    with pytest.raises(SettingsError, match=r"^train\.device: String should match pattern"):
        train(CountA(), {"device": "gpu"}, tmp_path / "c")
    with pytest.raises(SettingsError, match=r"^train\.serve: String should match pattern"):
        train(CountA(), {"serve": "hf:model"}, tmp_path / "d")
    assert not (tmp_path / "a").exists()  # refused before the run directory is made


def test_equal_rewards_skip_the_update(tiny_dir, tmp_path):
    res = train(CountA(constant=True), TrainConfig(model=tiny_dir, steps=1, eval_every=1), tmp_path / "r")
    row = [h for h in res.history if h["kind"] == "train"][0]
    assert "all advantages are zero" in row["p/skipped"]


def test_resume_continues_and_matches_an_uninterrupted_run(tiny_dir, tmp_path):
    cfg = {"model": tiny_dir, "eval_every": 1, "checkpoint_every": 1, "grpo": {"lr": 1e-3}}
    full = train(CountA(), TrainConfig(steps=2, **cfg), tmp_path / "full")
    part = tmp_path / "part"
    train(CountA(), TrainConfig(steps=1, **cfg), part)
    # A run killed after step 1 left lines of an unfinished step 2: resume drops and redoes them.
    with open(part / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"kind": "train", "step": 2, "reward": -99.0}) + "\n")
    resumed = train(CountA(), TrainConfig(steps=2, **cfg), part, resume=True)
    rows = _rows(part / "metrics.jsonl")
    assert [(r["kind"], r["step"]) for r in rows] == [(r["kind"], r["step"]) for r in full.history]
    assert all(r.get("reward") != -99.0 for r in rows)
    for a, b in zip(full.history, resumed.history):
        assert a.get("reward") == pytest.approx(b.get("reward"), abs=1e-6), (a, b)


def test_a_full_disk_stops_the_run_clearly_and_loses_nothing_saved(tiny_dir, tmp_path, monkeypatch):
    import shutil

    from societas.marl.llm import CheckpointError
    from societas.marl.llm import trainer as trainer_mod

    real = shutil.disk_usage
    cfg = TrainConfig(model=tiny_dir, steps=2, eval_every=1, checkpoint_every=1, grpo={"lr": 1e-3})
    # No room for even one checkpoint: refused at the start, before any rollout.
    monkeypatch.setattr(trainer_mod.shutil, "disk_usage", lambda p: real(p)._replace(free=1 << 20))
    with pytest.raises(CheckpointError, match=r"the checkpoint at step 2 \(policies 'p'\) needs about"):
        train(CountA(), cfg, tmp_path / "none")
    assert not (tmp_path / "none" / "metrics.jsonl").exists()
    # The disk fills after the first checkpoint: the second save fails, the first stays loadable.
    run = tmp_path / "run"
    monkeypatch.setattr(
        trainer_mod.shutil,
        "disk_usage",
        lambda p: real(p)._replace(free=1 << 20) if (run / "checkpoint" / "LATEST").exists() else real(p),
    )
    with pytest.raises(CheckpointError, match="at step 2"):
        train(CountA(), cfg, run)
    assert json.loads(next((run / "checkpoint").glob("step-*/loop.json")).read_text())["step"] == 1
    assert [(r["kind"], r["step"]) for r in _rows(run / "metrics.jsonl")][-1] == ("eval", 2)
    assert not list((run / "checkpoint").glob(".tmp-*"))
    monkeypatch.setattr(trainer_mod.shutil, "disk_usage", real)
    res = train(CountA(), cfg, run, resume=True)
    assert [(r["kind"], r["step"]) for r in res.history] == [
        ("eval", 0),
        ("train", 1),
        ("eval", 1),
        ("train", 2),
        ("eval", 2),
    ]


def test_sft_warm_start_raises_the_demonstrated_tokens(tiny_dir, tmp_path):
    res = train(CountA(), TrainConfig(model=tiny_dir, sft_steps=3, sft_lr=1e-2, steps=0), tmp_path / "sft")
    sft = [h for h in res.history if h["kind"] == "sft"]
    assert len(sft) == 3 and sft[-1]["p/sft_loss"] < sft[0]["p/sft_loss"]
    evals = [h for h in res.history if h["kind"] == "eval"]
    assert [e["step"] for e in evals] == [0, 3]
    assert evals[-1]["reward"] > evals[0]["reward"]  # the demonstrations were all 'a'


def test_recipe_without_sft_data_and_bad_model_fail_clearly(tiny_dir, tmp_path):
    class NoSFT(CountA):
        def sft_samples(self, step, seed, tokenizer):
            return {}

    with pytest.raises(ValueError, match="no SFT data"):
        train(NoSFT(), TrainConfig(model=tiny_dir, sft_steps=1, steps=0), tmp_path / "a")
    with pytest.raises(ValueError, match="local Hugging Face model"):
        train(CountA(), TrainConfig(model="function:builtins:str"), tmp_path / "b")


def test_runtime_seeds_make_a_run_independent_of_its_batch(tiny_llm):
    g = CountA().graph
    rt = Runtime(g, llm=tiny_llm)
    tasks = ["one", "two", "three"]
    together = [r.output for r in rt.run_many(tasks, seeds=[11, 22, 33])]
    alone = [rt.run_many([t], seeds=[s])[0].output for t, s in zip(tasks, [11, 22, 33])]
    assert together == alone
    moved = [r.output for r in rt.run_many(["three", "one"], seeds=[33, 11])]
    assert moved == [together[2], together[0]]
    with pytest.raises(ValueError, match="2 entries for 3 tasks"):
        rt.run_many(tasks, seeds=[1, 2])


def test_sample_from_completion_and_mean_curves(tiny_llm):
    from societas.agents.llm.base import SamplingParams

    c = tiny_llm.generate(["hi"], SamplingParams(max_new_tokens=3, min_new_tokens=3, logprobs=True, seed=1))[
        0
    ][0]
    s = sample_from_completion("p", "hi", c, tiny_llm.tokenizer, "g", {"turn": 0})
    assert (
        s.completion_ids == list(c.token_ids) and s.old_logprobs == list(c.logprobs) and s.meta == {"turn": 0}
    )
    h1 = [{"kind": "eval", "step": 0, "reward": 0.0}, {"kind": "eval", "step": 2, "reward": 1.0}]
    h2 = [{"kind": "eval", "step": 0, "reward": 1.0}, {"kind": "eval", "step": 2, "reward": 3.0}]
    m = mean_curves([h1, h2])
    assert [x["reward"] for x in m] == [0.5, 2.0] and m[1]["std"] == pytest.approx(2**0.5)
    assert FROZEN == "frozen"


def test_reward_plot_has_whole_steps_and_a_visible_mark_for_one_point():
    history = [
        {"kind": "eval", "step": 0, "reward": 0.5},
        {"kind": "train", "step": 1, "reward": 0.25},
        {"kind": "eval", "step": 1, "reward": 0.75},
    ]
    fig = loop.reward_figure(history, "one step")
    ax = fig.axes[0]
    fig.canvas.draw()
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)
    handles, labels = ax.get_legend_handles_labels()
    assert labels == ["training reward", "held-out reward"]
    assert all(h.get_marker() not in (None, "", "None") for h in handles)  # one point still shows


def test_the_grpo_variants_reach_the_trainer_through_the_run_config(tiny_dir, tmp_path):
    """GSPO with CISPO's clipped weight, overlong filtering and batch-std advantages, two epochs:
    the run trains, logs how many samples it left out, and writes the settings it ran with."""
    grpo = {
        "lr": 1e-3,
        "epochs": 2,
        "importance_sampling_level": "sequence",
        "loss_type": "cispo",
        "clip_eps_high": 5.0,
        "mask_truncated_completions": True,
        "scale_rewards": "batch",
    }
    out = tmp_path / "run"
    train(CountA(), TrainConfig(model=tiny_dir, steps=1, eval_every=1, grpo=grpo), out)
    (row,) = [r for r in _rows(out / "metrics.jsonl") if r["kind"] == "train"]
    assert 0 <= row["p/truncated"] <= 6 and math.isfinite(row["p/loss"]) and row["p/step"] == 2
    written = yaml.safe_load((out / "config.yaml").read_text())
    assert {k: written["train"]["grpo"][k] for k in grpo} == grpo
