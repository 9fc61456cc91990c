"""The automations area of the store contract (the Agents API's scheduled agents).

An automation is stored as its wire object (``troupe.protocol.automations.automation_object``)
with, beside it, its next due time (None: none, as when paused or completed) and what is kept of
its environment's confidential values (``troupe.storage.credentials.CredentialKeys.keep``: a
sealed token, ``in-memory``, or None); an invocation as its wire object
(``invocation_object``), one row per firing.

**Once per due time.** :meth:`Automations.claim_automation_due` takes a due time in one
transaction: the automation must be active with that next due time, and the invocation row's
``(automation_id, scheduled_at)`` is unique in the table, so a second claimer of the same time,
in this process or another replica's (every replica's store is the one storage actor's file),
gets None and fires nothing.

Implemented by :class:`troupe.storage.duckdb_store.automations.AutomationTables`.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..base import Order, Page

__all__ = ["Automations"]


class Automations(Protocol):
    """Automations and their invocations, per tenant; the scheduler's reads across tenants."""

    def create_automation(
        self, tenant: str, automation: dict[str, Any], next_due_at: int | None, secrets: str | None
    ) -> dict[str, Any]:
        """Store a new automation (its whole object); that object.

        Raises:
            StorageError: the id is taken, or the object is not JSON.
        """
        ...

    def get_automation(self, tenant: str, automation_id: str) -> dict[str, Any] | None:
        """The automation's object; None if the tenant has no such automation."""
        ...

    def list_automations(
        self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc",
        session_id: str | None = None,
    ) -> Page:  # fmt: skip
        """The tenant's automations by creation time; with ``session_id``, those whose target is
        that existing session (``after``: an automation id; an unknown one gives an empty page)."""
        ...

    def update_automation(
        self, tenant: str, automation_id: str, changes: dict[str, Any], now: float, secrets: str | None
    ) -> dict[str, Any] | None:
        """Make ``changes`` (``troupe.protocol.automations.parse_automation_update``, checked
        against the automation) in one transaction; an active automation whose ``run_at``,
        ``expression`` or ``timezone`` changed gets its next due time after ``now``. ``secrets``
        replaces the kept ones when ``changes`` has a ``target``. The object; None if no such automation.
        """
        ...

    def set_automation_status(
        self, tenant: str, automation_id: str, status: str, now: float, pause_reason: str | None = None
    ) -> dict[str, Any] | None:
        """Set the automation's ``status`` (``active``: its next due time is the first after
        ``now``; ``paused``, ``completed``: none) and ``pause_reason``; the object, None if no
        such automation."""
        ...

    def delete_automation(self, tenant: str, automation_id: str) -> bool:
        """Delete an automation and its invocations; False if the tenant has no such automation."""
        ...

    def automation_secrets(self, tenant: str, automation_id: str) -> str | None:
        """What is kept of the automation's confidential values (None: none, or no such automation)."""
        ...

    def next_automation_due(self) -> int | None:
        """The earliest next due time of any tenant's active automation; None if there is none."""
        ...

    def due_automations(self, now: float, limit: int = 100) -> list[tuple[str, str, int]]:
        """``(tenant, automation id, due time)`` of active automations due at or before ``now``,
        earliest first, at most ``limit``."""
        ...

    def claim_automation_due(
        self, tenant: str, automation_id: str, due_at: int, invocation_id: str, now: float
    ) -> dict[str, Any] | None:
        """Claim the automation's due time ``due_at``, in one transaction: store its invocation
        (``queued``, id ``invocation_id``) and move the automation to its next due time after
        ``max(due_at, now)`` (a one-time automation to ``completed``); the invocation is
        ``skipped`` (``pending_delivery``) instead when an earlier one of the automation is still
        ``queued`` (for less than ``PENDING_DELIVERY_S``). The new invocation; None
        when the time is not the automation's to fire (claimed already, here or by another
        replica; the automation was paused, changed or deleted).
        """
        ...

    def create_manual_invocation(
        self, tenant: str, automation_id: str, invocation_id: str, now: float
    ) -> dict[str, Any] | None:
        """Store a manual invocation (``queued``, ``scheduled_at`` null); None if no such automation."""
        ...

    def finish_invocation(
        self, tenant: str, invocation_id: str, status: str, session_id: str | None, error: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """Record how an invocation's delivery ended; the invocation, None if there is no such invocation."""
        ...

    def get_invocation(self, tenant: str, automation_id: str, invocation_id: str) -> dict[str, Any] | None:
        """The invocation of that automation; None if there is none."""
        ...

    def list_invocations(
        self, tenant: str, automation_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """The automation's invocations by creation time (``after``: an invocation id)."""
        ...
