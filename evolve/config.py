"""The configuration of an evolutionary run, as typed pydantic models.

The layout follows OpenEvolve's ``config.yaml`` so that a task written for
OpenEvolve runs unchanged: the top-level ``max_iterations`` and
``random_seed``, and the ``llm``, ``prompt``, ``database`` and ``evaluator``
sections with OpenEvolve's key names where they mean the same thing.
OpenEvolve keys that have no counterpart here (checkpointing, LLM feedback,
retries, …) are listed in :data:`IGNORED_OPENEVOLVE_KEYS` and dropped with an
INFO log; any other unknown key is an error naming its path, so a typo like
``database.num_island`` never passes silently. Our own additions are the
``mutation`` section (the mix of LLM diffs and AST operators), ``batch_size``,
``evaluator.task_settings`` (per-run parameters handed to the task's
evaluator), ``evaluator.sandbox`` (the sandbox backend of the evaluations;
``rlimit`` runs candidates unconfined and must be asked for by name), the
``validation`` section (which programs are scored on the task's validation
set, which chooses the program a run returns) and the ``held_out`` section
(what the report scores on the task's held-out set).

:func:`load_config` reads a YAML file into an :class:`EvolveConfig`; a bad
file raises :class:`ConfigError` whose message names the file and the
offending field. Numbers have upper bounds that only stop absurd values
(:data:`MAX_ITERATIONS`, :data:`MAX_WORKERS`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from societas.agents.documents import DocumentError, load_yaml_file

logger = logging.getLogger(__name__)

__all__ = [
    "IGNORED_OPENEVOLVE_KEYS",
    "MAX_ITERATIONS",
    "MAX_RANDOM_SEED",
    "MAX_WORKERS",
    "SANDBOX_BACKENDS",
    "SandboxBackend",
    "ConfigError",
    "DatabaseConfig",
    "EvaluatorConfig",
    "EvolveConfig",
    "HeldOutConfig",
    "ValidationConfig",
    "LLMConfig",
    "LLMModelConfig",
    "MutationConfig",
    "PromptConfig",
    "load_config",
    "parse_config",
]

MUTATION_KINDS = ("llm", "llm_line", "constant", "operator", "function", "crossover", "blocks", "cmaes")

# Upper bounds that only stop absurd values (a typo such as 10**23 iterations).
MAX_ITERATIONS = 10_000_000
MAX_WORKERS = 1024
MAX_RANDOM_SEED = 2**63 - 1

SandboxBackend = Literal["auto", "bwrap", "rlimit"]
SANDBOX_BACKENDS: tuple[str, ...] = ("auto", "bwrap", "rlimit")

DEFAULT_SYSTEM_MESSAGE = (
    "You are an expert programmer improving a program through evolution. "
    "Only code between EVOLVE-BLOCK-START and EVOLVE-BLOCK-END may change."
)

# OpenEvolve keys accepted and ignored (no counterpart here), by section ("" = top level).
IGNORED_OPENEVOLVE_KEYS: dict[str, frozenset[str]] = {
    "": frozenset(
        {
            "checkpoint_interval",
            "log_level",
            "log_dir",
            "allow_full_rewrites",
            "language",
            "file_suffix",
            "early_stopping_patience",
            "convergence_threshold",
            "early_stopping_metric",
            "max_tasks_per_child",
            "evolution_trace",
        }
    ),
    "llm": frozenset(
        {
            "evaluator_models",
            "api_key",
            "retries",
            "retry_delay",
            "system_message",
            "primary_model",
            "primary_model_weight",
            "secondary_model",
            "secondary_model_weight",
            "reasoning_effort",
            "manual_mode",
        }
    ),
    "llm.models": frozenset(
        {
            "api_key",
            "retries",
            "retry_delay",
            "temperature",
            "top_p",
            "max_tokens",
            "reasoning_effort",
        }
    ),
    "prompt": frozenset(
        {
            "template_dir",
            "evaluator_system_message",
            "use_template_stochasticity",
            "template_variations",
            "use_meta_prompting",
            "meta_prompt_weight",
            "include_changes_under_chars",
            "suggest_simplification_after_chars",
            "concise_implementation_max_lines",
            "comprehensive_implementation_min_lines",
            "code_length_threshold",
            "programs_as_changes_description",
            "system_message_changes_description",
            "initial_changes_description",
            "diff_summary_max_line_len",
            "diff_summary_max_lines",
            "artifact_security_filter",
            "max_artifact_bytes",
        }
    ),
    "database": frozenset(
        {
            "db_path",
            "in_memory",
            "log_prompts",
            "elite_selection_ratio",
            "random_seed",
            "cleanup_old_artifacts",
            "artifact_size_threshold",
            "artifact_retention_days",
            "artifacts_base_path",
            "novelty_llm",
            "embedding_model",
            "similarity_threshold",
        }
    ),
    "evaluator": frozenset(
        {
            "max_retries",
            "use_llm_feedback",
            "llm_feedback_weight",
            "distributed",
            "enable_artifacts",
            "max_artifact_storage",
        }
    ),
}


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the field."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


MAX_LLM_TIMEOUT_S = 86_400.0
"""The longest request time limit accepted (a day)."""


class LLMModelConfig(_Section):
    """One backend of the ensemble: an ``societas.agents.load_llm`` URI (or an OpenAI model name) and its weight."""

    name: str = Field(min_length=1)
    weight: float = Field(1.0, gt=0)
    api_base: str | None = None
    timeout: float | None = Field(
        None, gt=0, le=MAX_LLM_TIMEOUT_S, description="this model's request time limit; default llm.timeout"
    )

    def uri(self, default_api_base: str | None) -> str:
        """The ``load_llm`` URI: the name itself when it is one, else ``openai:API_BASE#NAME``."""
        if self.name == "embedded" or self.name.split(":", 1)[0] in (
            "hf",
            "gguf",
            "vllm",
            "openai",
            "function",
        ):
            return self.name
        base = self.api_base or default_api_base or "https://api.openai.com/v1"
        return f"openai:{base}#{self.name}"


class LLMConfig(_Section):
    models: list[LLMModelConfig] = Field(default_factory=list)
    api_base: str | None = None
    timeout: float | None = Field(
        None,
        gt=0,
        le=MAX_LLM_TIMEOUT_S,
        description="seconds one request to an OpenAI-compatible server may take in all (connecting, "
        "waiting and reading the answer); default the client's own (60 s)",
    )
    temperature: float = Field(0.7, ge=0)
    top_p: float = Field(0.95, gt=0, le=1)
    max_tokens: int = Field(4096, ge=1)


class PromptConfig(_Section):
    system_message: str = DEFAULT_SYSTEM_MESSAGE
    num_top_programs: int = Field(3, ge=0)
    num_diverse_programs: int = Field(2, ge=0)
    include_artifacts: bool = True
    max_artifact_chars: int = Field(2000, ge=0)


class DatabaseConfig(_Section):
    """MAP-Elites islands (Mouret & Clune 2015; island models as in AlphaEvolve/FunSearch)."""

    population_size: int = Field(1000, ge=1, description="programs kept over all islands")
    archive_size: int = Field(100, ge=1, description="size of the elite archive (best programs overall)")
    num_islands: int = Field(4, ge=1)
    feature_dimensions: list[str] = Field(default_factory=lambda: ["complexity", "diversity"], min_length=1)
    feature_bins: int | dict[str, int] = 10
    feature_ranges: dict[str, tuple[float, float]] = Field(
        default_factory=dict,
        description=(
            "[low, high] per feature; defaults: complexity [L/2, 3L/2] (L = seed length), "
            "diversity [0, 0.25], metrics [0, 1]"
        ),
    )
    migration_interval: int = Field(50, ge=1, description="iterations between ring migrations")
    migration_rate: float = Field(0.1, ge=0, le=1, description="fraction of an island's elites that migrate")
    exploration_ratio: float = Field(0.2, ge=0, le=1)
    exploitation_ratio: float = Field(0.7, ge=0, le=1)
    diversity_reference_size: int = Field(
        8, ge=1, description="elites a program's diversity is measured against"
    )

    @field_validator("feature_bins")
    @classmethod
    def _bins_positive(cls, value: int | dict[str, int]) -> int | dict[str, int]:
        values = value.values() if isinstance(value, dict) else [value]
        if any(v < 1 for v in values):
            raise ValueError("every feature bin count must be >= 1")
        return value

    @field_validator("feature_ranges")
    @classmethod
    def _ranges_ordered(cls, value: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
        for name, (low, high) in value.items():
            if not high > low:
                raise ValueError(f"feature range of {name!r} must have high > low, got [{low}, {high}]")
        return value

    @model_validator(mode="after")
    def _ratios(self) -> DatabaseConfig:
        if self.exploration_ratio + self.exploitation_ratio > 1 + 1e-9:
            raise ValueError(
                f"exploration_ratio + exploitation_ratio must be <= 1, got "
                f"{self.exploration_ratio} + {self.exploitation_ratio}"
            )
        if isinstance(self.feature_bins, dict):
            missing = [d for d in self.feature_dimensions if d not in self.feature_bins]
            if missing:
                raise ValueError(f"feature_bins has no entry for feature dimension(s) {missing}")
        return self

    def bins(self, dimension: str) -> int:
        return self.feature_bins[dimension] if isinstance(self.feature_bins, dict) else self.feature_bins


class EvaluatorConfig(_Section):
    timeout: float = Field(300.0, gt=0, description="wall-clock seconds per cascade stage")
    memory_mb: int | None = Field(2048, ge=16, description="sandbox address-space limit; torch needs >= 1024")
    max_processes: int = Field(64, ge=1)
    cascade_evaluation: bool = True
    cascade_thresholds: list[float] = Field(default_factory=lambda: [0.5, 0.75, 0.9])
    parallel_evaluations: int = Field(
        4, ge=1, le=MAX_WORKERS, description="default batch size and worker count"
    )
    halving_keep: float | None = Field(
        None,
        gt=0,
        le=1,
        description="successive halving on the cascade's last gate (ASHA, Li et al. 2020): a candidate "
        "goes on to the last stage only when its score after the stage before is among the best "
        "halving_keep of the scores recorded there so far (and above that gate's cascade threshold, "
        "if any); None: the fixed thresholds alone",
    )
    halving_min_scores: int = Field(
        8, ge=1, description="scores recorded at the halving gate before it starts to stop candidates"
    )
    group_size: int = Field(
        1,
        ge=1,
        le=1024,
        description="candidates evaluated in one sandbox: the interpreter, the evaluator and its warm_up() "
        "start once per sandbox, each candidate still runs in a process of its own (1: a sandbox each). "
        "With the local executor the sandboxes stay up between batches (a warm pool, each replaced after "
        "this many candidates); with Ray a batch is cut into groups of at most this many",
    )
    sandbox: SandboxBackend = Field(
        "auto",
        description="the sandbox backend of every evaluation: auto (bubblewrap; see "
        "societas.agents.sandbox), bwrap, or rlimit (resource limits only: candidates run unconfined)",
    )
    task_settings: dict[str, Any] = Field(
        default_factory=dict,
        description="JSON values written as task_settings.json next to program.py in every evaluation's "
        "scratch directory; a task's evaluator may read them (e.g. the cfr task's iterations)",
    )

    @field_validator("task_settings")
    @classmethod
    def _json_settings(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            json.dumps(value, allow_nan=False)
        except RecursionError:
            raise ValueError("task_settings is nested too deeply") from None
        except (TypeError, ValueError) as exc:
            raise ValueError(f"task_settings must hold plain JSON values: {exc}") from None
        return value


class MutationConfig(_Section):
    """How children are made: relative weights of LLM diffs and each AST operator."""

    weights: dict[str, float] = Field(
        default_factory=lambda: {
            "llm": 0.6,
            "constant": 0.2,
            "operator": 0.1,
            "function": 0.05,
            "crossover": 0.05,
        }
    )
    constant_sigma: float = Field(0.3, gt=0, description="std of the log-normal multiplicative noise")
    additive_probability: float = Field(0.25, ge=0, le=1, description="chance a constant gets additive noise")
    max_constants: int = Field(3, ge=1, description="at most this many constants change per mutation")
    perturb_ints: bool = True
    cmaes_sigma: float = Field(
        0.3, gt=0, description="CMA-ES's initial step, in units of each literal's magnitude (at least 0.1)"
    )
    block_edits: int = Field(
        1,
        ge=1,
        le=4,
        description="a 'blocks' child gets from 1 to this many building-block edits (drawn uniformly)",
    )
    cmaes_population: int | None = Field(
        None, ge=2, description="CMA-ES's generation size; default 4 + 3 ln(number of literals)"
    )
    function_pairs: list[tuple[str, str]] = Field(
        default_factory=lambda: [
            ("min", "max"),
            ("torch.minimum", "torch.maximum"),
            ("torch.relu", "torch.abs"),
            ("torch.sqrt", "torch.log1p"),
            ("torch.exp", "torch.expm1"),
            ("math.sqrt", "math.log1p"),
            ("math.exp", "math.expm1"),
            ("abs", "float"),
        ]
    )

    @field_validator("weights")
    @classmethod
    def _known_kinds(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(MUTATION_KINDS))
        if unknown:
            raise ValueError(f"unknown mutation kind(s) {unknown}; known: {list(MUTATION_KINDS)}")
        if any(w < 0 for w in value.values()):
            raise ValueError("mutation weights must be >= 0")
        if sum(value.values()) <= 0:
            raise ValueError("at least one mutation weight must be > 0")
        return value


class ValidationConfig(_Section):
    """Selection on validation games (the task's ``evaluate_validation``), apart from training and held-out.

    During the run, every program that enters the best ``top_programs``
    distinct programs by training fitness is scored on the validation set;
    the run returns the one that scores best there. Without
    ``evaluate_validation`` in the task (or with ``enabled: false``) the run
    returns the best program on the training set.
    """

    enabled: bool = True
    top_programs: int = Field(
        4, ge=1, description="validate the best this many distinct programs by training fitness"
    )
    timeout: float | None = Field(None, gt=0, description="seconds per program; default evaluator.timeout")


class HeldOutConfig(_Section):
    """After a run, the report scores programs on the task's held-out set (its ``evaluate_held_out``)."""

    enabled: bool = True
    top_programs: int = Field(1, ge=0, description="the best this many distinct programs (besides the seed)")
    baselines: list[str] | None = Field(
        None, description="names from the evaluator's held_out_baselines(); null: all of them, []: none"
    )
    timeout: float | None = Field(
        None,
        gt=0,
        description="seconds per program, on the held-out set and for the baselines' training scores; "
        "default evaluator.timeout",
    )
    history: int = Field(
        3,
        ge=0,
        description="also score this many earlier validation choices (the latest first), for the plot",
    )


class EvolveConfig(_Section):
    max_iterations: int = Field(100, ge=0, le=MAX_ITERATIONS)
    time_budget_minutes: float | None = Field(
        None,
        gt=0,
        description="stop starting batches once the search has run this long (this session's wall clock); "
        "the run then ends early, with every batch it started complete, and a resume continues it",
    )
    random_seed: int = Field(42, ge=-MAX_RANDOM_SEED, le=MAX_RANDOM_SEED)
    batch_size: int | None = Field(
        None,
        ge=1,
        le=MAX_ITERATIONS,
        description="candidates made from one database snapshot; default evaluator.parallel_evaluations",
    )
    diff_based_evolution: bool = True
    max_code_length: int = Field(10_000, ge=1)
    seed_programs: list[str] = Field(
        default_factory=list,
        description="more programs to start the islands from: names of files in the task's seeds/ "
        "folder (without .py), or ['all']",
    )
    llm: LLMConfig = Field(default_factory=LLMConfig)
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    evaluator: EvaluatorConfig = Field(default_factory=EvaluatorConfig)
    mutation: MutationConfig = Field(default_factory=MutationConfig)
    validation: ValidationConfig = Field(default_factory=ValidationConfig)
    held_out: HeldOutConfig = Field(default_factory=HeldOutConfig)

    @property
    def effective_batch_size(self) -> int:
        return self.batch_size or self.evaluator.parallel_evaluations


def _drop_ignored(data: Any, section: str, dropped: list[str]) -> Any:
    if not isinstance(data, dict):
        return data
    ignored = IGNORED_OPENEVOLVE_KEYS.get(section, frozenset())
    out = {}
    for key, value in data.items():
        path = f"{section}.{key}" if section else str(key)
        if key in ignored:
            dropped.append(path)
            continue
        if section == "" and key in ("llm", "prompt", "database", "evaluator"):
            value = _drop_ignored(value, key, dropped)
            if key == "llm" and isinstance(value, dict) and isinstance(value.get("models"), list):
                value["models"] = [_drop_ignored(m, "llm.models", dropped) for m in value["models"]]
        out[key] = value
    return out


def parse_config(data: dict[str, Any] | None, *, source: str = "config") -> EvolveConfig:
    """Validate a config mapping (OpenEvolve layout accepted); raises :class:`ConfigError` naming the field."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    dropped: list[str] = []
    cleaned = _drop_ignored(data, "", dropped)
    if dropped:
        logger.info("%s: ignoring OpenEvolve keys without a counterpart here: %s", source, ", ".join(dropped))
    try:
        return EvolveConfig.model_validate(cleaned)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            path = (
                ".".join(repr(p) if not str(p).isprintable() else str(p) for p in error["loc"])
                or "(top level)"
            )
            message = "unknown field" if error["type"] == "extra_forbidden" else error["msg"]
            message = " ".join(message.removeprefix("Value error, ").split())
            problems.append(f"{path}: {message}")
        raise ConfigError(f"{source}: invalid configuration: " + "; ".join(problems)) from None


def load_config(path: str | Path) -> EvolveConfig:
    """Read a YAML config file; raises :class:`ConfigError` naming the file and the bad field or YAML error.

    The file goes through :func:`societas.agents.documents.load_yaml_file`, so
    text that is not UTF-8, a YAML syntax error and an alias bomb are refused
    with a message naming the file.
    """
    path = Path(path)
    try:
        data = load_yaml_file(path)
    except DocumentError as exc:
        raise ConfigError(str(exc)) from None
    return parse_config(data, source=str(path))
