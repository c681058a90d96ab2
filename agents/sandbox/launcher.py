"""The launcher: the sandboxed program's parent, inside the sandbox.

The sandbox starts this file as ``python -I -S launcher.py CONFIG`` (the
interpreter that will run the program, isolated from the environment and
without ``site``), under bubblewrap or bare. ``CONFIG`` is a JSON object:

``status_fd``
    the write end of a pipe to the supervising parent; one JSON object a
    line: ``{"event": "started"}`` once the limits hold (written by the
    program's process just before ``execve``), ``{"event": "exited",
    "status": <wait status>, "maxrss_kb": <peak>}`` when the program ends,
    ``{"event": "disk", "used_bytes": ...}`` when it filled its scratch quota,
    ``{"event": "note", "text": ...}`` for something the parent should log,
    or ``{"event": "setup_failed", "error": ...}``.
``uid``
    ``None``, or the unprivileged uid (and gid) the program's process
    switches to before anything else (bubblewrap's ``setuid`` mode, and the
    rlimit backend when the caller is root). The launcher itself keeps its
    identity, so the program cannot signal it.
``limits``
    ``[name, soft, hard]`` triples of ``resource.RLIMIT_*`` limits for the
    program, each lowered to the hard limit already in force.
``argv``
    the program's command line, executed with ``execve`` in a forked child.
``parent_pid``
    the supervisor's pid, or ``None`` under bubblewrap (which has
    ``--die-with-parent``): the launcher asks the kernel to SIGKILL it when
    the supervisor dies, so a killed caller leaves no evaluation running.
``unshare``
    namespace names (``pid``, ``mount``, ``net``, ``ipc``, ``uts``) to create
    before starting the program (the rlimit backend as root). With ``pid``,
    the launcher forks once more and the inner copy becomes the namespace's
    init: when it exits, the kernel kills every process left in the
    namespace. With ``mount``, the namespace gets its own ``/proc``, and the
    ``reachable`` paths (the interpreter's prefixes, ``pythonpath``, the
    scratch directory) are made reachable by the unprivileged uid: a
    directory on their way that other users cannot enter (``/root``) is
    covered by an empty tmpfs holding just the way to them.
``copy_from``
    a directory whose contents are copied into the working directory before
    the program starts (bubblewrap: the input files, bound read-only, go into
    the size-limited tmpfs scratch).
``disk``
    ``{"path", "limit_bytes", "how"}``: the scratch quota. ``how`` is
    ``statvfs`` (a size-limited tmpfs: full means over quota) or ``walk``
    (a host directory whose size is summed). The program is killed when it
    reaches the quota.

The wait status in the report is how the parent tells a program killed by a
signal from one that merely exited with status ``128 + n``; the ``started``
event is the proof that the sandbox came up.

Process containment: under bubblewrap (``--as-pid-1``) and in a PID
namespace of its own, the launcher is the namespace's init, which no process
inside may signal, and whose exit kills everything left in the namespace.
Otherwise it makes itself a child subreaper, so orphans (double-forked
daemons) become its children, and kills them all when the program ends.
Either way the launcher watches the status pipe: once its parent's read end
is gone (the caller was killed), it kills the program and all it started.

This file must stay stdlib-only and small: it becomes the parent of the
program, and it is not allowed to import anything of societas (the package
is not visible inside the sandbox).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import select
import shutil
import signal
import sys
import time
from typing import Any, NoReturn

# Exit statuses of the launcher itself, for the parent when no report arrives.
SETUP_FAILED_STATUS = 125
EXEC_FAILED_STATUS = 127

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_CLONE_FLAGS = {
    "pid": 0x20000000,
    "net": 0x40000000,
    "ipc": 0x08000000,
    "uts": 0x04000000,
    "mount": 0x00020000,
}
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_BIND, _MS_REC, _MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
# A size-limited tmpfs with less than this free is full.
_FULL_MARGIN_BYTES = 64 * 1024
_DISK_POLL_S = 0.1

_libc = ctypes.CDLL(None, use_errno=True)


def _report(fd: int, **fields: Any) -> None:
    try:
        os.write(fd, (json.dumps(fields) + "\n").encode())
    except OSError:
        pass  # the parent is gone; nothing left to tell


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _die_with_parent(expected_parent: int) -> None:
    """SIGKILL this process when its parent dies (and now, if that already happened)."""
    _check(_libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != expected_parent:
        os._exit(SETUP_FAILED_STATUS)


def _apply_limits(limits: list[list[Any]]) -> None:
    for name, soft, hard in limits:
        kind = getattr(resource, name)
        cur_hard = resource.getrlimit(kind)[1]
        # Raising a hard limit needs privileges the program's process does not have.
        if cur_hard != resource.RLIM_INFINITY:
            hard = min(hard, cur_hard)
            soft = min(soft, hard)
        resource.setrlimit(kind, (soft, hard))


def _start_program(cfg: dict[str, Any], fd: int) -> int:
    """Fork the program's process: drop privileges, copy inputs, limit, exec. Returns its pid."""
    launcher_pid = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        if cfg["uid"] is not None:
            os.setgroups([])
            os.setgid(cfg["uid"])
            os.setuid(cfg["uid"])
        # A uid change clears the parent-death signal: set it afterwards.
        _die_with_parent(launcher_pid)
        if cfg.get("copy_from"):
            _copy_inputs(cfg["copy_from"])
        _apply_limits(cfg["limits"])
    except (OSError, ValueError) as exc:
        message = type(exc).__name__ + ": " + str(exc)
        if cfg.get("copy_from") and "No space left" in str(exc):
            message = "the input files do not fit in the scratch quota: " + message
        _report(fd, event="setup_failed", error=message)
        os._exit(SETUP_FAILED_STATUS)
    _report(fd, event="started")
    # The program must not inherit the status pipe (it could forge reports).
    os.set_inheritable(fd, False)
    os.close(fd)
    try:
        os.execve(cfg["argv"][0], cfg["argv"], os.environ)
    except OSError as exc:
        detail = str(exc)
        if cfg["uid"] is not None and isinstance(exc, PermissionError):
            detail += f" (the program runs as the unprivileged uid {cfg['uid']}, which cannot reach it)"
        os.write(2, ("sandbox: cannot execute " + cfg["argv"][0] + ": " + detail + "\n").encode())
    os._exit(EXEC_FAILED_STATUS)


def _copy_inputs(source: str) -> None:
    """Copy the files (and sub-directories) under ``source`` into the working directory."""
    for root, dirs, files in os.walk(source):
        relative = os.path.relpath(root, source)
        for name in dirs:
            os.makedirs(os.path.join(relative, name), exist_ok=True)
        for name in files:
            path = os.path.join(root, name)
            target = os.path.join(relative, name)
            if os.path.islink(path):
                os.symlink(os.readlink(path), target)
            else:
                shutil.copyfile(path, target)


def _disk_used(disk: dict[str, Any]) -> int:
    """Bytes used in the scratch directory (statvfs of its own tmpfs, or a walk of a host directory)."""
    path = disk["path"]
    if disk["how"] == "statvfs":
        st = os.statvfs(path)
        free = st.f_bavail * st.f_frsize
        # Full (within the margin) counts as the whole quota used.
        return disk["limit_bytes"] if free < _FULL_MARGIN_BYTES else st.f_blocks * st.f_frsize - free
    total = 0
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return total


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _kill_everything_else(is_init: bool) -> None:
    """Kill every process left of the run: all of the namespace as its init, else all our children."""
    if is_init:
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass  # nothing left, or not allowed; the namespace dies with us anyway
        return
    # Subreaper: orphans are re-parented to us; keep killing until none is left.
    for _ in range(100):
        children = _children_of(os.getpid())
        if not children:
            return
        for child in children:
            try:
                os.kill(child, signal.SIGKILL)
            except OSError:
                pass
        _reap_all(block_s=0.05)


def _reap_all(block_s: float = 0.0) -> None:
    deadline = time.monotonic() + block_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.005)


def _caller_watch(fd: int) -> select.poll:
    """A poller on the status pipe's write end: it reports POLLERR once no reader is left.

    The supervising parent holds the only read end, so POLLERR means it died.
    This is the launcher's own lifeline: bubblewrap's ``--die-with-parent``
    misses a parent killed while bubblewrap is still setting up (between its
    fork and its ``prctl``), and the launcher then ran on, orphaned.
    """
    poller = select.poll()
    poller.register(fd, 0)  # POLLERR and POLLHUP are reported whatever the mask
    return poller


def _caller_gone(poller: select.poll) -> bool:
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _supervise(cfg: dict[str, Any], fd: int, is_init: bool) -> NoReturn:
    """Run the program, watch its disk use, reap everything, report its exact end; never returns."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    caller = _caller_watch(fd)
    if _caller_gone(caller):
        os._exit(SETUP_FAILED_STATUS)
    pid = _start_program(cfg, fd)
    disk = cfg.get("disk")
    next_disk_check = time.monotonic()
    status: int | None = None
    maxrss_kb = 0
    while status is None:
        # Reap everything that ended (orphans re-parented to us included); note the program's end.
        while True:
            try:
                done, wait_status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                done = 0
            if done == 0:
                break
            if done == pid:
                status, maxrss_kb = wait_status, usage.ru_maxrss
        if status is not None:
            break
        if _caller_gone(caller):
            # Nobody is left to read the result: end the run and everything it started.
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            _kill_everything_else(is_init)
            os._exit(128 + signal.SIGKILL)
        if disk and time.monotonic() >= next_disk_check:
            next_disk_check = time.monotonic() + _DISK_POLL_S
            used = _disk_used(disk)
            if used >= disk["limit_bytes"]:
                _report(fd, event="disk", used_bytes=used)
                disk = None
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
                _kill_everything_else(is_init)
                continue
        signal.sigtimedwait({signal.SIGCHLD}, _DISK_POLL_S)
    if disk:
        # A program that stopped at the quota (ENOSPC) rather than being killed there.
        used = _disk_used(disk)
        if used >= disk["limit_bytes"]:
            _report(fd, event="disk", used_bytes=used)
    _kill_everything_else(is_init)
    _reap_all(block_s=0.0)
    _report(fd, event="exited", status=status, maxrss_kb=maxrss_kb)
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def encode(value: str | None) -> bytes | None:
        return None if value is None else value.encode()

    result = _libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data))
    _check(result, f"mount {target}")


def _closed_ancestor(path: str) -> str | None:
    """The topmost directory on the way to ``path`` that other users cannot traverse, or None."""
    parts = path.strip("/").split("/")
    for depth in range(len(parts)):
        ancestor = "/" + "/".join(parts[:depth])
        if ancestor != "/" and not os.stat(ancestor).st_mode & 0o001:
            return ancestor
    return None


def _open_the_way(paths: list[str]) -> None:
    """Make ``paths`` reachable by an unprivileged uid in this (new, private) mount namespace.

    A directory on the way that other users cannot traverse (``/root`` is
    0700, and a pyenv interpreter lives below it) is covered with an empty
    0755 tmpfs, on which the way to each needed path is rebuilt (0755
    directories) and the path itself is bind-mounted back. Everything else
    under the covered directory disappears for the program.
    """
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    covered: dict[str, list[str]] = {}
    for path in sorted(set(paths)):
        ancestor = _closed_ancestor(path)
        if ancestor is not None and not any(ancestor.startswith(c + "/") for c in covered):
            covered.setdefault(ancestor, []).append(path)
    for ancestor, needed in covered.items():
        # Hold the real paths open, cover the ancestor, then bind them back through the held handles.
        handles = [(p, os.open(p, os.O_PATH)) for p in needed if p != ancestor]
        _mount("tmpfs", ancestor, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
        for path, handle in handles:
            parent = os.path.dirname(path)
            os.makedirs(parent, mode=0o755, exist_ok=True)
            if os.path.isdir(f"/proc/self/fd/{handle}"):
                os.makedirs(path, mode=0o755, exist_ok=True)
            else:
                open(path, "a").close()
            _mount(f"/proc/self/fd/{handle}", path, None, _MS_BIND | _MS_REC)
            os.close(handle)


def _enter_namespaces(cfg: dict[str, Any], fd: int) -> bool:
    """Create the requested namespaces; with a PID namespace, continue as its init. Returns is-init."""
    names = cfg.get("unshare") or []
    if not names:
        return False
    flags = 0
    for name in names:
        flags |= _CLONE_FLAGS[name]
    _check(_libc.unshare(flags), "unshare(" + ",".join(names) + ")")
    if "mount" in names:
        _open_the_way(cfg.get("reachable") or [])
    if "pid" not in names:
        return False
    init = os.fork()
    if init:
        # The outer launcher only relays the init's end; the init reports to the parent itself.
        _, status = os.waitpid(init, 0)
        os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.waitstatus_to_exitcode(status))
    # Seen from inside the new namespace the parent has no pid (getppid() is 0), so only ask the kernel.
    _check(_libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if "mount" in names:
        # The namespace's own /proc: the program sees only its own processes.
        _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    return True


def main(argv: list[str]) -> NoReturn:
    """Set up containment, run the program, report its exact end; never returns."""
    cfg = json.loads(argv[1])
    fd = cfg["status_fd"]
    is_init = os.getpid() == 1  # bubblewrap's --as-pid-1
    try:
        if cfg.get("parent_pid") is not None:
            _die_with_parent(cfg["parent_pid"])
        if cfg.get("unshare"):
            try:
                is_init = _enter_namespaces(cfg, fd)
            except OSError as exc:
                _report(
                    fd, event="note", text=f"no namespaces for the rlimit backend ({exc}); using a subreaper"
                )
        if not is_init:
            _check(_libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(PR_SET_CHILD_SUBREAPER)")
    except OSError as exc:
        _report(fd, event="setup_failed", error=type(exc).__name__ + ": " + str(exc))
        os._exit(SETUP_FAILED_STATUS)
    _supervise(cfg, fd, is_init)


if __name__ == "__main__":
    main(sys.argv)
