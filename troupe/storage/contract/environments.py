"""The environments area of the store contract (the Agents API's execution environments and
their templates).

A template is stored as its wire object (``troupe.protocol.environments.template_object``:
``{"id", "object": "agent.environment.template", "name", "created_at", "updated_at",
"capability_directories", "files", "network", "packages", "plugins", "skills", "desktop"}``,
which holds no secret) and, apart, ``secrets``: its ``env`` and inline files' contents sealed
with the configured ``credentials_keys`` (``fernet:…``, :mod:`troupe.storage.credentials`), or
None. Nothing here ever holds a secret in plain text.

An environment is stored as its wire object (``troupe.protocol.environments.environment_object``,
with the ``container_id`` of the container it runs in); its ``env`` is not stored at all (it
lives in its sandbox's memory).

Implemented by :class:`troupe.storage.duckdb_store.environments.EnvironmentTables`.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..base import Order, Page

__all__ = ["Environments"]


class Environments(Protocol):
    """Environment templates and environments, per tenant."""

    def create_environment_template(self, tenant: str, template: dict[str, Any], secrets: str | None) -> dict[str, Any]:
        """Store a new template (its whole object, with its ``id`` and times) and its sealed
        ``secrets``; that object.

        Raises:
            StorageError: the id is taken (for this tenant).
        """
        ...

    def get_environment_template(self, tenant: str, template_id: str) -> tuple[dict[str, Any], str | None] | None:
        """``(object, sealed secrets)`` of a template; None if the tenant has no such template."""
        ...

    def list_environment_templates(
        self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """The tenant's templates' objects by creation (``after``: a template id; an unknown one gives an empty page)."""
        ...

    def update_environment_template(
        self, tenant: str, template_id: str, changes: dict[str, Any], updated_at: float, *, secrets: str | None,
        set_secrets: bool,
    ) -> dict[str, Any] | None:  # fmt: skip
        """Make ``changes`` (``parse_template_body(update=True)``'s, without secrets: inline files
        carry ``size_bytes``, not ``data``) to the template, read and written in one transaction
        (``apply_template_update``); with ``set_secrets``, its sealed secrets become ``secrets``.
        The updated object; None if the tenant has no such template."""
        ...

    def delete_environment_template(self, tenant: str, template_id: str) -> bool:
        """Delete a template; False if the tenant has no such template."""
        ...

    def create_environment(self, tenant: str, environment: dict[str, Any], created_at: float) -> dict[str, Any]:
        """Store a new environment (its object); that object.

        Raises:
            StorageError: the id is taken (for this tenant).
        """
        ...

    def get_environment(self, tenant: str, environment_id: str) -> dict[str, Any] | None:
        """An environment's stored object; None if the tenant has no such environment."""
        ...

    def list_environments(
        self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """The tenant's environments' stored objects by creation (``after``: an environment id)."""
        ...
