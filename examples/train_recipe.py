"""Train one of the LLM recipes with GRPO from Python (what ``python -m societas.marl train RECIPE`` does).

    python examples/train_recipe.py selfplay                       # examples/recipes/selfplay.yaml, seed 0
    python examples/train_recipe.py conductor --steps 2 --sft-steps 2 --out runs/conductor_try
    python examples/train_recipe.py remul --recipe '{"questions_per_step": 1}' --steps 1

Reads ``examples/recipes/RECIPE.yaml`` (``recipe:`` options and ``train:``
settings), applies the overrides, trains on the embedded model, and prints
the held-out reward before and after. The run directory holds
``metrics.jsonl``, ``rollouts.jsonl``, ``reward.png``, ``summary.md`` and a
resumable ``checkpoint/``.
"""

from __future__ import annotations

import argparse
import json
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
    args = ap.parse_args(argv)

    conf = load_yaml_file(HERE / "recipes" / f"{args.recipe}.yaml")
    recipe_kw = {**conf.get("recipe", {}), **json.loads(args.recipe_json or "{}")}
    train_kw = dict(conf.get("train", {}))
    for key in ("steps", "sft_steps", "eval_every"):
        if getattr(args, key) is not None:
            train_kw[key] = getattr(args, key)
    train_kw.update(model=args.model, seed=args.seed)
    train_kw["grpo"] = {**train_kw.get("grpo", {}), "seed": args.seed}

    recipe = RECIPES[args.recipe](**recipe_kw)
    result = train(recipe, TrainConfig(**train_kw), args.out or f"runs/{args.recipe}", progress=True)
    before, after = result.first_eval["reward"], result.last_eval["reward"]
    print(
        f"{args.recipe}: held-out reward {before:.3f} -> {after:.3f} in {result.wall_s:.0f} s; "
        f"run directory {result.out}"
    )
    return result.to_dict()


if __name__ == "__main__":
    main()
