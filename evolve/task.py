"""Task directories in OpenEvolve's layout.

A task is a directory holding ``initial_program.py`` (the seed, with
``EVOLVE-BLOCK-START``/``EVOLVE-BLOCK-END`` markers), ``evaluator.py``
(``evaluate(program_path) -> dict``, optionally ``evaluate_stage1/2/3``) and,
optionally, ``config.yaml`` (OpenEvolve's keys, see :mod:`societas.evolve.config`).
That is exactly what OpenEvolve's ``openevolve-run.py initial_program.py
evaluator.py --config config.yaml`` takes, so such tasks run here unchanged.
Built-in tasks live in ``evolve/tasks/NAME/`` and may be named by ``NAME``:
``cfr`` (the three CFR hooks, seeded with CFR+; ``demo.yaml`` is the short run
of ``make demo``) and ``psro`` (PSRO's training and evaluation meta-solvers,
seeded with uniform). Both also define ``evaluate_held_out`` and
``held_out_baselines`` for the report (:mod:`societas.evolve.held_out`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from societas.agents.documents import DocumentError, read_text

from .evaluator import TaskError
from .program import EvolveBlockError, find_evolve_blocks

__all__ = ["BUILTIN_TASKS_DIR", "Task", "load_task"]

BUILTIN_TASKS_DIR = Path(__file__).resolve().parent / "tasks"


@dataclass(frozen=True)
class Task:
    name: str
    directory: Path
    initial_program: str
    evaluator_path: Path
    config_path: Path | None


def load_task(spec: str | Path) -> Task:
    """Load a task directory (or a built-in task by name); raises :class:`TaskError` saying what is missing."""
    path = Path(spec).expanduser()
    if not path.exists() and (BUILTIN_TASKS_DIR / str(spec)).is_dir():
        path = BUILTIN_TASKS_DIR / str(spec)
    if not path.is_dir():
        builtin = (
            sorted(p.name for p in BUILTIN_TASKS_DIR.iterdir() if p.is_dir() and not p.name.startswith("_"))
            if BUILTIN_TASKS_DIR.is_dir()
            else []
        )
        raise TaskError(
            f"task {str(spec)!r} is not a directory (built-in tasks: {', '.join(builtin) or 'none'})"
        )
    path = path.resolve()
    program_path, evaluator_path = path / "initial_program.py", path / "evaluator.py"
    for required in (program_path, evaluator_path):
        if not required.is_file():
            raise TaskError(f"task {path} has no {required.name}")
    try:
        code = read_text(program_path)
    except DocumentError as exc:
        raise TaskError(str(exc)) from None
    try:
        blocks = find_evolve_blocks(code)
    except EvolveBlockError as exc:
        raise TaskError(f"{program_path}: {exc}") from None
    if not blocks:
        raise TaskError(f"{program_path} has no EVOLVE-BLOCK-START / EVOLVE-BLOCK-END region to evolve")
    try:
        ast.parse(code, filename=str(program_path))
    except SyntaxError as exc:
        raise TaskError(f"{program_path} does not parse: {exc.msg} (line {exc.lineno})") from None
    except (MemoryError, RecursionError):
        raise TaskError(f"{program_path} is nested too deeply for Python's parser") from None
    config_path = path / "config.yaml"
    return Task(path.name, path, code, evaluator_path, config_path if config_path.is_file() else None)
