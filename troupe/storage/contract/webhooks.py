"""The webhooks area of the store contract: endpoints, and the outbox of their deliveries.

An endpoint is stored as ``{"id", "created_at", "updated_at", "name", "url", "event_types",
"signing_secret_hint"}`` (:mod:`troupe.protocol.webhooks`), and, apart, ``secrets``: its signing
secrets sealed with the configured ``credentials_keys`` (``fernet:…``,
:mod:`troupe.storage.credentials`). Nothing here ever holds a secret in plain text.

**The outbox.** A delivery is a row of ``webhook_deliveries``, one per event and endpoint
subscribed to its type, written by the store itself in the transaction that stores what caused
the event: :meth:`~troupe.storage.contract.Responses.write_responses` for a background response
that ends (``response.completed`` …), :meth:`~troupe.storage.contract.Evaluation.put_eval_run`
for an evaluation run that ends (``eval.run.succeeded`` …). Either both are stored or neither.
A delivery is::

    {"id": "wh_…" (its webhook-id), "endpoint_id", "event_id", "event_type", "event" (the JSON body),
     "created_at", "status": "pending" | "delivered" | "failed", "attempts", "next_attempt_at",
     "last_attempt_at", "last_status_code", "last_error", "delivered_at"}

Implemented by :class:`troupe.storage.duckdb_store.webhooks.WebhookTables`.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..base import Order, Page

__all__ = ["Webhooks"]


class Webhooks(Protocol):
    """Webhook endpoints (per tenant) and their deliveries."""

    def create_webhook_endpoint(self, tenant: str, endpoint: dict[str, Any], secrets: str) -> dict[str, Any]:
        """Store a new endpoint (its whole record) with its sealed ``secrets``; that record.

        Raises:
            StorageError: the id is taken (for this tenant).
        """
        ...

    def get_webhook_endpoint(self, tenant: str, endpoint_id: str) -> tuple[dict[str, Any], str] | None:
        """An endpoint's record and its sealed secrets; None if the tenant has no such endpoint."""
        ...

    def list_webhook_endpoints(
        self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """The tenant's endpoints' records by creation time (an unknown ``after``: an empty page)."""
        ...

    def update_webhook_endpoint(
        self, tenant: str, endpoint_id: str, changes: dict[str, Any], secrets: str | None = None
    ) -> dict[str, Any] | None:
        """Merge ``changes`` into the record (and replace the sealed secrets, if given); the
        record, or None if there is no such endpoint. Pending deliveries go to its new URL."""
        ...

    def delete_webhook_endpoint(self, tenant: str, endpoint_id: str) -> bool:
        """Delete an endpoint and its deliveries (pending ones are not sent); False if unknown."""
        ...

    def due_webhook_deliveries(self, now: float, limit: int = 32) -> tuple[list[dict[str, Any]], float | None]:
        """An operator's read, over every tenant: up to ``limit`` pending deliveries due at ``now``
        (oldest due first), each with ``tenant``, its endpoint's ``url`` and sealed ``secrets``;
        and when the earliest pending delivery that is not due yet will be (None: there is none)."""
        ...

    def record_webhook_attempt(self, tenant: str, delivery_id: str, attempt: dict[str, Any]) -> None:
        """Store an attempt's outcome: ``attempt`` holds ``status``, ``attempts``,
        ``last_attempt_at``, ``last_status_code``, ``last_error``, ``next_attempt_at`` and
        ``delivered_at``. A delivery deleted meanwhile (its endpoint was) is left deleted."""
        ...

    def list_webhook_deliveries(
        self, tenant: str, endpoint_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None:
        """An endpoint's deliveries (without their ``event`` body), newest first by default;
        None if the tenant has no such endpoint."""
        ...

    def prune_webhook_deliveries(self, ended_before: float) -> int:
        """Delete deliveries delivered or failed before ``ended_before`` (Unix seconds); how many."""
        ...

    def count_pending_webhook_deliveries(self) -> int:
        """How many deliveries are pending, over every tenant."""
        ...
