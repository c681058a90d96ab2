"""SQLite persistence and the MAP-Elites islands."""

from __future__ import annotations

import random
import sqlite3

import pytest

from societas.evolve.config import DatabaseConfig
from societas.evolve.database import Population, ProgramStore, code_difference, derive_rng
from societas.evolve.program import Program


def prog(iteration, fitness, code=None, island=0, status="ok"):
    code = code if code is not None else f"x = {iteration}\n" + "# pad\n" * iteration
    return Program(
        id=f"p{iteration}",
        code=code,
        iteration=iteration,
        island=island,
        metrics={"combined_score": fitness} if fitness is not None else {},
        fitness=fitness,
        status=status,
    )


def test_store_commits_each_program_in_wal_mode_and_rejects_a_second_program_per_iteration(tmp_path):
    store = ProgramStore(tmp_path / "p.db")
    store.add(prog(0, 0.5))
    store.add(prog(1, None, status="failed"))
    # Another connection sees both rows immediately: each add is its own committed transaction.
    other = sqlite3.connect(tmp_path / "p.db")
    assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert other.execute("SELECT COUNT(*) FROM programs").fetchone()[0] == 2
    with pytest.raises(ValueError, match="iteration 1 .* already stored"):
        store.add(prog(1, 0.9))
    assert [p.iteration for p in store.programs()] == [0, 1]
    assert store.get("p1").status == "failed"
    store.set_meta("seed", 3)
    store.close()
    assert ProgramStore(tmp_path / "p.db").get_meta("seed") == 3


def test_grid_keeps_the_fittest_program_per_cell_and_separates_cells():
    cfg = DatabaseConfig(
        num_islands=1,
        feature_dimensions=["complexity"],
        feature_bins=4,
        feature_ranges={"complexity": (0, 400)},
    )
    pop = Population(cfg)
    pop.add(prog(0, 0.1, code="a" * 10))
    pop.add(prog(1, 0.3, code="b" * 20))  # same cell (bin 0) and fitter: replaces
    pop.add(prog(2, 0.2, code="c" * 30))  # same cell, weaker: stays out of the grid
    pop.add(prog(3, 0.05, code="d" * 350))  # another cell
    grid = pop.islands[0].grid
    assert grid == {(0,): "p1", (3,): "p3"}
    assert pop.best().id == "p1"


def test_diversity_feature_measures_difference_to_elites():
    assert code_difference("a = 1", "a = 1") == 0.0
    assert 0 < code_difference("a = 1 + b", "a = 2 + b") < code_difference("a = 1 + b", "while q: pass")


def test_ring_migration_moves_the_best_programs_to_the_next_island():
    cfg = DatabaseConfig(
        num_islands=3, migration_interval=4, migration_rate=0.5, feature_dimensions=["complexity"]
    )
    pop = Population(cfg)
    pop.add(prog(0, 0.0))
    pop.add(prog(1, 0.9, island=0))
    pop.add(prog(2, 0.1, island=1))
    pop.add(prog(3, 0.2, island=2))
    assert "p1" not in pop.islands[1].members
    pop.add(prog(4, 0.3, island=1))  # iteration 4: migration is due
    assert pop.migrations == 1
    assert "p1" in pop.islands[1].members  # island 0's best went to island 1
    assert "p4" in pop.islands[2].members  # island 1's best went to island 2
    assert "p3" in pop.islands[0].members  # and the ring closes


def test_archive_and_population_are_bounded():
    cfg = DatabaseConfig(
        num_islands=1, archive_size=3, population_size=4, feature_dimensions=["complexity"], feature_bins=1
    )
    pop = Population(cfg)
    for i in range(10):
        pop.add(prog(i, i / 10))
    assert pop.archive == ["p9", "p8", "p7"]
    assert len(pop.islands[0].members) == 4
    assert "p9" in pop.islands[0].members


def test_selection_ratios_pick_from_archive_island_or_anywhere():
    base = {"num_islands": 2, "archive_size": 1, "feature_dimensions": ["complexity"]}
    programs = [prog(0, 0.0), prog(1, 0.9, island=0), prog(2, 0.5, island=1), prog(3, 0.4, island=1)]

    def build(**ratios):
        pop = Population(DatabaseConfig(**base, **ratios))
        for p in programs:
            pop.add(p)
        return pop

    exploit = build(exploitation_ratio=1.0, exploration_ratio=0.0)
    assert {exploit.sample(1, random.Random(s)).parent.id for s in range(20)} == {"p1"}
    explore = build(exploitation_ratio=0.0, exploration_ratio=1.0)
    picks = {explore.sample(1, random.Random(s)).parent.id for s in range(40)}
    assert picks == {"p0", "p2", "p3"}  # island 1's members only
    anywhere = build(exploitation_ratio=0.0, exploration_ratio=0.0)
    assert {anywhere.sample(1, random.Random(s)).parent.id for s in range(60)} == {"p0", "p1", "p2", "p3"}
    sel = explore.sample(1, random.Random(0), num_top=2, num_diverse=0)
    assert sel.strategy == "exploration" and sel.parent.id not in [p.id for p in sel.inspirations]
    assert len(sel.inspirations) == 2


def test_population_rebuilt_from_the_same_programs_is_identical():
    cfg = DatabaseConfig(num_islands=2, migration_interval=3)
    rng = random.Random(1)
    programs = [prog(0, 0.0)] + [
        prog(i, rng.random(), code=f"y = {i}\n" * (i % 5 + 1), island=i % 2) for i in range(1, 30)
    ]
    a, b = Population(cfg), Population(cfg)
    for p in programs:
        a.add(p)
        b.add(p)
    assert [(i.members, i.grid) for i in a.islands] == [(i.members, i.grid) for i in b.islands]
    sa, sb = a.sample(1, derive_rng(5, 7)), b.sample(1, derive_rng(5, 7))
    assert sa.parent.id == sb.parent.id and [p.id for p in sa.inspirations] == [p.id for p in sb.inspirations]
    assert derive_rng(5, 7).random() != derive_rng(5, 8).random()
