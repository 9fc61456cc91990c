"""The HTTP API: OpenAI's Responses and Conversations endpoints over a :class:`Runtime`.

Routes (OpenAI's Responses and Conversations APIs)::

    POST        /v1/responses                        create; SSE when the body says "stream": true
    GET         /v1/responses                        list (model, after, limit, order)
    GET|DELETE  /v1/responses/{id}                   retrieve | delete
    GET         /v1/responses/{id}/input_items       list the response's input items
    GET         /v1/responses/{id}/step_traces       Troupe extension: timed model/tool steps (JSON array)
    POST        /v1/conversations                    create {items?, metadata?}
    GET|POST|DELETE /v1/conversations/{id}           retrieve | update {metadata} | delete
    GET|POST    /v1/conversations/{id}/items         list | add {items: [≤20]}
    GET|DELETE  /v1/conversations/{id}/items/{item}  retrieve | delete (answers the Conversation)
    GET         /v1/models, /health                  model names | liveness (never authenticated)
    POST        /v1/troupe/sql                       Troupe extension, admin keys only: a read-only SQL query
    GET         /console, /v1/troupe/console/...     the operator's console and its JSON API (troupe.console)
    GET         /metrics                             Prometheus metrics (never authenticated; README "Observing Troupe")
    …/v1/files, /v1/vector_stores, /v1/embeddings    Files, Vector Stores, Embeddings: see :mod:`.rag_routes`
    …/v1/prompts                         stored prompts, their versions and variables: see :mod:`.prompt_routes`

Every error answers OpenAI's body ``{"error": {message, type, param, code}}``, with
``x-should-retry: false`` unless it is a 429 or 503: the ``openai`` SDK retries 5xx by
default, which would re-run a non-idempotent agent loop. Once the replica is stopping
(:mod:`.stopping`), every request answers 503 with ``Retry-After``.

Tests serve the app with uvicorn over ``Runtime.local``; :mod:`.deployment` mounts it on Ray Serve.

Example::

    runtime = Runtime.local(RuntimeSettings(storage_path=":memory:"))
    app = create_app(lambda: runtime, ServerSettings())
    uvicorn.run(app, port=8000)

One long module because every HTTP route of the API is here, with the error and streaming plumbing they share.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from troupe.actors.runtime import EventBatches, Runtime
from troupe.agentloop.compaction import parse_compact_request
from troupe.console import Viewer, install_console
from troupe.observe.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from troupe.protocol import (
    SSE_MEDIA_TYPE,
    AuthenticationFailed,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    ProtocolError,
    check_id_format,
    check_metadata,
    decode_json_body,
    failed_response_error,
    parse_create_request,
    validate_input_items,
)
from troupe.protocol.ids import CONVERSATION, RESPONSE
from troupe.protocol.query_params import INTEGER, QueryBool, QueryInt
from troupe.storage.base import QueryError, QueryTimeout

from .bodies import read_within
from .bounds import MAX_ITEMS
from .config import ServerSettings
from .errors import error_response, install_error_handlers
from .limits import Admission, AdmissionMiddleware, TenantLimits
from .openapi import install_openapi
from .prompt_routes import install_prompt_routes
from .rag_routes import install_rag_routes
from .sse import EventStreamResponse
from .stopping import Stopping, StoppingMiddleware

__all__ = ["create_app", "error_response"]


_RESPONSE_OR_EVENTS = {
    "description": "The Response as it stands; with `stream=true`, a background response's events after "
    "`starting_after` as Server-Sent Events (live while it runs, then from its event log).",
    "content": {"application/json": {"schema": {"type": "object"}}, SSE_MEDIA_TYPE: {"schema": {"type": "string"}}},
}
LimitParam = Annotated[QueryInt, Query(ge=1, le=100, description="Page size, 1–100.")]
OrderParam = Annotated[Literal["asc", "desc"], Query(description="`asc` or `desc` (by creation time).")]


def create_app(get_runtime: Callable[[], Runtime], settings: ServerSettings) -> FastAPI:
    """Build the FastAPI app.

    Args:
        get_runtime: returns the :class:`Runtime` to serve; called on every request, so
            the runtime may be built after the app (Serve builds it in the replica).
        settings: ``api_keys`` turns authentication on (key → tenant); empty: off.
            ``admin_keys`` turns the operator endpoint (``POST /v1/troupe/sql``) on, and lets
            the console show every tenant.

    Returns:
        The app; it owns no resources (closing the runtime is the caller's job).

    Example::

        app = create_app(lambda: runtime, ServerSettings(api_keys={"sk-a": "alice"}))
    """
    app = FastAPI(
        title="Troupe",
        description="The OpenAI Responses and Conversations APIs with a server-side agent loop.",
        version="0.1.0",
    )
    keys = dict(settings.api_keys)
    admin_keys = tuple(settings.admin_keys)
    created = int(time.time())
    install_error_handlers(app)
    install_openapi(app)
    admission = Admission(
        max_active=settings.max_active_responses,
        max_waiting=settings.max_waiting_responses,
        max_wait_s=settings.max_wait_s,
    )
    app.add_middleware(AdmissionMiddleware, admission=admission, render=error_response)
    app.state.admission = admission
    # Outside admission (added last, so it runs first): a stopping replica refuses a request
    # before it takes or waits for a slot.
    stopping = Stopping()
    app.add_middleware(StoppingMiddleware, stopping=stopping, render=error_response)
    app.state.stopping = stopping
    tenant_limits = TenantLimits(
        requests_per_minute=settings.tenant_requests_per_minute, max_streams=settings.tenant_max_streams
    )

    async def json_body(request: Request, *, empty_ok: bool = False) -> Any:
        raw = await _read_body(request, settings.max_body_bytes, empty_ok=empty_ok)
        return decode_json_body(raw, max_depth=settings.max_json_depth)

    async def tenant(request: Request) -> str:
        # A dependency, so that it runs (and may answer 401) before parameters are validated
        # (a parameter sent twice is refused here, once the caller is known).
        who = _authenticate(request, keys)
        _reject_repeated(request)
        return who

    async def admin(request: Request) -> None:
        # A dependency too: a refusal comes before the body is read.
        _authenticate_admin(request, admin_keys, keys)

    # A default, not an Annotated alias: string annotations (PEP 563) are resolved
    # against module globals, where a local alias does not exist.
    who_dep = Depends(tenant)

    async def viewer(request: Request) -> Viewer:
        return _viewer(request, keys, admin_keys)

    install_console(app, get_runtime, viewer)

    @app.get("/health", include_in_schema=False)
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        text = await get_runtime().metrics_text()
        if text is None:
            raise ProtocolError(
                "Metrics are turned off ([telemetry] metrics = false).", type="invalid_request_error", status=404
            )
        return Response(text, media_type=METRICS_CONTENT_TYPE)

    @app.get("/v1/models")
    async def list_models(who: str = who_dep) -> dict[str, Any]:
        data = [
            {"id": name, "object": "model", "created": created, "owned_by": "troupe"}
            for name in get_runtime().model_names()
        ]
        return {"object": "list", "data": data}

    # -- responses ---------------------------------------------------------------

    @app.post("/v1/responses")
    async def create_response(request: Request, who: str = who_dep) -> Response:
        body = parse_create_request(await json_body(request))
        tenant_limits.check_request(who)
        runtime = get_runtime()
        trace = _trace_context(request)  # with traces off, the runtime drops it
        traced = {"trace": trace} if trace is not None else {}
        # Streaming is the body's call, never the Accept header's: the Agents SDK sends
        # `Accept: application/json` with "stream": true.
        if body.stream:
            if body.background:  # the run goes on if this stream is dropped; GET resumes it
                stopping.release(request.scope)  # a stop does not wait for it either

                async def background_stream() -> EventBatches:
                    started = await runtime.background(who, body, **traced)
                    return await runtime.follow_response(who, started["id"])

                return await event_stream(who, background_stream)
            return await event_stream(who, lambda: runtime.stream(who, body, **traced))
        if body.background:
            return JSONResponse(await runtime.background(who, body, **traced))
        response = await runtime.respond(who, body, **traced)
        if response.get("status") == "failed":
            # A stream reports a failure in-band (error + response.failed); a plain request has
            # only its status code. The failed response stays stored for GET.
            raise failed_response_error(response.get("error"))
        return JSONResponse(response)

    @app.get("/v1/responses")
    async def list_responses(
        model: str | None = None,
        after: str | None = None,
        limit: LimitParam = 20,
        order: OrderParam = "desc",
        who: str = who_dep,
    ) -> dict[str, Any]:
        page = await get_runtime().list_responses(who, model=model, after=after, limit=limit, order=order)
        return page.to_list_object()

    async def event_stream(who: str, opening: Callable[[], Awaitable[EventBatches]]) -> EventStreamResponse:
        """The SSE answer for the batches ``opening()`` gives, once the tenant may open one more stream."""
        close_stream = tenant_limits.open_stream(who)
        try:
            batches = await opening()
        except BaseException:
            close_stream()
            raise
        return EventStreamResponse(
            batches,
            stall_timeout_s=settings.stream_stall_timeout_s,
            keepalive_s=settings.stream_keepalive_s or None,
            on_close=close_stream,
        )

    @app.get("/v1/responses/{response_id}", response_model=None, responses={200: _RESPONSE_OR_EVENTS})
    async def get_response(
        request: Request,
        response_id: str,
        stream: QueryBool = False,
        starting_after: Annotated[int | None, INTEGER, Query(ge=-1)] = None,
        include_obfuscation: QueryBool = True,
        who: str = who_dep,
    ) -> dict[str, Any] | EventStreamResponse:
        response_id = _response_id(response_id)
        if stream:  # a background response's events: live while it runs, then from its log
            stopping.release(request.scope)  # a stop does not wait for it: the run goes on at the next start
            return await event_stream(who, lambda: get_runtime().follow_response(who, response_id, starting_after))
        return await get_runtime().get_response(who, response_id)

    @app.post("/v1/responses/compact")
    async def compact_response(request: Request, who: str = who_dep) -> dict[str, Any]:
        body = parse_compact_request(await json_body(request))
        tenant_limits.check_request(who)
        return await get_runtime().compact(who, body)

    @app.post("/v1/responses/{response_id}/cancel")
    async def cancel_response(response_id: str, who: str = who_dep) -> dict[str, Any]:
        return await get_runtime().cancel_response(who, _response_id(response_id))

    @app.delete("/v1/responses/{response_id}")
    async def delete_response(response_id: str, who: str = who_dep) -> dict[str, Any]:
        return await get_runtime().delete_response(who, _response_id(response_id))

    @app.get("/v1/responses/{response_id}/input_items")
    async def list_input_items(
        response_id: str,
        after: str | None = None,
        limit: LimitParam = 20,
        order: OrderParam = "desc",
        who: str = who_dep,
    ) -> dict[str, Any]:
        page = await get_runtime().list_input_items(who, _response_id(response_id), after=after, limit=limit, order=order)
        return page.to_list_object()

    @app.get("/v1/responses/{response_id}/step_traces")
    async def step_traces(response_id: str, who: str = who_dep) -> list[dict[str, Any]]:
        return await get_runtime().step_traces(who, _response_id(response_id))

    # -- conversations -----------------------------------------------------------

    @app.post("/v1/conversations")
    async def create_conversation(request: Request, who: str = who_dep) -> dict[str, Any]:
        body = _object_body(await json_body(request, empty_ok=True), allowed=("items", "metadata"))
        items = _items(body, required=False)
        metadata = check_metadata(body.get("metadata"))
        return await get_runtime().create_conversation(who, items=items, metadata=metadata)

    @app.get("/v1/conversations/{conversation_id}")
    async def get_conversation(conversation_id: str, who: str = who_dep) -> dict[str, Any]:
        return await get_runtime().get_conversation(who, _conversation_id(conversation_id))

    @app.post("/v1/conversations/{conversation_id}")
    async def update_conversation(request: Request, conversation_id: str, who: str = who_dep) -> dict[str, Any]:
        body = _object_body(await json_body(request), allowed=("metadata",))
        if "metadata" not in body:
            raise _missing("metadata")
        return await get_runtime().update_conversation(who, _conversation_id(conversation_id), check_metadata(body["metadata"]) or {})

    @app.delete("/v1/conversations/{conversation_id}")
    async def delete_conversation(conversation_id: str, who: str = who_dep) -> dict[str, Any]:
        return await get_runtime().delete_conversation(who, _conversation_id(conversation_id))

    @app.post("/v1/conversations/{conversation_id}/items")
    async def add_items(request: Request, conversation_id: str, who: str = who_dep) -> dict[str, Any]:
        body = _object_body(await json_body(request), allowed=("items",))
        return await get_runtime().add_conversation_items(who, _conversation_id(conversation_id), _items(body, required=True))

    @app.get("/v1/conversations/{conversation_id}/items")
    async def list_items(
        conversation_id: str,
        after: str | None = None,
        limit: LimitParam = 20,
        order: OrderParam = "desc",
        who: str = who_dep,
    ) -> dict[str, Any]:
        page = await get_runtime().list_conversation_items(who, _conversation_id(conversation_id), after=after, limit=limit, order=order)
        return page.to_list_object()

    @app.get("/v1/conversations/{conversation_id}/items/{item_id}")
    async def get_item(conversation_id: str, item_id: str, who: str = who_dep) -> dict[str, Any]:
        return await get_runtime().get_conversation_item(who, _conversation_id(conversation_id), item_id)

    @app.delete("/v1/conversations/{conversation_id}/items/{item_id}")
    async def delete_item(conversation_id: str, item_id: str, who: str = who_dep) -> dict[str, Any]:
        return await get_runtime().delete_conversation_item(who, _conversation_id(conversation_id), item_id)

    # -- operator endpoints ---------------------------------------------------------

    # Not in the OpenAPI description: an operator's tool, beside the OpenAI-compatible API.
    @app.post("/v1/troupe/sql", include_in_schema=False, dependencies=[Depends(admin)])
    async def run_sql(request: Request) -> dict[str, Any]:
        body = _object_body(await json_body(request), allowed=("query", "max_rows"))
        query = body.get("query")
        if query is None:
            raise _missing("query")
        if not isinstance(query, str):
            raise InvalidRequest("Invalid type for 'query': expected a string.", param="query", code="invalid_type")
        max_rows = _max_rows(body.get("max_rows", settings.sql_max_rows), settings.sql_max_rows)
        try:
            result = await get_runtime().run_sql(query, max_rows=max_rows, timeout_s=settings.sql_timeout_s)
        except QueryTimeout as exc:
            # 400, not 408: the same query would time out again (408 invites a retry, which the
            # openai SDK and proxies make, and each would hold the store's thread as long again).
            message = f"{exc.message[:1].upper()}{exc.message[1:]} (limits.sql_timeout_s)."
            raise InvalidRequest(message, param="query", code="query_timeout") from exc
        except QueryError as exc:
            raise InvalidRequest(f"Invalid 'query': {exc.message}", param="query", code="invalid_query") from exc
        return result.to_json_object()

    # Files, vector stores and embeddings (troupe/serve/rag_routes.py); stored prompts (prompt_routes.py).
    install_rag_routes(app, get_runtime, who=who_dep, json_body=json_body, max_file_bytes=settings.max_file_bytes)
    install_prompt_routes(app, get_runtime, who=who_dep, json_body=json_body)
    return app


# -- request helpers -------------------------------------------------------------------


def _authenticate(request: Request, keys: dict[str, str]) -> str:
    """The caller's tenant: ``""`` with auth off, else the tenant of its bearer key."""
    if not keys:
        return ""
    token = _bearer_token(request)
    found = _matching(token, keys)
    if not found:
        raise _incorrect_key(token)
    return keys[found[0]]


def _authenticate_admin(request: Request, admin_keys: tuple[str, ...], keys: dict[str, str]) -> None:
    """Let a caller with an admin key through: 404 while no admin key is configured, 403 for a
    tenant's key, 401 for any other."""
    if not admin_keys:
        raise NotFound(
            "The operator endpoints are off: configure an admin key ([auth] admin_keys, or "
            "TROUPE_ADMIN_KEYS) to turn them on."
        )
    token = _bearer_token(request)
    if _matching(token, admin_keys):
        return
    if _matching(token, keys):
        raise PermissionDenied("This endpoint needs an admin key; the key provided is a tenant's.")
    raise _incorrect_key(token)
def _viewer(request: Request, keys: dict[str, str], admin_keys: tuple[str, ...]) -> Viewer:
    """Who looks at the console: an admin key sees every tenant; any other caller is its
    tenant, authenticated as by the API (so with no ``keys``, anyone is tenant ``""``)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if admin_keys and scheme.lower() == "bearer" and _matching(token.strip(), admin_keys):
        viewer = Viewer(tenant="", admin=True, keys=bool(keys))
    else:
        viewer = Viewer(tenant=_authenticate(request, keys), admin=False, keys=bool(keys))
    _reject_repeated(request)
    return viewer


def _bearer_token(request: Request) -> str:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthenticationFailed(
            "You didn't provide an API key. Provide it in an Authorization header using Bearer auth "
            "(Authorization: Bearer YOUR_KEY)."
        )
    return token


def _matching(token: str, keys: Iterable[str]) -> list[str]:
    """The keys equal to ``token``, compared with every key: the timing tells nothing about
    which (if any) matched."""
    return [key for key in keys if hmac.compare_digest(key.encode(), token.encode())]


def _incorrect_key(token: str) -> AuthenticationFailed:
    hint = token[:3] + "…" + token[-4:] if len(token) > 8 else "…"
    return AuthenticationFailed(f"Incorrect API key provided: {hint}.")


def _max_rows(value: Any, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest("Invalid type for 'max_rows': expected an integer.", param="max_rows", code="invalid_type")
    if not 1 <= value <= limit:
        raise InvalidRequest(
            f"Invalid 'max_rows': expected an integer from 1 to {limit} (limits.sql_max_rows), got {value}.",
            param="max_rows", code="invalid_value",
        )  # fmt: skip
    return value


def _reject_repeated(request: Request) -> None:
    """Refuse a query parameter the route declares, sent more than once (FastAPI would read the
    last value and drop the others unseen). The authenticating dependencies call it, so that a
    401 still comes first and a malformed value's 400 next.

    Raises:
        RequestValidationError: naming the first such parameter (answered 400 naming it).
    """
    if not request.scope.get("query_string"):  # most requests (every create): nothing to look at
        return
    dependant = getattr(request.scope.get("route"), "dependant", None)
    if dependant is None:
        return
    declared = {field.alias for field in _query_fields(dependant)}
    seen: set[str] = set()
    for name, value in request.query_params.multi_items():
        if name in declared:
            if name in seen:
                raise RequestValidationError([{
                    "type": "query_repeated", "loc": ("query", name), "input": value,
                    "msg": "sent more than once; send it once",
                }])  # fmt: skip
            seen.add(name)


def _query_fields(dependant: Any) -> list[Any]:
    """A route's query parameters, its dependencies' included."""
    return [*dependant.query_params, *(f for sub in dependant.dependencies for f in _query_fields(sub))]


def _trace_context(request: Request) -> dict[str, str] | None:
    """The request's W3C trace context headers, if it sent a ``traceparent``."""
    traceparent = request.headers.get("traceparent")
    if traceparent is None:
        return None
    tracestate = request.headers.get("tracestate")
    return {"traceparent": traceparent, **({"tracestate": tracestate} if tracestate else {})}


async def _read_body(request: Request, limit: int, *, empty_ok: bool) -> bytes:
    """The body, refused with 413 once it passes ``limit`` bytes (before all of it is read)."""
    raw = await read_within(request, limit, lambda: _too_large(limit))
    return b"{}" if empty_ok and not raw.strip() else raw


def _too_large(limit: int) -> ProtocolError:
    return ProtocolError(
        f"The request body is too large: at most {limit} bytes are allowed.",
        type="invalid_request_error", code="request_too_large", status=413,
    )


def _response_id(value: str) -> str:
    return check_id_format(value, RESPONSE, "response_id")


def _conversation_id(value: str) -> str:
    return check_id_format(value, CONVERSATION, "conversation_id")


def _missing(param: str) -> InvalidRequest:
    return InvalidRequest(f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")


def _object_body(body: Any, *, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_type")
    for key in body:
        if key not in allowed:
            raise InvalidRequest(f"Unknown parameter: '{key}'.", param=key, code="unknown_parameter")
    return body


def _items(body: dict[str, Any], *, required: bool) -> list[dict[str, Any]]:
    items = body.get("items")
    if items is None:
        if required:
            raise _missing("items")
        return []
    if not isinstance(items, list):
        raise InvalidRequest("Invalid type for 'items': expected an array.", param="items", code="invalid_type")
    if len(items) > MAX_ITEMS:
        message = f"Invalid 'items': array too long. Expected at most {MAX_ITEMS} items, got {len(items)}."
        raise InvalidRequest(message, param="items", code="array_above_max_length")
    validate_input_items(items, param="items")
    return items
