"""The library's plotting functions write PNGs in a fresh interpreter with no display and no
backend chosen, and leave pyplot (and so the backend choice) to the program that calls them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = r"""
import json, sys
from pathlib import Path

from societas.evolve.program import Program
from societas.evolve.report import plot_fitness
from societas.marl.comm.plots import plot_curves as comm_curves, plot_learning_curve
from societas.marl.games.plots import plot_curves as game_curves
from societas.marl.llm.cli import plot_seeds
from societas.marl.llm.loop import plot_rewards

out = Path(sys.argv[1])
hist = [{"kind": "eval", "step": 0, "reward": 0.0}, {"kind": "train", "step": 1, "reward": 0.5},
        {"kind": "eval", "step": 1, "reward": 1.0}]
game_curves({"cfr": [(1, 1.0), (10, 0.1)]}, out / "games.png")
comm_curves({"commnet": [[(0, 0.0), (10, 1.0)], [(0, 0.5), (10, 1.5)]]}, out / "comm.png")
plot_learning_curve([{"env_steps": s, "mean_episode_return": s / 10} for s in range(5)], out / "curve.png")
plot_rewards(hist, out / "reward.png", "t")
plot_seeds({0: hist, 1: hist}, out / "heldout.png", "t")
plot_fitness([Program(id=str(i), code="", iteration=i, fitness=float(i)) for i in range(3)], out / "fitness.png")
print(json.dumps({"pyplot": "matplotlib.pyplot" in sys.modules}))
"""


def test_library_plots_render_headless_without_pyplot(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MPLCONFIGDIR": str(tmp_path / "mpl")}
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"pyplot": False}
    names = ("games", "comm", "curve", "reward", "heldout", "fitness")
    for name in names:
        data = (tmp_path / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, name
