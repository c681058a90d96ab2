"""Shared fixtures: the embedded model (loaded once per session), a tiny
randomly initialised Llama that shares its tokenizer (fast, for exact checks),
and a headless Chromium for the HTML pages (``page``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def _share_cores() -> None:
    """Under pytest-xdist, give each worker its share of the cores: two workers with torch's
    default of one thread per core would oversubscribe the machine, and OpenMP's spinning
    threads then make a 1-second generation take 25. Subprocesses inherit the setting."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1:
        return
    share = str(max(1, (os.cpu_count() or 1) // workers))
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, share)
    import torch  # after the variables: its thread pools read them when they start

    torch.set_num_threads(int(share))


_share_cores()

# The CUDA paths on an emulated device run in a process of their own (tests/test_emulated_cuda.py
# starts it with this variable set): the emulation registers a device before the process's first
# backward pass, which a worker of this run has long had.
EMULATED_CUDA_ENV = "SOCIETAS_EMULATED_CUDA"
collect_ignore = [] if os.environ.get(EMULATED_CUDA_ENV) else ["emulated_cuda"]

# Screenshots the browser tests keep, to be looked at (ignored by git).
ARTIFACTS = Path(__file__).resolve().parents[1] / "build" / "test-artifacts"

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


@pytest.fixture(scope="session")
def tiny_dir(tiny_llm, tmp_path_factory):
    """The tiny Llama saved as a local model, by its URI (``hf:PATH``), for what loads a model by name."""
    d = tmp_path_factory.mktemp("tiny_model")
    tiny_llm.model.save_pretrained(d)
    tiny_llm.tokenizer.save_pretrained(d)
    return "hf:" + str(d)


def _chromium() -> str | None:
    return os.environ.get("SOCIETAS_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="session")
def browser():
    """Debian's headless Chromium driven by playwright (``make test`` installs it where it can);
    skipped with the reason where it is missing."""
    exe = _chromium()
    if exe is None:
        pytest.skip("no chromium on this machine (Debian's chromium package; make test installs it as root)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install playwright; it is in the test extra)")
    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
    except Exception:
        pw.stop()
        raise
    yield b
    b.close()
    pw.stop()


class Page:
    """A fresh page with every console error and uncaught exception collected in ``errors``
    and every request off the local file system refused (the pages must work offline)."""

    def __init__(self, context) -> None:
        self.context = context
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page = context.new_page()
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))

        def route(r) -> None:
            url = r.request.url
            if url.startswith(("file:", "data:", "blob:", "about:")):
                r.continue_()
            else:
                self.requests.append(url)
                r.abort()

        context.route("**/*", route)

    def open(self, path: str | Path) -> None:
        self.page.goto(Path(path).resolve().as_uri())
        self.page.wait_for_load_state("load")

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        out = ARTIFACTS / name
        self.page.screenshot(path=str(out), full_page=False)
        return out


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    p = Page(ctx)
    yield p
    ctx.close()
