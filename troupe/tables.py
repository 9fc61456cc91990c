"""Plain-text tables: the one table renderer of ``troupe sql``, ``troupe eval list`` and the eval reports.

It lives apart from both users so that :mod:`troupe.eval` (Ray-free, pure) need not import
the command line, and the command line need not import the eval package to print a query.

Example::

    >>> print(format_table(["status", "n"], [("completed", 12), ("failed", 1)], count_rows=True))
    status    |  n
    ----------+---
    completed | 12
    failed    |  1
    (2 rows)
"""

from __future__ import annotations

import decimal
from collections.abc import Sequence
from typing import Any

__all__ = ["format_table"]


def format_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    null: str = "NULL",
    float_format: str = "",
    count_rows: bool = False,
) -> str:
    """Render rows as an aligned text table, numbers right-aligned.

    A column is right-aligned when every non-None value in it is a number (and there is one).
    Line breaks inside a value are shown escaped, so a row is always one line.

    Args:
        columns: the column names.
        rows: the values, one sequence per row, as many values as columns.
        null: how None is shown (SQL's ``NULL``; the eval reports use ``-``).
        float_format: the :func:`format` spec for floats (``""``: ``str(value)``; ``".3f"``).
        count_rows: end with a ``(N rows)`` line.

    Example::

        >>> print(format_table(["tag", "n", "e2e"], [("math", 12, 0.5), ("code", 3, None)],
        ...                    null="-", float_format=".3f"))
        tag  |  n |   e2e
        -----+----+------
        math | 12 | 0.500
        code |  3 |     -
    """
    cells = [[_cell(v, null, float_format) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    numeric = [
        any(_is_number(r[i]) for r in rows) and all(_is_number(r[i]) or r[i] is None for r in rows)
        for i in range(len(columns))
    ]

    def line(values: Sequence[str]) -> str:
        padded = (v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True))
        return " | ".join(padded).rstrip()

    out = [line(list(columns)), "-+-".join("-" * w for w in widths), *(line(r) for r in cells)]
    if count_rows:
        out.append(f"({len(rows)} row{'' if len(rows) == 1 else 's'})")
    return "\n".join(out)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | decimal.Decimal) and not isinstance(value, bool)


def _cell(value: Any, null: str, float_format: str) -> str:
    if value is None:
        return null
    text = format(value, float_format) if isinstance(value, float) else str(value)
    return text.replace("\r", "\\r").replace("\n", "\\n")
