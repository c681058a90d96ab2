"""The comm learning-curve figure says what its legend numbers are."""

from __future__ import annotations

from societas.marl.comm.plots import curves_figure

RUNS = {"none": [[(0, -20.0), (10, -13.0)], [(0, -21.0), (10, -14.0)]], "tarmac": [[(0, -20.0), (10, -8.0)]]}


def test_legend_gives_the_tables_figure_under_its_name():
    fig = curves_figure(
        RUNS,
        final={"none": (-13.58, 0.64), "tarmac": (-8.41, 0.25)},
        final_name="final training return (table)",
    )
    legend = fig.axes[0].get_legend()
    assert legend.get_title().get_text() == "final training return (table)"
    assert [t.get_text() for t in legend.get_texts()] == [
        "none: -13.58 ± 0.64 (2 seeds)",
        "tarmac: -8.41 ± 0.25 (1 seed)",
    ]


def test_without_the_tables_figures_the_legend_says_last_point():
    legend = curves_figure(RUNS).axes[0].get_legend()
    assert legend.get_title().get_text() == "last point"
    assert [t.get_text() for t in legend.get_texts()] == ["none: -13.50 (2 seeds)", "tarmac: -8.00 (1 seed)"]
