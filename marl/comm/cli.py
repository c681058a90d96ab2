"""Command line for communication MARL: ``python -m societas.marl train comm ...``.

``app`` is a typer app with one command, ``comm``, meant to be mounted as the
``train`` group of ``python -m societas.marl``::

    python -m societas.marl train comm --env speaker_listener --algo mappo --comm tarmac \\
        --steps 300000 --seed 0 --out runs/comm/tarmac [--json]

It trains one MAPPO/IPPO run with the chosen communication module and writes
the run directory of :func:`societas.marl.comm.train.train_comm`. An unknown env, algo
or comm module, bad ``--comm-kwargs`` or a number out of its range (``--steps``
at most ten billion) exits with status 2 and one short line naming the bad
value; a run directory that cannot be written exits with status 1.
``--json`` prints the result as one JSON object on the last line of standard
output. Progress goes to standard error (plain lines when it is not a
terminal).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
import typer

from societas.marl.cli_common import (
    MAX_THREADS,
    check_progress_env,
    check_range,
    check_seed,
    fail,
    json_object,
    one_line,
)
from societas.marl.comm.envs import ENVS
from societas.marl.comm.mappo import ALGOS
from societas.marl.comm.modules import COMM_MODULES
from societas.marl.comm.train import run_cli_training
from societas.marl.device import resolve_device

# Sane upper bounds, checked before anything is built (a typo such as 10**23 steps
# would otherwise run for ever).
MAX_ENV_STEPS = 10_000_000_000
MAX_NUM_ENVS = 1_000_000
MAX_EVAL_EPISODES = 1_000_000

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Train multi-agent policies with learned communication (MAPPO/IPPO).",
)


@app.callback()
def _group() -> None:
    """Train multi-agent policies with learned communication (MAPPO/IPPO)."""


@app.command("comm")
def comm(
    env: str = typer.Option("speaker_listener", help="Batched env: speaker_listener, reference."),
    algo: str = typer.Option("mappo", help="mappo (centralised critic) or ippo (local critics)."),
    comm_name: str = typer.Option(
        "none", "--comm", help="Communication module: none, commnet, tarmac, ic3net, dial, gat, commformer."
    ),
    steps: int = typer.Option(300_000, help="Env steps to train for (each step of B envs counts B)."),
    seed: int = typer.Option(0, help="Seed of the env, the networks and every random draw."),
    out: str = typer.Option(..., help="Run directory to write."),
    num_envs: int | None = typer.Option(None, "--num-envs", help="Parallel envs (default: the config's)."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    comm_kwargs: str | None = typer.Option(
        None, "--comm-kwargs", help="JSON object of module options, e.g. '{\"rounds\": 1}'."
    ),
    recurrent: bool = typer.Option(False, "--recurrent", help="GRU actor (reset at episode starts)."),
    eval_episodes: int = typer.Option(100, "--eval-episodes", help="Greedy evaluation episodes (0: skip)."),
    threads: int | None = typer.Option(None, "--threads", help="torch CPU threads (default: torch's)."),
    json_out: bool = typer.Option(
        False, "--json", help="Print the result as one JSON object on the last line."
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress messages."),
) -> None:
    """Train MAPPO/IPPO with a communication module and write a run directory."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if env not in ENVS:
        fail(f"unknown env {env!r}; known: {', '.join(ENVS)}")
    if algo not in ALGOS:
        fail(f"unknown algo {algo!r}; known: {', '.join(ALGOS)}")
    if comm_name not in COMM_MODULES:
        fail(f"unknown comm {comm_name!r}; known: {', '.join(COMM_MODULES)}")
    check_progress_env()
    check_range("--steps", steps, 1, MAX_ENV_STEPS)
    check_seed("--seed", seed)
    check_range("--num-envs", num_envs, 1, MAX_NUM_ENVS)
    check_range("--eval-episodes", eval_episodes, 0, MAX_EVAL_EPISODES)
    check_range("--threads", threads, 1, MAX_THREADS)
    try:
        resolve_device(device)
    except ValueError as exc:
        fail(f"--device: {exc}")
    run_dir = Path(out)
    if run_dir.exists() and not run_dir.is_dir():
        fail(f"--out {run_dir}: not a directory")
    kwargs = json_object("--comm-kwargs", comm_kwargs) if comm_kwargs else {}
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        res = run_cli_training(
            env=env,
            algo=algo,
            comm=comm_name,
            steps=steps,
            seed=seed,
            out=out,
            num_envs=num_envs,
            device=device,
            comm_kwargs=kwargs,
            recurrent=recurrent,
            eval_episodes=eval_episodes,
            progress=True,
        )
    except ValueError as exc:  # bad comm kwargs, device, adjacency ...
        fail(one_line(exc))
    except OSError as exc:  # the run directory cannot be written
        fail(f"--out {run_dir}: {exc.strerror or exc}", code=1)
    d = res.to_dict()
    if json_out:
        typer.echo(json.dumps(d))
    else:
        ev = (
            "n/a"
            if d["eval_return_mean"] is None
            else f"{d['eval_return_mean']:.2f} ± {d['eval_return_std']:.2f}"
        )
        fr = "n/a" if d["final_return"] is None else f"{d['final_return']:.2f}"
        typer.echo(
            f"{algo}+{comm_name} on {env}: {d['env_steps']:,} steps in {d['wall_s']:.1f} s; "
            f"training return {fr}; greedy eval {ev}; {d['messages_per_step']:.2f} messages/step; "
            f"run dir {d['out_dir']}"
        )


def main() -> None:
    app(prog_name="python -m societas.marl.comm.cli")


if __name__ == "__main__":
    main()
