"""The HTTP routes the app serves, pinned: the (path, method) pairs of its OpenAPI document and
the routes it serves outside of it (operator routes, the console).

Captured from main before the routes moved out of ``create_app`` into a router per resource
(issue 27 item 3): moving a route between modules must neither add, drop nor rename one. A
route added on purpose is added here too.
"""

from __future__ import annotations

from fastapi.routing import APIRoute, APIWebSocketRoute
from starlette.routing import Route

from troupe.serve.app import create_app
from troupe.serve.config import ServerSettings


def _each(path: str, *methods: str) -> list[tuple[str, str]]:
    return [(path, method) for method in methods]


OPENAPI_ROUTES = {
    *_each("/v1/agents", "get", "post"),
    *_each("/v1/agents/{agent_id}", "delete", "get", "post"),
    *_each("/v1/agents/sessions", "get", "post"),
    *_each("/v1/agents/sessions/{session_id}", "delete", "get", "post"),
    *_each("/v1/agents/sessions/{session_id}/events", "get", "post"),
    *_each("/v1/agents/sessions/{session_id}/turns", "get"),
    *_each("/v1/agents/sessions/{session_id}/turns/{turn_id}", "get"),
    *_each("/v1/agents/sessions/{session_id}/turns/{turn_id}/items", "get"),
    *_each("/v1/agents/sessions/{session_id}/items", "get"),
    *_each("/v1/agents/sessions/{session_id}/subagents", "get"),
    *_each("/v1/agents/sessions/{session_id}/subagents/{subagent_id}", "get"),
    *_each("/v1/agents/sessions/{session_id}/subagents/{subagent_id}/turns", "get"),
    *_each("/v1/agents/sessions/{session_id}/subagents/{subagent_id}/turns/{turn_id}", "get"),
    *_each("/v1/agents/sessions/{session_id}/subagents/{subagent_id}/turns/{turn_id}/items", "get"),
    *_each("/v1/agents/sessions/{session_id}/subagents/{subagent_id}/items", "get"),
    *_each("/v1/agents/sessions/{session_id}/traces", "get"),
    *_each("/v1/agents/sessions/{session_id}/artifacts", "get"),
    *_each("/v1/agents/sessions/{session_id}/artifacts/{artifact_id}", "delete", "get"),
    *_each("/v1/agents/sessions/{session_id}/artifacts/{artifact_id}/content", "get"),
    *_each("/v1/agents/environments", "get", "post"),
    *_each("/v1/agents/environments/{environment_id}", "get"),
    *_each("/v1/agents/environments/{environment_id}/files", "get", "post"),
    *_each("/v1/agents/environments/templates", "get", "post"),
    *_each("/v1/agents/environments/templates/{template_id}", "delete", "get", "post"),
    *_each("/v1/agents/automations", "get", "post"),
    *_each("/v1/agents/automations/{automation_id}", "delete", "get", "post"),
    *_each("/v1/agents/automations/{automation_id}/pause", "post"),
    *_each("/v1/agents/automations/{automation_id}/resume", "post"),
    *_each("/v1/agents/automations/{automation_id}/invocations", "get", "post"),
    *_each("/v1/agents/automations/{automation_id}/invocations/{invocation_id}", "get"),
    *_each("/v1/containers", "get", "post"),
    *_each("/v1/containers/{container_id}", "delete", "get"),
    *_each("/v1/containers/{container_id}/files", "get", "post"),
    *_each("/v1/containers/{container_id}/files/{file_id}", "delete", "get"),
    *_each("/v1/containers/{container_id}/files/{file_id}/content", "get"),
    *_each("/v1/conversations", "post"),
    *_each("/v1/conversations/{conversation_id}", "delete", "get", "post"),
    *_each("/v1/conversations/{conversation_id}/items", "get", "post"),
    *_each("/v1/conversations/{conversation_id}/items/{item_id}", "delete", "get"),
    *_each("/v1/embeddings", "post"),
    *_each("/v1/files", "get", "post"),
    *_each("/v1/files/{file_id}", "delete", "get"),
    *_each("/v1/files/{file_id}/content", "get"),
    *_each("/v1/models", "get"),
    *_each("/v1/moderations", "post"),
    *_each("/v1/prompts", "get", "post"),
    *_each("/v1/prompts/{prompt_id}", "delete", "get", "post"),
    *_each("/v1/prompts/{prompt_id}/set-default-version", "post"),
    *_each("/v1/prompts/{prompt_id}/versions", "get"),
    *_each("/v1/responses", "get", "post"),
    *_each("/v1/responses/compact", "post"),
    *_each("/v1/responses/{response_id}", "delete", "get"),
    *_each("/v1/responses/{response_id}/cancel", "post"),
    *_each("/v1/responses/{response_id}/input_items", "get"),
    *_each("/v1/responses/{response_id}/step_traces", "get"),
    *_each("/v1/vector_stores", "get", "post"),
    *_each("/v1/vector_stores/{vector_store_id}", "delete", "get", "post"),
    *_each("/v1/vector_stores/{vector_store_id}/file_batches", "post"),
    *_each("/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}", "get"),
    *_each("/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}/cancel", "post"),
    *_each("/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}/files", "get"),
    *_each("/v1/vector_stores/{vector_store_id}/files", "get", "post"),
    *_each("/v1/vector_stores/{vector_store_id}/files/{file_id}", "delete", "get", "post"),
    *_each("/v1/vector_stores/{vector_store_id}/files/{file_id}/content", "get"),
    *_each("/v1/vector_stores/{vector_store_id}/search", "post"),
    *_each("/v1/vaults", "get", "post"),
    *_each("/v1/vaults/{vault_id}", "delete", "get", "post"),
    *_each("/v1/vaults/{vault_id}/credentials", "get", "post"),
    *_each("/v1/vaults/{vault_id}/credentials/{credential_id}", "delete", "get", "post"),
    *_each("/v1/webhook_endpoints", "get", "post"),
    *_each("/v1/webhook_endpoints/{endpoint_id}", "delete", "get", "post"),
    *_each("/v1/webhook_endpoints/{endpoint_id}/rotate_secret", "post"),
    *_each("/v1/webhook_endpoints/{endpoint_id}/test", "post"),
    *_each("/v1/webhook_endpoints/{endpoint_id}/deliveries", "get"),
    *_each("/v1/webhook_event_types", "get"),
}

UNDOCUMENTED_ROUTES = {
    ("/console", "get"),
    ("/console/static/{name}", "get"),
    ("/v1/troupe/console/me", "get"),
    ("/v1/troupe/console/responses", "get"),
    ("/v1/troupe/console/responses/{response_id}", "get"),
    ("/v1/troupe/console/threads/{thread_id}", "get"),
    ("/v1/troupe/console/sessions", "get"),
    ("/v1/troupe/console/sessions/{session_id}", "get"),
    ("/v1/troupe/console/stats", "get"),
    ("/v1/troupe/console/evals", "get"),
    ("/v1/troupe/console/evals/compare", "get"),
    ("/v1/troupe/console/evals/{run_id}", "get"),
    ("/health", "get"),
    ("/metrics", "get"),
    ("/v1/troupe/sql", "post"),
}
"""Served, and kept out of the OpenAPI document: operator routes and the console."""


def _app():
    return create_app(lambda: None, ServerSettings())


def test_the_openapi_document_lists_the_same_routes():
    paths = _app().openapi()["paths"]
    assert {(path, method) for path, operations in paths.items() for method in operations} == OPENAPI_ROUTES


def test_the_routes_outside_the_openapi_document_stay_served_and_undocumented():
    app = _app()
    served = {(r.path, m.lower()) for r in app.routes if isinstance(r, APIRoute) for m in r.methods}
    hidden = {
        (r.path, m.lower())
        for r in app.routes
        if isinstance(r, APIRoute) and not r.include_in_schema
        for m in r.methods
    }
    assert hidden == UNDOCUMENTED_ROUTES
    assert served == OPENAPI_ROUTES | UNDOCUMENTED_ROUTES


def test_the_app_matches_every_route_itself():
    # No router included lazily (FastAPI's include_router): each would match every request
    # through it once more, 15-90 us a request with the routers of troupe/serve/routes/.
    assert all(isinstance(r, (APIRoute, Route, APIWebSocketRoute)) for r in _app().router.routes)
    routes = _app().router.routes
    sockets = [i for i, r in enumerate(routes) if isinstance(r, APIWebSocketRoute)]
    assert [routes[i].path for i in sockets] == ["/v1/responses"]  # WebSocket mode (docs/websocket.md)
    http = [i for i, r in enumerate(routes) if isinstance(r, APIRoute) and r.path.startswith("/v1/responses")]
    assert http[0] == 0 and max(http) < sockets[0]  # tried after the Responses API's HTTP routes
