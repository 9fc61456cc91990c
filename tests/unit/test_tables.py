"""``format_table``: the one text-table renderer of ``troupe sql``, ``troupe eval list`` and the eval reports."""

from __future__ import annotations

import decimal
import doctest

import troupe.tables
from troupe.tables import format_table


def test_the_docstring_examples_hold() -> None:
    result = doctest.testmod(troupe.tables)
    assert result.attempted >= 2 and result.failed == 0


def test_sql_style() -> None:
    rows = [("a\nb", None, decimal.Decimal("1.50"), 0.1), ("c", None, 12, None)]
    assert format_table(["text", "nothing", "n", "x"], rows, count_rows=True).splitlines() == [
        "text | nothing |    n |    x",
        "-----+---------+------+-----",
        "a\\nb | NULL    | 1.50 |  0.1",
        "c    | NULL    |   12 | NULL",
        "(2 rows)",
    ]
    assert format_table(["n"], [(True,)], count_rows=True).splitlines() == ["n", "----", "True", "(1 row)"]
    assert format_table(["a", "b"], [], count_rows=True) == "a | b\n--+--\n(0 rows)"


def test_report_style() -> None:
    table = format_table(["case", "tokens"], [("a", 10.0), ("b", None)], null="-", float_format=".3f")
    assert table.splitlines() == ["case | tokens", "-----+-------", "a    | 10.000", "b    |      -"]
