"""Command line: ``python -m societas.marl train routing --method gdesigner --steps N --seed S --out DIR [--json]``.

``app`` is a typer app whose ``routing`` command trains a routing policy
(:func:`societas.marl.routing.train_routing`) and writes the run directory. A YAML
file given with ``--config`` holds a :class:`RoutingTrainConfig`; flags given
on the command line override it. Bad values exit with status 2 and one short
line on standard error; ``--json`` prints the result as one JSON object on
the last line of standard output. The progress bar goes to standard error.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import typer

from ..cli_common import check_progress_env
from .train import RoutingConfigError, RoutingTrainConfig, train_routing

__all__ = ["app", "routing_command"]

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Train multi-agent policies (learned routing over agent graphs).")  # fmt: skip


@app.callback()
def _train() -> None:
    """Train multi-agent policies."""


def _fail(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


@app.command("routing")
def routing_command(
    method: str | None = typer.Option(None, "--method", help="gptswarm or gdesigner (default gdesigner)"),
    steps: int | None = typer.Option(None, "--steps", help="REINFORCE updates"),
    seed: int | None = typer.Option(None, "--seed"),
    out: Path | None = typer.Option(None, "--out", help="run directory (default runs/routing-METHOD-seedS)"),
    config: Path | None = typer.Option(None, "--config", help="YAML file with a RoutingTrainConfig"),
    batch_size: int | None = typer.Option(None, "--batch-size"),
    lr: float | None = typer.Option(None, "--lr"),
    cost: float | None = typer.Option(None, "--cost", help="cost per message"),
    agents: int | None = typer.Option(None, "--agents", help="team size"),
    types: int | None = typer.Option(None, "--types", help="task types"),
    facts: int | None = typer.Option(None, "--facts", help="facts per task"),
    device: str | None = typer.Option(None, "--device", help="auto, cpu, cuda, cuda:N"),
    eval_tasks: int | None = typer.Option(None, "--eval-tasks"),
    runtime_tasks: int | None = typer.Option(None, "--runtime-tasks"),
    as_json: bool = typer.Option(
        False, "--json", help="print the result as one JSON object on the last line"
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Learn whom each agent messages (GPTSwarm or G-Designer) and write the run directory."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if not quiet:
        check_progress_env()
    try:
        data: dict[str, Any] = RoutingTrainConfig.from_yaml(config).model_dump() if config is not None else {}
    except RoutingConfigError as exc:
        _fail(f"--config: {exc}")
    top = {"method": method, "steps": steps, "seed": seed, "batch_size": batch_size, "lr": lr, "device": device,
           "eval_tasks": eval_tasks, "runtime_tasks": runtime_tasks}  # fmt: skip
    data.update({k: v for k, v in top.items() if v is not None})
    env = {"cost_per_message": cost, "n_agents": agents, "n_types": types, "facts_per_task": facts}
    if any(v is not None for v in env.values()):
        data["env"] = {**data.get("env", {}), **{k: v for k, v in env.items() if v is not None}}
    try:
        cfg = RoutingTrainConfig.from_data(data)
    except RoutingConfigError as exc:
        _fail(str(exc))
    run_dir = out if out is not None else Path("runs") / f"routing-{cfg.method}-seed{cfg.seed}"
    try:
        res = train_routing(cfg, run_dir, progress=not quiet)
    except RoutingConfigError as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"cannot write {run_dir}: {exc.strerror or exc}")
    summary = res.to_dict()
    learned, full = res.table["learned"], res.table["fully_connected"]
    if as_json:
        typer.echo(json.dumps(summary))
        return
    typer.echo(f"{cfg.method}: success {learned['success']:.3f} with {learned['messages']:.2f} messages/task "
               f"(fully connected: {full['success']:.3f} with {full['messages']:.0f}); run in {run_dir}")  # fmt: skip


def main() -> None:
    app(prog_name="python -m societas.marl train")


if __name__ == "__main__":
    main()
