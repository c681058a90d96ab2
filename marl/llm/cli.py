"""Command line for LLM training recipes: ``python -m societas.marl train RECIPE ...``.

One command per recipe of :data:`societas.marl.llm.recipes.RECIPES` (conductor,
selfplay, remul, society), all with the same options::

    python -m societas.marl train selfplay --steps 12 --seeds 0 1 --out runs/selfplay
    python -m societas.marl train conductor --sft-steps 6 --steps 10 --lr 1e-5 --out runs/conductor \\
        --recipe '{"problems_per_step": 2, "group_size": 4}'

Each seed writes its own run directory (``OUT/seed_<s>``, see
:func:`societas.marl.llm.loop.train`); with several seeds ``OUT/heldout.png`` draws
the held-out reward of every seed and their mean, and ``OUT/summary.md``
tabulates the mean before and after. ``--recipe`` takes the recipe's
options as a JSON object; ``--config`` a YAML file with ``recipe:`` and
``train:`` sections (command-line options win; ``train.seed`` is the run's
seed when ``--seeds`` is not given).

Every setting is checked before a model is loaded: its type and range (counts
have sane upper bounds, such as at most a million steps), the base model
(``embedded``, ``hf:DIR`` or ``gguf:FILE``, an existing path where one is
named), ``--serve`` (``vllm:MODEL_DIR`` with vLLM installed) and every run
directory (empty, or with ``--resume`` holding a checkpoint). A bad value
exits with status 2 and one line naming where it came from, the field and the
value: ``--steps must be between 0 and 1000000, got -1``, ``run.yaml:
train.steps: Input should be greater than or equal to 0 (got -3)``. A run that
fails reading or writing its files exits with status 1. ``--json`` prints the
result as one JSON object on the last line of standard output; progress goes
to standard error (plain lines every ``SOCIETAS_PROGRESS_EVERY_S`` seconds
when it is not a terminal).

``--nproc N`` trains data-parallel on N processes of this machine: the command
starts itself again under ``torchrun`` (``python -m torch.distributed.run
--standalone --nproc_per_node N -m societas.marl train RECIPE ...``; give that
line yourself, with ``--nnodes``/``--rdzv-endpoint``, for several machines).
Each process runs its share of the episodes and the updates are summed (see
:mod:`societas.marl.llm.parallel`); rank 0 writes the run directories and prints.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, NoReturn

import typer
from matplotlib.figure import Figure

from societas.agents.documents import DocumentError, load_yaml_file
from societas.marl.cli_common import (
    MAX_SEED,
    MAX_THREADS,
    check_progress_env,
    check_range,
    check_seed,
    fail,
    json_object,
    one_line,
    shown,
)
from societas.marl.llm.loop import TrainConfig, mean_curves, train
from societas.marl.llm.parallel import barrier, init_from_env, shutdown
from societas.marl.llm.recipes import RECIPES
from societas.marl.llm.settings import SettingsError, validate_settings
from societas.marl.llm.trainer import CheckpointError


def plot_seeds(runs: dict[int, list[dict[str, Any]]], path: Path, title: str) -> list[dict[str, float]]:
    """Held-out reward per seed (thin) and their mean (thick); returns the mean curve."""
    mean = mean_curves(list(runs.values()))
    fig = Figure(figsize=(6.4, 3.8))
    ax = fig.subplots()
    for s, hist in runs.items():
        ev = [h for h in hist if h["kind"] == "eval"]
        ax.plot([h["step"] for h in ev], [h["reward"] for h in ev], "-", lw=1, alpha=0.6, label=f"seed {s}")
    ax.plot(
        [m["step"] for m in mean],
        [m["reward"] for m in mean],
        "o-",
        color="k",
        lw=2,
        label=f"mean of {len(runs)} seeds",
    )
    sft = [h["step"] for hist in runs.values() for h in hist if h["kind"] == "sft"]
    if sft:
        ax.axvline(max(sft), color="C3", ls=":", lw=1, label="end of SFT warm start")
    ax.set_xlabel("step (SFT warm start, then GRPO)" if sft else "GRPO step")
    ax.set_ylabel("held-out reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return mean


MAX_STEPS = 1_000_000  # GRPO or SFT steps (and evaluation/checkpoint intervals) of one run
MAX_SEEDS = 1_000  # runs of one command (one directory each)
MAX_ROLLOUT_WORKERS = 1_024
MAX_NPROC = 1_024
# Upper bounds of the loop's counts, whether they come from an option or from --config.
TRAIN_LIMITS = {
    "steps": MAX_STEPS,
    "sft_steps": MAX_STEPS,
    "eval_every": MAX_STEPS,
    "checkpoint_every": MAX_STEPS,
    "threads": MAX_THREADS,
    "rollout_workers": MAX_ROLLOUT_WORKERS,
}
# Settings given by an option: the field path below ``train`` -> the option that set it.
OPTION_FIELDS = {
    "steps": "--steps",
    "sft_steps": "--sft-steps",
    "eval_every": "--eval-every",
    "model": "--model",
    "threads": "--threads",
    "rollout_workers": "--rollout-workers",
    "ray_address": "--ray-address",
    "serve": "--serve",
    "grpo.lr": "--lr",
    "grpo.kl_beta": "--kl-beta",
    "grpo.advantage": "--advantage",
    "grpo.loss_type": "--loss-type",
}


def _load_config(path: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``recipe`` and ``train`` sections of the YAML file ``path``; exits 2 naming the file otherwise."""
    if path is None:
        return {}, {}
    try:
        data = load_yaml_file(path)
    except DocumentError as exc:  # missing, unreadable, not UTF-8, bad YAML: "FILE: what is wrong"
        fail(str(exc))
    data = {} if data is None else data
    if not isinstance(data, dict) or not set(data) <= {"recipe", "train"}:
        fail(f"{path}: expected a mapping with 'recipe' and/or 'train' sections")
    sections = []
    for key in ("recipe", "train"):
        section = data.get(key)
        section = {} if section is None else section
        if not isinstance(section, dict):
            fail(f"{path}: {key}: expected a mapping of options, got {type(section).__name__}")
        sections.append(dict(section))
    return sections[0], sections[1]


def _origin(path: str, given: dict[str, str], config: str | None) -> str:
    """Who set the field at ``path`` (below ``train`` or ``recipe``): an option, the config file or nobody."""
    for field, option in given.items():
        if path == field or path.startswith((field + ".", field + "[")):
            return option
    return config or ""


def _settings_failure(
    exc: SettingsError, section: str, given: dict[str, str], config: str | None
) -> NoReturn:
    """Exit 2 with the error of a ``section`` setting, naming the option or file that gave it."""
    sub = exc.path.removeprefix(section).lstrip(".")
    origin = _origin(sub, given, config) if exc.path.startswith(section) else (config or "")
    if origin.startswith("--") and origin != "--recipe":
        fail(f"{origin}: {exc.message}" + (f" (got {exc.given})" if exc.given is not None else ""))
    fail(f"{origin}: {exc.line()}" if origin else exc.line())


def _model_problem(uri: str) -> str | None:
    """What makes ``uri`` unusable as the base model of a training run, seen without loading it."""
    if uri == "embedded":
        return None
    scheme, sep, rest = uri.partition(":")
    if scheme not in ("hf", "gguf") or not sep:
        return "training needs a local Hugging Face model: 'embedded', 'hf:PATH' or 'gguf:FILE'"
    if not rest.strip():
        return f"'{scheme}:' needs a {'model directory' if scheme == 'hf' else 'file'} after the colon"
    where = Path(rest).expanduser()
    if scheme == "gguf" and not where.is_file():
        return f"no such file {rest}"
    if scheme == "hf" and not where.exists() and rest.startswith(("/", ".", "~")):
        return f"no such model directory {rest}"
    if scheme == "hf" and where.exists() and not where.is_dir():
        return f"{where} is a file; 'hf:' takes a model directory"
    return None


def _serve_problem(spec: str) -> str | None:
    """What makes ``spec`` unusable as ``serve`` (``'vllm:MODEL_DIR'``), seen without loading anything."""
    scheme, sep, rest = spec.partition(":")
    if scheme != "vllm" or not sep or not rest.strip():
        return "expected 'vllm:MODEL_DIR' (or 'vllm:embedded')"
    if rest != "embedded" and rest.startswith(("/", ".", "~")) and not Path(rest).expanduser().is_dir():
        return f"no such model directory {rest}"
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (pip install vllm)"
    return None


def _check_limits(cfg: TrainConfig, given: dict[str, str], config: str | None) -> None:
    """Exit 2 when a count of ``cfg`` is past its sane upper bound or a rate is not finite."""
    data = cfg.model_dump()
    for field, high in TRAIN_LIMITS.items():
        value = data.get(field)
        if value is not None and value > high:
            origin = _origin(field, given, config)
            where = origin if origin.startswith("--") else f"{origin}: train.{field}".lstrip(": ")
            fail(f"{where} must be <= {high}, got {shown(value)}")
    floats = {f"grpo.{k}": v for k, v in data["grpo"].items()} | {"sft_lr": data["sft_lr"]}
    for field, value in floats.items():
        if isinstance(value, float) and not math.isfinite(value):
            origin = _origin(field, given, config)
            where = origin if origin.startswith("--") else f"{origin}: train.{field}".lstrip(": ")
            fail(f"{where} must be a finite number, got {value}")


def _check_run_dirs(root: Path, seeds: list[int], resume: bool) -> None:
    """Exit 2 when a run directory cannot be started (or, with ``resume``, continued), before any run."""
    if root.exists() and not root.is_dir():
        fail(f"--out {root}: not a directory")
    for s in seeds:
        run = root / f"seed_{s}"
        if run.exists() and not run.is_dir():
            fail(f"--out {root}: {run} is not a directory")
        busy = run.is_dir() and any(run.iterdir())
        if not resume:
            if busy:
                fail(
                    f"--out {root}: {run} is not empty: pass --resume to continue it, or choose another --out"
                )
            continue
        if not busy:
            continue  # nothing to resume: this seed starts from scratch
        latest = run / "checkpoint" / "LATEST"
        try:
            version = latest.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            fail(f"--resume: {run} has no checkpoint to continue from ({latest} is missing)")
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"--resume: cannot read {latest}: {one_line(exc)}")
        if not version or not (run / "checkpoint" / version / "loop.json").is_file():
            fail(f"--resume: {latest} names checkpoint {version!r}, which is missing or incomplete")


def _torchrun(name: str, nproc: int) -> int:
    """Run this very command under ``torchrun`` with ``nproc`` processes (``--nproc``
    left out), wait for it, and return its exit status."""
    argv = sys.argv[1:]
    try:
        at = next(i for i in range(1, len(argv)) if argv[i] == name and argv[i - 1] == "train")
    except StopIteration:
        fail(f"--nproc: cannot find 'train {name}' in the command line {' '.join(sys.argv)!r}")
    rest, skip = [], False
    for a in argv[at + 1 :]:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            rest.append(a)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(nproc),
        "-m",
        "societas.marl",
        "train",
        name,
        *rest,
    ]
    logging.getLogger(__name__).info("running %s", " ".join(cmd))
    return subprocess.call(cmd)


def make_command(name: str):
    """The typer command that trains recipe ``name``."""

    def command(
        out: str = typer.Option(..., help="Run directory (one sub-directory per seed)."),
        steps: int | None = typer.Option(None, help=f"GRPO steps (at most {MAX_STEPS})."),
        sft_steps: int | None = typer.Option(None, "--sft-steps", help="Supervised warm-start steps first."),
        eval_every: int | None = typer.Option(
            None, "--eval-every", help="Held-out evaluation every N GRPO steps."
        ),
        seeds: list[int] | None = typer.Option(
            None,
            "--seeds",
            help="One run per seed, e.g. --seeds 0 1 (default: train.seed of --config, or 0).",
        ),
        lr: float | None = typer.Option(None, help="GRPO learning rate."),
        kl_beta: float | None = typer.Option(None, "--kl-beta", help="KL penalty to the frozen base model."),
        advantage: str | None = typer.Option(None, help="grpo, gdpo or dr_grpo."),
        loss_type: str | None = typer.Option(
            None, "--loss-type", help="grpo, bnpo, dr_grpo, dapo, cispo or sapo."
        ),
        model: str | None = typer.Option(
            None, help="Base model: 'embedded' (default), 'hf:DIR' or 'gguf:FILE'."
        ),
        recipe: str | None = typer.Option(None, "--recipe", help="Recipe options as a JSON object."),
        config: str | None = typer.Option(
            None, "--config", help="YAML file with 'recipe' and 'train' sections."
        ),
        threads: int | None = typer.Option(None, help="torch CPU threads."),
        rollout_workers: int | None = typer.Option(
            None, "--rollout-workers", help="Ray actors for rollouts."
        ),
        ray_address: str | None = typer.Option(
            None,
            "--ray-address",
            help="With --rollout-workers: the Ray cluster to join (HOST:PORT of its head, or 'auto'); "
            "default RAY_ADDRESS, else Ray starts here.",
        ),
        serve: str | None = typer.Option(None, help="'vllm:MODEL_DIR' to generate rollouts with vLLM."),
        resume: bool = typer.Option(
            False,
            "--resume",
            help="Continue the runs from their checkpoints (a seed without a run directory starts afresh).",
        ),
        json_out: bool = typer.Option(
            False, "--json", help="Print the result as one JSON object on the last line."
        ),
        verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress messages."),
        nproc: int = typer.Option(
            1,
            "--nproc",
            help="Processes on this machine (data-parallel under torchrun; one per GPU on a GPU machine).",
        ),
    ) -> None:
        logging.basicConfig(
            level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
        )
        # Every setting is checked before anything runs: a bad one costs no model load.
        check_progress_env()
        check_range("--steps", steps, 0, MAX_STEPS)
        check_range("--sft-steps", sft_steps, 0, MAX_STEPS)
        check_range("--eval-every", eval_every, 1, MAX_STEPS)
        check_range("--threads", threads, 1, MAX_THREADS)
        check_range("--rollout-workers", rollout_workers, 0, MAX_ROLLOUT_WORKERS)
        check_range("--nproc", nproc, 1, MAX_NPROC)
        if nproc > 1 and "LOCAL_RANK" in os.environ:
            fail("--nproc: this command already runs under torchrun; give the process count to one of them")
        check_range("--lr", lr, None, None)
        check_range("--kl-beta", kl_beta, None, None)
        for s in seeds or ():
            check_seed("--seeds", s)
        if model is not None and (problem := _model_problem(model)):
            fail(f"--model {model!r}: {problem}")
        if serve is not None and (problem := _serve_problem(serve)):
            fail(f"--serve {serve!r}: {problem}")
        recipe_kw, train_kw = _load_config(config)
        grpo = train_kw.pop("grpo", None)
        grpo = {} if grpo is None else grpo
        if not isinstance(grpo, dict):
            fail(f"{config}: train.grpo: expected a mapping of options, got {type(grpo).__name__}")
        grpo = dict(grpo)
        if "seed" in grpo:
            fail(f"{config}: train.grpo.seed: set by the run's seed (train.seed or --seeds); remove it")
        file_seed = train_kw.pop("seed", None)
        if not seeds:
            if file_seed is not None and (type(file_seed) is not int or not 0 <= file_seed <= MAX_SEED):
                fail(
                    f"{config}: train.seed must be an integer between 0 and {MAX_SEED}, got {shown(file_seed)}"
                )
            seeds = [0 if file_seed is None else file_seed]
        seeds = list(dict.fromkeys(seeds))  # a seed given twice is one run, not two into one directory
        if len(seeds) > MAX_SEEDS:
            fail(f"--seeds: at most {MAX_SEEDS} runs at once, got {len(seeds)}")
        recipe_file = set(recipe_kw)
        if recipe:
            extra = json_object("--recipe", recipe)
            recipe_kw.update(extra)
            recipe_file -= set(extra)
        given: dict[str, str] = {}
        for key, val in (
            ("lr", lr),
            ("kl_beta", kl_beta),
            ("advantage", advantage),
            ("loss_type", loss_type),
        ):
            if val is not None:
                grpo[key] = val
                given[f"grpo.{key}"] = OPTION_FIELDS[f"grpo.{key}"]
        for key, val in (
            ("steps", steps),
            ("sft_steps", sft_steps),
            ("eval_every", eval_every),
            ("model", model),
            ("threads", threads),
            ("rollout_workers", rollout_workers),
            ("ray_address", ray_address),
            ("serve", serve),
        ):
            if val is not None:
                train_kw[key] = val
                given[key] = OPTION_FIELDS[key]
        cfgs: dict[int, TrainConfig] = {}
        for s in seeds:
            try:
                cfgs[s] = validate_settings(
                    TrainConfig, {**train_kw, "seed": s, "grpo": {**grpo, "seed": s}}, "train"
                )
            except SettingsError as exc:  # names the field: train.grpo.lr
                _settings_failure(exc, "train", given, config)
        first = cfgs[seeds[0]]
        _check_limits(first, given, config)
        for field, check in (("model", _model_problem), ("serve", _serve_problem)):
            value = getattr(first, field)
            if value is not None and field not in given and (problem := check(value)):
                fail(f"{config}: train.{field}: {problem} (got {shown(value)})")
        try:
            rec = RECIPES[name](recipe_kw)
        except SettingsError as exc:  # names the field: recipe.group_size
            origin = dict.fromkeys(set(recipe_kw) - recipe_file, "--recipe")
            _settings_failure(exc, "recipe", origin, config)
        except ValueError as exc:
            fail(one_line(exc))
        root = Path(out)
        _check_run_dirs(root, seeds, resume)
        if nproc > 1:  # everything is checked: start again under torchrun, N times
            if first.rollout_workers > 0:
                fail("--nproc and --rollout-workers do not mix: each process already runs its share")
            raise typer.Exit(_torchrun(name, nproc))
        try:
            env, owned = init_from_env(first.device)
        except (ValueError, RuntimeError) as exc:
            fail(one_line(exc))
        barrier()  # every rank has looked at the run directories before rank 0 writes one
        runs: dict[int, list[dict[str, Any]]] = {}
        results = []
        try:
            for s, cfg in cfgs.items():
                try:
                    res = train(rec, cfg, root / f"seed_{s}", resume=resume, progress=True)
                except (ValueError, FileExistsError, ImportError, CheckpointError) as exc:
                    fail(one_line(exc))
                except OSError as exc:  # a file the run reads or writes
                    fail(one_line(exc), code=1)
                runs[s] = res.history
                results.append(res.to_dict() | {"seed": s})
        finally:
            if owned:
                shutdown()
        if not env.main:
            return
        try:
            mean = plot_seeds(runs, root / "heldout.png", f"{name}: held-out reward")
        except OSError as exc:
            fail(f"cannot write {root / 'heldout.png'}: {one_line(exc)}", code=1)
        before, after = mean[0], mean[-1]
        lines = [
            f"# {name}: held-out reward over {len(seeds)} seed(s)",
            "",
            "| step | mean | std | runs |",
            "|---|---|---|---|",
        ]
        lines += [f"| {m['step']} | {m['reward']:.4f} | {m['std']:.4f} | {m['runs']} |" for m in mean]
        lines += ["", f"Before: {before['reward']:.4f}; after: {after['reward']:.4f}."]
        try:
            (root / "summary.md").write_text("\n".join(lines) + "\n")
        except OSError as exc:
            fail(f"cannot write {root / 'summary.md'}: {one_line(exc)}", code=1)
        summary = {
            "recipe": name,
            "seeds": list(seeds),
            "out": str(root),
            "heldout_before": before["reward"],
            "heldout_after": after["reward"],
            "curve": [
                {k: (round(v, 5) if isinstance(v, float) and math.isfinite(v) else v) for k, v in m.items()}
                for m in mean
            ],
            "runs": results,
        }
        if json_out:
            typer.echo(json.dumps(summary))
        else:
            typer.echo(
                f"{name}: held-out reward {before['reward']:.4f} -> {after['reward']:.4f} "
                f"(mean of {len(seeds)} seed(s)); runs in {root}"
            )

    command.__doc__ = f"Train the '{name}' recipe with GRPO and write run directories."
    return command


# Every recipe's command, for the lazy ``train`` groups (``python -m societas.marl train``,
# ``societas train``), which import this module only when a recipe's command runs.
recipes_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
for _name in RECIPES:
    recipes_app.command(_name)(make_command(_name))
