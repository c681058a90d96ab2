"""Learned routing (societas.marl.routing): the environment against hand computations, the
torch path against societas.topology.Runtime, REINFORCE's gradient, GPTSwarm and G-Designer
learning small instances, run directories, determinism, config errors and the CLI."""

from __future__ import annotations

import json

import pytest
import torch
import typer
from typer.testing import CliRunner

from societas.agents import FunctionLLM
from societas.marl.routing import (
    GATLayer,
    GCNLayer,
    GDesignerConfig,
    GDesignerRouter,
    GPTSwarmRouter,
    MovingAverageBaseline,
    RoutingConfigError,
    RoutingEnv,
    RoutingEnvConfig,
    RoutingTrainConfig,
    normalized_adjacency,
    reinforce_update,
    run_runtime,
    skill_agents_llm,
    train_routing,
    unit_draw,
)
from societas.marl.routing.cli import app as train_app
from societas.topology import Graph, Runtime

torch.set_num_threads(1)

# 2 keepers, 1 expert (the only one who can solve), the answerer; one task type needing facts A and B.
TINY = {
    "n_agents": 4,
    "n_types": 1,
    "facts_per_task": 2,
    "expert_skill": 1.0,
    "novice_skill": 0.0,
    "cost_per_message": 0.05,
}
# 2 keepers, 2 experts, the answerer; two task types whose facts and experts differ.
SMALL = {"n_agents": 5, "n_types": 2, "facts_per_task": 1}


def _adj(n: int, edges: list[tuple[int, int]]) -> torch.Tensor:
    a = torch.zeros(n, n, dtype=torch.bool)
    for i, j in edges:
        a[i, j] = True
    return a


@pytest.fixture(scope="module")
def tiny_env() -> RoutingEnv:
    return RoutingEnv(RoutingEnvConfig(**TINY), device="cpu")


@pytest.fixture(scope="module")
def small_env() -> RoutingEnv:
    return RoutingEnv(RoutingEnvConfig(**SMALL), device="cpu")


# ---------------------------------------------------------------- environment --


def test_tiny_env_profile_is_what_the_hand_computations_assume(tiny_env):
    p = tiny_env.profile
    assert p.names == ("keeper_1", "keeper_2", "expert_1", "answerer")
    assert sorted(p.holder[0].tolist()) == [0, 1]
    assert p.skill[:, 0].tolist() == [0.0, 0.0, 1.0, 0.0]


def test_chain_delivering_the_facts_succeeds_and_costs_exactly_its_messages(tiny_env):
    tasks = tiny_env.sample_tasks(16, generator=0)
    chain = _adj(4, [(0, 1), (1, 2), (2, 3)])
    out = tiny_env.evaluate(chain, tasks)
    assert out.success.tolist() == [1.0] * 16
    assert out.messages.tolist() == [3.0] * 16
    assert torch.allclose(out.reward, torch.full((16,), 1.0 - 3 * 0.05))
    # Both keepers straight to the expert: also 3 messages.
    star = _adj(4, [(0, 2), (1, 2), (2, 3)])
    assert tiny_env.evaluate(star, tasks).success.tolist() == [1.0] * 16


def test_removing_an_edge_on_the_needed_path_fails(tiny_env):
    tasks = tiny_env.sample_tasks(16, generator=1)
    for cut in [(0, 1), (1, 2), (2, 3)]:
        edges = [e for e in [(0, 1), (1, 2), (2, 3)] if e != cut]
        out = tiny_env.evaluate(_adj(4, edges), tasks)
        assert out.success.tolist() == [0.0] * 16, cut
        assert torch.allclose(out.reward, torch.full((16,), -2 * 0.05))
    # The answerer holds no skill: keepers messaging it directly never succeed.
    assert tiny_env.evaluate(_adj(4, [(0, 3), (1, 3)]), tasks).success.sum() == 0


def test_message_cost_is_counted_exactly_for_full_and_empty_graphs(tiny_env):
    tasks = tiny_env.sample_tasks(8, generator=2)
    full = tiny_env.evaluate(tiny_env.full_adjacency(), tasks)
    assert full.messages.tolist() == [6.0] * 8
    assert torch.allclose(full.reward, torch.full((8,), 1.0 - 6 * 0.05))
    empty = tiny_env.evaluate(tiny_env.empty_adjacency(), tasks)
    assert empty.messages.sum() == 0 and empty.success.sum() == 0 and empty.reward.sum() == 0


def test_skill_is_a_probability_decided_by_the_hashed_draw():
    env = RoutingEnv(RoutingEnvConfig(**{**TINY, "expert_skill": 0.5}), device="cpu")
    tasks = env.sample_tasks(200, generator=3)
    out = env.evaluate(_adj(4, [(0, 2), (1, 2), (2, 3)]), tasks)
    expected = [float(unit_draw(int(u), 2) < 0.5) for u in tasks.uid.tolist()]
    assert out.success.tolist() == expected
    assert 0.3 < sum(expected) / len(expected) < 0.7


def test_turn_by_turn_episode_matches_evaluate_and_rejects_backward_messages(small_env):
    tasks = small_env.sample_tasks(32, generator=4)
    adj = small_env.random_adjacency(torch.full((32,), 4), torch.Generator().manual_seed(0))
    ep = small_env.episode(tasks)
    obs = ep.observe()
    assert obs.shape == (32, small_env.config.facts_per_task + 1 + small_env.n_types)
    for j in range(small_env.n_agents):
        ep.step(adj[:, j])
    assert torch.equal(ep.outcome().reward, small_env.evaluate(adj, tasks).reward)
    ep2 = small_env.episode(tasks)
    ep2.step(torch.zeros(32, 5, dtype=torch.bool))
    back = torch.zeros(32, 5, dtype=torch.bool)
    back[:, 0] = True
    with pytest.raises(ValueError, match="only message agents after it"):
        ep2.step(back)
    with pytest.raises(ValueError, match="not a candidate"):
        small_env.evaluate(_adj(5, [(3, 1)]), tasks)


def test_splits_are_disjoint_and_sampling_is_seeded(small_env):
    a = small_env.sample_tasks(50, split="train", generator=7)
    b = small_env.sample_tasks(50, split="train", generator=7)
    c = small_env.sample_tasks(50, split="test", generator=7)
    assert torch.equal(a.uid, b.uid) and torch.equal(a.values, b.values)
    assert (a.uid % 2 == 0).all() and (c.uid % 2 == 1).all()


# ------------------------------------------------------ torch path vs Runtime --


def test_fast_path_and_runtime_agree_on_success_and_messages():
    env = RoutingEnv(device="cpu")  # the default team: 8 agents, 4 task types
    tasks = env.sample_tasks(48, split="test", generator=5)
    g = torch.Generator().manual_seed(0)
    counts = torch.tensor([0, 3, 6, 10, 15, 21, 28] * 7)[:48]
    adjs = env.random_adjacency(counts, g)
    fast = env.evaluate(adjs, tasks)
    rt = run_runtime(env, adjs, tasks)
    assert rt.success == fast.success.tolist()
    assert rt.messages == [int(m) for m in fast.messages.tolist()]
    assert 0 < sum(rt.success) < len(rt.success)  # both outcomes occur
    # Keeping isolated agents changes the calls, never the messages or success.
    rt_all = run_runtime(env, adjs[:6], tasks.select(range(6)), drop_isolated=False)
    assert rt_all.calls == [env.n_agents] * 6
    assert rt_all.success == rt.success[:6] and rt_all.messages == rt.messages[:6]


def test_runtime_answers_are_the_task_answers_and_any_llm_can_play(tiny_env):
    tasks = tiny_env.sample_tasks(5, generator=6)
    rt = run_runtime(tiny_env, _adj(4, [(0, 1), (1, 2), (2, 3)]), tasks, keep_results=True)
    assert rt.answers == tasks.answer.tolist()
    trace = rt.results[0].trace
    assert [e.sender for e in trace] == ["keeper_1", "keeper_2", "expert_1", "answerer"]
    assert sum(len(e.receivers) for e in trace) == 3
    # Another model plays the agents (what a real LLM URI does): it always answers 0.
    zero = FunctionLLM(lambda messages: "ANSWER: 0", name="zero")
    out = run_runtime(tiny_env, tiny_env.full_adjacency(), tasks, llm=zero)
    assert out.success == [0.0] * 5 and out.messages == [6] * 5


def test_skill_agents_llm_is_deterministic(small_env):
    tasks = small_env.sample_tasks(1, generator=8)
    graph = small_env.graph(small_env.full_adjacency(), task=small_env.task(tasks, 0))
    llm = skill_agents_llm(small_env)
    a = Runtime(graph, llm=llm).run(small_env.task(tasks, 0).text)
    b = Runtime(graph, llm=llm).run(small_env.task(tasks, 0).text)
    assert [e.output for e in a.trace] == [e.output for e in b.trace]


# ------------------------------------------------------------------ REINFORCE --


def test_reinforce_gradient_sign_on_a_two_edge_toy():
    # keeper -> expert -> answerer: success needs both edges 0->1 and 1->2; 0->2 only costs.
    env = RoutingEnv(
        RoutingEnvConfig(n_agents=3, n_types=1, facts_per_task=1, novice_skill=0.0), device="cpu"
    )
    router = GPTSwarmRouter(env)
    tasks = env.sample_tasks(4096, generator=0)
    smp = router.sample(tasks, torch.Generator().manual_seed(0))
    out = env.evaluate(smp.adj, tasks)
    loss = -((out.reward - out.reward.mean()) * smp.log_prob).mean()
    loss.backward()
    grad = dict(zip(map(tuple, router.index.tolist()), (-router.logits.grad).tolist()))  # ascent direction
    # Exact: dJ/dtheta_e = p (1 - p) dJ/dp_e with J = p01 p12 - c (p01 + p02 + p12), p = 1/2.
    c = env.config.cost_per_message
    exact = {(0, 1): 0.25 * (0.5 - c), (1, 2): 0.25 * (0.5 - c), (0, 2): -0.25 * c}
    assert grad[(0, 1)] > 0 and grad[(1, 2)] > 0 and grad[(0, 2)] < 0
    for e, v in exact.items():
        assert abs(grad[e] - v) < 0.03, (e, grad[e], v)
    # One Adam step (lr 0.1, the paper's) moves the logits the same way.
    router.logits.grad = None
    opt = router.make_optimizer()
    before = router.logits.detach().clone()
    reinforce_update(router, env, tasks, opt, MovingAverageBaseline(), torch.Generator().manual_seed(1))
    step = dict(zip(map(tuple, router.index.tolist()), (router.logits.detach() - before).tolist()))
    assert step[(0, 1)] > 0 and step[(1, 2)] > 0 and step[(0, 2)] < 0


def test_moving_average_baseline():
    b = MovingAverageBaseline(0.9)
    assert b(torch.tensor([1.0, 0.0])) == 0.5
    assert b(torch.tensor([1.0])) == 0.5
    assert abs(b.value - (0.9 * 0.5 + 0.1 * 1.0)) < 1e-9


def test_gnn_layers_shapes_and_normalisation():
    a = torch.tensor([[0, 1, 0], [1, 0, 1], [0, 1, 0]], dtype=torch.float32)
    an = normalized_adjacency(a)
    assert torch.allclose(an, an.T)
    assert abs(float(an[0, 0]) - 0.5) < 1e-6  # degree 2 with the self loop: 1 / sqrt(2 * 2)
    h = torch.randn(4, 3, 5)
    assert GCNLayer(5, 6)(h, an, a).shape == (4, 3, 6)
    gat = GATLayer(5, 6, heads=2)
    out = gat(h, an, a)
    assert out.shape == (4, 3, 6)
    # GAT only attends to neighbours: node 0 ignores node 2's features.
    h2 = h.clone()
    h2[:, 2] += 10.0
    assert torch.allclose(gat(h2, an, a)[:, 0], out[:, 0], atol=1e-5)


def test_gdesigner_forward_with_gat_and_inner_decoder(small_env):
    tasks = small_env.sample_tasks(6, generator=0)
    for cfg in (
        GDesignerConfig(gnn="gat"),
        GDesignerConfig(decoder="inner", anchor="roles", anchor_weight=0.1),
    ):
        torch.manual_seed(0)
        r = GDesignerRouter(small_env, cfg)
        smp = r.sample(tasks, torch.Generator().manual_seed(0))
        assert smp.adj.shape == (6, 5, 5) and not (smp.adj & ~small_env.candidates).any()
        (-(smp.log_prob.mean()) + smp.aux_loss).backward()
        assert all(p.grad is not None for p in r.parameters() if p.requires_grad)


# ------------------------------------------------------------------- learning --


def _train(tmp_path, method: str, steps: int, seed: int = 1, **extra):
    cfg = {"method": method, "steps": steps, "seed": seed, "device": "cpu", "env": SMALL, "batch_size": 64,
           "eval_tasks": 400, "runtime_tasks": 20, "eval_every": 50, **extra}  # fmt: skip
    return train_routing(cfg, tmp_path / f"{method}-{seed}", progress=False)


@pytest.fixture(scope="module")
def gptswarm_run(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("gptswarm"), "gptswarm", 150)


@pytest.fixture(scope="module")
def gdesigner_run(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("gdesigner"), "gdesigner", 250)


@pytest.mark.parametrize("run", ["gptswarm_run", "gdesigner_run"])
def test_learned_routing_reaches_full_success_with_fewer_messages(run, request):
    res = request.getfixturevalue(run)
    full, learned = res.table["fully_connected"], res.table["learned"]
    assert learned["success"] >= full["success"] - 0.02
    assert learned["messages"] <= 0.6 * full["messages"]
    assert learned["reward"] > full["reward"]
    assert res.table["random_same_edges"]["success"] < learned["success"]
    assert res.runtime_agrees
    rt = res.runtime
    assert rt["learned"]["success"] >= rt["fully_connected"]["success"] - 0.05
    assert rt["learned"]["messages"] <= 0.6 * rt["fully_connected"]["messages"]
    assert rt["learned"]["calls"] <= rt["fully_connected"]["calls"]


def test_gdesigner_designs_different_graphs_for_types_with_different_needs(gdesigner_run):
    env = gdesigner_run.env
    p = env.profile
    assert p.expert[0] != p.expert[1]  # the two types need different experts
    graphs = gdesigner_run.graphs
    assert set(graphs) == set(p.type_names)
    edges = [set(g.edges) for g in graphs.values()]
    assert edges[0] != edges[1]
    # Each type's graph routes its own expert to the answerer or through someone who can solve it.
    tasks = env.sample_tasks(100, split="test", generator=11)
    for t, g in enumerate(graphs.values()):
        sub = tasks.select((tasks.type == t).nonzero().flatten())
        assert env.evaluate(env.adjacency_of(g), sub).success.mean() >= 0.98


@pytest.mark.parametrize("run", ["gptswarm_run", "gdesigner_run"])
def test_run_directory_and_graphs_the_runtime_runs(run, request):
    res = request.getfixturevalue(run)
    out = res.out_dir
    for name in ("config.yaml", "metrics.jsonl", "learning_curve.png", "summary.md", "result.json"):
        assert (out / name).is_file(), name
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == res.config.steps
    assert {"success", "messages", "reward", "baseline"} <= set(rows[0])
    assert "eval_success" in rows[-1]
    assert "| learned" in (out / "summary.md").read_text()
    env = res.env
    tasks = env.sample_tasks(10, split="test", generator=12)
    for key, graph in res.graphs.items():
        stem = "graph" if key == "graph" else f"graph_{key}"
        for suffix in (".yaml", ".mmd", ".png"):
            assert (out / f"{stem}{suffix}").is_file()
        loaded = Graph.from_file(out / f"{stem}.yaml")
        assert loaded.edges == graph.edges and loaded.final == "answerer"
        assert (out / f"{stem}.mmd").read_text().startswith("flowchart LR")
        # The saved graph runs as it is...
        task = env.task(tasks, 0)
        result = Runtime(loaded, llm=skill_agents_llm(env)).run(task.text)
        assert sum(len(e.receivers) for e in result.trace) == len(loaded.edges)
        # ...and with each task's private facts it succeeds exactly as the fast path says.
        adj = env.adjacency_of(loaded)
        assert run_runtime(env, adj, tasks).success == env.evaluate(adj, tasks).success.tolist()


def test_training_is_deterministic_for_a_seed(tmp_path):
    a = _train(tmp_path / "a", "gdesigner", 30, seed=5, runtime_tasks=0)
    b = _train(tmp_path / "b", "gdesigner", 30, seed=5, runtime_tasks=0)
    c = _train(tmp_path / "c", "gdesigner", 30, seed=6, runtime_tasks=0)
    ma = (a.out_dir / "metrics.jsonl").read_text()
    assert ma == (b.out_dir / "metrics.jsonl").read_text()
    assert ma != (c.out_dir / "metrics.jsonl").read_text()
    assert a.table == b.table
    assert {k: g.edges for k, g in a.graphs.items()} == {k: g.edges for k, g in b.graphs.items()}


# -------------------------------------------------------------- config errors --


@pytest.mark.parametrize(
    "data, path, words",
    [
        ({"method": "magic"}, "method", "gptswarm"),
        ({"steps": 0}, "steps", "greater than or equal to 1"),
        ({"stpes": 5}, "stpes", "unknown field"),
        ({"device": "gpu"}, "device", "unknown device"),
        ({"env": {"n_agents": 2}}, "env.n_agents", "greater than or equal to 3"),
        ({"env": {"n_agents": 4, "facts_per_task": 3}}, "env", "facts_per_task=3"),
        ({"env": {"cost_per_message": -1}}, "env.cost_per_message", "greater than or equal to 0"),
        ({"gptswarm": {"lr": 0}}, "gptswarm.lr", "greater than 0"),
        ({"gdesigner": {"gnn": "gin"}}, "gdesigner.gnn", "gcn"),
    ],
)
def test_bad_config_values_give_clear_errors(data, path, words):
    with pytest.raises(RoutingConfigError) as info:
        RoutingTrainConfig.from_data(data)
    assert info.value.path == path
    assert words in str(info.value)


def test_config_reads_yaml_and_resolves_the_method_lr(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("method: gptswarm\nsteps: 3\nenv:\n  n_agents: 5\n")
    cfg = RoutingTrainConfig.from_yaml(p)
    assert cfg.env.n_agents == 5 and cfg.resolved_lr == 0.1
    assert RoutingTrainConfig(method="gdesigner").resolved_lr == GDesignerConfig().lr
    p.write_text("steps: [1\n")
    with pytest.raises(RoutingConfigError, match="YAML syntax error"):
        RoutingTrainConfig.from_yaml(p)


# ------------------------------------------------------------------------ CLI --


def _cli():
    root = typer.Typer(add_completion=False)
    root.add_typer(train_app, name="train")

    @root.callback()
    def _root() -> None:
        pass

    return root


def test_cli_trains_and_prints_json_on_the_last_line(tmp_path):
    out = tmp_path / "run"
    args = ["train", "routing", "--method", "gptswarm", "--steps", "20", "--seed", "2", "--out", str(out), "--json",
            "--agents", "5", "--types", "2", "--facts", "1", "--eval-tasks", "100", "--runtime-tasks", "5", "-q"]  # fmt: skip
    res = CliRunner().invoke(_cli(), args)
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout.strip().splitlines()[-1])
    assert data["method"] == "gptswarm" and data["seed"] == 2 and data["runtime_agrees"] is True
    assert set(data["table"]) == {"fully_connected", "empty", "random_same_edges", "learned"}
    assert (out / "summary.md").is_file()


@pytest.mark.parametrize(
    "args, words",
    [
        (["--method", "magic"], "method"),
        (["--steps", "0"], "steps"),
        (["--agents", "3", "--facts", "2"], "facts_per_task"),
        (["--device", "gpu"], "device"),
        (["--config", "/no/such/file.yaml"], "cannot read"),
    ],
)
def test_cli_errors_exit_2_with_one_line(args, words, tmp_path):
    res = CliRunner().invoke(_cli(), ["train", "routing", "--out", str(tmp_path / "x"), "-q", *args])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and words in lines[0]
