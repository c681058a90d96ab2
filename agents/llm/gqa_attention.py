"""Grouped-query attention without repeating keys and values.

Hugging Face's SDPA path repeats the key/value heads of a grouped-query model
(SmolLM2: 9 query heads share 3 KV heads) whenever an attention mask is
given — which a left-padded batch always needs. During decoding that copies
the whole KV cache three times per layer per token, and on a CPU the copy,
not the arithmetic, sets the speed of batched generation. Here the query
heads of each group are folded into the query-length axis instead, so one
SDPA call per layer attends over the cache as stored. Unmasked calls go to
the stock implementation.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "societas_gqa_sdpa"


def gqa_sdpa_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    groups = getattr(module, "num_key_value_groups", 1)
    if attention_mask is None or groups == 1 or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    B, Hq, Lq, D = query.shape
    Hk = key.shape[1]
    # query head h belongs to KV head h // groups: [B, Hk, groups*Lq, D]
    q = query.reshape(B, Hk, groups * Lq, D)
    mask = attention_mask
    if mask.shape[1] != 1:
        raise ValueError("per-head attention masks are not supported by the grouped SDPA path")
    mask = (
        mask.unsqueeze(2).expand(B, 1, groups, Lq, mask.shape[-1]).reshape(B, 1, groups * Lq, mask.shape[-1])
    )
    out = torch.nn.functional.scaled_dot_product_attention(
        q, key, value, attn_mask=mask, dropout_p=dropout if module.training else 0.0, scale=scaling
    )
    out = out.reshape(B, Hq, Lq, D).transpose(1, 2).contiguous()
    return out, None


AttentionInterface.register(NAME, gqa_sdpa_attention_forward)
AttentionMaskInterface.register(NAME, sdpa_mask)


def use_gqa_sdpa(model: torch.nn.Module) -> bool:
    """Switch a grouped-query model to this attention; False when it does not apply."""
    cfg = getattr(model, "config", None)
    if cfg is None:
        return False
    heads, kv = getattr(cfg, "num_attention_heads", None), getattr(cfg, "num_key_value_heads", None)
    if not heads or not kv or heads == kv or getattr(cfg, "_attn_implementation", None) not in ("sdpa", None):
        return False
    # A transformers PreTrainedModel method; other modules lack it.
    set_attn_implementation = getattr(model, "set_attn_implementation", None)
    if set_attn_implementation is None:
        return False
    try:
        set_attn_implementation(NAME)
    except (ValueError, AttributeError):
        return False
    return True
