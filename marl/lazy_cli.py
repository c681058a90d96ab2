"""Typer groups whose commands are imported when one runs, not when the help lists them.

The training and solver commands import torch, transformers and OpenSpiel;
a group that mounted them eagerly took seconds to print its help or an
error message. A lazy group lists its commands from a table
(:class:`Mounted`: where the command's typer app lives and its one-line help)
and imports a command's module only when that command is asked for. Tests
render each listing from the table and from the real commands and check that
both agree, so the table cannot drift from the commands it stands for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any

import typer
import typer.core
import typer.main

__all__ = ["Mounted", "lazy_group", "load_command"]


@dataclass(frozen=True)
class Mounted:
    """A command of a typer app, as a lazy group mounts it."""

    module: str  # where the typer app lives
    attribute: str  # the typer app's name in it
    merged: bool  # True: one of the app's commands, at this level; False: the app as a group
    help: str  # the one-line help of the listing (the command's own; a test keeps them equal)


def load_command(table: Mapping[str, Mounted], name: str) -> Any:
    """The command ``name`` of ``table``, built by typer exactly as an eager mount would."""
    entry = table[name]
    sub_app = getattr(import_module(entry.module), entry.attribute)
    ctx = typer.Context(typer.core.TyperGroup())
    if entry.merged:  # one of the app's own commands
        command = typer.main.get_group(sub_app).get_command(ctx, name)
    else:
        holder = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        holder.add_typer(sub_app, name=name, help=entry.help)
        command = typer.main.get_group(holder).get_command(ctx, name)
    if command is None:
        raise LookupError(f"{entry.module}.{entry.attribute} has no command {name!r}")
    return command


def lazy_group(table: Mapping[str, Mounted]) -> type[typer.core.TyperGroup]:
    """A ``typer.core.TyperGroup`` class (``typer.Typer(cls=...)``) that mounts the commands of
    ``table`` lazily, after the ones registered on the app itself. Give the app a callback:
    typer builds a group only for an app with one, or with commands of its own."""

    class LazyGroup(typer.core.TyperGroup):
        commands_table = table
        listing_from_table = True  # False: the help imports every command (the tests' reference)

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._loaded: dict[str, Any] = {}
            self._listing = False

        def list_commands(self, ctx: Any) -> list[str]:
            return [*super().list_commands(ctx), *self.commands_table]

        def get_command(self, ctx: Any, cmd_name: str) -> Any:
            if cmd_name not in self.commands_table:
                return super().get_command(ctx, cmd_name)
            if self._listing and self.listing_from_table and cmd_name not in self._loaded:
                return typer.core.TyperCommand(cmd_name, help=self.commands_table[cmd_name].help)
            if cmd_name not in self._loaded:
                self._loaded[cmd_name] = load_command(self.commands_table, cmd_name)
            return self._loaded[cmd_name]

        def format_help(self, ctx: Any, formatter: Any) -> None:
            self._listing = True
            try:
                super().format_help(ctx, formatter)
            finally:
                self._listing = False

    return LazyGroup
