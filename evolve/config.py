"""The configuration of an evolutionary run, as typed pydantic models.

The layout follows OpenEvolve's ``config.yaml`` so that a task written for
OpenEvolve runs unchanged: the top-level ``max_iterations`` and
``random_seed``, and the ``llm``, ``prompt``, ``database`` and ``evaluator``
sections with OpenEvolve's key names where they mean the same thing.
Every key of OpenEvolve's schema is honoured (translated where the name
differs here) or accepted with one warning that says it has no effect; see
:mod:`societas.evolve.compat`, which lists each one. Any other unknown key is
an error naming its path and the closest known key, so a typo like
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

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from societas.agents.documents import DocumentError, load_yaml_file

from .compat import OPENEVOLVE_KEYS, closest, translate

logger = logging.getLogger(__name__)

__all__ = [
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
    "AdaptiveConfig",
    "NoveltyConfig",
    "dump_config",
    "load_config",
    "parse_config",
]

MUTATION_KINDS = (
    "llm",
    "llm_line",
    "constant",
    "operator",
    "function",
    "crossover",
    "blocks",
    "cmaes",
    "table",
)

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


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the field."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


MAX_LLM_TIMEOUT_S = 86_400.0
"""The longest request time limit accepted (a day)."""


class _Sampling(_Section):
    """Settings a model takes from ``llm`` unless it sets its own (OpenEvolve's shared model settings)."""

    api_key: str | None = Field(
        None,
        description="the server's API key; ${VAR} reads the environment variable VAR when the run starts",
    )
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    timeout: float | None = Field(
        None,
        gt=0,
        le=MAX_LLM_TIMEOUT_S,
        description="seconds one request to an OpenAI-compatible server may take in all (connecting, "
        "waiting and reading the answer)",
    )
    retries: int | None = Field(
        None, ge=0, le=100, description="retries after a timeout, HTTP 429 or 5xx; other 4xx are not retried"
    )
    retry_delay: float | None = Field(
        None, ge=0, le=3600, description="seconds before the first retry, doubled for each further one"
    )
    reasoning_effort: str | None = Field(None, description="sent to the server as reasoning_effort")


class LLMModelConfig(_Sampling):
    """One backend of the ensemble: an ``societas.agents.load_llm`` URI (or an OpenAI model name) and its weight.

    Sampling and request settings left unset here come from the ``llm`` section.
    """

    name: str = Field(min_length=1)
    weight: float = Field(1.0, gt=0)
    api_base: str | None = None

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


class LLMConfig(_Sampling):
    models: list[LLMModelConfig] = Field(default_factory=list)
    api_base: str | None = None
    temperature: float | None = Field(0.7, ge=0)
    top_p: float | None = Field(0.95, gt=0, le=1)
    max_tokens: int | None = Field(4096, ge=1)
    retries: int | None = Field(
        None,
        ge=0,
        le=100,
        description="retries after a timeout, HTTP 429 or 5xx (other 4xx are not retried); default the "
        "client's own (5)",
    )
    retry_delay: float | None = Field(
        None,
        ge=0,
        le=3600,
        description="seconds before the first retry, doubled for each further one; default the client's own "
        "(0.5 s, with jitter)",
    )

    def settings(self, index: int) -> dict[str, Any]:
        """Model ``index``'s effective settings: its own, else this section's (OpenEvolve's rule)."""
        model = self.models[index]
        keys = ("api_key", "temperature", "top_p", "max_tokens", "timeout", "retries", "retry_delay")
        out = {k: getattr(model, k) if getattr(model, k) is not None else getattr(self, k) for k in keys}
        out["reasoning_effort"] = model.reasoning_effort or self.reasoning_effort
        return out


class PromptConfig(_Section):
    system_message: str = DEFAULT_SYSTEM_MESSAGE
    num_top_programs: int = Field(3, ge=0)
    num_diverse_programs: int = Field(2, ge=0)
    include_artifacts: bool = True
    max_artifact_chars: int = Field(
        2000, ge=0, description="each artifact in a prompt is cut to its last this many characters"
    )


class DatabaseConfig(_Section):
    """MAP-Elites islands (Mouret & Clune 2015; island models as in AlphaEvolve/FunSearch)."""

    population_size: int = Field(1000, ge=1, description="programs kept over all islands")
    archive_size: int = Field(100, ge=1, description="size of the elite archive (best programs overall)")
    num_islands: int = Field(4, ge=1)
    feature_dimensions: list[str] = Field(
        default_factory=lambda: ["complexity", "diversity"],
        min_length=1,
        description="built in: complexity (code length), diversity (line difference to the island's best), "
        "score (the fitness); any other name is a metric the evaluator returns (its raw value)",
    )
    feature_bins: int | dict[str, int] = 10
    feature_ranges: dict[str, tuple[float, float]] = Field(
        default_factory=dict,
        description=(
            "[low, high] per feature; defaults: complexity [L/2, 3L/2] (L = seed length), "
            "diversity [0, 0.25], score the span of the fitness values placed so far, metrics [0, 1]"
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
    enable_artifacts: bool = Field(
        True,
        description="keep what the evaluator reports besides metrics (artifacts, stderr); false keeps only "
        "the failure reason",
    )
    max_artifact_storage: int = Field(
        1_000_000, ge=0, description="characters of artifacts kept per program (the longest are cut first)"
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
            "table": 0.05,
        }
    )
    constant_sigma: float = Field(0.3, gt=0, description="std of the log-normal multiplicative noise")
    additive_probability: float = Field(
        0.25,
        ge=0,
        le=1,
        description="chance a constant gets additive noise (an integer under 10 in size always moves by one)",
    )
    max_constants: int = Field(
        3,
        ge=1,
        description="at most this many constants change per mutation (one with chance 1/2, each further one "
        "half as likely as the one before)",
    )
    perturb_ints: bool = True
    site_credit: bool = Field(
        True,
        description="draw the constant operator's literals, and the table operator's moves on each table, by "
        "what their earlier changes gave in this run: a literal or move whose changes keep making children "
        "worse than their parent, or invalid (an evaluator's 'error' entry), is drawn less often",
    )
    exhausted_after: int = Field(
        4,
        ge=0,
        description="with site_credit: a literal whose every change to a working program (scored, no evaluator "
        "'error') broke it (a failure or an 'error'), this many times or more, is left alone by the constant "
        "operator, which hands the child to another operator when no literal is left (0: never)",
    )
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


class NoveltyConfig(_Section):
    """Novelty rejection: a child that duplicates a program already in the database is not evaluated.

    Exact duplicates (the same code once comments, docstrings and formatting
    are normalised away) are always rejected while ``enabled``; near
    duplicates are those whose token-set similarity to a program already
    made reaches ``similarity_threshold``. Children of the ``exact_only``
    operators are checked for exact duplicates only: changing one number,
    swapping one operator or function, recombining two programs already
    evaluated is what they are for, so their children are near their parents
    by design.

    A rejected child of an LLM-free operator (``constant``, ``operator``,
    ``function``, ``crossover``, ``blocks``) costs nothing to make again: it
    is drawn again from the same parent, up to ``redraws`` times, so that a
    duplicate does not use up an iteration: the first time by the same
    operator, then by another LLM-free one (an operator that keeps remaking
    programs already held, on a parent with few literals, hands over). LLM
    children and CMA-ES samples are not redrawn (the first costs a model
    call, the second is one sample of a running CMA-ES generation).
    """

    enabled: bool = True
    similarity_threshold: float = Field(
        0.99, gt=0, le=1, description="token-shingle Jaccard similarity at which a child is a near duplicate"
    )
    exact_only: list[str] = Field(
        default_factory=lambda: ["constant", "operator", "function", "crossover", "cmaes", "table"],
        description="mutation kinds checked for exact duplicates only",
    )
    redraws: int = Field(
        3, ge=0, description="times a rejected child of an LLM-free operator is drawn again from its parent"
    )

    @field_validator("exact_only")
    @classmethod
    def _kinds(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(MUTATION_KINDS))
        if unknown:
            raise ValueError(f"unknown mutation kind(s) {unknown}; known: {list(MUTATION_KINDS)}")
        return value


class AdaptiveConfig(_Section):
    """Adaptive choice of operator and model: UCB1 over the LLM-free operators and each LLM.

    The configured weights (``mutation.weights``, split over the models by
    their ``weight``) are the prior; each arm's reward is whether its child
    beat its parent. See :mod:`societas.evolve.bandit`.
    """

    enabled: bool = True
    exploration: float = Field(
        0.5,
        ge=0,
        description="UCB1's exploration constant c (sqrt(2) in Auer et al.; smaller suits the rare successes "
        "of code mutation)",
    )
    temperature: float = Field(
        0.05, gt=0, description="softmax temperature turning UCB indices into a batch's sampling weights"
    )
    window: int | None = Field(None, ge=1, description="only the last this many rewards count")
    min_weight: float = Field(
        0.02, ge=0, lt=1, description="the least share of the draws any arm keeps (at most 1 / arms)"
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
    novelty: NoveltyConfig = Field(default_factory=NoveltyConfig)
    adaptive: AdaptiveConfig = Field(default_factory=AdaptiveConfig)

    @property
    def effective_batch_size(self) -> int:
        return self.batch_size or self.evaluator.parallel_evaluations


def _known_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys a mapping at ``loc`` (a pydantic error location, ending in the unknown key) may hold."""
    model: type[BaseModel] = EvolveConfig
    path: list[str] = []
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return []
        path.append(str(part))
        annotation = field.annotation
        inner = getattr(annotation, "__args__", None)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        elif inner and isinstance(inner[0], type) and issubclass(inner[0], BaseModel):
            model = inner[0]  # list[LLMModelConfig]
        else:
            return []
    prefix = ".".join(path)
    ours = list(model.model_fields)
    theirs = [
        k[len(prefix) + 1 :] if prefix else k
        for k in OPENEVOLVE_KEYS
        if (k.startswith(prefix + ".") if prefix else True)
    ]
    return [k for k in ours + theirs if "." not in k]


def parse_config(data: dict[str, Any] | None, *, source: str = "config", warn: bool = True) -> EvolveConfig:
    """Validate a config mapping (OpenEvolve's layout accepted); raises :class:`ConfigError` naming the field.

    OpenEvolve's keys are translated by :func:`societas.evolve.compat.translate`;
    each key without effect here is logged once as a warning naming it
    (``warn=False``: not logged, for a run's own stored config). An unknown key is
    an error that names the closest known key.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    cleaned, warnings, errors = translate(data, source)
    if errors:
        raise ConfigError(f"{source}: invalid configuration: " + "; ".join(errors))
    if warn:
        for line in warnings:
            logger.warning("%s", line)
    try:
        config = EvolveConfig.model_validate(cleaned)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            loc = tuple(error["loc"])
            path = ".".join(repr(p) if not str(p).isprintable() else str(p) for p in loc) or "(top level)"
            if error["type"] == "extra_forbidden":
                near = closest(str(loc[-1]), _known_keys(loc)) if loc else None
                message = "unknown field" + (f" (did you mean {near!r}?)" if near else "")
            else:
                message = " ".join(error["msg"].removeprefix("Value error, ").split())
            problems.append(f"{path}: {message}")
        raise ConfigError(f"{source}: invalid configuration: " + "; ".join(problems)) from None
    return config


def dump_config(config: EvolveConfig) -> str:
    """``config`` as the YAML a run directory keeps: an API key written out in the config is left out
    (a ``${VAR}`` reference stays), so a run directory never holds a secret; a resumed run then takes
    the key from ``OPENAI_API_KEY``."""
    data = config.model_dump(mode="json")
    llm = data.get("llm", {})
    for block in [llm, *llm.get("models", [])]:
        key = block.get("api_key")
        if isinstance(key, str) and not (key.startswith("${") and key.endswith("}")):
            block["api_key"] = None
    return yaml.safe_dump(data, sort_keys=False)


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
