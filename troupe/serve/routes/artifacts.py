"""Session artifacts (OpenAI's Agents API, beta: ``client.beta.agents.sessions.artifacts``): the
immutable files completed turns of a session in an ``openai_hosted`` environment published.

Routes::

    GET     /v1/agents/sessions/{session_id}/artifacts                          list (after, limit, order, environment_id)
    GET     /v1/agents/sessions/{session_id}/artifacts/{artifact_id}            retrieve
    DELETE  /v1/agents/sessions/{session_id}/artifacts/{artifact_id}            delete (the copy; the live file stays)
    GET     /v1/agents/sessions/{session_id}/artifacts/{artifact_id}/content    the bytes

What is published, and when: :mod:`troupe.runtime.artifacts`; the objects: :mod:`troupe.protocol.artifacts`.
An unknown session (another tenant's, a subagent) is a 404 naming ``session_id``, an unknown
artifact one naming ``artifact_id``.
"""

from __future__ import annotations

import mimetypes
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from troupe.protocol import check_id_format
from troupe.protocol.artifacts import check_artifact_id, check_environment_filter
from troupe.protocol.ids import AGENT_SESSION
from troupe.runtime.artifacts import ArtifactService

from ..dependencies import Order, PageSize, Tenant, runtime

__all__ = ["router"]

router = APIRouter()


def _artifacts(request: Request) -> ArtifactService:
    return runtime(request).artifacts


def _session_id(value: str) -> str:
    return check_id_format(value, f"{AGENT_SESSION}_", "session_id")


@router.get("/v1/agents/sessions/{session_id}/artifacts")
async def list_artifacts(
    request: Request, session_id: str, who: Tenant, after: str | None = None, limit: PageSize = 20,
    order: Order = "desc", environment_id: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    page = await _artifacts(request).list_artifacts(who, _session_id(session_id), after=after, limit=limit,
                                                    order=order, environment_id=check_environment_filter(environment_id))  # fmt: skip
    return page.to_list_object()


@router.get("/v1/agents/sessions/{session_id}/artifacts/{artifact_id}")
async def get_artifact(request: Request, session_id: str, artifact_id: str, who: Tenant) -> dict[str, Any]:
    return await _artifacts(request).get_artifact(who, _session_id(session_id), check_artifact_id(artifact_id))


@router.delete("/v1/agents/sessions/{session_id}/artifacts/{artifact_id}")
async def delete_artifact(request: Request, session_id: str, artifact_id: str, who: Tenant) -> dict[str, Any]:
    return await _artifacts(request).delete_artifact(who, _session_id(session_id), check_artifact_id(artifact_id))


@router.get("/v1/agents/sessions/{session_id}/artifacts/{artifact_id}/content", response_class=Response)
async def artifact_content(request: Request, session_id: str, artifact_id: str, who: Tenant) -> Response:
    path, data = await _artifacts(request).artifact_content(who, _session_id(session_id), check_artifact_id(artifact_id))
    media, _ = mimetypes.guess_type(path, strict=False)
    return Response(data, media_type=media or "application/octet-stream")
