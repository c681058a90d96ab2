"""The scratch directory a program runs in: checking, writing and removing it."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import sys
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["SCRIPT_NAME", "chown_tree", "remove_tree", "validate_env", "validate_files", "write_scratch"]

SCRIPT_NAME = "main.py"
"""File name the source is written to inside the scratch directory."""


def validate_files(files: dict[str, Any]) -> None:
    """Refuse file names that leave the scratch directory or replace the program, and non-text content."""
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


def validate_env(env: Mapping[str, Any], what: str) -> None:
    """Refuse environment entries that ``execve`` cannot pass on unchanged."""
    for key, value in env.items():
        if not isinstance(key, str) or not key or "=" in key or "\x00" in key:
            raise ValueError(f"{what} key {key!r} is not a valid environment variable name")
        if not isinstance(value, str) or "\x00" in value:
            raise ValueError(f"{what}[{key!r}] must be a str without NUL bytes")


def write_scratch(scratch: str, source: str, files: Mapping[str, str | bytes]) -> None:
    """Write the program as :data:`SCRIPT_NAME` and ``files`` next to it."""
    root = Path(scratch)
    (root / SCRIPT_NAME).write_text(source, encoding="utf-8")
    for name, content in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")


def chown_tree(root: str, uid: int) -> None:
    """Give the whole scratch tree to ``uid`` (and the equal gid), links included."""
    os.lchown(root, uid, uid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, uid)


def remove_tree(root: str) -> None:
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
