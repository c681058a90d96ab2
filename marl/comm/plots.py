"""Learning-curve plots for communication MARL runs.

* :func:`plot_learning_curve` — one run: mean episode return against env
  steps, with messages per step on a second axis.
* :func:`plot_curves` — several configurations in one PNG, each the mean over
  its seeds with a +/- one standard deviation band.

Figures are built with matplotlib's object-oriented API (``Figure`` and
``savefig``): no pyplot, so no global backend is chosen here and no display is
needed. Choosing a backend is left to command lines and scripts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

__all__ = ["aggregate_seeds", "curves_figure", "plot_curves", "plot_learning_curve"]


def aggregate_seeds(
    runs: Sequence[Sequence[tuple[float, float]]], points: int = 200
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and std over seeds of curves ``[(x, y), ...]`` (x increasing), each
    linearly interpolated onto a common grid over the x range that all runs
    cover. Returns ``(x, mean, std)``; points with a missing y are skipped."""
    curves = []
    for run in runs:
        pts = [(float(x), float(y)) for x, y in run if y is not None and np.isfinite(y)]
        if pts:
            curves.append(np.asarray(pts))
    if not curves:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    lo = max(c[0, 0] for c in curves)
    hi = min(c[-1, 0] for c in curves)
    if hi <= lo:
        xs = np.asarray([hi])
    else:
        xs = np.linspace(lo, hi, min(points, max(len(c) for c in curves)))
    ys = np.stack([np.interp(xs, c[:, 0], c[:, 1]) for c in curves])
    return xs, ys.mean(0), ys.std(0)


def plot_curves(
    curves: Mapping[str, Sequence[Sequence[tuple[float, float]]]],
    path: str | Path,
    *,
    title: str = "",
    xlabel: str = "env steps",
    ylabel: str = "mean episode return",
    reference: Mapping[str, float] | None = None,
    final: Mapping[str, tuple[float, float]] | None = None,
    final_name: str = "final training return",
) -> Path:
    """Write one PNG with a line per label: ``curves[label]`` is a list of runs
    (one per seed), each ``[(env_steps, value), ...]``; the line is the mean
    over seeds and the band +/- one std. ``reference`` draws labelled
    horizontal lines (e.g. a published figure).

    The legend names what its numbers are: ``final[label]`` (mean, std over
    seeds), the figure a results table gives, under the legend title
    ``final_name``; without it, the curve's last point (the mean of the
    seeds' last logged values)."""
    fig = curves_figure(
        curves,
        title=title,
        xlabel=xlabel,
        ylabel=ylabel,
        reference=reference,
        final=final,
        final_name=final_name,
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def curves_figure(
    curves: Mapping[str, Sequence[Sequence[tuple[float, float]]]],
    *,
    title: str = "",
    xlabel: str = "env steps",
    ylabel: str = "mean episode return",
    reference: Mapping[str, float] | None = None,
    final: Mapping[str, tuple[float, float]] | None = None,
    final_name: str = "final training return",
) -> Figure:
    """The figure :func:`plot_curves` writes."""
    fig = Figure(figsize=(7.0, 4.6), dpi=120)
    ax = fig.subplots()
    for label, runs in curves.items():
        xs, mean, std = aggregate_seeds(runs)
        if not len(xs):
            continue
        n = sum(1 for r in runs if len(r))
        if final is not None and label in final:
            m, sd = final[label]
            text = f"{label}: {m:.2f} ± {sd:.2f}"
        else:
            text = f"{label}: {mean[-1]:.2f}"
        (line,) = ax.plot(xs, mean, linewidth=1.5, label=f"{text} ({n} seed{'s' if n != 1 else ''})")
        if n > 1:
            ax.fill_between(xs, mean - std, mean + std, color=line.get_color(), alpha=0.18, linewidth=0)
    for label, y in (reference or {}).items():
        ax.axhline(y, color="grey", linestyle="--", linewidth=1.0)
        ax.annotate(
            label, (ax.get_xlim()[0], y), fontsize=7, color="grey", xytext=(4, 3), textcoords="offset points"
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    if curves:
        head = final_name if final is not None else "last point"
        ax.legend(fontsize=7, loc="lower right", framealpha=0.85, title=head, title_fontsize=7)
    fig.tight_layout()
    return fig


def plot_learning_curve(metrics: Sequence[Mapping], path: str | Path, *, title: str = "") -> Path:
    """One run's curve from its metrics rows (``env_steps``, ``mean_episode_return``,
    ``messages_per_step``): return on the left axis, messages per step on the right."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [m for m in metrics if m.get("mean_episode_return") is not None]
    fig = Figure(figsize=(6.4, 4.2), dpi=120)
    ax = fig.subplots()
    if rows:
        xs = [m["env_steps"] for m in rows]
        ax.plot(
            xs,
            [m["mean_episode_return"] for m in rows],
            color="C0",
            linewidth=1.5,
            label="mean episode return",
        )
        ax.set_ylabel("mean episode return", color="C0")
        msgs = [m.get("messages_per_step", 0.0) or 0.0 for m in rows]
        if any(msgs):
            ax2 = ax.twinx()
            ax2.plot(xs, msgs, color="C1", linewidth=1.0, alpha=0.8)
            ax2.set_ylabel("messages per step", color="C1")
            ax2.set_ylim(bottom=0)
    ax.set_xlabel("env steps")
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path
