"""The webhooks area in DuckDB (:class:`~troupe.storage.contract.Webhooks`), and the outbox the
responses' and evaluation runs' writes add to (:meth:`WebhookTables._add_deliveries`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import duckdb

from troupe.protocol.webhooks import delivery_id, event_body, event_id

from .. import schema
from ..base import Order, Page
from ..contract import Webhooks
from .connection import Connection, check_page_args, one_row

__all__ = ["WebhookEvent", "WebhookTables"]

_NO_PARTS = "CAST(NULL AS BIGINT)"  # the records are small: never in value_parts
_DELIVERY_FIELDS = ("id", "endpoint_id", "event_id", "event_type", "created_at", "status", "attempts",
                    "next_attempt_at", "last_attempt_at", "last_status_code", "last_error", "delivered_at")  # fmt: skip
# A delivery as JSON (without its event body), for pages of the delivery log.
_DELIVERY_JSON = "json_object(" + ", ".join(f"'{f}', {f}" for f in _DELIVERY_FIELDS) + f")::VARCHAR, {_NO_PARTS}"

WebhookEvent = tuple[str, str, str, str, float]
"""An event to deliver: ``(tenant, event type, cause, object id, created_at)``; ``cause`` makes its
id (:func:`~troupe.protocol.webhooks.event_id`: the object's id, and for an evaluation run its end)."""


class WebhookTables(Connection, Webhooks):
    """Webhook endpoints and deliveries in DuckDB: an endpoint's record as one JSON value, its
    sealed secrets beside it (never plain); a delivery as a row of columns (it changes)."""

    def create_webhook_endpoint(self, tenant: str, endpoint: dict[str, Any], secrets: str) -> dict[str, Any]:
        """See :meth:`Webhooks.create_webhook_endpoint`."""
        text = schema.dump_json(endpoint)
        with self._transaction() as conn:
            conn.execute("INSERT INTO webhook_endpoints (tenant, id, created_at, event_types, endpoint, secrets) "
                         "VALUES (?, ?, ?, ?, ?, ?)",
                         [tenant, endpoint["id"], endpoint["created_at"], endpoint["event_types"], text, secrets])  # fmt: skip
        self._read_webhook_subscribers(tenant)
        return json.loads(text)

    def get_webhook_endpoint(self, tenant: str, endpoint_id: str) -> tuple[dict[str, Any], str] | None:
        """See :meth:`Webhooks.get_webhook_endpoint`."""
        row = self._fetchone("SELECT endpoint, secrets FROM webhook_endpoints WHERE tenant = ? AND id = ?",
                             [tenant, endpoint_id])  # fmt: skip
        return (json.loads(row[0]), row[1]) if row else None

    def list_webhook_endpoints(
        self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """See :meth:`Webhooks.list_webhook_endpoints`."""
        return self._webhook_page("webhook_endpoints", "tenant = ?", [tenant], after, limit, order,
                                  f"endpoint, {_NO_PARTS}")  # fmt: skip

    def update_webhook_endpoint(
        self, tenant: str, endpoint_id: str, changes: dict[str, Any], secrets: str | None = None
    ) -> dict[str, Any] | None:
        """See :meth:`Webhooks.update_webhook_endpoint`."""
        key = [tenant, endpoint_id]
        with self._transaction() as conn:
            rows = conn.execute("SELECT endpoint FROM webhook_endpoints WHERE tenant = ? AND id = ?", key).fetchall()
            if not rows:
                return None
            updated = {**json.loads(rows[0][0]), **changes}
            text = schema.dump_json(updated)
            conn.execute("UPDATE webhook_endpoints SET event_types = ?, endpoint = ?, secrets = coalesce(?, secrets) "
                         "WHERE tenant = ? AND id = ?", [updated["event_types"], text, secrets, *key])  # fmt: skip
        self._read_webhook_subscribers(tenant)
        return json.loads(text)

    def delete_webhook_endpoint(self, tenant: str, endpoint_id: str) -> bool:
        """See :meth:`Webhooks.delete_webhook_endpoint`."""
        key = [tenant, endpoint_id]
        with self._transaction() as conn:
            conn.execute("DELETE FROM webhook_deliveries WHERE tenant = ? AND endpoint_id = ?", key)
            gone = conn.execute(
                "DELETE FROM webhook_endpoints WHERE tenant = ? AND id = ? RETURNING id", key
            ).fetchall()
        self._read_webhook_subscribers(tenant)
        return bool(gone)

    def due_webhook_deliveries(self, now: float, limit: int = 32) -> tuple[list[dict[str, Any]], float | None]:
        """See :meth:`Webhooks.due_webhook_deliveries`."""
        with self._locked() as conn:
            rows = conn.execute(
                "SELECT d.tenant, d.id, d.endpoint_id, d.event_id, d.event_type, d.event, d.created_at, d.attempts, "
                "e.endpoint->>'url', e.secrets FROM webhook_deliveries d JOIN webhook_endpoints e "
                "ON e.tenant = d.tenant AND e.id = d.endpoint_id "
                "WHERE d.status = 'pending' AND d.next_attempt_at <= ? ORDER BY d.next_attempt_at, d.id LIMIT ?",
                [now, limit],
            ).fetchall()  # fmt: skip
            (later,) = one_row(conn.execute("SELECT min(next_attempt_at) FROM webhook_deliveries "
                                            "WHERE status = 'pending' AND next_attempt_at > ?", [now]).fetchone())  # fmt: skip
        fields = ("tenant", "id", "endpoint_id", "event_id", "event_type", "event", "created_at", "attempts", "url",
                  "secrets")  # fmt: skip
        due = [dict(zip(fields, row, strict=True)) for row in rows]
        if len(due) == limit:  # more may be due now
            later = now
        return due, later

    def record_webhook_attempt(self, tenant: str, delivery_id: str, attempt: dict[str, Any]) -> None:
        """See :meth:`Webhooks.record_webhook_attempt`."""
        columns = ("status", "attempts", "next_attempt_at", "last_attempt_at", "last_status_code", "last_error",
                   "delivered_at")  # fmt: skip
        with self._transaction() as conn:
            conn.execute(f"UPDATE webhook_deliveries SET {', '.join(f'{c} = ?' for c in columns)} "
                         "WHERE tenant = ? AND id = ?", [*(attempt.get(c) for c in columns), tenant, delivery_id])  # fmt: skip

    def list_webhook_deliveries(
        self, tenant: str, endpoint_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None:
        """See :meth:`Webhooks.list_webhook_deliveries`."""
        if self._fetchone("SELECT 1 FROM webhook_endpoints WHERE tenant = ? AND id = ?", [tenant, endpoint_id]) is None:
            return None
        return self._webhook_page("webhook_deliveries", "tenant = ? AND endpoint_id = ?", [tenant, endpoint_id],
                                  after, limit, order, _DELIVERY_JSON)  # fmt: skip

    def prune_webhook_deliveries(self, ended_before: float) -> int:
        """See :meth:`Webhooks.prune_webhook_deliveries`."""
        with self._transaction() as conn:
            gone = conn.execute("DELETE FROM webhook_deliveries WHERE status != 'pending' AND "
                                "coalesce(delivered_at, last_attempt_at, created_at) < ? RETURNING id",
                                [ended_before]).fetchall()  # fmt: skip
        return len(gone)

    def count_pending_webhook_deliveries(self) -> int:
        """See :meth:`Webhooks.count_pending_webhook_deliveries`."""
        return one_row(self._fetchone("SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'"))[0]

    def _add_deliveries(
        self, conn: duckdb.DuckDBPyConnection, events: Sequence[WebhookEvent], on_commit: list[Callable[[], None]]
    ) -> None:
        """The outbox: a pending delivery of each of ``events`` to each endpoint of its tenant
        subscribed to its type, inside the caller's transaction. A delivery already there (an
        event written again) is left as it is."""
        rows: list[tuple[Any, ...]] = []
        for tenant, event_type, cause, object_id, created_at in events:
            subscribed = [e for e, types in self._webhook_subscribers.get(tenant, ()) if event_type in types]
            if not subscribed:
                continue
            event = event_id(tenant, event_type, cause)
            body = event_body(event, event_type, created_at, object_id)
            rows.extend((tenant, delivery_id(endpoint, event), endpoint, event, event_type, body, created_at, "pending",
                         0, created_at) for endpoint in subscribed)  # fmt: skip
        if not rows:
            return
        conn.executemany("INSERT OR IGNORE INTO webhook_deliveries (tenant, id, endpoint_id, event_id, event_type, "
                         "event, created_at, status, attempts, next_attempt_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         rows)  # fmt: skip
        if self.on_webhook_events is not None:
            on_commit.append(self.on_webhook_events)

    def _webhook_page(
        self, table: str, where: str, params: list[Any], after: str | None, limit: int, order: Order, value: str
    ) -> Page:
        check_page_args(limit, order)
        anchor = None
        if after is not None:
            anchor = self._fetchone(f"SELECT created_at, id FROM {table} WHERE {where} AND id = ?", [*params, after])
            if anchor is None:
                return Page(data=[], has_more=False)
        return self._paged(table, where, params, ("created_at", "id"), anchor, limit, order, value)
