"""Subagents on the in-process runtime: a parent turn whose subagent calls nobody ran (the
process that would have run them is gone) is driven on when the session is next read."""

from __future__ import annotations

import asyncio
import json

import pytest

from troupe.protocol.sessions import parse_session_create
from troupe.runtime import Runtime, RuntimeSettings
from troupe.runtime.sessions import SessionService

pytestmark = pytest.mark.asyncio

TASK = json.dumps({"task": "[[say done]]"})
SCRIPT = f"[[call create_subagent {TASK}]] [[call create_subagent {TASK}]] [[then wait_for_subagents {{}}]]"


async def test_a_parent_turn_left_in_its_subagent_calls_goes_on_when_read_again(tmp_path) -> None:
    runtime = Runtime.local(RuntimeSettings(storage_path=str(tmp_path / "t.duckdb")))
    try:
        body = {"environment": {"type": "none"}, "agent": {"model": "sim", "multi_agent": {"enabled": True}},
                "input": SCRIPT}  # fmt: skip
        # The service that started the turn goes before it could run the calls (as with a restart).
        gone = runtime.sessions
        made = await gone.create_session("", parse_session_create(body))
        await gone.close()
        [turn] = (await runtime.store.list_turns("", made["id"])).data
        async for _ in await runtime.follow_response("", turn["responses"][0]):
            pass
        assert (await runtime.store.get_turn("", made["id"], turn["id"]))["responses"] == turn["responses"], "left"

        runtime.sessions = SessionService(runtime)  # what a restarted server has
        assert (await runtime.sessions.get_session("", made["id"]))["status"] == "in_progress"
        states = []

        async def idle() -> bool:
            states.append(await runtime.sessions.get_session("", made["id"]))
            return states[-1]["status"] == "idle"

        await until_async(idle)
        [turn] = (await runtime.sessions.list_turns("", made["id"])).data
        assert turn["status"] == "completed"
        subagents = (await runtime.sessions.list_subagents("", made["id"])).data
        assert len(subagents) == 2, "each create made its subagent once"
        items = (await runtime.sessions.list_items("", made["id"], order="asc")).data
        [waited] = [i for i in items if i["type"] == "wait_for_subagents_call"]
        assert waited["status"] == "completed" and sorted(waited["recipient_agent_ids"]) == sorted(s["id"] for s in subagents)
    finally:
        await runtime.close()


async def until_async(check, timeout_s: float = 10.0) -> None:
    """``check()`` (a coroutine function) until it is true."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("the condition did not hold")
        await asyncio.sleep(0.05)

