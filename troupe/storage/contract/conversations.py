"""The conversations area of the store contract (the Conversations API's objects and items).

Implemented by :class:`troupe.storage.duckdb_store.conversations.ConversationTables`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..base import Order, Page

__all__ = ["Conversations"]


class Conversations(Protocol):
    """Conversations and their items, per tenant, in append order."""

    def create_conversation(self, tenant: str, conversation: dict[str, Any], items: Sequence[dict[str, Any]]) -> None:
        """Store a new ``Conversation`` object (``{"id", "object", "created_at", "metadata"}``) and its first items.

        Raises:
            StorageError: the id is taken (for this tenant) or a value is not JSON.
        """
        ...

    def get_conversation(self, tenant: str, conversation_id: str) -> dict[str, Any] | None:
        """The Conversation object, or None."""
        ...

    def update_conversation(self, tenant: str, conversation_id: str, metadata: dict[str, Any]) -> dict[str, Any] | None:
        """Replace its metadata; the updated Conversation, or None if unknown."""
        ...

    def delete_conversation(self, tenant: str, conversation_id: str) -> bool:
        """Delete a conversation and its items; False if unknown."""
        ...

    def add_conversation_items(self, tenant: str, conversation_id: str, items: Sequence[dict[str, Any]]) -> bool:
        """Append items (each with an ``id``) after the existing ones; False if the conversation is unknown."""
        ...

    def list_conversation_items(
        self, tenant: str, conversation_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page | None:
        """A page of the conversation's items in append order; None if unknown. An unknown
        ``after`` gives an empty page."""
        ...

    def get_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> dict[str, Any] | None:
        """One item, or None if the conversation or the item is unknown (with duplicate ids, the earliest)."""
        ...

    def delete_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> bool:
        """Remove one item (with duplicate ids, all of them); False if the conversation or the item is unknown."""
        ...

    def conversation_items(self, tenant: str, conversation_id: str) -> list[dict[str, Any]] | None:
        """Every item of the conversation in append order (the loop's history); None if unknown."""
        ...
