"""OpenEvolve's configuration keys, and what each one does here.

A ``config.yaml`` written for OpenEvolve runs unchanged. Every key of
OpenEvolve's configuration schema (its ``Config`` dataclasses: the top level,
``llm`` and each ``llm.models`` entry, ``prompt``, ``database``,
``evaluator`` and ``evolution_trace``), and the keys its example configs use
besides (top-level ``parallel_evaluations`` and ``max_program_length``, the
``novelty`` and ``algotune`` sections), is in :data:`OPENEVOLVE_KEYS` with
one of three fates:

* **honoured**: it means here what it means in OpenEvolve, under the same
  name or translated into this project's key (:func:`translate` does that:
  ``primary_model``/``secondary_model`` and their weights become
  ``llm.models``, ``evaluator.memory_limit_mb`` becomes
  ``evaluator.memory_mb``, ``max_program_length`` becomes
  ``max_code_length``, ...);
* **no effect**: accepted with one warning line that names the key and says
  why it changes nothing here (a whole section counts as one key);
* **refused value**: the key is known but its value asks for something this
  project cannot do (``language: rust``, ``llm.provider: claude_code``): an
  error that says so, never a silent change of meaning.

A key that neither project knows is an error naming the closest known key,
so a typo never passes silently.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

__all__ = [
    "NO_EFFECT",
    "OPENEVOLVE_KEYS",
    "OPENEVOLVE_SECTIONS",
    "closest",
    "translate",
]

# ------------------------------------------------------------------ the schema

# Sections whose keys are listed one by one; "llm.models" stands for every entry of the list.
OPENEVOLVE_SECTIONS = ("llm", "llm.models", "prompt", "database", "evaluator")

_MODEL_HONOURED = {
    "name": "the model: an OpenAI model name (served at api_base) or a societas LLM URI",
    "weight": "relative chance that a child's prompt goes to this model",
    "api_base": "the OpenAI-compatible server of this model",
    "api_key": "the server's key (${VAR} reads an environment variable)",
    "temperature": "sampling temperature",
    "top_p": "nucleus sampling",
    "max_tokens": "longest answer, capped to the model's context length",
    "timeout": "seconds one request may take",
    "retries": "retries of a request after a timeout, HTTP 429 or 5xx (other 4xx are not retried)",
    "retry_delay": "first back-off between retries, in seconds (doubled each time)",
    "reasoning_effort": "sent to the server as reasoning_effort",
    "provider": "only the OpenAI-compatible API ('openai', or unset) is supported",
}
_MODEL_NO_EFFECT = {
    "init_client": "a Python callable cannot come from YAML; give an LLM URI as the model name instead",
    "system_message": "the system message is prompt.system_message, shared by all models",
    "random_seed": "every request is seeded from the run's random_seed and the iteration",
    "max_budget_usd": "belongs to the Claude Code CLI provider, which is not supported",
    "manual_mode": "human-in-the-loop answers are not supported",
    "_manual_queue_dir": "human-in-the-loop answers are not supported",
}

#: ``{"section.key": None}`` for honoured keys, ``{"section.key": reason}`` for keys without effect.
#: Top-level keys have no section prefix.
OPENEVOLVE_KEYS: dict[str, str | None] = {
    # top level
    "max_iterations": None,
    "random_seed": None,
    "diff_based_evolution": None,
    "max_code_length": None,
    "max_program_length": None,  # in OpenEvolve's examples: the same as max_code_length
    "parallel_evaluations": None,  # in OpenEvolve's examples: evaluator.parallel_evaluations
    "language": None,  # python only; another language is refused
    "file_suffix": None,  # .py only; another suffix is refused
    "llm": None,
    "prompt": None,
    "database": None,
    "evaluator": None,
    "novelty": None,
    "checkpoint_interval": "every program is committed to programs.db the moment it is evaluated, "
    "and --resume continues from there",
    "log_level": "give --log-level on the command line",
    "log_dir": "logs go to standard error; the run directory holds metrics.jsonl and programs.db",
    "allow_full_rewrites": "diff_based_evolution: false asks for whole programs; with diffs a model "
    "may still answer with a whole program",
    "diff_pattern": "answers are read as SEARCH/REPLACE blocks (OpenEvolve's default pattern) or a "
    "fenced program",
    "early_stopping_patience": "a run stops at max_iterations or time_budget_minutes",
    "convergence_threshold": "a run stops at max_iterations or time_budget_minutes",
    "early_stopping_metric": "a run stops at max_iterations or time_budget_minutes",
    "max_tasks_per_child": "every evaluation runs in a fresh sandboxed process already",
    "evolution_trace": "metrics.jsonl, programs.db and report.html record every program",
    "algotune": "it configures OpenEvolve's AlgoTune harness, which is not part of this project; "
    "the task's evaluator.py decides how a program is timed",
    # llm (the shared settings of every model, plus the ensemble)
    **{f"llm.{key}": None for key in _MODEL_HONOURED if key not in ("name", "weight")},
    **{f"llm.{key}": reason for key, reason in _MODEL_NO_EFFECT.items()},
    "llm.name": "name the models in llm.models or llm.primary_model",  # OpenEvolve never reads it either
    "llm.weight": "give each model its weight in llm.models",
    "llm.models": None,
    "llm.primary_model": None,
    "llm.primary_model_weight": None,
    "llm.secondary_model": None,
    "llm.secondary_model_weight": None,
    "llm.evaluator_models": "LLM feedback on programs (evaluator.use_llm_feedback) is not done here",
    # one entry of llm.models
    **{f"llm.models.{key}": None for key in _MODEL_HONOURED},
    **{f"llm.models.{key}": reason for key, reason in _MODEL_NO_EFFECT.items()},
    # prompt
    "prompt.system_message": None,
    "prompt.num_top_programs": None,
    "prompt.num_diverse_programs": None,
    "prompt.include_artifacts": None,
    "prompt.max_artifact_bytes": None,
    "prompt.template_dir": "the prompt is built in code (societas.evolve.mutation.build_prompt), "
    "not from template files",
    "prompt.evaluator_system_message": "LLM feedback on programs is not done here",
    "prompt.programs_as_changes_description": "prompts show programs as code",
    "prompt.system_message_changes_description": "prompts show programs as code",
    "prompt.initial_changes_description": "prompts show programs as code",
    "prompt.use_template_stochasticity": "the prompt is built in code, without template variations",
    "prompt.template_variations": "the prompt is built in code, without template variations",
    "prompt.use_meta_prompting": "meta-prompting is not done (OpenEvolve does not do it either)",
    "prompt.meta_prompt_weight": "meta-prompting is not done (OpenEvolve does not do it either)",
    "prompt.artifact_security_filter": "artifacts are shown as the evaluator wrote them, cut to "
    "max_artifact_bytes; they never run",
    "prompt.suggest_simplification_after_chars": "the prompt does not label programs by length",
    "prompt.include_changes_under_chars": "the prompt does not label programs by length",
    "prompt.concise_implementation_max_lines": "the prompt does not label programs by length",
    "prompt.comprehensive_implementation_min_lines": "the prompt does not label programs by length",
    "prompt.code_length_threshold": "the prompt does not label programs by length",
    "prompt.diff_summary_max_line_len": "the prompt shows no summaries of earlier attempts",
    "prompt.diff_summary_max_lines": "the prompt shows no summaries of earlier attempts",
    # database
    "database.population_size": None,
    "database.archive_size": None,
    "database.num_islands": None,
    "database.exploration_ratio": None,
    "database.exploitation_ratio": None,
    "database.feature_dimensions": None,
    "database.feature_bins": None,
    "database.diversity_reference_size": None,
    "database.migration_interval": None,
    "database.migration_rate": None,
    "database.random_seed": None,  # the run's seed when the top level gives none
    "database.similarity_threshold": None,  # novelty rejection's threshold
    "database.db_path": "the database is programs.db in the run directory (--out)",
    "database.in_memory": "the database is programs.db in the run directory, written as programs come",
    "database.log_prompts": "LLM answers are kept as the llm_response artifact; prompts are rebuilt "
    "from the database",
    "database.elite_selection_ratio": "parents come from the archive, the island or the whole "
    "population by exploitation_ratio and exploration_ratio",
    "database.diversity_metric": "diversity is the mean line difference to the island's best programs",
    "database.artifacts_base_path": "artifacts are stored with their program in programs.db",
    "database.artifact_size_threshold": "artifacts are stored with their program in programs.db",
    "database.cleanup_old_artifacts": "artifacts are stored with their program in programs.db",
    "database.artifact_retention_days": "artifacts are stored with their program in programs.db",
    "database.max_snapshot_artifacts": "artifacts are stored with their program in programs.db",
    "database.novelty_llm": "near duplicates are found by token-set similarity, without an LLM judge",
    "database.embedding_model": "near duplicates are found by token-set similarity, without embeddings",
    # evaluator
    "evaluator.timeout": None,
    "evaluator.cascade_evaluation": None,
    "evaluator.cascade_thresholds": None,
    "evaluator.parallel_evaluations": None,
    "evaluator.memory_limit_mb": None,
    "evaluator.enable_artifacts": None,
    "evaluator.max_artifact_storage": None,
    "evaluator.max_retries": "an evaluation is not retried: a crash or timeout is the program's result",
    "evaluator.cpu_limit": "each evaluation is one sandboxed process; parallel_evaluations sets how "
    "many run at once",
    "evaluator.distributed": "use --executor ray to spread evaluations over machines",
    "evaluator.use_llm_feedback": "LLM feedback on programs is not done here",
    "evaluator.llm_feedback_weight": "LLM feedback on programs is not done here",
}

#: The keys of :data:`OPENEVOLVE_KEYS` that change nothing here (with their reason).
NO_EFFECT: dict[str, str] = {k: v for k, v in OPENEVOLVE_KEYS.items() if v is not None}

# Keys of OpenEvolve's ``novelty`` section (its example configs), honoured or not.
_NOVELTY_KEYS: dict[str, str | None] = {
    "enabled": None,
    "similarity_threshold": None,
    "embedding_backend": "near duplicates are found by token-set similarity, without embeddings",
    "embedding_model": "near duplicates are found by token-set similarity, without embeddings",
    "max_regeneration_attempts": None,  # novelty.redraws: LLM-free children only, LLM children are not redrawn
    "temperature_increment": "a rejected LLM child is not regenerated at a higher temperature: its iteration "
    "records the rejection (the LLM-free operators' children are drawn again, novelty.redraws)",
}

_LANGUAGES = {"python", "py"}


def closest(key: str, known: Iterable[str]) -> str | None:
    """The known key most like ``key`` (difflib), or None when none is close."""
    found = difflib.get_close_matches(key, sorted(set(known)), n=1, cutoff=0.6)
    return found[0] if found else None


# ----------------------------------------------------------------- translation


class _Translation:
    def __init__(self, source: str) -> None:
        self.source = source
        self.warnings: list[str] = []
        self.errors: list[str] = []

    def no_effect(self, path: str, reason: str) -> None:
        self.warnings.append(f"{self.source}: {path} has no effect here: {reason}")


def _move(data: dict[str, Any], key: str, section: str, target: str, t: _Translation) -> None:
    """Move ``data[key]`` to ``data[section][target]``; an explicit different value there is an error."""
    if key not in data:
        return
    value = data.pop(key)
    block = data.setdefault(section, {})
    if not isinstance(block, dict):
        return  # the section's own validation reports it
    if target in block and block[target] != value:
        t.errors.append(
            f"{key}: {value!r} contradicts {section}.{target}: {block[target]!r} (they are the same setting)"
        )
        return
    block[target] = value


def _rename(block: dict[str, Any], key: str, target: str, path: str, t: _Translation) -> None:
    """Move ``block[key]`` to ``block[target]`` (the same setting); different values for both are an error."""
    if key not in block:
        return
    value = block.pop(key)
    if target in block and block[target] != value:
        prefix = f"{path}." if path else ""
        t.errors.append(
            f"{prefix}{key}: {value!r} contradicts {prefix}{target}: {block[target]!r} (they are the same setting)"
        )
        return
    block[target] = value


def _drop_no_effect(block: dict[str, Any], section: str, t: _Translation) -> None:
    prefix = f"{section}." if section else ""
    for key in list(block):
        reason = NO_EFFECT.get(prefix + str(key))
        if reason is not None:
            del block[key]
            t.no_effect(prefix + str(key), reason)


def _model(entry: Any, path: str, t: _Translation) -> Any:
    if not isinstance(entry, dict):
        return entry
    entry = dict(entry)
    _drop_no_effect(entry, "llm.models", t)
    provider = entry.pop("provider", None)
    if provider not in (None, "openai"):
        t.errors.append(
            f"{path}.provider: {provider!r} is not supported: models are reached through the "
            "OpenAI-compatible API (provider 'openai'), or given as a societas LLM URI"
        )
    for key in ("temperature", "top_p", "max_tokens", "timeout", "retries", "retry_delay"):
        if key in entry and entry[key] is None:
            del entry[key]  # OpenEvolve: unset, take the shared value
    return entry


def _llm(block: dict[str, Any], t: _Translation) -> None:
    _drop_no_effect(block, "llm", t)
    for key in ("temperature", "top_p", "max_tokens", "timeout", "retries", "retry_delay", "api_base"):
        if key in block and block[key] is None:
            del block[key]
    provider = block.pop("provider", None)
    if provider not in (None, "openai"):
        t.errors.append(
            f"llm.provider: {provider!r} is not supported: models are reached through the "
            "OpenAI-compatible API (provider 'openai'), or given as a societas LLM URI"
        )
    models = block.get("models")
    if models is None and any(k in block for k in ("primary_model", "secondary_model")):
        models = []
    if isinstance(models, list):
        models = [_model(m, f"llm.models.{i}", t) for i, m in enumerate(models)]
        # OpenEvolve's rule: the primary model (weight default 1.0) and the secondary one (default 0.2,
        # left out at weight 0) are appended to llm.models.
        primary, primary_w = block.pop("primary_model", None), block.pop("primary_model_weight", None)
        secondary, secondary_w = block.pop("secondary_model", None), block.pop("secondary_model_weight", None)
        if primary:
            models.append({"name": primary, "weight": primary_w if primary_w is not None else 1.0})
        if secondary and (secondary_w is None or secondary_w > 0):
            models.append({"name": secondary, "weight": secondary_w if secondary_w is not None else 0.2})
        block["models"] = models
    else:
        for key in ("primary_model", "primary_model_weight", "secondary_model", "secondary_model_weight"):
            block.pop(key, None)


def _novelty(block: Any, t: _Translation) -> Any:
    if not isinstance(block, dict):
        return block
    out: dict[str, Any] = {}
    for key, value in block.items():
        if key in _NOVELTY_KEYS and _NOVELTY_KEYS[key] is not None:
            t.no_effect(f"novelty.{key}", str(_NOVELTY_KEYS[key]))
            continue
        out["redraws" if key == "max_regeneration_attempts" else key] = value
    return out


def translate(data: dict[str, Any], source: str = "config") -> tuple[dict[str, Any], list[str], list[str]]:
    """``data`` with OpenEvolve's keys turned into this project's: ``(data, warnings, errors)``.

    Honoured keys are moved or renamed; keys without effect are dropped, each
    with one warning; refused values are errors. Unknown keys are left for
    the config models to reject (with the closest name, see
    :func:`societas.evolve.config.parse_config`).
    """
    t = _Translation(source)
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    _drop_no_effect(data, "", t)
    language = data.pop("language", None)
    if language is not None and str(language).lower() not in _LANGUAGES:
        t.errors.append(f"language: {language!r} is not supported: only Python programs are evolved")
    suffix = data.pop("file_suffix", None)
    if suffix is not None and suffix != ".py":
        t.errors.append(f"file_suffix: {suffix!r} is not supported: only Python programs (.py) are evolved")
    _move(data, "parallel_evaluations", "evaluator", "parallel_evaluations", t)
    _rename(data, "max_program_length", "max_code_length", "", t)
    if isinstance(data.get("llm"), dict):
        _llm(data["llm"], t)
    if isinstance(data.get("prompt"), dict):
        _drop_no_effect(data["prompt"], "prompt", t)
        _rename(data["prompt"], "max_artifact_bytes", "max_artifact_chars", "prompt", t)
    database = data.get("database")
    if isinstance(database, dict):
        _drop_no_effect(database, "database", t)
        seed = database.pop("random_seed", None)
        if seed is not None and "random_seed" not in data:
            data["random_seed"] = seed
        if "similarity_threshold" in database:
            novelty = data.setdefault("novelty", {})
            if isinstance(novelty, dict):
                novelty.setdefault("similarity_threshold", database.pop("similarity_threshold"))
    if isinstance(data.get("evaluator"), dict):
        _drop_no_effect(data["evaluator"], "evaluator", t)
        _rename(data["evaluator"], "memory_limit_mb", "memory_mb", "evaluator", t)
    if "novelty" in data:
        data["novelty"] = _novelty(data["novelty"], t)
    return data, t.warnings, t.errors
