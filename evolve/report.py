"""A run directory's report: ``summary.md``, ``plots/fitness.png`` and ``report.html``.

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
iteration, the best so far, and failures along the bottom. ``report.html``
(:mod:`societas.evolve.report_html`) shows the same run as one interactive,
self-contained page: the lineage tree, fitness over time, every program's
code and diff against its parent, and the held-out table computed here.

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
from scipy.stats import spearmanr

from societas.agents.documents import DocumentError, load_json_file

from .config import load_config
from .controller import ADAPTIVE_META
from .database import Population, ProgramStore
from .evaluator import probe_sandbox
from .held_out import HeldOutEntry, evaluate_held_out, held_out_baselines, score_stage, supports_held_out
from .program import Program
from .report_html import write_html_report
from .selection import STAGE as VALIDATION_STAGE
from .selection import ValidationRecord, chosen_from, defines_stage, history_from, load_records

logger = logging.getLogger(__name__)

__all__ = ["UNCONFINED_WARNING", "plot_adaptive", "plot_fitness", "resolve_run_dir", "write_report"]

UNCONFINED_WARNING = (
    "candidates ran unconfined (no sandbox isolation): the evaluations used the rlimit sandbox backend, "
    "which limits resources only, so the programs could reach the network and the user's files"
)


def plot_fitness(programs: list[Program], path: Path) -> None:
    """Every program's fitness by iteration, the best so far, and failures in a strip of their own.

    When every fitness is negative (the negative exploitability of the game tasks) the plot shows
    its magnitude on a log scale, lower is better, so a gain from 1e-4 to 1e-5 is as visible as one
    from 1e-1 to 1e-2; failed evaluations and failed mutations sit in a separate strip below.
    """
    # A Figure with no pyplot: writing the PNG needs no backend choice and no display.
    ok = [(p.iteration, p.fitness) for p in programs if p.ok and p.fitness is not None and p.complete]
    partial = [
        (p.iteration, p.fitness) for p in programs if p.ok and p.fitness is not None and not p.complete
    ]
    bad = [p for p in programs if not p.ok]
    negative = bool(ok) and all(f < 0 for _, f in ok)
    best_x: list[int] = []
    best_y: list[float] = []
    best: float | None = None
    for p in sorted(programs, key=lambda q: q.iteration):
        # Only fully evaluated programs can be the best: a cascade's first stages score on less.
        fitness = p.fitness if p.ok and p.complete else None
        if fitness is not None and (best is None or fitness > best):
            best = fitness
        if best is not None:
            best_x.append(p.iteration)
            best_y.append(best)
    fig = Figure(figsize=(8, 4.6))
    ax, strip = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [6, 1]})
    shown = (lambda f: -f) if negative else (lambda f: f)
    ax.scatter([i for i, _ in ok], [shown(f) for _, f in ok], s=12, alpha=0.6, label="program")
    if partial and (not negative or all(f < 0 for _, f in partial)):
        ax.scatter(
            [i for i, _ in partial],
            [shown(f) for _, f in partial],
            s=12,
            facecolors="none",
            edgecolors="C7",
            label="stopped early by\nthe cascade (score\nof its first stages)",
        )
    ax.step(best_x, [shown(f) for f in best_y], where="post", color="C3", label="best so far")
    if negative:
        ax.set_yscale("log")
        ax.set_ylabel("-fitness (exploitability), lower is better")
    else:
        ax.set_ylabel("fitness, higher is better")
    ax.set_title("fitness over time")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    failed = [p.iteration for p in bad if p.status == "failed"]
    no_child = [p.iteration for p in bad if p.status == "mutation_failed"]
    strip.scatter(failed, [1] * len(failed), marker="x", color="C1", s=16, label="evaluation failed")
    strip.scatter(no_child, [0] * len(no_child), marker="|", color="grey", s=30, label="mutation failed")
    strip.set_yticks([0, 1], ["mutation", "evaluation"], fontsize=7)
    strip.set_ylim(-0.6, 1.6)
    strip.set_xlabel("iteration")
    strip.set_title("failures", fontsize=8, loc="left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def plot_adaptive(history: list[tuple[int, dict[str, float]]], path: Path) -> None:
    """The adaptive choice's sampling weight of every operator and model, batch by batch."""
    arms = sorted({arm for _, weights in history for arm in weights})
    fig = Figure(figsize=(8, 4.2))
    ax = fig.subplots()
    x = [iteration for iteration, _ in history]
    for index, arm in enumerate(arms):
        ax.step(
            x,
            [weights.get(arm, 0.0) for _, weights in history],
            where="post",
            color=f"C{index % 10}",
            marker="o" if len(x) <= 40 else None,
            markersize=3,
            label=arm,
        )
    ax.set_xlabel("iteration (the weights a batch was planned from hold until the next point)")
    ax.set_ylabel("share of the children")
    ax.set_ylim(0, 1)
    ax.set_title("adaptive choice of operator and model (UCB1)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def plot_selection(
    programs: list[Program],
    records: list[ValidationRecord],
    history: list[ValidationRecord],
    held_out: dict[str, float | None],
    path: Path,
) -> bool:
    """Best-so-far training fitness, and the validation and held-out score of the program the
    validation set chose, over the run; returns False (and draws nothing) without validation records.

    When every score is negative (the negative exploitability of the game tasks) the plot shows
    its magnitude on a log scale, so gains of orders of magnitude stay visible.
    """
    if not records or not history:
        return False
    train: list[tuple[int, float]] = []
    best: float | None = None
    for program in sorted(programs, key=lambda p: p.iteration):
        if program.ok and program.fitness is not None and (best is None or program.fitness > best):
            best = program.fitness
        if best is not None:
            train.append((program.iteration, best))
    last = max((p.iteration for p in programs), default=0)
    valid: list[tuple[int, float]] = [
        (r.validated_at_iteration, r.score) for r in history if r.score is not None
    ]
    held: list[tuple[int, float]] = [
        (r.validated_at_iteration, score)
        for r in history
        if (score := held_out.get(r.program_id)) is not None
    ]
    series = [("training: best so far", train, "C0"), ("validation: chosen program", valid, "C2")]
    if held:
        series.append(("held-out: chosen program (reported only)", held, "C3"))
    values = [v for _, points, _ in series for _, v in points if v is not None]
    negative = bool(values) and all(v < 0 for v in values)
    fig = Figure(figsize=(8, 4.2))
    ax = fig.subplots()
    for label, points, colour in series:
        xs = [x for x, _ in points] + ([last] if points else [])
        ys = [(-y if negative else y) for _, y in points if y is not None]
        ys = ys + ys[-1:]
        ax.step(xs, ys, where="post", color=colour, label=label, linewidth=1.8)
        changes = [i for i in range(len(ys) - 1) if i == 0 or ys[i] != ys[i - 1]]  # a dot where it moves
        ax.plot([xs[i] for i in changes], [ys[i] for i in changes], "o", color=colour, markersize=4)
    if negative:
        ax.set_yscale("log")
        ax.set_ylabel("exploitability (-score), lower is better")
    else:
        ax.set_ylabel("score, higher is better")
    ax.set_xlabel("iteration")
    ax.set_title("selection over the run")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return True


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
    """Write ``summary.md``, ``plots/fitness.png`` and ``report.html`` for a run directory; return the
    headline figures.

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
        records = load_records(store)
        budget = store.get_meta("stopped_by_time_budget", None)
        adaptive = [(int(i), dict(w)) for i, w in store.get_meta(ADAPTIVE_META, None) or []]
    finally:
        store.close()
    population = Population(config.database)
    for program in programs:
        population.add(program)
    seed = next((p for p in programs if p.iteration == 0), None)
    top = population.best()
    chosen_id = chosen_from(records)
    best: Program | None = population.programs.get(chosen_id, top) if chosen_id is not None else top
    history = [r for r in history_from(records) if r.program_id in population.programs]
    plot_fitness(programs, run_dir / "plots" / "fitness.png")

    status = collections.Counter(p.status for p in programs)
    rejected = [p for p in programs if p.status == "mutation_failed" and "novelty" in p.artifacts]
    lines = [
        f"# Evolution run `{run_dir.name}`",
        "",
        f"- task: `{info.get('task')}`",
        f"- seed: {info.get('seed')}",
        f"- iterations: {max((p.iteration for p in programs), default=0)} of {config.max_iterations}"
        + (
            f" (the search stopped at its time budget of {budget['minutes']:g} minutes)"
            if isinstance(budget, dict) and "minutes" in budget
            else ""
        ),
        f"- programs: {len(programs)} ({status['ok']} ok, {status['failed']} failed evaluations, "
        f"{status['mutation_failed']} failed mutations"
        + (f", of which {len(rejected)} rejected as duplicates without evaluation" if rejected else "")
        + ")",
        f"- seed fitness: {_fmt(seed.fitness if seed else None)}",
        f"- best fitness: {_fmt(top.fitness if top else None)}"
        + (f" (program `{top.id}`, iteration {top.iteration}, generation {top.generation})" if top else ""),
        (
            f"- returned program: `{best.id}` (iteration {best.iteration}), the best of the "
            f"{len(records)} validated on the validation set: {_fmt(records[best.id].score)} "
            f"(training fitness {_fmt(best.fitness)})"
            if best is not None and best.id in records
            else "- returned program: the best on the training set (the task has no validation set)"
        ),
        f"- migrations: {population.migrations}",
        "",
        "![fitness over time](plots/fitness.png)",
        "",
        "## Returned program against the seed",
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
        ours: float | None
        theirs: float | None
        if best.complete == seed.complete:
            ours, theirs, where = best.fitness, seed.fitness, "on the fitness"
            if not best.complete:
                where += " of the cascade's first stages (neither ran them all)"
        else:
            # Like with like: the score after the last stage both ran.
            common = [s for s in best.stage_scores if s in seed.stage_scores]
            stage = common[-1] if common else None
            ours = best.stage_scores.get(stage) if stage else None
            theirs = seed.stage_scores.get(stage) if stage else None
            where = f"on the score after `{stage}`, the last cascade stage both ran"
        if ours is None or theirs is None:
            verdict = "cannot be compared with"
        else:
            verdict = "beats" if ours > theirs else "does not beat"
        lines += [
            "## Training set",
            "",
            f"The returned program {verdict} the seed {where} ({_fmt(ours)} vs {_fmt(theirs)}; "
            "higher is better).",
            "",
        ]
        rows: list[tuple[str, dict[str, float] | None, str | None]] = [("seed", seed.metrics, None)]
        if best.id != seed.id:
            rows.insert(0, (f"best ({best.id})", best.metrics, None))
        lines += _metric_table(rows) + [""]
    shown_artifacts = {k: v for k, v in (best.artifacts if best else {}).items() if k != "llm_response" and v}
    if shown_artifacts:
        lines += ["## Artifacts of the returned program", ""]
        lines += ["What its evaluation reported besides the metrics (each cut to 300 characters):", ""]
        for key, value in sorted(shown_artifacts.items()):
            text = " ".join(str(value).split())
            lines.append(f"- `{key}`: {text[:300] + ('...' if len(text) > 300 else '')}")
        lines.append("")
    held_out_figures: dict[str, float | None] | None = None
    summary: dict[str, Any] = {"run_dir": str(run_dir), "best_id": best.id if best else None}
    summary["novelty_rejected"] = len(rejected)
    summary["selected_by"] = "validation" if best is not None and best.id in records else "training"
    means: dict[str, dict[str, float | None]] = {
        "training_mean": {},
        "validation_mean": {},
        "held_out_mean": {},
    }
    if seed is not None:
        means["training_mean"]["seed"] = seed.fitness
    if best is not None:
        means["training_mean"]["best"] = best.fitness
    for key, which in (("seed", seed), ("best", best)):
        if which is not None and which.id in records:
            means["validation_mean"][key] = records[which.id].score
    held_out_history: dict[str, float | None] = {}
    held_out_entries: list[HeldOutEntry] | None = None
    evaluator_path = Path(str(info.get("task", ""))) / "evaluator.py"
    if (
        held_out
        and config.held_out.enabled
        and evaluator_path.is_file()
        and supports_held_out(evaluator_path)
    ):
        backends.add(probe_sandbox(config.evaluator))
        selection = None
        if records:
            selection = [
                (
                    population.programs[r.program_id],
                    f"validation-best after iteration {r.validated_at_iteration}",
                )
                for r in history
                if r.iteration != 0
            ]
            if best is not None and best.iteration != 0 and (not selection or selection[-1][0].id != best.id):
                selection.append((best, "returned"))
            # The returned program and at most held_out.history earlier choices (the latest ones).
            earlier, last = selection[:-1], selection[-1:]
            keep = config.held_out.history
            selection = (earlier[len(earlier) - keep :] if keep else []) + last
        entries = evaluate_held_out(
            run_dir,
            evaluator_path,
            config,
            programs,
            population,
            workers=workers,
            on_result=on_held_out,
            selection=selection,
        )
        held_out_entries = entries
        held_out_figures = {e.label: e.score for e in entries}
        held_out_history = {e.program_id: e.score for e in entries if e.program_id is not None}
        for entry in entries:
            if entry.kind == "seed":
                means["held_out_mean"]["seed"] = entry.score
            elif entry.kind == "evolved":
                means["held_out_mean"]["best"] = entry.score
            elif entry.kind == "baseline":
                means["held_out_mean"][entry.label] = entry.score
        if best is not None and best.id == (seed.id if seed else None):
            means["held_out_mean"]["best"] = means["held_out_mean"].get("seed")
        sources = held_out_baselines(evaluator_path)  # loads the task's evaluator once
        baselines: list[tuple[str, str, str, Program | None]] = [
            (e.label, "baseline", sources[e.label], None) for e in entries if e.kind == "baseline"
        ]
        if baselines:
            for stage, cache, key in (
                ("evaluate", "training.json", "training_mean"),
                (VALIDATION_STAGE, "validation.json", "validation_mean"),
            ):
                if stage == VALIDATION_STAGE and not defines_stage(evaluator_path, VALIDATION_STAGE):
                    continue
                # The baselines are scored after the search, as on the held-out set: a slow one
                # (PRD, RM over 1e5 solver steps a meta-game) gets the held-out time limit.
                timeout = config.validation.timeout if stage == VALIDATION_STAGE else config.held_out.timeout
                for entry in score_stage(
                    run_dir,
                    evaluator_path,
                    config,
                    baselines,
                    stage=stage,
                    cache_name=cache,
                    timeout=timeout,
                    workers=workers,
                ):
                    means[key][entry.label] = entry.score
        lines += _held_out_section(entries, config, means)
    summary.update(means)
    plot_selection(
        programs, list(records.values()), history, held_out_history, run_dir / "plots" / "selection.png"
    )
    if records:
        lines[
            lines.index("![fitness over time](plots/fitness.png)") + 1 : lines.index(
                "![fitness over time](plots/fitness.png)"
            )
            + 1
        ] = [
            "",
            "![training, validation and held-out score of the chosen program over time](plots/selection.png)",
        ]
    island_stats = population.island_stats()
    lines += [
        "## Islands",
        "",
        "| island | members | cells filled | best fitness | mean fitness |",
        "|---:|---:|---:|---:|---:|",
    ]
    for stat in island_stats:
        lines.append(
            f"| {stat['island']} | {stat['members']} | {stat['cells']} | "
            f"{_fmt(stat['best_fitness'])} | {_fmt(stat['mean_fitness'])} |"
        )
    operators = operator_stats(programs)
    summary["operators"] = operators
    lines += [
        "",
        "## Mutations",
        "",
        "A child is *valid* when the operator made a program that parses and changes only the evolve blocks, "
        "*evaluated* when its evaluation succeeded, and *improved* when it beats its parent's fitness.",
        "",
        "| kind | children | valid | evaluated | improved on parent |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind, row in sorted(operators.items()):
        lines.append(
            f"| {kind} | {row['children']} | {row['valid']} | {row['evaluated']} | {row['improved']} |"
        )
    handed: collections.Counter[str] = collections.Counter(
        str(p.mutation["planned"]) for p in programs if p.mutation.get("planned")
    )
    if handed:
        summary["handed_over"] = dict(handed)
        lines += [
            "",
            "Children whose drawn operator found nothing to change in their parent, made by another "
            "(counted above under the one that made them): "
            + ", ".join(f"{kind} {n}" for kind, n in sorted(handed.items()))
            + ".",
        ]
    redrawn = [reason for p in programs for reason in p.mutation.get("redrawn", [])]
    summary["novelty_redrawn"] = len(redrawn)
    if rejected or redrawn:
        exact = sum(p.artifacts["novelty"].startswith("exact") for p in rejected)
        lines += ["", "## Novelty rejection", ""]
        if rejected:
            lines.append(
                f"{len(rejected)} children were not evaluated because the database already held them: "
                f"{exact} exact duplicates (the same code once comments and formatting are set aside) and "
                f"{len(rejected) - exact} near duplicates (token-set similarity at least "
                f"{config.novelty.similarity_threshold:g})."
            )
        if redrawn:
            lines.append(
                f"{len(redrawn)} duplicates made by LLM-free operators were drawn again from the same parent "
                f"(up to {config.novelty.redraws} times a child) instead of using up an iteration; "
                f"{sum(r.startswith('exact') for r in redrawn)} of them were exact duplicates."
            )
    if adaptive:
        plot_adaptive(adaptive, run_dir / "plots" / "adaptive.png")
        final = adaptive[-1][1]
        summary["adaptive_weights"] = final
        lines += [
            "",
            "## Adaptive choice of operator and model",
            "",
            "UCB1 over the operators and models, rewarded when a child beats the better of its parents; "
            "the weights a batch was planned from, over the run:",
            "",
            "![adaptive weights](plots/adaptive.png)",
            "",
            "| arm | first batch | last batch |",
            "|---|---:|---:|",
        ]
        start = adaptive[0][1]
        for arm in sorted(final, key=lambda a: -final[a]):
            lines.append(f"| {arm} | {start.get(arm, 0.0):.3f} | {final[arm]:.3f} |")
    cascade = cascade_stats(programs)
    if cascade is not None:
        summary["cascade"] = cascade
        lines += ["", "## Cascade", ""]
        stops = ", ".join(f"{n} after `{stage}`" for stage, n in cascade["stopped_after"].items() if n)
        lines.append(
            f"Stages {' -> '.join(f'`{s}`' for s in cascade['stages'])}: {cascade['completed']} programs "
            f"ran them all" + (f"; stopped early: {stops}." if stops else ".")
        )
        if stops:
            lines.append(
                "A program stopped early is kept with the score of the stages it ran, ranks below every "
                "program that ran them all and only against programs stopped at the same stage."
            )
        rank = cascade.get("rank_correlation")
        if rank is not None:
            lines.append(
                f"Rank correlation between the score after `{rank['stage']}` and the final fitness, over the "
                f"{rank['pairs']} programs that have both: Spearman {_fmt(rank['spearman'])} (1: the short "
                "runs rank programs exactly as the full ones; successive halving stops candidates on the first)."
            )
    failures = collections.Counter((p.failure or "").split("\n")[0][:120] for p in programs if not p.ok)
    if failures:
        lines += ["", "## Most common failures", ""]
        lines += [f"- {count} x {reason}" for reason, count in failures.most_common(8)]
    unconfined = "rlimit" in backends or config.evaluator.sandbox == "rlimit"
    if unconfined:
        lines[:0] = [f"> **Warning: {UNCONFINED_WARNING}.**", ""]
    (run_dir / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    html = write_html_report(
        run_dir / "report.html",
        programs,
        title=f"Evolution run {run_dir.name}",
        facts=[
            ("task", Path(str(info.get("task", ""))).name or info.get("task")),
            ("seed", info.get("seed")),
            ("iterations", f"{max((p.iteration for p in programs), default=0)} of {config.max_iterations}"),
            ("migrations", population.migrations),
        ],
        best_id=best.id if best else None,
        top_id=top.id if top else None,
        held_out=held_out_entries,
        means=means if held_out_entries is not None else None,
        islands=island_stats,
        operators=operators,
        validation={pid: r.score for pid, r in records.items()},
        warning=UNCONFINED_WARNING if unconfined else None,
    )
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    figures: dict[str, Any] = {
        "run_dir": str(run_dir),
        "summary": str(run_dir / "summary.md"),
        "summary_json": str(run_dir / "summary.json"),
        "plot": str(run_dir / "plots" / "fitness.png"),
        "report_html": html["path"],
        "best_score": best.fitness if best else None,
        "best_id": best.id if best else None,
        "selected_by": summary["selected_by"],
        "seed_score": seed.fitness if seed else None,
        "programs": len(programs),
        "unconfined": unconfined,
    }
    if held_out_figures is not None:
        figures["held_out"] = held_out_figures
    return figures


def cascade_stats(programs: list[Program]) -> dict[str, Any] | None:
    """Where the evaluation cascade stopped programs, and how its next-to-last stage ranks them.

    ``rank_correlation`` is Spearman's rho between the fitness after the stage
    before the last (successive halving's rung) and the final fitness, over the
    programs that completed every stage; None with fewer than 3 such programs
    or a single stage.
    """
    evaluated = [p for p in programs if p.status == "ok" and p.stage_scores]
    if not evaluated:
        return None
    stages = list(max(evaluated, key=lambda p: len(p.stage_scores)).stage_scores)
    stopped = dict.fromkeys(stages[:-1], 0)
    complete = []
    for program in evaluated:
        reached = list(program.stage_scores)
        if len(reached) == len(stages):
            complete.append(program)
        elif reached:
            stopped[reached[-1]] = stopped.get(reached[-1], 0) + 1
    stats: dict[str, Any] = {"stages": stages, "completed": len(complete), "stopped_after": stopped}
    if len(stages) >= 2:
        rung = stages[-2]
        pairs = [(p.stage_scores[rung], p.stage_scores[stages[-1]]) for p in complete]
        if len(pairs) >= 3 and len({a for a, _ in pairs}) > 1 and len({b for _, b in pairs}) > 1:
            rho = float(spearmanr([a for a, _ in pairs], [b for _, b in pairs]).statistic)
            stats["rank_correlation"] = {"stage": rung, "spearman": rho, "pairs": len(pairs)}
    return stats


def operator_stats(programs: list[Program]) -> dict[str, dict[str, int]]:
    """Per mutation kind: children made, valid (a program came out), evaluated (ok) and improved on the parent."""
    by_id = {p.id: p for p in programs}
    stats: dict[str, dict[str, int]] = {}
    for p in programs:
        if p.iteration <= 0:  # the seed and the extra seed programs are not children
            continue
        row = stats.setdefault(
            str(p.mutation.get("kind", "?")), {"children": 0, "valid": 0, "evaluated": 0, "improved": 0}
        )
        row["children"] += 1
        row["valid"] += p.status != "mutation_failed"
        row["evaluated"] += p.ok
        parent = by_id.get(p.parent_id or "")
        row["improved"] += bool(
            p.ok
            and parent
            and parent.fitness is not None
            and p.fitness is not None
            and p.fitness > parent.fitness
        )
    return stats


def _held_out_section(
    entries: list[HeldOutEntry], config: Any, means: dict[str, dict[str, float | None]] | None = None
) -> list[str]:
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
                "No evolved program was chosen over the seed (on the validation set, or on the training "
                "set when the task has none), so only the seed and the baselines are scored."
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
            ((score, e) for e in entries if (score := e.score) is not None and e.kind != "history"),
            key=lambda se: se[0],
            reverse=True,
        )
        rank = next(i for i, (_, e) in enumerate(scored, start=1) if e is evolved[0])
        lines += [f"It ranks {rank} of {len(scored)} on the held-out mean.", ""]
        beaten = [
            e.label for e in entries if e.kind == "baseline" and e.score is not None and top_score > e.score
        ]
        unbeaten = [
            e.label for e in entries if e.kind == "baseline" and e.score is not None and top_score <= e.score
        ]
        if beaten or unbeaten:
            lines += [
                "It beats "
                + (", ".join(f"`{b}`" for b in beaten) or "no baseline")
                + (f" and not {', '.join(f'`{b}`' for b in unbeaten)}" if unbeaten else "")
                + ".",
                "",
            ]
    if means:
        names = list(dict.fromkeys([*means.get("training_mean", {}), *means.get("held_out_mean", {})]))
        lines += [
            "Means per set (training at the search's settings; validation chooses the returned program):",
            "",
            "| program | training mean | validation mean | held-out mean |",
            "|---|---:|---:|---:|",
        ]
        for name in names:
            lines.append(
                f"| {name} | {_fmt(means.get('training_mean', {}).get(name))} | "
                f"{_fmt(means.get('validation_mean', {}).get(name))} | {_fmt(means.get('held_out_mean', {}).get(name))} |"
            )
        lines.append("")
    rows = [
        (
            e.label + {"baseline": " (baseline)", "history": " (earlier choice)"}.get(e.kind, ""),
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
