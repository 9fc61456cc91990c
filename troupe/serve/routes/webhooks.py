"""Webhook endpoints (``client.webhooks`` of the ``openai`` SDK) and their delivery log.

Routes::

    POST|GET         /v1/webhook_endpoints                        create | list (after, limit, order)
    GET|POST|DELETE  /v1/webhook_endpoints/{id}                   retrieve | update | delete
    POST             /v1/webhook_endpoints/{id}/rotate_secret     a new signing secret
    POST             /v1/webhook_endpoints/{id}/test              send a sample event now
    GET              /v1/webhook_endpoints/{id}/deliveries        the delivery log (Troupe's; after, limit, order)
    GET              /v1/webhook_event_types                      the event types Troupe sends

The signing secret is in the answers to a create and a rotation only. What the bodies may hold:
:mod:`troupe.protocol.webhooks`; secrets, URL policy and test: :mod:`troupe.runtime.webhooks`;
delivery: :mod:`troupe.runtime.webhook_delivery`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from troupe.protocol import check_id_format
from troupe.protocol.webhooks import ENDPOINT
from troupe.runtime.webhooks import WebhookService

from ..dependencies import Order, PageSize, Tenant, json_body, runtime

__all__ = ["router"]

router = APIRouter()


def _webhooks(request: Request) -> WebhookService:
    return runtime(request).webhooks


def _id(endpoint_id: str) -> str:
    return check_id_format(endpoint_id, f"{ENDPOINT}_", "webhook_endpoint_id")


@router.post("/v1/webhook_endpoints")
async def create_endpoint(request: Request, who: Tenant) -> dict[str, Any]:
    return await _webhooks(request).create(who, await json_body(request))


@router.get("/v1/webhook_endpoints")
async def list_endpoints(
    request: Request, who: Tenant, after: str | None = None, limit: PageSize = 20, order: Order = "desc"
) -> dict[str, Any]:
    return (await _webhooks(request).list(who, after=after, limit=limit, order=order)).to_list_object()


@router.get("/v1/webhook_endpoints/{endpoint_id}")
async def get_endpoint(request: Request, endpoint_id: str, who: Tenant) -> dict[str, Any]:
    return await _webhooks(request).get(who, _id(endpoint_id))


@router.post("/v1/webhook_endpoints/{endpoint_id}")
async def update_endpoint(request: Request, endpoint_id: str, who: Tenant) -> dict[str, Any]:
    endpoint_id = _id(endpoint_id)
    return await _webhooks(request).update(who, endpoint_id, await json_body(request, empty_ok=True))


@router.delete("/v1/webhook_endpoints/{endpoint_id}")
async def delete_endpoint(request: Request, endpoint_id: str, who: Tenant) -> dict[str, Any]:
    return await _webhooks(request).delete(who, _id(endpoint_id))


@router.post("/v1/webhook_endpoints/{endpoint_id}/rotate_secret")
async def rotate_secret(request: Request, endpoint_id: str, who: Tenant) -> dict[str, Any]:
    endpoint_id = _id(endpoint_id)
    return await _webhooks(request).rotate_secret(who, endpoint_id, await json_body(request, empty_ok=True))


@router.post("/v1/webhook_endpoints/{endpoint_id}/test")
async def test_endpoint(request: Request, endpoint_id: str, who: Tenant) -> dict[str, Any]:
    endpoint_id = _id(endpoint_id)
    return await _webhooks(request).test(who, endpoint_id, await json_body(request))


@router.get("/v1/webhook_endpoints/{endpoint_id}/deliveries")
async def list_deliveries(
    request: Request, endpoint_id: str, who: Tenant, after: str | None = None, limit: PageSize = 20,
    order: Order = "desc",
) -> dict[str, Any]:  # fmt: skip
    page = await _webhooks(request).deliveries(who, _id(endpoint_id), after=after, limit=limit, order=order)
    return page.to_list_object()


@router.get("/v1/webhook_event_types")
async def event_types(request: Request, who: Tenant) -> dict[str, Any]:
    return WebhookService.event_types()
