"""Game solvers on the device: every CFR variant under both schedules and in
batches, exact evaluation and PSRO give bitwise the CPU's numbers."""

from __future__ import annotations

import pytest
import torch

from societas.marl.games import CFRSolver, algorithm_names, evaluate, load_game, run_psro
from tests.cuda_emulation import emulated_cuda

ITERATIONS = 7  # batches of 3 cut at the evaluation after 4 and a last batch of 1; the first builds the plans


# two-player zero-sum (the one-sweep plan that carries one player's values) and three-player
@pytest.mark.parametrize("game", ["leduc_poker", "kuhn_poker(players=3)"])
def test_every_cfr_variant_gives_on_the_device_what_it_gives_on_the_cpu(game):
    cpu_tree = load_game(game, "cpu")
    with emulated_cuda():
        device_tree = CFRSolver(game, "cfr").tree  # a game name: the solver builds it on the device
    assert device_tree.device.type == "cuda"
    for algo in algorithm_names():
        for alternating in (True, False):
            for batch in (1, 3):
                ref = CFRSolver(cpu_tree, algo, batch=batch, alternating=alternating)
                ref_result = ref.run(ITERATIONS, eval_every=4)
                with emulated_cuda():
                    solver = CFRSolver(device_tree, algo, batch=batch, alternating=alternating)
                    assert solver.tree.device.type == "cuda"
                    result = solver.run(ITERATIONS, eval_every=4)
                    current = solver.current_policy().cpu()
                case = (algo, alternating, batch)
                assert torch.equal(result.average_policy, ref_result.average_policy), case
                assert torch.equal(current, ref.current_policy()), case
                assert result.exploitability == ref_result.exploitability, case
                assert result.curve == ref_result.curve, case


def test_exact_evaluation_on_the_device_equals_the_cpu():
    game = "liars_dice(numdice=1)"
    cpu_tree = load_game(game, "cpu")
    ref_solver = CFRSolver(cpu_tree, "cfr")
    ref_solver.run(3)
    policy = ref_solver.average_policy()
    ref = evaluate(cpu_tree, policy)
    with emulated_cuda():
        tree = load_game(game, "cuda")
        ev = evaluate(tree, policy.to("cuda"))
        got = {k: getattr(ev, k).cpu() for k in ("nash_conv", "exploitability")}
    assert torch.equal(got["nash_conv"], ref.nash_conv) and torch.equal(
        got["exploitability"], ref.exploitability
    )


# the meta-solvers work on the meta-game's small payoff tables; the oracle and payoffs on the device
@pytest.mark.parametrize("meta_solver", ["uniform", "nash"])
def test_psro_on_the_device_equals_the_cpu(meta_solver):
    ref = run_psro("kuhn_poker", 4, meta_solver, device="cpu")
    with emulated_cuda():
        got = run_psro("kuhn_poker", 4, meta_solver, device="cuda")
    assert got.exploitability == ref.exploitability
    assert got.population_sizes == ref.population_sizes
