"""Resource limits, process trees and the uids programs run as.

:func:`rlimits` computes the ``setrlimit`` limits the launcher applies inside
the sandbox; :func:`kill_tree` ends a run's whole process tree;
:func:`reserve_uid` hands each program in bubblewrap's ``setuid`` mode a
fresh, otherwise unused uid, so that ``RLIMIT_NPROC`` counts that program's
tasks alone. Everything here reads ``/proc`` of the host.
"""

from __future__ import annotations

import grp
import math
import os
import pwd
import random
import signal
import threading
import time
from typing import TYPE_CHECKING

from .bwrap import BwrapStatus
from .results import SandboxError

if TYPE_CHECKING:
    from .core import Sandbox

__all__ = [
    "UID_RANGE",
    "has_exited",
    "kill_tree",
    "kill_uid",
    "release_uid",
    "reserve_uid",
    "rlimits",
]

# Uids handed to programs in setuid mode: above ordinary users, below nobody
# and systemd's dynamic users, inside the 0..65535 that rootless containers map.
UID_RANGE = (40_000, 60_000)


def rlimits(config: Sandbox, backend: str, bwrap: BwrapStatus) -> list[tuple[str, int, int]]:
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
        # In a user namespace the launcher (the namespace's init) runs as the program's user and counts
        # too; in setuid mode the program's uid is fresh and the launcher stays root.
        overhead = 0 if bwrap.mode == "setuid" else 1
        nproc = config.max_processes + overhead
        limits.append(("RLIMIT_NPROC", nproc, nproc))
    elif os.geteuid() == 0:
        # Root's programs run as a fresh uid whose task count starts at zero.
        limits.append(("RLIMIT_NPROC", config.max_processes, config.max_processes))
    else:
        # Without namespaces the count is global for the user: leave room for what already runs.
        nproc = _tasks_of_uid(os.getuid()) + config.max_processes + 1
        limits.append(("RLIMIT_NPROC", nproc, nproc))
    return limits


# ---------------------------------------------------------------------------
# Processes.


def has_exited(pid: int) -> bool:
    """True once ``pid`` has terminated, without reaping it (its pgid stays reserved)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def kill_tree(pid: int, *, kill_descendants: bool) -> None:
    """SIGKILL the process group led by ``pid`` and, without namespaces, its descendants.

    Under bubblewrap killing the group kills bubblewrap; ``--die-with-parent``
    then takes down the PID namespace and everything in it.
    """
    if kill_descendants:
        for child in _descendants(pid):
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_uid(uid: int) -> None:
    """SIGKILL every process whose real, effective or saved uid is ``uid`` (a run's fresh uid), until none is left."""
    for _ in range(50):
        victims = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/status") as handle:
                    for line in handle:
                        if line.startswith("Uid:"):
                            if uid in (int(value) for value in line.split()[1:4]):
                                victims.append(int(entry.name))
                            break
            except (OSError, ValueError):
                continue
        if not victims:
            return
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)


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


# ---------------------------------------------------------------------------
# Uids for setuid mode.


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


def reserve_uid() -> int:
    """Pick a uid (and equal gid) that no account or running process uses, and reserve it."""
    busy = _uids_in_use()
    with _uid_lock:
        for _ in range(1000):
            uid = _uid_random.randrange(*UID_RANGE)
            if uid in busy or uid in _reserved_uids:
                continue
            if not (_id_mapped(uid, "/proc/self/uid_map") and _id_mapped(uid, "/proc/self/gid_map")):
                continue
            if _has_account(uid):
                continue
            _reserved_uids.add(uid)
            return uid
    raise SandboxError(f"no free uid in {UID_RANGE[0]}..{UID_RANGE[1]} to run the sandboxed program as")


def release_uid(uid: int) -> None:
    """Give back a uid from :func:`reserve_uid` once its run has ended."""
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
