"""The Responses API: create (the agent loop runs), retrieve, follow, cancel, compact, list.

Routes::

    POST        /v1/responses                        create; SSE when the body says "stream": true
    GET         /v1/responses                        list (model, after, limit, order)
    GET|DELETE  /v1/responses/{id}                   retrieve (?stream=true: follow a background run) | delete
    POST        /v1/responses/compact                compact a transcript
    POST        /v1/responses/{id}/cancel            cancel a background response
    GET         /v1/responses/{id}/input_items       list the response's input items
    GET         /v1/responses/{id}/step_traces       Troupe extension: timed model/tool steps (JSON array)

``POST /v1/responses`` is the hot path: its route resolves one dependency (the tenant) and
reaches everything else with plain calls.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from troupe.agentloop.compaction import parse_compact_request
from troupe.protocol import SSE_MEDIA_TYPE, check_id_format, failed_response_error, parse_create_request
from troupe.protocol.ids import RESPONSE
from troupe.protocol.query_params import INTEGER, QueryBool
from troupe.runtime.facade import EventBatches

from ..dependencies import AppContext, Order, PageSize, Tenant, context, json_body, runtime
from ..sse import EventStreamResponse

__all__ = ["router"]

_RESPONSE_OR_EVENTS = {
    "description": "The Response as it stands; with `stream=true`, a background response's events after "
    "`starting_after` as Server-Sent Events (live while it runs, then from its event log).",
    "content": {"application/json": {"schema": {"type": "object"}}, SSE_MEDIA_TYPE: {"schema": {"type": "string"}}},
}

router = APIRouter()


@router.post("/v1/responses")
async def create_response(request: Request, who: Tenant) -> Response:
    app = context(request)
    body = parse_create_request(await json_body(request))
    app.tenant_limits.check_request(who)
    runtime = app.get_runtime()
    trace = _trace_context(request)  # with traces off, the runtime drops it
    # Streaming is the body's call, never the Accept header's: the Agents SDK sends
    # `Accept: application/json` with "stream": true.
    if body.stream:
        if body.background:  # the run goes on if this stream is dropped; GET resumes it
            app.stopping.release(request.scope)  # a stop does not wait for it either

            async def background_stream() -> EventBatches:
                started = await runtime.background(who, body, trace=trace)
                return await runtime.follow_response(who, started["id"])

            return await open_event_stream(app, who, background_stream)
        return await open_event_stream(app, who, lambda: runtime.stream(who, body, trace=trace))
    if body.background:
        return JSONResponse(await runtime.background(who, body, trace=trace))
    response = await runtime.respond(who, body, trace=trace)
    if response.get("status") == "failed":
        # A stream reports a failure in-band (error + response.failed); a plain request has
        # only its status code. The failed response stays stored for GET.
        raise failed_response_error(response.get("error"))
    return JSONResponse(response)


@router.get("/v1/responses")
async def list_responses(
    request: Request,
    who: Tenant,
    model: str | None = None,
    after: str | None = None,
    limit: PageSize = 20,
    order: Order = "desc",
) -> dict[str, Any]:
    page = await runtime(request).list_responses(who, model=model, after=after, limit=limit, order=order)
    return page.to_list_object()


@router.get("/v1/responses/{response_id}", response_model=None, responses={200: _RESPONSE_OR_EVENTS})
async def get_response(
    request: Request,
    response_id: str,
    who: Tenant,
    stream: QueryBool = False,
    starting_after: Annotated[int | None, INTEGER, Query(ge=-1)] = None,
    include_obfuscation: QueryBool = True,
) -> dict[str, Any] | EventStreamResponse:
    response_id = _response_id(response_id)
    if stream:  # a background response's events: live while it runs, then from its log
        app = context(request)
        app.stopping.release(request.scope)  # a stop does not wait for it: the run goes on at the next start
        return await open_event_stream(
            app, who, lambda: app.get_runtime().follow_response(who, response_id, starting_after)
        )
    return await runtime(request).get_response(who, response_id)


@router.post("/v1/responses/compact")
async def compact_response(request: Request, who: Tenant) -> dict[str, Any]:
    body = parse_compact_request(await json_body(request))
    context(request).tenant_limits.check_request(who)
    return await runtime(request).compact(who, body)


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(request: Request, response_id: str, who: Tenant) -> dict[str, Any]:
    return await runtime(request).cancel_response(who, _response_id(response_id))


@router.delete("/v1/responses/{response_id}")
async def delete_response(request: Request, response_id: str, who: Tenant) -> dict[str, Any]:
    return await runtime(request).delete_response(who, _response_id(response_id))


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(
    request: Request,
    response_id: str,
    who: Tenant,
    after: str | None = None,
    limit: PageSize = 20,
    order: Order = "desc",
) -> dict[str, Any]:
    page = await runtime(request).list_input_items(
        who, _response_id(response_id), after=after, limit=limit, order=order
    )
    return page.to_list_object()


@router.get("/v1/responses/{response_id}/step_traces")
async def step_traces(request: Request, response_id: str, who: Tenant) -> list[dict[str, Any]]:
    return await runtime(request).step_traces(who, _response_id(response_id))


async def open_event_stream(
    app: AppContext, who: str, opening: Callable[[], Awaitable[EventBatches]]
) -> EventStreamResponse:
    """The SSE answer for the batches ``opening()`` gives, once the tenant may open one more stream."""
    close_stream = app.tenant_limits.open_stream(who)
    try:
        batches = await opening()
    except BaseException:
        close_stream()
        raise
    settings = app.settings
    return EventStreamResponse(
        batches,
        stall_timeout_s=settings.stream_stall_timeout_s,
        keepalive_s=settings.stream_keepalive_s or None,
        on_close=close_stream,
    )


def _trace_context(request: Request) -> dict[str, str] | None:
    """The request's W3C trace context headers, if it sent a ``traceparent``."""
    traceparent = request.headers.get("traceparent")
    if traceparent is None:
        return None
    tracestate = request.headers.get("tracestate")
    return {"traceparent": traceparent, **({"tracestate": tracestate} if tracestate else {})}


def _response_id(value: str) -> str:
    return check_id_format(value, RESPONSE, "response_id")
