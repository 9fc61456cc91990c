"""The operator's routes, beside the OpenAI-compatible API (none in the OpenAPI description).

Routes::

    GET         /health                              liveness (never authenticated; 503 once the replica stops)
    GET         /metrics                             Prometheus metrics (never authenticated; README "Observing Troupe")
    POST        /v1/troupe/sql                       admin keys only: a read-only SQL query
    GET         /console, /v1/troupe/console/...     the operator's console and its JSON API (:mod:`troupe.console.api`)
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from troupe.console.api import console_router
from troupe.observe.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from troupe.protocol import InvalidRequest, ProtocolError
from troupe.storage.base import QueryError, QueryTimeout

from ..dependencies import admin, context, json_body, missing, object_body, runtime, viewer

__all__ = ["router"]

router = APIRouter()
# The console's routes as routes of this router (not include_router: see troupe.serve.app).
router.routes.extend(console_router(viewer=viewer, runtime_of=runtime).routes)


@router.get("/health", include_in_schema=False)
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    text = await runtime(request).metrics_text()
    if text is None:
        raise ProtocolError(
            "Metrics are turned off ([telemetry] metrics = false).", type="invalid_request_error", status=404
        )
    return Response(text, media_type=METRICS_CONTENT_TYPE)


@router.post("/v1/troupe/sql", include_in_schema=False, dependencies=[Depends(admin)])
async def run_sql(request: Request) -> dict[str, Any]:
    settings = context(request).settings
    body = object_body(await json_body(request), allowed=("query", "max_rows"))
    query = body.get("query")
    if query is None:
        raise missing("query")
    if not isinstance(query, str):
        raise InvalidRequest("Invalid type for 'query': expected a string.", param="query", code="invalid_type")
    max_rows = _max_rows(body.get("max_rows", settings.sql_max_rows), settings.sql_max_rows)
    try:
        result = await runtime(request).run_sql(query, max_rows=max_rows, timeout_s=settings.sql_timeout_s)
    except QueryTimeout as exc:
        # 400, not 408: the same query would time out again (408 invites a retry, which the
        # openai SDK and proxies make, and each would hold the store's thread as long again).
        message = f"{exc.message[:1].upper()}{exc.message[1:]} (limits.sql_timeout_s)."
        raise InvalidRequest(message, param="query", code="query_timeout") from exc
    except QueryError as exc:
        raise InvalidRequest(f"Invalid 'query': {exc.message}", param="query", code="invalid_query") from exc
    return result.to_json_object()


def _max_rows(value: Any, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest("Invalid type for 'max_rows': expected an integer.", param="max_rows", code="invalid_type")
    if not 1 <= value <= limit:
        raise InvalidRequest(
            f"Invalid 'max_rows': expected an integer from 1 to {limit} (limits.sql_max_rows), got {value}.",
            param="max_rows", code="invalid_value",
        )  # fmt: skip
    return value
