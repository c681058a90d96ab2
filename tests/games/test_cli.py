"""The games command line (``python -m societas.marl.games`` / ``python -m societas.marl games``)
and the CFR speed benchmark, run as a user would (subprocesses; some exits on bad input in this
process, through typer's runner)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from societas.marl.cli import app as marl_app
from societas.marl.cli_common import MULTI_OPTIONS, expand_multi_args
from societas.marl.games.cli import app as games_app
from societas.marl.games.cli import best_in_row

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


def _run(
    *args: str, module: tuple[str, ...] = ("societas.marl.games",), timeout: int = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _run_here(*args: str, module: tuple[str, ...] = ("societas.marl.games",)) -> subprocess.CompletedProcess:
    """The same command line in this process (typer's runner, the options expanded as ``main`` does):
    for exits on bad input, where a process of its own would only import torch again."""
    app = games_app if module == ("societas.marl.games",) else marl_app
    argv = expand_multi_args([*module[1:], *args], MULTI_OPTIONS)
    r = CliRunner().invoke(app, argv, prog_name=f"python -m {' '.join(module)}")
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return subprocess.CompletedProcess(argv, r.exit_code, r.stdout, r.stderr)


def _last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def test_solve_json_matches_openspiel_cfr():
    import pyspiel
    from open_spiel.python.algorithms import exploitability

    r = _run(
        "solve", "--game", "kuhn_poker", "--algo", "cfr", "--iterations", "50", "--json", "--device", "cpu"
    )
    assert r.returncode == 0, r.stderr
    out = _last_json(r.stdout)
    game = pyspiel.load_game("kuhn_poker")
    solver = pyspiel.CFRSolver(game)
    for _ in range(50):
        solver.evaluate_and_update_policy()
    ref = exploitability.exploitability(game, solver.average_policy())
    assert out["exploitability"] == pytest.approx(ref, abs=1e-9)
    assert out["nash_conv"] == pytest.approx(2 * ref, abs=1e-9)
    assert {
        "game",
        "algorithm",
        "iterations",
        "nash_conv",
        "exploitability",
        "wall_seconds",
        "solve_seconds",
        "device",
        "histories",
        "infosets",
    } <= set(out)
    assert (out["game"], out["algorithm"], out["iterations"], out["device"]) == (
        "kuhn_poker",
        "cfr",
        50,
        "cpu",
    )
    assert (out["histories"], out["infosets"]) == (58, 12)
    assert 0 < out["solve_seconds"] <= out["wall_seconds"]


def test_solve_vad_cfr_warm_start_follows_the_run_length():
    from societas.marl.games import CFRSolver, evaluate, load_game
    from societas.marl.games.algorithms import VADCFR

    r = _run(
        "solve",
        "--game",
        "kuhn_poker",
        "--algo",
        "vad-cfr",
        "--iterations",
        "200",
        "--json",
        "--device",
        "cpu",
    )
    assert r.returncode == 0, r.stderr
    got = _last_json(r.stdout)["exploitability"]
    tree = load_game("kuhn_poker", "cpu")
    # VAD-CFR averages nothing before its warm start; an empty average reads as uniform.
    uniform = evaluate(tree, tree.uniform_policy()).exploitability.item()
    solver = CFRSolver(tree, VADCFR(warmup_iterations=100), device="cpu")
    for _ in range(200):
        solver.step()
    expected = solver.evaluate().exploitability.item()
    assert expected < uniform / 10
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-12)


# the first two in a process of their own, one per entry point; the rest in this process
@pytest.mark.parametrize(
    "module,args,needle,run",
    [
        (
            ("societas.marl.games",),
            ["solve", "--game", "kuhn_poker", "--algo", "no-such-cfr"],
            "no-such-cfr",
            _run,
        ),
        (("societas.marl", "games"), ["solve", "--game", "kuhn_pokr", "--algo", "cfr"], "kuhn_pokr", _run),
        (
            ("societas.marl.games",),
            ["solve", "--game", "kuhn_poker(foo=1)", "--algo", "cfr", "--json"],
            "foo",
            _run_here,
        ),
        (
            ("societas.marl", "games"),
            ["table", "--games", "kuhn_poker", "--algos", "cfr", "bogus", "--iterations", "2"],
            "bogus",
            _run_here,
        ),
        (
            ("societas.marl.games",),
            ["table", "--games", "leduc_poker", "nope_game", "--iterations", "2"],
            "nope_game",
            _run_here,
        ),
    ],
)
def test_unknown_game_or_algorithm_exits_2(module, args, needle, run):
    r = run(*args, module=module)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) <= 3


def test_table_writes_markdown_json_and_plots(tmp_path):
    out = tmp_path / "tab"
    r = _run(
        "table",
        "--iterations",
        "20",
        "--games",
        "kuhn_poker",
        "--algos",
        "cfr",
        "cfr+",
        "--out",
        str(out),
        "--device",
        "cpu",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    head = _last_json(r.stdout)
    assert head["algorithms"] == ["cfr", "cfr+"] and head["games"] == ["kuhn_poker"]
    assert head["best"] == {"kuhn_poker": "cfr+"} and head["errors"] == []
    md = (out / "table.md").read_text()
    assert "| cfr | cfr+ |" in md and "`kuhn_poker`" in md and md.count("**") == 2
    data = json.loads((out / "table.json").read_text())
    res = data["games"][0]["results"]
    assert data["iterations"] == 20 and set(res) == {"cfr", "cfr+"}
    assert res["cfr+"]["exploitability"] == pytest.approx(head["exploitability"]["kuhn_poker"]["cfr+"])
    assert res["cfr"]["curve"][0][0] == 1 and res["cfr"]["curve"][-1][0] == 20
    assert (out / "curves_kuhn_poker.png").read_bytes()[:8] == PNG
    # the same run through the umbrella CLI, flags repeated instead of listed
    r2 = _run(
        "games",
        "table",
        "--iterations",
        "20",
        "--games",
        "kuhn_poker",
        "--algos",
        "cfr",
        "--algos",
        "cfr+",
        "--out",
        str(tmp_path / "tab2"),
        "--device",
        "cpu",
        "--json",
        module=("societas.marl",),
    )
    assert r2.returncode == 0, r2.stderr
    assert _last_json(r2.stdout)["exploitability"] == head["exploitability"]


def test_solve_plot_writes_png(tmp_path):
    png = tmp_path / "curve.png"
    r = _run(
        "solve",
        "--game",
        "kuhn_poker",
        "--algo",
        "cfr+",
        "--iterations",
        "40",
        "--plot",
        str(png),
        "--simultaneous",
        "--eval-every",
        "10",
        "--device",
        "cpu",
    )
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == PNG
    assert "simultaneous" in r.stdout and "exploitability" in r.stdout


def test_helpers():
    from societas.marl.cli_common import expand_multi_args
    from societas.marl.games.cli import game_slug
    from societas.marl.games.plots import log_checkpoints

    assert expand_multi_args(["table", "--algos", "cfr", "cfr+", "--iterations", "3"]) == [
        "table",
        "--algos",
        "cfr",
        "--algos",
        "cfr+",
        "--iterations",
        "3",
    ]
    assert expand_multi_args(["--games", "goofspiel(num_cards=4,imp_info=True)"]) == [
        "--games",
        "goofspiel(num_cards=4,imp_info=True)",
    ]
    assert game_slug("kuhn_poker(players=3)") == "kuhn_poker_players_3"
    pts = log_checkpoints(1000, 30)
    assert pts[0] == 1 and pts[-1] == 1000 and pts == sorted(set(pts)) and len(pts) <= 31
    assert log_checkpoints(3) == [1, 2, 3]


@pytest.mark.slow
def test_cfr_speed_benchmark_quick():
    r = subprocess.run(
        [sys.executable, "benchmarks/cfr_speed.py", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    head = _last_json(r.stdout)
    assert head["benchmark"] == "cfr_speed" and head["leduc_ours_it_s"] > 0
    assert head["leduc_nash_conv_diff_vs_cpp"] < 1e-9
    assert head["leduc_policy_diff_vs_cpp"] < 1e-9 and head["leduc_policy_diff_vs_python"] < 1e-9
    assert head["leduc_eval_diff"] < 1e-9 and head["batched_max_diff"] < 1e-9


def test_psro_command_json_and_errors(tmp_path):
    import pyspiel
    from open_spiel.python import policy as os_policy
    from open_spiel.python.algorithms import exploitability

    r = _run(
        "psro",
        "--game",
        "kuhn_poker",
        "--train",
        "nash",
        "--iterations",
        "8",
        "--plot",
        str(tmp_path / "psro.png"),
        "--json",
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    # the curve starts at the uniform policy, whose exploitability OpenSpiel computes
    game = pyspiel.load_game("kuhn_poker")
    uniform = exploitability.exploitability(game, os_policy.UniformRandomPolicy(game))
    assert out["curve"][0] == pytest.approx(uniform, abs=1e-12)
    assert out["exploitability"] < 1e-3 < uniform
    assert (tmp_path / "psro.png").stat().st_size > 0
    bad = _run("psro", "--game", "kuhn_poker", "--train", "bogus")
    assert bad.returncode == 2 and "bogus" in bad.stderr and "Traceback" not in bad.stderr
    bad = _run("psro", "--game", "kuhn_poker", "--br-ties", "random")
    assert bad.returncode == 2 and "--br-ties: unknown rule 'random'" in bad.stderr


def test_best_per_game_counts_machine_precision_results_as_ties():
    # both below 1e-12: a tie; 4.8e-12 is not at machine precision, so it is not
    assert best_in_row({"hs-pcfr+": 7.856e-16, "vad-cfr": 1.129e-16, "dpcfr+": 4.756e-12}) == {
        "hs-pcfr+",
        "vad-cfr",
    }
    # the best above 1e-12 wins alone; a smaller one below 1e-12 would not tie with a larger one above
    assert best_in_row({"dcfr": 6.478e-05, "vad-cfr": 8.196e-05}) == {"dcfr"}
    assert best_in_row({"hs-pcfr+": 3.469e-17, "vad-cfr": 1.198e-12}) == {"hs-pcfr+"}
    assert best_in_row({"a": None, "b": 2.0, "c": 2.0}) == {"b", "c"}
    assert best_in_row({"a": None}) == set()
