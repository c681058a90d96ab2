"""Building blocks: an LLM-free operator that edits a program's algorithm as code.

A task may ship a library of the known building blocks of its family of
algorithms (``building_blocks.yaml`` in the task directory; the CFR task's
holds DCFR's separate discounting of positive and negative regrets, PCFR+'s
optimism, VAD-CFR's volatility-adaptive discounting, and so on). Each block
is a few statements meant for one *hook* (a function inside the evolve blocks,
named by its qualified name, e.g. ``RegretAccumulator.update``) and one place
in it (``before``: the first statement of the hook that starts with this
text, e.g. ``regret = old + new`` or ``return``). Blocks of one ``group`` are
alternatives (two ways to discount old regrets), so a hook holds at most one
block of each group.

In a program a block is delimited by comments, so the child stays a readable
program and its blocks can be found again::

        # block dcfr-discount: DCFR: positive regrets x t^a/(t^a+1), negative x t^b/(t^b+1)
        old = torch.where(old > 0, old * (t**1.5 / (t**1.5 + 1.0)), old * 0.5)
        # end dcfr-discount

The operator (:func:`mutate_blocks`, mutation kind ``blocks``) picks one edit
uniformly among all that apply to the parent: **insert** a block whose group
is absent from its hook, **replace** a present block by another of its group,
or **remove** a present block. Edits happen only inside the evolve blocks;
the caller validates the child like any other (parses, differs, frozen parts
unchanged). The numbers inside a block are ordinary literals, which the
``constant`` and ``cmaes`` operators then tune.

File format (YAML); ``hooks`` (optional) states each hook's contract, which
the one-line LLM mutation (``llm_line``) shows the model::

    hooks:
      RegretAccumulator.update: "Returns R_t [B, I, A] from old = R_{t-1} and new = r_t ..."
    blocks:
      - name: dcfr-discount           # letters, digits, '-', '+', '.', '_'
        hook: RegretAccumulator.update
        group: discount
        before: "regret = old + new"   # or "return"
        doc: "DCFR (Brown & Sandholm 2019): ..."
        code: |
          old = torch.where(old > 0, old * (t**1.5 / (t**1.5 + 1.0)), old * 0.5)
"""

from __future__ import annotations

import ast
import random
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from societas.agents.documents import DocumentError, read_text

from .program import find_evolve_blocks, parse_python

__all__ = [
    "BLOCKS_FILE",
    "BlockError",
    "BlockLibrary",
    "BuildingBlock",
    "PresentBlock",
    "insert_block",
    "mutate_blocks",
    "present_blocks",
    "remove_block",
]

BLOCKS_FILE = "building_blocks.yaml"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_START = re.compile(r"^(?P<indent>[ \t]*)# block (?P<name>[A-Za-z0-9][A-Za-z0-9_.+-]*)(?::.*)?$")
_END = re.compile(r"^[ \t]*# end (?P<name>[A-Za-z0-9][A-Za-z0-9_.+-]*)[ \t]*$")


class BlockError(ValueError):
    """A library that cannot be used, or an edit that cannot be made; the message says why."""


@dataclass(frozen=True)
class BuildingBlock:
    name: str
    hook: str  # qualified name of the function it goes in, e.g. "RegretAccumulator.update"
    group: str  # blocks of one group are alternatives
    before: str  # the statement (its first characters) it is inserted before
    code: str  # the statements, without indentation
    doc: str = ""  # one line, written after the start marker

    def render(self, indent: str) -> str:
        """The block with its markers, indented for its hook."""
        header = f"# block {self.name}" + (f": {self.doc}" if self.doc else "")
        body = [header, *self.code.rstrip("\n").splitlines(), f"# end {self.name}"]
        return "".join(f"{indent}{line}\n" if line.strip() else "\n" for line in body)


class BlockLibrary:
    """The building blocks of one task, checked when loaded."""

    def __init__(self, blocks: Sequence[BuildingBlock], contracts: dict[str, str] | None = None) -> None:
        if not blocks:
            raise BlockError("a building-block library needs at least one block")
        self.blocks = list(blocks)
        self.contracts = dict(contracts or {})  # hook -> what it receives and must return (for prompts)
        self.by_name: dict[str, BuildingBlock] = {}
        for block in self.blocks:
            if block.name in self.by_name:
                raise BlockError(f"two building blocks are named {block.name!r}")
            self.by_name[block.name] = block

    def __len__(self) -> int:
        return len(self.blocks)

    def group(self, hook: str, group: str) -> list[BuildingBlock]:
        return [b for b in self.blocks if b.hook == hook and b.group == group]

    @classmethod
    def from_data(cls, data: Any, source: str = "building blocks") -> BlockLibrary:
        if not isinstance(data, dict) or not isinstance(data.get("blocks"), list):
            raise BlockError(f"{source}: expected a mapping with a 'blocks' list")
        unknown_top = sorted(set(data) - {"blocks", "hooks"})
        if unknown_top:
            raise BlockError(f"{source}: unknown top-level key(s) {unknown_top} (known: blocks, hooks)")
        contracts = data.get("hooks") or {}
        if not isinstance(contracts, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in contracts.items()
        ):
            raise BlockError(f"{source}: 'hooks' must map a hook's qualified name to its contract (text)")
        blocks = []
        for index, entry in enumerate(data["blocks"]):
            where = f"{source}: block {index + 1}"
            if not isinstance(entry, dict):
                raise BlockError(f"{where} is not a mapping")
            unknown = sorted(set(entry) - {"name", "hook", "group", "before", "code", "doc"})
            if unknown:
                raise BlockError(f"{where} has unknown key(s) {unknown}")
            for key in ("name", "hook", "group", "before", "code"):
                if not isinstance(entry.get(key), str) or not entry[key].strip():
                    raise BlockError(f"{where} needs a non-empty string {key!r}")
            name = entry["name"].strip()
            where = f"{source}: block {name!r}"
            if not _NAME.match(name):
                raise BlockError(f"{where}: a name holds letters, digits, '_', '.', '+' and '-' only")
            doc = str(entry.get("doc") or "").strip()
            if "\n" in doc:
                raise BlockError(f"{where}: 'doc' must be one line")
            code = textwrap.dedent(entry["code"]).strip("\n") + "\n"
            try:
                parse_python(code)
            except SyntaxError as exc:
                raise BlockError(f"{where}: its code does not parse: {exc.msg} (line {exc.lineno})") from None
            for line in code.splitlines():
                if _START.match(line) or _END.match(line):
                    raise BlockError(f"{where}: its code holds a block marker line ({line.strip()!r})")
            blocks.append(
                BuildingBlock(
                    name, entry["hook"].strip(), entry["group"].strip(), entry["before"].strip(), code, doc
                )
            )
        return cls(blocks, {k: v.strip() for k, v in contracts.items()})

    @classmethod
    def load(cls, path: str | Path) -> BlockLibrary:
        path = Path(path)
        try:
            data = yaml.safe_load(read_text(path))
        except DocumentError as exc:
            raise BlockError(str(exc)) from None
        except yaml.YAMLError as exc:
            raise BlockError(f"{path} is not valid YAML: {exc}") from None
        return cls.from_data(data, str(path))


@dataclass(frozen=True)
class PresentBlock:
    name: str
    hook: str | None  # the function it sits in (None: outside any function of the evolve blocks)
    start: int  # character offset of its start-marker line
    end: int  # character offset just after its end-marker line


def _line_starts(code: str) -> list[int]:
    starts = [0]
    for line in code.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def _hooks(code: str) -> dict[str, tuple[int, int, int]]:
    """Qualified function name -> (first line, last line, body's first line), 1-based, inside evolve blocks."""
    tree = parse_python(code)
    blocks = [(b.first_line, b.last_line) for b in find_evolve_blocks(code)]
    found: dict[str, tuple[int, int, int]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                last = child.end_lineno or child.lineno
                if any(lo <= child.lineno and last <= hi for lo, hi in blocks):
                    found[f"{prefix}{child.name}"] = (child.lineno, last, child.body[0].lineno)

    visit(tree, "")
    return found


def present_blocks(code: str) -> list[PresentBlock]:
    """The marked blocks of ``code`` inside its evolve blocks, in order; :class:`BlockError` on broken markers."""
    lines = code.splitlines(keepends=True)
    starts = _line_starts(code)
    regions = [(b.first_line, b.last_line) for b in find_evolve_blocks(code)]
    hooks = _hooks(code)
    found: list[PresentBlock] = []
    open_block: tuple[str, int] | None = None
    for number, line in enumerate(lines, start=1):
        if not any(lo <= number <= hi for lo, hi in regions):
            continue
        start, end = _START.match(line.rstrip("\r\n")), _END.match(line.rstrip("\r\n"))
        if start:
            if open_block is not None:
                raise BlockError(
                    f"line {number}: block {start['name']!r} starts inside block {open_block[0]!r}"
                )
            open_block = (start["name"], number)
        elif end:
            if open_block is None or open_block[0] != end["name"]:
                raise BlockError(f"line {number}: '# end {end['name']}' closes no open block of that name")
            name, first = open_block
            hook = next((h for h, (lo, hi, _) in hooks.items() if lo < first and number <= hi), None)
            found.append(PresentBlock(name, hook, starts[first - 1], starts[number]))
            open_block = None
    if open_block is not None:
        raise BlockError(f"line {open_block[1]}: block {open_block[0]!r} has no '# end {open_block[0]}' line")
    return found


def remove_block(code: str, block: PresentBlock) -> str:
    return code[: block.start] + code[block.end :]


def insert_block(code: str, block: BuildingBlock) -> str:
    """``code`` with ``block`` inserted before its anchor statement in its hook."""
    hooks = _hooks(code)
    if block.hook not in hooks:
        raise BlockError(
            f"the program has no function {block.hook} inside its evolve blocks for block {block.name!r}"
        )
    _, last, body = hooks[block.hook]
    lines = code.splitlines(keepends=True)
    starts = _line_starts(code)
    inside = [(b.start, b.end) for b in present_blocks(code)]
    anchor = block.before
    for number in range(body, last + 1):
        text = lines[number - 1].strip()
        offset = starts[number - 1]
        if any(lo <= offset < hi for lo, hi in inside):
            continue  # never anchor on a statement of another block
        if text == anchor or text.startswith(anchor + " ") or (anchor == "return" and text == "return"):
            line = lines[number - 1]
            indent = line[: len(line) - len(line.lstrip())]
            return code[:offset] + block.render(indent) + code[offset:]
    raise BlockError(
        f"{block.hook} has no statement starting with {anchor!r} to put block {block.name!r} before"
    )


def _edits(code: str, library: BlockLibrary) -> list[tuple[str, PresentBlock | None, BuildingBlock | None]]:
    """Every applicable edit: ("insert", None, new), ("replace", old, new), ("remove", old, None)."""
    present = present_blocks(code)
    hooks = _hooks(code)
    in_hook: dict[str, set[str]] = {}
    edits: list[tuple[str, PresentBlock | None, BuildingBlock | None]] = []
    for block in present:
        known = library.by_name.get(block.name)
        if known is not None and block.hook is not None:
            in_hook.setdefault(block.hook, set()).add(known.group)
            for other in library.group(block.hook, known.group):
                if other.name != block.name:
                    edits.append(("replace", block, other))
        edits.append(("remove", block, None))
    for new in library.blocks:
        if new.hook in hooks and new.group not in in_hook.get(new.hook, set()):
            edits.append(("insert", None, new))
    return edits


def mutate_blocks(code: str, rng: random.Random, library: BlockLibrary) -> tuple[str, str]:
    """Insert, replace or remove one building block inside a hook; returns ``(child, what was done)``.

    Edits whose anchor is missing in the parent are skipped (another is
    drawn); :class:`BlockError` when no edit applies.
    """
    edits = _edits(code, library)
    rng.shuffle(edits)
    reasons = []
    for action, old, new in edits:
        try:
            if action == "remove" and old is not None:
                return remove_block(code, old), f"remove {old.name} from {old.hook or 'the evolve block'}"
            if action == "insert" and new is not None:
                return insert_block(code, new), f"insert {new.name} into {new.hook}"
            if action == "replace" and old is not None and new is not None:
                child = insert_block(remove_block(code, old), new)
                return child, f"replace {old.name} by {new.name} in {new.hook}"
        except BlockError as exc:
            reasons.append(str(exc))
    detail = f" ({reasons[0]})" if reasons else ""
    raise BlockError(f"no building-block edit applies to this program{detail}")
