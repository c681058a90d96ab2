"""Numeric tables inside the evolve blocks, and the ``table`` operator that grows, shrinks and moves them.

Many discovery programs return a construction: points, circles, vectors,
one per row. Perturbing their numbers one by one moves a construction, but
never changes how many items it has, and a seed meant for an LLM to rewrite
(the two-row start of a kissing configuration, ``np.zeros((21, 3))`` for 21
circles) hides its numbers in a constructor. The ``table`` operator works on whole rows.

A *table* is, inside the evolve blocks,

* a list display of numbers, ``[0.5, 1.0, 2.0]`` (two entries or more), or of
  rows of numbers of one length, ``[[0.1, 0.2], (0.3, 0.4)]``; or
* a numpy constructor whose value the literals alone fix:
  ``np.zeros((n, 2))`` where ``n = 11`` is assigned once, at the top of the
  same function, before it; ``np.array([np.ones(d), -1 * np.ones(d)])``;
  ``np.full``, ``np.eye``, ``np.arange``, ``np.linspace`` and arithmetic
  with numbers. Its value is folded from the syntax tree with numpy on the
  literals (no code of the program runs), and the child holds it written
  out as a list display, ``np.array([[0.0, 0.0], ...])`` (with the
  constructor's ``dtype=`` kept), then moved in the same child.

One move per child: each table is as likely as any other and each of its
moves as likely as its others, times the run's credit of that move on that
table (``mutation.site_credit``: the share of its children at least as fit as
their parent, with no evaluator ``error``), so a table whose size the
evaluator fixes is less and less often grown or shrunk:

* ``row`` — every entry of one row moves by the ``constant`` operator's
  noise: a point, a circle, a vector moves as one (tables of rows only);
* ``append`` — a copy of a row joins the table at its end, moved in each
  entry with chance 1/2 (one at least);
* ``reflect`` — a reflected copy of a row joins the table at its end: each of
  its non-zero entries changes sign with chance 1/2 (one at least), the
  symmetry of constructions around the origin (codes, kissing
  configurations, lattices);
* ``drop`` — one row leaves (tables of two rows or more);
* ``spread`` — every row that repeats an earlier one becomes a random
  convex combination of the table's different rows (weights uniform on the
  simplex; tables of floats with two different rows and a repeated one).
  Coincident points come apart, inside the convex hull of the construction:
  a seed of points stacked on one spot (``np.zeros((11, 2))``, every
  triangle flat, a score of 0 that no single point's move changes) gets a
  score once row moves have put two points elsewhere, not in line with it.

A list display is edited in place: the rows a move leaves alone keep their
text, their comments and their layout (a table written one row per line
gains or loses whole lines), so the child differs from its parent only
where it moved.
"""

from __future__ import annotations

import ast
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

__all__ = ["MAX_TABLE_ENTRIES", "NoTable", "Table", "TableError", "find_tables", "mutate_table"]

MAX_TABLE_ENTRIES = 1024  # a larger constructor is left as it is: written out it would swamp the program
_CONSTRUCTORS = frozenset({"zeros", "ones", "full", "array", "asarray", "eye", "arange", "linspace"})
_DTYPES = frozenset(
    {
        "float64",
        "float32",
        "float16",
        "double",
        "int64",
        "int32",
        "int16",
        "int8",
        "uint8",
        "uint16",
        "uint32",
    }
)
_MAX_LINE = 100  # a table written out longer than this goes one row per line


class TableError(ValueError):
    """A table move that cannot be made (the caller records it as a failed child)."""


class NoTable(TableError):
    """The parent has no table inside its evolve blocks: the operator does not apply."""


class SourceView(Protocol):
    """What the operator needs of a parsed parent (``mutation``'s source map has it)."""

    code: str
    tree: ast.Module

    def span(self, node: ast.expr | ast.stmt) -> tuple[int, int]: ...

    def inside(self, node: ast.expr | ast.stmt) -> bool: ...


@dataclass
class Table:
    """One table of the parent: its node, its rows (1-D tables have rows of one entry) and how to write it."""

    node: ast.expr
    rows: list[list[float | int]]
    texts: list[list[str]] | None  # the entries' source texts (None: a constructor, nothing written yet)
    flat: bool  # a 1-D table
    brackets: list[str]  # per row, "[" or "(" (2-D tables)
    constructor: str | None = None  # the constructor's source text, for the detail line
    prefix: str = ""  # text written before the list display ("np.array(" for a constructor)
    suffix: str = ""  # and after it (", dtype=np.float32)")
    # what the table stands for in its statement: ``np.array([...])`` as a whole
    anchor: ast.expr | None = None
    row_nodes: list[ast.expr] | None = None  # a list display's rows (entries of a 1-D table)

    def moves(self) -> list[str]:
        """The moves that apply: ``row`` (tables of rows), ``append``, ``reflect`` (a row with a non-zero
        entry), ``drop`` (two rows or more), ``spread`` (a table of floats with two different rows and a
        row that repeats an earlier one)."""
        moves = (["row"] if not self.flat else []) + ["append"]
        if any(v != 0 for row in self.rows for v in row):
            moves.append("reflect")
        moves += ["drop"] if len(self.rows) >= 2 else []
        repeats = len(self.repeats())
        if (
            repeats
            and len(self.rows) - repeats >= 2
            and any(isinstance(v, float) for r in self.rows for v in r)
        ):
            moves.append("spread")
        return moves

    def repeats(self) -> list[int]:
        """The rows equal to an earlier row."""
        seen: set[tuple[float | int, ...]] = set()
        out = []
        for k, row in enumerate(self.rows):
            key = tuple(row)
            if key in seen:
                out.append(k)
            seen.add(key)
        return out


def _number(node: ast.expr) -> float | int | None:
    """The value of a numeric literal, a signed one included; None for anything else."""
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign = -1 if isinstance(node.op, ast.USub) else 1
        node = node.operand
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
    ):
        if isinstance(node.value, float) and not math.isfinite(node.value):
            return None
        return sign * node.value
    return None


def _literal_rows(node: ast.List) -> tuple[list[list[float | int]], list[ast.expr], bool] | None:
    """``(rows, row nodes, flat)`` of a list display that is a table, else None."""
    elts = node.elts
    values = [_number(e) for e in elts]
    if len(elts) >= 2 and all(v is not None for v in values):
        return [[v] for v in values if v is not None], list(elts), True
    if not elts or not all(isinstance(e, (ast.List, ast.Tuple)) for e in elts):
        return None
    rows: list[list[float | int]] = []
    width = None
    for row in elts:
        assert isinstance(row, (ast.List, ast.Tuple))
        cells = [_number(e) for e in row.elts]
        if not cells or any(c is None for c in cells) or (width is not None and len(cells) != width):
            return None
        width = len(cells)
        rows.append([c for c in cells if c is not None])
    return rows, list(elts), False


class _Folder:
    """Folds numpy constructors whose value the literals alone fix, without running any of the program."""

    def __init__(self, tree: ast.Module) -> None:
        self.numpy = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
            if alias.name == "numpy"
        }
        self.declared = {
            name
            for node in ast.walk(tree)
            if isinstance(node, (ast.Global, ast.Nonlocal))
            for name in node.names
        }
        self.tree = tree
        self.scope_of: dict[int, ast.AST] = {}
        self._assign_scopes(tree, tree)

    def _assign_scopes(self, node: ast.AST, scope: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            self.scope_of[id(child)] = scope
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else scope
            self._assign_scopes(child, inner)

    @staticmethod
    def _bindings(scope: ast.AST, name: str) -> int:
        """How often ``name`` is bound anywhere in ``scope`` (nested scopes counted too: conservative)."""
        count = 0
        nodes = ast.walk(scope) if not isinstance(scope, ast.Module) else _module_level(scope)
        for node in nodes:
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)) and node.id == name:
                count += 1
            elif isinstance(node, ast.arg) and node.arg == name:
                count += 1
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                count += sum((a.asname or a.name.split(".")[0]) == name for a in node.names)
            elif (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name
            ):
                count += 1
        return count

    def _name(self, node: ast.Name, site: ast.expr) -> float | int:
        """A name bound once, by ``name = <number expression>`` at the top of its scope, before ``site``."""
        if node.id in self.declared:
            raise TableError(f"{node.id} is declared global or nonlocal")
        scope = self.scope_of.get(id(site), self.tree)
        for where in (scope, self.tree) if scope is not self.tree else (self.tree,):
            count = self._bindings(where, node.id)
            if count == 0:
                continue
            body = getattr(where, "body", [])
            for stmt in body:
                if (
                    isinstance(stmt, ast.Assign)
                    and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name)
                    and stmt.targets[0].id == node.id
                    and count == 1
                    and (stmt.end_lineno or stmt.lineno, stmt.end_col_offset or 0)
                    <= (site.lineno, site.col_offset)
                ):
                    value = self.fold(stmt.value, stmt.value)
                    if isinstance(value, (list, np.ndarray)):
                        raise TableError(
                            f"{node.id} holds a list or an array, which the program may change in place"
                        )
                    return value
            raise TableError(f"{node.id} is not bound once by a plain assignment before its use")
        raise TableError(f"{node.id} is not bound in the program")

    def _dtype(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Name) and node.id in ("float", "int"):
            return np.float64 if node.id == "float" else np.int64
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in self.numpy
            and node.attr in _DTYPES
        ):
            return np.dtype(node.attr)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in _DTYPES:
            return np.dtype(node.value)
        raise TableError("a dtype other than a plain float or integer type")

    def constructor(self, node: ast.expr) -> str | None:
        """The numpy function a call names (``zeros`` for ``np.zeros(...)``), else None."""
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in self.numpy
            and node.func.attr in _CONSTRUCTORS
        ):
            return node.func.attr
        return None

    def fold(self, node: ast.expr, site: ast.expr) -> Any:
        """The value of ``node`` (a Python number or a numpy array); :class:`TableError` where it is not fixed."""
        value = _number(node)
        if value is not None:
            return value
        if isinstance(node, ast.Name):
            return self._name(node, site)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            operand = self.fold(node.operand, site)
            return -operand if isinstance(node.op, ast.USub) else +operand
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.fold(e, site) for e in node.elts]
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            left, right = self.fold(node.left, site), self.fold(node.right, site)
            if isinstance(left, list) or isinstance(right, list):
                raise TableError("arithmetic on a list display")
            with np.errstate(all="raise"):
                try:
                    if isinstance(node.op, ast.Add):
                        return left + right
                    if isinstance(node.op, ast.Sub):
                        return left - right
                    if isinstance(node.op, ast.Mult):
                        return left * right
                    return left / right
                except (ArithmeticError, ValueError, FloatingPointError) as exc:
                    raise TableError(f"the arithmetic fails: {exc}") from None
        name = self.constructor(node)
        if name is None:
            raise TableError(f"{type(node).__name__} is not a number, a bound name or a numpy constructor")
        assert isinstance(node, ast.Call)
        dtype = None
        for keyword in node.keywords:
            if keyword.arg != "dtype":
                raise TableError(f"np.{name} with keyword {keyword.arg!r}")
            dtype = self._dtype(keyword.value)
        args = [self.fold(a, site) for a in node.args]
        return _construct(name, args, dtype)


def _module_level(tree: ast.Module) -> list[ast.AST]:
    """The nodes of the module's own scope (function and class bodies left out)."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return out


def _shape(value: Any) -> tuple[int, ...]:
    dims = value if isinstance(value, list) else [value]
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and 0 <= d for d in dims):
        raise TableError("a shape that is not of non-negative integers")
    shape = tuple(int(d) for d in dims)
    if len(shape) > 2 or math.prod(shape) > MAX_TABLE_ENTRIES:
        raise TableError(f"shape {shape}: more than 2 dimensions or {MAX_TABLE_ENTRIES} entries")
    return shape


def _construct(name: str, args: list[Any], dtype: Any) -> np.ndarray:
    """``np.<name>(*args, dtype=dtype)`` on folded literal arguments, within the size bounds."""
    try:
        if name in ("zeros", "ones") and len(args) == 1:
            shape = _shape(args[0])
            return np.zeros(shape, dtype=dtype) if name == "zeros" else np.ones(shape, dtype=dtype)
        if name == "full" and len(args) == 2 and not isinstance(args[1], list):
            return np.full(_shape(args[0]), args[1], dtype=dtype)
        if name == "eye" and len(args) in (1, 2):
            shape = _shape([args[0], args[-1]])
            return np.eye(shape[0], shape[1], dtype=dtype)
        if (
            name == "arange"
            and 1 <= len(args) <= 3
            and not any(isinstance(a, (list, np.ndarray)) for a in args)
        ):
            count = (
                math.ceil((args[1] - args[0]) / (args[2] if len(args) == 3 else 1))
                if len(args) > 1
                else args[0]
            )
            if count > MAX_TABLE_ENTRIES:
                raise TableError(f"np.arange with more than {MAX_TABLE_ENTRIES} entries")
            return np.arange(*args, dtype=dtype)
        if name == "linspace" and len(args) == 3 and not any(isinstance(a, (list, np.ndarray)) for a in args):
            _shape(args[2])
            return np.linspace(args[0], args[1], int(args[2]), dtype=dtype)
        if name in ("array", "asarray") and len(args) == 1:
            value = np.array(args[0], dtype=dtype)
            if value.dtype == object or value.size > MAX_TABLE_ENTRIES:
                raise TableError("a ragged or too large array")
            return value
    except (TypeError, ValueError, OverflowError, ZeroDivisionError, MemoryError) as exc:
        raise TableError(f"np.{name} fails on these arguments: {exc}") from None
    raise TableError(f"np.{name} with {len(args)} positional arguments")


def _entry_text(value: float | int) -> str:
    """An entry as the child writes it, exactly (a signed number needs no parentheses in a list display)."""
    return str(value) if isinstance(value, int) else repr(float(value))


def find_tables(src: SourceView) -> list[Table]:
    """The tables inside the evolve blocks, in source order (an array constructor with a table inside, as
    in ``np.array([[1, 2], [3, 4]])``, is its list display; a table inside a larger one is not a table)."""
    folder = _Folder(src.tree)
    found: list[Table] = []
    taken: list[tuple[int, int]] = []  # spans already a table: nothing inside them is another
    nodes = sorted(
        (n for n in ast.walk(src.tree) if isinstance(n, (ast.List, ast.Call)) and src.inside(n)),
        key=lambda n: (src.span(n)[0], -src.span(n)[1]),
    )
    wrapped: dict[int, ast.Call] = {}  # a list display -> the np.array(...) call it is the argument of
    for node in nodes:
        if isinstance(node, ast.Call) and folder.constructor(node) in ("array", "asarray") and node.args:
            wrapped[id(node.args[0])] = node
    for node in nodes:
        start, end = src.span(node)
        if any(a <= start and end <= b for a, b in taken):
            continue
        if isinstance(node, ast.List):
            parsed = _literal_rows(node)
            if parsed is None:
                continue
            rows, row_nodes, flat = parsed
            if flat:
                texts = [[src.code[slice(*src.span(e))]] for e in row_nodes]
                brackets = ["["] * len(rows)
            else:
                texts = [
                    [src.code[slice(*src.span(c))] for c in r.elts]
                    for r in row_nodes
                    if isinstance(r, (ast.List, ast.Tuple))
                ]
                brackets = ["(" if isinstance(r, ast.Tuple) else "[" for r in row_nodes]
            anchor = wrapped.get(id(node), node)
            found.append(Table(node, rows, texts, flat, brackets, anchor=anchor, row_nodes=row_nodes))
            taken.append((start, end))
            continue
        name = folder.constructor(node)
        if name is None:
            continue
        assert isinstance(node, ast.Call)
        if name in ("array", "asarray") and node.args and isinstance(node.args[0], ast.List):
            if _literal_rows(node.args[0]) is not None:
                continue  # the list display inside is the table
        try:
            value = folder.fold(node, node)
        except (TableError, TypeError, ValueError, ArithmeticError, RecursionError):
            continue  # not fixed by the literals alone (or not an array numpy makes): not a table
        if not isinstance(value, np.ndarray) or value.ndim not in (1, 2) or value.size == 0:
            continue
        if value.dtype.kind not in "iuf" or not np.all(np.isfinite(value)):
            continue
        flat = value.ndim == 1
        rows = [[v] for v in value.tolist()] if flat else value.tolist()  # Python ints or floats
        assert isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)  # constructor()
        alias = node.func.value.id
        dtype = next((k.value for k in node.keywords if k.arg == "dtype"), None)
        suffix = f", dtype={src.code[slice(*src.span(dtype))]})" if dtype is not None else ")"
        found.append(
            Table(
                node,
                rows,
                None,
                flat,
                ["["] * len(rows),
                constructor=src.code[start:end],
                prefix=f"{alias}.array(",
                suffix=suffix,
                anchor=node,
            )
        )
        taken.append((start, end))
    return found


def _indent_of(code: str, offset: int) -> str:
    line = code[_line_start(code, offset) : offset]
    return line[: len(line) - len(line.lstrip())]


def _item(texts: list[str], bracket: str, flat: bool) -> str:
    """One row as source text (an entry of a 1-D table as it is)."""
    if flat:
        return texts[0]
    if bracket == "(":
        return "(" + texts[0] + ",)" if len(texts) == 1 else "(" + ", ".join(texts) + ")"
    return "[" + ", ".join(texts) + "]"


def _render(table: Table, texts: list[list[str]], brackets: list[str], src: SourceView) -> str:
    """A written-out constructor's source text: one line, or one row per line where that is too long."""
    start, _ = src.span(table.node)
    items = [_item(t, b, table.flat) for t, b in zip(texts, brackets)]
    one_line = "[" + ", ".join(items) + "]"
    column = start - _line_start(src.code, start)
    if column + len(table.prefix) + len(one_line) <= _MAX_LINE or len(items) < 2:
        return table.prefix + one_line + table.suffix
    indent = _indent_of(src.code, start)
    return (
        table.prefix
        + "[\n"
        + "".join(f"{indent}    {item},\n" for item in items)
        + indent
        + "]"
        + table.suffix
    )


_LINE_TAIL = re.compile(r"[ \t]*,?[ \t]*(#[^\n]*)?")


def _line_start(code: str, offset: int) -> int:
    return code.rfind("\n", 0, offset) + 1


def _line_end(code: str, offset: int) -> int:
    """The offset of the newline ending the line that holds ``offset`` (the code's length on the last)."""
    end = code.find("\n", offset)
    return len(code) if end < 0 else end


def _own_lines(src: SourceView, rows: list[ast.expr]) -> bool:
    """Whether each row stands on lines of its own (nothing but a comma and a comment after it)."""
    code = src.code
    for row in rows:
        a, b = src.span(row)
        if code[_line_start(code, a) : a].strip() or not _LINE_TAIL.fullmatch(code[b : _line_end(code, b)]):
            return False
    return True


def _edit_literal(
    table: Table, move: str, i: int, items: list[str], rewritten: list[int], src: SourceView
) -> str:
    """The child of a list-display table by the smallest edit, so the rows a move leaves alone keep their
    text, their comments and their layout (``items``: the child's rows as text; ``rewritten``: the rows a
    ``row`` or ``spread`` move changed in place, in order; ``i``: the row dropped or copied)."""
    assert table.row_nodes is not None
    rows, code = table.row_nodes, src.code
    if rewritten:  # from the last row, so the earlier spans still hold
        for k in reversed(rewritten):
            a, b = src.span(rows[k])
            code = code[:a] + items[k] + code[b:]
        return code
    own = "\n" in code[slice(*src.span(table.node))] and _own_lines(src, rows)
    if move == "drop":
        if own:  # its whole lines, the newline after them included
            a, b = src.span(rows[i])
            a, b = _line_start(code, a), min(_line_end(code, b) + 1, len(code))
        elif i + 1 < len(rows):
            a, b = src.span(rows[i])[0], src.span(rows[i + 1])[0]
        else:
            a, b = src.span(rows[i - 1])[1], src.span(rows[i])[1]
        return code[:a] + code[b:]
    item, (a, end) = items[-1], src.span(rows[-1])  # the copy joins after the last row
    if not own:
        return code[:end] + ", " + item + code[end:]
    comma = "" if code[end:].lstrip(" \t").startswith(",") else ","
    after = min(_line_end(code, end) + 1, len(code))
    return code[:end] + comma + code[end:after] + f"{_indent_of(code, a)}{item},\n" + code[after:]


Perturb = Callable[[float | int, random.Random], float | int]


def _moved(value: float | int, rng: random.Random, perturb: Perturb) -> str:
    """``value`` moved by the constant operator's noise, written as that operator writes it."""
    new = perturb(value, rng)
    return str(int(new)) if isinstance(value, int) else _short(new)


def _short(value: float | int) -> str:
    """A moved float as the ``constant`` operator writes it: six significant digits."""
    return repr(float(f"{float(value):.6g}"))


def mutate_table(
    src: SourceView,
    rng: random.Random,
    perturb: Perturb,
    weight: Callable[[Table, str], float] | None = None,
) -> tuple[str, str, Table, str]:
    """A child with one table of the parent moved: ``(child, detail line, the table, the move)``.

    Each table is as likely as any other, and each of its moves as likely as
    its others, each pair's chance also multiplied by ``weight(table, move)``
    where given (the run's credit of that move on that table). ``perturb(value,
    rng)`` is the ``constant`` operator's noise for one number. Raises
    :class:`NoTable` if the evolve blocks hold no table.
    """
    tables = find_tables(src)
    if not tables:
        raise NoTable(
            "no table of numbers (a list display of numbers or of rows of numbers, or a numpy constructor "
            "the literals fix) inside the evolve blocks"
        )
    pairs = [(t, m) for t in tables for m in t.moves()]
    chances = [
        (weight(t, m) if weight is not None else 1.0) / (len(tables) * len(t.moves())) for t, m in pairs
    ]
    table, move = pairs[rng.choices(range(len(pairs)), weights=chances)[0]]
    if table.texts is None:
        texts = [[_entry_text(v) for v in row] for row in table.rows]
    else:
        texts = [list(t) for t in table.texts]
    brackets = list(table.brackets)
    if move == "reflect":
        i = rng.choice([k for k, r in enumerate(table.rows) if any(v != 0 for v in r)])
    elif move == "spread":
        i = 0  # no one row: every repeated row moves
    else:
        i = rng.randrange(len(table.rows))
    row = table.rows[i]
    what, whats = ("entry", "entries") if table.flat else ("row", "rows")
    rewritten: list[int] = []  # the rows changed in place
    if move == "spread":
        rewritten = repeats = table.repeats()
        repeated = set(repeats)
        distinct = [r for k, r in enumerate(table.rows) if k not in repeated]
        for k in repeats:
            weights = [rng.expovariate(1.0) for _ in distinct]  # uniform on the simplex
            total = sum(weights)
            texts[k] = [
                _short(sum(w * float(r[j]) for w, r in zip(weights, distinct)) / total)
                for j in range(len(row))
            ]
        done = (
            f"spread {len(repeats)} repeated {whats if len(repeats) > 1 else what} to random convex "
            f"combinations of the {len(distinct)} different {whats}"
        )
    elif move == "row":
        texts[i] = [_moved(v, rng, perturb) for v in row]
        rewritten = [i]
        done = f"moved every entry of row {i}"
    elif move == "drop":
        del texts[i]
        del brackets[i]
        done = f"dropped {what} {i}"
    else:
        new = list(texts[i])
        if move == "reflect":
            nonzero = [j for j, v in enumerate(row) if v != 0]
            flips = [j for j in nonzero if rng.random() < 0.5] or [rng.choice(nonzero)]
            for j in flips:
                new[j] = _entry_text(-row[j])
            how = f"{len(flips)} sign(s) flipped" if not table.flat else "its sign flipped"
        else:
            chosen = [j for j in range(len(row)) if rng.random() < 0.5] or [rng.randrange(len(row))]
            for j in chosen:
                new[j] = _moved(row[j], rng, perturb)
            how = f"{len(chosen)} of its entries moved" if not table.flat else "moved"
        texts.append(new)
        brackets.append(brackets[i])
        done = f"appended a copy of {what} {i}, {how}"
    line = table.node.lineno
    if table.constructor is not None:
        start, end = src.span(table.node)
        child = src.code[:start] + _render(table, texts, brackets, src) + src.code[end:]
        shape = f"{len(table.rows)}" if table.flat else f"{len(table.rows)}x{len(table.rows[0])}"
        done = f"wrote out {table.constructor} as a {shape} table, then {done}"
    else:
        items = [_item(t, b, table.flat) for t, b in zip(texts, brackets)]
        child = _edit_literal(table, move, i, items, rewritten, src)
    return child, f"line {line}: {done} ({len(texts)} {whats} now)", table, move
