"""Command line of ``marl``: ``python -m societas.marl games solve|table|psro ...`` and
``python -m societas.marl train comm|routing|conductor|selfplay|remul|society ...``.

A thin typer app that mounts sub-command groups: ``games`` (exact solvers) and
``train`` (MAPPO/IPPO with communication modules; learned routing over agent
graphs). Each group keeps its own conventions: errors exit 2
with one short line, ``--json`` prints one JSON object on the last line.
Progress goes to standard error: a rich bar on a terminal, one plain line
every ``SOCIETAS_PROGRESS_EVERY_S`` seconds otherwise
(:mod:`societas.marl.progress`).
"""

from __future__ import annotations

import sys

import typer

from societas.marl.cli_common import MULTI_OPTIONS, expand_multi_args
from societas.marl.comm.cli import comm as comm_command
from societas.marl.games.cli import app as games_app
from societas.marl.llm.cli import make_command as llm_command
from societas.marl.llm.recipes import RECIPES
from societas.marl.routing.cli import routing_command

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Multi-agent learning: exact game solvers and training.",
)
app.add_typer(games_app, name="games", help="Solve OpenSpiel games exactly with the CFR family.")

train_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Train multi-agent policies: communication MARL, learned routing and LLM recipes (GRPO).",
)
train_app.command("comm")(comm_command)
train_app.command("routing")(routing_command)
for _name in RECIPES:
    train_app.command(_name)(llm_command(_name))
app.add_typer(
    train_app,
    name="train",
    help="Train multi-agent policies: communication MARL, learned routing and LLM recipes (GRPO).",
)


def main() -> None:
    app(args=expand_multi_args(sys.argv[1:], MULTI_OPTIONS), prog_name="python -m societas.marl")
