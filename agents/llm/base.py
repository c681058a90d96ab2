"""The one protocol every LLM backend speaks.

A backend takes a *batch* of chat prompts and returns one or more
:class:`Completion` per prompt. Sampling parameters may be given once for the
whole batch or once per prompt, so that a caller (the topology Runtime) can
send every agent of a superstep in one call even when the agents sample
differently.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

log = logging.getLogger(__name__)

ChatMessage = dict[str, str]
"""One chat turn: ``{"role": "system" | "user" | "assistant", "content": str}``."""

Prompt = str | Sequence[ChatMessage]
"""A prompt: a plain string (sent as one user turn) or a list of chat turns."""

_ROLES = {"system", "user", "assistant", "tool"}


class SamplingParams(BaseModel):
    """How to sample. ``temperature == 0`` means greedy decoding."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float = Field(0.7, ge=0.0, description="0 means greedy")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(256, ge=1)
    min_new_tokens: int = Field(0, ge=0, description="end-of-sequence is suppressed until this many tokens")
    stop: tuple[str, ...] = ()
    seed: int | None = None
    n: int = Field(1, ge=1, description="samples per prompt")
    logprobs: bool = False

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_tuple(cls, v: Any) -> tuple[str, ...]:
        if v is None:
            return ()
        if isinstance(v, str):
            return (v,)
        return tuple(v)

    @model_validator(mode="after")
    def _min_le_max(self) -> SamplingParams:
        if self.min_new_tokens > self.max_new_tokens:
            raise ValueError(
                f"min_new_tokens ({self.min_new_tokens}) exceeds max_new_tokens ({self.max_new_tokens})"
            )
        return self

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class ToolCall:
    """One call of a tool that a model asked for.

    ``id`` comes from the server for native tool calls; the text protocol
    (:func:`societas.agents.tools.parse_tool_calls`) numbers the calls of one
    reply ``call_0``, ``call_1``, ... ``arguments`` are the decoded JSON
    arguments, not yet validated against the tool. ``error`` is set when the
    call could not be read as given (its arguments were not a JSON object, or
    it names no known tool): :meth:`societas.agents.tools.Tool.run` then
    answers it with that error instead of running the tool. The class lives
    here, beside :class:`Completion`, and is re-exported by
    :mod:`societas.agents.tools`.
    """

    id: str
    name: str
    arguments: dict[str, Any]
    error: str | None = None


@dataclass
class Completion:
    """One generated sample.

    ``finish_reason`` is ``"stop"`` (end-of-sequence token or a stop string),
    ``"length"`` (``max_new_tokens`` reached) or ``"error"``; a server may
    also report others (``"tool_calls"``).
    ``logprobs`` holds one log-probability per token of ``token_ids`` when the
    request asked for them, else ``None``.
    ``tool_calls`` holds the native tool calls of a backend that supports
    them (``supports_native_tools``) when the request carried tools (an empty
    list when the model called none), else ``None``; ``tool_call_errors``
    lists, one line each, the calls that could not be read as given (each
    such call also carries its ``error``), else ``None``.
    """

    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    finish_reason: str = "stop"
    usage: Usage = field(default_factory=Usage)
    prompt_index: int = 0
    sample_index: int = 0
    tool_calls: list[ToolCall] | None = None
    tool_call_errors: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@runtime_checkable
class LLM(Protocol):
    """A batched chat model.

    ``generate(prompts, params)`` returns a list with one list of completions
    per prompt (``params.n`` of them), in prompt order.

    The project's backends also expose ``context_length: int | None`` (the
    most tokens a prompt and its reply may hold together; ``None`` when
    unknown) and cap ``max_new_tokens`` to it (see :func:`fit_max_new_tokens`).
    It is not part of the protocol, so that any object with ``name`` and
    ``generate`` stays an LLM; read it with ``getattr(llm, "context_length", None)``.
    """

    name: str

    def generate(
        self,
        prompts: Sequence[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[list[Completion]]: ...


def normalize_prompt(prompt: Prompt) -> list[ChatMessage]:
    """Turn a prompt into a validated list of chat turns."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if not isinstance(prompt, Sequence) or isinstance(prompt, (bytes, bytearray)):
        raise TypeError(f"a prompt must be a string or a list of chat messages, got {type(prompt).__name__}")
    out: list[ChatMessage] = []
    for i, m in enumerate(prompt):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise ValueError(f"prompt message {i} must be a dict with 'role' and 'content', got {m!r}")
        if m["role"] not in _ROLES:
            raise ValueError(
                f"prompt message {i} has unknown role {m['role']!r}; expected one of {sorted(_ROLES)}"
            )
        if not isinstance(m["content"], str):
            raise ValueError(f"prompt message {i} content must be a string")
        out.append({"role": m["role"], "content": m["content"]})
    if not out:
        raise ValueError("a prompt must hold at least one message")
    return out


def broadcast_params(
    params: SamplingParams | Sequence[SamplingParams] | None, n_prompts: int
) -> list[SamplingParams]:
    """One SamplingParams per prompt."""
    if params is None:
        return [SamplingParams()] * n_prompts
    if isinstance(params, SamplingParams):
        return [params] * n_prompts
    plist = list(params)
    if len(plist) != n_prompts:
        raise ValueError(
            f"got {len(plist)} SamplingParams for {n_prompts} prompts; give one or one per prompt"
        )
    for i, p in enumerate(plist):
        if not isinstance(p, SamplingParams):
            raise TypeError(f"params[{i}] must be SamplingParams, got {type(p).__name__}")
    return plist


def truncate_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Cut ``text`` before the first stop string; say whether one was found."""
    cut = None
    for s in stop:
        if not s:
            continue
        i = text.find(s)
        if i >= 0 and (cut is None or i < cut):
            cut = i
    if cut is None:
        return text, False
    return text[:cut], True


def render_with_tokenizer(tokenizer: Any, prompt: Prompt) -> str:
    """The exact text a local model sees: the tokenizer's chat template with the
    generation prompt, or a plain transcript when it has no template. Shared by
    every local backend so that they tokenise a prompt identically.

    A prompt whose last message is the assistant's is *continued* (the
    model writes the rest of that message, as ``continue_final_message`` in
    transformers and vLLM): the way to start a small model's answer for it."""
    msgs = normalize_prompt(prompt)
    if getattr(tokenizer, "chat_template", None):
        if msgs and msgs[-1].get("role") == "assistant":
            return tokenizer.apply_chat_template(
                msgs, tokenize=False, add_generation_prompt=False, continue_final_message=True
            )
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    return render_chat_plain(msgs)


def encode_with_tokenizer(tokenizer: Any, prompts: Sequence[Prompt]) -> list[list[int]]:
    """Token ids of each rendered prompt (the template already holds the special tokens)."""
    return [
        list(tokenizer.encode(render_with_tokenizer(tokenizer, p), add_special_tokens=False)) for p in prompts
    ]


def render_chat_plain(messages: Sequence[ChatMessage]) -> str:
    """A readable transcript of chat turns, for models without a chat template."""
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\nassistant:"


class UnknownLLM(ValueError):
    """An LLM URI that :func:`~societas.agents.llm.load_llm` cannot interpret."""


# -- context length ------------------------------------------------------------
#
# Every backend has ``context_length: int | None``: the most tokens a prompt and
# its reply may hold together (``None``: unknown, nothing is capped). A request
# whose prompt plus ``max_new_tokens`` would not fit gets a smaller
# ``max_new_tokens`` (with one warning, see :func:`fit_max_new_tokens`); a
# prompt that leaves no room for even one new token is refused with
# :class:`ContextLengthError` before anything is generated.


class ContextLengthError(ValueError):
    """A prompt that leaves no room for a reply within the model's context length.

    ``model``, ``context_length`` and ``prompt_tokens`` say which model, how
    long its context is and how many tokens the prompt holds.
    """

    def __init__(self, message: str, *, model: str, context_length: int, prompt_tokens: int) -> None:
        super().__init__(message)
        self.model = model
        self.context_length = context_length
        self.prompt_tokens = prompt_tokens


def check_context_length(value: Any, what: str = "context_length") -> int | None:
    """``value`` when it is a positive int or ``None``; otherwise a ``ValueError`` naming ``what``."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{what} must be a positive number of tokens or None, got {value!r}")
    return value


def fit_max_new_tokens(
    prompt_tokens: int,
    max_new_tokens: int,
    context_length: int | None,
    *,
    model: str,
    warned: set[tuple[int, int]] | None = None,
    prompt: str = "the prompt",
    source: str | None = None,
    estimated: bool = False,
) -> int:
    """The largest ``max_new_tokens`` that fits the context: ``min(max_new_tokens, context_length - prompt_tokens)``.

    ``context_length=None`` (unknown) caps nothing. A cap logs a warning naming
    the model, the context length, the prompt's token count and the requested
    and capped budgets. ``warned`` is the backend instance's memory of what it
    already warned about: a warning is logged once per ``(max_new_tokens,
    context_length)`` (later caps of the same request log at DEBUG), because
    the cap depends on each prompt's length and a batch of prompts of
    different lengths must not flood the log; without ``warned`` every cap
    warns. ``prompt`` names the prompt in messages (``"prompt 3"``),
    ``source`` where the context length comes from (``"max_model_len"``) and
    ``estimated`` marks a prompt length that is an estimate.

    Raises :class:`ContextLengthError` when ``prompt_tokens >= context_length``:
    not even one new token would fit.
    """
    if context_length is None:
        return max_new_tokens
    about = "about " if estimated else ""
    limit = f"{context_length} tokens" + (f" ({source})" if source else "")
    room = context_length - prompt_tokens
    if room < 1:
        raise ContextLengthError(
            f"{model}: {prompt} has {about}{prompt_tokens} tokens, which leaves no room for a reply "
            f"within the model's context length of {limit}; shorten the prompt or use a model with a "
            "longer context",
            model=model,
            context_length=context_length,
            prompt_tokens=prompt_tokens,
        )
    if max_new_tokens <= room:
        return max_new_tokens
    key = (max_new_tokens, context_length)
    first = warned is None or key not in warned
    if warned is not None:
        warned.add(key)
    log.log(
        logging.WARNING if first else logging.DEBUG,
        "%s: %s has %s%d tokens, so max_new_tokens=%d does not fit the model's context length of %s; "
        "capped to %d%s",
        model,
        prompt,
        about,
        prompt_tokens,
        max_new_tokens,
        limit,
        room,
        " (further caps of this request are logged at DEBUG level)" if first and warned is not None else "",
    )
    return room


def with_max_new_tokens(p: SamplingParams, max_new_tokens: int) -> SamplingParams:
    """``p`` with ``max_new_tokens`` replaced (and ``min_new_tokens`` lowered to it when larger)."""
    if max_new_tokens == p.max_new_tokens:
        return p
    return p.model_copy(
        update={"max_new_tokens": max_new_tokens, "min_new_tokens": min(p.min_new_tokens, max_new_tokens)}
    )


def fit_params_to_context(
    prompt_tokens: Sequence[int],
    params: Sequence[SamplingParams],
    context_length: int | None,
    *,
    model: str,
    warned: set[tuple[int, int]] | None = None,
    source: str | None = None,
) -> list[SamplingParams]:
    """One SamplingParams per prompt, each ``max_new_tokens`` capped to what fits after that prompt.

    ``prompt_tokens[i]`` is the exact token count of prompt ``i``. Every prompt
    is checked before any is generated, so a prompt too long for the context
    fails the batch with :class:`ContextLengthError` naming it (``prompt i``).
    """
    if len(prompt_tokens) != len(params):
        raise ValueError(f"got {len(params)} SamplingParams for {len(prompt_tokens)} prompts")
    if context_length is None:
        return list(params)
    out: list[SamplingParams] = []
    for i, (n, p) in enumerate(zip(prompt_tokens, params)):
        cap = fit_max_new_tokens(
            n,
            p.max_new_tokens,
            context_length,
            model=model,
            warned=warned,
            prompt=f"prompt {i}",
            source=source,
        )
        out.append(with_max_new_tokens(p, cap))
    return out
