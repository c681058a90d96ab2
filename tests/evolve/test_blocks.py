"""The building-block mutation: the library, the markers, and the CFR task's blocks as real CFR variants."""

from __future__ import annotations

import importlib.util
import random

import pytest

from societas.evolve.blocks import (
    BlockError,
    BlockLibrary,
    insert_block,
    mutate_blocks,
    present_blocks,
    remove_block,
)
from societas.evolve.config import parse_config
from societas.evolve.mutation import MutationRequest, Mutator, validate_child
from societas.evolve.program import Program, extract_evolve_blocks, frozen_parts_equal
from societas.evolve.task import load_task

TASK = load_task("cfr")
LIBRARY = BlockLibrary.load(TASK.blocks_path)


def _only_blocks_changed(parent: str, child: str) -> None:
    validate_child(parent, child, 100_000)
    assert frozen_parts_equal(parent, child)
    assert extract_evolve_blocks(parent) != extract_evolve_blocks(child)


def _algorithm(code: str, tmp_path, horizon: int):
    path = tmp_path / f"program_{abs(hash(code))}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_algorithm(horizon)


def _with(names: list[str], keep_plus: bool = True, code: str | None = None) -> str:
    code = TASK.initial_program if code is None else code
    if not keep_plus:
        (plus,) = [b for b in present_blocks(code) if b.name == "rm-plus"]
        code = remove_block(code, plus)
    for name in names:
        code = insert_block(code, LIBRARY.by_name[name])
    return code


def test_the_seed_holds_regret_matching_plus_as_its_one_block():
    (block,) = present_blocks(TASK.initial_program)
    assert (block.name, block.hook) == ("rm-plus", "RegretAccumulator.update")
    assert "regret = regret.clamp(min=0.0)" in TASK.initial_program[block.start : block.end]


def test_every_block_inserted_alone_is_valid_code_that_runs_as_a_cfr_variant(tmp_path):
    from societas.marl.games import CFRSolver

    assert len(LIBRARY) >= 12
    for block in LIBRARY.blocks:
        parent = TASK.initial_program
        if block.group == "floor":
            parent = _with([], keep_plus=False)
        child = insert_block(parent, block)
        _only_blocks_changed(parent, child)
        assert [b.name for b in present_blocks(child) if b.name == block.name] == [block.name]
        solver = CFRSolver("kuhn_poker(players=3)", _algorithm(child, tmp_path, 20), device="cpu")
        result = solver.run(20)
        policy = solver.average_policy()
        assert bool((policy >= 0).all()) and result.exploitability[0] > 0, block.name


def test_blocks_compose_into_the_published_algorithms(tmp_path):
    """Independent references: the built-in CFR, DCFR and PCFR+ (each checked against OpenSpiel elsewhere)."""
    from societas.marl.games import CFRSolver, get_algorithm

    cfr = _with([], keep_plus=False).replace("weight = t**1.0", "weight = t**0.0")
    dcfr = _with(["dcfr-discount", "discounted-average"], keep_plus=False)
    pcfr = _with(["optimism", "discounted-average"])
    for code, name in ((cfr, "cfr"), (dcfr, "dcfr"), (pcfr, "pcfr+")):
        for game in ("kuhn_poker(players=3)", "leduc_poker"):
            ours = CFRSolver(game, _algorithm(code, tmp_path, 60), device="cpu").run(60).exploitability[0]
            reference = CFRSolver(game, get_algorithm(name), device="cpu").run(60).exploitability[0]
            assert ours == pytest.approx(reference, rel=1e-9, abs=1e-13), (name, game)


def test_the_operator_inserts_replaces_and_removes_inside_the_evolve_blocks_only():
    parent = _with(["optimism", "discounted-average"])
    actions = set()
    for seed in range(60):
        child, detail = mutate_blocks(parent, random.Random(seed), LIBRARY)
        _only_blocks_changed(parent, child)
        actions.add(detail.split()[0])
        names = [b.name for b in present_blocks(child)]
        groups = [(LIBRARY.by_name[n].hook, LIBRARY.by_name[n].group) for n in names]
        assert len(groups) == len(set(groups)), detail  # at most one block per group and hook
    assert actions == {"insert", "replace", "remove"}


def test_replace_keeps_one_block_of_the_group():
    child = _with(["optimism"])
    (optimism,) = [b for b in present_blocks(child) if b.name == "optimism"]
    swapped = insert_block(remove_block(child, optimism), LIBRARY.by_name["decaying-optimism"])
    assert [b.name for b in present_blocks(swapped)] == ["rm-plus", "decaying-optimism"]
    assert "target = target + 1.0 * ctx.inst_regret" not in swapped


def test_a_missing_anchor_or_hook_is_named():
    broken = TASK.initial_program.replace("regret = old + new", "regret = new + old")
    with pytest.raises(BlockError, match="no statement starting with 'regret = old \\+ new'"):
        insert_block(broken, LIBRARY.by_name["positive-boost"])
    no_hook = TASK.initial_program.replace("class PolicyFromRegret:", "class Policy:")
    with pytest.raises(BlockError, match="no function PolicyFromRegret.update"):
        insert_block(no_hook, LIBRARY.by_name["optimism"])


def test_broken_markers_are_refused():
    unclosed = TASK.initial_program.replace("        # end rm-plus\n", "")
    with pytest.raises(BlockError, match="has no '# end rm-plus' line"):
        present_blocks(unclosed)
    wrong = TASK.initial_program.replace("# end rm-plus", "# end floor")
    with pytest.raises(BlockError, match="closes no open block"):
        present_blocks(wrong)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"blocks": []}, "at least one block"),
        (
            {"blocks": [{"name": "a", "hook": "H.f", "group": "g", "before": "return"}]},
            "non-empty string 'code'",
        ),
        (
            {"blocks": [{"name": "a b", "hook": "H.f", "group": "g", "before": "return", "code": "x = 1"}]},
            "a name",
        ),
        (
            {"blocks": [{"name": "a", "hook": "H.f", "group": "g", "before": "return", "code": "x = ("}]},
            "does not parse",
        ),
        (
            {
                "blocks": [
                    {"name": "a", "hook": "H.f", "group": "g", "before": "return", "code": "x", "when": 1}
                ]
            },
            "unknown key",
        ),
        (
            {"blocks": [{"name": "a", "hook": "H.f", "group": "g", "before": "return", "code": "x = 1"}] * 2},
            "two building blocks are named 'a'",
        ),
        ([1, 2], "a 'blocks' list"),
    ],
)
def test_bad_libraries_say_what_is_wrong(data, message):
    with pytest.raises(BlockError, match=message):
        BlockLibrary.from_data(data)


def test_the_mutator_makes_block_children_and_needs_a_library():
    cfg = parse_config({"mutation": {"weights": {"blocks": 1.0}}})
    with pytest.raises(ValueError, match="no building-block library"):
        Mutator(cfg, None)
    parent = Program(
        id="p", code=TASK.initial_program, iteration=0, fitness=-1.0, metrics={"combined_score": -1.0}
    )
    mutator = Mutator(cfg, None, LIBRARY)
    (result,) = mutator.make([MutationRequest(1, "blocks", parent, [], seed=3)])
    assert result.failure is None and result.info["kind"] == "blocks"
    assert result.info["detail"].split()[0] in {"insert", "replace", "remove"}
    _only_blocks_changed(TASK.initial_program, result.code)


def test_compound_block_children_carry_several_edits_and_stay_valid(tmp_path):
    cfg = parse_config({"mutation": {"weights": {"blocks": 1.0}, "block_edits": 3}})
    mutator = Mutator(cfg, None, LIBRARY)
    parent = Program(
        id="p", code=TASK.initial_program, iteration=0, fitness=-1.0, metrics={"combined_score": -1.0}
    )
    requests = [MutationRequest(i, "blocks", parent, [], seed=100 + i) for i in range(1, 41)]
    counts = []
    for result in mutator.make(requests):
        assert result.failure is None
        _only_blocks_changed(TASK.initial_program, result.code)
        edits = result.info["detail"].split("; ")
        assert all(e.split()[0] in {"insert", "replace", "remove"} for e in edits)
        counts.append(len(edits))
        present = {b.name for b in present_blocks(result.code)}
        for edit in edits:  # what an edit added is in the child unless a later edit took it out
            words = edit.split()
            added = words[1] if words[0] == "insert" else words[3] if words[0] == "replace" else None
            later = " ".join(edits[edits.index(edit) + 1 :])
            if added is not None and added not in later:
                assert added in present
        algorithm = _algorithm(result.code, tmp_path, 20)
        assert algorithm.name == "evolved"
    assert set(counts) == {1, 2, 3}
