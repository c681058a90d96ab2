"""A run directory's report: ``summary.md`` and ``plots/fitness.png``.

The summary gives the headline numbers (seed and best fitness, evaluations,
failures), the best program as a unified diff against the seed, per-island
statistics of the MAP-Elites islands (rebuilt from the stored programs exactly
as the run built them), results per mutation kind and the most common failure
reasons. The plot shows every program's fitness by iteration, the best so far,
and failures along the bottom.
"""

from __future__ import annotations

import collections
import difflib
import json
import logging
from pathlib import Path
from typing import Any

import yaml

from .config import parse_config
from .database import Population, ProgramStore
from .program import Program

logger = logging.getLogger(__name__)

__all__ = ["plot_fitness", "write_report"]


def plot_fitness(programs: list[Program], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [p for p in programs if p.ok]
    bad = [p for p in programs if not p.ok]
    best_x, best_y, best = [], [], None
    for p in programs:
        if p.ok and (best is None or p.fitness > best):
            best = p.fitness
        if best is not None:
            best_x.append(p.iteration)
            best_y.append(best)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.scatter([p.iteration for p in ok], [p.fitness for p in ok], s=12, alpha=0.6, label="program")
    ax.step(best_x, best_y, where="post", color="C3", label="best so far")
    if bad and ok:
        floor = min(p.fitness for p in ok)
        ax.scatter([p.iteration for p in bad], [floor] * len(bad), marker="x", color="grey", s=14, label="failed")
    ax.set_xlabel("iteration")
    ax.set_ylabel("fitness")
    ax.set_title("fitness over time")
    ax.legend(loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def write_report(run_dir: str | Path) -> dict[str, Any]:
    """Write ``summary.md`` and ``plots/fitness.png`` for a run directory; return the headline figures."""
    run_dir = Path(run_dir)
    db = run_dir / "programs.db"
    if not db.is_file():
        raise FileNotFoundError(f"{run_dir} is not a run directory: no programs.db")
    config = parse_config(yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8")),
                          source=str(run_dir / "config.yaml"))
    info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    store = ProgramStore(db)
    try:
        programs = store.programs()
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
        + (f" (program `{best.id}`, iteration {best.iteration}, generation {best.generation})" if best else ""),
        f"- migrations: {population.migrations}",
        "",
        "![fitness over time](plots/fitness.png)",
        "",
        "## Best program against the seed",
        "",
    ]
    if best and seed:
        diff = "".join(difflib.unified_diff(
            seed.code.splitlines(keepends=True), best.code.splitlines(keepends=True),
            fromfile="seed/initial_program.py", tofile=f"best/{best.id}.py"))
        lines += ["```diff", diff.rstrip() or "(identical to the seed)", "```", ""]
        if best.metrics:
            lines += ["Metrics of the best program:", ""]
            lines += [f"- {k}: {_fmt(v)}" for k, v in sorted(best.metrics.items())] + [""]
    lines += ["## Islands", "", "| island | members | cells filled | best fitness | mean fitness |",
              "|---:|---:|---:|---:|---:|"]
    for stat in population.island_stats():
        lines.append(f"| {stat['island']} | {stat['members']} | {stat['cells']} | "
                     f"{_fmt(stat['best_fitness'])} | {_fmt(stat['mean_fitness'])} |")
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
        row[2] += bool(p.ok and parent and parent.fitness is not None and p.fitness > parent.fitness)
    for kind, (n, ok, better) in sorted(kinds.items()):
        lines.append(f"| {kind} | {n} | {ok} | {better} |")
    failures = collections.Counter((p.failure or "").split("\n")[0][:120] for p in programs if not p.ok)
    if failures:
        lines += ["", "## Most common failures", ""]
        lines += [f"- {count} x {reason}" for reason, count in failures.most_common(8)]
    (run_dir / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {
        "run_dir": str(run_dir),
        "summary": str(run_dir / "summary.md"),
        "plot": str(run_dir / "plots" / "fitness.png"),
        "best_score": best.fitness if best else None,
        "seed_score": seed.fitness if seed else None,
        "programs": len(programs),
    }
