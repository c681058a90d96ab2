"""The topology command line, run as a user would (a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "societas.topology", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def scripted(messages):
    return "Final answer: " + str(len(messages[-1]["content"]))


@pytest.mark.parametrize(
    "doc,needle",
    [
        ("nodes:\n  - id: a\n    role: solver\n    llm: big\n", "nodes[0].llm: unknown LLM 'big'"),
        ("nodes: []\n", "nodes"),
        ("nodes:\n  - id: a\n    role: solver\n  - id: a\n    role: solver\n", "duplicate id 'a'"),
        ("nodes:\n  - {id: a, role: solver}\n  - {id: b, role: solver}\nedges: [a -> b, b -> a]\n", "rounds"),
        ("nodes:\n  - {id: a, role: wizard}\n", "nodes[0].role: unknown role 'wizard'"),
        ("nodes:\n  - {id: a, role: solver, temperature: 3}\n", "nodes[0]"),
        ("nodes: [\n", "line"),
    ],
)
def test_bad_spec_exits_2_with_a_short_message(tmp_path, doc, needle):
    f = tmp_path / "spec.yaml"
    f.write_text(doc)
    for cmd in (["show", str(f)], ["run", str(f), "--task", "x", "--json"]):
        r = _cli(*cmd)
        assert r.returncode == 2, r.stderr
        assert needle in r.stderr
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) <= 3


def test_missing_file_exits_2():
    r = _cli("show", "no/such/spec.yaml")
    assert r.returncode == 2 and "no such file" in r.stderr


def test_show_json_and_render(tmp_path):
    r = _cli("show", "examples/specs/society.yaml", "--json", "--render", str(tmp_path / "g.png"))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["metrics"] == {"nodes": 4, "edges": 12, "depth": 2, "density": 1.0}
    assert out["final"] == "aggregator" and "flowchart" in out["mermaid"]
    assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_json_with_a_scripted_llm(tmp_path):
    r = _cli(
        "run",
        "examples/specs/society.yaml",
        "--task",
        "What is 2+2?",
        "--llm",
        "function:tests.topology.test_cli:scripted",
        "--trace",
        str(tmp_path / "t.jsonl"),
        "--render",
        str(tmp_path / "t.mmd"),
        "--json",
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["output"].startswith("Final answer: ")
    assert out["totals"]["calls"] == 7 and out["totals"]["llm_batches"] == 3
    assert out["metrics"]["nodes"] == 4
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert len(lines) == 1 + 7
    assert "tok|" in (tmp_path / "t.mmd").read_text()


def test_run_budget_and_unknown_llm(tmp_path):
    r = _cli(
        "run",
        "examples/specs/society.yaml",
        "--task",
        "x",
        "--llm",
        "function:tests.topology.test_cli:scripted",
        "--max-calls",
        "2",
        "--json",
    )
    assert r.returncode == 0
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["stopped"] == "call_budget" and out["output"] is None and out["totals"]["calls"] == 2
    r = _cli("run", "examples/specs/society.yaml", "--task", "x", "--llm", "nonsense")
    assert r.returncode == 2 and "unknown LLM" in r.stderr
