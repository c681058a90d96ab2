"""Progress for long commands when nobody is watching a terminal.

A rich progress bar draws nothing when standard error is not a terminal (a
job under a scheduler, output piped to a file), so a long run would be
silent for hours. :class:`ProgressLines` writes one plain line every
``every_s`` seconds instead (what is done, the total, and whatever the caller
adds, such as the best score so far), and a last line at the end. Commands
use a rich bar when :func:`stderr_is_terminal` and these lines otherwise.
The interval is ``SOCIETAS_PROGRESS_EVERY_S`` seconds (default 30).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import IO, Any

__all__ = ["PROGRESS_EVERY_ENV", "ProgressLines", "progress_every_s", "stderr_is_terminal"]

PROGRESS_EVERY_ENV = "SOCIETAS_PROGRESS_EVERY_S"
_DEFAULT_EVERY_S = 30.0


def stderr_is_terminal() -> bool:
    """Whether standard error is an interactive terminal (where a live bar can be drawn)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def progress_every_s() -> float:
    """Seconds between progress lines: ``SOCIETAS_PROGRESS_EVERY_S`` (a positive number) or 30."""
    raw = os.environ.get(PROGRESS_EVERY_ENV, "").strip()
    if not raw:
        return _DEFAULT_EVERY_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{PROGRESS_EVERY_ENV}={raw!r} must be a positive number of seconds")
    return value


class ProgressLines:
    """Writes ``"<label>: <done>/<total> <fields> (<elapsed>)"`` at most every ``every_s`` seconds.

    Call :meth:`update` as often as you like; it prints only when the
    interval has passed since the last line. :meth:`finish` prints the last
    state once.
    """

    def __init__(
        self,
        label: str,
        *,
        every_s: float | None = None,
        stream: IO[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.every_s = progress_every_s() if every_s is None else every_s
        if not self.every_s > 0:
            raise ValueError(f"every_s must be positive, got {self.every_s}")
        self.stream = stream
        self.clock = clock
        self.started = clock()
        self._last_line = self.started
        self._state: tuple[int, int | None, dict[str, Any]] = (0, None, {})
        self._finished = False

    def update(self, done: int, total: int | None = None, **fields: Any) -> None:
        """Record the state; write a line when ``every_s`` has passed since the last one."""
        self._state = (done, total, fields)
        now = self.clock()
        if now - self._last_line >= self.every_s:
            self._last_line = now
            self._write(now)

    def finish(self) -> None:
        """Write the final state (once)."""
        if not self._finished:
            self._finished = True
            self._write(self.clock())

    def line(self, now: float | None = None) -> str:
        """The progress line for the current state."""
        done, total, fields = self._state
        elapsed = (self.clock() if now is None else now) - self.started
        parts = [f"{self.label}: {done}" + (f"/{total}" if total is not None else "")]
        parts += [f"{key.replace('_', ' ')} {value}" for key, value in fields.items()]
        return ", ".join(parts) + f" ({_format_elapsed(elapsed)})"

    def _write(self, now: float) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        print(self.line(now), file=stream, flush=True)


def _format_elapsed(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
