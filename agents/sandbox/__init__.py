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
and the directory is deleted afterwards. The child is a small launcher,
:mod:`societas.agents.sandbox.launcher`, run by path by the same interpreter
(``python -I -S .../launcher.py CONFIG``), that applies resource limits with
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
    bound at the same paths so ``pyvenv.cfg`` resolves), the launcher script
    (at its own path), the ``pythonpath`` directories and ``ro_binds``; a private ``/proc``, ``/dev``, size-limited
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

``SOCIETAS_REQUIRE_BWRAP``
    Set to ``1`` (or ``true``, ``yes``, ``on``), it turns ``auto``'s fallback
    to ``rlimit`` into a :class:`SandboxUnavailableError` that names the
    variable, says why bubblewrap cannot be used and how to install it, so a
    CI run without a working bubblewrap fails instead of passing on the
    weaker backend. ``0`` or unset keeps the warned fallback; other values are
    a ``ValueError``. It is read at every run; ``backend="rlimit"`` asked for
    by name is not affected.

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

from .bwrap import SANDBOX_DIR, BwrapStatus
from .core import REQUIRE_BWRAP_ENV, Sandbox, bwrap_available, bwrap_status, run_python
from .results import SandboxError, SandboxResult, SandboxUnavailableError
from .scratch import SCRIPT_NAME

__all__ = [
    "REQUIRE_BWRAP_ENV",
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
