"""RoutingMARLEnv (societas.marl.routing.marl_env): the BatchedMultiAgentEnv contract, exact agreement
with RoutingEnv.evaluate when replaying edge sets, and MAPPO learning per-agent routing policies."""

from __future__ import annotations

import pytest
import torch

from societas.marl.comm.mappo import MAPPO, MAPPOConfig
from societas.marl.routing.env import RoutingEnv, RoutingEnvConfig
from societas.marl.routing.marl_env import NOBODY, RoutingMARLEnv

torch.set_num_threads(1)

# 3 keepers, 2 experts, the answerer; three task types of two facts each.
SMALL = {"n_agents": 6, "n_types": 3, "facts_per_task": 2}


@pytest.fixture(scope="module")
def routing() -> RoutingEnv:
    return RoutingEnv(RoutingEnvConfig(**SMALL), device="cpu")


def _nobody(env: RoutingMARLEnv) -> dict[str, torch.Tensor]:
    return {a: torch.full((env.num_envs,), NOBODY, dtype=torch.long) for a in env.agents}


def _optimal_adjacency(routing: RoutingEnv, tasks) -> torch.Tensor:
    """Per task: each fact keeper -> the type's expert -> the answerer (K + 1 messages)."""
    n = routing.n_agents
    adj = torch.zeros(len(tasks), n, n, dtype=torch.bool)
    for b, t in enumerate(tasks.type.tolist()):
        e = int(routing.profile.expert[t])
        for h in routing.profile.holder[t].tolist():
            adj[b, h, e] = True
        adj[b, e, routing.sink] = True
    return adj


# ----------------------------------------------------------------- contract --


def test_contract_shapes_and_sizes(routing: RoutingEnv) -> None:
    env = RoutingMARLEnv(routing, num_envs=7, rounds=2, device="cpu", seed=0)
    n, k, t = routing.n_agents, routing.config.facts_per_task, routing.n_types
    assert env.agents == list(routing.profile.names) and env.num_agents == n
    assert env.max_cycles == (n - 1) * 2
    assert all(s == k + 1 + t + 1 + 4 * n + 2 for s in env.observation_sizes.values())
    assert all(a == n + 1 for a in env.action_sizes.values())
    assert env.state_size == n * env.obs_size
    obs = env.reset(seed=3)
    assert set(obs) == set(env.agents)
    assert all(o.shape == (7, env.obs_size) and o.dtype == torch.float32 for o in obs.values())
    assert env.state().shape == (7, env.state_size)
    assert torch.equal(env.state(), torch.cat([obs[a] for a in env.agents], -1))
    # Fact keepers know their facts at the start; nobody else knows anything.
    for b in range(7):
        for kk, h in enumerate(env.tasks.holder[b].tolist()):
            assert obs[env.agents[h]][b, kk] == 1.0
    know = torch.stack([obs[a][:, :k] for a in env.agents], 1)
    assert int(know.sum()) == 7 * k
    _, rew, term, trunc, info = env.step(env.sample_actions(torch.Generator().manual_seed(0)))
    assert all(r.shape == (7,) for r in rew.values())
    assert term.shape == trunc.shape == (7,) and term.dtype == trunc.dtype == torch.bool
    assert set(info["final_observation"]) == set(env.agents)
    # Same seed, same tasks.
    a = env.reset(seed=11)
    first_uid = env.tasks.uid.clone()
    env.reset(seed=11)
    assert torch.equal(env.tasks.uid, first_uid)
    assert all(torch.equal(a[x], env.observations()[x]) for x in env.agents)


def test_episode_end_auto_reset_and_final_observation(routing: RoutingEnv) -> None:
    env = RoutingMARLEnv(routing, num_envs=5, rounds=2, device="cpu", seed=0)
    env.reset(seed=1)
    uid0 = env.tasks.uid.clone()
    g = torch.Generator().manual_seed(1)
    for step in range(env.max_cycles):
        nobs, _, term, trunc, info = env.step(env.sample_actions(g))
        assert not bool(trunc.any())
        if step < env.max_cycles - 1:
            assert not bool(term.any())
            assert all(torch.equal(info["final_observation"][a], nobs[a]) for a in env.agents)
            assert "outcome" not in info
    assert bool(term.all())
    assert not torch.equal(env.tasks.uid, uid0)  # fresh tasks
    fo, fs = info["final_observation"], info["final_state"]
    assert torch.equal(fs, torch.cat([fo[a] for a in env.agents], -1))
    # The fresh observation: agent 0's turn, slot 0; the final one: nobody's turn.
    n, k, t = env.n_agents, routing.config.facts_per_task, routing.n_types
    turn_at = k + 1 + t + 1 + n  # offset of the "whose turn" one-hot
    for a in env.agents:
        assert nobs[a][:, turn_at].eq(1).all() and nobs[a][:, turn_at : turn_at + n].sum(-1).eq(1).all()
        assert fo[a][:, turn_at : turn_at + n + env.rounds].eq(0).all()
    assert torch.equal(env.state(), torch.cat([nobs[a] for a in env.agents], -1))
    # The ended episode's outcome matches the rewards: success - cost * messages.
    out = info["outcome"]
    assert torch.equal(out.messages, info["adjacency"].sum((1, 2)).float())
    assert torch.allclose(out.reward, out.success - routing.config.cost_per_message * out.messages)


def test_invalid_and_repeated_choices_cost_nothing(routing: RoutingEnv) -> None:
    env = RoutingMARLEnv(routing, num_envs=4, rounds=3, device="cpu", seed=0)
    env.reset(seed=0)
    cost = routing.config.cost_per_message
    n = env.n_agents
    # Agent 0's turn. Actions of everyone else are ignored.
    acts = {a: torch.full((4,), 3, dtype=torch.long) for a in env.agents}
    acts[env.agents[0]] = torch.tensor([NOBODY, 1, n + 1, -2])  # nobody, itself, out of range, negative
    _, rew, *_ = env.step(acts)
    assert torch.equal(rew[env.agents[0]], torch.zeros(4))
    assert not bool(env.adjacency().any())
    # Agent 0 messages agent 2 twice: one message, one cost.
    acts[env.agents[0]] = torch.full((4,), 3)
    _, rew, *_ = env.step(acts)
    assert torch.allclose(rew[env.agents[-1]], torch.full((4,), -cost))
    assert all(torch.equal(r, rew[env.agents[0]]) for r in rew.values())  # shared reward
    _, rew, *_ = env.step(acts)
    assert torch.equal(rew[env.agents[0]], torch.zeros(4))
    assert env.turn == 1 and env.slot == 0
    # Agent 1 tries to message agent 0 (earlier): nobody, no cost.
    acts[env.agents[1]] = torch.full((4,), 1)
    _, rew, *_ = env.step(acts)
    assert torch.equal(rew[env.agents[0]], torch.zeros(4))
    assert int(env.adjacency().sum()) == 4  # only 0 -> 2 in each row
    # Agent 2 received agent 0's facts when agent 0's turn ended.
    k = routing.config.facts_per_task
    obs2 = env.observations()[env.agents[2]]
    held0 = env.tasks.holder == 0  # [B, K]
    assert torch.equal(obs2[:, :k].bool() | ~held0, torch.ones(4, k, dtype=torch.bool))
    received = obs2[:, -n:]
    assert torch.equal(received[:, 0], torch.ones(4)) and received[:, 1:].sum() == 0


def test_schedule_needs_enough_rounds(routing: RoutingEnv) -> None:
    env = RoutingMARLEnv(routing, num_envs=2, rounds=2, device="cpu")
    with pytest.raises(ValueError, match="rounds=2"):
        env.schedule(routing.full_adjacency())
    with pytest.raises(ValueError, match="not a candidate"):
        env.schedule(routing.full_adjacency().T)


# -------------------------------------------------------------- consistency --


@pytest.mark.parametrize("which", ["full", "optimal", "random", "chains"])
def test_replaying_an_edge_set_matches_evaluate(routing: RoutingEnv, which: str) -> None:
    b, n = 300, routing.n_agents
    tasks = routing.sample_tasks(b, generator=42)
    gen = torch.Generator().manual_seed(5)
    if which == "full":
        adj = routing.full_adjacency().expand(b, n, n).clone()
    elif which == "optimal":
        adj = _optimal_adjacency(routing, tasks)
    elif which == "random":
        adj = routing.random_adjacency(torch.randint(0, routing.n_candidates + 1, (b,), generator=gen), gen)
    else:  # facts relayed keeper -> keeper -> ... : only right if messages carry everything the sender knows
        adj = torch.zeros(b, n, n, dtype=torch.bool)
        for r in range(b):
            order = sorted(
                torch.randperm(n - 1, generator=gen)[: int(torch.randint(2, n, (1,), generator=gen))].tolist()
            )
            for i, j in zip(order, order[1:] + [n - 1]):
                adj[r, i, j] = True
    ref = routing.evaluate(adj, tasks)
    env = RoutingMARLEnv(routing, num_envs=b, rounds=n - 1, device="cpu", seed=0)
    env.reset(tasks=tasks)
    ret = torch.zeros(b)
    steps = env.schedule(adj)
    assert len(steps) == env.max_cycles
    for acts in steps:
        _, rew, term, _, info = env.step(acts)
        ret += rew[env.agents[0]]
    assert bool(term.all())
    out = info["outcome"]
    assert torch.equal(info["adjacency"], adj)
    assert torch.equal(out.success, ref.success)
    assert torch.equal(out.messages, ref.messages)
    assert torch.allclose(ret, ref.reward, atol=1e-5)
    assert torch.allclose(out.reward, ref.reward)
    if which == "optimal":
        assert float(ref.success.mean()) > 0.95 and bool(
            (ref.messages == routing.config.facts_per_task + 1).all()
        )
    if which in ("random", "chains"):  # a mix of outcomes, so the comparison means something
        assert 0.05 < float(ref.success.mean()) < 0.95


def test_run_episode_with_a_schedule_policy(routing: RoutingEnv) -> None:
    """run_episode + a policy replaying the optimal edges, with only 1 round per turn."""
    b = 64
    tasks = routing.sample_tasks(b, split="test", generator=3)
    adj = _optimal_adjacency(routing, tasks)
    env = RoutingMARLEnv(routing, num_envs=b, rounds=1, split="test", device="cpu")
    steps = iter(env.schedule(adj))
    out, sent = env.run_episode(lambda obs: next(steps), tasks=tasks)
    ref = routing.evaluate(adj, tasks)
    assert (
        torch.equal(sent, adj)
        and torch.equal(out.success, ref.success)
        and torch.equal(out.messages, ref.messages)
    )
    assert bool((env.tasks.uid % 2 == 1).all())  # the test split after the auto-reset


# ----------------------------------------------------------------- learning --


def test_mappo_learns_cheap_reliable_routing(routing: RoutingEnv) -> None:
    """MAPPO with a shared actor learns, per agent, whom to message: success near the fully
    connected DAG's at a fraction of its messages, far above the random policy.

    Measured (seed 0, 80 updates, ~8 s): trained success 1.00, 3.8 messages, reward 0.924;
    random policy success 0.07, 4.0 messages, reward -0.01; fully connected success 1.00, 15 messages,
    reward 0.70; the hand-made optimum (keepers -> expert -> answerer) 3 messages, reward 0.94.
    """
    b_eval = 1000
    tasks = routing.sample_tasks(b_eval, split="test", generator=7)
    full = routing.evaluate(routing.full_adjacency(), tasks)
    ev = RoutingMARLEnv(routing, num_envs=b_eval, rounds=2, split="test", device="cpu", seed=1)
    rand, _ = ev.run_episode(ev.random_policy(torch.Generator().manual_seed(0)), tasks=tasks)

    env = RoutingMARLEnv(routing, num_envs=64, rounds=2, device="cpu", seed=0)
    cfg = MAPPOConfig(
        algo="mappo",
        num_envs=64,
        rollout_steps=2 * env.max_cycles,
        lr=3e-3,
        critic_lr=3e-3,
        gamma=1.0,
        update_epochs=4,
        num_minibatches=2,
        device="cpu",
        seed=0,
    )
    algo = MAPPO(cfg, env=env)
    history = algo.learn(80)
    trained, sent = ev.run_episode(lambda obs: algo.act(obs)[0], tasks=tasks)
    t, r, f = trained.summary(), rand.summary(), full.summary()
    # the training episodes' return (sampled actions) has also left the random policy's far behind
    final_return = history[-1]["mean_episode_return"]
    assert final_return is not None and final_return >= r["reward"] + 0.5
    assert r["success"] < 0.2 and f["success"] > 0.99
    assert t["success"] >= f["success"] - 0.05
    assert t["messages"] <= 0.5 * f["messages"]
    assert t["reward"] >= f["reward"] + 0.1
    assert t["reward"] >= r["reward"] + 0.7
    # The learned messages are edges of the DAG and cost what the outcome says.
    assert not bool((sent & ~routing.candidates).any())
    assert torch.equal(trained.messages, sent.sum((1, 2)).float())
