"""Runtime.automations' service over a real store (troupe.runtime.automations), without Ray:
the scheduler fires a due automation once, two schedulers over one store (two replicas) claim
each due time once, and an environment's confidential values never reach the database file.

Firing goes through ``Runtime.local``'s real sessions. Where an ``openai_hosted`` environment's
confidential values are followed to the session create body, ``Recorded`` stands in for
``runtime.sessions`` and records that body: a real hosted environment needs a sandboxed
container (the environments' own tests), and what is checked here is that the values come back
whole from where they were kept (sealed, or this process's memory), not what a session does with them.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.servers import wait_until
from troupe.protocol.automations import parse_automation_create, parse_automation_update
from troupe.protocol.sessions import parse_session_create
from troupe.runtime.automations import AutomationService
from troupe.runtime.facade import Runtime
from troupe.runtime.settings import RuntimeSettings
from troupe.runtime.store_client import AsyncStore
from troupe.storage.credentials import CredentialKeys, new_key

SECRET = "s3cret-token-5c1e"
EXISTING = {"type": "existing_session", "session_id": "sess_1", "instructions": "Report the build."}
MESSAGE = {"role": "user", "type": "message", "content": [{"type": "input_text", "text": "Check the build."}]}
HOSTED = {"type": "openai_hosted", "env": {"TOKEN": SECRET}, "container_size": "small"}
NEW = {"type": "new_session", "agent_id": "agent_1", "environment": HOSTED, "input": [MESSAGE]}


class Recorded:
    """The session create bodies a firing sends (module docstring)."""

    def __init__(self) -> None:
        self.created: list[tuple[str, dict[str, Any]]] = []
        self.submitted: list[tuple[str, str, list[dict[str, Any]]]] = []

    async def create_session(self, tenant: str, body: dict[str, Any]) -> dict[str, Any]:
        self.created.append((tenant, body))
        return {"id": f"sess_new{len(self.created)}", "object": "agent.session"}

    async def submit_events(self, tenant: str, session_id: str, events: list[dict[str, Any]]) -> None:
        self.submitted.append((tenant, session_id, events))


def once(target: dict[str, Any], in_s: float = 1.0) -> dict[str, Any]:
    now = time.time()
    return parse_automation_create({"type": "once", "name": "soon", "run_at": int(now + in_s) + 1, "target": target},
                                   now=now)  # fmt: skip


async def finished(service: AutomationService, automation_id: str) -> dict[str, Any]:
    """The automation's one invocation, once its delivery has ended."""
    async def done() -> bool:
        page = await service.list_invocations("acme", automation_id)
        return bool(page.data) and page.data[0]["status"] != "queued"

    await wait_until(done, timeout_s=15, what="the invocation's delivery")
    [invocation] = (await service.list_invocations("acme", automation_id)).data
    return invocation


@pytest.fixture
async def store():
    s = AsyncStore.open(":memory:")
    yield s
    await s.close()


async def test_the_scheduler_fires_a_due_automation_once_into_a_new_session(store: AsyncStore) -> None:
    sessions = Recorded()
    service = AutomationService(store, CredentialKeys([new_key()]), sessions=lambda: sessions)
    try:
        made = await service.create_automation("acme", once(NEW))  # starts the scheduler
        assert made["target"]["environment"] == {"type": "openai_hosted", "container_size": "small"}, "withheld"
        invocation = await finished(service, made["id"])
        assert (invocation["status"], invocation["session_id"], invocation["error"]) == ("completed", "sess_new1", None)
        assert invocation["scheduled_at"] == made["run_at"]
        [(tenant, body)] = sessions.created
        assert tenant == "acme" and body == parse_session_create(
            {"agent_id": "agent_1", "environment": HOSTED, "input": [MESSAGE], "metadata": {}}), \
            "the session create body, checked as the sessions' route checks it, with the environment whole again"
        assert (await service.get_automation("acme", made["id"]))["status"] == "completed"
    finally:
        await service.close()


async def test_runtime_automations_start_a_session_and_send_another_a_turn() -> None:
    """Runtime.local's automations fire through its real sessions (the sim model, in process):
    a new session that the invocation names; the instructions as an existing session's next
    turn; a session that is gone fails the invocation and pauses the automation."""
    runtime = Runtime.local(RuntimeSettings(storage_path=":memory:"))
    service = runtime.automations
    try:
        started = await service.create_automation("acme", once(
            {"type": "new_session", "agent": {"model": "sim"}, "environment": {"type": "none"}, "input": [MESSAGE],
             "metadata": {"from": "automation"}}))  # fmt: skip
        invocation = await finished(service, started["id"])
        assert (invocation["status"], invocation["error"]) == ("completed", None)
        session = await runtime.sessions.get_session("acme", invocation["session_id"])
        assert session["metadata"] == {"from": "automation"}

        async def idle() -> bool:
            return (await runtime.sessions.get_session("acme", session["id"]))["status"] == "idle"

        await wait_until(idle, what="the session's first turn's end")
        periodic = parse_automation_create({"type": "periodic", "name": "p", "expression": "0 0 1 1 *",
                                            "timezone": "UTC", "target": {**EXISTING, "session_id": session["id"]}},
                                           now=time.time())  # fmt: skip
        reminder = await service.create_automation("acme", periodic)
        manual = await service.invoke("acme", reminder["id"])
        assert (manual["status"], manual["source"]) == ("queued", {"type": "manual"})
        assert (await finished(service, reminder["id"]))["status"] == "completed"
        assert len((await runtime.sessions.list_turns("acme", session["id"])).data) == 2

        gone = await service.create_automation("acme", {**periodic, "target": {**EXISTING, "session_id": "sess_gone"}})
        await service.invoke("acme", gone["id"])
        failed = await finished(service, gone["id"])
        assert failed["status"] == "failed" and failed["error"]["code"] == "not_found"
        paused = await service.get_automation("acme", gone["id"])
        assert (paused["status"], paused["pause_reason"]) == ("paused", "target_session_failed")
    finally:
        await runtime.close()


async def test_without_sessions_the_invocation_fails_saying_so(store: AsyncStore) -> None:
    service = AutomationService(store, CredentialKeys([]), sessions=lambda: None)
    try:
        made = await service.create_automation("acme", once(EXISTING))
        invocation = await finished(service, made["id"])
        assert (invocation["status"], invocation["error"]["code"]) == ("failed", "sessions_unavailable")
    finally:
        await service.close()


async def test_two_schedulers_over_one_store_fire_each_due_time_once(store: AsyncStore) -> None:
    """Two replicas' services over one store (the storage actor's, on Ray): both see the same
    due times at the same moment, and each is claimed, and its delivery tried, once (here without
    sessions: each invocation fails, once)."""
    replicas = [AutomationService(store, CredentialKeys([]), sessions=lambda: None) for _ in range(2)]
    try:
        made = [await replicas[0].create_automation("acme", once(EXISTING, in_s=60)) for _ in range(10)]
        due = max(a["run_at"] for a in made)
        claimed = await asyncio.gather(*(replica.fire_due(due) for replica in replicas))
        assert sum(map(len, claimed)) == 10 and {i["automation_id"] for c in claimed for i in c} == {
            a["id"] for a in made}
        for automation in made:  # one invocation each (finished unpacks it)
            assert (await finished(replicas[0], automation["id"]))["error"]["code"] == "sessions_unavailable"
    finally:
        for replica in replicas:
            await replica.close()


@pytest.mark.parametrize("sealed", [True, False])
async def test_an_environments_secret_never_reaches_the_database_file(tmp_path: Path, sealed: bool) -> None:
    path = tmp_path / "t.duckdb"
    store = AsyncStore.open(str(path))
    sessions = Recorded()
    service = AutomationService(store, CredentialKeys([new_key()] if sealed else []), sessions=lambda: sessions)
    try:
        made = await service.create_automation("acme", once(NEW, in_s=3600))
        target = {**NEW, "environment": {**HOSTED, "setup_commands": [{"command": f"login {SECRET}"}]}}
        await service.update_automation("acme", made["id"], parse_automation_update({"target": target}, now=0))
        await service.invoke("acme", made["id"])
        await finished(service, made["id"])
        assert SECRET in repr(sessions.created[0][1]), "the session got it"
    finally:
        await service.close()
        await store.close()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files and not [p for p in files if SECRET.encode() in p.read_bytes()]


async def test_secrets_kept_in_memory_are_not_had_by_another_process(store: AsyncStore) -> None:
    """Without credentials_keys an environment's confidential values stay in the memory of the
    process that took them: another replica (or this one, restarted) fires without them."""
    sessions = Recorded()
    here, there = (AutomationService(store, CredentialKeys([]), sessions=lambda: sessions) for _ in range(2))
    try:
        made = await here.create_automation("acme", once(NEW, in_s=60))
        [claimed] = await there.fire_due(made["run_at"])
        invocation = await finished(here, made["id"])
        assert (invocation["id"], invocation["status"]) == (claimed["id"], "failed")
        assert invocation["error"]["code"] == "credentials_unavailable" and sessions.created == []
    finally:
        await here.close()
        await there.close()


async def test_schedules_survive_a_restart_and_a_missed_time_fires_once(tmp_path: Path) -> None:
    """The server was down when a periodic automation's time came and went: the next process's
    scheduler fires it once, for the latest missed time, and plans the next after now."""
    path = str(tmp_path / "t.duckdb")
    before = AsyncStore.open(path)
    service = AutomationService(before, CredentialKeys([]), sessions=lambda: None)
    made = await service.create_automation("acme", parse_automation_create(
        {"type": "periodic", "name": "hourly", "expression": "0 * * * *", "timezone": "UTC", "target": EXISTING},
        now=time.time()))  # fmt: skip
    await service.close()
    # Down for a day: the row's next due time is a day ago (what it was when the server stopped).
    missed = made["created_at"] - 86_400
    await before.call("set_automation_status", ("acme", made["id"], "active", missed - 1))
    assert await before.next_automation_due() < time.time()
    await before.close()

    sessions = Recorded()
    after = AsyncStore.open(path)
    restarted = AutomationService(after, CredentialKeys([]), sessions=lambda: sessions)
    try:
        restarted.start()  # as Runtime.on_ray does at boot
        invocation = await finished(restarted, made["id"])
        assert invocation["status"] == "completed" and invocation["scheduled_at"] <= time.time() - 86_400 + 3600
        assert len(sessions.submitted) == 1, "once, not once per missed hour"
        assert await after.next_automation_due() > time.time(), "the next after now"
        assert len((await restarted.list_invocations("acme", made["id"])).data) == 1
    finally:
        await restarted.close()
        await after.close()
