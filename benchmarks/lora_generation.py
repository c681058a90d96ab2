"""Sampling from a LoRA policy: through peft's wrapped model against the merged copy.

A LoRA-trained policy has to sample its next rollouts. Generating through the
peft-wrapped model (what ``model.generate`` on a ``PeftModel`` does, and what
the training loop did before) runs every adapted linear as base + A + B; the
loop now samples from :class:`societas.marl.llm.serving.MergedLoRA`, a copy
whose adapted linears hold ``W + scaling * B @ A``, recomputed after each update.

Three servers of the embedded model (SmolLM2-135M-Instruct, float32), each a
``TransformersLLM`` with the same batched ``generate`` call (chat prompts x
``--group`` samples, ``--max-new-tokens`` tokens forced by ``min_new_tokens`` so
every side generates the same number, temperature 1.0, the same seeds):

* ``peft``: the wrapped model (rank ``--rank`` adapters on ``--targets``, moved
  off zero so that they matter);
* ``merged``: the merged copy of that same model;
* ``base``: the model without adapters (the ceiling: what a plain model costs).

The sides take turns within each of ``--rounds`` rounds (a first, untimed round
warms them up), so a change in the machine's load falls on all of them; the
table gives each side's median generated tokens per second. It also gives the
cost of the merged copy: the time of one refresh (after each update) and the
memory it holds of its own, and checks that it computes what the wrapped model
does (the largest logit difference on the prompts).

Run: ``python benchmarks/lora_generation.py [--rank 4 --targets all-linear
--group 4 --max-new-tokens 48 --rounds 3]``. Prints a table and ends with one
JSON line.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from societas.agents import SamplingParams, load_llm
from societas.agents.embedded import MODEL_ID
from societas.agents.llm.transformers_llm import TransformersLLM
from societas.marl.llm.serving import MergedLoRA

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_step import PROMPTS  # the same chat prompts as the whole GRPO steps


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rank", type=int, default=4)
    ap.add_argument("--targets", default="all-linear", help="'all-linear' or comma-separated module names")
    ap.add_argument("--group", type=int, default=4, help="samples per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    import peft

    if args.threads:
        torch.set_num_threads(args.threads)
    base = load_llm("embedded", shared=False, device="cpu")
    targets = args.targets if args.targets == "all-linear" else args.targets.split(",")
    wrapped = peft.get_peft_model(
        copy.deepcopy(base.model),
        peft.LoraConfig(r=args.rank, lora_alpha=2 * args.rank, target_modules=targets),
    )
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # lora_B starts at zero: move the adapters so that the sides differ from base
        for n, p in wrapped.named_parameters():
            if "lora_B" in n:
                p.add_(torch.randn(p.shape, generator=g) * 0.01)
    t0 = time.perf_counter()
    merged = MergedLoRA(wrapped)
    build_s = time.perf_counter() - t0
    refresh = []
    for _ in range(5):
        t0 = time.perf_counter()
        merged.refresh()
        refresh.append(time.perf_counter() - t0)
    servers = {
        "peft": TransformersLLM(wrapped, base.tokenizer, device="cpu", name="peft"),
        "merged": TransformersLLM(merged.module, base.tokenizer, device="cpu", name="merged"),
        "base": base,
    }
    msgs = [[{"role": "user", "content": p}] for p in PROMPTS]
    with torch.inference_mode():
        ids = base.tokenizer.apply_chat_template(msgs[0], add_generation_prompt=True, return_tensors="pt")
        ids = ids if isinstance(ids, torch.Tensor) else ids["input_ids"]
        logit_diff = float((wrapped(ids).logits - merged.module(ids).logits).abs().max())
    rates: dict[str, list[float]] = {k: [] for k in servers}
    for r in range(args.rounds + 1):
        params = SamplingParams(
            temperature=1.0,
            max_new_tokens=args.max_new_tokens,
            min_new_tokens=args.max_new_tokens,
            n=args.group,
            seed=r,
        )
        for name, llm in servers.items():
            t0 = time.perf_counter()
            outs = llm.generate(msgs, params)
            dt = time.perf_counter() - t0
            tokens = sum(len(c.token_ids) for comps in outs for c in comps)
            if r > 0:  # round 0 warms every side up
                rates[name].append(tokens / dt)
    med = {k: statistics.median(v) for k, v in rates.items()}
    model_bytes = sum(p.numel() * p.element_size() for p in base.model.parameters())
    result = {
        "model": MODEL_ID,
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
        "rank": args.rank,
        "targets": args.targets,
        "adapted_linears": len(merged.layers),
        "batch": f"{len(PROMPTS)} prompts x {args.group} samples x {args.max_new_tokens} tokens",
        "peft_tokens_per_s": round(med["peft"], 1),
        "merged_tokens_per_s": round(med["merged"], 1),
        "base_tokens_per_s": round(med["base"], 1),
        "merged_speedup_vs_peft": round(med["merged"] / med["peft"], 2),
        "merged_vs_base": round(med["merged"] / med["base"], 2),
        "refresh_ms": round(1e3 * statistics.median(refresh), 1),
        "build_s": round(build_s, 2),
        "merged_own_mib": round(merged.nbytes() / 2**20, 1),
        "model_mib": round(model_bytes / 2**20, 1),
        "max_logit_diff": logit_diff,
    }
    print(f"{'server':<8} {'tokens/s (median of ' + str(args.rounds) + ')':>26}")
    for k in servers:
        print(f"{k:<8} {med[k]:>26.1f}")
    print(
        f"merged / peft: {result['merged_speedup_vs_peft']}x; refresh {result['refresh_ms']} ms; "
        f"own memory {result['merged_own_mib']} of {result['model_mib']} MiB; "
        f"max |logit diff| vs peft {logit_diff:.2e}"
    )
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
