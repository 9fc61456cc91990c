"""The DuckDB :class:`~troupe.storage.base.Store`: one file (or ``:memory:``), one connection.

DuckDB allows one writing process per file, so the runtime owns the store from a
single thread (see :class:`~troupe.storage.group_commit.GroupCommitWriter`); the
lock here only makes misuse from several threads safe, not fast.

Writes of a batch of responses are one transaction with one append per table,
through DuckDB appenders kept for the life of the connection: an appender
flush costs about what a one-row ``INSERT`` does, whatever the number of rows,
where a multi-row ``INSERT … VALUES`` grows with its bound parameters (and
``executemany`` runs one statement per row). The write order counter
(``responses.seq``) and the next append position of recently used
conversations live in memory, read from the database when the store opens or
first needs them: the store must be the only writer of its file (DuckDB allows
one writing process; in the runtime the storage actor owns the file). They move
only once a transaction has committed, and a failed transaction leaves no row in
an appender, so a batch that fails (and is retried in parts by the group commit
writer) leaves no trace.

Opening a file stores what its response journal (``<path>.journal/``, see
:mod:`troupe.storage.journal`) holds beyond the position the file records: the responses
that were durable when a crash stopped the writer, before they reached DuckDB. So every
reader of the file (``troupe sql``, ``troupe eval``) sees every acknowledged response.

Memory, measured with DuckDB 2.0:

* DuckDB keeps the blocks it writes and reads in its buffer pool up to ``memory_limit``
  (by default 80% of the machine's memory): at a constant load the process grew with the
  file (about half of what the file grew) and never levelled off. The store takes a
  ``memory_limit`` (the runtime's ``storage_memory_limit``, 128MB by default), and the
  cache stays within it.
* A checkpoint rewrites a table's newest row group and holds its values in memory while it
  does. With DuckDB's default of 122,880 rows per group and long values inline, that grew
  without bound: after 120 responses with 15 MB of input, storing one more made the process
  peak at 3.7 GB; under a ``memory_limit`` the checkpoint failed instead, with a FATAL error
  that invalidates the database until it is reopened (96MB: at the 9th 12 MB value). So a
  JSON value longer than :data:`~troupe.storage.schema.LONG_VALUE_CHARS` is stored in
  ``value_parts`` rows (schema version 5); reads join the parts back
  (:meth:`DuckDBStore._fetch_values`); in SQL, ``troupe_json(item, item_parts)`` does. With
  values in parts, 40 values of 12 MB under a 96MB limit, and 10 of 60 MB under 128MB, store
  with row groups of 2,048, 16,384 or 122,880 rows alike.
* A read holds a bounded number of bytes in DuckDB, whatever the size of the values and of
  the page. A ``string_agg`` of a page's parts needed the whole page: ten responses of 20 MB
  made a page of 100 fail under 128MB ("Out of Memory Error"). Parts are read at most
  :data:`_PARTS_PER_READ` at a time and joined here (:meth:`DuckDBStore._join_parts`); a page
  is chosen and ordered on its key columns alone, then only its rows' values are read
  (:meth:`DuckDBStore._paged`); and DuckDB never sorts rows that carry values (it sorts in
  memory: 150 MB of 8 KB values failed under 128MB), the store does. What a read returns is
  still whole in this process's memory: a page of 100 responses of 20 MB is 2 GB of Python
  objects on its way to the client.
* DuckDB keeps memory it does not count in ``duckdb_memory()``, growing with the rows
  written, the more so the more row groups there are (``benchmarks/storage_drift.py``: from
  50,000 to 300,000 responses, +13 MiB per 100,000 with 2,048-row groups, +7 with 16,384,
  +5 with 32,768, +6 with 122,880). The file is attached with row groups of
  :data:`ROW_GROUP_ROWS` rows.
* DuckDB allocates through its own allocator (jemalloc), which by default keeps freed
  pages until later DuckDB work happens to purge them (8 requests with 10 MB of input left
  the process 540 MB larger for good). The store turns on the allocator's background
  threads, which give freed pages back to the OS within about a second.

Read-only SQL (:meth:`DuckDBStore.run_sql`, :meth:`DuckDBStore.query`) runs on the store's
one connection through :func:`troupe.storage.sql.run_read_only`: exactly one read-only
statement, inside a transaction that is always rolled back, interrupted past its timeout.
Opening a file another process holds raises :class:`~troupe.storage.base.StoreLocked`,
naming that process (``troupe sql`` then asks the server that holds it). A second
``read_only`` connection is not an option: DuckDB refuses to open a file twice in one
process with a different configuration, and ``:memory:`` databases cannot be shared that
way at all.

One long module because one class implements the whole Store contract over one connection and one lock; split, the transaction and lock discipline would be spread over files.
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

from troupe.protocol.prompts import prompt_object

from . import event_log, journal, schema
from .base import (
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    EvalResultRecord,
    EvalRunRecord,
    Order,
    Page,
    PromptConflict,
    QueryResult,
    ResponseFilter,
    ResponseList,
    ResponseRecord,
    ResponseStats,
    ResponseSummary,
    RunRecord,
    RunStep,
    StepTrace,
    StorageError,
    Store,
    StoreLocked,
    Turn,
)
from .rewrite import rewrite
from .sql import run_read_only

__all__ = ["DuckDBStore"]

log = logging.getLogger(__name__)

# Rows per multi-row INSERT; bounds the statement size (and parse time) for big batches.
_CHUNK_ROWS = 256

# Rows per row group (DuckDB's default is 122,880; module docstring, Memory).
ROW_GROUP_ROWS = 16_384

# How many conversations' next append positions are kept (the least recently used go first).
_CONVERSATION_SEQ_CACHE = 4096

# The process holding a file's lock, as DuckDB names it: "Conflicting lock is held in /usr/bin/python3 (PID 4242)".
_LOCK_HOLDER = re.compile(r"\(PID (\d+)\)")

# One link of a previous_response_id chain (see DuckDBStore.chain_items).
_PREVIOUS = "SELECT previous_response_id FROM responses WHERE tenant = ? AND id = ?"

# The most value_parts rows one read asks DuckDB for (module docstring, Memory): 4 Mi
# characters, at most 16 MB of UTF-8, whatever the number and the size of the values read.
_PARTS_PER_READ = 512

# Parts of long values (see DuckDBStore._join_parts), the first ``?`` of each of several, or a
# range of one. Ids grow in write order, so DuckDB skips the row groups whose min/max rule them
# out (EXPLAIN ANALYZE: 1 of 977).
_FIRST_PARTS = "SELECT id, part, text FROM value_parts WHERE id = ANY(?) AND part < ?"
_MORE_PARTS = "SELECT part, text FROM value_parts WHERE id = ? AND part >= ? AND part < ?"

# A ResponseSummary's fields, which are columns of responses of the same names.
_SUMMARY_FIELDS = tuple(ResponseSummary.__dataclass_fields__)
_SUMMARY_COLUMNS = ", ".join(_SUMMARY_FIELDS)


def _check_page_args(limit: int, order: str) -> None:
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if order not in ("asc", "desc"):
        raise ValueError(f"order must be 'asc' or 'desc', got {order!r}")


class DuckDBStore(Store):
    """Responses, conversations and traces in DuckDB. See :class:`~troupe.storage.base.Store`.

    Args:
        path: the database file (created if missing); None or ``":memory:"`` for
            a private in-memory database.
        memory_limit: DuckDB's ``memory_limit`` (``"128MB"``); None keeps DuckDB's default
            (module docstring, Memory).

    Raises:
        StoreLocked: another process has the file open (a running server's storage actor).
        StorageError: the file cannot be opened, is not a DuckDB database, was
            written by a newer Troupe (a newer schema version), or a migration failed.
    """

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
            self._release_freed_memory()
            self._migrate()
            # The next responses.seq: read once, then counted here (under the lock).
            self._next_response_seq: int = self._fetchone("SELECT coalesce(max(seq) + 1, 0) FROM responses")[0]
            # The next value_parts id (ids a rolled-back transaction took are never used: harmless).
            self._next_parts_id: int = self._fetchone("SELECT coalesce(max(id) + 1, 0) FROM value_parts")[0]
            # Rows of runs: a batch of responses looks for its runs only while there are some.
            self._open_runs: int = self._fetchone("SELECT count(*) FROM runs")[0]
            if self.path != ":memory:":
                # Responses made durable in the journal but not yet stored here (a crash).
                journal.replay_all(self, journal.journal_dir(self.path))
        except BaseException:
            self._conn.close()
            raise

    # -- plumbing ------------------------------------------------------------------

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

    def _release_freed_memory(self) -> None:
        """Turn on the allocator's background threads: freed memory goes back to the OS (module docstring).

        A SET rather than a ``connect`` option: DuckDB refuses to open a file that is already
        open in this process with other options. Where the allocator has no such threads
        (a build without jemalloc) the setting does nothing; if DuckDB refuses it, the store
        works as before.
        """
        try:
            self._conn.execute("SET allocator_background_threads = true")
        except duckdb.Error:
            pass

    def _stored_version(self) -> int:
        """The schema version of the file as opened (0: a new file)."""
        with self._locked() as conn:
            (tables,) = conn.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_catalog = current_database()"
                " AND table_name = ?", [schema.VERSION_TABLE],
            ).fetchone()  # fmt: skip
            if not tables:
                return 0
            return conn.execute(f"SELECT coalesce(max(version), 0) FROM {schema.VERSION_TABLE}").fetchone()[0]

    def _migrate(self) -> None:
        with self._transaction() as conn:
            conn.execute(schema.CREATE_VERSION_TABLE)
            current = conn.execute(f"SELECT coalesce(max(version), 0) FROM {schema.VERSION_TABLE}").fetchone()[0]
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
        return self._fetchone(f"SELECT max(version) FROM {schema.VERSION_TABLE}")[0]

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
        """Like :meth:`_locked`, inside BEGIN … COMMIT; any error rolls back and becomes a StorageError.

        ``on_commit``: callbacks the body appends to, run (still under the lock) once COMMIT
        succeeded, and only then: what moves the in-memory counters.
        """
        with self._locked() as conn:
            conn.execute("BEGIN TRANSACTION")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                try:
                    conn.execute("ROLLBACK")
                except duckdb.Error:
                    pass  # a failed COMMIT has already ended the transaction
                self._clear_appenders()
                if isinstance(exc, Exception) and not isinstance(exc, StorageError | duckdb.Error):
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

    # -- responses ---------------------------------------------------------------

    def write_responses(
        self, records: Sequence[ResponseRecord], *, journal_lsn: int | None = None, journal: str = ""
    ) -> None:
        """See :meth:`Store.write_responses`. One transaction for the whole batch.

        ``journal_lsn``: the records come from the response journal named ``journal``
        (:mod:`troupe.storage.journal`; ``""`` is the storage actor's own), the last of them
        with this log sequence number; stored as :meth:`journal_lsn` in the same transaction.
        """
        if not records:
            return
        on_commit: list[Callable[[], None]] = []
        with self._transaction(on_commit) as conn:
            seq = self._next_response_seq
            responses, items, traces, appended, parts, logs = [], [], [], [], [], []
            next_seq: dict[tuple[str, str], int | None] = {}
            for offset, record in enumerate(records):
                rid = record.response.get("id")
                row = schema.response_row(record, seq + offset)
                responses.append((*row[:-2], *self._stored(row[-2], parts)))
                # Each item is encoded once, for response_items and the conversation alike.
                encoded = {
                    role: [(item.get("id"), schema.dump_json(item)) for item in role_items]
                    for role, role_items in (
                        ("input", record.input_items),
                        ("output", record.response.get("output") or []),
                    )
                }
                for role, role_items in encoded.items():
                    items.extend(
                        (record.tenant, rid, role, pos, iid, *self._stored(text, parts))
                        for pos, (iid, text) in enumerate(role_items)
                    )
                traces.extend(schema.trace_row(record.tenant, t) for t in record.traces)
                if record.events is not None:
                    events = self._stored(schema.dump_json(record.events), parts)
                    logs.append((record.tenant, rid, *events, record.ended_at))
                conversation_id = schema.nested(record.response, "conversation", "id")
                if record.append_to_conversation and conversation_id is not None:
                    key = (record.tenant, conversation_id)
                    if key not in next_seq:
                        next_seq[key] = self._next_conversation_seq(conn, key)
                    start = next_seq[key]
                    if start is None:
                        continue  # deleted while the response ran: the response is still stored
                    added = [*encoded["input"], *encoded["output"]]
                    # A copy of its own: deleting the response leaves the conversation whole.
                    appended.extend(
                        (*key, start + i, iid, *self._stored(text, parts)) for i, (iid, text) in enumerate(added)
                    )
                    next_seq[key] = start + len(added)
            self._append(conn, "responses", schema.RESPONSE_COLUMNS, responses)
            self._append(conn, "response_items", schema.ITEM_COLUMNS, items)
            self._append(conn, "step_traces", schema.TRACE_COLUMNS, traces)
            self._append(conn, "conversation_items", schema.CONVERSATION_ITEM_COLUMNS, appended)
            self._append(conn, "response_events", schema.EVENT_LOG_COLUMNS, logs)
            ended = self._end_runs(conn, records)
            self._append(conn, "value_parts", schema.PART_COLUMNS, parts)
            if journal_lsn is not None:
                conn.execute(
                    "INSERT INTO journal_positions VALUES (?, ?) ON CONFLICT (journal) "
                    "DO UPDATE SET applied_lsn = greatest(applied_lsn, excluded.applied_lsn)",
                    [journal, journal_lsn],
                )
            on_commit.append(lambda: self._advance(seq + len(records), next_seq, ended))

    def journal_lsn(self, journal: str = "") -> int:
        """The highest log sequence number of the journal named ``journal`` that this store holds (0: none)."""
        row = self._fetchone("SELECT applied_lsn FROM journal_positions WHERE journal = ?", [journal])
        return 0 if row is None else row[0]

    def forget_journal(self, journal: str) -> None:
        """Drop the position of a writer journal that is gone (replayed and deleted)."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM journal_positions WHERE journal = ?", [journal])

    def _advance(
        self, next_response_seq: int, conversation_seqs: dict[tuple[str, str], int | None], runs_ended: int
    ) -> None:
        """Move the counters past a committed batch of responses (under the lock)."""
        self._next_response_seq = next_response_seq
        self._open_runs -= runs_ended
        for key, start in conversation_seqs.items():
            if start is not None:
                self._remember_conversation_seq(key, start)

    def get_response(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        """See :meth:`Store.get_response`."""
        sql = "SELECT response, response_parts FROM responses WHERE tenant = ? AND id = ?"
        rows = self._fetch_values(sql, [tenant, response_id])
        return rows[0][0] if rows else None

    def get_thread_id(self, tenant: str, response_id: str) -> str | None:
        """See :meth:`Store.get_thread_id`."""
        row = self._fetchone("SELECT thread_id FROM responses WHERE tenant = ? AND id = ?", [tenant, response_id])
        return None if row is None else row[0]

    def delete_response(self, tenant: str, response_id: str) -> bool:
        """See :meth:`Store.delete_response`."""
        with self._transaction() as conn:
            found = conn.execute(
                "DELETE FROM responses WHERE tenant = ? AND id = ? RETURNING response_parts", [tenant, response_id]
            ).fetchall()
            items = conn.execute(
                "DELETE FROM response_items WHERE tenant = ? AND response_id = ? RETURNING item_parts",
                [tenant, response_id],
            ).fetchall()
            conn.execute("DELETE FROM step_traces WHERE tenant = ? AND response_id = ?", [tenant, response_id])
            logs = conn.execute(
                "DELETE FROM response_events WHERE tenant = ? AND response_id = ? RETURNING events_parts",
                [tenant, response_id],
            ).fetchall()
            self._delete_parts(conn, [*found, *items, *logs])
        return bool(found)

    def list_responses(
        self, tenant: str, *, model: str | None = None, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """See :meth:`Store.list_responses`. An unknown ``after`` gives an empty page."""
        _check_page_args(limit, order)
        anchor = None
        if after is not None:
            # The cursor need not match the model filter: it only marks a position.
            row = self._fetchone("SELECT created_at, seq FROM responses WHERE tenant = ? AND id = ?", [tenant, after])
            if row is None:
                return Page(data=[], has_more=False)
            anchor = row
        where, params = "tenant = ?", [tenant]
        if model is not None:
            where, params = where + " AND model = ?", [*params, model]
        # seq breaks ties between equal created_at (whole seconds on the wire).
        keys = ("created_at", "seq")
        return self._paged("responses", where, params, keys, anchor, limit, order, "response, response_parts")

    def find_responses(self, where: ResponseFilter, *, after: str | None = None, limit: int = 50) -> ResponseList:
        """See :meth:`Store.find_responses`."""
        _check_page_args(limit, "desc")
        conditions, params = [], []
        for column, op, value in (
            ("tenant", "=", where.tenant), ("model", "=", where.model), ("status", "=", where.status),
            ("created_at", ">=", where.since), ("created_at", "<", where.until),
            ("thread_id", "=", where.thread_id), ("id", "=", where.id),
        ):  # fmt: skip
            if value is not None:
                conditions.append(f"{column} {op} ?")
                params.append(value)
        if after is not None:
            # The cursor's position among the filter's tenant(s); ids are unique in practice, so
            # across tenants the first found is the one.
            sql, cursor = "SELECT created_at, seq FROM responses WHERE id = ?", [after]
            if where.tenant is not None:
                sql, cursor = sql + " AND tenant = ?", [after, where.tenant]
            anchor = self._fetchone(sql + " LIMIT 1", cursor)
            if anchor is None:
                return ResponseList(data=[], has_more=False)
            conditions.append("(created_at, seq) < (?, ?)")
            params.extend(anchor)
        sql = f"SELECT {_SUMMARY_COLUMNS} FROM responses"
        if conditions:
            sql += " WHERE " + " AND ".join(conditions)
        rows = self._fetchall(sql + " ORDER BY created_at DESC, seq DESC LIMIT ?", [*params, limit + 1])
        data = [ResponseSummary(**dict(zip(_SUMMARY_FIELDS, row, strict=True))) for row in rows[:limit]]
        return ResponseList(data=data, has_more=len(rows) > limit)

    def response_stats(self, tenant: str | None, since: float, until: float) -> ResponseStats:
        """See :meth:`Store.response_stats`. ``quantile_cont`` interpolates as :func:`~troupe.storage.base.quantile`."""
        where, params = "ended_at >= ? AND ended_at < ?", [since, until]
        if tenant is not None:
            where, params = where + " AND tenant = ?", [*params, tenant]
        with self._locked() as conn:
            total, ttft, e2e, threads = conn.execute(
                "SELECT count(*), quantile_cont(ttft_s, [0.5, 0.99]), quantile_cont(e2e_s, [0.5, 0.99]),"
                f" count(DISTINCT (tenant, thread_id)) FROM responses WHERE {where}",
                params,
            ).fetchone()
            by_status = conn.execute(
                f"SELECT coalesce(status, ''), count(*) FROM responses WHERE {where} GROUP BY ALL ORDER BY ALL", params
            ).fetchall()
        ttft, e2e = ttft or [None, None], e2e or [None, None]
        return ResponseStats(
            since=since, until=until, responses=total, by_status=dict(by_status), threads=threads,
            ttft_p50_s=ttft[0], ttft_p99_s=ttft[1], e2e_p50_s=e2e[0], e2e_p99_s=e2e[1],
        )  # fmt: skip

    def thread_turns(self, tenant: str, thread_id: str, *, limit: int = 100) -> list[Turn]:
        """See :meth:`Store.thread_turns`. Two reads: the thread's rows, then their items."""
        rows = self._fetchall(
            f"SELECT {_SUMMARY_COLUMNS} FROM responses WHERE tenant = ? AND thread_id = ?"
            " ORDER BY created_at, seq LIMIT ?",
            [tenant, thread_id, limit],
        )
        summaries = [ResponseSummary(**dict(zip(_SUMMARY_FIELDS, row, strict=True))) for row in rows]
        if not summaries:
            return []
        rows = self._fetch_values(  # sorted here, not by DuckDB (see _fetch_values)
            "SELECT response_id, role, position, item, item_parts FROM response_items"
            " WHERE tenant = ? AND response_id = ANY(?)",
            [tenant, [s.id for s in summaries]],
        )
        rows.sort(key=lambda row: row[:3])
        items: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for response_id, role, _, item in rows:
            items.setdefault((response_id, role), []).append(item)
        return [
            Turn(summary=s, input_items=items.get((s.id, "input"), []), output_items=items.get((s.id, "output"), []))
            for s in summaries
        ]

    def list_input_items(
        self, tenant: str, response_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None:
        """See :meth:`Store.list_input_items`. An unknown ``after`` gives an empty page."""
        _check_page_args(limit, order)
        if self._fetchone("SELECT 1 FROM responses WHERE tenant = ? AND id = ?", [tenant, response_id]) is None:
            return None
        where = "tenant = ? AND response_id = ? AND role = 'input'"
        return self._item_page("response_items", where, [tenant, response_id], "position", after, limit, order)

    def _item_page(
        self, table: str, where: str, params: list[Any], key: str, after: str | None, limit: int, order: Order
    ) -> Page:
        anchor = None
        if after is not None:
            # With duplicate ids the cursor is the first one in iteration order.
            pick = "min" if order == "asc" else "max"
            anchor = self._fetchone(
                f"SELECT {pick}({key}) FROM {table} WHERE {where} AND item_id = ?", [*params, after]
            )
            if anchor[0] is None:
                return Page(data=[], has_more=False)
        return self._paged(table, where, params, (key,), anchor, limit, order, "item, item_parts")

    def chain_items(self, tenant: str, response_id: str) -> list[dict[str, Any]] | None:
        """See :meth:`Store.chain_items`.

        The links are followed one lookup by id at a time. Response ids grow in time order, so
        DuckDB reads only the few row groups whose min/max admit the id (3 of 135 at 250,000
        responses): the cost grows with the chain, not with the history. A recursive query
        joined the whole table once per link instead (32 ms for two turns there, against 5).
        """
        order: list[str] = []
        seen: set[str] = set()
        with self._locked() as conn:
            current: str | None = response_id
            while current is not None and current not in seen:  # a (corrupt) cycle stops
                row = conn.execute(_PREVIOUS, [tenant, current]).fetchone()
                if row is None:
                    break  # unknown, or deleted mid-chain: the chain starts after it
                order.append(current)
                seen.add(current)
                current = row[0]
        if not order:
            return None
        rank = {rid: -i for i, rid in enumerate(order)}  # oldest first
        rows = self._fetch_values(
            "SELECT response_id, role, position, item, item_parts FROM response_items"
            f" WHERE tenant = ? AND response_id IN ({', '.join('?' * len(order))})",
            [tenant, *order],
        )
        rows.sort(key=lambda r: (rank[r[0]], r[1] != "input", r[2]))
        return [r[3] for r in rows]

    def _end_runs(self, conn: duckdb.DuckDBPyConnection, records: Sequence[ResponseRecord]) -> int:
        """Delete the runs of ``records`` (inside their transaction); how many there were."""
        if not self._open_runs:
            return 0
        keys = [[r.tenant, r.id] for r in records]
        ended = conn.execute(
            "DELETE FROM runs WHERE [tenant, response_id] IN (SELECT unnest(?)) RETURNING request_parts", [keys]
        ).fetchall()
        if ended:
            steps = conn.execute(
                "DELETE FROM run_steps WHERE [tenant, response_id] IN (SELECT unnest(?)) RETURNING step_parts", [keys]
            ).fetchall()
            self._delete_parts(conn, ended + steps)
        return len(ended)

    def write_run_progress(self, items: Sequence[RunRecord | RunStep]) -> None:
        """See :meth:`Store.write_run_progress`."""
        on_commit: list[Callable[[], None]] = []
        with self._transaction(on_commit) as conn:
            parts: list[tuple[int, int, str]] = []
            runs, steps = [], []
            for item in items:
                if isinstance(item, RunRecord):
                    request = self._stored(schema.dump_json(item.request), parts)
                    runs.append((item.tenant, item.response_id, item.thread_id, item.created_at, *request, item.attempt,
                                 item.credentials))  # fmt: skip
                else:
                    steps.append((item.tenant, item.response_id, item.seq, *self._stored(schema.dump_json(item.data), parts)))
            self._append(conn, "runs", schema.RUN_COLUMNS, runs)
            self._append(conn, "run_steps", schema.RUN_STEP_COLUMNS, steps)
            self._append(conn, "value_parts", schema.PART_COLUMNS, parts)
            on_commit.append(lambda: self._count_runs(len(runs)))

    def _count_runs(self, started: int) -> None:
        self._open_runs += started

    def end_run(self, tenant: str, response_id: str) -> None:
        """See :meth:`Store.end_run`."""
        on_commit: list[Callable[[], None]] = []
        with self._transaction(on_commit) as conn:
            ended = conn.execute(
                "DELETE FROM runs WHERE tenant = ? AND response_id = ? RETURNING request_parts", [tenant, response_id]
            ).fetchall()
            steps = conn.execute(
                "DELETE FROM run_steps WHERE tenant = ? AND response_id = ? RETURNING step_parts", [tenant, response_id]
            ).fetchall()
            self._delete_parts(conn, ended + steps)
            on_commit.append(lambda: self._advance(self._next_response_seq, {}, len(ended)))

    def get_run(self, tenant: str, response_id: str) -> RunRecord | None:
        """See :meth:`Store.get_run`."""
        found = [r for r in self._runs("WHERE tenant = ? AND response_id = ?", [tenant, response_id])]
        return found[0] if found else None

    def unfinished_runs(self) -> list[RunRecord]:
        """See :meth:`Store.unfinished_runs`."""
        return sorted(self._runs("", []), key=lambda run: run.created_at)  # not by DuckDB (see _fetch_values)

    def _runs(self, where: str, params: Sequence[Any]) -> list[RunRecord]:
        sql = (
            "SELECT tenant, response_id, thread_id, created_at, attempt, credentials, request, request_parts"
            f" FROM runs {where}"
        )
        fields = ("tenant", "response_id", "thread_id", "created_at", "attempt", "credentials", "request")
        return [RunRecord(**dict(zip(fields, row, strict=True))) for row in self._fetch_values(sql, params)]

    def claim_run(self, tenant: str, response_id: str, attempt: int) -> RunRecord | None:
        """See :meth:`Store.claim_run`."""
        with self._transaction() as conn:
            claimed = conn.execute(
                "UPDATE runs SET attempt = attempt + 1 WHERE tenant = ? AND response_id = ? AND attempt = ?"
                " RETURNING response_id",
                [tenant, response_id, attempt],
            ).fetchall()
        return self.get_run(tenant, response_id) if claimed else None

    def run_steps(self, tenant: str, response_id: str) -> list[RunStep]:
        """See :meth:`Store.run_steps`."""
        sql = "SELECT seq, step, step_parts FROM run_steps WHERE tenant = ? AND response_id = ?"
        rows = sorted(self._fetch_values(sql, [tenant, response_id]), key=lambda row: row[0])  # see _fetch_values
        return [RunStep(tenant=tenant, response_id=response_id, seq=seq, data=data) for seq, data in rows]

    def prune_event_logs(self, ended_before: float) -> int:
        """See :meth:`Store.prune_event_logs`."""
        with self._transaction() as conn:
            dropped = conn.execute(
                "DELETE FROM response_events WHERE ended_at < ? RETURNING events_parts", [ended_before]
            ).fetchall()
            self._delete_parts(conn, dropped)
        return len(dropped)

    def response_events(self, tenant: str, response_id: str) -> list[dict[str, Any]] | None:
        """See :meth:`Store.response_events`."""
        sql = "SELECT events, events_parts FROM response_events WHERE tenant = ? AND response_id = ?"
        rows = self._fetch_values(sql, [tenant, response_id])
        response = self.get_response(tenant, response_id) if rows else None
        return event_log.unpack(rows[0][0], response) if rows and response is not None else None

    def step_traces(self, tenant: str, response_id: str) -> list[StepTrace]:
        """See :meth:`Store.step_traces`."""
        rows = self._fetchall(
            "SELECT response_id, seq, kind, name, call_id, started_at, duration_s, ttft_s, input_tokens, output_tokens,"
            " error FROM step_traces WHERE tenant = ? AND response_id = ? ORDER BY seq",
            [tenant, response_id],
        )
        fields = ("response_id", "seq", "kind", "name", "call_id", "started_at", "duration_s", "ttft_s")
        fields += ("input_tokens", "output_tokens", "error")
        return [StepTrace(**dict(zip(fields, row, strict=True))) for row in rows]

    # -- conversations -----------------------------------------------------------

    def create_conversation(self, tenant: str, conversation: dict[str, Any], items: Sequence[dict[str, Any]]) -> None:
        """See :meth:`Store.create_conversation`.

        Raises:
            StorageError: the id is taken (for this tenant) or a value is not JSON.
        """
        conversation_id = conversation.get("id")
        row = (
            tenant,
            conversation_id,
            conversation.get("created_at"),
            schema.dump_json(conversation.get("metadata") or {}),
        )
        encoded = [(item.get("id"), schema.dump_json(item)) for item in items]
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO conversations (tenant, id, created_at, metadata, conversation) VALUES (?, ?, ?, ?, ?)",
                [*row, schema.dump_json(conversation)],
            )
            self._append_conversation_items(conn, tenant, conversation_id, 0, encoded)

    def get_conversation(self, tenant: str, conversation_id: str) -> dict[str, Any] | None:
        """See :meth:`Store.get_conversation`."""
        sql = "SELECT conversation FROM conversations WHERE tenant = ? AND id = ?"
        row = self._fetchone(sql, [tenant, conversation_id])
        return None if row is None else json.loads(row[0])

    def update_conversation(self, tenant: str, conversation_id: str, metadata: dict[str, Any]) -> dict[str, Any] | None:
        """See :meth:`Store.update_conversation`."""
        with self._transaction() as conn:
            sql = "SELECT conversation FROM conversations WHERE tenant = ? AND id = ?"
            row = conn.execute(sql, [tenant, conversation_id]).fetchone()
            if row is None:
                return None
            conversation = {**json.loads(row[0]), "metadata": metadata}
            conn.execute(
                "UPDATE conversations SET metadata = ?, conversation = ? WHERE tenant = ? AND id = ?",
                [schema.dump_json(metadata), schema.dump_json(conversation), tenant, conversation_id],
            )
        return json.loads(schema.dump_json(conversation))  # a copy the caller's metadata dict does not alias

    def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        """See :meth:`Store.delete_conversation`."""
        with self._transaction() as conn:
            found = conn.execute(
                "DELETE FROM conversations WHERE tenant = ? AND id = ? RETURNING id", [tenant, conversation_id]
            ).fetchall()
            sql = "DELETE FROM conversation_items WHERE tenant = ? AND conversation_id = ? RETURNING item_parts"
            self._delete_parts(conn, conn.execute(sql, [tenant, conversation_id]).fetchall())
            self._conversation_seqs.pop((tenant, conversation_id), None)
        return bool(found)

    def add_conversation_items(self, tenant: str, conversation_id: str, items: Sequence[dict[str, Any]]) -> bool:
        """See :meth:`Store.add_conversation_items`."""
        encoded = [(item.get("id"), schema.dump_json(item)) for item in items]
        key = (tenant, conversation_id)
        on_commit: list[Callable[[], None]] = []
        with self._transaction(on_commit) as conn:
            start = self._next_conversation_seq(conn, key)
            if start is None:
                return False
            self._append_conversation_items(conn, tenant, conversation_id, start, encoded)
            on_commit.append(lambda: self._remember_conversation_seq(key, start + len(encoded)))
        return True

    def _append_conversation_items(
        self,
        conn: duckdb.DuckDBPyConnection,
        tenant: str,
        conversation_id: str,
        start: int,
        encoded: Sequence[tuple[str | None, str]],
    ) -> None:
        """Append ``(item id, JSON text)`` pairs at positions ``start, start + 1, …`` (inside a transaction)."""
        parts: list[tuple[int, int, str]] = []
        rows = [
            (tenant, conversation_id, start + i, item_id, *self._stored(text, parts))
            for i, (item_id, text) in enumerate(encoded)
        ]
        self._append(conn, "conversation_items", schema.CONVERSATION_ITEM_COLUMNS, rows)
        self._append(conn, "value_parts", schema.PART_COLUMNS, parts)

    def _conversation_exists(self, tenant: str, conversation_id: str) -> bool:
        sql = "SELECT 1 FROM conversations WHERE tenant = ? AND id = ?"
        return self._fetchone(sql, [tenant, conversation_id]) is not None

    def list_conversation_items(
        self, tenant: str, conversation_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None:
        """See :meth:`Store.list_conversation_items`. An unknown ``after`` gives an empty page."""
        _check_page_args(limit, order)
        if not self._conversation_exists(tenant, conversation_id):
            return None
        where = "tenant = ? AND conversation_id = ?"
        return self._item_page("conversation_items", where, [tenant, conversation_id], "seq", after, limit, order)

    def get_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> dict[str, Any] | None:
        """See :meth:`Store.get_conversation_item`. With duplicate ids, the earliest item."""
        # Items never outlive their conversation (delete_conversation removes them).
        rows = self._fetch_values(
            "SELECT item, item_parts FROM conversation_items WHERE tenant = ? AND conversation_id = ? AND item_id = ?"
            " ORDER BY seq LIMIT 1",
            [tenant, conversation_id, item_id],
        )
        return rows[0][0] if rows else None

    def delete_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> bool:
        """See :meth:`Store.delete_conversation_item`. With duplicate ids, removes them all."""
        with self._transaction() as conn:
            found = conn.execute(
                "DELETE FROM conversation_items WHERE tenant = ? AND conversation_id = ? AND item_id = ?"
                " RETURNING item_parts",
                [tenant, conversation_id, item_id],
            ).fetchall()
            self._delete_parts(conn, found)
        return bool(found)

    def conversation_items(self, tenant: str, conversation_id: str) -> list[dict[str, Any]] | None:
        """See :meth:`Store.conversation_items`."""
        if not self._conversation_exists(tenant, conversation_id):
            return None
        rows = self._fetch_values(
            "SELECT seq, item, item_parts FROM conversation_items WHERE tenant = ? AND conversation_id = ?",
            [tenant, conversation_id],
        )
        rows.sort(key=lambda row: row[0])  # here, not by DuckDB (see _fetch_values)
        return [item for _, item in rows]

    # -- prompts ---------------------------------------------------------------------

    # A version with its prompt's default: the prompt object's columns, the content and its parts last.
    _PROMPT_VERSION = (
        "SELECT v.prompt_id, v.version, v.created_at, v.version = p.default_version, v.content, v.content_parts"
        " FROM prompts p JOIN prompt_versions v ON v.tenant = p.tenant AND v.prompt_id = p.id"
    )

    def _prompt_objects(self, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        return [
            prompt_object(pid, version, created_at, content, is_default=is_default)
            for pid, version, created_at, is_default, content in self._fetch_values(sql, params)
        ]

    def _insert_prompt_version(
        self, conn: duckdb.DuckDBPyConnection, tenant: str, prompt_id: str, version: int, created_at: float,
        content: dict[str, Any],
    ) -> None:  # fmt: skip
        parts: list[tuple[int, int, str]] = []
        stored = self._stored(schema.dump_json(content), parts)
        conn.execute(
            "INSERT INTO prompt_versions (tenant, prompt_id, version, created_at, content, content_parts)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            [tenant, prompt_id, version, created_at, *stored],
        )
        self._insert(conn, "value_parts", schema.PART_COLUMNS, parts)

    def create_prompt(self, tenant: str, prompt_id: str, content: dict[str, Any], created_at: float) -> dict[str, Any]:
        """See :meth:`Store.create_prompt`."""
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO prompts (tenant, id, created_at, default_version, latest_version) VALUES (?, ?, ?, 1, 1)",
                [tenant, prompt_id, created_at],
            )
            self._insert_prompt_version(conn, tenant, prompt_id, 1, created_at, content)
        return prompt_object(prompt_id, 1, created_at, json.loads(schema.dump_json(content)), is_default=True)

    def get_prompt(self, tenant: str, prompt_id: str, version: int | None = None) -> dict[str, Any] | None:
        """See :meth:`Store.get_prompt`."""
        sql = f"{self._PROMPT_VERSION} WHERE p.tenant = ? AND p.id = ? AND v.version = coalesce(?, p.default_version)"
        found = self._prompt_objects(sql, [tenant, prompt_id, version])
        return found[0] if found else None

    def list_prompts(self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc") -> Page:
        """See :meth:`Store.list_prompts`."""
        _check_page_args(limit, order)
        sql = f"{self._PROMPT_VERSION} AND v.version = p.default_version WHERE p.tenant = ?"
        params: list[Any] = [tenant]
        if after is not None:
            anchor = self._fetchone("SELECT created_at FROM prompts WHERE tenant = ? AND id = ?", [tenant, after])
            if anchor is None:
                return Page(data=[], has_more=False)
            sql += f" AND (p.created_at, p.id) {'>' if order == 'asc' else '<'} (?, ?)"
            params += [anchor[0], after]
        direction = "ASC" if order == "asc" else "DESC"
        found = self._prompt_objects(f"{sql} ORDER BY p.created_at {direction}, p.id {direction} LIMIT ?",
                                     [*params, limit + 1])  # fmt: skip
        return Page(data=found[:limit], has_more=len(found) > limit)

    def update_prompt(
        self, tenant: str, prompt_id: str, content: dict[str, Any], *, from_version: int, set_default: bool,
        created_at: float,
    ) -> dict[str, Any] | None:  # fmt: skip
        """See :meth:`Store.update_prompt`."""
        with self._transaction() as conn:
            rows = conn.execute(
                "SELECT latest_version FROM prompts WHERE tenant = ? AND id = ?", [tenant, prompt_id]
            ).fetchall()
            if not rows:
                return None
            latest = rows[0][0]
            if from_version != latest:
                raise PromptConflict(f"version {from_version} of prompt {prompt_id!r} is not its latest ({latest})",
                                     latest)  # fmt: skip
            version = latest + 1
            self._insert_prompt_version(conn, tenant, prompt_id, version, created_at, content)
            conn.execute(
                "UPDATE prompts SET latest_version = ?, default_version = CASE WHEN ? THEN ? ELSE default_version END"
                " WHERE tenant = ? AND id = ?",
                [version, set_default, version, tenant, prompt_id],
            )
        return self.get_prompt(tenant, prompt_id, version)

    def set_default_prompt_version(self, tenant: str, prompt_id: str, version: int) -> dict[str, Any] | None:
        """See :meth:`Store.set_default_prompt_version`."""
        with self._transaction() as conn:
            found = conn.execute(
                "SELECT 1 FROM prompt_versions WHERE tenant = ? AND prompt_id = ? AND version = ?",
                [tenant, prompt_id, version],
            ).fetchall()
            if not found:
                return None
            conn.execute(
                "UPDATE prompts SET default_version = ? WHERE tenant = ? AND id = ?", [version, tenant, prompt_id]
            )
        return self.get_prompt(tenant, prompt_id, version)

    def delete_prompt(self, tenant: str, prompt_id: str) -> bool:
        """See :meth:`Store.delete_prompt`."""
        with self._transaction() as conn:
            found = conn.execute(
                "DELETE FROM prompts WHERE tenant = ? AND id = ? RETURNING id", [tenant, prompt_id]
            ).fetchall()
            sql = "DELETE FROM prompt_versions WHERE tenant = ? AND prompt_id = ? RETURNING content_parts"
            self._delete_parts(conn, conn.execute(sql, [tenant, prompt_id]).fetchall())
        return bool(found)

    def list_prompt_versions(self, tenant: str, prompt_id: str) -> list[dict[str, Any]] | None:
        """See :meth:`Store.list_prompt_versions`."""
        sql = f"{self._PROMPT_VERSION} WHERE p.tenant = ? AND p.id = ? ORDER BY v.version"
        found = self._prompt_objects(sql, [tenant, prompt_id])
        if not found and self._fetchone("SELECT 1 FROM prompts WHERE tenant = ? AND id = ?", [tenant, prompt_id]) is None:
            return None
        return found

    # -- evaluation runs -----------------------------------------------------------

    def put_eval_run(self, run: EvalRunRecord) -> None:
        """See :meth:`Store.put_eval_run`."""
        row = schema.eval_run_row(run)
        with self._transaction() as conn:
            self._insert(conn, "eval_runs", schema.EVAL_RUN_COLUMNS, [row], replace=True)

    def get_eval_run(self, run_id: str) -> EvalRunRecord | None:
        """See :meth:`Store.get_eval_run`."""
        row = self._fetchone(f"SELECT {schema.EVAL_RUN_COLUMNS} FROM eval_runs WHERE run_id = ?", [run_id])
        return None if row is None else schema.eval_run_from_row(row)

    def list_eval_runs(self) -> list[EvalRunRecord]:
        """See :meth:`Store.list_eval_runs`."""
        rows = self._fetchall(f"SELECT {schema.EVAL_RUN_COLUMNS} FROM eval_runs ORDER BY created_at DESC, run_id")
        return [schema.eval_run_from_row(row) for row in rows]

    def write_eval_results(self, results: Sequence[EvalResultRecord]) -> None:
        """See :meth:`Store.write_eval_results`. One transaction; ``INSERT OR REPLACE`` on the key."""
        if not results:
            return
        # DuckDB refuses to replace one key twice in one statement: the last result of a key wins.
        latest = {r.key: r for r in results}
        rows = [schema.eval_result_row(r) for r in latest.values()]
        with self._transaction() as conn:
            self._insert(conn, "eval_results", schema.EVAL_RESULT_COLUMNS, rows, replace=True)

    def eval_results(self, run_id: str) -> list[EvalResultRecord]:
        """See :meth:`Store.eval_results`."""
        rows = self._fetchall(
            f"SELECT {schema.EVAL_RESULT_COLUMNS} FROM eval_results WHERE run_id = ? ORDER BY case_id, sample",
            [run_id],
        )
        return [schema.eval_result_from_row(row) for row in rows]

    def export_eval_results(self, run_id: str, path: str | os.PathLike[str]) -> int:
        """Write a run's ``eval_results`` rows to a Parquet file (``(case_id, sample)`` order).

        Returns:
            How many rows were written (0 for an unknown run: the file then has no rows).

        Raises:
            StorageError: the file cannot be written.
        """
        with self._locked() as conn:
            count = conn.execute("SELECT count(*) FROM eval_results WHERE run_id = ?", [run_id]).fetchone()[0]
            # COPY takes no parameter for its target: quote the path as a string literal.
            target = "'" + os.fspath(path).replace("'", "''") + "'"
            conn.execute(
                f"COPY (SELECT {schema.EVAL_RESULT_COLUMNS} FROM eval_results WHERE run_id = ? "
                f"ORDER BY case_id, sample) TO {target} (FORMAT parquet)",
                [run_id],
            )
        return count

    # -- analytics -----------------------------------------------------------------

    def memory(self) -> dict[str, Any]:
        """DuckDB's memory here: ``limit`` (its ``memory_limit`` setting as DuckDB shows it, e.g.
        ``"122.0 MiB"`` for ``"128MB"``), ``used_bytes`` (what its allocations hold now, the buffer
        pool included) and ``temporary_bytes`` (what it spilled to the temp directory)."""
        with self._locked() as conn:
            limit = conn.execute("SELECT current_setting('memory_limit')").fetchone()[0]
            used, spilled = conn.execute(
                "SELECT coalesce(sum(memory_usage_bytes), 0), coalesce(sum(temporary_storage_bytes), 0)"
                " FROM duckdb_memory()"
            ).fetchone()
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

    def run_sql(
        self, sql: str, *, max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float | None = DEFAULT_TIMEOUT_S
    ) -> QueryResult:
        """See :meth:`Store.run_sql`. The query holds the store's lock (and its thread, in the
        runtime) while it runs, so ``timeout_s`` is also the longest it holds writes back."""
        with self._locked() as conn:
            return run_read_only(conn, sql, max_rows=max_rows, timeout_s=timeout_s)

    # -- lifecycle ---------------------------------------------------------------

    def close(self) -> None:
        """Close the connection (idempotent); later calls raise StorageError."""
        with self._lock:
            if self._conn is not None:
                self._appenders.clear()
                self._conn.close()
                self._conn = None
