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

import json
import os
import re
from pathlib import Path
from typing import Any

import yaml

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

# Limits for reading untrusted documents. A spec file is written by a person or
# a program and may be large; the limits only stop pathological input.
MAX_DOCUMENT_CHARS = 10_000_000
MAX_DOCUMENT_ITEMS = 2_000_000
MAX_DOCUMENT_DEPTH = 100
_BRACKETS = re.compile(r"[^\[\]{}]+")


class _UniqueKeySafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects a mapping holding the same key twice.

    PyYAML keeps the last value silently, which hides mistakes such as two
    ``nodes:`` sections. Keys merged in with ``<<`` may still be overridden.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
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


def check_document_size(obj: Any, *, max_items: int, max_depth: int) -> None:
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
            raise SpecError("", f"the document is nested too deeply (more than {max_depth} levels)")
        if isinstance(item, dict):
            for k, v in item.items():
                stack.append((k, depth + 1))
                stack.append((v, depth + 1))
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, (str, bytes)):
            weight += len(item) // 100
        if weight > max_items:
            raise SpecError(
                "", f"the document is too large (more than {max_items} values once aliases are expanded)"
            )


def _check_bracket_depth(text: str, max_depth: int) -> None:
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
                raise SpecError("", f"the document is nested too deeply (more than {max_depth} levels)")
        elif depth:
            depth -= 1


def load_yaml_bounded(
    text: str,
    *,
    max_chars: int = MAX_DOCUMENT_CHARS,
    max_items: int = MAX_DOCUMENT_ITEMS,
    max_depth: int = MAX_DOCUMENT_DEPTH,
) -> Any:
    """``yaml.safe_load`` for untrusted text, with limits; every failure is a :class:`SpecError`.

    Rejects duplicate keys, text longer than ``max_chars``, documents nested
    deeper than ``max_depth`` and documents with more than ``max_items``
    values after alias expansion. Syntax errors name the line and column.
    Python-object tags (``!!python/object``) are refused by the safe loader.
    """
    if len(text) > max_chars:
        raise SpecError("", f"the document is too long ({len(text)} characters, at most {max_chars})")
    _check_bracket_depth(text, max_depth)
    try:
        data = yaml.load(text, Loader=_UniqueKeySafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise SpecError("", f"YAML syntax error{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise SpecError("", f"YAML error: {exc}") from None
    except RecursionError:
        raise SpecError("", "the document is nested too deeply to read") from None
    except (ValueError, TypeError, OverflowError) as exc:
        # The safe constructor raises these for scalars it cannot convert:
        # impossible dates (2001-13-45), integers longer than Python's limit.
        raise SpecError("", f"YAML value error: {exc}") from None
    check_document_size(data, max_items=max_items, max_depth=max_depth)
    return data


def load_json_bounded(
    text: str,
    *,
    max_chars: int = MAX_DOCUMENT_CHARS,
    max_items: int = MAX_DOCUMENT_ITEMS,
    max_depth: int = MAX_DOCUMENT_DEPTH,
) -> Any:
    """``json.loads`` for untrusted text, with the limits of :func:`load_yaml_bounded`; failures are SpecError."""
    if len(text) > max_chars:
        raise SpecError("", f"the document is too long ({len(text)} characters, at most {max_chars})")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(
            "", f"JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise SpecError("", "the document is nested too deeply to read") from None
    except ValueError as exc:
        raise SpecError("", f"JSON value error: {exc}") from None
    check_document_size(data, max_items=max_items, max_depth=max_depth)
    return data


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

    A missing file raises :class:`FileNotFoundError` naming it; any other
    failure to read it (a directory, no permission, bytes that are not UTF-8)
    is a :class:`SpecError` naming the file.
    """
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError("", f"cannot read {str(p)!r}: {exc}") from None
