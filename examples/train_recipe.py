"""Train one of the LLM recipes with GRPO from Python (what ``python -m societas.marl train RECIPE`` does).

    python examples/train_recipe.py selfplay                       # examples/recipes/selfplay.yaml, seed 0
    python examples/train_recipe.py conductor --steps 2 --sft-steps 2 --out runs/conductor_try
    python examples/train_recipe.py remul --recipe '{"questions_per_step": 1}' --steps 1 --lora 8
    python examples/train_recipe.py selfplay --resume                # continue runs/selfplay

Reads ``examples/recipes/RECIPE.yaml`` (``recipe:`` options and ``train:``
settings), applies the overrides, trains on the embedded model, and prints
the held-out reward before and after. The run directory holds
``metrics.jsonl``, ``rollouts.jsonl``, ``reward.png``, ``summary.md`` and a
resumable ``checkpoint/``. A directory that already holds a run is continued
with ``--resume`` or started afresh with ``--overwrite``. Full fine-tuning
checkpoints hold the weights and AdamW's moments (about 1.5 GiB for the
embedded model); ``--lora R`` trains rank-R LoRA adapters instead, whose
checkpoints are a few MiB.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from societas.agents.documents import load_yaml_file
from societas.marl.llm.loop import TrainConfig, train
from societas.marl.llm.recipes import RECIPES

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recipe", choices=sorted(RECIPES))
    ap.add_argument("--steps", type=int, default=None, help="GRPO steps (default: the yaml's)")
    ap.add_argument("--sft-steps", type=int, default=None)
    ap.add_argument("--eval-every", type=int, default=None)
    ap.add_argument(
        "--recipe", dest="recipe_json", default=None, help="JSON object of recipe options to override"
    )
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="run directory (default runs/<recipe>)")
    ap.add_argument(
        "--lora", type=int, default=None, metavar="R", help="train rank-R LoRA adapters (small checkpoints)"
    )
    again = ap.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    again.add_argument("--overwrite", action="store_true", help="delete what --out holds and start afresh")
    args = ap.parse_args(argv)
    if args.lora is not None and args.lora < 1:
        ap.error(f"--lora must be a positive rank, got {args.lora}")
    out = Path(args.out or f"runs/{args.recipe}")
    if out.exists() and any(out.iterdir()) and not (args.resume or args.overwrite):
        ap.error(f"{out} already holds a run: --resume continues it, --overwrite starts afresh")
    if args.resume and not (out / "checkpoint" / "LATEST").exists():
        ap.error(f"--resume: {out} has no checkpoint to continue from")

    conf = load_yaml_file(HERE / "recipes" / f"{args.recipe}.yaml")
    recipe_kw = {**conf.get("recipe", {}), **json.loads(args.recipe_json or "{}")}
    train_kw = dict(conf.get("train", {}))
    for key in ("steps", "sft_steps", "eval_every"):
        if getattr(args, key) is not None:
            train_kw[key] = getattr(args, key)
    train_kw.update(model=args.model, seed=args.seed)
    train_kw["grpo"] = {**train_kw.get("grpo", {}), "seed": args.seed}
    if args.lora is not None:
        rank = args.lora
        train_kw["grpo"]["lora"] = {"r": rank, "lora_alpha": 2 * rank, "target_modules": "all-linear"}

    recipe = RECIPES[args.recipe](**recipe_kw)
    if args.overwrite and out.exists():
        print(f"--overwrite: removing {out}", file=sys.stderr)
        shutil.rmtree(out)
    result = train(recipe, TrainConfig(**train_kw), out, resume=args.resume, progress=True)
    before, after = result.first_eval["reward"], result.last_eval["reward"]
    print(
        f"{args.recipe}: held-out reward {before:.3f} -> {after:.3f} in {result.wall_s:.0f} s; "
        f"run directory {result.out}"
    )
    return result.to_dict()


if __name__ == "__main__":
    main()
