"""Automations (the Agents API's scheduled agents): :class:`AutomationService`, what
``Runtime.automations`` is, and its scheduler.

Ray-free. The bodies are checked by :mod:`troupe.protocol.automations`; automations and their
invocations live in the store, per tenant (:class:`~troupe.storage.contract.Automations`).

**The scheduler** (:meth:`AutomationService.run_scheduler`, a task of the runtime's) sleeps
until the earliest next due time of any active automation, not in a poll: it is woken at once
when an automation is created, updated, paused, resumed or deleted in this process, and reads
the store again at least every ``replan_s`` seconds, to see other replicas' changes. At a due
time it claims the time (:meth:`~troupe.storage.contract.Automations.claim_automation_due`: one
transaction, the invocation row unique per automation and due time), so that of several
replicas, each running a scheduler over the one store, one fires it; then it fires.

**Missed times** (the server was down, or busy past a due time): each automation fires once for
what it missed, with the latest missed due time as the invocation's ``scheduled_at``, and its
next due time is the first after now; the times between are not fired nor recorded. (The SDK's
invocation has a ``scheduled_at`` and promises no backlog; a backlog of an hourly schedule after
a day down would start 24 sessions at once.) A one-time automation whose ``run_at`` passed while
the server was down fires when it comes back, then is ``completed``. A due time that comes while
the automation's previous delivery is still ``queued`` is recorded ``skipped`` with
``skip_reason: "pending_delivery"``, and not delivered (a delivery queued for longer than
:data:`~troupe.protocol.automations.PENDING_DELIVERY_S` is taken for lost with its process).

**Firing** goes to the sessions' code, ``runtime.sessions`` (:class:`Sessions`): a
``new_session`` target starts a session (``create_session`` of the session create body it makes,
checked as ``POST /v1/agents/sessions`` checks one), an ``existing_session`` target gets its
instructions as a user message (``submit_events``). The
invocation is ``queued`` when claimed, then ``completed`` with the session's id, or ``failed``
with an ``error``; an ``existing_session`` target that is gone (404) pauses the automation with
``pause_reason: "target_session_failed"``. Without sessions on this server the invocation fails
with ``sessions_unavailable``.

**Confidential values** of a ``new_session`` target's environment (its ``env``,
``setup_commands``, ``files``) never reach the store in plain text: sealed with the configured
``credentials_keys`` (:class:`~troupe.storage.credentials.CredentialKeys`), else kept in this
process's memory only, so that an automation fired by another process or after a restart fails
with ``credentials_unavailable`` (update its target to give them again).

Example::

    automations = AutomationService(store, CredentialKeys([]), sessions=lambda: runtime.sessions)
    made = await automations.create_automation("acme", parse_automation_create(body, now=time.time()))
    await automations.pause_automation("acme", made["id"])
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from troupe.protocol import InvalidRequest, ProtocolError
from troupe.protocol.automations import (
    apply_automation_update,
    automation_deleted,
    automation_not_found,
    automation_object,
    invocation_not_found,
    named_under,
    new_automation_id,
    new_invocation_id,
    next_due,
    restore_environment,
    session_body,
    session_events,
    withhold_environment,
)
from troupe.protocol.sessions import parse_session_create, parse_session_events
from troupe.runtime.agents import AgentService
from troupe.runtime.environments import EnvironmentService
from troupe.runtime.store_client import StoreClient
from troupe.runtime.vaults import VaultService
from troupe.storage import Order, Page
from troupe.storage.credentials import IN_MEMORY, CredentialKeys, CredentialsUnavailable

__all__ = ["AutomationService", "REPLAN_S", "Sessions"]

log = logging.getLogger(__name__)

REPLAN_S = 30.0
"""The longest the scheduler sleeps without reading the store (another replica's changes)."""

SESSIONS_UNAVAILABLE = ("This server does not serve the Agents API's sessions (/v1/agents/sessions), which an "
                        "automation starts or reaches: nothing was delivered.")  # fmt: skip
CREDENTIALS_UNAVAILABLE = ("The automation's environment has confidential values (env, setup_commands, files) that "
                           "this process does not have: they are kept in the memory of the process that stored them "
                           "unless credentials_keys are set. Update the automation's target to give them again.")  # fmt: skip


class Sessions(Protocol):
    """What a firing calls of the Agents API's sessions (``runtime.sessions``,
    :class:`~troupe.runtime.sessions.SessionService`)."""

    async def create_session(self, tenant: str, parsed: dict[str, Any]) -> dict[str, Any]:
        """Start a session from its create body as
        :func:`~troupe.protocol.sessions.parse_session_create` checks it; its ``agent.session`` object."""
        ...

    async def submit_events(self, tenant: str, session_id: str, events: list[dict[str, Any]]) -> None:
        """Act on a session's events as :func:`~troupe.protocol.sessions.parse_session_events` checks them."""
        ...


class AutomationService:
    """The Agents API's automations: create, retrieve, update, list, delete, pause, resume, their
    invocations; and the scheduler that fires them.

    Args:
        store: the store client.
        keys: what seals an environment's confidential values (none: kept in memory only).
        sessions: returns the runtime's sessions, or None when it has none.
        agents: the runtime's agents, which a ``new_session`` target's agent is checked against
            (none: not checked).
        environments: the runtime's environments, whose parser checks a ``new_session`` target's
            ``openai_hosted`` environment against this server's limits (none: not checked).
        replan_s: the longest the scheduler sleeps without reading the store.
        vaults: the runtime's vaults, which a ``new_session`` target's ``vault_ids`` must name
            (the tenant's, active; none: not checked).
    """

    def __init__(
        self, store: StoreClient, keys: CredentialKeys, *, sessions: Callable[[], Sessions | None],
        agents: AgentService | None = None, environments: EnvironmentService | None = None,
        replan_s: float = REPLAN_S, vaults: VaultService | None = None,
    ) -> None:  # fmt: skip
        self.store = store
        self.vaults = vaults
        self.agents = agents
        self.environments = environments
        self.keys = keys
        self._sessions = sessions
        self.replan_s = replan_s
        self._held: dict[str, dict[str, Any]] = {}
        """Confidential values kept in memory only (no ``credentials_keys``), by automation id."""
        self._wake = asyncio.Event()
        self._scheduler: asyncio.Task[None] | None = None
        self._firings: set[asyncio.Task[None]] = set()

    # -- the API -----------------------------------------------------------------

    async def create_automation(self, tenant: str, definition: dict[str, Any]) -> dict[str, Any]:
        """A new, active automation with ``definition``
        (:func:`~troupe.protocol.automations.parse_automation_create`); it does not fire now.

        Raises:
            NotFound: a ``new_session`` target's agent that is not the tenant's
                (``target.agent_id``), or its inline agent's model is not served (``target.agent.model``).
            InvalidRequest: an inline agent's MCP server the policy refuses.
        """
        self.start()
        await self._check_target(tenant, definition["target"])
        now = time.time()
        automation_id = new_automation_id()
        target, kept = self._withhold(automation_id, definition["target"])
        automation = automation_object(automation_id, {**definition, "target": target}, created_at=now)
        made = await self.store.create_automation(tenant, automation, next_due(automation, after=now), kept)
        self._replan()
        return made

    async def get_automation(self, tenant: str, automation_id: str) -> dict[str, Any]:
        """Raises: NotFound: no such automation (naming ``automation_id``)."""
        self.start()
        found = await self.store.get_automation(tenant, automation_id)
        if found is None:
            raise automation_not_found(automation_id)
        return found

    async def list_automations(
        self, tenant: str, *, after: str | None = None, limit: int = 20, order: Order = "desc",
        session_id: str | None = None,
    ) -> Page:  # fmt: skip
        """The tenant's automations, newest first unless ``order`` is ``asc``; with
        ``session_id``, those whose target is that existing session."""
        self.start()
        return await self.store.list_automations(tenant, after=after, limit=limit, order=order, session_id=session_id)

    async def update_automation(self, tenant: str, automation_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        """The automation with ``changes`` (:func:`~troupe.protocol.automations.parse_automation_update`) made.

        Raises:
            NotFound: no such automation.
            InvalidRequest: a change that does not fit the automation
                (:func:`~troupe.protocol.automations.apply_automation_update`).
        """
        apply_automation_update(await self.get_automation(tenant, automation_id), changes)  # raises what is refused
        kept = None
        if "target" in changes:
            await self._check_target(tenant, changes["target"])
            target, kept = self._withhold(automation_id, changes["target"])
            changes = {**changes, "target": target}
        return self._replanned(automation_id, await self.store.update_automation(tenant, automation_id, changes,
                                                                                time.time(), kept))  # fmt: skip

    async def delete_automation(self, tenant: str, automation_id: str) -> dict[str, Any]:
        """Delete the automation and its invocations (not the sessions it started).

        Raises: NotFound: no such automation.
        """
        if not await self.store.delete_automation(tenant, automation_id):
            raise automation_not_found(automation_id)
        self._held.pop(automation_id, None)
        self._replan()
        return automation_deleted(automation_id)

    async def pause_automation(self, tenant: str, automation_id: str) -> dict[str, Any]:
        """No more scheduled invocations until resumed (one under way goes on).

        Raises:
            NotFound: no such automation.
            InvalidRequest: a completed one-time automation (naming ``automation_id``).
        """
        current = await self.get_automation(tenant, automation_id)
        if current["status"] == "completed":
            raise InvalidRequest(f"Automation '{automation_id}' has completed: there is nothing to pause.",
                                 param="automation_id", code="invalid_state")  # fmt: skip
        return await self._set_status(tenant, automation_id, "paused")

    async def resume_automation(self, tenant: str, automation_id: str) -> dict[str, Any]:
        """Scheduled invocations again, from the next due time after now (what was missed while
        paused is not fired).

        Raises:
            NotFound: no such automation.
            InvalidRequest: a one-time automation whose ``run_at`` has passed (naming ``run_at``:
                update it to a future time first), or that has completed.
        """
        current = await self.get_automation(tenant, automation_id)
        if current["type"] == "once" and (current["status"] == "completed" or current["run_at"] <= time.time()):
            raise InvalidRequest(f"Invalid 'run_at': the one-time automation '{automation_id}' "
                                 f"{'has completed' if current['status'] == 'completed' else 'has a run_at in the past'}"
                                 "; a resumed one-time automation needs a future run_at.", param="run_at",
                                 code="invalid_value")  # fmt: skip
        return await self._set_status(tenant, automation_id, "active")

    async def _set_status(self, tenant: str, automation_id: str, status: str, reason: str | None = None) -> dict[str, Any]:
        found = await self.store.set_automation_status(tenant, automation_id, status, time.time(), reason)
        return self._replanned(automation_id, found)

    def _replanned(self, automation_id: str, found: dict[str, Any] | None) -> dict[str, Any]:
        """``found``, the automation a change returned, once the scheduler is told to plan again.

        Raises: NotFound: None, no such automation.
        """
        if found is None:
            raise automation_not_found(automation_id)
        self._replan()
        return found

    async def invoke(self, tenant: str, automation_id: str) -> dict[str, Any]:
        """A manual invocation, ``queued``, delivered in the background; the schedule is not changed.

        Raises: NotFound: no such automation.
        """
        automation = await self.get_automation(tenant, automation_id)
        invocation = await self.store.create_manual_invocation(tenant, automation_id, new_invocation_id(), time.time())
        if invocation is None:
            raise automation_not_found(automation_id)
        self._spawn(self._fire(tenant, invocation, automation))
        return invocation

    async def get_invocation(self, tenant: str, automation_id: str, invocation_id: str) -> dict[str, Any]:
        """Raises: NotFound: no such automation (``automation_id``) or invocation of it (``invocation_id``)."""
        await self.get_automation(tenant, automation_id)
        found = await self.store.get_invocation(tenant, automation_id, invocation_id)
        if found is None:
            raise invocation_not_found(invocation_id)
        return found

    async def list_invocations(
        self, tenant: str, automation_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
    ) -> Page:
        """The automation's invocations, newest first unless ``order`` is ``asc``.

        Raises: NotFound: no such automation.
        """
        await self.get_automation(tenant, automation_id)
        return await self.store.list_invocations(tenant, automation_id, after=after, limit=limit, order=order)

    async def _check_target(self, tenant: str, target: dict[str, Any]) -> None:
        """A ``new_session`` target as a session create body is checked, so that what a session
        would refuse is refused now, named under ``target``: the sessions' body
        (:func:`~troupe.protocol.sessions.parse_session_create`: ``vault_ids``, an environment's
        type), an ``openai_hosted`` environment against this server's limits (the environments'
        parser), the saved agent is the tenant's, the inline agent's model is served and its MCP
        servers may be reached."""
        if target["type"] != "new_session":
            return
        with named_under("target"):
            parsed = parse_session_create(session_body(target))
            if self.environments is not None and parsed["environment"]["type"] != "none":
                self.environments.parse(target["environment"])
        if self.vaults is not None:
            with named_under("target"):
                await self.vaults.check_vault_ids(tenant, parsed["vault_ids"])
        if self.agents is None:
            return
        if target["agent_id"] is not None:
            with named_under("target"):
                await self.agents.get_agent(tenant, target["agent_id"])
        else:
            with named_under("target.agent"):
                await self.agents.check(tenant, target["agent"])

    # -- confidential values -----------------------------------------------------

    def _withhold(self, automation_id: str, target: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """``target`` as stored, and what the row keeps of its confidential values."""
        public, secrets = withhold_environment(target)
        kept = self.keys.keep(secrets)
        if kept == IN_MEMORY:
            self._held[automation_id] = secrets
        else:
            self._held.pop(automation_id, None)
        return public, kept

    async def _target(self, tenant: str, automation: dict[str, Any]) -> dict[str, Any]:
        """The automation's target with its confidential values.

        Raises: CredentialsUnavailable: kept in another process's memory, or sealed with a key not set here.
        """
        kept = await self.store.automation_secrets(tenant, automation["id"])
        if kept == IN_MEMORY:
            if automation["id"] not in self._held:
                raise CredentialsUnavailable("kept in memory only")
            return restore_environment(automation["target"], self._held[automation["id"]])
        return restore_environment(automation["target"], self.keys.open(kept))

    # -- the scheduler -----------------------------------------------------------

    def start(self) -> None:
        """Run the scheduler in this event loop, if it is not running (a no-op outside a loop)."""
        if self._scheduler is not None and not self._scheduler.done():
            return
        with contextlib.suppress(RuntimeError):  # no running loop: the next call starts it
            self._scheduler = asyncio.get_running_loop().create_task(self.run_scheduler())

    def _replan(self) -> None:
        self._wake.set()

    async def close(self) -> None:
        """Stop the scheduler and the deliveries under way."""
        tasks = [t for t in (self._scheduler, *self._firings) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def run_scheduler(self) -> None:
        """Fire what is due, then sleep until the next due time (module docstring); forever."""
        while True:
            self._wake.clear()  # before the read: a change made during it wakes the wait below
            try:
                due = await self.store.next_automation_due()
                now = time.time()
                if due is not None and due <= now and await self.fire_due(now):
                    continue
                if due is not None and due <= now:  # claimed by another replica this instant: look again soon
                    due = now + 1
            except Exception:  # noqa: BLE001 - the store is down, or a firing failed: the next round tries again
                log.exception("the automations' scheduler failed a round")
                due = None
            wait = self.replan_s if due is None else min(due - time.time(), self.replan_s)
            # asyncio.timeout, not wait_for: 3.11's wait_for may swallow a cancellation that
            # comes as the event is set (close() then waited for ever).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(wait, 0.0)):
                    await self._wake.wait()

    async def fire_due(self, now: float) -> list[dict[str, Any]]:
        """Claim every due time at or before ``now`` and fire what this process claimed (in the
        background), but for a time ``skipped`` as an earlier delivery is pending; the invocations it claimed."""
        claimed = []
        for tenant, automation_id, due_at in await self.store.due_automations(now):
            invocation = await self.store.claim_automation_due(tenant, automation_id, due_at, new_invocation_id(), now)
            if invocation is not None:
                claimed.append(invocation)
                if invocation["status"] == "queued":  # not skipped
                    self._spawn(self._fire(tenant, invocation, invocation["source"]["automation"]))
        return claimed

    def _spawn(self, delivery: Any) -> None:
        task = asyncio.get_running_loop().create_task(delivery)
        self._firings.add(task)
        task.add_done_callback(self._firings.discard)

    async def _fire(self, tenant: str, invocation: dict[str, Any], automation: dict[str, Any]) -> dict[str, Any] | None:
        """Deliver an invocation to its target; the invocation as finished."""
        target = automation["target"]
        session_id = target.get("session_id")
        try:
            sessions = self._sessions()
            if sessions is None:
                raise _Undelivered("sessions_unavailable", SESSIONS_UNAVAILABLE)
            if target["type"] == "new_session":
                try:
                    body = session_body(await self._target(tenant, automation))
                except CredentialsUnavailable as exc:
                    raise _Undelivered("credentials_unavailable", CREDENTIALS_UNAVAILABLE) from exc
                session_id = (await sessions.create_session(tenant, parse_session_create(body)))["id"]
            else:
                events = parse_session_events({"events": session_events(target)})
                await sessions.submit_events(tenant, target["session_id"], events)
        except Exception as exc:  # noqa: BLE001 - recorded on the invocation, as OpenAI's error
            error = _error_of(exc)
            finished = await self.store.finish_invocation(tenant, invocation["id"], "failed", session_id, error)
            if target["type"] == "existing_session" and isinstance(exc, ProtocolError) and exc.status == 404:
                current = await self.store.get_automation(tenant, automation["id"])
                if current is not None and current["status"] == "active":  # not a one-time one that has run
                    await self._set_status(tenant, automation["id"], "paused", "target_session_failed")
            return finished
        return await self.store.finish_invocation(tenant, invocation["id"], "completed", session_id, None)


class _Undelivered(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code, self.message = code, message


def _error_of(exc: Exception) -> dict[str, str]:
    """An invocation's ``error`` (``{"code", "message"}``) for what stopped its delivery."""
    if isinstance(exc, _Undelivered):
        return {"code": exc.code, "message": exc.message}
    if isinstance(exc, ProtocolError):
        return {"code": exc.code or exc.type, "message": exc.message}
    log.exception("an automation's delivery failed", exc_info=exc)
    return {"code": "server_error", "message": f"The delivery failed: {type(exc).__name__}."}
