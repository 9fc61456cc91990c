"""The console reads of the store contract: reads across the history for the operator's console
(:mod:`troupe.console`) and read-only SQL (``troupe sql``, ``POST /v1/troupe/sql``).

These may read every tenant at once (``tenant=None``; SQL always does): the console only asks
so for an admin key. Implemented by :class:`troupe.storage.duckdb_store.console.ConsoleReads`.
"""

from __future__ import annotations

from typing import Protocol

from ..base import DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT_S, QueryResult, ResponseFilter, ResponseList, ResponseStats, Turn

__all__ = ["Console"]


class Console(Protocol):
    """Summaries, statistics and threads of the stored responses; read-only SQL."""

    def find_responses(self, where: ResponseFilter, *, after: str | None = None, limit: int = 50) -> ResponseList:
        """Summaries of the stored responses ``where`` selects, newest ``created_at`` first.

        Args:
            where: the filter; ``where.tenant`` None reads every tenant (the console asks so
                only for an admin key).
            after: the id of the last summary of the previous page (exclusive); an id the
                filter's tenant(s) do not have gives an empty page.
            limit: 1 or more.

        Returns:
            The page, and whether more follow.
        """
        ...

    def response_stats(self, tenant: str | None, since: float, until: float) -> ResponseStats:
        """What the responses that ended in ``[since, until)`` (Unix seconds) add up to; of every
        tenant when ``tenant`` is None. Percentiles as :func:`~troupe.storage.base.quantile`."""
        ...

    def thread_turns(self, tenant: str, thread_id: str, *, limit: int = 100) -> list[Turn]:
        """The first ``limit`` stored responses of a thread (their ``thread_id``: a conversation
        id, or the id a ``previous_response_id`` chain shares), oldest first, each with its input
        and output items ([] for an unknown thread)."""
        ...

    def run_sql(
        self, sql: str, *, max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float | None = DEFAULT_TIMEOUT_S
    ) -> QueryResult:
        """Run one read-only SQL statement over everything stored (every tenant's).

        In the runtime it runs on the store's thread like every call: between two write
        batches, never beside one, and it holds later store calls back at most ``timeout_s``.

        Args:
            sql: one SELECT (also ``WITH …``, ``FROM …``, ``VALUES``), DESCRIBE, SHOW,
                SUMMARIZE, or EXPLAIN [ANALYZE] of one of those; a trailing ``;`` is fine.
            max_rows: the most rows returned; a query with more sets ``truncated``.
            timeout_s: the query is interrupted once it has run this long; None: never.

        Returns:
            The columns, their types and the rows.

        Raises:
            QueryTimeout: the query ran past ``timeout_s``.
            QueryError: not exactly one read-only statement, or the database rejected it.
            StorageError: the store failed (closed, I/O).
            ValueError: ``max_rows`` < 1 or ``timeout_s`` <= 0.
        """
        ...
