"""The verifiable domain of proposer/solver self-play: arithmetic word problems.

Dr. Zero (arXiv 2601.07055) grounds its proposer in web search; this machine
has no search engine, so :mod:`societas.topology.patterns.selfplay` uses
arithmetic word problems instead. This module holds that domain:

* :func:`arithmetic_word_problem_task` — a seeded instruction asking the
  proposer for one word problem (topic, operations and number range drawn
  from :data:`OPERATIONS` and friends), and :func:`arithmetic_task_hops`, the
  number of reasoning steps (:data:`OPERATION_HOPS`) that instruction asks for;
* :func:`safe_eval_arithmetic` — exact evaluation (as a ``Fraction``) of
  ``+ - * / **`` expressions through :mod:`ast`, with bounds on size and
  magnitude so that no input can exhaust memory or time;
* :func:`find_arithmetic_expressions` and :func:`verify_arithmetic` — check an
  answer against the arithmetic expression found in a question.
"""

from __future__ import annotations

import ast
import math
import operator
import random
import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any

__all__ = [
    "OPERATIONS",
    "OPERATION_HOPS",
    "arithmetic_task_hops",
    "arithmetic_word_problem_task",
    "find_arithmetic_expressions",
    "safe_eval_arithmetic",
    "verify_arithmetic",
]


# ---------------------------------------------------------------------------
# proposer instructions
# ---------------------------------------------------------------------------

_TOPICS = (
    "apples at a market",
    "books on shelves",
    "a bakery's muffins",
    "marbles in jars",
    "a school trip bus",
    "coins in a piggy bank",
    "a garden's flower beds",
    "a train's passengers",
    "pencils in boxes",
    "a farmer's chickens and eggs",
    "a library's visitors",
    "tickets for a concert",
)
OPERATIONS: tuple[str, ...] = (
    "one addition and one subtraction",
    "one multiplication",
    "a multiplication followed by an addition",
    "a division that leaves no remainder",
    "a multiplication followed by a subtraction",
    "two additions",
)
"""The operations a proposer instruction may ask for (one is drawn per instruction)."""

OPERATION_HOPS: dict[str, int] = {
    "one addition and one subtraction": 2,
    "one multiplication": 1,
    "a multiplication followed by an addition": 2,
    "a division that leaves no remainder": 1,
    "a multiplication followed by a subtraction": 2,
    "two additions": 2,
}
"""Reasoning steps ("hops") each requested operation needs: the key HRPO groups proposals by."""


def arithmetic_task_hops(task: str) -> int:
    """The hop count of an :func:`arithmetic_word_problem_task` instruction (the operations it asks for)."""
    for ops, hops in OPERATION_HOPS.items():
        if f"must need {ops}," in task:
            return hops
    raise ValueError("not an arithmetic_word_problem_task instruction: no known operation in it")


_RANGES = ("whole numbers below 20", "whole numbers below 50", "whole numbers below 100")
_EXAMPLE = "Question: A baker fills 3 trays with 8 rolls each and sells 5 rolls. How many rolls are left?\nAnswer: 19"


def arithmetic_word_problem_task(rng: random.Random | int | None = None) -> str:
    """An instruction for the proposer: write one arithmetic word problem.

    The topic, the operations and the number range are drawn from ``rng``
    (a ``random.Random`` or an int seed), so a batch of tasks is diverse and
    reproducible. The answer must be a single whole number, which makes the
    solvers' exact match meaningful.
    """
    if rng is None or isinstance(rng, int):
        rng = random.Random(rng)
    if not isinstance(rng, random.Random):
        raise TypeError(f"rng must be a random.Random or an int seed, got {type(rng).__name__}")
    topic = rng.choice(_TOPICS)
    ops = rng.choice(OPERATIONS)
    numbers = rng.choice(_RANGES)
    # The example comes first and the request last: small models follow the last instruction best
    # (on the embedded model this markedly raised the share of well-formed proposals).
    return (
        f"Here is an example of an arithmetic word problem and its answer:\n{_EXAMPLE}\n\n"
        f"Now write one new arithmetic word problem about {topic}. Solving it must need {ops}, "
        f"using {numbers}. Its answer must be a single whole number. Do not give the answer in the question. "
        "Write it in the same format: a line 'Question: ...' ending with '?', then a line 'Answer: <the number>'."
    )


# ---------------------------------------------------------------------------
# exact, safe evaluation and checking of answers
# ---------------------------------------------------------------------------

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
_MAX_EXPR_CHARS = 200
_MAX_EXPONENT = 64
_MAX_MAGNITUDE = Fraction(10) ** 18


def safe_eval_arithmetic(expr: str) -> Fraction:
    """Evaluate ``+ - * / **`` and parentheses over numbers, exactly (as a Fraction).

    The expression is parsed with :mod:`ast` and only number literals,
    the four operations, powers and unary signs are allowed — no names, calls
    or attributes, so nothing but arithmetic can run. Powers need an integer
    exponent of magnitude at most 64, and every intermediate value must stay
    below 1e18 in magnitude, so no input can exhaust memory or time. Raises
    ``ValueError`` on anything else (including division by zero).
    """
    if not isinstance(expr, str):
        raise TypeError(f"expected a string expression, got {type(expr).__name__}")
    text = expr.replace("×", "*").replace("÷", "/").strip()
    if not text or len(text) > _MAX_EXPR_CHARS:
        raise ValueError(f"expression must have 1 to {_MAX_EXPR_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {exc.msg}") from None

    def ev(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        number = node.value if isinstance(node, ast.Constant) else None
        # bool is an int subclass, but True + 1 is not arithmetic on numbers.
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            value = Fraction(str(number)) if isinstance(number, float) else Fraction(number)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            inner = ev(node.operand)
            value = inner if isinstance(node.op, ast.UAdd) else -inner
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Div) and right == 0:
                raise ValueError("division by zero")
            if isinstance(node.op, ast.Pow):
                if right.denominator != 1 or abs(right) > _MAX_EXPONENT:
                    raise ValueError(f"exponent must be an integer of magnitude at most {_MAX_EXPONENT}")
                if left == 0 and right < 0:
                    raise ValueError("zero to a negative power")
                if left != 0 and abs(right) * math.log10(max(abs(left), 1 / abs(left))) > 18:
                    raise ValueError("power out of range (|result| or 1/|result| above 1e18)")
                value = left ** int(right)
            else:
                value = _BINOPS[type(node.op)](left, right)
        else:
            raise ValueError(f"not allowed in an arithmetic expression: {type(node).__name__}")
        if abs(value) > _MAX_MAGNITUDE:
            raise ValueError("value too large")
        return value

    return ev(tree)


_EXPR_CANDIDATE = re.compile(r"[\d(][\d\s.+\-*/×÷()]*[\d)]")
_HAS_OPERATOR = re.compile(r"[\d)]\s*(?:\*\*|[-+*/×÷])\s*[-+(]*\s*[\d(]")


def find_arithmetic_expressions(text: str) -> list[str]:
    """Maximal runs of digits, operators and parentheses in ``text`` that
    contain at least one operator between operands and evaluate safely;
    longest first."""
    found = []
    for m in _EXPR_CANDIDATE.finditer(text or ""):
        cand = m.group(0).strip()
        if not _HAS_OPERATOR.search(cand):
            continue
        while cand.count("(") > cand.count(")") and cand.startswith("("):
            cand = cand[1:].strip()
        while cand.count(")") > cand.count("(") and cand.endswith(")"):
            cand = cand[:-1].strip()
        try:
            safe_eval_arithmetic(cand)
        except ValueError:
            continue
        found.append(cand)
    return sorted(found, key=len, reverse=True)


def _parse_number(text: str) -> Fraction | None:
    s = (text or "").strip().replace(",", "").replace("$", "").rstrip("%").strip()
    try:
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None


def verify_arithmetic(question: str, answer: str) -> bool | None:
    """Check ``answer`` against the arithmetic expression in ``question``.

    ``None`` when the question holds no safely evaluable expression (see
    :func:`find_arithmetic_expressions`; the longest one is used); otherwise
    whether the answer, read as a number (``1,000``, ``$12``, ``2.5``,
    ``3/4``), equals the expression's exact value. A non-numeric answer is
    ``False``.
    """
    exprs = find_arithmetic_expressions(question)
    if not exprs:
        return None
    value = safe_eval_arithmetic(exprs[0])
    got = _parse_number(answer)
    return got is not None and got == value
