"""Error reporting shared by the command lines of societas.marl: one short line, exit status 2.

Besides :func:`fail`, the checks every command runs before it loads anything:
:func:`check_range` for numeric options (a sane upper bound stops a typo such
as ``--iterations 100000000000000000000000`` at once instead of after hours),
:func:`check_seed` for seeds (the range every random generator accepts) and
:func:`check_progress_env` for ``SOCIETAS_PROGRESS_EVERY_S``, and
:func:`expand_multi_args` for the options that take several values after one flag.
"""

from __future__ import annotations

import math
from typing import Any, NoReturn

import typer

from societas.agents.documents import DocumentError, load_json
from societas.agents.progress import progress_every_s

__all__ = [
    "MAX_SEED",
    "MAX_THREADS",
    "MULTI_OPTIONS",
    "check_progress_env",
    "check_range",
    "check_seed",
    "expand_multi_args",
    "fail",
    "json_object",
    "one_line",
    "shown",
]

MAX_SEED = 2**32 - 1  # numpy's generators take seeds in [0, 2**32)
MAX_THREADS = 1024  # torch CPU threads; more is a typo, not a machine
MULTI_OPTIONS = ("--games", "--algos", "--seeds")
"""Every option of the marl commands that takes several values after one flag (``table --games``,
``--algos``; the LLM recipes' ``--seeds``): their command lines (``societas``, ``python -m
societas.marl`` and ``python -m societas.marl.games``) expand them. A test collects the
list-valued options of every command and checks that they are exactly these."""


def one_line(exc: Exception) -> str:
    """One short line for a ValueError (a pydantic ValidationError gives its first error)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            e = errors()[0]
            loc = ".".join(str(x) for x in e.get("loc", ()))
            msg = str(e.get("msg", "")).removeprefix("Value error, ")
            return f"{loc}: {msg}" if loc else msg
        except (IndexError, KeyError, TypeError):  # not a pydantic error list: use the text
            pass
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def fail(msg: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


def shown(value: Any, width: int = 60) -> str:
    """``repr(value)`` cut to ``width`` characters, for messages that quote what was given."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def check_range(option: str, value: float | None, low: float | None, high: float | None) -> None:
    """Exit 2 naming ``option`` and ``value`` unless ``low <= value <= high`` (``None`` passes).

    Floats must also be finite. ``low`` or ``high`` may be ``None`` for no bound.
    """
    if value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):
        fail(f"{option} must be a finite number, got {value}")
    if (low is not None and value < low) or (high is not None and value > high):
        if low is not None and high is not None:
            fail(f"{option} must be between {low} and {high}, got {shown(value)}")
        if low is not None:
            fail(f"{option} must be >= {low}, got {shown(value)}")
        fail(f"{option} must be <= {high}, got {shown(value)}")


def check_seed(option: str, value: int | None) -> None:
    """Exit 2 unless ``value`` is a seed every generator accepts (0 to 2**32 - 1)."""
    check_range(option, value, 0, MAX_SEED)


def check_progress_env() -> None:
    """Exit 2 when ``SOCIETAS_PROGRESS_EVERY_S`` is set to something other than a positive number."""
    try:
        progress_every_s()
    except ValueError as exc:
        fail(str(exc))


def json_object(option: str, text: str) -> dict:
    """The JSON object given to ``option``; exits with status 2 naming the option otherwise."""
    try:
        value = load_json(text, source=option)
    except DocumentError as exc:  # syntax (with line and column), size or nesting
        fail(str(exc))
    if not isinstance(value, dict):
        fail(f"{option} must be a JSON object")
    return value


def expand_multi_args(argv: list[str], options: tuple[str, ...] = MULTI_OPTIONS) -> list[str]:
    """Rewrite ``--algos a b c`` as ``--algos a --algos b --algos c`` (click
    options take one value per flag); values run until the next ``-`` token."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok in options:
            j = i + 1
            values = []
            while j < len(argv) and not argv[j].startswith("-"):
                values.append(argv[j])
                j += 1
            if not values:  # let click report the missing value
                out.append(tok)
            for v in values:
                out += [tok, v]
            i = j
            continue
        out.append(tok)
        i += 1
    return out
