"""The console reads and read-only SQL in DuckDB (:class:`~troupe.storage.contract.Console`)."""

from __future__ import annotations

from typing import Any

from ..base import (
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    QueryResult,
    ResponseFilter,
    ResponseList,
    ResponseStats,
    ResponseSummary,
    Turn,
)
from ..contract import Console
from ..sql import run_read_only
from .connection import Connection, check_page_args, one_row

__all__ = ["ConsoleReads"]

# A ResponseSummary's fields, which are columns of responses of the same names.
_SUMMARY_FIELDS = tuple(ResponseSummary.__dataclass_fields__)
_SUMMARY_COLUMNS = ", ".join(_SUMMARY_FIELDS)


class ConsoleReads(Connection, Console):
    """The console reads and read-only SQL in DuckDB (:class:`~troupe.storage.contract.Console`)."""

    def find_responses(self, where: ResponseFilter, *, after: str | None = None, limit: int = 50) -> ResponseList:
        """See :meth:`Console.find_responses`."""
        check_page_args(limit, "desc")
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
            sql, cursor = "SELECT created_at, id FROM responses WHERE id = ?", [after]
            if where.tenant is not None:
                sql, cursor = sql + " AND tenant = ?", [after, where.tenant]
            anchor = self._fetchone(sql + " LIMIT 1", cursor)
            if anchor is None:
                return ResponseList(data=[], has_more=False)
            conditions.append("(created_at, id) < (?, ?)")
            params.extend(anchor)
        sql = f"SELECT {_SUMMARY_COLUMNS} FROM responses"
        if conditions:
            sql += " WHERE " + " AND ".join(conditions)
        # Creation order, as list_responses (ResponseTables) gives it.
        rows = self._fetchall(sql + " ORDER BY created_at DESC, id DESC LIMIT ?", [*params, limit + 1])
        data = [ResponseSummary(**dict(zip(_SUMMARY_FIELDS, row, strict=True))) for row in rows[:limit]]
        return ResponseList(data=data, has_more=len(rows) > limit)

    def response_stats(self, tenant: str | None, since: float, until: float) -> ResponseStats:
        """See :meth:`Console.response_stats`. ``quantile_cont`` interpolates as :func:`~troupe.storage.base.quantile`."""
        where = "ended_at >= ? AND ended_at < ?"
        params: list[Any] = [since, until]
        if tenant is not None:
            where, params = where + " AND tenant = ?", [*params, tenant]
        with self._locked() as conn:
            total, ttft, e2e, threads = one_row(conn.execute(
                "SELECT count(*), quantile_cont(ttft_s, [0.5, 0.99]), quantile_cont(e2e_s, [0.5, 0.99]),"
                f" count(DISTINCT (tenant, thread_id)) FROM responses WHERE {where}",
                params,
            ).fetchone())
            by_status = conn.execute(
                f"SELECT coalesce(status, ''), count(*) FROM responses WHERE {where} GROUP BY ALL ORDER BY ALL", params
            ).fetchall()
        ttft, e2e = ttft or [None, None], e2e or [None, None]
        return ResponseStats(
            since=since, until=until, responses=total, by_status=dict(by_status), threads=threads,
            ttft_p50_s=ttft[0], ttft_p99_s=ttft[1], e2e_p50_s=e2e[0], e2e_p99_s=e2e[1],
        )  # fmt: skip

    def thread_turns(self, tenant: str, thread_id: str, *, limit: int = 100) -> list[Turn]:
        """See :meth:`Console.thread_turns`. Two reads: the thread's rows, then their items."""
        rows = self._fetchall(
            f"SELECT {_SUMMARY_COLUMNS} FROM responses WHERE tenant = ? AND thread_id = ?"
            " ORDER BY created_at, id LIMIT ?",
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

    def run_sql(
        self, sql: str, *, max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float | None = DEFAULT_TIMEOUT_S
    ) -> QueryResult:
        """See :meth:`Console.run_sql`. The query holds the store's lock (and its thread, in the
        runtime) while it runs, so ``timeout_s`` is also the longest it holds writes back."""
        with self._locked() as conn:
            return run_read_only(conn, sql, max_rows=max_rows, timeout_s=timeout_s)
