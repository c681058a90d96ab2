"""Evolve blocks, fitness and configuration loading (OpenEvolve layout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from societas.evolve.config import ConfigError, LLMModelConfig, load_config, parse_config
from societas.evolve.program import (
    EvolveBlockError,
    Program,
    extract_evolve_blocks,
    find_evolve_blocks,
    fitness_of,
    frozen_parts_equal,
    program_id,
    replace_evolve_blocks,
)

TASK = Path(__file__).parent / "tasks" / "curve_fit"

TWO_BLOCKS = """import math
# EVOLVE-BLOCK-START
def f(x):
    return x + 1
# EVOLVE-BLOCK-END

def frozen():
    return 0

    # EVOLVE-BLOCK-START
    y = 2
    # EVOLVE-BLOCK-END
"""


def test_blocks_are_found_extracted_and_replaced_in_place():
    blocks = find_evolve_blocks(TWO_BLOCKS)
    assert [(b.first_line, b.last_line) for b in blocks] == [(3, 4), (11, 11)]
    assert extract_evolve_blocks(TWO_BLOCKS) == ["def f(x):\n    return x + 1\n", "    y = 2\n"]
    new = replace_evolve_blocks(TWO_BLOCKS, {1: "    y = 3"})
    assert extract_evolve_blocks(new) == ["def f(x):\n    return x + 1\n", "    y = 3\n"]
    assert new.replace("y = 3", "y = 2") == TWO_BLOCKS
    assert frozen_parts_equal(TWO_BLOCKS, new)
    assert not frozen_parts_equal(TWO_BLOCKS, new.replace("return 0", "return 1"))


@pytest.mark.parametrize(
    "code, message",
    [
        ("# EVOLVE-BLOCK-START\nx = 1\n", "never closed"),
        ("x = 1\n# EVOLVE-BLOCK-END\n", "without a matching"),
        ("# EVOLVE-BLOCK-START\n# EVOLVE-BLOCK-START\n# EVOLVE-BLOCK-END\n", "inside the block"),
    ],
)
def test_malformed_markers_are_rejected_with_the_line(code, message):
    with pytest.raises(EvolveBlockError, match=message):
        find_evolve_blocks(code)


def test_replace_checks_the_block_count():
    with pytest.raises(EvolveBlockError, match="2 evolve blocks"):
        replace_evolve_blocks(TWO_BLOCKS, ["x"])
    with pytest.raises(EvolveBlockError, match="block 5 does not exist"):
        replace_evolve_blocks(TWO_BLOCKS, {5: "x"})


def test_fitness_prefers_combined_score_else_mean_of_numbers():
    assert fitness_of({"combined_score": 0.25, "a": 10.0}) == 0.25
    assert fitness_of({"a": 1.0, "b": 3, "note": "x", "flag": True}) == 2.0
    assert fitness_of({}) is None


def test_program_round_trips_and_ids_are_deterministic():
    p = Program(
        id=program_id(1, 3, "x"),
        code="x",
        iteration=3,
        metrics={"a": 1.0},
        fitness=1.0,
        mutation={"kind": "constant"},
        artifacts={"failure": "boom"},
    )
    assert Program.from_dict(p.to_dict()) == p
    assert program_id(1, 3, "x") == program_id(1, 3, "x") != program_id(2, 3, "x")
    assert p.failure == "boom"


def test_openevolve_config_maps_its_keys_and_ignores_unsupported_ones():
    cfg = load_config(TASK / "config.yaml")
    assert cfg.max_iterations == 24 and cfg.random_seed == 7
    assert cfg.database.num_islands == 2 and cfg.database.feature_bins == 5
    assert cfg.database.migration_interval == 8 and cfg.database.migration_rate == 0.2
    assert cfg.evaluator.timeout == 20 and cfg.evaluator.cascade_thresholds == [0.05]
    assert cfg.effective_batch_size == 4


def test_llm_models_with_weights_become_load_llm_uris():
    cfg = parse_config(
        {
            "llm": {
                "api_base": "http://localhost:8000/v1",
                "models": [
                    {"name": "gpt-x", "weight": 0.8},
                    {"name": "embedded", "weight": 0.2},
                    {"name": "qwen", "api_base": "http://h:1/v1", "api_key": "k"},
                ],
            }
        }
    )
    uris = [m.uri(cfg.llm.api_base) for m in cfg.llm.models]
    assert uris == ["openai:http://localhost:8000/v1#gpt-x", "embedded", "openai:http://h:1/v1#qwen"]
    assert [m.weight for m in cfg.llm.models] == [0.8, 0.2, 1.0]
    assert LLMModelConfig(name="function:m:f").uri(None) == "function:m:f"


@pytest.mark.parametrize(
    "data, field",
    [
        ({"database": {"num_island": 3}}, "database.num_island: unknown field"),
        ({"database": {"num_islands": 0}}, "database.num_islands"),
        (
            {"database": {"exploration_ratio": 0.5, "exploitation_ratio": 0.7}},
            "exploration_ratio + exploitation_ratio",
        ),
        ({"evaluator": {"timeout": "soon"}}, "evaluator.timeout"),
        ({"mutation": {"weights": {"llm": 1, "teleport": 1}}}, "teleport"),
        ({"llm": {"models": [{"name": "a", "weight": -1}]}}, "llm.models.0.weight"),
        ({"database": {"feature_ranges": {"complexity": [5, 1]}}}, "high > low"),
    ],
)
def test_bad_config_names_the_field(data, field):
    with pytest.raises(ConfigError, match=field.replace("+", r"\+").replace(".", r"\.")):
        parse_config(data)


def test_bad_yaml_file_is_reported(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("database: [unclosed\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: YAML syntax error at line 2"):
        load_config(bad)
