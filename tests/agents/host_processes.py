"""What the sandbox tests look for on the host: processes that carry a marker in their command line."""

from __future__ import annotations

import os
import textwrap
import time

__all__ = ["assert_no_survivors", "processes_with", "src"]


def src(code: str) -> str:
    """``code`` dedented, without its leading blank line (for programs written inline in tests)."""
    return textwrap.dedent(code).lstrip()


def processes_with(marker: str) -> list[int]:
    """Pids whose command line contains ``marker`` (read from /proc, host-wide)."""
    found = []
    needle = marker.encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                if needle in handle.read():
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def assert_no_survivors(marker: str, within_s: float = 3.0) -> None:
    """Fail unless every process carrying ``marker`` is gone within ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(marker) == [], f"processes carrying {marker} outlived the run"
