"""Command line of ``marl``: ``python -m societas.marl games solve|table|psro ...`` and
``python -m societas.marl train comm|routing|conductor|selfplay|remul|society ...``.

A thin typer app that mounts sub-command groups: ``games`` (exact solvers) and
``train`` (MAPPO/IPPO with communication modules; learned routing over agent
graphs). Each group keeps its own conventions: errors exit 2
with one short line, ``--json`` prints one JSON object on the last line.
Progress goes to standard error: a rich bar on a terminal, one plain line
every ``SOCIETAS_PROGRESS_EVERY_S`` seconds otherwise
(:mod:`societas.marl.progress`). The groups mount their commands lazily
(:mod:`societas.marl.lazy_cli`): the help and a mistyped command answer at
once, and a command imports only its own module.
"""

from __future__ import annotations

import sys

import typer

from societas.marl.cli_common import MULTI_OPTIONS, expand_multi_args
from societas.marl.lazy_cli import Mounted, lazy_group

TRAIN_HELP = "Train multi-agent policies: communication MARL, learned routing and LLM recipes (GRPO)."
RECIPE_HELP = "Train the '{}' recipe with GRPO and write run directories."
RECIPE_NAMES = ("conductor", "remul", "selfplay", "society")  # societas.marl.llm.recipes.RECIPES

# Mounted lazily (:mod:`societas.marl.lazy_cli`): the help lists the commands from these
# tables, and a command imports only its own module (tests check the tables against them).
TRAIN_COMMANDS: dict[str, Mounted] = {
    "comm": Mounted(
        "societas.marl.comm.cli",
        "app",
        True,
        "Train MAPPO/IPPO with a communication module and write a run directory.",
    ),
    "routing": Mounted(
        "societas.marl.routing.cli",
        "app",
        True,
        "Learn whom each agent messages (GPTSwarm or G-Designer) and write the run directory.",
    ),
    **{
        name: Mounted("societas.marl.llm.cli", "recipes_app", True, RECIPE_HELP.format(name))
        for name in RECIPE_NAMES
    },
}
MARL_COMMANDS: dict[str, Mounted] = {
    "games": Mounted(
        "societas.marl.games.cli", "app", False, "Solve OpenSpiel games exactly with the CFR family."
    ),
    "train": Mounted("societas.marl.cli", "train_app", False, TRAIN_HELP),
}

train_app = typer.Typer(
    cls=lazy_group(TRAIN_COMMANDS),
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help=TRAIN_HELP,
)


@train_app.callback()
def _train() -> None:
    # a callback makes typer build the group even though every command is mounted lazily
    pass


app = typer.Typer(
    cls=lazy_group(MARL_COMMANDS),
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Multi-agent learning: exact game solvers and training.",
)


@app.callback()
def _marl() -> None:
    pass


def main() -> None:
    app(args=expand_multi_args(sys.argv[1:], MULTI_OPTIONS), prog_name="python -m societas.marl")
