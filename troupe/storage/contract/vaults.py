"""The vaults area of the store contract (the Agents API's vaults and their credentials).

A vault is stored as ``{"id", "created_at", "name", "metadata", "status"}``; a credential as
``{"id", "vault_id", "created_at", "updated_at", "name", "metadata", "auth", "status"}``, whose
``auth`` is the public one (``troupe.protocol.vaults``: no secret), and, apart, ``secrets``: its
secret values sealed with the configured ``credentials_keys`` (``fernet:…``,
:mod:`troupe.storage.credentials`). Nothing here ever holds a secret in plain text: the runtime
seals them before they reach the store (:mod:`troupe.runtime.vaults`).

Implemented by :class:`troupe.storage.duckdb_store.vaults.VaultTables`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..base import Order, Page

__all__ = ["Vaults"]


class Vaults(Protocol):
    """Vaults and their credentials, per tenant."""

    def create_vault(self, tenant: str, vault: dict[str, Any]) -> dict[str, Any]:
        """Store a new vault (its whole record, with its ``id``); that record.

        Raises:
            StorageError: the id is taken (for this tenant).
        """
        ...

    def get_vault(self, tenant: str, vault_id: str) -> dict[str, Any] | None:
        """A vault's record; None if the tenant has no such vault."""
        ...

    def list_vaults(
        self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc",
        statuses: Sequence[str] = ("active", "archived"), metadata: dict[str, str] | None = None,
    ) -> Page:  # fmt: skip
        """The tenant's vaults' records by creation, those whose status is one of ``statuses`` and
        whose metadata holds every pair of ``metadata`` (``after``: a vault id; an unknown one
        gives an empty page)."""
        ...

    def update_vault(self, tenant: str, vault_id: str, changes: dict[str, Any]) -> dict[str, Any] | None:
        """Replace the fields ``changes`` names (``name``, ``metadata``); the updated record, None
        if the tenant has no such vault."""
        ...

    def delete_vault(self, tenant: str, vault_id: str) -> bool:
        """Delete a vault and all its credentials; False if the tenant has no such vault."""
        ...

    def create_credential(self, tenant: str, credential: dict[str, Any], secrets: str) -> dict[str, Any] | None:
        """Store a new credential (its record, with its ``id`` and ``vault_id``) and its sealed
        ``secrets``; that record, None if the tenant has no vault ``credential["vault_id"]``.

        Raises:
            StorageError: the id is taken (for this tenant).
        """
        ...

    def get_credential(self, tenant: str, vault_id: str, credential_id: str) -> tuple[dict[str, Any], str] | None:
        """``(record, sealed secrets)`` of a credential of the vault; None if there is no such one."""
        ...

    def list_credentials(
        self, tenant: str, vault_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc",
        statuses: Sequence[str] = ("active", "archived"), metadata: dict[str, str] | None = None,
    ) -> Page:  # fmt: skip
        """The vault's credentials' records by creation, filtered as :meth:`list_vaults` does."""
        ...

    def update_credential(
        self, tenant: str, vault_id: str, credential_id: str, changes: dict[str, Any], updated_at: float,
        secrets: str | None,
    ) -> dict[str, Any] | None:  # fmt: skip
        """Replace the fields ``changes`` names (``metadata``, ``auth``) and, unless ``secrets`` is
        None, the sealed secrets; the updated record, None if there is no such credential."""
        ...

    def delete_credential(self, tenant: str, vault_id: str, credential_id: str) -> bool:
        """Delete a credential; False if the vault has no such credential."""
        ...

    def vault_credentials(self, tenant: str, vault_ids: Sequence[str]) -> list[tuple[dict[str, Any], str]]:
        """``(record, sealed secrets)`` of every active credential of the tenant's active vaults
        ``vault_ids`` names, by creation (what a session's turn authorizes its MCP tools with)."""
        ...
