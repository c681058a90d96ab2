"""Error reporting shared by the command lines of societas.marl: one short line, exit status 2."""

from __future__ import annotations

import json
from typing import NoReturn

import typer

__all__ = ["fail", "json_object", "one_line"]


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


def json_object(option: str, text: str) -> dict:
    """The JSON object given to ``option``; exits with status 2 naming the option otherwise."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"{option} is not JSON: {exc.msg}")
    if not isinstance(value, dict):
        fail(f"{option} must be a JSON object")
    return value
