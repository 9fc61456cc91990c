"""The Moderations API: texts classified by one of the configured guardrails.

Routes::

    POST        /v1/moderations                      ``{"input": str | [str], "model"?}``

``model`` names a ``[[guardrails]]`` entry (or a ``moderation`` one's ``upstream_model``);
without it, the first ``moderation`` guardrail answers (docs/guardrails.md).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from ..dependencies import Tenant, context, json_body, object_body

__all__ = ["router"]

router = APIRouter()


@router.post("/v1/moderations")
async def create_moderation(request: Request, who: Tenant) -> dict[str, Any]:
    body = object_body(await json_body(request), allowed=("input", "model"))
    return await context(request).get_runtime().moderations(who, body)
