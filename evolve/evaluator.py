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
import signal
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from societas.agents.documents import DocumentError, read_text
from societas.agents.sandbox import Sandbox, SandboxError, SandboxResult

from .config import EvaluatorConfig, SandboxBackend
from .program import fitness_of, parse_python

logger = logging.getLogger(__name__)

__all__ = [
    "TASK_SETTINGS_FILE",
    "EvalJob",
    "EvalOutcome",
    "TaskError",
    "TaskEvaluator",
    "probe_sandbox",
    "map_grouped",
    "plan_groups",
    "run_evaluation",
    "run_group",
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

_GROUP_MARK = "__EVOLVE_GROUP__"
_GROUP_RESULT_BYTES = 256_000  # what one candidate of a group may report (its metrics and artifacts)

# Several candidates in one sandbox: the interpreter, the evaluator and what its
# optional ``warm_up()`` loads (torch, game trees) are paid for once, and every
# candidate then runs in a process of its own, forked from the warmed-up harness,
# with its own output pipes and deadline. Between two candidates the harness kills
# every other process of the sandbox's PID namespace (``kill(-1)``; its init is
# exempt), so nothing a candidate started outlives it. A candidate cannot write a
# sibling's result: each result is read from the candidate's own pipe, and the
# host takes only the LAST group line on standard output, which the harness writes
# after its last candidate has been killed. Without a PID namespace of its own the
# harness refuses, and the host evaluates the candidates one by one.
_GROUP_HARNESS = r"""
import importlib.util, json, math, os, selectors, shutil, signal, sys, tempfile, time, traceback
_nonce = sys.stdin.readline().strip()
_root = os.path.abspath(os.getcwd())
stages, evaluator_path = json.loads(sys.argv[1]), sys.argv[2]
thresholds, stage_timeout = json.loads(sys.argv[3]), float(sys.argv[4])
count, tail_limit, result_limit = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
def _block(payload):
    sys.stdout.flush()
    _write_all(1, ("\n__EVOLVE_GROUP__" + _nonce + " " + json.dumps(payload) + "\n").encode())
if os.getppid() != 1:
    _block({"refused": "the sandbox has no PID namespace of its own, so candidates could not be kept apart"})
    os._exit(0)
try:
    # Not dumpable: a candidate (same uid) cannot open the harness's /proc/PID/fd (its stdin and
    # stdout) or read its memory. The last-line rule below holds without it.
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
except Exception:
    pass
codes = []
for i in range(count):
    path = os.path.join(_root, "candidate_%d.py" % i)
    with open(path, encoding="utf-8") as f:
        codes.append(f.read())
    os.unlink(path)
settings = None
if os.path.exists(os.path.join(_root, "task_settings.json")):
    with open(os.path.join(_root, "task_settings.json"), encoding="utf-8") as f:
        settings = f.read()
sys.path.insert(0, _root)
sys.path.insert(0, os.path.dirname(evaluator_path))
try:
    spec = importlib.util.spec_from_file_location("evaluator", evaluator_path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["evaluator"] = module
    spec.loader.exec_module(module)
    if callable(getattr(module, "warm_up", None)):
        module.warm_up(list(stages))
except BaseException as exc:
    _block({"refused": "the evaluator did not load: " + type(exc).__name__ + ": " + str(exc)[:300]})
    os._exit(0)

def _fitness(metrics):
    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if "combined_score" in metrics and number(metrics["combined_score"]):
        return float(metrics["combined_score"])
    values = [float(v) for v in metrics.values() if number(v)]
    return sum(values) / len(values) if values else None

def _child(result_fd):
    def emit(payload):
        def default(value):
            try:
                return float(value)
            except Exception:
                return repr(value)
        _write_all(result_fd, (json.dumps(payload, default=default) + "\n").encode())
    def timeout(signum, frame):
        raise TimeoutError("the stage ran past its time limit")
    signal.signal(signal.SIGALRM, timeout)
    merged = {}
    for index, stage in enumerate(stages):
        sys.stderr.write("\n__EVOLVE_STAGE__" + _nonce + " " + stage + "\n")
        sys.stderr.flush()
        signal.setitimer(signal.ITIMER_REAL, stage_timeout)
        try:
            result = getattr(module, stage)(os.path.abspath("program.py"))
            signal.setitimer(signal.ITIMER_REAL, 0)
        except BaseException as exc:
            signal.setitimer(signal.ITIMER_REAL, 0)
            traceback.print_exc()
            if isinstance(exc, TimeoutError) and str(exc) == "the stage ran past its time limit":
                emit({"stage": stage, "error": "timeout after %g s (the stage's time limit)" % stage_timeout})
            else:
                emit({"stage": stage, "error": stage + " raised " + type(exc).__name__ + ": " + str(exc)[:500]})
            sys.stderr.flush()
            os._exit(1)
        if hasattr(result, "metrics"):
            payload = {"metrics": getattr(result, "metrics"), "artifacts": getattr(result, "artifacts", None) or {}}
        else:
            payload = {"metrics": result, "artifacts": {}}
        if not isinstance(payload["metrics"], dict):
            kind = type(payload["metrics"]).__name__
            emit({"stage": stage, "error": stage + " returned " + kind + ", expected a dict of metrics"})
            os._exit(1)
        payload["artifacts"] = {str(k): str(v) for k, v in dict(payload["artifacts"]).items()}
        payload["stage"] = stage
        emit(payload)
        merged.update(payload["metrics"])
        if index < len(stages) - 1 and index < len(thresholds):
            score = _fitness(merged)
            if score is None or score < thresholds[index]:
                break
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

def _alive_others():
    me, alive = os.getpid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (1, me):
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            alive.append(int(name))
    return alive

def _sweep():
    for _ in range(2000):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        if not _alive_others():
            return True
        time.sleep(0.001)
    return False

def _run(i):
    directory = tempfile.mkdtemp(prefix="candidate-", dir=_root)
    with open(os.path.join(directory, "program.py"), "w", encoding="utf-8") as f:
        f.write(codes[i])
    if settings is not None:
        with open(os.path.join(directory, "task_settings.json"), "w", encoding="utf-8") as f:
            f.write(settings)
    pipes = [os.pipe() for _ in range(3)]  # result, stdout, stderr
    started = time.monotonic()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            for r, _ in pipes:
                os.close(r)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(pipes[1][1], 1)
            os.dup2(pipes[2][1], 2)
            os.chdir(directory)
            _child(pipes[0][1])
        finally:
            os._exit(70)
    for _, w in pipes:
        os.close(w)
    names = {pipes[0][0]: "result", pipes[1][0]: "stdout", pipes[2][0]: "stderr"}
    data = {"result": b"", "stdout": b"", "stderr": b""}
    selector = selectors.DefaultSelector()
    for fd in names:
        selector.register(fd, selectors.EVENT_READ)
    deadline = started + stage_timeout * len(stages) + 5.0
    status, timed_out, exited_at = None, False, None
    while names or status is None:
        now = time.monotonic()
        if status is None:
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                status, exited_at = raw, now
        if status is None and now > deadline:
            os.kill(pid, signal.SIGKILL)
            timed_out = True
            status, exited_at = os.waitpid(pid, 0)[1], now
        if exited_at is not None and now > exited_at + 0.5:
            break  # something the candidate started holds its pipes open; the sweep ends it
        if not names:
            time.sleep(0.02)  # the candidate closed its pipes but runs on: wait for its end or deadline
            continue
        for key, _ in selector.select(timeout=0.05):
            chunk = os.read(key.fd, 65536)
            name = names.get(key.fd)
            if not chunk:
                selector.unregister(key.fd)
                names.pop(key.fd)
                continue
            if name == "result":
                if len(data["result"]) < result_limit:
                    data["result"] += chunk
            else:
                data[name] = (data[name] + chunk)[-tail_limit:]
    if status is None:
        status = os.waitpid(pid, 0)[1]
    seconds = time.monotonic() - started
    if not _sweep():
        raise RuntimeError("processes the candidate started could not be stopped")
    selector.close()
    for r, _ in pipes:
        os.close(r)
    shutil.rmtree(directory, ignore_errors=True)
    results = []
    for line in data["result"].decode("utf-8", "replace").splitlines():
        if line.strip():
            try:
                results.append(json.loads(line))
            except json.JSONDecodeError:
                results.append({"error": "the evaluation produced an unreadable result"})
    return {
        "index": i,
        "results": results,
        "stdout": data["stdout"].decode("utf-8", "replace"),
        "stderr": data["stderr"].decode("utf-8", "replace"),
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "timed_out": timed_out,
        "seconds": seconds,
    }

records = []
try:
    for i in range(count):
        records.append(_run(i))
except BaseException as exc:
    _sweep()
    _block({"records": records, "aborted": type(exc).__name__ + ": " + str(exc)[:300]})
    os._exit(0)
_block({"records": records})
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
    stage_scores: dict[str, float] = field(default_factory=dict)  # fitness after each stage that reported

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
    max_output_bytes: int = 64_000,
) -> Sandbox:
    return Sandbox(
        timeout_s=timeout_s,
        max_output_bytes=max_output_bytes,
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
        failure = f"{job.stages[0]}: the sandbox could not run the evaluation: {exc}"
        return EvalOutcome("failed", {}, {"failure": failure}, 1, time.monotonic() - started, None)
    marker = _MARK + nonce + " "
    payloads: list[dict[str, Any]] = []
    for line in result.stdout.splitlines():
        if line.startswith(marker):
            try:
                payloads.append(json.loads(line[len(marker) :]))
            except json.JSONDecodeError:
                payloads.append({"error": "the evaluation produced an unreadable result"})
    stdout = result.stdout.replace(marker, "[result] ") if payloads else result.stdout
    return _outcome(
        job, payloads, _split_stderr(result.stderr, nonce), stdout, result, started, result.backend
    )


@dataclass(frozen=True)
class _ChildEnd:
    """How one candidate's process of a group ended (the :class:`_End` of a group member)."""

    status: int | None
    signal: int | None
    timed_out: bool
    timeout_s: float

    @property
    def ok(self) -> bool:
        return self.status == 0 and self.signal is None and not self.timed_out

    @property
    def killed_by(self) -> str | None:
        if self.timed_out:
            return "timeout"
        return "signal" if self.signal is not None else None

    def describe(self) -> str:
        if self.timed_out:
            return f"timeout after {self.timeout_s:g} s"
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = "unknown signal"
            return f"killed by signal {self.signal} ({name})"
        return f"exit status {self.status}"


def _group_key(job: EvalJob) -> tuple:
    return (
        job.evaluator_path,
        job.stages,
        job.thresholds,
        job.timeout_s,
        job.memory_mb,
        job.max_processes,
        job.pythonpath,
        job.task_settings,
        job.sandbox,
    )


def run_group(jobs: tuple[EvalJob, ...] | list[EvalJob]) -> list[EvalOutcome]:
    """Run the cascades of several candidates in ONE sandbox; one outcome per job, in order.

    The jobs must differ only in their code. The sandbox starts once; the
    evaluator and its optional ``warm_up()`` (which may import torch and load
    game trees) run once; then each candidate runs in a process of its own,
    forked from the warmed-up harness, under its own deadline, and everything
    it started is killed before the next one begins (see ``_GROUP_HARNESS``).
    A candidate's outcome is what :func:`run_evaluation` would give it. Where
    the group cannot run as one (a sandbox without a PID namespace of its own,
    an evaluator that does not load, the harness itself killed) the candidates
    it has no result for are evaluated one by one with :func:`run_evaluation`.
    """
    jobs = list(jobs)
    if not jobs:
        return []
    if len(jobs) == 1:
        return [run_evaluation(jobs[0])]
    key = _group_key(jobs[0])
    for index, job in enumerate(jobs[1:], 1):
        if _group_key(job) != key:
            raise ValueError(
                f"jobs of a group must differ only in their code; job {index} differs from job 0"
            )
    first = jobs[0]
    started = time.monotonic()
    per_candidate = first.timeout_s * len(first.stages) + 5.0
    # Room on stdout for every candidate's result and output tails in the final line.
    output = len(jobs) * (_GROUP_RESULT_BYTES + 2 * _MAX_ARTIFACT + 4096) + 64_000
    sandbox = _sandbox(
        first.sandbox,
        per_candidate * len(jobs) + 60.0,
        first.memory_mb,
        first.max_processes,
        first.pythonpath,
        max_output_bytes=output,
    )
    files: dict[str, str] = {f"candidate_{i}.py": job.code for i, job in enumerate(jobs)}
    files.update(_OPENEVOLVE_SHIM)
    if first.task_settings:
        files[TASK_SETTINGS_FILE] = first.task_settings
    nonce = secrets.token_hex(16)
    args = [
        json.dumps(list(first.stages)),
        first.evaluator_path,
        json.dumps(list(first.thresholds)),
        str(first.timeout_s),
        str(len(jobs)),
        str(_MAX_ARTIFACT),
        str(_GROUP_RESULT_BYTES),
    ]
    block: dict[str, Any] | None = None
    backend: str | None = None
    try:
        result = sandbox.run(_GROUP_HARNESS, files=files, args=args, stdin=nonce + "\n")
    except SandboxError as exc:
        logger.info(
            "a group of %d evaluations could not start (%s); evaluating them one by one", len(jobs), exc
        )
    else:
        backend = result.backend
        marker = _GROUP_MARK + nonce + " "
        lines = [line for line in result.stdout.splitlines() if line.startswith(marker)]
        if lines:
            try:
                block = json.loads(lines[-1][len(marker) :])
            except json.JSONDecodeError:
                block = None
        if block is None:
            logger.warning(
                "a group of %d evaluations reported nothing (%s); evaluating them one by one",
                len(jobs),
                result.describe(),
            )
        elif "refused" in block:
            logger.info("evaluating %d candidates one by one: %s", len(jobs), block["refused"])
        elif "aborted" in block:
            logger.warning(
                "a group of evaluations stopped early (%s); the rest run one by one", block["aborted"]
            )
    records: dict[int, dict[str, Any]] = {}
    if block is not None and isinstance(block.get("records"), list):
        for record in block["records"]:
            if isinstance(record, dict) and isinstance(record.get("index"), int):
                records[record["index"]] = record
    overhead = (
        time.monotonic() - started - sum(float(r.get("seconds", 0.0)) for r in records.values())
    ) / len(jobs)
    outcomes: list[EvalOutcome] = []
    for index, job in enumerate(jobs):
        record = records.get(index)
        if record is None:
            outcomes.append(run_evaluation(job))
            continue
        payloads = [
            p if isinstance(p, dict) else {"error": "unreadable result"} for p in record.get("results", [])
        ]
        end = _ChildEnd(
            record.get("exit"), record.get("signal"), bool(record.get("timed_out")), per_candidate
        )
        # The candidate's own clock: its child process's seconds plus its share of the group's start-up.
        begun = time.monotonic() - float(record.get("seconds", 0.0)) - max(overhead, 0.0)
        outcome = _outcome(
            job,
            payloads,
            _split_stderr(str(record.get("stderr", "")), nonce),
            str(record.get("stdout", "")),
            end,
            begun,
            backend,
        )
        outcomes.append(outcome)
    return outcomes


def plan_groups(jobs: list[EvalJob], size: int, workers: int) -> list[list[int]]:
    """Indices of ``jobs`` in groups of at most ``size`` that :func:`run_group` can run.

    Jobs that differ in more than their code never share a group. Each kind is
    cut into contiguous groups of nearly equal length, as many as a multiple of
    ``workers`` (or one per job), so the workers finish together.
    """
    if size < 1:
        raise ValueError(f"group size must be >= 1, got {size}")
    kinds: dict[tuple, list[int]] = {}
    for index, job in enumerate(jobs):
        kinds.setdefault(_group_key(job), []).append(index)
    groups: list[list[int]] = []
    for members in kinds.values():
        workers = max(workers, 1)
        count = min(len(members), workers * -(-len(members) // (workers * size)))
        base, extra = divmod(len(members), count)
        start = 0
        for g in range(count):
            length = base + (1 if g < extra else 0)
            groups.append(members[start : start + length])
            start += length
    return groups


def map_grouped(
    executor: Any, jobs: list[EvalJob], size: int, workers: int
) -> Iterator[tuple[int, EvalOutcome | BaseException]]:
    """``executor.map_unordered`` over ``jobs`` with up to ``size`` candidates per sandbox.

    Yields ``(index, outcome)`` per job as its group finishes (an exception
    the executor raised for a group is yielded for each of its jobs). With
    ``size`` 1 every job has a sandbox of its own (:func:`run_evaluation`).
    """
    if size <= 1:
        yield from executor.map_unordered(run_evaluation, jobs)
        return
    groups = plan_groups(jobs, size, workers)
    batches = [tuple(jobs[i] for i in group) for group in groups]
    for position, outcomes in executor.map_unordered(run_group, batches):
        members = groups[position]
        if isinstance(outcomes, BaseException):
            for index in members:
                yield index, outcomes
            continue
        yield from zip(members, outcomes)


class _End(Protocol):
    """How the process that ran the stages ended (a :class:`SandboxResult`, or one candidate of a group)."""

    @property
    def ok(self) -> bool: ...

    @property
    def killed_by(self) -> str | None: ...

    def describe(self) -> str: ...


def _outcome(
    job: EvalJob,
    payloads: list[dict[str, Any]],
    stderr: dict[str, str],
    stdout: str,
    end: _End,
    started: float,
    backend: str | None,
) -> EvalOutcome:
    """The outcome of one candidate from what its stages reported and how its process ended."""
    metrics: dict[str, float] = {}
    artifacts: dict[str, str] = {}
    scores: dict[str, float] = {}
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
            elif end.killed_by is not None:
                reason = end.describe()
            else:
                detail = _last_line(stderr.get(stage, "") or stderr.get("", ""))
                reason = f"{end.describe()}: {detail or 'no result reported'}"
            artifacts["failure"] = f"{stage}: {reason}"
            return EvalOutcome("failed", metrics, artifacts, index + 1, seconds, backend, scores)
        try:
            stage_metrics = validate_metrics(payload.get("metrics"))
        except ValueError as exc:
            artifacts["failure"] = f"{stage}: invalid metrics: {exc}"
            return EvalOutcome("failed", metrics, artifacts, index + 1, seconds, backend, scores)
        metrics.update(stage_metrics)
        fitness = fitness_of(metrics)
        if fitness is not None:
            scores[stage] = fitness
        for key, value in (payload.get("artifacts") or {}).items():
            artifacts[key] = _tail(str(value))
        if index < len(job.stages) - 1 and index < len(job.thresholds):
            score = fitness_of(metrics)
            if score is None or score < job.thresholds[index]:
                artifacts["cascade"] = (
                    f"stopped after {stage}: fitness {score} below threshold {job.thresholds[index]}"
                )
                return EvalOutcome("ok", metrics, artifacts, index + 1, seconds, backend, scores)
    seconds = time.monotonic() - started
    if not end.ok:
        # Every stage reported, yet the process did not end cleanly (killed while exiting, ...).
        artifacts["failure"] = f"{job.stages[-1]}: {end.describe()}"
        return EvalOutcome("failed", metrics, artifacts, len(job.stages), seconds, backend, scores)
    return EvalOutcome("ok", metrics, artifacts, len(job.stages), seconds, backend, scores)


class TaskEvaluator:
    """An OpenEvolve-style ``evaluator.py`` bound to the evaluator settings; makes :class:`EvalJob` s."""

    def __init__(
        self, evaluator_path: str | Path, config: EvaluatorConfig, extra_pythonpath: tuple[str, ...] = ()
    ):
        path = Path(evaluator_path).resolve()
        if not path.is_file():
            raise TaskError(f"evaluator file {path} does not exist")
        try:
            tree = parse_python(read_text(path), filename=str(path))
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

    def job(self, code: str, thresholds: tuple[float, ...] | None = None) -> EvalJob:
        """The job evaluating ``code``; ``thresholds`` replaces the configured cascade thresholds."""
        return EvalJob(
            code=code,
            evaluator_path=str(self.path),
            stages=self.stages,
            thresholds=tuple(self.config.cascade_thresholds) if thresholds is None else thresholds,
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
