"""Native tool calls of OpenAICompatibleLLM against a real HTTP server on localhost.

The server here checks requests the way an OpenAI server does where tools are
concerned (the tools' shape; every assistant tool call answered by one
``tool`` message whose ``tool_call_id`` matches; arguments sent as JSON
strings) and answers 400 otherwise, so a client that sends the wrong wire
format fails the test.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from societas.agents.llm import FunctionLLM, SamplingParams
from societas.agents.llm.base import Completion
from societas.agents.llm.openai_compat import LLMServerError, OpenAICompatibleLLM, tool_prompt_messages
from societas.agents.tools import (
    ToolCall,
    ToolResult,
    assistant_tool_calls_message,
    calculator,
    run_tool_call,
    tool,
    tool_message,
    tools_by_name,
)

FAST = {"backoff_s": 0.01, "backoff_max_s": 0.05, "max_retries": 0}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy may intercept 127.0.0.1, and no API key may leak in from the environment."""
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


class BadRequest(Exception):
    """The request breaks the OpenAI tool-calling rules; the server answers 400 with this message."""


def check_openai_tool_rules(body: dict[str, Any]) -> None:
    """What an OpenAI server rejects about tools and tool turns."""
    for t in body.get("tools", []):
        fn = t.get("function", {})
        if t.get("type") != "function" or not isinstance(fn.get("name"), str) or "parameters" not in fn:
            raise BadRequest(f"invalid tool {t!r}")
    open_ids: set[str] = set()
    for i, m in enumerate(body["messages"]):
        if m["role"] != "tool" and open_ids:
            raise BadRequest(
                f"messages[{i}]: tool_call_ids {sorted(open_ids)} did not have response messages"
            )
        if m["role"] == "assistant" and "tool_calls" in m:
            for c in m["tool_calls"]:
                if c.get("type") != "function" or not isinstance(c["function"]["arguments"], str):
                    raise BadRequest(f"messages[{i}]: bad tool call {c!r}")
                json.loads(c["function"]["arguments"])
                open_ids.add(c["id"])
        elif m["role"] == "tool":
            if m.get("tool_call_id") not in open_ids or not isinstance(m.get("content"), str):
                raise BadRequest(f"messages[{i}]: tool message answers no tool call")
            open_ids.discard(m["tool_call_id"])
        elif not isinstance(m.get("content"), str):
            raise BadRequest(f"messages[{i}]: content must be a string")
    if open_ids:
        raise BadRequest(f"tool_call_ids {sorted(open_ids)} did not have response messages")


class ToolServer:
    """A chat-completions server whose ``answer(body)`` returns the assistant ``message`` (and finish reason)."""

    def __init__(self, answer: Callable[[dict[str, Any]], tuple[dict[str, Any], str]]) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        self.rejections: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                try:
                    check_openai_tool_rules(body)
                    message, finish = server.answer(body)
                    status, data = (
                        200,
                        {
                            "id": "chatcmpl-tools",
                            "object": "chat.completion",
                            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                        },
                    )
                except BadRequest as e:
                    server.rejections.append(str(e))
                    status, data = 400, {"error": {"message": str(e), "type": "invalid_request_error"}}
                payload = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> ToolServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def wire_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


@tool
def lookup(city: str, unit: str = "C") -> str:
    """The temperature in a city.

    Args:
        city: The city.
        unit: C or F.
    """
    return f"21 {unit} in {city}"


CALC = calculator()
TOOLS = [CALC, lookup]


def test_the_request_carries_the_tools_and_parallel_tool_calls_come_back() -> None:
    def answer(body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        assert body["tools"] == [CALC.openai_schema(), lookup.openai_schema()]
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                wire_call("call_a", "calculator", '{"expression": "2*(3+4)"}'),
                wire_call("call_b", "lookup", '{"city": "Oslo"}'),
            ],
        }, "tool_calls"

    with ToolServer(answer) as srv, OpenAICompatibleLLM(srv.url, "m", **FAST) as llm:
        assert llm.supports_native_tools is True
        out = llm.generate(["What is 2*(3+4), and how warm is Oslo?"], tools=TOOLS)
    c = out[0][0]
    assert c.text == "" and c.finish_reason == "tool_calls"
    assert c.tool_calls == [
        ToolCall("call_a", "calculator", {"expression": "2*(3+4)"}),
        ToolCall("call_b", "lookup", {"city": "Oslo"}),
    ]
    assert c.tool_call_errors is None
    assert srv.requests[0]["messages"] == [
        {"role": "user", "content": "What is 2*(3+4), and how warm is Oslo?"}
    ]
    assert c.to_dict()["tool_calls"] == [
        {"id": "call_a", "name": "calculator", "arguments": {"expression": "2*(3+4)"}, "error": None},
        {"id": "call_b", "name": "lookup", "arguments": {"city": "Oslo"}, "error": None},
    ]


def test_a_round_trip_sends_the_assistant_tool_calls_and_the_tool_turns_in_wire_format() -> None:
    def answer(body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        last = body["messages"][-1]
        if last["role"] == "tool":
            results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
            return {"role": "assistant", "content": "Answer: " + "; ".join(results)}, "stop"
        return {
            "role": "assistant",
            "content": "Computing.",
            "tool_calls": [
                wire_call("call_1", "calculator", '{"expression": "2*(3+4)"}'),
                wire_call("call_2", "lookup", '{"city": "Oslo", "unit": "F"}'),
            ],
        }, "tool_calls"

    history: list[dict[str, Any]] = [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Go."},
    ]
    by_name = tools_by_name(TOOLS)
    with ToolServer(answer) as srv, OpenAICompatibleLLM(srv.url, "m", **FAST) as llm:
        first = llm.generate([history], SamplingParams(temperature=0), tools=TOOLS)[0][0]
        assert first.text == "Computing." and first.tool_calls is not None
        results = [run_tool_call(call, by_name) for call in first.tool_calls]
        assert results == [
            ToolResult("call_1", "calculator", "14"),
            ToolResult("call_2", "lookup", "21 F in Oslo"),
        ]
        history.append(assistant_tool_calls_message(first.text, first.tool_calls))
        history.extend(tool_message(r) for r in results)
        second = llm.generate([history], SamplingParams(temperature=0), tools=TOOLS)[0][0]

    assert srv.rejections == []
    assert second.text == "Answer: 14; 21 F in Oslo"
    assert second.tool_calls == [] and second.tool_call_errors is None  # tools were sent, none called
    assert srv.requests[1]["messages"] == [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Go."},
        {
            "role": "assistant",
            "content": "Computing.",
            "tool_calls": [
                wire_call("call_1", "calculator", '{"expression": "2*(3+4)"}'),
                wire_call("call_2", "lookup", '{"city": "Oslo", "unit": "F"}'),
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "14"},
        {"role": "tool", "tool_call_id": "call_2", "content": "21 F in Oslo"},
    ]
    assert srv.requests[1]["tools"] == srv.requests[0]["tools"]


def test_unusable_native_calls_are_kept_with_their_error() -> None:
    ran: list[str] = []

    @tool
    def record(note: str) -> str:
        """Write a note down."""
        ran.append(note)
        return "noted"

    def answer(body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                wire_call("call_x", "record", '{"note": "a",'),  # invalid JSON
                wire_call("call_y", "erase", "{}"),  # unknown tool
                wire_call("call_z", "record", "[1]"),  # not an object
                {
                    "type": "function",
                    "function": {"name": "record", "arguments": {"note": "b"}},
                },  # no id, dict args
                wire_call("call_w", "record", ""),  # no arguments at all
            ],
        }, "tool_calls"

    with ToolServer(answer) as srv, OpenAICompatibleLLM(srv.url, "m", **FAST) as llm:
        c = llm.generate(["go"], tools=[record])[0][0]
    assert [(t.id, t.name, t.arguments) for t in c.tool_calls or []] == [
        ("call_x", "record", {}),
        ("call_y", "erase", {}),
        ("call_z", "record", {}),
        ("call_3", "record", {"note": "b"}),
        ("call_w", "record", {}),
    ]
    assert c.tool_call_errors == [
        "tool call call_x ('record'): arguments are not valid JSON (Expecting property name enclosed in double "
        'quotes at line 1 column 14): \'{"note": "a",\'',
        "tool call call_y ('erase'): unknown tool 'erase'; known tools: record",
        "tool call call_z ('record'): arguments must be a JSON object, got a JSON array",
    ]
    calls = c.tool_calls or []
    assert [t.error is not None for t in calls] == [True, True, True, False, False]
    results = [run_tool_call(t, tools_by_name([record])) for t in calls]
    assert [r.error for r in results] == [True, True, True, False, True]
    assert results[0].content.startswith("Error: arguments are not valid JSON")
    assert results[1].content == "Error: unknown tool 'erase'; known tools: record"
    assert "missing required parameter 'note'" in results[4].content
    assert ran == ["b"]  # the tool ran only for the call it could read


def test_without_tools_nothing_changes() -> None:
    def answer(body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        assert "tools" not in body
        return {"role": "assistant", "content": "plain"}, "stop"

    with ToolServer(answer) as srv, OpenAICompatibleLLM(srv.url, "m", **FAST) as llm:
        plain = llm.generate([[{"role": "user", "content": "hi", "extra": "dropped"}]])[0][0]
        empty = llm.generate(["hi"], tools=[])[0][0]
    assert plain.text == "plain" and plain.tool_calls is None and plain.tool_call_errors is None
    assert srv.requests[0]["messages"] == [{"role": "user", "content": "hi"}]
    assert empty.tool_calls == []  # asked with tools (none): a list, and no "tools" key sent


def test_tool_calls_are_read_also_when_the_tools_went_in_extra_body() -> None:
    def answer(body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        assert body["tools"] == [lookup.openai_schema()]
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [wire_call("k", "lookup", '{"city": "Rome"}')],
        }, ("tool_calls")

    extra = {"tools": [lookup.openai_schema()]}
    with ToolServer(answer) as srv, OpenAICompatibleLLM(srv.url, "m", extra_body=extra, **FAST) as llm:
        c = llm.generate(["go"])[0][0]
    assert c.tool_calls == [ToolCall("k", "lookup", {"city": "Rome"})]  # names not checked: no tools given
    assert c.tool_call_errors is None


def test_a_prompt_that_breaks_the_tool_rules_fails_before_sending() -> None:
    calls = [ToolCall("c1", "calculator", {"expression": "1"})]
    with ToolServer(lambda body: ({"role": "assistant", "content": "x"}, "stop")) as srv:
        with OpenAICompatibleLLM(srv.url, "m", **FAST) as llm:
            with pytest.raises(ValueError, match=r"ends with unanswered tool calls \['c1'\]"):
                llm.generate(
                    [[{"role": "user", "content": "q"}, assistant_tool_calls_message("", calls)]], tools=TOOLS
                )
            with pytest.raises(ValueError, match="prompt message 1 is a 'tool' turn whose tool_call_id 'zz'"):
                llm.generate(
                    [
                        [
                            {"role": "user", "content": "q"},
                            {"role": "tool", "tool_call_id": "zz", "content": "1"},
                        ]
                    ],
                    tools=TOOLS,
                )
            with pytest.raises(ValueError, match="two tools are named 'calculator'"):
                llm.generate(["q"], tools=[CALC, CALC])
            with pytest.raises(TypeError, match=r"tools\[0\] must be a Tool"):
                llm.generate(["q"], tools=[{"type": "function"}])  # type: ignore[list-item]
        assert srv.requests == []
    # A server that rejects the request (400) fails at once with its message.
    with ToolServer(lambda body: (_ for _ in ()).throw(BadRequest("no tools here"))) as srv:
        with OpenAICompatibleLLM(srv.url, "m", **FAST) as llm:
            with pytest.raises(LLMServerError, match="HTTP 400: no tools here"):
                llm.generate(["q"], tools=TOOLS)


def test_tool_prompt_messages_accepts_dicts_and_the_wire_form() -> None:
    prompt = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "a", "name": "calculator", "arguments": {"expression": "1+1"}},
                {"id": "b", "name": "lookup", "arguments": '{"city": "Rome"}'},
                wire_call("c", "lookup", '{"city": "Oslo"}'),
            ],
        },
        {"role": "tool", "tool_call_id": "b", "content": "20"},
        {"role": "tool", "tool_call_id": "a", "content": "2"},
        {"role": "tool", "tool_call_id": "c", "content": "5"},
        {"role": "assistant", "content": "done"},
    ]
    assert tool_prompt_messages(prompt) == [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                wire_call("a", "calculator", '{"expression": "1+1"}'),
                wire_call("b", "lookup", '{"city": "Rome"}'),
                wire_call("c", "lookup", '{"city": "Oslo"}'),
            ],
        },
        {"role": "tool", "tool_call_id": "b", "content": "20"},
        {"role": "tool", "tool_call_id": "a", "content": "2"},
        {"role": "tool", "tool_call_id": "c", "content": "5"},
        {"role": "assistant", "content": "done"},
    ]
    with pytest.raises(ValueError, match=r"prompt message 2 \(user\) follows unanswered tool calls \['b'\]"):
        tool_prompt_messages(
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "tool_calls": [{"id": "b", "name": "lookup", "arguments": {}}]},
                {"role": "user", "content": "never mind"},
            ]
        )
    with pytest.raises(ValueError, match=r"tool_calls\[0\] 'arguments' is a string but not valid JSON"):
        tool_prompt_messages(
            [{"role": "assistant", "tool_calls": [{"id": "x", "name": "f", "arguments": "{"}]}]
        )
    with pytest.raises(ValueError, match="repeats the tool call id 'x'"):
        tool_prompt_messages(
            [
                {"role": "assistant", "tool_calls": [{"id": "x", "name": "f", "arguments": {}}]},
                {"role": "tool", "tool_call_id": "x", "content": ""},
                {"role": "assistant", "tool_calls": [{"id": "x", "name": "f", "arguments": {}}]},
                {"role": "tool", "tool_call_id": "x", "content": ""},
            ]
        )


def test_other_backends_do_not_claim_native_tools() -> None:
    assert not getattr(FunctionLLM(lambda m: "x"), "supports_native_tools", False)
    # A plain completion still serialises as before, with the new fields empty.
    d = Completion(text="x").to_dict()
    assert d["tool_calls"] is None and d["tool_call_errors"] is None and d["text"] == "x"
