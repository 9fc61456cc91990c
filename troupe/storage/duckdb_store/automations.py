"""The automations area in DuckDB (:class:`~troupe.storage.contract.Automations`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import duckdb

from troupe.protocol.automations import PENDING_DELIVERY_S, apply_automation_update, invocation_object, next_due

from .. import schema
from ..base import Order, Page
from ..contract import Automations
from .connection import Connection, check_page_args

__all__ = ["AutomationTables"]

Change = Callable[[dict[str, Any]], dict[str, Any]]
Due = Callable[[dict[str, Any], "int | None"], "int | None"]
_SCHEDULE = frozenset({"run_at", "expression", "timezone"})


class AutomationTables(Connection, Automations):
    """The automations area in DuckDB: a row per automation (its object as one JSON value, in
    ``value_parts`` when long: an inline agent's tools may take MBs) and a row per invocation,
    unique per ``(automation_id, scheduled_at)``: the claim of a due time."""

    def _write_automation(
        self, conn: duckdb.DuckDBPyConnection, tenant: str, automation: dict[str, Any], next_due_at: int | None,
        *, secrets: str | None = None, old_parts: int | None = None, new: bool,
    ) -> dict[str, Any]:  # fmt: skip
        text = schema.dump_json(automation)
        parts: list[tuple[int, int, str]] = []
        target = automation["target"]
        session_id = target["session_id"] if target["type"] == "existing_session" else None
        row = [automation["status"], next_due_at, session_id, *self._stored(text, parts)]
        if new:
            conn.execute(
                "INSERT INTO automations (tenant, id, created_at, type, status, next_due_at, session_id, automation,"
                " automation_parts, secrets) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [tenant, automation["id"], automation["created_at"], automation["type"], *row, secrets],
            )
        else:
            conn.execute(
                "UPDATE automations SET status = ?, next_due_at = ?, session_id = ?, automation = ?,"
                " automation_parts = ? WHERE tenant = ? AND id = ?",
                [*row, tenant, automation["id"]],
            )
            self._delete_parts(conn, [(old_parts,)])
        self._insert(conn, "value_parts", schema.PART_COLUMNS, parts)
        return json.loads(text)

    def _read(
        self, conn: duckdb.DuckDBPyConnection, table: str, column: str, where: str, params: list[Any]
    ) -> tuple[dict[str, Any], int | None] | None:
        """The JSON value of ``table``'s row (``column``, with its parts) and its parts id, in a transaction."""
        rows = conn.execute(f"SELECT {column}, {column}_parts FROM {table} WHERE {where}", params).fetchall()
        if not rows:
            return None
        text, parts_id = rows[0]
        return json.loads(text if parts_id is None else self._join_parts(conn, [parts_id])[parts_id]), parts_id

    def _change_automation(
        self, tenant: str, automation_id: str, change: Change, due: Due, **secrets: str | None
    ) -> dict[str, Any] | None:
        """Read, change (``change``) and write the automation in one transaction; ``due`` gives
        the changed automation's next due time from it and the stored one."""
        with self._transaction() as conn:
            key = [tenant, automation_id]
            found = self._read(conn, "automations", "automation", "tenant = ? AND id = ?", key)
            if found is None:
                return None
            automation, parts_id = found
            (stored_due,) = conn.execute("SELECT next_due_at FROM automations WHERE tenant = ? AND id = ?",
                                         key).fetchall()[0]  # fmt: skip
            if secrets:
                conn.execute("UPDATE automations SET secrets = ? WHERE tenant = ? AND id = ?", [secrets["secrets"], *key])
            changed = change(automation)
            return self._write_automation(conn, tenant, changed, due(changed, stored_due), old_parts=parts_id,
                                          new=False)  # fmt: skip

    def create_automation(
        self, tenant: str, automation: dict[str, Any], next_due_at: int | None, secrets: str | None
    ) -> dict[str, Any]:
        """See :meth:`Automations.create_automation`."""
        with self._transaction() as conn:
            return self._write_automation(conn, tenant, automation, next_due_at, secrets=secrets, new=True)

    def get_automation(self, tenant: str, automation_id: str) -> dict[str, Any] | None:
        """See :meth:`Automations.get_automation`."""
        found = self._fetch_values("SELECT automation, automation_parts FROM automations WHERE tenant = ? AND id = ?",
                                   [tenant, automation_id])  # fmt: skip
        return found[0][0] if found else None

    def list_automations(
        self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc",
        session_id: str | None = None,
    ) -> Page:  # fmt: skip
        """See :meth:`Automations.list_automations`."""
        check_page_args(limit, order)
        where, params = "tenant = ?", [tenant]
        if session_id is not None:
            where, params = where + " AND session_id = ?", [tenant, session_id]
        anchor = None
        if after is not None:
            anchor = self._fetchone(f"SELECT created_at, id FROM automations WHERE {where} AND id = ?", [*params, after])
            if anchor is None:
                return Page(data=[], has_more=False)
        return self._paged("automations", where, params, ("created_at", "id"), anchor, limit, order,
                           "automation, automation_parts")  # fmt: skip

    def update_automation(
        self, tenant: str, automation_id: str, changes: dict[str, Any], now: float, secrets: str | None
    ) -> dict[str, Any] | None:
        """See :meth:`Automations.update_automation`."""
        kept = {"secrets": secrets} if "target" in changes else {}
        replan = bool(_SCHEDULE & changes.keys())

        def due(changed: dict[str, Any], stored: int | None) -> int | None:
            return next_due(changed, after=now) if replan and changed["status"] == "active" else stored

        return self._change_automation(tenant, automation_id, lambda a: apply_automation_update(a, changes), due,
                                       **kept)  # fmt: skip

    def set_automation_status(
        self, tenant: str, automation_id: str, status: str, now: float, pause_reason: str | None = None
    ) -> dict[str, Any] | None:
        """See :meth:`Automations.set_automation_status`."""
        return self._change_automation(tenant, automation_id,
                                       lambda a: {**a, "status": status, "pause_reason": pause_reason},
                                       lambda a, _: next_due(a, after=now) if status == "active" else None)  # fmt: skip

    def delete_automation(self, tenant: str, automation_id: str) -> bool:
        """See :meth:`Automations.delete_automation`."""
        with self._transaction() as conn:
            sql = "DELETE FROM automation_invocations WHERE tenant = ? AND automation_id = ? RETURNING invocation_parts"
            self._delete_returning_parts(conn, sql, [tenant, automation_id])
            sql = "DELETE FROM automations WHERE tenant = ? AND id = ? RETURNING automation_parts"
            return self._delete_returning_parts(conn, sql, [tenant, automation_id]) > 0

    def automation_secrets(self, tenant: str, automation_id: str) -> str | None:
        """See :meth:`Automations.automation_secrets`."""
        row = self._fetchone("SELECT secrets FROM automations WHERE tenant = ? AND id = ?", [tenant, automation_id])
        return row[0] if row else None

    def next_automation_due(self) -> int | None:
        """See :meth:`Automations.next_automation_due`."""
        row = self._fetchone("SELECT min(next_due_at) FROM automations WHERE status = 'active'")
        return None if row is None or row[0] is None else int(row[0])

    def due_automations(self, now: float, limit: int = 100) -> list[tuple[str, str, int]]:
        """See :meth:`Automations.due_automations`."""
        rows = self._fetchall("SELECT tenant, id, next_due_at FROM automations WHERE status = 'active'"
                              " AND next_due_at <= ? ORDER BY next_due_at, id LIMIT ?", [now, limit])  # fmt: skip
        return [(tenant, automation_id, int(due)) for tenant, automation_id, due in rows]

    def claim_automation_due(
        self, tenant: str, automation_id: str, due_at: int, invocation_id: str, now: float
    ) -> dict[str, Any] | None:
        """See :meth:`Automations.claim_automation_due`."""
        with self._transaction() as conn:
            where = "tenant = ? AND id = ? AND status = 'active' AND next_due_at = ?"
            found = self._read(conn, "automations", "automation", where, [tenant, automation_id, due_at])
            if found is None:
                return None  # paused, changed, deleted, or this time claimed already
            automation, parts_id = found
            invocation = invocation_object(invocation_id, automation, created_at=now, scheduled_at=due_at)
            (pending,) = conn.execute("SELECT count(*) FROM automation_invocations WHERE tenant = ? AND"
                                      " automation_id = ? AND status = 'queued' AND created_at > ?",
                                      [tenant, automation_id, now - PENDING_DELIVERY_S]).fetchall()[0]  # fmt: skip
            if pending:
                invocation.update(status="skipped", skip_reason="pending_delivery")
            try:
                self._insert_invocation(conn, tenant, invocation)
            except duckdb.ConstraintException:
                return None  # the (automation_id, scheduled_at) row is another claimer's
            following = next_due(automation, after=max(due_at, now))
            if automation["type"] == "once":
                automation = {**automation, "status": "completed"}
            self._write_automation(conn, tenant, automation, following, old_parts=parts_id, new=False)
            return invocation

    def create_manual_invocation(
        self, tenant: str, automation_id: str, invocation_id: str, now: float
    ) -> dict[str, Any] | None:
        """See :meth:`Automations.create_manual_invocation`."""
        with self._transaction() as conn:
            found = self._read(conn, "automations", "automation", "tenant = ? AND id = ?", [tenant, automation_id])
            if found is None:
                return None
            invocation = invocation_object(invocation_id, found[0], created_at=now, scheduled_at=None)
            self._insert_invocation(conn, tenant, invocation)
            return invocation

    def _insert_invocation(self, conn: duckdb.DuckDBPyConnection, tenant: str, invocation: dict[str, Any]) -> None:
        parts: list[tuple[int, int, str]] = []
        stored = self._stored(schema.dump_json(invocation), parts)
        conn.execute(
            "INSERT INTO automation_invocations (tenant, id, automation_id, created_at, scheduled_at, status,"
            " invocation, invocation_parts) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [tenant, invocation["id"], invocation["automation_id"], invocation["created_at"],
             invocation["scheduled_at"], invocation["status"], *stored],
        )  # fmt: skip
        self._insert(conn, "value_parts", schema.PART_COLUMNS, parts)

    def finish_invocation(
        self, tenant: str, invocation_id: str, status: str, session_id: str | None, error: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """See :meth:`Automations.finish_invocation`."""
        with self._transaction() as conn:
            found = self._read(conn, "automation_invocations", "invocation", "tenant = ? AND id = ?",
                               [tenant, invocation_id])  # fmt: skip
            if found is None:
                return None
            invocation, parts_id = found
            invocation.update(status=status, session_id=session_id, error=error)
            parts: list[tuple[int, int, str]] = []
            stored = self._stored(schema.dump_json(invocation), parts)
            conn.execute("UPDATE automation_invocations SET status = ?, session_id = ?, invocation = ?,"
                         " invocation_parts = ? WHERE tenant = ? AND id = ?",
                         [status, session_id, *stored, tenant, invocation_id])  # fmt: skip
            self._delete_parts(conn, [(parts_id,)])
            self._insert(conn, "value_parts", schema.PART_COLUMNS, parts)
            return invocation

    def get_invocation(self, tenant: str, automation_id: str, invocation_id: str) -> dict[str, Any] | None:
        """See :meth:`Automations.get_invocation`."""
        found = self._fetch_values("SELECT invocation, invocation_parts FROM automation_invocations"
                                   " WHERE tenant = ? AND automation_id = ? AND id = ?",
                                   [tenant, automation_id, invocation_id])  # fmt: skip
        return found[0][0] if found else None

    def list_invocations(
        self, tenant: str, automation_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """See :meth:`Automations.list_invocations`."""
        check_page_args(limit, order)
        where, params = "tenant = ? AND automation_id = ?", [tenant, automation_id]
        anchor = None
        if after is not None:
            anchor = self._fetchone(f"SELECT created_at, id FROM automation_invocations WHERE {where} AND id = ?",
                                    [*params, after])  # fmt: skip
            if anchor is None:
                return Page(data=[], has_more=False)
        return self._paged("automation_invocations", where, params, ("created_at", "id"), anchor, limit, order,
                           "invocation, invocation_parts")  # fmt: skip
