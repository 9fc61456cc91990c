"""The example server-side tools registered by the embedded defaults.

They make the quickstart's tool loop work out of the box and give tests and
benchmarks something real to run as Ray tasks.
"""

from __future__ import annotations

import ast
import asyncio
import datetime
import operator
from collections.abc import Callable

__all__ = ["calculator", "sleep", "now"]

_OPERATORS: dict[type[ast.AST], Callable[..., float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression safely (numbers and + - * / // % ** only)."""
    tree = ast.parse(expression, mode="eval")
    result = _evaluate(tree.body)
    return str(int(result) if isinstance(result, float) and result.is_integer() else result)


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 100:
            raise ValueError("exponent too large")
        return _OPERATORS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))
    raise ValueError(f"unsupported expression: {ast.unparse(node)}")


async def sleep(ms: int) -> str:
    """Wait ``ms`` milliseconds (at most a minute), then say so."""
    if not 0 <= ms <= 60_000:
        raise ValueError("ms must be between 0 and 60000")
    await asyncio.sleep(ms / 1000)
    return f"slept {ms} ms"


def now() -> str:
    """The current date and time in UTC, ISO 8601."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
