"""The conductor and selfplay recipes: rewards by hand, synthetic SFT topologies,
batched execution of several topologies, sample structure of multi-turn
episodes, HRPO grouping, and the CLI's errors."""

from __future__ import annotations

import copy
import json
import math
import random
import re

import pytest
import torch
from pydantic import ValidationError
from typer.testing import CliRunner

from societas.agents.llm.function import FunctionLLM
from societas.agents.llm.transformers_llm import TransformersLLM
from societas.marl.llm.advantages import HopGroup
from societas.marl.llm.loop import FROZEN, Episode
from societas.marl.llm.recipes import RECIPES
from societas.marl.llm.recipes.conductor import (
    EXECUTION_REWARDS,
    ConductorConfig,
    ConductorRecipe,
    density_reward,
    synthetic_topology,
)
from societas.marl.llm.recipes.selfplay import SelfPlayConfig, SelfPlayRecipe, heldout_problems
from societas.marl.llm.rollouts import TokenRecorder
from societas.marl.llm.settings import SettingsError
from societas.topology.layered import DIFFICULTY_NODE_CAPS, parse_layered_yaml
from societas.topology.patterns.arithmetic import (
    OPERATION_HOPS,
    OPERATIONS,
    arithmetic_task_hops,
    arithmetic_word_problem_task,
)

torch.set_num_threads(1)


# -- conductor -------------------------------------------------------------------------------------


def test_density_reward_by_hand():
    # medium: N = 7, E = 21; 3 agents in a chain: 2 edges, depth 3
    assert density_reward(3, 2, 3, "medium") == pytest.approx(math.exp(-(3 / 7 + 2 / 21 + 3 / 7) / 3))
    assert density_reward(0, 0, 0, "easy") == 1.0
    assert density_reward(2, 1, 2, "hard") > density_reward(6, 9, 4, "hard")  # sparser scores higher
    with pytest.raises(ValueError, match="unknown difficulty"):
        density_reward(1, 0, 1, "trivial")


def test_execution_rewards_grade_failures_below_outcomes():
    r = EXECUTION_REWARDS
    assert r["no_yaml"] < r["yaml_syntax"] < r["schema_invalid"] < r["logic_invalid"]
    assert r["logic_invalid"] < min(
        r[k] for k in ("no_code", "compile_error", "runtime_error", "timeout", "wrong_answer")
    )
    assert r["wrong_answer"] < r["passed"] and max(v for k, v in r.items() if k != "passed") < 0 < r["passed"]


def test_turn_reward_by_hand_and_unknown_outcomes_are_errors():
    from societas.topology.coding import OUTCOMES
    from societas.topology.patterns.conductor import ConductorTurn

    assert set(OUTCOMES) <= set(EXECUTION_REWARDS)  # every graded test outcome has its reward
    rec = ConductorRecipe(density_weight=0.2)
    bad = ConductorTurn(0, "p", "no yaml here", 3)
    bad.parse_error = "no_yaml"
    assert rec.turn_reward(bad, "easy") == (-1.0, -1.0, 0.0)  # no topology: no density term
    ok = ConductorTurn(0, "p", "...", 3)
    ok.topology, ok.metrics = object(), {"nodes": 2, "edges": 1, "depth": 2}

    class _Test:
        outcome = "wrong_answer"

    ok.test = _Test()
    d = math.exp(-(2 / 4 + 1 / 6 + 2 / 4) / 3)  # easy: N = 4, E = 6
    assert rec.turn_reward(ok, "easy") == pytest.approx((-0.1 + 0.2 * d, -0.1, d))
    ok.test = None  # parsed but its tests never ran: an error, not a silent grade
    with pytest.raises(ValueError, match="no execution reward for turn outcome 'not_run'"):
        rec.turn_reward(ok, "easy")


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_synthetic_topologies_parse_and_respect_the_cap(difficulty):
    rng = random.Random(0)
    for _ in range(40):
        topo = parse_layered_yaml(
            synthetic_topology(difficulty, rng), max_agents=DIFFICULTY_NODE_CAPS[difficulty]
        )
        assert topo.layers[-1][0].role == "testing" and len(topo.layers[-1]) == 1
        assert 2 <= len(topo.agents) <= DIFFICULTY_NODE_CAPS[difficulty]


def test_conductor_sft_samples_are_the_turn_one_prompt_and_a_topology(tiny_llm):
    rec = ConductorRecipe(sft_batch=3)
    out = rec.sft_samples(0, 5, tiny_llm.tokenizer)["orchestrator"]
    assert len(out) == 3 and all(s.old_logprobs is None and all(s.completion_mask) for s in out)
    text = tiny_llm.tokenizer.decode(out[0].completion_ids[:-1])
    assert out[0].completion_ids[-1] == tiny_llm.tokenizer.eos_token_id
    parse_layered_yaml(text)
    assert "Design a team" in tiny_llm.tokenizer.decode(
        out[0].prompt_ids
    ) or "orchestrator" in tiny_llm.tokenizer.decode(out[0].prompt_ids)


def test_conductor_runs_several_topologies_in_one_batched_graph():
    rec = ConductorRecipe(eval_problems=2)
    tasks = rec.heldout_tasks[:2]
    good = {t.task_id: t.prompt + t.canonical_solution for t in tasks}
    calls = []

    def worker(prompts):
        calls.append(len(prompts))
        outs = []
        for p in prompts:
            text = p[-1]["content"]
            tid = next(k for k, t in zip(good, tasks) if t.entry_point in text)
            outs.append("```python\n" + (good[tid] if "fix" not in text else "def nothing(): pass") + "\n```")
        return outs

    workers = FunctionLLM(batch_fn=worker, name="w")
    topo = parse_layered_yaml(
        "layers:\n  - - {name: coder_1, role: coding, ref: []}\n"
        "  - - {name: tester_1, role: testing, ref: [coder_1]}"
    )
    ran = rec._run_topologies(workers, [("e0t0", topo, tasks[0], 1), ("e1t0", topo, tasks[1], 2)])
    assert calls == [2, 2]  # one batched call per layer for both topologies
    assert ran["e0t0"][1].outcome == "passed" and ran["e1t0"][1].outcome == "passed"


def test_conductor_episode_turns_samples_and_rewards(tiny_llm):
    rec = ConductorRecipe(
        problems_per_step=1, group_size=2, max_turns=2, orchestrator_tokens=6, worker_tokens=4
    )
    pol = TokenRecorder(TransformersLLM(copy.deepcopy(tiny_llm.model), tiny_llm.tokenizer, device="cpu"))
    eps = rec.train_episodes(0, 3)
    assert [e.group for e in eps] == [eps[0].group] * 2 and eps[0].seed != eps[1].seed
    res = rec.run_episodes({"orchestrator": pol, FROZEN: tiny_llm}, eps, train=True)
    for r in res:
        # A random model writes no YAML: each turn is a sample rewarded -1, and turn 2 sees the feedback.
        assert len(r.samples) == 2 and r.rewards == [EXECUTION_REWARDS["no_yaml"]] * 2
        assert r.metrics["valid_yaml"] == 0.0 and r.metrics["turns"] == 2.0
        assert all(s.policy == "orchestrator" and s.old_logprobs is not None for s in r.samples)
        assert len(r.samples[1].prompt_ids) > len(r.samples[0].prompt_ids)
        assert "could not be used (no_yaml)" in tiny_llm.tokenizer.decode(r.samples[1].prompt_ids)
    again = rec.run_episodes({"orchestrator": pol, FROZEN: tiny_llm}, eps, train=True)
    assert [s.completion_ids for r in again for s in r.samples] == [
        s.completion_ids for r in res for s in r.samples
    ]


def test_conductor_train_and_heldout_problems_are_disjoint():
    rec = ConductorRecipe()
    assert not {t.task_id for t in rec.train_tasks} & {t.task_id for t in rec.heldout_tasks}
    assert {e.task for e in rec.eval_episodes(0)} <= {t.task_id for t in rec.heldout_tasks}
    with pytest.raises(ValueError, match="group_size"):
        ConductorRecipe(group_size=1)


# -- selfplay --------------------------------------------------------------------------------------


def test_every_operation_has_a_hop_count():
    assert set(OPERATION_HOPS) == set(OPERATIONS)
    rng = random.Random(1)
    for _ in range(30):
        task = arithmetic_word_problem_task(rng)
        ops = next(o for o in OPERATIONS if o in task)
        assert arithmetic_task_hops(task) == OPERATION_HOPS[ops]
    with pytest.raises(ValueError, match="no known operation"):
        arithmetic_task_hops("write a poem")


def test_heldout_problems_answers_are_computed():
    for q, a in heldout_problems(40, seed=3):
        nums = [int(x) for x in q.replace("?", " ").replace(".", " ").split() if x.isdigit()]
        if "buys" in q:
            assert a == nums[0] + nums[1]
        elif "in each box" in q:
            assert a == nums[0] * nums[1]
        elif "gives away" in q:
            assert a == nums[0] * nums[1] - nums[2]
        else:
            assert a * nums[1] == nums[0]


def _scripted_proposer(prompts):
    return ["Question: Tom has 3 bags with 4 apples each. How many apples does he have?\nAnswer: 12"] * len(
        prompts
    )


def test_selfplay_rewards_groups_and_alternation(tiny_llm):
    rec = SelfPlayRecipe(proposals_per_step=2, n_solvers=5, proposer_tokens=4, solver_tokens=4)
    assert [rec.trained_policies(s) for s in range(4)] == [("proposer",), ("solver",)] * 2
    eps = rec.train_episodes(0, 9)
    assert all(e.group.startswith("hops=") for e in eps)
    solver = TokenRecorder(TransformersLLM(copy.deepcopy(tiny_llm.model), tiny_llm.tokenizer, device="cpu"))
    proposer = TokenRecorder(TransformersLLM(copy.deepcopy(tiny_llm.model), tiny_llm.tokenizer, device="cpu"))
    res = rec.run_episodes({"proposer": proposer, "solver": solver}, eps, train=True)
    for e, r in zip(eps, res):
        props = [(s, rw, g) for s, rw, g in zip(r.samples, r.rewards, r.groups) if s.policy == "proposer"]
        assert len(props) == 1 and props[0][2] == HopGroup(e.group)  # HRPO: grouped by hop count
        assert props[0][1] == r.metrics["reward"]
        sols = [(s, rw, g) for s, rw, g in zip(r.samples, r.rewards, r.groups) if s.policy == "solver"]
        if r.metrics["format"] > 0:
            assert (
                len(sols) == 5
                and len({g for *_, g in sols}) == 1
                and all(rw in (0.0, 1.0) for _, rw, _ in sols)
            )
        else:
            assert sols == []  # malformed pairs give the solver no data


def test_selfplay_eval_has_solver_accuracy_on_computed_problems(tiny_llm):
    rec = SelfPlayRecipe(
        proposals_per_step=2, eval_proposals=2, eval_problems=3, proposer_tokens=4, solver_tokens=4
    )
    eps = rec.eval_episodes(0)
    assert sum(e.task["kind"] == "problem" for e in eps) == 3
    assert eps == rec.eval_episodes(5)  # one fixed held-out set
    rec_llm = TokenRecorder(TransformersLLM(copy.deepcopy(tiny_llm.model), tiny_llm.tokenizer, device="cpu"))
    res = rec.run_episodes({"proposer": rec_llm, "solver": rec_llm}, eps, train=False)
    assert len(res) == 5
    assert all("heldout_solver_accuracy" in r.metrics for r in res[2:]) and all(
        "reward" in r.metrics for r in res[:2]
    )


# -- CLI --------------------------------------------------------------------------------------------


def _one_error_line(result) -> str:
    """The single line a rejected command prints (status 2, no traceback)."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_cli_lists_recipes_and_rejects_bad_options(tmp_path):
    from societas.marl.cli import app

    assert {"conductor", "selfplay"} <= set(RECIPES)
    runner = CliRunner()
    out = ["--out", str(tmp_path / "x")]
    r = runner.invoke(app, ["train", "selfplay", *out, "--recipe", "[1]"])
    assert _one_error_line(r) == "error: --recipe must be a JSON object"
    r = runner.invoke(app, ["train", "selfplay", *out, "--recipe", json.dumps({"proposals_per_step": 1})])
    assert _one_error_line(r) == (
        "error: --recipe: recipe.proposals_per_step: Input should be greater than or equal to 2 (got 1)"
    )
    r = runner.invoke(app, ["train", "conductor", *out, "--recipe", '{"nope": 1}'])
    assert _one_error_line(r).startswith(
        "error: --recipe: recipe.nope: unknown field (allowed: problems_per_step,"
    )
    r = runner.invoke(app, ["train", "selfplay", *out, "--recipe", '{"shared": 1}'])
    assert _one_error_line(r) == "error: --recipe: recipe.shared: Input should be a valid boolean (got 1)"
    r = runner.invoke(app, ["train", "selfplay", *out, "--recipe", "[[[["])
    assert _one_error_line(r) == "error: --recipe: JSON syntax error at line 1, column 5: Expecting value"
    r = runner.invoke(app, ["train", "selfplay", *out, "--advantage", "ppo", "--steps", "0"])
    assert _one_error_line(r) == "error: --advantage: Input should be 'grpo', 'gdpo' or 'dr_grpo' (got 'ppo')"
    r = runner.invoke(app, ["train", "selfplay", *out, "--steps", "-1"])
    assert _one_error_line(r) == "error: --steps must be between 0 and 1000000, got -1"
    assert not (tmp_path / "x").exists()  # every setting is checked before a run starts


@pytest.mark.parametrize(
    "text,expected",
    [
        ("recipe: [1]\n", "run.yaml: recipe: expected a mapping of options, got list"),
        ("recipe: 0\n", "run.yaml: recipe: expected a mapping of options, got int"),
        ("train:\n  grpo: 3\n", "run.yaml: train.grpo: expected a mapping of options, got int"),
        (
            "train:\n  grpo: {lr: -1.0}\n",
            "run.yaml: train.grpo.lr: Input should be greater than 0 (got -1.0)",
        ),
        ("train:\n  grpo: {lr: .inf}\n", "run.yaml: train.grpo.lr must be a finite number, got inf"),
        ("train:\n  grpo: {seed: 3}\n", "run.yaml: train.grpo.seed: set by the run's seed"),
        (
            "recipe:\n  n_solvers: 2.5\n",
            "run.yaml: recipe.n_solvers: Input should be a valid integer (got 2.5)",
        ),
        (
            "recipe:\n  proposer_steps: 0\n  solver_steps: 0\n",
            "run.yaml: recipe.solver_steps: proposer_steps and",
        ),
        ("recipe: {}\nextra: 1\n", "run.yaml: expected a mapping with 'recipe' and/or 'train' sections"),
        # the wrong types that once ended in "'<' not supported between instances of 'str' and 'int'"
        (
            'recipe:\n  proposals_per_step: "eight"\n',
            "error: run.yaml: recipe.proposals_per_step: Input should be a valid integer (got 'eight')",
        ),
        (
            "train:\n  steps: -3\n",
            "error: run.yaml: train.steps: Input should be greater than or equal to 0 (got -3)",
        ),
        (
            "train:\n  steps: 100000000000000000000000\n",
            "run.yaml: train.steps must be <= 1000000, got 100000000000000000000000",
        ),
        ("train:\n  seed: -1\n", "run.yaml: train.seed must be an integer between 0 and 4294967295, got -1"),
        (
            "train:\n  model: 'openai:http://x#m'\n",
            "run.yaml: train.model: training needs a local Hugging Face",
        ),
        ("train:\n  model: 'gguf:/no/such.gguf'\n", "run.yaml: train.model: no such file /no/such.gguf"),
        ("train:\n  serve: 'hf:x'\n", "run.yaml: train.serve: String should match pattern"),
        ("recipe: [\n", "run.yaml: YAML syntax error at line 2, column 1"),
        (
            "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
            + "".join(f"{c}: &{c} [" + ", ".join([f"*{p}"] * 10) + "]\n" for p, c in zip("abcdef", "bcdefg")),
            "run.yaml: the document is too large",
        ),
    ],
)
def test_cli_config_errors_are_one_line_naming_the_field(tmp_path, text, expected):
    from societas.marl.cli import app

    cfg = tmp_path / "run.yaml"
    cfg.write_text(text)
    r = CliRunner().invoke(app, ["train", "selfplay", "--out", str(tmp_path / "x"), "--config", str(cfg)])
    assert expected.replace("run.yaml", str(cfg)) in _one_error_line(r)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "content,expected",
    [
        (b"\xff\xfetrain: {}\n", "not UTF-8 text (byte 0: invalid start byte)"),
        (None, "no such file"),
    ],
)
def test_cli_config_that_cannot_be_read_is_one_line_naming_the_file(tmp_path, content, expected):
    from societas.marl.cli import app

    cfg = tmp_path / "run.yaml"
    if content is not None:
        cfg.write_bytes(content)
    r = CliRunner().invoke(app, ["train", "selfplay", "--out", str(tmp_path / "x"), "--config", str(cfg)])
    assert _one_error_line(r) == f"error: {cfg}: {expected}"


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail the test if a command loads a model or starts a run (what every check must precede)."""
    from societas.marl.llm import backend as backend_mod
    from societas.marl.llm import cli as llm_cli

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the settings were checked")

    monkeypatch.setattr(backend_mod, "load_llm", refuse)
    monkeypatch.setattr(llm_cli, "train", refuse)


@pytest.mark.parametrize(
    "args,expected",
    [
        (
            ["--serve", "nosuch:x"],
            "error: --serve 'nosuch:x': expected 'vllm:MODEL_DIR' (or 'vllm:embedded')",
        ),
        (["--serve", "vllm:"], "error: --serve 'vllm:': expected 'vllm:MODEL_DIR' (or 'vllm:embedded')"),
        (
            ["--serve", "vllm:/no/such/dir"],
            "error: --serve 'vllm:/no/such/dir': no such model directory /no/such/dir",
        ),
        (
            ["--model", "nosuch:x"],
            "error: --model 'nosuch:x': training needs a local Hugging Face model: "
            "'embedded', 'hf:PATH' or 'gguf:FILE'",
        ),
        (["--model", "hf:./no/such"], "error: --model 'hf:./no/such': no such model directory ./no/such"),
        (
            ["--model", "gguf:/no/such.gguf"],
            "error: --model 'gguf:/no/such.gguf': no such file /no/such.gguf",
        ),
        (["--steps", str(10**23)], f"error: --steps must be between 0 and 1000000, got {10**23}"),
        (["--sft-steps", "2000000"], "error: --sft-steps must be between 0 and 1000000, got 2000000"),
        (["--eval-every", "0"], "error: --eval-every must be between 1 and 1000000, got 0"),
        (["--threads", "100000"], "error: --threads must be between 1 and 1024, got 100000"),
        (["--rollout-workers", "-1"], "error: --rollout-workers must be between 0 and 1024, got -1"),
        (
            ["--seeds", "0", "--seeds", str(2**64)],
            f"error: --seeds must be between 0 and 4294967295, got {2**64}",
        ),
        (["--lr", "inf"], "error: --lr must be a finite number, got inf"),
        (["--kl-beta", "nan"], "error: --kl-beta must be a finite number, got nan"),
        (
            ["--loss-type", "ppo"],
            "error: --loss-type: Input should be 'grpo', 'bnpo', 'dr_grpo', 'dapo', 'cispo' or 'sapo' (got 'ppo')",
        ),
    ],
)
def test_cli_refuses_bad_options_before_loading_a_model(tmp_path, no_model_load, args, expected):
    from societas.marl.cli import app

    r = CliRunner().invoke(app, ["train", "selfplay", "--out", str(tmp_path / "x"), *args])
    assert _one_error_line(r) == expected
    assert not (tmp_path / "x").exists()


def test_cli_refuses_vllm_serving_without_vllm_before_loading(tmp_path, no_model_load, monkeypatch):
    import importlib.util

    from societas.marl.cli import app

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    r = CliRunner().invoke(
        app, ["train", "selfplay", "--out", str(tmp_path / "x"), "--serve", "vllm:embedded"]
    )
    assert _one_error_line(r) == "error: --serve 'vllm:embedded': vLLM is not installed (pip install vllm)"


def test_cli_checks_every_run_directory_before_the_first_run(tmp_path, no_model_load):
    from societas.marl.cli import app

    runner = CliRunner()
    a_file = tmp_path / "file"
    a_file.write_text("x")
    r = runner.invoke(app, ["train", "selfplay", "--out", str(a_file)])
    assert _one_error_line(r) == f"error: --out {a_file}: not a directory"

    out = tmp_path / "runs"
    (out / "seed_1").mkdir(parents=True)
    (out / "seed_1" / "metrics.jsonl").write_text("{}\n")
    r = runner.invoke(app, ["train", "selfplay", "--out", str(out), "--seeds", "0", "--seeds", "1"])
    assert _one_error_line(r) == (
        f"error: --out {out}: {out / 'seed_1'} is not empty: pass --resume to continue it, or choose another --out"
    )
    # --resume with a run directory that holds no checkpoint: nothing to continue from
    r = runner.invoke(app, ["train", "selfplay", "--out", str(out), "--seeds", "1", "--resume"])
    latest = out / "seed_1" / "checkpoint" / "LATEST"
    assert _one_error_line(r) == (
        f"error: --resume: {out / 'seed_1'} has no checkpoint to continue from ({latest} is missing)"
    )
    latest.parent.mkdir()
    latest.write_text("step-000003-abc\n")
    r = runner.invoke(app, ["train", "selfplay", "--out", str(out), "--seeds", "1", "--resume"])
    assert _one_error_line(r) == (
        f"error: --resume: {latest} names checkpoint 'step-000003-abc', which is missing or incomplete"
    )


def test_cli_takes_the_seed_of_the_config_when_no_seeds_are_given(tmp_path, monkeypatch):
    from societas.marl.cli import app
    from societas.marl.llm import cli as llm_cli

    seen = []

    def fake_train(recipe, cfg, out, **kwargs):
        seen.append((cfg.seed, cfg.grpo.seed, out.name))
        raise ValueError("stop here")

    monkeypatch.setattr(llm_cli, "train", fake_train)
    cfg = tmp_path / "run.yaml"
    cfg.write_text("train:\n  seed: 7\n")
    r = CliRunner().invoke(app, ["train", "selfplay", "--out", str(tmp_path / "x"), "--config", str(cfg)])
    assert _one_error_line(r) == "error: stop here" and seen == [(7, 7, "seed_7")]
    r = CliRunner().invoke(
        app, ["train", "selfplay", "--out", str(tmp_path / "x"), "--config", str(cfg), "--seeds", "2"]
    )
    assert seen[-1] == (2, 2, "seed_2")  # the command line wins


# -- recipe settings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cls,options,message",
    [
        (ConductorRecipe, {"group_size": 1}, "recipe.group_size: Input should be greater than or equal to 2"),
        (ConductorRecipe, {"group_size": 2.5}, "recipe.group_size: Input should be a valid integer"),
        (ConductorRecipe, {"test_timeout_s": 0}, "recipe.test_timeout_s: Input should be greater than 0"),
        (
            ConductorRecipe,
            {"problems_per_step": 121},
            "recipe.problems_per_step: draws 121 problems per step",
        ),
        (ConductorRecipe, {"eval_problems": 45}, "recipe.eval_problems: 45 held-out problems asked"),
        (SelfPlayRecipe, {"temperature": -0.5}, "recipe.temperature: Input should be greater than or equal"),
        (SelfPlayRecipe, {"shared": "yes"}, "recipe.shared: Input should be a valid boolean"),
        (SelfPlayRecipe, {"group_size": 4}, "recipe.group_size: unknown field (allowed: proposals_per_step,"),
    ],
)
def test_bad_recipe_settings_name_the_field(cls, options, message):
    with pytest.raises(SettingsError, match="^" + re.escape(message)):
        cls(**options)


def test_recipes_are_built_from_a_config_a_mapping_or_keywords():
    by_model = SelfPlayRecipe(SelfPlayConfig(n_solvers=3, shared=True))
    assert by_model.settings == SelfPlayRecipe({"n_solvers": 3, "shared": True}).settings
    assert by_model.settings == SelfPlayRecipe(n_solvers=3, shared=True).settings
    assert by_model.policies == ("policy",) and by_model.config()["n_solvers"] == 3
    mixed = SelfPlayRecipe(SelfPlayConfig(n_solvers=3), temperature=0.5)  # keywords override the config
    assert (mixed.settings.n_solvers, mixed.settings.temperature) == (3, 0.5)
    with pytest.raises(ValidationError, match="frozen"):  # the graph was built from them: no later change
        mixed.settings.n_solvers = 4
    with pytest.raises(SettingsError, match="^recipe: expected a mapping of options, got list$"):
        SelfPlayRecipe([1])
    # every field is documented (the options of a YAML config are their own reference)
    for cfg in (ConductorConfig, SelfPlayConfig):
        assert all(f.description for f in cfg.model_fields.values()), cfg


def test_cli_stops_with_one_line_when_the_checkpoint_cannot_fit(tiny_llm, tmp_path, monkeypatch):
    import shutil

    from societas.marl.cli import app
    from societas.marl.llm import trainer as trainer_mod

    model = tmp_path / "tiny"
    tiny_llm.model.save_pretrained(model)
    tiny_llm.tokenizer.save_pretrained(model)
    real = shutil.disk_usage
    monkeypatch.setattr(trainer_mod.shutil, "disk_usage", lambda p: real(p)._replace(free=1 << 20))
    r = CliRunner().invoke(
        app,
        [
            "train",
            "selfplay",
            "--model",
            f"hf:{model}",
            "--steps",
            "1",
            "--out",
            str(tmp_path / "run"),
            "--recipe",
            json.dumps({"proposals_per_step": 2, "n_solvers": 2, "eval_proposals": 1, "eval_problems": 1}),
        ],
    )
    assert r.exit_code == 2, r.output
    assert "needs about" in r.output and "1.0 MiB free" in r.output and "Traceback" not in r.output


def test_episode_is_picklable_for_ray():
    import pickle

    rec = ConductorRecipe()
    _ = rec.sandbox
    clone = pickle.loads(pickle.dumps(rec))
    assert clone._sandbox is None and clone.config() == rec.config()
    e = Episode({"kind": "problem"}, 1, "g")
    assert pickle.loads(pickle.dumps(e)) == e


def test_selfplay_refuses_what_it_cannot_train_on():
    rec = SelfPlayRecipe(proposals_per_step=2, proposer_tokens=4, solver_tokens=4)
    remote = FunctionLLM(lambda prompt: "Question: 2 + 2?\nAnswer: 4", name="remote")  # no tokenizer
    llms = {"proposer": remote, "solver": remote, FROZEN: remote}
    with pytest.raises(
        ValueError, match="training the selfplay policies needs a local model with a tokenizer"
    ):
        rec.run_episodes(llms, rec.train_episodes(0, 0), train=True)
    with pytest.raises(ValueError, match=r"kind 'selfplay' or 'problem', got \['quiz'\]"):
        rec.run_episodes(llms, [Episode({"kind": "quiz"}, 0, "g")], train=False)
