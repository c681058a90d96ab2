"""societas.marl.progress: a rich bar on a terminal, plain ProgressLines otherwise, same interface."""

from __future__ import annotations

import io
import re
import time

from rich.progress import Progress

from societas.marl import progress as marl_progress
from societas.marl.progress import ProgressLog, progress_bar


def test_without_a_terminal_the_bar_is_plain_lines(monkeypatch):
    monkeypatch.setattr(marl_progress, "stderr_is_terminal", lambda: False)
    monkeypatch.setenv("SOCIETAS_PROGRESS_EVERY_S", "7")
    bar = progress_bar(field="info")
    assert isinstance(bar, ProgressLog) and bar.every_s == 7.0
    monkeypatch.setattr(marl_progress, "stderr_is_terminal", lambda: True)
    assert isinstance(progress_bar(field="info"), Progress)
    # disabled stays silent whatever the terminal
    monkeypatch.setattr(marl_progress, "stderr_is_terminal", lambda: False)
    assert isinstance(progress_bar(False), Progress)


def test_progress_log_writes_lines_every_interval_and_the_final_state(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    with ProgressLog(field="info", every_s=0.01) as bar:
        task = bar.add_task("mappo+tarmac", total=3, info="")
        for k in range(3):
            time.sleep(0.02)
            bar.update(task, advance=1, info=f"return {k}.5")
        other = bar.add_task("loading", total=None)
        bar.remove_task(other)
        time.sleep(0.02)
    lines = err.getvalue().splitlines()
    assert [re.sub(r" \(\d+:\d\d\)$", "", ln) for ln in lines] == [
        "mappo+tarmac: 1/3, latest return 0.5",
        "mappo+tarmac: 2/3, latest return 1.5",
        "mappo+tarmac: 3/3, latest return 2.5",
        "mappo+tarmac: 3/3, latest return 2.5",  # the final line when the run ends
    ]


def test_progress_log_of_a_quick_run_writes_nothing(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    bar = ProgressLog(every_s=60)
    bar.start()
    task = bar.add_task("cfr", total=10)
    for _ in range(10):
        bar.advance(task)
    bar.update(task, completed=4, total=20, description="cfr+")
    bar.stop()
    assert err.getvalue() == ""
