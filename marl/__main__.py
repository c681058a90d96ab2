"""Command line of ``marl``: ``python -m marl games solve ...``, ``python -m marl games table ...``.

A thin typer app that mounts sub-command groups (``games`` today; later work
items add e.g. ``train``). Each group keeps its own conventions: errors exit 2
with one short line, ``--json`` prints one JSON object on the last line.
"""

from __future__ import annotations

import sys

import typer

from marl.games.__main__ import app as games_app
from marl.games.__main__ import expand_multi_args

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Multi-agent learning: exact game solvers and (later) training.")
app.add_typer(games_app, name="games", help="Solve OpenSpiel games exactly with the CFR family.")


def main() -> None:
    app(args=expand_multi_args(sys.argv[1:]), prog_name="python -m marl")


if __name__ == "__main__":
    main()
