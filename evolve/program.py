"""Programs under evolution: source with EVOLVE-BLOCK regions, and their record.

As in AlphaEvolve (Novikov et al., 2025) and OpenEvolve, only the parts of a
program between the comment markers ``# EVOLVE-BLOCK-START`` and
``# EVOLVE-BLOCK-END`` may change; everything else (imports, the harness the
evaluator calls) stays fixed. A program may hold several such regions. The
helpers here find them (:func:`find_evolve_blocks`), read them
(:func:`extract_evolve_blocks`), write new contents into them
(:func:`replace_evolve_blocks`) and check that a child kept the frozen parts
of its parent (:func:`frozen_parts_equal`).

:class:`Program` is one evaluated (or failed) candidate as the database stores
it: source, id, parent, generation, island, the mutation that produced it,
metrics, fitness, artifacts (stderr, failure reason) and timestamps.
Fitness follows OpenEvolve: ``combined_score`` when the evaluator reports it,
else the mean of the numeric metrics (:func:`fitness_of`).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import math
import re
import threading
import time
from typing import Any, Literal

__all__ = [
    "BLOCK_END",
    "BLOCK_START",
    "EvolveBlock",
    "EvolveBlockError",
    "Program",
    "ProgramStatus",
    "extract_evolve_blocks",
    "find_evolve_blocks",
    "fitness_of",
    "frozen_parts_equal",
    "parse_python",
    "program_id",
    "replace_evolve_blocks",
]

BLOCK_START = "EVOLVE-BLOCK-START"
BLOCK_END = "EVOLVE-BLOCK-END"
# A marker is a comment line of its own (any indentation), as OpenEvolve writes them.
_MARKER = re.compile(r"^[ \t]*#[ \t]*(EVOLVE-BLOCK-START|EVOLVE-BLOCK-END)\b.*$", re.MULTILINE)

ProgramStatus = Literal["ok", "failed", "mutation_failed"]

# CPython 3.11 (before 3.11.8) keeps ast.parse's recursion counter in interpreter-wide state: two
# threads that parse at once, with a garbage collection running Python finalizers in between, fail
# with "SystemError: AST constructor recursion depth mismatch". The search parses in its side thread
# (LLM children) while the main thread mutates, so every parse of the evolve package holds this lock.
_AST_LOCK = threading.Lock()


def parse_python(source: str, filename: str = "<unknown>", mode: str = "exec") -> Any:
    """``ast.parse`` under the package's parse lock (see ``_AST_LOCK``); same arguments and errors."""
    with _AST_LOCK:
        return ast.parse(source, filename=filename, mode=mode)


class EvolveBlockError(ValueError):
    """A program's EVOLVE-BLOCK markers are missing, unbalanced or nested."""


@dataclasses.dataclass(frozen=True)
class EvolveBlock:
    """One evolvable region: ``code[start:end]`` is its content (between the marker lines).

    ``start`` is the offset just after the START marker line's newline, ``end``
    the offset where the END marker line begins; ``first_line``/``last_line``
    are the 1-based line numbers of the content (``last_line < first_line``
    for an empty block).
    """

    index: int
    start: int
    end: int
    first_line: int
    last_line: int

    def content(self, code: str) -> str:
        return code[self.start : self.end]


def find_evolve_blocks(code: str) -> list[EvolveBlock]:
    """The evolve blocks of ``code`` in order; raises :class:`EvolveBlockError` if the markers are malformed."""
    blocks: list[EvolveBlock] = []
    open_at: int | None = None
    open_line = 0
    for match in _MARKER.finditer(code):
        line = code.count("\n", 0, match.start()) + 1
        if match.group(1) == BLOCK_START:
            if open_at is not None:
                raise EvolveBlockError(
                    f"line {line}: {BLOCK_START} inside the block opened on line {open_line}"
                )
            newline = code.find("\n", match.end())
            open_at = len(code) if newline < 0 else newline + 1
            open_line = line
        else:
            if open_at is None:
                raise EvolveBlockError(f"line {line}: {BLOCK_END} without a matching {BLOCK_START}")
            blocks.append(EvolveBlock(len(blocks), open_at, match.start(), open_line + 1, line - 1))
            open_at = None
    if open_at is not None:
        raise EvolveBlockError(f"line {open_line}: {BLOCK_START} is never closed by {BLOCK_END}")
    return blocks


def extract_evolve_blocks(code: str) -> list[str]:
    """The text inside each evolve block, in order."""
    return [block.content(code) for block in find_evolve_blocks(code)]


def replace_evolve_blocks(code: str, contents: list[str] | dict[int, str]) -> str:
    """``code`` with the contents of its evolve blocks replaced.

    ``contents`` is one string per block (a list) or ``{block_index: text}``.
    A replacement that does not end with a newline gets one, so the END
    marker stays on its own line.
    """
    blocks = find_evolve_blocks(code)
    if isinstance(contents, list):
        if len(contents) != len(blocks):
            raise EvolveBlockError(
                f"got {len(contents)} block contents for a program with {len(blocks)} evolve blocks"
            )
        mapping = dict(enumerate(contents))
    else:
        mapping = dict(contents)
        for index in mapping:
            if not 0 <= index < len(blocks):
                raise EvolveBlockError(f"evolve block {index} does not exist (the program has {len(blocks)})")
    out, pos = [], 0
    for block in blocks:
        out.append(code[pos : block.start])
        text = mapping.get(block.index, block.content(code))
        if text and not text.endswith("\n"):
            text += "\n"
        out.append(text)
        pos = block.end
    out.append(code[pos:])
    return "".join(out)


def frozen_parts(code: str) -> list[str]:
    """The text outside the evolve blocks (markers included), as a list of segments."""
    blocks = find_evolve_blocks(code)
    segments, pos = [], 0
    for block in blocks:
        segments.append(code[pos : block.start])
        pos = block.end
    segments.append(code[pos:])
    return segments


def frozen_parts_equal(parent: str, child: str) -> bool:
    """True when ``child`` differs from ``parent`` only inside evolve blocks."""
    try:
        return frozen_parts(parent) == frozen_parts(child)
    except EvolveBlockError:
        return False


def fitness_of(metrics: dict[str, Any]) -> float | None:
    """``combined_score`` when present, else the mean of the numeric metrics (OpenEvolve's rule)."""
    if not metrics:
        return None
    if "combined_score" in metrics and is_metric_value(metrics["combined_score"]):
        return float(metrics["combined_score"])
    values = [float(v) for v in metrics.values() if is_metric_value(v)]
    return sum(values) / len(values) if values else None


def is_metric_value(value: Any) -> bool:
    """A finite int or float (not a bool): what counts as a metric; anything else is an artifact."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def program_id(seed: int, iteration: int, code: str) -> str:
    """A deterministic id: the same seed, iteration and code give the same id in every run."""
    digest = hashlib.sha256(f"{seed}:{iteration}:{code}".encode()).hexdigest()
    return f"{iteration:06d}-{digest[:10]}"


@dataclasses.dataclass
class Program:
    """One candidate and what its evaluation found.

    ``status`` is ``"ok"`` (evaluated, metrics valid), ``"failed"`` (the
    evaluation crashed, timed out, ran out of memory or returned invalid
    metrics; ``artifacts["failure"]`` says why) or ``"mutation_failed"`` (the
    mutation itself produced no valid program, e.g. a malformed LLM answer;
    ``code`` is then the parent's and ``artifacts["failure"]`` the reason).
    """

    id: str
    code: str
    iteration: int
    parent_id: str | None = None
    generation: int = 0
    island: int = 0
    mutation: dict[str, Any] = dataclasses.field(default_factory=dict)
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    fitness: float | None = None
    status: ProgramStatus = "ok"
    artifacts: dict[str, str] = dataclasses.field(default_factory=dict)
    created_at: float = dataclasses.field(default_factory=time.time)
    evaluated_at: float | None = None
    eval_seconds: float = 0.0
    # Fitness after each cascade stage that reported (successive halving ranks candidates at a stage).
    stage_scores: dict[str, float] = dataclasses.field(default_factory=dict)
    # The cascade stage after which the program was stopped (its score is from the stages before);
    # None: every stage ran. Such a program ranks only against its own kind (see ``complete``).
    stopped_at: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.fitness is not None

    @property
    def complete(self) -> bool:
        """Whether every stage of the cascade scored it: only then can it be a run's best."""
        return self.stopped_at is None

    @property
    def failure(self) -> str | None:
        return self.artifacts.get("failure")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Program:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
