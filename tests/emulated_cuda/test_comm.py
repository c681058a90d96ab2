"""Communication MARL on the device: MAPPO/IPPO with every communication module
(feed-forward and recurrent), both batched environments, checkpoints and
evaluation give the CPU's numbers."""

from __future__ import annotations

import dataclasses

import pytest

from societas.marl.comm import comm_names, evaluate, load_policy, train_comm
from tests.cuda_emulation import emulated_cuda

SAME = ("env_steps", "updates", "final_return", "eval_return_mean", "eval_return_std", "messages_per_step")


def _train(tmp_path, name, device, **kw):
    cfg = dict(
        total_steps=16 * 8 * 3,
        num_envs=16,
        rollout_steps=8,
        update_epochs=2,
        num_minibatches=2,
        seed=3,
        device=device,
        **kw,
    )
    res = train_comm(
        cfg, tmp_path / name, progress=False, eval_episodes=4, checkpoint_every=2, tensorboard=False
    )
    return dataclasses.asdict(res)


@pytest.mark.parametrize(
    "env,comm,algo,recurrent",
    [("speaker_listener", c, "mappo", False) for c in comm_names()]
    + [("speaker_listener", "ic3net", "ippo", True), ("reference", "tarmac", "mappo", True)],
)
def test_training_on_the_device_equals_the_cpu(tmp_path, env, comm, algo, recurrent):
    kw = {"env": env, "comm": comm, "algo": algo, "recurrent": recurrent}
    ref = _train(tmp_path, "cpu", "cpu", **kw)
    with emulated_cuda():
        got = _train(tmp_path, "cuda", "cuda", **kw)
    assert {k: got[k] for k in SAME} == {k: ref[k] for k in SAME}


def test_a_checkpoint_written_on_the_device_evaluates_on_the_cpu(tmp_path):
    kw = {"env": "speaker_listener", "comm": "tarmac"}
    _train(tmp_path, "cpu", "cpu", **kw)
    with emulated_cuda():
        _train(tmp_path, "cuda", "cuda", **kw)
        on_device = evaluate(load_policy(tmp_path / "cuda"), episodes=4)
    on_cpu = evaluate(load_policy(tmp_path / "cuda", device="cpu"), episodes=4)
    assert on_cpu == on_device == evaluate(load_policy(tmp_path / "cpu", device="cpu"), episodes=4)
