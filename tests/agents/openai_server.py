"""A tiny OpenAI-compatible chat-completions server on localhost, for tests.

Tests of anything that speaks HTTP to a model server (the OpenAI-compatible
backend, and later the embedded model served over HTTP) need a *real* server,
not a mock object: real sockets, real keep-alive connections, real timeouts.
:class:`OpenAITestServer` is that server. It runs the standard library's
``ThreadingHTTPServer`` in a background thread on ``127.0.0.1`` (a free port
chosen by the OS) and answers ``POST {prefix}/chat/completions`` from a Python
callable, the *responder*::

    def responder(messages: list[dict], body: dict) -> str: ...
    # or, to tell the samples of one request apart:
    def responder(messages: list[dict], body: dict, sample_index: int) -> str: ...

The responder is called once per requested choice (``body["n"]``, default 1)
and returns the reply text, or a :class:`Reply` to also choose the finish
reason, the tokens or their log-probabilities. The server then behaves like a
real one: it cuts the reply at ``max_tokens`` (finish reason ``"length"``) and,
unless ``apply_stop=False``, at the first stop string (``"stop"``); it reports
``usage``; it returns ``choices[i].logprobs.content`` when the request asks for
``logprobs`` and vLLM-style ``choices[i].token_ids`` when it asks for
``return_token_ids``. Tokens are "fake": each word with its leading whitespace
(:func:`fake_tokenize`), with deterministic ids and log-probabilities
(:func:`fake_token_id`, :func:`fake_logprob`) so that tests can recompute them.

Faults are scripted as a queue: each incoming chat request first takes the
next fault from the queue, if any, and only when the queue is empty gets a
normal answer. A fault is a tuple:

``("status", code)`` / ``("status", code, headers)`` / ``("status", code, headers, body)``
    answer with HTTP ``code``, extra ``headers`` (e.g. ``{"Retry-After": "0"}``)
    and ``body`` (a string, or an object sent as JSON; default: an
    OpenAI-style error object naming the injected status).
``("drop",)``
    read the request, then close the connection without answering.
``("hang", seconds)``
    hold the request open for ``seconds`` without answering (to make clients
    time out), then close the connection.
``("malformed",)``
    answer 200 with a body that is not valid JSON.
``("json", obj)``
    answer 200 with ``obj`` verbatim as JSON (e.g. a response without ``choices``).
``("large", nbytes)`` / ``("large", nbytes, declare_length)``
    answer 200 with a valid chat completion whose body is ``nbytes`` long
    (the reply text is filler), written in 64 KiB pieces made on the fly so
    that the server itself holds little memory. With ``declare_length``
    false (the default is true) no ``Content-Length`` is sent and the body
    ends when the connection closes. Writing stops when the client goes away.
``("trickle", seconds_per_byte)`` / ``("trickle", seconds_per_byte, "headers")``
    answer 200 with a valid chat completion (reply text ``"slow"``), but send
    the body (or, with ``"headers"``, the status line and headers as well)
    one byte every ``seconds_per_byte``; it stops when the client goes away
    or the server stops.

A context length, like vLLM's ``max_model_len``, is played with
``context_length=N``: ``GET {prefix}/models`` lists it as the model's
``max_model_len`` (unless ``list_context_length=False``), and a chat request
whose prompt tokens (the fake tokens of its messages' texts) plus
``max_tokens`` exceed it is answered HTTP 400 with vLLM's message, in the
words of ``context_error``: ``"vllm"`` (before 0.10: "This model's maximum
context length is N tokens. However, you requested T tokens (P in the
messages, Q in the completion). ..."), ``"vllm-new"`` (0.10 and later:
"'max_tokens' or 'max_completion_tokens' is too large: Q. This model's
maximum context length is N tokens and your request has P input tokens (Q >
N - P).", or "... However, your request has P input tokens. ..." when the
prompt alone is too long) or ``"vague"`` ("maximum context length exceeded",
no numbers).

Every chat request is recorded (``.requests``, ``.headers``) whatever
happens to it, as is the path of every ``GET`` (``.gets``), and the server
counts requests in flight (``.max_in_flight``) so that tests can check a
client's concurrency limit (with ``gather``, each chat request is held until
that many are in flight at once, for ``gather_timeout_s`` at most, so a
client that sends them together is seen to, however slowly a loaded machine
starts its threads), and response bytes
written to sockets (``.bytes_sent``, headers excluded) so that tests can check
how much of an answer a client read before it gave up.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
import socket
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

log = logging.getLogger(__name__)

__all__ = [
    "Fault",
    "OpenAITestServer",
    "Reply",
    "Responder",
    "fake_logprob",
    "fake_token_id",
    "fake_tokenize",
]

_TOKEN_RE = re.compile(r"\s*\S+|\s+")


def fake_tokenize(text: str) -> list[str]:
    """Split ``text`` into "tokens": each word together with the whitespace before it.

    The pieces concatenate back to ``text`` exactly, which is what lets the
    server cut a reply at ``max_tokens`` and report per-token log-probabilities.
    """
    return _TOKEN_RE.findall(text)


def fake_token_id(token: str) -> int:
    """A deterministic id for a fake token (CRC32 of its UTF-8 bytes, modulo 50 000)."""
    return zlib.crc32(token.encode("utf-8")) % 50_000


def fake_logprob(token: str) -> float:
    """A deterministic log-probability in ``[-1.0, -0.001]`` for a fake token."""
    return -((zlib.crc32(token.encode("utf-8")) % 1000) + 1) / 1000.0


@dataclass
class Reply:
    """A responder's answer when plain text is not enough.

    ``tokens`` must concatenate to ``text`` (default: :func:`fake_tokenize`);
    ``logprobs`` holds one value per token (default: :func:`fake_logprob`).
    ``finish_reason`` overrides the one the server would report.
    """

    text: str
    finish_reason: str | None = None
    tokens: list[str] | None = None
    logprobs: list[float] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError(f"Reply.text must be a string, got {type(self.text).__name__}")
        if self.tokens is not None and "".join(self.tokens) != self.text:
            raise ValueError("Reply.tokens must concatenate to Reply.text")
        if self.logprobs is not None:
            n_tok = len(self.tokens if self.tokens is not None else fake_tokenize(self.text))
            if len(self.logprobs) != n_tok:
                raise ValueError(f"Reply.logprobs has {len(self.logprobs)} values for {n_tok} tokens")


Responder = Callable[..., str | Reply]
"""``responder(messages, body)`` or ``responder(messages, body, sample_index)`` -> text or :class:`Reply`."""

Fault = tuple
"""One scripted per-request behaviour; see the module docstring for the forms."""

_FAULT_ARITY = {
    "status": (2, 4),
    "drop": (1, 1),
    "hang": (2, 2),
    "malformed": (1, 1),
    "json": (2, 2),
    "large": (2, 3),
    "trickle": (2, 3),
}
_CHUNK = 64 * 1024
_CONTEXT_ERRORS = ("vllm", "vllm-new", "vague")


def _check_fault(fault: Any) -> tuple:
    """Validate one fault spec, naming what is wrong with it."""
    if not isinstance(fault, tuple) or not fault or not isinstance(fault[0], str):
        raise ValueError(f"a fault must be a tuple starting with its kind, got {fault!r}")
    kind = fault[0]
    if kind not in _FAULT_ARITY:
        raise ValueError(f"unknown fault kind {kind!r} in {fault!r}; expected one of {sorted(_FAULT_ARITY)}")
    lo, hi = _FAULT_ARITY[kind]
    if not lo <= len(fault) <= hi:
        raise ValueError(f"fault {fault!r} must have {lo}..{hi} elements")
    if kind == "status":
        if not isinstance(fault[1], int) or not 100 <= fault[1] <= 599:
            raise ValueError(f"fault {fault!r}: the status must be an HTTP status code")
        if len(fault) >= 3 and fault[2] is not None and not isinstance(fault[2], dict):
            raise ValueError(f"fault {fault!r}: headers must be a dict")
    if kind == "hang" and (not isinstance(fault[1], (int, float)) or fault[1] < 0):
        raise ValueError(f"fault {fault!r}: the hang time must be a non-negative number of seconds")
    if kind == "large" and (not isinstance(fault[1], int) or fault[1] < len(_large_prefix()) + 8):
        raise ValueError(
            f"fault {fault!r}: the size must be an integer of at least {len(_large_prefix()) + 8}"
        )
    if kind == "trickle":
        if not isinstance(fault[1], (int, float)) or fault[1] <= 0:
            raise ValueError(f"fault {fault!r}: the time per byte must be a positive number of seconds")
        if len(fault) == 3 and fault[2] not in ("body", "headers"):
            raise ValueError(f"fault {fault!r}: what to trickle must be 'body' or 'headers'")
    return fault


def _large_prefix() -> bytes:
    return b'{"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop", ' + (
        b'"message": {"role": "assistant", "content": "'
    )


_LARGE_SUFFIX = b'"}}]}'


def _wants_sample_index(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` accepts a third positional argument (the sample index)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Many clients connect at once in concurrency tests; the default backlog of
    # 5 would make the kernel drop SYNs and stall connects by a whole second.
    request_queue_size = 128
    owner: OpenAITestServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do
    server_version = "societas-openai-test/1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("openai test server: " + format, *args)

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._track(self.connection, add=False)

    def do_GET(self) -> None:
        self.server.owner._handle_get(self)

    def do_POST(self) -> None:
        self.server.owner._handle_post(self)


def _error_body(message: str, code: int | str | None = None, type_: str = "invalid_request_error") -> dict:
    return {"error": {"message": message, "type": type_, "code": code}}


class OpenAITestServer:
    """An OpenAI-compatible chat-completions server on ``127.0.0.1``, answering from ``responder``.

    Use it as a context manager (or call :meth:`start` / :meth:`stop`)::

        with OpenAITestServer(lambda msgs, body: "hi", faults=[("status", 503)]) as srv:
            llm = OpenAICompatibleLLM(srv.url, "test-model")

    ``delay_s`` delays every chat request (faulty or not) before it is
    answered, like a slow model. ``max_choices`` caps the choices of one
    response, to play a server that ignores ``n``. ``api_key``, when given,
    makes the server answer 401 to requests (chat and ``GET``) without
    ``Authorization: Bearer <api_key>``. ``model`` is the id listed by ``GET {prefix}/models``; chat
    requests for any model are answered. ``context_length``,
    ``list_context_length`` and ``context_error``: see the module docstring.
    """

    def __init__(
        self,
        responder: Responder,
        *,
        faults: Iterable[Fault] | None = None,
        delay_s: float = 0.0,
        apply_stop: bool = True,
        include_usage: bool = True,
        max_choices: int | None = None,
        api_key: str | None = None,
        model: str = "test-model",
        prefix: str = "/v1",
        context_length: int | None = None,
        list_context_length: bool = True,
        context_error: str = "vllm",
        gather: int | None = None,
        gather_timeout_s: float = 10.0,
    ) -> None:
        if not callable(responder):
            raise TypeError(f"responder must be callable, got {type(responder).__name__}")
        if delay_s < 0:
            raise ValueError(f"delay_s must be >= 0, got {delay_s}")
        if max_choices is not None and max_choices < 1:
            raise ValueError(f"max_choices must be >= 1 or None, got {max_choices}")
        if prefix and not prefix.startswith("/"):
            raise ValueError(f"prefix must start with '/', got {prefix!r}")
        if context_length is not None and context_length < 1:
            raise ValueError(f"context_length must be >= 1 or None, got {context_length}")
        if gather is not None and gather < 1:
            raise ValueError(f"gather must be >= 1 or None, got {gather}")
        if gather_timeout_s <= 0:
            raise ValueError(f"gather_timeout_s must be > 0, got {gather_timeout_s}")
        if context_error not in _CONTEXT_ERRORS:
            raise ValueError(f"context_error must be one of {_CONTEXT_ERRORS}, got {context_error!r}")
        self.responder = responder
        self.delay_s = float(delay_s)
        self.apply_stop = apply_stop
        self.include_usage = include_usage
        self.max_choices = max_choices
        self.api_key = api_key
        self.model = model
        self.prefix = prefix.rstrip("/")
        self.context_length = context_length
        self.list_context_length = list_context_length
        self.context_error = context_error
        self.gather = gather
        self.gather_timeout_s = float(gather_timeout_s)
        self._pass_index = _wants_sample_index(responder)
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)  # notified as each chat request comes in
        self._faults: deque[tuple] = deque(_check_fault(f) for f in (faults or ()))
        self._requests: list[dict] = []
        self._headers: list[dict[str, str]] = []
        self._gets: list[str] = []
        self._faults_served: list[tuple] = []
        self._in_flight = 0
        self._max_in_flight = 0
        self._bytes_sent = 0
        self._ids = 0
        self._conns: set[socket.socket] = set()
        self._stop = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> OpenAITestServer:
        """Bind a free port on 127.0.0.1 and serve in a background thread."""
        if self._httpd is not None:
            raise RuntimeError("OpenAITestServer is already running")
        self._stop.clear()
        httpd = _Server(("127.0.0.1", 0), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="openai-test-server", daemon=True
        )
        self._thread.start()
        log.debug("openai test server listening on %s", self.url)
        return self

    def stop(self) -> None:
        """Stop serving, wake hanging requests and close every open connection."""
        httpd = self._httpd
        if httpd is None:
            return
        self._stop.set()
        with self._arrived:  # requests held for ``gather`` stop waiting
            self._arrived.notify_all()
        httpd.shutdown()
        httpd.server_close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:  # idle keep-alive connections would otherwise linger
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------- observation
    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("OpenAITestServer is not running; use it as a context manager or call start()")
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """The base URL an OpenAI client takes, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    @property
    def requests(self) -> list[dict]:
        """The JSON bodies of all chat requests received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def gets(self) -> list[str]:
        """The paths of all ``GET`` requests received so far (the model listing), in arrival order."""
        with self._lock:
            return list(self._gets)

    @property
    def headers(self) -> list[dict[str, str]]:
        """The headers of all chat requests received so far (names lower-cased)."""
        with self._lock:
            return [dict(h) for h in self._headers]

    @property
    def faults_served(self) -> list[tuple]:
        """The faults consumed so far, in order."""
        with self._lock:
            return list(self._faults_served)

    @property
    def faults_pending(self) -> int:
        with self._lock:
            return len(self._faults)

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    @property
    def max_in_flight(self) -> int:
        """The largest number of chat requests that were being handled at the same time."""
        with self._lock:
            return self._max_in_flight

    @property
    def bytes_sent(self) -> int:
        """Response body bytes written to client sockets so far (all requests; the kernel may still hold some)."""
        with self._lock:
            return self._bytes_sent

    def add_faults(self, *faults: Fault) -> None:
        """Append faults to the queue (served before any normal answer)."""
        checked = [_check_fault(f) for f in faults]
        with self._lock:
            self._faults.extend(checked)

    def reset(self) -> None:
        """Forget recorded requests, pending faults and the in-flight maximum."""
        with self._lock:
            self._requests.clear()
            self._headers.clear()
            self._gets.clear()
            self._faults.clear()
            self._faults_served.clear()
            self._max_in_flight = self._in_flight
            self._bytes_sent = 0

    # ---------------------------------------------------------------- handling
    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)

    def _handle_get(self, h: _Handler) -> None:
        path = h.path.split("?", 1)[0].rstrip("/")
        with self._lock:
            self._gets.append(path)
        if self.api_key is not None and h.headers.get("Authorization") != f"Bearer {self.api_key}":
            self._send_json(h, 401, _error_body("Incorrect API key provided", "invalid_api_key"))
        elif path == f"{self.prefix}/models":
            entry: dict[str, Any] = {"id": self.model, "object": "model", "owned_by": "societas-test"}
            if self.context_length is not None and self.list_context_length:
                entry["max_model_len"] = self.context_length
            self._send_json(h, 200, {"object": "list", "data": [entry]})
        else:
            self._send_json(h, 404, _error_body(f"no route GET {path}", 404))

    def _handle_post(self, h: _Handler) -> None:
        path = h.path.split("?", 1)[0].rstrip("/")
        try:
            length = int(h.headers.get("Content-Length", "0"))
        except ValueError:
            self._send_json(h, 400, _error_body("bad Content-Length header", 400))
            return
        raw = h.rfile.read(length) if length > 0 else b""
        if path != f"{self.prefix}/chat/completions":
            self._send_json(h, 404, _error_body(f"no route POST {path}", 404))
            return
        try:
            body = json.loads(raw.decode("utf-8"))
            if not isinstance(body, dict):
                raise TypeError("the request body must be a JSON object")
        except (TypeError, ValueError) as e:
            self._send_json(h, 400, _error_body(f"invalid JSON request body: {e}", 400))
            return

        with self._lock:
            self._requests.append(body)
            self._headers.append({k.lower(): v for k, v in h.headers.items()})
            fault = self._faults.popleft() if self._faults else None
            if fault is not None:
                self._faults_served.append(fault)
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            if self.gather is not None:
                self._arrived.notify_all()
                self._arrived.wait_for(
                    lambda: self._in_flight >= (self.gather or 0) or self._stop.is_set(),
                    timeout=self.gather_timeout_s,
                )
        try:
            if self.delay_s and self._stop.wait(self.delay_s):
                h.close_connection = True
                return
            if fault is not None:
                self._serve_fault(h, fault)
                return
            if self.api_key is not None and h.headers.get("Authorization") != f"Bearer {self.api_key}":
                self._send_json(h, 401, _error_body("Incorrect API key provided", "invalid_api_key"))
                return
            try:
                status, data = self._answer(body)
            except Exception as e:  # a responder bug becomes a 500, as on a real server
                log.exception("openai test server: responder failed")
                status, data = (
                    500,
                    _error_body(f"responder failed: {type(e).__name__}: {e}", 500, "server_error"),
                )
            self._send_json(h, status, data)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _serve_fault(self, h: _Handler, fault: tuple) -> None:
        kind = fault[0]
        if kind == "status":
            code = fault[1]
            headers = fault[2] if len(fault) >= 3 and fault[2] else {}
            body = (
                fault[3]
                if len(fault) >= 4
                else _error_body(f"injected fault: HTTP {code}", code, "server_error")
            )
            if isinstance(body, (bytes, str)):
                payload = body.encode("utf-8") if isinstance(body, str) else body
                self._send_bytes(h, code, payload, "text/plain; charset=utf-8", headers)
            else:
                self._send_json(h, code, body, headers)
        elif kind == "drop":
            h.close_connection = True
        elif kind == "hang":
            self._stop.wait(float(fault[1]))
            h.close_connection = True
        elif kind == "malformed":
            self._send_bytes(
                h, 200, b'{"id": "chatcmpl-broken", "choices": [{"index": 0, "mess', "application/json"
            )
        elif kind == "json":
            self._send_json(h, 200, fault[1])
        elif kind == "large":
            self._send_large(h, fault[1], fault[2] if len(fault) == 3 else True)
        elif kind == "trickle":
            self._send_trickle(h, float(fault[1]), fault[2] if len(fault) == 3 else "body")

    def _count_sent(self, n: int) -> None:
        with self._lock:
            self._bytes_sent += n

    def _send_large(self, h: _Handler, nbytes: int, declare_length: bool) -> None:
        prefix = _large_prefix()
        filler = b"x" * _CHUNK
        h.close_connection = True
        try:
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            if declare_length:
                h.send_header("Content-Length", str(nbytes))
            h.send_header("Connection", "close")
            h.end_headers()
            h.wfile.write(prefix)
            self._count_sent(len(prefix))
            left = nbytes - len(prefix) - len(_LARGE_SUFFIX)
            while left > 0 and not self._stop.is_set():
                piece = filler if left >= _CHUNK else filler[:left]
                h.wfile.write(piece)
                self._count_sent(len(piece))
                left -= len(piece)
            h.wfile.write(_LARGE_SUFFIX)
            self._count_sent(len(_LARGE_SUFFIX))
        except OSError:  # the client gave up on the answer
            pass

    def _send_trickle(self, h: _Handler, every_s: float, what: str) -> None:
        body = json.dumps(
            {
                "object": "chat.completion",
                "choices": [
                    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "slow"}}
                ],
            }
        ).encode("utf-8")
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode("ascii")
        h.close_connection = True
        try:
            if what == "headers":
                slow, fast = head + body, b""
            else:
                slow, fast = body, head
            if fast:
                h.wfile.write(fast)
            for k in range(len(slow)):
                h.wfile.write(slow[k : k + 1])
                if what == "body" or k >= len(head):
                    self._count_sent(1)
                if self._stop.wait(every_s):
                    return
        except OSError:  # the client gave up on the answer
            pass

    def _answer(self, body: dict) -> tuple[int, dict]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return 400, _error_body("'messages' must be a non-empty list", 400)
        n = body.get("n", 1)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            return 400, _error_body(f"'n' must be a positive integer, got {n!r}", 400)
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            return 400, _error_body(f"'max_tokens' must be a positive integer, got {max_tokens!r}", 400)
        prompt_tokens = sum(
            len(fake_tokenize(m["content"]))
            for m in messages
            if isinstance(m, dict) and isinstance(m.get("content"), str)
        )
        if self.context_length is not None and prompt_tokens + (max_tokens or 1) > self.context_length:
            return 400, _error_body(self._context_message(prompt_tokens, max_tokens), 400, "BadRequestError")
        stop = body.get("stop") or []
        if isinstance(stop, str):
            stop = [stop]
        n_choices = min(n, self.max_choices) if self.max_choices else n

        choices = []
        completion_tokens = 0
        for s in range(n_choices):
            out = self.responder(messages, body, s) if self._pass_index else self.responder(messages, body)
            reply = out if isinstance(out, Reply) else Reply(out)
            text, tokens, logprobs, finish = self._shape(reply, max_tokens, stop)
            completion_tokens += len(tokens)
            choice: dict[str, Any] = {
                "index": s,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish,
                "logprobs": None,
            }
            if body.get("logprobs"):
                choice["logprobs"] = {
                    "content": [
                        {"token": t, "logprob": lp, "bytes": list(t.encode("utf-8")), "top_logprobs": []}
                        for t, lp in zip(tokens, logprobs)
                    ]
                }
            if body.get("return_token_ids"):
                choice["token_ids"] = [fake_token_id(t) for t in tokens]
            choices.append(choice)

        with self._lock:
            self._ids += 1
            rid = self._ids
        data: dict[str, Any] = {
            "id": f"chatcmpl-test-{rid}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": choices,
        }
        if self.include_usage:
            data["usage"] = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            }
        return 200, data

    def _context_message(self, prompt: int, max_tokens: int | None) -> str:
        """vLLM's words for a request that does not fit ``context_length`` (see the module docstring)."""
        n, asked = self.context_length, max_tokens or 0
        if self.context_error == "vague":
            return "maximum context length exceeded; please shorten your request"
        if self.context_error == "vllm-new" and (prompt >= (n or 0) or max_tokens is None):
            return (
                f"This model's maximum context length is {n} tokens. However, your request has {prompt} "
                "input tokens. Please reduce the length of the input messages."
            )
        if self.context_error == "vllm-new":
            return (
                f"'max_tokens' or 'max_completion_tokens' is too large: {asked}. This model's maximum "
                f"context length is {n} tokens and your request has {prompt} input tokens "
                f"({asked} > {n} - {prompt})."
            )
        return (
            f"This model's maximum context length is {n} tokens. However, you requested {prompt + asked} "
            f"tokens ({prompt} in the messages, {asked} in the completion). Please reduce the length of "
            "the messages or completion."
        )

    def _shape(
        self, reply: Reply, max_tokens: int | None, stop: Sequence[str]
    ) -> tuple[str, list[str], list[float], str]:
        """Cut a reply as a generating server would: at ``max_tokens``, then at the first stop string."""
        tokens = list(reply.tokens) if reply.tokens is not None else fake_tokenize(reply.text)
        logprobs = list(reply.logprobs) if reply.logprobs is not None else [fake_logprob(t) for t in tokens]
        finish = "stop"
        if max_tokens is not None and len(tokens) > max_tokens:
            tokens, logprobs, finish = tokens[:max_tokens], logprobs[:max_tokens], "length"
        text = "".join(tokens)
        if self.apply_stop and stop:
            hits = [i for i in (text.find(s) for s in stop if s) if i >= 0]
            if hits:
                cut = min(hits)
                text = text[:cut]
                if reply.tokens is None:
                    tokens = fake_tokenize(text)
                    logprobs = [fake_logprob(t) for t in tokens]
                else:
                    keep, pos = 0, 0
                    for t in tokens:  # keep the tokens that start inside the kept text
                        if pos >= cut:
                            break
                        keep += 1
                        pos += len(t)
                    tokens, logprobs = tokens[:keep], logprobs[:keep]
                finish = "stop"
        if reply.finish_reason is not None:
            finish = reply.finish_reason
        return text, tokens, logprobs, finish

    # ------------------------------------------------------------------ output
    @staticmethod
    def _send_json(h: _Handler, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        OpenAITestServer._send_bytes(h, status, json.dumps(data).encode("utf-8"), "application/json", headers)

    @staticmethod
    def _send_bytes(
        h: _Handler, status: int, payload: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        try:
            h.send_response(status)
            h.send_header("Content-Type", content_type)
            h.send_header("Content-Length", str(len(payload)))
            for k, v in (headers or {}).items():
                h.send_header(k, str(v))
            h.end_headers()
            h.wfile.write(payload)
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (timed out) before the answer; nothing to do.
            h.close_connection = True
