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
import hashlib
import importlib.util
import json
import logging
import math
import os
import queue
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from societas.agents.documents import DocumentError, read_text
from societas.agents.sandbox import Sandbox, SandboxError, SandboxResult

from .config import EvaluatorConfig, SandboxBackend
from .program import fitness_of, is_metric_value, parse_python

logger = logging.getLogger(__name__)

__all__ = [
    "TASK_SETTINGS_FILE",
    "EvalJob",
    "EvalOutcome",
    "TaskError",
    "TaskEvaluator",
    "WarmPool",
    "probe_sandbox",
    "map_grouped",
    "plan_groups",
    "run_evaluation",
    "run_group",
    "evaluation_seed",
    "split_metrics",
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

# The stage loop, shared by both harnesses: each stage under its own interval timer,
# its result emitted as one JSON object, the cascade thresholds applied in between.
_STAGE_LOOP = r"""
_eval_seed = [0]
def _seed_generators():
    # The run's seed and the program's id reach every evaluation: random, numpy and torch (when the
    # evaluator has loaded them) start from it, so a deterministic evaluator gives the same metrics.
    seed = _eval_seed[0]
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is None and importlib.util.find_spec("numpy") is not None:
        try:
            import numpy
        except Exception:
            numpy = None
    if numpy is not None:
        try:
            numpy.random.seed(seed % 2**32)
        except Exception:
            pass
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            torch.manual_seed(seed)
        except Exception:
            pass
def _fitness(metrics):
    # societas.evolve.program.fitness_of: combined_score, else the mean of the finite numbers
    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if "combined_score" in metrics and number(metrics["combined_score"]):
        return float(metrics["combined_score"])
    values = [float(v) for v in metrics.values() if number(v)]
    return sum(values) / len(values) if values else None
def _run_stages(load, stages, thresholds, stage_timeout, emit, marker):
    # load() gives the evaluator module; emit(payload) reports one stage. Exits with status 1
    # after reporting a stage that raised, timed out or returned no dict of metrics.
    def timeout(signum, frame):
        raise TimeoutError("the stage ran past its time limit")
    signal.signal(signal.SIGALRM, timeout)
    merged = {}
    for index, stage in enumerate(stages):
        sys.stderr.write("\n__EVOLVE_STAGE__" + marker + " " + stage + "\n")
        sys.stderr.flush()
        signal.setitimer(signal.ITIMER_REAL, stage_timeout)
        try:
            function = getattr(load(), stage)
            _seed_generators()  # before every stage, as if each ran in a fresh process
            result = function(os.path.abspath("program.py"))
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
        # OpenEvolve's result shapes: a dict of metrics, {"metrics": ..., "artifacts": ...}, or an
        # object with .metrics and .artifacts (its EvaluationResult).
        if isinstance(result, dict) and isinstance(result.get("metrics"), dict) and set(result) <= {"metrics", "artifacts"}:
            payload = {"metrics": result["metrics"], "artifacts": result.get("artifacts") or {}}
        elif not isinstance(result, dict) and hasattr(result, "metrics"):
            payload = {"metrics": getattr(result, "metrics"), "artifacts": getattr(result, "artifacts", None) or {}}
        else:
            payload = {"metrics": result, "artifacts": {}}
        if not isinstance(payload["metrics"], dict):
            kind = type(payload["metrics"]).__name__
            emit({"stage": stage, "error": stage + " returned " + kind + ", expected a dict of metrics"})
            os._exit(1)
        raw = payload["artifacts"]
        if not isinstance(raw, dict):
            raw = {"artifacts": raw}
        payload["artifacts"] = {
            str(k): v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v)
            for k, v in raw.items()
        }
        payload["metrics"] = {str(k): v for k, v in payload["metrics"].items()}
        payload["stage"] = stage
        emit(payload)
        merged.update(payload["metrics"])
        if index < len(stages) - 1 and index < len(thresholds):
            score = _fitness(merged)
            if score is None or score < thresholds[index]:
                break
def _json_default(value):
    try:
        return float(value)
    except Exception:
        return repr(value)
"""

_HARNESS = (
    r"""
import importlib.util, json, math, os, random, signal, sys, traceback
_nonce = sys.stdin.readline().strip()
"""
    + _STAGE_LOOP
    + r"""
def _emit(payload, _nonce=_nonce):
    text = json.dumps(payload, default=_json_default)
    sys.stdout.flush()
    os.write(1, ("\n__EVOLVE_RESULT__" + _nonce + " " + text + "\n").encode())
stages, evaluator_path = json.loads(sys.argv[1]), sys.argv[2]
thresholds, stage_timeout = json.loads(sys.argv[3]), float(sys.argv[4])
_eval_seed[0] = int(sys.argv[5])
sys.path.insert(0, os.path.dirname(evaluator_path))
_module = []
def _load():
    # Loaded inside the first stage: an evaluator that does not load fails that stage.
    if not _module:
        spec = importlib.util.spec_from_file_location("evaluator", evaluator_path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["evaluator"] = module
        spec.loader.exec_module(module)
        _module.append(module)
    return _module[0]
_run_stages(_load, stages, thresholds, stage_timeout, _emit, _nonce)
"""
)

_GROUP_MARK = "__EVOLVE_GROUP__"
_GROUP_RESULT_BYTES = 256_000  # what one candidate of a group may report (its metrics and artifacts)

# Many candidates in one sandbox, one after another: the interpreter, the evaluator
# and what its optional ``warm_up(stages)`` loads (torch, game trees) are paid for
# once, and every candidate then runs in a process of its own, forked from the
# warmed-up harness, with its own output pipes and deadline.
#
# Input (standard input) is a stream of frames, each 8 hex digits of length and that
# many bytes: first the run's nonce, then per candidate a request (JSON: id, code,
# stages, thresholds) and a token. The harness reads a candidate's token only after
# the candidate and everything it started are dead, and labels the candidate's
# record with it: a candidate (a fork of the harness) never holds the token of its
# own record, and cannot read the harness's input (its descriptors are replaced,
# and the harness is not dumpable, so /proc/PID/fd is closed to it). Between two
# candidates the harness kills every other process of the sandbox's PID namespace
# (``kill(-1)``; its init is exempt) and empties its working directory of what the
# candidate left there. Without a PID namespace of its own the harness refuses.
# The same harness serves a fixed group (all frames written at once,
# :func:`run_group`) and a long-lived warm sandbox (:class:`WarmPool`).
_STREAM_HARNESS = (
    r"""
import importlib.util, json, math, os, random, selectors, shutil, signal, sys, tempfile, time, traceback
def _read_exact(n):
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))  # unbuffered: nothing beyond this frame is read ahead
        if not chunk:
            return None
        data += chunk
    return data
def _frame():
    head = _read_exact(8)
    if head is None:
        return None
    body = _read_exact(int(head, 16))
    return None if body is None else body.decode("utf-8")
def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
def _line(label, payload):
    sys.stdout.flush()
    _write_all(1, ("\n__EVOLVE_GROUP__" + label + " " + json.dumps(payload, default=str) + "\n").encode())
_nonce = _frame() or ""
_root = os.path.abspath(os.getcwd())
evaluator_path, stage_timeout = sys.argv[1], float(sys.argv[2])
tail_limit, result_limit = int(sys.argv[3]), int(sys.argv[4])
if os.getppid() != 1:
    _line(_nonce, {"refused": "the sandbox has no PID namespace of its own, so candidates could not be kept apart"})
    os._exit(0)
try:
    # Not dumpable: a candidate (same uid) cannot open the harness's /proc/PID/fd (its stdin and
    # stdout) or read its memory.
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
except Exception:
    pass
# What the working directory holds besides the harness: restored after every candidate.
_keep = {}
for _dirpath, _dirs, _names in os.walk(_root):
    for _name in _names:
        _path = os.path.join(_dirpath, _name)
        if _path != os.path.abspath(sys.argv[0]):
            with open(_path, "rb") as _f:
                _keep[os.path.relpath(_path, _root)] = _f.read()
_script = os.path.basename(sys.argv[0])
sys.path.insert(0, _root)
sys.path.insert(0, os.path.dirname(evaluator_path))
try:
    spec = importlib.util.spec_from_file_location("evaluator", evaluator_path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["evaluator"] = module
    spec.loader.exec_module(module)
except BaseException as exc:
    _line(_nonce, {"refused": "the evaluator did not load: " + type(exc).__name__ + ": " + str(exc)[:300]})
    os._exit(0)
_warmed = set()
"""
    + _STAGE_LOOP
    + r"""
def _child(result_fd, stages, thresholds, seed):
    _eval_seed[0] = seed
    def emit(payload):
        _write_all(result_fd, (json.dumps(payload, default=_json_default) + "\n").encode())
    _run_stages(lambda: module, stages, thresholds, stage_timeout, emit, _nonce)
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

def _restore():
    for name in os.listdir(_root):
        if name == _script:
            continue
        path = os.path.join(_root, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass
    for rel, data in _keep.items():
        path = os.path.join(_root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)

def _run(request):
    stages, thresholds = request["stages"], request["thresholds"]
    fresh = [s for s in stages if s not in _warmed]
    if fresh and callable(getattr(module, "warm_up", None)):
        try:
            module.warm_up(list(fresh))
        except BaseException as exc:
            return {"refused": "the evaluator's warm_up() raised " + type(exc).__name__ + ": " + str(exc)[:300]}
    _warmed.update(fresh)
    directory = tempfile.mkdtemp(prefix="candidate-", dir=_root)
    with open(os.path.join(directory, "program.py"), "w", encoding="utf-8") as f:
        f.write(request["code"])
    if "task_settings.json" in _keep:
        with open(os.path.join(directory, "task_settings.json"), "wb") as f:
            f.write(_keep["task_settings.json"])
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
            _child(pipes[0][1], stages, thresholds, int(request.get("seed", 0)))
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
    _restore()
    results = []
    for line in data["result"].decode("utf-8", "replace").splitlines():
        if line.strip():
            try:
                results.append(json.loads(line))
            except json.JSONDecodeError:
                results.append({"error": "the evaluation produced an unreadable result"})
    return {
        "results": results,
        "stdout": data["stdout"].decode("utf-8", "replace"),
        "stderr": data["stderr"].decode("utf-8", "replace"),
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "timed_out": timed_out,
        "seconds": seconds,
    }

while True:
    text = _frame()
    if text is None:
        break
    request = json.loads(text)
    try:
        record = _run(request)
    except BaseException as exc:
        _sweep()
        record = {"aborted": type(exc).__name__ + ": " + str(exc)[:300]}
    token = _frame()  # read only now: the candidate and all it started are dead
    if token is None:
        break
    record["id"] = request["id"]
    _line(token, record)
    if "aborted" in record:
        break
os._exit(0)
"""
)


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


# Artifact names the evaluation itself writes; an evaluator's artifact of the same name is renamed.
_RESERVED_ARTIFACTS = ("failure", "cascade", "llm_response", "novelty")


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return repr(value)


def split_metrics(result: Any) -> tuple[dict[str, float], dict[str, str]]:
    """``(metrics, artifacts)`` from what an evaluator stage reported, the way OpenEvolve reads it.

    Finite numbers are metrics; every other value (a string such as
    ``"error": "timeout after 30 s"``, a list, a boolean, NaN) becomes an
    artifact under its own name, and a value under ``"artifacts"`` that is a
    mapping adds its entries as artifacts. Raises :class:`ValueError` naming
    what was reported when it is not a mapping, holds no finite number, or
    declares a ``combined_score`` (the fitness) that is not a finite number.
    """
    if not isinstance(result, dict):
        raise ValueError(f"metrics must be a dict, got {type(result).__name__}")
    if "combined_score" in result and not is_metric_value(result["combined_score"]):
        # The fitness the evaluator declares cannot be used: ranking by the other metrics would hide that.
        raise ValueError(
            f"combined_score is not a finite number: {_tail(_as_text(result['combined_score']), 60)}"
        )
    metrics: dict[str, float] = {}
    artifacts: dict[str, str] = {}
    for key, value in result.items():
        name = str(key)
        if is_metric_value(value):
            metrics[name] = float(value)
        elif name == "artifacts" and isinstance(value, dict):
            artifacts.update({str(k): _as_text(v) for k, v in value.items()})
        else:
            artifacts[name] = _as_text(value)
    if not metrics:
        shown = ", ".join(f"{k}={_tail(_as_text(v), 60)}" for k, v in list(result.items())[:5])
        raise ValueError(f"no finite number among the metrics ({shown or 'an empty dict'})")
    return metrics, artifacts


def validate_metrics(metrics: Any) -> dict[str, float]:
    """A flat dict of finite numbers, or :class:`ValueError` naming the offending entry (the strict reading)."""
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


def evaluation_seed(run_seed: int, program: str) -> int:
    """The seed of ``random``/``numpy``/``torch`` in an evaluation: from the run's seed and the program's id."""
    digest = hashlib.sha256(f"{run_seed}:{program}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 2**63


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
    seed: int = 0  # random, numpy and torch start from it in every stage (see evaluation_seed)


@dataclass
class EvalOutcome:
    status: str  # "ok" | "failed"
    metrics: dict[str, float] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)
    stages_run: int = 0
    seconds: float = 0.0
    sandbox: str | None = None  # the backend that ran the last stage (SandboxResult.backend)
    stage_scores: dict[str, float] = field(default_factory=dict)  # fitness after each stage that reported
    stopped_at: str | None = None  # the stage after which the cascade stopped it (None: every stage ran)

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
        str(job.seed),
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
    # What the program printed, without the harness's result lines (they are the metrics themselves).
    stdout = "".join(line for line in result.stdout.splitlines(keepends=True) if not line.startswith(marker))
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


def _warm_key(job: EvalJob) -> tuple:
    """What the jobs of one sandbox must share (stages and thresholds travel with each request)."""
    return (
        job.evaluator_path,
        job.timeout_s,
        job.memory_mb,
        job.max_processes,
        job.pythonpath,
        job.task_settings,
        job.sandbox,
    )


def _frame(text: str) -> bytes:
    data = text.encode("utf-8")
    return b"%08x" % len(data) + data


def _request(job: EvalJob, ident: int) -> bytes:
    body = {
        "id": ident,
        "code": job.code,
        "stages": list(job.stages),
        "thresholds": list(job.thresholds),
        "seed": job.seed,
    }
    return _frame(json.dumps(body))


def _per_candidate_s(job: EvalJob) -> float:
    return job.timeout_s * len(job.stages) + 5.0


def _stream_files(job: EvalJob) -> dict[str, str]:
    files = dict(_OPENEVOLVE_SHIM)
    if job.task_settings:
        files[TASK_SETTINGS_FILE] = job.task_settings
    return files


def _stream_args(job: EvalJob) -> list[str]:
    return [job.evaluator_path, str(job.timeout_s), str(_MAX_ARTIFACT), str(_GROUP_RESULT_BYTES)]


def _record_outcome(
    job: EvalJob, record: dict[str, Any], nonce: str, backend: str | None, started: float
) -> EvalOutcome:
    """The outcome of one candidate from the record the stream harness wrote for it."""
    payloads = [
        p if isinstance(p, dict) else {"error": "unreadable result"} for p in record.get("results", [])
    ]
    end = _ChildEnd(
        record.get("exit"), record.get("signal"), bool(record.get("timed_out")), _per_candidate_s(job)
    )
    return _outcome(
        job,
        payloads,
        _split_stderr(str(record.get("stderr", "")), nonce),
        str(record.get("stdout", "")),
        end,
        started,
        backend,
    )


def run_group(jobs: tuple[EvalJob, ...] | list[EvalJob]) -> list[EvalOutcome]:
    """Run the cascades of several candidates in ONE sandbox; one outcome per job, in order.

    The jobs may differ in their code, stages and thresholds, not in what the
    sandbox is made of (evaluator, timeout, limits, task settings). The
    sandbox starts once; the evaluator and its optional ``warm_up()`` (which
    may import torch and load game trees) run once; then each candidate runs
    in a process of its own, forked from the warmed-up harness, under its own
    deadline, and everything it started is killed before the next one begins
    (see ``_STREAM_HARNESS``). A candidate's outcome is what
    :func:`run_evaluation` would give it. Where the group cannot run as one
    (a sandbox without a PID namespace of its own, an evaluator that does not
    load, the harness itself killed) the candidates it has no result for are
    evaluated one by one with :func:`run_evaluation`. For a pool of sandboxes
    that stay up between calls, see :class:`WarmPool`.
    """
    jobs = list(jobs)
    if not jobs:
        return []
    if len(jobs) == 1:
        return [run_evaluation(jobs[0])]
    key = _warm_key(jobs[0])
    for index, job in enumerate(jobs[1:], 1):
        if _warm_key(job) != key:
            raise ValueError(
                f"jobs of a group must differ only in their code, stages and thresholds; "
                f"job {index} differs from job 0"
            )
    first = jobs[0]
    started = time.monotonic()
    # Room on stdout for every candidate's result and output tails.
    output = len(jobs) * (_GROUP_RESULT_BYTES + 2 * _MAX_ARTIFACT + 4096) + 64_000
    sandbox = _sandbox(
        first.sandbox,
        sum(_per_candidate_s(job) for job in jobs) + 60.0,
        first.memory_mb,
        first.max_processes,
        first.pythonpath,
        max_output_bytes=output,
    )
    nonce = secrets.token_hex(16)
    tokens = [secrets.token_hex(16) for _ in jobs]
    stdin = _frame(nonce) + b"".join(
        _request(job, index) + _frame(token) for index, (job, token) in enumerate(zip(jobs, tokens))
    )
    records: dict[int, dict[str, Any]] = {}
    backend: str | None = None
    try:
        result = sandbox.run(
            _STREAM_HARNESS, files=_stream_files(first), args=_stream_args(first), stdin=stdin
        )
    except SandboxError as exc:
        logger.info(
            "a group of %d evaluations could not start (%s); evaluating them one by one", len(jobs), exc
        )
    else:
        backend = result.backend
        lines = _group_lines(result.stdout)
        refused = lines.get(nonce)
        by_token = {token: index for index, token in enumerate(tokens)}
        for label, found in lines.items():
            if label in by_token and "refused" not in found and "aborted" not in found:
                records[by_token[label]] = found
        if refused is not None:
            logger.info("evaluating %d candidates one by one: %s", len(jobs), refused.get("refused"))
        elif len(records) < len(jobs):
            logger.warning(
                "a group of %d evaluations reported %d (%s); the rest run one by one",
                len(jobs),
                len(records),
                result.describe(),
            )
    overhead = (
        time.monotonic() - started - sum(float(r.get("seconds", 0.0)) for r in records.values())
    ) / len(jobs)
    outcomes: list[EvalOutcome] = []
    for index, job in enumerate(jobs):
        record = records.get(index)
        if record is None:
            outcomes.append(run_evaluation(job))
            continue
        # The candidate's own clock: its child process's seconds plus its share of the group's start-up.
        begun = time.monotonic() - float(record.get("seconds", 0.0)) - max(overhead, 0.0)
        outcomes.append(_record_outcome(job, record, nonce, backend, begun))
    return outcomes


def _group_line(line: str) -> tuple[str, dict[str, Any]] | None:
    """``(label, record)`` of one line the stream harness wrote, or None for any other line."""
    if not line.startswith(_GROUP_MARK):
        return None
    label, _, text = line[len(_GROUP_MARK) :].partition(" ")
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return None
    return (label, record) if isinstance(record, dict) else None


def _group_lines(stdout: str) -> dict[str, dict[str, Any]]:
    """``{label: record}`` of the harness's lines; the first line of each label counts."""
    found: dict[str, dict[str, Any]] = {}
    for line in stdout.splitlines():
        parsed = _group_line(line)
        if parsed is not None and parsed[0] not in found:
            found[parsed[0]] = parsed[1]
    return found


class _WarmSandbox:
    """One long-lived sandbox running the stream harness; candidates go in one at a time."""

    def __init__(self, job: EvalJob, capacity: int) -> None:
        self.key = _warm_key(job)
        self.capacity = capacity
        self.served = 0
        self.nonce = secrets.token_hex(16)
        self.refused: str | None = None  # why the harness will not run candidates (no PID namespace, ...)
        self.ended: str | None = None  # how the sandbox ended, once it has
        self._lines: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()
        self._pending = b""
        self._stop = threading.Event()
        sandbox = _sandbox(
            job.sandbox,
            # The sandbox's own wall clock: every candidate it may run at its longest.
            capacity * (_per_candidate_s(job) + 5.0) + 120.0,
            job.memory_mb,
            job.max_processes,
            job.pythonpath,
            max_output_bytes=64_000,  # results are taken from the stream as they come (on_stdout)
        )
        self.backend = sandbox.resolve_backend()
        read_end, self._write_end = os.pipe()
        self._thread = threading.Thread(
            target=self._serve,
            args=(sandbox, job, read_end),
            name="evolve-warm-sandbox",
            daemon=True,
        )
        self._thread.start()
        self._send(_frame(self.nonce))

    def _serve(self, sandbox: Sandbox, job: EvalJob, read_end: int) -> None:
        try:
            result = sandbox.run(
                _STREAM_HARNESS,
                files=_stream_files(job),
                args=_stream_args(job),
                stdin=read_end,
                on_stdout=self._feed,
                stop=self._stop,
            )
            self.ended = result.describe()
        except Exception as exc:  # the sandbox could not start: every request falls back
            self.ended = f"the sandbox could not run: {exc}"
        finally:
            os.close(read_end)
            self._lines.put(None)

    def _feed(self, data: bytes) -> None:
        self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        for raw in lines:
            parsed = _group_line(raw.decode("utf-8", "replace"))
            if parsed is not None:
                self._lines.put(parsed)

    def _send(self, data: bytes) -> bool:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._write_end, view) :]
        except OSError:  # the harness is gone (EPIPE): the caller falls back
            return False
        return True

    @property
    def usable(self) -> bool:
        return self.ended is None and self.refused is None and self.served < self.capacity

    def evaluate(self, job: EvalJob) -> dict[str, Any] | None:
        """The harness's record for ``job``, or None when this sandbox cannot give one (see ``refused``/``ended``)."""
        self.served += 1
        token = secrets.token_hex(16)
        # A harness that is gone (it refused, a candidate killed it) says so on the stream; read on.
        self._send(_request(job, self.served) + _frame(token))
        # The harness enforces the candidate's deadline; this one only guards against a harness that hangs.
        deadline = time.monotonic() + _per_candidate_s(job) + 60.0
        while True:
            try:
                item = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.ended = "no result within the candidate's deadline"
                self._stop.set()
                return None
            if item is None:
                self._lines.put(None)  # stays ended for later calls
                return None
            label, record = item
            if label == self.nonce and "refused" in record:
                self.refused = str(record["refused"])
                return None
            if label != token:
                continue
            if "refused" in record or "aborted" in record:
                self.refused = str(record.get("refused") or record.get("aborted"))
                return None
            return record

    def close(self) -> None:
        """End the harness (end of input), or kill it if it does not end soon."""
        try:
            os.close(self._write_end)
        except OSError:
            pass
        self._thread.join(timeout=10.0)
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(timeout=30.0)


class WarmPool:
    """Sandboxes that stay up between evaluations: ``workers`` of them, ``capacity`` candidates each.

    Each worker keeps one sandbox running the stream harness (see
    :func:`run_group`): the interpreter, the evaluator and its ``warm_up()``
    load once per sandbox instead of once per candidate or group, and a worker
    takes the next job as soon as its last one is done, so a batch of uneven
    candidates keeps every worker busy to its end. A sandbox is replaced after
    ``capacity`` candidates (its memory stays bounded), when the jobs change
    what the sandbox is made of (another evaluator, timeout or task settings),
    and when its harness dies (a candidate killed it): the job it was running
    is then evaluated alone (:func:`run_evaluation`), as are all jobs where the
    harness refuses (no PID namespace of its own). Outcomes are what
    :func:`run_evaluation` gives.
    """

    name = "warm"

    def __init__(self, workers: int, capacity: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.workers = workers
        self.capacity = capacity
        self.refused: str | None = None
        self._queue: queue.Queue[tuple[EvalJob, Future] | None] = queue.Queue()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, name=f"evolve-warm-{i}", daemon=True) for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, job: EvalJob) -> Future:
        """A future of the job's :class:`EvalOutcome`."""
        if self._closed:
            raise RuntimeError("the warm pool is closed")
        future: Future = Future()
        self._queue.put((job, future))
        return future

    def map_unordered(self, jobs: list[EvalJob]) -> Iterator[tuple[int, EvalOutcome | BaseException]]:
        """Yield ``(index, outcome)`` per job as it finishes (an exception where the pool itself failed)."""
        futures = {self.submit(job): index for index, job in enumerate(jobs)}
        for future in as_completed(futures):
            error = future.exception()
            yield futures[future], (error if error is not None else future.result())

    def _work(self) -> None:
        warm: _WarmSandbox | None = None
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    break
                job, future = item
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    outcome, warm = self._evaluate(job, warm)
                except BaseException as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(outcome)
        finally:
            if warm is not None:
                warm.close()

    def _evaluate(self, job: EvalJob, warm: _WarmSandbox | None) -> tuple[EvalOutcome, _WarmSandbox | None]:
        if self.refused is not None:
            return run_evaluation(job), warm
        if warm is not None and (warm.key != _warm_key(job) or not warm.usable):
            warm.close()
            warm = None
        started = time.monotonic()
        if warm is None:
            try:
                warm = _WarmSandbox(job, self.capacity)
            except SandboxError as exc:
                logger.info("no warm sandbox (%s); evaluating alone", exc)
                return run_evaluation(job), None
        record = warm.evaluate(job)
        if record is not None:
            return _record_outcome(job, record, warm.nonce, warm.backend, started), warm
        if warm.refused is not None and self.refused is None:
            if warm.served == 1:
                # The harness refused before any candidate (no PID namespace, an evaluator that does not load).
                self.refused = warm.refused
                logger.info("evaluating candidates one by one: %s", warm.refused)
            else:
                logger.warning("a warm sandbox refused a candidate (%s); it runs alone", warm.refused)
        elif warm.ended is not None:
            logger.warning("a warm sandbox ended (%s); the candidate it ran is evaluated alone", warm.ended)
        warm.close()
        return run_evaluation(job), None

    def close(self) -> None:
        """Finish the queued jobs, then end every sandbox."""
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()


def plan_groups(jobs: list[EvalJob], size: int, workers: int) -> list[list[int]]:
    """Indices of ``jobs`` in groups of at most ``size`` that :func:`run_group` can run.

    Jobs that differ in more than their code, stages and thresholds never share a group. Each kind is
    cut into contiguous groups of nearly equal length, as many as a multiple of
    ``workers`` (or one per job), so the workers finish together.
    """
    if size < 1:
        raise ValueError(f"group size must be >= 1, got {size}")
    kinds: dict[tuple, list[int]] = {}
    for index, job in enumerate(jobs):
        kinds.setdefault(_warm_key(job), []).append(index)
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
    A :class:`WarmPool` as ``executor`` runs the jobs on its long-lived
    sandboxes instead (``size`` and ``workers`` are its own).
    """
    if isinstance(executor, WarmPool):
        yield from executor.map_unordered(jobs)
        return
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
            stage_metrics, extra = split_metrics(payload.get("metrics"))
        except ValueError as exc:
            artifacts["failure"] = f"{stage}: invalid metrics: {exc}"
            return EvalOutcome("failed", metrics, artifacts, index + 1, seconds, backend, scores)
        metrics.update(stage_metrics)
        fitness = fitness_of(metrics)
        if fitness is not None:
            scores[stage] = fitness
        for key, value in {**extra, **(payload.get("artifacts") or {})}.items():
            name = f"evaluator_{key}" if key in _RESERVED_ARTIFACTS else key
            artifacts[name] = _tail(str(value))
        if index < len(job.stages) - 1 and index < len(job.thresholds):
            score = fitness_of(metrics)
            if score is None or score < job.thresholds[index]:
                artifacts["cascade"] = (
                    f"stopped after {stage}: fitness {score} below threshold {job.thresholds[index]}"
                )
                return EvalOutcome("ok", metrics, artifacts, index + 1, seconds, backend, scores, stage)
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

    def job(self, code: str, thresholds: tuple[float, ...] | None = None, seed: int | None = None) -> EvalJob:
        """The job evaluating ``code``; ``thresholds`` replaces the configured cascade thresholds.

        ``seed`` starts ``random``, ``numpy`` and ``torch`` in every stage (a run
        gives :func:`evaluation_seed` of its seed and the program's id); by
        default it is derived from the code, so the same program always meets
        the same random numbers.
        """
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
            seed=evaluation_seed(0, code) if seed is None else seed,
        )

    def evaluate(self, code: str) -> EvalOutcome:
        return run_evaluation(self.job(code))
