"""Runtime.automations' service over a real store (troupe.runtime.automations), without Ray:
the scheduler fires a due automation once, two schedulers over one store (two replicas) claim
each due time once, and an environment's confidential values never reach the database file.

Firing goes through ``Runtime.local``'s real sessions (the sim model, in process). An
``openai_hosted`` environment's confidential values are followed to where they are used: the
session's sandbox, whose command prints them (these tests need bubblewrap, as ``make test`` has).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path
from typing import Any

import pytest

from tests.servers import wait_until
from tests.unit.sandbox_support import needs_bwrap
from troupe.protocol.agents import parse_agent_create
from troupe.protocol.automations import parse_automation_create, parse_automation_update
from troupe.protocol.sessions import parse_session_create
from troupe.runtime.automations import AutomationService
from troupe.runtime.facade import Runtime
from troupe.runtime.settings import RuntimeSettings
from troupe.runtime.store_client import AsyncStore
from troupe.storage.credentials import CredentialKeys, new_key

SECRET = "s3cret-token-5c1e"
DIGEST = hashlib.sha256(SECRET.encode()).hexdigest() + "  -\n"
EXISTING = {"type": "existing_session", "session_id": "sess_1", "instructions": "Report the build."}
MESSAGE = {"role": "user", "type": "message", "content": [{"type": "input_text", "text": "Check the build."}]}
HOSTED = {"type": "openai_hosted", "env": {"TOKEN": SECRET}, "container_size": "small"}
NEW = {"type": "new_session", "agent_id": "agent_1", "environment": HOSTED, "input": [MESSAGE]}


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


@needs_bwrap
async def test_the_scheduler_fires_a_due_automation_once_into_a_new_session(tmp_path: Path) -> None:
    runtime = hosted_runtime(tmp_path, sealed=True)
    try:
        target = await new_target(runtime)
        made = await runtime.automations.create_automation("acme", once(target))  # starts the scheduler
        assert made["target"]["environment"] == {"type": "openai_hosted", "container_size": "small"}, "withheld"
        invocation = await finished(runtime.automations, made["id"])
        assert (invocation["status"], invocation["error"]) == ("completed", None)
        assert invocation["scheduled_at"] == made["run_at"]
        assert await printed(runtime, invocation["session_id"]) == DIGEST, "the env reached the sandbox whole"
        assert (await runtime.automations.get_automation("acme", made["id"]))["status"] == "completed"
    finally:
        await runtime.close()


def hosted_runtime(tmp_path: Path, *, sealed: bool) -> Runtime:
    keys = (new_key(),) if sealed else ()
    return Runtime.local(RuntimeSettings(storage_path=str(tmp_path / "t.duckdb"), credentials_keys=keys))


async def new_target(runtime: Runtime) -> dict[str, Any]:
    """A new_session target: a saved agent, the hosted environment with the secret, and input
    that prints its digest from the session's sandbox."""
    agent = await runtime.agents.create_agent("acme", parse_agent_create({"model": "sim"}))
    # Its digest, not the secret: what a command prints is stored with the session, as it should be.
    shell = {**MESSAGE, "content": [{"type": "input_text", "text": '[[shell]]printf %s "$TOKEN" | sha256sum[[/shell]]'}]}
    return {**NEW, "agent_id": agent["id"], "input": [shell]}


async def printed(runtime: Runtime, session_id: str) -> str:
    """What the session's command printed, once its turn has ended."""
    async def idle() -> bool:
        return (await runtime.sessions.get_session("acme", session_id))["status"] == "idle"

    await wait_until(idle, timeout_s=30, what="the session's turn's end")
    items = (await runtime.sessions.list_items("acme", session_id, order="asc")).data
    [command] = [i for i in items if i["type"] == "command_execution"]
    return command["output"]


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


@needs_bwrap
@pytest.mark.parametrize("sealed", [True, False])
async def test_an_environments_secret_never_reaches_the_database_file(tmp_path: Path, sealed: bool) -> None:
    runtime = hosted_runtime(tmp_path, sealed=sealed)
    try:
        target = await new_target(runtime)
        made = await runtime.automations.create_automation("acme", once({**target, "input": [MESSAGE]}, in_s=3600))
        await runtime.automations.update_automation("acme", made["id"], parse_automation_update({"target": target},
                                                                                                now=0))  # fmt: skip
        await runtime.automations.invoke("acme", made["id"])
        invocation = await finished(runtime.automations, made["id"])
        assert await printed(runtime, invocation["session_id"]) == DIGEST, "the session's sandbox got it"
    finally:
        await runtime.close()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files and not [p for p in files if SECRET.encode() in p.read_bytes()]


async def test_secrets_kept_in_memory_are_not_had_by_another_process(tmp_path: Path) -> None:
    """Without credentials_keys an environment's confidential values stay in the memory of the
    process that took them: another replica (or this one, restarted) fires without them."""
    runtime = hosted_runtime(tmp_path, sealed=False)
    there = AutomationService(runtime.store, CredentialKeys([]), sessions=lambda: runtime.sessions)
    try:
        made = await runtime.automations.create_automation("acme", once(await new_target(runtime), in_s=60))
        [claimed] = await there.fire_due(made["run_at"])
        invocation = await finished(runtime.automations, made["id"])
        assert (invocation["id"], invocation["status"]) == (claimed["id"], "failed")
        assert invocation["error"]["code"] == "credentials_unavailable"
        assert (await runtime.sessions.list_sessions("acme")).data == [], "no session was started without them"
    finally:
        await there.close()
        await runtime.close()


async def test_schedules_survive_a_restart_and_a_missed_time_fires_once(tmp_path: Path) -> None:
    """The server was down when a periodic automation's time came and went: the next process's
    scheduler fires it once, for the latest missed time, and plans the next after now."""
    settings = RuntimeSettings(storage_path=str(tmp_path / "t.duckdb"))
    before = Runtime.local(settings)
    try:
        session = await before.sessions.create_session("acme", parse_session_create(
            {"environment": {"type": "none"}, "agent": {"model": "sim"}, "input": "hello"}))  # fmt: skip
        made = await before.automations.create_automation("acme", parse_automation_create(
            {"type": "periodic", "name": "hourly", "expression": "0 * * * *", "timezone": "UTC",
             "target": {**EXISTING, "session_id": session["id"]}}, now=time.time()))  # fmt: skip
        # Down for a day: the row's next due time is a day ago (what it was when the server stopped).
        missed = made["created_at"] - 86_400
        await before.store.call("set_automation_status", ("acme", made["id"], "active", missed - 1))
        assert await before.store.next_automation_due() < time.time()
    finally:
        await before.close()

    after = Runtime.local(settings)
    try:
        after.automations.start()  # as Runtime.on_ray does at boot
        invocation = await finished(after.automations, made["id"])
        assert invocation["status"] == "completed" and invocation["scheduled_at"] <= time.time() - 86_400 + 3600
        assert len((await after.automations.list_invocations("acme", made["id"])).data) == 1
        assert await after.store.next_automation_due() > time.time(), "the next after now"

        async def two_turns() -> bool:
            return len((await after.sessions.list_turns("acme", session["id"])).data) == 2

        await wait_until(two_turns, what="the missed time's turn, once")  # the first turn and this one
    finally:
        await after.close()
