"""Progress of :mod:`marl`'s long runs on standard error: a rich bar, or plain lines.

:func:`progress_bar` returns a ``rich.progress.Progress`` when standard error
is a terminal. Otherwise (a job under a scheduler, output piped to a file),
where a rich bar would stay silent for the whole run, it returns a
:class:`ProgressLog` with the same ``add_task`` / ``update`` / ``advance``
interface that writes one plain line per task every
``SOCIETAS_PROGRESS_EVERY_S`` seconds (default 30) through
:class:`societas.agents.progress.ProgressLines`, and a last line at the end of
a run that lasted at least that long.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from societas.agents.progress import ProgressLines, progress_every_s, stderr_is_terminal

__all__ = ["ProgressLog", "progress_bar"]


class _Task:
    def __init__(self, lines: ProgressLines, total: float | None, completed: float, note: str) -> None:
        self.lines = lines
        self.total = total
        self.completed = completed
        self.note = note
        self.updated = False


class ProgressLog:
    """The part of ``rich.progress.Progress`` that :mod:`marl` uses, written as plain lines.

    Each task prints ``"<description>: <done>/<total>, latest <field> (<elapsed>)"``
    at most every ``every_s`` seconds (see :class:`ProgressLines`); ``field``
    names the task field shown as the latest value (as the bar's extra column).
    :meth:`stop` writes the final line of every task that moved when the run
    lasted at least ``every_s``, so that a quick command stays quiet.
    """

    def __init__(self, *, field: str | None = None, every_s: float | None = None) -> None:
        self.field = field
        self.every_s = progress_every_s() if every_s is None else every_s
        self._tasks: dict[TaskID, _Task] = {}
        self._next_id = 0
        self._started = time.monotonic()

    def __enter__(self) -> ProgressLog:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start the clock (as ``Progress.start``)."""
        self._started = time.monotonic()

    def stop(self) -> None:
        """Write the last line of each task that moved, if the run lasted at least one interval."""
        if time.monotonic() - self._started >= self.every_s:
            for task in self._tasks.values():
                if task.updated:
                    task.lines.finish()

    def add_task(
        self, description: str, total: float | None = None, completed: float = 0, **fields: Any
    ) -> TaskID:
        """A new task; returns its id."""
        task_id = TaskID(self._next_id)
        self._next_id += 1
        lines = ProgressLines(description, every_s=self.every_s)
        self._tasks[task_id] = _Task(lines, total, completed, self._note(fields))
        return task_id

    def update(
        self,
        task_id: TaskID,
        *,
        total: float | None = None,
        completed: float | None = None,
        advance: float | None = None,
        description: str | None = None,
        **fields: Any,
    ) -> None:
        """Change a task (as ``Progress.update``); writes a line when the interval has passed."""
        task = self._tasks[task_id]
        if total is not None:
            task.total = total
        if completed is not None:
            task.completed = completed
        if advance is not None:
            task.completed += advance
        if description is not None:
            task.lines.label = description
        note = self._note(fields)
        if note:
            task.note = note
        task.updated = True
        task.lines.update(*self._counts(task), **self._fields(task))

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        """Add ``advance`` to a task's completed steps."""
        self.update(task_id, advance=advance)

    def remove_task(self, task_id: TaskID) -> None:
        """Forget a task (no last line for it)."""
        self._tasks.pop(task_id, None)

    def _note(self, fields: dict[str, Any]) -> str:
        value = fields.get(self.field) if self.field else None
        return "" if value is None else str(value)

    @staticmethod
    def _counts(task: _Task) -> tuple[int, int | None]:
        return int(task.completed), (None if task.total is None else int(task.total))

    @staticmethod
    def _fields(task: _Task) -> dict[str, Any]:
        return {"latest": task.note} if task.note else {}


def progress_bar(enabled: bool = True, *, console=None, field: str | None = None) -> Progress | ProgressLog:
    """Progress on standard error for a long run.

    With a terminal: a ``rich.progress.Progress`` with description, bar,
    done/total, elapsed and remaining time, plus the task field ``field`` when
    given (e.g. the latest return). Without one: a :class:`ProgressLog` writing
    plain lines every ``SOCIETAS_PROGRESS_EVERY_S`` seconds (a ``ValueError``
    names the variable when it is not a positive number). Disabled (and silent)
    when ``enabled`` is false or ``console`` is quiet.
    """
    if enabled and not (console is not None and console.quiet) and not stderr_is_terminal():
        return ProgressLog(field=field)
    columns = [TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn()]
    if field:
        columns.append(TextColumn("{task.fields[" + field + "]}"))
    columns += [TimeElapsedColumn(), TimeRemainingColumn()]
    if console is None:
        console = Console(stderr=True, quiet=not enabled)
    return Progress(*columns, console=console, transient=False, disable=not enabled)
