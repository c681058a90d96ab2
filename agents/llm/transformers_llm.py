"""Local Hugging Face models: batched, left-padded generation on CPU or GPU.

:class:`TransformersLLM` runs its own decode loop over a KV cache instead of
``model.generate`` so that ONE forward pass per token serves a whole batch in
which every row may have its own temperature, top-p, token limit, stop
strings and seed — which is what the topology Runtime sends when every agent
of a superstep shares a model. Rows that finish leave the batch (their cache
rows are dropped), so a long answer does not make short ones pay.

Log-probabilities, when asked, are those of the model's own distribution
(log-softmax of the logits before temperature and top-p), one per generated
token, the end-of-sequence token included — what a policy-gradient trainer
re-computes.

Context length: ``context_length`` is read from the model's config
(``max_position_embeddings``, else ``n_positions``, ``max_seq_len``,
``seq_length``), else from a sane ``tokenizer.model_max_length``, unless the
constructor is given one. Each prompt's ``max_new_tokens`` is capped to what
fits after that prompt (rows of one batch keep their own caps: the decode loop
already stops every row at its own limit); a prompt too long for even one new
token fails the call with :class:`~societas.agents.llm.base.ContextLengthError`
before anything is generated.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from .base import (
    Completion,
    Prompt,
    SamplingParams,
    Usage,
    broadcast_params,
    check_context_length,
    encode_with_tokenizer,
    fit_params_to_context,
    render_with_tokenizer,
    truncate_at_stop,
)
from .gqa_attention import use_gqa_sdpa

log = logging.getLogger(__name__)


def _common_prefix(rows: Sequence[Sequence[int]]) -> int:
    """How many first tokens all ``rows`` share."""
    first = rows[0]
    n = min(len(r) for r in rows)
    for i in range(n):
        t = first[i]
        if any(r[i] != t for r in rows):
            return i
    return n


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``"auto"`` → CUDA when present, else CPU."""
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


_CONFIG_LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")
_SANE_TOKENIZER_LENGTH = 10_000_000  # transformers' "no limit" is int(1e30)


def model_context_length(model: Any, tokenizer: Any = None) -> int | None:
    """The context length a model declares: its config's ``max_position_embeddings``
    (or ``n_positions``, ``max_seq_len``, ``seq_length``), else the tokenizer's
    ``model_max_length`` when it is a real limit (below 10 million), else ``None``."""
    config = getattr(model, "config", None)
    for cfg in (config, getattr(config, "text_config", None)):
        for key in _CONFIG_LENGTH_KEYS:
            value = getattr(cfg, key, None) if cfg is not None else None
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    value = getattr(tokenizer, "model_max_length", None)
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < _SANE_TOKENIZER_LENGTH:
        return value
    return None


def _autocast_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        resolved = dtype
    else:
        resolved = getattr(torch, str(dtype), None)
    if resolved is not None and resolved not in (torch.bfloat16, torch.float16):
        raise ValueError(f"autocast_dtype must be bfloat16, float16 or None, got {dtype!r}")
    return resolved


def _resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        return getattr(torch, dtype)
    except AttributeError:
        raise ValueError(f"unknown dtype {dtype!r}") from None


class TransformersLLM:
    """A causal LM from a local model directory or a GGUF file.

    ``TransformersLLM("path/to/model_dir")`` or
    ``TransformersLLM("path/to/model.gguf")`` (or pass ``model=`` and
    ``tokenizer=`` objects directly, e.g. a tiny randomly initialised model in
    tests or the policy being trained).

    ``context_length`` overrides the context length read from the model (see
    the module docstring); through :func:`~societas.agents.llm.load_llm`:
    ``load_llm("embedded", context_length=2048)``.

    ``autocast_dtype`` (e.g. ``"bfloat16"``) runs generation under
    ``torch.autocast`` of that dtype: a policy trained with float32 master
    weights (``GRPOConfig.precision="bf16-mixed"``) generates at bf16 speed
    without a bf16 copy of its weights.
    """

    def __init__(
        self,
        model: str | Path | Any,
        tokenizer: Any | None = None,
        *,
        device: str | torch.device = "auto",
        dtype: str | torch.dtype = "auto",
        name: str | None = None,
        max_batch_size: int = 64,
        chat_template: str | None = None,
        context_length: int | None = None,
        autocast_dtype: str | torch.dtype | None = None,
    ) -> None:
        context_length = check_context_length(context_length)
        self.device = resolve_device(device)
        self.autocast_dtype = _autocast_dtype(autocast_dtype)
        torch_dtype = _resolve_dtype(dtype, self.device)
        if isinstance(model, (str, Path)):
            path = Path(model).expanduser()
            if not path.exists():
                raise FileNotFoundError(f"no model at {path} (expected a model directory or a .gguf file)")
            kw: dict[str, Any] = {"local_files_only": True}
            if path.is_file():
                if path.suffix != ".gguf":
                    raise ValueError(
                        f"{path} is a file but not a .gguf; give a model directory or a GGUF file"
                    )
                kw["gguf_file"] = path.name
                src = str(path.parent)
            else:
                src = str(path)
            t0 = time.perf_counter()
            tok = tokenizer or AutoTokenizer.from_pretrained(src, **kw)
            mdl = AutoModelForCausalLM.from_pretrained(src, dtype=torch_dtype, **kw)
            log.info("loaded %s in %.1f s", path, time.perf_counter() - t0)
            self.name = name or f"hf:{path}"
        else:
            if tokenizer is None:
                raise ValueError("pass tokenizer= together with a model object")
            mdl, tok = model, tokenizer
            self.name = name or f"hf:{getattr(getattr(mdl, 'config', None), '_name_or_path', 'model')}"
        # transformers declares PreTrainedModel.to through functools.wraps, which mypy reads as unbound.
        self.model = mdl.to(self.device)  # type: ignore[arg-type]
        self.model.eval()
        self.gqa_sdpa = use_gqa_sdpa(self.model)
        self.tokenizer = tok
        if chat_template is not None:
            self.tokenizer.chat_template = chat_template
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.max_batch_size = max_batch_size
        self.context_length: int | None = (
            context_length if context_length is not None else model_context_length(self.model, self.tokenizer)
        )
        self._warned_context: set[tuple[int, int]] = set()  # (requested, context length) already warned about
        self.eos_ids = self._eos_ids()
        self.calls = 0
        self.prefill_rows = 0  # prompts actually encoded (identical prompts share one)
        self.prefix_tokens_saved = 0  # prompt tokens not encoded again thanks to a shared prefix
        # Distinct prompts of a batch that agree on at least this many first tokens encode them once.
        self.min_shared_prefix = 32
        params = inspect.signature(self.model.forward).parameters
        self._keep_last = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        self._rng = torch.Generator(device="cpu")
        self._rng.seed()

    def __repr__(self) -> str:
        return f"TransformersLLM({self.name!r}, device={self.device})"

    # -- prompt rendering --------------------------------------------------
    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        gc = getattr(self.model, "generation_config", None)
        for src in (getattr(gc, "eos_token_id", None), self.tokenizer.eos_token_id):
            if isinstance(src, int):
                ids.add(src)
            elif isinstance(src, (list, tuple)):
                ids.update(int(x) for x in src)
        return ids

    def render(self, prompt: Prompt) -> str:
        """The exact text the model sees for a chat prompt."""
        return render_with_tokenizer(self.tokenizer, prompt)

    def encode_prompts(self, prompts: Sequence[Prompt]) -> list[list[int]]:
        return encode_with_tokenizer(self.tokenizer, prompts)

    # -- generation --------------------------------------------------------
    def generate(
        self,
        prompts: Sequence[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[list[Completion]]:
        plist = broadcast_params(params, len(prompts))
        ids = self.encode_prompts(prompts)
        plist = fit_params_to_context(
            [len(x) for x in ids], plist, self.context_length, model=self.name, warned=self._warned_context
        )
        rows = [(i, s) for i, p in enumerate(plist) for s in range(p.n)]
        results: dict[tuple[int, int], Completion] = {}
        # Similar lengths together keeps padding small; order is restored below.
        order = sorted(range(len(rows)), key=lambda r: len(ids[rows[r][0]]))
        self.calls += 1
        compute = (
            torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)
            if self.autocast_dtype is not None
            else contextlib.nullcontext()
        )
        with compute:
            for start in range(0, len(order), self.max_batch_size):
                chunk = [rows[r] for r in order[start : start + self.max_batch_size]]
                outs = self._generate_rows(
                    [ids[i] for i, _ in chunk], [plist[i] for i, _ in chunk], [s for _, s in chunk]
                )
                for (i, s), c in zip(chunk, outs):
                    c.prompt_index, c.sample_index = i, s
                    results[(i, s)] = c
        return [[results[(i, s)] for s in range(plist[i].n)] for i in range(len(prompts))]

    def _row_generator(self, p: SamplingParams, sample_index: int) -> torch.Generator:
        if p.seed is None:
            return self._rng
        g = torch.Generator(device="cpu")
        g.manual_seed((p.seed * 1_000_003 + sample_index) % (2**63))
        return g

    @torch.inference_mode()
    def _generate_rows(
        self, prompt_ids: list[list[int]], params: list[SamplingParams], sample_idx: list[int]
    ) -> list[Completion]:
        dev = self.device
        B = len(prompt_ids)
        pad = int(self.tokenizer.pad_token_id)
        L = max(len(x) for x in prompt_ids)
        input_ids = torch.full((B, L), pad, dtype=torch.long)
        attn = torch.zeros((B, L), dtype=torch.long)
        for r, x in enumerate(prompt_ids):
            if not x:
                raise ValueError("a prompt rendered to zero tokens")
            input_ids[r, L - len(x) :] = torch.tensor(x)
            attn[r, L - len(x) :] = 1
        input_ids, attn = input_ids.to(dev), attn.to(dev)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)

        temps = torch.tensor([p.temperature for p in params], dtype=torch.float32)
        top_ps = torch.tensor([p.top_p for p in params], dtype=torch.float32)
        gens = [self._row_generator(p, s) for p, s in zip(params, sample_idx)]
        max_new = [p.max_new_tokens for p in params]
        min_new = [p.min_new_tokens for p in params]
        eos_idx = torch.tensor(sorted(self.eos_ids), dtype=torch.long)
        want_lp = any(p.logprobs for p in params)

        out_tokens: list[list[int]] = [[] for _ in range(B)]
        out_lps: list[list[float]] = [[] for _ in range(B)]
        finish: list[str | None] = [None] * B
        active = list(range(B))  # original row index of each current batch row

        cache = DynamicCache()
        # Rows with the same prompt (n samples of one prompt, agents of one
        # superstep that received the same messages) share one prefill: the
        # unique prompts are encoded once and their KV rows copied, as a server
        # with prefix caching would do.
        first: dict[tuple[int, ...], int] = {}
        uniq: list[int] = []
        inverse: list[int] = []
        for r, x in enumerate(prompt_ids):
            k = tuple(x)
            if k not in first:
                first[k] = len(uniq)
                uniq.append(r)
            inverse.append(first[k])
        shared = len(uniq) < B
        self.prefill_rows += len(uniq)
        uniq_ids = [prompt_ids[r] for r in uniq]
        common = _common_prefix(uniq_ids) if len(uniq) > 1 else 0
        common = min(common, min(len(x) for x in uniq_ids) - 1)  # every row keeps a token of its own
        if common >= self.min_shared_prefix:
            # The distinct prompts start alike (the agents of a step share their system prompt and
            # tool schemas): that prefix is encoded once, its KV rows copied, then each prompt's own
            # rest follows, left-padded after the prefix, so the batch pays the shared part once.
            logits, cache, attn, last_pos = self._prefill_shared_prefix(uniq_ids, common, cache)
            self.prefix_tokens_saved += common * (len(uniq) - 1)
            if shared:
                inv = torch.tensor(inverse)
                cache.batch_select_indices(inv.to(dev))
                logits = logits.index_select(0, inv)
                attn = attn.index_select(0, inv.to(dev))
                last_pos = last_pos.index_select(0, inv.to(dev))
        else:
            u = torch.tensor(uniq, device=dev) if shared else None
            # Only the last position's logits are needed: computing the vocabulary
            # projection for every prompt token would dominate the prefill.
            out = self.model(
                input_ids=input_ids[u] if shared else input_ids,
                attention_mask=attn[u] if shared else attn,
                position_ids=pos[u] if shared else pos,
                past_key_values=cache,
                use_cache=True,
                **self._keep_last,
            )
            logits = out.logits[:, -1, :].float().cpu()
            cache = out.past_key_values
            if shared:
                inv = torch.tensor(inverse)
                cache.batch_select_indices(inv.to(dev))
                logits = logits.index_select(0, inv)
            last_pos = pos[:, -1:]
        step = 0
        while active:
            step += 1
            rows_t = torch.tensor(active)
            raw = logits
            young = [b for b, r in enumerate(active) if len(out_tokens[r]) < min_new[r]]
            if young and len(eos_idx):
                logits = logits.clone()
                logits[torch.tensor(young).unsqueeze(1), eos_idx.unsqueeze(0)] = float("-inf")
            next_tok, lp = self._sample(
                logits, temps[rows_t], top_ps[rows_t], [gens[r] for r in active], want_lp, raw
            )
            keep: list[int] = []
            for b, r in enumerate(active):
                t = int(next_tok[b])
                out_tokens[r].append(t)
                if lp is not None:
                    out_lps[r].append(float(lp[b]))
                if t in self.eos_ids:
                    finish[r] = "stop"
                elif params[r].stop and self._hits_stop(out_tokens[r], params[r].stop):
                    finish[r] = "stop"
                elif len(out_tokens[r]) >= max_new[r]:
                    finish[r] = "length"
                else:
                    keep.append(b)
            if not keep:
                break
            if len(keep) < len(active):
                idx = torch.tensor(keep, device=dev)
                cache.batch_select_indices(idx)
                attn = attn.index_select(0, idx)
                last_pos = last_pos.index_select(0, idx)
                next_tok = next_tok.index_select(0, torch.tensor(keep))
                active = [active[b] for b in keep]
            attn = torch.cat([attn, torch.ones((len(active), 1), dtype=attn.dtype, device=dev)], dim=1)
            last_pos = last_pos + 1
            out = self.model(
                input_ids=next_tok.view(-1, 1).to(dev),
                attention_mask=attn,
                position_ids=last_pos,
                past_key_values=cache,
                use_cache=True,
                **self._keep_last,
            )
            cache = out.past_key_values
            logits = out.logits[:, -1, :].float().cpu()

        comps: list[Completion] = []
        for r in range(B):
            toks = out_tokens[r]
            body = [t for t in toks if t not in self.eos_ids]
            # One flat sequence of ids decodes to one string (a batch would give a list).
            text = cast(str, self.tokenizer.decode(body, skip_special_tokens=True))
            text, hit = truncate_at_stop(text, params[r].stop)
            comps.append(
                Completion(
                    text=text,
                    token_ids=list(toks),
                    logprobs=list(out_lps[r]) if params[r].logprobs else None,
                    finish_reason=finish[r] or "length",
                    usage=Usage(prompt_tokens=len(prompt_ids[r]), completion_tokens=len(toks)),
                )
            )
        return comps

    def _prefill_shared_prefix(
        self, rows: list[list[int]], common: int, cache: Any
    ) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
        """Prefill ``rows`` whose first ``common`` tokens agree: the prefix once, then the rests.

        Returns the last-position logits (on the CPU), the cache, the attention
        mask (prefix, then padding, then each row's rest) and each row's last position.
        """
        dev = self.device
        U = len(rows)
        pad = int(self.tokenizer.pad_token_id)
        prefix = torch.tensor([rows[0][:common]], dtype=torch.long, device=dev)
        out = self.model(
            input_ids=prefix,
            attention_mask=torch.ones_like(prefix),
            position_ids=torch.arange(common, device=dev).unsqueeze(0),
            past_key_values=cache,
            use_cache=True,
            **self._keep_last,
        )
        cache = out.past_key_values
        cache.batch_select_indices(torch.zeros(U, dtype=torch.long, device=dev))
        Ls = max(len(x) - common for x in rows)
        rest = torch.full((U, Ls), pad, dtype=torch.long)
        attn = torch.zeros((U, common + Ls), dtype=torch.long)
        attn[:, :common] = 1
        for i, x in enumerate(rows):
            tail = x[common:]
            rest[i, Ls - len(tail) :] = torch.tensor(tail)
            attn[i, common + Ls - len(tail) :] = 1
        rest, attn = rest.to(dev), attn.to(dev)
        pos = common + (attn[:, common:].cumsum(-1) - 1).clamp(min=0)
        out = self.model(
            input_ids=rest,
            attention_mask=attn,
            position_ids=pos,
            past_key_values=cache,
            use_cache=True,
            **self._keep_last,
        )
        return out.logits[:, -1, :].float().cpu(), out.past_key_values, attn, pos[:, -1:]

    def _hits_stop(self, toks: list[int], stop: Sequence[str]) -> bool:
        # Only the tail can complete a stop string; decode enough of it.
        span = max(len(s) for s in stop) + 8
        tail = self.tokenizer.decode(toks[-span:], skip_special_tokens=True)
        return any(s and s in tail for s in stop)

    @staticmethod
    def _sample(
        logits: torch.Tensor,
        temps: torch.Tensor,
        top_ps: torch.Tensor,
        gens: list[torch.Generator],
        want_lp: bool,
        raw: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-row greedy / temperature / nucleus sampling on a [B, V] logit matrix.

        Log-probabilities come from ``raw`` (the model's logits before any
        end-of-sequence suppression) when given."""
        B, V = logits.shape
        lp_all = torch.log_softmax(raw if raw is not None else logits, dim=-1) if want_lp else None
        greedy = temps <= 0
        choice = logits.argmax(dim=-1)
        if not bool(greedy.all()):
            t = torch.where(greedy, torch.ones_like(temps), temps).unsqueeze(1)
            probs = torch.softmax(logits / t, dim=-1)
            need_top_p = top_ps < 1.0
            if bool(need_top_p.any()):
                sp, si = probs.sort(dim=-1, descending=True)
                cum = sp.cumsum(dim=-1)
                # keep the smallest prefix whose mass reaches top_p (the first token always stays)
                drop = (cum - sp) >= top_ps.unsqueeze(1)
                sp = sp.masked_fill(drop & need_top_p.unsqueeze(1), 0.0)
                probs = torch.zeros_like(probs).scatter(1, si, sp)
            for b in range(B):
                if not bool(greedy[b]):
                    choice[b] = torch.multinomial(probs[b], 1, generator=gens[b])[0]
        lp = lp_all.gather(1, choice.view(-1, 1)).squeeze(1) if lp_all is not None else None
        return choice, lp
