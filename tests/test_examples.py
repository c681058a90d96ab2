"""The examples run end to end on the embedded model (short generations), as
a user would start them, and write their run directories.

The scripts of one test run one after another in one Python process, each as
``python SCRIPT ARGS`` runs it (``runpy`` with ``__name__ == "__main__"``, its
own ``sys.argv`` and its folder first on ``sys.path``): a process per script
would import torch and load the model again for each (about 10 s apiece).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from societas.marl.llm.loop import TrainResult

ROOT = Path(__file__).resolve().parents[1]

RUNNER = """
import json, runpy, sys, traceback
from pathlib import Path

failed = {}
for i, (script, args) in enumerate(json.loads(sys.argv[1])):
    for stream in (sys.stdout, sys.stderr):
        print(f"=== run {i}", file=stream, flush=True)
    sys.argv = [script, *args]
    sys.path[0] = str(Path(script).parent)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (0, None):
            failed[i] = f"exit status {e.code}"
    except BaseException:
        failed[i] = traceback.format_exc()
for stream in (sys.stdout, sys.stderr):
    print("=== end", file=stream, flush=True)
sys.exit(json.dumps(failed) if failed else 0)
"""


def run_scripts(runs: list[tuple[str, list[str]]], timeout: int) -> list[tuple[str, str]]:
    """Run each (script in examples/, its arguments) as ``python`` would, all in one process, and
    return the stdout and stderr of each run; a run that fails fails the test with its stderr."""
    todo = [(str(ROOT / "examples" / script), args) for script, args in runs]
    r = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(todo)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if "=== end" not in r.stdout or "=== end" not in r.stderr:
        pytest.fail(f"the runner did not finish (exit status {r.returncode}):\n{r.stderr[-3000:]}")
    outs, errs = (text.split("=== end")[0].split("=== run ")[1:] for text in (r.stdout, r.stderr))
    outputs = [(o.split("\n", 1)[1], e.split("\n", 1)[1]) for o, e in zip(outs, errs, strict=True)]
    assert len(outputs) == len(runs)
    if r.returncode != 0:
        failed = json.loads(r.stderr.rstrip().splitlines()[-1])
        pytest.fail(
            "\n\n".join(f"{runs[int(i)]}: {why}\n{outputs[int(i)][1][-3000:]}" for i, why in failed.items())
        )
    return outputs


EXAMPLES = {
    "society_of_thought.py": ["--personas", "3", "--rounds", "2", "--max-new-tokens", "24"],
    "proposer_solver.py": ["--solvers", "3", "--proposer-tokens", "40", "--solver-tokens", "24"],
    "speaker_listeners.py": ["--listeners", "2", "--speaker-tokens", "64", "--listener-tokens", "16"],
    "conductor_humaneval.py": ["--turns", "1", "--orchestrator-tokens", "96", "--worker-tokens", "64"],
}


@pytest.mark.slow
def test_every_example_runs(tmp_path):
    scripts = sorted(EXAMPLES)
    run_scripts([(script, [*EXAMPLES[script], "--out", str(tmp_path / script)]) for script in scripts], 900)
    for script in scripts:
        out = tmp_path / script
        files = sorted(p.name for p in out.rglob("*") if p.is_file())
        if script == "conductor_humaneval.py":
            # a drawing exists only when the orchestrator's YAML parsed; the record always does
            result = json.loads((out / "result.json").read_text())
            assert result["task_id"] == "HumanEval/2" and len(result["turns"]) == 1
        else:
            assert any(f.endswith(".png") for f in files), (script, files)
        for f in out.rglob("*.png"):
            assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f
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


def _recipe_args(recipe: str, out: Path) -> list[str]:
    sft = "0" if recipe == "selfplay" else "1"
    args = [recipe, "--steps", "1", "--sft-steps", sft, "--eval-every", "1"]
    return [*args, "--recipe", json.dumps(RECIPE_RUNS[recipe]), "--out", str(out), "--lora", "4"]


@pytest.mark.slow
def test_every_training_recipe_example_runs(tmp_path, capsys, monkeypatch):
    recipes = sorted(RECIPE_RUNS)
    outputs = run_scripts([("train_recipe.py", _recipe_args(r, tmp_path / r)) for r in recipes], 1800)
    for recipe, (stdout, _) in zip(recipes, outputs, strict=True):
        out = tmp_path / recipe
        assert f"{recipe}: held-out reward" in stdout, stdout[-2000:]
        rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        kinds = [x["kind"] for x in rows]
        sft = int(recipe != "selfplay")
        assert kinds.count("train") == 1 and kinds.count("sft") == sft and kinds[0] == "eval", (recipe, kinds)
        assert all("reward" in x for x in rows if x["kind"] == "eval")
        assert (out / "reward.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (out / "checkpoint" / "LATEST").exists() and (out / "summary.md").exists()
        # LoRA: the checkpoint holds the adapters and their moments, not 1.5 GiB of full fine-tuning state.
        size = sum(f.stat().st_size for f in (out / "checkpoint").rglob("*") if f.is_file())
        assert 0 < size < 64 << 20, (recipe, size)

    # Run selfplay again into the same directory: refused with what to do, then continued or restarted.
    # These runs check the script's handling of its directory, in this process; --overwrite's fresh
    # training would repeat the run above, so it is recorded, not redone.
    out = tmp_path / "selfplay"
    kinds = [json.loads(x)["kind"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    example = _load_example("train_recipe.py")
    argv = _recipe_args("selfplay", out)
    with pytest.raises(SystemExit) as refused:
        example.main(argv)
    assert refused.value.code == 2
    assert "--resume continues it, --overwrite starts afresh" in capsys.readouterr().err
    assert example.main([*argv, "--resume"])["steps"] == 1  # the checkpoint's step, nothing run again
    assert [json.loads(x)["kind"] for x in (out / "metrics.jsonl").read_text().splitlines()] == kinds
    (out / "marker").write_text("old")
    started = []

    def fresh_run(trained, config, out_dir, resume, progress):
        started.append((out_dir, resume, out_dir.exists(), config.steps))
        return TrainResult(out_dir, [], {"reward": 0.0}, {"reward": 0.0}, 0.0)

    monkeypatch.setattr(example, "train", fresh_run)
    example.main([*argv, "--overwrite"])
    assert started == [(out, False, False, 1)]  # the old run deleted before a fresh one starts


def _load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"societas_example_{name[:-3]}", ROOT / "examples" / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
