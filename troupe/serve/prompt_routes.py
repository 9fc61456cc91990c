"""The HTTP routes of the Prompts API: stored prompts with versions and ``{{variable}}`` placeholders.

Routes (installed on the app by :func:`install_prompt_routes`, from ``create_app``)::

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

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Query, Request

from troupe.actors.runtime import Runtime
from troupe.protocol import check_id_format
from troupe.protocol.query_params import QueryInt
from troupe.protocol.prompts import (
    MAX_VERSION,
    PROMPT,
    parse_prompt_create,
    parse_prompt_update,
    parse_set_default_version,
)

__all__ = ["install_prompt_routes"]

PageSize = Annotated[QueryInt, Query(ge=1, le=100, description="Page size, 1–100.")]
Order = Annotated[Literal["asc", "desc"], Query(description="`asc` or `desc` (by creation time).")]
Version = Annotated[
    QueryInt | None, Query(ge=1, le=MAX_VERSION, description="The version to retrieve; default: the default version.")
]


def install_prompt_routes(
    app: FastAPI, get_runtime: Callable[[], Runtime], *, who: Any, json_body: Callable[[Request], Awaitable[Any]]
) -> None:
    """Add the routes (module docstring) to ``app``.

    Args:
        get_runtime: the runtime (its prompt calls, :class:`troupe.actors.prompts.PromptCalls`).
        who: the dependency that authenticates a request and gives its tenant.
        json_body: reads a request's JSON body within the server's limits.
    """

    @app.post("/v1/prompts")
    async def create_prompt(request: Request, who: str = who) -> dict[str, Any]:
        content = parse_prompt_create(await json_body(request))
        return await get_runtime().create_prompt(who, content)

    @app.get("/v1/prompts")
    async def list_prompts(
        after: str | None = None, limit: PageSize = 20, order: Order = "desc", who: str = who
    ) -> dict[str, Any]:
        page = await get_runtime().list_prompts(who, after=after, limit=limit, order=order)
        return page.to_list_object()

    @app.get("/v1/prompts/{prompt_id}")
    async def get_prompt(prompt_id: str, version: Version = None, who: str = who) -> dict[str, Any]:
        return await get_runtime().get_prompt(who, _prompt_id(prompt_id), version)

    @app.post("/v1/prompts/{prompt_id}")
    async def update_prompt(request: Request, prompt_id: str, who: str = who) -> dict[str, Any]:
        prompt_id = _prompt_id(prompt_id)
        content, version, set_default = parse_prompt_update(await json_body(request))
        return await get_runtime().update_prompt(
            who, prompt_id, content, from_version=version, set_default=set_default
        )

    @app.delete("/v1/prompts/{prompt_id}")
    async def delete_prompt(prompt_id: str, who: str = who) -> dict[str, Any]:
        return await get_runtime().delete_prompt(who, _prompt_id(prompt_id))

    @app.get("/v1/prompts/{prompt_id}/versions")
    async def list_prompt_versions(prompt_id: str, who: str = who) -> dict[str, Any]:
        return await get_runtime().list_prompt_versions(who, _prompt_id(prompt_id))

    @app.post("/v1/prompts/{prompt_id}/set-default-version")
    async def set_default_version(request: Request, prompt_id: str, who: str = who) -> dict[str, Any]:
        prompt_id = _prompt_id(prompt_id)
        version = parse_set_default_version(await json_body(request))
        return await get_runtime().set_default_prompt_version(who, prompt_id, version)


def _prompt_id(value: str) -> str:
    return check_id_format(value, PROMPT, "prompt_id")
