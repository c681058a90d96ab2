"""PolicyRouter: a trained marl.routing policy (GPTSwarm or G-Designer) routing messages live
through societas.topology.routing's Router / BatchRouter protocol — greedy and seeded sampling
decisions against hand-set edge probabilities, one forward pass per batch, checkpoints and the
errors that name what is wrong."""

from __future__ import annotations

import math

import pytest
import torch

from societas.marl.routing import (
    CHECKPOINT_KIND,
    GDesignerRouter,
    GPTSwarmRouter,
    PolicyCheckpointError,
    PolicyRouter,
    RoutingEnv,
    RoutingEnvConfig,
    save_policy,
    train_routing,
)
from societas.topology.routing import (
    END,
    BatchRouter,
    RouteContext,
    Router,
    RoutingError,
    normalize_decision,
)

torch.set_num_threads(1)

# keeper_1, keeper_2, expert_1, expert_2, answerer; task types "sum" and "max".
SMALL = {"n_agents": 5, "n_types": 2, "facts_per_task": 1}
K1, K2, E1, E2, ANS = 0, 1, 2, 3, 4


@pytest.fixture(scope="module")
def env() -> RoutingEnv:
    return RoutingEnv(RoutingEnvConfig(**SMALL), device="cpu")


def _swarm(env: RoutingEnv, probs: dict[tuple[int, int], float]) -> GPTSwarmRouter:
    """A GPTSwarm policy whose edge probabilities are set by hand (0.5 elsewhere)."""
    policy = GPTSwarmRouter(env)
    index = policy.index.tolist()
    with torch.no_grad():
        for (i, j), p in probs.items():
            policy.logits[index.index([i, j])] = math.log(p / (1 - p))
    return policy


def _ctx(source: str, targets: tuple[str, ...], *, task: str = "", step: int = 0, instance: int = 0,
         task_index: int = 0) -> RouteContext:  # fmt: skip
    return RouteContext(source=source, output="", task=task, targets=targets, step=step, instance=instance,
                        task_index=task_index)  # fmt: skip


# ------------------------------------------------------------------ greedy --


def test_greedy_picks_the_probable_edge_and_explains_it(env):
    policy = _swarm(env, {(K1, E1): 0.9, (K1, K2): 0.1})
    router = PolicyRouter(policy, env)
    assert isinstance(router, Router) and isinstance(router, BatchRouter)
    ctx = _ctx("keeper_1", ("keeper_2", "expert_1", END))
    decision = router.route(ctx)
    assert decision == "expert_1"
    assert normalize_decision(decision, ctx, multi=False, router_name=router.name) == ["expert_1"]
    probs = router.explain(ctx)
    assert list(probs) == ["keeper_2", "expert_1", END]
    assert probs["expert_1"] == pytest.approx(0.9, abs=1e-6)
    assert probs["keeper_2"] == pytest.approx(0.1, abs=1e-6)
    assert probs[END] == pytest.approx(0.1 * 0.9, abs=1e-6)  # no edge drawn
    (logged,) = router.last_decisions
    assert logged.source == "keeper_1" and logged.chosen == ("expert_1",) and logged.probs == probs


def test_greedy_without_a_passing_edge_ends_or_takes_the_most_probable(env):
    policy = _swarm(env, {(K1, K2): 0.2, (K1, E1): 0.3, (K1, E2): 0.3})
    router = PolicyRouter(policy, env, multi=True)
    assert router.route(_ctx("keeper_1", ("keeper_2", "expert_1", END))) == [END]
    # Without END the single most probable target goes; of equals, the one declared first.
    assert router.route(_ctx("keeper_1", ("keeper_2", "expert_1"))) == ["expert_1"]
    assert router.route(_ctx("keeper_1", ("keeper_2", "expert_2", "expert_1"))) == ["expert_2"]
    # A threshold equal to the 0.3 edges' probability lets them through (p >= threshold).
    low = PolicyRouter(
        policy, env, multi=True, threshold=router.explain(_ctx("keeper_1", ("expert_1",)))["expert_1"]
    )
    assert low.route(_ctx("keeper_1", ("keeper_2", "expert_1", "expert_2", END))) == ["expert_1", "expert_2"]
    # An edge the env does not allow (to an earlier agent) has probability 0.
    assert router.explain(_ctx("expert_1", ("keeper_1", END)))["keeper_1"] == 0.0


def test_single_target_router_keeps_the_most_probable_of_several(env):
    policy = _swarm(env, {(K1, K2): 0.6, (K1, E1): 0.8, (K1, E2): 0.1})
    ctx = _ctx("keeper_1", ("keeper_2", "expert_1", "expert_2", END))
    assert PolicyRouter(policy, env, multi=False).route(ctx) == "expert_1"
    both = PolicyRouter(policy, env, multi=True).route(ctx)
    assert both == ["keeper_2", "expert_1"]
    assert normalize_decision(both, ctx, multi=True, router_name="p") == ["keeper_2", "expert_1"]
    with pytest.raises(RoutingError, match="not declared multi"):
        normalize_decision(both, ctx, multi=False, router_name="p")


# ---------------------------------------------------------------- sampling --


def test_sampling_is_seeded_per_context_and_follows_the_probabilities(env):
    policy = _swarm(env, {(K1, E1): 0.9, (K1, K2): 0.1})
    targets = ("keeper_2", "expert_1", END)
    ctxs = [_ctx("keeper_1", targets, instance=i, step=i % 3, task_index=i % 7) for i in range(3000)]
    router = PolicyRouter(policy, env, mode="sample", seed=3, multi=True)
    first = [router.route(c) for c in ctxs]
    # A fresh router with the same seed reproduces every decision, in one batch or one by one.
    again = PolicyRouter(policy, env, mode="sample", seed=3, multi=True)
    assert again.route_batch(ctxs) == first
    assert [again.route(c) for c in reversed(ctxs)] == first[::-1]
    other = PolicyRouter(policy, env, mode="sample", seed=4, multi=True).route_batch(ctxs)
    assert other != first
    n = len(ctxs)
    freq = {t: sum(t in d for d in first) / n for t in targets}
    assert freq["expert_1"] == pytest.approx(0.9, abs=0.03)
    assert freq["keeper_2"] == pytest.approx(0.1, abs=0.03)
    assert freq[END] == pytest.approx(0.09, abs=0.03)  # both draws failed
    assert all((END in d) == (d == [END]) for d in first)


def test_sampling_depends_on_every_part_of_the_context_key(env):
    policy = _swarm(env, {(K1, E1): 0.5, (K1, K2): 0.5, (K1, E2): 0.5})
    router = PolicyRouter(policy, env, mode="sample", seed=0, multi=True)
    targets = ("keeper_2", "expert_1", "expert_2", END)
    base = [router.route(_ctx("keeper_1", targets, instance=i)) for i in range(40)]
    for change in ({"step": 1}, {"task_index": 1}):
        moved = [router.route(_ctx("keeper_1", targets, instance=i, **change)) for i in range(40)]
        assert moved != base, change


# -------------------------------------------------------------- G-Designer --


def _gdesigner_contexts(env: RoutingEnv) -> list[RouteContext]:
    tasks = env.sample_tasks(6, split="test", generator=3, types=[0, 1, 0, 1, 1, 0])
    names = env.profile.names
    ctxs = []
    for t in range(len(tasks)):
        text = env.task(tasks, t).text
        for i in range(env.n_agents - 1):
            ctxs.append(_ctx(names[i], (*names[i + 1 :], END), task=text, task_index=t, instance=i))
    return ctxs


def test_gdesigner_route_batch_is_one_forward_pass_and_equals_route(env, monkeypatch):
    torch.manual_seed(0)
    policy = GDesignerRouter(env)
    ctxs = _gdesigner_contexts(env)
    calls = []
    forward = policy.edge_probs

    def counted(tasks):
        calls.append(len(tasks))
        return forward(tasks)

    monkeypatch.setattr(policy, "edge_probs", counted)
    probe = PolicyRouter(policy, env)
    all_p = [p for c in ctxs for t, p in probe.explain(c).items() if t != END]
    threshold = sorted(all_p)[len(all_p) // 2]  # the median: greedy picks some edges and drops others
    for mode in ("greedy", "sample"):
        router = PolicyRouter(policy, env, mode=mode, threshold=threshold, multi=True, seed=2)
        calls.clear()
        batch = router.route_batch(ctxs)
        assert calls == [2]  # one forward pass, one row per task type
        assert batch == [router.route(c) for c in ctxs]
        assert len({tuple(d) for d in batch}) > 2
    # The probabilities are the policy's for the task's type (read from the text), the uid aside.
    with torch.no_grad():
        by_type = {t: forward(env.sample_tasks(1, generator=9, types=[t]))[0] for t in (0, 1)}
    type_of = {env.task(env.sample_tasks(1, generator=0, types=[t]), 0).type_name: t for t in (0, 1)}
    differs = False
    for c in ctxs:
        t = next(v for k, v in type_of.items() if f"(type: {k})" in c.task)
        i = env.profile.names.index(c.source)
        for target, p in probe.explain(c).items():
            if target != END:
                j = env.profile.names.index(target)
                assert p == pytest.approx(float(by_type[t][i, j]), abs=1e-6)
                differs |= abs(float(by_type[0][i, j]) - float(by_type[1][i, j])) > 1e-4
    assert differs  # the task conditions the decision


def test_gdesigner_needs_the_task_type(env):
    torch.manual_seed(0)
    policy = GDesignerRouter(env)
    router = PolicyRouter(policy, env)
    with pytest.raises(RoutingError, match=r"names no task type"):
        router.route(_ctx("keeper_1", ("expert_1", END), task="What is 2 + 2?"))
    with pytest.raises(RoutingError, match=r"'median', not one of sum, max"):
        router.route(_ctx("keeper_1", ("expert_1", END), task="Task 3 (type: median)."))
    own = PolicyRouter(policy, env, task_type=lambda text: "max" if "largest" in text else 0)
    ctx_max = _ctx("keeper_1", ("keeper_2", "expert_1", "expert_2"), task="the largest of A and B")
    env_text = env.task(env.sample_tasks(1, generator=1, types=[1]), 0).text
    assert own.explain(ctx_max) == router.explain(_ctx("keeper_1", ctx_max.targets, task=env_text))


# ------------------------------------------------------------- checkpoints --


def test_checkpoint_of_a_training_run_routes_identically(tmp_path):
    cfg = {"method": "gdesigner", "steps": 3, "batch_size": 8, "seed": 1, "device": "cpu", "env": SMALL,
           "eval_tasks": 20, "runtime_tasks": 0}  # fmt: skip
    res = train_routing(cfg, tmp_path / "run", progress=False)
    # The trainer writes the weights into its run directory; the router loads from the directory.
    assert (tmp_path / "run" / "policy.pt").is_file()
    (tmp_path / "run" / "policy.pt").unlink()
    with pytest.raises(PolicyCheckpointError, match="holds no trained policy") as err:
        PolicyRouter.from_checkpoint(tmp_path / "run")
    assert err.value.path == tmp_path / "run" / "policy.pt"
    train_routing(cfg, tmp_path / "run", progress=False)
    rng = torch.get_rng_state()
    ctxs = _gdesigner_contexts(res.env)
    for kw in ({"mode": "greedy"}, {"mode": "sample", "seed": 5, "multi": True}):
        loaded = PolicyRouter.from_checkpoint(tmp_path / "run", **kw)
        live = PolicyRouter(res.router, res.env, **kw)
        assert loaded.route_batch(ctxs) == live.route_batch(ctxs)
        assert [loaded.explain(c) for c in ctxs] == [live.explain(c) for c in ctxs]
    assert torch.equal(torch.get_rng_state(), rng)  # loading leaves the global RNG alone


def test_gptswarm_checkpoint_round_trip(env, tmp_path):
    router = PolicyRouter(_swarm(env, {(K1, E1): 0.9, (K1, K2): 0.1, (E1, ANS): 0.7}), env, mode="sample")
    path = router.save(tmp_path / "swarm.pt")
    loaded = PolicyRouter.from_checkpoint(path, mode="sample")
    assert isinstance(loaded.policy, GPTSwarmRouter) and loaded.env.config == env.config
    ctxs = [_ctx("keeper_1", ("keeper_2", "expert_1", END), instance=i) for i in range(50)]
    ctxs += [_ctx("expert_1", ("expert_2", "answerer", END), instance=i) for i in range(50)]
    assert loaded.route_batch(ctxs) == router.route_batch(ctxs)
    assert torch.equal(loaded.policy.edge_probs(), router.policy.edge_probs())


def test_bad_checkpoints_are_errors_naming_the_file(env, tmp_path):
    def fails(path, words):
        with pytest.raises(PolicyCheckpointError, match=words) as err:
            PolicyRouter.from_checkpoint(path)
        assert str(err.value).startswith(str(path))

    fails(tmp_path / "nope.pt", "no such file")
    (tmp_path / "empty").mkdir()
    fails(tmp_path / "empty" / "policy.pt", "no such file")
    with pytest.raises(PolicyCheckpointError, match="holds no trained policy"):
        PolicyRouter.from_checkpoint(tmp_path / "empty")
    (tmp_path / "notes.txt").write_text("hello")
    fails(tmp_path / "notes.txt", "torch.load cannot read it")
    (tmp_path / "zero.pt").write_bytes(b"")
    fails(tmp_path / "zero.pt", "torch.load cannot read it")
    policy = GPTSwarmRouter(env)
    torch.save(policy.state_dict(), tmp_path / "weights.pt")
    fails(tmp_path / "weights.pt", "no 'kind' field")
    good = torch.load(save_policy(policy, env, tmp_path / "good.pt"), weights_only=True)
    for name, change, words in [
        ("kind.pt", {"kind": "societas.marl.llm.checkpoint"}, "kind 'societas.marl.llm.checkpoint'"),
        ("version.pt", {"version": 99}, "version 99 is not supported"),
        ("method.pt", {"method": "mappo"}, "method: 'mappo'"),
        ("env.pt", {"env": {**good["env"], "n_agents": 2}}, r"env\.n_agents"),
        ("config.pt", {"config": {"lr": -1}}, r"config\.lr"),
        ("shape.pt", {"env": {**good["env"], "n_agents": 6}}, "weights do not fit a gptswarm policy"),
    ]:
        torch.save({**good, **change}, tmp_path / name)
        fails(tmp_path / name, words)
    assert good["kind"] == CHECKPOINT_KIND


# ------------------------------------------------------------------ nodes --


def test_unknown_nodes_raise_naming_them_and_node_map_renames(env):
    policy = _swarm(env, {(K1, E1): 0.9, (K1, K2): 0.1})
    router = PolicyRouter(policy, env)
    with pytest.raises(RoutingError, match=r"'writer' is not an agent of the policy's team.*node_map"):
        router.route(_ctx("keeper_1", ("expert_1", "writer", END)))
    with pytest.raises(RoutingError, match=r"'boss'"):
        router.route_batch([_ctx("keeper_1", ("expert_1",)), _ctx("boss", ("expert_1",))])
    with pytest.raises(RoutingError, match=r"'x', 'y' are not agents"):
        router.route(_ctx("keeper_1", ("x", "y")))
    with pytest.raises(ValueError, match=r"'w' to 'writer', which is no agent"):
        PolicyRouter(policy, env, node_map={"w": "writer"})
    mapped = PolicyRouter(policy, env, node_map={"k1": "keeper_1", "solver": "expert_1"})
    ctx = _ctx("k1", ("keeper_2", "solver", END))
    assert mapped.route(ctx) == "solver"
    assert list(mapped.explain(ctx).values()) == list(
        router.explain(_ctx("keeper_1", ("keeper_2", "expert_1", END))).values()
    )
    with pytest.raises(RoutingError, match=r"'keeper_3'"):
        mapped.validate("k1", ("solver", "keeper_3"))


def test_bad_options_are_refused(env):
    policy = GPTSwarmRouter(env)
    with pytest.raises(ValueError, match="mode must be"):
        PolicyRouter(policy, env, mode="argmax")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="threshold"):
        PolicyRouter(policy, env, threshold=0.0)
    with pytest.raises(TypeError, match="GPTSwarmRouter or GDesignerRouter"):
        PolicyRouter(torch.nn.Linear(2, 2), env)  # type: ignore[arg-type]
    with pytest.raises(RoutingError, match="no targets"):
        PolicyRouter(policy, env).route(_ctx("keeper_1", ()))
