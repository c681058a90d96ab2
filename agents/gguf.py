"""Convert a GGUF file into an ordinary transformers model directory.

Kept apart from :mod:`societas.agents.embedded` (which imports it only when a
conversion runs) so that locating the converted embedded model imports
neither torch nor transformers.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from .embedded import MODEL_ID

log = logging.getLogger(__name__)

__all__ = ["convert_gguf"]


def convert_gguf(gguf: Path, out_dir: Path) -> Path:
    """Write an HF model directory from a GGUF file.

    transformers refuses ``save_pretrained`` on a GGUF-loaded model, so the
    state dict is written with safetensors directly; a tied ``lm_head`` is left
    out (it is the embedding matrix) so that the directory loads everywhere.
    The directory appears atomically (written aside, then renamed).
    """
    t0 = time.perf_counter()
    log.info("converting %s into %s (once)", gguf.name, out_dir)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, local_files_only=True, dtype=torch.float32
    )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out_dir.name + ".", dir=out_dir.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; other users and tools read the model too
    try:
        state = model.state_dict()
        if getattr(model.config, "tie_word_embeddings", False):
            state = {k: v for k, v in state.items() if k != "lm_head.weight"}
        state = {k: v.detach().contiguous().clone() for k, v in state.items()}
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        cfg = model.config.to_dict()
        cfg.pop("quantization_config", None)
        cfg["_name_or_path"] = MODEL_ID
        cfg["architectures"] = [type(model).__name__]
        cfg["torch_dtype"] = "float32"
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
        model.generation_config.to_json_file(str(tmp / "generation_config.json"))
        tok.save_pretrained(str(tmp))
        for f in tmp.iterdir():
            os.chmod(f, 0o644)
        (tmp / ".complete").write_text(json.dumps({"source": gguf.name, "seconds": time.perf_counter() - t0}))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("converted in %.1f s", time.perf_counter() - t0)
    return out_dir
