"""Output parsers: read code, YAML and final answers back out of model text.

Small models rarely follow formats exactly, so each parser tries the strict
form first and then well-defined fallbacks; none of them raises on odd text —
they return ``None`` (or an empty list) when nothing is there.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+\-.]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code_blocks(text: str, lang: str | None = None) -> list[str]:
    """All fenced blocks, optionally only those tagged ``lang`` (case-insensitive).

    An unterminated final fence (a model cut off by its token limit) still
    yields its content.
    """
    out = []
    for m in _FENCE.finditer(text or ""):
        tag = m.group(1).lower()
        if lang is None or tag == lang.lower() or (lang.lower() == "python" and tag in ("py", "python3")):
            out.append(m.group(2).rstrip())
    return out


_CODE_START = re.compile(r"^(def |class |import |from \w+ import |@)", re.MULTILINE)


def extract_code(text: str, lang: str = "python") -> str | None:
    """The code of an answer: the last ``lang`` block, else the last untagged
    block, else — if the answer itself starts like Python — the text from the
    first ``def``/``import``/``class`` line on."""
    blocks = extract_code_blocks(text, lang)
    if blocks:
        return blocks[-1]
    untagged = [m.group(2).rstrip() for m in _FENCE.finditer(text or "") if not m.group(1)]
    if untagged:
        return untagged[-1]
    m = _CODE_START.search(text or "")
    if m and lang == "python":
        return text[m.start() :].rstrip()
    return None


def extract_yaml_block(text: str) -> str | None:
    """The last ```yaml (or ```yml) block of an answer, or ``None``."""
    blocks = extract_code_blocks(text, "yaml") + extract_code_blocks(text, "yml")
    if not blocks:
        return None
    # keep document order: find the last by position
    last = None
    for m in _FENCE.finditer(text):
        if m.group(1).lower() in ("yaml", "yml"):
            last = m.group(2).rstrip()
    return last


_FINAL_PATTERNS = [
    re.compile(r"final answer\s*(?:is)?\s*[:：]?\s*(.+)", re.IGNORECASE),
    re.compile(r"\\boxed\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}"),
    re.compile(r"^####\s*(.+)$", re.MULTILINE),
    re.compile(r"^\s*answer\s*[:：]\s*(.+)$", re.IGNORECASE | re.MULTILINE),
    re.compile(r"the answer is\s*[:：]?\s*(.+)", re.IGNORECASE),
]


def extract_final_answer(text: str) -> str | None:
    """The final answer of a reasoning text.

    Looks, in order, for ``Final answer: X``, ``\\boxed{X}``, ``#### X``,
    ``Answer: X`` and ``the answer is X``, taking the LAST occurrence of the
    first pattern that matches; the answer is its first line, without trailing
    punctuation or markdown emphasis.
    """
    if not text:
        return None
    for pat in _FINAL_PATTERNS:
        hits = pat.findall(text)
        if hits:
            ans = hits[-1].strip().splitlines()[0] if hits[-1].strip() else ""
            prev = None
            while ans != prev:  # peel markdown emphasis and end punctuation, in any order
                prev = ans
                ans = ans.strip().strip("*_`").rstrip(".。!").strip()
            if ans:
                return ans
    return None


_ARTICLES = re.compile(r"\b(a|an|the)\b", re.IGNORECASE)
_NUMBER = re.compile(r"^[-+]?\$?\s*[\d,]*\.?\d+\s*%?$")


def normalize_answer(ans: str | None) -> str:
    """SQuAD-style normalisation for exact match: lower case, no punctuation,
    no articles, single spaces; numbers lose thousands separators, ``$``, and
    trailing zeros (``1,000.50`` → ``1000.5``)."""
    if ans is None:
        return ""
    s = ans.strip()
    if _NUMBER.match(s):
        num = s.replace(",", "").replace("$", "").replace(" ", "").rstrip("%")
        try:
            v = float(num)
            return str(int(v)) if v == int(v) else repr(v)
        except ValueError:
            pass
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


_NUM = r"[-+]?\$?\s*(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?"
_UNIT_WORDS = r"(?:\s+[A-Za-z][A-Za-z'-]*){0,3}"
_NUMBER_WITH_UNITS = re.compile(rf"^\s*({_NUM})\s*%?{_UNIT_WORDS}\s*$")
_EQUATION_RESULT = re.compile(rf"=\s*({_NUM})\s*%?{_UNIT_WORDS}\s*$")


def numeric_answer(ans: str | None) -> float | None:
    """The number an answer states, or None when it is not a numeric answer.

    A number (``1,000.50``, ``$5``, ``40%``), a number followed by up to three
    unit words (``18 shells``, ``12 apples left``), or an equation's result
    (``15 + 1 = 16``). Anything else (``between 3 and 4``, ``Paris``) is None.
    """
    if not ans:
        return None
    m = _NUMBER_WITH_UNITS.match(ans) or _EQUATION_RESULT.search(ans)
    if not m or not re.search(r"\d", m.group(1)):
        return None
    try:
        return float(m.group(1).replace(",", "").replace("$", "").replace(" ", ""))
    except ValueError:
        return None


def answers_match(a: str | None, b: str | None) -> bool:
    """Whether two answers agree: equal numbers when both are numeric answers
    (:func:`numeric_answer`: ``18 shells`` matches ``18``, ``15 + 1 = 16``
    matches ``16``), else exact match after :func:`normalize_answer` (both non-empty)."""
    xa, xb = numeric_answer(a), numeric_answer(b)
    if xa is not None and xb is not None:
        return abs(xa - xb) <= 1e-9 * max(1.0, abs(xa), abs(xb))
    na, nb = normalize_answer(a), normalize_answer(b)
    return bool(na) and na == nb


PARSERS: dict[str, Callable[[str], object]] = {
    "code": extract_code,
    "python": extract_code,
    "yaml": extract_yaml_block,
    "final_answer": extract_final_answer,
    "text": lambda t: t,
}


def get_parser(name_or_fn: str | Callable[[str], object] | None) -> Callable[[str], object] | None:
    if name_or_fn is None or callable(name_or_fn):
        return name_or_fn
    try:
        return PARSERS[name_or_fn]
    except KeyError:
        raise KeyError(f"unknown parser {name_or_fn!r}; known: {', '.join(sorted(PARSERS))}") from None
