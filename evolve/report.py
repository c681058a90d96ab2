"""A run directory's report: ``summary.md`` and ``plots/fitness.png``.

When candidates ran unconfined (the ``rlimit`` sandbox backend, chosen by
name or recorded by the run's evaluations), the summary's first line says so.
The summary gives the headline numbers (seed and best fitness, evaluations,
failures), the best program as a unified diff against the seed, the seed and
the best program metric by metric on the training set, and — when the task's
evaluator defines ``evaluate_held_out`` — a table of the seed, the best evolved
program and the task's baselines on the held-out set (see
:mod:`societas.evolve.held_out`; results are cached in ``held_out.json``). Then
per-island statistics of the MAP-Elites islands (rebuilt from the stored
programs exactly as the run built them), results per mutation kind and the
most common failure reasons. The plot shows every program's fitness by
iteration, the best so far, and failures along the bottom.

A directory that holds run directories instead of being one (``--out`` of
``python -m societas.evolve run``) stands for its most recently created run.
"""

from __future__ import annotations

import collections
import difflib
import json
import logging
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from societas.agents.documents import DocumentError, load_json_file

from .config import load_config
from .database import Population, ProgramStore
from .evaluator import probe_sandbox
from .held_out import HeldOutEntry, evaluate_held_out, supports_held_out
from .program import Program

logger = logging.getLogger(__name__)

__all__ = ["UNCONFINED_WARNING", "plot_fitness", "resolve_run_dir", "write_report"]

UNCONFINED_WARNING = (
    "candidates ran unconfined (no sandbox isolation): the evaluations used the rlimit sandbox backend, "
    "which limits resources only, so the programs could reach the network and the user's files"
)


def plot_fitness(programs: list[Program], path: Path) -> None:
    # A Figure with no pyplot: writing the PNG needs no backend choice and no display.
    # (iteration, fitness) of the successful programs, which always have a fitness.
    ok = [(p.iteration, p.fitness) for p in programs if p.ok and p.fitness is not None]
    bad = [p for p in programs if not p.ok]
    best_x: list[int] = []
    best_y: list[float] = []
    best: float | None = None
    for p in programs:
        fitness = p.fitness if p.ok else None
        if fitness is not None and (best is None or fitness > best):
            best = fitness
        if best is not None:
            best_x.append(p.iteration)
            best_y.append(best)
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    ax.scatter([i for i, _ in ok], [f for _, f in ok], s=12, alpha=0.6, label="program")
    ax.step(best_x, best_y, where="post", color="C3", label="best so far")
    if bad and ok:
        floor = min(f for _, f in ok)
        ax.scatter(
            [p.iteration for p in bad], [floor] * len(bad), marker="x", color="grey", s=14, label="failed"
        )
    ax.set_xlabel("iteration")
    ax.set_ylabel("fitness")
    ax.set_title("fitness over time")
    ax.legend(loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def resolve_run_dir(path: str | Path) -> Path:
    """``path`` when it is a run directory, else the newest run directory directly inside it."""
    path = Path(path)
    if (path / "programs.db").is_file():
        return path
    runs = [p for p in path.iterdir() if (p / "programs.db").is_file()] if path.is_dir() else []
    if not runs:
        raise FileNotFoundError(f"{path} is not a run directory (no programs.db) and holds none")

    def created(run: Path) -> tuple[float, str]:
        try:
            return float(load_json_file(run / "run.json")["created"]), run.name
        except (ValueError, KeyError, TypeError):
            return (run / "programs.db").stat().st_mtime, run.name

    return max(runs, key=created)


def _metric_table(rows: list[tuple[str, dict[str, float] | None, str | None]]) -> list[str]:
    """A markdown table, one row per program, one column per metric (``combined_score`` last, as *mean*).

    Values are as the evaluator reports them (higher is better); the best of each column is bold.
    """
    names = sorted({k for _, m, _ in rows if m for k in m if k != "combined_score"})
    columns = names + (["combined_score"] if any(m and "combined_score" in m for _, m, _ in rows) else [])
    best = {c: max((m[c] for _, m, _ in rows if m and c in m), default=None) for c in columns}
    header = ["program", *[("mean" if c == "combined_score" else c) for c in columns]]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * len(columns)]
    for label, metrics, failure in rows:
        if not metrics:
            lines.append(
                f"| {label} | "
                + " | ".join(["failed"] * len(columns))
                + " |"
                + (f" <!-- {failure} -->" if failure else "")
            )
            continue
        cells = []
        for c in columns:
            value = metrics.get(c)
            text = _fmt(value)
            cells.append(f"**{text}**" if value is not None and value == best[c] else text)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def write_report(
    run_dir: str | Path,
    *,
    held_out: bool = True,
    workers: int | None = None,
    on_held_out: Any = None,
) -> dict[str, Any]:
    """Write ``summary.md`` and ``plots/fitness.png`` for a run directory; return the headline figures.

    With ``held_out`` (and the task's evaluator defining ``evaluate_held_out``,
    and ``held_out.enabled`` in the run's config) the seed, the best programs
    and the baselines are scored on the held-out set first (``workers`` in
    parallel; ``on_held_out(entry, done, total)`` after each); the sandbox is
    checked first (:func:`societas.evolve.evaluator.probe_sandbox`), so a
    sandbox that cannot run raises its ``SandboxError`` instead of failing
    every entry. Unreadable files raise ``ValueError`` naming them.
    """
    run_dir = resolve_run_dir(run_dir)
    db = run_dir / "programs.db"
    config = load_config(run_dir / "config.yaml")
    info = load_json_file(run_dir / "run.json")
    if not isinstance(info, dict):
        raise DocumentError(str(run_dir / "run.json"), "expected a JSON object")
    store = ProgramStore(db)
    try:
        programs = store.programs()
        backends = set(store.get_meta("sandbox_backends", None) or [])
    finally:
        store.close()
    population = Population(config.database)
    for program in programs:
        population.add(program)
    seed = next((p for p in programs if p.iteration == 0), None)
    best = population.best()
    plot_fitness(programs, run_dir / "plots" / "fitness.png")

    status = collections.Counter(p.status for p in programs)
    lines = [
        f"# Evolution run `{run_dir.name}`",
        "",
        f"- task: `{info.get('task')}`",
        f"- seed: {info.get('seed')}",
        f"- iterations: {max((p.iteration for p in programs), default=0)} of {config.max_iterations}",
        f"- programs: {len(programs)} ({status['ok']} ok, {status['failed']} failed evaluations, "
        f"{status['mutation_failed']} failed mutations)",
        f"- seed fitness: {_fmt(seed.fitness if seed else None)}",
        f"- best fitness: {_fmt(best.fitness if best else None)}"
        + (
            f" (program `{best.id}`, iteration {best.iteration}, generation {best.generation})"
            if best
            else ""
        ),
        f"- migrations: {population.migrations}",
        "",
        "![fitness over time](plots/fitness.png)",
        "",
        "## Best program against the seed",
        "",
    ]
    if best and seed:
        diff = "".join(
            difflib.unified_diff(
                seed.code.splitlines(keepends=True),
                best.code.splitlines(keepends=True),
                fromfile="seed/initial_program.py",
                tofile=f"best/{best.id}.py",
            )
        )
        lines += ["```diff", diff.rstrip() or "(identical to the seed)", "```", ""]
    if best and seed and best.metrics and best.fitness is not None and seed.fitness is not None:
        verdict = "beats" if best.fitness > seed.fitness else "does not beat"
        lines += [
            "## Training set",
            "",
            (
                f"The best program {verdict} the seed on the fitness ({_fmt(best.fitness)} vs "
                f"{_fmt(seed.fitness)}; higher is better)."
            ),
            "",
        ]
        rows: list[tuple[str, dict[str, float] | None, str | None]] = [("seed", seed.metrics, None)]
        if best.id != seed.id:
            rows.insert(0, (f"best ({best.id})", best.metrics, None))
        lines += _metric_table(rows) + [""]
    held_out_figures: dict[str, float | None] | None = None
    evaluator_path = Path(str(info.get("task", ""))) / "evaluator.py"
    if (
        held_out
        and config.held_out.enabled
        and evaluator_path.is_file()
        and supports_held_out(evaluator_path)
    ):
        backends.add(probe_sandbox(config.evaluator))
        entries = evaluate_held_out(
            run_dir, evaluator_path, config, programs, population, workers=workers, on_result=on_held_out
        )
        held_out_figures = {e.label: e.score for e in entries}
        lines += _held_out_section(entries, config)
    lines += [
        "## Islands",
        "",
        "| island | members | cells filled | best fitness | mean fitness |",
        "|---:|---:|---:|---:|---:|",
    ]
    for stat in population.island_stats():
        lines.append(
            f"| {stat['island']} | {stat['members']} | {stat['cells']} | "
            f"{_fmt(stat['best_fitness'])} | {_fmt(stat['mean_fitness'])} |"
        )
    by_id = {p.id: p for p in programs}
    lines += ["", "## Mutations", "", "| kind | children | ok | improved on parent |", "|---|---:|---:|---:|"]
    kinds: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])
    for p in programs:
        if p.iteration == 0:
            continue
        row = kinds[p.mutation.get("kind", "?")]
        row[0] += 1
        row[1] += p.ok
        parent = by_id.get(p.parent_id or "")
        row[2] += bool(
            p.ok
            and parent
            and parent.fitness is not None
            and p.fitness is not None
            and p.fitness > parent.fitness
        )
    for kind, (n, ok, better) in sorted(kinds.items()):
        lines.append(f"| {kind} | {n} | {ok} | {better} |")
    failures = collections.Counter((p.failure or "").split("\n")[0][:120] for p in programs if not p.ok)
    if failures:
        lines += ["", "## Most common failures", ""]
        lines += [f"- {count} x {reason}" for reason, count in failures.most_common(8)]
    unconfined = "rlimit" in backends or config.evaluator.sandbox == "rlimit"
    if unconfined:
        lines[:0] = [f"> **Warning: {UNCONFINED_WARNING}.**", ""]
    (run_dir / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    figures: dict[str, Any] = {
        "run_dir": str(run_dir),
        "summary": str(run_dir / "summary.md"),
        "plot": str(run_dir / "plots" / "fitness.png"),
        "best_score": best.fitness if best else None,
        "seed_score": seed.fitness if seed else None,
        "programs": len(programs),
        "unconfined": unconfined,
    }
    if held_out_figures is not None:
        figures["held_out"] = held_out_figures
    return figures


def _held_out_section(entries: list[HeldOutEntry], config: Any) -> list[str]:
    settings = config.evaluator.task_settings
    lines = [
        "## Held-out set",
        "",
        "Scored after the search by the task's `evaluate_held_out` (never used for selection)"
        + (f", task settings `{json.dumps(settings, sort_keys=True)}`" if settings else "")
        + "; higher is better, the best of each column in bold.",
        "",
    ]
    evolved = [e for e in entries if e.kind == "evolved"]
    if not evolved:
        lines += [
            (
                "No evolved program beat the seed on the training set, so only the seed and the "
                "baselines are scored."
            ),
            "",
        ]
    seed = next((e for e in entries if e.kind == "seed"), None)
    top_score = evolved[0].score if evolved else None
    seed_score = seed.score if seed is not None else None
    if top_score is not None and seed_score is not None:
        verdict = "beats" if top_score > seed_score else "does not beat"
        lines += [
            (
                f"On the held-out mean the best evolved program {verdict} the seed "
                f"({_fmt(top_score)} vs {_fmt(seed_score)})."
            ),
            "",
        ]
        scored = sorted(
            ((score, e) for e in entries if (score := e.score) is not None),
            key=lambda se: se[0],
            reverse=True,
        )
        rank = next(i for i, (_, e) in enumerate(scored, start=1) if e is evolved[0])
        lines += [f"It ranks {rank} of {len(scored)} on the held-out mean.", ""]
    rows = [
        (
            e.label + (" (baseline)" if e.kind == "baseline" else ""),
            e.metrics if e.status == "ok" else None,
            e.failure,
        )
        for e in entries
    ]
    lines += _metric_table(rows) + [""]
    failed = [e for e in entries if e.status != "ok"]
    if failed:
        lines += [f"- {e.label} failed: {(e.failure or '').splitlines()[0][:200]}" for e in failed] + [""]
    return lines
