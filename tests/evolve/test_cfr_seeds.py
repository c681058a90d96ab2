"""The CFR task's seed programs: every built-in CFR variant written as building blocks in the seed's form."""

from __future__ import annotations

import importlib.util
from functools import cache

import pytest
import torch

from societas.evolve.blocks import BlockLibrary, present_blocks
from societas.evolve.mutation import validate_child
from societas.evolve.program import extract_evolve_blocks, frozen_parts_equal
from societas.evolve.task import load_task
from societas.marl.games import CFRSolver, load_game
from societas.marl.games.algorithms import (
    CFR,
    DCFR,
    LCFR,
    VADCFR,
    CFRPlus,
    DPCFRPlus,
    HSPCFRPlus,
    PCFRPlus,
)
from societas.marl.games.hooks import HookContext

TASK = load_task("cfr")
LIBRARY = BlockLibrary.load(TASK.blocks_path)
SEEDS = TASK.directory / "seeds"
ITERATIONS = 60
GAMES = ("kuhn_poker(players=3)", "leduc_poker")

# seed file -> the built-in it must reproduce, given the horizon as the evaluator's BASELINES do
# (HS-PCFR+ schedules over T = horizon, VAD-CFR averages after T // 2 iterations)
BUILT_INS = {
    "cfr": lambda horizon: CFR(),
    "cfr_plus": lambda horizon: CFRPlus(),
    "lcfr": lambda horizon: LCFR(),
    "dcfr": lambda horizon: DCFR(),
    "pcfr_plus": lambda horizon: PCFRPlus(),
    "dpcfr_plus": lambda horizon: DPCFRPlus(),
    "hs_pcfr_plus": lambda horizon: HSPCFRPlus(total_iterations=horizon),
    "vad_cfr": lambda horizon: VADCFR(warmup_iterations=horizon // 2),
}
# the blocks each seed is made of, in program order
BLOCKS = {
    "cfr": [],
    "cfr_plus": ["rm-plus"],
    "lcfr": ["dcfr-discount"],
    "dcfr": ["dcfr-discount"],
    "pcfr_plus": ["rm-plus", "optimism", "discounted-average"],
    "dpcfr_plus": ["pdcfr-discount", "rm-plus", "discounted-prediction", "discounted-average"],
    "hs_pcfr_plus": ["rm-plus", "optimism", "gamma-schedule"],
    "vad_cfr": [
        "volatility-discount",
        "positive-boost",
        "regret-floor",
        "volatility-prediction",
        "policy-power",
        "volatility-gamma",
        "hard-warm-start",
        "magnitude-weighting",
    ],
}


def _source(name: str) -> str:
    return (SEEDS / f"{name}.py").read_text()


def _build(name: str, horizon: int):
    spec = importlib.util.spec_from_file_location(f"cfr_seed_{name}", SEEDS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_algorithm(horizon)


@cache
def _tree(game: str):
    return load_game(game, "cpu")


def _exploitability(algorithm, game: str) -> float:
    return float(CFRSolver(_tree(game), algorithm, device="cpu").run(ITERATIONS).exploitability[0])


def test_there_is_one_seed_per_built_in_and_nothing_else():
    assert sorted(
        p.name for p in SEEDS.iterdir() if not p.name.startswith(".") and p.name != "__pycache__"
    ) == (sorted(f"{name}.py" for name in BUILT_INS))


@pytest.mark.parametrize("name", sorted(BUILT_INS))
def test_a_seed_is_a_valid_child_of_the_initial_program_made_of_library_blocks(name):
    code = _source(name)
    validate_child(TASK.initial_program, code, 100_000)
    assert frozen_parts_equal(TASK.initial_program, code)
    present = present_blocks(code)
    assert [b.name for b in present] == BLOCKS[name]
    for block in present:
        known = LIBRARY.by_name[block.name]
        assert block.hook == known.hook, block.name
    # at most one block of a group per hook, as the blocks mutation keeps it
    groups = [(LIBRARY.by_name[b.name].hook, LIBRARY.by_name[b.name].group) for b in present]
    assert len(groups) == len(set(groups))
    # every seed differs from every other one inside the evolve block
    others = {extract_evolve_blocks(_source(other))[0] for other in BUILT_INS if other != name}
    assert extract_evolve_blocks(code)[0] not in others


@pytest.mark.parametrize("game", GAMES)
@pytest.mark.parametrize("name", sorted(BUILT_INS))
def test_a_seed_runs_exactly_as_its_built_in(name, game):
    ours = _exploitability(_build(name, ITERATIONS), game)
    reference = _exploitability(BUILT_INS[name](ITERATIONS), game)
    assert ours == pytest.approx(reference, rel=1e-9, abs=1e-13)


@pytest.mark.parametrize("name", sorted(BUILT_INS))
def test_a_seeds_hooks_match_the_built_ins_on_large_random_regrets(name):
    """Hook by hook, with padding slots and regrets large enough for VAD-CFR's floor at -20 to bind."""
    horizon, legal = 12, torch.tensor([[True, True, True], [True, True, False], [True, False, False]] * 2)
    generator = torch.Generator().manual_seed(7)
    hooks = []
    for algorithm in (_build(name, horizon), BUILT_INS[name](horizon)):
        hooks.append([algorithm.regret(), algorithm.policy(), algorithm.average()])
    zeros = torch.zeros(2, 6, 3, dtype=torch.float64)
    cum_regret, cum_policy = [zeros.clone(), zeros.clone()], [zeros.clone(), zeros.clone()]
    uniform = (legal / legal.sum(-1, keepdim=True)).to(torch.float64).expand(2, 6, 3)
    policy = [uniform, uniform]
    floored = False
    for t in range(1, horizon + 1):
        inst = 30.0 * torch.randn(2, 6, 3, generator=generator, dtype=torch.float64) * legal
        reach = torch.rand(2, 6, generator=generator, dtype=torch.float64)
        ctx = HookContext(0, t, legal, legal.sum(-1), inst, 2)
        for i, (regret, current, average) in enumerate(hooks):
            cum_policy[i] = average.update(cum_policy[i], policy[i], reach, reach, ctx)
            cum_regret[i] = regret.update(cum_regret[i], inst, ctx)
            policy[i] = current.update(cum_regret[i], policy[i], ctx) * legal
        for ours, reference in (cum_regret, policy, cum_policy):
            torch.testing.assert_close(ours, reference, rtol=1e-12, atol=1e-13)
        floored |= bool((cum_regret[1] == -20.0).any())
    assert floored == (name == "vad_cfr")


def test_the_seeds_are_different_algorithms():
    """Exactness above means something only if the built-ins (and so the seeds) differ from each other."""
    values = [_exploitability(BUILT_INS[name](ITERATIONS), "leduc_poker") for name in sorted(BUILT_INS)]
    assert len({round(v, 12) for v in values}) == len(values)
