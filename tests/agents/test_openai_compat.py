"""OpenAICompatibleLLM against a real HTTP server on localhost (tests/agents/openai_server.py)."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import threading
import time
import tracemalloc

import pytest

from societas.agents.llm.base import LLM, SamplingParams
from societas.agents.llm.openai_compat import DEFAULT_MAX_RESPONSE_BYTES, LLMServerError, OpenAICompatibleLLM
from tests.agents.openai_server import OpenAITestServer, Reply, fake_logprob, fake_token_id, fake_tokenize

FAST = {"backoff_s": 0.01, "backoff_max_s": 0.05}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy may intercept 127.0.0.1, and no API key may leak in from the environment."""
    for var in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "OPENAI_API_KEY",
    ):
        monkeypatch.delenv(var, raising=False)


def echo(messages: list[dict], body: dict) -> str:
    return "echo: " + messages[-1]["content"]


def n_tok(text: str) -> int:
    return len(fake_tokenize(text))


# --------------------------------------------------------------------- basics
def test_plain_generation_in_order_with_usage_and_request_fields() -> None:
    prompts = [f"question number {i}" for i in range(5)]
    params = SamplingParams(temperature=0.3, top_p=0.9, max_new_tokens=50, stop=["\n\n"], seed=7)
    with OpenAITestServer(echo) as srv, OpenAICompatibleLLM(srv.url, "tiny-model", **FAST) as llm:
        assert isinstance(llm, LLM)
        out = llm.generate(prompts, params)
        bodies = sorted(srv.requests, key=lambda b: b["messages"][0]["content"])
        stats = llm.stats

    assert [len(row) for row in out] == [1] * 5
    for i, row in enumerate(out):
        c = row[0]
        assert c.text == f"echo: question number {i}"
        assert (c.prompt_index, c.sample_index) == (i, 0)
        assert c.finish_reason == "stop"
        assert c.usage.prompt_tokens == n_tok(prompts[i]) == 3
        assert c.usage.completion_tokens == n_tok(c.text) == 4
        assert c.logprobs is None and c.token_ids == []

    assert len(bodies) == 5
    for i, b in enumerate(bodies):
        assert b["model"] == "tiny-model"
        assert b["messages"] == [{"role": "user", "content": f"question number {i}"}]
        assert b["temperature"] == 0.3 and b["top_p"] == 0.9
        assert b["max_tokens"] == 50 and b["stop"] == ["\n\n"]
        assert b["n"] == 1 and b["seed"] == 7
        assert "logprobs" not in b
    assert stats["requests"] == 5 and stats["retries"] == 0 and stats["failures"] == 0
    assert stats["completions"] == 5 and stats["prompt_tokens"] == 15 and stats["completion_tokens"] == 20


def test_chat_messages_per_prompt_params_and_length_finish() -> None:
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "one two three four"}]
    with OpenAITestServer(echo) as srv, OpenAICompatibleLLM(srv.url + "/", "m", **FAST) as llm:
        out = llm.generate(
            [chat, "short"],
            [SamplingParams(max_new_tokens=2, temperature=0.0), SamplingParams(max_new_tokens=10)],
        )
        by_first = {b["messages"][0]["content"]: b for b in srv.requests}
    assert out[0][0].text == "echo: one" and out[0][0].finish_reason == "length"
    assert out[0][0].usage.prompt_tokens == 2 + 4
    assert out[1][0].text == "echo: short" and out[1][0].finish_reason == "stop"
    assert by_first["be brief"]["messages"] == chat
    assert by_first["be brief"]["max_tokens"] == 2 and by_first["be brief"]["temperature"] == 0.0
    assert (
        by_first["short"]["max_tokens"] == 10
        and "seed" not in by_first["short"]
        and "stop" not in by_first["short"]
    )


def test_n_samples_per_prompt() -> None:
    def responder(messages: list[dict], body: dict, sample_index: int) -> str:
        return f"{messages[-1]['content']} sample {sample_index}"

    with OpenAITestServer(responder) as srv, OpenAICompatibleLLM(srv.url, "m", **FAST) as llm:
        out = llm.generate(["a", "b"], SamplingParams(n=3))
        assert len(srv.requests) == 2 and all(b["n"] == 3 for b in srv.requests)
    for i, p in enumerate("ab"):
        assert [c.sample_index for c in out[i]] == [0, 1, 2]
        assert [c.prompt_index for c in out[i]] == [i, i, i]
        assert [c.text for c in out[i]] == [f"{p} sample {s}" for s in range(3)]
        # the prompt is counted once, on the first completion of the response
        assert [c.usage.prompt_tokens for c in out[i]] == [1, 0, 0]
        assert [c.usage.completion_tokens for c in out[i]] == [3, 3, 3]


def test_server_ignoring_n_is_topped_up_with_shifted_seeds() -> None:
    def responder(messages: list[dict], body: dict) -> str:
        return f"seed {body.get('seed')}"

    with OpenAITestServer(responder, max_choices=1) as srv, OpenAICompatibleLLM(srv.url, "m", **FAST) as llm:
        out = llm.generate(["x"], SamplingParams(n=3, seed=10))
        sent = [(b["n"], b["seed"]) for b in srv.requests]
    assert sent == [(3, 10), (2, 11), (1, 12)]
    assert [c.text for c in out[0]] == ["seed 10", "seed 11", "seed 12"]
    assert [c.sample_index for c in out[0]] == [0, 1, 2]
    # each response's prompt tokens go to the first completion taken from it
    assert [c.usage.prompt_tokens for c in out[0]] == [1, 1, 1]


def test_logprobs_and_vllm_token_ids() -> None:
    reply = "the quick brown fox"
    with (
        OpenAITestServer(lambda m, b: reply) as srv,
        OpenAICompatibleLLM(srv.url, "m", extra_body={"return_token_ids": True}, **FAST) as llm,
    ):
        c = llm.generate(["hi"], SamplingParams(logprobs=True))[0][0]
        body = srv.requests[0]
    toks = fake_tokenize(reply)
    assert body["logprobs"] is True and body["return_token_ids"] is True
    assert c.logprobs == pytest.approx([fake_logprob(t) for t in toks])
    assert c.token_ids == [fake_token_id(t) for t in toks]
    assert c.usage.completion_tokens == len(toks) == 4


def test_logprobs_not_requested_are_not_returned() -> None:
    with OpenAITestServer(echo) as srv, OpenAICompatibleLLM(srv.url, "m", **FAST) as llm:
        c = llm.generate(["hi"], SamplingParams(logprobs=False))[0][0]
    assert c.logprobs is None


def test_stop_strings_are_applied_client_side() -> None:
    reply = "alpha beta STOP gamma delta"
    stops = ["<a>", "<b>", "<c>", "<d>", "STOP"]  # the fifth is never sent (OpenAI caps stop at 4)
    with (
        OpenAITestServer(lambda m, b: reply, apply_stop=False) as srv,
        OpenAICompatibleLLM(srv.url, "m", **FAST) as llm,
    ):
        c = llm.generate(["go"], SamplingParams(stop=stops, logprobs=True))[0][0]
        body = srv.requests[0]
    assert body["stop"] == stops[:4]
    assert c.text == "alpha beta "
    assert c.finish_reason == "stop"
    # tokens that start inside the kept text stay: " STOP" contributes its leading space
    assert c.logprobs == pytest.approx([fake_logprob(t) for t in ("alpha", " beta", " STOP")])
    assert c.usage.completion_tokens == 5  # what the server generated, before the client-side cut


def test_length_finish_reason_kept_and_other_reasons_pass_through() -> None:
    def responder(messages: list[dict], body: dict) -> Reply:
        if messages[-1]["content"] == "filter":
            return Reply("partial", finish_reason="content_filter")
        return Reply("a b c d e f")

    with OpenAITestServer(responder) as srv, OpenAICompatibleLLM(srv.url, "m", **FAST) as llm:
        out = llm.generate(["filter", "long"], SamplingParams(max_new_tokens=3))
    assert out[0][0].finish_reason == "content_filter" and out[0][0].text == "partial"
    assert out[1][0].finish_reason == "length" and out[1][0].text == "a b c"


def test_usage_split_when_server_gives_no_per_choice_counts() -> None:
    texts = ["x" * 30, "y" * 10]  # usage says 9 completion tokens for both together
    with OpenAITestServer(echo) as srv:
        # A scripted response: choices out of order, no logprobs or token ids, only total usage.
        doc = {
            "choices": [
                {"index": 1, "message": {"role": "assistant", "content": texts[1]}, "finish_reason": "stop"},
                {"index": 0, "message": {"role": "assistant", "content": texts[0]}, "finish_reason": "stop"},
            ],
            "usage": {"prompt_tokens": 4, "completion_tokens": 9},
        }
        srv.add_faults(("json", doc))
        with OpenAICompatibleLLM(srv.url, "m", **FAST) as llm:
            out = llm.generate(["p"], SamplingParams(n=2))[0]
    assert [c.text for c in out] == texts  # sorted by choice index
    assert [c.usage.completion_tokens for c in out] == [7, 2]  # 9 split 3:1 by text length
    assert [c.usage.prompt_tokens for c in out] == [4, 0]


def test_api_key_header_explicit_and_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    with OpenAITestServer(echo, api_key="sk-test") as srv:
        with OpenAICompatibleLLM(srv.url, "m", api_key="sk-test", **FAST) as llm:
            assert llm.generate(["hi"])[0][0].text == "echo: hi"
            assert "sk-test" not in repr(llm)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        with OpenAICompatibleLLM(srv.url, "m", **FAST) as llm:
            assert llm.generate(["env"])[0][0].text == "echo: env"
        monkeypatch.delenv("OPENAI_API_KEY")
        with (
            OpenAICompatibleLLM(srv.url, "m", **FAST) as llm,
            pytest.raises(LLMServerError, match="Incorrect API key") as ei,
        ):
            llm.generate(["nokey"])
        assert ei.value.status == 401 and ei.value.attempts == 1
        assert [h.get("authorization") for h in srv.headers] == ["Bearer sk-test", "Bearer sk-test", None]


def test_generate_works_inside_a_running_event_loop() -> None:
    async def main(url: str) -> str:
        with OpenAICompatibleLLM(url, "m", **FAST) as llm:
            return llm.generate(["loop"])[0][0].text

    with OpenAITestServer(echo) as srv:
        assert asyncio.run(main(srv.url)) == "echo: loop"


# ---------------------------------------------------------------- concurrency
def test_concurrency_limit_is_respected() -> None:
    prompts = [f"p{i}" for i in range(8)]
    with OpenAITestServer(echo, delay_s=0.2) as srv:
        with OpenAICompatibleLLM(srv.url, "m", max_concurrency=2, **FAST) as llm:
            out = llm.generate(prompts)
        assert srv.max_in_flight == 2
        assert [row[0].text for row in out] == [f"echo: p{i}" for i in range(8)]

        srv.reset()
        srv.gather = 8  # each request waits for the others (10 s at most): a loaded machine's slow threads
        with OpenAICompatibleLLM(srv.url, "m", max_concurrency=8, **FAST) as llm:
            out = llm.generate(prompts)
        assert srv.max_in_flight == 8  # all eight in flight at once (no timing assert: CI load varies)
        assert [row[0].text for row in out] == [f"echo: p{i}" for i in range(8)]


# -------------------------------------------------------------------- retries
@pytest.mark.parametrize(
    "faults",
    [
        [("status", 503), ("status", 503)],
        [("drop",)],
        [("malformed",)],
        [("json", {"id": "x", "object": "chat.completion"})],  # valid JSON, no choices
        [("status", 502), ("status", 504), ("status", 500)],
    ],
    ids=["503x2", "drop", "malformed", "no-choices", "502-504-500"],
)
def test_transient_faults_are_retried(faults: list[tuple], caplog: pytest.LogCaptureFixture) -> None:
    with OpenAITestServer(echo, faults=faults) as srv, OpenAICompatibleLLM(srv.url, "m", **FAST) as llm:
        with caplog.at_level(logging.WARNING, logger="societas.agents.llm.openai_compat"):
            out = llm.generate(["again"])
        assert out[0][0].text == "echo: again"
        assert len(srv.requests) == len(faults) + 1
        assert srv.faults_pending == 0
        assert llm.stats["retries"] == len(faults) and llm.stats["requests"] == len(faults) + 1
    retry_logs = [r for r in caplog.records if r.levelno == logging.WARNING and "retrying" in r.getMessage()]
    assert len(retry_logs) == len(faults)


def _retry_delays(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The waits the client announced before each retry ("retrying in 0.05 s")."""
    return [
        m.group(1)
        for r in caplog.records
        if (m := re.search(r"retrying in (\S+) s$", r.getMessage())) is not None
    ]


def test_429_retry_after_replaces_backoff(caplog: pytest.LogCaptureFixture) -> None:
    faults = [("status", 429, {"Retry-After": "0"})]
    # the backoff alone would wait 2.5-5 s: Retry-After: 0 must win
    with (
        OpenAITestServer(echo, faults=faults) as srv,
        OpenAICompatibleLLM(srv.url, "m", backoff_s=5.0, backoff_max_s=5.0) as llm,
        caplog.at_level(logging.WARNING, logger="societas.agents.llm.openai_compat"),
    ):
        out = llm.generate(["rate"])
        assert llm.stats["retries"] == 1
    assert out[0][0].text == "echo: rate"
    assert _retry_delays(caplog) == ["0.00"]


def test_retry_after_is_capped_by_backoff_max(caplog: pytest.LogCaptureFixture) -> None:
    faults = [("status", 503, {"Retry-After": "30"})]
    with (
        OpenAITestServer(echo, faults=faults) as srv,
        OpenAICompatibleLLM(srv.url, "m", **FAST) as llm,
        caplog.at_level(logging.WARNING, logger="societas.agents.llm.openai_compat"),
    ):
        assert llm.generate(["cap"])[0][0].text == "echo: cap"
    assert _retry_delays(caplog) == [f"{FAST['backoff_max_s']:.2f}"]


def test_hang_longer_than_timeout_is_retried(caplog: pytest.LogCaptureFixture) -> None:
    with OpenAITestServer(echo, faults=[("hang", 3.0)]) as srv:
        with (
            OpenAICompatibleLLM(srv.url, "m", timeout_s=0.3, **FAST) as llm,
            caplog.at_level(logging.WARNING, logger="societas.agents.llm.openai_compat"),
        ):
            out = llm.generate(["slow"])
            assert llm.stats["retries"] == 1
        assert len(srv.requests) == 2
    assert out[0][0].text == "echo: slow"
    # the first attempt was abandoned at the client's timeout, not answered late
    (warning,) = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    # (the caller's deadline, or httpx's own read timeout when it fires first)
    assert re.search(r"(timed out|ReadTimeout): no (complete )?answer within 0\.3 s", warning), warning


# ------------------------------------------------- total time budget and size cap
def _stops_sending(srv: OpenAITestServer, within_s: float = 3.0) -> bool:
    """Whether the server's byte count stops growing (the client went away) within ``within_s``."""
    end = time.monotonic() + within_s
    last = srv.bytes_sent
    while time.monotonic() < end:
        time.sleep(0.3)
        now = srv.bytes_sent
        if now == last:
            return True
        last = now
    return False


def test_silent_server_fails_within_the_timeout() -> None:
    with OpenAITestServer(echo, faults=[("hang", 10.0)]) as srv:
        with OpenAICompatibleLLM(srv.url, "m", timeout_s=0.5, max_retries=0, **FAST) as llm:
            t0 = time.monotonic()
            with pytest.raises(LLMServerError, match=r"no (complete )?answer within 0\.5 s") as ei:
                llm.generate(["anyone?"])
            elapsed = time.monotonic() - t0
    assert 0.45 <= elapsed < 0.5 + 1.0
    assert ei.value.attempts == 1 and ei.value.status is None and ei.value.retryable


@pytest.mark.parametrize(
    "what, every_s",
    [("body", 0.9), ("headers", 0.05)],
    ids=["body-just-under-a-read-timeout", "headers-fast-trickle"],
)
def test_trickling_server_fails_within_the_timeout(what: str, every_s: float) -> None:
    """A server that sends a byte now and then never lets a per-read timeout fire: the timeout
    covers the whole request, so the attempt ends after ``timeout_s``, not a read later."""
    with OpenAITestServer(echo, faults=[("trickle", every_s, what)]) as srv:
        with OpenAICompatibleLLM(srv.url, "m", timeout_s=1.0, max_retries=0, **FAST) as llm:
            t0 = time.monotonic()
            with pytest.raises(
                LLMServerError, match=r"no complete answer within 1 s|still arriving after 1 s"
            ):
                llm.generate(["slowly"])
            elapsed = time.monotonic() - t0
        assert 0.95 <= elapsed < 1.0 + 0.5  # a byte arrives every 0.9 s: one more read would end at 1.8 s
        assert srv.bytes_sent < 30  # the whole answer would take seconds at this pace
        assert _stops_sending(srv)  # the client closed its end instead of reading on in the background


def test_retries_each_get_the_whole_timeout() -> None:
    faults = [("trickle", 0.05), ("trickle", 0.05)]
    with OpenAITestServer(echo, faults=faults) as srv:
        with OpenAICompatibleLLM(srv.url, "m", timeout_s=0.4, max_retries=2, **FAST) as llm:
            t0 = time.monotonic()
            out = llm.generate(["third time lucky"])
            elapsed = time.monotonic() - t0
            assert llm.stats["retries"] == 2
    assert out[0][0].text == "echo: third time lucky"
    assert 0.8 <= elapsed < 0.8 + 1.5  # two abandoned attempts of 0.4 s, then a quick answer


@pytest.mark.parametrize("declare_length", [True, False], ids=["content-length", "streamed"])
def test_reply_larger_than_the_cap_fails_fast_without_reading_it(declare_length: bool) -> None:
    reply_bytes = 128 * 1024 * 1024
    cap = 64 * 1024
    with OpenAITestServer(echo, faults=[("large", reply_bytes, declare_length)]) as srv:
        with OpenAICompatibleLLM(srv.url, "m", max_response_bytes=cap, max_retries=3, **FAST) as llm:
            tracemalloc.start()
            try:
                t0 = time.monotonic()
                with pytest.raises(LLMServerError, match=f"exceeds max_response_bytes={cap}") as ei:
                    llm.generate(["flood me"])
                elapsed = time.monotonic() - t0
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert llm.stats["retries"] == 0  # the same question would get the same flood
        assert _stops_sending(srv)
        sent = srv.bytes_sent
        assert len(srv.requests) == 1
    assert "not retried: the answer is larger than the client accepts" in str(ei.value)
    assert ei.value.attempts == 1 and ei.value.status == 200 and not ei.value.retryable
    assert elapsed < 5.0
    assert peak < 16 * 1024 * 1024  # nowhere near the 128 MiB answer
    assert sent < reply_bytes // 2  # the client stopped reading; only socket buffers took more


def test_default_cap_refuses_a_reply_past_32_mib() -> None:
    assert DEFAULT_MAX_RESPONSE_BYTES == 32 * 1024 * 1024
    with OpenAITestServer(echo, faults=[("large", DEFAULT_MAX_RESPONSE_BYTES + 4096, False)]) as srv:
        with OpenAICompatibleLLM(srv.url, "m", **FAST) as llm:
            assert llm.max_response_bytes == DEFAULT_MAX_RESPONSE_BYTES
            with pytest.raises(
                LLMServerError, match=f"exceeds max_response_bytes={DEFAULT_MAX_RESPONSE_BYTES}"
            ):
                llm.generate(["flood"])


def test_reply_within_the_cap_is_read_whole() -> None:
    with OpenAITestServer(echo, faults=[("large", 200_000, False)]) as srv:
        with OpenAICompatibleLLM(srv.url, "m", max_response_bytes=200_000, **FAST) as llm:
            (text,) = [row[0].text for row in llm.generate(["big but fine"])]
        assert srv.headers[0]["accept-encoding"] == "identity"  # no compressed body to expand past the cap
    assert len(text) > 199_000 and set(text) == {"x"}


def test_error_bodies_are_capped_too() -> None:
    huge = "e" * 100_000
    with OpenAITestServer(echo, faults=[("status", 500, None, huge)]) as srv:
        with OpenAICompatibleLLM(srv.url, "m", max_response_bytes=10_000, max_retries=3, **FAST) as llm:
            with pytest.raises(LLMServerError, match="HTTP 500 response body of 100000 bytes") as ei:
                llm.generate(["x"])
        assert len(srv.requests) == 1
    assert ei.value.status == 500


# ------------------------------------------------------------------- giving up
def test_gives_up_after_max_retries_on_persistent_500() -> None:
    with OpenAITestServer(echo, faults=[("status", 500)] * 10) as srv:
        with OpenAICompatibleLLM(srv.url, "my-model", max_retries=3, **FAST) as llm:
            with pytest.raises(LLMServerError) as ei:
                llm.generate(["doomed"])
            assert llm.stats["requests"] == 4 and llm.stats["retries"] == 3 and llm.stats["failures"] == 1
        assert len(srv.requests) == 4
        url = srv.url
    msg = str(ei.value)
    assert f"{url}/chat/completions" in msg and "'my-model'" in msg and "500" in msg and "4 attempts" in msg
    assert ei.value.attempts == 4 and ei.value.status == 500 and ei.value.retryable


@pytest.mark.parametrize("status", [400, 401, 404])
def test_client_errors_fail_at_once_with_server_message(status: int) -> None:
    body = {"error": {"message": f"bad thing number {status}", "type": "invalid_request_error"}}
    with OpenAITestServer(echo, faults=[("status", status, None, body)]) as srv:
        with OpenAICompatibleLLM(srv.url, "m", max_retries=5, **FAST) as llm:
            with pytest.raises(LLMServerError) as ei:
                llm.generate(["bad"])
            assert llm.stats["retries"] == 0
        assert len(srv.requests) == 1
    assert f"bad thing number {status}" in str(ei.value) and f"HTTP {status}" in str(ei.value)
    assert "1 attempt" in str(ei.value)
    assert ei.value.attempts == 1 and ei.value.status == status and not ei.value.retryable


def test_a_server_message_is_quoted_on_one_line() -> None:
    body = {"error": {"message": "first line\nsecond line\r\n\x1b[2Jthird"}}
    with OpenAITestServer(echo, faults=[("status", 400, None, body)]) as srv:
        with OpenAICompatibleLLM(srv.url, "m", **FAST) as llm, pytest.raises(LLMServerError) as ei:
            llm.generate(["x"])
    msg = str(ei.value)
    assert "first line second line" in msg and "third" in msg
    assert not any(ch in msg for ch in "\n\r\x1b") and "\x1b" not in (ei.value.body or "")


def test_wrong_base_path_is_a_404_without_retries() -> None:
    with OpenAITestServer(echo) as srv:
        with (
            OpenAICompatibleLLM(f"http://127.0.0.1:{srv.port}/v2", "m", **FAST) as llm,
            pytest.raises(LLMServerError, match="HTTP 404"),
        ):
            llm.generate(["x"])
        assert srv.requests == []


def test_one_failing_prompt_fails_the_batch() -> None:
    with (
        OpenAITestServer(echo, faults=[("status", 400)]) as srv,
        OpenAICompatibleLLM(srv.url, "m", max_concurrency=1, **FAST) as llm,
    ):
        with pytest.raises(LLMServerError, match="HTTP 400"):
            llm.generate(["first", "second", "third"])
        # the instance stays usable after a failed batch
        assert llm.generate(["after"])[0][0].text == "echo: after"


def test_connection_refused_names_the_server() -> None:
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    with OpenAICompatibleLLM(url, "ghost", max_retries=2, **FAST) as llm:
        with pytest.raises(LLMServerError, match="failed after 3 attempts") as ei:
            llm.generate(["anyone?"])
        assert llm.stats["requests"] == 3
    msg = str(ei.value)
    assert url in msg and "'ghost'" in msg and "3 attempts" in msg and "ConnectError" in msg
    assert ei.value.status is None


def test_close_during_generate_stops_the_batch() -> None:
    errors: list[Exception] = []
    with OpenAITestServer(echo, delay_s=0.3) as srv:
        llm = OpenAICompatibleLLM(srv.url, "m", max_concurrency=2, **FAST)

        def run() -> None:
            try:
                llm.generate([f"p{i}" for i in range(6)])
            except Exception as e:
                errors.append(e)

        worker = threading.Thread(target=run)
        worker.start()
        time.sleep(0.1)
        llm.close()  # waits for the two requests on the wire, drops the queued four
        worker.join(timeout=5)
        assert not worker.is_alive()
        assert len(srv.requests) == 2
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
    assert "closed while generate() was running" in str(errors[0])


# ------------------------------------------------------------ construction etc.
def test_name_repr_and_lifecycle() -> None:
    llm = OpenAICompatibleLLM("http://127.0.0.1:9/v1/", "m1", api_key="sk-secret")
    assert llm.name == "openai:http://127.0.0.1:9/v1#m1"
    assert llm.endpoint == "http://127.0.0.1:9/v1/chat/completions"
    r = repr(llm)
    assert "sk-secret" not in r and "model='m1'" in r and "api_key='set'" not in r and "api_key=set" in r
    assert llm.generate([]) == []
    llm.close()
    llm.close()  # idempotent
    with pytest.raises(RuntimeError, match="after close"):
        llm.generate(["x"])
    named = OpenAICompatibleLLM("https://api.example.com/v1", "m2", name="judge")
    assert named.name == "judge" and "name='judge'" in repr(named)
    named.close()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"base_url": "localhost:8000/v1", "model": "m"}, "http"),
        ({"base_url": "", "model": "m"}, "base_url"),
        ({"base_url": "http://h/v1/chat/completions", "model": "m"}, "names the endpoint"),
        ({"base_url": "http://[::1/v1", "model": "m"}, "host or port cannot be read"),
        ({"base_url": "http://h:99999/v1", "model": "m"}, "host or port cannot be read"),
        ({"base_url": "http://h/v1", "model": ""}, "model"),
        ({"base_url": "http://h/v1", "model": "m", "max_concurrency": 0}, "max_concurrency"),
        ({"base_url": "http://h/v1", "model": "m", "timeout_s": 0}, "timeout_s"),
        ({"base_url": "http://h/v1", "model": "m", "timeout_s": 1e300}, "timeout_s"),
        ({"base_url": "http://h/v1", "model": "m", "timeout_s": True}, "timeout_s"),
        ({"base_url": "http://h/v1", "model": "m", "max_response_bytes": 0}, "max_response_bytes"),
        ({"base_url": "http://h/v1", "model": "m", "max_retries": -1}, "max_retries"),
        ({"base_url": "http://h/v1", "model": "m", "backoff_s": -1}, "backoff_s"),
        ({"base_url": "http://h/v1", "model": "m", "extra_body": {"x": object()}}, "extra_body"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        OpenAICompatibleLLM(**kwargs)


def test_bad_prompts_are_rejected_before_any_request() -> None:
    with OpenAITestServer(echo) as srv, OpenAICompatibleLLM(srv.url, "m", **FAST) as llm:
        with pytest.raises(TypeError, match="list of prompts"):
            llm.generate("a bare string")
        with pytest.raises(ValueError, match="unknown role"):
            llm.generate([[{"role": "wizard", "content": "x"}]])
        with pytest.raises(ValueError, match="SamplingParams"):
            llm.generate(["a", "b"], [SamplingParams()])
        assert srv.requests == []


def test_test_server_rejects_bad_fault_specs() -> None:
    with pytest.raises(ValueError, match="unknown fault kind"):
        OpenAITestServer(echo, faults=[("explode",)])
    with pytest.raises(ValueError, match="HTTP status"):
        OpenAITestServer(echo, faults=[("status", 9999)])


# ------------------------------------------------------- the embedded model served
@pytest.mark.slow
def test_serves_the_embedded_model_end_to_end(embedded_llm) -> None:
    """A localhost server answering from the embedded model: the client returns
    what the model itself generates, and load_llm's openai: URI reaches it."""
    from societas.agents.llm import load_llm

    def from_model(messages: list[dict], body: dict) -> str:
        p = SamplingParams(temperature=0.0, max_new_tokens=body.get("max_tokens") or 16)
        return embedded_llm.generate([messages], p)[0][0].text

    prompts = ["What is the capital of France?", "Name a colour."]
    direct = [
        c[0].text for c in embedded_llm.generate(prompts, SamplingParams(temperature=0, max_new_tokens=16))
    ]
    with OpenAITestServer(from_model, apply_stop=False) as srv:
        llm = load_llm(f"openai:{srv.url}#smollm2", shared=False, **FAST)
        out = llm.generate(prompts, SamplingParams(temperature=0, max_new_tokens=16))
        llm.close()
        assert srv.requests[0]["model"] == "smollm2"
    assert [c[0].text for c in out] == direct


def test_check_names_an_unreachable_server_a_wrong_model_and_a_refused_key() -> None:
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with OpenAICompatibleLLM(f"http://127.0.0.1:{port}/v1", "ghost", **FAST) as llm:
        t0 = time.perf_counter()
        with pytest.raises(LLMServerError, match="cannot reach the server at http://127.0.0.1"):
            llm.check()
        assert time.perf_counter() - t0 < 10 and llm.stats["requests"] == 0  # no generation tried
    with OpenAITestServer(echo, model="served-model") as srv:
        with OpenAICompatibleLLM(srv.url, "served-model", **FAST) as llm:
            llm.check()  # the model is listed: fine
        with OpenAICompatibleLLM(srv.url, "other", **FAST) as llm:
            with pytest.raises(LLMServerError, match="serves served-model, not 'other'"):
                llm.check()
    with OpenAITestServer(echo, api_key="secret") as srv:
        with OpenAICompatibleLLM(srv.url, "test-model", api_key="wrong", **FAST) as llm:
            with pytest.raises(LLMServerError, match="refused the API key"):
                llm.check()
