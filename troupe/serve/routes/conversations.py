"""The Conversations API: a conversation's metadata and its items.

Routes::

    POST        /v1/conversations                    create {items?, metadata?}
    GET|POST|DELETE /v1/conversations/{id}           retrieve | update {metadata} | delete
    GET|POST    /v1/conversations/{id}/items         list | add {items: [≤20]}
    GET|DELETE  /v1/conversations/{id}/items/{item}  retrieve | delete (answers the Conversation)

A response joins a conversation through ``POST /v1/responses`` with ``conversation``
(:mod:`.responses`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from troupe.protocol import InvalidRequest, check_id_format, check_metadata, validate_input_items
from troupe.protocol.ids import CONVERSATION

from ..bounds import MAX_ITEMS
from ..dependencies import Order, PageSize, Tenant, json_body, missing, object_body, runtime

__all__ = ["router"]

router = APIRouter()


@router.post("/v1/conversations")
async def create_conversation(request: Request, who: Tenant) -> dict[str, Any]:
    body = object_body(await json_body(request, empty_ok=True), allowed=("items", "metadata"))
    items = _items(body, required=False)
    metadata = check_metadata(body.get("metadata"))
    return await runtime(request).create_conversation(who, items=items, metadata=metadata)


@router.get("/v1/conversations/{conversation_id}")
async def get_conversation(request: Request, conversation_id: str, who: Tenant) -> dict[str, Any]:
    return await runtime(request).get_conversation(who, _conversation_id(conversation_id))


@router.post("/v1/conversations/{conversation_id}")
async def update_conversation(request: Request, conversation_id: str, who: Tenant) -> dict[str, Any]:
    body = object_body(await json_body(request), allowed=("metadata",))
    if "metadata" not in body:
        raise missing("metadata")
    return await runtime(request).update_conversation(
        who, _conversation_id(conversation_id), check_metadata(body["metadata"]) or {}
    )


@router.delete("/v1/conversations/{conversation_id}")
async def delete_conversation(request: Request, conversation_id: str, who: Tenant) -> dict[str, Any]:
    return await runtime(request).delete_conversation(who, _conversation_id(conversation_id))


@router.post("/v1/conversations/{conversation_id}/items")
async def add_items(request: Request, conversation_id: str, who: Tenant) -> dict[str, Any]:
    body = object_body(await json_body(request), allowed=("items",))
    return await runtime(request).add_conversation_items(
        who, _conversation_id(conversation_id), _items(body, required=True)
    )


@router.get("/v1/conversations/{conversation_id}/items")
async def list_items(
    request: Request,
    conversation_id: str,
    who: Tenant,
    after: str | None = None,
    limit: PageSize = 20,
    order: Order = "desc",
) -> dict[str, Any]:
    page = await runtime(request).list_conversation_items(
        who, _conversation_id(conversation_id), after=after, limit=limit, order=order
    )
    return page.to_list_object()


@router.get("/v1/conversations/{conversation_id}/items/{item_id}")
async def get_item(request: Request, conversation_id: str, item_id: str, who: Tenant) -> dict[str, Any]:
    return await runtime(request).get_conversation_item(who, _conversation_id(conversation_id), item_id)


@router.delete("/v1/conversations/{conversation_id}/items/{item_id}")
async def delete_item(request: Request, conversation_id: str, item_id: str, who: Tenant) -> dict[str, Any]:
    return await runtime(request).delete_conversation_item(who, _conversation_id(conversation_id), item_id)


def _conversation_id(value: str) -> str:
    return check_id_format(value, CONVERSATION, "conversation_id")


def _items(body: dict[str, Any], *, required: bool) -> list[dict[str, Any]]:
    items = body.get("items")
    if items is None:
        if required:
            raise missing("items")
        return []
    if not isinstance(items, list):
        raise InvalidRequest("Invalid type for 'items': expected an array.", param="items", code="invalid_type")
    if len(items) > MAX_ITEMS:
        message = f"Invalid 'items': array too long. Expected at most {MAX_ITEMS} items, got {len(items)}."
        raise InvalidRequest(message, param="items", code="array_above_max_length")
    validate_input_items(items, param="items")
    return items
