"""Reading the YAML and JSON documents of the project, which may come from anyone.

Every YAML or JSON text the project reads (graph specs, evolution and
training configs, run directories' saved configs, task settings, LLM
answers) goes through :func:`load_yaml` or :func:`load_json`. They reject
duplicate keys, text longer than ``max_chars``, nesting deeper than
``max_depth`` and documents with more than ``max_items`` values once YAML
aliases are expanded, so that an alias bomb ("billion laughs") or a
self-referencing structure fails in milliseconds instead of exhausting
memory. Python-object tags are refused by the safe loader.

Every failure is a :class:`DocumentError` (a ``ValueError``) whose message
names the source (a file name when there is one), and for syntax errors the
line and column. :func:`read_text` reads a file as UTF-8 and names the file
when it cannot (:class:`DocumentNotFoundError`, also a
``FileNotFoundError``, when it does not exist).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "MAX_DOCUMENT_CHARS",
    "escape_script_json",
    "MAX_DOCUMENT_DEPTH",
    "MAX_DOCUMENT_ITEMS",
    "DocumentError",
    "DocumentNotFoundError",
    "check_document_size",
    "load_json",
    "load_json_file",
    "load_yaml",
    "load_yaml_file",
    "read_text",
]

# Limits for reading untrusted documents. A config is written by a person or a
# program and may be large; the limits only stop pathological input.
MAX_DOCUMENT_CHARS = 10_000_000
MAX_DOCUMENT_ITEMS = 2_000_000
MAX_DOCUMENT_DEPTH = 100
_BRACKETS = re.compile(r"[^\[\]{}]+")


class DocumentError(ValueError):
    """A document cannot be read or parsed; ``str()`` reads ``"<source>: <what is wrong>"``."""

    def __init__(self, source: str, message: str) -> None:
        super().__init__(source, message)
        self.source = source
        self.message = message

    def __str__(self) -> str:
        return f"{self.source}: {self.message}" if self.source else self.message


class DocumentNotFoundError(DocumentError, FileNotFoundError):
    """The file to read does not exist."""

    def __str__(self) -> str:
        return f"{self.source}: {self.message}" if self.source else self.message


class _ValueProblem(yaml.constructor.ConstructorError):
    """A value the safe constructor cannot convert (reported as a "YAML value error")."""


class _UniqueKeySafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects a mapping holding the same key twice.

    PyYAML keeps the last value silently, which hides mistakes such as two
    ``nodes:`` sections. Keys merged in with ``<<`` may still be overridden.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, yaml.MappingNode):
            # ``!!set [a]``, ``!!map [a]``: the base class says "expected a mapping node".
            return super().construct_mapping(node, deep=deep)
        seen: dict[tuple[str, str], yaml.Node] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            ident = (key_node.tag, key_node.value)
            if ident in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key_node.value!r}",
                    key_node.start_mark,
                )
            seen[ident] = key_node
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """PyYAML's construction, with a value its constructor cannot convert reported at its place.

        The safe constructors fail with bare Python errors on values such as
        ``!!int ''`` (IndexError), ``!!bool ''`` (KeyError), ``!!timestamp x``
        (AttributeError) or ``2001-13-45`` (ValueError); each becomes a
        ``ConstructorError`` naming the value, its tag and its line.
        """
        try:
            return super().construct_object(node, deep=deep)
        except (yaml.YAMLError, RecursionError):
            raise
        except (ValueError, TypeError, OverflowError, IndexError, KeyError, AttributeError) as exc:
            raise _ValueProblem(None, None, _value_problem(node, exc), node.start_mark) from None


def _value_problem(node: yaml.Node, exc: Exception) -> str:
    """``cannot read '0x' as !!int``, with the reason when Python gave a readable one."""
    tag = node.tag.replace("tag:yaml.org,2002:", "!!") if node.tag else "its tag"
    if isinstance(node, yaml.ScalarNode):
        value = node.value if len(node.value) <= 40 else node.value[:37] + "..."
        what = repr(value)
    else:
        what = "the sequence" if isinstance(node, yaml.SequenceNode) else "the mapping"
    reason = ""
    if isinstance(exc, (ValueError, OverflowError)) and str(exc).strip():
        reason = " (" + " ".join(str(exc).split()) + ")"
    return f"cannot read {what} as {tag}{reason}"


def check_document_size(
    obj: Any, *, max_items: int = MAX_DOCUMENT_ITEMS, max_depth: int = MAX_DOCUMENT_DEPTH, source: str = ""
) -> None:
    """Walk a loaded document (iteratively) and reject it when too large or too deep.

    Aliases make YAML documents share sub-structures; the walk counts every
    visit, so an alias bomb or a self-referencing list exceeds ``max_items``
    after a bounded amount of work instead of expanding forever downstream.
    Strings weigh one item per 100 characters.
    """
    stack: list[tuple[Any, int]] = [(obj, 0)]
    weight = 0
    while stack:
        item, depth = stack.pop()
        weight += 1
        if depth > max_depth:
            raise DocumentError(source, f"the document is nested too deeply (more than {max_depth} levels)")
        if isinstance(item, dict):
            for k, v in item.items():
                stack.append((k, depth + 1))
                stack.append((v, depth + 1))
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, (str, bytes)):
            weight += len(item) // 100
        if weight > max_items:
            raise DocumentError(
                source, f"the document is too large (more than {max_items} values once aliases are expanded)"
            )


def _check_bracket_depth(text: str, max_depth: int, source: str) -> None:
    """Reject text whose flow brackets nest deeper than ``max_depth`` before the recursive parser sees it.

    PyYAML's parser recurses once per nesting level; thousands of ``[`` would
    otherwise end in a slow ``RecursionError``. Brackets inside quoted strings
    are counted too, which can only make the check stricter for absurd input.
    """
    brackets = _BRACKETS.sub("", text)
    depth = 0
    for ch in brackets:
        if ch in "[{":
            depth += 1
            if depth > max_depth:
                raise DocumentError(
                    source, f"the document is nested too deeply (more than {max_depth} levels)"
                )
        elif depth:
            depth -= 1


def _check_text(text: Any, max_chars: int, source: str) -> str:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DocumentError(source, f"not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    if not isinstance(text, str):
        raise TypeError(f"a document must be str or bytes, got {type(text).__name__}")
    if len(text) > max_chars:
        raise DocumentError(source, f"the document is too long ({len(text)} characters, at most {max_chars})")
    return text


def load_yaml(
    text: str | bytes,
    *,
    source: str = "",
    max_chars: int = MAX_DOCUMENT_CHARS,
    max_items: int = MAX_DOCUMENT_ITEMS,
    max_depth: int = MAX_DOCUMENT_DEPTH,
) -> Any:
    """``yaml.safe_load`` for untrusted text, with limits; every failure is a :class:`DocumentError`.

    ``source`` names the text in messages (a file name, ``"--config"``).
    """
    text = _check_text(text, max_chars, source)
    _check_bracket_depth(text, max_depth, source)
    try:
        data = yaml.load(text, Loader=_UniqueKeySafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join((exc.problem or exc.context or "invalid YAML").split())
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        kind = "value" if isinstance(exc, _ValueProblem) else "syntax"
        raise DocumentError(source, f"YAML {kind} error{where}: {problem}") from None
    except yaml.reader.ReaderError as exc:
        # A character YAML does not allow (control characters, U+0080..U+009F, ...).
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise DocumentError(
            source,
            f"YAML syntax error at line {line}, column {column}: "
            f"unacceptable character U+{char:04X} ({exc.reason})",
        ) from None
    except yaml.YAMLError as exc:
        raise DocumentError(source, "YAML error: " + " ".join(str(exc).split())) from None
    except RecursionError:
        raise DocumentError(source, "the document is nested too deeply to read") from None
    except (ValueError, TypeError, OverflowError) as exc:
        # A collection whose constructor fails after its first item (the loader
        # reports scalars itself, see _UniqueKeySafeLoader.construct_object).
        raise DocumentError(source, "YAML value error: " + " ".join(str(exc).split())) from None
    check_document_size(data, max_items=max_items, max_depth=max_depth, source=source)
    return data


def load_json(
    text: str | bytes,
    *,
    source: str = "",
    max_chars: int = MAX_DOCUMENT_CHARS,
    max_items: int = MAX_DOCUMENT_ITEMS,
    max_depth: int = MAX_DOCUMENT_DEPTH,
) -> Any:
    """``json.loads`` for untrusted text, with the limits of :func:`load_yaml`; failures are DocumentError."""
    text = _check_text(text, max_chars, source)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DocumentError(
            source, f"JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise DocumentError(source, "the document is nested too deeply to read") from None
    except ValueError as exc:
        raise DocumentError(source, f"JSON value error: {exc}") from None
    check_document_size(data, max_items=max_items, max_depth=max_depth, source=source)
    return data


def read_text(path: str | os.PathLike[str], *, max_chars: int = MAX_DOCUMENT_CHARS) -> str:
    """The UTF-8 text of the file at ``path``; every failure is a :class:`DocumentError` naming the file.

    A missing file is a :class:`DocumentNotFoundError` (also a
    ``FileNotFoundError``). The file is read at most ``max_chars`` * 4 bytes
    far, so a huge file is refused without reading it whole. A name holding a
    line break or another unprintable character is shown quoted, with escapes;
    a ``path`` that is not a file name (``None``, a number) is a ``TypeError``.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"a file name must be str or os.PathLike, got {type(path).__name__}")
    p = Path(path)
    name = _file_label(p)
    if "\0" in str(p):
        raise DocumentError(name, "cannot read it: a file name cannot hold a NUL character")
    try:
        with p.open("rb") as handle:
            raw = handle.read(max_chars * 4 + 1)
    except FileNotFoundError:
        raise DocumentNotFoundError(name, "no such file") from None
    except IsADirectoryError:
        raise DocumentError(name, "is a directory, not a file") from None
    except OSError as exc:
        raise DocumentError(name, f"cannot read it: {exc.strerror or exc}") from None
    if len(raw) > max_chars * 4:
        raise DocumentError(name, f"the file is too large (more than {max_chars * 4} bytes)")
    return _check_text(raw, max_chars, name)


def load_yaml_file(path: str | os.PathLike[str], **limits: int) -> Any:
    """The YAML document in the file at ``path`` (see :func:`load_yaml`), errors naming the file."""
    return load_yaml(read_text(path), source=_file_label(Path(path)), **limits)


def load_json_file(path: str | os.PathLike[str], **limits: int) -> Any:
    """The JSON document in the file at ``path`` (see :func:`load_json`), errors naming the file."""
    return load_json(read_text(path), source=_file_label(Path(path)), **limits)


def _file_label(path: Path) -> str:
    """The file name as messages show it: as it is, or quoted with escapes if it holds a line break
    or another character that does not print (so that a message stays one line)."""
    name = str(path)
    return name if name.isprintable() else repr(name)


def escape_script_json(text: str) -> str:
    """JSON text made safe inside an HTML ``<script>`` element: ``<``, ``>`` and ``&`` become
    ``\\u`` escapes (still the same JSON), so no ``</script>`` or ``<!--`` can end or hide it."""
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
