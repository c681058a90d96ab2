"""Convergence plots for the game solvers: exploitability against iterations,
log-log, one line per algorithm.

Figures are built with matplotlib's object-oriented API (``Figure`` and
``savefig``): no pyplot, so no global backend is chosen here and no display is
needed. Choosing a backend is left to command lines and scripts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure


def log_checkpoints(iterations: int, points: int = 40) -> list[int]:
    """About ``points`` iteration numbers from 1 to ``iterations``, evenly
    spaced on a log scale (always including 1 and ``iterations``)."""
    if iterations < 1:
        return []
    n = max(2, min(points, iterations))
    pts = np.unique(np.round(np.logspace(0, math.log10(iterations), n)).astype(int))
    out = sorted({int(p) for p in pts if 1 <= p <= iterations} | {1, iterations})
    return out


def _positive(ys: Sequence[float]) -> np.ndarray:
    """Values as an array with non-positive or missing entries masked (NaN),
    which a log axis cannot show."""
    arr = np.asarray([np.nan if y is None else float(y) for y in ys], dtype=float)
    arr[~(arr > 0)] = np.nan
    return arr


def plot_curves(
    curves: Mapping[str, Iterable[tuple[int, float]]],
    path: str | Path,
    *,
    title: str = "",
    ylabel: str = "exploitability (NashConv / N)",
    averaging_starts: Mapping[str, int] | None = None,
) -> Path:
    """Write a log-log PNG of ``curves`` (label -> [(iteration, value), ...]) to
    ``path`` and return it. Labels are drawn in the order given, each with its final
    value in the legend; values <= 0 are left out (a log axis cannot show them).

    ``averaging_starts[label]`` is the iteration from which an algorithm
    accumulates its average policy (VAD-CFR's warm start): before it the
    average is empty, so uniform, and its curve is flat. That part is drawn
    dotted, a vertical line marks the start, and the legend says so."""
    fig = curves_figure(curves, title=title, ylabel=ylabel, averaging_starts=averaging_starts)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def curves_figure(
    curves: Mapping[str, Iterable[tuple[int, float]]],
    *,
    title: str = "",
    ylabel: str = "exploitability (NashConv / N)",
    averaging_starts: Mapping[str, int] | None = None,
) -> Figure:
    """The figure :func:`plot_curves` writes."""
    fig = Figure(figsize=(6.4, 4.4), dpi=120)
    ax = fig.subplots()
    drawn = 0
    any_positive = False
    for label, pts in curves.items():
        pts = list(pts)
        if not pts:
            continue
        xs = np.asarray([p[0] for p in pts], dtype=float)
        ys = _positive([p[1] for p in pts])
        any_positive |= bool(np.isfinite(ys).any())
        start = (averaging_starts or {}).get(label)
        text = f"{label} ({pts[-1][1]:.2e})"
        if start is not None and xs[0] <= start:
            # Flat while the average is empty (uniform): dotted up to the first point after the start.
            cut = int(np.searchsorted(xs, start, side="right"))
            (line,) = ax.plot(xs[: cut + 1], ys[: cut + 1], linestyle=":", linewidth=1.4)
            ax.plot(
                xs[cut:],
                ys[cut:],
                color=line.get_color(),
                marker="." if len(xs) < 60 else None,
                linewidth=1.4,
                markersize=4,
                label=f"{text}; averages after it. {start}, uniform before",
            )
            ax.axvline(start, color=line.get_color(), linestyle=":", linewidth=0.9, alpha=0.7)
        else:
            ax.plot(
                xs,
                ys,
                marker="." if len(xs) < 60 else None,
                linewidth=1.4,
                markersize=4,
                label=text,
            )
        drawn += 1
    ax.set_xscale("log")
    if any_positive:
        ax.set_yscale("log")
    ax.set_xlabel("iterations")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)
    if drawn:
        ax.legend(fontsize=7, loc="best", framealpha=0.8)
    fig.tight_layout()
    return fig
