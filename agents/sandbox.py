"""Run untrusted Python source in a contained child process.

societas executes code it did not write: programs an LLM generated, unit tests
for them, and programs an evolutionary search mutated. This module runs such
source in a separate process and returns what happened as a
:class:`SandboxResult`; it never runs anything in the caller's interpreter.

Threat model
------------
The code is assumed to be *buggy or careless, possibly adversarial*: it may
loop forever, exhaust memory, fork without bound, flood its output, read the
parent's environment (API keys), write over files, or reach the network. The
sandbox must contain all of that and always return within the wall-clock
limit (plus a small grace period). It is **not** a defence against kernel
exploits: there is no seccomp filter, and the program shares the host kernel.
Disk use inside the scratch directory is bounded per file
(``RLIMIT_FSIZE``), not in total.

How a run works
---------------
The source is written as ``main.py`` into a fresh scratch directory (together
with ``files``); the child runs with that directory as its working directory
and the directory is deleted afterwards. The child is a small launcher (the
same interpreter, started with ``-I -S``) that applies resource limits with
``setrlimit`` *inside* the sandbox, forks, executes the program, waits for it
and reports its exact wait status and peak memory over a private pipe; that is
how a program killed by a signal is told apart from one that merely exited
with status ``128 + n``. The launcher's own start is the proof that the
sandbox came up: if it never reports, the sandbox failed to start and
:class:`SandboxError` is raised with the reason.

Limits applied to the program in every backend: ``RLIMIT_AS`` (address space,
``memory_mb``), ``RLIMIT_NPROC`` (tasks, ``max_processes``), ``RLIMIT_CPU``
(a backstop should the wall-clock kill fail), ``RLIMIT_FSIZE``
(``max_file_mb``) and ``RLIMIT_CORE = 0``. The wall-clock timeout kills the
whole process group (``start_new_session`` + ``killpg``); output is read by
the parent as it arrives, so large output cannot deadlock, and only the first
and last bytes up to ``max_output_bytes`` are kept. The environment is built
from scratch: ``PATH``, ``HOME``, ``LANG``, ``PYTHONDONTWRITEBYTECODE``,
``PYTHONHASHSEED`` (``PYTHONPATH`` when ``pythonpath`` is given) and the
``env`` passed explicitly; nothing of the parent's environment is inherited.
The clean environment is handed to bubblewrap itself, which passes it through
unchanged; this is equivalent to ``--clearenv`` plus ``--setenv`` but keeps
values out of the (world-readable) command line.

Backends and what each guarantees
---------------------------------
``bwrap`` (bubblewrap, preferred)
    New network, PID, IPC, UTS and cgroup namespaces: no network at all
    (unless ``allow_network``), the program sees only its own processes, and
    when the namespace's first process dies the kernel kills every process in
    it, so nothing survives a run. The file system is a fresh root holding
    read-only binds of ``/usr`` (and ``/bin``, ``/lib*``), a minimal ``/etc``,
    the interpreter's prefixes (the virtual environment and its base Python,
    bound at the same paths so ``pyvenv.cfg`` resolves), the ``pythonpath``
    directories and ``ro_binds``; a private ``/proc``, ``/dev``, size-limited
    tmpfs ``/tmp`` and ``/dev/shm``; and the scratch directory bound
    read-write at ``/sandbox``. The new root itself is remounted read-only.
    Nothing else of the host is visible.

    ``RLIMIT_NPROC`` counts tasks per *real user*, and the kernel never
    enforces it for uid 0. Two modes make it hold:

    * ``setuid`` (when the parent runs as root): bubblewrap runs privileged,
      without a user namespace, keeping only ``CAP_SETUID``/``CAP_SETGID``;
      the launcher switches to a fresh, otherwise unused uid before limiting
      and executing the program, so the program runs unprivileged and its
      task count starts at zero. Consequences: the interpreter, the
      ``pythonpath`` directories and ``ro_binds`` must be readable by
      "others" (mode ``o+rx``); and the program may create unprivileged user
      namespaces of its own, which widens the kernel surface it can reach but
      grants nothing over the host's files or network.
    * ``userns`` (when the parent is not root): a new user namespace maps the
      caller's uid; the kernel counts ``RLIMIT_NPROC`` per user namespace, so
      the limit applies to this run alone. Nested user namespaces are
      disabled where bubblewrap supports it.

    When root cannot run bubblewrap privileged but user namespaces work, the
    ``userns`` mode is used and a warning says that the process limit is then
    not enforced (the PID namespace and the timeout still bound a fork bomb).

``rlimit`` (fallback)
    The same limits, new session, clean environment and scratch working
    directory, but no namespaces: the program can use the network, read
    whatever the calling user can read and write outside the scratch
    directory, and a process that leaves the session may outlive the run.
    For root the process limit is not enforced by the kernel. A WARNING is
    logged (once per process and reason) when this backend is used.

``auto`` picks ``bwrap`` when the binary is present and a trivial probe run
succeeds (checked once per process), else ``rlimit`` with a warning saying
why. Asking for ``backend="bwrap"`` where it cannot work raises
:class:`SandboxUnavailableError`.

Memory-limit kills are recognised from a ``MemoryError`` (or an allocator's
"cannot allocate memory") at the end of the standard error of a failed run,
or from a fatal signal while the program's peak resident memory was near the
limit. Note that ``RLIMIT_AS`` limits *address space*: libraries that reserve
large virtual regions (``import torch`` needs about 1 GB) need a matching
``memory_mb``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import grp
import json
import logging
import math
import os
import pwd
import random
import re
import selectors
import shutil
import signal as _signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

logger = logging.getLogger(__name__)

__all__ = [
    "SANDBOX_DIR",
    "SCRIPT_NAME",
    "BwrapStatus",
    "Sandbox",
    "SandboxError",
    "SandboxResult",
    "SandboxUnavailableError",
    "bwrap_available",
    "bwrap_status",
    "run_python",
]

SCRIPT_NAME = "main.py"
"""File name the source is written to inside the scratch directory."""

SANDBOX_DIR = "/sandbox"
"""Where the scratch directory appears (and the working directory) under bubblewrap."""

BackendName = Literal["auto", "bwrap", "rlimit"]
KilledBy = Literal["timeout", "memory", "signal"]

# How long to keep draining output after the program exited or was killed.
_DRAIN_GRACE_S = 2.0
# How long to wait for the killed process tree to be reaped before giving up.
_REAP_TIMEOUT_S = 10.0
# Uids handed to programs in setuid mode: above ordinary users, below nobody
# and systemd's dynamic users, inside the 0..65535 that rootless containers map.
_UID_RANGE = (40_000, 60_000)
# Peak RSS above this fraction of the memory limit makes a fatal signal count as a memory kill.
_NEAR_LIMIT_FRACTION = 0.75
_MEMORY_SIGNALS = frozenset({_signal.SIGKILL, _signal.SIGSEGV, _signal.SIGABRT, _signal.SIGBUS})
_MEMORY_PATTERN = re.compile(
    r"^\s*(?:\|\s*)?MemoryError\b|cannot allocate memory|std::bad_alloc|\bout of memory\b"
    r"|memory allocation (?:still )?failed",
    re.IGNORECASE | re.MULTILINE,
)
# Entries of /etc an interpreter and common libraries need (dynamic linker,
# names, time zone, DNS when allowed, TLS certificates). The rest stays hidden.
_ETC_ENTRIES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "host.conf",
    "resolv.conf",
    "gai.conf",
    "services",
    "protocols",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "alternatives",
    "mime.types",
    "os-release",
    "fonts",
)
_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Mount points the sandbox creates itself; host paths cannot be bound over them.
_RESERVED_TARGETS = ("/proc", "/dev", SANDBOX_DIR)

# The launcher runs inside the sandbox as ``python -I -S -c _LAUNCHER CONFIG``.
# It must stay stdlib-only and tiny: it becomes the parent of the program.
_LAUNCHER = r"""
import json, os, resource, sys
cfg = json.loads(sys.argv[1])
fd = cfg["status_fd"]
def report(**fields):
    try:
        os.write(fd, (json.dumps(fields) + "\n").encode())
    except OSError:
        pass
try:
    if cfg["uid"] is not None:
        os.setgroups([])
        os.setgid(cfg["uid"])
        os.setuid(cfg["uid"])
    for name, soft, hard in cfg["limits"]:
        kind = getattr(resource, name)
        cur_hard = resource.getrlimit(kind)[1]
        if cur_hard != resource.RLIM_INFINITY:
            hard = min(hard, cur_hard)
            soft = min(soft, hard)
        resource.setrlimit(kind, (soft, hard))
except (OSError, ValueError) as exc:
    report(event="setup_failed", error=type(exc).__name__ + ": " + str(exc))
    os._exit(125)
os.set_inheritable(fd, False)
report(event="started")
pid = os.fork()
if pid == 0:
    try:
        os.execve(cfg["argv"][0], cfg["argv"], os.environ)
    except OSError as exc:
        os.write(2, ("sandbox: cannot execute " + cfg["argv"][0] + ": " + str(exc) + "\n").encode())
    os._exit(127)
_, status, usage = os.wait4(pid, 0)
report(event="exited", status=status, maxrss_kb=usage.ru_maxrss)
if os.WIFSIGNALED(status):
    os._exit(128 + os.WTERMSIG(status))
os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
"""

_PREFIX_QUERY = "import json, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]))"


class SandboxError(RuntimeError):
    """The sandbox itself failed: the program could not be started or supervised."""


class SandboxUnavailableError(SandboxError):
    """The requested backend cannot run on this host (e.g. bubblewrap missing)."""


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    """What happened to one sandboxed run.

    ``returncode`` is the exit status when the program exited, ``-N`` when it
    died from signal ``N`` (the :mod:`subprocess` convention), and ``None``
    when the sandbox killed it for exceeding the wall-clock timeout.
    ``stdout``/``stderr`` hold at most ``max_output_bytes`` bytes of output
    each (the beginning and the end, with a marker where bytes were dropped);
    ``truncated`` says whether anything was dropped from either.
    """

    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    killed_by: KilledBy | None
    signal: int | None
    backend: str
    truncated: bool = False
    timeout_s: float | None = None
    memory_limit_mb: int | None = None
    max_rss_mb: float | None = None

    @property
    def ok(self) -> bool:
        """True when the program exited with status 0 and was not killed."""
        return self.returncode == 0 and self.killed_by is None

    def describe(self) -> str:
        """One line saying how the run ended, e.g. ``"timeout after 2.0 s"``."""
        if self.killed_by == "timeout":
            if self.signal == _signal.SIGXCPU:
                return "CPU time limit exceeded (SIGXCPU)"
            return f"timeout after {_format_seconds(self.timeout_s)} s"
        if self.killed_by == "memory":
            limit = f"{self.memory_limit_mb} MB " if self.memory_limit_mb is not None else ""
            return f"memory limit {limit}exceeded"
        if self.killed_by == "signal" or self.signal is not None:
            return f"killed by signal {self.signal} ({_signal_name(self.signal)})"
        return f"exit status {self.returncode}"


@dataclasses.dataclass(frozen=True)
class BwrapStatus:
    """Whether bubblewrap works here, in which mode, and if not, why not."""

    available: bool
    mode: Literal["setuid", "userns"] | None
    reason: str
    enforces_process_limit: bool
    executable: str | None = None
    features: frozenset[str] = dataclasses.field(default=frozenset(), repr=False)


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
            if path == "/" or _covered(path, _RESERVED_TARGETS):
                raise ValueError(f"{info.field_name} entry {entry!r} cannot be bound into the sandbox")
            checked.append(path)
        return tuple(checked)

    @field_validator("env")
    @classmethod
    def _check_env(cls, value: dict[str, str]) -> dict[str, str]:
        _validate_env(value, "env")
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
        stdin: str | bytes | None = None,
        env: Mapping[str, str] | None = None,
    ) -> SandboxResult:
        """Run ``source`` as ``main.py`` with ``args`` and return what happened.

        ``files`` are written next to it (relative paths, sub-directories
        allowed); ``stdin`` is fed to the program; ``env`` adds to (and
        overrides) the sandbox's environment for this run only.
        """
        if not isinstance(source, str):
            raise TypeError(f"source must be str, got {type(source).__name__}")
        files = dict(files or {})
        _validate_files(files)
        args = list(args)
        for index, arg in enumerate(args):
            if not isinstance(arg, str):
                raise TypeError(f"args[{index}] must be str, got {type(arg).__name__}")
        if stdin is not None and not isinstance(stdin, (str, bytes)):
            raise TypeError(f"stdin must be str, bytes or None, got {type(stdin).__name__}")
        run_env = dict(env or {})
        _validate_env(run_env, "env")

        backend, bwrap = self._choose_backend()
        python = self.python or _current_python()
        scratch = tempfile.mkdtemp(prefix="societas-sandbox-", dir=self.scratch_root)
        uid: int | None = None
        try:
            _write_scratch(scratch, source, files)
            if backend == "bwrap" and bwrap.mode == "setuid":
                uid = _reserve_uid()
                _chown_tree(scratch, uid)
            result = _execute(self, backend, bwrap, python, scratch, uid, args, stdin, run_env)
        finally:
            if uid is not None:
                _release_uid(uid)
            _remove_tree(scratch)
        logger.debug("sandbox run (%s): %s in %.2f s", result.backend, result.describe(), result.wall_s)
        return result

    def _choose_backend(self) -> tuple[str, BwrapStatus]:
        if self.backend == "rlimit":
            _warn_weak_containment("the rlimit backend was requested")
            return "rlimit", _NO_BWRAP
        status = bwrap_status()
        if status.available:
            return "bwrap", status
        if self.backend == "bwrap":
            raise SandboxUnavailableError(
                f"backend='bwrap' requested but bubblewrap cannot be used: {status.reason}"
            )
        _warn_weak_containment(status.reason)
        return "rlimit", status


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

_NO_BWRAP = BwrapStatus(available=False, mode=None, reason="not probed", enforces_process_limit=False)
_bwrap_lock = threading.Lock()
_bwrap_cached: BwrapStatus | None = None
_warned: set[str] = set()
_warn_lock = threading.Lock()


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


def _probe_bwrap() -> BwrapStatus:
    executable = shutil.which("bwrap")
    if executable is None:
        return BwrapStatus(False, None, "bubblewrap (bwrap) is not installed", False)
    features = _bwrap_features(executable)
    if "--perms" not in features:
        return BwrapStatus(False, None, f"{executable} is too old (needs --perms, bubblewrap >= 0.5)", False)
    modes: list[Literal["setuid", "userns"]] = ["setuid", "userns"] if os.geteuid() == 0 else ["userns"]
    failures = []
    probe = Sandbox(timeout_s=30.0, memory_mb=None, backend="rlimit")
    for mode in modes:
        candidate = BwrapStatus(True, mode, "", mode == "setuid" or os.geteuid() != 0, executable, features)
        scratch = tempfile.mkdtemp(prefix="societas-sandbox-probe-")
        uid = None
        try:
            _write_scratch(scratch, "import sys\nsys.exit(0)\n", {})
            if mode == "setuid":
                uid = _reserve_uid()
                _chown_tree(scratch, uid)
            result = _execute(probe, "bwrap", candidate, _current_python(), scratch, uid, [], None, {})
        except (SandboxError, OSError) as exc:
            failures.append(f"{mode} mode: {_one_line(str(exc))}")
            continue
        finally:
            if uid is not None:
                _release_uid(uid)
            _remove_tree(scratch)
        if result.ok:
            reason = f"bubblewrap works in {mode} mode"
            if not candidate.enforces_process_limit:
                reason += "; RLIMIT_NPROC is not enforced for uid 0, so max_processes does not hold"
                logger.warning(
                    "sandbox: bubblewrap runs in a user namespace as uid 0 here; the process limit "
                    "(max_processes) is not enforced, fork bombs are bounded only by the timeout"
                )
            return dataclasses.replace(candidate, reason=reason)
        failures.append(f"{mode} mode: {result.describe()}: {_one_line(result.stderr)}")
    return BwrapStatus(
        False, None, "bubblewrap cannot create its sandbox here (" + "; ".join(failures) + ")", False
    )


def _bwrap_features(executable: str) -> frozenset[str]:
    try:
        completed = subprocess.run(
            [executable, "--help"],
            capture_output=True,
            text=True,
            timeout=10,
            env={"PATH": "/usr/bin:/bin"},
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(re.findall(r"--[a-z][a-z0-9-]*", completed.stdout + completed.stderr))


def _warn_weak_containment(reason: str) -> None:
    with _warn_lock:
        if reason in _warned:
            return
        _warned.add(reason)
    logger.warning(
        "sandbox: using the rlimit backend (%s); containment is weaker: no network or file-system "
        "isolation, only resource limits, a new session and a clean environment",
        reason,
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
    stdin: str | bytes | None,
    run_env: dict[str, str],
) -> SandboxResult:
    """Start the launcher (under bubblewrap or bare), supervise it and build the result."""
    inside = backend == "bwrap"
    home = SANDBOX_DIR if inside else scratch
    if inside:
        # Only real paths are bound; resolving the directory (not the file) keeps
        # a venv's bin/python next to its pyvenv.cfg.
        python = _resolve_dir(python)
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
                "limits": _rlimits(config, backend, bwrap),
                "argv": [python, SCRIPT_NAME, *args],
            }
            command = [python, "-I", "-S", "-c", _LAUNCHER, json.dumps(launcher_cfg)]
            if inside:
                command = [*_bwrap_command(config, bwrap, python, scratch), "--", *command]
            stdin_source: Any = subprocess.DEVNULL
            if stdin is not None:
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
        outcome = _supervise(proc, status_read, config, kill_descendants=not inside, started=started)
    return _build_result(config, backend, proc.returncode, outcome)


def _reap_after_error(proc: subprocess.Popen, kill_descendants: bool) -> None:
    """Make sure an interrupted run leaves no process or pipe behind (no-op after a normal run)."""
    for stream in (proc.stdout, proc.stderr):
        if stream is not None and not stream.closed:
            stream.close()
    if proc.returncode is None:
        _kill_tree(proc.pid, kill_descendants=kill_descendants)
        try:
            proc.wait(timeout=_REAP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            logger.error("sandbox: process %d survived SIGKILL; leaving it to the system", proc.pid)


@dataclasses.dataclass
class _Outcome:
    stdout: _CappedBuffer
    stderr: _CappedBuffer
    events: list[dict[str, Any]]
    timed_out: bool
    wall_s: float


def _supervise(
    proc: subprocess.Popen, status_fd: int, config: Sandbox, *, kill_descendants: bool, started: float
) -> _Outcome:
    """Pump output and status until the process ends; kill its tree on timeout."""
    stdout = _CappedBuffer(config.max_output_bytes)
    stderr = _CappedBuffer(config.max_output_bytes)
    status = bytearray()
    sinks = {proc.stdout.fileno(): stdout.feed, proc.stderr.fileno(): stderr.feed, status_fd: status.extend}
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
                if _has_exited(proc.pid):
                    ended_at = now
                    # Stragglers (background children) die with the program.
                    _kill_tree(proc.pid, kill_descendants=kill_descendants)
                elif now >= deadline:
                    timed_out = True
                    ended_at = now
                    _kill_tree(proc.pid, kill_descendants=kill_descendants)
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
    return _Outcome(stdout, stderr, events, timed_out, wall)


def _build_result(
    config: Sandbox, backend: str, raw_returncode: int | None, outcome: _Outcome
) -> SandboxResult:
    events = {event.get("event"): event for event in outcome.events if isinstance(event, dict)}
    stderr_text = outcome.stderr.text()
    if "setup_failed" in events:
        raise SandboxError(f"sandbox launcher could not apply limits: {events['setup_failed'].get('error')}")
    if "started" not in events and not outcome.timed_out:
        raise SandboxError(
            f"the {backend} sandbox failed to start the program (status {raw_returncode}): "
            f"{_one_line(stderr_text) or 'no error output'}"
        )

    returncode: int | None
    sig: int | None = None
    killed_by: KilledBy | None = None
    max_rss_mb: float | None = None
    exited = events.get("exited")
    if outcome.timed_out:
        returncode = None
        killed_by = "timeout"
    elif exited is not None:
        status = int(exited["status"])
        max_rss_mb = float(exited.get("maxrss_kb", 0)) / 1024.0
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            returncode = -sig
        else:
            returncode = os.waitstatus_to_exitcode(status)
    else:
        # The launcher itself died (e.g. killed from outside); fall back to the child's status.
        returncode = raw_returncode
        if raw_returncode is not None and raw_returncode < 0:
            sig = -raw_returncode
        elif backend == "bwrap" and raw_returncode is not None and raw_returncode > 128:
            sig = raw_returncode - 128
            returncode = -sig

    if killed_by is None and sig is not None:
        killed_by = "timeout" if sig == _signal.SIGXCPU else "signal"
    if killed_by != "timeout" and returncode not in (0, None) and config.memory_mb is not None:
        tail = stderr_text[-8192:]
        near_limit = max_rss_mb is not None and max_rss_mb >= _NEAR_LIMIT_FRACTION * config.memory_mb
        if _MEMORY_PATTERN.search(tail) or (sig in _MEMORY_SIGNALS and near_limit):
            killed_by = "memory"

    return SandboxResult(
        returncode=returncode,
        stdout=outcome.stdout.text(),
        stderr=stderr_text,
        wall_s=outcome.wall_s,
        killed_by=killed_by,
        signal=sig,
        backend=backend,
        truncated=outcome.stdout.dropped > 0 or outcome.stderr.dropped > 0,
        timeout_s=config.timeout_s,
        memory_limit_mb=config.memory_mb,
        max_rss_mb=max_rss_mb,
    )


def _rlimits(config: Sandbox, backend: str, bwrap: BwrapStatus) -> list[tuple[str, int, int]]:
    """The (name, soft, hard) limits the launcher applies before executing the program."""
    limits: list[tuple[str, int, int]] = []
    if config.memory_mb is not None:
        limits.append(("RLIMIT_AS", config.memory_mb << 20, config.memory_mb << 20))
    # Multi-threaded programs burn CPU faster than wall time; this is only a backstop.
    cpu_s = math.ceil(config.timeout_s * max(1, os.cpu_count() or 1)) + 1
    limits.append(("RLIMIT_CPU", cpu_s, cpu_s + 1))
    limits.append(("RLIMIT_FSIZE", config.max_file_mb << 20, config.max_file_mb << 20))
    limits.append(("RLIMIT_CORE", 0, 0))
    if backend == "bwrap":
        # The launcher (and, in a user namespace, bubblewrap's init) count too.
        overhead = 1 if bwrap.mode == "setuid" else 2
        nproc = config.max_processes + overhead
        limits.append(("RLIMIT_NPROC", nproc, nproc))
    elif os.geteuid() != 0:
        # Without namespaces the count is global for the user: leave room for what already runs.
        nproc = _tasks_of_uid(os.getuid()) + config.max_processes + 1
        limits.append(("RLIMIT_NPROC", nproc, nproc))
    return limits


def _bwrap_command(config: Sandbox, bwrap: BwrapStatus, python: str, scratch: str) -> list[str]:
    """The bubblewrap command line (everything before ``--``) for one run."""
    assert bwrap.executable is not None and bwrap.mode is not None
    features = bwrap.features
    cmd = [bwrap.executable]
    if bwrap.mode == "userns":
        cmd += ["--unshare-user"]
        if "--disable-userns" in features:
            cmd += ["--disable-userns"]
    else:
        # Privileged bubblewrap (we are root) keeps only what the launcher needs to drop to its uid.
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    cmd += ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
    if not config.allow_network:
        cmd += ["--unshare-net"]
    cmd += ["--hostname", "sandbox", "--die-with-parent", "--new-session"]

    cmd += ["--ro-bind", "/usr", "/usr"]
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            cmd += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            cmd += ["--ro-bind", path, path]
    cmd += ["--perms", "0755", "--dir", "/etc"]
    for entry in _ETC_ENTRIES:
        path = f"/etc/{entry}"
        if os.path.lexists(path):
            cmd += ["--ro-bind-try", path, path]
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    size = ["--size", str(config.tmpfs_mb << 20)] if "--size" in features else []
    cmd += ["--perms", "1777", *size, "--tmpfs", "/tmp"]
    cmd += ["--perms", "1777", *size, "--tmpfs", "/dev/shm"]

    wanted = list(_interpreter_paths(python)) + list(config.pythonpath) + list(config.ro_binds)
    if bwrap.mode == "setuid":
        for path in list(config.pythonpath) + list(config.ro_binds):
            if os.stat(path).st_mode & 0o005 != 0o005:
                logger.warning(
                    "sandbox: %s is not readable by other users; the sandboxed program runs as an "
                    "unprivileged uid and will not be able to read it",
                    path,
                )
    host_trees = _host_system_trees()
    # Directories that already exist in the new root; others are created 0755 so
    # that an unprivileged uid can traverse them (bubblewrap would make them 0700).
    present = {"/etc", "/tmp", "/dev", "/proc"}
    for path in _minimal_bind_set(wanted):
        for ancestor in _ancestors(path):
            if ancestor not in present and not _covered(ancestor, host_trees):
                cmd += ["--perms", "0755", "--dir", ancestor]
                present.add(ancestor)
        cmd += ["--ro-bind", path, path]
        present.add(path)
    cmd += ["--bind", scratch, SANDBOX_DIR, "--chdir", SANDBOX_DIR]
    # The new root is a tmpfs owned by the sandbox user in a user namespace; freeze
    # it so the synthetic /etc and parent directories cannot be written (or filled).
    cmd += ["--remount-ro", "/"]
    return cmd


_prefix_cache: dict[str, tuple[str, ...]] = {}
_prefix_lock = threading.Lock()


def _interpreter_paths(python: str) -> tuple[str, ...]:
    """Directories that must be visible for ``python`` to start: its prefixes and bin dirs."""
    with _prefix_lock:
        if python in _prefix_cache:
            return _prefix_cache[python]
    if _resolve_dir(python) == _resolve_dir(sys.executable):
        prefixes = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    else:
        try:
            completed = subprocess.run(
                [python, "-I", "-c", _PREFIX_QUERY],
                check=False,
                capture_output=True,
                text=True,
                timeout=30,
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            )
            prefixes = json.loads(completed.stdout.strip().splitlines()[-1])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
            raise SandboxError(f"cannot ask interpreter {python!r} for its prefixes: {exc}") from exc
    paths = [os.path.dirname(os.path.abspath(python)), os.path.dirname(os.path.realpath(python))]
    paths += [p for p in prefixes if p]
    resolved = []
    for path in paths:
        real = os.path.realpath(path)
        if real == "/":
            logger.warning("sandbox: interpreter prefix is '/', not binding it")
            continue
        resolved.append(real)
    result = tuple(dict.fromkeys(resolved))
    with _prefix_lock:
        _prefix_cache[python] = result
    return result


def _host_system_trees() -> list[str]:
    """System directories bound whole from the host (so everything below them is visible)."""
    return ["/usr"] + [d for d in _SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]


def _minimal_bind_set(paths: Sequence[str]) -> list[str]:
    """Real paths to bind, without those already visible through /usr or another bind, parents first."""
    system = _host_system_trees()
    kept: list[str] = []
    for path in sorted({os.path.realpath(p) for p in paths}, key=lambda p: (p.count("/"), p)):
        if _covered(path, system) or _covered(path, kept):
            continue
        if _covered(path, _RESERVED_TARGETS):
            logger.warning("sandbox: not binding %s (reserved inside the sandbox)", path)
            continue
        kept.append(path)
    return kept


def _ancestors(path: str) -> list[str]:
    parts = PurePosixPath(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _covered(path: str, roots: Sequence[str]) -> bool:
    return any(_is_within(path, root) for root in roots)


def _is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


# ---------------------------------------------------------------------------
# Processes.


def _has_exited(pid: int) -> bool:
    """True once ``pid`` has terminated, without reaping it (its pgid stays reserved)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _kill_tree(pid: int, *, kill_descendants: bool) -> None:
    """SIGKILL the process group led by ``pid`` and, without namespaces, its descendants.

    Under bubblewrap killing the group kills bubblewrap; ``--die-with-parent``
    then takes down the PID namespace and everything in it.
    """
    if kill_descendants:
        for child in _descendants(pid):
            try:
                os.kill(child, _signal.SIGKILL)
            except ProcessLookupError:
                pass
    try:
        os.killpg(pid, _signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _tasks_of_uid(uid: int) -> int:
    """Tasks (threads) whose real uid is ``uid``: what RLIMIT_NPROC counts."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                total += int(fields["Threads"])
        except (OSError, KeyError, ValueError):
            continue
    return total


def _uids_in_use() -> set[int]:
    used: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as handle:
                for line in handle:
                    if line.startswith("Uid:"):
                        used.update(int(value) for value in line.split()[1:])
                        break
        except (OSError, ValueError):
            continue
    return used


def _id_mapped(ident: int, map_file: str) -> bool:
    try:
        with open(map_file) as handle:
            for line in handle:
                inside, _outside, count = (int(v) for v in line.split())
                if inside <= ident < inside + count:
                    return True
    except (OSError, ValueError):
        return True  # no user-namespace information: assume the full range
    return False


_reserved_uids: set[int] = set()
_uid_lock = threading.Lock()
_uid_random = random.SystemRandom()


def _reserve_uid() -> int:
    """Pick a uid (and equal gid) that no account or running process uses, and reserve it."""
    busy = _uids_in_use()
    with _uid_lock:
        for _ in range(1000):
            uid = _uid_random.randrange(*_UID_RANGE)
            if uid in busy or uid in _reserved_uids:
                continue
            if not (_id_mapped(uid, "/proc/self/uid_map") and _id_mapped(uid, "/proc/self/gid_map")):
                continue
            if _has_account(uid):
                continue
            _reserved_uids.add(uid)
            return uid
    raise SandboxError(f"no free uid in {_UID_RANGE[0]}..{_UID_RANGE[1]} to run the sandboxed program as")


def _release_uid(uid: int) -> None:
    with _uid_lock:
        _reserved_uids.discard(uid)


def _has_account(ident: int) -> bool:
    try:
        pwd.getpwuid(ident)
        return True
    except KeyError:
        pass
    try:
        grp.getgrgid(ident)
        return True
    except KeyError:
        return False


# ---------------------------------------------------------------------------
# Scratch directory.


def _validate_files(files: dict[str, Any]) -> None:
    for name, content in files.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"files key {name!r} must be a non-empty relative path")
        pure = PurePosixPath(name)
        if pure.is_absolute() or ".." in pure.parts or "\x00" in name:
            raise ValueError(f"files key {name!r} must be a relative path inside the scratch directory")
        if pure.parts == (SCRIPT_NAME,):
            raise ValueError(f"files key {name!r} collides with the program itself ({SCRIPT_NAME})")
        if not isinstance(content, (str, bytes)):
            raise TypeError(f"files[{name!r}] must be str or bytes, got {type(content).__name__}")


def _validate_env(env: Mapping[str, Any], what: str) -> None:
    for key, value in env.items():
        if not isinstance(key, str) or not key or "=" in key or "\x00" in key:
            raise ValueError(f"{what} key {key!r} is not a valid environment variable name")
        if not isinstance(value, str) or "\x00" in value:
            raise ValueError(f"{what}[{key!r}] must be a str without NUL bytes")


def _write_scratch(scratch: str, source: str, files: Mapping[str, str | bytes]) -> None:
    root = Path(scratch)
    (root / SCRIPT_NAME).write_text(source, encoding="utf-8")
    for name, content in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")


def _chown_tree(root: str, uid: int) -> None:
    os.lchown(root, uid, uid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, uid)


def _remove_tree(root: str) -> None:
    """Delete the scratch directory even if the program made parts of it read-only."""

    def make_writable_and_retry(function: Any, path: str, _exc: Any) -> None:
        parent = os.path.dirname(path)
        try:
            os.chmod(parent, stat.S_IRWXU)
            if os.path.isdir(path) and not os.path.islink(path):
                os.chmod(path, stat.S_IRWXU)
            function(path)
        except OSError as exc:
            logger.warning("sandbox: could not remove %s: %s", path, exc)

    if sys.version_info >= (3, 12):
        shutil.rmtree(root, onexc=make_writable_and_retry)
    else:
        shutil.rmtree(root, onerror=make_writable_and_retry)


# ---------------------------------------------------------------------------
# Small helpers.


class _CappedBuffer:
    """Keeps the first ~3/4 and the last ~1/4 of ``limit`` bytes of a stream, counting the rest."""

    def __init__(self, limit: int) -> None:
        self.tail_limit = limit // 4
        self.head_limit = limit - self.tail_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.tail_limit:
            self.tail += data
            if len(self.tail) > 2 * self.tail_limit:
                del self.tail[: len(self.tail) - self.tail_limit]

    @property
    def dropped(self) -> int:
        return max(0, self.total - len(self.head) - min(len(self.tail), self.tail_limit))

    def text(self) -> str:
        tail = bytes(self.tail[-self.tail_limit :]) if self.tail_limit else b""
        if self.dropped:
            marker = f"\n[... {self.dropped} bytes truncated by the sandbox ...]\n".encode()
            data = bytes(self.head) + marker + tail
        else:
            data = bytes(self.head) + tail
        return data.decode("utf-8", errors="replace")


def _resolve_dir(path: str) -> str:
    """``path`` with its directory resolved to a real path but its final component kept."""
    return os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(path))), os.path.basename(path))


def _current_python() -> str:
    if not sys.executable:
        raise SandboxError("sys.executable is empty; pass python= explicitly")
    return os.path.abspath(sys.executable)


def _signal_name(sig: int | None) -> str:
    if sig is None:
        return "unknown"
    try:
        return _signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    return f"{seconds:.1f}" if seconds >= 1 else f"{seconds:.2g}"


def _one_line(text: str, limit: int = 400) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    joined = " | ".join(lines[-5:])
    return joined if len(joined) <= limit else joined[: limit - 3] + "..."
