"""The bubblewrap backend: what a sandbox sees, as a ``bwrap`` command line.

:func:`bwrap_command` builds the command that starts the launcher in fresh
network, PID, IPC, UTS and cgroup namespaces (and a user namespace in
``userns`` mode) over a new, read-only root holding only ``/usr`` and the
system library directories, a minimal ``/etc``, the interpreter's prefixes,
the launcher, the ``pythonpath`` directories and ``ro_binds``, private
``/proc``, ``/dev``, ``/tmp`` and ``/dev/shm``, and the scratch directory at
:data:`SANDBOX_DIR`. :class:`BwrapStatus` records whether bubblewrap works
here and in which mode (probing it needs a whole sandboxed run, so the probe
lives with :class:`~societas.agents.sandbox.Sandbox`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import subprocess
import threading
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Literal

from .results import SandboxError

if TYPE_CHECKING:
    from .core import Sandbox

logger = logging.getLogger(__name__)

__all__ = [
    "NO_BWRAP",
    "RESERVED_TARGETS",
    "SANDBOX_DIR",
    "SANDBOX_INPUT_DIR",
    "BwrapStatus",
    "bwrap_command",
    "bwrap_features",
    "interpreter_paths",
    "is_covered",
    "resolve_dir",
]

SANDBOX_DIR = "/sandbox"
"""The working directory under bubblewrap: a tmpfs of ``scratch_mb`` holding a copy of the input files."""

SANDBOX_INPUT_DIR = "/sandbox-input"
"""Where the host scratch directory (the program and its input files) is bound read-only under bubblewrap."""

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

RESERVED_TARGETS = ("/proc", "/dev", SANDBOX_DIR, SANDBOX_INPUT_DIR)
"""Mount points the sandbox creates itself; host paths cannot be bound over them."""

# Run with -I (no PYTHONPATH, no user site, no current directory): the prefixes and
# the import path the interpreter's own site set-up gives, which includes the
# directories that .pth files of its site-packages add (dependencies installed
# elsewhere, e.g. a venv layered on another environment's packages).
_PREFIX_QUERY = (
    "import json, os, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, "
    "sys.base_exec_prefix] + [p for p in sys.path if p and os.path.isdir(p)]))"
)


@dataclasses.dataclass(frozen=True)
class BwrapStatus:
    """Whether bubblewrap works here, in which mode, and if not, why not."""

    available: bool
    mode: Literal["setuid", "userns"] | None
    reason: str
    enforces_process_limit: bool
    executable: str | None = None
    features: frozenset[str] = dataclasses.field(default=frozenset(), repr=False)


NO_BWRAP = BwrapStatus(available=False, mode=None, reason="not probed", enforces_process_limit=False)
"""The status used when the rlimit backend was asked for by name (bubblewrap is never probed)."""


def bwrap_features(executable: str) -> frozenset[str]:
    """The long options ``executable --help`` lists (empty when it cannot be run)."""
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


def bwrap_command(config: Sandbox, bwrap: BwrapStatus, python: str, scratch: str, launcher: str) -> list[str]:
    """The bubblewrap command line (everything before ``--``) for one run.

    ``launcher`` is the real path of the launcher script; it is bound
    read-only at the same path, like the interpreter.
    """
    assert bwrap.executable is not None and bwrap.mode is not None
    features = bwrap.features
    cmd = [bwrap.executable]
    if bwrap.mode == "userns":
        cmd += ["--unshare-user"]
        if "--disable-userns" in features:
            cmd += ["--disable-userns"]
    else:
        # Privileged bubblewrap (we are root) keeps only what the launcher needs: to start the program
        # as its uid, and to kill it (inside this PID namespace) when it fills its disk quota.
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL"]
    cmd += ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
    if "--as-pid-1" in features:
        # The launcher is the PID namespace's init: nothing inside can signal it, and its exit
        # kills every process left in the namespace.
        cmd += ["--as-pid-1"]
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

    wanted = [*interpreter_paths(python), launcher, *config.pythonpath, *config.ro_binds]
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
            if ancestor not in present and not is_covered(ancestor, host_trees):
                cmd += ["--perms", "0755", "--dir", ancestor]
                present.add(ancestor)
        cmd += ["--ro-bind", path, path]
        present.add(path)
    # The program works in a tmpfs of scratch_mb (the disk quota); the launcher copies the program
    # and its input files there from the host scratch directory, bound read-only.
    cmd += ["--ro-bind", scratch, SANDBOX_INPUT_DIR]
    cmd += ["--perms", "0777", "--size", str(config.scratch_mb << 20), "--tmpfs", SANDBOX_DIR]
    cmd += ["--chdir", SANDBOX_DIR]
    # The new root is a tmpfs owned by the sandbox user in a user namespace; freeze
    # it so the synthetic /etc and parent directories cannot be written (or filled).
    cmd += ["--remount-ro", "/"]
    return cmd


_prefix_cache: dict[str, tuple[str, ...]] = {}
_prefix_lock = threading.Lock()


def interpreter_paths(python: str) -> tuple[str, ...]:
    """Directories that must be visible for ``python`` to start and import what is installed.

    Its bin dirs, prefixes and site import path, asked of the interpreter itself
    (once per interpreter) so that the answer does not include this process's
    PYTHONPATH or working directory.
    """
    with _prefix_lock:
        if python in _prefix_cache:
            return _prefix_cache[python]
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
        if is_covered(path, system) or is_covered(path, kept):
            continue
        if is_covered(path, RESERVED_TARGETS):
            logger.warning("sandbox: not binding %s (reserved inside the sandbox)", path)
            continue
        kept.append(path)
    return kept


def _ancestors(path: str) -> list[str]:
    parts = PurePosixPath(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def is_covered(path: str, roots: Sequence[str]) -> bool:
    """True when ``path`` is one of ``roots`` or lies below one of them."""
    return any(_is_within(path, root) for root in roots)


def _is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def resolve_dir(path: str) -> str:
    """``path`` with its directory resolved to a real path but its final component kept."""
    return os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(path))), os.path.basename(path))
