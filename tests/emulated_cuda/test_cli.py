"""The command lines with ``--device cuda`` (and the default ``auto``, which
picks the GPU when there is one): the same JSON results as with ``--device cpu``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from societas.marl.cli import app
from tests.cuda_emulation import emulated_cuda


def _json(args: list[str]) -> dict:
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    return json.loads(res.output.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "args,same",
    [
        (
            ["games", "solve", "--game", "leduc_poker", "--algo", "dcfr", "-n", "20", "--eval-every", "10"],
            None,
        ),
        (
            ["games", "psro", "--game", "kuhn_poker", "-n", "3", "--train", "nash"],
            ("exploitability", "nash_conv"),
        ),
    ],
    ids=["solve", "psro"],
)
def test_game_commands_on_the_device_print_the_cpu_results(args, same):
    ref = _json([*args, "--device", "cpu", "--json"])
    with emulated_cuda():
        got = _json([*args, "--device", "cuda", "--json"])
        auto = _json([*args, "--json"])  # auto: the device, here
    keys = same or tuple(k for k in ref if k != "device" and not k.endswith(("_s", "seconds", "time")))
    assert keys and {k: got[k] for k in keys} == {k: ref[k] for k in keys} == {k: auto[k] for k in keys}
    assert got["device"].startswith("cuda") and ref["device"] == "cpu"


def test_the_comm_trainer_on_the_device_prints_the_cpu_results(tmp_path):
    args = ["train", "comm", "--comm", "tarmac", "--steps", "512", "--num-envs", "16", "--eval-episodes", "4"]
    ref = _json([*args, "--out", str(tmp_path / "cpu"), "--device", "cpu", "--json"])
    with emulated_cuda():
        got = _json([*args, "--out", str(tmp_path / "cuda"), "--device", "cuda", "--json"])
    for key in ("final_return", "eval_return_mean", "eval_return_std", "messages_per_step", "env_steps"):
        assert got[key] == ref[key], key
