"""What a sandboxed run produced: the result type, its errors, and how it is read.

The supervising parent collects the program's output into two
:class:`CappedBuffer` objects and the launcher's status reports into an
:class:`Outcome`; :func:`build_result` turns that into a
:class:`SandboxResult`, deciding how the run ended (exit status, signal,
timeout, memory limit).
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal as _signal
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .core import Sandbox

__all__ = [
    "KilledBy",
    "SandboxKiller",
    "CappedBuffer",
    "Outcome",
    "SandboxError",
    "SandboxResult",
    "SandboxUnavailableError",
    "build_result",
    "one_line",
]

KilledBy = Literal["timeout", "memory", "signal", "disk"]
SandboxKiller = Literal["outside", "program or outside"]

# Peak RSS above this fraction of the memory limit makes a fatal signal count as a memory kill.
_NEAR_LIMIT_FRACTION = 0.75
_MEMORY_SIGNALS = frozenset({_signal.SIGKILL, _signal.SIGSEGV, _signal.SIGABRT, _signal.SIGBUS})
_MEMORY_PATTERN = re.compile(
    r"^\s*(?:\|\s*)?MemoryError\b|cannot allocate memory|std::bad_alloc|\bout of memory\b"
    r"|memory allocation (?:still )?failed",
    re.IGNORECASE | re.MULTILINE,
)


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
    ``killed_by`` is ``"disk"`` when the program filled its scratch quota
    (``scratch_mb``). ``sandbox_killed_by`` is set when the sandbox itself
    (the program's launcher) died before it could report the program's end:
    ``"outside"`` where the program cannot signal its launcher (bubblewrap,
    or the rlimit backend as root), ``"program or outside"`` where it can.
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
    scratch_limit_mb: int | None = None
    max_output_bytes: int | None = None
    sandbox_killed_by: SandboxKiller | None = None

    @property
    def ok(self) -> bool:
        """True when the program exited with status 0 and was not killed."""
        return self.returncode == 0 and self.killed_by is None

    def describe(self) -> str:
        """One line saying how the run ended, e.g. ``"timeout after 2.0 s"``; truncated output is mentioned."""
        text = self._ending()
        if self.truncated:
            limit = f" to {self.max_output_bytes} bytes" if self.max_output_bytes is not None else ""
            text += f" (output truncated{limit} per stream)"
        return text

    def _ending(self) -> str:
        if self.sandbox_killed_by is not None:
            who = (
                "from outside (the program cannot signal it)"
                if self.sandbox_killed_by == "outside"
                else "by the program itself or from outside"
            )
            return (
                f"the sandbox was killed by signal {self.signal} ({_signal_name(self.signal)}) {who} "
                "before the program ended"
            )
        if self.killed_by == "disk":
            limit = f"{self.scratch_limit_mb} MB " if self.scratch_limit_mb is not None else ""
            return f"scratch disk quota {limit}exceeded"
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


class CappedBuffer:
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


@dataclasses.dataclass
class Outcome:
    """What the supervisor saw: the output, the launcher's status events, and whether time ran out."""

    stdout: CappedBuffer
    stderr: CappedBuffer
    events: list[dict[str, Any]]
    timed_out: bool
    wall_s: float


def build_result(
    config: Sandbox,
    backend: str,
    raw_returncode: int | None,
    outcome: Outcome,
    *,
    launcher_exposed: bool = False,
) -> SandboxResult:
    """The :class:`SandboxResult` of a supervised run; raises :class:`SandboxError` if it never started.

    ``config`` is the :class:`~societas.agents.sandbox.Sandbox` that ran it; ``raw_returncode`` is the status of
    the launcher (or of bubblewrap), used only when the launcher's own report
    is missing. ``launcher_exposed`` says whether the program could have
    signalled its launcher (same user, no PID namespace).
    """
    events = {event.get("event"): event for event in outcome.events if isinstance(event, dict)}
    stderr_text = outcome.stderr.text()
    if "setup_failed" in events:
        raise SandboxError(f"sandbox launcher could not apply limits: {events['setup_failed'].get('error')}")
    if "started" not in events and not outcome.timed_out:
        raise SandboxError(
            f"the {backend} sandbox failed to start the program (status {raw_returncode}): "
            f"{one_line(stderr_text) or 'no error output'}"
        )

    returncode: int | None
    sig: int | None = None
    killed_by: KilledBy | None = None
    max_rss_mb: float | None = None
    sandbox_killed_by: SandboxKiller | None = None
    exited = events.get("exited")
    if "disk" in events:
        returncode = None
        killed_by = "disk"
        if exited is not None:
            max_rss_mb = float(exited.get("maxrss_kb", 0)) / 1024.0
    elif outcome.timed_out:
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
        # The launcher itself died before reporting (killed by a signal); the program's end is unknown.
        returncode = raw_returncode
        if raw_returncode is not None and raw_returncode < 0:
            sig = -raw_returncode
        elif backend == "bwrap" and raw_returncode is not None and raw_returncode > 128:
            sig = raw_returncode - 128
            returncode = -sig
        if sig is not None:
            sandbox_killed_by = "program or outside" if launcher_exposed else "outside"

    if killed_by is None and sig is not None:
        killed_by = "timeout" if sig == _signal.SIGXCPU else "signal"
    if (
        killed_by not in ("timeout", "disk")
        and sandbox_killed_by is None
        and returncode not in (0, None)
        and config.memory_mb is not None
    ):
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
        scratch_limit_mb=config.scratch_mb,
        max_output_bytes=config.max_output_bytes,
        sandbox_killed_by=sandbox_killed_by,
    )


def one_line(text: str, limit: int = 400) -> str:
    """The last few non-empty lines of ``text`` joined with ``" | "``, at most ``limit`` characters."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    joined = " | ".join(lines[-5:])
    return joined if len(joined) <= limit else joined[: limit - 3] + "..."


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
