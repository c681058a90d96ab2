"""Several candidates in one sandbox (``evaluator.group_size``): the same outcomes as
one sandbox each, and no candidate can reach a sibling's evaluation."""

from __future__ import annotations

import os
import textwrap
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from societas.agents.sandbox import bwrap_status
from societas.evolve.config import EvaluatorConfig
from societas.evolve.evaluator import TaskEvaluator, WarmPool, plan_groups, run_evaluation, run_group

BWRAP = bwrap_status()
pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(not BWRAP.available, reason=f"bubblewrap unusable here: {BWRAP.reason}"),
]

# A cascade: stage 1 returns the program's "quick" value, stage 2 its "full" value.
EVALUATOR = """
import importlib.util, os

STATE = {"warmed": 0}

def warm_up(stages):
    STATE["warmed"] += 1
    STATE["stages"] = list(stages)

def _module(path):
    spec = importlib.util.spec_from_file_location("candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

def evaluate_stage1(program_path):
    return {"combined_score": float(_module(program_path).quick())}

def evaluate(program_path):
    value = _module(program_path).full()
    return {"combined_score": float(value), "warmed": float(STATE["warmed"])}

def evaluate_validation(program_path):
    return {"combined_score": 100.0 + _module(program_path).full(), "warmed": float(STATE["warmed"])}
"""


def make_task(tmp_path: Path) -> Path:
    task = tmp_path / f"task-{uuid.uuid4().hex[:6]}"
    task.mkdir()
    (task / "evaluator.py").write_text(textwrap.dedent(EVALUATOR))
    os.chmod(tmp_path, 0o755)
    os.chmod(task, 0o755)  # the sandboxed program runs as an unprivileged uid and must read it
    os.chmod(task / "evaluator.py", 0o644)
    return task / "evaluator.py"


def program(quick: str = "return 1.0", full: str = "return 2.0", prelude: str = "") -> str:
    return (
        "import os, sys, time, signal, json\n"
        + textwrap.dedent(prelude)
        + "# EVOLVE-BLOCK-START\ndef quick():\n"
        + textwrap.indent(textwrap.dedent(quick), "    ")
        + "\ndef full():\n"
        + textwrap.indent(textwrap.dedent(full), "    ")
        + "\n# EVOLVE-BLOCK-END\n"
    )


@pytest.fixture
def evaluator(tmp_path):
    config = EvaluatorConfig(timeout=4, memory_mb=512, cascade_thresholds=[0.5])
    return TaskEvaluator(make_task(tmp_path), config)


def test_a_group_gives_each_candidate_the_outcome_it_gets_alone(evaluator):
    codes = [
        program(full="return 3.0"),
        program(quick="return 0.1"),  # stopped by the cascade after stage 1
        program(full="raise ValueError('bad constant')"),
        program(full="return float('nan')"),  # invalid metrics
        program(full="os._exit(3)"),  # ends without a result
        program(full="print('hello'); print('to stderr', file=sys.stderr); return 5.0"),
    ]
    alone = [run_evaluation(evaluator.job(code)) for code in codes]
    together = run_group([evaluator.job(code) for code in codes])
    assert [o.status for o in together] == ["ok", "ok", "failed", "failed", "failed", "ok"]
    for a, g in zip(alone, together):
        assert g.status == a.status
        assert g.stages_run == a.stages_run
        assert g.failure == a.failure
        assert {k: v for k, v in g.metrics.items() if k != "warmed"} == {
            k: v for k, v in a.metrics.items() if k != "warmed"
        }
        assert g.sandbox == a.sandbox == "bwrap"
    # The evaluator was warmed up once for the whole group, with the stages it will run.
    assert together[0].metrics["warmed"] == 1.0
    assert "cascade" in together[1].artifacts
    assert "bad constant" in together[2].artifacts["evaluate_stderr"]
    assert "hello" in together[5].artifacts["evaluate_stdout"]
    assert "to stderr" in together[5].artifacts["evaluate_stderr"]


def test_a_candidate_past_its_deadline_is_killed_and_its_siblings_keep_their_time(evaluator):
    codes = [program(full="time.sleep(60)"), program(full="return 4.0")]
    first, second = run_group([evaluator.job(code) for code in codes])
    assert first.status == "failed" and "timeout after 4 s" in first.failure
    assert second.status == "ok" and second.metrics["combined_score"] == 4.0


def test_nothing_a_candidate_starts_outlives_it(evaluator):
    # The first candidate leaves a daemon that keeps rewriting every program file it
    # can find; the second counts the processes it can see besides itself and the
    # harness (pid 1 is the sandbox's init).
    daemon = """
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            root = os.path.dirname(os.getcwd())
            while True:
                for dirpath, _, names in os.walk(root):
                    for name in names:
                        if name == "program.py":
                            try:
                                open(os.path.join(dirpath, name), "w").write(
                                    "def quick():\\n    return 1e9\\ndef full():\\n    return 1e9\\n")
                            except OSError:
                                pass
                time.sleep(0.001)
        os._exit(0)
    time.sleep(0.3)
    return 1.0
    """
    census = """
    me, parent = os.getpid(), os.getppid()
    others = [p for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, me, parent)]
    return 10.0 + len(others)
    """
    outcomes = run_group([evaluator.job(program(full=daemon)), evaluator.job(program(full=census))])
    assert outcomes[0].metrics["combined_score"] == 1.0
    assert outcomes[1].status == "ok"
    assert outcomes[1].metrics["combined_score"] == 10.0


def test_a_candidate_cannot_change_the_evaluator_its_siblings_run_in(evaluator):
    patch = """
    import evaluator
    evaluator.evaluate = lambda path: {"combined_score": 1e9}
    evaluator.evaluate_stage1 = lambda path: {"combined_score": 1e9}
    return 1.0
    """
    outcomes = run_group([evaluator.job(program(full=patch)), evaluator.job(program(full="return 2.0"))])
    assert outcomes[0].metrics["combined_score"] == 1.0
    assert outcomes[1].metrics["combined_score"] == 2.0


def test_a_forged_group_result_does_not_replace_the_real_one(evaluator):
    # The candidate finds the harness's secret in its own memory (it is a fork of the
    # harness) and writes a result block for the whole group to the harness's stdout.
    forge = """
    harness = sys.modules["__main__"]
    records = [{"index": i, "results": [{"stage": "evaluate_stage1", "metrics": {"combined_score": 1e9}},
                {"stage": "evaluate", "metrics": {"combined_score": 1e9}}], "exit": 0, "seconds": 0.1}
               for i in range(3)]
    line = "\\n__EVOLVE_GROUP__" + harness._nonce + " " + json.dumps({"records": records}) + "\\n"
    wrote = 0
    for fd in ("/proc/%d/fd/1" % os.getppid(), "/proc/self/fd/1"):
        try:
            with open(fd, "w") as out:
                out.write(line)
                wrote += 1
        except OSError:
            pass
    return 1.0 + wrote
    """
    codes = [program(full=forge), program(full="return 2.0"), program(full="return 3.0")]
    outcomes = run_group([evaluator.job(code) for code in codes])
    assert outcomes[0].metrics["combined_score"] >= 2.0  # it did write the forgery somewhere
    assert [o.metrics["combined_score"] for o in outcomes[1:]] == [2.0, 3.0]


def test_a_candidate_that_kills_the_harness_sends_the_group_back_one_by_one(evaluator):
    kill = "os.kill(os.getppid(), signal.SIGKILL)\ntime.sleep(5)\nreturn 1.0"
    codes = [program(full="return 2.0"), program(full=kill), program(full="return 3.0")]
    outcomes = run_group([evaluator.job(code) for code in codes])
    assert outcomes[0].metrics["combined_score"] == 2.0
    assert outcomes[1].status == "failed"
    assert outcomes[2].metrics["combined_score"] == 3.0


def test_jobs_that_differ_in_more_than_their_code_are_refused(evaluator, tmp_path):
    other = TaskEvaluator(evaluator.path, EvaluatorConfig(timeout=9, memory_mb=512))
    with pytest.raises(ValueError, match="differ only in their code"):
        run_group([evaluator.job(program()), other.job(program())])


def test_groups_are_balanced_over_the_workers_and_never_mix_kinds(evaluator):
    other = TaskEvaluator(evaluator.path, EvaluatorConfig(timeout=9, memory_mb=512))
    jobs = [evaluator.job(program(full=f"return {i}.0")) for i in range(7)] + [other.job(program())] * 2
    groups = plan_groups(jobs, size=4, workers=2)
    assert sorted(i for g in groups for i in g) == list(range(9))
    assert [len(g) for g in groups] == [4, 3, 1, 1]  # the two odd jobs: one per worker
    assert all(all(i < 7 for i in g) or all(i >= 7 for i in g) for g in groups)
    assert [len(g) for g in plan_groups(jobs[:4], size=8, workers=2)] == [2, 2]
    assert [len(g) for g in plan_groups(jobs[:7], size=2, workers=2)] == [2, 2, 2, 1]
    assert [len(g) for g in plan_groups(jobs[:7] * 2, size=4, workers=2)] == [4, 4, 3, 3]
    assert [len(g) for g in plan_groups(jobs[:7] + jobs[:4], size=4, workers=2)] == [3, 3, 3, 2]
    with pytest.raises(ValueError, match="group size"):
        plan_groups(jobs, size=0, workers=2)


CFR_TASK = Path(__file__).resolve().parents[2] / "evolve" / "tasks" / "cfr"


def test_cfr_candidates_score_the_same_in_a_group_as_alone():
    # The CFR evaluator's warm_up() builds the game trees once in the harness; every
    # candidate then solves on the harness's copy (a hook that wrote into the tree
    # would change only its own process's copy).
    config = EvaluatorConfig(
        timeout=120,
        memory_mb=4096,
        cascade_thresholds=[-1.0],
        task_settings={"iterations": 60, "stage1_iterations": 20},
    )
    evaluator = TaskEvaluator(CFR_TASK / "evaluator.py", config)
    seeds = CFR_TASK / "seeds"
    vandal = (
        (CFR_TASK / "initial_program.py")
        .read_text()
        .replace(
            "        return regret\n",
            "        ctx.legal.zero_()  # writes into the shared game tree\n        return regret\n",
            1,
        )
    )
    codes = [
        (CFR_TASK / "initial_program.py").read_text(),
        vandal,
        (seeds / "dcfr.py").read_text(),
        (seeds / "vad_cfr.py").read_text(),
    ]
    alone = [run_evaluation(evaluator.job(code)) for code in codes]
    together = run_group([evaluator.job(code) for code in codes])
    for a, g in zip(alone, together):
        assert (a.status, a.failure) == (g.status, g.failure)
        assert a.metrics == g.metrics  # bit for bit
    assert together[0].status == together[2].status == together[3].status == "ok"
    assert together[2].metrics["combined_score"] != together[0].metrics["combined_score"]


def test_floods_of_output_and_closed_pipes_do_not_break_up_the_group(evaluator):
    flood = "sys.stdout.write('x' * 300000); sys.stderr.write('y' * 300000)\nreturn 6.0"
    # Deaf to its stage's alarm, with every pipe closed: only the harness's deadline ends it.
    silent = (
        "signal.signal(signal.SIGALRM, signal.SIG_IGN)\nfor fd in range(1, 20):\n    try:\n"
        "        os.close(fd)\n    except OSError:\n        pass\ntime.sleep(60)"
    )
    floods = [program(full=flood.replace("6.0", f"{v}.0")) for v in (7, 8, 9)]
    codes = [program(full=flood), program(full=silent), *floods]
    outcomes = run_group([evaluator.job(code) for code in codes])  # more than the default 64 kB of output
    assert outcomes[0].metrics["combined_score"] == 6.0
    assert [o.metrics["combined_score"] for o in outcomes[2:]] == [7.0, 8.0, 9.0]
    # warm_up() ran once, in the group's harness: nobody fell back to a sandbox of its own.
    assert outcomes[0].metrics["warmed"] == outcomes[2].metrics["warmed"] == 1.0
    assert outcomes[1].status == "failed" and "timeout after 13 s" in outcomes[1].failure
    assert outcomes[0].artifacts["evaluate_stdout"].endswith("x" * 100)


# --- sandboxes that stay up (WarmPool) ------------------------------------------------


def test_a_warm_pool_gives_the_outcomes_of_one_sandbox_each_and_stays_up_between_calls(evaluator):
    codes = [
        program(full="return 3.0"),
        program(quick="return 0.1"),
        program(full="raise ValueError('bad constant')"),
        program(full="os._exit(3)"),
        program(full="print('hello'); return 5.0"),
    ]
    alone = [run_evaluation(evaluator.job(code)) for code in codes]
    pool = WarmPool(workers=1, capacity=50)
    try:
        first = dict(pool.map_unordered([evaluator.job(code) for code in codes]))
        # Later calls reuse the sandbox: warm_up() ran once in it, and again only for new stages.
        again = dict(pool.map_unordered([evaluator.job(program(full="return 7.0"))]))
        single_stage = replace(
            evaluator.job(program(full="return 8.0")), stages=("evaluate_validation",), thresholds=()
        )
        other_stages = dict(pool.map_unordered([single_stage]))
    finally:
        pool.close()
    for index, a in enumerate(alone):
        g = first[index]
        assert (g.status, g.stages_run, g.failure, g.sandbox) == (a.status, a.stages_run, a.failure, "bwrap")
        assert {k: v for k, v in g.metrics.items() if k != "warmed"} == {
            k: v for k, v in a.metrics.items() if k != "warmed"
        }
    assert "hello" in first[4].artifacts["evaluate_stdout"]
    assert first[0].metrics["warmed"] == first[4].metrics["warmed"] == 1.0
    assert again[0].metrics == {"combined_score": 7.0, "warmed": 1.0}
    assert other_stages[0].metrics == {"combined_score": 108.0, "warmed": 2.0}
    assert pool.refused is None


def test_a_warm_pool_replaces_a_sandbox_after_its_capacity(evaluator):
    pool = WarmPool(workers=1, capacity=2)
    try:
        outcomes = dict(pool.map_unordered([evaluator.job(program(full=f"return {v}.0")) for v in range(5)]))
    finally:
        pool.close()
    assert [outcomes[i].metrics["combined_score"] for i in range(5)] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert [outcomes[i].metrics["warmed"] for i in range(5)] == [1.0] * 5  # a fresh harness every 2


def test_a_candidate_leaves_nothing_in_the_sandbox_for_the_next_one(evaluator):
    # The first candidate drops a module (and overwrites the task files it can see) in the
    # harness's working directory, on its import path; the next one tries to use it.
    plant = """
    root = os.path.dirname(os.getcwd())
    with open(os.path.join(root, "planted.py"), "w") as f:
        f.write("VALUE = 1e9\\n")
    for dirpath, _, names in os.walk(root):
        for name in names:
            if name.endswith(".py") and name != "main.py":
                try:
                    open(os.path.join(dirpath, name), "w").write("raise SystemExit(9)\\n")
                except OSError:
                    pass
    return 1.0
    """
    use = """
    try:
        import planted
    except ImportError:
        return 2.0
    return planted.VALUE
    """
    pool = WarmPool(workers=1, capacity=10)
    try:
        outcomes = dict(
            pool.map_unordered([evaluator.job(program(full=plant)), evaluator.job(program(full=use))])
        )
    finally:
        pool.close()
    assert outcomes[0].metrics["combined_score"] == 1.0
    assert outcomes[1].status == "ok" and outcomes[1].metrics["combined_score"] == 2.0


def test_a_candidate_that_kills_the_warm_harness_is_evaluated_alone_and_the_pool_goes_on(evaluator):
    kill = "os.kill(os.getppid(), signal.SIGKILL)\ntime.sleep(5)\nreturn 1.0"
    forge = """
    harness = sys.modules["__main__"]
    line = "\\n__EVOLVE_GROUP__" + harness._nonce + " " + json.dumps({"refused": "forged"}) + "\\n"
    for fd in ("/proc/%d/fd/1" % os.getppid(), "/proc/%d/fd/0" % os.getppid()):
        try:
            with open(fd, "w") as out:
                out.write(line)
        except OSError:
            pass
    return 3.0
    """
    codes = [program(full="return 2.0"), program(full=kill), program(full=forge), program(full="return 4.0")]
    pool = WarmPool(workers=1, capacity=10)
    try:
        outcomes = dict(pool.map_unordered([evaluator.job(code) for code in codes]))
    finally:
        pool.close()
    assert outcomes[0].metrics["combined_score"] == 2.0
    assert outcomes[1].status == "failed"  # alone, its parent is the sandbox's init: it sleeps past 4 s
    assert outcomes[2].metrics["combined_score"] == 3.0
    assert outcomes[3].metrics["combined_score"] == 4.0
    assert pool.refused is None  # the forged refusal reached nobody


def test_a_warm_pool_whose_harness_refuses_evaluates_every_job_alone(tmp_path):
    task = tmp_path / "broken"
    task.mkdir()
    (task / "evaluator.py").write_text("import does_not_exist\ndef evaluate(program_path):\n    return {}\n")
    os.chmod(tmp_path, 0o755)
    os.chmod(task, 0o755)
    broken = TaskEvaluator(task / "evaluator.py", EvaluatorConfig(timeout=4, memory_mb=512))
    pool = WarmPool(workers=2, capacity=10)
    try:
        outcomes = dict(pool.map_unordered([broken.job(program()) for _ in range(3)]))
    finally:
        pool.close()
    assert pool.refused is not None and "did not load" in pool.refused
    for outcome in outcomes.values():  # each one's own sandbox says why
        assert outcome.status == "failed" and "does_not_exist" in outcome.failure


def test_a_warm_pool_refuses_bad_sizes_and_closed_use(evaluator):
    with pytest.raises(ValueError, match="workers"):
        WarmPool(workers=0, capacity=1)
    with pytest.raises(ValueError, match="capacity"):
        WarmPool(workers=1, capacity=0)
    pool = WarmPool(workers=1, capacity=1)
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit(evaluator.job(program()))
