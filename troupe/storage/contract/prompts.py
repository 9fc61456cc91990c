"""The prompts area of the store contract (the Prompts API's prompts and their versions).

A prompt and each of its versions as the Prompts API shows them (``troupe.protocol.prompts.
prompt_object``): ``{"id", "object": "prompt", "version", "created_at", "prompt", "messages",
"variables", "is_default"}``. ``content`` is ``{"prompt", "messages", "variables"}``.

Implemented by :class:`troupe.storage.duckdb_store.prompts.PromptTables`.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..base import Order, Page

__all__ = ["Prompts"]


class Prompts(Protocol):
    """Prompts, per tenant, each with numbered versions and a default one."""

    def create_prompt(self, tenant: str, prompt_id: str, content: dict[str, Any], created_at: float) -> dict[str, Any]:
        """Store a new prompt with ``content`` as its version 1, the default; that version.

        Raises:
            StorageError: the id is taken (for this tenant), or the content is not JSON.
        """
        ...

    def get_prompt(self, tenant: str, prompt_id: str, version: int | None = None) -> dict[str, Any] | None:
        """A version of a prompt (None: its default version); None if either is unknown."""
        ...

    def list_prompts(self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc") -> Page:
        """The tenant's prompts, each as its default version, by the prompt's creation time
        (``after``: a prompt id; an unknown one gives an empty page)."""
        ...

    def update_prompt(
        self, tenant: str, prompt_id: str, content: dict[str, Any], *, from_version: int, set_default: bool,
        created_at: float,
    ) -> dict[str, Any] | None:  # fmt: skip
        """Add a version (the latest + 1) with ``content``, the default if ``set_default``; that
        version. None if the prompt is unknown.

        Raises:
            PromptConflict: ``from_version`` is not the latest version (another update came
                first); nothing was written.
        """
        ...

    def set_default_prompt_version(self, tenant: str, prompt_id: str, version: int) -> dict[str, Any] | None:
        """Make ``version`` the prompt's default; that version. None if the prompt or the version is unknown."""
        ...

    def delete_prompt(self, tenant: str, prompt_id: str) -> bool:
        """Delete a prompt and all its versions; False if unknown."""
        ...

    def list_prompt_versions(self, tenant: str, prompt_id: str) -> list[dict[str, Any]] | None:
        """Every version of a prompt, oldest first; None if the prompt is unknown."""
        ...
