"""The ``societas`` command: one entry point to every command line of the four layers.

::

    societas show SPEC | run SPEC --task ...        agent graphs        (societas.topology.cli)
    societas solve | table | psro | algos | meta-solvers
                                                    exact game solvers  (societas.marl.games.cli)
    societas train comm|routing|conductor|selfplay|remul|society
                                                    training            (societas.marl.cli)
    societas evolve run|report                      algorithm discovery (societas.evolve.cli)
    societas model prepare|path                     the embedded model  (societas.agents.embedded)

Each layer keeps its own ``python -m societas.<layer>`` entry point; this app
mounts the same typer commands, so options, exit codes (2 for bad input) and
``--json`` behave identically on both. It lives in ``evolve`` because the
bottom layer is the only one allowed to import all four.
"""

from __future__ import annotations

import sys

import typer

from societas.agents import embedded
from societas.evolve.cli import app as evolve_app
from societas.marl.cli import MULTI_OPTIONS, train_app
from societas.marl.games.cli import app as games_app
from societas.marl.games.cli import expand_multi_args
from societas.topology.cli import app as graph_app

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="societas: agent topologies, multi-agent learning and evolutionary discovery of algorithms.",
)

# Graph and game commands sit at the top level (`societas run`, `societas solve`):
# typer merges a sub-app added without a name into its parent.
app.add_typer(graph_app)
app.add_typer(games_app)
app.add_typer(train_app, name="train")
app.add_typer(evolve_app, name="evolve", help="Evolutionary discovery of algorithm code.")

model_app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="The embedded default model (SmolLM2-135M-Instruct)."
)


@model_app.command("prepare")
def model_prepare(force: bool = typer.Option(False, "--force", help="convert again even if cached")) -> None:
    """Convert the shipped GGUF into a transformers checkpoint once (cached)."""
    raise typer.Exit(embedded.main(["prepare", *(["--force"] if force else [])]))


@model_app.command("path")
def model_path() -> None:
    """Print the directory of the converted embedded model."""
    raise typer.Exit(embedded.main(["path"]))


app.add_typer(model_app, name="model")


def main() -> None:
    app(args=expand_multi_args(sys.argv[1:], MULTI_OPTIONS), prog_name="societas")
