"""The project's one reader of YAML and JSON documents, and its progress lines for non-terminals."""

from __future__ import annotations

import io
import time

import pytest

from societas.agents import documents
from societas.agents.documents import DocumentError, DocumentNotFoundError
from societas.agents.progress import ProgressLines, progress_every_s

BILLION_LAUGHS = """
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def test_an_alias_bomb_is_refused_fast_and_named():
    started = time.monotonic()
    with pytest.raises(
        DocumentError, match=r"^run\.yaml: the document is too large \(more than 2000000 values"
    ):
        documents.load_yaml(BILLION_LAUGHS, source="run.yaml")
    assert time.monotonic() - started < 5


def test_files_are_named_in_every_failure(tmp_path):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(DocumentError, match=r"latin1\.yaml: not UTF-8 text \(byte 9"):
        documents.load_yaml_file(bad)
    with pytest.raises(DocumentNotFoundError, match=r"missing\.yaml: no such file") as caught:
        documents.load_yaml_file(tmp_path / "missing.yaml")
    assert isinstance(caught.value, FileNotFoundError)
    with pytest.raises(DocumentError, match="is a directory"):
        documents.read_text(tmp_path)
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1, 2\n")
    with pytest.raises(DocumentError, match=r"broken\.yaml: YAML syntax error at line 2"):
        documents.load_yaml_file(broken)
    twice = tmp_path / "twice.yaml"
    twice.write_text("a: 1\na: 2\n")
    with pytest.raises(DocumentError, match="duplicate key 'a'"):
        documents.load_yaml_file(twice)
    with pytest.raises(DocumentError, match=r"x\.json: JSON syntax error at line 1, column 2"):
        documents.load_json("{", source="x.json")


def test_python_tags_are_refused():
    with pytest.raises(DocumentError, match="YAML"):
        documents.load_yaml("!!python/object/apply:os.system ['true']")


def test_progress_lines_come_at_the_interval_and_at_the_end():
    now = [0.0]
    out = io.StringIO()
    lines = ProgressLines("evolve", every_s=10, stream=out, clock=lambda: now[0])
    lines.update(1, 100, best=0.5)
    assert out.getvalue() == ""  # not yet due
    now[0] = 10.0
    lines.update(7, 100, best=0.75)
    now[0] = 12.0
    lines.update(8, 100, best=0.75)  # 2 s after the last line: silent
    now[0] = 75.0
    lines.update(100, 100, best=0.9, failed=3)
    lines.finish()
    lines.finish()
    assert out.getvalue().splitlines() == [
        "evolve: 7/100, best 0.75 (0:10)",
        "evolve: 100/100, best 0.9, failed 3 (1:15)",
        "evolve: 100/100, best 0.9, failed 3 (1:15)",
    ]


def test_progress_interval_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("SOCIETAS_PROGRESS_EVERY_S", "2.5")
    assert progress_every_s() == 2.5
    monkeypatch.setenv("SOCIETAS_PROGRESS_EVERY_S", "soon")
    with pytest.raises(ValueError, match=r"SOCIETAS_PROGRESS_EVERY_S='soon' must be a positive number"):
        progress_every_s()
    monkeypatch.delenv("SOCIETAS_PROGRESS_EVERY_S")
    assert progress_every_s() == 30.0
