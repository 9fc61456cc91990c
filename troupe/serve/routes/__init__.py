"""The HTTP routes, one ``APIRouter`` per resource; :func:`troupe.serve.app.create_app` includes them all.

- :mod:`.operator` — ``/health``, ``/metrics``, ``POST /v1/troupe/sql``, the console (not in the OpenAPI description)
- :mod:`.models` — ``/v1/models``
- :mod:`.moderations` — ``POST /v1/moderations`` (texts classified by a configured guardrail)
- :mod:`.responses` — ``/v1/responses`` (create, stream, follow, cancel, compact, list, input items, step traces)
- :mod:`.conversations` — ``/v1/conversations`` and their items
- :mod:`.files` — ``/v1/files``, ``/v1/vector_stores`` and ``/v1/embeddings``
- :mod:`.prompts` — ``/v1/prompts``
- :mod:`.containers` — ``/v1/containers`` and their files
- :mod:`.automations` — ``/v1/agents/automations`` (the Agents API's scheduled agents; before :mod:`.agents`,
  whose ``/v1/agents/{agent_id}`` would take the path)
- :mod:`.agents` — ``/v1/agents`` (the Agents API's saved agents)
- :mod:`.artifacts` — ``/v1/agents/sessions/{id}/artifacts`` (the files completed session turns published)
- :mod:`.vaults` — ``/v1/vaults`` and their credentials (the Agents API's vaults)
- :mod:`.webhooks` — ``/v1/webhook_endpoints`` and their delivery log, ``/v1/webhook_event_types``

Each module's routes are plain functions on its ``router``; what they share (the caller's
tenant, the JSON body, the runtime) comes from :mod:`troupe.serve.dependencies`. A new
endpoint goes in its resource's module (a new resource: a module here, added to
:data:`ROUTERS`), its OpenAPI description in :mod:`troupe.serve.openapi`.
"""

from __future__ import annotations

from fastapi import APIRouter

from . import (
    agents,
    artifacts,
    automations,
    containers,
    conversations,
    environments,
    files,
    models,
    moderations,
    operator,
    prompts,
    responses,
    responses_ws,
    sessions,
    vaults,
    webhooks,
)

__all__ = ["ROUTERS"]

ROUTERS: tuple[APIRouter, ...] = (
    operator.router,
    models.router,
    moderations.router,
    responses.router,
    responses_ws.router,  # after the HTTP routes of /v1/responses: a socket's route is tried last
    conversations.router,
    files.router,
    prompts.router,
    containers.router,
    automations.router,
    sessions.router,
    artifacts.router,
    environments.router,  # before the agents': /v1/agents/environments is no agent's id
    agents.router,
    vaults.router,
    webhooks.router,
)
"""Every router, in the order the app includes them (the OpenAPI document lists paths in this order)."""
