"""The Agents API's execution environments (OpenAI's Agents API, beta): environments, their
files, and environment templates.

Routes (the paths ``client.beta.agents.environments`` of the ``openai`` SDK calls)::

    POST|GET         /v1/agents/environments                                create | list (after, limit, order, type)
    GET              /v1/agents/environments/{environment_id}               retrieve
    POST|GET         /v1/agents/environments/{environment_id}/files         add a file | list (limit, order, page, path)
    POST|GET         /v1/agents/environments/templates                      create | list (after, limit, order)
    GET|POST|DELETE  /v1/agents/environments/templates/{template_id}        retrieve | update | delete

This router goes before the agents' one in ``ROUTERS``: ``/v1/agents/environments`` would
otherwise be taken for an agent's id. The templates' paths are declared before the
environment's, for the same reason.

What the bodies may hold, the objects and what is refused: :mod:`troupe.protocol.environments`;
what provisioning does (containers, secrets): :mod:`troupe.runtime.environments`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request

from troupe.protocol import check_id_format
from troupe.protocol.ids import ENVIRONMENT, ENVIRONMENT_TEMPLATE
from troupe.runtime.environments import EnvironmentService

from ..dependencies import Order, PageSize, Tenant, json_body, runtime

__all__ = ["router"]

router = APIRouter()


def _environments(request: Request) -> EnvironmentService:
    return runtime(request).environments


# -- templates ----------------------------------------------------------------------------


@router.post("/v1/agents/environments/templates")
async def create_template(request: Request, who: Tenant) -> dict[str, Any]:
    return await _environments(request).create_template(who, await json_body(request, empty_ok=True))


@router.get("/v1/agents/environments/templates")
async def list_templates(
    request: Request, who: Tenant, after: str | None = None, limit: PageSize = 20, order: Order = "desc"
) -> dict[str, Any]:
    page = await _environments(request).list_templates(who, after=after, limit=limit, order=order)
    return page.to_list_object()


@router.get("/v1/agents/environments/templates/{template_id}")
async def get_template(request: Request, template_id: str, who: Tenant) -> dict[str, Any]:
    return await _environments(request).get_template(who, _template_id(template_id))


@router.post("/v1/agents/environments/templates/{template_id}")
async def update_template(request: Request, template_id: str, who: Tenant) -> dict[str, Any]:
    template_id = _template_id(template_id)
    return await _environments(request).update_template(who, template_id, await json_body(request, empty_ok=True))


@router.delete("/v1/agents/environments/templates/{template_id}")
async def delete_template(request: Request, template_id: str, who: Tenant) -> dict[str, Any]:
    return await _environments(request).delete_template(who, _template_id(template_id))


# -- environments -------------------------------------------------------------------------


@router.post("/v1/agents/environments")
async def create_environment(request: Request, who: Tenant) -> dict[str, Any]:
    return await _environments(request).create_environment(who, await json_body(request))


@router.get("/v1/agents/environments")
async def list_environments(
    request: Request, who: Tenant, after: str | None = None, limit: PageSize = 20, order: Order = "desc",
    type: Annotated[Literal["openai_hosted", "self_hosted"], Query(description="The hosting type.")] = "openai_hosted",
) -> dict[str, Any]:  # fmt: skip
    if type == "self_hosted":  # none are served: an honest empty list
        return {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}
    page = await _environments(request).list_environments(who, after=after, limit=limit, order=order)
    return page.to_list_object()


@router.get("/v1/agents/environments/{environment_id}")
async def get_environment(request: Request, environment_id: str, who: Tenant) -> dict[str, Any]:
    return await _environments(request).get_environment(who, _environment_id(environment_id))


@router.post("/v1/agents/environments/{environment_id}/files")
async def create_environment_file(request: Request, environment_id: str, who: Tenant) -> dict[str, Any]:
    environment_id = _environment_id(environment_id)
    return await _environments(request).create_file(who, environment_id, await json_body(request))


@router.get("/v1/agents/environments/{environment_id}/files")
async def list_environment_files(
    request: Request, environment_id: str, who: Tenant, limit: PageSize = 20, order: Order = "desc",
    page: str | None = None, path: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    return await _environments(request).list_files(who, _environment_id(environment_id), limit=limit, order=order,
                                                   page=page, path=path)  # fmt: skip


def _environment_id(value: str) -> str:
    return check_id_format(value, f"{ENVIRONMENT}_", "environment_id")


def _template_id(value: str) -> str:
    return check_id_format(value, f"{ENVIRONMENT_TEMPLATE}_", "environment_template_id")
