"""How a child program is made from a parent: LLM diffs or LLM-free AST operators.

This module is long because both ways of making a child (LLM diffs and LLM-
free AST operators) and the Mutator that chooses between them share one set of
child-validation rules and one result type.

**LLM diffs** (AlphaEvolve, Novikov et al. 2025; OpenEvolve): the prompt shows
the parent, its metrics and evaluation artifacts, and inspiration programs
from the database; the model answers with one or more blocks ::

    <<<<<<< SEARCH
    exact lines of the current program
    =======
    their replacement
    >>>>>>> REPLACE

which are applied only where the SEARCH text lies inside an EVOLVE block. An
answer without such blocks may instead hold the whole program in one fenced
python block (full rewrite); its evolve-block contents are transplanted into
the parent, so the frozen parts never change. The backend is drawn from a
weighted ensemble of ``societas.agents.load_llm`` URIs; all prompts of a batch that go
to one backend are sent in one ``generate`` call.

**AST operators** (no LLM), each confined to the evolve blocks and seeded:

* ``constant`` — perturb 1..``max_constants`` literals (one with chance
  1/2, each further one half as likely as the one before: a change that
  helps alone is not lost to another drawn with it): numbers by
  multiplicative log-normal noise ``x * exp(N(0, sigma))`` or additive
  ``x + N(0, sigma)`` (an integer under 10 in size moves by one, a larger
  one by one or scaled and rounded); a string
  that the evolve block names among alternatives (in one comment, or in one
  list, tuple or set of strings: ``# loader: ['csv_reader', 'json_reader']``)
  becomes another of them (:func:`choice_sites`). The literals are drawn
  statement by statement: each statement of the blocks is as likely to be
  touched as any other, so a lone size or bound is not drowned out by the
  dozens of numbers of one array literal. A literal of a local name nothing
  reads is left alone, and so is one whose every change (``exhausted_after``
  of them) broke a working program: a point count the evaluator checks;
* ``operator`` — swap one arithmetic operator (``+ - * /``), one comparison
  (``< <= > >=``) or ``min``/``max``;
* ``function`` — swap a called function for its partner from
  ``mutation.function_pairs`` (e.g. ``torch.relu`` <-> ``torch.abs``);
* ``crossover`` — recombine whole hooks: each top-level class or function
  that differs between the parent and a second parent comes from the second
  with chance 1/2 (at least one does, not all);
* ``blocks`` — insert, replace or remove one building block of the task's
  library inside a hook (:mod:`societas.evolve.blocks`);
* ``llm_line`` — the LLM rewrites one ``name = expression`` line of one hook,
  shown the hook, its contract (``hooks`` in the task's building blocks) and
  the line: what a small model can do. The answer is checked before any
  evaluation (it parses, uses only names in scope, no ``eval``/dunders);
* ``table`` — one table of numbers (a list display of numbers or of rows of
  numbers, or a numpy constructor the literals fix, first written out) grows,
  shrinks or moves a row: a point or a circle of a construction moves as one,
  a copy of a row (moved, or reflected) joins, a row leaves, or rows that
  repeat an earlier one spread to random convex combinations of the others
  (:mod:`societas.evolve.tables`); each move on each table is drawn by its
  credit, as literals are;
* ``cmaes`` — CMA-ES over all numeric literals of an island's elite at once
  (:func:`cmaes_children`): its children share the elite's code and differ
  in their numbers, generation after generation.

An LLM-free operator that finds nothing of its kind in the parent (no
literal, no operator, no second parent) hands the child to another of the
configured ones, drawn by weight, so a task whose program offers one kind of
edit spends no iterations on the others.

Edits are made on the source text at the positions the AST gives, so comments
and formatting elsewhere survive. Every child must parse, differ from its
parent, keep the text outside the evolve blocks byte for byte and respect
``max_code_length``; otherwise the mutation fails with a reason (a
:class:`MutationError`), which the controller records as a failed program.
"""

from __future__ import annotations

import ast
import collections
import copy
import difflib
import hashlib
import io
import logging
import math
import os
import random
import re
import textwrap
import tokenize
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np
from cmaes import CMA

from societas.agents.llm import LLM, SamplingParams, load_llm

from .blocks import BlockError, BlockLibrary, mutate_blocks
from .config import EvolveConfig, LLMConfig, MutationConfig
from .program import (
    EvolveBlockError,
    Program,
    find_evolve_blocks,
    frozen_parts_equal,
    parse_python,
    replace_evolve_blocks,
)
from .tables import NoTable, Table, TableError, find_tables, mutate_table

logger = logging.getLogger(__name__)

__all__ = [
    "LLM_KINDS",
    "DiffBlock",
    "LLMEnsemble",
    "LLMUnavailable",
    "MutationError",
    "MutationRequest",
    "MutationResult",
    "Mutator",
    "apply_diff",
    "apply_llm_answer",
    "LineSite",
    "apply_line_answer",
    "build_line_prompt",
    "build_prompt",
    "cmaes_children",
    "cmaes_rank_key",
    "exhausted",
    "line_sites",
    "crossover",
    "numeric_sites",
    "parse_diff",
    "perturb_constants",
    "perturb_constants_at",
    "swap_function",
    "swap_operator",
    "table_child",
    "table_sites",
    "validate_child",
]

SEARCH, DIVIDER, REPLACE = "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE"
LLM_KINDS = frozenset({"llm", "llm_line"})  # the mutation kinds that call an LLM
# LLM-free kinds made one child at a time, which stand in for each other where one finds nothing to change.
AST_FALLBACK_KINDS = ("constant", "operator", "function", "crossover", "blocks", "table")
_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
_MAX_RESPONSE_ARTIFACT = 4000


class MutationError(ValueError):
    """A mutation that produced no valid child; the message is the recorded reason."""


class NotApplicable(MutationError):
    """The operator finds nothing of its kind to change in this parent (no constant, no operator, no second
    parent...): the :class:`Mutator` hands the child to another LLM-free operator instead."""


# ============================================================================ diffs


@dataclass(frozen=True)
class DiffBlock:
    search: str
    replace: str


def parse_diff(text: str) -> list[DiffBlock]:
    """The SEARCH/REPLACE blocks of an answer, in order; raises :class:`MutationError` on a broken block."""
    blocks: list[DiffBlock] = []
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        if lines[i].strip() != SEARCH:
            i += 1
            continue
        start = i
        search: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() != DIVIDER:
            if lines[i].strip() in (SEARCH, REPLACE):
                raise MutationError(
                    f"SEARCH block {len(blocks) + 1} (answer line {start + 1}) has no '{DIVIDER}' line"
                )
            search.append(lines[i])
            i += 1
        if i == len(lines):
            raise MutationError(
                f"SEARCH block {len(blocks) + 1} (answer line {start + 1}) has no '{DIVIDER}' line"
            )
        replace: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() != REPLACE:
            if lines[i].strip() == SEARCH:
                break
            replace.append(lines[i])
            i += 1
        if i == len(lines) or lines[i].strip() != REPLACE:
            raise MutationError(
                f"SEARCH block {len(blocks) + 1} (answer line {start + 1}) is not closed by '{REPLACE}'"
            )
        i += 1
        search_text, replace_text = "".join(search), "".join(replace)
        if not search_text.strip():
            raise MutationError(
                f"SEARCH block {len(blocks) + 1} (answer line {start + 1}) has an empty SEARCH part"
            )
        blocks.append(DiffBlock(search_text, replace_text))
    return blocks


def apply_diff(code: str, diffs: Sequence[DiffBlock]) -> str:
    """Apply SEARCH/REPLACE blocks in order, each to its first match inside an evolve block."""
    for number, diff in enumerate(diffs, start=1):
        search, replace = diff.search, diff.replace
        if search.endswith("\n") and not replace.endswith("\n") and replace:
            replace += "\n"
        for block in find_evolve_blocks(code):
            content = block.content(code)
            at = content.find(search)
            if at < 0 and search.endswith("\n"):
                # The block's last line may be the search text's last line.
                at = content.find(search.rstrip("\n"))
                if at >= 0:
                    search, replace = search.rstrip("\n"), replace.rstrip("\n")
            if at >= 0:
                start = block.start + at
                code = code[:start] + replace + code[start + len(search) :]
                break
        else:
            where = "outside the evolve blocks" if search in code else "anywhere in the program"
            first = search.strip().splitlines()[0][:80]
            if where.startswith("outside"):
                raise MutationError(
                    f"SEARCH block {number} ({first!r}) matches only code outside the evolve blocks"
                )
            raise MutationError(f"SEARCH block {number} ({first!r}) was not found anywhere in the program")
    return code


def apply_rewrite(parent: str, rewrite: str) -> str:
    """Transplant the evolve-block contents of a fully rewritten program into ``parent``."""
    parent_blocks = find_evolve_blocks(parent)
    try:
        new_blocks = find_evolve_blocks(rewrite)
    except EvolveBlockError as exc:
        raise MutationError(f"rewritten program has malformed evolve markers: {exc}") from None
    if new_blocks:
        if len(new_blocks) != len(parent_blocks):
            raise MutationError(
                f"rewritten program has {len(new_blocks)} evolve blocks, the parent has {len(parent_blocks)}"
            )
        return replace_evolve_blocks(parent, [b.content(rewrite) for b in new_blocks])
    if len(parent_blocks) == 1:
        return replace_evolve_blocks(parent, [rewrite])
    raise MutationError("the fenced program has no EVOLVE-BLOCK markers and the parent has several blocks")


def apply_llm_answer(parent: str, answer: str, *, allow_rewrite: bool = True) -> tuple[str, str]:
    """The child code for an LLM answer and how it was read (``"diff"`` or ``"rewrite"``)."""
    diffs = parse_diff(answer)
    if diffs:
        return apply_diff(parent, diffs), "diff"
    fences = _FENCE.findall(answer)
    if fences and allow_rewrite:
        return apply_rewrite(parent, max(fences, key=len)), "rewrite"
    raise MutationError("the answer has neither SEARCH/REPLACE blocks nor a fenced python program")


def validate_child(parent: str, child: str, max_code_length: int) -> None:
    """Raise :class:`MutationError` unless ``child`` is a valid, changed program with the parent's frozen parts."""
    if child == parent:
        raise MutationError("the mutation left the program unchanged")
    if len(child) > max_code_length:
        raise MutationError(
            f"the child has {len(child)} characters, more than max_code_length={max_code_length}"
        )
    try:
        parse_python(child)
    except SyntaxError as exc:
        raise MutationError(f"the child does not parse: {exc.msg} (line {exc.lineno})") from None
    except (MemoryError, RecursionError):
        # Python's parser gives up on absurdly nested expressions (an LLM can write one).
        raise MutationError("the child is nested too deeply for Python's parser") from None
    if not frozen_parts_equal(parent, child):
        raise MutationError("the child changes code outside the evolve blocks")


# ============================================================================ prompts


def _format_metrics(metrics: dict[str, Any]) -> str:
    if not metrics:
        return "(none)"
    return "\n".join(
        f"- {k}: {v:.6g}" if isinstance(v, float) else f"- {k}: {v}" for k, v in sorted(metrics.items())
    )


def build_prompt(
    parent: Program, inspirations: Sequence[Program], config: EvolveConfig
) -> list[dict[str, str]]:
    """The chat prompt asking for a child of ``parent``."""
    pc = config.prompt
    parts = [
        f"# Current program (fitness {parent.fitness}, generation {parent.generation})",
        f"```python\n{parent.code.rstrip()}\n```",
        "## Its metrics",
        _format_metrics(parent.metrics),
    ]
    artifacts = {k: v for k, v in parent.artifacts.items() if v and k != "llm_response"}
    if pc.include_artifacts and artifacts:
        parts.append("## Artifacts of its evaluation")
        for key, value in sorted(artifacts.items()):
            text = value if len(value) <= pc.max_artifact_chars else "..." + value[-pc.max_artifact_chars :]
            parts.append(f"### {key}\n```\n{text.rstrip()}\n```")
    if inspirations:
        parts.append("## Other programs from the database, for inspiration")
        for number, program in enumerate(inspirations, start=1):
            blocks = "\n# ...\n".join(b.rstrip() for b in _safe_blocks(program.code))
            parts.append(
                f"### Inspiration {number} (fitness {program.fitness})\n{_format_metrics(program.metrics)}\n"
                f"```python\n{blocks}\n```"
            )
    if config.diff_based_evolution:
        parts.append(
            "## Task\nImprove the fitness of the current program. Change only code between "
            "EVOLVE-BLOCK-START and EVOLVE-BLOCK-END. Answer with one or more blocks of this exact form, "
            "where SEARCH holds lines copied exactly from the current program:\n"
            f"{SEARCH}\n<lines to find>\n{DIVIDER}\n<replacement lines>\n{REPLACE}\n"
            "Alternatively give the whole new program in one ```python fenced block, keeping the markers."
        )
    else:
        parts.append(
            "## Task\nImprove the fitness of the current program. Answer with the whole new program in one "
            "```python fenced block, keeping the EVOLVE-BLOCK-START/END markers; only code between them may change."
        )
    return [{"role": "system", "content": pc.system_message}, {"role": "user", "content": "\n\n".join(parts)}]


def _safe_blocks(code: str) -> list[str]:
    try:
        return [b.content(code) for b in find_evolve_blocks(code)] or [code]
    except EvolveBlockError:
        return [code]


# ============================================================================ ensemble


class LLMUnavailable(RuntimeError):
    """An LLM backend of the run cannot answer (checked at the start, or failing again and again)."""


_ENV_REFERENCE = re.compile(r"^\$\{([^}]+)\}$")


def resolve_api_key(value: str | None) -> str | None:
    """An API key as configured: ``${VAR}`` reads the environment variable ``VAR`` (an error when unset)."""
    if value is None:
        return None
    match = _ENV_REFERENCE.match(value)
    if match is None:
        return value
    found = os.environ.get(match.group(1))
    if found is None:
        raise ValueError(f"the API key refers to the environment variable {match.group(1)}, which is not set")
    return found


class LLMEnsemble:
    """Weighted backends; :meth:`choose` draws one index with a caller-supplied RNG.

    ``sampling[i]`` holds backend ``i``'s own ``temperature``, ``top_p`` and
    ``max_tokens`` (None: the ``llm`` section's).
    """

    def __init__(
        self,
        members: Sequence[tuple[LLM, float]],
        sampling: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        if not members:
            raise ValueError("an LLM ensemble needs at least one backend")
        for llm, weight in members:
            if not weight > 0:
                raise ValueError(
                    f"LLM {getattr(llm, 'name', llm)!r} has weight {weight}; weights must be > 0"
                )
        self.members = list(members)
        if sampling is not None and len(sampling) != len(self.members):
            raise ValueError(f"got {len(sampling)} sampling settings for {len(self.members)} backends")
        self.sampling = [dict(s) for s in sampling] if sampling is not None else [{} for _ in self.members]

    @classmethod
    def from_uris(
        cls,
        uris: Sequence[tuple[str, float]],
        *,
        settings: Sequence[dict[str, Any]] | None = None,
    ) -> LLMEnsemble:
        """The ensemble of ``(URI, weight)`` pairs.

        ``settings[i]`` (see :meth:`societas.evolve.config.LLMConfig.settings`)
        gives backend ``i`` its sampling settings and, for an ``openai:`` URI,
        its request settings: ``timeout``, ``retries``, ``retry_delay`` (the
        first back-off, doubled per retry), ``api_key`` and ``reasoning_effort``.
        """
        members, sampling = [], []
        for index, (uri, weight) in enumerate(uris):
            setting = dict(settings[index]) if settings is not None else {}
            options: dict[str, Any] = {}
            if uri.strip().startswith("openai:"):
                if setting.get("timeout") is not None:
                    options["timeout_s"] = setting["timeout"]
                if setting.get("retries") is not None:
                    options["max_retries"] = int(setting["retries"])
                if setting.get("retry_delay") is not None:
                    options["backoff_s"] = float(setting["retry_delay"])
                    options["backoff_max_s"] = max(20.0, 8.0 * float(setting["retry_delay"]))
                key = resolve_api_key(setting.get("api_key"))
                if key is not None:
                    options["api_key"] = key
                if setting.get("reasoning_effort"):
                    options["extra_body"] = {"reasoning_effort": setting["reasoning_effort"]}
            members.append((load_llm(uri, **options), weight))
            sampling.append({k: setting.get(k) for k in ("temperature", "top_p", "max_tokens")})
        return cls(members, sampling)

    @classmethod
    def from_config(cls, config: LLMConfig, uris: Sequence[str] | None = None) -> LLMEnsemble | None:
        """The run's ensemble: ``uris`` (each weight 1, the ``llm`` section's settings), else ``llm.models``.

        None when neither names a model (the run then uses the LLM-free operators only).
        """
        if uris:
            shared = {
                k: getattr(config, k)
                for k in (
                    "api_key",
                    "temperature",
                    "top_p",
                    "max_tokens",
                    "timeout",
                    "retries",
                    "retry_delay",
                )
            }
            shared["reasoning_effort"] = config.reasoning_effort
            return cls.from_uris([(u, 1.0) for u in uris], settings=[dict(shared) for _ in uris])
        if not config.models:
            return None
        pairs = [(m.uri(config.api_base), m.weight) for m in config.models]
        return cls.from_uris(pairs, settings=[config.settings(i) for i in range(len(config.models))])

    def choose(self, rng: random.Random) -> int:
        return rng.choices(range(len(self.members)), weights=[w for _, w in self.members])[0]

    def check(self) -> None:
        """Ask every backend that can tell (a server's ``check``) whether it answers;
        raise :class:`LLMUnavailable` naming the first that does not."""
        for index, (llm, _) in enumerate(self.members):
            check = getattr(llm, "check", None)
            if callable(check):
                try:
                    check()
                except Exception as exc:
                    raise LLMUnavailable(f"LLM {self.name(index)!r} cannot answer: {exc}") from exc

    def name(self, index: int) -> str:
        return str(getattr(self.members[index][0], "name", f"llm{index}"))


# ============================================================================ AST operators


def _end(node: ast.expr | ast.stmt) -> tuple[int, int]:
    """``(end line, end UTF-8 column)`` of a node ``ast.parse`` made (it always sets them)."""
    if node.end_lineno is None or node.end_col_offset is None:
        raise MutationError(f"line {node.lineno}: the syntax tree gives no end position")
    return node.end_lineno, node.end_col_offset


class _Source:
    """Maps AST (line, UTF-8 column) positions to character offsets and knows the evolve-block lines."""

    def __init__(self, code: str) -> None:
        self.code = code
        self.lines = code.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.blocks = [(b.first_line, b.last_line) for b in find_evolve_blocks(code)]
        try:
            self.tree = parse_python(code)
        except SyntaxError as exc:
            raise MutationError(f"the parent does not parse: {exc.msg} (line {exc.lineno})") from None
        except (MemoryError, RecursionError):
            raise MutationError("the parent is nested too deeply for Python's parser") from None

    def offset(self, line: int, col: int) -> int:
        text = self.lines[line - 1].encode("utf-8")[:col].decode("utf-8", errors="replace")
        return self.starts[line - 1] + len(text)

    def span(self, node: ast.expr | ast.stmt) -> tuple[int, int]:
        end_line, end_col = _end(node)
        return self.offset(node.lineno, node.col_offset), self.offset(end_line, end_col)

    def inside(self, node: ast.expr | ast.stmt) -> bool:
        end_line = _end(node)[0]
        return any(first <= node.lineno and end_line <= last for first, last in self.blocks)

    def nodes(self, kind: type | tuple[type, ...]) -> list[Any]:
        found = [
            n
            for n in ast.walk(self.tree)
            if isinstance(n, kind) and isinstance(n, (ast.expr, ast.stmt)) and self.inside(n)
        ]
        return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def _edit(code: str, edits: list[tuple[int, int, str]]) -> str:
    for start, end, text in sorted(edits, reverse=True):
        code = code[:start] + text + code[end:]
    return code


def _format_number(value: float, is_int: bool) -> str:
    text = str(int(value)) if is_int else repr(float(f"{value:.6g}"))
    return f"({text})" if text.startswith("-") else text


def perturb_constants(code: str, rng: random.Random, config: EvolveConfig) -> tuple[str, str]:
    """Perturb 1..max_constants literals inside the evolve blocks: numbers, and strings with named alternatives.

    The literals are drawn without replacement, each statement equally likely (:func:`_balanced_sample`).
    """
    child, detail, _ = perturb_constants_at(code, rng, config)
    return child, detail


def perturb_constants_at(
    code: str, rng: random.Random, config: EvolveConfig, credit: Mapping[str, Sequence[int]] | None = None
) -> tuple[str, str, list[str]]:
    """:func:`perturb_constants`, drawing by ``credit`` (site key -> ``[tries, kept, tries on a working
    parent, of them broken]``, as the controller keeps it) where given; also returns the keys
    (:func:`_site_keys`) of the literals it changed.

    Two kinds of literal are left alone: one assigned to a local name that nothing reads
    (:func:`_unread_literals`: its change cannot change what the program does), and, with ``credit``,
    one whose every change to a working program broke it (:func:`exhausted`). With none left the
    operator does not apply (:class:`NotApplicable`), and the child goes to another operator."""
    mc = config.mutation
    src = _Source(code)
    numbers = numeric_sites(code, config, src)
    choices = choice_sites(code, src)
    sites: list[Any] = sorted([*numbers, *choices], key=lambda n: src.span(n))
    if not sites:
        raise NotApplicable(
            "no numeric constant, and no string with named alternatives, inside the evolve blocks to perturb"
        )
    dead = _unread_literals(src)
    owner = _statement_of(src)
    # Keys from every site, so a literal keeps its key (its rank in its statement) whatever is left out.
    keyed = [
        (site, key)
        for site, key in zip(sites, _site_keys([owner.get(id(site), site) for site in sites]))
        if id(site) not in dead
    ]
    if not keyed:
        raise NotApplicable(
            "every literal inside the evolve blocks is assigned to a local name nothing reads"
        )
    if credit is not None and mc.exhausted_after:
        keyed = [(site, key) for site, key in keyed if not exhausted(credit.get(key), mc.exhausted_after)]
        if not keyed:
            raise NotApplicable(
                f"every literal inside the evolve blocks has broken a working program each of the "
                f"{mc.exhausted_after} or more times it was changed (mutation.exhausted_after)"
            )
    cap = min(mc.max_constants, len(keyed))
    # One literal with chance 1/2 (of a cap of 3: 4/7), each further one half as likely as the one before.
    count = rng.choices(range(1, cap + 1), weights=[0.5**i for i in range(cap)])[0]
    drawn = _balanced_sample(keyed, count, owner, rng, credit)
    drawn.sort(key=lambda d: src.span(d[0]))
    chosen, keys = [site for site, _ in drawn], [key for _, key in drawn]
    edits, notes = [], []
    for node in chosen:
        old = node.value
        if node in choices:
            start, end = src.span(node)
            quote = src.code[start]
            text = quote + rng.choice(choices[node]) + quote
            edits.append((start, end, text))
            notes.append(f"line {node.lineno}: {src.code[start:end]} -> {text}")
            continue
        text = _format_number(_noise(old, rng, mc), isinstance(old, int))
        start, end = src.span(node)
        edits.append((start, end, text))
        notes.append(f"line {node.lineno}: {old!r} -> {text}")
    return _edit(code, edits), "; ".join(notes), keys


def _noise(old: float | int, rng: random.Random, mc: MutationConfig) -> float | int:
    """The constant operator's move of one number: an integer under 10 in size by one (a size, a count, a
    side length: log-normal noise would take 8 to 5 or 12 as often as to 7 or 9), a larger one by one
    with ``additive_probability``, else scaled and rounded; a float by log-normal multiplicative noise
    (additive with ``additive_probability``, or when it is 0)."""
    if isinstance(old, int):
        if rng.random() < mc.additive_probability or abs(old) < 10:
            return old + rng.choice((-1, 1))
        new = int(round(old * math.exp(rng.gauss(0.0, mc.constant_sigma)))) or old + 1
        return old + rng.choice((-1, 1)) if new == old else new
    if old == 0.0 or rng.random() < mc.additive_probability:
        return old + rng.gauss(0.0, mc.constant_sigma)
    return old * math.exp(rng.gauss(0.0, mc.constant_sigma))


def _statement_of(src: _Source) -> dict[int, ast.stmt]:
    """``id(literal) -> the innermost statement holding it``, for every constant of the parse tree."""
    owner: dict[int, ast.stmt] = {}

    def visit(node: ast.AST, stmt: ast.stmt | None) -> None:
        if isinstance(node, ast.stmt):
            stmt = node
        if isinstance(node, ast.Constant) and stmt is not None:
            owner[id(node)] = stmt
        for child in ast.iter_child_nodes(node):
            visit(child, stmt)

    visit(src.tree, None)
    return owner


class _Blank(ast.NodeTransformer):
    """Every literal (a signed number as one) becomes ``None``: what a statement is without its values."""

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        if isinstance(node.op, (ast.USub, ast.UAdd)) and isinstance(node.operand, ast.Constant):
            return ast.Constant(None)
        return self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        return ast.Constant(None)


class _BlankTable(_Blank):
    """:class:`_Blank`, and the expression at ``where`` (its start and end line and column) becomes ``TABLE``."""

    def __init__(self, where: tuple[int, int, int, int]) -> None:
        self.where = where

    def visit(self, node: ast.AST) -> ast.AST:
        if (
            isinstance(node, ast.expr)
            and (
                node.lineno,
                node.col_offset,
                node.end_lineno,
                node.end_col_offset,
            )
            == self.where
        ):
            return ast.Name("TABLE", ast.Load())
        return super().visit(node)


def _site_keys(statements: list[Any]) -> list[str]:
    """A key per site, given the statement holding each site (sites in source order), that survives
    changes of the literals: a digest of the statement's syntax tree with every literal blanked
    (``x = 0.5`` and ``x = (-2.0)`` alike), and the site's rank among its statement's sites."""
    digests: dict[int, str] = {}
    ranks: collections.Counter[int] = collections.Counter()
    keys = []
    for stmt in statements:
        if id(stmt) not in digests:
            blank = ast.dump(_Blank().visit(copy.deepcopy(stmt)))
            digests[id(stmt)] = hashlib.sha1(blank.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        keys.append(f"{digests[id(stmt)]}:{ranks[id(stmt)]}")
        ranks[id(stmt)] += 1
    return keys


_DYNAMIC_SCOPE = frozenset({"locals", "vars", "eval", "exec", "globals", "dir"})


def _plain_literal(node: ast.expr) -> bool:
    """A number, string, or a display of them: a value whose change cannot raise."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return isinstance(node.operand, ast.Constant)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(_plain_literal(e) for e in node.elts)
    return False


def _unread_literals(src: _Source) -> set[int]:
    """``id()`` of the literals whose value nothing can observe: those of ``name = <literal>`` inside a
    function (``n = 12``, ``sizes = (1, 2)``), where no code of the module reads ``name`` (no load, no
    ``global``/``nonlocal``; a module that calls ``locals``, ``vars``, ``eval``, ``exec``, ``globals`` or
    ``dir`` has none). Moving such a literal leaves the program's behaviour as it was: a neutral child
    that costs an evaluation. Module-level names are left alone: an evaluator may import them."""
    tree = src.tree
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store):
            if node.id in _DYNAMIC_SCOPE:
                return set()
            read.add(node.id)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            read.update(node.names)
        elif isinstance(node, ast.Attribute) and node.attr in _DYNAMIC_SCOPE:
            return set()

    def own_scope(node: ast.AST) -> list[ast.AST]:
        """The nodes of a function's own scope: not those of a class inside it (class attributes are
        read as attributes) nor of a function inside it (visited on its own)."""
        out = []
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            out.append(child)
            out.extend(own_scope(child))
        return out

    dead: set[int] = set()
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for stmt in own_scope(function):
            if isinstance(stmt, ast.Assign):
                targets, value = stmt.targets, stmt.value
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                targets, value = [stmt.target], stmt.value
            else:
                continue
            if all(isinstance(t, ast.Name) and t.id not in read for t in targets) and _plain_literal(value):
                dead.update(id(n) for n in ast.walk(value) if isinstance(n, ast.Constant))
    return dead


def exhausted(entry: Sequence[int] | None, after: int) -> bool:
    """Whether a credit entry (``[tries, kept, tries on a working parent, of them broken]``, as the
    controller keeps it) marks its site as one to leave alone: changed ``after`` times or more in programs
    that worked (scored, with no evaluator ``error``), and every one of those changes broke the program
    (a failure, or an ``error``): a point count or an array width the evaluator checks. One change that
    left a working program working clears it for good; changes to a parent already broken prove nothing.
    ``after`` 0 never marks one."""
    if not after or entry is None or len(entry) < 4:
        return False
    return entry[2] >= after and entry[3] == entry[2]


def _balanced_sample(
    keyed: list[tuple[Any, str]],
    k: int,
    owner: Mapping[int, ast.stmt],
    rng: random.Random,
    credit: Mapping[str, Sequence[int]] | None = None,
) -> list[tuple[Any, str]]:
    """``k`` distinct sites of ``keyed`` (``(site, credit key)`` pairs) with their keys, each statement of
    the blocks as likely to be touched as any other (``owner``: :func:`_statement_of` the parent).

    A site is weighted by one over the number of sites of ``keyed`` its statement holds, so
    a scalar on its own line (a size, a step, a bound) is drawn as often as the
    whole of a 36-number array literal, not 36 times less often. With
    ``credit`` (site key -> ``[tries, kept, ...]``: children that changed the site,
    and those of them at least as fit as their parent), the weight is also
    multiplied by ``(kept + 1) / (tries + 2)``: a size whose every change
    breaks the program's contract fades, a seed or bound that sometimes helps
    stays. Sampling without replacement by Efraimidis-Spirakis keys
    ``u ** (1 / w)``.
    """
    sites, keys = [site for site, _ in keyed], [key for _, key in keyed]
    statements = [owner.get(id(site), site) for site in sites]
    count = collections.Counter(id(stmt) for stmt in statements)
    weights = []
    for stmt, key in zip(statements, keys):
        w = 1.0 / count[id(stmt)]
        if credit is not None and key in credit:
            tries, kept = credit[key][:2]
            w *= (kept + 1) / (tries + 2)
        weights.append(w)
    ranked = [(rng.random() ** (1.0 / w), i) for i, w in enumerate(weights)]
    ranked.sort(key=lambda t: (-t[0], t[1]))
    return [(sites[i], keys[i]) for _, i in ranked[:k]]


# A quoted word in a comment: 'csv_reader' or "csv_reader" (no quotes, backslashes or spaces inside).
_QUOTED = re.compile(r"""(['"])([^'"\\\s]+)\1""")


def _string_groups(code: str, src: _Source) -> list[set[str]]:
    """Sets of alternatives the evolve blocks name: the quoted words of one comment, the strings of one
    list, tuple or set display (all of whose elements are strings)."""
    groups: list[set[str]] = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        tokens = []  # the parent parsed, so this does not happen; without comments only displays count
    for token in tokens:
        if token.type == tokenize.COMMENT and any(lo <= token.start[0] <= hi for lo, hi in src.blocks):
            words = {m.group(2) for m in _QUOTED.finditer(token.string)}
            if len(words) >= 2:
                groups.append(words)
    for node in src.nodes((ast.List, ast.Tuple, ast.Set)):
        elts = node.elts
        if len(elts) >= 2 and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in elts):
            groups.append({e.value for e in elts})
    return groups


def choice_sites(code: str, src: _Source | None = None) -> dict[ast.Constant, list[str]]:
    """String literals inside the evolve blocks that the blocks name among alternatives -> those alternatives.

    A plain (unprefixed) string literal whose value appears in a group of
    :func:`_string_groups` may become any other member of its groups. Left
    alone: docstrings, dictionary keys, subscripts, f-string parts, strings
    that are themselves elements of the listing (the options stay options),
    and alternatives its quotes cannot hold as written.
    """
    src = src or _Source(code)
    groups = _string_groups(code, src)
    if not groups:
        return {}
    skip: set[int] = set()
    for node in ast.walk(src.tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))
        if isinstance(node, ast.Dict):
            skip.update(id(k) for k in node.keys if k is not None)
        elif isinstance(node, ast.Subscript):
            skip.update(id(n) for n in ast.walk(node.slice))
        elif isinstance(node, ast.JoinedStr):
            skip.update(id(n) for n in ast.walk(node))
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
        ):
            skip.update(id(e) for e in node.elts)
    sites: dict[ast.Constant, list[str]] = {}
    for node in src.nodes(ast.Constant):
        if not isinstance(node.value, str) or id(node) in skip:
            continue
        start, end = src.span(node)
        text = src.code[start:end]
        quote = text[:1]
        if quote not in ("'", '"') or text.startswith(quote * 3) or text != quote + node.value + quote:
            continue  # prefixed, triple-quoted, escaped or implicitly concatenated: not rewritten
        named = {w for g in groups if node.value in g for w in g} - {node.value}
        options = sorted(w for w in named if quote not in w and "\\" not in w and "\n" not in w)
        if options:
            sites[node] = options
    return sites


def numeric_sites(code: str, config: EvolveConfig, src: _Source | None = None) -> list[ast.Constant]:
    """The numeric literals inside the evolve blocks an optimiser may move (floats; ints with ``perturb_ints``)."""
    src = src or _Source(code)
    return [
        n
        for n in src.nodes(ast.Constant)
        if isinstance(n.value, (int, float))
        and not isinstance(n.value, bool)
        and math.isfinite(n.value)
        and (config.mutation.perturb_ints or isinstance(n.value, float))
    ]


def cmaes_rank_key(program: Program) -> tuple[int, float]:
    """Order for CMA-ES (smaller is better): failures last, then cascade-stopped, then by fitness."""
    if not program.ok or program.fitness is None:
        return (2, 0.0)
    return (1 if "cascade" in program.artifacts else 0, -program.fitness)


def cmaes_children(
    origin: Program, history: Sequence[Program], count: int, config: EvolveConfig
) -> list[tuple[str, list[float]]]:
    """``count`` children of ``origin`` whose numeric literals are drawn by CMA-ES (Hansen 2016).

    The search runs in scaled coordinates ``u_i = (x_i - x0_i) / max(|x0_i|, 0.1)``
    around the origin's literals ``x0`` with step ``mutation.cmaes_sigma`` and
    population ``mutation.cmaes_population`` (default: CMA-ES's own,
    ``4 + 3 ln d``). The optimiser is rebuilt from ``history`` (the run's
    earlier CMA-ES children of this origin, in iteration order, each with its
    ``u`` in ``mutation["cmaes"]``): every complete generation is told its
    ranking (failures last, then children the cascade stopped early, then by
    fitness), then the next samples are drawn from a generator seeded by the
    origin and the generation, so a resumed run draws exactly the same
    children. Returns ``(child code, u)`` pairs.
    """
    sites = numeric_sites(origin.code, config)
    if len(sites) < 2:
        raise MutationError(
            f"CMA-ES needs at least two numeric literals inside the evolve blocks, the parent has {len(sites)}"
        )
    src = _Source(origin.code)
    x0 = [float(cast(float, n.value)) for n in sites]
    scale = [max(abs(v), 0.1) for v in x0]
    mc = config.mutation
    lam = mc.cmaes_population or 4 + math.floor(3 * math.log(len(sites)))  # CMA-ES's default
    done = [p for p in history if isinstance(p.mutation.get("cmaes"), dict)]
    generations = len(done) // lam
    digest = hashlib.sha256(f"{origin.id}:{generations}".encode()).hexdigest()
    optimizer = CMA(
        mean=np.zeros(len(sites)), sigma=mc.cmaes_sigma, population_size=lam, seed=int(digest[:8], 16)
    )
    for g in range(generations):
        chunk = done[g * lam : (g + 1) * lam]
        ranked = sorted(chunk, key=lambda p: (cmaes_rank_key(p), p.iteration))
        optimizer.tell(
            [(np.asarray(p.mutation["cmaes"]["u"], dtype=float), float(r)) for r, p in enumerate(ranked)]
        )
    asked_before = len(done) - generations * lam
    for _ in range(asked_before):
        optimizer.ask()
    children = []
    for _ in range(count):
        u = optimizer.ask()
        values = [x + ui * si for x, ui, si in zip(x0, u, scale)]
        edits: list[tuple[int, int, str]] = []
        used: list[float] = []
        for node, value in zip(sites, values):
            is_int = isinstance(node.value, int)
            text = _format_number(round(value) if is_int else value, is_int)
            start, end = src.span(node)
            edits.append((start, end, text))
            used.append((float(text.strip("()")) - x0[len(used)]) / scale[len(used)])
        children.append((_edit(origin.code, edits), used))
    return children


def table_sites(code: str) -> list[Table]:
    """The tables of ``code``'s evolve blocks that the ``table`` operator moves (:func:`find_tables`)."""
    return find_tables(_Source(code))


def _table_key(src: _Source, table: Table, move: str) -> str:
    """A credit key for ``move`` on ``table`` that survives its rows and numbers changing (and a constructor
    being written out): the digest of the statement holding it with the table, and every literal, blanked."""
    anchor = table.anchor or table.node
    start = (anchor.lineno, anchor.col_offset)
    owner: ast.stmt | None = None
    for node in ast.walk(src.tree):
        if (
            isinstance(node, ast.stmt)
            and (node.lineno, node.col_offset) <= start
            and _end(anchor) <= _end(node)
        ):
            if owner is None or (node.lineno, node.col_offset) >= (owner.lineno, owner.col_offset):
                owner = node  # the innermost statement around the table
    assert owner is not None, "a table inside the evolve blocks lies in some statement"
    blank = ast.dump(_BlankTable((*start, *_end(anchor))).visit(copy.deepcopy(owner)))
    return f"table:{hashlib.sha1(blank.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}:{move}"


def table_child(
    code: str, rng: random.Random, config: EvolveConfig, credit: Mapping[str, Sequence[int]] | None = None
) -> tuple[str, str, str]:
    """The ``table`` operator: one table of the evolve blocks grows, shrinks, moves a row or spreads its
    repeated rows (:mod:`societas.evolve.tables`); its numbers move by the ``constant`` operator's noise. With
    ``credit`` (key -> ``[tries, kept]``, as for literals), each move on each table is drawn in proportion
    to ``(kept + 1) / (tries + 2)``. Returns the child, its detail line and the move's credit key."""
    mc = config.mutation
    src = _Source(code)

    def weight(table: Table, move: str) -> float:
        tries, kept = credit.get(_table_key(src, table, move), (0, 0))[:2] if credit is not None else (0, 0)
        return (kept + 1) / (tries + 2)

    try:
        child, detail, table, move = mutate_table(
            src, rng, lambda value, r: _noise(value, r, mc), weight if credit is not None else None
        )
    except NoTable as exc:
        raise NotApplicable(str(exc)) from None
    except TableError as exc:
        raise MutationError(str(exc)) from None
    return child, detail, _table_key(src, table, move)


_ARITH = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def _operator_position(text: str, token: str) -> int:
    """Index of ``token`` in the text between two operands (skipping comments and longer tokens)."""
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "#":
            newline = text.find("\n", i)
            i = len(text) if newline < 0 else newline
            continue
        if text.startswith(token, i):
            after = text[i + len(token) : i + len(token) + 1]
            before = text[i - 1 : i] if i else ""
            doubled = after in ("*", "/", "<", ">", "=") or before in ("*", "/", "<", ">")
            if not doubled or token in ("<=", ">="):
                return i
        i += 1
    return -1


def swap_operator(code: str, rng: random.Random, config: EvolveConfig | None = None) -> tuple[str, str]:
    """Swap one arithmetic operator, comparison, or ``min``/``max`` call inside the evolve blocks."""
    src = _Source(code)
    sites: list[tuple[str, Any]] = []
    for node in src.nodes((ast.BinOp, ast.Compare, ast.Call)):
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
            sites.append(("arith", node))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            sites.append(("compare", node))
        elif (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max")
        ):
            sites.append(("minmax", node))
    if not sites:
        raise NotApplicable("no swappable operator (+ - * /, < <= > >=, min/max) inside the evolve blocks")
    kind, node = rng.choice(sites)
    if kind == "minmax":
        start, end = src.span(node.func)
        new = "max" if node.func.id == "min" else "min"
        return _edit(code, [(start, end, new)]), f"line {node.lineno}: {node.func.id} -> {new}"
    if kind == "arith":
        ops, old, left, right = list(_ARITH.values()), _ARITH[type(node.op)], node.left, node.right
    else:
        ops, old, left, right = (
            list(_COMPARE.values()),
            _COMPARE[type(node.ops[0])],
            node.left,
            node.comparators[0],
        )
    gap_start, gap_end = src.span(left)[1], src.span(right)[0]
    at = _operator_position(code[gap_start:gap_end], old)
    if at < 0:
        raise MutationError(f"could not locate the {old!r} operator on line {node.lineno}")
    new = rng.choice([t for t in ops if t != old])
    start = gap_start + at
    return _edit(code, [(start, start + len(old), new)]), f"line {node.lineno}: {old} -> {new}"


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def swap_function(code: str, rng: random.Random, config: EvolveConfig) -> tuple[str, str]:
    """Replace one called function by its partner in ``mutation.function_pairs``."""
    partners: dict[str, list[str]] = {}
    for a, b in config.mutation.function_pairs:
        partners.setdefault(a, []).append(b)
        partners.setdefault(b, []).append(a)
    src = _Source(code)
    sites = [
        (n, name) for n in src.nodes(ast.Call) if (name := _dotted(n.func)) is not None and name in partners
    ]
    if not sites:
        raise NotApplicable("no call to a function of mutation.function_pairs inside the evolve blocks")
    node, old = rng.choice(sites)
    new = rng.choice(partners[old])
    start, end = src.span(node.func)
    return _edit(code, [(start, end, new)]), f"line {node.lineno}: {old} -> {new}"


def _first_line(node: ast.stmt) -> int:
    """The first line of a statement, its decorators included."""
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])


def _units(src: _Source) -> dict[str, tuple[int, int, str]]:
    """Top-level functions and classes (whole) inside evolve blocks -> (start offset, end offset, indentation).

    A class is one unit with all its methods: a hook's methods share state
    (``__init__`` sets what ``update`` reads), so they travel together.
    """
    found: dict[str, tuple[int, int, str]] = {}
    for child in src.tree.body:
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        first, last = _first_line(child), _end(child)[0]
        if any(lo <= first and last <= hi for lo, hi in src.blocks):
            line = src.lines[first - 1]
            indent = line[: len(line) - len(line.lstrip())]
            found[child.name] = (src.starts[first - 1], src.starts[last], indent)
    return found


def _body_statements(src: _Source, name: str) -> tuple[list[ast.stmt], str]:
    """The body of top-level unit ``name`` as whole-line statements, and the body's indentation."""
    unit = next(
        c
        for c in src.tree.body
        if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and c.name == name
    )
    body = unit.body
    lines = [(_first_line(s), _end(s)[0]) for s in body]
    header_end = min(first for first, _ in lines)
    if header_end <= unit.lineno or any(a[1] >= b[0] for a, b in zip(lines, lines[1:])):
        raise NotApplicable(f"`{name}` has statements sharing a line; its statements cannot be recombined")
    first_line = src.lines[lines[0][0] - 1]
    return body, first_line[: len(first_line) - len(first_line.lstrip())]


def _statement_crossover(code: str, donor: str, name: str, rng: random.Random) -> tuple[str, str]:
    """Recombine the statements of unit ``name``, the one unit in which the two parents differ.

    The two bodies are aligned statement by statement (``difflib`` on their
    syntax trees); each stretch where they differ comes from the donor with
    chance 1/2, at least one from each parent. Parents that differ in one
    stretch only have no child that is neither of them.
    """
    mine_src, theirs_src = _Source(code), _Source(donor)
    mine, indent = _body_statements(mine_src, name)
    theirs, _ = _body_statements(theirs_src, name)
    matcher = difflib.SequenceMatcher(
        None, [ast.dump(s) for s in mine], [ast.dump(s) for s in theirs], autojunk=False
    )
    hunks = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    if len(hunks) < 2:
        raise NotApplicable(
            f"the two parents differ in one stretch of `{name}` only: the child would be one of them"
        )
    taken = [h for h in hunks if rng.random() < 0.5]
    if not taken:
        taken = [rng.choice(hunks)]
    elif len(taken) == len(hunks):
        taken.remove(rng.choice(taken))

    edits, notes = [], []
    for _, i1, i2, j1, j2 in taken:
        text = ""
        if j1 < j2:
            block = "".join(theirs_src.lines[_first_line(theirs[j1]) - 1 : _end(theirs[j2 - 1])[0]])
            text = textwrap.indent(textwrap.dedent(block), indent)
            if not text.endswith("\n"):
                text += "\n"
        if i1 < i2:
            start, end = mine_src.starts[_first_line(mine[i1]) - 1], mine_src.starts[_end(mine[i2 - 1])[0]]
        else:  # an insertion: before my statement i1, or after my last one
            at = (
                mine_src.starts[_first_line(mine[i1]) - 1]
                if i1 < len(mine)
                else mine_src.starts[_end(mine[-1])[0]]
            )
            start = end = at
        edits.append((start, end, text))
        notes.append(f"statements {i1 + 1}-{i2} -> second parent's {j1 + 1}-{j2}")
    return _edit(code, edits), f"in {name}: " + "; ".join(notes)


def crossover(
    code: str, donor: str, rng: random.Random, config: EvolveConfig | None = None
) -> tuple[str, str]:
    """Recombine whole hooks: take each differing top-level class or function from ``donor`` with chance 1/2.

    At least one unit comes from the donor and, when several differ, at least
    one stays the parent's (otherwise the child would be the donor's evolve
    code). Units are matched by name. When only one unit differs, its
    statements are recombined instead (:func:`_statement_crossover`).
    """
    mine, theirs = _units(_Source(code)), _units(_Source(donor))
    differing = sorted(
        name
        for name in set(mine) & set(theirs)
        if textwrap.dedent(code[mine[name][0] : mine[name][1]])
        != textwrap.dedent(donor[theirs[name][0] : theirs[name][1]])
    )
    if not differing:
        raise NotApplicable("the two parents share no differing class or function inside their evolve blocks")
    if len(differing) == 1:
        # Taking the one differing unit whole would make the second parent again: recombine its statements.
        return _statement_crossover(code, donor, differing[0], rng)
    taken = [name for name in differing if rng.random() < 0.5]
    if not taken:
        taken = [rng.choice(differing)]
    elif len(taken) == len(differing) and len(differing) > 1:
        taken.remove(rng.choice(taken))
    edits = []
    for name in taken:
        start, end, indent = mine[name]
        body = textwrap.indent(textwrap.dedent(donor[theirs[name][0] : theirs[name][1]]), indent)
        if not body.endswith("\n"):
            body += "\n"
        edits.append((start, end, body))
    return _edit(code, edits), f"{', '.join(taken)} from the second parent"


# ============================================================================ one line by LLM

_LINE_BUILTINS = frozenset(
    {"abs", "float", "int", "max", "min", "pow", "round", "sum", "len", "True", "False", "None"}
)
_LINE_FORBIDDEN_CALLS = frozenset(
    {"eval", "exec", "compile", "open", "__import__", "globals", "locals", "getattr"}
)


@dataclass(frozen=True)
class LineSite:
    """One ``name = expression`` statement inside a function of the evolve blocks."""

    hook: str  # qualified function name
    target: str
    line: int  # 1-based
    value_start: int  # character offsets of the right-hand side
    value_end: int
    scope: frozenset[str]  # the names the right-hand side may use
    has_number: bool = False  # the right-hand side holds a numeric literal


def line_sites(code: str) -> list[LineSite]:
    """Every single-name assignment inside the functions of the evolve blocks, with its scope."""
    src = _Source(code)
    module_names = set()
    for node in src.tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module_names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            module_names.add(node.name)
        elif isinstance(node, ast.Assign):
            module_names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    sites: list[LineSite] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and src.inside(child):
                args = {a.arg for a in [*child.args.posonlyargs, *child.args.args, *child.args.kwonlyargs]}
                assigned: list[tuple[int, set[str]]] = []
                for stmt in ast.walk(child):
                    if isinstance(stmt, ast.Assign):
                        names = {n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
                        assigned.append((stmt.lineno, names))
                for stmt in ast.walk(child):
                    if (
                        isinstance(stmt, ast.Assign)
                        and len(stmt.targets) == 1
                        and isinstance(stmt.targets[0], ast.Name)
                        and src.inside(stmt)
                    ):
                        before = set().union(*[n for line, n in assigned if line < stmt.lineno])
                        start, end = src.span(stmt.value)
                        scope = frozenset(args | before | module_names | _LINE_BUILTINS)
                        number = any(
                            isinstance(n, ast.Constant)
                            and isinstance(n.value, (int, float))
                            and not isinstance(n.value, bool)
                            for n in ast.walk(stmt.value)
                        )
                        target = stmt.targets[0].id
                        hook = f"{prefix}{child.name}"
                        sites.append(LineSite(hook, target, stmt.lineno, start, end, scope, number))

    visit(src.tree, "")
    return sorted(sites, key=lambda site: site.line)


def build_line_prompt(code: str, site: LineSite, contract: str) -> list[dict[str, str]]:
    """A short prompt a small model can answer: the hook, its contract, one line to rewrite."""
    src = _Source(code)
    start, end = next(span for name, span in _function_spans(src).items() if name == site.hook)
    # The line's right-hand side is blanked out: a small model copies what it sees, so it is asked to
    # fill the blank (with the hook's contract) instead of to improve a line it would repeat.
    blanked = code[start : site.value_start] + "???" + code[site.value_end : end]
    body = textwrap.dedent(blanked).rstrip()
    parts = [
        f"This Python method is part of a game-solving algorithm:\n```python\n{body}\n```",
        *([f"What it does: {contract}"] if contract else []),
        f"Fill in the ??? in the line `{site.target} = ???` with a Python expression, using names the method "
        "already has.",
    ]
    return [
        {
            "role": "system",
            "content": "You are an expert in game theory and Python. Answer with one line of code.",
        },
        {"role": "user", "content": "\n\n".join(parts)},
        # The answer is started for the model: it only has to write the right-hand side.
        {"role": "assistant", "content": f"{site.target} ="},
    ]


def apply_line_answer(code: str, site: LineSite, answer: str) -> str:
    """The child with ``site``'s right-hand side replaced by the expression the answer gives.

    The answer may be fenced or chatty: the first line that reads as
    ``TARGET = expression`` (or, failing that, the first line that is an
    expression) is taken. The expression must parse, may use only the names
    in scope, and may not call ``eval``/``exec``/``open``/``__import__`` or
    touch dunder attributes; :class:`MutationError` says which rule failed.
    """
    lines = [ln.strip().strip("`").strip() for ln in answer.replace("```python", "\n").splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    expression = None
    pattern = re.compile(rf"^{re.escape(site.target)}\s*=(?!=)\s*(.+)$")
    for ln in lines:
        match = pattern.match(ln)
        if match:
            expression = match.group(1).strip()
            break
    if expression is None:
        for ln in lines:
            try:
                parse_python(ln, mode="eval")
            except SyntaxError:
                continue
            expression = ln
            break
    if expression is None:
        raise MutationError(f"the answer holds no line `{site.target} = ...` and no Python expression")
    expression = expression.split("  #")[0].rstrip(";").strip()
    try:
        tree = parse_python(expression, mode="eval")
    except SyntaxError as exc:
        raise MutationError(f"the new right-hand side does not parse: {exc.msg}") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in site.scope:
            raise MutationError(
                f"the new line uses {node.id!r}, which {site.hook} does not define at that line"
            )
        if isinstance(node, ast.Attribute) and node.attr.startswith("__"):
            raise MutationError(f"the new line touches the dunder attribute {node.attr!r}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _LINE_FORBIDDEN_CALLS
        ):
            raise MutationError(f"the new line calls {node.func.id}()")
        if isinstance(node, (ast.Lambda, ast.NamedExpr, ast.Yield, ast.Await)):
            raise MutationError("the new line holds a lambda, walrus, yield or await")
        if isinstance(node, ast.Constant) and node.value is Ellipsis:
            raise MutationError("the new line holds a placeholder (...)")
    old = code[site.value_start : site.value_end]
    if ast.dump(parse_python(old, mode="eval")) == ast.dump(tree):
        raise MutationError("the new line computes the same expression as the old one")
    return code[: site.value_start] + expression + code[site.value_end :]


def _function_spans(src: _Source) -> dict[str, tuple[int, int]]:
    """Qualified name -> (start, end) character offsets of every function inside the evolve blocks."""
    spans: dict[str, tuple[int, int]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and src.inside(child):
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                spans[f"{prefix}{child.name}"] = (src.starts[first - 1], src.starts[_end(child)[0]])

    visit(src.tree, "")
    return spans


# ============================================================================ mutator


@dataclass
class MutationRequest:
    """One child to make: planned from the seeded RNG before any mutation runs."""

    iteration: int
    kind: str
    parent: Program
    inspirations: list[Program]
    seed: int
    model_index: int | None = None
    donor: Program | None = None
    island: int = 0
    strategy: str = ""
    cmaes_history: list[Program] = field(default_factory=list)  # earlier CMA-ES children of ``parent``


@dataclass
class MutationResult:
    code: str | None
    info: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None
    llm_response: str | None = None


class Mutator:
    """Plans mutation kinds and makes children, batching LLM prompts per backend."""

    def __init__(
        self, config: EvolveConfig, llms: LLMEnsemble | None = None, blocks: BlockLibrary | None = None
    ) -> None:
        self.config = config
        self.llms = llms
        self.blocks = blocks
        # Site key -> [children that changed it, of them those at least as fit as their parent]; the
        # controller fills it in as children are scored (``mutation.site_credit``).
        self.site_credit: dict[str, list[int]] | None = {} if config.mutation.site_credit else None
        weights = dict(config.mutation.weights)
        if blocks is None and weights.get("blocks", 0) > 0:
            raise ValueError(
                "mutation.weights gives 'blocks' a weight, but the task has no building-block library "
                "(building_blocks.yaml in the task directory)"
            )
        if llms is None and (weights.get("llm", 0) > 0 or weights.get("llm_line", 0) > 0):
            weights.pop("llm", None)
            weights.pop("llm_line", None)
            logger.info(
                "no LLM configured: using only the AST operators %s",
                sorted(k for k, w in weights.items() if w > 0),
            )
        self.weights = {k: w for k, w in weights.items() if w > 0}
        if not self.weights:
            raise ValueError(
                "mutation.weights leaves no usable mutation: 'llm' needs an LLM (--llm or llm.models), "
                "or give a weight to an AST operator (constant, operator, function, crossover, table, cmaes)"
            )
        self.kinds = sorted(self.weights)

    def plan(self, rng: random.Random, arms: dict[str, float] | None = None) -> tuple[str, int | None]:
        """The mutation kind and LLM of a child: by the configured weights, or from ``arms``
        (``{arm: probability}`` over the names of :meth:`arms`, e.g. an adaptive bandit's weights)."""
        if arms is not None:
            names = sorted(arms)
            arm = rng.choices(names, weights=[arms[a] for a in names])[0]
            return self.arm_plan(arm)
        kind = rng.choices(self.kinds, weights=[self.weights[k] for k in self.kinds])[0]
        model = self.llms.choose(rng) if kind in ("llm", "llm_line") and self.llms is not None else None
        return kind, model

    def arms(self) -> dict[str, float]:
        """The arms an adaptive choice picks from, with their configured weights: each LLM-free kind, and
        each LLM kind once per model (``llm:MODEL``), its weight split over the models by theirs."""
        out: dict[str, float] = {}
        for kind in self.kinds:
            if kind in LLM_KINDS and self.llms is not None:
                total = sum(w for _, w in self.llms.members)
                for index, (_, weight) in enumerate(self.llms.members):
                    out[self.arm_name(kind, index)] = self.weights[kind] * weight / total
            else:
                out[kind] = self.weights[kind]
        return out

    def arm_name(self, kind: str, model: int | None) -> str:
        """The arm of a child made by ``kind`` (and LLM ``model``)."""
        if kind not in LLM_KINDS or self.llms is None or model is None:
            return kind
        names = [self.llms.name(i) for i in range(len(self.llms.members))]
        name = names[model]
        return f"{kind}:{name}" if names.count(name) == 1 else f"{kind}:{name}#{model}"

    def arm_of(self, mutation: dict[str, Any]) -> str | None:
        """The arm of a stored child from its mutation record (None: no arm of this run, e.g. a seed)."""
        kind = str(mutation.get("kind", ""))
        if kind not in self.kinds:
            return None
        if kind in LLM_KINDS and self.llms is not None:
            index = mutation.get("model_index")
            if not isinstance(index, int) or not 0 <= index < len(self.llms.members):
                names = [self.llms.name(i) for i in range(len(self.llms.members))]
                if mutation.get("model") not in names:
                    return None
                index = names.index(mutation["model"])
            return self.arm_name(kind, index)
        return kind

    def arm_plan(self, arm: str) -> tuple[str, int | None]:
        """``(kind, model)`` of an arm of :meth:`arms`."""
        for kind in self.kinds:
            if arm == kind:
                return kind, None
            if kind in LLM_KINDS and self.llms is not None:
                for index in range(len(self.llms.members)):
                    if arm == self.arm_name(kind, index):
                        return kind, index
        raise KeyError(f"unknown arm {arm!r}; known: {sorted(self.arms())}")

    def make(self, requests: Sequence[MutationRequest]) -> list[MutationResult]:
        """Children for ``requests`` in the same order; failures carry their reason."""
        results: list[MutationResult | None] = [None] * len(requests)
        by_model: dict[tuple[int, str], list[int]] = {}
        by_origin: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            if request.kind in ("llm", "llm_line"):
                by_model.setdefault((request.model_index or 0, request.kind), []).append(index)
            elif request.kind == "cmaes":
                by_origin.setdefault(request.parent.id, []).append(index)
            else:
                results[index] = self._ast(request)
        for indices in by_origin.values():
            for index, result in zip(indices, self._cmaes([requests[i] for i in indices])):
                results[index] = result
        for (model, kind), indices in sorted(by_model.items()):
            batch = [requests[i] for i in indices]
            made = self._llm(model, batch) if kind == "llm" else self._llm_line(model, batch)
            for index, result in zip(indices, made):
                results[index] = result
        return [r for r in results if r is not None]

    def redraw(
        self, request: MutationRequest, attempt: int, duplicated: Sequence[str] = ()
    ) -> MutationResult:
        """Another child for the LLM-free ``request`` (its ``attempt``-th redraw, ``attempt >= 1``), after the
        novelty filter rejected the one before, from a seed derived from the request's.

        The first redraw follows the same plan: one duplicate may be chance. From the second on, the
        operators in ``duplicated`` (those whose children were rejected for this request) hand over to
        another configured LLM-free operator, drawn by weight as when an operator finds nothing to change:
        an operator that keeps remaking programs the database holds (a parent whose only literals are a
        point count and an array width, every value of them already tried) would otherwise spend the
        iteration on a rejection. With no other operator configured the plan stays the same.
        """
        if request.kind not in AST_FALLBACK_KINDS:
            raise ValueError(f"only the LLM-free operators {AST_FALLBACK_KINDS} redraw, not {request.kind!r}")
        seed = random.Random(f"{request.seed}:redraw:{attempt}").getrandbits(63)
        exclude = list(dict.fromkeys(duplicated)) if attempt >= 2 else []
        return self._ast(replace(request, seed=seed), exclude)

    def _ast(self, request: MutationRequest, exclude: Sequence[str] = ()) -> MutationResult:
        """A child by the request's LLM-free operator; where that operator finds nothing to change in this
        parent (:class:`NotApplicable`), or is in ``exclude``, by another of the configured ones, drawn by
        weight (the record's ``kind`` is the operator that made the child, ``planned`` the one drawn
        first). When every configured LLM-free operator is excluded, ``exclude`` is ignored."""
        rng = random.Random(request.seed)
        kind = request.kind
        tried: list[str] = []
        skipped: list[str] = []

        def draw() -> str | None:
            """The next operator to try: one not tried yet, by weight, an excluded one only when no
            other is left."""
            left = [k for k in self.kinds if k in AST_FALLBACK_KINDS and k not in tried]
            pool = [k for k in left if k not in exclude] or left
            return rng.choices(pool, weights=[self.weights[k] for k in pool])[0] if pool else None

        if kind in exclude and any(k in AST_FALLBACK_KINDS and k not in exclude for k in self.kinds):
            kind = str(draw())
        while True:
            result, inapplicable = self._ast_once(kind, request, rng)
            if not inapplicable:
                break
            tried.append(kind)
            skipped.append(f"{kind}: {result.failure}")
            following = draw()
            if following is None:
                if len(skipped) > 1:
                    result.failure = (
                        "no LLM-free operator applies to this parent (" + "; ".join(skipped) + ")"
                    )
                break
            kind = following
        if kind != request.kind:
            result.info["planned"] = request.kind
        return result

    def _ast_once(
        self, kind: str, request: MutationRequest, rng: random.Random
    ) -> tuple[MutationResult, bool]:
        """One try of operator ``kind``: the result, and whether the operator did not apply."""
        parent = request.parent.code
        info: dict[str, Any] = {"kind": kind}
        try:
            if kind == "constant":
                child, detail, keys = perturb_constants_at(parent, rng, self.config, self.site_credit)
                if self.site_credit is not None:
                    info["sites"] = keys
            elif kind == "operator":
                child, detail = swap_operator(parent, rng, self.config)
            elif kind == "table":
                child, detail, key = table_child(parent, rng, self.config, self.site_credit)
                if self.site_credit is not None:
                    info["sites"] = [key]
            elif kind == "function":
                child, detail = swap_function(parent, rng, self.config)
            elif kind == "crossover":
                if request.donor is None:
                    raise NotApplicable("crossover needs a second parent and the island has none")
                info["donor_id"] = request.donor.id
                child, detail = crossover(parent, request.donor.code, rng, self.config)
            elif kind == "blocks":
                assert self.blocks is not None  # checked in __init__
                child, detail = mutate_blocks(parent, rng, self.blocks)
                edits = self.config.mutation.block_edits
                if edits > 1:
                    # Compound edits: blocks that help only together (DCFR's discounting with
                    # optimism, say) are one child away instead of two improvements in a row.
                    done = [detail]
                    for _ in range(rng.randint(1, edits) - 1):
                        try:
                            further, what = mutate_blocks(child, rng, self.blocks)
                        except BlockError:
                            break
                        if further != parent:
                            child = further
                            done.append(what)
                    detail = "; ".join(done)
            else:
                raise MutationError(f"unknown mutation kind {kind!r}")
            info["detail"] = detail
            validate_child(parent, child, self.config.max_code_length)
        except NotApplicable as exc:
            return MutationResult(None, info, str(exc)), True
        except (MutationError, EvolveBlockError, BlockError) as exc:
            return MutationResult(None, info, str(exc)), False
        return MutationResult(child, info), False

    def _cmaes(self, requests: Sequence[MutationRequest]) -> list[MutationResult]:
        """Children of one origin drawn by CMA-ES, in request order (see :func:`cmaes_children`)."""
        origin = requests[0].parent
        info: dict[str, Any] = {"kind": "cmaes"}
        try:
            children = cmaes_children(origin, requests[0].cmaes_history, len(requests), self.config)
        except MutationError as exc:
            return [MutationResult(None, dict(info), str(exc)) for _ in requests]
        results = []
        for code, u in children:
            child_info = {**info, "detail": f"CMA-ES over the literals of {origin.id}"}
            child_info["cmaes"] = {"origin": origin.id, "u": [round(x, 12) for x in u]}
            try:
                validate_child(origin.code, code, self.config.max_code_length)
            except MutationError as exc:
                results.append(MutationResult(None, child_info, str(exc)))
                continue
            results.append(MutationResult(code, child_info))
        return results

    def _llm_line(self, model: int, requests: Sequence[MutationRequest]) -> list[MutationResult]:
        """One line per child: the model rewrites one assignment of one hook, checked before evaluation."""
        assert self.llms is not None
        llm = self.llms.members[model][0]
        temperature, top_p, max_tokens = self._sampling(model)
        info_base = {"kind": "llm_line", "model": self.llms.name(model), "model_index": model}
        plans: list[tuple[int, LineSite]] = []
        results: list[MutationResult | None] = [None] * len(requests)
        prompts, params = [], []
        for index, request in enumerate(requests):
            try:
                sites = line_sites(request.parent.code)
            except MutationError as exc:
                results[index] = MutationResult(None, dict(info_base), str(exc))
                continue
            if not sites:
                results[index] = MutationResult(
                    None, dict(info_base), "no `name = expression` line in the hooks"
                )
                continue
            # The algorithm's knobs and pipeline steps: lines with a number, or a variable set more than once.
            counts = collections.Counter((site.hook, site.target) for site in sites)
            knobs = [site for site in sites if site.has_number or counts[site.hook, site.target] > 1] or sites
            site = random.Random(request.seed).choice(knobs)
            contract = self.blocks.contracts.get(site.hook, "") if self.blocks is not None else ""
            plans.append((index, site))
            prompts.append(build_line_prompt(request.parent.code, site, contract))
            params.append(
                SamplingParams(
                    temperature=temperature,
                    top_p=top_p,
                    max_new_tokens=min(max_tokens, 48),
                    seed=request.seed,
                    n=3,  # a small model often repeats or garbles: the first of three answers that is usable
                )
            )
        if prompts:
            try:
                outputs = llm.generate(prompts, params)
            except Exception as exc:  # a backend error fails these mutations, not the run
                logger.warning("LLM %s failed on %d line prompts: %s", info_base["model"], len(prompts), exc)
                outputs = None
                for index, _ in plans:
                    results[index] = MutationResult(
                        None, dict(info_base), f"LLM error: {type(exc).__name__}: {exc}"
                    )
            if outputs is not None:
                for (index, site), completions in zip(plans, outputs):
                    info = {**info_base, "detail": f"line {site.line} ({site.target} in {site.hook})"}
                    parent = requests[index].parent.code
                    made: MutationResult | None = None
                    for completion in completions or []:
                        answer = f"{site.target} =" + completion.text
                        try:
                            child = apply_line_answer(parent, site, answer)
                            validate_child(parent, child, self.config.max_code_length)
                        except (MutationError, EvolveBlockError) as exc:
                            made = made or MutationResult(
                                None, info, f"malformed LLM answer: {exc}", answer[:_MAX_RESPONSE_ARTIFACT]
                            )
                            continue
                        made = MutationResult(child, info, None, answer[:_MAX_RESPONSE_ARTIFACT])
                        break
                    results[index] = made or MutationResult(None, info, "the LLM gave no answer")
        return [r for r in results if r is not None]

    def _sampling(self, model: int) -> tuple[float, float, int]:
        """``(temperature, top_p, max_tokens)`` of backend ``model``: its own, else the ``llm`` section's."""
        assert self.llms is not None
        own, lc = self.llms.sampling[model], self.config.llm
        temperature = own.get("temperature")
        top_p = own.get("top_p")
        max_tokens = own.get("max_tokens")
        return (
            float(
                temperature
                if temperature is not None
                else lc.temperature
                if lc.temperature is not None
                else 0.7
            ),
            float(top_p if top_p is not None else lc.top_p if lc.top_p is not None else 1.0),
            int(
                max_tokens if max_tokens is not None else lc.max_tokens if lc.max_tokens is not None else 4096
            ),
        )

    def _llm(self, model: int, requests: Sequence[MutationRequest]) -> list[MutationResult]:
        assert self.llms is not None
        llm = self.llms.members[model][0]
        temperature, top_p, max_tokens = self._sampling(model)
        prompts = [build_prompt(r.parent, r.inspirations, self.config) for r in requests]
        params = [
            SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_tokens, seed=r.seed)
            for r in requests
        ]
        info_base = {"kind": "llm", "model": self.llms.name(model), "model_index": model}
        try:
            outputs = llm.generate(prompts, params)
        except Exception as exc:  # a backend error fails these mutations, not the run
            logger.warning(
                "LLM %s failed on a batch of %d prompts: %s", info_base["model"], len(prompts), exc
            )
            return [
                MutationResult(None, dict(info_base), f"LLM error: {type(exc).__name__}: {exc}")
                for _ in requests
            ]
        results = []
        for request, completions in zip(requests, outputs):
            answer = completions[0].text if completions else ""
            info = dict(info_base)
            try:
                child, how = apply_llm_answer(request.parent.code, answer)
                info["detail"] = how
                validate_child(request.parent.code, child, self.config.max_code_length)
            except (MutationError, EvolveBlockError) as exc:
                results.append(
                    MutationResult(
                        None, info, f"malformed LLM answer: {exc}", answer[:_MAX_RESPONSE_ARTIFACT]
                    )
                )
                continue
            results.append(MutationResult(child, info, None, answer[:_MAX_RESPONSE_ARTIFACT]))
        return results
