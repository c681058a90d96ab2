"""Context length: every backend caps ``max_new_tokens`` to what fits after the prompt
(one warning per request, not per prompt) and refuses a prompt that leaves no room
for a reply — the shared helper, TransformersLLM on a tiny model, vLLM's pure
capping function, and OpenAICompatibleLLM against the fake server (its model
listing, vLLM's HTTP 400 context messages, and which errors are retried)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from societas.agents.llm import (
    ContextLengthError,
    FunctionLLM,
    LLMServerError,
    OpenAICompatibleLLM,
    SamplingParams,
    fit_max_new_tokens,
    load_llm,
)
from societas.agents.llm.openai_compat import ContextOverflow, estimate_prompt_tokens, parse_context_error
from societas.agents.llm.transformers_llm import TransformersLLM, model_context_length
from societas.agents.llm.vllm_llm import fit_to_max_model_len
from tests.agents.openai_server import OpenAITestServer

FAST = {"backoff_s": 0.01, "backoff_max_s": 0.05}
LOGGER = "societas.agents.llm"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def cap_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "capped to" in r.getMessage()
    ]


# ------------------------------------------------------------------ the shared rule
def test_fit_caps_to_the_room_left_and_warns_with_the_numbers(caplog: pytest.LogCaptureFixture) -> None:
    assert fit_max_new_tokens(30, 50, 100, model="m") == 50  # fits: unchanged
    assert fit_max_new_tokens(30, 5000, None, model="m") == 5000  # unknown context: no cap
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert fit_max_new_tokens(30, 5000, 100, model="my-model", prompt="prompt 2") == 70
    (msg,) = cap_warnings(caplog)
    assert "my-model" in msg and "prompt 2 has 30 tokens" in msg and "max_new_tokens=5000" in msg
    assert "context length of 100 tokens" in msg and "capped to 70" in msg


def test_fit_warns_once_per_request_not_per_prompt(caplog: pytest.LogCaptureFixture) -> None:
    warned: set[tuple[int, int]] = set()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        caps = [fit_max_new_tokens(n, 5000, 100, model="m", warned=warned) for n in (10, 20, 30, 10)]
        assert caps == [90, 80, 70, 90]
        assert len(cap_warnings(caplog)) == 1
        fit_max_new_tokens(10, 6000, 100, model="m", warned=warned)  # another request: warned again
        fit_max_new_tokens(10, 80, 100, model="m", warned=warned)  # fits: nothing to say
    assert len(cap_warnings(caplog)) == 2


@pytest.mark.parametrize("prompt_tokens", [100, 150])
def test_fit_refuses_a_prompt_that_leaves_no_room(prompt_tokens: int) -> None:
    with pytest.raises(ContextLengthError) as ei:
        fit_max_new_tokens(prompt_tokens, 10, 100, model="my-model", source="max_model_len=100")
    err = ei.value
    assert isinstance(err, ValueError)
    msg = str(err)
    assert "my-model" in msg and f"{prompt_tokens} tokens" in msg and "context length of 100 tokens" in msg
    assert "max_model_len=100" in msg
    assert (err.model, err.context_length, err.prompt_tokens) == ("my-model", 100, prompt_tokens)
    assert fit_max_new_tokens(99, 10, 100, model="m") == 1  # one token of room is enough


# ------------------------------------------------------------------ transformers
@pytest.fixture(scope="module")
def tiny_parts(embedded_dir):
    """A random 1-layer Llama with 64 positions and the embedded model's tokenizer."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(str(embedded_dir), local_files_only=True)
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(cfg), tok


def test_context_length_is_read_from_the_model_config_or_the_tokenizer(tiny_parts) -> None:
    model, tok = tiny_parts
    assert model_context_length(model, tok) == 64
    for key in ("n_positions", "max_seq_len"):
        assert model_context_length(SimpleNamespace(config=SimpleNamespace(**{key: 300}))) == 300
    bare = SimpleNamespace(config=SimpleNamespace())
    assert model_context_length(bare, SimpleNamespace(model_max_length=512)) == 512
    assert model_context_length(bare, SimpleNamespace(model_max_length=int(1e30))) is None  # "no limit"
    assert model_context_length(bare, None) is None
    assert TransformersLLM(model, tok, device="cpu").context_length == 64
    assert TransformersLLM(model, tok, device="cpu", context_length=40).context_length == 40
    with pytest.raises(ValueError, match="context_length"):
        TransformersLLM(model, tok, device="cpu", context_length=0)


def test_transformers_caps_each_prompt_to_its_own_room_and_warns_once(
    tiny_parts, caplog: pytest.LogCaptureFixture
) -> None:
    model, tok = tiny_parts
    llm = TransformersLLM(model, tok, device="cpu", name="tiny64")
    prompts = ["hi", "a much longer question with many more words in it, so it takes more tokens"]
    lengths = [len(x) for x in llm.encode_prompts(prompts)]
    assert lengths[0] < lengths[1] < 50
    # min_new_tokens keeps end-of-sequence away, so every row runs to its cap
    params = SamplingParams(temperature=0, max_new_tokens=1000, min_new_tokens=1000)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        out = llm.generate(prompts, params)
        again = llm.generate(prompts[::-1], params)
    for n, row in zip(lengths, out):
        c = row[0]
        assert len(c.token_ids) == 64 - n and c.finish_reason == "length"
        assert c.usage.prompt_tokens + c.usage.completion_tokens == 64
    assert [len(r[0].token_ids) for r in again] == [64 - n for n in lengths[::-1]]
    (msg,) = cap_warnings(caplog)  # two calls, four capped rows: one warning
    assert "tiny64" in msg and "context length of 64 tokens" in msg and "max_new_tokens=1000" in msg


def test_transformers_keeps_a_budget_that_fits(tiny_parts, caplog: pytest.LogCaptureFixture) -> None:
    model, tok = tiny_parts
    llm = TransformersLLM(model, tok, device="cpu")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        out = llm.generate(["hi"], SamplingParams(temperature=0, max_new_tokens=5, min_new_tokens=5))
    assert len(out[0][0].token_ids) == 5 and cap_warnings(caplog) == []


def test_transformers_refuses_a_prompt_too_long_before_generating(tiny_parts) -> None:
    model, tok = tiny_parts
    llm = TransformersLLM(model, tok, device="cpu", name="tiny64", context_length=40)
    long_prompt = "word " * 60
    n = len(llm.encode_prompts([long_prompt])[0])
    with pytest.raises(ContextLengthError) as ei:
        llm.generate(["short", long_prompt], SamplingParams(max_new_tokens=4))
    msg = str(ei.value)
    assert "tiny64" in msg and "prompt 1" in msg and f"{n} tokens" in msg and "40 tokens" in msg
    assert llm.calls == 0  # nothing was generated, not even for the prompt that fits


def test_hf_uri_takes_a_context_length_override(tiny_parts, tmp_path) -> None:
    model, tok = tiny_parts
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    assert load_llm(f"hf:{tmp_path}", shared=False, device="cpu").context_length == 64
    llm = load_llm(f"hf:{tmp_path}", shared=False, device="cpu", context_length=40)
    assert llm.context_length == 40
    n = len(llm.encode_prompts(["hi"])[0])
    out = llm.generate(["hi"], SamplingParams(temperature=0, max_new_tokens=500, min_new_tokens=500))
    assert len(out[0][0].token_ids) == 40 - n
    with pytest.raises(TypeError, match="TransformersLLM backend has no option timeout_s"):
        load_llm(f"hf:{tmp_path}", shared=False, timeout_s=5)


@pytest.mark.slow
def test_embedded_model_knows_its_context_length(embedded_llm) -> None:
    assert embedded_llm.context_length == 8192  # SmolLM2's max_position_embeddings
    p = SamplingParams(temperature=0, max_new_tokens=16000)
    out = embedded_llm.generate(["Say hi."], p)  # a 16000-token budget is capped, not refused
    assert out[0][0].usage.completion_tokens <= 8192


# ------------------------------------------------------------------ vLLM (no vLLM needed)
def test_vllm_caps_to_max_model_len_per_prompt(caplog: pytest.LogCaptureFixture) -> None:
    warned: set[tuple[int, int]] = set()
    plist = [SamplingParams(max_new_tokens=100, min_new_tokens=60), SamplingParams(max_new_tokens=100)]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        out = fit_to_max_model_len([[1] * 10, [2] * 50], plist, 64, model="vllm:m", warned=warned)
        fit_to_max_model_len([[1] * 30], plist[:1], 64, model="vllm:m", warned=warned)
    assert [p.max_new_tokens for p in out] == [54, 14]
    assert out[0].min_new_tokens == 54 and out[1].min_new_tokens == 0  # min never above max
    (msg,) = cap_warnings(caplog)
    assert "vllm:m" in msg and "max_model_len=64" in msg
    fitting = [SamplingParams(max_new_tokens=4)]
    assert fit_to_max_model_len([[1] * 10], fitting, 64, model="vllm:m") == fitting


def test_vllm_refuses_a_prompt_without_room_and_an_empty_one() -> None:
    with pytest.raises(ContextLengthError, match=r"prompt 1 has 64 tokens.*max_model_len=64"):
        fit_to_max_model_len([[1] * 3, [1] * 64], [SamplingParams()] * 2, 64, model="vllm:m")
    with pytest.raises(ValueError, match="zero tokens"):
        fit_to_max_model_len([[]], [SamplingParams()], 64, model="vllm:m")


# ------------------------------------------------------------------ OpenAI-compatible servers
def long_reply(messages: list[dict], body: dict) -> str:
    return "word " * 2000


PROMPT = " ".join(["hello"] * 29 + ["hello!"])  # 30 tokens on the fake server; 180 characters


def test_the_context_length_comes_from_the_model_listing_once() -> None:
    with OpenAITestServer(long_reply, context_length=100) as srv:
        with OpenAICompatibleLLM(srv.url, "test-model", **FAST) as llm:
            assert srv.gets == []  # asked lazily
            assert llm.context_length == 100
            llm.generate(["a"], SamplingParams(max_new_tokens=3))
            assert llm.context_length == 100
            assert srv.gets == ["/v1/models"]  # once
        with OpenAICompatibleLLM(srv.url, "test-model", context_length=77, **FAST) as llm:
            assert llm.context_length == 77  # given: the server is not asked
            llm.generate(["a"], SamplingParams(max_new_tokens=3))
        with OpenAICompatibleLLM(srv.url, "other-model", **FAST) as llm:
            assert llm.context_length is None  # the listing says nothing about this model
        assert srv.gets == ["/v1/models", "/v1/models"]
    with OpenAITestServer(long_reply) as srv, OpenAICompatibleLLM(srv.url, "test-model", **FAST) as llm:
        llm.check()  # the listing check() reads answers the question too
        assert llm.context_length is None and srv.gets == ["/v1/models"]


@pytest.mark.parametrize("given", [False, True])
def test_a_known_context_length_caps_max_tokens_before_sending(
    given: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """From the listing or the constructor: capped by the estimate, one request, no 400."""
    assert estimate_prompt_tokens([{"role": "user", "content": PROMPT}]) == 30
    server_kw = {"context_length": 100, "list_context_length": not given}
    client_kw = {"context_length": 100} if given else {}
    with OpenAITestServer(long_reply, **server_kw) as srv:
        with OpenAICompatibleLLM(srv.url, "test-model", **client_kw, **FAST) as llm:
            with caplog.at_level(logging.WARNING, logger=LOGGER):
                out = llm.generate([PROMPT, PROMPT], SamplingParams(max_new_tokens=5000))
        assert [b["max_tokens"] for b in srv.requests] == [70, 70]
    assert [row[0].usage.completion_tokens for row in out] == [70, 70]
    assert [row[0].finish_reason for row in out] == ["length", "length"]
    (msg,) = cap_warnings(caplog)
    assert "about 30 tokens" in msg and "max_new_tokens=5000" in msg and "capped to 70" in msg


@pytest.mark.parametrize("style", ["vllm", "vllm-new"])
def test_a_context_400_is_capped_and_sent_once_more(style: str, caplog: pytest.LogCaptureFixture) -> None:
    """The listing does not say; vLLM's 400 does: cap to N - P, send again once, warn once."""
    prompts = [PROMPT, " ".join(["hello"] * 50)]
    with OpenAITestServer(
        long_reply, context_length=100, list_context_length=False, context_error=style
    ) as srv:
        with OpenAICompatibleLLM(srv.url, "test-model", max_retries=0, max_concurrency=1, **FAST) as llm:
            with caplog.at_level(logging.WARNING, logger=LOGGER):
                out = llm.generate(prompts, SamplingParams(max_new_tokens=5000))
            sent = [b["max_tokens"] for b in srv.requests]
            assert sent == [5000, 70, 5000, 50]
            assert [row[0].usage.completion_tokens for row in out] == [70, 50]
            assert llm.stats["retries"] == 0 and llm.stats["failures"] == 0
            warnings = cap_warnings(caplog)
            assert len(warnings) == 1 and "test-model" in warnings[0] and "100 tokens" in warnings[0]
            assert "prompt 0 has 30 tokens" in warnings[0] and "max_new_tokens=5000" in warnings[0]
            # the 400 taught the client the context length: the next request is capped before sending
            assert llm.context_length == 100
            srv.reset()
            llm.generate([PROMPT], SamplingParams(max_new_tokens=5000))
            assert [b["max_tokens"] for b in srv.requests] == [70]


@pytest.mark.parametrize("listed", [False, True])
@pytest.mark.parametrize("style", ["vllm", "vllm-new"])
def test_a_prompt_longer_than_the_context_is_refused(listed: bool, style: str) -> None:
    with OpenAITestServer(
        long_reply, context_length=20, list_context_length=listed, context_error=style
    ) as srv:
        with OpenAICompatibleLLM(srv.url, "test-model", max_retries=3, **FAST) as llm:
            with pytest.raises(ContextLengthError) as ei:
                llm.generate([PROMPT], SamplingParams(max_new_tokens=10))
            assert llm.stats["failures"] == 1
        assert len(srv.requests) == 1  # asked once, not retried
    msg = str(ei.value)
    assert "test-model" in msg and "30 tokens" in msg and "context length of 20 tokens" in msg
    assert (ei.value.context_length, ei.value.prompt_tokens) == (20, 30)


def test_a_context_400_without_numbers_fails_at_once_with_the_servers_message() -> None:
    with OpenAITestServer(
        long_reply, context_length=20, list_context_length=False, context_error="vague"
    ) as srv:
        with OpenAICompatibleLLM(srv.url, "test-model", max_retries=3, **FAST) as llm:
            with pytest.raises(LLMServerError) as ei:
                llm.generate([PROMPT], SamplingParams(max_new_tokens=10))
        assert len(srv.requests) == 1
    msg = str(ei.value)
    assert "maximum context length exceeded" in msg and "not retried" in msg and "client error" in msg
    assert ei.value.status == 400 and not ei.value.retryable


@pytest.mark.parametrize("status", [400, 404, 422])
def test_client_errors_are_not_retried_and_say_why(status: int) -> None:
    body = {"error": {"message": f"the server's own words {status}"}}
    with OpenAITestServer(long_reply, faults=[("status", status, None, body)] * 3) as srv:
        with OpenAICompatibleLLM(srv.url, "m", max_retries=3, **FAST) as llm:
            with pytest.raises(LLMServerError) as ei:
                llm.generate(["x"])
        assert len(srv.requests) == 1
    msg = str(ei.value)
    assert f"the server's own words {status}" in msg and f"HTTP {status}" in msg
    assert f"not retried: HTTP {status} is a client error" in msg and "1 attempt" in msg


@pytest.mark.parametrize("status", [429, 500, 503])
def test_transient_errors_are_retried(status: int) -> None:
    with OpenAITestServer(lambda m, b: "ok", faults=[("status", status)] * 2) as srv:
        with OpenAICompatibleLLM(srv.url, "m", max_retries=3, **FAST) as llm:
            assert llm.generate(["x"])[0][0].text == "ok"
            assert llm.stats["retries"] == 2
        assert len(srv.requests) == 3


def test_load_llm_forwards_the_http_settings_and_refuses_them_elsewhere() -> None:
    with OpenAITestServer(lambda m, b: "ok", faults=[("status", 503)] * 5) as srv:
        uri = f"openai:{srv.url}#test-model"
        llm = load_llm(uri, shared=False, timeout_s=7, max_retries=1, backoff_s=0.01, context_length=50)
        try:
            assert (llm.timeout_s, llm.max_retries, llm.backoff_s) == (7.0, 1, 0.01)
            assert llm.context_length == 50
            with pytest.raises(LLMServerError, match="2 attempts"):
                llm.generate(["x"])
            assert len(srv.requests) == 2  # max_retries=1 reached the client
        finally:
            llm.close()
    with pytest.raises(TypeError, match=r"FunctionLLM backend has no option max_retries, timeout_s"):
        load_llm(
            "function:tests.agents.test_transformers_llm:_echo", shared=False, timeout_s=5, max_retries=2
        )
    with pytest.raises(TypeError, match="VLLMLLM backend has no option backoff_s"):
        load_llm("vllm:some-model", shared=False, backoff_s=1)


@pytest.mark.parametrize(
    "text, max_tokens, expected",
    [
        (
            "This model's maximum context length is 2048 tokens. However, you requested 3000 tokens "
            "(1000 in the messages, 2000 in the completion). Please reduce the length of the messages or completion.",
            2000,
            ContextOverflow(2048, 1000),
        ),
        (
            "'max_tokens' or 'max_completion_tokens' is too large: 2000. This model's maximum context length "
            "is 2048 tokens and your request has 1000 input tokens (2000 > 2048 - 1000).",
            2000,
            ContextOverflow(2048, 1000),
        ),
        (
            '{"error": {"message": "This model\'s maximum context length is 8192 tokens. However, your '
            'messages resulted in 9000 tokens. Please reduce the length of the messages.", "code": '
            '"context_length_exceeded"}}',
            None,
            ContextOverflow(8192, 9000),
        ),
        (  # the prompt's share: what was requested in all minus what was sent as max_tokens
            "This model's maximum context length is 4096 tokens, however you requested 5000 tokens",
            1000,
            ContextOverflow(4096, 4000),
        ),
        (
            '{"error": {"code": 400, "message": "the request exceeds the available context size", '
            '"type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096}}',
            10,
            ContextOverflow(4096, 5000),
        ),
        ("This model's maximum context length is 4096 tokens.", 10, ContextOverflow(4096, None)),
        ('{"error": {"message": "Unknown parameter: foo"}}', 10, None),
    ],
)
def test_parse_context_error(text: str, max_tokens: int | None, expected: ContextOverflow | None) -> None:
    assert parse_context_error(text, max_tokens) == expected


# ------------------------------------------------------------------ function backend
def test_function_backend_caps_in_words_when_given_a_context_length() -> None:
    llm = FunctionLLM(lambda messages: "w " * 100, name="fn", context_length=10)
    assert FunctionLLM(lambda m: "x").context_length is None
    out = llm.generate(["one two three"], SamplingParams(max_new_tokens=50))
    assert out[0][0].usage.completion_tokens == 7 and out[0][0].finish_reason == "length"
    with pytest.raises(ContextLengthError, match="fn: prompt 0 has 10 tokens"):
        llm.generate([" ".join(["w"] * 10)], SamplingParams(max_new_tokens=5))
