"""Command line: ``python -m societas.marl.games solve ...`` and ``python -m societas.marl.games table ...``
(also ``python -m societas.marl games ...``).

* ``solve --game GAME --algo ALGO --iterations N`` runs one CFR variant and
  evaluates its average policy exactly; ``--plot FILE`` draws exploitability
  against iterations (log-log, evaluated at log-spaced iterations).
* ``table --iterations N`` runs every built-in algorithm on the eight games of
  arXiv 2602.16928 (four training, four held out) and writes ``table.md``,
  ``table.json`` and one ``curves_<game>.png`` per game.

An unknown game or algorithm, a number out of its range (``--iterations`` at
most ten million, PSRO's at most ten thousand and a meta-game of at most 16
GiB) or a ``--plot``/``--out`` path that cannot be written exits with status 2
and one short line before any tree is built; with ``--json`` the result is one
JSON object on the last line of standard output. Progress goes to standard
error: a bar on a terminal, otherwise one plain line every
``SOCIETAS_PROGRESS_EVERY_S`` seconds (default 30). An algorithm whose factory takes
``total_iterations`` (a schedule with a horizon, such as HS-PCFR+) is given
the ``--iterations`` of the run; one that takes ``warmup_iterations`` (VAD-CFR)
starts averaging after half of them. Multi-valued options take several values
after one flag (``--algos cfr cfr+``) or a repeated flag (``--algos cfr --algos cfr+``).
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import json
import logging
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyspiel
import torch
import typer
from matplotlib.figure import Figure
from rich.console import Console

from societas.marl.cli_common import check_progress_env, check_range, check_seed, expand_multi_args, fail
from societas.marl.progress import progress_bar

from .algorithms import ALGORITHMS, algorithm_names, get_algorithm
from .cfr import CFRSolver
from .evaluate import TIES, evaluate
from .metasolvers import meta_solver_names
from .plots import log_checkpoints, plot_curves
from .psro import run_psro
from .tree import GameTreeError, load_game, load_openspiel_game, resolve_device

logger = logging.getLogger(__name__)

from .suites import HELD_OUT_GAMES, PAPER_GAMES, TRAINING_GAMES  # noqa: E402

EVAL_CHUNK = 4  # policies evaluated together (bounds memory on the large trees)
# Sane upper bounds of the numeric options, checked before any tree is built: beyond
# them a run would take days (a typo such as 10**23 iterations), not give a better answer.
MAX_ITERATIONS = 10_000_000
MAX_PSRO_ITERATIONS = 10_000
MAX_POINTS = 10_000
MAX_META_GAME_BYTES = 16 * 2**30  # PSRO's payoff tensor: players x (iterations + 1) ** players

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Solve OpenSpiel games exactly with the CFR family.",
)


# ---------------------------------------------------------------- helpers --


_fail = fail


def _check_plot_path(option: str, path: Path | None) -> None:
    """Exit 2 unless a figure can be written to ``path`` (checked before the run, not after it)."""
    if path is None:
        return
    if path.is_dir():
        fail(f"{option} {path}: is a directory; give a file name such as {path / 'curve.png'}")
    fmt = path.suffix.lower().lstrip(".")
    known = Figure().canvas.get_supported_filetypes()
    if fmt and fmt not in known:
        fail(f"{option} {path}: unknown image format {fmt!r}; known: {', '.join(sorted(known))}")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        fail(f"{option} {path}: {parent} is not a directory")


def game_slug(game: str) -> str:
    """A file-name-safe form of a game string: ``kuhn_poker(players=3)`` -> ``kuhn_poker_players_3``."""
    return re.sub(r"[^A-Za-z0-9]+", "_", game).strip("_") or "game"


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


def _console(quiet: bool = False):
    return Console(stderr=True, quiet=quiet)


def _short(text: str, width: int = 36) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _check_algorithms(names: list[str]) -> list[str]:
    """Canonical names of ``names`` (aliases resolved); exits 2 on an unknown one."""
    out = []
    for n in names:
        try:
            canon = get_algorithm(n).name
        except ValueError as exc:
            _fail(str(exc))
        if canon not in out:
            out.append(canon)
    return out


def averaging_start(name: str, iterations: int) -> int | None:
    """The iteration from which :func:`make_algorithm`'s ``name`` averages (half the run for one
    with a warm start, VAD-CFR), or ``None`` when it averages from the first."""
    factory = ALGORITHMS.get(get_algorithm(name).name)
    try:
        params = inspect.signature(factory).parameters if factory is not None else {}
    except (TypeError, ValueError):
        params = {}
    return iterations // 2 if "warmup_iterations" in params else None


def make_algorithm(name: str, iterations: int):
    """The built-in algorithm ``name``; a factory that takes ``total_iterations``
    (a schedule that needs the horizon, e.g. HS-PCFR+) is given the planned
    number of ``iterations``, and one that takes ``warmup_iterations`` (VAD-CFR,
    which averages nothing before its warm start) starts averaging after half of
    them, as the published 500 of 1000 and the evolve CFR task's baselines do."""
    algo = get_algorithm(name)
    factory = ALGORITHMS.get(algo.name)
    try:
        params = inspect.signature(factory).parameters if factory is not None else {}
    except (TypeError, ValueError):
        params = {}
    kwargs: dict[str, Any] = {}
    if "total_iterations" in params:
        kwargs["total_iterations"] = iterations
    if (start := averaging_start(name, iterations)) is not None:
        # A fixed warm start at least as long as the run would leave the
        # average empty (it then normalises to uniform).
        kwargs["warmup_iterations"] = start
    if kwargs and factory is not None:  # kwargs come from factory's parameters
        algo = factory(**kwargs)
    return algo


def _quiet_fd2():
    """Context manager: OpenSpiel's C++ code writes its exceptions to file
    descriptor 2 before raising them; keep that out of the user's terminal."""

    @contextlib.contextmanager
    def cm():
        sys.stderr.flush()
        saved = os.dup(2)
        with tempfile.TemporaryFile() as tmp:
            os.dup2(tmp.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
                os.close(saved)

    return cm()


def validate_game(game: str):
    """The OpenSpiel game ``game``; exits 2 with one short line if OpenSpiel cannot
    load it or the engine cannot handle it (checked cheaply, before any tree is built)."""
    name = game.split("(", 1)[0].strip()
    known = list(pyspiel.registered_names())
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        _fail(f"unknown game {name!r} (from --game {game!r}){hint}")
    try:
        with _quiet_fd2():
            return load_openspiel_game(game)
    except GameTreeError as exc:
        msg = str(exc).strip().splitlines()
        _fail(msg[0] if msg else f"cannot load game {game!r}")


def _load(game: str, device: str, console, show_status: bool = True):
    """The tensor tree of ``game``; exits 2 on an unknown or unsupported game or
    device. ``show_status=False`` inside another live display (a progress bar)."""
    try:
        resolve_device(device)
    except (ValueError, RuntimeError) as exc:
        _fail(f"--device {device!r}: {exc}")
    validate_game(game)
    t0 = time.perf_counter()
    try:
        msg = f"loading {game} (the first build of a large tree takes minutes)…"
        with console.status(msg) if show_status else contextlib.nullcontext():
            tree = load_game(game, device)
    except GameTreeError as exc:
        lines = str(exc).strip().splitlines()
        _fail(lines[0] if lines else f"cannot build game {game!r}")
    except MemoryError:
        _fail(f"game {game!r}: out of memory while building its tree")
    return tree, time.perf_counter() - t0


def drive(
    solvers: list, iterations: int, checkpoints: set[int], advance=None
) -> tuple[list[list[tuple[int, float, float]]], list[float]]:
    """Step ``solvers`` (all on one tree) together for ``iterations``; at each
    checkpoint evaluate their average policies in one batched pass.

    Returns, per solver, the curve ``[(iteration, exploitability, nash_conv)]``
    (the last point is the final iteration) and the seconds spent stepping.
    """
    tree = solvers[0].tree
    curves: list[list[tuple[int, float, float]]] = [[] for _ in solvers]
    secs = [0.0] * len(solvers)
    checkpoints = set(checkpoints) | {iterations}
    for t in range(1, iterations + 1):
        for k, s in enumerate(solvers):
            t0 = time.perf_counter()
            s.step()
            secs[k] += time.perf_counter() - t0
            if advance is not None:
                advance(1)
        if t in checkpoints:
            for lo in range(0, len(solvers), EVAL_CHUNK):
                group = solvers[lo : lo + EVAL_CHUNK]
                pol = torch.cat([s.average_policy() for s in group], 0)
                ev = evaluate(tree, pol)
                for j in range(len(group)):
                    curves[lo + j].append((t, float(ev.exploitability[j]), float(ev.nash_conv[j])))
    return curves, secs


# ---------------------------------------------------------------- commands --


@app.command()
def solve(
    game: str = typer.Option(..., "--game", help="OpenSpiel game string, e.g. 'leduc_poker(players=3)'"),
    algo: str = typer.Option("cfr", "--algo", help="algorithm name (see `algos`)"),
    iterations: int = typer.Option(1000, "--iterations", "-n", help="number of iterations"),
    plot: Path | None = typer.Option(
        None, "--plot", help="write a log-log PNG of exploitability vs iterations"
    ),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:N or auto"),
    alternating: bool | None = typer.Option(
        None, "--alternating/--simultaneous", help="update schedule (default: the algorithm's own)"
    ),
    eval_every: int | None = typer.Option(None, "--eval-every", help="also evaluate every K iterations"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object on the last line"),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Run one CFR variant on one game and report its exact exploitability."""
    _setup_logging(verbose)
    check_progress_env()
    check_range("--iterations", iterations, 1, MAX_ITERATIONS)
    check_range("--eval-every", eval_every, 1, MAX_ITERATIONS)
    _check_plot_path("--plot", plot)
    (algo_name,) = _check_algorithms([algo])
    console = _console()
    t_start = time.perf_counter()
    tree, load_s = _load(game, device, console)

    try:
        solver = CFRSolver(tree, make_algorithm(algo_name, iterations), alternating=alternating)
    except (ValueError, TypeError) as exc:
        _fail(f"--algo {algo!r}: {exc}")
    checkpoints: set[int] = set()
    if eval_every:
        checkpoints |= set(range(eval_every, iterations + 1, eval_every))
    if plot is not None:
        checkpoints |= set(log_checkpoints(iterations))
    with progress_bar(console=console) as prog:
        task = prog.add_task(_short(f"{algo_name} on {tree.game}"), total=iterations)
        curves, secs = drive([solver], iterations, checkpoints, advance=lambda k: prog.advance(task, k))
    curve = curves[0]
    _, expl, nc = curve[-1]
    plotted = None
    if plot is not None:
        try:
            plotted = str(
                plot_curves(
                    {algo_name: [(t, e) for t, e, _ in curve]}, plot, title=f"{tree.game}: {algo_name}"
                )
            )
        except OSError as exc:
            _fail(f"--plot {plot}: cannot write it: {exc.strerror or exc}", code=1)
    wall = time.perf_counter() - t_start
    payload: dict[str, Any] = {
        "game": tree.game,
        "algorithm": algo_name,
        "iterations": iterations,
        "alternating": solver.algorithm.alternating,
        "nash_conv": nc,
        "exploitability": expl,
        "wall_seconds": wall,
        "solve_seconds": secs[0],
        "load_seconds": load_s,
        "device": str(tree.device),
        "histories": tree.num_nodes,
        "infosets": tree.num_infosets,
        "players": tree.num_players,
        "curve": [[t, e] for t, e, _ in curve] if len(curve) > 1 else None,
        "plot": plotted,
    }
    if as_json:
        typer.echo(json.dumps(payload))
        return
    typer.echo(
        f"{tree.game}: {tree.num_players} players, {tree.num_nodes:,} histories, "
        f"{tree.num_infosets:,} infosets (loaded in {load_s:.2f} s, {tree.device})"
    )
    if len(curve) > 1:
        typer.echo(f"{'iteration':>10}  {'exploitability':>14}")
        for t, e, _ in curve:
            typer.echo(f"{t:>10}  {e:>14.6e}")
    sched = "alternating" if solver.algorithm.alternating else "simultaneous"
    typer.echo(
        f"{algo_name} ({sched}), {iterations} iterations: exploitability {expl:.6e}, NashConv {nc:.6e}"
    )
    typer.echo(
        f"{iterations / max(secs[0], 1e-12):.1f} iterations/s (solve {secs[0]:.2f} s, total {wall:.2f} s)"
    )
    if plotted:
        typer.echo(f"plot: {plotted}")


@app.command()
def psro(
    game: str = typer.Option(..., "--game", help="OpenSpiel game string"),
    iterations: int = typer.Option(20, "--iterations", "-n", help="PSRO iterations"),
    train: str = typer.Option("uniform", "--train", help="training meta-solver (see `meta-solvers`)"),
    eval_solver: str | None = typer.Option(None, "--eval", help="evaluation meta-solver (default: --train)"),
    plot: Path | None = typer.Option(
        None, "--plot", help="write a log-log PNG of exploitability vs iterations"
    ),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:N or auto"),
    seed: int = typer.Option(0, "--seed"),
    br_ties: str = typer.Option(
        "uniform", "--br-ties", help="best response where actions tie: uniform (the paper's) or first"
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object on the last line"),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """PSRO with an exact best-response oracle and exact meta-game payoffs."""
    _setup_logging(verbose)
    check_progress_env()
    check_range("--iterations", iterations, 1, MAX_PSRO_ITERATIONS)
    check_seed("--seed", seed)
    _check_plot_path("--plot", plot)
    if br_ties not in TIES:
        _fail(f"--br-ties: unknown rule {br_ties!r}; known: {', '.join(TIES)}")
    known = meta_solver_names()
    for flag, name in (("--train", train), ("--eval", eval_solver)):
        if name is not None and name not in known:
            _fail(f"{flag}: unknown meta-solver {name!r}; known: {', '.join(known)}")
    players = validate_game(game).num_players()
    meta_bytes = 8 * players * (iterations + 1) ** players
    if meta_bytes > MAX_META_GAME_BYTES:
        _fail(
            f"--iterations {iterations}: the meta-game of {players} players would take "
            f"{meta_bytes / 2**30:,.0f} GiB (at most {MAX_META_GAME_BYTES // 2**30} GiB); use fewer iterations"
        )
    console = _console()
    tree, load_s = _load(game, device, console)
    try:
        with progress_bar(console=console, field="expl") as prog:
            task = prog.add_task(_short(f"psro {train} on {tree.game}"), total=iterations, expl="")

            def advance(k: int, exploitability: float) -> None:
                prog.update(task, completed=k, expl=f"exploitability {exploitability:.4g}")

            res = run_psro(
                tree,
                iterations,
                train_solver=train,
                eval_solver=eval_solver,
                seed=seed,
                on_iteration=advance,
                br_ties=br_ties,
            )
    except ValueError as exc:
        _fail(str(exc))
    except MemoryError:
        _fail(f"psro on {tree.game}: out of memory after loading the game", code=1)
    plotted = None
    if plot is not None:
        pts = [(k, e) for k, e in enumerate(res.exploitability) if k > 0]
        try:
            plotted = str(
                plot_curves({f"{res.train_solver}/{res.eval_solver}": pts}, plot, title=f"{tree.game}: PSRO")
            )
        except OSError as exc:
            _fail(f"--plot {plot}: cannot write it: {exc.strerror or exc}", code=1)
    payload = {
        "game": tree.game,
        "train_solver": res.train_solver,
        "eval_solver": res.eval_solver,
        "iterations": iterations,
        "exploitability": res.exploitability[-1],
        "nash_conv": res.nash_conv[-1],
        "curve": res.exploitability,
        "population_sizes": res.population_sizes[-1],
        "wall_seconds": res.wall_time,
        "load_seconds": load_s,
        "device": str(tree.device),
        "plot": plotted,
    }
    if as_json:
        typer.echo(json.dumps(payload))
        return
    typer.echo(res.summary())
    if plotted:
        typer.echo(f"plot: {plotted}")


@app.command("meta-solvers")
def meta_solvers_cmd(as_json: bool = typer.Option(False, "--json")) -> None:
    """List the registered PSRO meta-solvers."""
    names = meta_solver_names()
    typer.echo(json.dumps({"meta_solvers": names}) if as_json else "\n".join(names))


@app.command("algos")
def algos_cmd(as_json: bool = typer.Option(False, "--json")) -> None:
    """List the built-in algorithms."""
    names = algorithm_names()
    typer.echo(json.dumps({"algorithms": names}) if as_json else "\n".join(names))


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.3e}"


# Exploitabilities below this are solved to machine precision: they tie for best with each other.
MACHINE_PRECISION_TIE = 1e-12


def best_in_row(values: dict[str, float | None]) -> set[str]:
    """The algorithms best on one game: the smallest exploitability (to 1e-12 relative), and every
    result below :data:`MACHINE_PRECISION_TIE` when the best is below it (ties at machine precision)."""
    finite = [v for v in values.values() if v is not None]
    if not finite:
        return set()
    best = min(finite)
    return {
        a
        for a, v in values.items()
        if v is not None
        and (v <= best * (1 + 1e-12) + 1e-300 or (best < MACHINE_PRECISION_TIE and v < MACHINE_PRECISION_TIE))
    }


def write_table_md(path: Path, iterations: int, device: str, rows: list[dict], algos: list[str]) -> None:
    """``table.md``: exploitability after ``iterations``, game x algorithm, best per game in bold."""
    lines = [
        f"# Exploitability after {iterations} iterations",
        "",
        (
            "Exploitability = NashConv / N of the average policy, computed exactly "
            f"(device {device}). Best per game in bold; results below {MACHINE_PRECISION_TIE:g} "
            "are solved to machine precision and tie."
        ),
        "",
        "| set | game | " + " | ".join(algos) + " |",
        "|---|---|" + "---|" * len(algos),
    ]
    for row in rows:
        vals = {a: row["results"].get(a, {}).get("exploitability") for a in algos}
        best = best_in_row(vals)
        cells = []
        for a in algos:
            s = _fmt(vals[a])
            if a in best:
                s = f"**{s}**"
            cells.append(s)
        lines.append(f"| {row['set']} | `{row['game']}` | " + " | ".join(cells) + " |")
    path.write_text("\n".join(lines) + "\n")


@app.command()
def table(
    iterations: int = typer.Option(1000, "--iterations", "-n", help="iterations per algorithm"),
    games: list[str] | None = typer.Option(None, "--games", help="game strings (default: the paper's eight)"),
    algos: list[str] | None = typer.Option(None, "--algos", help="algorithms (default: all built-in)"),
    out: Path = typer.Option(Path("runs/games_table"), "--out", help="output folder"),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:N or auto"),
    points: int = typer.Option(30, "--points", help="log-spaced evaluations per curve"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object on the last line"),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Exploitability of every algorithm on the paper's games: table.md, table.json, curves_<game>.png."""
    _setup_logging(verbose)
    check_progress_env()
    check_range("--iterations", iterations, 1, MAX_ITERATIONS)
    check_range("--points", points, 1, MAX_POINTS)
    algo_list = _check_algorithms(list(algos) if algos else algorithm_names())
    game_list = list(games) if games else list(PAPER_GAMES)
    console = _console()
    t_start = time.perf_counter()

    # Validate every game before the long runs start.
    try:
        resolve_device(device)
    except (ValueError, RuntimeError) as exc:
        _fail(f"--device {device!r}: {exc}")
    for g in game_list:
        validate_game(g)

    if out.exists() and not out.is_dir():
        _fail(f"--out {out}: not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _fail(f"--out {out}: cannot create it: {exc.strerror or exc}")
    checkpoints = set(log_checkpoints(iterations, points))
    rows: list[dict] = []
    errors: list[str] = []
    files: list[str] = []
    dev_name = device
    with progress_bar(console=console) as prog:
        overall = prog.add_task("all games", total=len(game_list) * len(algo_list) * iterations)
        for g in game_list:
            loading = prog.add_task(f"{_short(g)}: loading (a first build takes minutes)", total=None)
            tree, load_s = _load(g, device, console, show_status=False)
            prog.remove_task(loading)
            dev_name = str(tree.device)
            gset = "training" if g in TRAINING_GAMES else "held-out" if g in HELD_OUT_GAMES else "other"
            solvers, names = [], []
            for a in algo_list:
                try:
                    solvers.append(CFRSolver(tree, make_algorithm(a, iterations)))
                    names.append(a)
                except Exception as exc:
                    errors.append(f"{g} / {a}: {type(exc).__name__}: {exc}")
                    logger.warning("cannot run %s on %s: %s", a, g, exc)
            task = prog.add_task(_short(g), total=len(solvers) * iterations)

            def advance(k: int, _task=task) -> None:
                prog.advance(_task, k)
                prog.advance(overall, k)

            results: dict[str, dict] = {}
            try:
                curves, secs = drive(solvers, iterations, checkpoints, advance) if solvers else ([], [])
            except Exception as exc:
                logger.warning("running %s together failed (%s); one at a time", g, exc)
                curves, secs = [], []
                for _s, a in zip(solvers, names):
                    try:
                        fresh = CFRSolver(tree, make_algorithm(a, iterations))
                        fresh_curves, fresh_secs = drive([fresh], iterations, checkpoints, advance)
                        curves.append(fresh_curves[0])
                        secs.append(fresh_secs[0])
                    except Exception as exc2:
                        errors.append(f"{g} / {a}: {type(exc2).__name__}: {exc2}")
                        curves.append([])
                        secs.append(0.0)
            for a, c, sc in zip(names, curves, secs):
                if not c:
                    continue
                results[a] = {
                    "exploitability": c[-1][1],
                    "nash_conv": c[-1][2],
                    "solve_seconds": sc,
                    "iterations_per_second": iterations / max(sc, 1e-12),
                    "curve": [[t, e] for t, e, _ in c],
                }
            try:
                png = out / f"curves_{game_slug(g)}.png"
                starts = {a: s for a in results if (s := averaging_start(a, iterations)) is not None}
                plot_curves(
                    {a: r["curve"] for a, r in results.items()},
                    png,
                    title=f"{g} ({gset})",
                    averaging_starts=starts,
                )
                files.append(str(png))
                rows.append(
                    {
                        "game": g,
                        "set": gset,
                        "players": tree.num_players,
                        "histories": tree.num_nodes,
                        "infosets": tree.num_infosets,
                        "load_seconds": load_s,
                        "plot": str(png),
                        "results": results,
                    }
                )
                # Written after every game, so a long run leaves partial results.
                write_table_md(out / "table.md", iterations, dev_name, rows, algo_list)
                (out / "table.json").write_text(
                    json.dumps(
                        {
                            "iterations": iterations,
                            "device": dev_name,
                            "algorithms": algo_list,
                            "games": rows,
                            "errors": errors,
                        },
                        indent=1,
                    )
                )
            except OSError as exc:  # the output folder became unwritable (disk full, removed)
                _fail(f"--out {out}: cannot write the results: {exc.strerror or exc}", code=1)
            del solvers
    files = [str(out / "table.md"), str(out / "table.json")] + files
    expl = {r["game"]: {a: v["exploitability"] for a, v in r["results"].items()} for r in rows}
    best = {g: (min(v, key=v.__getitem__) if v else None) for g, v in expl.items()}
    wall = time.perf_counter() - t_start
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "iterations": iterations,
                    "device": dev_name,
                    "algorithms": algo_list,
                    "games": game_list,
                    "exploitability": expl,
                    "best": best,
                    "out": str(out),
                    "files": files,
                    "errors": errors,
                    "wall_seconds": wall,
                }
            )
        )
    else:
        typer.echo((out / "table.md").read_text())
        typer.echo(f"wrote {', '.join(files)} in {wall:.1f} s")
    if errors:
        for e in errors:
            typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1)


def main() -> None:
    app(args=expand_multi_args(sys.argv[1:]), prog_name="python -m societas.marl.games")
