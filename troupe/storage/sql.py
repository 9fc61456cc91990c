"""Read-only SQL over a DuckDB connection: one statement, a timeout, a row limit; and its exports.

:func:`run_read_only` is what :meth:`DuckDBStore.run_sql <troupe.storage.duckdb_store.DuckDBStore.run_sql>`
(``troupe sql``, ``POST /v1/troupe/sql``) and :meth:`~troupe.storage.duckdb_store.DuckDBStore.query`
run under the store's lock. A query is guarded three ways:

* it must be exactly one read-only statement (:func:`~troupe.storage.schema.check_read_only`);
* it runs inside a transaction that is always rolled back, so even a function with side
  effects on the database leaves nothing behind;
* a timer interrupts it (DuckDB's ``interrupt()``) once it has run ``timeout_s``: the store's
  one thread is also the one that writes, so a query holds writes back at most that long.

Only the first ``max_rows`` rows are read (one more tells whether there were more): a plain
scan stops there; a query that must see every row first (``ORDER BY``, an aggregate) still
runs to its end, within the timeout.

:func:`write_result` writes a result to a CSV, JSON or Parquet file through DuckDB's own
``COPY … TO`` (no other package needed), from an in-memory database holding the rows with
their column types: the same for rows read here and rows that came from a server.

Example::

    conn = duckdb.connect(":memory:")
    result = run_read_only(conn, "SELECT * FROM range(5)", max_rows=3, timeout_s=10)
    result.rows, result.truncated        # ([(0,), (1,), (2,)], True)
    write_result(result, "out.parquet", "parquet")
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any, Literal

import duckdb

from .base import QueryError, QueryResult, QueryTimeout, StorageError
from .schema import check_read_only

__all__ = ["EXPORT_FORMATS", "ExportFormat", "run_read_only", "write_result"]

ExportFormat = Literal["csv", "json", "parquet"]
EXPORT_FORMATS: tuple[ExportFormat, ...] = ("csv", "json", "parquet")

# COPY's options per format: CSV with a header row; JSON as one array of objects.
_COPY_OPTIONS: dict[str, str] = {"csv": "FORMAT csv, HEADER", "json": "FORMAT json, ARRAY true", "parquet": "FORMAT parquet"}


class _Deadline:
    """Interrupts the statement running on ``conn`` once ``timeout_s`` have passed, unless left first.

    The timer interrupts only while the block runs: leaving it disarms the timer under the
    same lock the timer takes, so an interrupt can never reach a later statement (the
    store's next write, on the same connection).
    """

    def __init__(self, conn: duckdb.DuckDBPyConnection, timeout_s: float | None) -> None:
        self._conn = conn
        self._guard = threading.Lock()
        self._armed = False
        self.expired = False
        """Whether the timer interrupted the statement."""
        self._timer = None if timeout_s is None else threading.Timer(timeout_s, self._expire)

    def __enter__(self) -> _Deadline:
        if self._timer is not None:
            self._armed = True
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._guard:
            self._armed = False
        if self._timer is not None:
            self._timer.cancel()

    def _expire(self) -> None:
        with self._guard:
            if self._armed:
                self.expired = True
                self._conn.interrupt()


def run_read_only(
    conn: duckdb.DuckDBPyConnection,
    sql: str,
    params: Sequence[Any] | dict[str, Any] | None = None,
    *,
    max_rows: int | None = None,
    timeout_s: float | None = None,
) -> QueryResult:
    """Run one read-only statement on ``conn`` (which nothing else uses meanwhile).

    Args:
        conn: the connection; no transaction may be open on it.
        sql: the statement (see :func:`~troupe.storage.schema.check_read_only`).
        params: ``?``/``$1`` parameters, or a dict for ``$name`` ones.
        max_rows: the most rows returned (more set ``truncated``); None: all of them.
        timeout_s: interrupt the statement after this many seconds; None: never.

    Returns:
        The columns, their DuckDB types and the rows.

    Raises:
        QueryTimeout: the statement ran past ``timeout_s``.
        QueryError: not exactly one read-only statement, or DuckDB rejected it.
        ValueError: ``max_rows`` < 1 or ``timeout_s`` <= 0.
    """
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    if timeout_s is not None and not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    check_read_only(sql)
    conn.execute("BEGIN TRANSACTION")
    try:
        with _Deadline(conn, timeout_s) as deadline:
            try:
                conn.execute(sql, params)
                # The connection is its own result: read the description before ROLLBACK replaces it.
                description = conn.description or []
                rows = conn.fetchall() if max_rows is None else conn.fetchmany(max_rows + 1)
            except duckdb.InterruptException as exc:
                if deadline.expired:
                    raise QueryTimeout(f"the query ran longer than {timeout_s:g} s and was interrupted") from exc
                raise QueryError(f"DuckDB: {exc}") from exc
            except duckdb.Error as exc:
                raise QueryError(f"DuckDB: {exc}") from exc
    finally:
        conn.execute("ROLLBACK")
    truncated = max_rows is not None and len(rows) > max_rows
    return QueryResult(
        columns=[d[0] for d in description],
        types=[str(d[1]) for d in description],
        rows=rows[:max_rows] if truncated else rows,
        truncated=truncated,
    )


def write_result(result: QueryResult, path: str | os.PathLike[str], fmt: ExportFormat) -> None:
    """Write ``result``'s rows to ``path`` (replaced if it exists) with DuckDB's ``COPY``.

    Formats: ``csv`` (a header row, then the rows), ``json`` (one array of objects) or
    ``parquet`` (the columns' DuckDB types kept). Columns that share a name are told apart
    as DuckDB does it (``a``, ``a_1``).

    Raises:
        StorageError: the file cannot be written, or a column's type cannot be rebuilt.
        ValueError: an unknown format.
    """
    if fmt not in _COPY_OPTIONS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(EXPORT_FORMATS)}")
    target = "'" + os.fspath(path).replace("'", "''") + "'"  # COPY takes no parameter for its target
    conn = duckdb.connect(":memory:")
    try:
        named = zip(_unique(result.columns), result.types, strict=True)
        conn.execute(f"CREATE TABLE result ({', '.join(f'{_quoted(n)} {_column_type(t)}' for n, t in named)})")
        if result.rows:
            appender = conn.appender("result")
            appender.append_rows(result.rows)
            appender.flush()
        conn.execute(f"COPY result TO {target} ({_COPY_OPTIONS[fmt]})")
    except duckdb.Error as exc:
        raise StorageError(f"cannot write {os.fspath(path)!r} as {fmt}: {exc}") from exc
    finally:
        conn.close()


def _unique(names: Sequence[str]) -> list[str]:
    """``names`` with repeats renamed ``name_1``, ``name_2``, … (a table's columns must differ)."""
    taken: set[str] = set()
    unique = []
    for name in names:
        candidate, n = name, 0
        while candidate in taken:
            n += 1
            candidate = f"{name}_{n}"
        taken.add(candidate)
        unique.append(candidate)
    return unique


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _column_type(duckdb_type: str) -> str:
    # A column of bare NULLs has DuckDB's type "NULL", which no table column may have;
    # DuckDB itself stores such a column as INTEGER.
    return "INTEGER" if duckdb_type.strip('"') == "NULL" else duckdb_type
