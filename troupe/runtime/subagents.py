"""Subagents: :class:`SubagentCalls`, what runs a session's subagent tool calls.

Ray-free. An agent with ``multi_agent.enabled`` is given the subagent tools
(:mod:`troupe.protocol.subagents`); its response ends at their calls, as at a client's
function call, but the session's runtime runs them (:meth:`SessionService._drive`), records
their outputs as the calls' results, and the turn goes on with them. A subagent is a session of
its own: its own conversation, so its own host, and its turns are background responses like any
session's. So eight ``create_subagent`` calls start eight turns on (up to) eight hosts at once,
and ``wait_for_subagents`` waits for each turn's response to end (following it: no polling).

A subagent has its parent's agent without the client's functions (no client runs them) and
without ``multi_agent`` (one level of subagents), works in its parent's environment (the same
container), and is deleted with its parent.

What goes wrong in a call (an unknown subagent, too many running, a closed one given input) is
the call's output, ``Error: …``, for the model to read; the turn goes on.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Protocol

from troupe.protocol import InvalidRequest
from troupe.protocol.sessions import parse_session_input, turn_status
from troupe.protocol.subagents import CLOSE, INTERRUPT, RESUME, SEND, WAIT, subagent_id_of
from troupe.runtime.store_client import StoreClient
from troupe.storage import StorageError

__all__ = ["SubagentCalls", "Sessions"]


class Sessions(Protocol):
    """What subagent calls use of the sessions (:class:`~troupe.runtime.sessions.SessionService` is it)."""

    store: StoreClient

    async def ended_response(self, tenant: str, response_id: str) -> dict[str, Any] | None: ...
    async def last_turn(self, tenant: str, session_id: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]: ...
    async def new_subagents(
        self, tenant: str, parent: dict[str, Any], children: list[tuple[str, str, str | None]]
    ) -> list[dict[str, Any]]: ...
    async def start_turns(
        self, tenant: str, starts: list[tuple[dict[str, Any], list[dict[str, Any]]]]
    ) -> list[dict[str, Any]]: ...
    async def send_message(self, tenant: str, session: dict[str, Any], items: list[dict[str, Any]]) -> None: ...
    async def stop(self, tenant: str, session: dict[str, Any]) -> None: ...


_ACTIVE = ("queued", "in_progress", "waiting")


class CallFailed(Exception):
    """A subagent call that cannot be done: its message is the call's output."""


class SubagentCalls:
    """Runs a session's subagent tool calls (``sessions``: the service the subagents are sessions of)."""

    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions
        self.store = sessions.store

    async def run(self, tenant: str, parent: dict[str, Any], call: dict[str, Any]) -> str:
        """The output of one call (a ``function_call`` item of the parent's response) that is
        not a create (:meth:`create_all` runs those)."""
        try:
            args = _arguments(call)
            name = call["name"]
            if name == WAIT:
                result = await self._wait(tenant, parent, args.get("subagent_ids"))
            else:
                child = await self._child(tenant, parent, args.get("subagent_id"))
                result = await {SEND: self._send, INTERRUPT: self._interrupt, CLOSE: self._close,
                                RESUME: self._resume}[name](tenant, child, args)  # fmt: skip
        except (CallFailed, ValueError) as exc:
            return f"Error: {exc}"
        return json.dumps(result)

    async def create_all(self, tenant: str, parent: dict[str, Any], calls: list[dict[str, Any]]) -> list[str]:
        """The outputs of a response's ``create_subagent`` calls: as many as the parent may still
        start (``max_concurrent_subagents`` less those running), in order; the others answer that
        the limit is reached. The subagents are stored in one store call, then their first turns
        started at once, and stored in one more."""
        most = parent["agent"]["multi_agent"]["max_concurrent_subagents"]
        free = most - len(await self._running(tenant, parent))
        full = f"Error: at most {most} subagents run at once: wait for some (wait_for_subagents) first"
        asked = [_create_args(call) if i < free else full for i, call in enumerate(calls)]
        made = await self._made(tenant, parent, [a for a in asked if not isinstance(a, str)])
        await self.sessions.start_turns(tenant, [(child, parse_session_input(child["task"], "task"))
                                                 for child in made.values() if child is not None])  # fmt: skip
        return [a if isinstance(a, str) else json.dumps({"subagent_id": a[0], "status": "running"}) for a in asked]

    async def _made(
        self, tenant: str, parent: dict[str, Any], children: list[tuple[str, str, str | None]]
    ) -> dict[str, dict[str, Any] | None]:
        """The subagents ``(id, task, name)`` made, by id; None for one made before (by an
        earlier run of its call: a resumed turn, or another replica's run of it)."""
        if not children:
            return {}
        try:
            return {child["id"]: child for child in await self.sessions.new_subagents(tenant, parent, children)}
        except StorageError:
            if len(children) > 1:  # one at a time, to know which
                return {k: v for one in children for k, v in (await self._made(tenant, parent, [one])).items()}
            if await self.store.get_session(tenant, children[0][0]) is None:
                raise
            return {children[0][0]: None}

    async def _wait(self, tenant: str, parent: dict[str, Any], ids: Any) -> dict[str, Any]:
        if ids is None:
            children = [c for c in await self.children(tenant, parent) if c.get("closed_at") is None]
        elif isinstance(ids, list):
            children = [await self._child(tenant, parent, i) for i in ids]
        else:
            raise CallFailed("'subagent_ids' must be an array of subagent ids")
        settled = await asyncio.gather(*(self._settled(tenant, child) for child in children))
        return {"subagents": list(settled)}

    async def _settled(self, tenant: str, child: dict[str, Any]) -> dict[str, Any]:
        """The subagent once its last turn has ended: its status and last answer."""
        turn, last = await self.sessions.last_turn(tenant, child["id"])
        if turn is not None and turn_status(turn, last) in _ACTIVE:
            # The turn's one response (a subagent calls no client function), as it ended.
            last = await self.sessions.ended_response(tenant, turn["responses"][-1])
            if last is None or last["status"] in ("queued", "in_progress"):
                turn, last = await self.sessions.last_turn(tenant, child["id"])
        status = "idle" if turn is None else turn_status(turn, last)
        return {"subagent_id": child["id"], "status": status, "output": _answer(last)}

    async def _send(self, tenant: str, child: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
        if child.get("closed_at") is not None:
            raise CallFailed(f"subagent {child['id']} is closed: resume it first")
        text = args.get("input")
        if not isinstance(text, str) or not text.strip():
            raise CallFailed("'input' must be a non-empty string")
        try:
            await self.sessions.send_message(tenant, child, parse_session_input(text, "input"))
        except InvalidRequest as exc:
            raise CallFailed(exc.message) from exc
        return {"subagent_id": child["id"], "status": "running"}

    async def _interrupt(self, tenant: str, child: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
        await self.sessions.stop(tenant, child)
        return {"subagent_id": child["id"], "status": "interrupted"}

    async def _close(self, tenant: str, child: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
        await self.sessions.stop(tenant, child)
        await self.store.update_session(tenant, child["id"], {"closed_at": time.time()})
        return {"subagent_id": child["id"], "status": "closed"}

    async def _resume(self, tenant: str, child: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
        await self.store.update_session(tenant, child["id"], {"closed_at": None})
        return {"subagent_id": child["id"], "status": "active"}

    async def _child(self, tenant: str, parent: dict[str, Any], subagent_id: Any) -> dict[str, Any]:
        child = await self.store.get_session(tenant, subagent_id) if isinstance(subagent_id, str) else None
        if child is None or child.get("parent_id") != parent["id"]:
            raise CallFailed(f"no subagent {subagent_id!r} of this session")
        return child

    async def children(self, tenant: str, parent: dict[str, Any]) -> list[dict[str, Any]]:
        """The parent's subagents, oldest first."""
        found: list[dict[str, Any]] = []
        after = None
        while True:
            page = await self.store.list_sessions(tenant, after=after, limit=100, order="asc", children_of=parent["id"])
            found += page.data
            if not page.has_more:
                return found
            after = found[-1]["id"]

    async def _running(self, tenant: str, parent: dict[str, Any]) -> list[dict[str, Any]]:
        open_children = [c for c in await self.children(tenant, parent) if c.get("closed_at") is None]
        lasts = await asyncio.gather(*(self.sessions.last_turn(tenant, c["id"]) for c in open_children))
        return [c for c, (turn, last) in zip(open_children, lasts, strict=True)
                if turn is not None and turn_status(turn, last) in _ACTIVE]  # fmt: skip


def _create_args(call: dict[str, Any]) -> tuple[str, str, str | None] | str:
    """A create call's subagent ``(id, task, name)``; or its output, an error."""
    try:
        args = _arguments(call)
        task, name = args.get("task"), args.get("name")
        if not isinstance(task, str) or not task.strip():
            raise CallFailed("'task' must be a non-empty string: what the subagent is to do")
    except (CallFailed, ValueError) as exc:
        return f"Error: {exc}"
    return subagent_id_of(call["call_id"]), task, name if isinstance(name, str) else None


def _arguments(call: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments, a JSON object (ValueError: not JSON)."""
    args = json.loads(call.get("arguments") or "{}")
    if not isinstance(args, dict):
        raise CallFailed("the arguments must be a JSON object")
    return args


def _answer(response: dict[str, Any] | None) -> str:
    """A response's answer: the text of its last assistant message."""
    for item in reversed((response or {}).get("output") or []):
        if item.get("type") == "message" and item.get("role") == "assistant":
            return "".join(p.get("text", "") for p in item.get("content") or () if p.get("type") == "output_text")
    return ""
