"""``run`` / ``show`` against failing LLM servers and bad input: one line on stderr, the right exit status.

The LLM is a real OpenAI-compatible server on localhost (tests/agents/openai_server.py)
that answers 500, garbage, 400, or closes the connection; numbers out of range and
output paths that cannot be written fail before anything runs.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from societas.agents.llm import OpenAICompatibleLLM
from societas.topology.cli import app
from tests.agents.openai_server import OpenAITestServer

ROOT = Path(__file__).resolve().parents[2]
SOCIETY = ROOT / "examples" / "specs" / "society.yaml"
FAST_500 = ("status", 500, {"Retry-After": "0"})  # retried at once, even in a process of its own
MANY = 50  # enough faults for every retry of every prompt of a step


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy may intercept 127.0.0.1, and no API key may leak in from the environment."""
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients built in this process back off for milliseconds, not seconds, between attempts."""
    defaults = dict(OpenAICompatibleLLM.__init__.__kwdefaults__ or {})
    defaults.update(backoff_s=0.01, backoff_max_s=0.05)
    monkeypatch.setattr(OpenAICompatibleLLM.__init__, "__kwdefaults__", defaults)


def echo(messages: list[dict], body: dict) -> str:
    return "Final answer: 4"


def cli(*args: object, main=app):
    """The topology command line in-process; the result has .exit_code, .stdout, .stderr."""
    return CliRunner().invoke(main, [str(a) for a in args])


def error_line(result, code: int) -> str:
    """The one error line of a failed command (retry warnings of the LLM client may come before it)."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert type(result.exception) is SystemExit  # typer.Exit, not an escaped exception
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines, result.stderr
    assert all(line.startswith("WARNING") for line in lines[:-1]), result.stderr
    assert lines[-1].startswith("error: ")
    return lines[-1]


def pair_spec(tmp_path: Path, uri: str) -> Path:
    f = tmp_path / "pair.yaml"
    f.write_text(
        f'name: pair\nllms:\n  default: "{uri}"\nnodes:\n'
        "  - {id: writer, role: solver}\n  - {id: judge, role: aggregator}\nedges: [writer -> judge]\n"
    )
    return f


# --------------------------------------------------------- failing LLM servers
@pytest.mark.parametrize(
    "faults, needle",
    [
        ([FAST_500] * MANY, "HTTP 500"),
        ([("malformed",)] * MANY, "malformed JSON"),
        ([("status", 400)], "HTTP 400"),
        ([("drop",)] * MANY, "RemoteProtocolError"),
    ],
    ids=["500", "garbage", "400", "closed"],
)
@pytest.mark.usefixtures("fast_retries")
def test_a_failing_server_is_one_line_with_status_1(tmp_path: Path, faults: list, needle: str) -> None:
    with OpenAITestServer(echo, faults=faults) as srv:
        spec = pair_spec(tmp_path, f"openai:{srv.url}#test-model")
        result = cli("run", spec, "--task", "What is 2+2?", "--timeout", "5")
        url = srv.url
    line = error_line(result, 1)
    assert needle in line and f"{url}/chat/completions" in line and "'test-model'" in line
    assert "(the LLM of nodes writer, judge)" in line


def test_a_failing_server_through_llm_override_names_every_agent(tmp_path: Path) -> None:
    with OpenAITestServer(echo, faults=[("status", 400)]) as srv:
        result = cli("run", SOCIETY, "--task", "x", "--llm", f"openai:{srv.url}#m", "--json")
    line = error_line(result, 1)
    assert "(the LLM of nodes sceptic, intuitive, teacher, aggregator)" in line and "HTTP 400" in line
    assert result.stdout == ""


def test_an_error_body_with_line_breaks_stays_on_one_line(tmp_path: Path) -> None:
    body = {"error": {"message": "first line\nsecond line\x1b[2J"}}
    with OpenAITestServer(echo, faults=[("status", 422, None, body)]) as srv:
        result = cli("run", SOCIETY, "--task", "x", "--llm", f"openai:{srv.url}#m")
    line = error_line(result, 1)
    assert "first line second line" in line and "\x1b" not in result.stderr


@pytest.mark.usefixtures("fast_retries")
def test_nothing_listening_is_one_line_naming_the_url(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = pair_spec(tmp_path, f"openai:http://127.0.0.1:{port}/v1#ghost")
    result = cli("run", spec, "--task", "x", "--max-calls", "1", "--timeout", "1")
    line = error_line(result, 1)
    assert f"http://127.0.0.1:{port}/v1/chat/completions" in line and "ConnectError" in line


def test_the_societas_command_fails_the_same_way(tmp_path: Path) -> None:
    from societas.evolve.console import app as societas_app

    with OpenAITestServer(echo, faults=[FAST_500] * MANY) as srv:
        result = cli("run", SOCIETY, "--task", "x", "--llm", f"openai:{srv.url}#m", main=societas_app)
    assert "HTTP 500" in error_line(result, 1)


@pytest.mark.slow  # a process of its own imports torch: seconds on a small machine
def test_a_failing_server_leaves_no_traceback_in_a_real_process(tmp_path: Path) -> None:
    with OpenAITestServer(echo, faults=[FAST_500] * MANY) as srv:
        r = subprocess.run(
            [sys.executable, "-m", "societas.topology", "run", str(SOCIETY), "--task", "x"]
            + ["--llm", f"openai:{srv.url}#m"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={k: v for k, v in os.environ.items() if "proxy" not in k.lower()},
        )
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: LLM server gave no answer") and "HTTP 500" in last


# ------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "uri, needle",
    [
        ("nonsense", "unknown LLM"),
        ("openai:localhost:8000#m", "base_url must be an http(s) URL"),
        ("openai:http://127.0.0.1:9/v1", "openai URI must be openai:URL#MODEL"),
    ],
)
def test_a_bad_llm_is_one_line_with_status_2(uri: str, needle: str) -> None:
    line = error_line(cli("run", SOCIETY, "--task", "x", "--llm", uri), 2)
    assert needle in line


def test_a_spec_that_is_not_utf8_is_one_line_with_status_2(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("nodes:\n  - {id: a, role: solver}\n# caf\xe9\n".encode("latin-1"))
    for args in (["show", bad], ["run", bad, "--task", "x"]):
        line = error_line(cli(*args), 2)
        assert str(bad) in line


@pytest.mark.parametrize(
    "option, value, needle",
    [
        ("--max-tokens", "-5", "--max-tokens: must be at least 1, got -5"),
        ("--max-tokens", "0", "--max-tokens: must be at least 1, got 0"),
        ("--max-tokens", "many", "--max-tokens: expected an integer, got 'many'"),
        ("--max-calls", "-1", "--max-calls: must be at least 1, got -1"),
        ("--seed", "-3", "--seed: must be between 0 and"),
        ("--timeout", "0", "--timeout: must be a number of seconds above 0"),
        ("--timeout", "-1", "--timeout: must be a number of seconds above 0"),
        ("--timeout", "nan", "--timeout: must be a number of seconds above 0"),
        ("--timeout", "1e9", "--timeout: must be a number of seconds above 0 and at most 86400"),
    ],
)
def test_numbers_out_of_range_exit_2_before_anything_runs(option: str, value: str, needle: str) -> None:
    with OpenAITestServer(echo) as srv:
        result = cli("run", SOCIETY, "--task", "x", "--llm", f"openai:{srv.url}#m", option, value)
        assert srv.requests == []
    assert needle in error_line(result, 2)


def test_timeout_needs_an_openai_compatible_llm() -> None:
    line = error_line(
        cli(
            "run",
            SOCIETY,
            "--task",
            "x",
            "--llm",
            "function:tests.topology.test_cli:scripted",
            "--timeout",
            "3",
        ),
        2,
    )
    assert "--timeout: applies to OpenAI-compatible LLMs" in line


# ---------------------------------------------------------------- --timeout
@pytest.mark.parametrize("via", ["spec", "--llm"])
def test_timeout_bounds_each_request_of_the_run(tmp_path: Path, via: str) -> None:
    """The first request hangs for 30 s; with --timeout 0.5 it is abandoned and retried at once."""
    with OpenAITestServer(echo, faults=[("hang", 30.0)]) as srv:
        uri = f"openai:{srv.url}#test-model"
        args = ["--llm", uri] if via == "--llm" else []
        t0 = time.monotonic()
        result = cli("run", pair_spec(tmp_path, uri), "--task", "x", "--timeout", "0.5", "--json", *args)
        elapsed = time.monotonic() - t0
        assert len(srv.requests) == 3  # the abandoned one, its retry, the judge
    assert result.exit_code == 0, result.stderr
    assert '"output": "Final answer: 4"' in result.stdout
    assert (
        elapsed < 10
    )  # 0.5 s, a backoff under a second, two quick answers (and the default timeout is 60 s)


def test_llm_names_on_one_server_share_one_client(tmp_path: Path) -> None:
    with OpenAITestServer(echo) as srv:
        uri = f"openai:{srv.url}#test-model"
        spec = tmp_path / "two_names.yaml"
        spec.write_text(
            f'name: two\nllms:\n  a: "{uri}"\n  b: "{uri}"\nnodes:\n'
            "  - {id: x, role: solver, llm: a}\n  - {id: y, role: solver, llm: b}\n"
            "  - {id: z, role: aggregator, llm: a}\nedges: [x -> z, y -> z]\n"
        )
        result = cli("run", spec, "--task", "x", "--timeout", "5", "--json")
    assert result.exit_code == 0, result.stderr
    assert '"llm_batches": 2' in result.stdout  # x and y in one batched call, then z


# --------------------------------------------------------------- output paths
@pytest.mark.parametrize("option", ["--trace", "--render"])
def test_an_output_path_that_cannot_be_written_fails_before_the_run(tmp_path: Path, option: str) -> None:
    a_file = tmp_path / "plain.txt"
    a_file.write_text("not a directory")
    cases = {
        tmp_path: "is a directory",
        a_file / "out.jsonl": "is not a directory",
        a_file / "deeper" / "out.jsonl": "is not a directory",
    }
    with OpenAITestServer(echo) as srv:
        for path, needle in cases.items():
            result = cli("run", SOCIETY, "--task", "x", "--llm", f"openai:{srv.url}#m", option, path)
            line = error_line(result, 2)
            assert f"{option} {path}" in line and needle in line
        assert srv.requests == []  # nothing ran


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_output_in_a_read_only_directory_fails_before_the_run(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with OpenAITestServer(echo) as srv:
            result = cli(
                "run", SOCIETY, "--task", "x", "--llm", f"openai:{srv.url}#m", "--trace", ro / "t.jsonl"
            )
            assert srv.requests == []
    finally:
        ro.chmod(0o700)
    assert "is not writable" in error_line(result, 2)


def test_show_render_to_a_directory_fails_with_status_2(tmp_path: Path) -> None:
    line = error_line(cli("show", SOCIETY, "--render", tmp_path), 2)
    assert f"--render {tmp_path}: is a directory" in line


def test_missing_output_directories_are_still_created(tmp_path: Path) -> None:
    with OpenAITestServer(echo) as srv:
        trace = tmp_path / "new" / "dirs" / "t.jsonl"
        result = cli(
            "run", SOCIETY, "--task", "x", "--llm", f"openai:{srv.url}#m", "--trace", trace, "--json"
        )
    assert result.exit_code == 0, result.stderr
    assert len(trace.read_text().splitlines()) == 1 + 7
