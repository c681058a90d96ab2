"""The ``societas`` command: one entry point to every command line of the four layers.

::

    societas show | run | resume | trace              agent graphs        (societas.topology.cli)
    societas solve | table | psro | algos | meta-solvers
                                                    exact game solvers  (societas.marl.games.cli)
    societas train comm|routing|conductor|selfplay|remul|society
                                                    training            (societas.marl.cli)
    societas evolve run|report                      algorithm discovery (societas.evolve.cli)
    societas model prepare|path                     the embedded model  (societas.evolve.model_cli)

Each layer keeps its own ``python -m societas.<layer>`` entry point; this app
mounts the same typer commands, so options, exit codes (2 for bad input) and
``--json`` behave identically on both. It lives in ``evolve`` because the
bottom layer is the only one allowed to import all four.

The commands are mounted lazily: ``societas --help`` lists them from the table
below without importing torch or transformers (a fraction of a second instead
of several), and a command imports only the module that defines it. A test
renders the listing from the real commands too and checks that both agree.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib import import_module
from typing import Any

import typer
import typer.core
import typer.main

from societas.marl.cli_common import MULTI_OPTIONS, expand_multi_args


@dataclass(frozen=True)
class Mounted:
    """A command of a layer's typer app, as the console mounts it."""

    module: str  # where the typer app lives
    attribute: str  # the typer app's name in it
    merged: bool  # True: one of the app's commands at the top level; False: the app as a group
    help: str  # the one-line help of the listing (the command's own; a test keeps them equal)


_GRAPHS = ("societas.topology.cli", "app", True)
_GAMES = ("societas.marl.games.cli", "app", True)

COMMANDS: dict[str, Mounted] = {
    "show": Mounted(*_GRAPHS, "Validate a spec and print its Mermaid diagram and metrics."),
    "run": Mounted(*_GRAPHS, "Run a graph on a task."),
    "resume": Mounted(*_GRAPHS, "Continue a saved run: after a crash, or with the answer to an interrupt."),
    "trace": Mounted(
        *_GRAPHS, "Make the page that steps through a saved run (--html), or a drawing of it (--render)."
    ),
    "solve": Mounted(*_GAMES, "Run one CFR variant on one game and report its exact exploitability."),
    "psro": Mounted(*_GAMES, "PSRO with an exact best-response oracle and exact meta-game payoffs."),
    "meta-solvers": Mounted(*_GAMES, "List the registered PSRO meta-solvers."),
    "algos": Mounted(*_GAMES, "List the built-in algorithms."),
    "table": Mounted(
        *_GAMES,
        "Exploitability of every algorithm on the paper's games: table.md, table.json, curves_<game>.png.",
    ),
    "train": Mounted(
        "societas.marl.cli",
        "train_app",
        False,
        "Train multi-agent policies: communication MARL, learned routing and LLM recipes (GRPO).",
    ),
    "evolve": Mounted("societas.evolve.cli", "app", False, "Evolutionary discovery of algorithm code."),
    "model": Mounted(
        "societas.evolve.model_cli", "app", False, "The embedded default model (SmolLM2-135M-Instruct)."
    ),
}


def load_command(name: str) -> Any:
    """The command ``societas NAME`` runs, built by typer exactly as an eager mount would."""
    entry = COMMANDS[name]
    sub_app = getattr(import_module(entry.module), entry.attribute)
    holder = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    if entry.merged:
        holder.add_typer(sub_app)
    else:
        holder.add_typer(sub_app, name=name, help=entry.help)
    command = typer.main.get_group(holder).get_command(typer.Context(typer.core.TyperGroup()), name)
    if command is None:
        raise LookupError(f"{entry.module}.{entry.attribute} has no command {name!r}")
    return command


class LazyGroup(typer.core.TyperGroup):
    """A typer group whose commands are imported when one runs, not when the help lists them."""

    listing_from_table = True  # False: the help imports every command (the test's reference)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loaded: dict[str, Any] = {}
        self._listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return [*super().list_commands(ctx), *COMMANDS]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return super().get_command(ctx, cmd_name)
        if self._listing and self.listing_from_table and cmd_name not in self._loaded:
            return typer.core.TyperCommand(cmd_name, help=COMMANDS[cmd_name].help)
        if cmd_name not in self._loaded:
            self._loaded[cmd_name] = load_command(cmd_name)
        return self._loaded[cmd_name]

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    cls=LazyGroup,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="societas: agent topologies, multi-agent learning and evolutionary discovery of algorithms.",
)


@app.callback()
def _root() -> None:
    # a callback makes typer build the group even though every command is mounted lazily
    pass


def main() -> None:
    app(args=expand_multi_args(sys.argv[1:], MULTI_OPTIONS), prog_name="societas")
