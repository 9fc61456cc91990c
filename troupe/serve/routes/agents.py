"""The Agents API's agents (OpenAI's Agents API, beta): saved agent definitions.

Routes (the paths ``client.beta.agents`` of the ``openai`` SDK calls)::

    POST|GET         /v1/agents               create | list (after, limit, order)
    GET|POST|DELETE  /v1/agents/{agent_id}    retrieve | update | delete

The SDK sends ``OpenAI-Beta: agents=v1`` with every call; it is accepted, not required (nothing
in OpenAI's SDK or docs says a server must refuse a call without it).

The SDK's other resources under ``/v1/agents/``: sessions (:mod:`.sessions`), environments
(:mod:`.environments`) and automations (:mod:`.automations`), whose routers go before this one in
``ROUTERS``. A collection path of one not served (none today) would be taken here for an agent
id: naming it in ``_NOT_YET`` makes it answer 404, as an unknown route does.

What the bodies may hold, the object and what is refused: :mod:`troupe.protocol.agents`; what
depends on the deployment (the model, the MCP servers): :mod:`troupe.runtime.agents`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.exceptions import HTTPException

from troupe.protocol import check_id_format
from troupe.protocol.agents import parse_agent_create, parse_agent_update
from troupe.protocol.ids import AGENT
from troupe.runtime.agents import AgentService

from ..dependencies import Order, PageSize, Tenant, json_body, runtime

__all__ = ["router"]

_NOT_YET: frozenset[str] = frozenset()
"""The SDK's resources under ``/v1/agents/`` that are not served yet."""

router = APIRouter()


def _agents(request: Request) -> AgentService:
    return runtime(request).agents


@router.post("/v1/agents")
async def create_agent(request: Request, who: Tenant) -> dict[str, Any]:
    definition = parse_agent_create(await json_body(request))
    return await _agents(request).create_agent(who, definition)


@router.get("/v1/agents")
async def list_agents(
    request: Request, who: Tenant, after: str | None = None, limit: PageSize = 20, order: Order = "desc"
) -> dict[str, Any]:
    page = await _agents(request).list_agents(who, after=after, limit=limit, order=order)
    return page.to_list_object()


@router.get("/v1/agents/{agent_id}")
async def get_agent(request: Request, agent_id: str, who: Tenant) -> dict[str, Any]:
    return await _agents(request).get_agent(who, _agent_id(agent_id))


@router.post("/v1/agents/{agent_id}")
async def update_agent(request: Request, agent_id: str, who: Tenant) -> dict[str, Any]:
    agent_id = _agent_id(agent_id)
    changes = parse_agent_update(await json_body(request, empty_ok=True))
    return await _agents(request).update_agent(who, agent_id, changes)


@router.delete("/v1/agents/{agent_id}")
async def delete_agent(request: Request, agent_id: str, who: Tenant) -> dict[str, Any]:
    return await _agents(request).delete_agent(who, _agent_id(agent_id))


def _agent_id(value: str) -> str:
    if value in _NOT_YET:
        raise HTTPException(status_code=404)  # /v1/agents/sessions is no agent's id: an unknown route
    return check_id_format(value, f"{AGENT}_", "agent_id")
