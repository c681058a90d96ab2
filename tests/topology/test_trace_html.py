"""The trace page (``trace.html``): one self-contained file, checked in a real browser.

Runs are made with FunctionLLMs (a little latency, so that the timeline has
timings): the society of examples/specs/society.yaml (three personas batched
per round), a supervisor with a function router and a tool-calling agent,
and a ``run_many`` of a chain over three tasks. The page must load without a
console error or a request off the file system, show every event, and show
an event's prompt and output when it is clicked. Screenshots go to
build/test-artifacts/ to be looked at.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from societas.agents import FunctionLLM
from societas.agents.tools import tool
from societas.topology import Graph, GraphSpec, Runtime, Trace, TraceEvent, trace_to_html, write_trace_html
from societas.topology.cli import app

ROOT = Path(__file__).resolve().parents[2]
TASK = 'What is 2+2? Say it in <b>bold</b> & "quotes" </script><script>alert(1)</script>'


def _scripted(messages):
    last = messages[-1]["content"]
    return f"Final answer: {len(last)} (I read {last.splitlines()[0][:40]!r})"


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first
        b: second
    """
    return a + b


def _supervisor_llm(messages):
    if "<tools>" in messages[0]["content"]:
        if not any(m["role"] == "assistant" for m in messages):
            return 'Adding. <tool_call>{"name": "add", "arguments": {"a": 2, "b": 40}}</tool_call>'
        return "The sum is 42."
    return "A short essay about 42."


@pytest.fixture(scope="module")
def society():
    graph = Graph.from_file(ROOT / "examples" / "specs" / "society.yaml")
    result = Runtime(graph, llm=FunctionLLM(_scripted, latency_s=0.002)).run(TASK)
    return graph, result.trace


@pytest.fixture(scope="module")
def supervisor():
    spec = GraphSpec.from_data(
        {
            "name": "supervisor",
            "nodes": [
                {"id": "sup", "kind": "function", "function": "sup"},
                {"id": "coder", "role": "coder", "prompt": "Compute it.", "tools": ["add"]},
                {"id": "writer", "role": "writer", "prompt": "Write prose."},
                {"id": "check", "kind": "function", "function": "check"},
            ],
            "edges": ["coder -> check", "writer -> check"],
            "routers": [
                {
                    "source": "sup",
                    "function": "pick",
                    "targets": ["coder", "writer", "END"],
                    "multi": True,
                    "labels": {"coder": "maths", "writer": "prose"},
                }
            ],
        }
    )
    graph = Graph(spec)
    functions = {"sup": lambda c: "route it", "pick": lambda c: ["coder", "writer"], "check": lambda c: "ok"}
    rt = Runtime(
        graph, llm=FunctionLLM(_supervisor_llm, latency_s=0.002), tools={"add": add}, functions=functions
    )
    return graph, rt.run("add 2 and 40, then write about it").trace


@pytest.fixture(scope="module")
def many():
    graph = Graph.build(
        "chain",
        [
            {"id": "plan", "role": "planner"},
            {"id": "solve", "role": "solver"},
            {"id": "test", "role": "tester"},
        ],
        [("plan", "solve"), ("solve", "test")],
    )
    results = Runtime(graph, llm=FunctionLLM(_scripted, latency_s=0.002)).run_many(["one", "two", "three"])
    return graph, [r.trace for r in results]


def _data(html: str) -> dict:
    """The JSON the page embeds (JSON.parse rejects Infinity and NaN, so this does too)."""
    block = re.search(r'<script type="application/json" id="trace-data">(.*?)</script>', html, re.S)
    assert block is not None

    def reject(name):
        raise ValueError(f"{name} in the page's JSON")

    return json.loads(block.group(1), parse_constant=reject)


def _details(page) -> str:
    return page.page.text_content("#details") or ""


# -- the file itself ------------------------------------------------------------------


def test_the_page_is_one_file_that_fetches_nothing(society):
    graph, trace = society
    html = trace_to_html(trace, graph)
    # the only URL is the SVG namespace; no script, style or image comes from elsewhere
    assert re.findall(r"https?://[^\s\"']+", html) == ["http://www.w3.org/2000/svg"]
    assert not re.search(r"\s(src|href)=|<link|@import|url\((?!#)", html)
    # the task's "</script>" cannot close the data block: only the page's own two scripts end
    assert html.count("</script>") == 2
    data = _data(html)
    assert len(data["runs"][0]["events"]) == len(trace)
    assert data["runs"][0]["meta"]["task"] == TASK


def test_a_saved_trace_makes_the_same_page(society, tmp_path):
    graph, trace = society
    saved = trace.save_jsonl(tmp_path / "t.jsonl")
    assert trace_to_html(saved, graph) == trace_to_html(trace, graph)
    out = write_trace_html(str(saved), tmp_path / "deep" / "t.html")  # no graph: drawn from the trace
    assert out.read_text(encoding="utf-8").startswith("<!doctype html>")


def test_batches_timings_and_odd_values_in_the_data(society):
    graph, trace = society
    trace = Trace(trace.events, {**trace.meta, "budget": math.inf, "obj": object()})
    run = _data(trace_to_html(trace, graph))["runs"][0]
    assert run["meta"]["budget"] == "inf" and run["timed"]
    # 3 personas x 2 rounds, then the aggregator: three calls, the first two shared by three prompts
    assert [len(c["members"]) for c in run["calls"]] == [3, 3, 1]
    starts = [e["t0"] for e in run["events"]]
    assert starts == sorted(starts) and run["steps"][-1]["t1"] > run["steps"][0]["t1"] > 0


# -- in the browser ---------------------------------------------------------------------


def test_the_society_page_shows_every_message_and_opens_each(society, page, tmp_path):
    graph, trace = society
    path = write_trace_html(trace, tmp_path / "society.html", graph)
    page.open(path)
    p = page.page
    p.wait_for_selector("body[data-ready]")
    assert p.locator("#events li.event").count() == len(trace)
    assert p.locator("#timeline .bar").count() == len(trace)
    assert p.locator("#graph .node").count() == 4 and p.locator("#graph .edge").count() == 12
    assert p.locator("#timeline .band").count() == 2  # the two batched rounds
    assert "one call of 3 prompts" in _details(page)  # the first event is selected on load
    page.screenshot("trace_html_society.png")

    ev = trace[4]
    p.click('#events li[data-i="4"]')
    text = _details(page)
    assert ev.prompt[-1]["content"] in text and ev.output in text
    assert p.text_content("#details-title").startswith(f"#5 · {ev.sender}")
    # the message went along the sender's out-edges, its inputs came along the in-edges
    assert p.locator(f'#graph .edge.out[data-src="{ev.sender}"]').count() == len(ev.receivers)
    assert p.locator(f'#graph .node.sel[data-node="{ev.sender}"]').count() == 1
    page.screenshot("trace_html_society_message.png")

    p.keyboard.press("ArrowRight")
    assert p.text_content("#details-title").startswith("#6")
    p.keyboard.press("ArrowLeft")
    p.keyboard.press("ArrowLeft")
    assert p.text_content("#details-title").startswith("#4")
    p.click('#timeline .bar[data-i="6"]')
    assert trace[6].output in _details(page)
    assert page.errors == [] and page.requests == []


def test_router_decisions_tool_calls_and_nodes(supervisor, page, tmp_path):
    graph, trace = supervisor
    kinds = [e.kind for e in trace]
    assert "router" in kinds and "tool_call" in kinds
    page.open(write_trace_html(trace, tmp_path / "supervisor.html", graph))
    p = page.page
    p.wait_for_selector("body[data-ready]")
    assert p.locator("#events li.event").count() == len(trace)

    router = kinds.index("router")
    p.click(f'#events li[data-i="{router}"]')
    assert "Router decision" in _details(page)
    assert p.locator("#details .route .chip.chosen").all_text_contents() == ["coder", "writer"]
    assert p.locator('#graph .edge.router.out[data-src="sup"]').count() == 2
    assert p.locator('#graph .node[data-node="END"]').count() == 1

    call = kinds.index("tool_call")
    p.click(f'#events li[data-i="{call}"]')
    text = _details(page)
    assert '"a": 2' in text and trace[call].output == "42" and "42" in text
    page.screenshot("trace_html_tool_call.png")

    # a model turn that asked for the tool, and the batch it shared with the writer
    turn = next(i for i, e in enumerate(trace) if e.meta.get("partial"))
    p.click(f'#events li[data-i="{turn}"]')
    text = _details(page)
    assert "Tool calls asked for" in text and "one call of 2 prompts" in text

    p.click('#graph .node[data-node="coder"]')
    assert p.text_content("#details-title") == "node coder"
    assert p.locator("#details .evrow").count() == sum(e.sender == "coder" for e in trace)
    assert page.errors == [] and page.requests == []


def test_run_many_pages_link_the_batches_across_tasks(many, page, tmp_path):
    graph, traces = many
    page.open(write_trace_html(traces, tmp_path / "many.html", graph))
    p = page.page
    p.wait_for_selector("body[data-ready]")
    assert p.locator("#run option").count() == 3
    assert p.locator("#events li.event .tag.batch").all_text_contents() == ["batch ×3"] * 3
    assert "“one”" == p.text_content("#task")
    p.locator("#details .link", has_text="task 2").first.click()
    assert p.input_value("#run") == "1" and p.text_content("#task") == "“two”"
    assert p.locator("#events li.event").count() == len(traces[1])
    assert page.errors == [] and page.requests == []


# -- the command line ------------------------------------------------------------------


def draft(ctx):
    return f"a draft of {ctx.task}"


def pick(ctx):
    return "polish" if ctx.output.startswith("a draft") else "END"


def polish(ctx):
    return " ".join(ctx.inputs.values()).upper()


CLI_SPEC = """
name: cli-page
nodes:
  - {id: draft, kind: function, function: "tests.topology.test_trace_html:draft"}
  - {id: polish, kind: function, function: "tests.topology.test_trace_html:polish"}
routers:
  - {source: draft, function: "tests.topology.test_trace_html:pick", targets: [polish, END]}
"""


def test_cli_run_writes_the_page_and_trace_remakes_it(tmp_path, page):
    spec = tmp_path / "spec.yaml"
    spec.write_text(CLI_SPEC)
    jsonl, html = tmp_path / "t.jsonl", tmp_path / "out" / "t.html"
    runner = CliRunner()  # in this process: a subprocess would spend seconds importing
    args = ["run", str(spec), "--task", "an essay", "--trace", str(jsonl), "--html", str(html), "--json"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output.strip().splitlines()[-1])
    assert out["html"] == str(html) and out["output"] == "A DRAFT OF AN ESSAY"
    events = len(jsonl.read_text().splitlines()) - 1
    assert len(_data(html.read_text())["runs"][0]["events"]) == events == 3  # draft, its route, polish

    again = runner.invoke(
        app, ["trace", str(jsonl), "--spec", str(spec), "--html", str(tmp_path / "again.html"), "--json"]
    )
    assert again.exit_code == 0, again.output
    assert json.loads(again.output.strip().splitlines()[-1])["events"] == events
    plain = runner.invoke(app, ["trace", str(jsonl)])  # no --html: next to the trace
    assert plain.exit_code == 0 and (tmp_path / "t.html").is_file()
    missing = runner.invoke(app, ["trace", str(tmp_path / "none.jsonl")])
    assert missing.exit_code == 2 and "no such file" in missing.output

    page.open(tmp_path / "again.html")
    page.page.wait_for_selector("body[data-ready]")
    assert page.page.locator("#events li.event").count() == events
    assert page.errors == [] and page.requests == []


def test_an_empty_trace_still_makes_a_page(page, tmp_path):
    page.open(write_trace_html(Trace([], {"task": "nothing"}), tmp_path / "empty.html"))
    page.page.wait_for_selector("body[data-ready]")
    assert "no events" in (page.page.text_content("#events") or "")
    assert page.errors == [] and page.requests == []


def test_a_bad_source_is_refused():
    with pytest.raises(TypeError):
        trace_to_html([TraceEvent(0, 0, "a", [], "agent", None, [], "x")])  # type: ignore[list-item]
