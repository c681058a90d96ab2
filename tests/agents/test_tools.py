"""Tools: schemas from signatures and docstrings, argument validation, the text protocol, built-in tools."""

from __future__ import annotations

import json
import time
from typing import Annotated, Literal, Optional

import pytest
from pydantic import BaseModel, Field

import societas.agents.sandbox.core as sandbox_core
from societas.agents.llm import FunctionLLM, SamplingParams
from societas.agents.llm.base import Completion
from societas.agents.sandbox import (
    REQUIRE_BWRAP_ENV,
    SANDBOX_BACKEND_ENV,
    SandboxUnavailableError,
    bwrap_status,
)
from societas.agents.tools import (
    ParsedReply,
    Tool,
    ToolArgumentError,
    ToolCall,
    ToolError,
    ToolExecutionError,
    ToolResult,
    calculator,
    parse_tool_calls,
    python_tool,
    run_tool_call,
    tool,
    tool_results_message,
    tools_by_name,
    tools_system_prompt,
)

BWRAP = bwrap_status()
# Where bubblewrap is required (CI), a test that needs it fails instead of skipping.
MAY_SKIP_BWRAP = not sandbox_core.bwrap_required()
needs_bwrap = [
    pytest.mark.bwrap,
    pytest.mark.skipif(
        MAY_SKIP_BWRAP and not BWRAP.available, reason=f"bubblewrap unusable here: {BWRAP.reason}"
    ),
]


class Point(BaseModel):
    """A point in the plane."""

    x: int
    y: float = 0.0


class Node(BaseModel):
    value: int
    children: list[Node] = []


class NotAModel:
    pass


# --------------------------------------------------------------------------------- schemas


def test_schema_of_scalars_defaults_and_google_docstring():
    @tool
    def add(a: int, b: float = 1.5, negate: bool = False) -> float:
        """Add two numbers.

        The second paragraph is not part of the description.

        Args:
            a: The first number,
                which may be negative.
            b (float): The second number.
            negate: Whether to negate the sum.

        Returns:
            The sum.
        """
        s = a + b
        return -s if negate else s

    assert isinstance(add, Tool)
    assert add.name == "add"
    assert add.description == "Add two numbers."
    assert add.parameters == {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "description": "The first number, which may be negative."},
            "b": {"type": "number", "default": 1.5, "description": "The second number."},
            "negate": {"type": "boolean", "default": False, "description": "Whether to negate the sum."},
        },
        "required": ["a"],
        "additionalProperties": False,
    }
    assert add.openai_schema() == {
        "type": "function",
        "function": {"name": "add", "description": "Add two numbers.", "parameters": add.parameters},
    }
    assert not add.requires_approval and not add.runs_code
    assert add(2, 3) == 5  # still callable like the function
    assert add.__doc__.startswith("Add two numbers.")


def test_schema_of_containers_literal_optional_and_sphinx_docstring():
    def search(
        query: str,
        tags: list[str],
        filters: dict[str, int],
        mode: Literal["fast", "exact"] = "fast",
        limit: Optional[int] = None,  # noqa: UP045 - the typing spelling is what is tested
        extra: dict | None = None,
    ) -> list[str]:
        """Search the index
        for documents.

        :param query: What to look for.
        :param list tags: Tags that must all match;
            an empty list matches everything.
        :param mode: How to match.
        :returns: The ids.
        """
        return []

    t = Tool.from_function(search, name="find", description="Find documents.", requires_approval=True)
    assert t.name == "find" and t.description == "Find documents." and t.requires_approval
    assert t.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for."},
            "tags": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Tags that must all match; an empty list matches everything.",
            },
            "filters": {"type": "object", "additionalProperties": {"type": "integer"}},
            "mode": {
                "type": "string",
                "enum": ["fast", "exact"],
                "default": "fast",
                "description": "How to match.",
            },
            "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
            "extra": {
                "anyOf": [{"type": "object", "additionalProperties": True}, {"type": "null"}],
                "default": None,
            },
        },
        "required": ["query", "tags", "filters"],
        "additionalProperties": False,
    }
    # Without an explicit description, the first paragraph is joined into one line.
    assert Tool.from_function(search).description == "Search the index for documents."


def test_schema_of_pydantic_models_is_inlined_and_names_like_title_survive():
    def place(
        point: Point, title: str, json: Annotated[int, Field(ge=1)] = 1, points: tuple[Point, ...] = ()
    ) -> str:
        """Place a point."""
        return f"{title}: {point.x},{point.y} x{json} +{len(points)}"

    t = tool(place)
    point_schema = {
        "type": "object",
        "description": "A point in the plane.",
        "properties": {"x": {"type": "integer"}, "y": {"type": "number", "default": 0.0}},
        "required": ["x"],
    }
    assert t.parameters == {
        "type": "object",
        "properties": {
            "point": point_schema,
            "title": {"type": "string"},
            "json": {"type": "integer", "minimum": 1, "default": 1},
            "points": {"type": "array", "items": point_schema, "default": []},
        },
        "required": ["point", "title"],
        "additionalProperties": False,
    }
    assert "$defs" not in t.parameters
    # Nested models arrive as model instances; a parameter named like a BaseModel method works.
    assert t.call({"point": {"x": "3"}, "title": "p", "json": 2}) == "p: 3,0.0 x2 +0"


def test_recursive_models_keep_their_definitions():
    def tree(root: Node) -> int:
        """Count nodes."""
        return 1 + sum(tree(c) for c in root.children)

    t = tool(tree)
    node = {
        "type": "object",
        "properties": {
            "value": {"type": "integer"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}, "default": []},
        },
        "required": ["value"],
    }
    assert t.parameters == {
        "type": "object",
        "properties": {"root": node},
        "required": ["root"],
        "additionalProperties": False,
        "$defs": {"Node": node},
    }
    assert (
        t.call({"root": {"value": 1, "children": [{"value": 2}, {"value": 3, "children": [{"value": 4}]}]}})
        == "4"
    )


def test_no_parameters_and_options_of_the_decorator():
    @tool(name="clock", description="The time.", requires_approval=True, runs_code=True)
    def now() -> str:
        return "noon"

    assert now.parameters == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }
    assert (now.name, now.description, now.requires_approval, now.runs_code) == (
        "clock",
        "The time.",
        True,
        True,
    )
    assert now.call({}) == "noon" and now.call("") == "noon" and now.call("{}") == "noon"
    with pytest.raises(ToolArgumentError, match="unknown parameter 'x'.*none"):
        now.call({"x": 1})


# ---------------------------------------------------------------------- bad definitions


def _no_annotation(a: int, b) -> int:  # type: ignore[no-untyped-def]
    return a


def _star_args(a: int, *rest: int) -> int:
    return a


def _star_kwargs(a: int, **options: int) -> int:
    return a


def _callable_param(f: NotAModel) -> int:
    return 0


def _unknown_name(a: UndefinedName) -> int:  # type: ignore[name-defined]  # noqa: F821
    return 0


def _documents_a_ghost(a: int) -> int:
    """Do it.

    Args:
        a: real.
        ghost: not a parameter.
    """
    return a


async def _coroutine(a: int) -> int:
    return a


@pytest.mark.parametrize(
    ("fn", "kwargs", "expected"),
    [
        (_no_annotation, {}, r"_no_annotation: parameter 'b' has no type annotation"),
        (_star_args, {}, r"_star_args: parameter \*rest is not supported"),
        (_star_kwargs, {}, r"_star_kwargs: parameter \*\*options is not supported"),
        (_callable_param, {}, r"_callable_param: parameter 'f' has type .*NotAModel.*no JSON schema"),
        (_unknown_name, {}, r"_unknown_name: its type annotations cannot be resolved .*UndefinedName"),
        (_documents_a_ghost, {}, r"_documents_a_ghost: the docstring describes parameter\(s\) ghost"),
        (_coroutine, {}, r"_coroutine: coroutine functions are not supported"),
        (lambda x: x, {}, r"the name '<lambda>' is not a valid tool name.*pass name="),
        (_star_args, {"name": "bad name!"}, r"'bad name!' is not a valid tool name"),
    ],
    ids=[
        "unannotated",
        "args",
        "kwargs",
        "unsupported-type",
        "unresolved",
        "ghost-doc",
        "async",
        "lambda",
        "name",
    ],
)
def test_bad_definitions_raise_tool_error_naming_function_and_parameter(fn, kwargs, expected):
    with pytest.raises(ToolError, match=expected):
        Tool.from_function(fn, **kwargs)


def test_a_tool_error_is_a_value_error():
    assert issubclass(ToolError, ValueError)
    assert issubclass(ToolArgumentError, ValueError)
    assert issubclass(ToolExecutionError, RuntimeError)


# ------------------------------------------------------------------- validation and runs


@tool
def divide(a: int, b: int = 1, *, mode: Literal["true", "floor"] = "true") -> float:
    """Divide a by b."""
    return a / b if mode == "true" else a // b


def test_lax_coercion_and_json_string_arguments():
    assert divide.call({"a": "7", "b": 2.0}) == "3.5"  # pydantic lax mode: "7" -> 7, 2.0 -> 2
    assert divide.call('{"a": 9, "b": 2, "mode": "floor"}') == "4"
    assert divide.validate({"a": "7"}) == {"a": 7}  # only what was given; the function's defaults apply


@pytest.mark.parametrize(
    ("arguments", "fragments"),
    [
        ({"a": "seven"}, ["'a': Input should be a valid integer", '(got "seven")']),
        ({"a": 1, "mode": "round"}, ["'mode': Input should be 'true' or 'floor'", '(got "round")']),
        ({"b": 2}, ["missing required parameter 'a'"]),
        ({"a": 1, "c": 3}, ["unknown parameter 'c'"]),
        ("[1, 2]", ["expected a JSON object, got a JSON array"]),
        ('{"a": 1', ["not valid JSON (Expecting ',' delimiter at line 1 column 8"]),
    ],
    ids=["type", "literal", "missing", "unknown", "not-object", "bad-json"],
)
def test_argument_errors_name_the_tool_the_field_the_expectation_and_the_valid_parameters(
    arguments, fragments
):
    with pytest.raises(ToolArgumentError) as caught:
        divide.call(arguments)
    message = str(caught.value)
    assert message.startswith("Invalid arguments for tool 'divide'")
    for fragment in fragments:
        assert fragment in message
    assert message.endswith(
        'a (integer, required), b (integer, optional, default 1), mode (one of "true", "floor", optional, '
        'default "true").'
    )
    assert caught.value.tool == "divide"


def test_nested_field_errors_give_the_path():
    def plot(points: list[Point]) -> int:
        return len(points)

    with pytest.raises(
        ToolArgumentError, match=r"'points\[1\]\.x': Input should be a valid integer"
    ) as caught:
        tool(plot).call({"points": [{"x": 1}, {"x": "one"}]})
    assert caught.value.problems == [
        "'points[1].x': Input should be a valid integer, unable to parse string as an integer (got \"one\")"
    ]


def test_run_turns_errors_into_results_the_model_can_read():
    ok = divide.run(ToolCall("call_0", "divide", {"a": 1, "b": 4}))
    assert ok == ToolResult("call_0", "divide", "0.25", error=False)
    zero = divide.run(ToolCall("call_1", "divide", {"a": 1, "b": 0}))
    assert zero == ToolResult("call_1", "divide", "Error: ZeroDivisionError: division by zero", error=True)
    bad = divide.run(ToolCall("call_2", "divide", {"a": "x"}))
    assert bad.error and bad.content.startswith("Error: Invalid arguments for tool 'divide': 'a':")
    with pytest.raises(ToolExecutionError, match="^ZeroDivisionError: division by zero$") as caught:
        divide.call({"a": 1, "b": 0})
    assert caught.value.tool == "divide" and isinstance(caught.value.__cause__, ZeroDivisionError)
    with pytest.raises(ValueError, match="tool 'divide' was given a call of 'other'"):
        divide.run(ToolCall("c", "other", {}))


def test_a_call_that_carries_an_error_is_answered_without_running_the_tool():
    ran = []

    @tool
    def probe(x: int = 0) -> str:
        ran.append(x)
        return "ran"

    result = probe.run(ToolCall("c1", "probe", {}, error="arguments are not valid JSON"))
    assert result == ToolResult("c1", "probe", "Error: arguments are not valid JSON", error=True)
    assert ran == []


def test_return_values_become_text():
    class Opaque:
        def __str__(self) -> str:
            return "opaque!"

    @tool
    def give(kind: str) -> object:
        return {"dict": {"a": [1, 2]}, "none": None, "model": Point(x=1), "opaque": Opaque(), "num": 2.5}[
            kind
        ]

    assert give.call({"kind": "dict"}) == '{"a": [1, 2]}'
    assert give.call({"kind": "none"}) == "null"
    assert give.call({"kind": "model"}) == '{"x":1,"y":0.0}'
    assert give.call({"kind": "opaque"}) == "opaque!"
    assert give.call({"kind": "num"}) == "2.5"


def test_positional_only_parameters_are_passed_in_order():
    def scale(value: float, factor: float = 2.0, /, offset: float = 0.0) -> float:
        return value * factor + offset

    t = tool(scale)
    assert t.parameters["required"] == ["value"]
    assert t.call({"value": 3}) == "6.0"
    assert t.call({"value": 3, "factor": 3, "offset": 1}) == "10.0"


def test_a_callable_object_is_a_tool_with_the_annotations_of_its_call():
    class Greeter:
        def __call__(self, who: str, times: int = 1) -> str:
            """Greet someone.

            Args:
                who: Whom to greet.
            """
            return " ".join(["hello " + who] * times)

    with pytest.raises(ToolError, match="the name '' is not a valid tool name"):
        Tool.from_function(Greeter())
    t = Tool.from_function(Greeter(), name="greet")
    assert t.description == "Greet someone."
    assert t.parameters["properties"] == {
        "who": {"type": "string", "description": "Whom to greet."},
        "times": {"type": "integer", "default": 1},
    }
    assert t.call({"who": "Ann", "times": "2"}) == "hello Ann hello Ann"


def test_run_tool_call_dispatches_by_name_and_reports_unknown_tools():
    tools = tools_by_name([divide, calculator()])
    assert run_tool_call(ToolCall("a", "divide", {"a": 6, "b": 3}), tools).content == "2.0"
    unknown = run_tool_call(ToolCall("b", "mystery", {}), tools)
    assert unknown == ToolResult(
        "b", "mystery", "Error: unknown tool 'mystery'; known tools: divide, calculator", True
    )
    with pytest.raises(ValueError, match="two tools are named 'divide'"):
        tools_by_name([divide, divide])


# ------------------------------------------------------------------------ text protocol

TOOLS = tools_by_name([divide, calculator()])


def test_parse_a_single_call_and_the_text_around_it():
    text = (
        'I will divide.\n<tool_call>\n{"name": "divide", "arguments": {"a": 6, "b": 3}}\n</tool_call>\nWait.'
    )
    parsed = parse_tool_calls(text, TOOLS)
    assert parsed == ParsedReply(
        "I will divide.\n\nWait.", [ToolCall("call_0", "divide", {"a": 6, "b": 3})], []
    )


def test_parse_parallel_calls_fenced_json_and_arguments_as_a_json_string():
    text = (
        '<tool_call>{"name": "divide", "arguments": {"a": 1}}</tool_call>'
        '<tool_call>\n```json\n{"name": "calculator", "arguments": {"expression": "2*(3+4)"}}\n```\n</tool_call>'
        '<tool_call>{"name": "divide", "arguments": "{\\"a\\": 8, \\"b\\": 2}"}</tool_call>'
        '<tool_call>```\n{"name": "calculator", "parameters": {"expression": "1"}}```</tool_call>'
    )
    parsed = parse_tool_calls(text, TOOLS)
    assert parsed.errors == []
    assert parsed.content == ""
    assert parsed.calls == [
        ToolCall("call_0", "divide", {"a": 1}),
        ToolCall("call_1", "calculator", {"expression": "2*(3+4)"}),
        ToolCall("call_2", "divide", {"a": 8, "b": 2}),
        ToolCall("call_3", "calculator", {"expression": "1"}),
    ]


def test_parse_errors_say_what_is_wrong():
    text = (
        '<tool_call>{"name": "divide", "arguments": {"a": 1,}}</tool_call>'  # invalid JSON
        '<tool_call>["divide"]</tool_call>'  # not an object
        '<tool_call>{"arguments": {}}</tool_call>'  # no name
        '<tool_call>{"name": "launch", "arguments": {}}</tool_call>'  # unknown tool
        '<tool_call>{"name": "divide", "arguments": [1, 2]}</tool_call>'  # arguments not an object
        '<tool_call>{"name": "divide", "arguments": "{oops"}</tool_call>'  # arguments string not JSON
        "<tool_call>  </tool_call>"  # empty
        '<tool_call>{"name": "divide", "arguments": {"a": 5}}</tool_call>'  # fine
    )
    parsed = parse_tool_calls(text, TOOLS)
    assert parsed.calls == [ToolCall("call_7", "divide", {"a": 5})]  # ids follow the block order
    assert parsed.errors == [
        "<tool_call> block 1 is not valid JSON: Expecting property name enclosed in double quotes at line 1 "
        'column 41 (near \'...divide", "arguments": {"a": 1,}}\')',
        '<tool_call> block 2 holds a JSON array; expected an object {"name": ..., "arguments": {...}}',
        "<tool_call> block 3 has no 'name'; say which tool to call",
        "<tool_call> block 4 calls unknown tool 'launch'; known tools: divide, calculator",
        "<tool_call> block 5 (divide): 'arguments' is a JSON array, expected an object",
        "<tool_call> block 6 (divide): 'arguments' is a string that is not valid JSON: Expecting property name "
        "enclosed in double quotes at column 2 (near '{oops'); give a JSON object",
        '<tool_call> block 7 is empty; write {"name": ..., "arguments": {...}} inside it',
    ]


def test_parse_an_unclosed_final_block_and_an_unclosed_block_followed_by_another():
    parsed = parse_tool_calls('Sure. <tool_call>{"name": "divide", "arguments": {"a": 2}}', TOOLS)
    assert parsed == ParsedReply("Sure.", [ToolCall("call_0", "divide", {"a": 2})], [])
    two = parse_tool_calls(
        '<tool_call>{"name": "divide", "arguments": {"a": 1}}\n<tool_call>{"name": "divide", "arguments": {"a": 2}}'
        "</tool_call> done",
        TOOLS,
    )
    assert two == ParsedReply(
        "done", [ToolCall("call_0", "divide", {"a": 1}), ToolCall("call_1", "divide", {"a": 2})], []
    )


def test_a_reply_without_calls_is_all_content():
    assert parse_tool_calls("  The answer is 14.\n", TOOLS) == ParsedReply("The answer is 14.", [], [])


def test_tools_system_prompt_lists_the_schemas_and_the_protocol():
    prompt = tools_system_prompt([divide, TOOLS["calculator"]])
    listing = prompt.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].splitlines()
    assert [json.loads(line) for line in listing] == [
        divide.openai_schema(),
        TOOLS["calculator"].openai_schema(),
    ]
    assert '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' in prompt
    assert "parallel" in prompt and "<tool_response></tool_response>" in prompt
    assert "without any <tool_call> block" in prompt
    with pytest.raises(ValueError, match="at least one tool"):
        tools_system_prompt([])
    with pytest.raises(ValueError, match="two tools are named"):
        tools_system_prompt([divide, divide])


def test_tool_results_message_carries_results_and_parse_errors():
    message = tool_results_message(
        [
            ToolResult("call_0", "divide", "2.0"),
            ToolResult("call_1", "divide", "Error: ZeroDivisionError: division by zero", error=True),
        ],
        ["<tool_call> block 3 calls unknown tool 'launch'; known tools: divide"],
    )
    assert message["role"] == "user"
    assert message["content"] == (
        '<tool_response>\n{"name": "divide", "content": "2.0"}\n</tool_response>\n'
        "<tool_response>\n"
        '{"name": "divide", "content": "Error: ZeroDivisionError: division by zero", "error": true}\n'
        "</tool_response>\n"
        "These tool calls could not be read and were not run:\n"
        "- <tool_call> block 3 calls unknown tool 'launch'; known tools: divide\n"
        'Fix them and call again: <tool_call>{"name": ..., "arguments": {...}}</tool_call>'
    )
    with pytest.raises(ValueError, match="at least one result or parse error"):
        tool_results_message([])


def test_a_react_loop_over_the_text_protocol_with_a_function_llm():
    """A scripted model calls the calculator, reads the response and answers: the pieces fit together."""

    def model(messages: list[dict[str, str]]) -> str:
        assert "<tools>" in messages[0]["content"]
        last = messages[-1]["content"]
        if "<tool_response>" not in last:
            return (
                'Let me compute.\n<tool_call>{"name": "calculator", "arguments": {"expression": "2*(3+4)"}}'
            )
        value = json.loads(last.split("<tool_response>\n", 1)[1].split("\n</tool_response>", 1)[0])["content"]
        return f"The answer is {value}."

    llm = FunctionLLM(model)
    tools = tools_by_name([calculator()])
    history: list[dict[str, str]] = [
        {"role": "system", "content": tools_system_prompt(list(tools.values()))},
        {"role": "user", "content": "What is 2*(3+4)?"},
    ]
    for _ in range(3):
        reply: Completion = llm.generate([history], SamplingParams(temperature=0))[0][0]
        parsed = parse_tool_calls(reply.text, tools)
        history.append({"role": "assistant", "content": reply.text})
        if not parsed.calls and not parsed.errors:
            break
        history.append(tool_results_message([run_tool_call(c, tools) for c in parsed.calls], parsed.errors))
    assert parsed.content == "The answer is 14."
    assert len(history) == 5


# --------------------------------------------------------------------------- calculator

CALC = calculator()


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("2*(3+4)", "14"),
        ("sqrt(16)", "4.0"),
        ("7 // 2 + 7 % 2 - -1", "5"),
        ("2 ** -1", "0.5"),
        ("round(pi, 3)", "3.142"),
        ("max(1, abs(-5), min(3, 4))", "5"),
        ("log(e) + exp(0) + sin(0) + cos(0) + tan(0)", "3.0"),
        ("2**100", str(2**100)),
    ],
)
def test_calculator_answers(expression, expected):
    assert CALC.call({"expression": expression}) == expected


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ('__import__("os")', "calling '__import__' is not allowed"),
        ("(1).real", "attribute access: not allowed"),
        ("x", "the name 'x' is not allowed"),
        ("sqrt", "the name 'sqrt' is not allowed (call it with parentheses)"),
        ("'a' * 3", "string literals are not allowed"),
        ("[1, 2]", "lists: not allowed"),
        ("1 < 2", "comparisons: not allowed"),
        ("(lambda: 1)()", "calling this expression is not allowed"),
        ("1 << 3", "the operator LShift is not allowed"),
        ("True + 1", "bool literals are not allowed"),
        ("1j", "complex literals are not allowed"),
        ("(-8) ** 0.5", "complex number"),
        ("sqrt(x=4)", "keyword arguments are not allowed"),
        ("2 +", "not valid syntax"),
        ("1/0", "ZeroDivisionError: division by zero"),
        ("9**9**9", "too large"),
        ("10**5000", "too large"),
        ("(10**3000) * (10**3000)", "too large"),
        ("round(5, -10**9)", "round() takes at most 100 digits"),
        ("1+" * 600 + "1", "the limit is 1000"),
        ("-" * 150 + "1", "nested too deeply (more than 100 levels)"),
        ("(" * 300 + "1" + ")" * 300, "not valid syntax (too many nested parentheses)"),
    ],
)
def test_calculator_refuses_what_is_not_arithmetic_quickly(expression, fragment):
    start = time.monotonic()
    result = CALC.run(ToolCall("c", "calculator", {"expression": expression}))
    assert time.monotonic() - start < 1.0
    assert result.error, result
    assert fragment in result.content
    with pytest.raises(ToolExecutionError):
        CALC.call({"expression": expression})


# --------------------------------------------------------------------------- python tool


@pytest.fixture
def sandbox_env(monkeypatch):
    """The variables that force or forbid the unconfined backend are unset."""
    monkeypatch.delenv(REQUIRE_BWRAP_ENV, raising=False)
    monkeypatch.delenv(SANDBOX_BACKEND_ENV, raising=False)


@pytest.mark.parametrize("_", [pytest.param(None, marks=needs_bwrap)])
def test_python_tool_runs_code_in_the_sandbox(sandbox_env, _):
    t = python_tool(timeout_s=20)
    assert t.name == "python" and t.runs_code and t.parameters["required"] == ["code"]
    assert t.run(ToolCall("c", "python", {"code": "print(2+3)"})) == ToolResult("c", "python", "5")
    # The program sees the sandbox, not the host: the project tree is not there.
    seen = t.call({"code": f"import os; print(os.path.exists({__file__!r}))"})
    assert seen == "False"
    both = t.call({"code": "import sys; print('out'); print('warn', file=sys.stderr)"})
    assert both == "stdout:\nout\nstderr:\nwarn"
    failed = t.run(ToolCall("d", "python", {"code": "raise ValueError('boom')"}))
    assert failed.error and failed.content.startswith("Error: the program failed (exit status 1)\nstderr:\n")
    assert "ValueError: boom" in failed.content


@pytest.mark.parametrize("_", [pytest.param(None, marks=needs_bwrap)])
def test_python_tool_reports_a_timeout(sandbox_env, _):
    t = python_tool(timeout_s=1.0)
    start = time.monotonic()
    result = t.run(ToolCall("c", "python", {"code": "print('started', flush=True)\nwhile True:\n    pass"}))
    assert time.monotonic() - start < 10
    assert result.error
    assert result.content == "Error: the program failed (timeout after 1.0 s)\nstdout:\nstarted"


@pytest.fixture
def no_bwrap(monkeypatch, sandbox_env):
    """Bubblewrap is not found, and the probe runs afresh (its cache is restored after)."""
    monkeypatch.setattr(sandbox_core, "_find_bwrap", lambda: None)
    monkeypatch.setattr(sandbox_core, "_bwrap_cached", None)
    monkeypatch.setattr(sandbox_core, "_warned", set())


def test_python_tool_fails_closed_and_runs_unconfined_only_when_asked_by_name(no_bwrap):
    with pytest.raises(SandboxUnavailableError, match="cannot run isolated here"):
        python_tool().run(ToolCall("c", "python", {"code": "print(1)"}))  # raised, not shown to the model
    assert python_tool(backend="rlimit").call({"code": "print(2+3)"}) == "5"
