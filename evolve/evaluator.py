"""Sandboxed cascade evaluation of candidate programs.

A task's ``evaluator.py`` (OpenEvolve's format) defines ``evaluate(program_path)
-> dict`` and optionally ``evaluate_stage1/2/3``. Every stage runs in its own
:class:`societas.agents.sandbox.Sandbox` process: bubblewrap (no network,
read-only file system except the scratch directory, own PID namespace), a
wall-clock timeout per stage, an address-space limit, a process limit and a
clean environment. ``evaluator.sandbox`` picks the backend (``auto``,
``bwrap``, or ``rlimit``: resource limits only, candidates run unconfined,
used only when asked for by name); each outcome records the backend that ran
it, and :func:`probe_sandbox` checks before a run that the backend can run
here. The candidate is written as ``program.py`` in the scratch directory;
the evaluator is loaded from its own (read-only bound)
path so it can find its data files.

Cascade (AlphaEvolve's "evaluation cascade", Novikov et al. 2025; OpenEvolve's
``cascade_thresholds``): with ``evaluate_stage1`` defined, the stages run in
order ``evaluate_stage1``, ``evaluate_stage2`` (or ``evaluate`` when there is
no stage 2), ``evaluate_stage3``; after stage ``k`` the fitness of the metrics
so far (``combined_score``, else the mean) must reach
``cascade_thresholds[k-1]`` or the cascade stops there, and the program keeps
the metrics it has (it is cheap and weak, not broken). Later stages' metrics
override earlier ones.

Task settings: ``evaluator.task_settings`` (a JSON mapping in the run's
configuration) is written as ``task_settings.json`` next to ``program.py``, so
an evaluator can read per-run parameters (iterations, games) from
``os.path.dirname(program_path)`` without changing its signature.

A stage fails the program when it crashes, times out, exceeds its memory
limit, or returns something that is not a flat dict of finite numbers
(OpenEvolve's ``EvaluationResult`` with ``.metrics``/``.artifacts`` is also
accepted). The failure reason and the captured stderr are kept as
artifacts. The result travels back on standard output behind a random nonce
given on stdin, so ordinary program output cannot be mistaken for it.

:func:`run_evaluation` is a plain top-level function of a picklable
:class:`EvalJob`, so any executor (threads, processes, Ray) can run it.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import logging
import math
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from societas.agents.documents import DocumentError, read_text
from societas.agents.sandbox import Sandbox, SandboxError, SandboxResult

from .config import EvaluatorConfig, SandboxBackend
from .program import fitness_of

logger = logging.getLogger(__name__)

__all__ = [
    "TASK_SETTINGS_FILE",
    "EvalJob",
    "EvalOutcome",
    "TaskError",
    "TaskEvaluator",
    "probe_sandbox",
    "run_evaluation",
    "validate_metrics",
]


def _layer_dirs() -> tuple[str, ...]:
    """Where the four layers of societas live, to be visible (read-only) in the sandbox.

    Only the folders themselves: the sandboxed interpreter finds ``societas`` as
    it is installed (a wheel in site-packages, or the editable install's import
    hook), so nothing is added to its ``sys.path``, where the layer folders'
    parent would make them importable under generic top-level names.
    """
    dirs = []
    for layer in ("agents", "topology", "marl", "evolve"):
        spec = importlib.util.find_spec(f"societas.{layer}")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(f"societas.{layer} is not installed")
        dirs += [str(Path(p).resolve()) for p in spec.submodule_search_locations]
    return tuple(dict.fromkeys(dirs))


LAYER_DIRS = _layer_dirs()
_MARK = "__EVOLVE_RESULT__"
_MAX_ARTIFACT = 8000
TASK_SETTINGS_FILE = "task_settings.json"

_HARNESS = r"""
import importlib.util, json, math, os, signal, sys, traceback
_nonce = sys.stdin.readline().strip()
def _emit(payload, _nonce=_nonce):
    def default(value):
        try:
            return float(value)
        except Exception:
            return repr(value)
    text = json.dumps(payload, default=default)
    sys.stdout.flush()
    os.write(1, ("\n__EVOLVE_RESULT__" + _nonce + " " + text + "\n").encode())
def _fitness(metrics):
    # societas.evolve.program.fitness_of: combined_score, else the mean of the finite numbers
    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if "combined_score" in metrics and number(metrics["combined_score"]):
        return float(metrics["combined_score"])
    values = [float(v) for v in metrics.values() if number(v)]
    return sum(values) / len(values) if values else None
def _timeout(signum, frame):
    raise TimeoutError("the stage ran past its time limit")
stages, evaluator_path = json.loads(sys.argv[1]), sys.argv[2]
thresholds, stage_timeout = json.loads(sys.argv[3]), float(sys.argv[4])
sys.path.insert(0, os.path.dirname(evaluator_path))
signal.signal(signal.SIGALRM, _timeout)
merged = {}
module = None
for index, stage in enumerate(stages):
    sys.stderr.write("\n__EVOLVE_STAGE__" + _nonce + " " + stage + "\n")
    sys.stderr.flush()
    signal.setitimer(signal.ITIMER_REAL, stage_timeout)
    try:
        if module is None:
            spec = importlib.util.spec_from_file_location("evaluator", evaluator_path)
            module = importlib.util.module_from_spec(spec)
            sys.modules["evaluator"] = module
            spec.loader.exec_module(module)
        result = getattr(module, stage)(os.path.abspath("program.py"))
        signal.setitimer(signal.ITIMER_REAL, 0)
    except BaseException as exc:
        signal.setitimer(signal.ITIMER_REAL, 0)
        traceback.print_exc()
        if isinstance(exc, TimeoutError) and str(exc) == "the stage ran past its time limit":
            _emit({"stage": stage, "error": "timeout after %g s (the stage's time limit)" % stage_timeout})
        else:
            _emit({"stage": stage, "error": stage + " raised " + type(exc).__name__ + ": " + str(exc)[:500]})
        sys.stderr.flush()
        os._exit(1)
    if hasattr(result, "metrics"):
        payload = {"metrics": getattr(result, "metrics"), "artifacts": getattr(result, "artifacts", None) or {}}
    else:
        payload = {"metrics": result, "artifacts": {}}
    if not isinstance(payload["metrics"], dict):
        kind = type(payload["metrics"]).__name__
        _emit({"stage": stage, "error": stage + " returned " + kind + ", expected a dict of metrics"})
        os._exit(1)
    payload["artifacts"] = {str(k): str(v) for k, v in dict(payload["artifacts"]).items()}
    payload["stage"] = stage
    _emit(payload)
    merged.update(payload["metrics"])
    if index < len(stages) - 1 and index < len(thresholds):
        score = _fitness(merged)
        if score is None or score < thresholds[index]:
            break
"""

# Tasks written for newer OpenEvolve return ``openevolve.evaluation_result.EvaluationResult``.
_OPENEVOLVE_SHIM = {
    "openevolve/__init__.py": "",
    "openevolve/evaluation_result.py": (
        "from dataclasses import dataclass, field\n"
        "@dataclass\nclass EvaluationResult:\n"
        "    metrics: dict = field(default_factory=dict)\n"
        "    artifacts: dict = field(default_factory=dict)\n"
    ),
}


class TaskError(ValueError):
    """A task directory or evaluator that cannot be used; the message says what is wrong."""


def validate_metrics(metrics: Any) -> dict[str, float]:
    """A flat dict of finite numbers, or :class:`ValueError` naming the offending entry."""
    if not isinstance(metrics, dict):
        raise ValueError(f"metrics must be a dict, got {type(metrics).__name__}")
    if not metrics:
        raise ValueError("metrics dict is empty")
    clean: dict[str, float] = {}
    for key, value in metrics.items():
        if not isinstance(key, str):
            raise ValueError(f"metric name {key!r} is not a string")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"metric {key!r} is not a number: {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"metric {key!r} is not finite: {value!r}")
        clean[key] = float(value)
    return clean


@dataclass(frozen=True)
class EvalJob:
    """Everything one evaluation needs; picklable, with no reference to live objects."""

    code: str
    evaluator_path: str
    stages: tuple[str, ...]
    thresholds: tuple[float, ...]
    timeout_s: float
    memory_mb: int | None
    max_processes: int
    pythonpath: tuple[str, ...]
    task_settings: str = ""  # JSON text, written as task_settings.json beside program.py when set
    sandbox: SandboxBackend = "auto"  # the Sandbox backend: auto, bwrap or rlimit (named: unconfined)


@dataclass
class EvalOutcome:
    status: str  # "ok" | "failed"
    metrics: dict[str, float] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)
    stages_run: int = 0
    seconds: float = 0.0
    sandbox: str | None = None  # the backend that ran the last stage (SandboxResult.backend)

    @property
    def failure(self) -> str | None:
        return self.artifacts.get("failure")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _tail(text: str, limit: int = _MAX_ARTIFACT) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _sandbox(
    backend: SandboxBackend,
    timeout_s: float,
    memory_mb: int | None,
    max_processes: int,
    pythonpath: tuple[str, ...],
) -> Sandbox:
    return Sandbox(
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        max_processes=max_processes,
        pythonpath=pythonpath,
        ro_binds=LAYER_DIRS,
        backend=backend,
    )


def probe_sandbox(config: EvaluatorConfig) -> str:
    """Run a trivial program in the sandbox the evaluations will use; return the backend that ran it.

    Raises :class:`societas.agents.sandbox.SandboxUnavailableError` (whose
    message says how to fix it) when the configured backend cannot run here,
    and :class:`SandboxError` when the sandbox starts but cannot run even a
    trivial program, so a run can refuse to start instead of failing every
    candidate. ``"rlimit"`` means candidates will run unconfined.
    """
    sandbox = _sandbox(config.sandbox, 60.0, config.memory_mb, config.max_processes, ())
    result: SandboxResult = sandbox.run("pass\n")
    if not result.ok:
        detail = _last_line(result.stderr)
        raise SandboxError(
            f"the {result.backend} sandbox cannot run a trivial program: {result.describe()}"
            + (f": {detail}" if detail else "")
        )
    return result.backend


def _split_stderr(stderr: str, nonce: str) -> dict[str, str]:
    """The harness's stderr cut at its stage markers: ``{stage: what it wrote}``."""
    marker = "__EVOLVE_STAGE__" + nonce + " "
    parts: dict[str, str] = {}
    stage = None
    for line in stderr.splitlines(keepends=True):
        if line.startswith(marker):
            stage = line[len(marker) :].strip()
            parts.setdefault(stage, "")
        elif stage is not None:
            parts[stage] += line
        else:
            parts.setdefault("", "")
            parts[""] += line
    return {k: v.strip("\n") + "\n" if v.strip() else "" for k, v in parts.items()}


def run_evaluation(job: EvalJob) -> EvalOutcome:
    """Run the cascade for one candidate; never raises for anything the candidate does.

    All stages run in one sandboxed process (the interpreter, torch and the
    evaluator are loaded once), each under its own ``timeout_s`` (an interval
    timer in the process) and all together under ``timeout_s`` times the
    number of stages (the sandbox's wall clock). The process applies the
    cascade thresholds itself and stops early; the result of each stage
    travels back on its own line.
    """
    started = time.monotonic()
    total_timeout = job.timeout_s * len(job.stages) + 5.0
    sandbox = _sandbox(job.sandbox, total_timeout, job.memory_mb, job.max_processes, job.pythonpath)
    files = {"program.py": job.code, **_OPENEVOLVE_SHIM}
    if job.task_settings:
        files[TASK_SETTINGS_FILE] = job.task_settings
    metrics: dict[str, float] = {}
    artifacts: dict[str, str] = {}
    nonce = secrets.token_hex(16)
    args = [
        json.dumps(list(job.stages)),
        job.evaluator_path,
        json.dumps(list(job.thresholds)),
        str(job.timeout_s),
    ]
    try:
        result = sandbox.run(_HARNESS, files=files, args=args, stdin=nonce + "\n")
    except SandboxError as exc:
        artifacts["failure"] = f"{job.stages[0]}: the sandbox could not run the evaluation: {exc}"
        return EvalOutcome("failed", metrics, artifacts, 1, time.monotonic() - started, None)
    backend = result.backend
    marker = _MARK + nonce + " "
    payloads: list[dict[str, Any]] = []
    for line in result.stdout.splitlines():
        if line.startswith(marker):
            try:
                payloads.append(json.loads(line[len(marker) :]))
            except json.JSONDecodeError:
                payloads.append({"error": "the evaluation produced an unreadable result"})
    stderr = _split_stderr(result.stderr, nonce)
    stdout = result.stdout.replace(marker, "[result] ") if payloads else result.stdout
    by_stage = {p.get("stage"): p for p in payloads}
    for index, stage in enumerate(job.stages):
        seconds = time.monotonic() - started
        if stderr.get(stage, "").strip():
            artifacts[f"{stage}_stderr"] = _tail(stderr[stage])
        payload = by_stage.get(stage)
        last = payload is None or index == len(job.stages) - 1
        if last and stdout.strip():
            artifacts[f"{stage}_stdout"] = _tail(stdout, 2000)
        if payload is None or "error" in payload:
            if payload is not None:
                reason = payload["error"]
            elif result.killed_by is not None:
                reason = result.describe()
            else:
                detail = _last_line(stderr.get(stage, "") or stderr.get("", ""))
                reason = f"{result.describe()}: {detail or 'no result reported'}"
            artifacts["failure"] = f"{stage}: {reason}"
            return EvalOutcome("failed", metrics, artifacts, index + 1, seconds, backend)
        try:
            stage_metrics = validate_metrics(payload.get("metrics"))
        except ValueError as exc:
            artifacts["failure"] = f"{stage}: invalid metrics: {exc}"
            return EvalOutcome("failed", metrics, artifacts, index + 1, seconds, backend)
        metrics.update(stage_metrics)
        for key, value in (payload.get("artifacts") or {}).items():
            artifacts[key] = _tail(str(value))
        if index < len(job.stages) - 1 and index < len(job.thresholds):
            score = fitness_of(metrics)
            if score is None or score < job.thresholds[index]:
                artifacts["cascade"] = (
                    f"stopped after {stage}: fitness {score} below threshold {job.thresholds[index]}"
                )
                return EvalOutcome("ok", metrics, artifacts, index + 1, seconds, backend)
    if not result.ok:
        # Every stage reported, yet the process did not end cleanly (killed while exiting, ...).
        artifacts["failure"] = f"{job.stages[-1]}: {result.describe()}"
        return EvalOutcome("failed", metrics, artifacts, len(job.stages), time.monotonic() - started, backend)
    return EvalOutcome("ok", metrics, artifacts, len(job.stages), time.monotonic() - started, backend)


class TaskEvaluator:
    """An OpenEvolve-style ``evaluator.py`` bound to the evaluator settings; makes :class:`EvalJob` s."""

    def __init__(
        self, evaluator_path: str | Path, config: EvaluatorConfig, extra_pythonpath: tuple[str, ...] = ()
    ):
        path = Path(evaluator_path).resolve()
        if not path.is_file():
            raise TaskError(f"evaluator file {path} does not exist")
        try:
            tree = ast.parse(read_text(path), filename=str(path))
        except DocumentError as exc:
            raise TaskError(str(exc)) from None
        except SyntaxError as exc:
            raise TaskError(f"{path} does not parse: {exc.msg} (line {exc.lineno})") from None
        except (MemoryError, RecursionError):
            raise TaskError(f"{path} is nested too deeply for Python's parser") from None
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        imported = {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
        available = defined | imported
        if config.cascade_evaluation and "evaluate_stage1" in available:
            stages = ["evaluate_stage1"]
            if "evaluate_stage2" in available:
                stages.append("evaluate_stage2")
            elif "evaluate" in available:
                stages.append("evaluate")
            if "evaluate_stage3" in available and "evaluate_stage2" in available:
                stages.append("evaluate_stage3")
        elif "evaluate" in available:
            stages = ["evaluate"]
        else:
            raise TaskError(f"{path} defines no evaluate(program_path) function")
        self.path = path
        self.config = config
        self.stages = tuple(stages)
        self.pythonpath = tuple(dict.fromkeys([str(path.parent), *extra_pythonpath]))

    def job(self, code: str) -> EvalJob:
        return EvalJob(
            code=code,
            evaluator_path=str(self.path),
            stages=self.stages,
            thresholds=tuple(self.config.cascade_thresholds),
            timeout_s=self.config.timeout,
            memory_mb=self.config.memory_mb,
            max_processes=self.config.max_processes,
            pythonpath=self.pythonpath,
            task_settings=json.dumps(self.config.task_settings, sort_keys=True)
            if self.config.task_settings
            else "",
            sandbox=self.config.sandbox,
        )

    def evaluate(self, code: str) -> EvalOutcome:
        return run_evaluation(self.job(code))
