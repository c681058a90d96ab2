"""Shared fixtures: the embedded model (loaded once per session) and a tiny
randomly initialised Llama that shares its tokenizer (fast, for exact checks)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def embedded_dir():
    from societas.agents.embedded import prepare

    return prepare()


@pytest.fixture(scope="session")
def embedded_llm():
    from societas.agents.llm import load_llm

    return load_llm("embedded")


@pytest.fixture(scope="session")
def tiny_llm(embedded_dir):
    """A 2-layer Llama with random weights and the embedded model's tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from societas.agents.llm.transformers_llm import TransformersLLM

    tok = AutoTokenizer.from_pretrained(str(embedded_dir), local_files_only=True)
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(cfg)
    return TransformersLLM(model, tok, device="cpu", name="tiny")
