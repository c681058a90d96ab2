"""Task directories in OpenEvolve's layout.

A task is a directory holding ``initial_program.py`` (the seed, with
``EVOLVE-BLOCK-START``/``EVOLVE-BLOCK-END`` markers), ``evaluator.py``
(``evaluate(program_path) -> dict``, optionally ``evaluate_stage1/2/3``) and,
optionally, ``config.yaml`` (OpenEvolve's keys, see :mod:`societas.evolve.config`)
and ``building_blocks.yaml`` (the library of the ``blocks`` mutation, see
:mod:`societas.evolve.blocks`).
That is exactly what OpenEvolve's ``openevolve-run.py initial_program.py
evaluator.py --config config.yaml`` takes, so such tasks run here unchanged.
Built-in tasks live in ``evolve/tasks/NAME/`` and may be named by ``NAME``:
``cfr`` (the three CFR hooks, seeded with CFR+; ``demo.yaml`` is the short run
of ``make demo``) and ``psro`` (PSRO's training and evaluation meta-solvers,
seeded with uniform). Both also define ``evaluate_held_out`` and
``held_out_baselines`` for the report (:mod:`societas.evolve.held_out`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from societas.agents.documents import DocumentError, read_text

from .blocks import BLOCKS_FILE
from .evaluator import TaskError
from .program import EvolveBlockError, find_evolve_blocks, frozen_parts_equal, parse_python

__all__ = ["BUILTIN_TASKS_DIR", "SEEDS_DIR", "Task", "load_seed_programs", "load_task"]

SEEDS_DIR = "seeds"

BUILTIN_TASKS_DIR = Path(__file__).resolve().parent / "tasks"


@dataclass(frozen=True)
class Task:
    name: str
    directory: Path
    initial_program: str
    evaluator_path: Path
    config_path: Path | None
    blocks_path: Path | None = None  # building_blocks.yaml: the library of the ``blocks`` mutation


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
        parse_python(code, filename=str(program_path))
    except SyntaxError as exc:
        raise TaskError(f"{program_path} does not parse: {exc.msg} (line {exc.lineno})") from None
    except (MemoryError, RecursionError):
        raise TaskError(f"{program_path} is nested too deeply for Python's parser") from None
    config_path = path / "config.yaml"
    blocks_path = path / BLOCKS_FILE
    return Task(
        path.name,
        path,
        code,
        evaluator_path,
        config_path if config_path.is_file() else None,
        blocks_path if blocks_path.is_file() else None,
    )


def load_seed_programs(task: Task, names: list[str]) -> list[tuple[str, str]]:
    """``(name, code)`` of the task's extra seed programs (``seeds/NAME.py``); ``["all"]``: every one, sorted.

    Each must parse and keep the task's program outside its evolve blocks byte
    for byte (it is a program of the same task); :class:`TaskError` names the
    file otherwise, or the missing names and what there is.
    """
    if not names:
        return []
    directory = task.directory / SEEDS_DIR
    available = sorted(p.stem for p in directory.glob("*.py")) if directory.is_dir() else []
    wanted = available if names == ["all"] else list(dict.fromkeys(names))
    if not wanted:
        raise TaskError(f"task {task.name} has no seed programs ({directory}/*.py)")
    missing = [n for n in wanted if n not in available]
    if missing:
        raise TaskError(
            f"task {task.name} has no seed program(s) {missing}; it has: {', '.join(available) or 'none'}"
            " (or give 'all')"
        )
    out = []
    for name in wanted:
        path = directory / f"{name}.py"
        try:
            code = read_text(path)
            parse_python(code, filename=str(path))
        except DocumentError as exc:
            raise TaskError(str(exc)) from None
        except SyntaxError as exc:
            raise TaskError(f"{path} does not parse: {exc.msg} (line {exc.lineno})") from None
        try:
            same = frozen_parts_equal(task.initial_program, code)
        except EvolveBlockError as exc:
            raise TaskError(f"{path}: {exc}") from None
        if not same:
            raise TaskError(f"{path} changes the task's program outside its evolve blocks")
        out.append((name, code))
    return out
