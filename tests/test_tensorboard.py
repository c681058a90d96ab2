"""TensorBoard event files from every loop that trains or searches (societas.marl.board).

Each loop gets its cheapest run; the event files are read back with TensorBoard's
own ``EventAccumulator`` and every point must equal the loop's record
(``metrics.jsonl`` or the returned table) at the same step, with no step written
twice, also after a resume over points an interrupted session left behind.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from societas.evolve.config import load_config
from societas.evolve.controller import Controller
from societas.evolve.task import load_task
from societas.marl import board as board_module
from societas.marl.board import Board, TensorBoardMissingError, open_board, scalar_value
from societas.marl.comm.train import train_comm
from societas.marl.llm.loop import TrainConfig, train
from societas.marl.routing.train import train_routing
from tests.llm.test_loop import CountA

EVOLVE_TASK = Path(__file__).parent / "evolve" / "tasks" / "curve_fit"
ROUTING_ENV = {"n_agents": 5, "n_types": 2, "facts_per_task": 1}


def read_board(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar point of the event files in ``log_dir``, as TensorBoard shows them."""
    acc = EventAccumulator(str(log_dir), size_guidance={SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def by_step(points: dict[str, list[tuple[int, float]]]) -> dict[str, dict[int, float]]:
    """Points per tag by step; fails when a tag has a step twice."""
    out = {}
    for tag, pts in points.items():
        steps = [s for s, _ in pts]
        assert len(steps) == len(set(steps)), f"{tag}: duplicated steps {steps}"
        out[tag] = dict(pts)
    return out


def numbers(row: dict) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in row.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


def assert_points(board: dict[str, dict[int, float]], expected: dict[str, dict[int, float]]) -> None:
    for tag, steps in expected.items():
        assert tag in board, f"missing tag {tag}; have {sorted(board)}"
        assert set(board[tag]) == set(steps), (tag, sorted(board[tag]), sorted(steps))
        for step, value in steps.items():
            assert board[tag][step] == pytest.approx(value, rel=1e-6, abs=1e-6), (tag, step)


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


# -- the shared pieces -----------------------------------------------------------------------------


def test_only_finite_numbers_become_points(tmp_path, monkeypatch):
    assert scalar_value(3) == 3.0 and scalar_value(True) == 1.0 and scalar_value(np.float32(0.5)) == 0.5
    assert scalar_value(torch.tensor(2.0)) == 2.0
    for bad in (None, "no samples", float("nan"), float("inf"), torch.ones(2), [1.0]):
        assert scalar_value(bad) is None
    with open_board(tmp_path, subdir="tb") as board:
        written = board.scalars(
            {"a": 1, "b": None, "c": "x", "d": float("nan"), "e": 2.5, "f": 9}, 3, prefix="p/", skip={"f"}
        )
        assert written == {"p/a": 1.0, "p/e": 2.5}
    assert by_step(read_board(tmp_path / "tb")) == {"p/a": {3: 1.0}, "p/e": {3: 2.5}}
    off = open_board(tmp_path / "off", enabled=False)
    assert not off.enabled and off.scalars({"a": 1}, 0) == {} and not off.scalar("a", 1, 0)
    off.close()
    assert not (tmp_path / "off").exists()
    monkeypatch.setattr(board_module, "SummaryWriter", None)
    with pytest.raises(TensorBoardMissingError, match=r"pip install tensorboard.*tensorboard=False"):
        open_board(tmp_path / "missing")
    assert isinstance(open_board(tmp_path / "missing", enabled=False), Board)  # off needs no package


# -- marl.llm ---------------------------------------------------------------------------------------


def llm_expected(metrics: list[dict]) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for row in metrics:
        for k, v in numbers(row).items():
            if k != "step":
                out.setdefault(k if "/" in k else f"{row['kind']}/{k}", {})[row["step"]] = v
    return out


def test_llm_loop_writes_every_row_and_a_resume_redoes_steps_without_duplicates(tiny_dir, tmp_path):
    cfg = {"model": tiny_dir, "sft_steps": 1, "eval_every": 1, "checkpoint_every": 1, "grpo": {"lr": 1e-3}}
    run = tmp_path / "run"
    train(CountA(), TrainConfig(steps=1, **cfg), run)
    # A session killed after the checkpoint at step 2 had already written points of step 3.
    crashed = SummaryWriter(str(run / "tensorboard"))
    crashed.add_scalar("train/reward", -99.0, 3)
    crashed.add_scalar("p/loss", -99.0, 3)
    crashed.close()
    train(CountA(), TrainConfig(steps=2, **cfg), run, resume=True)

    metrics = rows(run / "metrics.jsonl")
    assert [(r["kind"], r["step"]) for r in metrics] == [
        ("eval", 0), ("sft", 1), ("eval", 1), ("train", 2), ("eval", 2), ("train", 3), ("eval", 3),
    ]  # fmt: skip
    board = by_step(read_board(run / "tensorboard"))
    expected = llm_expected(metrics)
    assert_points(board, expected)
    for tag in ("p/loss", "p/kl", "p/clip_fraction", "p/ratio", "p/grad_norm", "p/reward_mean",
                "p/advantage_mean", "p/advantage_std", "p/sft_loss", "train/reward", "eval/reward"):  # fmt: skip
        assert tag in expected, tag
    assert board["train/reward"][3] != -99.0 and board["p/loss"][3] != -99.0
    # TensorBoard-only figures: tokens per second of each update and of the rollouts.
    assert set(board["p/update_tokens_per_s"]) == {1, 2, 3}
    assert set(board["train/rollout_tokens_per_s"]) == {2, 3}
    assert all(
        v > 0
        for v in [*board["p/update_tokens_per_s"].values(), *board["train/rollout_tokens_per_s"].values()]
    )
    assert set(board) == set(expected) | {"p/update_tokens_per_s", "train/rollout_tokens_per_s"}

    off = tmp_path / "off"
    train(CountA(), TrainConfig(steps=0, model=tiny_dir), off, tensorboard=False)
    assert (off / "metrics.jsonl").exists() and not (off / "tensorboard").exists()


# -- marl.comm --------------------------------------------------------------------------------------

COMM_GROUPS = {
    "mean_episode_return": "rollout", "std_episode_return": "rollout", "mean_episode_length": "rollout",
    "episodes": "rollout", "messages_per_step": "comm", "policy_loss": "losses", "value_loss": "losses",
    "entropy": "losses", "approx_kl": "losses", "clipfrac": "losses", "grad_norm": "losses",
    "explained_variance": "losses", "sps": "perf", "rollout_s": "perf", "update_s": "perf", "wall_s": "perf",
    "update": "train",
}  # fmt: skip


def test_comm_training_writes_each_update_at_its_env_steps(tmp_path):
    cfg = {"env": "speaker_listener", "comm": "commnet", "max_cycles": 4, "num_envs": 8, "rollout_steps": 8,
           "total_steps": 8 * 8 * 3, "hidden_size": 16, "critic_hidden_size": 16, "update_epochs": 1,
           "num_minibatches": 1, "device": "cpu", "seed": 0}  # fmt: skip
    res = train_comm(cfg, tmp_path / "run", progress=False, eval_episodes=4)
    metrics = rows(tmp_path / "run" / "metrics.jsonl")
    expected: dict[str, dict[int, float]] = {}
    for row in metrics:
        for k, v in numbers(row).items():
            if k != "env_steps":
                expected.setdefault(f"{COMM_GROUPS[k]}/{k}", {})[row["env_steps"]] = v
    final = res.env_steps
    expected["eval/return_mean"] = {final: res.eval_return_mean}
    expected["eval/return_std"] = {final: res.eval_return_std}
    board = by_step(read_board(tmp_path / "run" / "tensorboard"))
    assert_points(board, expected)
    assert set(board) == set(expected) | {"eval/messages_per_step"}
    for tag in ("rollout/mean_episode_return", "losses/entropy", "comm/messages_per_step",
                "losses/value_loss", "losses/policy_loss", "perf/sps"):  # fmt: skip
        assert set(board[tag]) == {64, 128, 192}, tag


# -- marl.routing -----------------------------------------------------------------------------------


def test_routing_training_writes_updates_evaluations_entropy_and_the_final_table(tmp_path):
    cfg = {"method": "gptswarm", "steps": 4, "batch_size": 8, "seed": 1, "device": "cpu", "env": ROUTING_ENV,
           "eval_every": 2, "eval_tasks": 20, "runtime_tasks": 0}  # fmt: skip
    run = tmp_path / "run"
    train_routing(cfg, run, progress=False)
    res = train_routing(
        cfg, run, progress=False
    )  # a second run in the same folder replaces the first's points
    metrics = rows(run / "metrics.jsonl")
    expected: dict[str, dict[int, float]] = {}
    for row in metrics:
        for k, v in numbers(row).items():
            if k != "step":
                tag = f"eval/{k[5:]}" if k.startswith("eval_") else f"train/{k}"
                expected.setdefault(tag, {})[row["step"]] = v
    for name, figures in res.table.items():
        for k, v in figures.items():
            expected[f"final/{name}/{k}"] = {4: v}
    board = by_step(read_board(run / "tensorboard"))
    assert_points(board, expected)
    assert set(board) == set(expected) | {"train/entropy", "train/edge_entropy"}
    assert set(board["eval/success"]) == {1, 2, 4} and set(board["train/messages"]) == {1, 2, 3, 4}
    # GPTSwarm starts every edge at p = 0.5: ln 2 nats per candidate edge before the first update.
    assert board["train/edge_entropy"][1] == pytest.approx(math.log(2), rel=1e-5)
    n_edges = int(res.env.candidates.sum())
    assert board["train/entropy"][1] == pytest.approx(n_edges * math.log(2), rel=1e-5)

    off = train_routing({**cfg, "tensorboard": False}, tmp_path / "off", progress=False)
    assert not (off.out_dir / "tensorboard").exists()


# -- evolve -----------------------------------------------------------------------------------------


def test_evolve_writes_islands_operators_and_failures_and_resumes_without_duplicates(tmp_path):
    task = load_task(EVOLVE_TASK)
    cfg = load_config(task.config_path)
    cfg.max_iterations = 4  # one batch of 4
    run = tmp_path / "run"
    ctl = Controller(task, cfg, run)
    try:
        ctl.run()
    finally:
        ctl.close()
    # The interrupted next batch had written a point before the kill.
    crashed = SummaryWriter(str(run / "tensorboard"))
    crashed.add_scalar("search/best_fitness", -99.0, 5)
    crashed.close()
    ctl = Controller.resume(run, max_iterations=8)
    try:
        ctl.run()
    finally:
        ctl.close()

    metrics = rows(run / "metrics.jsonl")
    children = [r for r in metrics if r["iteration"] > 0]
    assert [r["iteration"] for r in children] == list(range(1, 9))
    expected = {
        "search/best_fitness": {r["iteration"]: r["best_fitness"] for r in children},
        "search/fitness": {r["iteration"]: r["fitness"] for r in children if r["fitness"] is not None},
    }
    seed = next(r for r in metrics if r["iteration"] == 0)
    expected["search/best_fitness"][0] = seed["best_fitness"]
    board = by_step(read_board(run / "tensorboard"))
    assert_points(board, expected)
    assert set(board["search/eval_seconds"]) == set(range(1, 9))
    # After the seed (step 0) and after each batch (its last iteration).
    for island in (0, 1):
        for what in ("best_fitness", "mean_fitness", "size"):
            assert set(board[f"islands/{island}/{what}"]) == {0, 4, 8}
    assert set(board["search/evaluations_per_min"]) == {4, 8}
    # A batch's rate is above zero exactly when a child of it was evaluated (a batch of failed
    # mutations, or of duplicates the novelty filter rejected, evaluates nothing).
    for last in (4, 8):
        evaluated = sum(
            r["status"] != "mutation_failed" for r in children if last - 4 < r["iteration"] <= last
        )
        assert (board["search/evaluations_per_min"][last] > 0) == (evaluated > 0)
    failed = sum(r["status"] == "failed" for r in metrics)
    mutation_failed = sum(r["status"] == "mutation_failed" for r in metrics)
    assert board["search/failed"][8] == failed and board["search/mutation_failed"][8] == mutation_failed
    assert board["search/failure_rate"][8] == pytest.approx((failed + mutation_failed) / len(metrics))
    kinds = {r["mutation"] for r in children}
    for kind in kinds:
        made = [r for r in children if r["mutation"] == kind]
        assert board[f"operators/{kind}/children"][8] == len(made)
        valid = sum(r["status"] != "mutation_failed" for r in made) / len(made)
        assert board[f"operators/{kind}/valid_rate"][8] == pytest.approx(valid)
        assert 0.0 <= board[f"operators/{kind}/improved_rate"][8] <= 1.0
    # The best so far never falls; the replayed first batch was not written a second time.
    best = [board["search/best_fitness"][i] for i in range(9)]
    assert best == sorted(best)
