"""Data-parallel training (societas.marl.llm.parallel) on the CPU with 2 gloo processes.

Two processes must take the same update as one process on the same global
batch: the same loss and metrics, the same updated weights (float64 at the
trainer, so that only summation order differs; float32 through the whole
loop), for DDP and FSDP and for each loss normalisation whose weights depend
on the whole batch (sequences for grpo, tokens for bnpo, the step's tokens for
dapo). Checkpoints are written once and resume with another process count.
The reference is the same worker code run in this process.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from societas.marl.llm import parallel
from societas.marl.llm.trainer import PolicyTrainer
from tests.llm import parallel_worker

WORKER = str(Path(parallel_worker.__file__))
PAIRS = ("ddp:grpo", "ddp:dapo", "fsdp:bnpo", "ddp:dapo+gspo+entropy")

pytestmark = pytest.mark.slow


def torchrun(nproc: int, *args: str) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).parents[2]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    r = subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]


@pytest.fixture(scope="module")
def model_dir(tiny_llm, tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_model")
    tiny_llm.model.save_pretrained(d)
    tiny_llm.tokenizer.save_pretrained(d)
    return str(d)


@pytest.fixture(scope="module")
def trainer_runs(model_dir, tmp_path_factory):
    """Each pair trained by 2 processes (one torchrun) and by this process alone."""
    two = tmp_path_factory.mktemp("two")
    one = tmp_path_factory.mktemp("one")
    torchrun(2, WORKER, "trainer", str(two), model_dir, *PAIRS)
    parallel_worker.main(["trainer", str(one), model_dir, *PAIRS])
    assert parallel.dist_env().world_size == 1
    return one, two


def _close(a: float, b: float, tol: float) -> bool:
    return abs(a - b) <= tol * max(1.0, abs(a))


@pytest.mark.parametrize("pair", PAIRS)
def test_two_processes_take_the_one_process_update(trainer_runs, model_dir, pair):
    one, two = trainer_runs
    name = pair.replace(":", "-")
    a = torch.load(one / f"{name}.pt", weights_only=False)
    b = torch.load(two / f"{name}.pt", weights_only=False)
    for kind in ("grpo", "sft"):
        assert a[kind].keys() == b[kind].keys()
        for k, v in a[kind].items():
            assert _close(v, b[kind][k], 1e-9), (kind, k, v, b[kind][k])
    assert a["grpo"]["step"] == 2 and a["sft"]["step"] == 3
    assert a["weights"].keys() == b["weights"].keys()
    moved = 0.0
    base = parallel_worker.load_model(model_dir).state_dict()
    for k, w in a["weights"].items():
        assert (w - b["weights"][k]).abs().max().item() < 1e-9, k
        moved = max(moved, (w - base[k]).abs().max().item())
    assert moved > 1e-4  # the updates did change the weights: the comparison is not vacuous


def test_a_sharded_checkpoint_resumes_in_one_process(trainer_runs, model_dir):
    """The FSDP run's checkpoint (written once, by rank 0, gathered from both shards)
    loads into an unsharded trainer with the one-process run's weights and AdamW moments."""
    one, two = trainer_runs
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)

    def load(ckpt: Path) -> PolicyTrainer:
        model = parallel_worker.load_model(model_dir)
        tr = PolicyTrainer(model, tok, {"lr": 1e-3, "kl_beta": 0.05}, policy="p")
        tr.load_checkpoint(ckpt)
        return tr

    assert len(glob.glob(str(two / "fsdp-bnpo.ckpt" / "ckpt-*"))) == 1
    a, b = load(one / "fsdp-bnpo.ckpt"), load(two / "fsdp-bnpo.ckpt")
    assert a.step_count == b.step_count == 3
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert all((sa[k] - sb[k]).abs().max().item() < 1e-9 for k in sa)
    oa, ob = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
    assert oa.keys() == ob.keys() and len(oa) == len(a.params)
    for i in oa:
        assert float(oa[i]["step"]) == float(ob[i]["step"]) == 3.0
        for k in ("exp_avg", "exp_avg_sq"):
            assert (oa[i][k] - ob[i][k]).abs().max().item() < 1e-12


def _rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]


def _weights(run: Path) -> dict[str, torch.Tensor]:
    (path,) = glob.glob(str(run / "checkpoint" / "step-*" / "p" / "ckpt-*" / "trainer.pt"))
    return torch.load(path, weights_only=False)["weights"]


def test_training_loop_on_two_processes_and_resumed_on_one(model_dir, tmp_path):
    uri = "hf:" + model_dir
    one, two, split = (tmp_path / d for d in ("one", "two", "split"))
    parallel_worker.main(["loop", uri, "ddp", f"{one}:2:fresh", f"{split}:1:fresh"])  # 1 process
    # Two processes: a whole run, and the one-process split run resumed for its second step.
    torchrun(2, WORKER, "loop", uri, "ddp", f"{two}:2:fresh", f"{split}:2:resume")
    # Every episode carries its own seed: split over two processes, the same samples.
    assert (one / "rollouts.jsonl").read_text() == (two / "rollouts.jsonl").read_text()
    assert yaml.safe_load((two / "config.yaml").read_text())["processes"] == 2
    assert yaml.safe_load((one / "config.yaml").read_text())["processes"] == 1
    r1, r2 = _rows(one), _rows(two)
    assert [(r["kind"], r["step"]) for r in r1] == [(r["kind"], r["step"]) for r in r2]
    trained = [r for r in r1 if r["kind"] == "train"]
    assert len(trained) == 2 and all("p/loss" in r for r in trained)  # both steps updated
    for a, b in zip(r1, r2):
        for k, v in a.items():
            if isinstance(v, float) and not k.endswith("_s"):
                assert _close(v, b[k], 1e-6), (a["kind"], a["step"], k, v, b[k])
    w1 = _weights(one)
    for run in (two, split):  # float32 AdamW: equal to well within 1e-6
        w = _weights(run)
        assert all((w1[k] - w[k]).abs().max().item() < 1e-6 for k in w1), run
    # The split run: step 1 on one process, step 2 resumed on two.
    rs = [(r["kind"], r["step"]) for r in _rows(split)]
    assert rs == [("eval", 0), ("train", 1), ("eval", 1), ("train", 2), ("eval", 2)]


def test_shards_cover_the_batch_in_order():
    for n in range(9):
        for world in (1, 2, 3):
            parts = parallel.shards(n, world)
            assert len(parts) == world
            idx = [i for s in parts for i in range(n)[s]]
            assert idx == list(range(n))
            sizes = [s.stop - s.start for s in parts]
            assert max(sizes) - min(sizes) <= 1


def test_one_process_without_torchrun(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    env, owned = parallel.init_from_env("cpu")
    assert (env.rank, env.world_size, owned) == (0, 1, False)
    assert parallel.all_gather_list([1, 2]) == [1, 2]
    assert parallel.all_reduce_sum([1.5]) == [1.5]
    assert parallel.all_reduce_max(3) == 3


def test_a_half_set_environment_names_what_is_missing(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with pytest.raises(ValueError, match="MASTER_ADDR is not set: start the run with torchrun"):
        parallel.init_from_env("cpu")
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="WORLD_SIZE='two' is not an integer"):
        parallel.init_from_env("cpu")


def test_fsdp_with_lora_is_refused_with_the_reason(tiny_llm, monkeypatch):
    pytest.importorskip("peft")
    monkeypatch.setattr("societas.marl.llm.trainer.dist_env", lambda: parallel.DistEnv(0, 2, 0))
    import copy

    model = copy.deepcopy(tiny_llm.model)
    with pytest.raises(ValueError, match="sharding='fsdp' with lora is not supported"):
        PolicyTrainer(model, tiny_llm.tokenizer, {"sharding": "fsdp", "lora": {"r": 2}})


def test_cli_nproc_runs_the_recipe_under_torchrun(model_dir, tmp_path):
    """``societas train RECIPE --nproc 2``: the command starts itself under torchrun;
    rank 0 alone writes the run directory and prints the one JSON result."""
    out = tmp_path / "sp"
    recipe = {
        "proposals_per_step": 2,
        "n_solvers": 2,
        "proposer_tokens": 8,
        "solver_tokens": 8,
        "eval_proposals": 2,
        "eval_problems": 2,
    }
    cmd = [sys.executable, "-m", "societas.marl", "train", "selfplay", "--model", "hf:" + model_dir]
    cmd += ["--steps", "1", "--recipe", json.dumps(recipe), "--out", str(out), "--nproc", "2", "--json"]
    r = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1")
    )
    assert r.returncode == 0, r.stderr[-4000:]
    lines = [x for x in r.stdout.splitlines() if x.startswith("{")]
    assert len(lines) == 1, r.stdout
    res = json.loads(lines[0])
    assert res["runs"][0]["steps"] == 1
    assert yaml.safe_load((out / "seed_0" / "config.yaml").read_text())["processes"] == 2
    assert len(_rows(out / "seed_0")) == 3  # eval 0, train 1, eval 1: written once, not per rank


def test_cli_nproc_refuses_ray_workers_and_nesting(model_dir, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from societas.marl.cli import app

    base = ["train", "selfplay", "--model", "hf:" + model_dir, "--nproc", "2"]
    r = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "a"), "--rollout-workers", "2"])
    assert r.exit_code == 2 and "--nproc and --rollout-workers do not mix" in r.output
    monkeypatch.setenv("LOCAL_RANK", "0")
    r = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "b")])
    assert r.exit_code == 2 and "already runs under torchrun" in r.output
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
