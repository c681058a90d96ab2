"""A prompt that ends with the assistant's message is continued, not answered anew."""

from __future__ import annotations

from societas.agents.llm.base import render_with_tokenizer


def test_a_final_assistant_message_is_continued(embedded_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(embedded_dir), local_files_only=True)
    question = [{"role": "user", "content": "Give the line."}]
    fresh = render_with_tokenizer(tok, question)
    started = render_with_tokenizer(tok, [*question, {"role": "assistant", "content": "weight ="}])
    # The started answer is the fresh prompt plus the answer's beginning, with nothing after it.
    assert started == fresh + "weight ="
    assert started.count("<|im_start|>assistant") == 1
