"""Subagents on the in-process runtime: the parent's stream shows its subagents as they are
made, before a wait beside them ends; a parent turn whose subagent calls nobody ran (the
process that would have run them is gone) is driven on when the session is next read."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.side_effects import COUNTED_TOOLS, executions
from troupe.protocol.sessions import parse_session_create
from troupe.runtime import Runtime, RuntimeSettings
from troupe.runtime.sessions import SessionService

pytestmark = pytest.mark.asyncio

TASK = json.dumps({"task": "[[say done]]"})
SCRIPT = f"[[call create_subagent {TASK}]] [[call create_subagent {TASK}]] [[then wait_for_subagents {{}}]]"


async def test_the_parents_stream_shows_each_subagent_when_made_and_each_call_when_done(tmp_path) -> None:
    db, gate = str(tmp_path / "side.sqlite"), tmp_path / "gate"
    task = json.dumps({"task": f"[[call gate {json.dumps({'db': db, 'key': 'g', 'path': str(gate)})}]]"})
    script = f"[[call create_subagent {task}]] [[call create_subagent {task}]] [[then wait_for_subagents {{}}]]"
    runtime = Runtime.local(RuntimeSettings(storage_path=str(tmp_path / "t.duckdb"), tools=COUNTED_TOOLS))
    seen: list[dict] = []
    try:
        body = {"environment": {"type": "none"}, "agent": {"model": "sim", "multi_agent": {"enabled": True}},
                "input": script}  # fmt: skip
        events = await runtime.sessions.stream_new_session("", parse_session_create(body))
        async with asyncio.timeout(30):
            async for batch in events:
                seen += batch
                made = [e for e in seen if e["type"] == "agent.session.subagent.created"]
                if len(made) == 2 and not gate.exists():
                    # The subagents wait at their gate, so the parent's wait has not ended.
                    assert executions(db, "g") <= 2
                    assert not [e for e in seen if e["type"] == "agent.session.turn.item.done"
                                and e["item"]["type"] == "wait_for_subagents_call"]  # fmt: skip
                    gate.touch()
        session_id = seen[0]["session"]["id"]
        subagents = (await runtime.sessions.list_subagents("", session_id, order="asc")).data
        made = [e["subagent"] for e in seen if e["type"] == "agent.session.subagent.created"]
        assert sorted(s["id"] for s in made) == sorted(s["id"] for s in subagents) and len(made) == 2
        assert {(s["status"], s["session_id"]) for s in made} == {("active", session_id)}
        added = {e["item"]["id"]: e["output_index"] for e in seen if e["type"] == "agent.session.turn.item.added"}
        done = [e for e in seen if e["type"] == "agent.session.turn.item.done"]
        calls = [e for e in done if e["item"]["type"] in ("create_subagent_call", "wait_for_subagents_call")]
        assert [e["item"]["type"] for e in calls] == ["create_subagent_call"] * 2 + ["wait_for_subagents_call"]
        assert {e["item"]["status"] for e in calls} == {"completed"}
        assert all(added[e["item"]["id"]] == e["output_index"] for e in calls), "done where it was added"
        assert len({e["event_id"] for e in seen}) == len(seen)
        assert seen[-1]["type"] == "agent.session.idle" and seen[-2]["turn"]["status"] == "completed"
        await events.aclose()
        assert (runtime.sessions._changed, runtime.sessions._waiting) == ({}, {}), "an idle session keeps no event"
    finally:
        gate.touch()
        await runtime.close()


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



async def test_creates_run_again_make_only_the_subagents_not_made_yet(tmp_path) -> None:
    """A resumed turn runs its create calls again: the subagents made before are answered as
    running, not made or started twice; one not made yet is made beside them."""
    runtime = Runtime.local(RuntimeSettings(storage_path=str(tmp_path / "t.duckdb")))
    try:
        body = {"environment": {"type": "none"}, "agent": {"model": "sim", "multi_agent": {"enabled": True}},
                "input": "[[say hi]]"}  # fmt: skip
        made = await runtime.sessions.create_session("", parse_session_create(body))
        parent = await runtime.store.get_session("", made["id"])

        def create(call_id: str, task: str = "[[say done]]") -> dict:
            return {"type": "function_call", "name": "create_subagent", "call_id": call_id,
                    "arguments": json.dumps({"task": task})}  # fmt: skip

        calls = runtime.sessions.subagents
        first = await calls.create_all("", parent, [create("call_a"), create("call_b")])
        again = await calls.create_all("", parent, [create("call_a"), create("call_c"), create("call_b", task=" ")])
        assert [json.loads(o)["status"] for o in first + again[:2]] == ["running"] * 4
        assert again[2] == "Error: 'task' must be a non-empty string: what the subagent is to do"
        children = (await runtime.sessions.list_subagents("", parent["id"], order="asc")).data
        assert len(children) == 3 and [json.loads(o)["subagent_id"] for o in first + again[1:2]] == [
            c["id"] for c in children]  # fmt: skip
        turns = [(await runtime.store.list_turns("", c["id"])).data for c in children]
        assert [len(t) for t in turns] == [1, 1, 1], "each subagent's first turn started once"
    finally:
        await runtime.close()
