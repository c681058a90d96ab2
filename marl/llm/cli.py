"""Command line for LLM training recipes: ``python -m societas.marl train RECIPE ...``.

One command per recipe of :data:`societas.marl.llm.recipes.RECIPES` (conductor,
selfplay, remul, society), all with the same options::

    python -m societas.marl train selfplay --steps 12 --seeds 0 1 --out runs/selfplay
    python -m societas.marl train conductor --sft-steps 6 --steps 10 --lr 1e-5 --out runs/conductor \\
        --recipe '{"problems_per_step": 2, "group_size": 4}'

Each seed writes its own run directory (``OUT/seed_<s>``, see
:func:`societas.marl.llm.loop.train`); with several seeds ``OUT/heldout.png`` draws
the held-out reward of every seed and their mean, and ``OUT/summary.md``
tabulates the mean before and after. ``--recipe`` takes the recipe's
options as a JSON object; ``--config`` a YAML file with ``recipe:`` and
``train:`` sections (command-line options win). Bad values exit with status
2 and one line naming them; ``--json`` prints the result as one JSON object
on the last line of standard output.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import typer
import yaml
from matplotlib.figure import Figure

from societas.marl.cli_common import fail, json_object, one_line
from societas.marl.llm.loop import TrainConfig, mean_curves, train
from societas.marl.llm.recipes import RECIPES
from societas.marl.llm.settings import validate_settings
from societas.marl.llm.trainer import CheckpointError

MULTI_VALUE_OPTIONS = ("--seeds",)


def plot_seeds(runs: dict[int, list[dict[str, Any]]], path: Path, title: str) -> list[dict[str, float]]:
    """Held-out reward per seed (thin) and their mean (thick); returns the mean curve."""
    mean = mean_curves(list(runs.values()))
    fig = Figure(figsize=(6.4, 3.8))
    ax = fig.subplots()
    for s, hist in runs.items():
        ev = [h for h in hist if h["kind"] == "eval"]
        ax.plot([h["step"] for h in ev], [h["reward"] for h in ev], "-", lw=1, alpha=0.6, label=f"seed {s}")
    ax.plot(
        [m["step"] for m in mean],
        [m["reward"] for m in mean],
        "o-",
        color="k",
        lw=2,
        label=f"mean of {len(runs)} seeds",
    )
    sft = [h["step"] for hist in runs.values() for h in hist if h["kind"] == "sft"]
    if sft:
        ax.axvline(max(sft), color="C3", ls=":", lw=1, label="end of SFT warm start")
    ax.set_xlabel("step (SFT warm start, then GRPO)" if sft else "GRPO step")
    ax.set_ylabel("held-out reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return mean


def _load_config(path: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    if path is None:
        return {}, {}
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        fail(f"--config {path}: {one_line(exc)}")
    if not isinstance(data, dict) or not set(data) <= {"recipe", "train"}:
        fail(f"--config {path}: expected a mapping with 'recipe' and/or 'train' sections")
    sections = []
    for key in ("recipe", "train"):
        section = data.get(key) or {}
        if not isinstance(section, dict):
            fail(f"--config {path}: {key}: expected a mapping of options, got {type(section).__name__}")
        sections.append(dict(section))
    return sections[0], sections[1]


def make_command(name: str):
    """The typer command that trains recipe ``name``."""

    def command(
        out: str = typer.Option(..., help="Run directory (one sub-directory per seed)."),
        steps: int | None = typer.Option(None, help="GRPO steps."),
        sft_steps: int | None = typer.Option(None, "--sft-steps", help="Supervised warm-start steps first."),
        eval_every: int | None = typer.Option(
            None, "--eval-every", help="Held-out evaluation every N GRPO steps."
        ),
        seeds: list[int] = typer.Option([0], "--seeds", help="One run per seed, e.g. --seeds 0 1."),
        lr: float | None = typer.Option(None, help="GRPO learning rate."),
        kl_beta: float | None = typer.Option(None, "--kl-beta", help="KL penalty to the frozen base model."),
        advantage: str | None = typer.Option(None, help="grpo, gdpo or dr_grpo."),
        loss_type: str | None = typer.Option(None, "--loss-type", help="grpo, bnpo or dr_grpo."),
        model: str | None = typer.Option(None, help="Base model URI (default: the embedded model)."),
        recipe: str | None = typer.Option(None, "--recipe", help="Recipe options as a JSON object."),
        config: str | None = typer.Option(
            None, "--config", help="YAML file with 'recipe' and 'train' sections."
        ),
        threads: int | None = typer.Option(None, help="torch CPU threads."),
        rollout_workers: int | None = typer.Option(
            None, "--rollout-workers", help="Ray actors for rollouts."
        ),
        serve: str | None = typer.Option(None, help="'vllm:MODEL_DIR' to generate rollouts with vLLM."),
        resume: bool = typer.Option(False, "--resume", help="Continue the runs from their checkpoints."),
        json_out: bool = typer.Option(
            False, "--json", help="Print the result as one JSON object on the last line."
        ),
        verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress messages."),
    ) -> None:
        logging.basicConfig(
            level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
        )
        seeds = list(dict.fromkeys(seeds))  # a seed given twice is one run, not two into one directory
        recipe_kw, train_kw = _load_config(config)
        if recipe:
            recipe_kw.update(json_object("--recipe", recipe))
        grpo = train_kw.pop("grpo", None) or {}
        if not isinstance(grpo, dict):
            fail(f"train.grpo: expected a mapping of options, got {type(grpo).__name__}")
        grpo = dict(grpo)
        for key, val in (
            ("lr", lr),
            ("kl_beta", kl_beta),
            ("advantage", advantage),
            ("loss_type", loss_type),
        ):
            if val is not None:
                grpo[key] = val
        for key, val in (
            ("steps", steps),
            ("sft_steps", sft_steps),
            ("eval_every", eval_every),
            ("model", model),
            ("threads", threads),
            ("rollout_workers", rollout_workers),
            ("serve", serve),
        ):
            if val is not None:
                train_kw[key] = val
        # Every setting is checked before anything runs: a bad one costs no model load.
        try:
            cfgs = {
                s: validate_settings(
                    TrainConfig, {**train_kw, "seed": s, "grpo": {**grpo, "seed": s}}, "train"
                )
                for s in seeds
            }
            rec = RECIPES[name](recipe_kw)
        except ValueError as exc:  # SettingsError names the field: recipe.group_size, train.grpo.lr
            fail(one_line(exc))
        root = Path(out)
        runs: dict[int, list[dict[str, Any]]] = {}
        results = []
        for s, cfg in cfgs.items():
            try:
                res = train(rec, cfg, root / f"seed_{s}", resume=resume, progress=True)
            except (ValueError, FileExistsError, ImportError, CheckpointError) as exc:
                fail(one_line(exc))
            runs[s] = res.history
            results.append(res.to_dict() | {"seed": s})
        mean = plot_seeds(runs, root / "heldout.png", f"{name}: held-out reward")
        before, after = mean[0], mean[-1]
        lines = [
            f"# {name}: held-out reward over {len(seeds)} seed(s)",
            "",
            "| step | mean | std | runs |",
            "|---|---|---|---|",
        ]
        lines += [f"| {m['step']} | {m['reward']:.4f} | {m['std']:.4f} | {m['runs']} |" for m in mean]
        lines += ["", f"Before: {before['reward']:.4f}; after: {after['reward']:.4f}."]
        (root / "summary.md").write_text("\n".join(lines) + "\n")
        summary = {
            "recipe": name,
            "seeds": list(seeds),
            "out": str(root),
            "heldout_before": before["reward"],
            "heldout_after": after["reward"],
            "curve": [
                {k: (round(v, 5) if isinstance(v, float) and math.isfinite(v) else v) for k, v in m.items()}
                for m in mean
            ],
            "runs": results,
        }
        if json_out:
            typer.echo(json.dumps(summary))
        else:
            typer.echo(
                f"{name}: held-out reward {before['reward']:.4f} -> {after['reward']:.4f} "
                f"(mean of {len(seeds)} seed(s)); runs in {root}"
            )

    command.__doc__ = f"Train the '{name}' recipe with GRPO and write run directories."
    return command
