"""Every attack class a hostile candidate program tries, run for real against the DEFAULT sandbox.

LLM-written programs are hostile input. Each test below runs one attack the
way such a program would, through ``Sandbox()`` with no backend named (what
every caller of the project gets), and checks both that it was contained and
that the result reports the right reason. CI runs this file with
``SOCIETAS_REQUIRE_BWRAP=1``; the default backend never falls back to an
unconfined one, so these tests fail rather than skip when bubblewrap cannot
run.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from societas.agents.sandbox import Sandbox, SandboxResult

from .host_processes import assert_no_survivors, src

REPO_ROOT = Path(__file__).resolve().parents[2]


def attack(code: str, *, args: list[str] = (), **limits) -> SandboxResult:  # type: ignore[assignment]
    result = Sandbox(**limits).run(src(code), args=list(args))
    assert result.backend == "bwrap", "the default sandbox must isolate"
    return result


# --- network: TCP and DNS ---------------------------------------------------------------------


def test_tcp_to_a_local_service_is_blocked():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]
    try:
        # The same connection from the host works, so a refusal inside is the sandbox's doing.
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
        result = attack(
            """
            import socket, sys
            try:
                socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3)
                print("CONNECTED")
            except OSError as exc:
                print("BLOCKED", type(exc).__name__)
            """,
            args=[str(port)],
        )
    finally:
        server.close()
    assert result.ok, result.stderr
    assert result.stdout.startswith("BLOCKED"), result.stdout


def test_dns_resolution_is_blocked():
    code = """
        import socket
        try:
            print("RESOLVED", socket.getaddrinfo("pypi.org", 443)[0][4][0])
        except OSError as exc:
            print("BLOCKED", type(exc).__name__)
        """
    result = attack(code)
    assert result.ok, result.stderr
    assert result.stdout.startswith("BLOCKED socket.gaierror") or result.stdout.startswith("BLOCKED gaierror")


# --- file system: read and write outside -----------------------------------------------------------


def test_files_outside_cannot_be_read(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2-societas")
    secret.chmod(0o644)
    targets = ["/etc/shadow", str(secret), str(REPO_ROOT / "pyproject.toml"), str(Path.home() / ".bashrc")]
    result = attack(
        """
        import json, sys
        seen = {}
        for path in sys.argv[1:]:
            try:
                seen[path] = open(path).read()[:40]
            except OSError as exc:
                seen[path] = type(exc).__name__
        print(json.dumps(seen))
        """,
        args=targets,
    )
    assert result.ok, result.stderr
    seen = json.loads(result.stdout)
    assert set(seen) == set(targets)
    for path, outcome in seen.items():
        assert outcome in ("FileNotFoundError", "PermissionError"), (path, outcome)
    assert "hunter2" not in result.stdout


def test_files_outside_cannot_be_written(tmp_path):
    marker = uuid.uuid4().hex
    targets = [
        f"/root/societas-probe-{marker}",
        f"/tmp/societas-probe-{marker}",
        str(tmp_path / f"probe-{marker}"),
        str(REPO_ROOT / f"probe-{marker}"),
        f"/etc/societas-probe-{marker}",
    ]
    result = attack(
        """
        import sys
        for path in sys.argv[1:]:
            try:
                open(path, "w").write("pwned")
            except OSError:
                pass
        print("done")
        """,
        args=targets,
    )
    assert result.ok, result.stderr
    for path in targets:
        assert not os.path.exists(path), f"the sandboxed program created {path}"


# --- the caller: killing it through /proc ---------------------------------------------------------------


def test_the_caller_cannot_be_killed_through_proc():
    marker = f"societas-bystander-{uuid.uuid4().hex}"
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        result = attack(
            """
            import os, signal
            sent = []
            for name in os.listdir("/proc"):
                if name.isdigit() and int(name) not in (os.getpid(), 1):
                    try:
                        os.kill(int(name), signal.SIGKILL)
                        sent.append(int(name))
                    except OSError:
                        pass
            # Also the pids the host uses: the caller, its parent, the bystander.
            for pid in map(int, os.environ.get("TARGETS", "").split()):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            print("survived the attempt")
            """,
        )
        time.sleep(0.2)
        assert bystander.poll() is None, "a host process was killed from inside the sandbox"
    finally:
        bystander.kill()
        bystander.wait()
    # We are still here (the caller lives) and the run was reported normally.
    assert result.ok, result.describe() + result.stderr
    assert result.stdout == "survived the attempt\n"


def test_the_program_cannot_kill_its_launcher():
    result = attack(
        """
        import os
        for pid in (1, os.getppid()):
            try:
                os.kill(pid, 9)
                print("sent", pid)
            except OSError as exc:
                print("refused", pid, type(exc).__name__)
        print("still here")
        """
    )
    assert result.ok, result.describe() + result.stderr
    assert result.stdout.endswith("still here\n")
    assert result.sandbox_killed_by is None


# --- processes: fork bomb and detached daemon ------------------------------------------------------------


def test_fork_bomb_is_limited_and_cleaned_up():
    marker = f"societas-forkbomb-{uuid.uuid4().hex}"
    result = attack(
        """
        import os, time
        made = 0
        for _ in range(2000):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            made += 1
        print(made)
        """,
        args=[marker],
        max_processes=32,
        timeout_s=20,
    )
    assert result.ok, result.describe() + result.stderr
    assert 10 <= int(result.stdout) <= 31  # the program itself plus its children: at most 32
    assert_no_survivors(marker)


def test_detached_daemon_does_not_outlive_the_run():
    marker = f"societas-daemon-{uuid.uuid4().hex}"
    result = attack(
        """
        import os, sys
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", sys.argv[1]])
            os._exit(0)
        os.wait()
        print("detached")
        """,
        args=[marker],
    )
    assert result.ok and result.stdout == "detached\n", result.describe() + result.stderr
    assert_no_survivors(marker)


# --- disk, environment, output, memory, time ------------------------------------------------------------


@pytest.mark.parametrize("shape", ["one-file", "many-files"])
def test_disk_fill_is_stopped_at_the_scratch_quota(shape, tmp_path):
    code = {
        "one-file": """
            with open("fill", "wb") as handle:
                while True:
                    handle.write(b"x" * (1 << 20))
            """,
        "many-files": """
            i = 0
            while True:
                open(f"fill{i}", "wb").write(b"x" * (1 << 20))
                i += 1
            """,
    }[shape]
    started = time.monotonic()
    result = Sandbox(scratch_mb=32, max_file_mb=64, scratch_root=str(tmp_path)).run(src(code))
    assert result.backend == "bwrap"
    assert result.killed_by == "disk", result.describe() + result.stderr[-300:]
    assert result.describe() == "scratch disk quota 32 MB exceeded"
    assert not result.ok and time.monotonic() - started < 10
    assert list(tmp_path.iterdir()) == []  # nothing left on the host


def test_input_files_count_against_the_quota_and_fit_when_small():
    box = Sandbox(scratch_mb=4)
    fits = box.run("print(len(open('data.bin','rb').read()))", files={"data.bin": b"x" * (1 << 20)})
    assert fits.ok and fits.stdout == f"{1 << 20}\n"


def test_environment_secrets_do_not_reach_the_program(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-hunter2-societas")
    result = attack(
        """
        import os
        leaked = [k for k, v in os.environ.items() if "hunter2" in v]
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    if b"hunter2" in open(f"/proc/{pid}/environ", "rb").read():
                        leaked.append(pid)
                except OSError:
                    pass
        print(leaked)
        """
    )
    assert result.ok and result.stdout == "[]\n", result.stdout + result.stderr


def test_output_flood_is_truncated_and_said_so():
    result = attack(
        """
        import sys
        chunk = "x" * 65536
        for _ in range(800):  # 50 MB
            sys.stdout.write(chunk)
        print("END")
        """,
        max_output_bytes=10_000,
        timeout_s=60,
    )
    assert result.ok and result.truncated
    assert len(result.stdout) < 10_200 and result.stdout.endswith("END\n")
    assert result.describe() == "exit status 0 (output truncated to 10000 bytes per stream)"


def test_memory_bomb_is_killed_and_reported():
    result = attack("blob = bytearray(4 * 1024 ** 3)\n", memory_mb=256)
    assert result.killed_by == "memory" and result.describe() == "memory limit 256 MB exceeded"


def test_endless_program_is_killed_at_the_timeout():
    started = time.monotonic()
    result = attack("while True:\n    pass\n", timeout_s=1.0)
    assert result.killed_by == "timeout" and result.describe() == "timeout after 1.0 s"
    assert time.monotonic() - started < 1.0 + 5.0
