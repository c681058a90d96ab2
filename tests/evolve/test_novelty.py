"""Novelty rejection: normal forms, exact and near duplicates, the filter's bookkeeping."""

from __future__ import annotations

import math
import time

import pytest

from societas.evolve.novelty import (
    NoveltyFilter,
    NoveltyVerdict,
    code_hash,
    jaccard,
    normalise_code,
    similarity,
    token_shingles,
)

PROGRAM = '''"""Regret matching with a discount."""
import math

# EVOLVE-BLOCK-START
def update(regrets, utility, alpha=1.5):
    """Add the new regrets, discounted."""
    out = []
    for r, u in zip(regrets, utility):
        weight = (1.0 + r) ** alpha
        out.append(max(0.0, r * weight + u))
    return out
# EVOLVE-BLOCK-END


def policy(regrets):
    total = sum(max(0.0, r) for r in regrets)
    if total <= 0:
        return [1.0 / len(regrets)] * len(regrets)
    return [max(0.0, r) / total for r in regrets]
'''

# The same program: other comments, blank lines, spacing, quotes, line breaks, no docstrings, no markers.
REFORMATTED = """import math
def update(regrets,utility,alpha = 1.5):
    out=[]   # collected here
    for r,u in zip(regrets,
                   utility):


        weight=(1.0+r)**alpha
        out.append(max(0.0,r*weight+u))
    return out
def policy(regrets):
    # normalise the positive part
    total=sum(max(0.0,r) for r in regrets)
    if total<=0:
        return [1.0/len(regrets)]*len(regrets)
    return [max(0.0,r)/total for r in regrets]
"""

CONSTANT_CHANGED = PROGRAM.replace("alpha=1.5", "alpha=1.75")
RENAMED = PROGRAM.replace("weight", "w")
OTHER = """def solve(n):
    table = {0: 1, 1: 1}
    for i in range(2, n + 1):
        table[i] = table[i - 1] + table[i - 2]
    return table[n]
"""


def _long_program(lines: int) -> str:
    body = [f"    x{i} = x{i - 1} * {i % 7 + 1} + math.sqrt(abs(x{i - 1})) - {i}" for i in range(1, lines)]
    return "import math\n\ndef f(x0):\n" + "\n".join(body) + f"\n    return x{lines - 1}\n"


# ----------------------------------------------------------------------------- normal form


def test_formatting_comments_and_docstrings_do_not_change_the_normal_form() -> None:
    assert normalise_code(PROGRAM) == normalise_code(REFORMATTED)
    assert code_hash(PROGRAM) == code_hash(REFORMATTED)
    assert "EVOLVE-BLOCK" not in normalise_code(PROGRAM)
    assert "discount" not in normalise_code(PROGRAM)
    # A function whose only statement was its docstring keeps a body.
    assert normalise_code('def f():\n    """only a docstring"""\n') == "def f():\n    pass"


def test_changes_to_the_code_change_the_hash() -> None:
    assert len({code_hash(c) for c in (PROGRAM, CONSTANT_CHANGED, RENAMED, OTHER)}) == 4
    # a string that is not a docstring is code
    assert code_hash("x = 1\n'note'\n") != code_hash("x = 1\n")


def test_code_that_does_not_parse_is_normalised_by_tokens() -> None:
    # tokenize reads it (only the parser rejects `= =`): comments, blank lines, spacing and
    # string-only statements go
    broken = 'x = = 1  # comment\n\n"""a docstring"""\nif x:\n        y=2\n'
    assert normalise_code(broken) == "x = = 1\nif x :\n    y = 2"
    assert code_hash(broken) == code_hash("x = =  1\nif x:\n  y = 2\n")
    # an unclosed bracket stops tokenize too: the scanner still drops comments and re-indents
    unclosed = "def f(a,\n      b:  # comment\n    return a+b\n"
    assert normalise_code(unclosed) == "def f ( a , b : return a + b"
    assert code_hash(unclosed) == code_hash("def f(a, b:\n  return a + b")
    assert code_hash(unclosed) != code_hash("def f(a, b:\n  return a - b")


# ----------------------------------------------------------------------------- similarity


def test_shingles_and_jaccard_by_hand() -> None:
    # tokens of `x = 1`: x, =, 1, <newline> -> 3-grams (x = 1), (= 1 <newline>)
    one, two = token_shingles("x = 1"), token_shingles("x = 2")
    assert len(one) == 2 and len(two) == 2
    assert jaccard(one, two) == 0.0
    # x = 1 ⏎ y = 2 ⏎: (x = 1) (= 1 ⏎) (1 ⏎ y) (⏎ y =) (y = 2) (= 2 ⏎); with 3 for 2, the last two
    # differ: 4 shared shingles of 8 in the union
    assert jaccard(token_shingles("x = 1\ny = 2\n"), token_shingles("x = 1\ny = 3\n")) == 0.5
    assert jaccard(frozenset("abc"), frozenset("bcd")) == 0.5
    assert jaccard(frozenset(), frozenset()) == 1.0
    assert len(token_shingles("x = 1", k=1)) == 4
    assert token_shingles("pass", k=3) == token_shingles("pass", k=5)  # shorter than k: one shingle
    with pytest.raises(ValueError, match="k must be >= 1"):
        token_shingles("x", k=0)


def test_renamed_variable_and_changed_constant_are_similar_but_not_exact() -> None:
    assert similarity(PROGRAM, REFORMATTED) == 1.0
    constant = similarity(PROGRAM, CONSTANT_CHANGED)
    renamed = similarity(PROGRAM, RENAMED)
    assert 0.9 < constant < 1.0
    assert 0.7 < renamed < constant < 1.0  # a name used three times moves more shingles than one literal
    assert similarity(PROGRAM, OTHER) < 0.1


def test_shingle_compare_of_200_line_programs_is_well_under_a_millisecond() -> None:
    a = token_shingles(_long_program(200))
    b = token_shingles(_long_program(200).replace("* 3 +", "* 4 +"))
    assert len(a) > 2000
    start = time.perf_counter()
    for _ in range(200):
        value = jaccard(a, b)
    per_compare = (time.perf_counter() - start) / 200
    assert 0.9 < value < 1.0
    assert per_compare < 1e-3, f"{per_compare * 1e6:.0f} µs per compare"


# ----------------------------------------------------------------------------- the filter


def test_exact_duplicates_are_rejected_and_counted() -> None:
    novelty = NoveltyFilter()
    assert novelty.check(PROGRAM) == NoveltyVerdict(True, "novel (nothing to compare with)", None, 0.0)
    novelty.add("p0", PROGRAM)
    verdict = novelty.check(REFORMATTED)
    assert verdict == NoveltyVerdict(False, "exact duplicate of p0", "p0", 1.0)
    assert (novelty.checked, novelty.rejected_exact, novelty.rejected_similar) == (2, 1, 0)


def test_near_duplicates_are_rejected_below_threshold_one() -> None:
    novelty = NoveltyFilter(threshold=0.9)
    novelty.add("p0", PROGRAM)
    novelty.add("p1", OTHER)
    verdict = novelty.check(CONSTANT_CHANGED)
    expected = similarity(PROGRAM, CONSTANT_CHANGED)
    assert not verdict.novel
    assert verdict.nearest_id == "p0"
    assert verdict.similarity == pytest.approx(expected)
    assert verdict.reason == f"similarity {expected:.4f} to p0 >= 0.9"
    assert (novelty.checked, novelty.rejected_exact, novelty.rejected_similar) == (1, 0, 1)


def test_threshold_one_rejects_only_exact_duplicates() -> None:
    novelty = NoveltyFilter(threshold=1.0)
    novelty.add("p0", PROGRAM)
    for child in (CONSTANT_CHANGED, RENAMED):
        verdict = novelty.check(child)
        assert verdict.novel
        assert verdict.nearest_id == "p0"
        assert 0.7 < verdict.similarity < 1.0
        assert verdict.reason.startswith("novel (nearest p0 at similarity")
    assert not novelty.check(REFORMATTED).novel
    assert (novelty.checked, novelty.rejected_exact, novelty.rejected_similar) == (3, 1, 0)
    # A repeated statement has the same shingle set (similarity 1.0) but is not an exact duplicate.
    assert similarity("step()\nstep()\n", "step()\nstep()\nstep()\n") == 1.0
    novelty.add("twice", "step()\nstep()\n")
    verdict = novelty.check("step()\nstep()\nstep()\n")
    assert verdict.novel and verdict.similarity == 1.0 and verdict.nearest_id == "twice"
    strict = NoveltyFilter(threshold=0.99)
    strict.add("twice", "step()\nstep()\n")
    assert strict.check("step()\nstep()\nstep()\n").reason == "similarity 1.0000 to twice >= 0.99"


def test_different_programs_pass() -> None:
    novelty = NoveltyFilter(threshold=0.8)
    novelty.add("p0", PROGRAM)
    verdict = novelty.check(OTHER)
    assert verdict.novel and verdict.nearest_id == "p0" and verdict.similarity < 0.1
    novelty.add("p1", OTHER)
    assert len(novelty) == 2 and "p1" in novelty
    assert novelty.stats() == {
        "programs": 2,
        "distinct": 2,
        "compared": 2,
        "checked": 1,
        "rejected_exact": 0,
        "rejected_similar": 0,
    }


def test_nearest_is_the_most_similar_program() -> None:
    novelty = NoveltyFilter(threshold=0.999)
    novelty.add("far", OTHER)
    novelty.add("near", PROGRAM)
    novelty.add("middle", RENAMED)
    verdict = novelty.check(CONSTANT_CHANGED)
    assert verdict.novel and verdict.nearest_id == "near"


def test_remove_and_replace() -> None:
    novelty = NoveltyFilter()
    novelty.add("p0", PROGRAM)
    novelty.add("p1", REFORMATTED)  # same normal form, two ids
    assert novelty.check(PROGRAM).nearest_id == "p0"
    novelty.remove("p0")
    assert novelty.check(PROGRAM).reason == "exact duplicate of p1"
    novelty.remove("p1")
    assert len(novelty) == 0
    assert novelty.check(PROGRAM).novel
    with pytest.raises(KeyError, match="'p1'"):
        novelty.remove("p1")
    novelty.add("p2", PROGRAM)
    novelty.add("p2", OTHER)  # an id added again is replaced
    assert len(novelty) == 1
    assert novelty.check(PROGRAM).novel
    assert not novelty.check(OTHER).novel


def test_only_the_most_recent_are_compared_but_every_hash_is_kept() -> None:
    novelty = NoveltyFilter(threshold=0.9, max_compare=1)
    novelty.add("old", PROGRAM)
    novelty.add("new", OTHER)
    near = novelty.check(CONSTANT_CHANGED)  # similar to "old", which fell out of the comparisons
    assert near.novel and near.nearest_id == "new"
    assert novelty.check(REFORMATTED).reason == "exact duplicate of old"
    no_compare = NoveltyFilter(max_compare=0)
    no_compare.add("p0", PROGRAM)
    assert no_compare.check(CONSTANT_CHANGED) == NoveltyVerdict(
        True, "novel (nothing to compare with)", None, 0.0
    )
    assert not no_compare.check(PROGRAM).novel


def test_rebuild_matches_adding_one_by_one() -> None:
    pairs = [("a", PROGRAM), ("b", OTHER), ("c", RENAMED), ("d", PROGRAM), ("b", _long_program(20))]
    incremental = NoveltyFilter(threshold=0.9, max_compare=2)
    for program_id, code in pairs:
        incremental.add(program_id, code)
    incremental.check(PROGRAM)
    rebuilt = NoveltyFilter(threshold=0.9, max_compare=2)
    rebuilt.check(PROGRAM)
    assert rebuilt.rebuild(pairs) is rebuilt
    assert rebuilt.checked == 1  # the counters are kept
    assert len(rebuilt) == len(incremental) == 4
    for child in (PROGRAM, CONSTANT_CHANGED, OTHER, _long_program(21), RENAMED.replace("alpha", "beta")):
        assert rebuilt.check(child) == incremental.check(child)
    sizes = ("programs", "distinct", "compared")
    assert [rebuilt.stats()[k] for k in sizes] == [incremental.stats()[k] for k in sizes] == [4, 3, 2]


def test_embedding_similarity_is_the_cosine() -> None:
    seen: list[str] = []

    def embed(normal: str) -> list[float]:
        seen.append(normal)
        return [1.0, 0.0] if "solve" in normal else [3.0, 4.0]

    novelty = NoveltyFilter(threshold=0.5, embed=embed)
    novelty.add("p0", OTHER)
    verdict = novelty.check(PROGRAM)
    assert verdict.similarity == pytest.approx(0.6)  # cos = (1 * 3 + 0 * 4) / (1 * 5)
    assert not verdict.novel and verdict.reason == "similarity 0.6000 to p0 >= 0.5"
    assert seen == [normalise_code(OTHER), normalise_code(PROGRAM)]  # the model sees the normal form
    novelty.check(PROGRAM)
    novelty.add("p1", PROGRAM)
    assert len(seen) == 2  # a program checked before is not embedded again
    assert novelty.check(REFORMATTED).reason == "exact duplicate of p1"
    assert len(seen) == 2  # an exact duplicate is not embedded
    strict = NoveltyFilter(threshold=0.7, embed=embed)
    assert strict.check(PROGRAM).novel and len(seen) == 2  # nothing to compare with: no embedding
    strict.add("p0", OTHER)
    verdict = strict.check(PROGRAM)
    assert verdict.novel and verdict.similarity == pytest.approx(0.6) and len(seen) == 4


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": 0.0}, "threshold"),
        ({"threshold": 1.5}, "threshold"),
        ({"threshold": math.nan}, "threshold"),
        ({"shingle": 0}, "shingle"),
        ({"max_compare": -1}, "max_compare"),
        ({"embed": "model"}, "embed"),
    ],
)
def test_bad_arguments_are_value_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NoveltyFilter(**kwargs)
