"""The vaults area in DuckDB (:class:`~troupe.storage.contract.Vaults`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .. import schema
from ..base import Order, Page
from ..contract import Vaults
from .connection import Connection, check_page_args

__all__ = ["VaultTables"]

_NO_PARTS = "CAST(NULL AS BIGINT)"  # the records are small (no secrets, no contents): never in value_parts
_ALL = ("active", "archived")


class VaultTables(Connection, Vaults):
    """Vaults and credentials in DuckDB: one row each, its record as one JSON value; a
    credential's sealed secrets beside it (never plain)."""

    def create_vault(self, tenant: str, vault: dict[str, Any]) -> dict[str, Any]:
        """See :meth:`Vaults.create_vault`."""
        text = schema.dump_json(vault)
        with self._transaction() as conn:
            conn.execute("INSERT INTO vaults (tenant, id, created_at, status, metadata, vault) VALUES (?, ?, ?, ?, ?, ?)",
                         [tenant, vault["id"], vault["created_at"], vault["status"],
                          schema.dump_json(vault["metadata"]), text])  # fmt: skip
        return json.loads(text)

    def get_vault(self, tenant: str, vault_id: str) -> dict[str, Any] | None:
        """See :meth:`Vaults.get_vault`."""
        row = self._fetchone("SELECT vault FROM vaults WHERE tenant = ? AND id = ?", [tenant, vault_id])
        return json.loads(row[0]) if row else None

    def list_vaults(
        self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc",
        statuses: Sequence[str] = _ALL, metadata: dict[str, str] | None = None,
    ) -> Page:  # fmt: skip
        """See :meth:`Vaults.list_vaults`."""
        return self._vault_page("vaults", "vault", "tenant = ?", [tenant], after, limit, order, statuses, metadata)

    def update_vault(self, tenant: str, vault_id: str, changes: dict[str, Any]) -> dict[str, Any] | None:
        """See :meth:`Vaults.update_vault`."""
        with self._transaction() as conn:
            rows = conn.execute("SELECT vault FROM vaults WHERE tenant = ? AND id = ?", [tenant, vault_id]).fetchall()
            if not rows:
                return None
            updated = {**json.loads(rows[0][0]), **changes}
            text = schema.dump_json(updated)
            conn.execute("UPDATE vaults SET metadata = ?, vault = ? WHERE tenant = ? AND id = ?",
                         [schema.dump_json(updated["metadata"]), text, tenant, vault_id])  # fmt: skip
        return json.loads(text)

    def delete_vault(self, tenant: str, vault_id: str) -> bool:
        """See :meth:`Vaults.delete_vault`."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM vault_credentials WHERE tenant = ? AND vault_id = ?", [tenant, vault_id])
            gone = conn.execute("DELETE FROM vaults WHERE tenant = ? AND id = ? RETURNING id",
                                [tenant, vault_id]).fetchall()  # fmt: skip
        return bool(gone)

    def create_credential(self, tenant: str, credential: dict[str, Any], secrets: str) -> dict[str, Any] | None:
        """See :meth:`Vaults.create_credential`."""
        text = schema.dump_json(credential)
        with self._transaction() as conn:
            if not conn.execute("SELECT 1 FROM vaults WHERE tenant = ? AND id = ?",
                                [tenant, credential["vault_id"]]).fetchall():  # fmt: skip
                return None
            conn.execute(
                "INSERT INTO vault_credentials (tenant, id, vault_id, created_at, status, metadata, credential, secrets)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [tenant, credential["id"], credential["vault_id"], credential["created_at"], credential["status"],
                 schema.dump_json(credential["metadata"]), text, secrets],
            )  # fmt: skip
        return json.loads(text)

    def get_credential(self, tenant: str, vault_id: str, credential_id: str) -> tuple[dict[str, Any], str] | None:
        """See :meth:`Vaults.get_credential`."""
        row = self._fetchone("SELECT credential, secrets FROM vault_credentials WHERE tenant = ? AND vault_id = ?"
                             " AND id = ?", [tenant, vault_id, credential_id])  # fmt: skip
        return (json.loads(row[0]), row[1]) if row else None

    def list_credentials(
        self, tenant: str, vault_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc",
        statuses: Sequence[str] = _ALL, metadata: dict[str, str] | None = None,
    ) -> Page:  # fmt: skip
        """See :meth:`Vaults.list_credentials`."""
        return self._vault_page("vault_credentials", "credential", "tenant = ? AND vault_id = ?", [tenant, vault_id],
                             after, limit, order, statuses, metadata)  # fmt: skip

    def update_credential(
        self, tenant: str, vault_id: str, credential_id: str, changes: dict[str, Any], updated_at: float,
        secrets: str | None,
    ) -> dict[str, Any] | None:  # fmt: skip
        """See :meth:`Vaults.update_credential`."""
        where = [tenant, vault_id, credential_id]
        with self._transaction() as conn:
            rows = conn.execute("SELECT credential FROM vault_credentials WHERE tenant = ? AND vault_id = ? AND id = ?",
                                where).fetchall()  # fmt: skip
            if not rows:
                return None
            updated = {**json.loads(rows[0][0]), **changes, "updated_at": updated_at}
            text = schema.dump_json(updated)
            conn.execute("UPDATE vault_credentials SET metadata = ?, credential = ?, secrets = coalesce(?, secrets)"
                         " WHERE tenant = ? AND vault_id = ? AND id = ?",
                         [schema.dump_json(updated["metadata"]), text, secrets, *where])  # fmt: skip
        return json.loads(text)

    def delete_credential(self, tenant: str, vault_id: str, credential_id: str) -> bool:
        """See :meth:`Vaults.delete_credential`."""
        with self._transaction() as conn:
            gone = conn.execute("DELETE FROM vault_credentials WHERE tenant = ? AND vault_id = ? AND id = ? RETURNING id",
                                [tenant, vault_id, credential_id]).fetchall()  # fmt: skip
        return bool(gone)

    def vault_credentials(self, tenant: str, vault_ids: Sequence[str]) -> list[tuple[dict[str, Any], str]]:
        """See :meth:`Vaults.vault_credentials`."""
        if not vault_ids:
            return []
        rows = self._fetchall(
            "SELECT c.credential, c.secrets FROM vault_credentials c JOIN vaults v ON v.tenant = c.tenant"
            " AND v.id = c.vault_id WHERE c.tenant = ? AND list_contains(?, c.vault_id) AND v.status = 'active'"
            " AND c.status = 'active' ORDER BY c.created_at, c.id",
            [tenant, list(vault_ids)],
        )  # fmt: skip
        return [(json.loads(credential), secrets) for credential, secrets in rows]

    def _vault_page(
        self, table: str, column: str, where: str, params: list[Any], after: str | None, limit: int, order: Order,
        statuses: Sequence[str], metadata: dict[str, str] | None,
    ) -> Page:  # fmt: skip
        check_page_args(limit, order)
        anchor = None
        if after is not None:
            anchor = self._fetchone(f"SELECT created_at, id FROM {table} WHERE {where} AND id = ?", [*params, after])
            if anchor is None:
                return Page(data=[], has_more=False)
        where, params = where + " AND list_contains(?, status)", [*params, list(statuses)]
        for key, value in (metadata or {}).items():
            where, params = where + " AND json_extract_string(metadata, ?) = ?", [*params, "$." + json.dumps(key), value]
        return self._paged(table, where, params, ("created_at", "id"), anchor, limit, order, f"{column}, {_NO_PARTS}")
