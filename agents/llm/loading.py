"""Building a backend from its URI: :func:`load_llm` (see :mod:`societas.agents.llm`).

This module imports every backend (torch and transformers among them), so the
package exports its names lazily: ``import societas.agents`` stays light for
code that only parses, sandboxes or calls a function agent.
"""

from __future__ import annotations

import importlib
import inspect
import threading
from pathlib import Path
from typing import Any

from ..embedded import converted_dir, is_complete, prepare
from ..gguf import convert_gguf
from .base import LLM, UnknownLLM
from .function import FunctionLLM
from .openai_compat import OpenAICompatibleLLM
from .transformers_llm import TransformersLLM
from .vllm_llm import VLLMLLM

__all__ = ["SCHEMES", "load_llm", "clear_cache"]

SCHEMES = ("embedded", "hf:", "gguf:", "vllm:", "openai:", "function:")


_CACHE: dict[str, LLM] = {}
_LOCK = threading.Lock()


def load_llm(uri: str, *, shared: bool = True, **kwargs: Any) -> LLM:
    """Build the backend a URI names.

    With ``shared=True`` (the default) the same URI returns the same object,
    so every node of a graph that names ``embedded`` shares one model — and
    the Runtime can batch their calls together. Keyword arguments go to the
    backend's constructor (and make the instance unshared), e.g.
    ``load_llm("openai:URL#MODEL", timeout_s=120, max_retries=3, backoff_s=2)``
    for a server's request deadline and retries, or ``context_length=2048``
    (every backend but ``vllm:``, whose context length is ``max_model_len``).
    An option the URI's backend does not have is a ``TypeError`` naming the
    backend and the options it takes. :func:`clear_cache` forgets the shared
    instances, so that a long-lived process can free a model it no longer
    uses.
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


def _options(cls: type) -> tuple[set[str], bool]:
    """The keyword options a backend's constructor takes, and whether it takes any other (``**kwargs``)."""
    params = list(inspect.signature(cls).parameters.values())
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return named, any(p.kind is p.VAR_KEYWORD for p in params)


def _check_options(uri: str, cls: type, kw: dict[str, Any], fixed: tuple[str, ...] = ()) -> None:
    """A ``TypeError`` for keyword arguments that the backend of ``uri`` does not take.

    ``fixed`` are the constructor arguments the URI itself supplies. A backend
    that forwards unknown options elsewhere (vLLM's engine arguments) still
    refuses the options that only the HTTP client has (``timeout_s``,
    ``max_retries``, ...): the engine would fail on them with a less helpful error.
    """
    named, open_ended = _options(cls)
    named -= set(fixed)
    if open_ended:
        client_only, _ = _options(OpenAICompatibleLLM)
        bad = sorted(k for k in kw if k not in named and k in client_only)
    else:
        bad = sorted(k for k in kw if k not in named)
    if bad:
        takes = ", ".join(sorted(named)) + (", and its engine's arguments" if open_ended else "")
        raise TypeError(
            f"load_llm({uri!r}): the {cls.__name__} backend has no option {', '.join(bad)}; it takes: {takes}"
        )


def _build(uri: str, **kw: Any) -> LLM:
    if uri == "embedded":
        _check_options(uri, TransformersLLM, kw, ("model", "name"))
        return TransformersLLM(prepare(), name="embedded", **kw)
    scheme, sep, rest = uri.partition(":")
    if not sep or not rest:
        raise UnknownLLM(
            f"unknown LLM {uri!r}; expected 'embedded' or one of {', '.join(SCHEMES[1:])}PATH/MODEL"
        )
    backend = {
        "hf": TransformersLLM,
        "gguf": TransformersLLM,
        "vllm": VLLMLLM,
        "openai": OpenAICompatibleLLM,
        "function": FunctionLLM,
    }.get(scheme)
    if backend is not None and kw:
        fixed = {"gguf": ("model", "name"), "openai": ("base_url", "model"), "function": ("fn", "name")}
        _check_options(uri, backend, kw, fixed.get(scheme, ("model",)))
    if scheme == "hf":
        return TransformersLLM(rest, **kw)
    if scheme == "gguf":
        f = Path(rest).expanduser()
        if not f.is_file():
            raise FileNotFoundError(f"gguf: no such file {f}")
        d = converted_dir(f)
        if not is_complete(d):
            convert_gguf(f, d)
        return TransformersLLM(d, name=f"gguf:{f}", **kw)
    if scheme == "vllm":
        model = rest
        if rest == "embedded":
            model = str(prepare())
        return VLLMLLM(model, **kw)
    if scheme == "openai":
        url, hash_, model = rest.partition("#")
        if not hash_ or not model or not url:
            raise UnknownLLM(f"openai URI must be openai:URL#MODEL, got {uri!r}")
        return OpenAICompatibleLLM(url, model, **kw)
    if scheme == "function":
        mod, colon, attr = rest.rpartition(":")
        if not colon or not mod:
            raise UnknownLLM(f"function URI must be function:MODULE:ATTR, got {uri!r}")
        if mod.startswith(".") or not all(part.isidentifier() for part in mod.split(".")):
            raise UnknownLLM(f"function URI needs an absolute dotted module name, got {mod!r} in {uri!r}")
        try:
            fn = getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError, ValueError) as exc:
            raise UnknownLLM(f"cannot import {mod}:{attr} for {uri!r}: {exc}") from None
        return FunctionLLM(fn, name=uri, **kw)
    raise UnknownLLM(
        f"unknown LLM scheme {scheme!r} in {uri!r}; known: embedded, hf:, gguf:, vllm:, openai:, function:"
    )
