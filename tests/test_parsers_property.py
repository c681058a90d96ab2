"""Property tests across the layers: every spec and config parser answers any input cleanly.

Random bytes (non-UTF-8 included), random YAML and JSON text (tags, anchors,
aliases, control characters), alias bombs, deep nesting and random Python
values go to each parser of the project. A parser may succeed, or refuse
with one of the project's own errors (``DocumentError``, ``SpecError`` and
its subclasses, ``ConfigError``, ``SettingsError``, ``TaskError``,
``MutationError``, ``UnknownLLM``) or with a plain ``ValueError`` /
``TypeError`` that the project raises on purpose; never with a ``KeyError``,
an ``IndexError``, a ``RecursionError``, a ``UnicodeDecodeError``, a YAML or
pydantic error, or a message Python or pydantic wrote. Every refusal is one
non-empty line. What parses is sound: a config that loads reloads from its
own dump into an equal one.

The topology layer's own parsers (layered AgentConductor YAML, graph specs
from text) have deeper properties in ``tests/topology/test_parsers_property.py``;
this file adds files, bytes, typed values and the other layers.
"""

from __future__ import annotations

import copy
import json
import math
import re
import reprlib
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from typer.testing import CliRunner

import societas.marl.comm.train as comm_train
import societas.marl.llm.cli as llm_cli
from societas.agents.documents import (
    DocumentError,
    DocumentNotFoundError,
    load_json,
    load_json_file,
    load_yaml,
    load_yaml_file,
    read_text,
)
from societas.agents.llm import UnknownLLM, load_llm
from societas.agents.parsers import (
    extract_code,
    extract_code_blocks,
    extract_final_answer,
    extract_yaml_block,
    numeric_answer,
)
from societas.evolve.config import ConfigError, EvolveConfig, load_config, parse_config
from societas.evolve.evaluator import TaskError
from societas.evolve.mutation import MutationError, apply_llm_answer, parse_diff, validate_child
from societas.evolve.program import EvolveBlockError
from societas.evolve.task import load_task
from societas.evolve.task_settings import load_task_settings
from societas.marl.cli import app as marl_app
from societas.marl.llm.backend import TrainConfig
from societas.marl.llm.recipes import RECIPES, ConductorConfig, RemulConfig, SelfPlayConfig, SocietyConfig
from societas.marl.llm.settings import SettingsError, validate_settings
from societas.marl.routing.env import parse_answer
from societas.marl.routing.train import RoutingConfigError, RoutingTrainConfig
from societas.topology.errors import SpecError
from societas.topology.graph import Graph
from societas.topology.layered import parse_layered_yaml, try_parse_layered_yaml
from societas.topology.patterns.selfplay import parse_proposal
from societas.topology.patterns.society_behaviours import parse_behaviour_labels
from societas.topology.spec import GraphSpec

SETTINGS = settings(
    max_examples=120,
    derandomize=True,  # the same examples on every run and machine
    database=None,
    # No per-example deadline: wall-clock limits fail at random on a loaded machine.
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,  # tmp_path and monkeypatch are the same for every example
    ],
)
FEW = settings(SETTINGS, max_examples=60)

# -- what a refusal may look like ----------------------------------------------------------------

# Fragments of messages that pydantic or Python wrote, not the project.
PYDANTIC_RAW = re.compile(r"validation errors? for |errors\.pydantic\.dev|\[type=|input_value=")
PYTHON_INTERNAL = re.compile(
    r"object is not (iterable|subscriptable|callable)|has no attribute|unhashable type|invalid literal for"
    r"|could not convert|cannot convert float|embedded null|codec can't|index out of range"
    r"|maximum recursion depth|argument must be|expected str, bytes or os\.PathLike"
    r"|required to perform a relative import|Invalid IPv6 URL|not supported between instances"
    r"|positional argument|unexpected keyword argument|cannot unpack"
)


SHORT = reprlib.Repr()  # a value in a message: cut short, safe for values nested thousands deep
SHORT.maxlevel, SHORT.maxstring, SHORT.maxother = 4, 120, 120


class Refused:
    """What :func:`attempt` returns when the parser refused the input cleanly."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


def check_refusal(
    exc: BaseException,
    allowed: tuple[type[BaseException], ...],
    plain: tuple[type[BaseException], ...] = (),
    what: str = "",
) -> None:
    """``exc`` is one of the project's errors ``allowed`` (or exactly one of the ``plain`` built-in
    types, with a message the project wrote), in one non-empty line."""
    detail = "".join(traceback.format_exception(exc)[-6:])
    deliberate = type(exc) in plain
    if not (isinstance(exc, allowed) or deliberate):
        raise AssertionError(f"{what}: {type(exc).__name__} escaped the parser:\n{detail}") from exc
    text = str(exc).strip()
    assert text, f"{what}: {type(exc).__name__} with an empty message"
    assert "\n" not in text and "\r" not in text, f"{what}: a message of several lines: {text!r}"
    assert not PYDANTIC_RAW.search(text), f"{what}: pydantic's raw message: {text!r}"
    assert "Traceback" not in text, f"{what}: a traceback in the message: {text!r}"
    if deliberate:
        assert not PYTHON_INTERNAL.search(text), f"{what}: Python's own {type(exc).__name__}: {text!r}"


def attempt(
    parse: Callable[[Any], Any],
    value: Any,
    allowed: tuple[type[BaseException], ...],
    plain: tuple[type[BaseException], ...] = (),
) -> Any:
    """``parse(value)``, or a :class:`Refused` after checking the refusal."""
    try:
        return parse(value)
    except Exception as exc:
        check_refusal(
            exc, allowed, plain, what=f"{getattr(parse, '__qualname__', parse)}({SHORT.repr(value)})"
        )
        return Refused(exc)


# -- strategies -------------------------------------------------------------------------------------

# Pieces of YAML that reach the loader's corners: tags of every safe constructor (with values they
# cannot convert), anchors, aliases, merge keys, directives, control and non-ASCII characters.
YAML_PIECES = [
    *"ab:-[]{}`\n #&*!|>'\",?%@\t<=~.0123456789eE+\\",
    "!!int ", "!!float ", "!!bool ", "!!null ", "!!str ", "!!binary ", "!!timestamp ", "!!set ",
    "!!omap ", "!!pairs ", "!!map ", "!!seq ", "!!python/object:os.system ", "!!python/name:os.system ",
    "!<tag:yaml.org,2002:int> ", "!local ", "&a ", "*a", "&b ", "*b", "<<: ", "<<: *a", "? ",
    "''", '""', "2001-13-45", "2001-02-30 25:61:00", "0x", "0o", "0b", "0x_", "1_", ":1", "+", "-", ".",
    "1e999", ".inf", "-.inf", ".nan", "~", "null", "yes", "no", "on", "=", "--- ", "...", "%YAML 1.1\n",
    "%YAML 9.9\n", "%TAG ! tag:x,2000:\n", "%FOO\n", "\ufeff", "\x00", "\x01", "\x7f", "\x85", "\x97",
    "\u2028", "\ud7ff", "\U0001f600", "- - ", "\n  - ", "\n    ", "a: ", "- ",
]  # fmt: skip
yamlish_text = st.lists(st.sampled_from(YAML_PIECES) | st.characters(), max_size=60).map("".join)
jsonish_text = st.lists(
    st.sampled_from(
        [*'{}[]:,"\\ 0123456789.eE+-tfn\n\t', "true", "false", "null", "NaN", "Infinity", "\ufeff"]
    )
    | st.characters(),
    max_size=60,
).map("".join)


def _spliced(args: tuple[str, bytes, int]) -> bytes:
    text, junk, at = args
    raw = text.encode("utf-8", "surrogatepass")
    at = at % (len(raw) + 1)
    return raw[:at] + junk + raw[at:]


random_bytes = (
    st.binary(max_size=200)
    | yamlish_text.map(lambda t: t.encode("utf-8", "surrogatepass"))
    | st.tuples(yamlish_text, st.binary(min_size=1, max_size=4), st.integers(0, 10**6)).map(_spliced)
)

KEYS_WITH_NEWLINES = ["a\nb", "x\r\ny", "\n", " "]
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.integers()
    | st.sampled_from([10**30, -(10**30), 2**63, 10**4200])
    | st.floats()
    | st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e-320])
    | st.text(max_size=10)
    | st.sampled_from(KEYS_WITH_NEWLINES)
)
python_only = (
    st.binary(max_size=6)
    | st.dates()
    | st.datetimes()
    | st.frozensets(st.integers(0, 3), max_size=3)
    | st.sampled_from([object(), complex(1, 2), Path("x.yaml"), b"\xff", Ellipsis])
)


def typed_values(vocabulary: list[str], *, python: bool = True) -> st.SearchStrategy[Any]:
    """Random values as a loaded document (or, with ``python``, as code) could hand a parser.

    Dictionary keys come mostly from ``vocabulary`` (the parser's own field names) so that values
    reach the validators behind the first layer of type checks.
    """
    leaves = scalars | st.sampled_from(vocabulary)
    keys: st.SearchStrategy[Any] = st.sampled_from(vocabulary) | st.text(max_size=6)
    if python:
        leaves = leaves | python_only
        keys = keys | st.sampled_from([0, -1, None, True, 1.5, ("a", 1), "a\nb"])

    def children(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        out = st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5)
        if python:
            out = out | st.tuples(inner, inner) | st.tuples(inner, inner, inner)
        return out

    return st.recursive(leaves, children, max_leaves=20)


def field_names(model: type[BaseModel], out: set[str] | None = None) -> set[str]:
    """The field names of ``model`` and of every model nested in it."""
    out = set() if out is None else out
    for name, info in model.model_fields.items():
        out.add(name)
        stack = [info.annotation]
        while stack:
            tp = stack.pop()
            if isinstance(tp, type) and issubclass(tp, BaseModel) and tp is not model:
                field_names(tp, out)
            stack.extend(getattr(tp, "__args__", ()))
    return out


def vocabulary_of(*models: type[BaseModel], extra: tuple[str, ...] = ()) -> list[str]:
    names: set[str] = set(extra)
    for m in models:
        field_names(m, names)
    return sorted(names)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any], values: st.SearchStrategy[Any]) -> Any:
    """``base`` (a valid document) with one to three places replaced, removed or given an unknown key."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(doc))
        path = draw(st.sampled_from(paths))
        op = draw(st.integers(0, 3))
        if not path:
            if op == 3 or not isinstance(doc, dict):
                doc = draw(values)
            continue
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        if op <= 1:
            parent[path[-1]] = draw(values)
        elif op == 2 and isinstance(parent, dict):
            parent.pop(path[-1])
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(["typo", "a\nb", "__class__", "model_config"]))] = draw(values)
        else:
            parent.append(draw(values))
    return doc


def yaml_text(doc: Any, style: int = 0) -> str:
    return yaml.safe_dump(doc, default_flow_style=[False, True, None][style % 3], sort_keys=False)


def _json_plain(doc: Any) -> Any:
    """``doc`` with tuples as lists and only JSON's key and value types (what YAML text can carry)."""
    if isinstance(doc, dict):
        return {
            str(k) if not isinstance(k, (str, int, float, bool)) else k: _json_plain(v)
            for k, v in doc.items()
        }
    if isinstance(doc, (list, tuple)):
        return [_json_plain(v) for v in doc]
    return doc


# ==================================================================================================
# societas.agents.documents: the loaders every YAML and JSON document goes through
# ==================================================================================================

DOC = (DocumentError,)


@SETTINGS
@given(random_bytes)
# PyYAML's safe constructors fail with bare IndexError / KeyError / AttributeError on these,
# and its reader's message spans two lines.
@example(b"!!int ''")
@example(b"!!float :")
@example(b"!!bool ''")
@example(b"!!timestamp x")
@example(b"!!set [a]")
@example(b"!!map [a]")
@example(b"a: \xc2\x97")
@example(b"\xff\xfe")
def test_documents_random_bytes(raw: bytes):
    for load in (load_yaml, load_json):
        out = attempt(load, raw, DOC)
        if load is load_json and not isinstance(out, Refused):
            assert json.dumps(out, allow_nan=True) == json.dumps(json.loads(raw), allow_nan=True)


@SETTINGS
@given(yamlish_text)
def test_documents_random_yaml_text(text: str):
    attempt(load_yaml, text, DOC)
    attempt(lambda t: load_yaml(t, source="cfg.yaml"), text, DOC)


@SETTINGS
@given(jsonish_text)
def test_documents_random_json_text(text: str):
    out = attempt(load_json, text, DOC)
    if not isinstance(out, Refused):
        assert json.dumps(out) == json.dumps(json.loads(text))


@SETTINGS
@given(typed_values(["a", "b", "nodes"], python=False), st.integers(0, 2))
def test_documents_round_trip_what_yaml_and_json_write(doc: Any, style: int):
    # What JSON can hold (string keys, no NaN: it is unequal to itself), as YAML and as JSON.
    assume(_finite(doc) and not _huge(doc))
    doc = json.loads(json.dumps(_json_plain(doc), allow_nan=False))
    assert load_yaml(yaml_text(doc, style)) == doc
    assert load_json(json.dumps(doc)) == doc


def _huge(doc: Any) -> bool:
    """An integer longer than Python converts to text by default (4300 digits)."""
    if isinstance(doc, int):
        return abs(doc) > 10**4000
    if isinstance(doc, dict):
        return any(_huge(k) or _huge(v) for k, v in doc.items())
    if isinstance(doc, (list, tuple)):
        return any(_huge(v) for v in doc)
    return False


def _finite(doc: Any) -> bool:
    if isinstance(doc, float):
        return math.isfinite(doc)
    if isinstance(doc, dict):
        return all(_finite(k) and _finite(v) for k, v in doc.items())
    if isinstance(doc, (list, tuple)):
        return all(_finite(v) for v in doc)
    return True


def _bomb(width: int, levels: int) -> tuple[str, int]:
    """An alias bomb ("billion laughs") and the number of values the size check counts in it."""
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    weight = 1 + width
    total = 1 + 1 + weight  # the top mapping, the key a0, its list
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
        weight = 1 + width * weight
        total += 1 + weight
    return "\n".join(lines) + "\n", total


@SETTINGS
@given(st.integers(1, 9), st.integers(1, 9), st.integers(10, 5000))
@example(9, 9, 5000)  # the classic: 9**9 values, refused after counting 5000
def test_documents_alias_bombs_are_refused_by_their_expanded_size(width: int, levels: int, max_items: int):
    text, total = _bomb(width, levels)
    try:
        load_yaml(text, max_items=max_items)
    except DocumentError as exc:
        assert total > max_items, exc
        assert (
            exc.message
            == f"the document is too large (more than {max_items} values once aliases are expanded)"
        )
    else:
        assert total <= max_items


@SETTINGS
@given(st.integers(1, 60), st.integers(1, 40), st.sampled_from(["flow", "block", "json", "mapping"]))
@example(5000, 100, "flow")
@example(5000, 100, "json")
@example(400, 100, "block")
def test_documents_nesting_is_refused_beyond_max_depth(depth: int, max_depth: int, style: str):
    text = {
        "flow": "[" * depth + "1" + "]" * depth,
        "json": "[" * depth + "1" + "]" * depth,
        "block": "- " * depth + "1",
        "mapping": "".join("  " * i + "a:\n" for i in range(depth - 1)) + "  " * (depth - 1) + "a: 1",
    }[style]
    load = load_json if style == "json" else load_yaml
    try:
        load(text, max_depth=max_depth)
    except DocumentError as exc:
        assert depth > max_depth, exc
        assert "nested too deeply" in exc.message
    else:
        assert depth <= max_depth


@FEW
@given(random_bytes, st.sampled_from(["doc.yaml", "doc.json", "doc", "ü name.txt"]))
def test_documents_files_of_random_bytes(tmp_path: Path, raw: bytes, name: str):
    path = tmp_path / name
    path.write_bytes(raw)
    for read in (read_text, load_yaml_file, load_json_file):
        out = attempt(read, path, DOC)
        if isinstance(out, Refused):
            assert isinstance(out.exc, DocumentError) and out.exc.source == str(path)
        elif read is read_text:
            assert out == raw.decode("utf-8")


@SETTINGS
@given(st.text(max_size=30).filter(lambda n: "/" not in n and n not in ("", ".", "..")))
@example("a\x00b")
@example("x" * 300)
def test_documents_missing_and_odd_file_names(tmp_path: Path, name: str):
    for read in (read_text, load_yaml_file, load_json_file):
        out = attempt(read, tmp_path / "missing" / name, DOC)
        assert isinstance(out, Refused)
        if "\x00" not in name and len(name.encode()) < 256:
            assert isinstance(out.exc, DocumentNotFoundError) and isinstance(out.exc, FileNotFoundError)
    out = attempt(read_text, tmp_path, DOC)
    assert isinstance(out, Refused) and "is a directory" in str(out.exc)


@SETTINGS
@given(typed_values(["a"]).filter(lambda v: not isinstance(v, (str, bytes))))
def test_documents_values_that_are_not_text_are_type_errors(value: Any):
    for load in (load_yaml, load_json):
        out = attempt(load, value, DOC, plain=(TypeError,))
        assert isinstance(out, Refused) and type(out.exc) is TypeError
    if not isinstance(value, Path):
        out = attempt(read_text, value, DOC, plain=(TypeError,))
        assert isinstance(out, Refused) and type(out.exc) is TypeError


# ==================================================================================================
# societas.topology: graph specs from files and from Python values, layered answers of any type
# ==================================================================================================

SPEC = (SpecError, DocumentNotFoundError)
SPEC_VOCAB = vocabulary_of(
    GraphSpec,
    extra=("solver", "coder", "agent", "function", "tool", "default", "embedded", "a -> b", "a", "b"),
)
spec_values = typed_values(SPEC_VOCAB)
VALID_SPEC = {
    "name": "g",
    "llms": {"default": "embedded"},
    "nodes": [{"id": "a", "role": "solver"}, {"id": "b", "role": "coder", "params": {"temperature": 0.5}}],
    "edges": ["a -> b"],
    "final": "b",
}


def _graph_from_data(doc: Any) -> Graph:
    return Graph(GraphSpec.from_data(doc))


@SETTINGS
@given(spec_values | mutated(VALID_SPEC, spec_values))
def test_graph_spec_from_python_values(doc: Any):
    out = attempt(_graph_from_data, doc, SPEC)
    if not isinstance(out, Refused):
        assert GraphSpec.from_yaml_text(out.spec.to_yaml()) == out.spec


@FEW
@given(
    random_bytes
    | mutated(VALID_SPEC, typed_values(SPEC_VOCAB, python=False)).map(
        lambda d: json.dumps(_json_plain(d)).encode()
    ),
    st.sampled_from(["g.yaml", "g.yml", "g.json", "g.YAML", "g.txt"]),
)
def test_graph_spec_files_of_random_bytes(tmp_path: Path, raw: bytes, name: str):
    path = tmp_path / name
    path.write_bytes(raw)
    for read in (GraphSpec.from_file, Graph.from_file, GraphSpec.from_yaml_file, GraphSpec.from_json_file):
        attempt(read, path, SPEC)


@SETTINGS
@given(st.text(max_size=20).filter(lambda n: "/" not in n))
@example("a\x00.yaml")
@example("g.yaml")
def test_graph_spec_missing_and_odd_file_names(tmp_path: Path, name: str):
    for read in (
        GraphSpec.from_file,
        GraphSpec.from_yaml_file,
        GraphSpec.from_json_file,
        Graph.from_yaml_file,
    ):
        out = attempt(read, tmp_path / "missing" / name, SPEC)
        assert isinstance(out, Refused)
    out = attempt(GraphSpec.from_yaml_file, tmp_path, SPEC)
    assert isinstance(out, Refused) and str(out.exc).startswith(f"cannot read {str(tmp_path)!r}")


@SETTINGS
@given(
    jsonish_text
    | mutated(VALID_SPEC, typed_values(SPEC_VOCAB, python=False)).map(lambda d: json.dumps(_json_plain(d)))
)
def test_graph_spec_random_json_text(text: str):
    out = attempt(Graph.from_json_text, text, SPEC)
    if not isinstance(out, Refused):
        assert GraphSpec.from_json_text(out.spec.to_json()) == out.spec


@SETTINGS
@given(typed_values(SPEC_VOCAB).filter(lambda v: not isinstance(v, str)))
def test_topology_text_parsers_refuse_values_that_are_not_text(value: Any):
    for parse in (GraphSpec.from_yaml_text, GraphSpec.from_json_text, Graph.from_yaml_text):
        out = attempt(parse, value, SPEC, plain=(TypeError,))
        assert isinstance(out, Refused)
    for parse in (GraphSpec.from_file, GraphSpec.from_yaml_file):
        if not isinstance(value, Path):
            assert isinstance(attempt(parse, value, SPEC, plain=(TypeError,)), Refused)
    # An LLM's answer that is not text is its own kind of refusal, never an exception from inside.
    attempt(parse_layered_yaml, value, SPEC)
    topology, error = try_parse_layered_yaml(value)
    assert topology is None and isinstance(error, SpecError)


@SETTINGS
@given(spec_values | st.lists(spec_values, max_size=4))
@example("a -> b")
@example({"a": "b"})
@example(5)
@example(None)
def test_graph_edges_and_nodes_from_python_values(items: Any):
    attempt(GraphSpec.edges_from, items, SPEC, plain=(TypeError,))
    if isinstance(items, list):  # Graph.build takes its nodes as a list of dicts or NodeSpecs
        attempt(lambda n: Graph.build("g", n, ["a -> b"]), items, SPEC)
    attempt(lambda e: Graph.build("g", VALID_SPEC["nodes"], e), items, SPEC, plain=(TypeError,))


# ==================================================================================================
# societas.evolve: the run config (from a dict and from a file), task settings, tasks, LLM answers
# ==================================================================================================

EVOLVE_VOCAB = vocabulary_of(EvolveConfig, extra=("checkpoint_interval", "api_key", "models", "name", "llm"))
evolve_values = typed_values(EVOLVE_VOCAB)
EVOLVE_DEFAULTS = json.loads(json.dumps(EvolveConfig().model_dump(mode="json")))
EVOLVE_DEFAULTS["llm"]["models"] = [{"name": "gpt-4o-mini", "weight": 1.0}]


@SETTINGS
@given(evolve_values | mutated(EVOLVE_DEFAULTS, evolve_values))
@example({"a\nb": 1})  # a key with a line break made a message of two lines
def test_evolve_config_from_python_values(doc: Any):
    out = attempt(parse_config, doc, (ConfigError,))
    if not isinstance(out, Refused):
        assert isinstance(out, EvolveConfig)
        assert parse_config(out.model_dump()) == out


def test_evolve_config_deeply_nested_task_settings():
    """A deeply nested ``evaluator.task_settings`` (possible from a dict, not from YAML) is a ConfigError."""
    deep: Any = 1
    for _ in range(5000):
        deep = [deep]
    out = attempt(parse_config, {"evaluator": {"task_settings": {"a": deep}}}, (ConfigError,))
    assert isinstance(out, Refused)


@FEW
@given(
    random_bytes
    | mutated(EVOLVE_DEFAULTS, typed_values(EVOLVE_VOCAB, python=False)).map(
        lambda d: yaml_text(_json_plain(d)).encode("utf-8", "surrogatepass")
    )
)
def test_evolve_config_files(tmp_path: Path, raw: bytes):
    path = tmp_path / "config.yaml"
    path.write_bytes(raw)
    out = attempt(load_config, path, (ConfigError,))
    if isinstance(out, Refused):
        assert str(path) in str(out.exc)


TASK_DEFAULTS = {"iterations": 10, "stage1_iterations": 5, "held_out_iterations": None}
task_setting_values = typed_values(list(TASK_DEFAULTS), python=False)


@SETTINGS
@given(
    random_bytes
    | jsonish_text.map(str.encode)
    | st.dictionaries(st.sampled_from(list(TASK_DEFAULTS)), task_setting_values, max_size=3).map(
        lambda d: json.dumps(_json_plain(d)).encode()
    )
)
@example(b'{"iterations": "x"}')
@example(b'{"iterations": Infinity}')
@example(b'{"iterations": {}}')
@example(b'{"iterations": 2.7}')  # a count given as 2.7 was cut to 2 without a word
def test_evolve_task_settings_files(tmp_path: Path, raw: bytes):
    evaluator = tmp_path / "task" / "evaluator.py"
    program = tmp_path / "run" / "program.py"
    for p in (evaluator, program):
        p.parent.mkdir(exist_ok=True)
        p.write_text("")
    (program.parent / "task_settings.json").write_bytes(raw)

    def load(_: Any) -> dict[str, Any]:
        return load_task_settings(
            str(evaluator), str(program), TASK_DEFAULTS, "cfr", ("iterations", "stage1_iterations")
        )

    out = attempt(load, None, (DocumentError,), plain=(ValueError,))
    if not isinstance(out, Refused):
        loaded = json.loads(raw)
        for key in ("iterations", "stage1_iterations", "held_out_iterations"):
            assert type(out[key]) is int and out[key] >= 1
            if loaded.get(key) is not None:  # a given value is used as given, never rounded or cast
                assert out[key] == loaded[key] and type(loaded[key]) is int


PROGRAM_PIECES = [
    "# EVOLVE-BLOCK-START\n", "# EVOLVE-BLOCK-END\n", "def f(x):\n", "    return x\n", "x = 1\n", "(", ")",
    "[", "]", ":", "\n", "    ", "-", "not ", "lambda: ", "'", '"""', "\\", "\x00", "\ufeff", "é",
]  # fmt: skip
program_text = st.lists(st.sampled_from(PROGRAM_PIECES) | st.characters(), max_size=40).map("".join)
NESTED_PROGRAM = "# EVOLVE-BLOCK-START\nx = " + "-" * 9000 + "1\n# EVOLVE-BLOCK-END\n"


@FEW
@given(program_text.map(lambda t: t.encode("utf-8", "surrogatepass")) | random_bytes)
@example(NESTED_PROGRAM.encode())  # MemoryError: the parser's stack overflows
def test_evolve_task_directories(tmp_path: Path, raw: bytes):
    task = tmp_path / "task"
    task.mkdir(exist_ok=True)
    (task / "initial_program.py").write_bytes(raw)
    (task / "evaluator.py").write_text("def evaluate(path):\n    return {}\n")
    attempt(load_task, task, (TaskError,))


PARENT = "import math\n# EVOLVE-BLOCK-START\ndef f(x):\n    return x + 1\n# EVOLVE-BLOCK-END\n"


@SETTINGS
@given(
    st.lists(
        st.sampled_from(
            [
                "<<<<<<< SEARCH\n",
                "=======\n",
                ">>>>>>> REPLACE\n",
                "```python\n",
                "```\n",
                "    return x + 1\n",
                "    return x * 2\n",
                "def f(x):\n",
                "# EVOLVE-BLOCK-START\n",
                "# EVOLVE-BLOCK-END\n",
                "\x00",
                "(",
                "-" * 50,
            ]
        )
        | st.characters(),
        max_size=30,
    ).map("".join)
)
# 9000 nested minus signs, within the default max_code_length: Python's parser runs out of stack
@example("```python\ndef f(x):\n    return " + "-" * 9000 + "x\n```\n")
def test_evolve_llm_answers_become_a_child_or_a_mutation_error(answer: str):
    def mutate(text: str) -> str:
        child, _ = apply_llm_answer(PARENT, text)
        validate_child(PARENT, child, EvolveConfig().max_code_length)
        return child

    attempt(mutate, answer, (MutationError, EvolveBlockError))
    attempt(parse_diff, answer, (MutationError,))


# ==================================================================================================
# societas.marl: training settings of every recipe, the CLI's --config and --recipe, routing, comm
# ==================================================================================================

RECIPE_CONFIGS: dict[str, type[BaseModel]] = {
    "conductor": ConductorConfig,
    "remul": RemulConfig,
    "selfplay": SelfPlayConfig,
    "society": SocietyConfig,
}


def test_every_recipe_has_its_config_here():
    assert set(RECIPE_CONFIGS) == set(RECIPES)


SETTINGS_MODELS = [("train", TrainConfig), *(("recipe", m) for m in RECIPE_CONFIGS.values())]


@pytest.mark.parametrize("section,model", SETTINGS_MODELS, ids=[m.__name__ for _, m in SETTINGS_MODELS])
def test_recipe_and_loop_settings_from_python_values(section: str, model: type[BaseModel]):
    values = typed_values(vocabulary_of(model))
    defaults = model().model_dump(mode="python")

    @SETTINGS
    @given(values | mutated(defaults, values))
    def check(doc: Any) -> None:
        out = attempt(lambda d: validate_settings(model, d, section), doc, (SettingsError,))
        if not isinstance(out, Refused):
            assert isinstance(out, model)
            assert validate_settings(model, out.model_dump(), section) == out

    check()


class ReachedTraining(Exception):
    """Raised by the stand-in for training: the settings were accepted."""


def _stop_training(*args: Any, **kwargs: Any) -> Any:
    raise ReachedTraining


def _one_error_line(result: Any) -> None:
    """The CLI accepted the settings (and reached training) or refused them in one line, exit status 2."""
    if isinstance(result.exception, ReachedTraining):
        return
    shown = f"exit {result.exit_code}: {result.output!r}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(
            f"{type(result.exception).__name__} escaped the CLI ({shown})"
        ) from result.exception
    assert result.exit_code == 2, shown
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), shown
    assert "Traceback" not in result.output and not PYDANTIC_RAW.search(result.output), shown


LLM_CLI_VOCAB = vocabulary_of(TrainConfig, SelfPlayConfig, extra=("recipe", "train", "grpo"))


@FEW
@given(
    random_bytes
    | st.dictionaries(
        st.sampled_from(["recipe", "train", "grpo"]), typed_values(LLM_CLI_VOCAB, python=False), max_size=2
    ).map(lambda d: yaml_text(_json_plain(d)).encode("utf-8", "surrogatepass"))
)
@example(b"\xff\xfe")
@example(b"recipe: !!int ''")
@example(b"train: &a [*a]")
def test_marl_train_cli_config_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raw: bytes):
    monkeypatch.setattr(llm_cli, "train", _stop_training)
    config = tmp_path / "run.yaml"
    config.write_bytes(raw)
    result = CliRunner().invoke(
        marl_app, ["train", "selfplay", "--out", str(tmp_path / "out"), "--config", str(config)]
    )
    _one_error_line(result)


@FEW
@given(
    jsonish_text
    | typed_values(LLM_CLI_VOCAB, python=False).map(lambda d: json.dumps(_json_plain(d)))
    | mutated(SelfPlayConfig().model_dump(mode="json"), typed_values(LLM_CLI_VOCAB, python=False)).map(
        lambda d: json.dumps(_json_plain(d))
    )
)
@example("[" * 5000 + "]" * 5000)
def test_marl_train_cli_recipe_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str):
    monkeypatch.setattr(llm_cli, "train", _stop_training)
    result = CliRunner().invoke(
        marl_app, ["train", "selfplay", "--out", str(tmp_path / "out"), "--recipe", text]
    )
    _one_error_line(result)


ROUTING_VOCAB = vocabulary_of(RoutingTrainConfig, extra=("gcn", "gat", "mlp", "gptswarm", "gdesigner", "cpu"))
routing_values = typed_values(ROUTING_VOCAB)
ROUTING_DEFAULTS = RoutingTrainConfig().model_dump(mode="python")


@SETTINGS
@given(routing_values | mutated(ROUTING_DEFAULTS, routing_values))
def test_routing_config_from_python_values(doc: Any):
    out = attempt(RoutingTrainConfig.from_data, doc, (RoutingConfigError,))
    if not isinstance(out, Refused):
        assert RoutingTrainConfig.from_data(out.model_dump()) == out


@FEW
@given(
    random_bytes
    | mutated(ROUTING_DEFAULTS, typed_values(ROUTING_VOCAB, python=False)).map(
        lambda d: yaml_text(_json_plain(d)).encode("utf-8", "surrogatepass")
    )
)
@example(b"\xff\xfe")  # not UTF-8: UnicodeDecodeError escaped
def test_routing_config_files(tmp_path: Path, raw: bytes):
    path = tmp_path / "routing.yaml"
    path.write_bytes(raw)
    attempt(RoutingTrainConfig.from_yaml, path, (RoutingConfigError,))


@SETTINGS
@given(st.text(max_size=20).filter(lambda n: "/" not in n))
@example("a\x00.yaml")  # ValueError: embedded null byte escaped
def test_routing_config_missing_and_odd_file_names(tmp_path: Path, name: str):
    out = attempt(RoutingTrainConfig.from_yaml, tmp_path / "missing" / name, (RoutingConfigError,))
    assert isinstance(out, Refused)


COMM_VOCAB = vocabulary_of(
    comm_train.MAPPOConfig, extra=("speaker_listener", "tarmac", "commnet", "none", "mappo", "ippo", "cpu")
)
comm_values = typed_values(COMM_VOCAB)


@SETTINGS
@given(st.dictionaries(st.sampled_from(COMM_VOCAB), comm_values, max_size=4), comm_values)
@example({"num_envs": 0}, {})  # pydantic's raw ValidationError escaped
def test_comm_training_settings(monkeypatch: pytest.MonkeyPatch, overrides: dict[str, Any], comm_kwargs: Any):
    monkeypatch.setattr(comm_train, "train_comm", _stop_training)

    def run(_: Any) -> Any:
        try:
            return comm_train.run_cli_training(
                env="speaker_listener",
                algo="mappo",
                comm="none",
                steps=1000,
                seed=0,
                out="unused",
                comm_kwargs=comm_kwargs if isinstance(comm_kwargs, dict) else {"x": comm_kwargs},
                config_overrides=overrides,
            )
        except ReachedTraining:
            return "accepted"

    attempt(run, None, (SpecError,), plain=(ValueError,))


@FEW
@given(st.dictionaries(st.sampled_from(COMM_VOCAB), typed_values(COMM_VOCAB, python=False), max_size=4))
def test_comm_cli_comm_kwargs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, comm_kwargs: dict[str, Any]):
    monkeypatch.setattr(comm_train, "train_comm", _stop_training)
    result = CliRunner().invoke(
        marl_app,
        ["train", "comm", "--env", "speaker_listener", "--comm", "tarmac", "--steps", "100"]
        + ["--out", str(tmp_path / "out"), "--comm-kwargs", json.dumps(_json_plain(comm_kwargs))],
    )
    _one_error_line(result)


# ==================================================================================================
# societas.agents: LLM URIs (only ones that cannot start a model, a server or import a module)
# ==================================================================================================

NO_SUCH = "/nonexistent-societas-test-dir/"


LOADING_SCHEMES = ("hf", "gguf", "vllm", "function")


@st.composite
def invalid_llm_uris(draw: st.DrawFn) -> Any:
    rest = draw(st.text(max_size=20))
    kind = draw(st.integers(0, 8))
    if kind == 0:  # no scheme, or an unknown one
        return draw(
            st.text(max_size=20).filter(
                lambda u: u.strip() != "embedded" and u.strip().partition(":")[0] not in LOADING_SCHEMES
            )
        )
    if kind == 1:
        return (
            "openai:"
            + draw(st.sampled_from(["", "#", "#m", "u#", "http://[::1#m", "ftp://x#m", " #m"]))
            + rest
        )
    if kind == 2:  # a URL that is not one, or missing its model
        return f"openai:{rest.replace('#', '')}#{draw(st.text(max_size=5))}"
    if kind == 3:  # a relative or empty module name (MODULE:ATTR splits at the last colon)
        module = draw(st.sampled_from(["", ".", "..", ".x", "." + rest.replace(":", "")]))
        return f"function:{module}:{draw(st.text(max_size=8))}"
    if kind == 4:  # a module that does not exist
        return f"function:zz_no_such_module_{rest}:{draw(st.text(max_size=8))}"
    if kind == 5:
        return "gguf:" + NO_SUCH + rest
    if kind == 6:
        return "hf:" + NO_SUCH + rest
    if kind == 7:
        return draw(st.sampled_from(["hf:", "gguf:", "vllm:", ":x", " ", "", "EMBEDDED", "embedded:x"]))
    return draw(typed_values(["embedded"]).filter(lambda v: not isinstance(v, str)))


@SETTINGS
@given(invalid_llm_uris())
@example("function:.x:y")  # TypeError from importlib: a relative import without a package
@example("openai:http://[::1#m")  # ValueError from urllib: Invalid IPv6 URL
@example("function:zz_no_such_module\n:f")  # the module name, unquoted, split the message in two lines
def test_llm_uris(uri: Any):
    def load(u: Any) -> Any:
        return load_llm(u, shared=False)

    allowed: tuple[type[BaseException], ...] = (UnknownLLM,)
    plain: tuple[type[BaseException], ...] = (ValueError,)
    if isinstance(uri, str) and uri.startswith(("gguf:", "hf:")):
        plain = (*plain, FileNotFoundError)  # "no model at PATH": a file URI names a file that is not there
    out = attempt(load, uri, allowed, plain)
    if not isinstance(out, Refused):
        # only an OpenAI-compatible client is built for these (nothing is contacted until it is used)
        assert type(out).__name__ == "OpenAICompatibleLLM", (uri, out)
        out.close()


# ==================================================================================================
# LLM answers read by the patterns and recipes: they never raise on odd text
# ==================================================================================================

answer_text = st.lists(
    st.sampled_from(
        [
            "```",
            "```python\n",
            "```yaml\n",
            "Final answer:",
            "\\boxed{",
            "####",
            "Answer:",
            "Question:",
            "layers:",
            "{",
            "}",
            "\n",
            "- ",
            "yes",
            "no",
            "1e999",
            "NaN",
            "-",
            "42",
            "persuasion: 1",
        ]
    )  # fmt: skip
    | st.characters(),
    max_size=40,
).map("".join)


@SETTINGS
@given(answer_text)
def test_answer_parsers_return_on_any_text(text: str):
    for parse in (
        extract_code,
        extract_code_blocks,
        extract_final_answer,
        extract_yaml_block,
        numeric_answer,
        parse_proposal,
        parse_behaviour_labels,
        parse_answer,
    ):
        parse(text)
    topology, error = try_parse_layered_yaml(text)
    assert (topology is None) != (error is None)
    if error is not None:
        check_refusal(error, (SpecError,), what="try_parse_layered_yaml")
