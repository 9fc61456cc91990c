"""The plumbing every area of the DuckDB store shares: the connection, its lock, transactions,
long values in ``value_parts``, appenders and pages (the package docstring says why each is so).

:func:`transaction` is the one BEGIN … COMMIT of Troupe's DuckDB code: the store's connection
uses it under its lock (:meth:`Connection._transaction`), the files and vector stores' under
theirs (:mod:`troupe.storage.rag`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import duckdb

from .. import journal, schema
from ..base import Order, Page, ResponseRecord, StorageError, StoreLocked
from ..rewrite import rewrite
from ..sql import run_read_only

__all__ = ["Connection", "ROW_GROUP_ROWS", "check_page_args", "transaction"]

log = logging.getLogger(__name__)

_CHUNK_ROWS = 256

# Rows per row group (DuckDB's default is 122,880; module docstring, Memory).
ROW_GROUP_ROWS = 16_384

# How many conversations' next append positions are kept (the least recently used go first).
_CONVERSATION_SEQ_CACHE = 4096

# The process holding a file's lock, as DuckDB names it: "Conflicting lock is held in /usr/bin/python3 (PID 4242)".
_LOCK_HOLDER = re.compile(r"\(PID (\d+)\)")

# The most value_parts rows one read asks DuckDB for (module docstring, Memory): 4 Mi
# characters, at most 16 MB of UTF-8, whatever the number and the size of the values read.
_PARTS_PER_READ = 512

# Parts of long values (see Connection._join_parts), the first ``?`` of each of several, or a
# range of one. Ids grow in write order, so DuckDB skips the row groups whose min/max rule them
# out (EXPLAIN ANALYZE: 1 of 977).
_FIRST_PARTS = "SELECT id, part, text FROM value_parts WHERE id = ANY(?) AND part < ?"
_MORE_PARTS = "SELECT part, text FROM value_parts WHERE id = ? AND part >= ? AND part < ?"



def check_page_args(limit: int, order: str) -> None:
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if order not in ("asc", "desc"):
        raise ValueError(f"order must be 'asc' or 'desc', got {order!r}")


@contextmanager
def transaction(
    conn: duckdb.DuckDBPyConnection, on_rollback: Callable[[], None] | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """``conn`` inside BEGIN … COMMIT (the caller holds the connection's lock): any error rolls
    back, then ``on_rollback`` runs; DuckDB's errors come out as StorageError, others as themselves."""
    try:
        conn.execute("BEGIN TRANSACTION")
    except duckdb.Error as exc:
        raise StorageError(f"DuckDB: {exc}") from exc
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException as exc:
        try:
            conn.execute("ROLLBACK")
        except duckdb.Error:
            pass  # a failed COMMIT has already ended the transaction
        if on_rollback is not None:
            on_rollback()
        if isinstance(exc, duckdb.Error):
            raise StorageError(f"DuckDB: {exc}") from exc
        raise


def one_row(row: tuple[Any, ...] | None) -> tuple[Any, ...]:
    """The row of a query that always makes exactly one (an aggregate without GROUP BY, a setting)."""
    if row is None:
        raise StorageError("DuckDB returned no row for a query that always makes one")
    return row


class Connection:
    """One DuckDB connection to the store's database and the lock around it, with the helpers
    the area classes build on (the areas' methods are documented on their protocols)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, memory_limit: str | None = None) -> None:
        self.path = ":memory:" if path is None else os.fspath(path)
        self._lock = threading.Lock()
        self._conn: duckdb.DuckDBPyConnection | None = None
        # One appender per table, created on first use (see _append).
        self._appenders: dict[str, duckdb.Appender] = {}
        # (tenant, conversation id) -> next append position, for conversations known to exist.
        # Every write to conversations or conversation_items keeps it true (or drops the entry).
        self._conversation_seqs: dict[tuple[str, str], int] = {}
        try:
            self._conn = self._connect(memory_limit)
        except duckdb.Error as exc:
            message = f"cannot open DuckDB database {self.path!r}: {exc}"
            if isinstance(exc, duckdb.IOException) and "Could not set lock" in str(exc):
                holder = _LOCK_HOLDER.search(str(exc))
                raise StoreLocked(message, int(holder.group(1)) if holder else None) from exc
            raise StorageError(message) from exc
        try:
            if schema.CREDENTIALS_STORED_FROM <= self._stored_version() < schema.CREDENTIALS_WITHHELD_FROM:
                # Written when runs kept their credentials: the WAL and free blocks may still
                # hold them. A new file, then the migration (troupe.storage.rewrite).
                self._conn.close()
                log.warning("rewriting %s whole: it was written before credentials were kept off disk", self.path)
                rewrite(self.path, row_group_size=ROW_GROUP_ROWS)
                self._conn = self._connect(memory_limit)
            self._release_freed_memory(self._conn)
            self._migrate()
            # The next responses.seq: read once, then counted here (under the lock).
            self._next_response_seq: int = one_row(self._fetchone("SELECT coalesce(max(seq) + 1, 0) FROM responses"))[0]
            # The next value_parts id (ids a rolled-back transaction took are never used: harmless).
            self._next_parts_id: int = one_row(self._fetchone("SELECT coalesce(max(id) + 1, 0) FROM value_parts"))[0]
            # Rows of runs: a batch of responses looks for its runs only while there are some.
            self._open_runs: int = one_row(self._fetchone("SELECT count(*) FROM runs"))[0]
            # Webhook endpoints by tenant (id, event types): what the outbox looks at, in memory so
            # that a write with no endpoint to tell costs nothing (.webhooks.WebhookTables).
            self._webhook_subscribers: dict[str, tuple[tuple[str, frozenset[str]], ...]] = {}
            self.on_webhook_events: Callable[[], None] | None = None
            """Called (on the store's thread, after the commit) when a transaction wrote deliveries."""
            if schema.SCHEMA_VERSION >= schema.WEBHOOKS_FROM:  # (tests open files of older versions)
                self._read_webhook_subscribers(None)
            if self.path != ":memory:":
                # Responses made durable in the journal but not yet stored here (a crash).
                journal.replay_all(self, journal.journal_dir(self.path))
        except BaseException:
            self._conn.close()
            raise

    def _read_webhook_subscribers(self, tenant: str | None) -> None:
        """Read :attr:`_webhook_subscribers` again: of ``tenant``, or of every tenant (None)."""
        where, params = ("", []) if tenant is None else (" WHERE tenant = ?", [tenant])
        rows = self._fetchall(f"SELECT tenant, id, event_types FROM webhook_endpoints{where} ORDER BY created_at, id",
                              params)  # fmt: skip
        if tenant is not None:
            self._webhook_subscribers.pop(tenant, None)
        for owner, endpoint_id, types in rows:
            self._webhook_subscribers[owner] = (*self._webhook_subscribers.get(owner, ()), (endpoint_id, frozenset(types)))

    def write_responses(
        self, records: Sequence[ResponseRecord], *, journal_lsn: int | None = None, journal: str = ""
    ) -> None:
        """Stored by :class:`~.responses.ResponseTables` (which overrides this); declared here as
        :meth:`__init__` replays the journal through it (``journal.replay_all``)."""
        raise NotImplementedError

    def _connect(self, memory_limit: str | None) -> duckdb.DuckDBPyConnection:
        """A connection to :attr:`path`, with row groups of :data:`ROW_GROUP_ROWS` rows (module docstring, Memory).

        A file is attached to an in-memory instance, as ``ATTACH`` is where DuckDB takes the
        row group size, and made the default catalog: every statement (``troupe sql`` ones
        too) sees the schema under its plain names.
        """
        if self.path == ":memory:":
            conn = duckdb.connect(":memory:")
        else:
            conn = duckdb.connect(":memory:", config={"temp_directory": self.path + ".tmp"})
            try:
                quoted = "'" + self.path.replace("'", "''") + "'"
                conn.execute(f"ATTACH {quoted} AS troupe (ROW_GROUP_SIZE {ROW_GROUP_ROWS})")
                conn.execute("USE troupe")
            except BaseException:
                conn.close()
                raise
        if memory_limit is not None:
            conn.execute("SET memory_limit = ?", [memory_limit])
        return conn

    @staticmethod
    def _release_freed_memory(conn: duckdb.DuckDBPyConnection) -> None:
        """Turn on the allocator's background threads: freed memory goes back to the OS (module docstring).

        A SET rather than a ``connect`` option: DuckDB refuses to open a file that is already
        open in this process with other options. Where the allocator has no such threads
        (a build without jemalloc) the setting does nothing; if DuckDB refuses it, the store
        works as before.
        """
        try:
            conn.execute("SET allocator_background_threads = true")
        except duckdb.Error:
            pass

    def _stored_version(self) -> int:
        """The schema version of the file as opened (0: a new file)."""
        with self._locked() as conn:
            (tables,) = one_row(conn.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_catalog = current_database()"
                " AND table_name = ?", [schema.VERSION_TABLE],
            ).fetchone())  # fmt: skip
            if not tables:
                return 0
            return one_row(conn.execute(f"SELECT coalesce(max(version), 0) FROM {schema.VERSION_TABLE}").fetchone())[0]

    def _migrate(self) -> None:
        with self._transaction() as conn:
            conn.execute(schema.CREATE_VERSION_TABLE)
            current = one_row(conn.execute(f"SELECT coalesce(max(version), 0) FROM {schema.VERSION_TABLE}").fetchone())[0]
            if current > schema.SCHEMA_VERSION:
                raise StorageError(
                    f"{self.path!r} has schema version {current}, newer than the {schema.SCHEMA_VERSION} this Troupe "
                    "knows: upgrade Troupe (downgrades are not supported)"
                )
            for version in range(current + 1, schema.SCHEMA_VERSION + 1):
                for statement in schema.MIGRATIONS[version - 1]:
                    conn.execute(statement)
                conn.execute(f"INSERT INTO {schema.VERSION_TABLE} (version) VALUES (?)", [version])

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection of its own to this store's database (a DuckDB cursor), for a part of
        Troupe with tables of its own (files and vector stores, :mod:`troupe.storage.rag`) that
        should not queue behind this store's lock. DuckDB runs the two connections' transactions
        side by side; the caller closes it before :meth:`close`."""
        with self._locked() as conn:
            cursor = conn.cursor()
            if self.path != ":memory:":
                cursor.execute("USE troupe")
            return cursor

    @property
    def schema_version(self) -> int:
        """The schema version of the open database (always :data:`~troupe.storage.schema.SCHEMA_VERSION` once open)."""
        return one_row(self._fetchone(f"SELECT max(version) FROM {schema.VERSION_TABLE}"))[0]

    @contextmanager
    def _locked(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The connection, under the lock; DuckDB errors become StorageError."""
        with self._lock:
            if self._conn is None:
                raise StorageError("the store is closed")
            try:
                yield self._conn
            except duckdb.Error as exc:
                raise StorageError(f"DuckDB: {exc}") from exc

    @contextmanager
    def _transaction(self, on_commit: list[Callable[[], None]] | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        """Like :meth:`_locked`, inside :func:`transaction`; any error rolls back (and drops what
        the appenders hold) and becomes a StorageError.

        ``on_commit``: callbacks the body appends to, run (still under the lock) once COMMIT
        succeeded, and only then: what moves the in-memory counters.
        """
        with self._locked() as conn:
            try:
                with transaction(conn, self._clear_appenders):
                    yield conn
            except Exception as exc:
                if not isinstance(exc, StorageError):
                    # e.g. a malformed record (no id, an item that is not a dict)
                    raise StorageError(f"{type(exc).__name__}: {exc}") from exc
                raise
            for callback in on_commit or ():
                callback()

    def _clear_appenders(self) -> None:
        """Drop any row still buffered in a kept appender (after a failed transaction).

        :meth:`_append` already clears the appender it was using when it fails; this makes
        sure no appender carries rows of a rolled-back transaction into the next one (an
        appender also flushes what it holds when it is closed or garbage collected).
        """
        for appender in self._appenders.values():
            try:
                appender.clear()
            except duckdb.Error:
                pass  # an invalidated database: every later call fails anyway

    def _fetchone(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        with self._locked() as conn:
            # fetchall, not fetchone: a result left unread keeps its transaction open, and DuckDB
            # checkpoints no connection's writes while another transaction is open (the WAL of
            # a file written only through other connections then grew without bound).
            rows = conn.execute(sql, params).fetchall()
            return rows[0] if rows else None

    def _fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._locked() as conn:
            return conn.execute(sql, params).fetchall()

    def _fetch_values(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of ``sql``, whose last two columns are a JSON column and its parts id, with those
        two replaced by the value: decoded, and joined from its ``value_parts`` rows if long.

        The reads run under one hold of the lock, so a row and its parts are of one moment.
        ``sql`` should not sort its rows (sort them here): DuckDB sorts in memory, and the rows
        carry their JSON (20,000 rows of 8 KB values, 150 MB, failed under 128MB); a plain scan
        streams. Long values are read :data:`_PARTS_PER_READ` parts at a time (:meth:`_join_parts`).
        """
        with self._locked() as conn:
            rows = conn.execute(sql, params).fetchall()
            joined = self._join_parts(conn, [row[-1] for row in rows if row[-1] is not None])
        # Each long text is let go once decoded: the page is not held twice.
        return [(*row[:-2], json.loads(row[-2] if row[-1] is None else joined.pop(row[-1]))) for row in rows]

    @staticmethod
    def _join_parts(conn: duckdb.DuckDBPyConnection, ids: Sequence[int]) -> dict[int, str]:
        """The long values stored as the ``value_parts`` of ``ids``, each joined from its parts (under the lock).

        No read brings back more than :data:`_PARTS_PER_READ` parts, so DuckDB holds a bounded
        number of bytes whatever the number and the size of the values: the first parts of up to
        that many values at once (each its share of the bound), then the rest of those that have
        more, one value and a bounded range of its parts at a time. Values of a few parts, the
        common case, take one read for a whole page. (A ``string_agg`` of a page's parts in
        DuckDB needed the whole page in memory: 200 MB for ten 20 MB responses.)

        Raises:
            StorageError: a value has no parts (the file is damaged).
        """
        joined: dict[int, str] = {}
        unique = list(dict.fromkeys(ids))
        for start in range(0, len(unique), _PARTS_PER_READ):
            batch = unique[start : start + _PARTS_PER_READ]
            share = _PARTS_PER_READ // len(batch)
            pieces: dict[int, list[tuple[int, str]]] = {parts_id: [] for parts_id in batch}
            for parts_id, part, text in conn.execute(_FIRST_PARTS, [batch, share]).fetchall():
                pieces[parts_id].append((part, text))
            for parts_id, found in pieces.items():
                if not found:
                    raise StorageError(f"the parts of long value {parts_id} are missing from value_parts")
                first = share
                while len(found) == first:  # maybe more: the rest, a bounded range at a time
                    found += conn.execute(_MORE_PARTS, [parts_id, first, first + _PARTS_PER_READ]).fetchall()
                    first += _PARTS_PER_READ
                # Joined once whole: past the first read, one value's parts are held at a time.
                joined[parts_id] = "".join(text for _, text in sorted(found))
                found.clear()
        return joined

    def _stored(self, text: str, parts: list[tuple[int, int, str]]) -> tuple[str, int | None]:
        """``(JSON text, parts id)`` as a row holds ``text``: itself and None; or, when it is longer
        than :data:`~troupe.storage.schema.LONG_VALUE_CHARS`, JSON null and the id of the
        ``value_parts`` rows that hold it, which are added to ``parts`` (call under the lock).
        """
        if len(text) <= schema.LONG_VALUE_CHARS:
            return text, None
        parts_id = self._next_parts_id
        self._next_parts_id += 1
        step = schema.PART_CHARS
        parts.extend((parts_id, i, text[start : start + step]) for i, start in enumerate(range(0, len(text), step)))
        return "null", parts_id

    @staticmethod
    def _delete_parts(conn: duckdb.DuckDBPyConnection, deleted: Sequence[tuple[Any, ...]]) -> None:
        """Delete the ``value_parts`` of rows just deleted; ``deleted`` holds their parts ids last."""
        ids = [row[-1] for row in deleted if row[-1] is not None]
        if ids:
            conn.execute("DELETE FROM value_parts WHERE id = ANY(?)", [ids])

    def _delete_with_children(
        self, conn: duckdb.DuckDBPyConnection, table: str, children: str, parent: str, parts: str, key: list[str]
    ) -> bool:
        """Delete the row ``(tenant, id) = key`` of ``table`` and the rows of ``children`` whose
        ``(tenant, <parent>)`` is ``key``, with their long values (column ``parts``), inside a
        transaction; whether the row was there."""
        found = conn.execute(f"DELETE FROM {table} WHERE tenant = ? AND id = ? RETURNING id", key).fetchall()
        sql = f"DELETE FROM {children} WHERE tenant = ? AND {parent} = ? RETURNING {parts}"
        self._delete_returning_parts(conn, sql, key)
        return bool(found)

    def _delete_returning_parts(self, conn: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any]) -> int:
        """Run ``sql``, a ``DELETE … RETURNING <parts id column>``, and delete the ``value_parts`` of
        the rows it deleted (inside a transaction); how many rows it deleted."""
        deleted = conn.execute(sql, params).fetchall()
        self._delete_parts(conn, deleted)
        return len(deleted)

    @staticmethod
    def _insert(
        conn: duckdb.DuckDBPyConnection,
        table: str,
        columns: str,
        rows: Sequence[tuple[Any, ...]],
        *,
        replace: bool = False,
    ) -> None:
        """Multi-row INSERTs of ``rows``, chunked (call inside a transaction).

        ``replace``: ``INSERT OR REPLACE`` (the table's primary key decides; no key may repeat in ``rows``).
        """
        if not rows:
            return
        placeholders = "(" + ", ".join("?" * len(rows[0])) + ")"
        verb = "INSERT OR REPLACE INTO" if replace else "INSERT INTO"
        for start in range(0, len(rows), _CHUNK_ROWS):
            chunk = rows[start : start + _CHUNK_ROWS]
            params = [value for row in chunk for value in row]
            conn.execute(f"{verb} {table} ({columns}) VALUES " + ", ".join([placeholders] * len(chunk)), params)

    def _append(
        self, conn: duckdb.DuckDBPyConnection, table: str, columns: str, rows: Sequence[tuple[Any, ...]]
    ) -> None:
        """Insert ``rows`` with one flush of the table's appender (call inside a transaction).

        The appender runs in the connection's transaction, so a rollback undoes it.
        DuckDB refuses to flush while a result of ``execute`` is unread: read
        results to their end (``fetchall``, not ``fetchone``) before appending.
        """
        if not rows:
            return
        appender = self._appenders.get(table)
        if appender is None:
            names = [name.strip() for name in columns.split(",")]
            appender = self._appenders[table] = conn.appender(table, columns=names)
        try:
            appender.append_rows(rows)
            appender.flush()
        except BaseException:
            appender.clear()  # a bad row leaves the rows before it buffered: the next batch must not get them
            raise

    def _next_conversation_seq(self, conn: duckdb.DuckDBPyConnection, key: tuple[str, str]) -> int | None:
        """The next append position of ``(tenant, conversation id)``, or None if unknown (inside a transaction)."""
        start = self._conversation_seqs.get(key)
        if start is not None:
            return start
        rows = conn.execute(  # fetchall: an unread result would block _append
            "SELECT (SELECT coalesce(max(seq) + 1, 0) FROM conversation_items WHERE tenant = $1 AND conversation_id = $2)"
            " FROM conversations WHERE tenant = $1 AND id = $2",
            key,
        ).fetchall()
        return rows[0][0] if rows else None

    def _remember_conversation_seq(self, key: tuple[str, str], next_seq: int) -> None:
        """Cache the next append position of an existing conversation (under the lock).

        Only call this once a transaction that found the conversation has committed
        (from its ``on_commit`` callbacks).
        """
        cache = self._conversation_seqs
        cache.pop(key, None)  # re-inserted last: the oldest entry is the least recently used
        cache[key] = next_seq
        if len(cache) > _CONVERSATION_SEQ_CACHE:
            del cache[next(iter(cache))]

    def _paged(
        self,
        table: str,
        where: str,
        params: list[Any],
        keys: tuple[str, ...],
        anchor: Sequence[Any] | None,
        limit: int,
        order: Order,
        value: str,
    ) -> Page:
        """A page of the ``value`` of ``table``'s rows that match ``where`` (SQL conditions on
        ``params``), in ``keys`` order after ``anchor`` (the cursor's values of them).

        ``value`` names a JSON column and its parts id (``"item, item_parts"``); the last of
        ``keys`` tells rows apart. The rows are chosen and ordered on their keys alone, and only
        the page's values are read (DuckDB does this itself for a LIMIT of at most 50 rows): a
        sort of the rows with their values held them in memory (the newest 100 of 20,000
        responses of 7 KB: 200 ms, and "Out of Memory" under 64MB; chosen on their keys, 4 ms).
        """
        direction = "ASC" if order == "asc" else "DESC"
        key_row = "(" + ", ".join(keys) + ")"
        if anchor is not None:
            # A row-value comparison: lexicographic over the sort columns.
            where += f" AND {key_row} {'>' if order == 'asc' else '<'} (" + ", ".join("?" * len(keys)) + ")"
            params = [*params, *anchor]
        order_by = ", ".join(f"{key} {direction}" for key in keys)
        rows = self._fetch_values(
            f"SELECT {', '.join(keys)}, {value} FROM {table} WHERE rowid IN"
            f" (SELECT rowid FROM {table} WHERE {where} ORDER BY {order_by} LIMIT ?)",
            [*params, limit + 1],
        )
        rows.sort(key=lambda row: row[:-1], reverse=order == "desc")
        return Page(data=[row[-1] for row in rows[:limit]], has_more=len(rows) > limit)

    def _item_page(
        self, table: str, where: str, params: list[Any], key: str, after: str | None, limit: int, order: Order
    ) -> Page:
        anchor = None
        if after is not None:
            # With duplicate ids the cursor is the first one in iteration order.
            pick = "min" if order == "asc" else "max"
            anchor = one_row(self._fetchone(
                f"SELECT {pick}({key}) FROM {table} WHERE {where} AND item_id = ?", [*params, after]
            ))
            if anchor[0] is None:
                return Page(data=[], has_more=False)
        return self._paged(table, where, params, (key,), anchor, limit, order, "item, item_parts")

    def journal_lsn(self, journal: str = "") -> int:
        """The highest log sequence number of the journal named ``journal`` that this store holds (0: none)."""
        row = self._fetchone("SELECT applied_lsn FROM journal_positions WHERE journal = ?", [journal])
        return 0 if row is None else row[0]

    def forget_journal(self, journal: str) -> None:
        """Drop the position of a writer journal that is gone (replayed and deleted)."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM journal_positions WHERE journal = ?", [journal])

    def memory(self) -> dict[str, Any]:
        """DuckDB's memory here: ``limit`` (its ``memory_limit`` setting as DuckDB shows it, e.g.
        ``"122.0 MiB"`` for ``"128MB"``), ``used_bytes`` (what its allocations hold now, the buffer
        pool included) and ``temporary_bytes`` (what it spilled to the temp directory)."""
        with self._locked() as conn:
            limit = one_row(conn.execute("SELECT current_setting('memory_limit')").fetchone())[0]
            used, spilled = one_row(conn.execute(
                "SELECT coalesce(sum(memory_usage_bytes), 0), coalesce(sum(temporary_storage_bytes), 0)"
                " FROM duckdb_memory()"
            ).fetchone())
        return {"limit": limit, "used_bytes": int(used), "temporary_bytes": int(spilled)}

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> tuple[list[str], list[tuple]]:
        """Run one read-only statement, to its last row and without a timeout (for analytics and tests).

        Allowed: what :meth:`run_sql` allows (:func:`troupe.storage.sql.run_read_only`).

        Args:
            sql: the statement (a trailing ``;`` is fine, a second statement is not).
            params: ``?``/``$1`` parameters, or a dict for ``$name`` ones.

        Returns:
            ``(column names, rows)``; JSON values come back as JSON text.

        Raises:
            QueryError: not exactly one read-only statement, or DuckDB rejected it.
            StorageError: the store is closed.
        """
        with self._locked() as conn:
            result = run_read_only(conn, sql, params)
        return result.columns, result.rows

    def close(self) -> None:
        """Close the connection (idempotent); later calls raise StorageError."""
        with self._lock:
            if self._conn is not None:
                self._appenders.clear()
                self._conn.close()
                self._conn = None
