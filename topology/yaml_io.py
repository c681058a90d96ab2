"""Reading and writing spec documents (YAML and JSON) that may come from anyone.

YAML is read with a loader that rejects duplicate keys, and every loaded
document is size-checked so that alias bombs ("billion laughs") and
self-referencing structures fail fast instead of exhausting memory. Every
failure is a :class:`~societas.topology.errors.SpecError` whose message names
the problem (and, for syntax errors, the line and column), except a missing
file, which is a :class:`FileNotFoundError` naming it. Text and file names are
never confused: a file is read only by :func:`read_text_file`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from societas.agents import documents

from .errors import SpecError

__all__ = [
    "MAX_DOCUMENT_CHARS",
    "MAX_DOCUMENT_DEPTH",
    "MAX_DOCUMENT_ITEMS",
    "check_document_size",
    "dump_yaml",
    "load_json_bounded",
    "load_yaml_bounded",
    "read_text_file",
]

MAX_DOCUMENT_CHARS = documents.MAX_DOCUMENT_CHARS
MAX_DOCUMENT_ITEMS = documents.MAX_DOCUMENT_ITEMS
MAX_DOCUMENT_DEPTH = documents.MAX_DOCUMENT_DEPTH


def _spec_error(exc: documents.DocumentError) -> SpecError:
    return SpecError("", exc.message)


def check_document_size(obj: Any, *, max_items: int, max_depth: int) -> None:
    """Reject a loaded document that is too large or too deep (see :func:`societas.agents.documents.check_document_size`)."""
    try:
        documents.check_document_size(obj, max_items=max_items, max_depth=max_depth)
    except documents.DocumentError as exc:
        raise _spec_error(exc) from None


def load_yaml_bounded(
    text: str,
    *,
    max_chars: int = MAX_DOCUMENT_CHARS,
    max_items: int = MAX_DOCUMENT_ITEMS,
    max_depth: int = MAX_DOCUMENT_DEPTH,
) -> Any:
    """The project's guarded YAML loader (:func:`societas.agents.documents.load_yaml`); failures are SpecError.

    Rejects duplicate keys, text longer than ``max_chars``, documents nested
    deeper than ``max_depth`` and documents with more than ``max_items``
    values after alias expansion. Syntax errors name the line and column.
    """
    try:
        return documents.load_yaml(text, max_chars=max_chars, max_items=max_items, max_depth=max_depth)
    except documents.DocumentError as exc:
        raise _spec_error(exc) from None


def load_json_bounded(
    text: str,
    *,
    max_chars: int = MAX_DOCUMENT_CHARS,
    max_items: int = MAX_DOCUMENT_ITEMS,
    max_depth: int = MAX_DOCUMENT_DEPTH,
) -> Any:
    """``json.loads`` for untrusted text, with the limits of :func:`load_yaml_bounded`; failures are SpecError."""
    try:
        return documents.load_json(text, max_chars=max_chars, max_items=max_items, max_depth=max_depth)
    except documents.DocumentError as exc:
        raise _spec_error(exc) from None


class _SpecDumper(yaml.SafeDumper):
    """Safe dumper that writes multi-line strings (prompts) as literal blocks."""


_UNICODE_BREAKS = ("\x85", "\u2028", "\u2029")


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if any(ch in data for ch in _UNICODE_BREAKS):
        # PyYAML with allow_unicode writes these line breaks raw inside single
        # quotes, where the loader folds them; double quotes escape them.
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style='"')
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_SpecDumper.add_representer(str, _represent_str)


def dump_yaml(data: Any) -> str:
    """YAML text for ``data`` (safe types only), multi-line strings as literal blocks; errors are SpecError."""
    try:
        return yaml.dump(data, Dumper=_SpecDumper, sort_keys=False, allow_unicode=True, width=100)
    except yaml.YAMLError as exc:
        raise SpecError("", f"cannot write the spec as YAML: {exc}") from None


def read_text_file(path: str | os.PathLike[str]) -> str:
    """The UTF-8 text of the file at ``path`` (always a file name, never a document).

    The file is read by :func:`societas.agents.documents.read_text`. A missing
    file raises :class:`~societas.agents.documents.DocumentNotFoundError` (a
    :class:`FileNotFoundError`) naming it; any other failure to read it (a
    directory, no permission, a NUL character in the name, bytes that are not
    UTF-8, a file too large) is a :class:`SpecError` naming the file. A
    ``path`` that is not a file name (``None``, a number) is a ``TypeError``.
    """
    try:
        return documents.read_text(path)
    except documents.DocumentNotFoundError:
        raise
    except documents.DocumentError as exc:
        raise SpecError("", f"cannot read {str(Path(path))!r}: {exc.message}") from None
