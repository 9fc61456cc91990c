"""A session's traces (``GET /v1/agents/sessions/{id}/traces``): :class:`SessionTraces`.

Ray-free. Reads what a session's turns stored (each turn's responses, their step traces and
timings, the turns of the subagents its calls started) and hands it to the pure tree builder,
:func:`troupe.observe.session_trace.session_trace`, which writes one OTLP JSON trace per root
turn. Nothing is stored for traces: a trace is read from the responses every time, the same
ids each time. A response still running shows the steps its checkpoints stored.

Example::

    page = await SessionTraces(runtime.sessions).list_traces("", "sess_…", limit=5, order="asc")
    page.data[0]["otlp"]["resourceSpans"][0]["scopeSpans"][0]["spans"]
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Protocol

from troupe.observe.session_trace import ResponseRun, TurnRun, session_trace
from troupe.protocol import InvalidRequest, NotFound
from troupe.protocol.sessions import session_not_found, turn_status
from troupe.runtime.store_client import StoreClient
from troupe.storage import Order, Page, ResponseFilter, StepTrace

__all__ = ["MAX_PAGE_BYTES", "SessionTraces", "trace_object"]

MAX_PAGE_BYTES = 16 * 1024 * 1024
"""A page of traces is at most 16 MiB of JSON (OpenAI's limit): a larger one is refused, and
the client asks for fewer (``limit``)."""


class _Runtime(Protocol):
    async def get_response(self, tenant: str, response_id: str) -> dict[str, Any]: ...


class _Subagents(Protocol):
    async def children(self, tenant: str, parent: dict[str, Any]) -> list[dict[str, Any]]: ...


class Sessions(Protocol):
    """What traces read of the sessions (:class:`~troupe.runtime.sessions.SessionService` is it)."""

    store: StoreClient

    @property
    def runtime(self) -> _Runtime: ...
    @property
    def subagents(self) -> _Subagents: ...
    async def all_turns(self, tenant: str, session_id: str) -> list[dict[str, Any]]: ...


def trace_object(session_id: str, turn: dict[str, Any], otlp: dict[str, Any]) -> dict[str, Any]:
    """The SDK's ``SessionTrace``."""
    return {"id": turn["id"], "object": "agent.session.trace", "created_at": int(turn["created_at"]),
            "session_id": session_id, "otlp": otlp}  # fmt: skip


class SessionTraces:
    """The traces of ``sessions``' sessions, one per root turn."""

    def __init__(self, sessions: Sessions, *, max_page_bytes: int = MAX_PAGE_BYTES) -> None:
        self.sessions = sessions
        self.store = sessions.store
        self.max_page_bytes = max_page_bytes

    async def list_traces(
        self, tenant: str, session_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """A page of the session's traces (``agent.session.trace``), by turn as its turns list
        (``after``: a turn id; an unknown one gives an empty page).

        Raises:
            NotFound: no such session of this tenant (a subagent is not one: ``session_id``).
            InvalidRequest: the page would be more than ``max_page_bytes`` of JSON (``limit``).
        """
        session = await self.store.get_session(tenant, session_id)
        if session is None or session.get("parent_id") is not None:
            raise session_not_found(session_id)
        page = await self.store.list_turns(tenant, session_id, after=after, limit=limit, order=order)
        children = await self._children(tenant, session)
        runs = await asyncio.gather(*(self._root_run(tenant, session, turn, children) for turn in page.data))
        data = [trace_object(session_id, turn, session_trace(run)) for turn, run in zip(page.data, runs, strict=True)]
        size = len(json.dumps(data))
        if size > self.max_page_bytes:
            raise InvalidRequest(f"These {len(data)} traces are {size} bytes of JSON, more than the "
                                 f"{self.max_page_bytes} a page may hold: request fewer traces.", param="limit",
                                 code="invalid_value")  # fmt: skip
        return Page(data=data, has_more=page.has_more)

    async def _root_run(
        self, tenant: str, session: dict[str, Any], turn: dict[str, Any],
        children: list[tuple[dict[str, Any], list[dict[str, Any]]]],
    ) -> TurnRun:  # fmt: skip
        """A root turn, with the subagent turns started from its start to the next root turn's."""
        later = await self.store.list_turns(tenant, turn["session_id"], after=turn["id"], limit=1, order="asc")
        return await self._turn_run(tenant, session, turn, later.data[0]["created_at"] if later.data else None, children)

    async def _children(self, tenant: str, session: dict[str, Any]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
        """The session's subagents and their turns, oldest first."""
        children = await self.sessions.subagents.children(tenant, session)
        turns = await asyncio.gather(*(self.sessions.all_turns(tenant, child["id"]) for child in children))
        return list(zip(children, turns, strict=True))

    async def _turn_run(
        self, tenant: str, session: dict[str, Any], turn: dict[str, Any], until: float | None,
        children: list[tuple[dict[str, Any], list[dict[str, Any]]]],
    ) -> TurnRun:  # fmt: skip
        """``turn`` of ``session``, with the turns of ``children`` (subagents, and their turns)
        that started from its start to ``until`` (the next root turn's start)."""
        responses: list[ResponseRun] = []
        for response_id in turn["responses"]:
            previous = responses[-1].ended_at if responses else None
            run = await self._response_run(tenant, response_id, previous or turn["created_at"])
            if run is not None:
                responses.append(run)
        started = [(child, t) for child, ts in children for t in ts
                   if t["created_at"] >= turn["created_at"] and (until is None or t["created_at"] < until)]  # fmt: skip
        nested = []
        for child, child_turn in started:
            grandchildren = await self._children(tenant, child)  # one level today: none
            nested.append(await self._turn_run(tenant, child, child_turn, None, grandchildren))
        last = responses[-1].response if responses and len(responses) == len(turn["responses"]) else None
        return TurnRun(session_id=session["id"], subagent_id=session["id"] if session.get("parent_id") else None,
                       agent_id=session["agent"]["id"], turn_id=turn["id"], created_at=turn["created_at"],
                       status=turn_status(turn, last), responses=responses, children=nested)  # fmt: skip

    async def _response_run(self, tenant: str, response_id: str, accepted: float) -> ResponseRun | None:
        """One response as stored (None: gone). ``accepted``: when it was accepted, if it is
        not stored yet (the previous response's end, or the turn's start)."""
        try:
            response = await self.sessions.runtime.get_response(tenant, response_id)
        except NotFound:
            return None
        found = await self.store.find_responses(ResponseFilter(tenant=tenant, id=response_id), limit=1)
        if found.data:
            summary = found.data[0]
            steps = await self.store.step_traces(tenant, response_id)
            return ResponseRun(response=response, started_at=summary.started_at, ended_at=summary.ended_at, steps=steps)
        # Running: the steps its checkpoints stored so far.
        stored = await self.store.run_steps(tenant, response_id)
        steps = [StepTrace(**trace) for step in stored for trace in step.data.get("traces") or ()]
        return ResponseRun(response=response, started_at=accepted, ended_at=None, steps=steps)
