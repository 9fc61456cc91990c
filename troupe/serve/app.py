"""The HTTP API: OpenAI's Responses and Conversations endpoints over a :class:`Runtime`.

:func:`create_app` builds the FastAPI app: the error handlers (:mod:`.errors`), the OpenAPI
description (:mod:`.openapi`), the middlewares that may refuse a request before any route runs
(:mod:`.stopping`, then admission: :mod:`.limits`), what the routes share
(:class:`~.dependencies.AppContext`), and one router per resource (:mod:`.routes`)::

    routes/operator.py       /health, /metrics, POST /v1/troupe/sql, the console (none in the OpenAPI description)
    routes/models.py         GET /v1/models
    routes/responses.py      /v1/responses: create (SSE with "stream": true), retrieve, follow, cancel, compact, …
    routes/conversations.py  /v1/conversations and their items
    routes/files.py          /v1/files, /v1/vector_stores, /v1/embeddings
    routes/prompts.py        /v1/prompts
    dependencies.py          the caller's tenant, the JSON body, the runtime; shared query parameters
    sse.py                   EventStreamResponse, the Server-Sent Events answer of a streamed response

Every error answers OpenAI's body ``{"error": {message, type, param, code}}``, with
``x-should-retry: false`` unless it is a 429 or 503: the ``openai`` SDK retries 5xx by
default, which would re-run a non-idempotent agent loop. Once the replica is stopping
(:mod:`.stopping`), every request answers 503 with ``Retry-After``.

Tests serve the app with uvicorn over ``Runtime.local``; :mod:`.deployment` mounts it on Ray Serve.

Example::

    runtime = Runtime.local(RuntimeSettings(storage_path=":memory:"))
    app = create_app(lambda: runtime, ServerSettings())
    uvicorn.run(app, port=8000)
"""

from __future__ import annotations

import time
from collections.abc import Callable

from troupe.runtime.facade import Runtime

from .config import ServerSettings
from .dependencies import AppContext, TroupeApp
from .errors import error_response, install_error_handlers
from .limits import Admission, AdmissionMiddleware, TenantLimits
from .openapi import install_openapi
from .replica_header import ReplicaHeaderMiddleware
from .routes import ROUTERS
from .stopping import Stopping, StoppingMiddleware

__all__ = ["create_app", "error_response"]


def create_app(get_runtime: Callable[[], Runtime], settings: ServerSettings) -> TroupeApp:
    """Build the FastAPI app.

    Args:
        get_runtime: returns the :class:`Runtime` to serve; called on every request, so
            the runtime may be built after the app (Serve builds it in the replica).
        settings: ``api_keys`` turns authentication on (key → tenant); empty: off.
            ``admin_keys`` turns the operator endpoint (``POST /v1/troupe/sql``) on, and lets
            the console show every tenant.

    Returns:
        The app (a FastAPI app); it owns no resources (closing the runtime is the caller's
        job). ``app.state.stopping`` stops the replica (:mod:`.deployment`); ``app.context``
        is what its routes share.

    Example::

        app = create_app(lambda: runtime, ServerSettings(api_keys={"sk-a": "alice"}))
    """
    app = TroupeApp(
        title="Troupe",
        description="The OpenAI Responses and Conversations APIs with a server-side agent loop.",
        version="0.1.0",
    )
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
    if settings.num_replicas > 1:  # which replica hosts the request's thread (replica_header.py)
        app.add_middleware(ReplicaHeaderMiddleware)
    app.context = AppContext(
        get_runtime=get_runtime,
        settings=settings,
        keys=dict(settings.api_keys),
        admin_keys=tuple(settings.admin_keys),
        tenant_limits=TenantLimits(
            requests_per_minute=settings.tenant_requests_per_minute, max_streams=settings.tenant_max_streams
        ),
        stopping=stopping,
        created=int(time.time()),
    )
    # The routers' routes themselves, not app.include_router(router): FastAPI (0.165) includes a
    # router lazily, matching every request through it once more, and with this many routers
    # that cost 15–90 µs a request (measured). Flat, a request is matched as before the split.
    for router in ROUTERS:
        app.router.routes.extend(router.routes)
    # The Responses API's routes first: FastAPI tries every route in order, and so does Serve,
    # to name each request's route in its metrics, each a regex match. POST /v1/responses 21st
    # cost 60 µs a request in those two scans (measured), 2% of a stored non-streamed response.
    hot = [route for route in app.router.routes if getattr(route, "path", "").startswith("/v1/responses")]
    app.router.routes[:] = hot + [route for route in app.router.routes if route not in hot]
    return app
