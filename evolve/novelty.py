"""Novelty rejection: a child that duplicates a program already in the database is not evaluated.

After ShinkaEvolve (Lange et al., 2025, "novelty rejection sampling") and
OpenEvolve's novelty check, with a cheap, deterministic similarity instead of
an embedding model:

* **Normal form** (:func:`normalise_code`): the program is parsed, its
  docstrings are dropped and it is written back with ``ast.unparse``, so
  comments, blank lines, formatting, quoting style and docstrings do not
  count (the EVOLVE-BLOCK markers are comments, so they vanish too). Code that
  does not parse is normalised token by token with :mod:`tokenize` (comments
  and non-logical newlines dropped, statements made only of strings dropped,
  indentation rewritten as one level per block), and, where even the
  tokenizer gives up (an unclosed bracket or string, a bad dedent), by a
  small regular-expression scanner that does the same and never fails.
* **Exact duplicates** have the same :func:`code_hash` (sha256 of the normal
  form); the filter keeps every added program's hash in a dict, so this check
  is O(1) however large the database.
* **Near duplicates**: :func:`similarity` is the Jaccard similarity of the
  sets of token shingles (:func:`token_shingles`: every run of ``k``
  consecutive tokens of the normal form as the scanner reads it, with
  NEWLINE/INDENT/DEDENT markers; identifiers and literals kept, so a renamed
  variable or a changed constant lowers it; a statement repeated in a row
  does not, since the shingles form a set). A child whose
  similarity to one of the ``max_compare`` most recently added distinct
  programs reaches ``threshold`` is rejected. With ``embed`` (any
  ``code -> vector`` function, e.g. an embedding model) the similarity is the
  cosine of the embeddings of the normal forms instead.

:class:`NoveltyFilter` is the part the controller uses: ``add`` what enters
the database, ``check`` a child before evaluating it, ``remove`` what leaves,
and ``rebuild`` from ``(id, code)`` pairs on resume (it normalises every
program once but computes shingles only for the ``max_compare`` newest).
"""

from __future__ import annotations

import ast
import hashlib
import io
import math
import re
import threading
import tokenize
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .program import parse_python

__all__ = [
    "NoveltyFilter",
    "NoveltyVerdict",
    "code_hash",
    "jaccard",
    "normalise_code",
    "similarity",
    "token_shingles",
]

# Token types that carry no meaning for the program (or none once the normal form fixed them).
_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER}
_NEWLINE, _INDENT, _DEDENT = "<newline>", "<indent>", "<dedent>"
# A small Python scanner (much faster than `tokenize`, and it never gives up on broken code):
# the tokens of a normal form for the shingles, and the last resort for code `tokenize` rejects.
_SCAN = re.compile(
    r"""
    (?P<nl>\n[ \t\f]*)
  | (?P<ws>[ \t\f\r]+|\\\r?\n)
  | (?P<comment>\#[^\n]*)
  | (?P<str>(?:[rRbBuUfF]{1,2})?(?:'''(?:\\[\s\S]|[^\\])*?'''|\"\"\"(?:\\[\s\S]|[^\\])*?\"\"\"
                                  |'(?:\\.|[^\\'\n])*'|"(?:\\.|[^\\"\n])*"))
  | (?P<num>0[xXoObB][0-9a-fA-F_]+|(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][+-]?\d[\d_]*)?[jJ]?)
  | (?P<name>\w+)
  | (?P<op>\*\*=?|//=?|>>=?|<<=?|->|:=|\.\.\.|[-+*/%@&|^<>=!]=|\S)
    """,
    re.VERBOSE,
)
_OPEN, _CLOSE = frozenset("([{"), frozenset(")]}")
# A joiner that cannot occur inside a token, for shingles as single (hash-cached) strings.
_JOIN = "\x1f"
_CACHE_SIZE = 64

Embed = Callable[[str], Sequence[float]]


# ----------------------------------------------------------------------------- normal form


def _strip_docstrings(tree: ast.AST) -> None:
    """Remove the docstring of the module and of every function and class (in place)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        body = node.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            del body[0]
            if not body and not isinstance(node, ast.Module):
                body.append(ast.Pass())


def _scan(text: str, drop_strings: bool = False) -> tuple[str, list[str]]:
    """Normal form and token stream of ``text`` by :data:`_SCAN`.

    Logical lines end at line breaks outside brackets; comments and blank
    lines are dropped; indentation becomes one level per block (as
    ``tokenize`` tracks it, with INDENT/DEDENT markers in the stream); with
    ``drop_strings`` a logical line made only of strings (a docstring) is dropped.
    """
    lines: list[str] = []
    tokens: list[str] = []
    line: list[str] = []
    strings_only = True
    stack = [0]
    pending: str | None = ""  # the indentation of the line to come (None: inside a logical line)
    depth = 0

    def end_line() -> None:
        nonlocal strings_only
        if line and not (drop_strings and strings_only):
            lines.append("    " * (len(stack) - 1) + " ".join(line))
            tokens.extend(line)
            tokens.append(_NEWLINE)
        line.clear()
        strings_only = True

    for match in _SCAN.finditer(text):
        kind = match.lastgroup
        value = match.group()
        if kind == "nl":
            if depth == 0:
                end_line()
                pending = value[1:]
            continue
        if kind in ("ws", "comment"):
            continue
        if pending is not None:
            width = len(pending.expandtabs(8))
            if width > stack[-1]:
                stack.append(width)
                tokens.append(_INDENT)
            while width < stack[-1] and len(stack) > 1:
                stack.pop()
                tokens.append(_DEDENT)
            pending = None
        if kind == "op":
            if value in _OPEN:
                depth += 1
            elif value in _CLOSE:
                depth = max(0, depth - 1)
        strings_only = strings_only and kind == "str"
        line.append(value)
    end_line()
    return "\n".join(lines), tokens


def _by_tokenize(code: str) -> str:
    """Normal form of code that does not parse, from :mod:`tokenize` (:func:`_scan` where that fails)."""
    try:
        found = [t for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type not in _SKIP]
    except (tokenize.TokenError, SyntaxError):  # an unclosed bracket or string, a bad dedent
        return _scan(code, drop_strings=True)[0]
    lines: list[str] = []
    logical: list[tokenize.TokenInfo] = []
    level = 0
    for tok in found:
        if tok.type == tokenize.INDENT:
            level += 1
        elif tok.type == tokenize.DEDENT:
            level = max(0, level - 1)
        elif tok.type != tokenize.NEWLINE:
            logical.append(tok)
        elif logical:
            # A logical line made only of strings is a docstring (or has no effect): dropped.
            if not all(t.type == tokenize.STRING for t in logical):
                lines.append("    " * level + " ".join(t.string for t in logical))
            logical.clear()
    if logical and not all(t.type == tokenize.STRING for t in logical):
        lines.append("    " * level + " ".join(t.string for t in logical))
    return "\n".join(lines)


def _parsed_normal(code: str) -> str | None:
    """``ast.unparse`` of ``code`` without docstrings, or None when it does not parse."""
    try:
        tree = parse_python(code)
        _strip_docstrings(tree)
        return ast.unparse(tree)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _normal_only(code: str) -> str:
    normal = _parsed_normal(code)
    return normal if normal is not None else _by_tokenize(code)


def _normalise(code: str) -> tuple[str, list[str]]:
    """The normal form of ``code`` and its token stream (what :func:`_scan` reads in the normal form)."""
    normal = _normal_only(code)
    return normal, _scan(normal)[1]


def normalise_code(code: str) -> str:
    """A canonical form of ``code``, the same whatever its comments, blank lines, formatting and docstrings.

    Parseable code is ``ast.unparse`` of its tree without docstrings. Other
    code is rebuilt from its :mod:`tokenize` tokens (COMMENT and NL tokens
    dropped, one space between tokens, four spaces per indentation level,
    string-only statements dropped); where even the tokenizer gives up (an
    unclosed bracket or string, a bad dedent) from a small scanner that does
    the same and never fails.
    """
    return _normal_only(code)


def code_hash(code: str) -> str:
    """The sha256 (hex) of :func:`normalise_code` of ``code``: equal for exact duplicates."""
    return _digest(_normal_only(code))


def _digest(normal: str) -> str:
    return hashlib.sha256(normal.encode("utf-8", "surrogatepass")).hexdigest()


# ----------------------------------------------------------------------------- similarity


def _shingles_of(tokens: Sequence[str], k: int) -> frozenset[str]:
    if len(tokens) < k:
        return frozenset([_JOIN.join(tokens)]) if tokens else frozenset()
    return frozenset(_JOIN.join(tokens[i : i + k]) for i in range(len(tokens) - k + 1))


def token_shingles(code: str, k: int = 3) -> frozenset[str]:
    """The set of ``k``-grams of the normal form's tokens (a program shorter than ``k`` tokens: one shingle).

    Each shingle is one string (its tokens joined by ``\\x1f``), so set
    operations use Python's cached string hashes.
    """
    if k < 1:
        raise ValueError(f"shingle size k must be >= 1, got {k}")
    return _shingles_of(_normalise(code)[1], k)


def jaccard(a: frozenset[str] | set[str], b: frozenset[str] | set[str]) -> float:
    """``|a & b| / |a | b|``; two empty sets are identical (1.0)."""
    if not a and not b:
        return 1.0
    if len(a) > len(b):
        a, b = b, a
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def similarity(a: str, b: str, k: int = 3) -> float:
    """Jaccard similarity of the token shingles of two programs, in [0, 1] (1.0 for exact duplicates)."""
    return jaccard(token_shingles(a, k), token_shingles(b, k))


def _cosine(a: Sequence[float], norm_a: float, b: Sequence[float], norm_b: float) -> float:
    if norm_a == 0.0 or norm_b == 0.0:
        return 0.0
    if len(a) != len(b):
        raise ValueError(f"embeddings of different lengths ({len(a)} and {len(b)})")
    return math.fsum(x * y for x, y in zip(a, b)) / (norm_a * norm_b)


# ----------------------------------------------------------------------------- the filter


@dataclass(frozen=True)
class NoveltyVerdict:
    """What :meth:`NoveltyFilter.check` decided about one child.

    ``nearest_id`` is the most similar program compared (the earliest added
    one with the same normal form for an exact duplicate), ``None`` when the
    filter was empty; ``similarity`` its similarity (1.0 for an exact
    duplicate, 0.0 when there was nothing to compare).
    """

    novel: bool
    reason: str
    nearest_id: str | None
    similarity: float


@dataclass(frozen=True)
class _Signature:
    """What a program is compared by: its hash, shingles and (with ``embed``) its embedding."""

    hash: str
    shingles: frozenset[str]
    vector: tuple[float, ...] | None
    norm: float


class NoveltyFilter:
    """Rejects children that are exact or near duplicates of programs added before.

    ``threshold`` in (0, 1]: a child whose similarity to a compared program is
    ``>= threshold`` is rejected; 1.0 rejects exact duplicates only (same
    normal form), however similar the rest. ``shingle`` is the k of the token
    k-grams; ``max_compare`` how many of the most recently added distinct
    programs a child is compared with (exact duplicates are found among all
    added programs). ``embed``, when given, maps a normal form to a vector
    and the similarity becomes the cosine of the two vectors.

    Counters: ``checked`` (calls of :meth:`check`), ``rejected_exact`` and
    ``rejected_similar``. The methods are thread-safe.
    """

    def __init__(
        self,
        threshold: float = 0.95,
        shingle: int = 3,
        max_compare: int = 256,
        embed: Embed | None = None,
    ) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or math.isnan(threshold):
            raise ValueError(f"threshold must be a number in (0, 1], got {threshold!r}")
        if not 0.0 < threshold <= 1.0:
            raise ValueError(
                f"threshold must be in (0, 1] (1.0 rejects exact duplicates only), got {threshold}"
            )
        if isinstance(shingle, bool) or not isinstance(shingle, int) or shingle < 1:
            raise ValueError(f"shingle (tokens per k-gram) must be an integer >= 1, got {shingle!r}")
        if isinstance(max_compare, bool) or not isinstance(max_compare, int) or max_compare < 0:
            raise ValueError(f"max_compare must be an integer >= 0, got {max_compare!r}")
        if embed is not None and not callable(embed):
            raise ValueError(f"embed must be a callable code -> vector or None, got {embed!r}")
        self.threshold = float(threshold)
        self.shingle = shingle
        self.max_compare = max_compare
        self.embed = embed
        self.checked = 0
        self.rejected_exact = 0
        self.rejected_similar = 0
        self._lock = threading.RLock()
        self._by_hash: dict[str, list[str]] = {}  # normal-form hash -> ids, in the order added
        self._hash_of: dict[str, str] = {}  # id -> normal-form hash
        # The most recently added distinct normal forms (oldest first), by hash.
        self._recent: OrderedDict[str, _Signature] = OrderedDict()
        # The last few programs checked: normal forms by the text's digest, signatures by the normal form's.
        self._normal_cache: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._sig_cache: OrderedDict[str, _Signature] = OrderedDict()

    # -- signatures

    def _signature_of_normal(self, digest: str, normal: str, tokens: Sequence[str]) -> _Signature:
        vector: tuple[float, ...] | None = None
        norm = 0.0
        if self.embed is not None:
            vector = tuple(float(x) for x in self.embed(normal))
            norm = math.sqrt(math.fsum(x * x for x in vector))
        return _Signature(digest, _shingles_of(tokens, self.shingle), vector, norm)

    def _normal(self, code: str) -> tuple[str, str]:
        """``(normal form, its digest)`` of ``code``, cached by the text (so add() after check() is free)."""
        key = _digest(code)
        found = self._normal_cache.get(key)
        if found is None:
            normal = _normal_only(code)
            found = self._normal_cache[key] = (normal, _digest(normal))
            if len(self._normal_cache) > _CACHE_SIZE:
                self._normal_cache.popitem(last=False)
        else:
            self._normal_cache.move_to_end(key)
        return found

    def _signature(self, normal: str, digest: str) -> _Signature:
        """The signature of a normal form (cached by its digest)."""
        found = self._recent.get(digest) or self._sig_cache.get(digest)
        if found is None:
            found = self._sig_cache[digest] = self._signature_of_normal(digest, normal, _scan(normal)[1])
            if len(self._sig_cache) > _CACHE_SIZE:
                self._sig_cache.popitem(last=False)
        return found

    def _similarity(self, a: _Signature, b: _Signature) -> float:
        if a.vector is not None and b.vector is not None:
            return _cosine(a.vector, a.norm, b.vector, b.norm)
        return jaccard(a.shingles, b.shingles)

    # -- the database's programs

    def _register(self, program_id: str, digest: str) -> None:
        """Record ``program_id`` under ``digest`` (replacing what it was before)."""
        if program_id in self._hash_of:
            self._forget(program_id)
        self._hash_of[program_id] = digest
        self._by_hash.setdefault(digest, []).append(program_id)

    def _remember(self, sig: _Signature) -> None:
        if self.max_compare == 0:
            return
        self._recent[sig.hash] = sig
        self._recent.move_to_end(sig.hash)
        while len(self._recent) > self.max_compare:
            self._recent.popitem(last=False)

    def _forget(self, program_id: str) -> None:
        digest = self._hash_of.pop(program_id)
        ids = self._by_hash[digest]
        ids.remove(program_id)
        if not ids:
            del self._by_hash[digest]
            self._recent.pop(digest, None)

    def add(self, program_id: str, code: str) -> str:
        """Record a program of the database (an id added again is replaced); returns its :func:`code_hash`."""
        with self._lock:
            normal, digest = self._normal(code)
            self._register(program_id, digest)
            if self.max_compare:
                self._remember(self._signature(normal, digest))
            return digest

    def remove(self, program_id: str) -> None:
        """Forget a program (KeyError if it was never added)."""
        with self._lock:
            if program_id not in self._hash_of:
                raise KeyError(f"program {program_id!r} is not in the novelty filter")
            self._forget(program_id)

    def rebuild(self, pairs: Iterable[tuple[str, str]]) -> NoveltyFilter:
        """Forget everything and add ``(program_id, code)`` pairs in order (counters are kept); returns self.

        Every program is normalised once (for its hash); shingles and
        embeddings are computed only for the ``max_compare`` newest distinct
        normal forms, the only ones a child is compared with.
        """
        with self._lock:
            self._by_hash.clear()
            self._hash_of.clear()
            self._recent.clear()
            pending: OrderedDict[str, str] = OrderedDict()  # digest -> normal form, newest last
            seen: dict[str, tuple[str, str]] = {}  # raw-code digest -> (normal form, its digest)
            for program_id, code in pairs:
                # A failed mutation stores its parent's code: the same text is normalised once.
                key = _digest(code)
                if key not in seen:
                    normal = _normal_only(code)
                    seen[key] = (normal, _digest(normal))
                normal, digest = seen[key]
                self._register(program_id, digest)
                if self.max_compare:
                    pending[digest] = normal
                    pending.move_to_end(digest)
                    if len(pending) > self.max_compare:
                        pending.popitem(last=False)
            for digest, normal in pending.items():
                if digest in self._by_hash:  # an id re-added with other code may have dropped it
                    self._remember(self._signature_of_normal(digest, normal, _scan(normal)[1]))
            return self

    def __len__(self) -> int:
        return len(self._hash_of)

    def __contains__(self, program_id: object) -> bool:
        return program_id in self._hash_of

    # -- the check

    def check(self, code: str, *, exact_only: bool = False) -> NoveltyVerdict:
        """Whether ``code`` is novel: not an exact duplicate, and below ``threshold`` to every compared program.

        ``exact_only``: only exact duplicates are rejected (for operators whose children differ from
        their parent in a number or two by design).
        """
        with self._lock:
            self.checked += 1
            normal, digest = self._normal(code)
            same = self._by_hash.get(digest)
            if same:
                self.rejected_exact += 1
                return NoveltyVerdict(False, f"exact duplicate of {same[0]}", same[0], 1.0)
            if exact_only:
                return NoveltyVerdict(
                    True, "novel (not an exact duplicate; near duplicates not checked)", None, 0.0
                )
            if not self._recent:
                return NoveltyVerdict(True, "novel (nothing to compare with)", None, 0.0)
            sig = self._signature(normal, digest)
            best_hash: str | None = None
            best = -math.inf
            size = len(sig.shingles)
            for other in reversed(self._recent.values()):  # newest first: ties go to the newest
                if sig.vector is None and best_hash is not None:
                    # Jaccard <= min(|A|, |B|) / max(|A|, |B|): skip what cannot beat the best so far.
                    small, large = sorted((size, len(other.shingles)))
                    if large and small / large <= best:
                        continue
                value = self._similarity(sig, other)
                if value > best:
                    best, best_hash = value, other.hash
            if best_hash is None:
                return NoveltyVerdict(True, "novel (nothing to compare with)", None, 0.0)
            nearest = self._by_hash[best_hash][0]
            if self.threshold < 1.0 and best >= self.threshold:
                self.rejected_similar += 1
                return NoveltyVerdict(
                    False, f"similarity {best:.4f} to {nearest} >= {self.threshold:g}", nearest, best
                )
            return NoveltyVerdict(
                True,
                f"novel (nearest {nearest} at similarity {best:.4f} < {self.threshold:g})",
                nearest,
                best,
            )

    def stats(self) -> dict[str, int]:
        """The counters and sizes, for logs and reports."""
        with self._lock:
            return {
                "programs": len(self._hash_of),
                "distinct": len(self._by_hash),
                "compared": len(self._recent),
                "checked": self.checked,
                "rejected_exact": self.rejected_exact,
                "rejected_similar": self.rejected_similar,
            }
