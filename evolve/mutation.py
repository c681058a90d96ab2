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

* ``constant`` — perturb 1..``max_constants`` numeric literals, multiplicative
  log-normal noise ``x * exp(N(0, sigma))`` or additive ``x + N(0, sigma)``
  (integers move by one or scale and round);
* ``operator`` — swap one arithmetic operator (``+ - * /``), one comparison
  (``< <= > >=``) or ``min``/``max``;
* ``function`` — swap a called function for its partner from
  ``mutation.function_pairs`` (e.g. ``torch.relu`` <-> ``torch.abs``);
* ``crossover`` — replace one function (same qualified name) of the parent by
  its version from a second parent.

Edits are made on the source text at the positions the AST gives, so comments
and formatting elsewhere survive. Every child must parse, differ from its
parent, keep the text outside the evolve blocks byte for byte and respect
``max_code_length``; otherwise the mutation fails with a reason (a
:class:`MutationError`), which the controller records as a failed program.
"""

from __future__ import annotations

import ast
import logging
import math
import random
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from societas.agents.llm import LLM, SamplingParams, load_llm

from .config import EvolveConfig
from .program import (
    EvolveBlockError,
    Program,
    find_evolve_blocks,
    frozen_parts_equal,
    replace_evolve_blocks,
)

logger = logging.getLogger(__name__)

__all__ = [
    "DiffBlock",
    "LLMEnsemble",
    "MutationError",
    "MutationRequest",
    "MutationResult",
    "Mutator",
    "apply_diff",
    "apply_llm_answer",
    "build_prompt",
    "crossover",
    "parse_diff",
    "perturb_constants",
    "swap_function",
    "swap_operator",
    "validate_child",
]

SEARCH, DIVIDER, REPLACE = "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE"
_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
_MAX_RESPONSE_ARTIFACT = 4000


class MutationError(ValueError):
    """A mutation that produced no valid child; the message is the recorded reason."""


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
        ast.parse(child)
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


class LLMEnsemble:
    """Weighted backends; :meth:`choose` draws one index with a caller-supplied RNG."""

    def __init__(self, members: Sequence[tuple[LLM, float]]) -> None:
        if not members:
            raise ValueError("an LLM ensemble needs at least one backend")
        for llm, weight in members:
            if not weight > 0:
                raise ValueError(
                    f"LLM {getattr(llm, 'name', llm)!r} has weight {weight}; weights must be > 0"
                )
        self.members = list(members)

    @classmethod
    def from_uris(
        cls, uris: Sequence[tuple[str, float]], *, timeouts: Sequence[float | None] | None = None
    ) -> LLMEnsemble:
        """The ensemble of ``(URI, weight)`` pairs; ``timeouts[i]`` bounds each request of an ``openai:`` URI."""
        members = []
        for index, (uri, weight) in enumerate(uris):
            timeout = timeouts[index] if timeouts is not None else None
            if timeout is not None and uri.strip().startswith("openai:"):
                members.append((load_llm(uri, timeout_s=timeout), weight))
            else:
                members.append((load_llm(uri), weight))
        return cls(members)

    def choose(self, rng: random.Random) -> int:
        return rng.choices(range(len(self.members)), weights=[w for _, w in self.members])[0]

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
            self.tree = ast.parse(code)
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
    """Perturb 1..max_constants numeric literals inside the evolve blocks."""
    mc = config.mutation
    src = _Source(code)
    sites = [
        n
        for n in src.nodes(ast.Constant)
        if isinstance(n.value, (int, float))
        and not isinstance(n.value, bool)
        and math.isfinite(n.value)
        and (mc.perturb_ints or isinstance(n.value, float))
    ]
    if not sites:
        raise MutationError("no numeric constant inside the evolve blocks to perturb")
    chosen = sorted(
        rng.sample(sites, rng.randint(1, min(mc.max_constants, len(sites)))), key=lambda n: src.span(n)
    )
    edits, notes = [], []
    for node in chosen:
        old = node.value
        if isinstance(old, int):
            if rng.random() < mc.additive_probability or abs(old) < 4:
                new: float | int = old + rng.choice((-1, 1))
            else:
                new = int(round(old * math.exp(rng.gauss(0.0, mc.constant_sigma)))) or old + 1
                if new == old:
                    new = old + rng.choice((-1, 1))
            text = _format_number(new, True)
        else:
            if old == 0.0 or rng.random() < mc.additive_probability:
                new = old + rng.gauss(0.0, mc.constant_sigma)
            else:
                new = old * math.exp(rng.gauss(0.0, mc.constant_sigma))
            text = _format_number(new, False)
        start, end = src.span(node)
        edits.append((start, end, text))
        notes.append(f"line {node.lineno}: {old!r} -> {text}")
    return _edit(code, edits), "; ".join(notes)


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
        raise MutationError("no swappable operator (+ - * /, < <= > >=, min/max) inside the evolve blocks")
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
        raise MutationError("no call to a function of mutation.function_pairs inside the evolve blocks")
    node, old = rng.choice(sites)
    new = rng.choice(partners[old])
    start, end = src.span(node.func)
    return _edit(code, [(start, end, new)]), f"line {node.lineno}: {old} -> {new}"


def _functions(src: _Source) -> dict[str, tuple[int, int, str]]:
    """Qualified name -> (start offset of its first line, end offset, indentation) for functions in evolve blocks."""
    found: dict[str, tuple[int, int, str]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if isinstance(child, ast.ClassDef):
                    visit(child, name + ".")
                    continue
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                last = _end(child)[0]
                inside = any(lo <= first and last <= hi for lo, hi in src.blocks)
                if inside:
                    line = src.lines[first - 1]
                    indent = line[: len(line) - len(line.lstrip())]
                    found[name] = (src.starts[first - 1], src.starts[last], indent)

    visit(src.tree, "")
    return found


def crossover(
    code: str, donor: str, rng: random.Random, config: EvolveConfig | None = None
) -> tuple[str, str]:
    """Replace one function of ``code`` by the function of the same qualified name from ``donor``."""
    mine, theirs = _functions(_Source(code)), _functions(_Source(donor))
    shared = sorted(
        name
        for name in set(mine) & set(theirs)
        if textwrap.dedent(code[mine[name][0] : mine[name][1]])
        != textwrap.dedent(donor[theirs[name][0] : theirs[name][1]])
    )
    if not shared:
        raise MutationError("the two parents share no differing function inside their evolve blocks")
    name = rng.choice(shared)
    start, end, indent = mine[name]
    body = textwrap.indent(textwrap.dedent(donor[theirs[name][0] : theirs[name][1]]), indent)
    if not body.endswith("\n"):
        body += "\n"
    return _edit(code, [(start, end, body)]), f"function {name} from the second parent"


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


@dataclass
class MutationResult:
    code: str | None
    info: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None
    llm_response: str | None = None


class Mutator:
    """Plans mutation kinds and makes children, batching LLM prompts per backend."""

    def __init__(self, config: EvolveConfig, llms: LLMEnsemble | None = None) -> None:
        self.config = config
        self.llms = llms
        weights = dict(config.mutation.weights)
        if llms is None and weights.get("llm", 0) > 0:
            weights.pop("llm")
            logger.info(
                "no LLM configured: using only the AST operators %s",
                sorted(k for k, w in weights.items() if w > 0),
            )
        self.weights = {k: w for k, w in weights.items() if w > 0}
        if not self.weights:
            raise ValueError(
                "mutation.weights leaves no usable mutation: 'llm' needs an LLM (--llm or llm.models), "
                "or give a weight to an AST operator (constant, operator, function, crossover)"
            )
        self.kinds = sorted(self.weights)

    def plan(self, rng: random.Random) -> tuple[str, int | None]:
        kind = rng.choices(self.kinds, weights=[self.weights[k] for k in self.kinds])[0]
        model = self.llms.choose(rng) if kind == "llm" and self.llms is not None else None
        return kind, model

    def make(self, requests: Sequence[MutationRequest]) -> list[MutationResult]:
        """Children for ``requests`` in the same order; failures carry their reason."""
        results: list[MutationResult | None] = [None] * len(requests)
        by_model: dict[int, list[int]] = {}
        for index, request in enumerate(requests):
            if request.kind == "llm":
                by_model.setdefault(request.model_index or 0, []).append(index)
            else:
                results[index] = self._ast(request)
        for model, indices in sorted(by_model.items()):
            for index, result in zip(indices, self._llm(model, [requests[i] for i in indices])):
                results[index] = result
        return [r for r in results if r is not None]

    def _ast(self, request: MutationRequest) -> MutationResult:
        rng = random.Random(request.seed)
        parent = request.parent.code
        info: dict[str, Any] = {"kind": request.kind}
        try:
            if request.kind == "constant":
                child, detail = perturb_constants(parent, rng, self.config)
            elif request.kind == "operator":
                child, detail = swap_operator(parent, rng, self.config)
            elif request.kind == "function":
                child, detail = swap_function(parent, rng, self.config)
            elif request.kind == "crossover":
                if request.donor is None:
                    raise MutationError("crossover needs a second parent and the island has none")
                info["donor_id"] = request.donor.id
                child, detail = crossover(parent, request.donor.code, rng, self.config)
            else:
                raise MutationError(f"unknown mutation kind {request.kind!r}")
            info["detail"] = detail
            validate_child(parent, child, self.config.max_code_length)
        except (MutationError, EvolveBlockError) as exc:
            return MutationResult(None, info, str(exc))
        return MutationResult(child, info)

    def _llm(self, model: int, requests: Sequence[MutationRequest]) -> list[MutationResult]:
        assert self.llms is not None
        llm = self.llms.members[model][0]
        lc = self.config.llm
        prompts = [build_prompt(r.parent, r.inspirations, self.config) for r in requests]
        params = [
            SamplingParams(
                temperature=lc.temperature, top_p=lc.top_p, max_new_tokens=lc.max_tokens, seed=r.seed
            )
            for r in requests
        ]
        info_base = {"kind": "llm", "model": self.llms.name(model)}
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
