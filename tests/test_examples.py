"""The examples run end to end on the embedded model (short generations), as
a user would start them, and write their run directories."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

EXAMPLES = {
    "society_of_thought.py": ["--personas", "3", "--rounds", "2", "--max-new-tokens", "24"],
    "proposer_solver.py": ["--solvers", "3", "--proposer-tokens", "40", "--solver-tokens", "24"],
    "speaker_listeners.py": ["--listeners", "2", "--speaker-tokens", "64", "--listener-tokens", "16"],
    "conductor_humaneval.py": ["--turns", "1", "--orchestrator-tokens", "96", "--worker-tokens", "64"],
}


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_example_runs(script, tmp_path):
    out = tmp_path / "run"
    r = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), *EXAMPLES[script], "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    files = sorted(p.name for p in out.rglob("*") if p.is_file())
    if script == "conductor_humaneval.py":
        # a drawing exists only when the orchestrator's YAML parsed; the record always does
        result = json.loads((out / "result.json").read_text())
        assert result["task_id"] == "HumanEval/2" and len(result["turns"]) == 1
    else:
        assert any(f.endswith(".png") for f in files), files
    for f in out.rglob("*.png"):
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for f in out.rglob("*.json"):
        json.loads(f.read_text())


# Each LLM training recipe runs end to end on the embedded model (tiny sizes; the
# configs in examples/recipes/ are the measured short runs).
RECIPE_RUNS = {
    "selfplay": {
        "proposals_per_step": 2,
        "n_solvers": 2,
        "proposer_tokens": 24,
        "solver_tokens": 16,
        "eval_proposals": 1,
        "eval_problems": 1,
    },
    "conductor": {
        "problems_per_step": 1,
        "group_size": 2,
        "max_turns": 2,
        "orchestrator_tokens": 48,
        "worker_tokens": 16,
        "eval_problems": 1,
        "sft_batch": 2,
    },
    "remul": {
        "questions_per_step": 1,
        "group_size": 2,
        "speaker_tokens": 32,
        "listener_tokens": 12,
        "n_listeners": 1,
        "eval_questions": 1,
        "ea_fractions": [0.5, 1.0],
        "sft_batch": 2,
    },
    "society": {
        "n_personas": 2,
        "questions_per_step": 1,
        "group_size": 2,
        "persona_tokens": 16,
        "aggregator_tokens": 12,
        "eval_questions": 1,
        "sft_batch": 2,
    },
}


@pytest.mark.slow
@pytest.mark.parametrize("recipe", sorted(RECIPE_RUNS))
def test_train_recipe_example(recipe, tmp_path):
    out = tmp_path / recipe
    sft = "0" if recipe == "selfplay" else "1"
    cmd = [sys.executable, str(ROOT / "examples" / "train_recipe.py"), recipe, "--steps", "1"]
    cmd += ["--sft-steps", sft, "--eval-every", "1", "--recipe", json.dumps(RECIPE_RUNS[recipe])]
    cmd += ["--out", str(out), "--lora", "4"]

    def run(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([*cmd, *extra], cwd=ROOT, capture_output=True, text=True, timeout=900)

    r = run()
    assert r.returncode == 0, r.stderr[-3000:]
    assert "held-out reward" in r.stdout
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    kinds = [x["kind"] for x in rows]
    assert kinds.count("train") == 1 and kinds.count("sft") == int(sft) and kinds[0] == "eval"
    assert all("reward" in x for x in rows if x["kind"] == "eval")
    assert (out / "reward.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "checkpoint" / "LATEST").exists() and (out / "summary.md").exists()
    # LoRA: the checkpoint holds the adapters and their moments, not 1.5 GiB of full fine-tuning state.
    size = sum(f.stat().st_size for f in (out / "checkpoint").rglob("*") if f.is_file())
    assert 0 < size < 64 << 20, size
    if recipe != "selfplay":
        return
    # Run again into the same directory: refused with what to do, then continued or restarted.
    r = run()
    assert r.returncode == 2 and "--resume continues it, --overwrite starts afresh" in r.stderr
    r = run("--resume")
    assert r.returncode == 0, r.stderr[-3000:]
    assert [json.loads(x)["kind"] for x in (out / "metrics.jsonl").read_text().splitlines()] == kinds
    (out / "marker").write_text("old")
    r = run("--overwrite")
    assert r.returncode == 0, r.stderr[-3000:]
    assert not (out / "marker").exists() and (out / "checkpoint" / "LATEST").exists()


@pytest.mark.parametrize("recipe", sorted(RECIPE_RUNS))
def test_recipe_example_configs_build(recipe):
    """The example configs (the measured runs of the README) name only options their recipe and loop accept."""
    import yaml

    from societas.marl.llm.loop import TrainConfig
    from societas.marl.llm.recipes import RECIPES

    data = yaml.safe_load((ROOT / "examples" / "recipes" / f"{recipe}.yaml").read_text())
    assert set(data) == {"recipe", "train"}
    rec = RECIPES[recipe](**data["recipe"])
    cfg = TrainConfig(**data["train"])
    assert cfg.steps >= 1 and rec.config()  # every option was taken, none silently dropped
    for key, val in data["recipe"].items():
        got = rec.config()[key]
        assert got == (list(val) if isinstance(val, tuple) else val), key
    if cfg.sft_steps:
        assert type(rec).sft_samples is not type(rec).__mro__[1].sft_samples  # the recipe has SFT data
