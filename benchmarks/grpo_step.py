"""Whole GRPO steps (generation + policy update): our trainer against TRL's GRPOTrainer.

One GRPO step is: sample G completions for each prompt, score them, compute
group-relative advantages and take one optimizer step on the batch. This
measures generated tokens per second of such WHOLE steps, on the embedded
model (SmolLM2-135M-Instruct, float32, CPU), for

* ours: one batched ``TransformersLLM.generate`` call (``n=G`` samples per
  prompt, log-probs recorded while sampling, finished rows dropped from the
  batch), then ``societas.marl.llm.trainer.PolicyTrainer.step`` on the token samples,
  the model shared between the two (no weight sync);
* TRL: ``trl.GRPOTrainer`` (its own ``model.generate`` rollout, then its loss
  and optimizer step), timed per optimizer step by a callback.

Both sides get the same things: a fresh copy of the same weights, the same
chat prompts, the same group size, the same completion limit, temperature 1.0
(top-p 1.0, no top-k), lr 1e-6, KL coefficient beta = 0 (so neither side keeps
or runs a reference model), the "grpo" loss (per-sequence token mean), clip
epsilon 0.2, gradient-norm clipping at 1.0, AdamW at a constant learning rate
(no warm-up), one optimizer step per generation batch (TRL:
``num_iterations=1``, ``steps_per_generation=1``,
``gradient_accumulation_steps=1``, batch = prompts x G) and the same cheap
deterministic reward on the completion text, so that generation and the update
dominate. Same torch thread count on both sides (``--threads``). The two sides
run in the same process one after the other, ours first, then TRL; the first
``--warmup`` steps of each side are run but not timed (TRL's trainer set-up is
not timed either). Because the sides run one after the other, a machine whose
load changes during the run skews the ratio: compare runs on a quiet machine.

Generated tokens are counted from the actual completions, end-of-sequence
token included on both sides: ours sums ``len(completion.token_ids)``; for TRL
the reward function receives ``completion_ids`` (each completion cut after its
first end-of-sequence token, the token kept) and records their lengths, which
the step callback then attributes to the step that generated them.

The table also splits each step: for ours, "generation" is the generate call
and "update" everything after it (token samples, rewards, ``trainer.step``);
for TRL, "generation" is its rollout phase (``_generate_and_score_completions``:
sampling, reward, advantages; timed by a pass-through wrapper) and "update" the
rest of the optimizer step (loss forward/backward, optimizer).

Run: ``python benchmarks/grpo_step.py [--steps 3 --group 8 --max-new-tokens 64]``
(``--skip-trl`` when trl is not installed). Prints a table and ends with one
JSON line of the headline figures.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from societas.agents import SamplingParams, load_llm
from societas.agents.embedded import MODEL_ID
from societas.agents.llm.base import encode_with_tokenizer
from societas.marl.llm.rollouts import TokenSample
from societas.marl.llm.trainer import GRPOConfig, PolicyTrainer

PROMPTS = [
    "Write a short haiku about the sea.",
    "Explain in two sentences why the sky is blue.",
    "Give three tips for learning a new language.",
    "What is 17 times 23? Show your reasoning briefly.",
]
LR = 1e-6
SEED = 0


def reward_text(text: str) -> float:
    """Cheap and deterministic: prefer answers near 120 characters that mention a keyword."""
    r = 1.0 - min(abs(len(text) - 120) / 120.0, 1.0)
    low = text.lower()
    return r + 0.5 * any(k in low for k in ("sea", "blue", "language", "391"))


def chat(p: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": p}]


# --------------------------------------------------------------------------- ours
def run_ours(llm, prompts, group: int, max_new: int, warmup: int, steps: int) -> dict:
    trainer = PolicyTrainer(
        llm.model,
        llm.tokenizer,
        GRPOConfig(lr=LR, kl_beta=0.0, loss_type="grpo", clip_eps=0.2, max_grad_norm=1.0, seed=SEED),
    )
    msgs = [chat(p) for p in prompts]
    prompt_ids = encode_with_tokenizer(llm.tokenizer, msgs)
    rows = []
    for k in range(warmup + steps):
        params = SamplingParams(
            temperature=1.0, top_p=1.0, max_new_tokens=max_new, n=group, logprobs=True, seed=SEED + k
        )
        t0 = time.perf_counter()
        outs = llm.generate(msgs, params)  # ONE batched call: P prompts x G samples
        t1 = time.perf_counter()
        samples, rewards, groups = [], [], []
        for i, comps in enumerate(outs):
            for c in comps:
                n = len(c.token_ids)
                samples.append(
                    TokenSample(
                        "policy",
                        prompt_ids[i],
                        list(c.token_ids),
                        [1] * n,
                        list(c.logprobs),
                        group_key=str(i),
                    )
                )
                rewards.append(reward_text(c.text))
                groups.append(i)
        m = trainer.step(samples, torch.tensor(rewards), groups)
        t2 = time.perf_counter()
        tokens = sum(len(c.token_ids) for comps in outs for c in comps)
        rows.append(
            {
                "gen_s": t1 - t0,
                "update_s": t2 - t1,
                "step_s": t2 - t0,
                "tokens": tokens,
                "reward_mean": m["reward_mean"],
            }
        )
    timed = rows[warmup:]
    return _summary(timed, prompt_len=statistics.mean(len(p) for p in prompt_ids))


# --------------------------------------------------------------------------- TRL
def run_trl(
    base_model, tokenizer, prompts, group: int, max_new: int, warmup: int, steps: int, threads: int
) -> dict:
    import transformers
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    transformers.logging.set_verbosity_error()
    logging.getLogger("trl").setLevel(logging.ERROR)

    gen_tokens: list[int] = []  # completion lengths seen by the reward function since the last step end
    gen_time: list[
        float
    ] = []  # seconds in TRL's rollout (generate + reward + advantages) since the last step end

    def reward_fn(prompts, completions, completion_ids, **kw):
        gen_tokens.extend(len(ids) for ids in completion_ids)
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [reward_text(t) for t in texts]

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.rows: list[dict] = []
            self.t0 = 0.0

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            dt = time.perf_counter() - self.t0
            g = sum(gen_time)
            self.rows.append(
                {
                    "step_s": dt,
                    "gen_s": g,
                    "update_s": dt - g,
                    "tokens": sum(gen_tokens),
                    "rollouts": len(gen_tokens),
                }
            )
            gen_tokens.clear()
            gen_time.clear()

    batch = len(prompts) * group
    out_dir = tempfile.mkdtemp(prefix="grpo_bench_trl_")
    cfg = TRLConfig(
        output_dir=out_dir,
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=0.0,
        epsilon=0.2,
        loss_type="grpo",
        num_generations=group,
        max_completion_length=max_new,
        per_device_train_batch_size=batch,
        steps_per_generation=1,
        num_iterations=1,
        gradient_accumulation_steps=1,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_steps=warmup + steps,
        shuffle_dataset=False,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        fp16=False,
        disable_tqdm=True,
        seed=SEED,
        dataloader_num_workers=0,
    )
    model = copy.deepcopy(base_model)
    ds = Dataset.from_list([{"prompt": chat(p)} for p in prompts])
    timer = StepTimer()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_fn,
        args=cfg,
        train_dataset=ds,
        processing_class=tokenizer,
        callbacks=[timer],
    )
    trainer.remove_callback(PrinterCallback)  # its per-step metric dicts would clutter the table

    # Time TRL's rollout phase for the generation/update split (a pass-through
    # wrapper: same arguments, same result). With num_iterations=1 and
    # steps_per_generation=1 TRL computes no separate old log-probs here, and
    # beta=0 means no reference-model forward, so it is sampling + scoring.
    rollout = trainer._generate_and_score_completions

    def timed_rollout(inputs):
        t0 = time.perf_counter()
        try:
            return rollout(inputs)
        finally:
            gen_time.append(time.perf_counter() - t0)

    trainer._generate_and_score_completions = timed_rollout
    torch.set_num_threads(threads)  # the Trainer's set-up must not change the thread count
    trainer.train()
    if len(timer.rows) != warmup + steps:
        raise RuntimeError(f"TRL ran {len(timer.rows)} steps, expected {warmup + steps}")
    bad = [r for r in timer.rows if r["rollouts"] != batch]
    if bad:
        raise RuntimeError(
            f"TRL step generated {bad[0]['rollouts']} completions, expected {batch} "
            "(generation is not one batch per step)"
        )
    if torch.get_num_threads() != threads:
        print(f"# warning: torch threads changed to {torch.get_num_threads()} during TRL training")
    return _summary(timer.rows[warmup:])


def _summary(rows: list[dict], **extra) -> dict:
    tot_s = sum(r["step_s"] for r in rows)
    tot_tok = sum(r["tokens"] for r in rows)
    out = {
        "step_s": tot_s / len(rows),
        "tokens_per_step": tot_tok / len(rows),
        "tokens_per_s": tot_tok / tot_s,
        "steps": len(rows),
        **extra,
    }
    if "gen_s" in rows[0]:
        out["gen_s"] = sum(r["gen_s"] for r in rows) / len(rows)
        out["update_s"] = sum(r["update_s"] for r in rows) / len(rows)
        out["gen_tokens_per_s"] = tot_tok / sum(r["gen_s"] for r in rows)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3, help="timed GRPO steps per side")
    ap.add_argument("--warmup", type=int, default=1, help="untimed GRPO steps per side, run first")
    ap.add_argument("--group", type=int, default=8, help="completions per prompt (G)")
    ap.add_argument(
        "--prompts", type=int, default=1, choices=range(1, len(PROMPTS) + 1), help="distinct prompts per step"
    )
    ap.add_argument("--max-new-tokens", type=int, default=64, help="completion limit")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's default)")
    ap.add_argument("--skip-trl", action="store_true", help="measure ours only")
    args = ap.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    trl_version = None
    if not args.skip_trl:
        try:
            import trl
        except ImportError:
            sys.exit("trl is not installed: pip install trl (or pass --skip-trl to measure ours only)")
        trl_version = trl.__version__
        # TRL/transformers chatter (deprecation notices, generation-config notes); errors still raise.
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        warnings.filterwarnings("ignore", category=UserWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)

    prompts = PROMPTS[: args.prompts]
    llm = load_llm("embedded")
    # A pristine copy for TRL, taken before our side trains the shared model in place.
    trl_model = None if args.skip_trl else copy.deepcopy(llm.model)
    print(
        f"# machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"threads {threads}, model {MODEL_ID} ({llm.model.dtype}, cpu)"
    )
    print(
        f"# {len(prompts)} prompt(s) x G={args.group}, <= {args.max_new_tokens} new tokens, "
        f"temperature 1.0, lr {LR}, beta 0, {args.warmup} warm-up + {args.steps} timed steps per side"
    )

    torch.manual_seed(SEED)
    ours = run_ours(llm, prompts, args.group, args.max_new_tokens, args.warmup, args.steps)
    trl_res = None
    if not args.skip_trl:
        trl_res = run_trl(
            trl_model,
            llm.tokenizer,
            prompts,
            args.group,
            args.max_new_tokens,
            args.warmup,
            args.steps,
            threads,
        )

    print(
        "\n| trainer | s / step | generated tok / step | generated tok/s | generation s | update s | "
        "generation-only tok/s |"
    )
    print("|---|---|---|---|---|---|---|")
    print(
        f"| societas PolicyTrainer | {ours['step_s']:.2f} | {ours['tokens_per_step']:.0f} | "
        f"{ours['tokens_per_s']:.1f} | {ours['gen_s']:.2f} | {ours['update_s']:.2f} | {ours['gen_tokens_per_s']:.1f} |"
    )
    if trl_res:
        print(
            f"| TRL {trl_version} GRPOTrainer | {trl_res['step_s']:.2f} | {trl_res['tokens_per_step']:.0f} | "
            f"{trl_res['tokens_per_s']:.1f} | {trl_res['gen_s']:.2f} | {trl_res['update_s']:.2f} | "
            f"{trl_res['gen_tokens_per_s']:.1f} |"
        )
        print(
            f"\nours / TRL, generated tokens per second of whole steps: "
            f"{ours['tokens_per_s'] / trl_res['tokens_per_s']:.2f}x"
        )
    else:
        print("| TRL GRPOTrainer | skipped | | | | | |")

    head = {
        "benchmark": "grpo_step",
        "model": MODEL_ID,
        "prompts": len(prompts),
        "group": args.group,
        "max_new_tokens": args.max_new_tokens,
        "steps": args.steps,
        "threads": threads,
        "ours_step_s": round(ours["step_s"], 3),
        "ours_gen_s": round(ours["gen_s"], 3),
        "ours_update_s": round(ours["update_s"], 3),
        "ours_tokens_per_step": round(ours["tokens_per_step"], 1),
        "ours_tokens_per_s": round(ours["tokens_per_s"], 1),
        "trl_version": trl_version,
        "trl_step_s": round(trl_res["step_s"], 3) if trl_res else None,
        "trl_gen_s": round(trl_res["gen_s"], 3) if trl_res else None,
        "trl_update_s": round(trl_res["update_s"], 3) if trl_res else None,
        "trl_tokens_per_step": round(trl_res["tokens_per_step"], 1) if trl_res else None,
        "trl_tokens_per_s": round(trl_res["tokens_per_s"], 1) if trl_res else None,
        "ratio_vs_trl": round(ours["tokens_per_s"] / trl_res["tokens_per_s"], 2) if trl_res else None,
    }
    print(json.dumps(head))


if __name__ == "__main__":
    main()
