"""Any server that speaks the OpenAI chat-completions API, as an :class:`~societas.agents.llm.base.LLM`.

This module is long because one backend's wire protocol is one job: parsing
the server's answers, retries with backoff, cancellation and token accounting
all serve the single OpenAICompatibleLLM class and are tested through it.

``vllm serve``, llama.cpp's ``llama-server``, SGLang, TGI, Ollama and OpenAI
itself all answer ``POST {base_url}/chat/completions``. :class:`OpenAICompatibleLLM`
turns a batch of prompts into concurrent requests to such a server and the
answers into :class:`~societas.agents.llm.base.Completion` objects, in prompt order.

``base_url`` is what OpenAI clients take: the URL *including* the version
prefix, e.g. ``http://127.0.0.1:8000/v1``; requests go to
``base_url + "/chat/completions"``.

Rules worth knowing (servers differ, so these are spelled out):

Requests
    One request per prompt carrying ``n``, ``temperature``, ``top_p``,
    ``max_tokens`` (from ``max_new_tokens``), ``stop`` (at most the first
    four strings, the limit of the OpenAI API), ``seed`` when set and
    ``logprobs: true`` when asked. ``extra_body`` is merged in last, so it can
    add server-specific fields (``{"top_k": 20}``, ``{"return_token_ids":
    True}`` for vLLM) or override the standard ones. A server that returns
    fewer than ``n`` choices (some ignore ``n``) is asked again for the rest;
    when a seed is set, a follow-up request uses ``seed + samples already
    held`` so that the extra samples differ yet stay reproducible.

Text, stop strings and finish reasons
    Stop strings are also applied on the client (every one of them, not just
    the four sent), because servers differ in whether and how they apply them;
    a cut sets ``finish_reason="stop"``. Otherwise the server's finish reason
    passes through (``"stop"``, ``"length"``, or anything else it reports;
    a missing one counts as ``"stop"``).

Log-probabilities and token ids
    ``Completion.logprobs`` comes from ``choices[i].logprobs.content[j].logprob``.
    The OpenAI API returns no token ids, so ``Completion.token_ids`` is empty,
    unless the server adds vLLM's ``choices[i].token_ids`` extension (ask for
    it with ``extra_body={"return_token_ids": True}`` on vLLM >= 0.10.2).
    When the client cuts the text at a stop string, log-probabilities and
    token ids are cut to the tokens that start inside the kept text (this
    needs the token strings of ``logprobs.content``; without them the lists are
    left whole).

Usage
    A response's ``usage.prompt_tokens`` is assigned to the first completion
    taken from that response, so that summing the usage of all completions
    gives what the server counted. Completion tokens per choice are exact
    when the choice carries token ids or log-probabilities (their length);
    otherwise the response's ``usage.completion_tokens`` is split across its
    choices in proportion to their text lengths (integer shares that add up);
    a server that reports no usage at all gets whitespace-word estimates.
    Usage counts what the server generated, before any client-side cut.

Concurrency, timeouts and retries
    Requests run on a per-instance pool of ``max_concurrency`` threads sharing
    one pooled ``httpx.Client``, so the limit holds across concurrent
    ``generate`` calls, and ``generate`` works from plain code and from inside
    a running event loop alike (it blocks its caller).

    ``timeout_s`` bounds each attempt as a whole: connecting, sending,
    waiting for the answer and reading all of its body. The exchange runs in
    a helper thread that the caller stops waiting for at the deadline, so a
    server that sends nothing, or trickles its headers or body a byte at a
    time, fails the attempt after ``timeout_s``. The abandoned helper's
    socket is shut down at once when it is known (a new connection, or any
    connection once the answer's headers are in); otherwise (a kept-alive
    connection still waiting for headers) the helper ends at its next read
    timeout, or when a trickling server stops. Retries are bounded
    separately, each attempt getting the whole ``timeout_s``: a prompt takes
    at most ``(max_retries + 1) * timeout_s`` plus the backoff waits.

    HTTP 408, 429, 500, 502, 503 and 504, connection errors, timeouts and
    malformed responses (invalid JSON, no ``choices``) are retried up to
    ``max_retries`` times with exponential backoff and jitter (``backoff_s *
    2**k``, capped at ``backoff_max_s``, drawn from its upper half); a
    ``Retry-After`` header (seconds or HTTP date; or ``retry-after-ms``)
    replaces the backoff, capped at ``backoff_max_s``. Other statuses (400,
    401, 404, ...) fail at once: a client error (4xx) would fail the same way
    again, and the error says so ("not retried: HTTP 400 is a client error
    ...") next to the server's own message. Failing raises
    :class:`LLMServerError`, naming the URL, the model, the number of
    attempts and the last error (server text quoted on one line); a failed
    prompt fails the whole batch and stops the retries of its other prompts.
    (The one exception is a context-length error, below.)

Context length
    ``context_length`` is the most tokens a prompt and its reply may hold
    together. It is the constructor's ``context_length`` when given, else what
    the server's ``GET {base_url}/models`` reports for the model (vLLM's
    ``max_model_len``; also ``context_length``, ``context_window`` or
    ``max_context_length``), asked once, on first use (or by :meth:`check`),
    else ``None``. The client cannot count a prompt's tokens before sending
    it, so it *estimates* them from below: one token per
    :data:`CHARS_PER_TOKEN_BOUND` (6) characters of message text, while
    tokenizers average 3-4 characters per token on prose and code. A
    request whose ``max_new_tokens`` exceeds ``context_length`` minus that
    estimate is capped to it (with a warning); an estimate low by the usual
    factor of two caps too little rather than too much, so no reply is cut
    short by a wrong guess, and what still does not fit is settled by the
    server: a 4xx answer whose message states the context length and the
    prompt's exact token count (vLLM's and OpenAI's "This model's maximum
    context length is N tokens. However, you requested T tokens (P in the
    messages, Q in the completion)", vLLM's newer "... and your request has
    P input tokens ...", llama.cpp's ``n_ctx``/``n_prompt_tokens``; see
    :func:`parse_context_error`) makes the client cap ``max_tokens`` to
    ``N - P`` and send the request once more, with a warning (one per
    requested budget and context length per instance, not one per prompt).
    When ``P >= N`` the prompt alone does not fit and
    :class:`~societas.agents.llm.base.ContextLengthError` is raised; a
    context message without the numbers is an :class:`LLMServerError`, not
    retried.

Native tool calls
    ``generate(..., tools=[...])`` sends ``"tools"`` (each tool's
    ``openai_schema()``) with every request of the batch, and each
    completion's ``tool_calls`` is read from ``choices[i].message.tool_calls``:
    the JSON-string ``arguments`` are decoded into a dict. A call whose
    arguments are not a JSON object, that names no function, or that names a
    tool not sent, is kept (its id needs an answer in the next request) with
    ``arguments`` ``{}`` and its ``error`` set, and the same line goes into
    ``Completion.tool_call_errors``; a call without an id gets ``call_<k>``.
    Prompts sent with tools may hold assistant turns with a ``tool_calls``
    list (``ToolCall`` objects or ``{"id", "name", "arguments"}`` dicts) and
    ``tool`` turns with ``tool_call_id`` and ``content``; they are translated
    into the OpenAI wire format by :func:`tool_prompt_messages`, which also
    checks that every tool call is answered by exactly one ``tool`` turn
    before the conversation moves on. Without ``tools`` the plain rules
    apply (only ``role`` and ``content`` of each turn are sent).

Response size
    A response body (error bodies too) may hold at most ``max_response_bytes``
    (default 32 MiB): a larger declared ``Content-Length`` fails before the
    body is read, and a body that grows past the cap while streaming is
    dropped at once, so no more than the cap plus one network read is held in
    memory. The client asks for an uncompressed body (``Accept-Encoding:
    identity``); should a server compress anyway, the cap counts decoded bytes
    and the read past it is one network read once decoded. An oversized
    answer is not retried.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import os
import random
import re
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self, TypeGuard
from urllib.parse import urlsplit

import httpx

from .base import (
    Completion,
    Prompt,
    SamplingParams,
    ToolCall,
    Usage,
    broadcast_params,
    check_context_length,
    fit_max_new_tokens,
    normalize_prompt,
    truncate_at_stop,
)

if TYPE_CHECKING:  # societas.agents.tools imports this package; the type alone is needed here
    from ..tools import Tool

log = logging.getLogger(__name__)

# How long a failed generate() waits for its other requests to notice the cancel.
_SIBLING_STOP_S = 1.0

__all__ = [
    "CHARS_PER_TOKEN_BOUND",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "RETRY_STATUSES",
    "ContextOverflow",
    "LLMServerError",
    "OpenAICompatibleLLM",
    "estimate_prompt_tokens",
    "parse_context_error",
    "tool_prompt_messages",
]

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
"""HTTP statuses worth another attempt: timeouts, rate limits, overloaded or restarting servers."""

DEFAULT_MAX_RESPONSE_BYTES = 32 * 1024 * 1024
"""The largest response body a client reads unless told otherwise (32 MiB)."""

MAX_STOP_SENT = 4  # the OpenAI API rejects more; the rest are applied client-side
_EXCERPT_CHARS = 300

CHARS_PER_TOKEN_BOUND = 6
"""Characters of message text counted as one token when a prompt's length is estimated
(:func:`estimate_prompt_tokens`): more than tokenizers average, so the estimate stays below
the true count and caps ``max_tokens`` too little rather than too much."""

# Keys under which model listings report a context length (vLLM: max_model_len).
_LISTING_CONTEXT_KEYS = ("max_model_len", "context_length", "context_window", "max_context_length")
_LISTING_TIMEOUT_S = 10.0


class LLMServerError(RuntimeError):
    """A chat-completions server could not give an answer.

    Attributes say what happened: ``url`` (the endpoint), ``model``,
    ``attempts`` (requests sent for the failing prompt), ``status`` (the last
    HTTP status, ``None`` for connection errors and timeouts), ``body`` (an
    excerpt of the last response body) and ``retryable`` (whether the last
    error was of a kind that is retried, i.e. the retries ran out).
    """

    def __init__(
        self,
        message: str,
        *,
        url: str,
        model: str,
        attempts: int,
        status: int | None = None,
        body: str | None = None,
        retryable: bool = True,
    ) -> None:
        super().__init__(message)
        self.url = url
        self.model = model
        self.attempts = attempts
        self.status = status
        self.body = body
        self.retryable = retryable


class _AttemptError(Exception):
    """One failed attempt: what went wrong and whether another attempt may help."""

    def __init__(
        self,
        description: str,
        *,
        retryable: bool,
        status: int | None = None,
        body: str | None = None,
        retry_after: float | None = None,
        no_retry: str = "the server rejected the request",
        context: ContextOverflow | None = None,
    ) -> None:
        super().__init__(description)
        self.description = description
        self.retryable = retryable
        self.status = status
        self.body = body
        self.retry_after = retry_after
        self.no_retry = no_retry  # for the message, when the error is not retryable
        self.context = context  # a client error that says the request exceeds the context length


class _Cancelled(Exception):
    """Raised in a worker whose batch already failed, or whose client was closed."""


def _shutdown(sock: socket.socket) -> None:
    """Shut a socket down so that a read blocked on it in another thread returns at once."""
    try:
        # The plain socket's shutdown, also for TLS sockets: SSLSocket.shutdown would
        # drop the TLS state under the feet of the thread still reading.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class _Exchange:
    """One attempt's HTTP exchange, run in a helper thread so that its caller can give up at the deadline.

    The helper fills in ``status``, ``headers`` and ``raw`` (or ``error``)
    and sets ``done``. Sockets the exchange uses are remembered so that
    :meth:`abandon` can shut them down and end the helper early.
    """

    def __init__(self) -> None:
        self.done = threading.Event()
        self.status = 0
        self.headers = httpx.Headers()
        self.raw = b""
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._abandoned = False
        self._sockets: list[socket.socket] = []

    @property
    def abandoned(self) -> bool:
        with self._lock:
            return self._abandoned

    def watch(self, stream: Any) -> None:
        """Remember the socket of an httpcore network stream (shut at once when already abandoned)."""
        get = getattr(stream, "get_extra_info", None)
        sock = get("socket") if callable(get) else None
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            if not self._abandoned:
                self._sockets.append(sock)
                return
        _shutdown(sock)

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        """httpx's ``trace`` extension: catches the stream of a connection opened for this exchange."""
        if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            self.watch(info.get("return_value"))

    def abandon(self) -> None:
        """The caller stopped waiting: shut the sockets down so that the helper ends soon."""
        with self._lock:
            self._abandoned = True
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _shutdown(sock)


@dataclass
class _RawToolCall:
    """One entry of ``message.tool_calls`` as the server sent it (checked later, against the tools)."""

    id: Any
    name: Any
    arguments: Any


@dataclass
class _Choice:
    text: str
    finish_reason: str
    logprobs: list[float] | None
    tokens: list[str] | None  # token strings from logprobs.content, when every entry has one
    token_ids: list[int] | None
    tool_calls: list[_RawToolCall] | None = None


@dataclass
class _Response:
    choices: list[_Choice]
    prompt_tokens: int | None
    completion_tokens: int | None


def _excerpt(text: str, limit: int = _EXCERPT_CHARS) -> str:
    """The start of a server's text on one line: line breaks and other control characters become spaces."""
    text = text.strip()
    clean = "".join(ch if ch.isprintable() else " " for ch in text[:limit])
    return clean if len(text) <= limit else clean + "..."


def _server_message(text: str) -> str:
    """The error message inside an error body (OpenAI, vLLM, llama.cpp and FastAPI shapes), else an excerpt."""
    try:
        data = json.loads(text)
    except ValueError:
        return _excerpt(text) or "(empty body)"
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return _excerpt(err["message"])
        for value in (err, data.get("message"), data.get("detail")):
            if isinstance(value, str):
                return _excerpt(value)
    return _excerpt(text)


@dataclass(frozen=True)
class ContextOverflow:
    """What a server's context-length error says: the model's context length and,
    when it says so, the prompt's token count (``None`` when it does not)."""

    context_length: int
    prompt_tokens: int | None


_CONTEXT_RE = re.compile(r"maximum context length is (\d+) tokens", re.IGNORECASE)
_PROMPT_RES = (
    re.compile(r"\((\d+) in the messages", re.IGNORECASE),  # vLLM (older), OpenAI, DeepSeek
    re.compile(r"\((\d+) in your prompt", re.IGNORECASE),  # the completions API's variant
    re.compile(r"request has (\d+) input tokens", re.IGNORECASE),  # vLLM >= 0.10
    re.compile(r"messages resulted in (\d+) tokens", re.IGNORECASE),  # OpenAI, prompt alone too long
)
_REQUESTED_RE = re.compile(r"you requested (\d+) tokens", re.IGNORECASE)


def _error_fields(text: str) -> dict[str, Any]:
    """The ``error`` object of a JSON error body (or the body itself), else ``{}``."""
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    err = data.get("error")
    return err if isinstance(err, dict) else data


def parse_context_error(text: str, max_tokens: int | None = None) -> ContextOverflow | None:
    """Read a server's "the request exceeds the context length" error, else ``None``.

    ``text`` is the error body (JSON or plain text). Understood: "This model's
    maximum context length is N tokens" with the prompt's count P from "(P in
    the messages, ...)" (vLLM before 0.10, OpenAI), "(P in your prompt; ...)",
    "your request has P input tokens" (vLLM 0.10 and later) or "your messages
    resulted in P tokens" (OpenAI), or, failing those, from "you requested T
    tokens" minus the ``max_tokens`` that was sent; and llama.cpp's JSON
    fields ``n_ctx`` and ``n_prompt_tokens``. A message that names the
    context length but not the prompt's count gives ``prompt_tokens=None``.
    """
    fields = _error_fields(text)
    n_ctx, n_prompt = fields.get("n_ctx"), fields.get("n_prompt_tokens")
    if _is_int(n_ctx) and n_ctx > 0:
        return ContextOverflow(n_ctx, n_prompt if _is_int(n_prompt) and n_prompt >= 0 else None)
    m = _CONTEXT_RE.search(text)
    if m is None:
        return None
    context_length = int(m.group(1))
    for pattern in _PROMPT_RES:
        found = pattern.search(text)
        if found is not None:
            return ContextOverflow(context_length, int(found.group(1)))
    requested = _REQUESTED_RE.search(text)
    if requested is not None and max_tokens is not None and int(requested.group(1)) >= max_tokens:
        return ContextOverflow(context_length, int(requested.group(1)) - max_tokens)
    return ContextOverflow(context_length, None)


def estimate_prompt_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """A low estimate of a prompt's tokens: its characters (message texts, tool calls' names
    and arguments) divided by :data:`CHARS_PER_TOKEN_BOUND`, rounded down. The chat template's
    own tokens are not counted either, so the true count is nearly always larger."""
    chars = 0
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            chars += len(content)
        for call in m.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                chars += len(str(fn.get("name") or "")) + len(str(fn.get("arguments") or ""))
    return chars // CHARS_PER_TOKEN_BOUND


def _listed_context_length(data: Any, model: str) -> int | None:
    """The context length a ``/models`` listing reports for ``model``, else ``None``."""
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return None
    for entry in entries:
        if isinstance(entry, dict) and entry.get("id") == model:
            for key in _LISTING_CONTEXT_KEYS:
                value = entry.get(key)
                if _is_int(value) and value > 0:
                    return int(value)
    return None


def _retry_after(headers: httpx.Headers) -> float | None:
    """Seconds the server asks us to wait (``retry-after-ms``, ``Retry-After`` seconds or HTTP date)."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
            if math.isfinite(value):
                return max(0.0, value)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        value = float(raw)
        return max(0.0, value) if math.isfinite(value) else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _is_int(x: Any) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool)


def _parse_choice(raw: Any, k: int) -> _Choice:
    if not isinstance(raw, dict):
        raise TypeError(f"choices[{k}] is not an object")
    message = raw.get("message")
    if not isinstance(message, dict):
        raise TypeError(f"choices[{k}] has no 'message' object")
    content = message.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise TypeError(f"choices[{k}].message.content is {type(content).__name__}, expected a string")
    finish = raw.get("finish_reason")
    finish = "stop" if finish is None else str(finish)

    logprobs: list[float] | None = None
    tokens: list[str] | None = None
    lp = raw.get("logprobs")
    if isinstance(lp, dict) and isinstance(lp.get("content"), list):
        logprobs, token_strs = [], []
        for j, entry in enumerate(lp["content"]):
            if not isinstance(entry, dict) or not isinstance(entry.get("logprob"), (int, float)):
                raise TypeError(f"choices[{k}].logprobs.content[{j}] has no numeric 'logprob'")
            logprobs.append(float(entry["logprob"]))
            token_strs.append(entry.get("token"))
        strs = [t for t in token_strs if isinstance(t, str)]
        if len(strs) == len(token_strs):  # every entry names its token
            tokens = strs
    elif lp is not None and not isinstance(lp, dict):
        raise TypeError(f"choices[{k}].logprobs is {type(lp).__name__}, expected an object or null")

    token_ids: list[int] | None = None
    ids = raw.get("token_ids")
    if ids is not None:
        if not isinstance(ids, list) or not all(_is_int(t) for t in ids):
            raise TypeError(f"choices[{k}].token_ids is not a list of integers")
        token_ids = list(ids)
    return _Choice(content, finish, logprobs, tokens, token_ids, _parse_raw_tool_calls(message, k))


def _parse_raw_tool_calls(message: dict, k: int) -> list[_RawToolCall] | None:
    """The entries of ``message.tool_calls``; a list of non-objects is a malformed response."""
    raw = message.get("tool_calls")
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise TypeError(f"choices[{k}].message.tool_calls is {type(raw).__name__}, expected a list")
    calls = []
    for j, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise TypeError(f"choices[{k}].message.tool_calls[{j}] is not an object")
        function = entry.get("function")
        if function is None:
            function = {}
        if not isinstance(function, dict):
            raise TypeError(f"choices[{k}].message.tool_calls[{j}].function is not an object")
        calls.append(_RawToolCall(entry.get("id"), function.get("name"), function.get("arguments")))
    return calls


def _snippet(text: str, pos: int, width: int = 30) -> str:
    """The text around ``pos`` on one line, for messages about invalid JSON."""
    start, end = max(0, pos - width), min(len(text), pos + width)
    piece = text[start:end].replace("\n", " ")
    return ("..." if start else "") + piece + ("..." if end < len(text) else "")


def _decode_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """A native call's arguments as a dict, or ``({}, problem)``."""
    if raw is None or raw == "":
        return {}, None
    if isinstance(raw, dict):  # some servers send the object itself
        return raw, None
    if not isinstance(raw, str):
        return {}, f"arguments are a JSON {type(raw).__name__}, expected a JSON object (as a string)"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        return {}, (
            f"arguments are not valid JSON ({e.msg} at line {e.lineno} column {e.colno}): "
            f"{_snippet(raw, e.pos)!r}"
        )
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got a JSON {_json_kind(value)}"
    return value, None


def _json_kind(value: Any) -> str:
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def _tool_calls(raw: list[_RawToolCall], known: Sequence[str] | None) -> tuple[list[ToolCall], list[str]]:
    """Native tool calls checked against the tools sent (``known``; ``None`` when the tools were not sent
    through ``generate``, e.g. in ``extra_body``); a call that cannot be used carries its error."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    for k, rc in enumerate(raw):
        call_id = rc.id if isinstance(rc.id, str) and rc.id else f"call_{k}"
        name = rc.name if isinstance(rc.name, str) else ""
        arguments, problem = _decode_arguments(rc.arguments)
        if not name:
            problem = "names no function"
        elif known is not None and name not in known:
            problem = f"unknown tool {name!r}; known tools: {', '.join(known)}"
        if problem is not None:
            label = f"tool call {call_id} ({name!r})" if name else f"tool call {call_id}"
            errors.append(f"{label}: {problem}")
            calls.append(ToolCall(call_id, name, {}, error=problem))
        else:
            calls.append(ToolCall(call_id, name, arguments))
    return calls, errors


_TOOL_ROLES = ("system", "user", "assistant", "tool")


def _wire_tool_call(m_index: int, j: int, call: Any) -> dict[str, Any]:
    """One assistant tool call (a ToolCall, an ``{"id", "name", "arguments"}`` dict, or the wire form)."""
    where = f"prompt message {m_index} tool_calls[{j}]"
    call_id: Any
    name: Any
    arguments: Any
    if isinstance(call, ToolCall):
        call_id, name, arguments = call.id, call.name, call.arguments
    elif isinstance(call, dict):
        function = call.get("function")
        source = function if isinstance(function, dict) else call
        call_id, name, arguments = call.get("id"), source.get("name"), source.get("arguments", {})
    else:
        raise ValueError(f"{where} must be a ToolCall or a dict with 'id', 'name', 'arguments', got {call!r}")
    if not isinstance(call_id, str) or not call_id:
        raise ValueError(f"{where} needs a non-empty string 'id', got {call_id!r}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where} needs a non-empty string 'name', got {name!r}")
    if isinstance(arguments, str):
        try:
            decoded = json.loads(arguments)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where} 'arguments' is a string but not valid JSON: {e}") from None
        arguments = decoded
    if not isinstance(arguments, dict):
        raise ValueError(f"{where} 'arguments' must be a dict (or a JSON object string), got {arguments!r}")
    try:
        text = json.dumps(arguments, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where} 'arguments' is not JSON-serialisable: {e}") from None
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def tool_prompt_messages(prompt: Prompt) -> list[dict[str, Any]]:
    """A prompt that may hold tool turns, as OpenAI wire messages.

    Assistant turns may carry ``tool_calls`` (a list of ``ToolCall`` or
    ``{"id", "name", "arguments"}`` dicts; ``content`` may then be empty or
    missing) and ``tool`` turns need ``tool_call_id`` and ``content``. Every
    tool call must be answered by one ``tool`` turn, after its assistant
    turn and before the next non-tool turn; a ``tool`` turn must answer a
    call. Anything else is a ``ValueError`` naming the message.
    """
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if not isinstance(prompt, Sequence) or isinstance(prompt, (bytes, bytearray)):
        raise TypeError(f"a prompt must be a string or a list of chat messages, got {type(prompt).__name__}")
    out: list[dict[str, Any]] = []
    pending: dict[str, int] = {}  # call id -> the assistant message that made the call
    seen_ids: set[str] = set()
    for i, m in enumerate(prompt):
        if not isinstance(m, dict) or "role" not in m:
            raise ValueError(f"prompt message {i} must be a dict with 'role' and 'content', got {m!r}")
        role = m["role"]
        if role not in _TOOL_ROLES:
            raise ValueError(
                f"prompt message {i} has unknown role {role!r}; expected one of {list(_TOOL_ROLES)}"
            )
        if role != "tool" and pending:
            raise ValueError(
                f"prompt message {i} ({role}) follows unanswered tool calls "
                f"{sorted(pending)} of message {min(pending.values())}; answer each with a 'tool' turn"
            )
        content = m.get("content")
        calls = m.get("tool_calls") if role == "assistant" else None
        if role == "assistant" and calls:
            if content is not None and not isinstance(content, str):
                raise ValueError(f"prompt message {i} content must be a string")
            if not isinstance(calls, (list, tuple)):
                raise ValueError(f"prompt message {i} tool_calls must be a list, got {type(calls).__name__}")
            wire = [_wire_tool_call(i, j, c) for j, c in enumerate(calls)]
            for w in wire:
                if w["id"] in seen_ids:
                    raise ValueError(f"prompt message {i} repeats the tool call id {w['id']!r}")
                seen_ids.add(w["id"])
                pending[w["id"]] = i
            out.append({"role": "assistant", "content": content or None, "tool_calls": wire})
            continue
        if not isinstance(content, str):
            raise ValueError(f"prompt message {i} must have a string 'content', got {content!r}")
        if role == "tool":
            call_id = m.get("tool_call_id")
            if not isinstance(call_id, str) or call_id not in pending:
                raise ValueError(
                    f"prompt message {i} is a 'tool' turn whose tool_call_id {call_id!r} answers no "
                    f"open tool call (open: {sorted(pending)})"
                )
            del pending[call_id]
            out.append({"role": "tool", "tool_call_id": call_id, "content": content})
        else:
            out.append({"role": role, "content": content})
    if pending:
        raise ValueError(
            f"the prompt ends with unanswered tool calls {sorted(pending)}; answer each with a 'tool' turn"
        )
    if not out:
        raise ValueError("a prompt must hold at least one message")
    return out


def _check_tools(tools: Any) -> list[Tool]:
    """The tools of a request: a sequence of tools with distinct names."""
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence):
        raise TypeError(f"tools must be a list of Tool, got {type(tools).__name__}")
    names: set[str] = set()
    for i, t in enumerate(tools):
        if not callable(getattr(t, "openai_schema", None)) or not isinstance(getattr(t, "name", None), str):
            raise TypeError(f"tools[{i}] must be a Tool, got {type(t).__name__}")
        if t.name in names:
            raise ValueError(f"two tools are named {t.name!r}; tool names must be distinct")
        names.add(t.name)
    return list(tools)


def _parse_response(data: Any) -> _Response:
    """Check and extract a chat-completions response; a malformed one raises a retryable error."""
    try:
        if not isinstance(data, dict):
            raise TypeError(f"the body is a JSON {type(data).__name__}, expected an object")
        raw_choices = data.get("choices")
        if not isinstance(raw_choices, list) or not raw_choices:
            raise ValueError("the response has no 'choices'")
        choices = [_parse_choice(c, k) for k, c in enumerate(raw_choices)]
        indices = [c.get("index") for c in raw_choices]
        if all(_is_int(i) for i in indices):
            choices = [c for _, c in sorted(zip(indices, choices), key=lambda t: t[0])]
        usage = data.get("usage")
        prompt_tokens = completion_tokens = None
        if isinstance(usage, dict):
            if _is_int(usage.get("prompt_tokens")):
                prompt_tokens = usage["prompt_tokens"]
            if _is_int(usage.get("completion_tokens")):
                completion_tokens = usage["completion_tokens"]
    except (TypeError, ValueError) as e:
        raise _AttemptError(f"malformed response: {e}", retryable=True, status=200) from None
    return _Response(choices, prompt_tokens, completion_tokens)


def _split_proportionally(total: int, weights: Sequence[int]) -> list[int]:
    """Integer shares of ``total`` proportional to ``weights`` that add up to ``total`` (largest remainder)."""
    if not weights:
        return []
    if sum(weights) <= 0:
        weights = [1] * len(weights)
    wsum = sum(weights)
    exact = [total * w / wsum for w in weights]
    shares = [math.floor(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - shares[i]), i))
    for i in order[: total - sum(shares)]:
        shares[i] += 1
    return shares


def _choice_token_counts(resp: _Response) -> list[int]:
    """Completion tokens per choice, by the rule in the module docstring."""
    exact: list[int] = []
    for ch in resp.choices:
        if ch.token_ids is not None:
            exact.append(len(ch.token_ids))
        elif ch.logprobs is not None:
            exact.append(len(ch.logprobs))
        else:
            break
    else:
        return exact
    if resp.completion_tokens is not None:
        return _split_proportionally(resp.completion_tokens, [len(ch.text) for ch in resp.choices])
    return [len(ch.text.split()) for ch in resp.choices]


def _tokens_kept(tokens: Sequence[str], kept_chars: int) -> int:
    """How many tokens start inside the first ``kept_chars`` characters of their concatenation."""
    n, pos = 0, 0
    for t in tokens:
        if pos >= kept_chars:
            break
        n += 1
        pos += len(t)
    return n


def _check_base_url(base_url: Any) -> str:
    if not isinstance(base_url, str) or not base_url.strip():
        raise ValueError(
            f"base_url must be a non-empty string like 'http://127.0.0.1:8000/v1', got {base_url!r}"
        )
    url = base_url.strip().rstrip("/")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parses the port, which may be out of range or not a number
    except ValueError:  # e.g. an unclosed "[" around an IPv6 host
        raise ValueError(
            f"base_url must be an http(s) URL like 'http://127.0.0.1:8000/v1', got {base_url!r} "
            "(its host or port cannot be read)"
        ) from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"base_url must be an http(s) URL like 'http://127.0.0.1:8000/v1', got {base_url!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"base_url must not carry a query or fragment, got {base_url!r}")
    if parts.path.endswith("/chat/completions"):
        raise ValueError(
            f"base_url {base_url!r} names the endpoint; give the base URL instead, "
            f"e.g. {url[: -len('/chat/completions')]!r}"
        )
    return url


@dataclass(frozen=True)
class _ToolSet:
    """The tools of one generate() call: their schemas as sent, and their names."""

    schemas: list[dict[str, Any]]
    names: list[str]


class OpenAICompatibleLLM:
    """An :class:`~societas.agents.llm.base.LLM` backed by an OpenAI-compatible chat-completions server.

    ``api_key`` defaults to the ``OPENAI_API_KEY`` environment variable when
    it is set; without a key no ``Authorization`` header is sent (local
    servers need none). ``timeout_s`` bounds each attempt as a whole
    (reading the answer included) and ``max_response_bytes`` the size of an
    answer. See the module docstring for the request, usage, retry, timeout
    and concurrency rules. ``stats`` counts what happened; use the
    instance as a context manager, or call :meth:`close`, to release its
    threads and connections. ``generate`` also takes ``tools`` and returns
    the server's native tool calls (see the module docstring).

    ``timeout_s``, ``max_retries`` and ``backoff_s`` (and ``backoff_max_s``)
    set the per-attempt deadline and the retries (OpenEvolve's
    ``llm.timeout``, ``llm.retries`` and ``llm.retry_delay``); through
    :func:`~societas.agents.llm.load_llm` they are keyword arguments:
    ``load_llm("openai:URL#MODEL", timeout_s=120, max_retries=3)``.
    ``context_length`` fixes the model's context length instead of asking
    the server (see "Context length" in the module docstring).
    """

    supports_native_tools = True
    """The server takes ``tools`` and answers with ``message.tool_calls``."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        max_concurrency: int = 8,
        timeout_s: float = 60,
        max_retries: int = 5,
        backoff_s: float = 0.5,
        backoff_max_s: float = 20,
        name: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        context_length: int | None = None,
    ) -> None:
        self.base_url = _check_base_url(base_url)
        context_length = check_context_length(context_length)
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        if not _is_int(max_concurrency) or max_concurrency < 1:
            raise ValueError(f"max_concurrency must be an integer >= 1, got {max_concurrency!r}")
        if (
            not isinstance(timeout_s, (int, float))
            or isinstance(timeout_s, bool)
            or not (0 < timeout_s <= threading.TIMEOUT_MAX)
        ):
            raise ValueError(
                f"timeout_s must be a positive number of seconds (at most {threading.TIMEOUT_MAX:g}), "
                f"got {timeout_s!r}"
            )
        if not _is_int(max_response_bytes) or max_response_bytes < 1:
            raise ValueError(f"max_response_bytes must be an integer >= 1, got {max_response_bytes!r}")
        if not _is_int(max_retries) or max_retries < 0:
            raise ValueError(f"max_retries must be an integer >= 0, got {max_retries!r}")
        for label, value in (("backoff_s", backoff_s), ("backoff_max_s", backoff_max_s)):
            if not isinstance(value, (int, float)) or not (0 <= value < math.inf):
                raise ValueError(f"{label} must be a non-negative finite number of seconds, got {value!r}")
        if extra_body is not None:
            if not isinstance(extra_body, Mapping):
                raise TypeError(f"extra_body must be a mapping, got {type(extra_body).__name__}")
            try:
                json.dumps(dict(extra_body))
            except (TypeError, ValueError) as e:
                raise ValueError(f"extra_body must be JSON-serialisable: {e}") from None
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"name must be a non-empty string or None, got {name!r}")

        self.model = model
        self.max_concurrency = max_concurrency
        self.timeout_s = float(timeout_s)
        self.max_response_bytes = max_response_bytes
        self.max_retries = max_retries
        self.backoff_s = float(backoff_s)
        self.backoff_max_s = float(backoff_max_s)
        self.extra_body: dict[str, Any] = dict(extra_body or {})
        self.name = name if name is not None else f"openai:{self.base_url}#{model}"
        self.endpoint = f"{self.base_url}/chat/completions"

        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._has_key = bool(key)
        # An uncompressed body, so that the size cap bounds what is held in memory.
        headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(self.timeout_s),
            limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency),
        )
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="openai-llm")
        self._rng = random.Random()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._active: set[threading.Event] = set()  # cancel events of running generate() calls
        self._warned_no_logprobs = False
        self._context_length = context_length  # given by the caller
        self._listed_context: int | None = None  # reported by GET /models
        self._learned_context: int | None = None  # read from a context-length error
        self._listing_asked = context_length is not None  # nothing to ask when it is given
        self._listing_lock = threading.Lock()
        self._warned_context: set[tuple[int, int]] = set()  # (requested, context length) already warned about
        self._stats: dict[str, int] = {}
        self.reset_stats()

    @property
    def context_length(self) -> int | None:
        """The most tokens a prompt and its reply may hold together, ``None`` when unknown.

        The constructor's ``context_length``, else what the server's model
        listing reports (asked once, on first use: this property may send one
        ``GET {base_url}/models``), else what a context-length error of the
        server said, else ``None``.
        """
        if self._context_length is not None:
            return self._context_length
        self._ask_listing()
        return self._listed_context if self._listed_context is not None else self._learned_context

    def _ask_listing(self) -> None:
        """Read the context length from ``GET {base_url}/models``, once per instance; failures only leave it unknown."""
        with self._listing_lock:
            if self._listing_asked:
                return
            self._listing_asked = True
            try:
                r = self._client.get(
                    f"{self.base_url}/models", timeout=min(self.timeout_s, _LISTING_TIMEOUT_S)
                )
                data = r.json() if r.status_code == 200 else None
            except (httpx.HTTPError, ValueError) as exc:
                log.debug("%s: no model listing (%s: %s)", self.name, type(exc).__name__, exc)
                return
            self._listed_context = _listed_context_length(data, self.model)
            if self._listed_context is not None:
                log.debug("%s: the server reports a context length of %d", self.name, self._listed_context)

    # ------------------------------------------------------------ health
    def check(self, timeout_s: float = 10.0) -> None:
        """Raise :class:`LLMServerError` at once when the server cannot answer: it is
        unreachable, rejects the key, or lists its models without this one.

        One ``GET {base_url}/models`` (what OpenAI-compatible servers, vLLM
        included, serve); a server without that route (404/405) counts as up.
        Runs that depend on the model call this before they start, so a wrong
        URL fails in seconds instead of as one error per request.
        """
        url = f"{self.base_url}/models"

        def fail(why: str, status: int | None = None, body: str | None = None) -> LLMServerError:
            return LLMServerError(
                f"{self.name}: {why}", url=url, model=self.model, attempts=1, status=status, body=body
            )

        try:
            r = self._client.get(url, timeout=timeout_s)
        except httpx.HTTPError as exc:
            raise fail(
                f"cannot reach the server at {self.base_url} ({type(exc).__name__}: {exc}); "
                "is it running, and is the URL right?"
            ) from exc
        if r.status_code in (404, 405):
            return
        if r.status_code in (401, 403):
            raise fail(
                f"the server refused the API key (HTTP {r.status_code})", r.status_code, _excerpt(r.text)
            )
        if r.status_code >= 400:
            raise fail(f"the server answered HTTP {r.status_code}: {_server_message(r.text)}", r.status_code)
        try:
            data = r.json()
            ids = [str(m.get("id")) for m in data.get("data", []) if isinstance(m, dict)]
        except (ValueError, AttributeError):
            return  # a non-standard listing: the server is up
        with self._listing_lock:  # the listing answers the context-length question too
            if not self._listing_asked:
                self._listing_asked = True
                self._listed_context = _listed_context_length(data, self.model)
        if ids and self.model not in ids:
            raise fail(f"the server serves {', '.join(ids[:10])}, not {self.model!r}", r.status_code)

    # ------------------------------------------------------------ observation
    @property
    def stats(self) -> dict[str, int]:
        """A snapshot of the counters.

        ``generate_calls``, ``prompts``, ``requests`` (HTTP attempts sent),
        ``retries``, ``failures`` (prompts given up on), ``completions``,
        ``prompt_tokens`` and ``completion_tokens`` (as counted in the
        completions' usage).
        """
        with self._lock:
            return dict(self._stats)

    def reset_stats(self) -> None:
        with self._lock:
            self._stats = dict.fromkeys(
                (
                    "generate_calls",
                    "prompts",
                    "requests",
                    "retries",
                    "failures",
                    "completions",
                    "prompt_tokens",
                    "completion_tokens",
                ),
                0,
            )

    def _bump(self, key: str, by: int = 1) -> None:
        with self._lock:
            self._stats[key] += by

    def __repr__(self) -> str:
        extra = f", name={self.name!r}" if self.name != f"openai:{self.base_url}#{self.model}" else ""
        return (
            f"OpenAICompatibleLLM(base_url={self.base_url!r}, model={self.model!r}, "
            f"max_concurrency={self.max_concurrency}, timeout_s={self.timeout_s:g}, "
            f"max_retries={self.max_retries}, api_key={'set' if self._has_key else 'none'}{extra}"
            f"{', closed' if self._closed.is_set() else ''})"
        )

    # -------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Stop retries, wait for requests already on the wire (each bounded by the timeout), free connections."""
        if self._closed.is_set():
            return
        self._closed.set()
        with self._lock:
            active = list(self._active)
        for cancel in active:
            cancel.set()
        # Queued requests still run, but only to see their cancel event and stop at
        # once: futures cancelled by ``shutdown(cancel_futures=True)`` would never wake
        # the ``concurrent.futures.wait`` in ``generate``.
        self._pool.shutdown(wait=True)
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------- generation
    def generate(
        self,
        prompts: Sequence[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        tools: Sequence[Tool] | None = None,
    ) -> list[list[Completion]]:
        """One list of ``params.n`` completions per prompt, in prompt order.

        With ``tools`` (even an empty list) the prompts may hold tool turns
        (:func:`tool_prompt_messages`) and every completion carries
        ``tool_calls``; a non-empty list is sent as ``"tools"``.
        """
        if self._closed.is_set():
            raise RuntimeError(f"{self.name}: generate() called after close()")
        if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
            raise TypeError(
                f"prompts must be a list of prompts (wrap a single prompt in a list), got {type(prompts).__name__}"
            )
        plist = broadcast_params(params, len(prompts))
        toolset: _ToolSet | None = None
        messages: list[list[dict[str, Any]]]
        if tools is None:
            messages = [list(normalize_prompt(p)) for p in prompts]
        else:
            checked = _check_tools(tools)
            toolset = _ToolSet([t.openai_schema() for t in checked], [t.name for t in checked])
            messages = [tool_prompt_messages(p) for p in prompts]
        self._bump("generate_calls")
        self._bump("prompts", len(messages))
        if not messages:
            return []
        context_length = self.context_length  # may ask the server once
        if self._closed.is_set():
            raise RuntimeError(f"{self.name}: closed while generate() was running")

        cancel = threading.Event()
        with self._lock:
            self._active.add(cancel)
        if self._closed.is_set():  # close() ran since the check above and missed this batch
            cancel.set()
        try:
            futures = [
                self._pool.submit(self._complete_prompt, i, m, p, cancel, toolset, context_length)
                for i, (m, p) in enumerate(zip(messages, plist))
            ]
            wait(futures, return_when=FIRST_EXCEPTION)
            failed = [f for f in futures if f.done() and not f.cancelled() and f.exception() is not None]
            if not failed and not any(f.cancelled() for f in futures):
                return [f.result() for f in futures]
            cancel.set()
            for f in futures:
                f.cancel()
            # Let the siblings see the cancel (they stop at their next check), so that none of them
            # logs a retry after the caller has reported the failure; bounded, never a hang.
            wait(futures, timeout=_SIBLING_STOP_S)
            real = [e for f in failed if (e := f.exception()) is not None and not isinstance(e, _Cancelled)]
            if real:
                raise real[0]
            raise RuntimeError(f"{self.name}: closed while generate() was running")
        finally:
            cancel.set()
            with self._lock:
                self._active.discard(cancel)

    def _request_body(
        self,
        messages: list[dict[str, Any]],
        p: SamplingParams,
        n: int,
        seed: int | None,
        toolset: _ToolSet | None = None,
        max_tokens: int | None = None,
    ) -> dict:
        max_tokens = p.max_new_tokens if max_tokens is None else max_tokens
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "n": n,
            "temperature": p.temperature,
            "top_p": p.top_p,
            "max_tokens": max_tokens,
        }
        if toolset is not None and toolset.schemas:
            body["tools"] = toolset.schemas
        if p.stop:
            body["stop"] = list(p.stop[:MAX_STOP_SENT])
        if seed is not None:
            body["seed"] = seed
        if p.logprobs:
            body["logprobs"] = True
        if p.min_new_tokens:
            # vLLM's extension; other servers ignore or reject it
            body["min_tokens"] = min(p.min_new_tokens, max_tokens)
        body.update(self.extra_body)
        return body

    def _complete_prompt(
        self,
        index: int,
        messages: list[dict[str, Any]],
        p: SamplingParams,
        cancel: threading.Event,
        toolset: _ToolSet | None = None,
        context_length: int | None = None,
    ) -> list[Completion]:
        out: list[Completion] = []
        max_tokens = p.max_new_tokens
        if context_length is not None:
            estimate = estimate_prompt_tokens(messages)
            if estimate < context_length:  # else the server says whether (and by how much) it fits
                max_tokens = fit_max_new_tokens(
                    estimate,
                    max_tokens,
                    context_length,
                    model=self.name,
                    warned=self._warned_context,
                    prompt=f"prompt {index}",
                    estimated=True,
                )
        while len(out) < p.n:
            need = p.n - len(out)
            seed = p.seed if (p.seed is None or not out) else p.seed + len(out)
            body = self._request_body(messages, p, need, seed, toolset, max_tokens)
            resp, sent = self._post(body, cancel, index, p.max_new_tokens)
            if sent is not None:  # capped after a context-length error: the rest of the samples too
                max_tokens = sent
            if len(resp.choices) > need:
                log.warning(
                    "%s: server returned %d choices for n=%d; keeping the first %d",
                    self.name,
                    len(resp.choices),
                    need,
                    need,
                )
            elif len(resp.choices) < need:
                log.info(
                    "%s: server returned %d of %d choices (it may ignore 'n'); asking for the rest",
                    self.name,
                    len(resp.choices),
                    need,
                )
            counts = _choice_token_counts(resp)
            if resp.prompt_tokens is not None:
                prompt_tokens = resp.prompt_tokens
            else:
                prompt_tokens = sum(len((m.get("content") or "").split()) for m in messages)
            for k, (ch, n_tokens) in enumerate(zip(resp.choices[:need], counts[:need])):
                completion = self._to_completion(
                    ch, n_tokens, prompt_tokens if k == 0 else 0, p, index, len(out)
                )
                if toolset is not None or ch.tool_calls:
                    calls, errors = _tool_calls(ch.tool_calls or [], toolset.names if toolset else None)
                    completion.tool_calls = calls
                    completion.tool_call_errors = errors or None
                out.append(completion)
        self._bump("completions", len(out))
        self._bump("prompt_tokens", sum(c.usage.prompt_tokens for c in out))
        self._bump("completion_tokens", sum(c.usage.completion_tokens for c in out))
        return out

    def _to_completion(
        self, ch: _Choice, n_tokens: int, prompt_tokens: int, p: SamplingParams, index: int, sample: int
    ) -> Completion:
        text, stopped = truncate_at_stop(ch.text, p.stop)
        finish = "stop" if stopped else ch.finish_reason
        logprobs = ch.logprobs
        token_ids = ch.token_ids
        if stopped and ch.tokens is not None:
            keep = _tokens_kept(ch.tokens, len(text))
            if logprobs is not None:
                logprobs = logprobs[:keep]
            if token_ids is not None and len(token_ids) == len(ch.tokens):
                token_ids = token_ids[:keep]
        if p.logprobs and logprobs is None and not self._warned_no_logprobs:
            self._warned_no_logprobs = True
            log.warning("%s: log-probabilities were requested but the server returned none", self.name)
        return Completion(
            text=text,
            token_ids=list(token_ids) if token_ids is not None else [],
            logprobs=list(logprobs) if (p.logprobs and logprobs is not None) else None,
            finish_reason=finish,
            usage=Usage(prompt_tokens, n_tokens),
            prompt_index=index,
            sample_index=sample,
        )

    # ------------------------------------------------------------------ HTTP
    def _post(
        self, body: dict, cancel: threading.Event, index: int = 0, requested: int | None = None
    ) -> tuple[_Response, int | None]:
        """Send one request with retries; return the parsed response and the ``max_tokens`` it
        was sent with, or raise :class:`LLMServerError`.

        A context-length error of the server (see :func:`parse_context_error`)
        caps ``max_tokens`` and sends the request once more (an attempt beyond
        ``max_retries``); ``requested`` is the caller's ``max_new_tokens``,
        which names the warning.
        """
        attempts = self.max_retries + 1
        refitted = False
        attempt = 0
        while attempt < attempts:
            attempt += 1
            if cancel.is_set():
                raise _Cancelled()
            self._bump("requests")
            try:
                sent = body.get("max_tokens")
                return self._attempt(body), sent if _is_int(sent) else None
            except _AttemptError as e:
                if e.context is not None and not refitted:
                    refit = self._refit(body, e.context, index, requested)
                    if refit is not None:
                        body, refitted = refit, True
                        attempts += 1  # the capped request is one more attempt, not a retry
                        continue
                if not e.retryable:
                    self._bump("failures")
                    raise self._give_up(attempt, e) from None
                if attempt == attempts:
                    self._bump("failures")
                    raise self._give_up(attempt, e) from None
                if cancel.is_set():  # the batch already failed: stop without announcing a retry
                    raise _Cancelled() from None
                delay = self._backoff(attempt, e.retry_after)
                self._bump("retries")
                log.warning(
                    "%s: attempt %d/%d failed (%s); retrying in %.2f s",
                    self.name,
                    attempt,
                    attempts,
                    e.description,
                    delay,
                )
                if cancel.wait(delay):
                    raise _Cancelled() from None
        raise AssertionError("unreachable: the retry loop always returns or raises")

    def _refit(self, body: dict, ctx: ContextOverflow, index: int, requested: int | None) -> dict | None:
        """The request with ``max_tokens`` capped to what the server says fits, or ``None`` when
        its error does not say enough (or capping would change nothing). Raises
        :class:`ContextLengthError` when the prompt alone fills the context."""
        if self._context_length is None and self._listed_context is None:
            self._learned_context = ctx.context_length  # later prompts are estimated against it
        if ctx.prompt_tokens is None:
            return None
        sent = body.get("max_tokens")
        if not isinstance(sent, int) or isinstance(sent, bool):
            return None
        try:
            cap = fit_max_new_tokens(
                ctx.prompt_tokens,
                max(sent, requested or 0),
                ctx.context_length,
                model=self.name,
                warned=self._warned_context,
                prompt=f"prompt {index}",
                source="as the server reports",
            )
        except ValueError:
            self._bump("failures")
            raise
        if cap >= sent:
            return None
        body = dict(body, max_tokens=cap)
        if _is_int(body.get("max_completion_tokens")):
            body["max_completion_tokens"] = min(body["max_completion_tokens"], cap)
        if _is_int(body.get("min_tokens")):
            body["min_tokens"] = min(body["min_tokens"], cap)
        return body

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.backoff_max_s)
        base = min(self.backoff_max_s, self.backoff_s * 2 ** (attempt - 1))
        return base / 2 + self._rng.uniform(0.0, base / 2)

    def _give_up(self, attempts: int, e: _AttemptError) -> LLMServerError:
        how = "" if e.retryable else f" (not retried: {e.no_retry})"
        return LLMServerError(
            f"{self.endpoint} (model {self.model!r}) failed after {attempts} "
            f"attempt{'s' if attempts != 1 else ''}{how}: {e.description}",
            url=self.endpoint,
            model=self.model,
            attempts=attempts,
            status=e.status,
            body=e.body,
            retryable=e.retryable,
        )

    def _attempt(self, body: dict) -> _Response:
        """One HTTP request: the parsed response, or an :class:`_AttemptError` saying what went wrong.

        The exchange runs in a helper thread; the caller waits ``timeout_s``
        for it as a whole and then gives up on it (see the module docstring).
        """
        ex = _Exchange()
        helper = threading.Thread(target=self._exchange, args=(body, ex), name="openai-llm-http", daemon=True)
        helper.start()
        if not ex.done.wait(self.timeout_s):
            ex.abandon()
            raise _AttemptError(
                f"timed out: no complete answer within {self.timeout_s:g} s",
                retryable=True,
            )
        if ex.error is not None:
            raise ex.error
        status, raw = ex.status, ex.raw
        if not 200 <= status < 300:
            text = raw.decode("utf-8", errors="replace")
            client_error = 400 <= status < 500
            if client_error:
                no_retry = f"HTTP {status} is a client error, which the same request would meet again"
            else:
                no_retry = f"HTTP {status} is not a transient server error"
            raise _AttemptError(
                f"HTTP {status}: {_server_message(text)}",
                retryable=status in RETRY_STATUSES,
                status=status,
                body=_excerpt(text),
                retry_after=_retry_after(ex.headers),
                no_retry=no_retry,
                context=parse_context_error(text, body.get("max_tokens")) if client_error else None,
            )
        try:
            data = json.loads(raw)
        except ValueError as e:
            text = _excerpt(raw.decode("utf-8", errors="replace"))
            raise _AttemptError(
                f"malformed JSON in HTTP {status} response ({e}): {text!r}",
                retryable=True,
                status=status,
                body=text,
            ) from None
        return _parse_response(data)

    def _too_large(self, status: int, size: str) -> _AttemptError:
        return _AttemptError(
            f"HTTP {status} response body {size} exceeds max_response_bytes={self.max_response_bytes}",
            retryable=False,
            status=status,
            no_retry="the answer is larger than the client accepts",
        )

    def _exchange(self, body: dict, ex: _Exchange) -> None:
        """Send one request and read its answer into ``ex`` (run in a helper thread, see :meth:`_attempt`).

        At most ``max_response_bytes`` of body (plus one network read) are
        held; a larger body ends the exchange with a non-retryable error.
        """
        cap = self.max_response_bytes
        try:
            with self._client.stream("POST", self.endpoint, json=body, extensions={"trace": ex.trace}) as r:
                ex.watch(r.extensions.get("network_stream"))
                declared = r.headers.get("content-length", "").strip()
                if declared.isascii() and declared.isdigit() and int(declared) > cap:
                    raise self._too_large(r.status_code, f"of {int(declared)} bytes (Content-Length)")
                chunks: list[bytes] = []
                size = 0
                for chunk in r.iter_bytes():
                    if ex.abandoned:
                        return
                    size += len(chunk)
                    if size > cap:
                        raise self._too_large(r.status_code, f"of more than {cap} bytes")
                    chunks.append(chunk)
                ex.raw = b"".join(chunks)
                ex.status = r.status_code
                ex.headers = r.headers
        except _AttemptError as e:
            ex.error = e
        except httpx.TimeoutException as e:
            ex.error = _AttemptError(
                f"{type(e).__name__}: no answer within {self.timeout_s:g} s", retryable=True
            )
        except httpx.UnsupportedProtocol as e:
            ex.error = _AttemptError(f"{type(e).__name__}: {e}", retryable=False)
        except httpx.RequestError as e:
            ex.error = _AttemptError(f"{type(e).__name__}: {e or 'connection failed'}", retryable=True)
        except BaseException as e:  # handed to the caller's thread, which raises it
            ex.error = e
        finally:
            ex.done.set()
