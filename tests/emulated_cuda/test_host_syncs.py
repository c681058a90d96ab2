"""Where the host waits for the GPU. A value read back from the device (``.item()``,
``bool()``, a copy either way, an output sized by the data) stops the host until
the device has done everything queued before it; in a loop of small kernels that
leaves the GPU idle between launches. The emulation records each such point with
the package line that made it, and these tests hold the hot loops to none: a CFR
iteration of every variant, exact evaluation, the batched MPE environments between
episode ends, and a MAPPO rollout and update (one each, to read their statistics);
a GRPO step reads it once per forward pass and once per epoch."""

from __future__ import annotations

import copy

import pytest
import torch

from societas.marl.comm import MAPPO, MAPPOConfig, comm_names
from societas.marl.comm.envs import ReferenceEnv, SpeakerListenerEnv
from societas.marl.games import CFRSolver, algorithm_names, evaluate, load_game
from societas.marl.llm.rollouts import TokenSample
from societas.marl.llm.trainer import GRPOConfig, PolicyTrainer
from tests.cuda_emulation import emulated_cuda


def test_the_emulation_records_what_makes_the_host_wait():
    with emulated_cuda() as emu:
        x = torch.ones(3, device="cuda")
        y = x * 2 + torch.full((), 3.0, device="cuda")  # kernels only
        assert emu.syncs == []
        waits = {
            "item": lambda: y.sum().item(),
            "bool": lambda: bool(y.any()),
            "tolist": lambda: y.tolist(),
            "to the host": lambda: y.cpu(),
            "from the host": lambda: torch.tensor([1.0, 2.0], device="cuda"),
            "boolean mask": lambda: y[y > 4],
            "nonzero": lambda: y.nonzero(),
        }
        for what, op in waits.items():
            before = len(emu.syncs)
            op()
            assert len(emu.syncs) > before, what
        with torch.inference_mode():  # where torch hands over item() and bool() undecomposed
            before = len(emu.syncs)
            bool(y.any())
            y.sum().item()
            assert len(emu.syncs) == before + 2


@pytest.mark.parametrize("game", ["leduc_poker", "kuhn_poker(players=3)"])
def test_a_cfr_iteration_never_makes_the_host_wait(game):
    with emulated_cuda():
        tree = load_game(game, "cuda")
    for algo in algorithm_names():
        for alternating in (True, False):
            for batch in (1, 3):
                with emulated_cuda() as emu:
                    solver = CFRSolver(tree, algo, batch=batch, alternating=alternating, device="cuda")
                    solver.step()  # the first iteration builds the plans
                    start = len(emu.syncs)
                    for _ in range(2):
                        solver.step()
                assert emu.syncs[start:] == [], (algo, alternating, batch, emu.syncs[start:][:3])


def test_exact_evaluation_never_makes_the_host_wait():
    with emulated_cuda() as emu:
        tree = load_game("leduc_poker(players=3)", "cuda")
        policy = torch.ones(2, tree.num_infosets, tree.max_actions, dtype=tree.dtype, device="cuda")
        evaluate(tree, policy)  # the first call builds the plan
        start = len(emu.syncs)
        ev = evaluate(tree, policy)
        assert emu.syncs[start:] == []
        assert ev.nash_conv.shape == (2,)


@pytest.mark.parametrize("cls", [SpeakerListenerEnv, ReferenceEnv])
def test_the_environments_read_the_device_only_when_an_episode_ends(cls):
    with emulated_cuda() as emu:
        env = cls(num_envs=32, device="cuda", seed=0)
        env.reset()
        gen = torch.Generator(device="cuda").manual_seed(0)
        per_step = []
        for _ in range(2 * env.max_cycles):
            before = len(emu.syncs)
            env.step(
                {
                    a: torch.randint(n, (32,), generator=gen, device="cuda")
                    for a, n in env.action_sizes.items()
                }
            )
            per_step.append(len(emu.syncs) - before)
    ends = [t for t in range(len(per_step)) if (t + 1) % env.max_cycles == 0]
    assert [t for t, n in enumerate(per_step) if n] == ends
    assert all(per_step[t] <= 2 for t in ends)


@pytest.mark.parametrize("comm", comm_names())
def test_a_mappo_rollout_and_update_each_read_the_device_once(comm):
    cfg = MAPPOConfig(comm=comm, num_envs=32, rollout_steps=10, device="cuda", total_steps=10**6)
    with emulated_cuda() as emu:
        algo = MAPPO(cfg)
        start = len(emu.syncs)
        roll, _ = algo.collect()  # ten steps, no episode end (25 steps)
        collected = len(emu.syncs)
        metrics = algo.update(roll)  # 5 epochs of 4 minibatches
    assert len(emu.syncs[start:collected]) == 1, emu.syncs[start:collected]
    assert len(emu.syncs[collected:]) == 1, emu.syncs[collected:]
    assert all(isinstance(v, float) for v in metrics.values())


def _grpo_samples(vocab: int, recorded: bool) -> list[TokenSample]:
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(8):
        prompt = torch.randint(3, vocab, (3 + i % 3,), generator=g).tolist()
        completion = torch.randint(3, vocab, (2 + i % 4,), generator=g).tolist()
        lp = [-1.0] * len(completion) if recorded else None
        out.append(TokenSample("p", prompt, completion, [1] * len(completion), lp, str(i // 4)))
    return out


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "recomputed"])
def test_a_grpo_step_waits_only_in_the_models_mask_check_and_once_an_epoch(tiny_llm, recorded):
    """The batch goes to the device once, at the start; then the only waits are transformers'
    own check of the attention mask inside each forward pass (whether it may skip the mask:
    one or two reads) and one read of the epoch's loss, metrics and gradient norm. The token
    counts that weight the micro-batches come from the host's copy of the mask."""
    samples = _grpo_samples(1000, recorded)
    rewards = torch.linspace(0.0, 1.0, 8)
    epochs, micro = 2, 2
    for loss_type in ("grpo", "bnpo"):
        cfg = GRPOConfig(loss_type=loss_type, epochs=epochs, grad_accum_steps=micro, micro_batch_tokens=None)
        with emulated_cuda() as emu:
            trainer = PolicyTrainer(copy.deepcopy(tiny_llm.model).cuda(), tiny_llm.tokenizer, cfg)
            start = len(emu.syncs)
            trainer.step(samples, rewards)
            syncs = emu.syncs[start:]
            sft_start = len(emu.syncs)
            trainer.sft_step(samples)
            sft = emu.syncs[sft_start:]
        forwards = micro * (epochs + (0 if recorded else 1))
        copies = [k for k, s in enumerate(syncs) if s.what == "a copy from the host"]
        reads = [s for s in syncs if s.what != "a copy from the host"]
        assert copies == list(range(len(copies))), syncs  # all of them first
        assert all(s.where.startswith("marl/llm/trainer.py") for s in syncs[: len(copies)])
        in_forward = [s for s in reads if s.where.startswith("marl/llm/rollouts.py")]
        assert forwards <= len(in_forward) <= 2 * forwards, reads
        assert [s.what for s in reads if s not in in_forward] == ["tolist"] * epochs, reads
        sft_reads = [s for s in sft if s.what != "a copy from the host"]
        sft_forward = [s for s in sft_reads if s.where.startswith("marl/llm/rollouts.py")]
        assert [s.what for s in sft_reads if s not in sft_forward] == ["tolist"]
        assert micro <= len(sft_forward) <= 2 * micro
