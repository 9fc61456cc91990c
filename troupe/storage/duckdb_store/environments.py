"""The environments area in DuckDB (:class:`~troupe.storage.contract.Environments`)."""

from __future__ import annotations

import json
from typing import Any

from troupe.protocol.environments import apply_template_update

from .. import schema
from ..base import Order, Page
from ..contract import Environments
from .connection import Connection, check_page_args

__all__ = ["EnvironmentTables"]

_NO_PARTS = "CAST(NULL AS BIGINT)"  # the objects are small (no file contents): never in value_parts


class EnvironmentTables(Connection, Environments):
    """Environment templates and environments in DuckDB: one row each, its object as one JSON
    value; a template's sealed secrets beside it (never plain)."""

    def create_environment_template(self, tenant: str, template: dict[str, Any], secrets: str | None) -> dict[str, Any]:
        """See :meth:`Environments.create_environment_template`."""
        text = schema.dump_json(template)
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO environment_templates (tenant, id, created_at, updated_at, name, template, secrets)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [tenant, template["id"], template["created_at"], template["updated_at"], template["name"], text, secrets],
            )
        return json.loads(text)

    def get_environment_template(self, tenant: str, template_id: str) -> tuple[dict[str, Any], str | None] | None:
        """See :meth:`Environments.get_environment_template`."""
        row = self._fetchone("SELECT template, secrets FROM environment_templates WHERE tenant = ? AND id = ?",
                             [tenant, template_id])  # fmt: skip
        return (json.loads(row[0]), row[1]) if row else None

    def list_environment_templates(
        self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """See :meth:`Environments.list_environment_templates`."""
        return self._page_of("environment_templates", "template", tenant, after, limit, order)

    def update_environment_template(
        self, tenant: str, template_id: str, changes: dict[str, Any], updated_at: float, *, secrets: str | None,
        set_secrets: bool,
    ) -> dict[str, Any] | None:  # fmt: skip
        """See :meth:`Environments.update_environment_template`."""
        with self._transaction() as conn:
            rows = conn.execute("SELECT template FROM environment_templates WHERE tenant = ? AND id = ?",
                                [tenant, template_id]).fetchall()  # fmt: skip
            if not rows:
                return None
            updated = apply_template_update(json.loads(rows[0][0]), changes, updated_at)
            text = schema.dump_json(updated)
            conn.execute("UPDATE environment_templates SET updated_at = ?, name = ?, template = ? WHERE tenant = ? AND id = ?",
                         [updated["updated_at"], updated["name"], text, tenant, template_id])  # fmt: skip
            if set_secrets:
                conn.execute("UPDATE environment_templates SET secrets = ? WHERE tenant = ? AND id = ?",
                             [secrets, tenant, template_id])  # fmt: skip
        return json.loads(text)

    def delete_environment_template(self, tenant: str, template_id: str) -> bool:
        """See :meth:`Environments.delete_environment_template`."""
        with self._transaction() as conn:
            gone = conn.execute("DELETE FROM environment_templates WHERE tenant = ? AND id = ? RETURNING id",
                                [tenant, template_id]).fetchall()  # fmt: skip
        return bool(gone)

    def create_environment(self, tenant: str, environment: dict[str, Any], created_at: float) -> dict[str, Any]:
        """See :meth:`Environments.create_environment`."""
        text = schema.dump_json(environment)
        with self._transaction() as conn:
            conn.execute("INSERT INTO environments (tenant, id, created_at, container_id, environment)"
                         " VALUES (?, ?, ?, ?, ?)",
                         [tenant, environment["id"], created_at, environment["container_id"], text])  # fmt: skip
        return json.loads(text)

    def get_environment(self, tenant: str, environment_id: str) -> dict[str, Any] | None:
        """See :meth:`Environments.get_environment`."""
        row = self._fetchone("SELECT environment FROM environments WHERE tenant = ? AND id = ?", [tenant, environment_id])
        return json.loads(row[0]) if row else None

    def list_environments(
        self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """See :meth:`Environments.list_environments`."""
        return self._page_of("environments", "environment", tenant, after, limit, order)

    def _page_of(self, table: str, column: str, tenant: str, after: str | None, limit: int, order: Order) -> Page:
        check_page_args(limit, order)
        anchor = None
        if after is not None:
            anchor = self._fetchone(f"SELECT created_at, id FROM {table} WHERE tenant = ? AND id = ?", [tenant, after])
            if anchor is None:
                return Page(data=[], has_more=False)
        return self._paged(table, "tenant = ?", [tenant], ("created_at", "id"), anchor, limit, order,
                           f"{column}, {_NO_PARTS}")  # fmt: skip
