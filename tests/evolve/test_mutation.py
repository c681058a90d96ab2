"""LLM diff application, prompts, the ensemble and the AST operators."""

from __future__ import annotations

import ast
import collections
import math
import random

import pytest

from societas.agents.llm import FunctionLLM
from societas.evolve.config import parse_config
from societas.evolve.mutation import (
    LLMEnsemble,
    MutationError,
    MutationRequest,
    Mutator,
    NotApplicable,
    apply_diff,
    apply_llm_answer,
    build_prompt,
    choice_sites,
    crossover,
    parse_diff,
    perturb_constants,
    perturb_constants_at,
    swap_function,
    swap_operator,
)
from societas.evolve.program import Program, extract_evolve_blocks, frozen_parts_equal

CODE = """import torch

SCALE = 3.0  # frozen constant, never touched


# EVOLVE-BLOCK-START
def step(x, y):
    z = x * 0.5 + y - 2  # comment kept
    if z < 1.0:
        z = min(z, 4)
    return torch.relu(torch.tensor(z))


class Hook:
    def update(self, r):
        return r * 2.0
# EVOLVE-BLOCK-END


def frozen(a):
    return a + SCALE * 7
"""

CFG = parse_config({})


def diff(search, replace):
    return f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"


def test_diff_applies_inside_evolve_blocks_only():
    child = apply_diff(CODE, parse_diff("Sure!\n" + diff("        return r * 2.0", "        return r * 3.0")))
    assert "return r * 3.0" in child and frozen_parts_equal(CODE, child)
    with pytest.raises(MutationError, match="only code outside the evolve blocks"):
        apply_diff(CODE, parse_diff(diff("    return a + SCALE * 7", "    return 0")))
    with pytest.raises(MutationError, match="not found anywhere"):
        apply_diff(CODE, parse_diff(diff("nonexistent line", "x")))


def test_several_blocks_apply_in_order():
    answer = diff("    z = x * 0.5 + y - 2  # comment kept", "    z = x * 0.25 + y") + diff(
        "        return r * 2.0", "        return r"
    )
    child, how = apply_llm_answer(CODE, answer)
    assert how == "diff" and "z = x * 0.25 + y\n" in child and "        return r\n" in child


@pytest.mark.parametrize(
    "answer, reason",
    [
        ("I would change the constant.", "neither SEARCH/REPLACE blocks nor a fenced"),
        ("<<<<<<< SEARCH\nx\n>>>>>>> REPLACE\n", "has no '======='"),
        ("<<<<<<< SEARCH\nx\n=======\ny\n", "not closed"),
        ("<<<<<<< SEARCH\n\n=======\ny\n>>>>>>> REPLACE\n", "empty SEARCH"),
    ],
)
def test_malformed_answers_raise_with_a_reason(answer, reason):
    with pytest.raises(MutationError, match=reason):
        apply_llm_answer(CODE, answer)


def test_full_rewrite_is_transplanted_into_the_evolve_block():
    rewrite = "```python\nimport os\n# EVOLVE-BLOCK-START\ndef step(x, y):\n    return x\n# EVOLVE-BLOCK-END\nEVIL = 1\n```"
    child, how = apply_llm_answer(CODE, rewrite)
    assert how == "rewrite"
    assert extract_evolve_blocks(child) == ["def step(x, y):\n    return x\n"]
    assert "EVIL" not in child and frozen_parts_equal(CODE, child)


def test_prompt_shows_parent_metrics_artifacts_inspirations_and_format():
    parent = Program(
        id="p",
        code=CODE,
        iteration=3,
        metrics={"combined_score": 0.5, "mse": 1.0},
        fitness=0.5,
        artifacts={"evaluate_stderr": "Warning: slow"},
    )
    other = Program(
        id="q", code=CODE.replace("2.0", "9.0"), iteration=2, metrics={"combined_score": 0.7}, fitness=0.7
    )
    messages = build_prompt(parent, [other], CFG)
    assert messages[0]["role"] == "system"
    user = messages[1]["content"]
    for needle in (
        "return r * 2.0",
        "mse: 1",
        "Warning: slow",
        "return r * 9.0",
        "<<<<<<< SEARCH",
        ">>>>>>> REPLACE",
    ):
        assert needle in user


def _blocks_only_changed(child):
    ast.parse(child)
    assert frozen_parts_equal(CODE, child) and child != CODE


def test_constant_perturbation_is_seeded_and_stays_in_blocks():
    a, note = perturb_constants(CODE, random.Random(3), CFG)
    b, _ = perturb_constants(CODE, random.Random(3), CFG)
    assert a == b and "->" in note
    _blocks_only_changed(a)
    assert "# comment kept" in a and "SCALE = 3.0" in a and "SCALE * 7" in a
    children = {perturb_constants(CODE, random.Random(s), CFG)[0] for s in range(20)}
    assert len(children) > 10


CHOICES = """MODES = ['fast', 'slow']  # frozen listing: 'fast', 'slow', 'exact'


# EVOLVE-BLOCK-START
def configure():
    \"\"\"Pick a 'loader' and a 'sorter'.\"\"\"
    # loader: ['csv_reader', 'json_reader', "sql_reader"]
    # don't change 'keep' here
    table = {'loader': 'json_reader', 'note': 'keep'}
    sorter = "heapsort"  # one of SORTERS
    label = f"run-{'json_reader'}"
    return table, sorter, label, table['loader']


SORTERS = ('heapsort', 'quicksort')
# EVOLVE-BLOCK-END
"""


def test_constant_perturbation_moves_a_string_to_an_alternative_the_block_names():
    sites = {node.value: options for node, options in choice_sites(CHOICES).items()}
    # Comment listings and string tuples name alternatives; keys, subscripts, f-strings, docstrings,
    # the listings' own elements, frozen code and lone quoted words do not.
    assert sites == {"json_reader": ["csv_reader", "sql_reader"], "heapsort": ["quicksort"]}
    seen = set()
    for seed in range(40):
        child, note = perturb_constants(CHOICES, random.Random(seed), CFG)
        assert frozen_parts_equal(CHOICES, child) and child != CHOICES
        ast.parse(child)
        seen.add(note)
    assert "line 9: 'json_reader' -> 'csv_reader'" in seen and "line 9: 'json_reader' -> 'sql_reader'" in seen
    assert 'line 10: "heapsort" -> "quicksort"' in seen  # the literal keeps its own quotes
    child, _ = perturb_constants(CHOICES, random.Random(0), CFG)
    assert "{'loader':" in child and "table['loader']" in child and "f\"run-{'json_reader'}\"" in child
    assert "SORTERS = ('heapsort', 'quicksort')" in child
    with pytest.raises(MutationError, match="no numeric constant, and no string with named alternatives"):
        perturb_constants(
            "# EVOLVE-BLOCK-START\nx = 'a'  # 'a' only\n# EVOLVE-BLOCK-END\n", random.Random(0), CFG
        )


def test_operator_swap_changes_one_operator_or_min_max():
    seen = set()
    for s in range(30):
        child, note = swap_operator(CODE, random.Random(s))
        _blocks_only_changed(child)
        seen.add(note.split(": ")[1])
    assert any(n.startswith("min ->") for n in seen)
    assert any(n.startswith("< ->") for n in seen)
    assert any(n.startswith("* ->") for n in seen) and any(n.startswith("+ ->") for n in seen)


def test_function_swap_uses_configured_pairs():
    child, note = swap_function(CODE, random.Random(0), CFG)
    _blocks_only_changed(child)
    assert note.endswith(("torch.relu -> torch.abs", "min -> max"))
    cfg = parse_config({"mutation": {"function_pairs": [["torch.tensor", "torch.as_tensor"]]}})
    child, _ = swap_function(CODE, random.Random(0), cfg)
    assert "torch.as_tensor(z)" in child
    with pytest.raises(MutationError, match="no call"):
        swap_function("# EVOLVE-BLOCK-START\nx = 1\n# EVOLVE-BLOCK-END\n", random.Random(0), CFG)


def test_crossover_of_parents_differing_in_one_hook_recombines_its_statements():
    """Taking the one differing hook whole would make the second parent again: its statements are
    recombined instead, one differing stretch from each parent, and parents differing in one stretch
    only have no such child."""
    one = CODE.replace("        return r * 2.0", "        return r.clamp(min=0)")
    with pytest.raises(NotApplicable, match="differ in one stretch of `Hook` only"):
        crossover(CODE, one, random.Random(0))
    with pytest.raises(MutationError, match="share no differing class or function"):
        crossover(CODE, CODE, random.Random(0))
    donor = CODE.replace("z = x * 0.5 + y - 2", "z = x * 0.25 + y").replace(
        "    return torch.relu(torch.tensor(z))", "    z = z + 1\n    return torch.abs(torch.tensor(z))"
    )
    seen = set()
    for seed in range(30):
        child, note = crossover(CODE, donor, random.Random(seed))
        _blocks_only_changed(child)
        assert child not in (CODE, donor) and note.startswith("in step: ")
        first, last = "x * 0.25 + y" in child, "torch.abs(torch.tensor(z))" in child
        assert first != last  # one stretch from each parent
        assert ("z = z + 1" in child) == last and ("x * 0.5 + y - 2" in child) == (not first)
        compile(child, "child", "exec")
        seen.add(first)
    assert seen == {True, False}


def test_crossover_recombines_several_hooks_but_never_copies_the_donor_whole():
    donor = CODE.replace("        return r * 2.0", "        return r.clamp(min=0)").replace(
        "z = x * 0.5 + y - 2", "z = x * 0.25 + y"
    )
    seen = set()
    for seed in range(40):
        child, note = crossover(CODE, donor, random.Random(seed))
        _blocks_only_changed(child)
        took_hook, took_step = "r.clamp(min=0)" in child, "x * 0.25 + y" in child
        assert took_hook != took_step  # one unit from each parent: never all from the donor
        assert note == ("Hook" if took_hook else "step") + " from the second parent"
        seen.add(note)
    assert len(seen) == 2


def _parent(code=CODE):
    return Program(id="p0", code=code, iteration=0, metrics={"combined_score": 0.1}, fitness=0.1)


def test_mutator_batches_prompts_per_backend_and_records_malformed_answers():
    good = FunctionLLM(lambda m: diff("        return r * 2.0", "        return r * 2.5"), name="good")
    bad = FunctionLLM(lambda m: "no idea", name="bad")
    cfg = parse_config({"mutation": {"weights": {"llm": 1.0}}})
    mutator = Mutator(cfg, LLMEnsemble([(good, 3.0), (bad, 1.0)]))
    requests = [MutationRequest(i, "llm", _parent(), [], seed=i, model_index=i % 2) for i in range(4)]
    results = mutator.make(requests)
    assert good.calls == 1 and good.batch_sizes == [2] and bad.calls == 1
    assert results[0].code is not None and "r * 2.5" in results[0].code and results[0].info["model"] == "good"
    assert results[1].code is None and "malformed LLM answer" in results[1].failure
    assert results[1].llm_response == "no idea"


def test_mutator_without_llm_uses_ast_operators_and_rejects_an_empty_mix():
    mutator = Mutator(CFG, None)
    assert "llm" not in mutator.kinds and "constant" in mutator.kinds
    with pytest.raises(ValueError, match="'llm' needs an LLM"):
        Mutator(parse_config({"mutation": {"weights": {"llm": 1.0}}}), None)
    out = mutator.make(
        [
            MutationRequest(1, "constant", _parent(), [], seed=5),
            MutationRequest(2, "crossover", _parent(), [], seed=5),
        ]
    )
    # crossover without a second parent hands the child to another LLM-free operator
    assert out[0].code is not None and out[1].code is not None
    assert out[1].info["planned"] == "crossover" and out[1].info["kind"] in (
        "constant",
        "operator",
        "function",
    )
    only = Mutator(parse_config({"mutation": {"weights": {"crossover": 1.0}}}), None)
    [alone] = only.make([MutationRequest(2, "crossover", _parent(), [], seed=5)])
    assert alone.code is None and alone.failure.startswith("crossover needs a second parent")


def test_a_redraw_after_two_duplicates_hands_over_to_another_operator():
    """The first redraw of a rejected child follows the same plan; from the second on, the operators
    whose children were rejected hand over to another configured LLM-free one (by weight), unless none
    other is configured."""
    code = "# EVOLVE-BLOCK-START\ndef f(x):\n    return x * 3\n# EVOLVE-BLOCK-END\n"
    parent = Program(code=code, id="p", iteration=0)
    cfg = parse_config({"mutation": {"weights": {"constant": 0.9, "operator": 0.1}}})
    mutator = Mutator(cfg, None)
    for seed in range(6):
        request = MutationRequest(1, "constant", parent, [], seed=seed)
        first = mutator.redraw(request, 1, ["constant"])
        assert first.info["kind"] == "constant" and "planned" not in first.info
        later = mutator.redraw(request, 2, ["constant", "constant"])
        assert later.info == {**later.info, "kind": "operator", "planned": "constant"}
        assert later.code is not None and "return x * 3" not in later.code and " 3" in later.code
        # Redraws are reproducible: the same request and attempt make the same child.
        assert mutator.redraw(request, 2, ["constant"]).code == later.code
    # The planned operator finds nothing to change and the one that made the duplicates is passed over
    # for the third that applies.
    listed = Program(code=code.replace("x * 3", "g(x, [3, 4])"), id="q", iteration=0)
    three = Mutator(parse_config({"mutation": {"weights": {"operator": 1, "constant": 9, "table": 0.1}}}))
    kinds = set()
    for seed in range(6):
        request = MutationRequest(1, "operator", listed, [], seed=seed)
        kinds.add(three.redraw(request, 1, ["constant"]).info["kind"])
        later = three.redraw(request, 2, ["constant"])
        assert later.info == {**later.info, "kind": "table", "planned": "operator"}
    assert "constant" in kinds  # without the hand-over the weights pick it
    # Every configured operator excluded, or none other configured: the plan stays the same.
    alone = Mutator(parse_config({"mutation": {"weights": {"constant": 1.0}}}), None)
    again = alone.redraw(MutationRequest(1, "constant", parent, [], seed=0), 3, ["constant"])
    assert again.info["kind"] == "constant" and "planned" not in again.info
    both = mutator.redraw(MutationRequest(1, "constant", parent, [], seed=0), 3, ["operator", "constant"])
    assert both.info["kind"] == "constant" and "planned" not in both.info


def test_an_operator_with_nothing_to_change_hands_over_to_one_that_has():
    code = "# EVOLVE-BLOCK-START\ndef f(x):\n    return g(x, 0.5)\n# EVOLVE-BLOCK-END\n"  # one constant, no operator
    cfg = parse_config({"mutation": {"weights": {"operator": 0.5, "function": 0.3, "constant": 0.2}}})
    parent = Program(code=code, id="p", iteration=0)
    made = Mutator(cfg, None).make([MutationRequest(i, "operator", parent, [], seed=i) for i in range(8)])
    assert all(
        r.code is not None and r.info == {**r.info, "kind": "constant", "planned": "operator"} for r in made
    )
    assert len({r.code for r in made}) > 1  # still seeded per request
    bare = Program(
        code="# EVOLVE-BLOCK-START\ndef f(x):\n    return g(x)\n# EVOLVE-BLOCK-END\n", id="q", iteration=0
    )
    [none] = Mutator(cfg, None).make([MutationRequest(1, "function", bare, [], seed=1)])
    assert none.code is None and none.failure.startswith(
        "no LLM-free operator applies to this parent (function: "
    )
    assert (
        "operator: no swappable operator" in none.failure and "constant: no numeric constant" in none.failure
    )


def test_llm_backend_error_fails_the_mutations_not_the_run():
    def boom(messages):
        raise ConnectionError("server down")

    mutator = Mutator(
        parse_config({"mutation": {"weights": {"llm": 1.0}}}), LLMEnsemble([(FunctionLLM(boom), 1.0)])
    )
    [result] = mutator.make([MutationRequest(1, "llm", _parent(), [], seed=1, model_index=0)])
    assert result.code is None and "ConnectionError: server down" in result.failure


def test_ensemble_choice_follows_weights():
    ens = LLMEnsemble(
        [(FunctionLLM(lambda m: "", name="a"), 9.0), (FunctionLLM(lambda m: "", name="b"), 1.0)]
    )
    rng = random.Random(0)
    picks = [ens.choose(rng) for _ in range(1000)]
    assert 850 < picks.count(0) < 950
    with pytest.raises(ValueError, match="weight"):
        LLMEnsemble([(FunctionLLM(lambda m: ""), 0.0)])


def test_a_redraw_is_a_fresh_reproducible_child_of_the_same_plan():
    mutator = Mutator(CFG, None)
    request = MutationRequest(1, "constant", _parent(), [], seed=5)
    [first] = mutator.make([request])
    redraws = [mutator.redraw(request, attempt) for attempt in (1, 2, 3)]
    assert all(r.code is not None and r.info["kind"] == "constant" for r in redraws)
    # each attempt has its own seed: not the first child again, and not one another
    assert len({first.code, *(r.code for r in redraws)}) == 4
    assert mutator.redraw(request, 2).code == redraws[1].code
    with pytest.raises(ValueError, match="only the LLM-free operators"):
        mutator.redraw(MutationRequest(1, "llm", _parent(), [], seed=5), 1)


def test_constant_sites_are_drawn_statement_by_statement():
    """A lone scalar is touched as often as a whole array literal of many numbers (one statement
    each), where a uniform draw over the literals would touch it once in 21."""
    code = (
        "# EVOLVE-BLOCK-START\n"
        "def build():\n"
        "    table = [" + ", ".join(f"{i}.5" for i in range(20)) + "]\n"
        "    side = 8.0\n"
        "    return table, side\n"
        "# EVOLVE-BLOCK-END\n"
    )
    cfg = parse_config({"mutation": {"max_constants": 1}})
    hits = sum("8.0 ->" in perturb_constants(code, random.Random(seed), cfg)[1] for seed in range(400))
    assert 160 <= hits <= 240  # one in two, within about 4 standard deviations (sd = 10)


def test_one_literal_changes_most_often_and_small_integers_move_by_one():
    """With ``max_constants`` 3 a child changes one literal with chance 4/7, two with 2/7, three with 1/7;
    an integer under 10 in size moves to a neighbour, a larger one may also be scaled."""
    code = (
        "# EVOLVE-BLOCK-START\ndef build():\n"
        + "".join(f"    v{i} = {i + 1}.5\n" for i in range(6))
        + "    return v0, v1, v2, v3, v4, v5\n# EVOLVE-BLOCK-END\n"
    )
    cfg = parse_config({"mutation": {"max_constants": 3}})
    counts = collections.Counter(
        perturb_constants(code, random.Random(seed), cfg)[1].count("->") for seed in range(1400)
    )
    assert set(counts) == {1, 2, 3}
    for k, p in ((1, 4 / 7), (2, 2 / 7), (3, 1 / 7)):  # within about 4 standard deviations
        assert abs(counts[k] / 1400 - p) < 4 * math.sqrt(p * (1 - p) / 1400)
    one = parse_config({"mutation": {"max_constants": 1, "additive_probability": 0.0}})
    side = "# EVOLVE-BLOCK-START\ndef build():\n    side = 8\n    return side\n# EVOLVE-BLOCK-END\n"
    moved = {perturb_constants(side, random.Random(seed), one)[1] for seed in range(60)}
    assert moved == {"line 3: 8 -> 7", "line 3: 8 -> 9"}
    large = {perturb_constants(side.replace("8", "40"), random.Random(s), one)[1] for s in range(60)}
    assert len(large) > 6  # scaled and rounded, not only 39 and 41


def test_literals_of_local_names_nothing_reads_are_left_alone():
    """``n = 12`` inside a function, with ``n`` read nowhere, cannot change what the program does: the
    constant operator leaves it alone (and does not apply when nothing else is left); a name that is read,
    a module-level name (an evaluator may import it), a class attribute, a value whose change could raise,
    and any module that reaches its names dynamically keep their literals in play."""
    cfg = parse_config({"mutation": {"max_constants": 1}})

    def changed(body: str, extra: str = "") -> set[str]:
        code = f"# EVOLVE-BLOCK-START\n{extra}def build():\n{body}# EVOLVE-BLOCK-END\n"
        return {perturb_constants_at(code, random.Random(s), cfg)[1].split(":")[0] for s in range(60)}

    base = "    n = 12\n    side = 8\n    return side\n"
    first = 3  # the line of the function's first statement
    assert changed(base) == {f"line {first + 1}"}
    assert changed(base.replace("return side", "return side, n")) == {f"line {first}", f"line {first + 1}"}
    assert changed("    n: int = 12\n    side = 8\n    return side\n") == {f"line {first + 1}"}
    assert changed("    sizes = (1, -2)\n    side = 8\n    return side\n") == {f"line {first + 1}"}
    assert changed("    n = 12 / 4\n    side = 8\n    return side\n") == {
        f"line {first}",
        f"line {first + 1}",
    }
    assert changed("    class Shape:\n        n = 12\n    side = 8\n    return side, Shape.n\n") == {
        f"line {first + 1}",
        f"line {first + 2}",
    }
    assert changed(base.replace("return side", "return side, locals()")) == {
        f"line {first}",
        f"line {first + 1}",
    }
    assert changed("    side = 8\n    return side\n", "n = 12\n") == {"line 2", f"line {first + 1}"}
    with pytest.raises(NotApplicable, match="assigned to a local name nothing reads"):
        perturb_constants_at(
            "# EVOLVE-BLOCK-START\ndef build():\n    n = 12\n    return None\n# EVOLVE-BLOCK-END\n",
            random.Random(0),
            cfg,
        )


def test_site_credit_keys_survive_new_values_and_steer_the_draw():
    """A literal is known by its statement with the literals blanked (so by the same key after its value
    changed); one whose changes never kept the parent's fitness is drawn (kept + 1) / (tries + 2) as often."""
    code = (
        "# EVOLVE-BLOCK-START\n"
        "def build():\n"
        "    n = 14\n"
        "    seed = 42\n"
        "    return n, seed\n"
        "# EVOLVE-BLOCK-END\n"
    )
    cfg = parse_config({"mutation": {"max_constants": 1, "additive_probability": 1.0}})
    keys = {}
    for seed in range(40):
        child, note, [key] = perturb_constants_at(code, random.Random(seed), cfg)
        keys.setdefault(note.split(":")[0], set()).add(key)
        # the child's literal has the same key as the parent's
        _, _, [again] = perturb_constants_at(child, random.Random(seed), cfg)
        assert again == key
    assert sorted(keys) == ["line 3", "line 4"] and all(len(k) == 1 for k in keys.values())
    # a sign is part of the value, not of the statement
    signed = code.replace("n = 14", "n = (-14.5)")
    assert {
        perturb_constants_at(signed, random.Random(s), cfg)[2][0]
        for s in range(40)
        if perturb_constants_at(signed, random.Random(s), cfg)[1].startswith("line 3")
    } == keys["line 3"]
    [n_key], [seed_key] = keys["line 3"], keys["line 4"]
    credit = {n_key: [18, 0], seed_key: [10, 9]}  # weights 1/20 and 10/12
    hits = sum(perturb_constants_at(code, random.Random(s), cfg, credit)[2] == [n_key] for s in range(600))
    assert 20 <= hits <= 52  # expected 600 * (1/20) / (1/20 + 10/12) = 34 (sd 5.6)
    # A literal whose every change (four or more) broke a working program is left alone; with none left,
    # the operator does not apply.
    credit = {n_key: [5, 0, 4, 4], seed_key: [10, 9, 10, 1]}
    assert {tuple(perturb_constants_at(code, random.Random(s), cfg, credit)[2]) for s in range(100)} == {
        (seed_key,)
    }
    credit[seed_key] = [4, 0, 4, 4]
    with pytest.raises(NotApplicable, match="every literal inside the evolve blocks has broken"):
        perturb_constants_at(code, random.Random(0), cfg, credit)
    for held in ([4, 0, 4, 3], [3, 0, 3, 3], [8, 0, 0, 0]):  # one change held up; too few; broken parents
        credit[seed_key] = held
        assert perturb_constants_at(code, random.Random(0), cfg, credit)[2] == [seed_key]
