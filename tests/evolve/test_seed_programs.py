"""Multi-seed runs: the islands start from every built-in algorithm written as a program of the task."""

from __future__ import annotations

import pytest

from societas.evolve.config import parse_config
from societas.evolve.controller import Controller
from societas.evolve.evaluator import TaskError
from societas.evolve.executors import ProcessExecutor
from societas.evolve.task import load_seed_programs, load_task

TASK = load_task("cfr")


def test_all_names_every_seed_and_wrong_names_are_listed():
    seeds = load_seed_programs(TASK, ["all"])
    names = [n for n, _ in seeds]
    assert names == sorted(names) and {"cfr", "cfr_plus", "dcfr", "vad_cfr", "hs_pcfr_plus"} <= set(names)
    assert load_seed_programs(TASK, []) == []
    with pytest.raises(TaskError, match=r"no seed program\(s\) \['dcfr2'\]; it has: cfr, cfr_plus"):
        load_seed_programs(TASK, ["dcfr", "dcfr2"])


@pytest.mark.slow
def test_a_multi_seed_run_scores_every_seed_spreads_them_and_resumes_without_redoing(tmp_path):
    cfg = parse_config(
        {
            "max_iterations": 0,
            "random_seed": 1,
            "seed_programs": ["dcfr", "pcfr_plus", "vad_cfr"],
            "database": {"num_islands": 2},
            "evaluator": {
                "cascade_evaluation": False,
                "parallel_evaluations": 2,
                "task_settings": {"iterations": 40, "stage1_iterations": 10, "held_out_iterations": 20},
            },
            "validation": {"top_programs": 4},
        }
    )
    run = Controller(TASK, cfg, tmp_path / "r", executor=ProcessExecutor(2))
    try:
        run.run()
        programs = {p.iteration: p for p in run.store.programs()}
        chosen = run.chosen()
        records = dict(run.validator.records)
    finally:
        run.close()
    assert sorted(programs) == [-3, -2, -1, 0]
    assert [programs[i].mutation.get("seed_program") for i in (-1, -2, -3)] == [
        "dcfr",
        "pcfr_plus",
        "vad_cfr",
    ]
    assert [programs[i].island for i in (-1, -2, -3)] == [0, 1, 0]
    assert all(p.ok for p in programs.values())
    # Each seed program scores as its built-in: DCFR's is not CFR+'s, and the ranking is the solvers' own.
    from societas.marl.games import CFRSolver
    from societas.marl.games.algorithms import DCFR

    expected = -CFRSolver("leduc_poker", DCFR(), device="cpu").run(40).exploitability[0]
    assert programs[-1].metrics["neg_expl_leduc_poker"] == pytest.approx(expected, rel=1e-9)
    # All four are validated (the top 4 by training), and the run returns the best on validation.
    assert set(records) == {p.id for p in programs.values()}
    assert chosen.id == max(records.values(), key=lambda r: r.score).program_id
    # A resume evaluates nothing again: the extra seeds are stored.
    resumed = Controller.resume(tmp_path / "r", max_iterations=0, executor=ProcessExecutor(2))
    try:
        evaluated = []
        resumed._evaluate_seed = lambda *a, **k: evaluated.append(a)  # type: ignore[method-assign]
        resumed.run()
    finally:
        resumed.close()
    assert evaluated == []
