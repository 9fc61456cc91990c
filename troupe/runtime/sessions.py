"""Agent sessions (the Agents API's sessions): :class:`SessionService`, what ``Runtime.sessions`` is.

Ray-free. A session is a conversation and a row (:class:`~troupe.storage.contract.Sessions`);
each of its turns is one or more **background responses** on that conversation, started
through the runtime like any other, so a session's turns run on its conversation's host, one
after another (the host's turn lock), different sessions' turns run concurrently across the
cluster, and a turn whose host dies (or whose server restarts) resumes as a durable run does.

A turn's life::

    message ──► response 1 ──► completed ─────────────────────────► turn completed, session idle
                    │
                    └──► completed with client function calls ──► turn waiting, session requires_action
                             │ every call's result sent (tool_result events, kept in the turn's row)
                             ▼
                         response 2 (the results as function_call_output items) ──► …

What is stored is only what cannot be read elsewhere: the turn's responses, in order, and
results sent and not yet taken. A turn's status, usage and items, the session's status and
required actions, follow from its responses as they stand (:func:`~troupe.protocol.sessions.turn_status`).

**Events.** ``GET …/events`` and a streamed create follow the session's turns one after another,
translating each response's events (:meth:`Runtime.follow_response`: live from its host, or
from its stored event log) into session events. A follower learns that a new turn or response
started at once when it was started through this runtime (an ``asyncio.Event`` per session),
and within :data:`POLL_S` when another ingress replica started it.

Example::

    sessions = runtime.sessions
    made = await sessions.create_session("", parse_session_create({"environment": {"type": "none"},
                                                                   "agent": {"model": "sim"}, "input": "hi"}))
    await sessions.submit_events("", made["id"], parse_session_events({"events": [...]}))
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

from troupe.protocol import InvalidRequest, NotFound, new_response_id, parse_create_request
from troupe.protocol.agents import merge_agent_fields, new_agent_id
from troupe.protocol.ids import new_id
from troupe.protocol.request import CreateResponseRequest
from troupe.protocol.sessions import (
    SESSION_AGENT_FIELDS,
    TurnEvents,
    agent_response_tools,
    chosen_credentials,
    describe_result,
    hosted_environment,
    new_session_id,
    new_turn_id,
    open_calls,
    pending_calls,
    required_actions,
    response_body,
    session_deleted,
    session_event,
    session_item,
    session_items,
    session_not_found,
    session_object,
    turn_not_found,
    turn_object,
    turn_status,
)
from troupe.protocol.subagents import (
    CREATE,
    SUBAGENT_TOOL_NAMES,
    subagent_event_kind,
    subagent_item,
    subagent_object,
    subagent_of_call,
)
from troupe.runtime.agents import AgentService
from troupe.runtime.containers import ContainerService
from troupe.runtime.conversations import new_conversation
from troupe.runtime.environments import EnvironmentService
from troupe.runtime.hosting import Placement
from troupe.runtime.store_client import StoreClient
from troupe.runtime.subagents import SubagentCalls
from troupe.runtime.vaults import VaultService
from troupe.storage import Order, Page
from troupe.storage.contract import NewTurn

__all__ = ["POLL_S", "SessionService"]

POLL_S = 1.0
"""How often a follower waiting for a session's next turn reads the store (for turns other
ingress replicas start; those started here wake it at once)."""

_ACTIVE = ("queued", "in_progress", "waiting")
T = TypeVar("T")
Events = AsyncGenerator[list[dict[str, Any]], None]
"""Batches of session events."""


class Responses(Protocol):
    """What sessions use of the runtime (:class:`~troupe.runtime.facade.Runtime` is one)."""

    store: StoreClient
    agents: AgentService
    containers: ContainerService
    environments: EnvironmentService
    vaults: VaultService
    placement: Placement

    async def delete_conversation(self, tenant: str, conversation_id: str) -> dict[str, Any]: ...
    async def background(self, tenant: str, request: CreateResponseRequest, *, trace: Any = None,
                         response_id: str | None = None) -> dict[str, Any]: ...  # fmt: skip
    async def follow_response(self, tenant: str, response_id: str, starting_after: int | None = None) -> Events: ...
    async def get_response(self, tenant: str, response_id: str) -> dict[str, Any]: ...
    async def cancel_response(self, tenant: str, response_id: str) -> dict[str, Any]: ...
    async def list_input_items(self, tenant: str, response_id: str, *, after: str | None = None, limit: int = 20,
                               order: Order = "desc") -> Page: ...  # fmt: skip


class SessionService:
    """Sessions, their turns, items and events, on ``runtime``'s responses and store."""

    def __init__(self, runtime: Responses) -> None:
        self.runtime = runtime
        self.store = runtime.store
        self._changed: dict[str, asyncio.Event] = {}
        """Per session followed here now: set (and replaced) when a turn or response is added to it."""
        self._waiting: dict[str, int] = {}
        """Per session in ``_changed``: how many waits hold its event (it goes with the last one)."""
        self._driving: set[str] = set()
        """The responses whose subagent calls a task of this service runs (or waits to)."""
        self._tasks: set[asyncio.Task[None]] = set()
        """Turns going on with the client's function results (:meth:`_go_on`), and the subagent
        calls running (:meth:`_drive`)."""
        self.subagents = SubagentCalls(self)

    async def close(self) -> None:
        """Cancel the turns' continuations under way here (a turn whose results were all sent
        and whose next response had not started: the next result sent, or a cancel, moves it on)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- sessions -----------------------------------------------------------------------

    async def create_session(self, tenant: str, parsed: dict[str, Any]) -> dict[str, Any]:
        """A new session (``parsed``: :func:`~troupe.protocol.sessions.parse_session_create`),
        its first turn started; the session as it stands then (``in_progress``).

        Raises:
            NotFound: no such saved agent (``agent_id``), or the model is not served (``agent.model``).
            InvalidRequest: an MCP server the policy refuses (``agent.tools[i].transport.server_url``).
        """
        session = await self._new_session(tenant, parsed)
        if parsed["input"] is None:  # an environment to work in, and no input yet
            return session_object(session, "idle", [])
        turn = await self.start_turn(tenant, session, parsed["input"])
        return session_object(session, "in_progress", []) | {"last_active_at": int(turn["created_at"])}

    async def stream_new_session(self, tenant: str, parsed: dict[str, Any]) -> Events:
        """A new session as :meth:`create_session` makes it, and the events of its first turn,
        to the session's ``idle`` (or ``requires_action``): ``agent.session.created`` first."""
        session = await self._new_session(tenant, parsed)
        await self.start_turn(tenant, session, parsed["input"])
        created = session_event("agent.session.created", new_id("sevt"), session=session_object(session, "in_progress", []))
        return self._prepend([created], self._follow(tenant, session, seq=0, settle=True))

    async def _new_session(self, tenant: str, parsed: dict[str, Any]) -> dict[str, Any]:
        agent = await self._session_agent(tenant, parsed["agent_id"], parsed["agent"])
        vault_ids = parsed.get("vault_ids") or []
        await self.runtime.vaults.check_vault_ids(tenant, vault_ids)
        await self.runtime.vaults.check_tools(tenant, vault_ids, agent_response_tools(agent), chosen_credentials(agent))
        environment, container_id, owned = await self._environment(tenant, parsed["environment"])
        # Its conversation is one this replica hosts (several replicas): its turns started here
        # stay here. A parent's subagents (new_subagents) keep random ids, spread over the replicas.
        session, conversation = _new_session_rows(new_session_id(), agent, environment, {
            "metadata": parsed["metadata"], "container_id": container_id, "owns_environment": owned,
            "vault_ids": vault_ids,
        }, conversation_id=self.runtime.placement.new_thread_id("conv"))  # fmt: skip
        return (await self.store.create_sessions(tenant, [session], [conversation]))[0]

    async def _environment(self, tenant: str, given: dict[str, Any]) -> tuple[dict[str, Any], str | None, bool]:
        """The session's environment as the session shows it, the container its commands run
        in (None for ``none``), and whether the session made it (and deletes it with itself).

        ``openai_hosted`` is checked against this server's limits and provisioned
        (:meth:`~troupe.runtime.environments.EnvironmentService.provision`): a new container, or
        the existing environment ``environment_id`` names. The network and size shown are the
        container's; the Python packages, those asked for (the sandbox has them; nothing is
        installed)."""
        if given["type"] == "none":
            return {"type": "none"}, None, False
        environments = self.runtime.environments
        parsed = environments.parse(given)
        made = await environments.provision(tenant, parsed)
        assert made is not None  # openai_hosted
        container = await self.runtime.containers.get_container(tenant, made["container_id"])
        packages = parsed["config"].get("python_packages")
        if packages is None and parsed["environment_template_id"] is not None:
            template = await environments.get_template(tenant, parsed["environment_template_id"])
            packages = template["packages"]["python"]
        return hosted_environment(made, container, packages or []), made["container_id"], parsed["environment_id"] is None

    async def _session_agent(self, tenant: str, agent_id: str | None, fields: dict[str, Any]) -> dict[str, Any]:
        """The session's agent: the saved agent's fields with ``fields`` over them, or ``fields``
        (an inline agent, under an id of its own), checked as an agent is."""
        if agent_id is None:
            base: dict[str, Any] = {"id": new_agent_id(), "name": None}
        else:
            saved = await self.runtime.agents.get_agent(tenant, agent_id)
            base = {"id": agent_id, "name": saved["name"], **{k: saved[k] for k in SESSION_AGENT_FIELDS}}
        await self.runtime.agents.check(tenant, fields)
        return merge_agent_fields(base, {k: v for k, v in fields.items() if k in SESSION_AGENT_FIELDS})

    async def new_subagents(
        self, tenant: str, parent: dict[str, Any], children: list[tuple[str, str, str | None]]
    ) -> list[dict[str, Any]]:
        """Subagents of ``parent`` (:mod:`troupe.runtime.subagents`), each ``(id, task, name)``,
        stored in one store call: sessions of their own, in the parent's environment, with the
        parent's agent less the client's functions and ``multi_agent``.

        Raises:
            StorageError: an id is taken (a resumed turn made it before); none was stored.
        """
        agent = {**parent["agent"], "multi_agent": {"enabled": False, "max_concurrent_subagents": None},
                 "tools": [t for t in parent["agent"]["tools"] or () if t["type"] != "function"]}  # fmt: skip
        rows = [_new_session_rows(child_id, agent, parent["environment"], {
            "metadata": {}, "container_id": parent.get("container_id"), "owns_environment": False,
            "parent_id": parent["id"], "task": task, "subagent_name": name, "closed_at": None,
            "vault_ids": parent.get("vault_ids", []),
        }) for child_id, task, name in children]  # fmt: skip
        return await self.store.create_sessions(tenant, [s for s, _ in rows], [c for _, c in rows])

    async def list_subagents(
        self, tenant: str, session_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """The session's subagents (the SDK's ``Subagent``), by when they were opened."""
        parent = await self._session(tenant, session_id)
        page = await self.store.list_sessions(tenant, after=after, limit=limit, order=order, children_of=session_id)
        return Page(data=[subagent_object(child, parent) for child in page.data], has_more=page.has_more)

    async def get_subagent(self, tenant: str, session_id: str, subagent_id: str) -> dict[str, Any]:
        """Raises: NotFound: no such session (``session_id``) or subagent of it (``subagent_id``)."""
        parent = await self._session(tenant, session_id)
        return subagent_object(await self._session(tenant, subagent_id, subagent_of=session_id), parent)

    async def get_session(self, tenant: str, session_id: str) -> dict[str, Any]:
        """The session as it stands. Raises: NotFound (naming ``session_id``)."""
        return await self._wire(tenant, await self._session(tenant, session_id))

    async def list_sessions(
        self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc",
        agent_id: str | None = None, metadata: dict[str, str] | None = None,
    ) -> Page:  # fmt: skip
        """The tenant's sessions, newest first unless ``order`` is ``asc``."""
        page = await self.store.list_sessions(tenant, after=after, limit=limit, order=order, agent_id=agent_id,
                                              metadata=metadata)  # fmt: skip
        data = await asyncio.gather(*(self._wire(tenant, s) for s in page.data))
        return Page(data=list(data), has_more=page.has_more)

    async def update_session(self, tenant: str, session_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        """The session with ``changes`` (:func:`~troupe.protocol.sessions.parse_session_update`)
        made; agent changes apply from its next response on.

        Raises: NotFound (``session_id``; the new model: ``agent.model``); InvalidRequest (the new tools).
        """
        session = await self._session(tenant, session_id)
        update: dict[str, Any] = {}
        if "agent" in changes:
            fields = changes["agent"]
            await self.runtime.agents.check(tenant, fields)
            update["agent"] = merge_agent_fields(session["agent"], fields)
        if "metadata" in changes:
            update["metadata"] = changes["metadata"]
        updated = await self.store.update_session(tenant, session_id, update) if update else session
        if updated is None:
            raise session_not_found(session_id)
        return await self._wire(tenant, updated)

    async def delete_session(self, tenant: str, session_id: str) -> dict[str, Any]:
        """Delete the session, its turns, its artifacts and its conversation (a running turn is cancelled first).

        Raises: NotFound (``session_id``)."""
        session = await self._session(tenant, session_id)
        last, response = await self.last_turn(tenant, session_id)
        if last is not None and response is not None and response["status"] in ("queued", "in_progress"):
            await self._cancel_response(tenant, response["id"])
        for child in await self.subagents.children(tenant, session):
            await self.stop(tenant, child)
            await self.store.delete_session(tenant, child["id"])
            await self.store.delete_session_artifacts(tenant, child["id"])  # its noted paths
            await self._delete_conversation(tenant, child["conversation_id"])
        if not await self.store.delete_session(tenant, session_id):
            raise session_not_found(session_id)
        await self.store.delete_session_artifacts(tenant, session_id)  # rows and copies
        if session.get("owns_environment") and session.get("container_id"):
            try:
                await self.runtime.containers.delete_container(tenant, session["container_id"])
            except NotFound:
                pass  # deleted through the Containers API already
        await self._delete_conversation(tenant, session["conversation_id"])
        self._notify(session_id)
        self._changed.pop(session_id, None)
        return session_deleted(session_id)

    async def _delete_conversation(self, tenant: str, conversation_id: str) -> None:
        try:
            await self.runtime.delete_conversation(tenant, conversation_id)
        except NotFound:
            pass  # deleted through the Conversations API already

    async def _session(self, tenant: str, session_id: str, *, subagent_of: str | None = None) -> dict[str, Any]:
        """The session; a subagent only when ``subagent_of`` names its parent (the Sessions API
        addresses subagents under their parent: ``…/subagents/{id}``)."""
        found = await self.store.get_session(tenant, session_id)
        if found is None or found.get("parent_id") != subagent_of:
            raise session_not_found(session_id) if subagent_of is None else NotFound(
                f"Subagent with id '{session_id}' not found.", param="subagent_id")  # fmt: skip
        return found

    async def _wire(self, tenant: str, session: dict[str, Any]) -> dict[str, Any]:
        turn, last = await self.last_turn(tenant, session["id"])
        if turn is None:
            return session_object(session, "idle", [])
        status = turn_status(turn, last)
        self._drive_if_left(tenant, session, turn, last)
        actions = required_actions(turn["id"], last, turn["results"]) if status == "waiting" and last else []
        return session_object({**session, "last_active_at": turn["created_at"]}, _SESSION_STATUS[status], actions)

    async def last_turn(self, tenant: str, session_id: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The session's last turn and that turn's last response (None: none, or gone)."""
        page = await self.store.list_turns(tenant, session_id, limit=1, order="desc")
        if not page.data:
            return None, None
        turn = page.data[0]
        return turn, await self._response(tenant, turn["responses"][-1])

    async def _response(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        try:
            return await self.runtime.get_response(tenant, response_id)
        except NotFound:
            return None

    async def ended_response(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        """The response once it has ended, as its terminal event has it (no store read, which
        would wait for the response's own write to reach DuckDB); None if it is gone."""
        ended = None
        async for batch in await self.runtime.follow_response(tenant, response_id):
            ended = next((e["response"] for e in reversed(batch) if "response" in e), ended)
        if ended is None or ended["status"] in ("queued", "in_progress"):
            return await self._response(tenant, response_id)  # a follow that ended early (a host that failed)
        return ended

    # -- input ----------------------------------------------------------------------------

    async def submit_events(self, tenant: str, session_id: str, events: list[dict[str, Any]]) -> None:
        """Act on the client's events (:func:`~troupe.protocol.sessions.parse_session_events`), in order.

        Raises:
            NotFound: no such session (``session_id``), or turn (``events[i].turn_id``).
            InvalidRequest: a message while the session waits for function results; a result
                for a call the turn is not waiting for (``Unknown pending tool call: <id>``,
                what the SDK retries while a call's turn is still running); a cancel with no
                active turn.
        """
        session = await self._session(tenant, session_id)
        for i, event in enumerate(events):
            if event["type"] == "message":
                await self._message(tenant, session, event["input"], f"events[{i}]")
            elif event["type"] == "cancel":
                await self._cancel(tenant, session, f"events[{i}]")
            else:
                await self._tool_result(tenant, session, event, f"events[{i}]")

    async def _message(self, tenant: str, session: dict[str, Any], items: list[dict[str, Any]], at: str) -> None:
        try:
            await self.send_message(tenant, session, items)
        except InvalidRequest as exc:
            raise InvalidRequest(exc.message, param=f"{at}.type", code=exc.code) from exc

    async def send_message(self, tenant: str, session: dict[str, Any], items: list[dict[str, Any]]) -> None:
        """A new turn with the user's ``items`` (it waits for a running turn to end, on the host).

        Raises: InvalidRequest: the last turn waits for function results, or runs its subagent calls."""
        turn, last = await self.last_turn(tenant, session["id"])
        prefix: list[dict[str, Any]] = []
        if turn is not None and last is not None:
            status = turn_status(turn, last)
            if status == "waiting":
                raise InvalidRequest("The session is waiting for the results of its function calls "
                                     "(required_actions): send them as tool_result events, or cancel the turn.",
                                     code="invalid_request_error")  # fmt: skip
            if status == "in_progress" and last["status"] == "completed":
                raise InvalidRequest("The session's turn is running its subagent calls: wait for it to end, or "
                                     "cancel it.", code="invalid_request_error")  # fmt: skip
            if status == "cancelled" and last["status"] == "completed":
                # Cancelled while it waited: its calls get an answer, or the model would see them open.
                prefix = [{"type": "function_call_output", "call_id": call["call_id"],
                           "output": "Error: the turn was cancelled before this call's result came."}
                          for call in open_calls(last)]  # fmt: skip
        await self.start_turn(tenant, session, prefix + items)

    async def stop(self, tenant: str, session: dict[str, Any]) -> None:
        """Cancel the session's active turn, if it has one."""
        turn, last = await self.last_turn(tenant, session["id"])
        if turn is None or turn_status(turn, last) not in _ACTIVE:
            return
        if last is not None and last["status"] in ("queued", "in_progress"):
            await self._cancel_response(tenant, last["id"])
        else:
            await self.store.cancel_turn(tenant, session["id"], turn["id"])
            self._notify(session["id"])

    async def start_turn(self, tenant: str, session: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, Any]:
        """A new turn of the session with this input: its first response started, then the turn stored."""
        return (await self.start_turns(tenant, [(session, items)]))[0]

    async def start_turns(
        self, tenant: str, starts: list[tuple[dict[str, Any], list[dict[str, Any]]]]
    ) -> list[dict[str, Any]]:
        """:meth:`start_turn` for each ``(session, input)``: the responses started at once, then
        the turns stored in one store call (a parent's new subagents). The turns, in order.

        Raises: what a start raised (once the turns of those that started are stored).
        """
        begun = [(session, items, new_turn_id(), new_response_id(session["conversation_id"]))
                 for session, items in starts]  # fmt: skip

        async def start(session: dict[str, Any], items: list[dict[str, Any]], turn_id: str, response_id: str) -> None:
            previous = (await self.last_turn(tenant, session["id"]))[1] if session.get("vault_ids") else None
            await self._start(tenant, session, items, turn_id, response_id, previous)

        outcomes = await asyncio.gather(*(start(*b) for b in begun), return_exceptions=True)
        started = [b for b, outcome in zip(begun, outcomes, strict=True) if outcome is None]
        now = time.time()
        turns = await self.store.add_turns(tenant, [NewTurn(s["id"], t, r, now) for s, _, t, r in started]) if started else []
        for session, _, turn_id, response_id in started:
            self._notify(session["id"])
            self._after_start(tenant, session, turn_id, response_id)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return turns

    async def _start(
        self, tenant: str, session: dict[str, Any], items: list[dict[str, Any]], turn_id: str, response_id: str,
        previous: dict[str, Any] | None,
    ) -> None:  # fmt: skip
        """Start one of the turn's responses (``previous``: the session's response before it):
        the session's agent, its MCP tools authorized from the session's vaults
        (:meth:`~troupe.runtime.vaults.VaultService.start`: as a client's own ``authorization``,
        so the run keeps it as it keeps those)."""

        async def start(body: dict[str, Any]) -> None:
            await self.runtime.background(tenant, parse_create_request(body), response_id=response_id)

        await self.runtime.vaults.start(tenant, session.get("vault_ids", []), chosen_credentials(session["agent"]),
                                        response_body(session, items, turn_id), start, previous=previous)  # fmt: skip

    def _after_start(self, tenant: str, session: dict[str, Any], turn_id: str, response_id: str) -> None:
        """With subagents, run the calls of the response ``response_id`` when it ends (:meth:`_drive`)."""
        if session["agent"]["multi_agent"]["enabled"] and response_id not in self._driving:
            self._driving.add(response_id)
            self._spawn(self._drive(tenant, session, turn_id, response_id))

    def _drive_if_left(self, tenant: str, session: dict[str, Any], turn: dict[str, Any], last: dict[str, Any] | None) -> None:
        """Drive on a turn whose subagent calls nobody runs: its response ended while no process
        of this server was there to run them (a restart). Running them again is safe: a create
        makes the subagent its call id names, once; the next response is claimed once."""
        if last is not None and last["status"] == "completed" and turn_status(turn, last) == "in_progress":
            self._after_start(tenant, session, turn["id"], last["id"])

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drive(self, tenant: str, session: dict[str, Any], turn_id: str, response_id: str) -> None:
        """Once the response has ended, run its subagent calls (all at once), keep their outputs
        as the calls' results, and let the turn go on (:meth:`_go_on`)."""
        try:
            await self._drive_once(tenant, session, turn_id, response_id)
        finally:
            self._driving.discard(response_id)

    async def _drive_once(self, tenant: str, session: dict[str, Any], turn_id: str, response_id: str) -> None:
        last = await self.ended_response(tenant, response_id)
        calls = [c for c in open_calls(last or {}) if c.get("name") in SUBAGENT_TOOL_NAMES]
        if not calls:
            return
        # Creates first (at once, within the concurrency limit), so a wait called beside them
        # finds them; then the others at once. The creates' outputs are kept as soon as they are
        # done when a wait runs beside them: the parent's followers show the subagents made
        # before it ends. The last outputs are kept by the claim of the next response (one store call).
        creates = [c for c in calls if c["name"] == CREATE]
        others = [c for c in calls if c["name"] != CREATE]
        created: dict[str, dict[str, Any]] = {}
        if creates:
            created = _results(creates, await self.subagents.create_all(tenant, session, creates))
            if others:
                await self.store.record_tool_results(tenant, session["id"], turn_id, created)
                self._notify(session["id"])
        outputs = await asyncio.gather(*(self.subagents.run(tenant, session, call) for call in others))
        last_results = _results(others, outputs) if others else created
        await self._go_on(tenant, session, turn_id, response_id, ended=last, results=last_results)

    async def _cancel(self, tenant: str, session: dict[str, Any], at: str) -> None:
        turn, last = await self.last_turn(tenant, session["id"])
        status = None if turn is None else turn_status(turn, last)
        if turn is None or status not in _ACTIVE:
            raise InvalidRequest("The session has no active turn to cancel.", param=f"{at}.type",
                                 code="invalid_request_error")  # fmt: skip
        await self.stop(tenant, session)

    async def _cancel_response(self, tenant: str, response_id: str) -> None:
        try:
            await self.runtime.cancel_response(tenant, response_id)
        except InvalidRequest:
            pass  # it ended meanwhile

    async def _tool_result(self, tenant: str, session: dict[str, Any], event: dict[str, Any], at: str) -> None:
        turn = await self.store.get_turn(tenant, session["id"], event["turn_id"])
        if turn is None:
            raise NotFound(f"Turn with id '{event['turn_id']}' not found.", param=f"{at}.turn_id")
        response_id = turn["responses"][-1]
        last = await self._response(tenant, response_id)
        calls = {c["call_id"] for c in pending_calls(last or {}) if turn_status(turn, last) in _ACTIVE}
        if event["call_id"] not in calls:
            # The SDK's words: it retries this while the call's response is still being written.
            raise InvalidRequest(f"Unknown pending tool call: {event['call_id']}", param=f"{at}.call_id",
                                 code="invalid_request_error")  # fmt: skip
        result = {k: event[k] for k in ("success", "output", "error")}
        await self.store.record_tool_results(tenant, session["id"], turn["id"], {event["call_id"]: result})
        self._spawn(self._go_on(tenant, session, turn["id"], response_id))

    async def _go_on(
        self, tenant: str, session: dict[str, Any], turn_id: str, after: str, *, ended: dict[str, Any] | None = None,
        results: dict[str, dict[str, Any]] | None = None,
    ) -> None:  # fmt: skip
        """Start the turn's next response once ``after`` (its last) has ended and every call it
        left has a result; nothing if another caller started it, or a result is missing still.
        ``ended``: ``after`` as it ended, when the caller has it. ``results``: results of its
        calls to keep first (with the claim, in one store call)."""
        last = ended if ended is not None else await self.ended_response(tenant, after)
        if last is None:
            return
        calls = open_calls(last)
        response_id = new_response_id(session["conversation_id"])
        # The session read for its agent as it is now, beside the claim (two calls, one wait).
        session, taken = await asyncio.gather(
            self._session(tenant, session["id"]),
            self.store.continue_turn(tenant, session["id"], turn_id, after=after, response_id=response_id,
                                     call_ids=[c["call_id"] for c in calls], results=results),
        )  # fmt: skip
        if taken is None:
            if results:
                self._notify(session["id"])  # kept, not claimed: a result is missing still
            return
        items = [{"type": "function_call_output", "call_id": call_id, "output": describe_result(result)}
                 for call_id, result in taken.items()]  # fmt: skip
        try:
            await self._start(tenant, session, items, turn_id, response_id, last)
        finally:
            self._notify(session["id"])  # a response that failed to start fails the turn: it is gone
        self._after_start(tenant, session, turn_id, response_id)

    # -- turns and items ------------------------------------------------------------------

    async def list_turns(
        self, tenant: str, session_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc",
        subagent_of: str | None = None,
    ) -> Page:  # fmt: skip
        """The session's turns (a subagent's: ``session_id`` the subagent, ``subagent_of`` its parent)."""
        if subagent_of is not None:
            await self._session(tenant, subagent_of)
        session = await self._session(tenant, session_id, subagent_of=subagent_of)
        page = await self.store.list_turns(tenant, session_id, after=after, limit=limit, order=order)
        data = await asyncio.gather(*(self._turn_object(tenant, session, t) for t in page.data))
        return Page(data=list(data), has_more=page.has_more)

    async def get_turn(self, tenant: str, session_id: str, turn_id: str, *, subagent_of: str | None = None) -> dict[str, Any]:
        if subagent_of is not None:
            await self._session(tenant, subagent_of)
        session = await self._session(tenant, session_id, subagent_of=subagent_of)
        turn = await self.store.get_turn(tenant, session_id, turn_id)
        if turn is None:
            raise turn_not_found(turn_id)
        return await self._turn_object(tenant, session, turn)

    async def _turn_object(
        self, tenant: str, session: dict[str, Any], turn: dict[str, Any], *, known: dict[str, dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """The wire turn (``known``: responses of it at hand, by id, as they ended: not read again)."""
        known = known or {}
        responses = await asyncio.gather(*(_at_hand(known.get(r)) if r in known else self._response(tenant, r)
                                           for r in turn["responses"]))  # fmt: skip
        made = turn_object(turn, list(responses), session["agent"]["id"])
        if session.get("parent_id"):  # a subagent's turn belongs to its parent's session
            made.update(session_id=session["parent_id"], subagent_id=session["id"])
        return made

    async def list_items(
        self, tenant: str, session_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc",
        turn_id: str | None = None, subagent_of: str | None = None,
    ) -> Page:  # fmt: skip
        """The session's items (its user messages, the agent's output, function results), in
        the order they were made; those of one turn with ``turn_id``; a subagent's with
        ``subagent_of``. An unknown ``after`` gives an empty page."""
        if subagent_of is not None:
            await self._session(tenant, subagent_of)
        session = await self._session(tenant, session_id, subagent_of=subagent_of)
        turns = [await self.store.get_turn(tenant, session_id, turn_id)] if turn_id else await self.all_turns(tenant, session_id)
        if turns == [None]:
            raise turn_not_found(turn_id or "")
        items: list[dict[str, Any]] = []
        for turn in turns:
            assert turn is not None
            raw: list[dict[str, Any]] = []  # a call's output may be the next response's input: one pass a turn
            for response_id in turn["responses"]:
                raw += await self._response_items(tenant, response_id)
            items += session_items(raw, turn["id"], session["agent"]["id"])
        if order == "desc":
            items.reverse()
        if after is not None:
            ids = [item["id"] for item in items]
            items = items[ids.index(after) + 1:] if after in ids else []
        return Page(data=items[:limit], has_more=len(items) > limit)

    async def all_turns(self, tenant: str, session_id: str) -> list[dict[str, Any]]:
        """The session's turns, oldest first (every page of them)."""
        turns: list[dict[str, Any]] = []
        after = None
        while True:
            page = await self.store.list_turns(tenant, session_id, after=after, limit=100, order="asc")
            turns += page.data
            if not page.has_more:
                return turns
            after = turns[-1]["id"]

    async def _response_items(self, tenant: str, response_id: str) -> list[dict[str, Any]]:
        """The response's input and output items (Responses'), in order."""
        response = await self._response(tenant, response_id)
        if response is None:
            return []
        inputs: list[dict[str, Any]] = []
        after = None
        while True:
            try:
                page = await self.runtime.list_input_items(tenant, response_id, after=after, limit=100, order="asc")
            except NotFound:
                break  # still running: its input is not stored yet
            inputs += page.data
            if not page.has_more:
                break
            after = inputs[-1]["id"]
        return [*inputs, *(response.get("output") or [])]

    # -- events ---------------------------------------------------------------------------

    async def open_events(self, tenant: str, session_id: str) -> Events:
        """The session's events from now on, until the client goes: first its state
        (``agent.session.idle``, ``in_progress`` or ``requires_action``, with the session), then
        every turn's events as it runs (a running turn's from its start; a turn waiting for the
        client's results from its next response). Where it starts is fixed before this returns,
        so input sent after it is never missed.

        Raises: NotFound (``session_id``)."""
        session = await self._session(tenant, session_id)
        turn, last = await self.last_turn(tenant, session_id)
        wire = await self._wire(tenant, session)
        state = session_event(f"agent.session.{wire['status']}", new_id("sevt"), session=wire)
        status = None if turn is None else turn_status(turn, last)
        if turn is None:
            seq, index = 0, 0
        elif status in ("queued", "in_progress"):
            seq, index = turn["seq"], 0
        elif status == "waiting":
            seq, index = turn["seq"], len(turn["responses"])
        else:
            seq, index = turn["seq"] + 1, 0
        return self._prepend([state], self._follow(tenant, session, seq=seq, index=index, settle=False))

    async def _follow(
        self, tenant: str, session: dict[str, Any], *, seq: int, index: int = 0, settle: bool
    ) -> Events:
        """The events of the session's turns from turn ``seq``'s response ``index`` on (``index``
        past its responses: from the one its client's results start); with ``settle``, only
        until that turn ends or waits for the client's results."""
        session_id = session["id"]
        while True:
            turn = await self._wait_for(session_id, functools.partial(self._turn_at, tenant, session_id, seq))
            if turn is None:
                return  # the session was deleted
            shown = await self._shown_before(tenant, turn, index)
            ended: dict[str, dict[str, Any]] = {}
            while True:
                if index == len(turn["responses"]):  # waiting for the client's results
                    moved = functools.partial(self._moved_on, tenant, session_id, turn["id"], index)
                    turn = await self._wait_for(session_id, moved)
                    if turn is None:
                        return
                    if index == len(turn["responses"]):
                        status = "cancelled"
                        break
                response_id = turn["responses"][index]
                translate = TurnEvents(session_id, turn["id"], response_id, offset=shown, agent_id=session["agent"]["id"])
                async for batch in self._response_events(tenant, session, turn, index, translate, ended):
                    yield batch
                turn = await self.store.get_turn(tenant, session_id, turn["id"]) or turn
                # As its terminal event has it: a store read would wait for its write to reach DuckDB.
                last = ended.get(response_id) or await self._response(tenant, response_id)
                status = turn_status(turn, last)
                if status == "in_progress" and last is not None and last["status"] != "completed":
                    continue  # its events stopped before it ended: follow it again from its start (ids repeat)
                shown = translate.shown
                if status not in ("waiting", "in_progress"):
                    break
                if status == "waiting":  # the client's functions; else its subagents, run here
                    wire = await self._wire(tenant, session)
                    yield [session_event("agent.session.requires_action", new_id("sevt"), session=wire)]
                    if settle:
                        return
                elif last is not None:
                    async for batch in self._subagent_events(tenant, session, turn, index, last, translate):
                        yield batch
                index += 1
            done = await self._turn_object(tenant, session, turn, known=ended)
            wire = session_object(session, "idle", []) | {"last_active_at": int(time.time())}
            yield [session_event(f"agent.session.turn.{status}", new_id("sevt"), session_id=session_id,
                                 turn_id=turn["id"], turn=done, usage=done["usage"]),
                   session_event("agent.session.idle", new_id("sevt"), session=wire)]  # fmt: skip
            if settle:
                return
            seq, index = seq + 1, 0

    async def _subagent_events(
        self, tenant: str, session: dict[str, Any], turn: dict[str, Any], index: int, ended: dict[str, Any],
        translate: TurnEvents,
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """While the subagent calls of the turn's response ``index`` (``ended``) run: each call's
        item done with its output, and the subagent it made, closed or resumed
        (``agent.session.subagent.*``), as each batch of calls settles."""
        calls = {c["call_id"]: c for c in open_calls(ended) if c.get("name") in SUBAGENT_TOOL_NAMES}
        where = {c.get("call_id"): i for i, c in enumerate(ended.get("output") or ()) if c.get("type") == "function_call"}
        response_id, agent_id = turn["responses"][index], session["agent"]["id"]
        order = list(calls)
        while calls:
            found = await self._wait_for(session["id"], functools.partial(
                self._subagent_outputs, tenant, session["id"], turn["id"], index, frozenset(calls)))  # fmt: skip
            if found is None:
                return  # the session or the turn is gone
            outputs, final = found
            batch: list[dict[str, Any]] = []
            for call_id in [c for c in order if c in outputs and c in calls]:
                call, output, k = calls.pop(call_id), outputs[call_id], order.index(call_id)
                base = {"session_id": session["id"], "turn_id": turn["id"]}
                at = translate.index_of(where.get(call_id, -1))
                if at is not None:
                    batch.append(session_event("agent.session.turn.item.done", f"sevt_{response_id[5:]}_c{k}", **base,
                                               item=subagent_item(call, turn["id"], agent_id, output), output_index=at))  # fmt: skip
                kind, child_id = subagent_event_kind(call, output), subagent_of_call(call)
                child = None if kind is None or child_id is None else await self.store.get_session(tenant, child_id)
                if kind is not None and child is not None and child.get("parent_id") == session["id"]:
                    batch.append(session_event(kind, f"sevt_{response_id[5:]}_c{k}s",
                                               subagent=subagent_object(child, session)))  # fmt: skip
            if batch:
                yield batch
            if final:
                return

    async def _subagent_outputs(
        self, tenant: str, session_id: str, turn_id: str, index: int, wanted: frozenset[str]
    ) -> tuple[dict[str, Any], bool] | None | bool:
        """The outputs of ``wanted`` calls (of the turn's response ``index``) kept so far, and
        whether that is all there will be (the turn went on, or was cancelled); False while none
        is new; None if the turn is gone."""
        turn = await self.store.get_turn(tenant, session_id, turn_id)
        if turn is None:
            return None
        if len(turn["responses"]) == index + 1 and not turn["cancelled"]:
            kept = {k: describe_result(v) for k, v in turn["results"].items() if k in wanted}
            return (kept, False) if kept else False
        if len(turn["responses"]) == index + 2:  # went on: its next response took them
            return {k: describe_result(v) for k, v in turn["taken"].items() if k in wanted}, True
        if len(turn["responses"]) > index + 2:  # went on further: that response's input is stored
            items = await self._response_items(tenant, turn["responses"][index + 1])
            return {i["call_id"]: i.get("output") for i in items
                    if i.get("type") == "function_call_output" and i.get("call_id") in wanted}, True  # fmt: skip
        return {}, True  # cancelled while they ran

    async def _shown_before(self, tenant: str, turn: dict[str, Any], index: int) -> int:
        """How many items the turn's responses before ``index`` show (where ``output_index`` goes on)."""
        shown = 0
        for response_id in turn["responses"][:index]:
            response = await self._response(tenant, response_id)
            shown += sum(session_item(item, turn["id"]) is not None for item in (response or {}).get("output") or ())
        return shown

    async def _response_events(
        self, tenant: str, session: dict[str, Any], turn: dict[str, Any], index: int, translate: TurnEvents,
        ended: dict[str, dict[str, Any]],
    ) -> AsyncIterator[list[dict[str, Any]]]:  # fmt: skip
        """One of the turn's responses' events, as session events; ``ended`` gets the response
        as its terminal event has it, by id."""
        response_id = turn["responses"][index]
        base = {"session_id": session["id"], "turn_id": turn["id"]}
        try:
            batches = await self.runtime.follow_response(tenant, response_id)
        except (NotFound, InvalidRequest):
            return  # gone, or its event log was pruned: the turn's end says how it ended
        async for batch in batches:
            out: list[dict[str, Any]] = []
            for event in batch:
                kind = event.get("type")
                if index == 0 and kind in ("response.created", "response.in_progress"):
                    snapshot = turn_object(turn, [event["response"]], session["agent"]["id"])
                    suffix = "created" if kind == "response.created" else "in_progress"
                    out.append(session_event(f"agent.session.turn.{suffix}", f"sevt_{response_id[5:]}_t{suffix}",
                                             turn=snapshot, **base))  # fmt: skip
                if kind == "response.in_progress":
                    wire = session_object(session, "in_progress", [])
                    out.append(session_event("agent.session.in_progress", f"sevt_{response_id[5:]}_s", session=wire))
                out += translate.translate(event)
                if "response" in event and event["response"].get("status") not in ("queued", "in_progress"):
                    ended[response_id] = event["response"]
            if out:
                yield out

    async def _turn_at(self, tenant: str, session_id: str, seq: int) -> dict[str, Any] | None | bool:
        """The session's turn ``seq``; False while it has none (yet); None if the session is gone."""
        page = await self.store.list_turns(tenant, session_id, limit=1, order="desc")
        if not page.data:
            return None if await self.store.get_session(tenant, session_id) is None else False
        last = page.data[0]
        if last["seq"] < seq:
            return False
        if last["seq"] == seq:
            return last
        turns = await self.all_turns(tenant, session_id)
        return next((t for t in turns if t["seq"] == seq), False)

    async def _moved_on(self, tenant: str, session_id: str, turn_id: str, index: int) -> dict[str, Any] | None | bool:
        """The waiting turn once it has response ``index`` or was cancelled; False before."""
        now = await self.store.get_turn(tenant, session_id, turn_id)
        if now is None:
            return None
        return now if now["cancelled"] or len(now["responses"]) > index else False

    async def _wait_for(self, session_id: str, check: Callable[[], Awaitable[T | bool]]) -> T:
        """``check()``'s first value that is not False: checked again whenever a change to the
        session is made through this runtime, and every :data:`POLL_S` for other replicas'.
        A session nobody waits for keeps nothing here (an idle session costs no event)."""
        while True:
            changed = self._changed.setdefault(session_id, asyncio.Event())
            self._waiting[session_id] = self._waiting.get(session_id, 0) + 1
            try:
                found = await check()
                if found is not False:
                    return found  # type: ignore[return-value]
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), POLL_S)
            finally:
                left = self._waiting.pop(session_id) - 1
                if left:
                    self._waiting[session_id] = left
                elif self._changed.get(session_id) is changed:
                    del self._changed[session_id]

    def _notify(self, session_id: str) -> None:
        changed = self._changed.pop(session_id, None)
        if changed is not None:
            changed.set()

    @staticmethod
    async def _prepend(first: list[dict[str, Any]], rest: AsyncIterator[list[dict[str, Any]]]) -> Events:
        yield first
        async for batch in rest:
            yield batch


async def _at_hand(response: dict[str, Any] | None) -> dict[str, Any] | None:
    return response


def _results(calls: list[dict[str, Any]], outputs: list[str]) -> dict[str, dict[str, Any]]:
    """Subagent calls' outputs as the results a turn keeps, by call id."""
    return {call["call_id"]: {"success": True, "output": output, "error": None}
            for call, output in zip(calls, outputs, strict=True)}  # fmt: skip


def _new_session_rows(
    session_id: str, agent: dict[str, Any], environment: dict[str, Any], fields: dict[str, Any], *,
    conversation_id: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A new session's stored object (``fields``: the rest of it) and its new conversation
    (``conversation_id``, else a new id)."""
    conversation = new_conversation({"agent_session_id": session_id}, conversation_id)
    now = time.time()
    return {"id": session_id, "created_at": now, "last_active_at": now, "conversation_id": conversation["id"],
            "agent": agent, "environment": environment, **fields}, conversation  # fmt: skip


_SESSION_STATUS = {"queued": "in_progress", "in_progress": "in_progress", "waiting": "requires_action",
                   "completed": "idle", "failed": "idle", "cancelled": "idle"}  # fmt: skip
"""A session's status from its last turn's: a failed turn leaves the session ready for input."""
