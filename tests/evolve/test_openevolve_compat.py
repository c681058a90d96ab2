"""OpenEvolve configs run unchanged: every key of its schema is honoured or named as without effect."""

from __future__ import annotations

import logging
import random

import pytest

from societas.agents.llm import FunctionLLM, OpenAICompatibleLLM
from societas.evolve.compat import NO_EFFECT
from societas.evolve.config import ConfigError, dump_config, parse_config
from societas.evolve.database import Population
from societas.evolve.mutation import LLMEnsemble, MutationRequest, Mutator
from societas.evolve.program import Program

# Every key of OpenEvolve's configuration schema (openevolve/config.py: Config, LLMConfig,
# LLMModelConfig, PromptConfig, DatabaseConfig, EvaluatorConfig, EvolutionTraceConfig), with a
# value of its type, plus the keys OpenEvolve's example configs add (parallel_evaluations,
# max_program_length and allow_full_rewrites at the top level, the novelty and algotune sections).
MODEL_KEYS = {
    "api_base": "http://127.0.0.1:9/v1",
    "api_key": "${SOCIETAS_TEST_KEY}",
    "name": "model-a",
    "provider": "openai",
    "init_client": None,
    "weight": 0.8,
    "system_message": "be brief",
    "temperature": 0.5,
    "top_p": 0.9,
    "max_tokens": 1000,
    "timeout": 30,
    "retries": 2,
    "retry_delay": 1,
    "random_seed": 7,
    "reasoning_effort": "low",
    "max_budget_usd": 1.0,
    "manual_mode": False,
    "_manual_queue_dir": None,
}
FULL = {
    "max_iterations": 10,
    "checkpoint_interval": 5,
    "log_level": "INFO",
    "log_dir": "logs",
    "random_seed": 3,
    "language": "python",
    "file_suffix": ".py",
    "diff_based_evolution": True,
    "max_code_length": 20000,
    "diff_pattern": r"<<<<<<< SEARCH\n(.*?)=======\n(.*?)>>>>>>> REPLACE",
    "early_stopping_patience": 10,
    "convergence_threshold": 0.001,
    "early_stopping_metric": "combined_score",
    "max_tasks_per_child": 4,
    "parallel_evaluations": 3,
    "max_program_length": 20000,
    "allow_full_rewrites": False,
    "llm": {
        **{k: v for k, v in MODEL_KEYS.items() if k not in ("name", "weight")},
        "name": None,
        "weight": 1.0,
        "models": [dict(MODEL_KEYS)],
        "evaluator_models": [{"name": "judge"}],
        "primary_model": "model-b",
        "primary_model_weight": 0.6,
        "secondary_model": "model-c",
        "secondary_model_weight": 0.4,
    },
    "prompt": {
        "template_dir": None,
        "system_message": "improve it",
        "evaluator_system_message": "judge it",
        "programs_as_changes_description": False,
        "system_message_changes_description": None,
        "initial_changes_description": "",
        "num_top_programs": 2,
        "num_diverse_programs": 1,
        "use_template_stochasticity": True,
        "template_variations": {},
        "use_meta_prompting": False,
        "meta_prompt_weight": 0.1,
        "include_artifacts": True,
        "max_artifact_bytes": 4096,
        "artifact_security_filter": True,
        "suggest_simplification_after_chars": 500,
        "include_changes_under_chars": 100,
        "concise_implementation_max_lines": 10,
        "comprehensive_implementation_min_lines": 50,
        "diff_summary_max_line_len": 100,
        "diff_summary_max_lines": 30,
        "code_length_threshold": None,
    },
    "database": {
        "db_path": None,
        "in_memory": True,
        "log_prompts": True,
        "population_size": 200,
        "archive_size": 20,
        "num_islands": 3,
        "elite_selection_ratio": 0.1,
        "exploration_ratio": 0.2,
        "exploitation_ratio": 0.7,
        "diversity_metric": "edit_distance",
        "feature_dimensions": ["score", "complexity"],
        "feature_bins": 8,
        "diversity_reference_size": 10,
        "migration_interval": 20,
        "migration_rate": 0.1,
        "random_seed": 42,
        "artifacts_base_path": None,
        "artifact_size_threshold": 32768,
        "cleanup_old_artifacts": True,
        "artifact_retention_days": 30,
        "max_snapshot_artifacts": 100,
        "novelty_llm": None,
        "embedding_model": None,
        "similarity_threshold": 0.97,
    },
    "evaluator": {
        "timeout": 60,
        "max_retries": 3,
        "memory_limit_mb": 1024,
        "cpu_limit": None,
        "cascade_evaluation": True,
        "cascade_thresholds": [0.3, 0.6],
        "parallel_evaluations": 3,
        "distributed": False,
        "use_llm_feedback": False,
        "llm_feedback_weight": 0.1,
        "enable_artifacts": True,
        "max_artifact_storage": 100000,
    },
    "evolution_trace": {"enabled": False, "format": "jsonl", "include_code": False},
    "novelty": {
        "enabled": True,
        "embedding_backend": "local",
        "embedding_model": "all-MiniLM-L6-v2",
        "similarity_threshold": 0.95,
        "max_regeneration_attempts": 5,
        "temperature_increment": 0.15,
    },
    "algotune": {"num_trials": 5, "data_size": 100, "timeout": 300},
}

# The keys of FULL that change nothing here: what the parser must warn about, and nothing else.
WITHOUT_EFFECT = {
    "allow_full_rewrites",
    "checkpoint_interval",
    "log_level",
    "log_dir",
    "diff_pattern",
    "early_stopping_patience",
    "convergence_threshold",
    "early_stopping_metric",
    "max_tasks_per_child",
    "evolution_trace",
    "algotune",
    "llm.init_client",
    "llm.system_message",
    "llm.random_seed",
    "llm.max_budget_usd",
    "llm.manual_mode",
    "llm._manual_queue_dir",
    "llm.name",
    "llm.weight",
    "llm.evaluator_models",
    "llm.models.init_client",
    "llm.models.system_message",
    "llm.models.random_seed",
    "llm.models.max_budget_usd",
    "llm.models.manual_mode",
    "llm.models._manual_queue_dir",
    "prompt.template_dir",
    "prompt.evaluator_system_message",
    "prompt.programs_as_changes_description",
    "prompt.system_message_changes_description",
    "prompt.initial_changes_description",
    "prompt.use_template_stochasticity",
    "prompt.template_variations",
    "prompt.use_meta_prompting",
    "prompt.meta_prompt_weight",
    "prompt.artifact_security_filter",
    "prompt.suggest_simplification_after_chars",
    "prompt.include_changes_under_chars",
    "prompt.concise_implementation_max_lines",
    "prompt.comprehensive_implementation_min_lines",
    "prompt.diff_summary_max_line_len",
    "prompt.diff_summary_max_lines",
    "prompt.code_length_threshold",
    "database.db_path",
    "database.in_memory",
    "database.log_prompts",
    "database.elite_selection_ratio",
    "database.diversity_metric",
    "database.artifacts_base_path",
    "database.artifact_size_threshold",
    "database.cleanup_old_artifacts",
    "database.artifact_retention_days",
    "database.max_snapshot_artifacts",
    "database.novelty_llm",
    "database.embedding_model",
    "evaluator.max_retries",
    "evaluator.cpu_limit",
    "evaluator.distributed",
    "evaluator.use_llm_feedback",
    "evaluator.llm_feedback_weight",
    "novelty.embedding_backend",
    "novelty.embedding_model",
    "novelty.temperature_increment",
}


def warned_keys(caplog) -> list[str]:
    keys = []
    for record in caplog.records:
        message = record.getMessage()
        if record.levelno == logging.WARNING and " has no effect here: " in message:
            keys.append(message.split(": ", 1)[1].split(" has no effect here", 1)[0])
    return keys


def test_every_openevolve_key_is_accepted_and_exactly_the_ineffective_ones_warn(caplog):
    caplog.set_level(logging.WARNING, logger="societas.evolve.config")
    config = parse_config(FULL, source="full.yaml")
    warned = warned_keys(caplog)
    assert sorted(set(warned)) == sorted(WITHOUT_EFFECT)
    # one line per key (a key of llm.models once per model entry: here one entry)
    assert len(warned) == len(set(warned))
    # and each line says why
    assert all(record.getMessage().startswith("full.yaml: ") for record in caplog.records)
    # The honoured keys took effect.
    assert config.max_iterations == 10 and config.random_seed == 3
    assert config.max_code_length == 20000
    assert config.evaluator.parallel_evaluations == 3 and config.evaluator.memory_mb == 1024
    assert config.evaluator.timeout == 60 and config.evaluator.cascade_thresholds == [0.3, 0.6]
    assert config.evaluator.max_artifact_storage == 100000
    assert config.prompt.system_message == "improve it" and config.prompt.max_artifact_chars == 4096
    assert config.prompt.num_top_programs == 2 and config.prompt.num_diverse_programs == 1
    db = config.database
    assert (db.population_size, db.archive_size, db.num_islands) == (200, 20, 3)
    assert db.feature_dimensions == ["score", "complexity"] and db.feature_bins == 8
    assert (db.migration_interval, db.diversity_reference_size) == (20, 10)
    # novelty: the section's threshold wins over database.similarity_threshold
    assert config.novelty.enabled and config.novelty.similarity_threshold == 0.95
    assert config.novelty.redraws == 5  # max_regeneration_attempts, for the LLM-free operators' children
    # llm.models, then the primary and the secondary model, with their weights
    assert [(m.name, m.weight) for m in config.llm.models] == [
        ("model-a", 0.8),
        ("model-b", 0.6),
        ("model-c", 0.4),
    ]
    llm = config.llm
    assert (llm.timeout, llm.retries, llm.retry_delay, llm.reasoning_effort) == (30, 2, 1, "low")
    assert config.llm.settings(0)["max_tokens"] == 1000 and config.llm.settings(1)["max_tokens"] == 1000


def test_the_schema_written_here_covers_every_key_said_to_have_no_effect():
    # With the test above: the table of keys without effect is exactly what this schema warns about.
    novelty = {k for k in WITHOUT_EFFECT if k.startswith("novelty.")}
    assert set(NO_EFFECT) == WITHOUT_EFFECT - novelty


@pytest.mark.parametrize(
    "data, message",
    [
        ({"databse": {}}, "databse: unknown field (did you mean 'database'?)"),
        ({"database": {"num_island": 3}}, "database.num_island: unknown field (did you mean 'num_islands'?)"),
        ({"llm": {"temprature": 1}}, "llm.temprature: unknown field (did you mean 'temperature'?)"),
        (
            {"llm": {"models": [{"name": "x", "wieght": 2}]}},
            "llm.models.0.wieght: unknown field (did you mean 'weight'?)",
        ),
        ({"evaluator": {"paralel_evaluations": 2}}, "(did you mean 'parallel_evaluations'?)"),
        ({"prompt": {"max_artifact_byte": 10}}, "(did you mean 'max_artifact_bytes'?)"),
        ({"language": "rust"}, "language: 'rust' is not supported: only Python programs are evolved"),
        ({"file_suffix": ".rs"}, "file_suffix: '.rs' is not supported"),
        ({"llm": {"provider": "claude_code"}}, "llm.provider: 'claude_code' is not supported"),
        (
            {"parallel_evaluations": 2, "evaluator": {"parallel_evaluations": 3}},
            "parallel_evaluations: 2 contradicts evaluator.parallel_evaluations: 3",
        ),
        (
            {"max_program_length": 10, "max_code_length": 20},
            "max_program_length: 10 contradicts max_code_length",
        ),
    ],
)
def test_typos_and_unsupported_values_are_errors_that_say_what_to_write(data, message):
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert message in str(info.value)


def test_openevolve_model_rules_primary_secondary_and_nulls():
    config = parse_config({"llm": {"primary_model": "a", "secondary_model": "b", "top_p": None}})
    assert [(m.name, m.weight) for m in config.llm.models] == [("a", 1.0), ("b", 0.2)]
    assert config.llm.top_p == 0.95  # null: the default
    config = parse_config(
        {"llm": {"primary_model": "a", "secondary_model": "b", "secondary_model_weight": 0}}
    )
    assert [m.name for m in config.llm.models] == ["a"]
    # the shared values reach the models that leave them unset, and a model's own value wins
    config = parse_config(
        {
            "llm": {
                "temperature": 0.3,
                "timeout": 5,
                "models": [{"name": "a"}, {"name": "b", "temperature": 0.9}],
            }
        }
    )
    assert config.llm.settings(0)["temperature"] == 0.3 and config.llm.settings(1)["temperature"] == 0.9
    assert config.llm.settings(1)["timeout"] == 5


def test_a_run_directory_never_holds_an_api_key_written_in_the_config():
    config = parse_config(
        {"llm": {"api_key": "sk-secret", "models": [{"name": "a", "api_key": "${MY_KEY}"}, {"name": "b"}]}}
    )
    text = dump_config(config)
    assert "sk-secret" not in text and "${MY_KEY}" in text
    assert parse_config(__import__("yaml").safe_load(text)).llm.models[0].api_key == "${MY_KEY}"


def test_the_ensemble_honours_each_models_request_and_sampling_settings(monkeypatch):
    monkeypatch.setenv("SOCIETAS_TEST_KEY", "key-from-env")
    config = parse_config(
        {
            "llm": {
                "api_base": "http://127.0.0.1:9/v1",
                "timeout": 12,
                "retries": 4,
                "retry_delay": 0.25,
                "temperature": 0.3,
                "models": [
                    {"name": "a", "weight": 3, "api_key": "${SOCIETAS_TEST_KEY}", "reasoning_effort": "high"},
                    {
                        "name": "b",
                        "weight": 1,
                        "timeout": 99,
                        "retries": 0,
                        "temperature": 1.1,
                        "max_tokens": 77,
                    },
                ],
            }
        }
    )
    ensemble = LLMEnsemble.from_config(config.llm)
    assert ensemble is not None
    (a, wa), (b, wb) = ensemble.members
    assert isinstance(a, OpenAICompatibleLLM) and isinstance(b, OpenAICompatibleLLM)
    assert (wa, wb) == (3, 1)
    assert (a.timeout_s, a.max_retries, a.backoff_s) == (12, 4, 0.25)
    assert (b.timeout_s, b.max_retries) == (99, 0)
    assert a.extra_body == {"reasoning_effort": "high"} and b.extra_body == {}
    assert repr(a).count("api_key=set") == 1
    assert ensemble.sampling == [
        {"temperature": 0.3, "top_p": 0.95, "max_tokens": 4096},
        {"temperature": 1.1, "top_p": 0.95, "max_tokens": 77},
    ]
    monkeypatch.delenv("SOCIETAS_TEST_KEY")
    with pytest.raises(ValueError, match="SOCIETAS_TEST_KEY, which is not set"):
        LLMEnsemble.from_config(config.llm)


def test_weighted_models_get_children_in_proportion_and_their_own_sampling():
    seen: dict[str, list[float]] = {"a": [], "b": []}

    def answer(name):
        def reply(messages, params):
            seen[name].append(params.temperature)
            return ""

        return reply

    ensemble = LLMEnsemble(
        [(FunctionLLM(answer("a"), name="a"), 3.0), (FunctionLLM(answer("b"), name="b"), 1.0)],
        sampling=[{"temperature": 0.2}, {"temperature": 1.3}],
    )
    config = parse_config({"mutation": {"weights": {"llm": 1.0}}, "adaptive": {"enabled": False}})
    mutator = Mutator(config, ensemble)
    rng = random.Random(0)
    plans = [mutator.plan(rng) for _ in range(4000)]
    share = sum(model == 0 for _, model in plans) / len(plans)
    assert abs(share - 0.75) < 0.03
    parent = Program("p", "x = 1\n# EVOLVE-BLOCK-START\ny = 2\n# EVOLVE-BLOCK-END\n", 0, fitness=1.0)
    requests = [
        MutationRequest(iteration=i, kind="llm", parent=parent, inspirations=[], seed=i, model_index=m)
        for i, (_, m) in enumerate(plans[:6], start=1)
    ]
    mutator.make(requests)
    assert set(seen["a"]) <= {0.2} and set(seen["b"]) <= {1.3} and seen["a"] and seen["b"]


def test_score_is_a_feature_dimension_spanning_the_fitness_seen():
    config = parse_config(
        {"database": {"feature_dimensions": ["score"], "feature_bins": 4, "num_islands": 1}}
    )
    population = Population(config.database)
    made = []
    for iteration, fitness in enumerate([-1.0, -0.5, -0.2, -0.9, 0.0]):
        program = Program(f"p{iteration}", f"x = {iteration}\n", iteration, fitness=fitness)
        population.add(program)
        made.append(program)
    cells = population.islands[0].cells
    # the seed (alone: bin 0), then each program binned within the span seen so far
    assert cells["p0"] == (0,)
    assert cells["p1"] == (3,)  # the highest so far: the top bin
    assert cells["p2"] == (3,)
    assert cells["p3"] == (0,)  # (-0.9 - -1) / 0.8 * 4 = 0.5
    assert cells["p4"] == (3,)
    assert len({cells[p.id] for p in made}) == 2
