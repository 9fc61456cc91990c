"""The Conversations API of :class:`~troupe.runtime.facade.Runtime` (a part of it, kept apart).

Item writes go through the conversation's host, so they queue behind any running turn of
that conversation and its message cache stays true; reads go to storage.
"""

from __future__ import annotations

import time
from typing import Any

from troupe.protocol import NotFound, new_id, normalize_input
from troupe.runtime.host import HostClient
from troupe.runtime.hosting import Placement
from troupe.runtime.store_client import StoreClient
from troupe.storage import Order, Page

__all__ = ["ConversationCalls", "new_conversation", "not_found"]


def not_found(kind: str, object_id: str, param: str) -> NotFound:
    return NotFound(f"{kind} with id '{object_id}' not found.", param=param)


def new_conversation(metadata: dict[str, Any] | None = None, conversation_id: str | None = None) -> dict[str, Any]:
    """A new Conversation object (created now; a new id unless given), to be stored."""
    return {"id": conversation_id or new_id("conv"), "object": "conversation", "created_at": int(time.time()),
            "metadata": metadata or {}}  # fmt: skip


class ConversationCalls:
    """The conversation calls of the runtime facade (it provides ``store`` and ``placement``)."""

    store: StoreClient
    placement: Placement

    async def create_conversation(
        self, tenant: str, *, items: list[dict[str, Any]] | None = None, metadata: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        conversation = new_conversation(metadata, self.placement.new_thread_id("conv"))
        await self.store.create_conversation(tenant, conversation, normalize_input(items or []))
        return conversation

    async def get_conversation(self, tenant: str, conversation_id: str) -> dict[str, Any]:
        found = await self.store.get_conversation(tenant, conversation_id)
        if found is None:
            raise not_found("Conversation", conversation_id, "conversation_id")
        return found

    async def update_conversation(self, tenant: str, conversation_id: str, metadata: dict[str, Any]) -> dict[str, Any]:
        found = await self.store.update_conversation(tenant, conversation_id, metadata)
        if found is None:
            raise not_found("Conversation", conversation_id, "conversation_id")
        return found

    async def delete_conversation(self, tenant: str, conversation_id: str) -> dict[str, Any]:
        host = await self._conversation_host(tenant, conversation_id)
        if not await host.delete_conversation(tenant, conversation_id):
            raise not_found("Conversation", conversation_id, "conversation_id")
        return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}

    async def add_conversation_items(
        self, tenant: str, conversation_id: str, items: list[dict[str, Any]]
    ) -> dict[str, Any]:
        host = await self._conversation_host(tenant, conversation_id)
        added = await host.add_conversation_items(tenant, conversation_id, normalize_input(items))
        if added is None:
            raise not_found("Conversation", conversation_id, "conversation_id")
        return Page(data=added, has_more=False).to_list_object()

    async def list_conversation_items(
        self, tenant: str, conversation_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        page = await self.store.list_conversation_items(tenant, conversation_id, after=after, limit=limit, order=order)
        if page is None:
            raise not_found("Conversation", conversation_id, "conversation_id")
        return page

    async def get_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> dict[str, Any]:
        await self.get_conversation(tenant, conversation_id)
        item = await self.store.get_conversation_item(tenant, conversation_id, item_id)
        if item is None:
            raise not_found("Item", item_id, "item_id")
        return item

    async def delete_conversation_item(self, tenant: str, conversation_id: str, item_id: str) -> dict[str, Any]:
        """Returns the Conversation (what the API answers to an item delete)."""
        conversation = await self.get_conversation(tenant, conversation_id)
        host = await self._conversation_host(tenant, conversation_id)
        if not await host.delete_conversation_item(tenant, conversation_id, item_id):
            raise not_found("Item", item_id, "item_id")
        return conversation

    async def _conversation_host(self, tenant: str, conversation_id: str) -> HostClient:
        return await self.placement.host_for(conversation_id)
