"""``report.html`` in a real browser: a small real run (curve fit, with a held-out set) and 5,000
synthetic programs (load time, filters, code rebuilt from line edits, diffs as difflib writes them)."""

from __future__ import annotations

import difflib
import json
import random
import shutil
import time
from pathlib import Path

import pytest

from societas.agents.llm import FunctionLLM
from societas.evolve.config import load_config
from societas.evolve.controller import Controller
from societas.evolve.database import ProgramStore
from societas.evolve.mutation import LLMEnsemble
from societas.evolve.program import Program
from societas.evolve.report import write_report
from societas.evolve.report_html import html_report_data, render_html_report, write_html_report
from societas.evolve.task import load_task

from .scripted_llm import answer
from .test_held_out_report import CURVE_FIT, HELD_OUT_CODE

OPERATORS = ("llm", "constant", "operator", "crossover", "function")


def synthetic_programs(n: int, islands: int = 4, seed: int = 0) -> list[Program]:
    """``n`` programs shaped like a long run: a ~2.5 kB seed, children of the fittest (mostly) or of
    any program, one-line edits, about 10% failed evaluations and 5% failed mutations, negative
    fitness (as the game tasks' negative exploitability) that improves over time."""
    rng = random.Random(seed)
    body = "\n".join(
        f"    w{k} = {rng.uniform(0.1, 2.0):.4f}  # weight of term {k}\n    total += w{k} * features[{k}] ** 2"
        for k in range(28)
    )
    seed_code = (
        '"""A synthetic program for the report test."""\n\nimport math\n\n\n# EVOLVE-BLOCK-START\n'
        f"def score(features):\n    total = 0.0\n{body}\n    return math.sqrt(total)\n# EVOLVE-BLOCK-END\n\n\n"
        "def run():\n    return score([1.0] * 28)\n"
    )
    programs = [
        Program(
            id="000000-seed",
            code=seed_code,
            iteration=0,
            mutation={"kind": "seed"},
            metrics={"combined_score": -0.05, "neg_expl_kuhn_poker": -0.04, "neg_expl_leduc_poker": -0.06},
            fitness=-0.05,
            artifacts={"evaluate_stdout": '[result] {"metrics": {"combined_score": -0.05}}\n'},
        )
    ]
    ok = [programs[0]]
    top = [programs[0]]  # the ten fittest, kept as the run goes
    for it in range(1, n):
        parent = rng.choice(top) if rng.random() < 0.7 else rng.choice(ok)
        kind = rng.choice(OPERATORS)
        lines = parent.code.split("\n")
        k = 8 + 2 * rng.randrange(28)  # a weight's line
        lines[k] = lines[k].replace("= ", f"= {rng.uniform(0.5, 1.5):.3f} * ", 1)
        if kind == "llm" and rng.random() < 0.5:
            lines.insert(k + 1, f"    total *= {rng.uniform(0.9, 1.1):.4f}  # rescaled")
        code = "\n".join(lines)
        mutation: dict = {"kind": kind, "selection": "exploitation"}
        if kind == "crossover":
            mutation["donor_id"] = rng.choice(ok).id
        roll = rng.random()
        status = "failed" if roll < 0.10 else "mutation_failed" if roll < 0.15 else "ok"
        artifacts = {"evaluate_stdout": f'[result] {{"metrics": {{"step": {it}}}}}\n' + "x" * 250}
        fitness = None
        metrics: dict[str, float] = {}
        if status == "mutation_failed":
            code = parent.code
            artifacts = {
                "failure": "malformed LLM answer: no SEARCH/REPLACE block",
                "llm_response": "I think " * 40,
            }
        elif status == "failed":
            artifacts["failure"] = (
                "evaluation timed out after 20 s\nTraceback (most recent call last):\n" + "  ...\n" * 5
            )
        else:
            fitness = (parent.fitness or -0.05) * rng.uniform(0.93, 1.4)
            metrics = {
                "combined_score": fitness,
                "neg_expl_kuhn_poker": fitness * 0.8,
                "neg_expl_leduc_poker": fitness * 1.2,
            }
        if kind == "llm":
            artifacts["llm_response"] = (
                "Move the weight.\n<<<<<<< SEARCH\n</script><script>alert(1)</script><!--\n"
            )
        program = Program(
            id=f"{it:06d}-{rng.getrandbits(40):010x}",
            code=code,
            iteration=it,
            parent_id=parent.id,
            generation=parent.generation + 1,
            island=(it - 1) % islands,
            mutation=mutation,
            metrics=metrics,
            fitness=fitness,
            status=status,
            artifacts=artifacts,
        )
        programs.append(program)
        if program.ok:
            ok.append(program)
            top = sorted([*top, program], key=lambda p: p.fitness or 0.0, reverse=True)[:10]
    return programs


# ---------------------------------------------------------------- helpers


def _ready(page, path: Path) -> float:
    """Open ``path`` and wait for the page's script to finish its first drawing; the seconds it took."""
    start = time.perf_counter()
    page.open(path)
    page.page.wait_for_selector("html[data-ready]", state="attached", timeout=20_000)
    return time.perf_counter() - start


def _shown(page) -> int:
    return int(page.page.get_attribute("#shown-count", "data-count"))


def _count(page, selector: str) -> int:
    return page.page.locator(selector).count()


def _diff_lines(page) -> list[str]:
    """The page's diff without its two file lines, as ``difflib.unified_diff`` writes one."""
    return page.page.eval_on_selector_all("#diff .l", "els => els.slice(2).map(e => e.textContent)")


def _difflib(parent: str, child: str) -> list[str]:
    return list(difflib.unified_diff(parent.split("\n"), child.split("\n"), lineterm=""))[2:]


def _code(page) -> str:
    return "\n".join(page.page.eval_on_selector_all("#code .l", "els => els.map(e => e.textContent)"))


def _toggle(page, kind: str, value: str) -> None:
    page.page.click(f'input[data-filter="{kind}"][value="{value}"]')


# ---------------------------------------------------------------- a real run


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """Curve fit with a held-out set: 8 iterations of scripted-LLM diffs (some answers malformed)
    and structural mutations on 2 islands, then the report."""
    root = tmp_path_factory.mktemp("report_html")
    task_dir = root / "task"
    shutil.copytree(CURVE_FIT, task_dir)
    with (task_dir / "evaluator.py").open("a") as handle:
        handle.write(HELD_OUT_CODE)
    task = load_task(task_dir)
    cfg = load_config(task.config_path)
    cfg.max_iterations = 8
    cfg.evaluator.task_settings = {"held_out_points": 7}
    cfg.held_out.baselines = ["exact", "zero"]
    cfg.mutation.weights = {"llm": 0.5, "constant": 0.3, "crossover": 0.2}
    # The configured mix, every child evaluated: the page is checked against a known mix of kinds.
    cfg.adaptive.enabled = False
    cfg.novelty.enabled = False
    controller = Controller(
        task, cfg, root / "run", llms=LLMEnsemble([(FunctionLLM(answer, name="scripted"), 1.0)])
    )
    try:
        controller.run()
    finally:
        controller.close()
    figures = write_report(root / "run")
    store = ProgramStore(root / "run" / "programs.db")
    try:
        programs = store.programs()
    finally:
        store.close()
    return root / "run", figures, programs


def test_report_page_of_a_real_run(page, real_run):
    run_dir, figures, programs = real_run
    assert figures["report_html"] == str(run_dir / "report.html")
    _ready(page, run_dir / "report.html")
    n = len(programs)
    assert _shown(page) == n
    assert _count(page, "#tree .n") == n and _count(page, "#programs tbody tr") == n
    ok = sum(p.ok for p in programs)
    assert _count(page, "#plot .pt") == ok
    assert _count(page, "#plot .fail, #plot .mfail") == n - ok
    # the returned program is open, its lineage drawn
    assert figures["best_id"] in page.page.inner_text("#details h2")
    assert page.page.get_attribute("#tree .lineage", "d")
    # held-out: the seed, the best evolved program and the baselines, each with its mean
    rows = page.page.locator("#held-out tbody tr")
    assert rows.count() == len(figures["held_out"])
    text = page.page.inner_text("#held-out")
    assert "exact" in text and "zero" in text and "seed" in text
    page.screenshot("report-html-run.png")

    # filters: by island, then by operator, and back
    _toggle(page, "island", "1")
    expected = sum(p.island != 1 for p in programs)
    assert 0 < expected < n
    assert (
        _shown(page) == expected == _count(page, "#tree .n:not(.off)") == _count(page, "#programs tbody tr")
    )
    _toggle(page, "op", "llm")
    expected = sum(p.island != 1 and p.mutation["kind"] != "llm" for p in programs)
    assert _shown(page) == expected == _count(page, "#programs tbody tr")
    page.page.click("#filters-reset")
    assert _shown(page) == n

    # a click on a changed child in the tree opens its diff against its parent, then its code
    by_id = {p.id: p for p in programs}
    index, child = next(
        (i, p)
        for i, p in enumerate(programs)
        if p.parent_id and p.status != "mutation_failed" and p.code != by_id[p.parent_id].code
    )
    page.page.locator(f'#tree .n[data-i="{index}"] .mk').click()
    assert child.id in page.page.inner_text("#details h2")
    assert _diff_lines(page) == _difflib(by_id[child.parent_id].code, child.code)
    page.page.click('#details [data-tab="code"]')
    assert _code(page) == child.code
    page.page.click('#details [data-tab="metrics"]')
    assert "combined_score" in page.page.inner_text("#tab-body")
    # a failed mutation shows its reason and the LLM's answer
    failed = next(
        i for i, p in enumerate(programs) if p.status == "mutation_failed" and p.mutation["kind"] == "llm"
    )
    page.page.click(f'#programs tr[data-i="{failed}"]')
    assert "malformed LLM answer" in page.page.inner_text("#details .failure")
    page.page.click('#details [data-tab="artifacts"]')
    assert "llm_response" in page.page.inner_text("#tab-body")
    # the last changed child, opened from the plot, for the screenshot of an open program
    last = max(
        i for i, p in enumerate(programs) if p.ok and p.parent_id and p.code != by_id[p.parent_id].code
    )
    page.page.click('#details [data-tab="diff"]')
    page.page.locator(f'#plot .pt[data-i="{last}"]').click()
    assert programs[last].id in page.page.inner_text("#details h2")
    page.page.evaluate("window.scrollTo(0, 0)")
    page.screenshot("report-html-program.png")
    assert page.errors == [] and page.requests == []


# ---------------------------------------------------------------- 5,000 programs


@pytest.fixture(scope="module")
def big_report(tmp_path_factory):
    programs = synthetic_programs(5000)
    best = max((p for p in programs if p.ok), key=lambda p: p.fitness or 0.0)
    start = time.perf_counter()
    written = write_html_report(
        tmp_path_factory.mktemp("report_html_big") / "report.html",
        programs,
        title="5,000 synthetic programs",
        best_id=best.id,
        top_id=best.id,
    )
    written["seconds"] = time.perf_counter() - start
    return Path(written["path"]), written, programs, best


def test_report_page_of_5000_programs_opens_and_rebuilds_code_on_demand(page, big_report):
    path, written, programs, best = big_report
    assert written["bytes"] < 12_000_000  # about 3 MB: children are stored as line edits
    seconds = _ready(page, path)
    in_page = int(page.page.get_attribute("html", "data-ready"))
    print(
        f"\nreport.html with 5000 programs: {written['bytes'] / 1e6:.2f} MB written in {written['seconds']:.2f} s; "
        f"opened in {seconds:.2f} s (its script {in_page} ms)"
    )
    assert seconds < 20  # a sanity bound; the figure is reported, not asserted tightly
    assert _shown(page) == 5000 and _count(page, "#tree .n") == 5000
    assert _count(page, "#programs tbody tr") == 100  # the table draws rows on demand
    page.screenshot("report-html-5000.png")

    _toggle(page, "island", "0")
    assert _shown(page) == sum(p.island != 0 for p in programs) == _count(page, "#tree .n:not(.off)")
    _toggle(page, "op", "crossover")
    expected = sum(p.island != 0 and p.mutation["kind"] != "crossover" for p in programs)
    assert _shown(page) == expected == _count(page, "#plot .pt, #plot .fail, #plot .mfail")
    page.page.click("#filters-reset")

    # the returned program (open at load) is deep in the tree: its code is rebuilt from its seed's
    assert best.generation > 20
    page.page.click('#details [data-tab="code"]')
    assert _code(page) == best.code
    # any program, found by id: code and diff as difflib writes it
    by_id = {p.id: p for p in programs}
    target = next(p for p in reversed(programs) if p.mutation["kind"] == "llm" and p.status == "ok")
    page.page.fill("#table-search", target.id)
    page.page.click(f'#programs tbody tr:has-text("{target.id}")')
    assert _code(page) == target.code
    page.page.click('#details [data-tab="diff"]')
    assert _diff_lines(page) == _difflib(by_id[target.parent_id].code, target.code)
    # an artifact holding "</script>" and "<!--" is shown as text (the JSON blob escapes them)
    page.page.click('#details [data-tab="artifacts"]')
    assert "</script><script>alert(1)</script><!--" in page.page.inner_text("#tab-body")
    assert page.errors == [] and page.requests == []


def test_embedded_json_cannot_close_its_script_element():
    program = Program(id="0", code="x = '</script><!--'\n", iteration=0, metrics={"a": float("nan")})
    html = render_html_report(html_report_data([program]))
    assert html.count("</script>") == 2 and "<!--" not in html
    blob = html.split('id="report-data">', 1)[1].split("</script>", 1)[0]
    assert json.loads(blob)["programs"][0]["c"] == program.code
    assert json.loads(blob)["programs"][0]["m"] == [None]  # NaN is not JSON
