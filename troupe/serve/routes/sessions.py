"""The Agents API's sessions (OpenAI's Agents API, beta): an agent run over many turns.

Routes (the paths ``client.beta.agents.sessions`` of the ``openai`` SDK calls)::

    POST|GET         /v1/agents/sessions                              create (stream) | list
    GET|POST|DELETE  /v1/agents/sessions/{session_id}                 retrieve | update | delete
    POST|GET         /v1/agents/sessions/{session_id}/events          send input (202) | follow (SSE)
    GET              /v1/agents/sessions/{session_id}/turns           list
    GET              /v1/agents/sessions/{session_id}/turns/{turn_id} retrieve
    GET              /v1/agents/sessions/{session_id}/turns/{turn_id}/items, …/items
    GET              /v1/agents/sessions/{session_id}/subagents[/{subagent_id}[/turns[/{turn_id}[/items]]|/items]]
    GET              /v1/agents/sessions/{session_id}/traces          list (OTLP JSON, one per root turn)

Lists take ``after``, ``limit`` and ``order``; the sessions' list also ``agent_id`` and
``metadata[key]=value`` pairs. The bodies, objects and events: :mod:`troupe.protocol.sessions`;
how turns run: :mod:`troupe.runtime.sessions`; subagents: :mod:`troupe.runtime.subagents`;
traces: :mod:`troupe.runtime.session_traces`; the ``artifacts`` resource: :mod:`.artifacts`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from troupe.protocol import InvalidRequest, check_id_format
from troupe.protocol.ids import AGENT_SESSION, TURN
from troupe.protocol.query_params import QueryBool
from troupe.protocol.request import check_metadata
from troupe.protocol.sessions import parse_session_create, parse_session_events, parse_session_update
from troupe.runtime.session_traces import SessionTraces
from troupe.runtime.sessions import SessionService

from ..dependencies import Order, PageSize, Tenant, context, json_body, runtime
from .responses import open_event_stream

__all__ = ["router"]

router = APIRouter()


def _sessions(request: Request) -> SessionService:
    return runtime(request).sessions


@router.post("/v1/agents/sessions", response_model=None)
async def create_session(request: Request, who: Tenant) -> Any:
    parsed = parse_session_create(await json_body(request))
    sessions = _sessions(request)
    if parsed["stream"]:
        return await open_event_stream(context(request), who, lambda: sessions.stream_new_session(who, parsed))
    return await sessions.create_session(who, parsed)


@router.get("/v1/agents/sessions")
async def list_sessions(
    request: Request, who: Tenant, after: str | None = None, limit: PageSize = 20, order: Order = "desc",
    agent_id: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    page = await _sessions(request).list_sessions(who, after=after, limit=limit, order=order, agent_id=agent_id,
                                                  metadata=_metadata_filter(request))  # fmt: skip
    return page.to_list_object()


@router.get("/v1/agents/sessions/{session_id}")
async def get_session(request: Request, session_id: str, who: Tenant) -> dict[str, Any]:
    return await _sessions(request).get_session(who, _session_id(session_id))


@router.post("/v1/agents/sessions/{session_id}")
async def update_session(request: Request, session_id: str, who: Tenant) -> dict[str, Any]:
    session_id = _session_id(session_id)
    changes = parse_session_update(await json_body(request, empty_ok=True))
    return await _sessions(request).update_session(who, session_id, changes)


@router.delete("/v1/agents/sessions/{session_id}")
async def delete_session(request: Request, session_id: str, who: Tenant) -> dict[str, Any]:
    return await _sessions(request).delete_session(who, _session_id(session_id))


@router.post("/v1/agents/sessions/{session_id}/events", status_code=202, response_class=Response)
async def send_events(request: Request, session_id: str, who: Tenant) -> Response:
    session_id = _session_id(session_id)
    events = parse_session_events(await json_body(request))
    await _sessions(request).submit_events(who, session_id, events)
    return Response(status_code=202)


@router.get("/v1/agents/sessions/{session_id}/events", response_model=None)
async def follow_events(request: Request, session_id: str, who: Tenant, include_obfuscation: QueryBool = True) -> Any:
    # include_obfuscation: Troupe's events carry no obfuscation padding, which the field makes optional.
    session_id = _session_id(session_id)
    sessions = _sessions(request)
    return await open_event_stream(context(request), who, lambda: sessions.open_events(who, session_id))


@router.get("/v1/agents/sessions/{session_id}/turns")
async def list_turns(
    request: Request, session_id: str, who: Tenant, after: str | None = None, limit: PageSize = 20, order: Order = "desc"
) -> dict[str, Any]:
    page = await _sessions(request).list_turns(who, _session_id(session_id), after=after, limit=limit, order=order)
    return page.to_list_object()


@router.get("/v1/agents/sessions/{session_id}/turns/{turn_id}")
async def get_turn(request: Request, session_id: str, turn_id: str, who: Tenant) -> dict[str, Any]:
    return await _sessions(request).get_turn(who, _session_id(session_id), _turn_id(turn_id))


@router.get("/v1/agents/sessions/{session_id}/items")
async def list_items(
    request: Request, session_id: str, who: Tenant, after: str | None = None, limit: PageSize = 20, order: Order = "desc"
) -> dict[str, Any]:
    page = await _sessions(request).list_items(who, _session_id(session_id), after=after, limit=limit, order=order)
    return page.to_list_object()


@router.get("/v1/agents/sessions/{session_id}/turns/{turn_id}/items")
async def list_turn_items(
    request: Request, session_id: str, turn_id: str, who: Tenant, after: str | None = None, limit: PageSize = 20,
    order: Order = "desc",
) -> dict[str, Any]:  # fmt: skip
    page = await _sessions(request).list_items(who, _session_id(session_id), after=after, limit=limit, order=order,
                                               turn_id=_turn_id(turn_id))  # fmt: skip
    return page.to_list_object()


@router.get("/v1/agents/sessions/{session_id}/subagents")
async def list_subagents(
    request: Request, session_id: str, who: Tenant, after: str | None = None, limit: PageSize = 20, order: Order = "desc"
) -> dict[str, Any]:
    page = await _sessions(request).list_subagents(who, _session_id(session_id), after=after, limit=limit, order=order)
    return page.to_list_object()


@router.get("/v1/agents/sessions/{session_id}/subagents/{subagent_id}")
async def get_subagent(request: Request, session_id: str, subagent_id: str, who: Tenant) -> dict[str, Any]:
    return await _sessions(request).get_subagent(who, _session_id(session_id), _subagent_id(subagent_id))


@router.get("/v1/agents/sessions/{session_id}/subagents/{subagent_id}/turns")
async def list_subagent_turns(
    request: Request, session_id: str, subagent_id: str, who: Tenant, after: str | None = None, limit: PageSize = 20,
    order: Order = "desc",
) -> dict[str, Any]:  # fmt: skip
    page = await _sessions(request).list_turns(who, _subagent_id(subagent_id), after=after, limit=limit, order=order,
                                               subagent_of=_session_id(session_id))  # fmt: skip
    return page.to_list_object()


@router.get("/v1/agents/sessions/{session_id}/subagents/{subagent_id}/turns/{turn_id}")
async def get_subagent_turn(request: Request, session_id: str, subagent_id: str, turn_id: str, who: Tenant) -> dict[str, Any]:
    return await _sessions(request).get_turn(who, _subagent_id(subagent_id), _turn_id(turn_id),
                                             subagent_of=_session_id(session_id))  # fmt: skip


@router.get("/v1/agents/sessions/{session_id}/subagents/{subagent_id}/items")
async def list_subagent_items(
    request: Request, session_id: str, subagent_id: str, who: Tenant, after: str | None = None, limit: PageSize = 20,
    order: Order = "desc",
) -> dict[str, Any]:  # fmt: skip
    page = await _sessions(request).list_items(who, _subagent_id(subagent_id), after=after, limit=limit, order=order,
                                               subagent_of=_session_id(session_id))  # fmt: skip
    return page.to_list_object()


@router.get("/v1/agents/sessions/{session_id}/subagents/{subagent_id}/turns/{turn_id}/items")
async def list_subagent_turn_items(
    request: Request, session_id: str, subagent_id: str, turn_id: str, who: Tenant, after: str | None = None,
    limit: PageSize = 20, order: Order = "desc",
) -> dict[str, Any]:  # fmt: skip
    page = await _sessions(request).list_items(who, _subagent_id(subagent_id), after=after, limit=limit, order=order,
                                               turn_id=_turn_id(turn_id), subagent_of=_session_id(session_id))  # fmt: skip
    return page.to_list_object()


@router.get("/v1/agents/sessions/{session_id}/traces")
async def list_traces(
    request: Request, session_id: str, who: Tenant, after: str | None = None, limit: PageSize = 20, order: Order = "desc"
) -> dict[str, Any]:
    traces = SessionTraces(_sessions(request))
    page = await traces.list_traces(who, _session_id(session_id), after=after, limit=limit, order=order)
    return page.to_list_object()


def _metadata_filter(request: Request) -> dict[str, str] | None:
    """``metadata[key]=value`` query pairs, checked as metadata is."""
    pairs = {k[len("metadata["):-1]: v for k, v in request.query_params.multi_items()
             if k.startswith("metadata[") and k.endswith("]")}  # fmt: skip
    if not pairs:
        return None
    try:
        return check_metadata(pairs)
    except InvalidRequest as exc:
        raise InvalidRequest(exc.message, param="metadata", code=exc.code) from exc


def _session_id(value: str) -> str:
    return check_id_format(value, f"{AGENT_SESSION}_", "session_id")


def _subagent_id(value: str) -> str:
    return check_id_format(value, f"{AGENT_SESSION}_", "subagent_id")


def _turn_id(value: str) -> str:
    return check_id_format(value, f"{TURN}_", "turn_id")
