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

The commands are mounted lazily (:mod:`societas.marl.lazy_cli`): ``societas
--help`` lists them from the table below without importing torch or
transformers (a fraction of a second instead of several), and a command
imports only the module that defines it. A test renders the listing from the
real commands too and checks that both agree.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from societas.marl.cli_common import MULTI_OPTIONS, expand_multi_args
from societas.marl.lazy_cli import Mounted, lazy_group
from societas.marl.lazy_cli import load_command as lazy_load_command

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
    return lazy_load_command(COMMANDS, name)


LazyGroup = lazy_group(COMMANDS)

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
