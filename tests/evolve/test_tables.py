"""The ``table`` operator: numeric tables of the evolve blocks grow, shrink, move a row at a time and
spread rows that coincide.

Every child is checked by running it (the programs here are the tests' own)
and comparing the array it returns with the parent's, computed by numpy
directly, not with what the operator says it did.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import numpy as np
import pytest
import scipy.optimize

from societas.evolve.config import MUTATION_KINDS, EvolveConfig, load_config, parse_config
from societas.evolve.controller import Controller
from societas.evolve.database import ProgramStore
from societas.evolve.mutation import (
    MutationRequest,
    Mutator,
    NotApplicable,
    table_child,
    table_sites,
)
from societas.evolve.program import Program, frozen_parts_equal
from societas.evolve.task import load_task


def returned(code: str, name: str = "build") -> np.ndarray:
    """What the program's function returns (test programs only: they are trusted)."""
    scope: dict = {}
    exec(compile(code, "<program>", "exec"), scope)
    return np.asarray(scope[name]())


def program(body: str) -> str:
    return "import numpy as np\n\n# EVOLVE-BLOCK-START\ndef build():\n" + body + "# EVOLVE-BLOCK-END\n"


def children(code: str, count: int = 60, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [table_child(code, rng, EvolveConfig())[:2] for _ in range(count)]


def spread_check(parent: np.ndarray, child: np.ndarray, detail: str) -> bool:
    """Whether ``detail`` is a ``spread`` move, after checking it is what it says: every row that repeats
    an earlier row of the parent is now a convex combination of the parent's different rows (found by
    non-negative least squares, weights summing to 1), and every other row is as it was."""
    if "repeated" not in detail:
        return False
    two_d = lambda a: np.atleast_2d(a.T).T.astype(float)  # noqa: E731
    parent2, child2 = two_d(parent), two_d(child)
    assert child2.shape == parent2.shape, detail
    distinct = np.unique(parent2, axis=0)
    for k, (old, new) in enumerate(zip(parent2, child2)):
        if not any(np.array_equal(old, earlier) for earlier in parent2[:k]):
            assert np.array_equal(old, new), (detail, k)
            continue
        # weights w >= 0 with distinct.T @ w = new and sum(w) = 1 (the sum row weighted up)
        system = np.vstack([distinct.T, 100.0 * np.ones(len(distinct))])
        _, residual = scipy.optimize.nnls(system, np.append(new, 100.0))
        assert residual < 1e-4 * (1 + np.abs(parent2).max()), (detail, k, new)
    return True


def smallest_triangle(points: np.ndarray) -> float:
    """The smallest area of a triangle of three of ``points`` (2-D), by the shoelace formula."""
    return min(
        abs((b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])) / 2
        for a, b, c in itertools.combinations(points, 3)
    )


def row_changes(parent: np.ndarray, child: np.ndarray) -> tuple[int, int]:
    """``(rows added or removed, rows changed in place)`` from the parent's table to the child's."""
    parent, child = np.atleast_2d(parent.T).T, np.atleast_2d(child.T).T
    if len(child) == len(parent):
        return 0, int(sum(not np.array_equal(a, b) for a, b in zip(parent, child)))
    if len(child) == len(parent) + 1:
        assert np.array_equal(child[:-1], parent), "an appended row goes at the end, the others stay"
        return 1, 0
    assert len(child) == len(parent) - 1, "one row at most leaves"
    kept = [i for i in range(len(parent)) if np.array_equal(np.delete(parent, i, axis=0), child)]
    assert kept, "the child is the parent with one row removed"
    return -1, 0


CONSTRUCTORS = {
    "zeros with a bound size": ("    n = 5\n    return np.zeros((n, 2))\n", np.zeros((5, 2))),
    "rows of ones": (
        "    d = 4\n    return np.array([np.ones(d), -1 * np.ones(d)]).astype(np.int64)\n",
        np.array([np.ones(4), -np.ones(4)]).astype(np.int64),
    ),
    "full with arithmetic": ("    return np.full((3, 2), 0.5 * 4 - 1) * 3\n", np.full((3, 2), 1.0)),
    "eye of float32": ("    return np.eye(3, dtype=np.float32)\n", np.eye(3, dtype=np.float32)),
    "linspace": ("    return np.linspace(0.0, 1.0, 7)\n", np.linspace(0.0, 1.0, 7)),
    "arange": ("    k = 2\n    return np.arange(1, 12, k)\n", np.arange(1, 12, 2)),
}


@pytest.mark.parametrize("name", sorted(CONSTRUCTORS))
def test_a_constructor_is_written_out_exactly_then_moved_by_one_row(name):
    """The written-out table holds the constructor's exact value (dtype included), and each child differs
    from the parent's array by one appended, one dropped or one moved row, nothing else."""
    body, expected = CONSTRUCTORS[name]
    code = program(body)
    (table,) = table_sites(code)
    assert table.constructor is not None
    assert np.array_equal(np.array(table.rows).reshape(expected.shape), expected)
    # the program's own arithmetic on the table (``* 3``) stays as it is, around the written-out table
    expected = returned(code)
    seen = set()
    for child, detail in children(code, 40):
        assert frozen_parts_equal(code, child)
        value = returned(child)
        assert value.dtype == expected.dtype, detail
        assert "np.zeros" not in child and "np.full" not in child and "np.linspace" not in child
        added, moved = row_changes(expected, value)
        assert abs(added) + moved == 1 or (moved == 0 and added == 0 and "moved every entry" in detail), (
            detail
        )
        seen.add({1: "append", -1: "drop", 0: "row"}[added])
    assert seen == ({"append", "drop"} if expected.ndim == 1 else {"append", "drop", "row"})


def test_a_reflected_copy_flips_signs_only_and_an_integer_table_stays_integer():
    code = program("    return np.array([[1, 2, -3], [0, 5, 6]])\n")
    reflected = 0
    for child, detail in children(code, 80):
        value = returned(child)
        assert value.dtype.kind == "i", "integers move to integers"
        if "sign(s) flipped" in detail:
            source = int(detail.split("copy of row ")[1].split(",")[0])
            original, copy = np.array([[1, 2, -3], [0, 5, 6]])[source], value[-1]
            assert np.array_equal(np.abs(copy), np.abs(original)) and not np.array_equal(copy, original)
            assert copy[original == 0].tolist() == original[original == 0].tolist()
            reflected += 1
    assert reflected >= 10


def test_entries_a_move_leaves_alone_keep_their_source_text_comments_and_layout():
    code = program(
        "    table = [\n        [1e-3, 0x10],  # first\n        [2.5, 7]  # second, no comma\n    ]\n"
        "    return np.array(table)\n"
    )
    parent_lines = code.splitlines()
    moves = set()
    for child, detail in children(code, 40, seed=3):
        lines = child.splitlines()
        if "every entry of row" in detail:  # one line changes, its comment stays
            changed = [(a, b) for a, b in zip(parent_lines, lines) if a != b]
            assert len(lines) == len(parent_lines) and len(changed) == 1, detail
            assert changed[0][1].endswith(changed[0][0][changed[0][0].index("]") + 1 :]), detail
            moves.add("row")
        elif "dropped row" in detail:  # the row's line goes, the other keeps its text and comment
            gone = int(detail.split("dropped row ")[1].split(" ")[0])
            assert lines == parent_lines[: 5 + gone] + parent_lines[6 + gone :], detail
            moves.add("drop")
        else:  # a new line after the last row, which gets the comma it lacked
            assert (
                lines[:5] == parent_lines[:5]
                and lines[6] == "        [2.5, 7],  # second, no comma"[:0] + lines[6]
            )
            assert lines[6] == "        [2.5, 7],  # second, no comma", (detail, child)
            assert lines[7].startswith("        [") and lines[7].endswith("],") and lines[8] == "    ]"
            moves.add("append")
        assert np.asarray(returned(child)).ndim == 2
    assert moves == {"row", "drop", "append"}


LAYOUTS = {
    "a comment line between rows": "    t = [\n        [1.0, 2.0],\n        # note\n        [3.0, 4.0],\n    ]\n",
    "a row over two lines": "    t = [\n        [1.0,\n         2.0],\n        [3.0, 4.0],\n    ]\n",
    "two rows on one line": "    t = [\n        [1.0, 2.0], [3.0, 4.0],\n        [5.0, 6.0],\n    ]\n",
    "rows from the opening bracket on": "    t = [[1.0, 2.0],\n         [3.0, 4.0]]\n",
    "tuples, closing bracket on the last row": "    t = [\n        (1.0, 2.0),\n        (3.0, 4.0)]\n",
    "a trailing comma on one line": "    t = [[1, 2], [3, 4],]  # ints\n",
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_every_layout_of_a_table_gives_children_with_the_value_the_move_says(name):
    code = program(LAYOUTS[name] + "    return np.array(t)\n")
    parent = returned(code)
    seen = set()
    for child, detail in children(code, 40, seed=1):
        value = returned(child)
        if "dropped row" in detail:
            i = int(detail.split("dropped row ")[1].split()[0])
            assert np.array_equal(value, np.delete(parent, i, axis=0)), (detail, child)
        elif "appended" in detail:
            assert np.array_equal(value[:-1], parent), (detail, child)
        else:
            i = int(detail.split("of row ")[1].split()[0])
            assert np.array_equal(np.delete(value, i, axis=0), np.delete(parent, i, axis=0)), (detail, child)
        seen.add(detail.split(" ")[2])
    assert seen == {"moved", "appended", "dropped"}
    if "# note" in code:
        assert all("        # note\n" in child for child, _ in children(code, 20))


def test_a_one_line_table_grows_and_shrinks_on_its_line():
    code = program("    return [0.5, 1.5, 2.5]  # knots\n")
    for child, detail in children(code, 20):
        (line,) = [line for line in child.splitlines() if "knots" in line]
        values = returned(child).tolist()
        if "dropped" in detail:
            assert len(values) == 2 and set(values) < {0.5, 1.5, 2.5}
        else:
            assert len(values) == 4 and values[:3] == [0.5, 1.5, 2.5]
        assert line.startswith("    return [0.5") or "dropped entry 0" in detail


def test_a_long_table_is_written_one_row_per_line_at_its_statement_indent():
    code = program("    n = 12\n    pts = np.zeros((n, 3))\n    return pts\n")
    child, _ = children(code, 1)[0]
    lines = child.splitlines()
    start = next(i for i, line in enumerate(lines) if "pts = np.array([" in line)
    assert lines[start + 1].startswith("        [") and lines[start + 1].endswith("],")
    assert any(line == "    ])" for line in lines[start:])


NOT_TABLES = {
    "a size bound twice": "    n = 3\n    n = 4\n    return np.zeros(n)\n",
    "a size from a parameter": None,
    "a size assigned after its use": "    x = np.zeros(n)\n    n = 3\n    return x\n",
    "a size from a loop": "    for n in range(3):\n        pass\n    return np.zeros(n)\n",
    "a size from a call": "    n = len('abc')\n    return np.zeros(n)\n",
    "a random array": "    return np.random.rand(3, 2)\n",
    "a list with a call inside": "    return np.array([len('ab'), 2.0])\n",
    "strings": "    return ['a', 'b']\n",
    "one number": "    return [1.5]\n",
    "an unknown keyword": "    return np.zeros(3, order='F')\n",
}


@pytest.mark.parametrize("name", sorted(NOT_TABLES))
def test_what_the_literals_alone_do_not_fix_is_not_a_table(name):
    code = NOT_TABLES[name]
    code = (
        "import numpy as np\n\n# EVOLVE-BLOCK-START\ndef build(n=3):\n    return np.zeros(n)\n# EVOLVE-BLOCK-END\n"
        if code is None
        else program(code)
    )
    assert table_sites(code) == []
    with pytest.raises(NotApplicable, match="no table of numbers"):
        table_child(code, random.Random(0), EvolveConfig())


def test_an_array_a_name_holds_is_not_folded_into_another_table_since_the_program_may_change_it():
    code = program("    base = np.ones(3)\n    base[0] = 5.0\n    return np.array([base, base])\n")
    (table,) = table_sites(code)
    assert table.constructor == "np.ones(3)"  # written out where it is made, the in-place write still follows
    for child, _ in children(code, 10):
        value = returned(child)
        assert value.shape[0] == 2 and np.array_equal(value[0], value[1]) and value[0][0] == 5.0


def test_a_list_a_name_holds_is_its_own_table_and_not_folded_where_it_is_used():
    code = program("    t = [1.0, 2.0]\n    t.append(3.0)\n    return np.array(t)\n")
    (table,) = table_sites(code)
    assert table.constructor is None and table.rows == [[1.0], [2.0]]
    for child, _ in children(code, 10):
        assert child.count("np.array(t)") == 1 and returned(child)[-1] == 3.0


def test_rows_of_different_lengths_are_not_one_table_but_a_long_enough_row_is():
    (table,) = table_sites(program("    return [[1.0, 2.0], [3.0]]\n"))
    assert table.rows == [[1.0], [2.0]] and table.flat


def test_tables_outside_the_evolve_blocks_are_never_touched_and_a_table_in_a_table_counts_once():
    code = (
        "import numpy as np\nFIXED = [1.0, 2.0, 3.0]\n\n# EVOLVE-BLOCK-START\ndef build():\n"
        "    return np.array([[1.0, 2.0], [3.0, 4.0]])\n# EVOLVE-BLOCK-END\n"
    )
    (table,) = table_sites(code)
    assert table.rows == [[1.0, 2.0], [3.0, 4.0]] and table.constructor is None
    for child, _ in children(code, 20):
        assert child.startswith("import numpy as np\nFIXED = [1.0, 2.0, 3.0]\n")


def test_the_mutator_hands_a_program_without_tables_to_another_operator():
    config = parse_config({"mutation": {"weights": {"table": 1.0, "constant": 1.0}}})
    parent = Program(
        code="# EVOLVE-BLOCK-START\ndef f(x):\n    return x * 0.5\n# EVOLVE-BLOCK-END\n", id="p", iteration=0
    )
    (result,) = Mutator(config, None).make([MutationRequest(1, "table", parent, [], seed=1)])
    assert result.code is not None and result.info["kind"] == "constant" and result.info["planned"] == "table"
    config.max_code_length = 200  # a child longer than the limit is refused, as for every operator
    long = Program(code=program("    return np.zeros((40, 2))\n"), id="q", iteration=0)
    (refused,) = Mutator(config, None).make([MutationRequest(1, "table", long, [], seed=1)])
    assert refused.code is None and "max_code_length=200" in refused.failure


def test_table_is_a_configurable_kind_with_a_default_weight_and_exact_duplicate_checks():
    config = EvolveConfig()
    assert "table" in MUTATION_KINDS and config.mutation.weights["table"] > 0
    assert "table" in config.novelty.exact_only


def test_moves_are_drawn_by_their_credit_under_a_key_that_survives_growth_and_writing_out():
    code = program("    return np.ones((4, 2))\n")
    rng, config = random.Random(5), EvolveConfig()
    made = [table_child(code, rng, config) for _ in range(400)]
    drops = {key for _, detail, key in made if "dropped" in detail}
    assert len(drops) == 1 and sum("dropped" in d for _, d, _ in made) / len(made) > 0.18  # 1 of 4 moves
    (drop,) = drops
    assert len({key for _, _, key in made}) == 4  # row, append, reflect, drop: a key each
    grown = next(child for child, detail, _ in made if "appended" in detail)
    # the same table after it was written out and grew a row: the same key for the same move
    assert any(
        key == drop
        for _, detail, key in (table_child(grown, rng, config) for _ in range(60))
        if "dropped" in detail
    )
    credit = {drop: [10, 0]}  # ten drops, none kept: weight 1/12 against 1/2 for the others
    again = [table_child(code, rng, config, credit)[1] for _ in range(400)]
    assert sum("dropped" in d for d in again) / len(again) < 0.1


# an evaluator's opening: the program at ``program_path`` loaded as ``module``
EVALUATOR_HEAD = (
    "import importlib.util, itertools\nimport numpy as np\n\n\n"
    "def evaluate(program_path):\n"
    "    spec = importlib.util.spec_from_file_location('program', program_path)\n"
    "    module = importlib.util.module_from_spec(spec)\n"
    "    spec.loader.exec_module(module)\n"
)


def run_without_llm(root: Path, run_dir: Path) -> tuple[list[Program], Program, Program]:
    """Run the task folder's config with the LLM-free operators: ``(every program, the seed, the best)``."""
    task = load_task(root)
    config = load_config(task.config_path)
    config.llm.models = []
    controller = Controller(task, config, run_dir)
    try:
        controller.run()
    finally:
        controller.close()
    store = ProgramStore(run_dir / "programs.db")
    try:
        programs = store.programs()
    finally:
        store.close()
    seed = next(p for p in programs if p.iteration == 0)
    best = max((p for p in programs if p.fitness is not None), key=lambda p: p.fitness)
    return programs, seed, best


def _kissing_task(root: Path) -> Path:
    """OpenEvolve's kissing-number contract in 4 dimensions: integer points whose largest norm is at most
    their smallest distance apart, scored by how many there are; the seed is two opposite points."""
    root.mkdir()
    (root / "initial_program.py").write_text(
        program("    d = 4\n    return np.array([np.ones(d), -1 * np.ones(d)]).astype(np.int64)\n")
    )
    (root / "evaluator.py").write_text(
        EVALUATOR_HEAD + "    points = np.around(np.asarray(module.build())).astype(np.int64)\n"
        "    if points.ndim != 2 or points.shape[1] != 4:\n"
        "        return {'combined_score': 0.0, 'error': f'shape {points.shape}'}\n"
        "    norms = (points ** 2).sum(axis=1)\n"
        "    gaps = [int(((a - b) ** 2).sum()) for a, b in itertools.combinations(points, 2)]\n"
        "    if norms.min() == 0 or min(gaps) < norms.max():\n"
        "        return {'combined_score': 0.0, 'error': 'not a kissing configuration'}\n"
        "    return {'combined_score': float(len(points))}\n"
    )
    (root / "config.yaml").write_text(
        "max_iterations: 32\nrandom_seed: 1\ndatabase:\n  num_islands: 1\nmutation:\n  weights: {table: 1.0}\n"
    )
    return root


def test_a_kissing_configuration_grows_from_its_two_point_seed_without_an_llm(tmp_path):
    """The table operator adds valid points to a two-point seed; every score is the evaluator's own check
    of the configuration."""
    programs, seed, best = run_without_llm(_kissing_task(tmp_path / "task"), tmp_path / "run")
    assert seed.fitness == 2.0 and best.fitness >= 4.0
    points = returned(best.code)
    assert len(points) == best.fitness
    norms = (points**2).sum(axis=1)
    assert all(((a - b) ** 2).sum() >= norms.max() for i, a in enumerate(points) for b in points[i + 1 :])
    assert any(p.mutation.get("kind") == "table" for p in programs)


def test_rows_that_repeat_an_earlier_row_spread_to_convex_combinations_of_the_different_rows():
    """Eight points stacked on a corner of a triangle whose other corners are points too: a ``spread``
    child has eleven different points inside the triangle, in general position, and the rows that did
    not repeat keep their text and comments."""
    rows = "".join("        [0.0, 0.0],\n" for _ in range(8))
    code = program(
        "    pts = [\n        [0.0, 0.0],  # corner\n" + rows + "        [1.0, 0.0],  # right\n"
        "        [0.5, 0.8],  # top\n    ]\n    return np.array(pts)\n"
    )
    parent = returned(code)
    (table,) = table_sites(code)
    assert table.moves() == ["row", "append", "reflect", "drop", "spread"] and table.repeats() == list(
        range(1, 9)
    )
    spread = [
        (child, detail)
        for child, detail in children(code, 60)
        if spread_check(parent, returned(child), detail)
    ]
    assert len(spread) >= 6  # one move of five
    for child, detail in spread:
        points = returned(child)
        assert "spread 8 repeated rows to random convex combinations of the 3 different rows" in detail
        assert len(np.unique(points, axis=0)) == 11
        assert smallest_triangle(points) > 0, detail  # no three in line: a Heilbronn score above 0
        for line in ("[0.0, 0.0],  # corner", "[1.0, 0.0],  # right", "[0.5, 0.8],  # top"):
            assert f"        {line}\n" in child


@pytest.mark.parametrize(
    "body",
    [
        "    return np.array([[0, 0], [0, 0], [1, 2]])\n",  # integers: a convex combination is not one
        "    return np.zeros((4, 2))\n",  # one row four times: nothing to combine
        "    return np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])\n",  # no row repeats
    ],
)
def test_spread_needs_floats_two_different_rows_and_a_repeat(body):
    (table,) = table_sites(program(body))
    assert "spread" not in table.moves()
    assert not any("repeated" in detail for _, detail in children(program(body), 40))


def _heilbronn_task(root: Path, n: int, iterations: int) -> Path:
    """OpenEvolve's Heilbronn-in-a-triangle contract for ``n`` points, its seed all ``n`` at one corner
    (score 0: every triangle is flat) and a point outside the triangle an evaluator ``error``."""
    root.mkdir()
    (root / "initial_program.py").write_text(program(f"    n = {n}\n    return np.zeros((n, 2))\n"))
    (root / "evaluator.py").write_text(
        EVALUATOR_HEAD + "    p = np.asarray(module.build(), dtype=float)\n"
        f"    if p.shape != ({n}, 2):\n"
        "        return {'combined_score': 0.0, 'error': f'shape {p.shape}'}\n"
        "    x, y = p[:, 0], p[:, 1]\n"
        "    if (y < -1e-9).any() or (y > np.sqrt(3) * x + 1e-9).any() or (y > np.sqrt(3) * (1 - x) + 1e-9).any():\n"
        "        return {'combined_score': 0.0, 'error': 'a point outside the triangle'}\n"
        "    area = min(abs((b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])) / 2\n"
        "               for a, b, c in itertools.combinations(p, 3))\n"
        "    return {'combined_score': float(area / (np.sqrt(3) / 4))}\n"
    )
    (root / "config.yaml").write_text(
        f"max_iterations: {iterations}\nrandom_seed: 1\ndatabase:\n  num_islands: 1\n"
        "mutation:\n  weights: {table: 1.0, constant: 1.0}\n"
    )
    return root


def test_points_stacked_on_one_corner_come_apart_to_a_heilbronn_score_without_an_llm(tmp_path):
    """The seed scores 0 and moving one point leaves it at 0 (every triangle through the corner's other
    points is flat); row moves and then a spread reach a score above 0, checked here by hand on the
    returned points, not only by the run's own evaluator."""
    n = 5
    programs, seed, best = run_without_llm(_heilbronn_task(tmp_path / "task", n, 64), tmp_path / "run")
    assert seed.fitness == 0.0 and best.fitness > 0.0
    points = returned(best.code)
    assert points.shape == (n, 2)
    x, y = points[:, 0], points[:, 1]
    assert (
        (y >= -1e-9).all() and (y <= np.sqrt(3) * x + 1e-9).all() and (y <= np.sqrt(3) * (1 - x) + 1e-9).all()
    )
    smallest = smallest_triangle(points)
    assert smallest > 0 and best.fitness == pytest.approx(smallest / (np.sqrt(3) / 4), rel=1e-9)
    lineage = {p.id: p for p in programs}
    kinds, node = [], best
    while node.parent_id is not None:
        kinds.append(node.mutation.get("detail", ""))
        node = lineage[node.parent_id]
    assert any("repeated" in detail for detail in kinds), kinds  # a spread is on the way to the best
