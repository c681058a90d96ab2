"""The batched torch MPE tasks against mpe2 itself (state copied in, identical
actions replayed, observations and rewards compared every step), the
auto-reset contract, seeding, and the PettingZoo adapters both ways
(``parallel_api_test``; mpe2 envs through the batched contract)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from mpe2 import simple_reference_v3, simple_speaker_listener_v4
from pettingzoo.test import parallel_api_test

from societas.marl.comm.envs import (
    BatchedMultiAgentEnv,
    BatchedParallelEnv,
    PettingZooBatchedEnv,
    ReferenceEnv,
    SpeakerListenerEnv,
    make_env,
)

TASKS = {
    "speaker_listener": (SpeakerListenerEnv, simple_speaker_listener_v4),
    "reference": (ReferenceEnv, simple_reference_v3),
}
OBS_SIZES = {
    "speaker_listener": {"speaker_0": 3, "listener_0": 11},
    "reference": {"agent_0": 21, "agent_1": 21},
}
ACTION_SIZES = {
    "speaker_listener": {"speaker_0": 3, "listener_0": 5},
    "reference": {"agent_0": 50, "agent_1": 50},
}

# mpe2 observations are float64 computations cast to float32; ours run in
# float64, so after the same cast they must agree to float32 rounding.
OBS_ATOL = 1e-6
REW_ATOL = 1e-12


def _mpe_rows(obs: dict[str, torch.Tensor], row: int) -> dict[str, np.ndarray]:
    return {a: obs[a][row].numpy().astype(np.float32) for a in obs}


def _assert_obs(
    ours: dict[str, np.ndarray], ref: dict[str, np.ndarray], where: str, atol: float = OBS_ATOL
) -> None:
    assert set(ours) == set(ref)
    for a, expected in ref.items():
        assert ours[a].shape == expected.shape, where
        np.testing.assert_allclose(ours[a], expected, rtol=0, atol=atol, err_msg=f"{where} {a}")


@pytest.mark.parametrize("task", list(TASKS))
def test_contract_shapes_and_state(task):
    env = make_env(task, num_envs=5, device="cpu", seed=3)
    assert isinstance(env, BatchedMultiAgentEnv)
    assert env.name == task and env.num_envs == 5 and env.max_cycles == 25
    assert env.dtype == torch.float32 and env.device == torch.device("cpu")
    assert env.observation_sizes == OBS_SIZES[task]
    assert env.action_sizes == ACTION_SIZES[task]
    assert env.state_size == sum(OBS_SIZES[task].values())
    obs = env.reset(seed=1)
    assert list(obs) == env.agents
    for a in env.agents:
        assert obs[a].shape == (5, env.observation_sizes[a]) and obs[a].dtype == torch.float32
    torch.testing.assert_close(env.state(), torch.cat([obs[a] for a in env.agents], 1))
    # actions of another integer dtype are accepted
    acts = {a: torch.randint(env.action_sizes[a], (5,), dtype=torch.int32) for a in env.agents}
    obs, rew, term, trunc, info = env.step(acts)
    for a in env.agents:
        assert rew[a].shape == (5,) and rew[a].dtype == torch.float32
        torch.testing.assert_close(info["final_observation"][a], obs[a])
    assert term.dtype == torch.bool and trunc.dtype == torch.bool and not term.any()
    assert not trunc.any()
    torch.testing.assert_close(env.state(), torch.cat([obs[a] for a in env.agents], 1))
    torch.testing.assert_close(info["final_state"], env.state())


def test_make_env_unknown_name():
    with pytest.raises(ValueError, match="known envs: reference, speaker_listener"):
        make_env("simple_spread")


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("seeds", [(0, 1, 2), (17, 123, 9999)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_parity_with_mpe2(task, seeds, dtype):
    """mpe2 episodes copied into rows 0, 2, 3 of a B=4 batch, replayed with the
    same random actions for a whole episode: same observations and rewards at
    every step, truncation at the same step, then auto-reset. In float64 the
    observations agree to float32 rounding (mpe2 casts them to float32) and
    the rewards to 1e-12; the float32 default agrees to 1e-5."""
    obs_atol, rew_atol = (OBS_ATOL, REW_ATOL) if dtype == torch.float64 else (1e-5, 1e-5)
    cls, mod = TASKS[task]
    rows = [0, 2, 3]
    env = cls(num_envs=4, device="cpu", seed=5, dtype=dtype)
    env.reset()
    refs = [mod.parallel_env(max_cycles=25) for _ in rows]
    first = [ref.reset(seed=s)[0] for ref, s in zip(refs, seeds)]
    for ref, row in zip(refs, rows):
        env.load_mpe_state(row, ref)
    obs = env.observations()
    for row, ob in zip(rows, first):
        _assert_obs(_mpe_rows(obs, row), ob, f"reset row {row}", obs_atol)
        np.testing.assert_allclose(
            env.state()[row].numpy().astype(np.float32),
            np.concatenate([ob[a] for a in env.agents]),
            atol=obs_atol,
        )
    rng = np.random.default_rng(seeds[0])
    for t in range(25):
        acts = {a: torch.as_tensor(rng.integers(env.action_sizes[a], size=4)) for a in env.agents}
        obs, rew, term, trunc, info = env.step(acts)
        for ref, row in zip(refs, rows):
            r_obs, r_rew, r_term, r_trunc, _ = ref.step({a: int(acts[a][row]) for a in env.agents})
            _assert_obs(_mpe_rows(info["final_observation"], row), r_obs, f"step {t} row {row}", obs_atol)
            for a in env.agents:
                assert abs(float(rew[a][row]) - r_rew[a]) <= rew_atol, (t, row, a)
                assert bool(trunc[row]) == r_trunc[a] and bool(term[row]) == r_term[a]
    assert trunc.all() and not ref.agents
    assert (env.steps == 0).all()
    # rows were reset: the new first observations are not the final ones
    assert not torch.equal(obs[env.agents[-1]], info["final_observation"][env.agents[-1]])


@pytest.mark.parametrize("task", list(TASKS))
def test_partial_auto_reset(task):
    """A row loaded mid-episode ends first; only that row is reset."""
    cls, mod = TASKS[task]
    env = cls(num_envs=3, device="cpu", seed=0, dtype=torch.float64)
    ref = mod.parallel_env()
    ref.reset(seed=4)
    for _ in range(20):
        ref.step(dict.fromkeys(ref.agents, 0))
    env.load_mpe_state(1, ref)
    assert env.steps.tolist() == [0, 20, 0]
    for _ in range(5):
        obs, _, _, trunc, info = env.step(env.sample_actions())
    assert trunc.tolist() == [False, True, False]
    assert env.steps.tolist() == [5, 0, 5]
    last = env.agents[-1]
    torch.testing.assert_close(info["final_observation"][last][[0, 2]], obs[last][[0, 2]])
    assert not torch.equal(info["final_observation"][last][1], obs[last][1])
    # the fresh row starts from rest with silent channels
    fresh = env._s
    assert torch.all(fresh["vel"][..., 1] == 0) and torch.all(fresh["comm"][..., 1] == 0)
    for _ in range(20):
        obs, _, _, trunc, info = env.step(env.sample_actions())
    assert trunc.tolist() == [True, False, True]


@pytest.mark.parametrize("task", list(TASKS))
def test_the_host_side_end_flags_say_what_the_tensors_say(task):
    """``info["any_truncated"]`` / ``["any_terminated"]`` (what a trainer reads instead of the
    tensors) at every step, with rows whose episodes end at different steps."""
    cls, mod = TASKS[task]
    env = cls(num_envs=3, device="cpu", seed=0)
    ref = mod.parallel_env()
    ref.reset(seed=4)
    for _ in range(7):
        ref.step(dict.fromkeys(ref.agents, 0))
    env.load_mpe_state(1, ref)
    seen = []
    for _ in range(80):
        _, _, term, trunc, info = env.step(env.sample_actions())
        assert info["any_terminated"] is bool(term.any()) is False
        assert info["any_truncated"] is bool(trunc.any())
        seen.append(info["any_truncated"])
    assert sum(seen) == 6  # rows 0 and 2 end at steps 25, 50, 75; row 1 at 18, 43, 68


@pytest.mark.parametrize("task", list(TASKS))
def test_initial_state_distribution(task):
    """Fresh episodes: goals uniform over the 3 landmarks, positions in [-1, 1]^2,
    zero velocity and comm, goal colours equal to mpe2's landmark colours."""
    cls, mod = TASKS[task]
    env = cls(num_envs=6000, device="cpu", seed=11)
    env.reset()
    s = env._s
    world = mod.parallel_env().unwrapped.world
    colours = torch.tensor(np.stack([lm.color for lm in world.landmarks]), dtype=torch.float32)
    goal = s["goal"].reshape(-1)
    freq = torch.bincount(goal, minlength=3).float() / goal.numel()
    assert torch.all((freq - 1 / 3).abs() < 0.03), freq
    for key in ("pos", "landmarks"):
        assert s[key].abs().max() <= 1.0 and s[key].abs().max() > 0.99
        assert abs(float(s[key].mean())) < 0.03
    assert torch.all(s["vel"] == 0) and torch.all(s["comm"] == 0)
    gc = s["goal_colour"]  # [..., 3, B]
    torch.testing.assert_close(gc.movedim(-2, -1), colours[s["goal"]])
    pos = s["landmarks"]  # [3, 2, B]
    gp = s["goal_pos"]
    if task == "speaker_listener":
        torch.testing.assert_close(gp, pos[s["goal"], :, torch.arange(6000)].T)
    else:
        for i in range(2):
            torch.testing.assert_close(gp[i], pos[s["goal"][i], :, torch.arange(6000)].T)


@pytest.mark.parametrize("task", list(TASKS))
def test_seeding(task):
    def rollout(seed):
        env = make_env(task, num_envs=4, device="cpu", seed=seed)
        out = [env.reset()[env.agents[-1]]]
        gen = torch.Generator().manual_seed(0)
        for _ in range(30):
            out.append(env.step(env.sample_actions(gen))[0][env.agents[-1]])
        return torch.stack(out)

    torch.testing.assert_close(rollout(3), rollout(3), rtol=0, atol=0)
    assert not torch.equal(rollout(3), rollout(4))
    env = make_env(task, num_envs=4, device="cpu", seed=0)
    a = env.reset(seed=8)[env.agents[-1]].clone()
    env.step(env.sample_actions())
    torch.testing.assert_close(env.reset(seed=8)[env.agents[-1]], a, rtol=0, atol=0)


def test_load_mpe_state_checks_row():
    env = SpeakerListenerEnv(num_envs=2, device="cpu")
    ref = simple_speaker_listener_v4.parallel_env()
    ref.reset(seed=0)
    with pytest.raises(IndexError, match=r"row 2 out of range for num_envs=2"):
        env.load_mpe_state(2, ref)


@pytest.mark.parametrize("task", list(TASKS))
def test_batched_parallel_env_passes_pettingzoo_api_test(task):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parallel_api_test(BatchedParallelEnv(task, num_envs=3, row=1), num_cycles=60)
    view = BatchedParallelEnv(task, num_envs=1)
    obs, _ = view.reset(seed=2)
    assert all(o.dtype == np.float32 for o in obs.values())
    assert view.state().shape == (view.env.state_size,)
    steps = 0
    while view.agents:
        obs, _, _, trunc, _ = view.step({a: view.action_space(a).sample() for a in view.agents})
        steps += 1
    assert steps == 25 and all(trunc.values())
    with pytest.raises(RuntimeError, match=r"step\(\) called after the episode ended; call reset\(\) first"):
        view.step(dict.fromkeys(view.possible_agents, 0))


@pytest.mark.parametrize("task", list(TASKS))
def test_pettingzoo_batched_env_runs_mpe2_and_matches_torch_env(task):
    """mpe2 through the batched contract (B copies in a loop); each copy's world
    is copied into the torch env and both are stepped with the same actions."""
    cls, mod = TASKS[task]
    pz = PettingZooBatchedEnv(mod.parallel_env, num_envs=3, device="cpu", seed=7, dtype=torch.float64)
    assert pz.agents == list(OBS_SIZES[task]) and pz.max_cycles == 25
    assert pz.observation_sizes == OBS_SIZES[task] and pz.action_sizes == ACTION_SIZES[task]
    obs_pz = pz.reset()
    ours = cls(num_envs=3, device="cpu", dtype=torch.float64)
    for i, e in enumerate(pz.envs):
        ours.load_mpe_state(i, e)
    for a in pz.agents:
        np.testing.assert_allclose(ours.observations()[a].numpy(), obs_pz[a].numpy(), atol=OBS_ATOL)
    gen = torch.Generator().manual_seed(1)
    for _ in range(25):
        acts = pz.sample_actions(gen)
        o1, r1, te1, tr1, i1 = pz.step(acts)
        _, r2, te2, tr2, i2 = ours.step(acts)
        for a in pz.agents:
            np.testing.assert_allclose(
                i2["final_observation"][a].numpy(), i1["final_observation"][a].numpy(), atol=OBS_ATOL
            )
            np.testing.assert_allclose(r2[a].numpy(), r1[a].numpy(), atol=1e-6)
        assert torch.equal(tr1, tr2) and torch.equal(te1, te2)
    assert tr1.all()
    torch.testing.assert_close(pz.state(), torch.cat([o1[a] for a in pz.agents], 1))
    torch.testing.assert_close(
        i1["final_state"], torch.cat([i1["final_observation"][a] for a in pz.agents], 1)
    )
    # auto-reset happened: a fresh episode from zero velocity
    last = pz.agents[-1]
    assert torch.all(o1[last][:, :2] == 0)
    o, *_ = pz.step(pz.sample_actions(gen))  # and it keeps going
    assert o[last].shape == (3, OBS_SIZES[task][last])
    pz.close()


def test_pettingzoo_batched_env_rejects_continuous_actions():
    with pytest.raises(ValueError, match="Discrete"):
        PettingZooBatchedEnv(lambda: simple_reference_v3.parallel_env(continuous_actions=True), num_envs=1)


def test_speed_benchmark_smoke(capsys):
    """The benchmark script runs and ends with its JSON line (speed is not asserted)."""
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "marl_env_speed.py"
    spec = importlib.util.spec_from_file_location("marl_env_speed", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    threads = torch.get_num_threads()
    try:
        out = mod.main(
            ["--device", "cpu", "--sizes", "1,4", "--seconds", "0.01", "--repeats", "1", "--no-vmas"]
        )
    finally:
        torch.set_num_threads(threads)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last) == out
    assert set(out["torch"]) == {"1", "4"} and out["mpe2"] > 0
