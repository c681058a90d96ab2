"""The rich progress bar of :mod:`marl`'s long runs (to standard error)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = ["progress_bar"]


def progress_bar(enabled: bool = True, *, console=None, field: str | None = None):
    """A ``rich.progress.Progress`` with description, bar, done/total, elapsed
    and remaining time, plus the task field ``field`` when given (e.g. the
    latest return). Disabled (and silent) when ``enabled`` is false."""
    columns = [TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn()]
    if field:
        columns.append(TextColumn("{task.fields[" + field + "]}"))
    columns += [TimeElapsedColumn(), TimeRemainingColumn()]
    if console is None:
        console = Console(stderr=True, quiet=not enabled)
    return Progress(*columns, console=console, transient=False, disable=not enabled)
