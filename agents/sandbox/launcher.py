"""The launcher: the sandboxed program's parent, inside the sandbox.

The sandbox starts this file as ``python -I -S launcher.py CONFIG`` (the
interpreter that will run the program, isolated from the environment and
without ``site``), under bubblewrap or bare. ``CONFIG`` is a JSON object:

``status_fd``
    the write end of a pipe to the supervising parent; the launcher reports
    one JSON object a line: ``{"event": "started"}`` once the limits hold,
    ``{"event": "exited", "status": <wait status>, "maxrss_kb": <peak>}``
    when the program ends, or ``{"event": "setup_failed", "error": ...}``.
``uid``
    ``None``, or the unprivileged uid (and gid) to switch to before anything
    else (bubblewrap's ``setuid`` mode).
``limits``
    ``[name, soft, hard]`` triples of ``resource.RLIMIT_*`` limits, each
    lowered to the hard limit already in force.
``argv``
    the program's command line, executed with ``execve`` in a forked child.

The wait status in the report is how the parent tells a program killed by a
signal from one that merely exited with status ``128 + n``; the ``started``
event is the proof that the sandbox came up.

This file must stay stdlib-only and small: it becomes the parent of the
program, and it is not allowed to import anything of societas (the package
is not visible inside the sandbox).
"""

from __future__ import annotations

import json
import os
import resource
import sys
from typing import Any, NoReturn

# Exit statuses of the launcher itself, for the parent when no report arrives.
SETUP_FAILED_STATUS = 125
EXEC_FAILED_STATUS = 127


def _report(fd: int, **fields: Any) -> None:
    try:
        os.write(fd, (json.dumps(fields) + "\n").encode())
    except OSError:
        pass  # the parent is gone; nothing left to tell


def _apply_limits(limits: list[list[Any]]) -> None:
    for name, soft, hard in limits:
        kind = getattr(resource, name)
        cur_hard = resource.getrlimit(kind)[1]
        # Raising a hard limit needs privileges the launcher no longer has.
        if cur_hard != resource.RLIM_INFINITY:
            hard = min(hard, cur_hard)
            soft = min(soft, hard)
        resource.setrlimit(kind, (soft, hard))


def main(argv: list[str]) -> NoReturn:
    """Drop privileges, apply the limits, run the program, report its exact end; never returns."""
    cfg = json.loads(argv[1])
    fd = cfg["status_fd"]
    try:
        if cfg["uid"] is not None:
            os.setgroups([])
            os.setgid(cfg["uid"])
            os.setuid(cfg["uid"])
        _apply_limits(cfg["limits"])
    except (OSError, ValueError) as exc:
        _report(fd, event="setup_failed", error=type(exc).__name__ + ": " + str(exc))
        os._exit(SETUP_FAILED_STATUS)
    # The program must not inherit the status pipe (it could forge reports).
    os.set_inheritable(fd, False)
    _report(fd, event="started")
    pid = os.fork()
    if pid == 0:
        try:
            os.execve(cfg["argv"][0], cfg["argv"], os.environ)
        except OSError as exc:
            os.write(2, ("sandbox: cannot execute " + cfg["argv"][0] + ": " + str(exc) + "\n").encode())
        os._exit(EXEC_FAILED_STATUS)
    _, status, usage = os.wait4(pid, 0)
    _report(fd, event="exited", status=status, maxrss_kb=usage.ru_maxrss)
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


if __name__ == "__main__":
    main(sys.argv)
