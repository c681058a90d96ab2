"""The README's vLLM server line, run as written: ``vllm serve MODEL``, then
``load_llm("openai:http://HOST:8000/v1#MODEL")`` answers through it.

The command and the URI are read from the README (the test fails if either
is no longer there, so the two stay together) and filled in with the
embedded model's directory and a free port on 127.0.0.1; the only options
added keep the server small and quick (eager mode, a 1 GiB KV cache,
2,048 tokens of context). Nothing is downloaded: the model is local and the
hub is set offline. The server starts in its own process group, and the
teardown stops the whole group (SIGTERM, then SIGKILL) and checks that none
of its processes is left.

Like the slow tests of ``test_vllm.py``, this one is skipped where vLLM is
absent, except under ``SOCIETAS_REQUIRE_VLLM=1`` (``make test-vllm``), where
a missing or broken vLLM fails it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from societas.agents import load_llm
from societas.agents.llm.base import SamplingParams

README = Path(__file__).resolve().parents[2] / "README.md"
START_TIMEOUT_S = 300.0  # start-up took 30-75 s on 2 shared cores (three processes import vLLM)
STOP_TIMEOUT_S = 30.0
# Options for the test only: small and quick on a CPU, same engine settings as test_vllm.py.
SMALL = ["--max-model-len", "2048", "--enforce-eager", "--kv-cache-memory-bytes", str(1 << 30), "--seed", "0"]


def readme_server_line() -> tuple[str, str]:
    """The README's server command and the URI it tells users to load."""
    text = README.read_text()
    command = re.search(r"`(vllm serve MODEL)`", text)
    uri = re.search(r"`(openai:http://HOST:8000/v1#MODEL)`", text)
    assert command and uri, f"README no longer has `vllm serve MODEL` and its URI: update {__file__}"
    return command.group(1), uri.group(1)


def require_vllm() -> None:
    """Skip where vLLM is absent — unless SOCIETAS_REQUIRE_VLLM=1 (``make test-vllm``),
    where a missing or broken vLLM must fail instead of skipping."""
    if os.environ.get("SOCIETAS_REQUIRE_VLLM") == "1":
        import vllm  # noqa: F401
    else:
        pytest.importorskip("vllm")


def executable(name: str) -> str:
    """``name`` from this interpreter's environment (``make test-vllm`` does not activate it), else from PATH."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    assert found, f"no `{name}` command next to {sys.executable} or on PATH"
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = 40) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``, read from /proc."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(entry.name))
    return found


def stop(proc: subprocess.Popen[bytes]) -> list[int]:
    """Stop the server and its workers; returns the pids still alive afterwards (none, normally)."""
    pgid = proc.pid  # start_new_session=True: the server leads its own group
    if proc.poll() is None:
        proc.terminate()  # vLLM shuts its engine and worker processes down on SIGTERM
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
    deadline = time.monotonic() + 5.0
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if group_members(pgid):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(STOP_TIMEOUT_S)
        deadline = time.monotonic() + 5.0
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
    return group_members(pgid)


@pytest.fixture
def vllm_server(embedded_dir, tmp_path) -> Iterator[tuple[str, str]]:
    """``vllm serve`` on the embedded model, as the README gives it; yields (README's URI filled in, model)."""
    require_vllm()
    command, uri = readme_server_line()
    model, port = str(embedded_dir), free_port()
    argv = shlex.split(command)
    argv = [executable(argv[0]), *[model if a == "MODEL" else a for a in argv[1:]]]
    argv += ["--host", "127.0.0.1", "--port", str(port), *SMALL]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    out, err = tmp_path / "server.stdout", tmp_path / "server.stderr"
    with out.open("wb") as fo, err.open("wb") as fe:
        proc = subprocess.Popen(
            argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"`{shlex.join(argv)}` exited with {proc.returncode} before it was ready.\n"
                    f"stderr (tail):\n{tail(err)}\nstdout (tail):\n{tail(out, 15)}"
                )
            if time.monotonic() - t0 > START_TIMEOUT_S:
                pytest.fail(
                    f"`{shlex.join(argv)}` was not ready after {START_TIMEOUT_S:.0f} s.\n"
                    f"stderr (tail):\n{tail(err)}\nstdout (tail):\n{tail(out, 15)}"
                )
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        print(f"vllm serve ready in {time.monotonic() - t0:.1f} s")
        filled = uri.replace("HOST", "127.0.0.1").replace(":8000/", f":{port}/").replace("MODEL", model)
        yield filled, model
    finally:
        left = stop(proc)
        assert not left, f"processes of the vLLM server outlived it: {left}"


@pytest.mark.slow
def test_readme_vllm_serve_answers_through_load_llm(vllm_server):
    uri, model = vllm_server
    assert uri.startswith("openai:http://127.0.0.1:") and uri.endswith(f"/v1#{model}")
    llm = load_llm(uri, shared=False)
    try:
        ((c,),) = llm.generate(["What is 2+2?"], SamplingParams(temperature=0, max_new_tokens=16))
    finally:
        llm.close()
    assert c.text.strip(), c
    assert c.finish_reason in ("stop", "length")
    assert c.usage.prompt_tokens > 0 and 0 < c.usage.completion_tokens <= 16, c.usage
