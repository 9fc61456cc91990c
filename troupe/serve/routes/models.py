"""The Models API: the names of the models the server's configuration declares.

Routes::

    GET         /v1/models                           model names (``owned_by: troupe``)
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from ..dependencies import Tenant, context

__all__ = ["router"]

router = APIRouter()


@router.get("/v1/models")
async def list_models(request: Request, who: Tenant) -> dict[str, Any]:
    app = context(request)
    data = [
        {"id": name, "object": "model", "created": app.created, "owned_by": "troupe"}
        for name in app.get_runtime().model_names()
    ]
    return {"object": "list", "data": data}
