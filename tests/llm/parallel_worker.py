"""What each process runs in tests/llm/test_parallel.py, under torchrun or alone.

``python parallel_worker.py trainer OUT MODEL_DIR SHARDING:LOSS ...``: for
each pair, a fixed batch through :class:`PolicyTrainer` (two GRPO epochs, then
one SFT step) in float64; rank 0 saves the metrics and the whole updated
weights to ``OUT/SHARDING-LOSS.pt``, and every rank takes part in writing
a checkpoint to ``OUT/SHARDING-LOSS.ckpt``. ``LOSS`` is a loss type, with
settings from :data:`EXTRAS` after it (``dapo+gspo+entropy``).

``python parallel_worker.py loop MODEL_URI SHARDING OUT:STEPS:fresh|resume ...``:
for each run, the training loop on a one-node recipe (reward: the number of
"a" in the answer).

The test runs the same function in its own process for the one-process
reference, so both sides are the same code.
"""

from __future__ import annotations

import random
import sys

import torch

from societas.marl.llm.loop import TrainConfig, train
from societas.marl.llm.parallel import dist_env, init_from_env
from societas.marl.llm.rollouts import TokenSample
from societas.marl.llm.trainer import PolicyTrainer
from tests.llm.test_loop import CountA


def fixed_batch(vocab: int) -> tuple[list[TokenSample], list[list[float]], list[str]]:
    """Seven samples of uneven lengths in three groups, two reward columns (no recorded
    log-probs, so the trainer recomputes them: that pass is split over ranks too)."""
    rng = random.Random(5)
    samples, rewards, groups = [], [], []
    for i in range(7):
        p = [rng.randrange(3, vocab) for _ in range(rng.randint(2, 6))]
        c = [rng.randrange(3, vocab) for _ in range(rng.randint(1, 5))]
        mask = [1] * len(c)
        if len(c) > 2:
            mask[-1] = 0
        samples.append(TokenSample("p", p, c, mask, None, f"g{i % 3}"))
        rewards.append([rng.uniform(-1, 1), float(rng.randint(0, 1))])
        groups.append(f"g{i % 3}")
    return samples, rewards, groups


def load_model(model_dir: str) -> torch.nn.Module:
    """The tiny model in float64: two processes and one then differ only in summation order."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).double()


# Settings a pair's loss part may add after its loss type ("dapo+gspo+entropy").
EXTRAS: dict[str, dict[str, object]] = {
    "gspo": {"importance_sampling_level": "sequence"},
    "entropy": {"top_entropy_quantile": 0.5},  # a threshold over every rank's tokens
}


def run_trainer(out: str, model_dir: str, sharding: str, loss: str) -> None:
    """One pair (see the module docstring); ``out`` is the path without its suffix."""
    loss_type, *extras = loss.split("+")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = load_model(model_dir)
    cfg = {
        "lr": 1e-3,
        "kl_beta": 0.05,
        "loss_type": loss_type,
        "epochs": 2,
        "grad_accum_steps": 3,
        "micro_batch_tokens": None,
        "max_grad_norm": 0.5,
        "reward_weights": [1.0, 0.5],
        "sharding": sharding,
    }
    for extra in extras:
        cfg.update(EXTRAS[extra])
    tr = PolicyTrainer(model, tok, cfg, ref_model=None, policy="p")
    samples, rewards, groups = fixed_batch(len(tok))
    grpo = tr.step(samples, rewards, groups)
    sft = tr.sft_step(samples[:5])
    weights = tr.full_state_dict()
    tr.save_checkpoint(out + ".ckpt")  # every rank: under FSDP the weights are gathered
    if dist_env().main:
        torch.save(
            {"grpo": grpo, "sft": sft, "weights": {k: v.detach().cpu() for k, v in weights.items()}},
            out + ".pt",
        )


def run_loop(out: str, model: str, steps: int, resume: bool, sharding: str) -> None:
    cfg = TrainConfig(
        model=model,
        steps=steps,
        eval_every=2,
        threads=1,
        grpo={"lr": 1e-5, "kl_beta": 0.02, "sharding": sharding, "grad_accum_steps": 2},
    )
    train(CountA(), cfg, out, resume=resume)


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    mode, *args = argv
    if mode == "trainer":
        env, owned = init_from_env("cpu")
        out, model_dir, *pairs = args
        try:
            for pair in pairs:
                sharding, loss = pair.split(":")
                run_trainer(f"{out}/{sharding}-{loss}", model_dir, sharding, loss)
        finally:
            if owned:
                torch.distributed.destroy_process_group()
    elif mode == "loop":  # one process group for every run, as `societas train` does for its seeds
        model, sharding, *runs = args
        env, owned = init_from_env("cpu")
        try:
            for run in runs:
                out, steps, how = run.rsplit(":", 2)
                run_loop(out, model, int(steps), how == "resume", sharding)
        finally:
            if owned:
                torch.distributed.destroy_process_group()
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
