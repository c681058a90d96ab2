"""The exploitability curves explain an algorithm's flat start (VAD-CFR's warm start)."""

from __future__ import annotations

from societas.marl.games.cli import averaging_start
from societas.marl.games.plots import curves_figure

CURVES = {
    "cfr": [(1, 1.0), (10, 0.3), (100, 0.05), (1000, 0.01)],
    "vad-cfr": [(1, 4.0), (10, 4.0), (100, 4.0), (500, 4.0), (600, 0.01), (1000, 0.001)],
}


def test_a_warm_start_is_drawn_dotted_marked_and_named():
    assert averaging_start("vad-cfr", 1000) == 500 and averaging_start("cfr", 1000) is None
    fig = curves_figure(CURVES, averaging_starts={"vad-cfr": 500})
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["cfr (1.00e-02)", "vad-cfr (1.00e-03); averages after it. 500, uniform before"]
    dotted = [ln for ln in ax.get_lines() if ln.get_linestyle() == ":"]
    flat = [ln for ln in dotted if len(ln.get_xdata()) > 2]  # the curve before the start
    assert len(flat) == 1 and list(flat[0].get_xdata()) == [1, 10, 100, 500, 600]
    assert any(list(ln.get_xdata()) == [500, 500] for ln in dotted)  # the vertical marker


def test_without_a_warm_start_every_curve_is_solid():
    ax = curves_figure(CURVES).axes[0]
    assert all(ln.get_linestyle() == "-" for ln in ax.get_lines())
