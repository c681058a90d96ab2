"""``societas model``: prepare or locate the embedded default model.

A module of its own so that ``societas`` loads transformers only when one of
these commands runs (the console mounts the commands of each layer lazily).
"""

from __future__ import annotations

import typer

from societas.agents import embedded

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="The embedded default model (SmolLM2-135M-Instruct)."
)


@app.command("prepare")
def model_prepare(force: bool = typer.Option(False, "--force", help="convert again even if cached")) -> None:
    """Convert the shipped GGUF into a transformers checkpoint once (cached)."""
    raise typer.Exit(embedded.main(["prepare", *(["--force"] if force else [])]))


@app.command("path")
def model_path() -> None:
    """Print the directory of the converted embedded model."""
    raise typer.Exit(embedded.main(["path"]))
