"""A Python callable as a model: rule-based agents, scripted peers, tests.

The callable receives the chat messages of one prompt (and, if it accepts
them, the SamplingParams and the sample index) and returns the reply text.
Token counts are whitespace-split word counts, so budgets behave sensibly; a
reply longer than ``max_new_tokens`` words is cut after that many words, keeping
its own whitespace (newlines and indentation survive, so code stays code).
``context_length`` (default ``None``: no limit) caps ``max_new_tokens`` in the
same words, as the other backends do in tokens.
"""

from __future__ import annotations

import inspect
import re
import time
from collections.abc import Callable, Sequence

from .base import (
    ChatMessage,
    Completion,
    Prompt,
    SamplingParams,
    Usage,
    broadcast_params,
    check_context_length,
    fit_params_to_context,
    normalize_prompt,
    truncate_at_stop,
)

_WORD = re.compile(r"\S+")


def _count(text: str) -> int:
    return len(text.split())


def _first_words(text: str, n: int) -> str:
    """``text`` up to the end of its ``n``-th whitespace-separated word, with the
    original whitespace (newlines, indentation) between the words kept."""
    if n <= 0:
        return ""
    for count, match in enumerate(_WORD.finditer(text), start=1):
        if count == n:
            return text[: match.end()]
    return text


class FunctionLLM:
    """Wraps ``fn(messages) -> str`` or ``fn(messages, params, sample_index) -> str``.

    ``batch_fn(list_of_messages) -> list[str]`` may be given instead, to see
    the whole batch at once (useful to test that a caller batches).
    ``context_length`` (words, default ``None``) plays a model's context length:
    see :func:`~societas.agents.llm.base.fit_max_new_tokens`.
    """

    def __init__(
        self,
        fn: Callable[..., str] | None = None,
        *,
        batch_fn: Callable[[list[list[ChatMessage]]], list[str]] | None = None,
        name: str = "function",
        latency_s: float = 0.0,
        context_length: int | None = None,
    ) -> None:
        if (fn is None) == (batch_fn is None):
            raise ValueError("FunctionLLM needs exactly one of fn or batch_fn")
        self.fn = fn
        self.batch_fn = batch_fn
        self.name = name
        self.latency_s = latency_s
        self.context_length = check_context_length(context_length)
        self._warned_context: set[tuple[int, int]] = set()
        self.calls = 0  # number of generate() calls, one per batch
        self.batch_sizes: list[int] = []
        if fn is not None:
            try:
                self._arity = len(inspect.signature(fn).parameters)
            except (TypeError, ValueError):
                self._arity = 1

    def generate(
        self,
        prompts: Sequence[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[list[Completion]]:
        plist = broadcast_params(params, len(prompts))
        msgs = [normalize_prompt(p) for p in prompts]
        plist = fit_params_to_context(
            [sum(_count(m["content"]) for m in ms) for ms in msgs],
            plist,
            self.context_length,
            model=self.name,
            warned=self._warned_context,
        )
        self.calls += 1
        self.batch_sizes.append(len(prompts))
        if self.latency_s:
            time.sleep(self.latency_s)
        rows: list[tuple[int, int]] = [(i, s) for i, p in enumerate(plist) for s in range(p.n)]
        if self.batch_fn is not None:
            texts = self.batch_fn([msgs[i] for i, _ in rows])
            if len(texts) != len(rows):
                raise ValueError(f"batch_fn returned {len(texts)} texts for {len(rows)} rows")
        else:
            fn = self.fn
            if fn is None:
                raise ValueError(f"FunctionLLM {self.name!r} has neither fn nor batch_fn")
            texts = []
            for i, s in rows:
                if self._arity >= 3:
                    texts.append(fn(msgs[i], plist[i], s))
                elif self._arity == 2:
                    texts.append(fn(msgs[i], plist[i]))
                else:
                    texts.append(fn(msgs[i]))
        out: list[list[Completion]] = [[] for _ in prompts]
        for (i, s), text in zip(rows, texts):
            if not isinstance(text, str):
                raise TypeError(f"FunctionLLM {self.name!r} returned {type(text).__name__}, expected str")
            p = plist[i]
            text, stopped = truncate_at_stop(text, p.stop)
            finish = "stop"
            if _count(text) > p.max_new_tokens:
                text = _first_words(text, p.max_new_tokens)
                finish = "length"
            n_out = _count(text)
            out[i].append(
                Completion(
                    text=text,
                    token_ids=[],
                    logprobs=[0.0] * n_out if p.logprobs else None,
                    finish_reason=finish,
                    usage=Usage(sum(_count(m["content"]) for m in msgs[i]), n_out),
                    prompt_index=i,
                    sample_index=s,
                )
            )
        return out
