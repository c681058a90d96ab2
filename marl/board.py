"""TensorBoard event files in a run directory, shared by every loop that trains or searches.

Each loop writes its scalars with :func:`open_board` into ``RUN_DIR/tensorboard/``
beside its ``metrics.jsonl`` (which stays the machine-readable record), so that::

    tensorboard --logdir RUN_DIR          # or the folder above several run directories

draws the curves while the run goes on: the writer flushes every few seconds
(and a loop may :meth:`Board.flush` after each of its steps), and is closed
when the loop ends or stops.

Steps are the loop's own global step (a GRPO step, env steps, an update, an
iteration). A resumed run opens the board with ``purge_step`` = the first step
it will write again: the new event file starts with a ``SessionLog.START`` at
that step, and TensorBoard then drops every point an earlier session wrote at
that step or later, so redone steps are never shown twice. A loop that starts
over in a used run directory passes ``purge_step=0`` for the same reason.

Only finite numbers become points: ``None``, strings, NaN and infinities (a
skipped update's reason, an undefined explained variance) are left out, so
one odd value never breaks a run's logging.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

try:  # tensorboard is a dependency; a broken or partial install gets a clear error at open time
    from torch.utils.tensorboard import SummaryWriter
except ImportError as exc:  # pragma: no cover - exercised by a monkeypatched test
    SummaryWriter = None  # type: ignore[assignment,misc]
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None

__all__ = ["BOARD_DIR", "Board", "TensorBoardMissingError", "open_board", "scalar_value"]

BOARD_DIR = "tensorboard"
_EVENTS = "events.out.tfevents."


class TensorBoardMissingError(ImportError):
    """TensorBoard logging was asked for but the ``tensorboard`` package cannot be imported."""


def scalar_value(value: Any) -> float | None:
    """``value`` as a float when it is a finite real number (bool, int, float, numpy or 0-d
    tensor), else ``None``."""
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # numpy scalars, 0-d tensors
        value = value.item()
    if not isinstance(value, numbers.Real):
        return None
    out = float(value)
    return out if math.isfinite(out) else None


class Board:
    """Scalars into one run's event files; a board that is off (``writer=None``) takes every
    call and writes nothing, so loops call it unconditionally."""

    def __init__(
        self, writer: Any | None = None, log_dir: Path | None = None, *, continued: bool = False
    ) -> None:
        self._writer = writer
        self.log_dir = log_dir
        # Whether the folder already held event files: a resumed loop that finds none (an earlier
        # session ran with the event files off) may write its earlier steps again from its record.
        self.continued = continued

    @property
    def enabled(self) -> bool:
        return self._writer is not None

    def scalar(self, tag: str, value: Any, step: int) -> bool:
        """Write one point; ``False`` (and nothing written) when ``value`` is not a finite number."""
        v = scalar_value(value)
        if self._writer is None or v is None:
            return False
        self._writer.add_scalar(tag, v, global_step=int(step))
        return True

    def scalars(
        self, values: Mapping[str, Any], step: int, *, prefix: str = "", skip: Collection[str] = ()
    ) -> dict[str, float]:
        """Write ``prefix + key`` for every finite number in ``values`` (keys in ``skip`` left out);
        returns the points written, by tag."""
        written: dict[str, float] = {}
        if self._writer is None:
            return written
        for key, value in values.items():
            if key in skip:
                continue
            v = scalar_value(value)
            if v is not None:
                tag = prefix + key
                self._writer.add_scalar(tag, v, global_step=int(step))
                written[tag] = v
        return written

    def flush(self) -> None:
        """Put everything written so far on disk (a live TensorBoard shows it on its next reload)."""
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file; later calls write nothing. Safe to call twice."""
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()

    def __enter__(self) -> Board:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _after_existing_files(log_dir: Path) -> None:
    """Wait (at most about a second) until a new event file's name sorts after those in ``log_dir``.

    TensorBoard reads a folder's event files in name order, and a name starts with
    the second it was made: a resumed session's file made within the same second
    as an earlier one could be read first, and its purge would miss that file's points.
    """
    newest = 0
    for path in log_dir.glob(_EVENTS + "*"):
        stamp = path.name[len(_EVENTS) :].split(".", 1)[0]
        if stamp.isdigit():
            newest = max(newest, int(stamp))
    while newest and int(time.time()) <= newest:
        time.sleep(min(0.05, max(0.001, newest + 1 - time.time())))


def open_board(
    run_dir: str | Path,
    *,
    enabled: bool = True,
    purge_step: int | None = None,
    subdir: str = BOARD_DIR,
    flush_secs: int = 5,
) -> Board:
    """A :class:`Board` writing into ``run_dir/subdir`` (made when missing), or one that is off.

    ``purge_step``: the first step this session writes again (see the module
    docstring); ignored when the folder holds no event file yet.
    Raises :class:`TensorBoardMissingError`, saying how to install it or turn
    the event files off, when ``enabled`` and tensorboard cannot be imported.
    """
    if not enabled:
        return Board()
    if SummaryWriter is None:
        raise TensorBoardMissingError(
            "TensorBoard event files need the 'tensorboard' package, which could not be imported "
            f"({_IMPORT_ERROR}): install it (pip install tensorboard) or turn the event files off "
            "(tensorboard=False)"
        )
    log_dir = Path(run_dir) / subdir
    log_dir.mkdir(parents=True, exist_ok=True)
    prior = any(log_dir.glob(_EVENTS + "*"))
    if prior:
        _after_existing_files(log_dir)
    writer = SummaryWriter(
        log_dir=str(log_dir), purge_step=purge_step if prior else None, flush_secs=flush_secs
    )
    return Board(writer, log_dir, continued=prior)
