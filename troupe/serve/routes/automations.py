"""The Agents API's automations (OpenAI's Agents API, beta): scheduled agents.

Routes (the paths ``client.beta.agents.automations`` of the ``openai`` SDK calls)::

    POST|GET         /v1/agents/automations                          create | list (after, limit, order, session_id)
    GET|POST|DELETE  /v1/agents/automations/{automation_id}          retrieve | update | delete
    POST             /v1/agents/automations/{automation_id}/pause    pause
    POST             /v1/agents/automations/{automation_id}/resume   resume
    POST|GET         /v1/agents/automations/{automation_id}/invocations   invoke now | list
    GET              /v1/agents/automations/{automation_id}/invocations/{invocation_id}

This router goes before :mod:`.agents`' in ``ROUTERS``: ``/v1/agents/automations`` would
otherwise be read as an agent's id. What the bodies may hold and what is refused:
:mod:`troupe.protocol.automations`; the schedule, the claim and the firing:
:mod:`troupe.runtime.automations`.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request

from troupe.protocol import check_id_format
from troupe.protocol.automations import (
    AUTOMATION,
    AUTOMATION_INVOCATION,
    parse_automation_create,
    parse_automation_update,
)
from troupe.runtime.automations import AutomationService

from ..dependencies import Order, PageSize, Tenant, json_body, runtime

__all__ = ["router"]

router = APIRouter()

_ONE = "/v1/agents/automations/{automation_id}"


def _automations(request: Request) -> AutomationService:
    return runtime(request).automations


@router.post("/v1/agents/automations")
async def create_automation(request: Request, who: Tenant) -> dict[str, Any]:
    definition = parse_automation_create(await json_body(request), now=time.time())
    return await _automations(request).create_automation(who, definition)


@router.get("/v1/agents/automations")
async def list_automations(
    request: Request, who: Tenant, after: str | None = None, limit: PageSize = 20, order: Order = "desc",
    session_id: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    page = await _automations(request).list_automations(who, after=after, limit=limit, order=order,
                                                        session_id=session_id)  # fmt: skip
    return page.to_list_object()


@router.get(_ONE)
async def get_automation(request: Request, automation_id: str, who: Tenant) -> dict[str, Any]:
    return await _automations(request).get_automation(who, _automation_id(automation_id))


@router.post(_ONE)
async def update_automation(request: Request, automation_id: str, who: Tenant) -> dict[str, Any]:
    automation_id = _automation_id(automation_id)
    changes = parse_automation_update(await json_body(request, empty_ok=True), now=time.time())
    return await _automations(request).update_automation(who, automation_id, changes)


@router.delete(_ONE)
async def delete_automation(request: Request, automation_id: str, who: Tenant) -> dict[str, Any]:
    return await _automations(request).delete_automation(who, _automation_id(automation_id))


@router.post(f"{_ONE}/pause")
async def pause_automation(request: Request, automation_id: str, who: Tenant) -> dict[str, Any]:
    return await _automations(request).pause_automation(who, _automation_id(automation_id))


@router.post(f"{_ONE}/resume")
async def resume_automation(request: Request, automation_id: str, who: Tenant) -> dict[str, Any]:
    return await _automations(request).resume_automation(who, _automation_id(automation_id))


@router.post(f"{_ONE}/invocations")
async def create_invocation(request: Request, automation_id: str, who: Tenant) -> dict[str, Any]:
    return await _automations(request).invoke(who, _automation_id(automation_id))


@router.get(f"{_ONE}/invocations")
async def list_invocations(
    request: Request, automation_id: str, who: Tenant, after: str | None = None, limit: PageSize = 20,
    order: Order = "desc",
) -> dict[str, Any]:  # fmt: skip
    page = await _automations(request).list_invocations(who, _automation_id(automation_id), after=after, limit=limit,
                                                        order=order)  # fmt: skip
    return page.to_list_object()


@router.get(f"{_ONE}/invocations/{{invocation_id}}")
async def get_invocation(request: Request, automation_id: str, invocation_id: str, who: Tenant) -> dict[str, Any]:
    invocation_id = check_id_format(invocation_id, f"{AUTOMATION_INVOCATION}_", "invocation_id")
    return await _automations(request).get_invocation(who, _automation_id(automation_id), invocation_id)


def _automation_id(value: str) -> str:
    return check_id_format(value, f"{AUTOMATION}_", "automation_id")
