"""The HTTP routes of the Prompts API: stored prompts with versions and ``{{variable}}`` placeholders.

Routes::

    POST        /v1/prompts                                  create {prompt?, messages?, variables?}: version 1
    GET         /v1/prompts                                  list, each as its default version (after, limit, order)
    GET         /v1/prompts/{prompt_id}                      retrieve (?version=N; default: the default version)
    POST        /v1/prompts/{prompt_id}                      a new version {…, version: the latest, set_as_default?}
    DELETE      /v1/prompts/{prompt_id}                      delete, every version
    GET         /v1/prompts/{prompt_id}/versions             every version, oldest first
    POST        /v1/prompts/{prompt_id}/set-default-version  {version}

The shape is Llama Stack's ``/v1/prompts`` with OpenAI's conventions (``id``, ``object``, the
error body). A version is never changed: an update adds the next one, from the latest (else
409 ``version_conflict``), so two clients updating at once cannot overwrite each other.
``prompt: {id, version?, variables?}`` on ``POST /v1/responses`` uses them
(:mod:`troupe.protocol.prompts`).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from troupe.protocol import check_id_format
from troupe.protocol.prompts import (
    MAX_VERSION,
    PROMPT,
    parse_prompt_create,
    parse_prompt_update,
    parse_set_default_version,
)
from troupe.protocol.query_params import QueryInt

from ..dependencies import Order, PageSize, Tenant, json_body, runtime

__all__ = ["router"]

Version = Annotated[
    QueryInt | None, Query(ge=1, le=MAX_VERSION, description="The version to retrieve; default: the default version.")
]


router = APIRouter()


@router.post("/v1/prompts")
async def create_prompt(request: Request, who: Tenant) -> dict[str, Any]:
    content = parse_prompt_create(await json_body(request))
    return await runtime(request).create_prompt(who, content)


@router.get("/v1/prompts")
async def list_prompts(
    request: Request, who: Tenant, after: str | None = None, limit: PageSize = 20, order: Order = "desc"
) -> dict[str, Any]:
    page = await runtime(request).list_prompts(who, after=after, limit=limit, order=order)
    return page.to_list_object()


@router.get("/v1/prompts/{prompt_id}")
async def get_prompt(request: Request, prompt_id: str, who: Tenant, version: Version = None) -> dict[str, Any]:
    return await runtime(request).get_prompt(who, _prompt_id(prompt_id), version)


@router.post("/v1/prompts/{prompt_id}")
async def update_prompt(request: Request, prompt_id: str, who: Tenant) -> dict[str, Any]:
    prompt_id = _prompt_id(prompt_id)
    content, version, set_default = parse_prompt_update(await json_body(request))
    return await runtime(request).update_prompt(who, prompt_id, content, from_version=version, set_default=set_default)


@router.delete("/v1/prompts/{prompt_id}")
async def delete_prompt(request: Request, prompt_id: str, who: Tenant) -> dict[str, Any]:
    return await runtime(request).delete_prompt(who, _prompt_id(prompt_id))


@router.get("/v1/prompts/{prompt_id}/versions")
async def list_prompt_versions(request: Request, prompt_id: str, who: Tenant) -> dict[str, Any]:
    return await runtime(request).list_prompt_versions(who, _prompt_id(prompt_id))


@router.post("/v1/prompts/{prompt_id}/set-default-version")
async def set_default_version(request: Request, prompt_id: str, who: Tenant) -> dict[str, Any]:
    prompt_id = _prompt_id(prompt_id)
    version = parse_set_default_version(await json_body(request))
    return await runtime(request).set_default_prompt_version(who, prompt_id, version)


def _prompt_id(value: str) -> str:
    return check_id_format(value, PROMPT, "prompt_id")
